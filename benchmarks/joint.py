"""CP-SAT vs MILP on the joint problem, per packaged instance, with the same
time limit: solve time, status, gap, bound, T_est and the simulated
iteration time of the returned plan (both plans scored by the evaluator).

    .venv/bin/python benchmarks/joint.py [--time-limit 60] [--workers 2] [--threads 1] [INSTANCE ...]

Writes a Markdown table to stdout and benchmarks/results/joint.md (with the
exact command).  CP-SAT runs with ``--workers`` workers, the MILP (HiGHS)
with ``--threads`` threads.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _results import suite_instances  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from planner import load_instance, plan


def _run(inst, solver, **kw):
    t0 = time.perf_counter()
    p = plan(inst, solver=solver, **kw)
    return p, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers")
    ap.add_argument("--threads", type=int, default=1, help="HiGHS threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "joint.md"))
    args = ap.parse_args(argv)
    names = args.instances or suite_instances()
    cols = ["instance", "objective", "solver", "status", "gap", "bound", "value", "T_est s", "simulated T s",
            "time s"]
    lines = [f"Time limit {args.time_limit:g} s each; CP-SAT {args.workers} worker(s), HiGHS {args.threads} "
             f"thread(s), seed {args.seed}.  T_est and cost from the evaluator; the bound and gap are on "
             "the instance's objective: value = T_est (s) or cost per iteration with T_est.", "",
             "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    print("\n".join(lines), flush=True)
    for name in names:
        inst = load_instance(name)
        runs = {"cpsat": _run(inst, "cpsat", time_limit=args.time_limit, seed=args.seed, workers=args.workers,
                              refine_schedule=False),  # the joint model alone, as the MILP
                "milp": _run(inst, "milp", time_limit=args.time_limit, seed=args.seed, threads=args.threads)}
        for solver, (p, secs) in runs.items():
            info, pr = p.solver, p.predicted
            row = (f"| {name} | {inst.options.objective} | {solver} | {info.status} | {info.gap:.2%} | "
                   f"{info.bound:.5g} | {info.objective:.5g} | {pr.estimate_s:.5g} | "
                   f"{pr.iteration_time_s:.5g} | {secs:.1f} |")
            lines.append(row)
            print(row, flush=True)
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    cmd = "python benchmarks/joint.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out.write_text(f"Command: `{cmd.strip()}`\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
