"""Issue 29, third and fourth passes: the network-cut part of the per-shape bound
(planner/scoring/shapebound.py, ``cuts``) and the per-placement refinement
(planner/scoring/placebound.py, instances up to 4 domains) on each packaged instance up
to 16 domains, against the best known objective of benchmarks/bounds.py's ``known_best``
(the committed figures: portfolio.md, gpu_types_goals.md, bounds.md's best known column;
no solver run).

Columns: the bound of the second pass (``objective_lower_bound`` with
``shape_bound(..., cuts=False)``), of the third (with the cuts, the sync classes of
``sync_classes``), the bound now (fourth pass, ``objective_lower_bound``: every stage's
sync and DiLoCo/streaming split by groups, planner/scoring/syncbound.py, and on
instances up to 4 domains the per-placement refinement, planner/scoring/placebound.py),
the best known (with the plans benchmarks/placement_plans.py found where they are
better), the three gaps (best - bound) / best, and the seconds the bound now takes
(cold cache).

    python benchmarks/bounds_cuts.py          # writes benchmarks/results/bounds_cuts.md
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import RESULTS, commit, save  # noqa: E402
from bounds import MAX_DOMAINS, known_best, pass_bound  # noqa: E402
from planner import load_instance  # noqa: E402
from planner.problem.io import available  # noqa: E402
from planner.scoring import bounds  # noqa: E402


def main(argv=None) -> int:
    known = known_best()
    found = RESULTS / "placement_plans.json"  # plans the per-placement bound pointed at (placement_plans.py)
    if found.exists():
        for name, row in json.loads(found.read_text()).items():
            # an exact figure that rounds to at most the committed one (those are rounded to 4 digits)
            if float(f"{row['objective']:.4g}") <= known.get(name, (float("inf"), ""))[0]:
                known[name] = (row["objective"], "placement_plans.md")
    rows, before, third, after = [], [], [], []
    for name in available("instances"):
        inst = load_instance(name)
        if len(inst.domains) > MAX_DOMAINS:
            continue
        t0 = time.perf_counter()
        new = bounds.objective_lower_bound(inst)
        took = time.perf_counter() - t0
        old = pass_bound(load_instance(name), cuts=False)  # the second pass
        cut = pass_bound(load_instance(name))  # the third pass: cuts, no per-stage sync, one outer class
        best, source = known.get(name, (float("inf"), ""))
        if not best < float("inf"):
            rows.append(f"| {name} | {old:.4g} | {cut:.4g} | {new:.4g} | no plan | | | | {took:.2f} |")
            continue
        g_old, g_cut, g_new = (best - old) / best, (best - cut) / best, (best - new) / best
        before.append(g_old)
        third.append(g_cut)
        after.append(g_new)
        rows.append(f"| {name} | {old:.4g} | {cut:.4g} | {new:.4g} | {best:.4g} ({source}) | {100 * g_old:.1f}% | "
                    f"{100 * g_cut:.1f}% | {100 * g_new:.1f}% | {took:.2f} |")
        print(rows[-1], flush=True)
    lines = [f"Commit {commit()}.  Objective: T_eff / e seconds (cost instances: cost per iteration / e).  "
             "Gap = (best - bound) / best; best known from the committed results (no solver run).",
             "",
             "| instance | second pass | with cuts | fourth pass | best known | second-pass gap | gap with cuts | "
             "fourth-pass gap | bound s |",
             "|---|---|---|---|---|---|---|---|---|",
             *rows,
             "",
             f"Median gap over {len(after)} instances: second pass {100 * statistics.median(before):.1f}%, "
             f"with cuts {100 * statistics.median(third):.1f}%, fourth pass {100 * statistics.median(after):.1f}% "
             "(goal: 10%)."]
    out = save("bounds_cuts", lines, argv)
    print(lines[-1])
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
