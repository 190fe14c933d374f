"""The typed RL policy (models/rl/types.zip, policy format 3) against greedy on
instances with several GPU types (issue 25, SPEC v3 (g)).

For each instance: greedy's simulated T; the RL solver's (``planner.plan(...,
solver="rl")``: the shipped typed policy, 16 samples, seed 0, which keeps greedy's
plan when every plan of the policy simulates slower) and which plan it returned;
and the policy's own best plan (the same search without greedy's plan; the typed
layer cut of its placements still tried) and its T over greedy's.  Every T is the evaluator's (SPEC v3, base network).

Instances: the ones types.zip trained on (the packaged tiny-mixed, edwc-mixed,
aws-a100-h100 and the four under models/rl/types-instances/) and held-out ones,
never seen in training: ``two-speeds`` and ``tiny-3dc+alpha`` (tests/gpu_types_instances.py),
``edwc-llama2-13b+h100`` (benchmarks/gpu_types.py), and a generated instance
(``planner generate --domains 8 --gpus 256 --model llama2-7b --gpu-types 2 --seed 3``).

    python benchmarks/rl_types.py            # writes benchmarks/results/rl_types.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _results import commit, save  # noqa: E402
from gpu_types import edwc_h100  # noqa: E402
from gpu_types_instances import tiny_mixed, two_speeds  # noqa: E402
from planner import Evaluator, load_instance, plan  # noqa: E402
from planner.problem.synthetic import generate_instance  # noqa: E402
from planner.solvers.rl import Replanner, shipped_policy  # noqa: E402

TRAIN = ROOT / "models" / "rl" / "types-instances"


def generated(domains, gpus, seed, model, types):
    """``planner generate --domains D --gpus G --seed S --model M --gpu-types T``, loaded."""
    import tempfile

    from planner.problem.io import write_instance

    with tempfile.TemporaryDirectory() as tmp:
        data = generate_instance(domains, gpus, seed, model=model, gpu_types=types)
        return write_instance(data, ["generated for benchmarks/rl_types.py"], Path(tmp) / "gen.toml")
TRAINED = {"tiny-mixed": lambda: load_instance("tiny-mixed"), "edwc-mixed": lambda: load_instance("edwc-mixed"),
           "aws-a100-h100": lambda: load_instance("aws-a100-h100"),
           **{p.stem: (lambda p=p: load_instance(p)) for p in sorted(TRAIN.glob("*.toml"))}}
HELD_OUT = {"two-speeds": two_speeds, "tiny-3dc+alpha": lambda: tiny_mixed("tiny-3dc", ("alpha",)),
            "edwc-llama2-13b+h100": edwc_h100,
            "gen-8dc-2types-s3": lambda: generated(8, 256, 3, "llama2-7b", 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", help="a typed policy (default: the shipped models/rl/types.zip)")
    ap.add_argument("--only", nargs="*", help="these instances only (a check; the results file lists all)")
    args = ap.parse_args(argv)
    policy = Path(args.policy).resolve() if args.policy else shipped_policy("", typed=True)
    lines = ["# The typed RL policy vs greedy on instances with several GPU types", "",
             f"Code at commit {commit()}; policy {policy.relative_to(ROOT) if policy.is_relative_to(ROOT) else policy}. Simulated iteration time T (s, the "
             "evaluator, SPEC v3, base network). rl: `plan(instance, solver=\"rl\")` (16 samples, seed 0; greedy's "
             "plan kept when every plan of the policy is slower); policy alone: the same search without greedy's "
             "plan (each placement still tried with the layer cut balanced for its types). Ratios are T over "
             "greedy's T (below 1: faster than greedy).", "",
             "| instance | set | GPUs | greedy T | rl T | rl / greedy | rl's plan | policy alone / greedy | rl s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, table in (("trained", TRAINED), ("held out", HELD_OUT)):
        for name, make in table.items():
            if args.only and name not in args.only:
                continue
            inst = make()
            g = plan(inst, "greedy").predicted.iteration_time_s
            t0 = time.perf_counter()
            r = plan(inst, "rl", seed=0, policy=str(policy))
            r_s = time.perf_counter() - t0
            T = r.predicted.iteration_time_s
            rep = Replanner(inst, policy, seed=0, samples=16)
            rep.greedy = None
            own = rep()
            own_T = float(Evaluator(inst, own).iteration_times()[0])
            how = r.solver.model_extra["rl_found_by"]
            how = "greedy's" if how.startswith("greedy") else f"policy's ({how})"
            lines.append(f"| {name} | {kind} | {inst.gpu_counts} | {g:.6g} | {T:.6g} | {T / g:.3f} | {how} | "
                         f"{own_T / g:.3f} | {r_s:.1f} |")
            print(lines[-1], flush=True)
    lines += ["", f"Load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)."]
    if args.only or args.policy:
        print("\n".join(lines))  # a check: the results file is written by the full run only
        return 0
    print(save("rl_types", lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
