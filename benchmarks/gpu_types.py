"""Greedy, anneal, hier and auto on instances with several GPU types (issue 25,
SPEC v3 (g)), against the type-blind plan.

For each instance: greedy's plan and its simulated T; the *type-blind* plan
(greedy on the instance with every domain given the fastest type's speed
figures and its own memory, ``tests/gpu_types_instances.type_blind``) simulated
on the real types, and greedy's T over it; then anneal, hier and auto at
``--time-limit`` seconds (simulated T; auto's engines that plan one GPU type are
left out on a mixed instance).  Every T is the evaluator's (SPEC v3).

Instances (synthetic: derived from packaged ones for this comparison):
``two-speeds`` (two GPUs, speed ratio 2, 12 equal units), ``tiny-3dc+gamma``
(tiny-3dc, gamma on "toy-2tf": twice the toy GPU's speed, 60 MB),
``tiny-line+b``, and ``edwc-llama2-13b+h100`` (edwc-llama2-13b with
zhangjiakou and horinger on an H100 SXM: 989 TFLOP/s dense bf16 and 80 GB from
NVIDIA's datasheet, NVLink 900 GB/s bidirectional = 3600 Gbit/s one way; the
packaged A100's mfu 0.45 for both).

    python benchmarks/gpu_types.py --time-limit 10     # writes benchmarks/results/gpu_types.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _results import commit, save  # noqa: E402
from gpu_types_instances import TOY_2TF, tiny_mixed, two_speeds, type_blind  # noqa: E402
from planner import Evaluator, Instance, load_instance, plan  # noqa: E402

H100 = {"name": "H100-SXM", "peak_tflops": 989.0, "memory_gb": 80.0, "mfu": 0.45, "nvlink_bandwidth_gbps": 3600.0}


def edwc_h100() -> Instance:
    return tiny_mixed("edwc-llama2-13b", ("zhangjiakou", "horinger"), gpu=H100)


INSTANCES = {"two-speeds": two_speeds, "tiny-3dc+gamma": lambda: tiny_mixed("tiny-3dc", ("gamma",), gpu=TOY_2TF),
             "tiny-line+b": lambda: tiny_mixed("tiny-line", ("b",), gpu=TOY_2TF), "edwc-llama2-13b+h100": edwc_h100}


def simulated(instance, p) -> float | None:
    ev = Evaluator(instance, p)
    return None if ev.violations() else float(ev.iteration_times()[0])


def shape(p) -> str:
    return f"R={p.replicas} S={p.num_stages} tp={p.tp} b={p.micro_batch_size}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=10.0)
    args = ap.parse_args(argv)
    lines = [f"# GPU types: greedy, anneal, hier, auto vs the type-blind plan (`--time-limit {args.time_limit:g}`)",
             "", f"Code at commit {commit()}. Simulated iteration time T (s, the evaluator, SPEC v3). "
             "type-blind: greedy on the instance with every domain at the fastest type's speed (own memory), "
             "simulated on the real types; greedy/blind = greedy's T over it.", "",
             "| instance | GPUs | greedy T | type-blind T | greedy/blind | anneal T | hier T | auto T | auto shape | greedy s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, make in INSTANCES.items():
        inst = make()
        t0 = time.perf_counter()
        g = plan(inst, "greedy")
        g_s = time.perf_counter() - t0
        T = g.predicted.iteration_time_s
        blind = simulated(inst, plan(type_blind(inst), "greedy"))
        rest = {s: plan(inst, s, time_limit=args.time_limit, seed=0) for s in ("anneal", "hier", "auto")}
        ratio = "-" if blind is None else f"{T / blind:.3f}"
        lines.append(f"| {name} | {inst.gpu_counts} | {T:.6g} | {'infeasible' if blind is None else f'{blind:.6g}'} "
                     f"| {ratio} | " + " | ".join(f"{rest[s].predicted.iteration_time_s:.6g}" for s in rest)
                     + f" | {shape(rest['auto'])} | {g_s:.2f} |")
        print(lines[-1], flush=True)
    lines += ["", f"Load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)."]
    print(save("gpu_types", lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
