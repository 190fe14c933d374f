"""Longer runs pay (issue 29): ``auto``'s plan and bound against its budget, per packaged instance.

    python benchmarks/convergence.py [--budgets 15,60,600] [--seed 0] [--deterministic] [--jobs 1] [INSTANCE ...]

For each instance (default: the packaged ones up to 16 domains): greedy once, then
``plan(solver="auto", time_limit=B, seed)`` for every budget B.  Every plan is scored by
the evaluator (the instance's objective: simulated T, T_eff / e, or the cost per iteration)
and carries its valid bound (SPEC section 7).  Reported per (instance, B): the objective,
the bound, the gap, the wall time; the goals:

* auto at the largest budget is never worse than at 60 s (same seed; 1e-9 relative);
* and better on at least half of the instances.

``--deterministic`` runs auto with deterministic budgets (no part cut by the clock: the
figures do not depend on the machine's load, so ``--jobs`` runs may share the cores);
without it each run is alone (``--jobs 1``) and wall clock decides.

Writes benchmarks/results/NAME.md (command, commit, load), NAME.csv and NAME.png (one panel
per instance: objective and bound against the budget, relative to greedy's objective).
``benchmarks/readme_table.py`` builds the README's headline table from NAME.csv.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's planner, whatever is installed
sys.path.insert(1, str(Path(__file__).resolve().parent))

from _results import RESULTS, commit, save, save_csv  # noqa: E402

MAX_DOMAINS = 16  # the packaged instances the goal is about
TIE = 1e-9  # relative: "never worse"


def default_instances() -> list[str]:
    """The packaged single-job instances with at most :data:`MAX_DOMAINS` domains."""
    from planner import load_instance
    from planner.bench import suite_instances

    return [n for n in suite_instances() if len(load_instance(n).domains) <= MAX_DOMAINS]


def run(name: str, budget: float | None, seed: int, deterministic: bool, solver: str = "auto") -> dict:
    """One plan of ``name``: greedy when ``budget`` is None, else ``solver`` (auto, or a part alone:
    milp with 1 thread, cpsat with 1 worker) with that budget; its row."""
    from planner import load_instance, plan
    from planner.solvers.anneal import simulated_score

    inst = load_instance(name)
    t0 = time.perf_counter()
    if budget is None:
        p = plan(inst, solver="greedy", seed=seed)
    else:
        one = {"milp": {"threads": 1}, "cpsat": {"workers": 1}}.get(solver, {})
        p = plan(inst, solver=solver, time_limit=budget, seed=seed, deterministic=deterministic, **one)
    wall = time.perf_counter() - t0
    score = simulated_score(inst, p)
    info = p.solver
    bound = info.bound if info is not None else None
    gap = None if bound is None or not score else max(0.0, (score - bound) / score)
    return {"instance": name, "solver": "greedy" if budget is None else solver, "budget_s": budget or 0.0,
            "objective": inst.options.objective, "score": score, "bound": bound, "gap": gap, "wall_s": wall,
            "status": info.status if info is not None else "", "incumbent": (info.model_extra or {}).get(
                "incumbent", "") if info is not None else "",
            "cut_by_clock": ";".join((info.model_extra or {}).get("cut_by_clock") or []) if info is not None else ""}


def goals(rows: list[dict], budgets: list[float]) -> list[str]:
    """The issue's goals on the rows."""
    top = max(budgets)
    by = {(r["instance"], r["budget_s"]): r for r in rows if r["solver"] == "auto"}
    names = sorted({r["instance"] for r in rows})
    if 60.0 not in budgets or top <= 60.0:
        return ["- (the goals compare 60 s with a larger budget: not both run)"]
    worse, better = [], []
    for n in names:
        a, b = by.get((n, 60.0)), by.get((n, top))
        if a is None or b is None:
            continue
        if b["score"] > a["score"] * (1 + TIE):
            worse.append(f"{n} ({a['score']:.6g} at 60 s, {b['score']:.6g} at {top:g} s)")
        elif b["score"] < a["score"] * (1 - TIE):
            better.append(n)
    pairs = sum(1 for n in names if (n, 60.0) in by and (n, top) in by)
    return [f"- auto at {top:g} s never worse than at 60 s: " + ("met" if not worse else "not met: " + "; ".join(worse)),
            f"- better at {top:g} s on at least half of the instances: "
            f"{'met' if 2 * len(better) >= pairs else 'not met'} ({len(better)} of {pairs}: {', '.join(better) or 'none'})"]


