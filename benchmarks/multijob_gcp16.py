"""The column planner against every baseline on a two-job mix of gcp-16 (SPEC 10).

llama2-70b (gcp-16's own workload) with gpt3-1.3b (the same batch and sequence), 100 iterations
each, weight 1, maxmin; references from greedy on each job alone on the whole cluster.  Prints one
row per method: the objective (min rho / w) under reserved and shared sharing and each job's rho.

    PYTHONPATH=$PWD python benchmarks/multijob_gcp16.py [--time-limit 90] [--save]

``--save`` writes benchmarks/results/multijob_gcp16.md (headed by the command and the commit).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import planner  # noqa: E402
from planner.problem.jobs import MultiInstance  # noqa: E402
from planner.scoring.multievaluate import multievaluate  # noqa: E402
from planner.solvers.multijob import baselines as B  # noqa: E402
from planner.solvers.multijob import references  # noqa: E402
from _results import commit, save  # noqa: E402


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
    ap.add_argument("--save", action="store_true", help="write benchmarks/results/multijob_gcp16.md")
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
    load0 = os.getloadavg()
    lines = [f"# Several jobs on gcp-16: the column planner vs the baselines (`--time-limit {args.time_limit:g}`)", "",
             f"Code at commit {commit()}. Mix: llama2-70b (`big`, gcp-16's workload) and gpt3-1.3b (`small`, the "
             "same batch and sequence), 100 iterations each, weight 1, objective maxmin (min_j rho_j / w_j). "
             "References tput*: greedy on each job alone on the whole cluster: "
             + ", ".join(f"{k} {v:.6g} tokens/s" for k, v in refs.items()) + ". Each baseline planned by greedy; "
             "every row scored by multievaluate, reserved (the exact model) and shared (pessimistic).", "",
             "| method | maxmin, reserved | maxmin, shared | rho big | rho small | GPUs big | GPUs small | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['reserved']:.4f} | {r['shared']:.4f} | {r['rho']['big']:.4f} | "
                     f"{r['rho']['small']:.4f} | {r['gpus']['big']} | {r['gpus']['small']} | {r['time_s']:.1f} |")
    ex = info.model_extra
    lines += ["", f"multiplan: status {info.status}, bound {info.bound:.6g}, gap {info.gap:.4g}, master_lp "
              f"{ex.get('master_lp'):.6g}, {ex.get('columns')} columns, {ex.get('rounds')} rounds, "
              f"{ex.get('plans_made')} plans.", "",
              "Sequential (each job alone on the whole cluster, one after the other; not a multi-plan): "
              + "; ".join(f"{r['name']} completes at {r['completion_s'] / 3600:.4g} h" for r in seq) + ".", "",
              f"Load average (1, 5, 15 min) at the end: {' '.join(f'{x:.2f}' for x in load0)}, on "
              f"{os.cpu_count()} CPUs."]
    print("\n".join(lines))
    if args.save:
        print(f"written to {save('multijob_gcp16', lines)}")


if __name__ == "__main__":
    main()
