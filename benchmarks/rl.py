"""Placement RL against greedy on every packaged instance (issue 14, part 3).

    .venv/bin/python benchmarks/rl.py [--seed 0] [--samples 16] [--name rl] [INSTANCE ...]

Static, base network.  For each instance: greedy's plan, and the RL planner
(``planner plan --solver rl``: the shipped policy under ``models/rl/``) —
its deterministic episode, one deterministic episode on each of the menu's
shapes and orders, and ``--samples`` sampled episodes, the best by exact
simulation — plus two ablations that say where the figures come from:

* ``rl deterministic``: the policy's single most likely episode (no search);
* ``prior only``: the same search with the *untrained* network, whose only
  preference is the initial prior (the candidate with the lowest partial
  ``T_est`` first, greedy's best shape first).

Every plan is scored by the evaluator: simulated iteration time (s) and, on
cost instances, the cost per iteration (the objective both sides optimise).
Writes benchmarks/results/NAME.md (command, commit, the policy's sidecar)
and NAME.csv, and says which instances meet "within 5% of greedy".
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

from _results import RESULTS, commit, save  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from planner import load_instance, plan
from planner.problem.io import available

GOAL = 0.05  # within 5% of greedy




def untrained(seed: int):
    """A fresh MaskablePPO with the planner's network: only the initial prior."""
    import torch
    from sb3_contrib import MaskablePPO

    from planner.solvers.rl_env import PlacementEnv
    from planner.solvers.rl_net import SlotPolicy, slot_policy_kwargs

    torch.set_num_threads(1)
    env = PlacementEnv(load_instance("tiny-3dc"), base_prob=1.0)
    return MaskablePPO(SlotPolicy, env, policy_kwargs=slot_policy_kwargs(), seed=seed, device="cpu")


def objective(p, cost: bool) -> float:
    return p.predicted.cost_per_iteration if cost else p.predicted.iteration_time_s


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("instances", nargs="*")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--name", default="rl")
    args = ap.parse_args(argv)
    from planner.solvers.registry import finish
    from planner.solvers.rl import Replanner, shipped_policy

    code = commit()  # before any results file changes the tree
    names = args.instances or available("instances")
    prior = untrained(args.seed)
    rows, policies = [], {}
    for name in names:
        inst = load_instance(name)
        cost = inst.options.objective == "cost"
        g = plan(inst, solver="greedy")
        t0 = time.perf_counter()
        p = plan(inst, solver="rl", seed=args.seed, samples=args.samples)
        wall = time.perf_counter() - t0
        pol = shipped_policy(name)
        policies[str(pol.relative_to(pol.parents[2]))] = json.loads(Path(str(pol) + ".json").read_text())
        det = finish(inst, Replanner(inst, str(pol), seed=args.seed, per_shape=False)(samples=0), "rl", 0.0)
        pri = finish(inst, Replanner(inst, prior, seed=args.seed, samples=args.samples, per_shape=True)(), "rl", 0.0)
        base = objective(g, cost)
        row = {"instance": name, "objective": inst.options.objective,
               "greedy_s": g.predicted.iteration_time_s, "rl_s": p.predicted.iteration_time_s,
               "greedy_obj": base, "rl_obj": objective(p, cost), "ratio": objective(p, cost) / base,
               "deterministic_ratio": objective(det, cost) / base, "prior_ratio": objective(pri, cost) / base,
               "within_5pct": objective(p, cost) <= base * (1 + GOAL), "rl_wall_s": wall,
               "found_by": p.solver.model_extra.get("rl_found_by"),
               "shape": f"{p.replicas}x{p.num_stages}x{p.tp} b{p.micro_batch_size} {p.schedule_kind}",
               "greedy_shape": f"{g.replicas}x{g.num_stages}x{g.tp} b{g.micro_batch_size} {g.schedule_kind}",
               "same_plan_as_greedy": p.placement == g.placement and p.stages == g.stages}
        rows.append(row)
        print(f"{name:<20} greedy {base:10.4g}  rl {row['rl_obj']:10.4g}  ratio {row['ratio']:.4f}  "
              f"deterministic {row['deterministic_ratio']:.4f}  prior {row['prior_ratio']:.4f}  "
              f"{'met' if row['within_5pct'] else 'MISSED'}  ({wall:.1f} s, {row['found_by']})", flush=True)
    cols = list(rows[0])
    with open(RESULTS / f"{args.name}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, cols)
        w.writeheader()
        w.writerows(rows)
    met = [r["instance"] for r in rows if r["within_5pct"]]
    lines = [f"Code: `{code}` (git describe). Policies: " + "; ".join(
                 f"`{k}` ({v.get('steps')} steps, seed {v.get('seed')}, trained at `{v.get('commit')}` by "
                 f"`{v.get('command')}`)" for k, v in policies.items()), "",
             "Static, base network. Objective: simulated iteration time (s), or cost per iteration (USD) on "
             "cost instances. `ratio` = rl / greedy (the goal: <= 1.05); `deterministic`: the policy's single "
             "most likely episode; `prior only`: the same search with the untrained network (its initial prior "
             "alone).", "",
             "| instance | objective | greedy | rl | ratio | deterministic | prior only | within 5% | rl shape "
             "(R x S x tp) | greedy shape | found by | rl wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['instance']} | {r['objective']} | {r['greedy_obj']:.4g} | {r['rl_obj']:.4g} | "
                     f"{r['ratio']:.4f} | {r['deterministic_ratio']:.4f} | {r['prior_ratio']:.4f} | "
                     f"{'yes' if r['within_5pct'] else 'NO'} | {r['shape']} | {r['greedy_shape']} | {r['found_by']} | "
                     f"{r['rl_wall_s']:.1f} |")
    lines += ["", f"Within 5% of greedy: {len(met)} of {len(rows)} ({', '.join(met) or 'none'}).",
              f"Plans identical to greedy's: {sum(r['same_plan_as_greedy'] for r in rows)} of {len(rows)}."]
    out = save(args.name, lines, argv)
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
