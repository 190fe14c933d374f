"""Where benchmark tables go: benchmarks/results/NAME.md, headed by the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def commit() -> str:
    """The code the results come from: ``git describe --always --dirty`` (a ``-dirty``
    suffix when the tree has uncommitted changes), or ``unknown`` outside a checkout."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def save(name: str, lines: list[str], argv=None) -> Path:
    script = Path(sys.argv[0]).name if argv is None else f"{name}.py"
    args = " ".join(sys.argv[1:] if argv is None else argv)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.md"
    out.write_text(f"Command: `python benchmarks/{script} {args}`".rstrip() + "\n\n" + "\n".join(lines) + "\n")
    return out


def save_csv(name: str, rows: list[dict]) -> Path:
    """``rows`` (dicts with the same keys) as benchmarks/results/NAME.csv."""
    import csv

    out = RESULTS / f"{name}.csv"
    with open(out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return out


def suite_instances() -> list[str]:
    """The packaged instances of the standard suite (``planner.bench.suite_instances``: up to
    40 domains); ``benchmarks/scale.py`` measures the national-scale ones on their own."""
    from planner.bench import suite_instances as suite

    return suite()


def update_readme(start: str, end: str, block: str, check: bool, what: str, script: str,
                  doc: str = "README.md") -> int:
    """Put ``block`` between the markers ``start`` and ``end`` of README.md (or ``doc``, a path
    from the top of the tree); with ``check``, only say (exit status 1) whether it is out of
    date.  ``what``/``script`` name the block and the script that makes it in that message."""
    readme = RESULTS.parents[1] / doc
    text = readme.read_text()
    a, b = text.index(start) + len(start), text.index(end)
    updated = text[:a] + "\n" + block + "\n" + text[b:]
    if check:
        if updated != text:
            print(f"{doc}'s {what} out of date: run benchmarks/{script}")
            return 1
        return 0
    readme.write_text(updated)
    return 0