def picture(rows: list[dict], path: Path) -> None:
    """One panel per instance: auto's objective and bound against the budget, over greedy's objective."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({r["instance"] for r in rows})
    cols = min(4, len(names))
    nrows = -(-len(names) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False)
    for ax, n in zip(axes.flat, names):
        g = next(r for r in rows if r["instance"] == n and r["solver"] == "greedy")
        pts = sorted((r for r in rows if r["instance"] == n and r["solver"] == "auto"), key=lambda r: r["budget_s"])
        xs = [r["budget_s"] for r in pts]
        ax.plot(xs, [r["score"] / g["score"] for r in pts], "o-", label="auto's plan")
        ax.plot(xs, [(r["bound"] or 0) / g["score"] for r in pts], "s--", label="bound")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_title(n, fontsize=9)
        ax.set_ylim(0, 1.05)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.supxlabel("budget (s, log scale)", fontsize=9)
    fig.supylabel("objective / greedy's (lower is better)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*")
    ap.add_argument("--budgets", default="15,60,600", help="comma-separated seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (with --deterministic only)")
    ap.add_argument("--parts", default="", help="comma-separated solvers also run alone at 60 s "
                    "(milp, cpsat: the README's headline table shows them)")
    ap.add_argument("--name", default="convergence")
    args = ap.parse_args(argv)
    budgets = sorted(float(b) for b in args.budgets.split(","))
    names = args.instances or default_instances()
    jobs = args.jobs if args.deterministic else 1
    parts = [s for s in args.parts.split(",") if s]
    work = [(n, None, "greedy") for n in names] + [(n, 60.0, s) for n in names for s in parts] + \
           [(n, b, "auto") for n in names for b in budgets]
    rows: list[dict] = []
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        futs = [pool.submit(run, n, b, args.seed, args.deterministic, s) for n, b, s in work]
        for i, f in enumerate(futs, 1):
            r = f.result()
            rows.append(r)
            print(f"[{i}/{len(futs)}] {r['instance']} {r['solver']} {r['budget_s']:g} s: {r['score']:.6g} "
                  f"(bound {r['bound']}, {r['wall_s']:.1f} s wall{', cut: ' + r['cut_by_clock'] if r['cut_by_clock'] else ''})",
                  file=sys.stderr, flush=True)
    load = os.getloadavg()
    cols = ["instance", "objective", "greedy"] + [f"{s} 60 s" for s in parts] + [f"auto {b:g} s" for b in budgets] + \
           [f"bound {b:g} s" for b in budgets] + [f"gap {b:g} s" for b in budgets]
    lines = [f"Seed {args.seed}, budgets {', '.join(f'{b:g}' for b in budgets)} s, "
             f"{'deterministic budgets (no part cut by the clock)' if args.deterministic else 'wall-clock budgets, one run at a time'}, "
             f"commit {commit()}.  Objective: simulated iteration time (s), or cost per iteration (USD) on a cost "
             "instance; bound: the plan's, valid for every plan (SPEC 7); gap = (objective - bound) / objective.",
             "", "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    by = {(r["instance"], r["solver"], r["budget_s"]): r for r in rows}
    for n in names:
        g = by[(n, "greedy", 0.0)]
        autos = [by[(n, "auto", b)] for b in budgets]
        lines.append("| " + " | ".join([n, g["objective"], f"{g['score']:.5g}"]
                                       + [f"{by[(n, s, 60.0)]['score']:.5g}" for s in parts]
                                       + [f"{a['score']:.5g}" for a in autos]
                                       + ["-" if a["bound"] is None else f"{a['bound']:.5g}" for a in autos]
                                       + ["-" if a["gap"] is None else f"{a['gap']:.1%}" for a in autos]) + " |")
    cuts = [f"{r['instance']} at {r['budget_s']:g} s ({r['cut_by_clock'].replace(';', ', ')})"
            for r in rows if r.get("cut_by_clock")]
    lines += ["", "Parts the wall clock cut (`solver.cut_by_clock`; the seeded default's backstop, a loaded "
              "machine): " + ("; ".join(cuts) if cuts else "none") + "."]
    lines += ["", f"Load average at the end (1, 5, 15 min): {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} on "
              f"{os.cpu_count()} cores.", "", "Goals (issue 29, longer runs pay):", ""] + goals(rows, budgets)
    print("\n".join(lines))
    save(args.name, lines, argv)
    save_csv(args.name, rows)
    picture(rows, RESULTS / f"{args.name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
