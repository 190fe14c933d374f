"""Issue 25's goals on the packaged instances with several GPU types: ``auto`` on the
mixed fleet against ``auto`` on each type alone and against the type-blind plan.

For each packaged mixed instance (``edwc-mixed``, ``aws-a100-h100``, ``tiny-mixed``):

* **mixed**: ``auto`` at ``--time-limit`` seconds on the instance;
* **one type**: for each GPU type u, ``auto`` at the same limit on the instance with
  the other types' domains removed (and their links): the single-type baseline.  The
  goal: mixed no slower than every baseline;
* **type-blind**: ``auto`` at the same limit on the instance with every domain given
  the fastest type's speed figures (peak, mfu, NVLink, unit overhead) and its own
  memory (``tests/gpu_types_instances.type_blind``), its plan then simulated on the
  real types.  The goal: mixed at least 15% faster (T_mixed <= 0.85 T_blind) on the
  East-Data-West-Computing or the cloud instance.

Every T is the evaluator's simulated iteration time (SPEC v3, base network); the
cost instance's objective (cost per iteration) is reported for it too.

    python benchmarks/gpu_types_goals.py --time-limit 60   # writes benchmarks/results/gpu_types_goals.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import commit, save  # noqa: E402
from gpu_types_instances import type_blind  # noqa: E402
from planner import Evaluator, Instance, load_instance, plan  # noqa: E402
from planner.problem.errors import InfeasibleError, InputError  # noqa: E402
from planner.problem.subfleet import subfleet  # noqa: E402

MIXED = ("edwc-mixed", "aws-a100-h100", "tiny-mixed")
GOAL_BLIND = 0.85  # mixed T over the type-blind plan's T: at most this on EDWC or the cloud instance


def only_type(instance: Instance, u: int) -> Instance:
    """``instance`` on the domains of GPU type ``instance.gpu_types[u]`` alone (and their links)."""
    gpu = instance.gpu_types[u].name
    return subfleet(instance, [d.name for d, t in zip(instance.domains, instance.domain_type) if t == u],
                    name=f"{instance.name}.{gpu}")


def simulated(instance, p) -> tuple[float, float] | None:
    """(T s, objective) of ``p`` on ``instance``, or None when the evaluator refuses it."""
    ev = Evaluator(instance, p)
    if ev.violations():
        return None
    t = float(ev.iteration_times()[0])
    return t, float(ev.objective(t))


def run_auto(instance, limit: float, seed: int):
    """``auto``'s plan (None: no plan) and its wall seconds."""
    t0 = time.perf_counter()
    try:
        p = plan(instance, "auto", time_limit=limit, seed=seed)
    except InfeasibleError:
        p = None
    return p, time.perf_counter() - t0


def fmt(x: tuple[float, float] | None, cost: bool) -> str:
    if x is None:
        return "no plan"
    return f"{x[0]:.6g}" + (f" (cost {x[1]:.6g})" if cost else "")


def shape(p) -> str:
    return "-" if p is None else f"R={p.replicas} S={p.num_stages} tp={p.tp} b={p.micro_batch_size}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per auto run (default 60)")
    ap.add_argument("--instances", default=",".join(MIXED))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    rows, verdicts = [], []
    for name in args.instances.split(","):
        inst = load_instance(name)
        cost = inst.options.objective == "cost"
        key = 1 if cost else 0  # compare the instance's objective
        p, wall = run_auto(inst, args.time_limit, args.seed)
        mixed = None if p is None else simulated(inst, p)
        rows.append(f"| {name} | mixed ({inst.gpu_counts}) | {fmt(mixed, cost)} | {shape(p)} | {wall:.1f} | |")
        print(rows[-1], file=sys.stderr, flush=True)
        worse = []
        for u in inst.types_used:
            try:
                sub = only_type(inst, u)
            except InputError as err:  # e.g. the WAN without the other types' domains is not connected
                rows.append(f"| {name} | {inst.gpu_types[u].name} only | not an instance: {err} | - | - | |")
                print(rows[-1], file=sys.stderr, flush=True)
                continue
            q, wall = run_auto(sub, args.time_limit, args.seed)
            one = None if q is None else simulated(sub, q)
            ratio = "-" if one is None or mixed is None else f"{mixed[key] / one[key]:.3f}"
            if one is not None and (mixed is None or mixed[key] > one[key] * (1 + 1e-9)):
                worse.append(inst.gpu_types[u].name)
            rows.append(f"| {name} | {inst.gpu_types[u].name} only ({sub.gpu_counts}) | {fmt(one, cost)} | "
                        f"{shape(q)} | {wall:.1f} | mixed / this {ratio} |")
            print(rows[-1], file=sys.stderr, flush=True)
        blind_inst = type_blind(inst)
        b, wall = run_auto(blind_inst, args.time_limit, args.seed)
        blind = None if b is None else simulated(inst, b)
        r_blind = None if blind is None or mixed is None else mixed[key] / blind[key]
        rows.append(f"| {name} | type-blind plan, simulated on the real types | {fmt(blind, cost)} | {shape(b)} | "
                    f"{wall:.1f} | mixed / this {'-' if r_blind is None else f'{r_blind:.3f}'} |")
        print(rows[-1], file=sys.stderr, flush=True)
        verdicts.append((name, worse, r_blind))
    no_slower = [n for n, worse, _ in verdicts if not worse]
    best_blind = [(n, r) for n, _, r in verdicts if r is not None and n != "tiny-mixed"]
    met_blind = [n for n, r in best_blind if r <= GOAL_BLIND]
    lines = [f"# GPU types: auto on the mixed fleet vs each type alone vs the type-blind plan "
             f"(`--time-limit {args.time_limit:g}`)", "",
             f"Code at commit {commit()}. T: the evaluator's simulated iteration time (s, SPEC v3, base network); "
             "cost instances also show the cost per iteration, which is their objective and what the ratios compare.",
             "", "| instance | fleet | T (s) | auto's shape | wall s | ratio |", "|---|---|---|---|---|---|", *rows, "",
             f"No slower than every single-type baseline: {len(no_slower)} of {len(verdicts)} "
             f"({', '.join(no_slower) or 'none'})"
             + "".join(f"; {n} slower than {', '.join(w)} alone" for n, w, _ in verdicts if w) + ".",
             f"At least {100 * (1 - GOAL_BLIND):.0f}% faster than the type-blind plan on EDWC or the cloud instance: "
             + ("met on " + ", ".join(met_blind) if met_blind else "not met")
             + " (" + ", ".join(f"{n} {r:.3f}" for n, r in best_blind) + ").", "",
             f"Load average (1, 5, 15 min) before: {' '.join(f'{x:.2f}' for x in load0)}, after: "
             f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, on {os.cpu_count()} CPUs."]
    print(save("gpu_types_goals", lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
