"""DiLoCo fidelity benchmark (issue 26, item 5): the published time models of the
DiLoCo papers rebuilt as planner instances and plans, scored by the SPEC v3
evaluator (section 11, ``dp_sync``), against the published figures of
benchmarks/fidelity/diloco_published.toml:

- Streaming DiLoCo (arXiv 2501.18512) Table 4 and Scaling Laws for DiLoCo
  (arXiv 2503.09799) Table 6: the bandwidth (Gbit/s) at which compute
  utilisation (pure compute / T_eff) reaches 50/80/90/95/99%, found by bisection
  on the link bandwidth;
- Streaming DiLoCo Table 1: the wall-clock hours at 1 Gbit/s (the published
  hours at infinite bandwidth x T_eff(1 Gbit/s) / pure compute).

Nothing is fitted.  The setup (benchmarks/fidelity/diloco.py): M = 2
datacenters of one replica each, the paper's parameter count and step time,
latency 0.  A what-if adds the one mechanism of the papers' simulator that SPEC
lacks: the (outer) gradient reduction overlapping the backward pass.

    PYTHONPATH=. .venv/bin/python benchmarks/diloco_fidelity.py [--no-write]

Prints the tables; writes benchmarks/results/diloco_fidelity.md and
diloco_fidelity.png and the summary table into docs/fidelity.md (between its
markers).  Takes a few seconds.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's planner and benchmarks package, whatever is installed

from _results import RESULTS, commit, save  # noqa: E402  (benchmarks/ is on sys.path as a script)
from benchmarks.fidelity import diloco as dl  # noqa: E402

LO, HI = 0.8, 1.25   # the band: modelled / published
DOC = ROOT / "docs" / "fidelity.md"
START, END = "<!-- diloco-fidelity-table:start -->", "<!-- diloco-fidelity-table:end -->"
SHORT = {"Data-Parallel": "DP", "Vanilla DiLoCo": "DiLoCo H=100", "Streaming DiLoCo": "Streaming",
         "Streaming DiLoCo w/ overlapped com.": "Streaming, overlapped",
         "Streaming DiLoCo w/ overlapped FP4 com.": "Streaming, overlapped FP4"}


@dataclass(frozen=True)
class Cell:
    """One published figure and its modelled value (Gbit/s, or hours for ``hours`` rows)."""

    source: str
    table: str
    model: str
    method: str
    target: float | None       # CU target (None: an hours row)
    published: float
    above: bool                # published as "1000.0+" (a lower bound)
    modelled: float
    whatif: float              # with the backward overlap (what-if)

    @property
    def ratio(self) -> float:
        return self.modelled / self.published

    @property
    def whatif_ratio(self) -> float:
        return self.whatif / self.published

    @property
    def inside(self) -> bool:
        if self.above:  # only a lower bound is published
            return self.modelled >= LO * self.published
        return LO <= self.ratio <= HI


def cu_cells() -> list[Cell]:
    d = dl.load()
    out = []
    for row in d["cu"]:
        s = dl.setup_of(row)
        above = row.get("above", [False] * len(d["cu_targets"]))
        for target, pub, ab in zip(d["cu_targets"], row["gbps"], above):
            out.append(Cell(row["source"], row["table"], row["model"], row["method"], target, pub, ab,
                            dl.gbps_for_cu(s, target), dl.closed_form_gbps(s, target, backward_overlap=True)))
    return out


def hours_cells() -> list[Cell]:
    out = []
    for row in dl.load()["hours"]:
        s = dl.setup_of(row)
        scale = row["hours_inf"] / dl.compute_s(s)
        modelled = scale * dl.effective_s(s, 1.0)
        whatif = scale * dl.closed_form_t_eff(s, 1.0, backward_overlap=True)
        out.append(Cell(row["source"], row["table"], row["tokens"], row["method"], None, row["hours_1g"],
                        False, modelled, whatif))
    return out


def fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}" if x < 100 else f"{x:.0f}"


def flag(c: Cell, r: float) -> str:
    if c.above:
        return f"{'>=' if c.modelled >= c.published else '<'} (published 1000+)"
    return f"{r:.2f}" + ("" if LO <= r <= HI else " **")


def cu_table(cells: list[Cell], source: str, cell=None) -> list[str]:
    """One line per (model, method), a column per CU target; each entry ``cell(c)``
    (default: published / modelled (ratio))."""
    cell = cell or (lambda c: f"{fmt(c.published)}{'+' if c.above else ''} / {fmt(c.modelled)} "
                              f"({flag(c, c.ratio)})")
    targets = sorted({c.target for c in cells if c.target is not None})
    lines = ["| model | method | " + " | ".join(f"CU {t:.0%}" for t in targets) + " |",
             "|---|---|" + "---|" * len(targets)]
    rows: dict[tuple, list[Cell]] = {}
    for c in cells:
        if c.source == source and c.target is not None:
            rows.setdefault((c.model, c.method), []).append(c)
    for (model, method), cs in rows.items():
        lines.append(f"| {model} | {SHORT.get(method, method)} | " + " | ".join(map(cell, cs)) + " |")
    return lines


def whatif_table(cells: list[Cell], source: str) -> list[str]:
    """:func:`cu_table` of the what-if (layer-wise backward overlap): modelled (ratio)."""
    return cu_table(cells, source, lambda c: f"{fmt(c.whatif)} ({flag(c, c.whatif_ratio)})")


def hours_table(cells: list[Cell]) -> list[str]:
    lines = ["| method | tokens | published h at 1 Gbit/s | modelled h | ratio | with backward overlap |",
             "|---|---|---:|---:|---:|---:|"]
    for c in cells:
        lines.append(f"| {c.method} | {c.model} | {fmt(c.published)} | {c.modelled:.3g} | {flag(c, c.ratio)} | "
                     f"{c.whatif:.3g} ({c.whatif_ratio:.2f}) |")
    return lines


def summary(cells: list[Cell]) -> list[str]:
    """Per table and method: figures inside [0.8, 1.25], the ratio range, and the what-if's."""
    lines = ["| table | method | figures | within [0.8, 1.25] | ratio range | with backward overlap: within | range |",
             "|---|---|---:|---:|---|---:|---|"]
    groups: dict[tuple, list[Cell]] = {}
    for c in cells:
        groups.setdefault((f"{'Streaming DiLoCo' if c.source == 'streaming' else 'Scaling Laws'} {c.table}",
                           SHORT.get(c.method, c.method)), []).append(c)
    for (table, method), cs in groups.items():
        rs = [c.ratio for c in cs if not c.above]
        ws = [c.whatif_ratio for c in cs if not c.above]
        win = sum(c.inside for c in cs)
        wwin = sum(LO <= c.whatif_ratio <= HI or (c.above and c.whatif >= LO * c.published) for c in cs)
        lines.append(f"| {table} | {method} | {len(cs)} | {win} | {min(rs):.2f}-{max(rs):.2f} | {wwin} | "
                     f"{min(ws):.2f}-{max(ws):.2f} |")
    total, inside = len(cells), sum(c.inside for c in cells)
    winside = sum(LO <= c.whatif_ratio <= HI or (c.above and c.whatif >= LO * c.published) for c in cells)
    return [f"**{inside} of {total} published figures within [0.8, 1.25] of the evaluator's**; "
            f"with the backward-overlap what-if, {winside} of {total}.", ""] + lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print only; write no file")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    cu, hours = cu_cells(), hours_cells()
    cells = cu + hours
    elapsed = time.perf_counter() - t0
    setup = [
        "Setup (benchmarks/fidelity/diloco.py): M = 2 datacenters, one data-parallel replica each, "
        "joined by one link at the bandwidth under test, latency 0; the model is one unit of the printed "
        "parameter count (1B = 1e9 ...) with 6N FLOPs per token, the GPU peak chosen so a step computes in "
        "the printed step time at MFU 0.6; payload 16 bits per parameter (4 for the FP4 rows); streaming: "
        "F = layers / 3 fragments, nu = 0 (Streaming DiLoCo) or 1 (overlapped); quality rows e = 1 (time "
        "only). Modelled = the evaluator's `effective_times` (SPEC 11 T_eff), CU = pure compute / T_eff, "
        "the bandwidth by bisection on the link. Each cell: published / modelled (modelled / published); "
        "** outside [0.8, 1.25]. The published bandwidths are points of a geometric sweep (x1.207 "
        "apart), the first swept value reaching the CU: the papers' own threshold lies up to 1.207x "
        "below the printed figure.", ""]
    lines = [f"Commit: `{commit()}`; {elapsed:.1f} s; SPEC v3 evaluator (`Evaluator(..., spec=3)`).", ""] + setup + [
        "## Summary", ""] + summary(cells) + [
        "", "## Streaming DiLoCo (arXiv 2501.18512) Table 4: Gbit/s to reach a compute utilisation", ""]
    lines += cu_table(cu, "streaming")
    lines += ["", "## Scaling Laws for DiLoCo (arXiv 2503.09799) Table 6: Gbit/s to reach a compute utilisation",
              ""] + cu_table(cu, "scaling")
    lines += ["", "## Streaming DiLoCo Table 1: wall-clock hours at 1 Gbit/s (1B, M = 2)", "",
              "Modelled = published hours at +inf Gbit/s x T_eff(1 Gbit/s) / pure compute (step 0.1 s, "
              "Table 4's 1B figure).", ""] + hours_table(hours)
    lines += ["", "## What-if: the (outer) gradient reduction overlaps the backward pass", "",
              "SPEC 11 on this setup in closed form (benchmarks/fidelity/diloco.py `closed_form_t_eff`, equal "
              "to the evaluator without the what-if: tests/test_diloco_fidelity.py), with each layer's sync "
              "starting when its backward is done, as the papers' simulated schedule does (Streaming DiLoCo "
              "Figures 3 and 14): exposed sync max(c - b (1 - 1/L), c / L) with b = 2/3 of the step and L "
              "layers (every step, DiLoCo), the streaming window grown by b (1 - 1/L). Modelled Gbit/s (ratio):", "",
              "Streaming DiLoCo Table 4:", ""] + whatif_table(cu, "streaming") + [
              "", "Scaling Laws Table 6:", ""] + whatif_table(cu, "scaling")
    lines += ["", *verdict(cells)]
    print("\n".join(lines))
    if not args.no_write:
        save("diloco_fidelity", lines)
        plot(cells, RESULTS / "diloco_fidelity.png")
        table = "\n".join([f"From `benchmarks/results/diloco_fidelity.md` (commit `{commit()}`):", ""]
                          + summary(cells))
        if DOC.exists():
            text = DOC.read_text()
            if START in text and END in text:
                a, b = text.index(START) + len(START), text.index(END)
                DOC.write_text(text[:a] + "\n" + table + "\n" + text[b:])
    return 0


