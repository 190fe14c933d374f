"""Tables of a calibration (``planner calibrate``): every measurement before and
after the fit with its residual, the fitted figures, and the figures left as
they were with the reason.

>>> for table in calibration_tables(cal):             # doctest: +SKIP
...     console.print(table)
"""

from __future__ import annotations

from collections import defaultdict

from rich.markup import escape
from rich.table import Table

SHOWN = 6  # fields named per reason; the rest counted


def _num(v) -> str:
    return "absent" if v is None else f"{v:.6g}"


def calibration_tables(cal, max_rows: int = 50) -> list[Table]:
    """Three rich tables for a :class:`planner.scoring.calibrate.Calibration`:
    measured vs modelled (seconds, residual = modelled / measured - 1, before and
    after; the first ``max_rows`` rows), fitted figures, unchanged figures (grouped
    by reason)."""
    rows = Table(title=f"measured vs modelled (SPEC v3): rms residual {cal.rms_before:.2%} before, "
                       f"{cal.rms_after:.2%} after", title_justify="left")
    for col in ("kind", "measurement", "measured s", "before s", "resid", "after s", "resid"):
        rows.add_column(col, justify="left" if col in ("kind", "measurement") else "right")
    for r in cal.rows[:max_rows]:
        rows.add_row(r.kind, escape(r.label), f"{r.measured_s:.6g}", f"{r.before_s:.6g}",
                     f"{r.residual_before:+.2%}", f"{r.after_s:.6g}", f"{r.residual_after:+.2%}")
    if len(cal.rows) > max_rows:
        rows.add_row("...", f"{len(cal.rows) - max_rows} more (--json lists every one)", "", "", "", "", "")
    fitted = Table(title=f"fitted ({len(cal.fitted)})", title_justify="left")
    for col in ("figure", "before", "after", "unit", "from", "note"):
        fitted.add_column(col, justify="right" if col in ("before", "after") else "left")
    for f in cal.fitted:
        fitted.add_row(escape(f.label), _num(f.before), _num(f.after), f.unit, f.source, escape(f.note))
    if not cal.fitted:
        fitted.add_row("(none)", "", "", "", "", "")
    kept = Table(title=f"left as they were ({len(cal.unchanged)})", title_justify="left")
    kept.add_column("figures")
    kept.add_column("why")
    by_reason = defaultdict(list)
    for u in cal.unchanged:
        by_reason[u.reason].append(f"{u.label} = {_num(u.value)}")
    for reason, names in by_reason.items():
        shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
        kept.add_row(escape(shown), escape(reason))
    return [rows, fitted, kept]
