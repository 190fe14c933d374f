"""Hierarchical planning against greedy and auto: simulated iteration time, bound, wall time.

Runs ``planner plan INSTANCE --solver S --time-limit T --json -q`` for every
instance and solver, one after another (each a fresh process, so start-up
counts in the wall time), and writes a Markdown table with the command line.
The default instances are gcp-16 (16 domains) and the 100-domain grouped
instance of ``tests/grouped.py`` (10 regions x 10 datacenters, LLaMA-2 70B),
written to a temporary file first.

    python benchmarks/hier.py --time-limit 60 --out benchmarks/results/hier.md
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

ROOT = Path(__file__).resolve().parents[1]


def run(instance: str, solver: str, limit: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "planner.cli", "plan", instance, "--solver", solver,
                          "--time-limit", str(limit), "--json", "-q"], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        return {"solver": solver, "error": (res.stderr or res.stdout).strip().splitlines()[-1:], "wall_s": wall}
    doc = json.loads(res.stdout)
    info, ev = doc["solver"], doc["evaluation"]
    return {"solver": solver, "simulated_s": ev["iteration_time_s"], "estimate_s": ev["estimate_s"],
            "bound": info.get("bound"), "gap": info.get("gap"), "status": info.get("status"),
            "named_bound": info.get("estimate_bound"),  # the search's, on T_est over 1f1b/gpipe plans
            "shape": f"R={doc['replicas']} S={len(doc['stages'])} tp={doc['tp']} b={doc['micro_batch_size']}",
            "incumbent": info.get("incumbent", ""), "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--solvers", default="greedy,hier,auto")
    ap.add_argument("--instances", default=None, help="comma-separated (default: gcp-16 and the grouped 100)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    instances = a.instances.split(",") if a.instances else None
    tmp = None
    if instances is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from grouped import grouped_dict

        tmp = Path(tempfile.mkdtemp()) / "grouped-10x10-s0.json"
        tmp.write_text(json.dumps(grouped_dict(10, 10, 0, tiny=False)))
        instances = ["gcp-16", str(tmp)]
    rows = []
    for inst in instances:
        for solver in a.solvers.split(","):
            r = run(inst, solver, a.time_limit)
            r["instance"] = Path(inst).stem
            rows.append(r)
            print(json.dumps(r), flush=True)
    cmd = f"python benchmarks/hier.py --time-limit {a.time_limit:g}"
    import os as _os

    load = " ".join(f"{x:.1f}" for x in _os.getloadavg())
    lines = [f"# Hierarchical planning vs greedy and auto (`--time-limit {a.time_limit:g}`)", "",
             f"Load average at the end: {load} ({_os.cpu_count()} CPUs).", "",
             f"Command: `{cmd}`. grouped-10x10-s0: `python tests/grouped.py --groups 10 --per-group 10 "
             f"--seed 0 --out FILE` (100 domains in 10 regions, 8,352 H100, LLaMA-2 70B). Simulated "
             "iteration time (s), the solver's T_est bound (s) and gap; a plan with an explicit schedule "
             "(tuned in-flight limits) claims the instance's bound, valid for any schedule, and keeps the "
             "search's bound over 1f1b/gpipe plans as `named_bound`; wall time of the whole command "
             "(start-up and the final evaluation included, s).",
             "", "| instance | solver | simulated s | T_est s | bound s | named_bound s | gap | status | shape | from "
             "| wall s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['instance']} | {r['solver']} | error: {' '.join(r['error'])} | | | | | | | | "
                         f"{r['wall_s']:.1f} |")
            continue
        gap = "-" if r["gap"] is None else f"{100 * r['gap']:.1f}%"
        bound = "-" if r["bound"] is None else f"{r['bound']:.4g}"
        named = "-" if r.get("named_bound") is None else f"{r['named_bound']:.4g}"
        lines.append(f"| {r['instance']} | {r['solver']} | {r['simulated_s']:.4g} | {r['estimate_s']:.4g} | "
                     f"{bound} | {named} | {gap} | {r['status']} | {r['shape']} | {r['incumbent']} | {r['wall_s']:.1f} |")
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
