"""Does ``auto`` give the same plan for the same command?  (issue 29, "Reproducible")

Per instance: ``planner plan INSTANCE --solver auto --time-limit S --seed 0 --out
PLAN.json -q`` as a fresh process, twice, then a third time with a CPU-bound
process (a python busy loop) running beside it.  Compares the plans (the plan
JSON without the ``solver`` and ``predicted`` figures, which hold timings), and
the third run's simulated objective (exact simulation, base network: seconds,
or cost per iteration) over the first's (goal: <= 1.01).  Records each run's
wall time and the parts the clock cut (``solver.cut_by_clock``: empty means the
run was the deterministic one).  ``--deterministic`` passes ``--deterministic``
(never cut by the clock).

The machine is shared with other agents: the load average before and after
each instance is in the table; deterministic work units are what makes the
"same plan" result independent of it, as long as the clock does not cut.

Writes benchmarks/results/reproducible.md (or ``--name``): command, commit,
table.

    python benchmarks/reproducible.py [--time-limit 60] [--instances a,b] [--deterministic]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _results import commit, save  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAX_DOMAINS = 16


def instances() -> list[str]:
    """The packaged single-job instances of at most 16 domains."""
    import planner
    from planner.problem.errors import InputError

    out = []
    for p in sorted((ROOT / "instances").glob("*.toml")):
        try:
            inst = planner.load_instance(p.stem)
        except InputError:  # several jobs: planner multiplan's
            continue
        if len(inst.domains) <= MAX_DOMAINS:
            out.append(p.stem)
    return out


def run(name: str, limit: float, out: Path, deterministic: bool) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "planner.cli", "plan", name, "--solver", "auto", "--time-limit", f"{limit:g}",
           "--seed", "0", "--out", str(out), "-q"] + (["--deterministic"] if deterministic else [])
    t = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {res.returncode}\n{res.stderr[-2000:]}")
    return wall, json.loads(out.read_text())


def bare(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("solver", "predicted")}


def simulated(name: str, doc: dict) -> float:
    import planner
    from planner.problem.plan import Plan
    from planner.scoring.evaluator import simulated_score

    inst = planner.load_instance(name)
    return float(simulated_score(inst, Plan.model_validate(bare(doc))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--instances", default="", help="comma-separated (default: every single-job one up to 16 domains)")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--name", default="reproducible")
    args = ap.parse_args(argv)
    names = [n for n in args.instances.split(",") if n] or instances()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            load0 = os.getloadavg()[0]
            w1, a = run(name, args.time_limit, Path(tmp) / "a.json", args.deterministic)
            w2, b = run(name, args.time_limit, Path(tmp) / "b.json", args.deterministic)
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                w3, c = run(name, args.time_limit, Path(tmp) / "c.json", args.deterministic)
            finally:
                hog.kill()
                hog.wait()
            load1 = os.getloadavg()[0]
            sa, sc = simulated(name, a), simulated(name, c)
            cuts = [",".join(d["solver"].get("cut_by_clock") or []) or "-" for d in (a, b, c)]
            row = (name, bare(a) == bare(b), bare(a) == bare(c), sc / sa, w1, w2, w3, cuts, load0, load1,
                   a["solver"].get("incumbent"))
            rows.append(row)
            print(f"{name}: same {row[1]} loaded-same {row[2]} ratio {row[3]:.4f} walls {w1:.1f} {w2:.1f} {w3:.1f} "
                  f"cut {cuts} load {load0:.1f}->{load1:.1f}", flush=True)
    same = sum(r[1] for r in rows)
    worst = max(r[3] for r in rows)
    lines = [f"Commit: {commit()}", "",
             f"Machine: {os.cpu_count()} cores, shared with other agents (their load is the load average "
             "column, 1-minute, before and after each instance).  Run 3 has one more CPU-bound process beside it "
             "(a python busy loop).  Mode: " + ("`--deterministic` (never cut by the clock)" if args.deterministic
                                               else "the default (seeded: work units, the wall clock a backstop)")
             + f"; `--time-limit {args.time_limit:g} --seed 0`.", "",
             f"Same plan in runs 1 and 2: {same} of {len(rows)} instances; run 3 (loaded) / run 1 simulated "
             f"objective, worst: {worst:.4f} (goal <= 1.01).", "",
             "| instance | 1 = 2 | 1 = 3 (loaded) | run 3 / run 1 | wall 1 / 2 / 3 (s) | cut by the clock 1 / 2 / 3 "
             "| load before / after | incumbent |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r[0]} | {'yes' if r[1] else 'no'} | {'yes' if r[2] else 'no'} | {r[3]:.4f} | "
                     f"{r[4]:.1f} / {r[5]:.1f} / {r[6]:.1f} | {' / '.join(r[7])} | {r[8]:.1f} / {r[9]:.1f} | {r[10]} |")
    path = save(args.name, lines)
    print("\n".join(lines))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
