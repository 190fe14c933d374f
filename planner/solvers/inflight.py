"""In-flight limits per stage: 1f1b with a deeper warm-up where it pays.

1f1b lets stage j hold at most ``w_j = min(m, S - j)`` micro-batches.  When a
slow WAN boundary sits behind stage j, that limit is what sets the period
(SPEC 7's windows: ``W_{j,k} / (w_j - w_k + 1)``), and raising ``w_j``, at
the price of ``w_j`` micro-batches of activations, shortens it.
:func:`tune_inflight` searches the per-stage limits ``w`` (stage j's op list
is :func:`planner.problem.oplists.inflight_op_list`: ``w_j - 1`` warm-up
forwards, then forward/backward pairs) by coordinate descent, every
candidate checked with :func:`check_plan` (activation memory grows with
``w_j``) and scored by the exact simulation.  The schedule stays in the
family SPEC 7 was derived for: each stage keeps ``w_j`` in flight from its
warm-up to its drain, so T_est with ``w_j`` = the schedule's largest
in-flight count describes it as well as it describes 1f1b (on aws-multiregion
the CP-SAT plan's 1f1b simulates at 42.58 s; with ``w = (4, 1)`` it
simulates at 34.32 s and T_est is 34.32 s).

Example
-------
>>> better = tune_inflight(instance, plan, time_limit=5)             # doctest: +SKIP
>>> better.solver.inflight, better.solver.start_s, better.solver.end_s
([4, 1], 42.58, 34.32)
"""

from __future__ import annotations

import logging
import math
import time

from ..problem.oplists import format_op, inflight_counts, inflight_op_list
from ..problem.plan import ExplicitSchedule, Plan
from . import stop
from ..scoring.evaluator import simulated_score

log = logging.getLogger("planner.inflight")

#: micro-batch counts up to this try every limit 1..m at each stage; above it a
#: geometric ladder plus the neighbours of the current limit
_EVERY = 48
#: default ``faithful``: the simulation may exceed T_est by 1% (issue 12's goal)
FAITHFUL = 0.01


def inflight_schedule(w, micro_batches: int) -> ExplicitSchedule:
    """The explicit schedule whose stage j runs 1f1b with in-flight limit ``w[j]``.

    >>> inflight_schedule([2, 1], 3).ops
    [['F0', 'F1', 'B0', 'F2', 'B1', 'B2'], ['F0', 'B0', 'F1', 'B1', 'F2', 'B2']]
    """
    return ExplicitSchedule(ops=[[format_op(op) for op in inflight_op_list(int(wj), micro_batches)] for wj in w])


def _ladder(w: int, m: int) -> list[int]:
    if m <= _EVERY:
        return list(range(1, m + 1))
    out = {1, m} | {w + d for d in (-2, -1, 1, 2)}
    v = 2
    while v < m:
        out |= {v, v + v // 2}
        v *= 2
    return sorted(x for x in out if 1 <= x <= m)


def tune_inflight(instance, plan: Plan, time_limit: float | None = 10.0, max_evals: int | None = None,
                  caps=None, faithful: float | None = FAITHFUL) -> Plan:
    """``plan`` with the per-stage in-flight limits that simulate fastest (see the
    module docstring); ``plan`` itself when none beats its own schedule.

    ``time_limit`` seconds of wall clock and ``max_evals`` simulations bound the
    search (either may be None, not both).  ``caps`` limits ``w_j`` per stage
    (e.g. :func:`planner.solvers.schedule_opt.budget_caps`; activation memory is
    checked in any case).  ``faithful``: candidates whose simulation exceeds their
    T_est by more than this fraction are passed over, so that T_est, which bounds
    and gaps are about, describes the returned plan (it can be optimistic when
    stages hold all m micro-batches: SPEC 7 drops their windows); None accepts
    them.  Ties go to the smaller limit (less
    activation memory).  Placement, partition and shape are never changed.  The
    result carries ``plan``'s ``SolverInfo`` with ``inflight`` (the limits),
    ``start_s`` and ``end_s`` (simulated seconds, or cost per iteration for a
    cost instance) added; its ``predicted`` figures are cleared for the caller's
    ``finish`` to fill.
    """
    if time_limit is None and max_evals is None:
        raise ValueError("tune_inflight needs a time_limit or max_evals")
    deadline = time.perf_counter() + time_limit if time_limit is not None else math.inf
    S, m = plan.num_stages, plan.num_micro_batches
    start = simulated_score(instance, plan)
    if start is None or S < 2 or m < 2:
        return plan
    cap = [m] * S if caps is None else [max(1, min(m, int(c))) for c in caps]
    w = [min(x, c) for x, c in zip(inflight_counts(plan.schedule_spec, S, m), cap)]
    memo: dict[tuple[int, ...], float | None] = {}

    def score(v) -> float | None:
        key = tuple(v)
        if key not in memo:
            cand = plan.model_copy(update={"schedule": inflight_schedule(v, m), "predicted": None, "solver": None})
            memo[key] = simulated_score(instance, cand, faithful=faithful)
        return memo[key]

    best = score(w)
    if best is None:
        best = math.inf
    improved = True
    while improved:
        improved = False
        for j in range(S):
            for v in _ladder(w[j], cap[j]):
                if v == w[j]:
                    continue
                if time.perf_counter() >= deadline or stop.requested() or (
                        max_evals is not None and len(memo) >= max_evals):
                    improved = False
                    break
                trial = w[:j] + [v] + w[j + 1:]
                s = score(trial)
                if s is None:
                    continue
                if s < best * (1 - 1e-12) or (s <= best * (1 + 1e-12) and v < w[j]):
                    improved = improved or s < best * (1 - 1e-12)
                    best, w = min(best, s), trial
            else:
                continue
            break
    if not best < start * (1 - 1e-12):
        return plan
    log.info("inflight: %.6g -> %.6g with limits %s (%d simulations)", start, best, w, len(memo))
    info = plan.solver.model_copy(update={"inflight": w, "start_s": start, "end_s": best}) if plan.solver else None
    return plan.model_copy(update={"schedule": inflight_schedule(w, m), "predicted": None, "solver": info})
