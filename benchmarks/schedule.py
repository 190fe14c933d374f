"""CP-SAT schedule optimiser: 1f1b vs the optimised explicit schedule on
latency-bound plans, under three memory budgets, plus the 8-stage x
32-micro-batch size goal.

Budgets (planner.solvers.schedule_opt.budget_caps): "per stage" - no stage holds
more micro-batches than under 1f1b; "peak" - the same peak memory per GPU
as 1f1b (every stage may use what 1f1b's fullest stage uses); "GPU" - each
stage's GPU memory.  Plans: the greedy placement and partition of every
packaged instance whose 1f1b iteration spends >= 10% of its time on WAN
latency (measured: 1 - T(latencies set to 0) / T), run as 1f1b; and
one-domain-per-stage pipelines (Megatron style) on three WANs.

    .venv/bin/python benchmarks/schedule.py [--time-limit 60] [--min-share 0.1]

Writes a Markdown table to stdout and benchmarks/results/schedule.md.
"""

from __future__ import annotations

import argparse
import sys
import time

from _results import save, suite_instances  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
import numpy as np

from planner import Evaluator, Plan, load_instance, plan as make_plan
from planner.scoring.evaluator import check_plan
from planner.problem.network import NetworkStates
from planner.solvers.schedule_opt import budget_caps, optimize_schedule


def one_domain_per_stage(inst, stages, tp, b, gbs):
    """The Megatron-style baseline: uniform split, stage j in the j-th domain, 1f1b."""
    inst = inst.with_workload(global_batch_size=gbs, micro_batch_sizes=[b])
    n = inst.num_units
    cuts = [round(i * n / stages) for i in range(stages + 1)]
    return inst, Plan.build(list(zip(cuts, cuts[1:])), [list(inst.domain_names[:stages])], tp=tp,
                            micro_batch_size=b, instance=inst, schedule="1f1b")


def latency_share(inst, p) -> float:
    """Share of the iteration time due to WAN latency: 1 - T(latencies 0) / T."""
    base = NetworkStates.base(inst)
    zero = NetworkStates(base.bandwidth_gbps, np.zeros_like(base.latency_ms))
    ev = Evaluator(inst, p)
    return 1.0 - float(ev.iteration_times(zero)[0]) / float(ev.iteration_times()[0])


def cases(min_share: float):
    for name in suite_instances():
        inst = load_instance(name)
        if len(inst.domains) < 2:
            continue
        g = make_plan(inst)
        p = Plan.build([(s.start, s.end) for s in g.stages], g.placement, tp=g.tp,
                       micro_batch_size=g.micro_batch_size, instance=inst, schedule="1f1b")
        if check_plan(inst, p) or latency_share(inst, p) < min_share:
            continue
        yield f"{name}: greedy placement", inst, p
    az = load_instance("azure-multiregion")
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
    ap.add_argument("--min-share", type=float, default=0.1, help="latency share that makes a plan latency-bound")
    args = ap.parse_args(argv)
    budgets = (("stage", "per stage"), ("peak", "peak"), ("gpu", "GPU"))
    head = "| plan | S x m | latency share | 1f1b s | " + " | ".join(
        f"{label} s | gain | status, gap, time" for _, label in budgets) + " |"
    lines = [f"CP-SAT, {args.workers} workers, {args.time_limit:g} s wall-clock limit per run; gain = 1 - "
             "simulated optimised / simulated 1f1b (both by the evaluator); (<= x) the largest gain any "
             "schedule within the budget could have, from the bound (CP-SAT's or the Little's-law "
             "bound of planner.solvers.schedule_opt.inflight_bound, whichever is larger).", "", head,
             "|" + "|".join("---" for _ in range(4 + 3 * len(budgets))) + "|"]
    print("\n".join(lines), flush=True)
    for name, inst, p in cases(args.min_share):
        base = float(Evaluator(inst, p).iteration_times()[0])
        cells = []
        for memory, _ in budgets:
            t0 = time.perf_counter()
            q = optimize_schedule(inst, p, time_limit=args.time_limit, workers=args.workers,
                                  inflight_cap=budget_caps(inst, p, memory))
            dt = time.perf_counter() - t0
            sim = q.solver.model_extra["simulated_s"]
            most = max(0.0, 1 - q.solver.bound / base)  # no schedule within the budget gains more (bound: CP-SAT or Little's law)
            cells += [f"{sim:.4g}", f"{1 - sim / base:+.1%} (<= {most:+.1%})",
                      f"{q.solver.status}, {q.solver.gap:.1%}, {dt:.0f} s"]
        row = (f"| {name} | {p.num_stages} x {p.num_micro_batches} | {latency_share(inst, p):.1%} | {base:.4g} | "
               + " | ".join(cells) + " |")
        lines.append(row)
        print(row, flush=True)
    save("schedule", lines, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
