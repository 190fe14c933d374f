"""CP-SAT schedule optimiser: 1f1b vs the optimised explicit schedule at equal
memory (every stage holds at most as many micro-batches as under 1f1b), and
within the memory limit, on latency-bound plans; plus the 8-stage x
32-micro-batch size goal.

    .venv/bin/python benchmarks/schedule.py [--time-limit 60]

Writes a Markdown table to stdout and benchmarks/results/schedule.md.
"""

from __future__ import annotations

import argparse
import sys
import time

from _results import save  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from planner import Evaluator, Plan, load_instance, plan as make_plan
from planner.figures import PlanFigures
from planner.schedule_opt import optimize_schedule


def one_domain_per_stage(inst, stages, tp, b, gbs):
    """The Megatron-style baseline: uniform split, stage j in the j-th domain, 1f1b."""
    inst = inst.with_workload(global_batch_size=gbs, micro_batch_sizes=[b])
    n = inst.num_units
    cuts = [round(i * n / stages) for i in range(stages + 1)]
    return inst, Plan.build(list(zip(cuts, cuts[1:])), [list(inst.domain_names[:stages])], tp=tp,
                            micro_batch_size=b, instance=inst, schedule="1f1b")


def cases():
    az = load_instance("azure-multiregion")
    yield "azure-multiregion: greedy plan", az, make_plan(az).model_copy(update={"predicted": None, "solver": None})
    inst, p = one_domain_per_stage(az, 5, 8, 1, 16)
    yield "azure-multiregion: 1 region per stage, m=16", inst, p
    inst, p = one_domain_per_stage(load_instance("gcp-16"), 8, 8, 1, 32)
    yield "gcp-16: 8 regions x 8 stages, m=32", inst, p
    inst, p = one_domain_per_stage(load_instance("edwc-full"), 8, 8, 1, 32)
    yield "edwc-full: 8 clusters x 8 stages, m=32", inst, p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    head = ("| plan | S x m | 1f1b s | equal memory s | gain | status | gap | time s | "
            "memory limit s | gain | status | gap | time s |")
    lines = [f"CP-SAT, {args.workers} workers, {args.time_limit:g} s wall-clock limit per run.", "", head,
             "|" + "|".join("---" for _ in range(13)) + "|"]
    print("\n".join(lines), flush=True)
    for name, inst, p in cases():
        base = float(Evaluator(inst, p).iteration_times()[0])
        cells = []
        for cap in ([int(v) for v in PlanFigures(inst, p).inflight], None):
            t0 = time.perf_counter()
            q = optimize_schedule(inst, p, time_limit=args.time_limit, workers=args.workers, inflight_cap=cap)
            dt = time.perf_counter() - t0
            sim = q.solver.model_extra["simulated_s"]
            cells += [f"{sim:.4g}", f"{1 - sim / base:+.1%}", q.solver.status, f"{q.solver.gap:.2%}", f"{dt:.1f}"]
        row = f"| {name} | {p.num_stages} x {p.num_micro_batches} | {base:.4g} | " + " | ".join(cells) + " |"
        lines.append(row)
        print(row, flush=True)
    save("schedule", lines, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
