"""Issue 29: the instance's lower bound before and after the per-shape part
(planner/scoring/shapebound.py), against the best known plan of each packaged
instance up to 16 domains.

Columns, per instance (objective: seconds per iteration of effective tokens, T_eff / e,
or the cost per iteration over e for a cost instance):

* **old**: the instance-wide parts alone (compute, stage_work, round_trip, wan_volume;
  the cost bound), over the best quality factor: ``objective_lower_bound`` before this
  change;
* **new**: ``objective_lower_bound`` now (the larger of the old parts and the per-shape
  part, per dp_sync class);
* **plain sync**: the same with the crossing stage's sync charged at 16 bits, a bound for
  the plans the planners return on instances without ``[options] dp_sync`` only (the
  tool also accepts a plan file with a 4-bit every-step sync there: default row 1 covers
  it, so ``new`` charges 4 bits);
* **best**: the best known objective: the smaller of the figure from
  benchmarks/results/portfolio.md (auto at 60 s) or gpu_types_goals.md (mixed, 60 s) and
  a fresh ``auto`` run of ``--time-limit`` seconds (``--no-run``: the files only);
* gaps (best - bound) / best, and the seconds the new bound takes (cold cache).

The national-scale instances (over 40 domains) keep the instance-wide parts; their
bound's time is listed below the table.

    python benchmarks/bounds.py --time-limit 20      # writes benchmarks/results/bounds.md
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import RESULTS, commit, save  # noqa: E402
from planner import load_instance, plan  # noqa: E402
from planner.problem.dpsync import best_quality  # noqa: E402
from planner.problem.io import available  # noqa: E402
from planner.scoring import bounds  # noqa: E402
from planner.scoring.shapebound import shape_bound, slow_types  # noqa: E402

MAX_DOMAINS = 16


def known_best() -> dict[str, tuple[float, str]]:
    """Instance -> (objective, source) from the committed 60 s results: auto's simulated T
    (time) or bound / (1 - gap) (cost) in portfolio.md, the mixed plan in gpu_types_goals.md."""
    out: dict[str, tuple[float, str]] = {}
    text = (RESULTS / "portfolio.md").read_text()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 8 and cells[1] == "auto":
            name = cells[0]
            if name == "cost-edwc":  # the table lists T; the cost objective is bound / (1 - gap)
                value = float(cells[6]) / (1 - float(cells[7].rstrip("%")) / 100)
            else:
                value = float(cells[2])
            out[name] = (value, "portfolio.md")
    text = (RESULTS / "gpu_types_goals.md").read_text()
    for line in text.splitlines():
        m = re.match(r"\| ([\w-]+) \| mixed \([^|]*\) \| ([0-9.]+) \|", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = (float(m.group(2)), "gpu_types_goals.md")
    return out


def old_bound(inst) -> float:
    """``objective_lower_bound`` before issue 29: the instance-wide parts over best_quality."""
    if inst.options.objective == "time":
        value = max(v for k, v in bounds.lower_bound(inst).parts.items() if k != "shapes")
    else:
        value = bounds.cost_lower_bound(inst)
    return value / best_quality(inst)


def plain_bound(inst) -> float | None:
    """The bound with every crossing sync at 16 bits (time instances without dp_sync)."""
    if inst.options.objective != "time" or inst.options.dp_sync is not None:
        return None
    one = bounds.fastest_type_instance(inst)
    return max(old_bound(inst), shape_bound(one, 16, slow=slow_types(inst)).value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds of auto per instance")
    ap.add_argument("--no-run", action="store_true", help="no auto runs: the committed figures only")
    args = ap.parse_args(argv)
    known = known_best()
    rows, gaps_old, gaps_new, port_old, port_new = [], [], [], [], []
    names = [n for n in available("instances") if len(load_instance(n).domains) <= MAX_DOMAINS]
    for name in names:
        inst = load_instance(name)
        t0 = time.perf_counter()
        new = bounds.objective_lower_bound(inst)
        took = time.perf_counter() - t0
        old, plain = old_bound(inst), plain_bound(inst)
        best, source = known.get(name, (float("inf"), ""))
        if source == "portfolio.md":  # like for like with the figures (auto at 60 s)
            port_old.append((best - old) / best)
            port_new.append((best - new) / best)
        if not args.no_run:
            p = plan(load_instance(name), "auto", time_limit=args.time_limit, seed=0)
            ran = p.solver.objective
            if ran < best:
                best, source = ran, f"auto {args.time_limit:g} s"
        if not best < float("inf"):
            rows.append(f"| {name} | {old:.4g} | {new:.4g} | | no plan | | | {took:.2f} |")
            continue
        g_old, g_new = (best - old) / best, (best - new) / best
        gaps_old.append(g_old)
        gaps_new.append(g_new)
        rows.append(f"| {name} | {old:.4g} | {new:.4g} | {'' if plain is None else f'{plain:.4g}'} | "
                    f"{best:.4g} ({source}) | {100 * g_old:.1f}% | {100 * g_new:.1f}% | {took:.2f} |")
        print(rows[-1], flush=True)
    big = []
    for name in available("instances"):
        inst = load_instance(name)
        if len(inst.domains) > MAX_DOMAINS:
            t0 = time.perf_counter()
            lb = bounds.objective_lower_bound(inst)
            big.append(f"{name} ({len(inst.domains)} domains): {lb:.4g} in {time.perf_counter() - t0:.2f} s"
                       f"{' (instance-wide parts only)' if len(inst.domains) > bounds.SHAPE_BOUND_MAX_DOMAINS else ''}")
    lines = [f"Commit {commit()}.  Objective: T_eff / e seconds (cost instances: cost per iteration / e).  "
             "Gap = (best - bound) / best.",
             "",
             "| instance | old bound | new bound | plain-sync bound | best known | old gap | new gap | new bound s |",
             "|---|---|---|---|---|---|---|---|",
             *rows,
             "",
             f"Median gap over {len(gaps_new)} instances: old {100 * statistics.median(gaps_old):.1f}%, "
             f"new {100 * statistics.median(gaps_new):.1f}% (goal, stretch: 10%).  On the {len(port_new)} "
             f"instances of portfolio.md against its auto figures alone: old "
             f"{100 * statistics.median(port_old):.1f}%, new {100 * statistics.median(port_new):.1f}%.",
             "",
             "Larger instances: " + "; ".join(big) + "."]
    out = save("bounds", lines, argv)
    print("\n".join(lines[-3:]))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