def cross_paper() -> list[str]:
    """The same nominal setup (10B, 0.8 s) in both tables: Streaming DiLoCo Table 4 over Scaling
    Laws Table 6, per CU target."""
    rows = {(r["source"], r["method"]): r["gbps"] for r in dl.load()["cu"] if r["params"] == 10e9}
    pairs = [("Data-Parallel", "Data-Parallel"), ("Vanilla DiLoCo", "DiLoCo, H = 100")]
    out = []
    for a, b in pairs:
        ratios = [x / y for x, y in zip(rows[("streaming", a)], rows[("scaling", b)])]
        out.append(f"{SHORT.get(a, a)} " + " / ".join(f"{r:.2f}" for r in ratios))
        
    return out


def cause(c: Cell) -> str:
    """The assumption behind a gap outside the band."""
    if LO <= c.whatif_ratio <= HI:
        return "overlap"
    if c.source == "scaling":
        return "scaling"
    return "other"


CAUSES = {
    "overlap": "**The sync overlaps the backward pass in the papers, not in SPEC.** The papers' simulator "
               "reduces each layer's (outer) gradients as soon as its backward is done (Streaming DiLoCo "
               "Figures 3 and 14: forward, backward and reduction interleaved); SPEC 11 starts a stage's "
               "sync, inner or outer, after its last backward (E_j). On a one-stage plan SPEC therefore "
               "needs more bandwidth for the same CU, the more so the higher the CU (at 99% the whole "
               "sync must hide behind the backward). With the layer-wise overlap added (what-if), these "
               "figures fall inside [0.8, 1.25]:",
    "scaling": "**Scaling Laws Table 6 against Streaming DiLoCo Table 4.** For the same nominal setup "
               "(10B, 0.8 s step, H = 100, the same simulator cited) Table 6 prints less bandwidth than "
               "Table 4 (Table 4 / Table 6 per CU 50/80/90/95/99%: {cross}); the model matches Table 4, so "
               "these rows of Table 6 sit 1.2-1.5x below it, with or without the overlap. The "
               "difference between the two papers' simulations is not stated (payload bits, step time "
               "or worker count); no assumption of the rebuild explains it:",
    "other": "**Not explained by either assumption:**",
}


