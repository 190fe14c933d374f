"""Greedy planner on every packaged instance: plan time, iteration time,
T_est and ratio to the lower bound.  Goal (issue 2): under 1 s each.

    .venv/bin/python benchmarks/greedy.py
"""

from __future__ import annotations

import sys
import time

from _results import suite_instances  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from planner import InfeasibleError, load_instance, plan


def main():
    print(f"{'instance':<20} {'time s':>7} {'R x S x tp':>11} {'b':>3} {'sched':>6} "
          f"{'T s':>9} {'T_est s':>9} {'x bound':>8}")
    worst = 0.0
    plan(load_instance("tiny-3dc"))  # warm-up: imports only (tiny plans share no compiled programs)
    for name in suite_instances():  # the national-scale ones: benchmarks/scale.py
        t0 = time.perf_counter()
        try:
            p = plan(load_instance(name))
        except InfeasibleError as e:
            print(f"{name:<20} infeasible: {e.message}")
            continue
        dt = time.perf_counter() - t0
        worst = max(worst, dt)
        pr = p.predicted
        print(f"{name:<20} {dt:>7.3f} {f'{p.replicas}x{p.num_stages}x{p.tp}':>11} {p.micro_batch_size:>3} "
              f"{p.schedule_kind:>6} {pr.iteration_time_s:>9.3f} {pr.estimate_s:>9.3f} {pr.bound_ratio:>8.2f}")
    print(f"slowest: {worst:.3f} s (goal < 1 s): {'met' if worst < 1 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
