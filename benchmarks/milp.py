"""MILP vs greedy on every packaged instance: build and solve time, status,
gap, T_est, simulated iteration time, and the ratio to the lower bound.

    .venv/bin/python benchmarks/milp.py [--time-limit 60] [--threads 1] [--name milp] [INSTANCE ...]

Writes a Markdown table to stdout and benchmarks/results/NAME.md (default milp.md).
"""

from __future__ import annotations

import argparse
import sys
import time

from _results import save, suite_instances  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from planner import load_instance, plan


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--name", default="milp", help="results file benchmarks/results/NAME.md")
    args = ap.parse_args(argv)
    names = args.instances or suite_instances()
    head = ("| instance | greedy T_est s | greedy T s | milp T_est s | milp T s | T gain | status | gap | "
            "bound s | x LB | build s | total s |")
    lines = [f"MILP time limit {args.time_limit:g} s, {args.threads} thread(s).", "", head,
             "|" + "|".join("---" for _ in range(12)) + "|"]
    print("\n".join(lines), flush=True)
    for name in names:
        inst = load_instance(name)
        g = plan(inst, solver="greedy")
        t0 = time.perf_counter()
        m = plan(inst, solver="milp", time_limit=args.time_limit, threads=args.threads)
        total = time.perf_counter() - t0
        gp, mp, info = g.predicted, m.predicted, m.solver
        gain = 1 - mp.iteration_time_s / gp.iteration_time_s
        row = (f"| {name} | {gp.estimate_s:.4g} | {gp.iteration_time_s:.4g} | {mp.estimate_s:.4g} | "
               f"{mp.iteration_time_s:.4g} | {gain:+.1%} | {info.status} | {info.gap:.1%} | {info.bound:.4g} | "
               f"{mp.bound_ratio:.2f} | {info.model_extra.get('build_s', 0):.1f} | {total:.1f} |")
        lines.append(row)
        print(row, flush=True)
    save(args.name, lines, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