def verdict(cells: list[Cell]) -> list[str]:
    """Which assumption causes each gap outside [0.8, 1.25], from the figures."""
    out = [c for c in cells if not c.inside]
    lines = ["## Gaps outside [0.8, 1.25] and their cause", "",
             f"{len(out)} of {len(cells)} figures outside the band.", ""]
    for key, text in CAUSES.items():
        cs = [c for c in out if cause(c) == key]
        if not cs:
            continue
        lines += [f"- {text.format(cross='; '.join(cross_paper()))} " + ", ".join(
            f"{c.table} {c.model} {SHORT.get(c.method, c.method)}"
            + (f" CU {c.target:.0%}" if c.target is not None else "")
            + f" ({c.ratio:.2f} -> {c.whatif_ratio:.2f})" for c in cs) + "."]
    if any(cause(c) == "other" and c.model == "100B" and c.method == "Streaming DiLoCo" for c in out):
        lines += ["", "  (100B Streaming DiLoCo at 99%: the published figures jump from 11.0 at 95% to 19.3 at "
                  "99%, more than any smooth T_eff gives; F = 36 fragments do not divide H = 100, and the "
                  "paper's discrete schedule of them is not published.)"]
    return lines + [""]


def plot(cells: list[Cell], path: Path) -> None:
    """Modelled vs published, log axes, the identity and the [0.8, 1.25] band; hollow markers:
    the backward-overlap what-if."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    style = {"every_step": ("o", "tab:blue"), "diloco": ("s", "tab:orange"), "streaming": ("^", "tab:green")}
    mode_of = {}
    for row in dl.load()["cu"] + dl.load()["hours"]:
        mode_of[(row["method"], row.get("model", row.get("tokens")))] = row["mode"]
    fig, ax = plt.subplots(figsize=(6.5, 6.0))
    vals = [v for c in cells for v in (c.published, c.modelled, c.whatif) if math.isfinite(v)]
    lo, hi = min(vals) / 1.5, max(vals) * 1.5
    x = np.geomspace(lo, hi, 200)
    ax.fill_between(x, x * LO, x * HI, color="0.85", label="[0.8, 1.25]")
    ax.plot(x, x, color="0.3", lw=0.8)
    for mode, (m, col) in style.items():
        cs = [c for c in cells if mode_of.get((c.method, c.model)) == mode]
        ax.scatter([c.published for c in cs], [c.modelled for c in cs], marker=m, color=col, s=24, zorder=3,
                   label=f"{mode}: SPEC 11")
        ax.scatter([c.published for c in cs], [c.whatif for c in cs], marker=m, facecolors="none",
                   edgecolors=col, s=24, zorder=3, label=f"{mode}: + backward overlap")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published (Gbit/s for a CU, or hours at 1 Gbit/s)")
    ax.set_ylabel("modelled")
    inside = sum(c.inside for c in cells)
    ax.set_title(f"DiLoCo time models: {inside} of {len(cells)} within [0.8, 1.25] ({commit()})", fontsize=10)
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
