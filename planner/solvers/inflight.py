"""In-flight limits per stage: 1f1b with a deeper warm-up where it pays.

1f1b lets stage j hold at most ``w_j = min(m, S - j)`` micro-batches.  When a
slow WAN boundary sits behind stage j, that limit is what sets the period
(SPEC 7's windows: ``W_{j,k} / (w_j - w_k + 1)``), and raising ``w_j``, at
the price of ``w_j`` micro-batches of activations, shortens it.
:func:`tune_inflight` searches the per-stage limits ``w`` (stage j's op list
is :func:`planner.problem.oplists.inflight_op_list`: ``w_j - 1`` warm-up
forwards, then forward/backward pairs): first the smallest limits that bring
every window's period down to a target (:func:`limits_for_period`, a ladder
of targets from the slowest stage's compute up), then a coordinate descent
from the fastest of them, every
candidate checked with :func:`check_plan` (activation memory grows with
``w_j``) and scored by the exact simulation.  The schedule stays in the
family SPEC 7 was derived for: each stage keeps ``w_j`` in flight from its
warm-up to its drain, so T_est with ``w_j`` = the schedule's largest
in-flight count describes it as well as it describes 1f1b (on aws-multiregion
the CP-SAT plan's 1f1b simulates at 42.58 s; with ``w = (4, 1)`` it
simulates at 34.32 s and T_est is 34.32 s).

:func:`planner.solvers.greedy.lean_plans` goes the other way: plans of shapes that fit GPU memory
only with fewer micro-batches in flight than 1f1b holds (down to one per
stage), which no search over named schedules can return; on a slow WAN the
best of them may keep the whole pipeline inside one domain.

Example
-------
>>> better = tune_inflight(instance, plan, time_limit=5)             # doctest: +SKIP
>>> better.solver.inflight, better.solver.start_s, better.solver.end_s  # doctest: +SKIP
([4, 1], 42.58, 34.32)
"""

from __future__ import annotations

import logging
import math
import time

from ..problem.oplists import format_op, inflight_counts, inflight_op_list
from ..problem.plan import ExplicitSchedule, Plan
from . import stop
import numpy as np

from ..scoring.evaluator import Evaluator, simulated_score

log = logging.getLogger("planner.inflight")

#: micro-batch counts up to this try every limit 1..m at each stage; above it a
#: geometric ladder plus the neighbours of the current limit
_EVERY = 48
#: default ``faithful``: the simulation may exceed T_est by 1% (issue 12's goal)
FAITHFUL = 0.01
#: target periods of the seeds, in units of the slowest stage's compute per micro-batch
_TARGETS = (1.0, 1.05, 1.1, 1.2, 1.35, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)


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


def _rounds(instance, plan: Plan):
    """(c, rounds): compute per micro-batch of each stage (s) and the round trip
    ``2 (x + l)`` of each boundary, the largest over replicas (s), base network."""
    ev = Evaluator(instance, plan)
    comm = ev.fig.comm_groups(ev.one_state(None, "tune_inflight"))  # the max over groups is over replicas
    return ev.fig.c, (2.0 * (comm.x[0] + comm.l[0])).max(axis=0)


def limits_for_period(c, rounds, tau: float, cap) -> list[int]:
    """The smallest in-flight limits under which every window of SPEC 7 has a
    period of at most ``tau`` seconds: ``w_j >= w_k - 1 + W_{j,k} / tau`` for
    every k > j, from the last stage (``w = 1``) backwards, each capped by
    ``cap[j]`` (where the cap binds, the period stays above ``tau``).

    >>> limits_for_period([1.0, 1.0], [4.0], tau=1.0, cap=[16, 16])  # W_01 = 6 s
    [6, 1]
    """
    S = len(c)
    w = [1] * S
    for j in range(S - 2, -1, -1):
        need, W = 1.0, float(c[j])
        for k in range(j + 1, S):
            W += float(rounds[k - 1]) + float(c[k])
            need = max(need, w[k] - 1 + W / tau)
        w[j] = int(min(cap[j], max(1, math.ceil(need - 1e-9))))
    return w


def tune_inflight(instance, plan: Plan, time_limit: float | None = 10.0, max_evals: int | None = None,
                  caps=None, faithful: float | None = FAITHFUL) -> Plan:
    """``plan`` with the per-stage in-flight limits that simulate fastest (see the
    module docstring); ``plan`` itself when none beats its own schedule, or when
    the instance takes no explicit op lists (``options.explicit_schedules``).

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
    if not instance.options.explicit_schedules:  # the limits are written as explicit op lists
        return plan
    start = simulated_score(instance, plan)
    if start is None or S < 2 or m < 2:
        return plan
    cap = [m] * S if caps is None else [max(1, min(m, int(c))) for c in caps]
    w = [min(x, c) for x, c in zip(inflight_counts(plan.schedule_spec, S, m), cap)]
    memo: dict[tuple[int, ...], float | None] = {}
    kept = [math.inf, None]  # the fastest faithful limits seen: (score, w)

    def score(v) -> float | None:
        """The simulated score of limits ``v``; the descent walks on it, faithful or
        not (a faithful optimum may lie beyond unfaithful steps), and the fastest
        faithful limits seen are what is returned."""
        key = tuple(v)
        if key not in memo:
            cand = plan.model_copy(update={"schedule": inflight_schedule(v, m), "predicted": None, "solver": None})
            got = simulated_score(instance, cand, fidelity=True)
            memo[key] = None if got is None else got[0]
            if got is not None and (faithful is None or got[1] <= 1 + faithful) and got[0] < kept[0]:
                kept[:] = [got[0], list(v)]
        return memo[key]

    # seeds: the plan's own limits and, for a ladder of target periods, the
    # smallest limits that reach them; the descent starts from the fastest
    c, rounds = _rounds(instance, plan)
    seeds = [w] + [limits_for_period(c, rounds, f * float(np.max(c)), cap) for f in _TARGETS]
    scored = []
    for i, v in enumerate(seeds):  # the plan's own limits always; the others while time is left
        if i and (time.perf_counter() >= deadline or stop.requested()
                  or (max_evals is not None and len(memo) >= max_evals)):
            break
        scored.append((score(v), i))
    best, i = min(((v, i) for v, i in scored if v is not None), default=(None, 0))
    w = list(seeds[i])
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
    best, w = kept
    if not best < start * (1 - 1e-12):
        return plan
    log.info("inflight: %.6g -> %.6g with limits %s (%d simulations)", start, best, w, len(memo))
    info = plan.solver.model_copy(update={"inflight": w, "start_s": start, "end_s": best}) if plan.solver else None
    return plan.model_copy(update={"schedule": inflight_schedule(w, m), "predicted": None, "solver": info})

