"""Do the planners keep their time limit?  (issue 28, item 11)

Runs ``planner plan INSTANCE --solver SOLVER --time-limit S --out PLAN.json -q``
as a fresh process for every packaged instance x every solver and measures
the wall time of the whole command (interpreter start-up, loading, planning,
checking, writing and printing included), as a user's ``time`` would.  The
promise (docs/guide.md, "Time limits"): wall time <= S + max(1 s, 5% of S).

Prints one row per run and writes benchmarks/results/time_limits.md (the
command, the commit, the machine's load average before and after, the
table, the runs over the promise).

    python benchmarks/time_limits.py [--time-limit 5] [--instances a,b] [--solvers greedy,milp]
                                     [--busy N] [--name time_limits]

``--busy N`` runs N CPU-bound python processes (busy loops) beside every run: the
promise is for a machine that is not overloaded, and this measures how far past it
the wall time goes on one that is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import commit, save  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KILL_AFTER = 12  # a run still going after this many times its limit (+ 30 s) is killed and listed
SOLVERS = ("greedy", "milp", "cpsat", "hier", "anneal", "auto", "rl")


def allowed(limit: float) -> float:
    """The promised wall time for a time limit (s): the limit plus max(1 s, 5%)."""
    return limit + max(1.0, 0.05 * limit)


def packaged() -> list[str]:
    return sorted(p.stem for p in (ROOT / "instances").glob("*.toml"))


def run(instance: str, solver: str, limit: float, tmp: Path) -> tuple[float, int, str]:
    """(wall s, exit code, the plan's status or the last stderr line) of one command."""
    out = tmp / f"{instance}-{solver}.json"
    cmd = [sys.executable, "-m", "planner.cli", "plan", instance, "--solver", solver,
           "--time-limit", f"{limit:g}", "--out", str(out), "-q"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=KILL_AFTER * limit + 30)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t, -9, f"killed after {KILL_AFTER} x the limit + 30 s"
    wall = time.perf_counter() - t
    if r.returncode == 0 and out.is_file():
        import json

        what = json.loads(out.read_text())["solver"]["status"]
    else:
        what = (r.stderr.strip().splitlines() or ["?"])[-1][:90]
    return wall, r.returncode, what


def _runs(instances, solvers, limit: float, tmp: Path) -> tuple[list[str], list[str]]:
    """Each (instance, solver) run once: the table's rows, and the runs over the promise (exit 0)."""
    rows, over = [], []
    for inst in instances:
        for solver in solvers:
            wall, rc, what = run(inst, solver, limit, tmp)
            ok = wall <= allowed(limit)
            rows.append(f"| {inst} | {solver} | {wall:.2f} | {wall / limit:.2f} | {rc} | {what} | {'' if ok else 'OVER'} |")
            print(rows[-1], flush=True)
            if not ok and rc == 0:
                over.append(f"{inst} {solver} {wall:.2f} s")
    return rows, over


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--instances", default=None, help="comma-separated (default: every packaged instance)")
    ap.add_argument("--solvers", default=",".join(SOLVERS))
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes beside every run")
    ap.add_argument("--name", default="time_limits", help="results file name (benchmarks/results/NAME.md)")
    args = ap.parse_args(argv)
    instances = args.instances.split(",") if args.instances else packaged()
    solvers = args.solvers.split(",")
    limit = args.time_limit
    load0 = os.getloadavg()
    t_all = time.perf_counter()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        with tempfile.TemporaryDirectory() as d:
            rows, over = _runs(instances, solvers, limit, Path(d))
    finally:
        for proc in busy:
            proc.kill()
    load1 = os.getloadavg()
    cpus = os.cpu_count()
    lines = [f"Code: {commit()}; {len(instances)} instances x {len(solvers)} solvers, time limit {limit:g} s, "
             f"promise: wall <= {allowed(limit):g} s (limit + max(1 s, 5%)), start-up included; "
             f"{time.perf_counter() - t_all:.0f} s in all."
             + (f"  {args.busy} CPU-bound process(es) (python busy loops) ran beside every run." if args.busy else ""),
             "",
             f"Load average (1, 5, 15 min) before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after: "
             f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}, on {cpus} CPUs."
             + (" **The machine was loaded (load above its CPUs): start-up and every step ran slower than on a "
                "quiet machine, so these walls overstate what a user sees; the ratios are not representative.**"
                if max(load0[0], load1[0]) > cpus else ""),
             "",
             "| instance | solver | wall s | wall / limit | exit | status |  |",
             "|---|---|---|---|---|---|---|",
             *rows,
             "",
             f"Over the promise (exit 0): {len(over)} of {len(rows)}" + (": " + "; ".join(over) if over else "."),
             "Exit 4 (the time limit ran out before any plan) and 3 (no plan) are listed but not counted.",
             ]
    path = save(args.name, lines)
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
