"""Issue 29, fourth pass: plans the per-placement bound points at, on the tiny instances and two-dc.

For each instance, the shapes whose refined value (planner/scoring/placebound.py) is within
``--within`` of the instance bound are searched: every placement (a multiset of replica
rows within the slots) and partition gets its per-placement bound at that partition, and
the ``--top`` smallest are simulated with every in-flight limit vector w in 1..m per stage
(:func:`planner.solvers.inflight.inflight_schedule`; with m ** S > 1024, every limit on
stage 0 and 1, 2, 4, 8, m on the others) and gpipe, at the fewest bits an
every-step sync may use (4: the default quality row covers it on every instance).  The
table gives the bound (``objective_lower_bound``), the best plan found (the evaluator's
objective) and the gap; ``placement_plans.json`` holds the plans (plan files: ``planner
explain`` reads them).

    python benchmarks/placement_plans.py          # writes benchmarks/results/placement_plans.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import RESULTS, commit, save  # noqa: E402
from planner import Plan, load_instance  # noqa: E402
from planner.problem.dpsync import DpSync  # noqa: E402
from planner.scoring import bounds, placebound  # noqa: E402
from planner.scoring.evaluator import Evaluator, check_plan  # noqa: E402
from planner.scoring.shapebound import shape_bound, slow_types  # noqa: E402
from planner.solvers.inflight import inflight_schedule  # noqa: E402

INSTANCES = ("tiny-3dc", "tiny-mixed", "tiny-line", "two-dc")


def _compositions(n: int, S: int):
    for cuts in itertools.combinations(range(1, n), S - 1):
        b = (0, *cuts, n)
        yield list(zip(b, b[1:]))


def _limits(m: int, S: int):
    """In-flight limit vectors: all of 1..m per stage when m ** S <= 1024, else all of 1..m
    for stage 0 and 1, 2, 4, 8, m for the others."""
    if m ** S <= 1024:
        return itertools.product(range(1, m + 1), repeat=S)
    few = sorted({k for k in (1, 2, 4, 8, m) if k <= m})
    return itertools.product(range(1, m + 1), *([few] * (S - 1)))


def search(name: str, within: float, top: int):
    """(bound, best objective, its plan, candidates simulated) for instance ``name``."""
    inst = load_instance(name)
    bits = min(b for b, _ in bounds.sync_classes(inst) if b is not None)
    bound = bounds.objective_lower_bound(inst)
    parts = shape_bound(bounds.fastest_type_instance(inst), bits, "time", slow_types(inst), prune=False).parts
    _, refined = placebound.refined_shape_values(inst, parts, bits)
    net = placebound._Net(inst)
    names = inst.domain_names
    best, best_plan, simulated = np.inf, None, 0
    sync = DpSync(mode="every_step", bits=bits) if bits < 16 else None
    for shape, value in sorted(refined.items(), key=lambda kv: kv[1]):
        if value > bound * (1 + within):
            continue
        t, b, R, S = shape
        m = inst.workload.global_batch_size // (R * b)
        data = placebound._ShapeData(inst, t, b, S, m)
        usable = [i for i, d in enumerate(inst.domains) if d.gpus_per_node >= t and d.gpus >= t]
        slots = {i: inst.domains[i].gpus // t for i in usable}
        rows = placebound._rows(usable, slots, S, 10 ** 6)
        cands = []
        parts_of = list(_compositions(len(inst.units), S))
        low = placebound.row_bounds(inst, net, data, rows)
        keep = lambda i, chosen: low[i] <= bound * (1 + within)  # noqa: E731
        for pl in placebound._placements(rows, slots, R, keep):
            values = placebound.placement_values(inst, net, data, pl, bits)
            for k in np.nonzero(values <= bound * (1 + within))[0]:
                cands.append((float(values[k]), pl, parts_of[k]))
        cands.sort(key=lambda c: c[0])
        for v, pl, cuts in cands[:top]:
            placement = [[names[d] for d in row] for row in pl]
            p = Plan.build(cuts, placement, tp=t, micro_batch_size=b, instance=inst, schedule="gpipe")
            p = p.model_copy(update={"dp_sync": sync})
            schedules = [p] + [p.model_copy(update={"schedule": inflight_schedule(w, m)}) for w in _limits(m, S)]
            for q in schedules:
                if check_plan(inst, q):
                    continue
                simulated += 1
                value_q = float(Evaluator(inst, q).scores()[0])
                if value_q < best:
                    best, best_plan = value_q, q
    return bound, best, best_plan, simulated


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--within", type=float, default=0.02, help="shapes whose refined value is within this of the bound")
    ap.add_argument("--top", type=int, default=4, help="(placement, partition) pairs simulated per shape")
    args = ap.parse_args(argv)
    rows, plans = [], {}
    for name in INSTANCES:
        bound, best, p, simulated = search(name, args.within, args.top)
        shape = (p.tp, p.micro_batch_size, p.replicas, p.num_stages)
        w = "gpipe" if isinstance(p.schedule, str) else "explicit"
        rows.append(f"| {name} | {bound:.5g} | {best:.5g} | {100 * (best - bound) / best:.1f}% | {shape} | "
                    f"{[(s.start, s.end) for s in p.stages]} | {p.placement} | {w} | {simulated} |")
        print(rows[-1], flush=True)
        plans[name] = {"objective": best, "bound": bound, "plan": json.loads(p.to_json())}
    (RESULTS / "placement_plans.json").write_text(json.dumps(plans, indent=1) + "\n")
    lines = [f"Commit {commit()}.  Objective: the evaluator's (T / e, seconds); bound: "
             "``objective_lower_bound`` (per-placement refinement); gap = (plan - bound) / plan.  "
             "Plans in placement_plans.json.",
             "",
             "| instance | bound | best plan found | gap | shape (t, b, R, S) | stages | placement | schedule | "
             "plans simulated |",
             "|---|---|---|---|---|---|---|---|---|",
             *rows]
    out = save("placement_plans", lines, argv)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
