"""Regenerate the README's headline table from committed results.

    .venv/bin/python benchmarks/readme_table.py [--check] [--dominance NAME,NAME ...]

By default the table comes from ``benchmarks/dominance.py --det-compare`` runs (SPEC v3: every
part alone and auto with the same deterministic budget, load-independent), the files named in
:data:`DOMINANCE` (``NAME.md`` with its command and commit, ``NAME.json`` with every figure);
``--dominance ''`` falls back to benchmarks/results/portfolio.csv (a SPEC v2 wall-clock run).

The table sits in README.md between the markers ``<!-- headline:start -->``
and ``<!-- headline:end -->``; nothing else of the README is touched.  With
``--check`` it only says (exit 1) whether the README is out of date.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import update_readme  # noqa: E402

from planner.presentation.report import speed_change  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- headline:start -->", "<!-- headline:end -->"
SOLVERS = ("greedy", "milp", "cpsat", "auto")
DET_SOLVERS = ("greedy", "milp", "cpsat", "anneal", "auto")
DOMINANCE = ("dominance-det30a", "dominance-det30b")  # the det-compare runs the README quotes
PICTURE = "dominance-det30.png"  # their picture, under benchmarks/results/


def _change(before: float, after: float, cost: bool) -> str:
    """'29.3% faster' (or 'cheaper' on a cost instance), never a signed '+29.3%'."""
    words = speed_change(before, after)
    return words.replace("faster", "cheaper").replace("slower", "dearer").replace("as fast", "as cheap") if cost \
        else words


def _is_cost(name: str) -> bool:
    """The packaged instance ``name`` minimises cost per iteration."""
    import planner

    return planner.load_instance(name).options.objective == "cost"


def table(csv_path: Path, md_path: Path) -> str:
    rows = list(csv.DictReader(csv_path.open()))
    by = {(r["instance"], r["solver"]): r for r in rows}
    names = sorted({r["instance"] for r in rows})
    first = md_path.read_text().splitlines()[0].strip()  # "Command: `...`"
    out = [f"Simulated iteration time (s; cost per iteration on cost instances), each solver with the "
           f"same time limit, from [{md_path.relative_to(ROOT)}]({md_path.relative_to(ROOT)}) "
           f"({first[0].lower() + first[1:]}), scored under SPEC v2, the model of that run's commit (v3 is the "
           f"default since; this run has not been repeated under it). Gap: auto's proven gap on `T_est` at the time of the run (recorded before the bound rule of SPEC section 7 (v3); today this is `estimate_gap`, and `gap` is against a bound valid for every plan); where auto returns an explicit schedule (tuned in-flight limits), against the instance's lower bound, since the engines bound only plans with 1f1b or gpipe.", "",
           "| instance | " + " | ".join(SOLVERS) + " | auto vs greedy | auto gap |",
           "|---|" + "---|" * (len(SOLVERS) + 2)]
    for n in names:
        cells = []
        for s in SOLVERS:
            r = by.get((n, s))
            cells.append(f"{float(r['score']):.4g}" if r else "-")
        a, g = by.get((n, "auto")), by.get((n, "greedy"))
        gain = _change(float(g['score']), float(a['score']), _is_cost(n)) if a and g else "-"
        gap = f"{float(a['gap']):.1%}" if a else "-"
        out.append(f"| {n} | " + " | ".join(cells) + f" | {gain} | {gap} |")
    return "\n".join(out)


def det_table(names: list[str], res: Path) -> str:
    """The table of the ``--det-compare`` runs ``names`` (results files NAME.md and NAME.json)."""
    import json

    rows, cites = {}, []
    for name in names:
        first = (res / f"{name}.md").read_text().splitlines()[0].strip()
        code = next((ln.split(";")[0].split(":", 1)[1].strip() for ln in (res / f"{name}.md").read_text().splitlines()
                     if ln.startswith("Code:")), "?")
        cites.append(f"[{name}.md](benchmarks/results/{name}.md) ({first[0].lower() + first[1:]}; code `{code}`)")
        rows.update(json.loads((res / f"{name}.json").read_text()))
    budgets = sorted({float(k.rsplit("@", 1)[1]) for k in rows})
    out = [f"Each solver alone and `auto` with the same deterministic budget of {', '.join(f'{b:g}' for b in budgets)} s "
           "(CP-SAT and HiGHS work and the annealing's simulations counted, so the figures do not depend on the "
           "machine's load), scored by the evaluator under SPEC v3: simulated iteration time (s; T_eff / e with "
           f"`[options] dp_sync`; cost per iteration on cost instances), from {' and '.join(cites)}.  "
           "`auto` runs every part's own budget in deterministic mode, so it is never worse by construction; "
           "the seeded default shares one budget (docs/guide.md).", "",
           "| instance | B s | " + " | ".join(DET_SOLVERS) + " | auto vs greedy |",
           "|---|---|" + "---|" * (len(DET_SOLVERS) + 1)]
    for tag in sorted(rows, key=lambda k: (k.rsplit("@", 1)[0], float(k.rsplit("@", 1)[1]))):
        inst, b = tag.rsplit("@", 1)
        rec = rows[tag]
        vals = {s: (rec["parts"].get(s) or [None])[0] for s in DET_SOLVERS if s != "auto"}
        autos = [a[0] for a in rec["auto"] if a[0] is not None]
        vals["auto"] = max(autos) if autos else None
        cells = ["-" if vals[s] is None else f"{vals[s]:.4g}" for s in DET_SOLVERS]
        cost = not inst.startswith("gen-") and _is_cost(inst)
        gain = _change(vals["greedy"], vals["auto"], cost) if vals["greedy"] and vals["auto"] else "-"
        out.append(f"| {inst} | {b} | " + " | ".join(cells) + f" | {gain} |")
    return "\n".join(out)


def det_picture(names: list[str], res: Path, out: Path) -> None:
    """Grouped bars of the ``--det-compare`` runs ``names``: each solver's objective over greedy's."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = {}
    for name in names:
        rows.update(json.loads((res / f"{name}.json").read_text()))
    tags = sorted(rows)
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(tags)), 4.5))
    width = 0.8 / len(DET_SOLVERS)
    for i, s in enumerate(DET_SOLVERS):
        vals = []
        for t in tags:
            g = rows[t]["parts"]["greedy"][0]
            v = max(a[0] for a in rows[t]["auto"]) if s == "auto" else rows[t]["parts"][s][0]
            vals.append(v / g if v is not None and g else np.nan)
        ax.bar(np.arange(len(tags)) + (i - (len(DET_SOLVERS) - 1) / 2) * width, vals, width, label=s)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(tags)), [t.replace("@", " @") + " s" for t in tags], rotation=30, ha="right")
    ax.set_ylabel("simulated objective / greedy's (lower is better)")
    ax.set_ylim(0, 1.1)
    ax.legend(ncols=len(DET_SOLVERS), loc="upper center", bbox_to_anchor=(0.5, 1.12), frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--name", default="portfolio", help="the portfolio run, with --dominance ''")
    ap.add_argument("--dominance", default=",".join(DOMINANCE), help="comma-separated det-compare runs")
    args = ap.parse_args(argv)
    res = ROOT / "benchmarks" / "results"
    names = [n for n in args.dominance.split(",") if n]
    block = det_table(names, res) if names else table(res / f"{args.name}.csv", res / f"{args.name}.md")
    if names and not args.check:  # the picture beside the table (README: PICTURE)
        det_picture(names, res, res / PICTURE)
    return update_readme(START, END, block, args.check, "headline table is", "readme_table.py")

if __name__ == "__main__":
    sys.exit(main())
