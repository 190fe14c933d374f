"""The column planner against every baseline on a two-job mix of gcp-16 (SPEC 10).

llama2-70b (gcp-16's own workload) with gpt3-1.3b (the same batch and sequence), 100 iterations
each, weight 1, maxmin; references from greedy on each job alone on the whole cluster.  Prints one
row per method: the objective (min rho / w) under reserved and shared sharing and each job's rho.

    PYTHONPATH=$PWD python benchmarks/multijob_gcp16.py [--time-limit 60] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import planner
from planner.problem.jobs import MultiInstance
from planner.scoring.multievaluate import multievaluate
from planner.solvers.multijob import baselines as B
from planner.solvers.multijob import references


def gcp16_mix(second: str = "gpt3-1.3b", iterations: int = 100) -> MultiInstance:
    """gcp-16's cluster with two jobs: its llama2-70b workload and ``second`` on the same batch."""
    inst = planner.load_instance("gcp-16")
    data = inst.to_dict()
    wl = data.pop("workload")
    data["name"] = "gcp-16-two-jobs"
    other = planner.load_instance("gcp-16").with_model(second).to_dict()["workload"]
    data["jobs"] = [{**wl, "name": "big", "iterations": iterations},
                    {**other, "name": "small", "iterations": iterations}]
    data["options"] = {**data.get("options", {}), "multi_objective": "maxmin"}
    return MultiInstance.from_dict(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    minst = gcp16_mix()
    t0 = time.perf_counter()
    refs = references(minst, seed=args.seed)
    print(f"references (greedy alone on gcp-16, {time.perf_counter() - t0:.1f} s): {refs}")
    rows = []

    def row(name, mp, secs):
        r = multievaluate(minst, mp, sharing="reserved")
        s = multievaluate(minst, mp, sharing="shared")
        rows.append({"method": name, "reserved": r.objective_value, "shared": s.objective_value,
                     "rho": {j.name: j.rho for j in r.jobs}, "rho_shared": {j.name: j.rho for j in s.jobs},
                     "gpus": {a.name: sum(a.gpus.values()) for a in mp.jobs}, "feasible": r.feasible,
                     "time_s": secs})
        print(f"{name:18s} reserved {r.objective_value:.4f} shared {s.objective_value:.4f}  "
              + "  ".join(f"{j.name}: rho {j.rho:.3f}" for j in r.jobs)
              + f"  GPUs {rows[-1]['gpus']}  ({secs:.1f} s)", flush=True)

    for name, fn in B.BASELINES.items():
        t = time.perf_counter()
        row(name, fn(minst, refs, objective="maxmin"), time.perf_counter() - t)
    t = time.perf_counter()
    mp = planner.multiplan(minst, time_limit=args.time_limit, seed=args.seed, references=refs)
    row("multiplan", mp, time.perf_counter() - t)
    info = mp.solver
    print(f"multiplan: status {info.status}, bound {info.bound}, gap {info.gap}, "
          f"master_lp {info.model_extra.get('master_lp')}, columns {info.model_extra.get('columns')}, "
          f"rounds {info.model_extra.get('rounds')}")
    seq = B.sequential(minst)
    print("sequential (each job alone, one after the other):", seq)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        with open(args.out, "w") as f:
            json.dump({"command": " ".join(["python", "benchmarks/multijob_gcp16.py"] + sys.argv[1:]),
                       "commit": commit, "references": refs, "rows": rows, "sequential": seq,
                       "multiplan_solver": info.model_dump(mode="json")}, f, indent=2)


if __name__ == "__main__":
    main()
