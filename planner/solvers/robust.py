"""Robust planning for the exact planners: plan against K sampled network states.

The greedy planner scores every candidate over the K states directly
(``greedy(instance, robust=K, robust_stat=...)``).  The MILP and CP-SAT
models hold one network state; making them scenario-robust exactly would
copy every communication variable K times.  Instead :func:`robust_plan`

1. samples the K states (:func:`planner.solvers.greedy.sample_states`, seeded: a
   generated week of WAN drift);
2. builds the *statistic network*: per link, the mean bandwidth and
   latency over the states (``stat="mean"``), or a pessimistic one, the
   5th percentile of bandwidth and the 95th of latency (``stat="p95"``);
3. solves that instance with the exact solver;
4. scores its plan and the robust greedy plan by the statistic of T_est
   (or its cost) over the K states with the vectorised evaluator, and
   returns the better one.

Each (objective, bound, gap) the plan carries is of one network, so the gap
follows from the objective and the bound beside it:

- ``objective``, ``bound``, ``gap`` and ``status``: the *base* network (the
  instance as given): the evaluator's objective, the instance's lower bound
  (:func:`planner.scoring.bounds.objective_lower_bound`; the solver's bound
  holds for the statistic network only) and ``optimal`` never claimed there
  (``feasible``);
- ``robust_objective``, ``robust_bound``, ``robust_gap`` and
  ``robust_status``: the *statistic* network: the evaluator's objective of the
  returned plan there, the exact solver's bound there (at most that
  objective) and its status (``feasible`` when the robust greedy plan won);
  ``robust_network`` says which network that is.

``plan.solver`` also records ``robust_k``, ``robust_stat``, ``robust_score``
(the statistic of T_est over the K states, a third measure with no bound)
and ``robust_source``.

Example
-------
>>> p = robust_plan(inst, "milp", k=64, stat="p95", time_limit=30)    # doctest: +SKIP
>>> p.solver.robust_score
12.7
"""

from __future__ import annotations

import numpy as np

from ..scoring.bounds import objective_lower_bound
from ..scoring.evaluator import Evaluator
from .greedy import greedy, robust_score, sample_states
from ..problem.network import NetworkStates, instance_at
from ..problem.plan import Plan


def statistic_instance(instance, states, stat: str = "mean"):
    """``instance`` with every link at the per-link statistic of ``states``."""
    if stat == "mean":
        bw, lat = states.bandwidth_gbps.mean(axis=0), states.latency_ms.mean(axis=0)
    elif stat == "p95":
        bw = np.percentile(states.bandwidth_gbps, 5, axis=0)
        lat = np.percentile(states.latency_ms, 95, axis=0)
    else:
        raise ValueError("robust statistic is 'mean' or 'p95'")
    return instance_at(instance, NetworkStates(bw[None, :], lat[None, :]), 0)  # down links keep a trickle


def score_over(instance, plan: Plan, states, stat: str) -> float:
    """The statistic over ``states`` of T_est (s), or of the cost with T_est for cost instances."""
    ev = Evaluator(instance, plan)
    te = ev.estimate_times(states)
    return robust_score(ev.objective(te), stat)


def robust_plan(instance, solve, k: int, stat: str = "mean", seed: int = 0, **options) -> Plan:
    """Plan with ``solve`` (a solver function, ``planner.SOLVERS[name]``) against ``k``
    sampled network states; see the module docstring."""
    states = sample_states(instance, k, seed)
    stat_inst = statistic_instance(instance, states, stat)
    exact = solve(stat_inst, seed=seed, **options)
    solver = exact.solver.name
    exact = Plan.build(exact.bounds(), exact.placement, tp=exact.tp, micro_batch_size=exact.micro_batch_size,
                       instance=instance, schedule=exact.schedule).model_copy(update={"solver": exact.solver})
    robust_greedy = greedy(instance, robust=k, robust_stat=stat, seed=seed)
    scored = sorted(((score_over(instance, p, states, stat), i, p) for i, p in enumerate((exact, robust_greedy))),
                    key=lambda t: t[:2])
    best_score, _, best = scored[0]
    claims = statistic_claims(stat_inst, best, exact.solver, best is exact, options.get("gap") or 1e-3)
    what = ("the mean network (per link, the mean bandwidth and latency" if stat == "mean" else
            "the p95 network (per link, the 5th-percentile bandwidth and the 95th-percentile latency")
    status = exact.solver.status
    info = exact.solver.model_copy(update={
        "status": "feasible" if status.startswith("optimal") else status,  # optimal on another network
        "objective": None, "bound": objective_lower_bound(instance), "gap": None,  # the base network's
        "robust_k": k, "robust_stat": stat, "robust_score": best_score,
        "robust_source": solver if best is exact else "greedy",
        "robust_network": f"{what} over {k} sampled states, seed {seed})", **claims})
    return best.model_copy(update={"solver": info})


def statistic_claims(stat_inst, plan: Plan, info, own: bool, tolerance: float) -> dict:
    """``robust_status``, ``robust_objective``, ``robust_bound``, ``robust_gap`` of
    ``plan`` on the statistic network ``stat_inst``: the evaluator's objective
    there, ``info.bound`` (the exact solver's, on that network) capped at that
    objective, the gap from the two, and ``info.status`` when the plan is the
    solver's own (``own``) and, for an ``optimal`` status, the gap is within
    ``tolerance`` (the requested relative gap); else ``feasible``."""
    e = Evaluator(stat_inst, plan).evaluate()
    objective = e.objective(stat_inst.options.objective)
    bound = None if info.bound is None else min(info.bound, objective)
    gap = None if bound is None or not objective > 0 else (objective - bound) / objective
    status = info.status if own else "feasible"
    if status.startswith("optimal") and (gap is None or gap > tolerance * (1 + 1e-9)):
        status = "feasible"
    return {"robust_status": status, "robust_objective": objective, "robust_bound": bound, "robust_gap": gap}
