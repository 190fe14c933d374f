"""Simulated annealing over placements and partitions, scored by the exact simulation.

:func:`anneal` starts from a plan and keeps its *shape* (replicas R, tensor
parallelism, micro-batch size, hence the micro-batch count) while it moves:

* ``replica``: one replica's stage j to another domain;
* ``stage``: stage j of every replica to one domain;
* ``swap``: the domains of two (replica, stage) pairs;
* ``boundary``: a stage boundary by 1-3 units (stages stay non-empty);
* ``schedule``: ``1f1b`` <-> ``gpipe`` (among the instance's ``options.schedules``),
  or one stage's in-flight limit ``w_j`` up or down (1f1b with a deeper
  warm-up, :mod:`planner.solvers.inflight`; held as the limits, written as an
  explicit schedule);
* ``split`` / ``merge``: a stage cut in two / two adjacent stages joined
  (memory, ``max_stages`` and GPU capacity decide through :func:`check_plan`);
* with several GPU types (SPEC v3 (g)): ``rebalance``, the partition re-cut for
  the types the placement lands on (:meth:`planner.problem.space.PlanSpace.typed_partition`:
  faster types take more layers), and ``retype``, stage j of every replica moved
  to one domain and the partition re-cut (a stage moved to a faster type only
  pays once its share of the layers follows);
* with ``[options] dp_sync`` (SPEC 11): ``sync``, another of the instance's sync
  options (:func:`planner.problem.dpsync.sync_options`; one a quality row does not
  cover with the placement's groups scores as infeasible), so the option moves
  jointly with the placement.

Every candidate is checked with :func:`planner.scoring.evaluator.check_plan`
(memory, GPUs per domain, routes, schedule, stage count, pins) and, when
feasible, scored by the exact simulation under the base network (the walk
may cross a plan that simulates more than 1% slower than its own T_est, but
the search never returns one, so T_est, which bounds and gaps are about,
describes every plan it returns): the
iteration time in seconds, or the cost per iteration with that time for an
``options.objective == "cost"`` instance (with a sync option, SPEC 11's T_eff / e
or the cost over e).  A worse candidate is accepted with
probability ``exp(-delta / temperature)``; the temperature falls
geometrically from 3% to 0.01% of the start's score over the budget, and
after a long stretch without a new best the walk returns to the best plan.
Scores are memoised, so a revisited plan costs no simulation.

Example
-------
>>> better = anneal(instance, greedy(instance), time_limit=10, seed=0)     # doctest: +SKIP
>>> better.solver.start_s, better.solver.end_s, better.solver.evaluations
(25.15, 19.6, 5210)
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from ..problem.dpsync import sync_options
from ..problem.oplists import inflight_counts
from ..problem.plan import ExplicitSchedule, Plan, SolverInfo, Stage
from ..scoring.evaluator import check_plan, simulated_score
from . import stop
from .inflight import FAITHFUL, inflight_schedule
from .syncchoice import sync_enabled
from .workunits import MOVE_S, sim_seconds

log = logging.getLogger("planner.anneal")

MOVES = ("replica", "stage", "swap", "boundary", "schedule", "split", "merge")
WEIGHTS = (0.24, 0.14, 0.14, 0.24, 0.08, 0.08, 0.08)
# with several GPU types (SPEC v3 (g)) two more: the partition re-cut for the types the
# placement lands on ("rebalance"), and a stage moved to another domain then re-cut ("retype")
TYPED_MOVES = MOVES + ("rebalance", "retype")
TYPED_WEIGHTS = tuple(0.8 * w for w in WEIGHTS) + (0.1, 0.1)
# with [options] dp_sync (SPEC 11), this share of the moves picks another sync option
SYNC_MOVE = 0.15


def _key(bounds, placement, schedule, sync=None):
    sched = schedule if isinstance(schedule, (str, tuple)) else tuple(map(tuple, schedule.ops))
    return (tuple(bounds), tuple(map(tuple, placement)), sched, sync)


def _profile(plan: Plan) -> tuple[int, ...] | None:
    """The in-flight limits of an explicit schedule that is 1f1b with limits, else None."""
    if not isinstance(plan.schedule, ExplicitSchedule):
        return None
    w = tuple(inflight_counts(plan.schedule_spec, plan.num_stages, plan.num_micro_batches))
    return w if inflight_schedule(w, plan.num_micro_batches).ops == plan.schedule.ops else None


def _schedule(sched, stages: int, m: int):
    """A state's schedule as a plan holds it: a name, or the explicit op lists of
    in-flight limits (1f1b's own limits written as ``"1f1b"``)."""
    if not isinstance(sched, tuple):
        return sched
    if list(sched) == inflight_counts("1f1b", stages, m):
        return "1f1b"
    return inflight_schedule(sched, m)


def anneal(instance, plan: Plan, time_limit: float | None = 10.0, seed: int = 0,
           max_evals: int | None = None, max_work: float | None = None, stages: int | None = None, schedule: str | None = None,
           forbid=(), require=(), t_start: float = 0.03, t_end: float = 1e-4, inflight: bool = True,
           faithful: float | None = FAITHFUL, **_) -> Plan:
    """Simulated annealing from ``plan``; the best plan seen (see the module docstring).

    ``time_limit`` seconds of wall clock (None: no limit, then ``max_evals``
    is needed); ``max_evals`` the number of candidate plans examined (each
    either rejected by ``check_plan`` or simulated): with it the temperature
    follows the count, not the clock, and a seed gives the same plan
    whatever the load (as long as ``time_limit`` is not reached first).
    ``max_work``: the same in deterministic seconds
    (:mod:`planner.solvers.workunits`: each simulation costs
    :func:`~planner.solvers.workunits.sim_seconds` of its plan, each candidate
    :data:`~planner.solvers.workunits.MOVE_S`), a budget that tracks the clock on
    an idle machine whatever the instance's size.
    ``seed`` seeds ``numpy.random.default_rng``.  Pins: ``stages`` (no
    split/merge), ``schedule`` (no schedule switch), ``forbid`` (domains
    that may host nothing), ``require`` (domains that must host a stage);
    R, tp and the micro-batch size are never changed.  ``t_start``/``t_end``
    are the temperatures as fractions of the start's score.  ``inflight``:
    the schedule move may also change one stage's in-flight limit (not with a
    pinned ``schedule``, nor from an explicit schedule that is not 1f1b with
    limits, nor on an instance with ``options.explicit_schedules`` false).  ``faithful``: the walk may cross plans simulating more than this
    fraction slower than their T_est, but never returns one (None: it may).

    The result is never worse than ``plan`` (it is ``plan`` itself, with a
    new ``SolverInfo``, when nothing better turns up).  Its ``SolverInfo``
    (name ``anneal``, status ``heuristic``, or the reason of a stop request that
    cut it short (``interrupted``, ``memory_limit``); ``bound`` kept from ``plan``'s
    own info, a lower bound on the instance's T_est that moves cannot break)
    adds ``evaluations`` (simulations), ``candidates``, ``accepted``, ``work_s``
    (deterministic seconds spent), ``sim_ops`` (stages x micro-batches summed over
    the simulations), ``cut_by_clock`` (``time_limit`` reached before the count or
    the work budget),
    ``start_s`` and ``end_s`` (simulated seconds, or cost, of the start and
    of the result).
    """
    if time_limit is None and max_evals is None and max_work is None:
        raise ValueError("anneal needs a time_limit, max_evals or max_work")
    t0 = time.perf_counter()
    deadline = t0 + time_limit if time_limit is not None else math.inf
    rng = np.random.default_rng(seed)
    names = [d for d in instance.domain_names if d not in set(forbid)]
    required = set(require)
    n_units = instance.num_units
    allowed_sched = [s for s in instance.options.schedules if s in ("1f1b", "gpipe")]
    start_sched = plan.schedule
    m = plan.num_micro_batches
    profile = _profile(plan)
    if profile is not None:
        start_sched = profile  # 1f1b with in-flight limits: the limits can move
    inflight = inflight and instance.options.explicit_schedules and schedule is None and m > 1 and (profile is not None
                                                            or not isinstance(plan.schedule, ExplicitSchedule))
    if schedule is not None or (isinstance(plan.schedule, ExplicitSchedule) and profile is None):
        allowed_sched = []  # pinned; an explicit schedule is kept as it is
    can_resize = stages is None and (not isinstance(plan.schedule, ExplicitSchedule) or profile is not None)
    R = plan.replicas
    rebalance = _rebalancer(instance, plan) if instance.heterogeneous and stages is None else None
    memo: dict = {}
    unfaithful: set = set()  # keys of plans the walk may cross but the search may not return
    evals = 0
    work = [0.0, 0]  # deterministic seconds, simulated stage x micro-batch products

    def build(bounds, placement, sched, sync=None) -> Plan:
        return Plan(instance=plan.instance, replicas=R, tp=plan.tp, micro_batch_size=plan.micro_batch_size,
                    num_micro_batches=plan.num_micro_batches,
                    stages=[Stage(start=a, end=b) for a, b in bounds],
                    placement=[list(r) for r in placement], schedule=_schedule(sched, len(bounds), m),
                    dp_sync=sync)

    def pinned(placement) -> bool:
        used = {d for row in placement for d in row}
        return not (required - used) and not (used & set(forbid))

    def scored(bounds, placement, sched, sync=None):
        nonlocal evals
        k = _key(bounds, placement, sched, sync)
        if k in memo:
            return memo[k]
        val = None
        if pinned(placement):
            p = build(bounds, placement, sched, sync)
            evals += 1
            work[0] += sim_seconds(p)
            work[1] += p.num_stages * p.num_micro_batches
            got = simulated_score(instance, p, fidelity=faithful is not None)
            if got is not None and faithful is not None:
                got, ratio = got
                if ratio > 1 + faithful:
                    unfaithful.add(k)
            val = got
        memo[k] = val
        return val

    bounds = [(s.start, s.end) for s in plan.stages]
    placement = [list(r) for r in plan.placement]
    sched = start_sched
    sync = plan.dp_sync
    syncs = sync_options(instance) if sync_enabled(instance) else []  # SPEC 11: the sync is a move too
    start = simulated_score(instance, plan) if pinned(placement) else None  # the start need not be faithful
    memo[_key(bounds, placement, sched, sync)] = start
    evals = 1
    if start is None:
        why = "; ".join(v.message for v in check_plan(instance, plan)) or "it breaks the pins"
        raise ValueError(f"anneal: the start plan is infeasible: {why}")
    cur = best = start
    cur_state = best_state = (bounds, placement, sched, sync)
    candidates = accepted = since_best = 0
    ln_ratio = math.log(t_end / t_start)
    clock_cut = False
    while True:
        if time.perf_counter() >= deadline or stop.requested():  # Ctrl-C or the memory cap: the best so far
            clock_cut = time.perf_counter() >= deadline and (max_evals is not None or max_work is not None)
            break
        if max_work is not None:
            if work[0] >= max_work:
                break
            frac = work[0] / max_work
        elif max_evals is not None:
            if candidates >= max_evals:
                break
            frac = candidates / max_evals
        else:
            frac = min(1.0, (time.perf_counter() - t0) / max(1e-9, time_limit))
        temp = start * t_start * math.exp(ln_ratio * frac)
        candidates += 1
        work[0] += MOVE_S
        if syncs and rng.random() < SYNC_MOVE:  # another sync option (uncovered ones score None)
            pick = syncs[int(rng.integers(len(syncs)))]
            cand = cur_state[:3] + (None if pick.plain else pick,)
        else:
            cand = _move(rng, cur_state[:3], names, n_units, allowed_sched, can_resize, R, m if inflight else 0,
                         rebalance)
            cand = None if cand is None else cand + (cur_state[3],)
        if cand is None:
            continue
        val = scored(*cand)
        if val is None:
            continue
        delta = val - cur
        if delta <= 0 or rng.random() < math.exp(-delta / temp):
            cur, cur_state = val, cand
            accepted += 1
        if cur < best * (1 - 1e-12) and _key(*cur_state) not in unfaithful:
            best, best_state, since_best = cur, cur_state, 0
            log.info("anneal: %.6g after %d candidates (start %.6g)", best, candidates, start)
        else:
            since_best += 1
            if since_best > 2000:  # a long stretch without progress: back to the best plan
                cur, cur_state, since_best = best, best_state, 0
    info = dict(plan.solver.model_extra or {}) if plan.solver is not None else {}
    base = plan.solver
    result = plan if best >= start else build(*best_state)
    si = SolverInfo(name="anneal", status=stop.requested() or "heuristic", objective=None,
                    bound=base.bound if base is not None else None, gap=None,
                    time_s=time.perf_counter() - t0,
                    **{**info, "evaluations": evals, "candidates": candidates, "accepted": accepted,
                       "work_s": work[0], "sim_ops": work[1], "cut_by_clock": clock_cut,
                       "start_s": start, "end_s": min(best, start)})
    log.info("anneal: %.6g -> %.6g in %d simulations (%d candidates, %.1fs)",
             start, min(best, start), evals, candidates, si.time_s)
    return result.model_copy(update={"solver": si, "predicted": None})


def _rebalancer(instance, plan: Plan):
    """``(bounds, placement, schedule) -> bounds``: the partition balanced for the GPU
    types of ``placement`` (None when none fits, or the schedule is explicit op lists
    that are not in-flight limits); for the moves ``rebalance`` and ``retype``."""
    from ..problem.space import PlanSpace
    from .greedy import stage_types

    space = PlanSpace(instance)
    tp, b, m = plan.tp, plan.micro_batch_size, plan.num_micro_batches

    def rebalance(bounds, placement, sched):
        if isinstance(sched, tuple):  # in-flight limits: 1f1b's memory rule, check_plan decides
            sched = "1f1b"
        if not isinstance(sched, str):
            return None
        return space.typed_partition(tp, b, sched, len(bounds), m, stage_types(instance, placement))

    return rebalance



def _stage_to(placement, j: int, d: str):
    """``placement`` with stage ``j`` of every replica in domain ``d`` (None: it is already)."""
    if all(row[j] == d for row in placement):
        return None
    pl = [list(row) for row in placement]
    for row in pl:
        row[j] = d
    return pl

def _move(rng, state, names, n_units, allowed_sched, can_resize, R, m=0, rebalance=None):
    """One random neighbour of ``state`` = (bounds, placement, schedule), or None.

    A schedule is a name or a tuple of in-flight limits; ``m`` > 0 (the
    micro-batch count) lets the schedule move change one limit.  ``rebalance``
    (instances with several GPU types, :func:`_rebalancer`) adds the moves
    ``rebalance`` and ``retype``."""
    bounds, placement, sched = state
    S = len(bounds)
    if rebalance is not None:
        kind = TYPED_MOVES[rng.choice(len(TYPED_MOVES), p=TYPED_WEIGHTS)]
        if kind == "rebalance":
            cuts = rebalance(bounds, placement, sched)
            return None if cuts is None or list(cuts) == list(bounds) else (list(cuts), placement, sched)
        if kind == "retype":
            j = int(rng.integers(S))
            d = names[int(rng.integers(len(names)))]
            pl = _stage_to(placement, j, d)
            if pl is None:
                return None
            cuts = rebalance(bounds, pl, sched)
            return (list(cuts) if cuts is not None else bounds), pl, sched
    else:
        kind = MOVES[rng.choice(len(MOVES), p=WEIGHTS)]
    if kind == "replica":
        r, j = int(rng.integers(R)), int(rng.integers(S))
        d = names[int(rng.integers(len(names)))]
        if d == placement[r][j]:
            return None
        pl = [list(row) for row in placement]
        pl[r][j] = d
        return bounds, pl, sched
    if kind == "stage":
        j = int(rng.integers(S))
        d = names[int(rng.integers(len(names)))]
        pl = _stage_to(placement, j, d)
        return None if pl is None else (bounds, pl, sched)
    if kind == "swap":
        r1, j1, r2, j2 = (int(x) for x in rng.integers([R, S, R, S]))
        if placement[r1][j1] == placement[r2][j2]:
            return None
        pl = [list(row) for row in placement]
        pl[r1][j1], pl[r2][j2] = pl[r2][j2], pl[r1][j1]
        return bounds, pl, sched
    if kind == "boundary":
        if S < 2:
            return None
        k = int(rng.integers(1, S))  # the boundary between stages k-1 and k
        step = int(rng.integers(1, 4)) * (1 if rng.random() < 0.5 else -1)
        cut = bounds[k][0] + step
        if not bounds[k - 1][0] < cut < bounds[k][1]:
            return None
        b = list(bounds)
        b[k - 1], b[k] = (b[k - 1][0], cut), (cut, b[k][1])
        return b, placement, sched
    if kind == "schedule":
        if m and (isinstance(sched, tuple) or not allowed_sched or rng.random() < 0.75):
            w = list(sched) if isinstance(sched, tuple) else inflight_counts(sched, S, m)
            j = int(rng.integers(S))
            step = int(rng.choice([-2, -1, 1, 2, 0]))
            v = max(1, w[j] // 2) if step == 0 and rng.random() < 0.5 else (2 * w[j] if step == 0 else w[j] + step)
            v = min(m, max(1, v))
            if v == w[j]:
                return None
            w[j] = v
            return bounds, placement, tuple(w)
        others = [s for s in allowed_sched if s != sched]
        if not others:
            return None
        return bounds, placement, others[int(rng.integers(len(others)))]
    if not can_resize:
        return None
    if kind == "split":
        j = int(rng.integers(S))
        a, e = bounds[j]
        if e - a < 2:
            return None
        cut = int(rng.integers(a + 1, e))
        b = list(bounds[:j]) + [(a, cut), (cut, e)] + list(bounds[j + 1:])
        if isinstance(sched, tuple):
            sched = sched[:j + 1] + sched[j:]
        pl = []
        for row in placement:
            d = row[j] if rng.random() < 0.5 else names[int(rng.integers(len(names)))]
            pl.append(list(row[:j + 1]) + [d] + list(row[j + 1:]))
        return b, pl, sched
    # merge stages j and j+1, keeping one of their domains per replica
    if S < 2:
        return None
    j = int(rng.integers(S - 1))
    b = list(bounds[:j]) + [(bounds[j][0], bounds[j + 1][1])] + list(bounds[j + 2:])
    keep = j + int(rng.integers(2))
    pl = [list(row[:j]) + [row[keep]] + list(row[j + 2:]) for row in placement]
    if isinstance(sched, tuple):
        sched = sched[:j] + (max(sched[j], sched[j + 1]),) + sched[j + 2:]
    return b, pl, sched


def anneal_solver(instance, time_limit: float | None = 10.0, seed: int = 0, max_evals: int | None = None,
                  **options) -> Plan:
    """Solver ``"anneal"``: the greedy plan, then :func:`anneal` for the rest of ``time_limit``.

    >>> p = anneal_solver(instance, time_limit=10)           # doctest: +SKIP
    """
    from .greedy import greedy

    t0 = time.perf_counter()
    limit = 10.0 if time_limit is None else time_limit
    start = greedy(instance, time_limit=limit / 2, seed=seed)
    return anneal(instance, start, time_limit=max(0.1, limit - (time.perf_counter() - t0)), seed=seed,
                  max_evals=max_evals, **options)
