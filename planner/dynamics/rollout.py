"""Rollouts: a training job of N iterations through a network trace under a
re-planning policy (SPEC section 8).

Each iteration runs under the network state in force when it starts; a
policy may switch plans between iterations.  Accounting, exactly:

    total = sum of iteration times + reconfiguration time + stalled time

*Stalled*: the current plan cannot run (a link it uses is down), so the job
waits for the next epoch.  *Solver time* does not appear: re-planning runs
on a separate CPU host while the job keeps training on the old plan; the
new plan is adopted at the first iteration boundary after the solver
finishes (``solver_time="measured"`` uses the real wall time, or pass a
number of seconds for reproducible rollouts).

Policies:

* ``static``: plan once on the base network, never switch;
* ``greedy``: re-plan with greedy at every epoch change (5 minutes);
* ``rl``: re-plan with a trained placement policy (``rl_policy``; see
  :mod:`planner.solvers.rl`) at every epoch change, starting from the policy's plan
  for the base network;
  (the re-planning policies switch only when the time the new plan saves
  over the next ``every_min`` minutes exceeds the switch time);
* ``resolve``: re-plan with ``solver`` every ``every_min`` minutes, or as
  soon as the current plan runs more than ``threshold`` slower than when it
  was chosen;
* ``oracle``: with hindsight, no solver or reconfiguration cost, the best of
  a set of candidate plans for every iteration, and the best moment to start
  it (it may wait for a better epoch): no policy using those plans finishes
  earlier (a bound; see :func:`oracle_rollout`).

A switch costs, for every (replica, unit) whose domain changes, moving the
unit's 16 bytes per parameter from the old to the new domain over the route
at the current state's figures, all moves in parallel sharing links as in
SPEC 5; the switch takes the longest move (transfer + latency).  Units are
matched by replica index (replica r of the new plan takes over from
replica r mod R_old), which reduces to SPEC 8's (replica, stage) rule when
the shape is unchanged.

Example
-------
>>> res = rollout(instance, trace, "greedy", iterations=1000)    # doctest: +SKIP
>>> res.total_s, res.reconfig_s, res.switches
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..scoring.evaluator import Evaluator
from ..solvers import stop
from ..problem.network import GBPS, MS, NetworkStates, flow_bandwidth, instance_at  # noqa: F401
from ..problem.plan import Plan

POLICIES = ("static", "greedy", "resolve", "rl", "oracle")


@dataclass
class Epoch:
    epoch: int
    start_s: float
    iterations: int
    mean_iteration_s: float
    plan: int  # index into RolloutResult.plans


@dataclass
class RolloutResult:
    policy: str
    iterations: int
    total_s: float
    compute_s: float  # sum of iteration times
    reconfig_s: float
    stalled_s: float
    switches: int
    solver_s: float  # solver wall time (overlapped with training, not in total)
    decisions: int = 0  # re-planning calls during the rollout (the first plan not counted)
    plans: list = field(default_factory=list)
    series: list = field(default_factory=list)  # per epoch with work done
    completed: bool = True

    @property
    def decision_s(self) -> float | None:
        """Mean solver wall time of one re-planning decision (None without decisions)."""
        return self.solver_s / self.decisions if self.decisions else None

    @property
    def iterations_per_hour(self) -> float:
        return self.iterations / self.total_s * 3600.0 if self.total_s > 0 else 0.0

    def summary(self) -> dict:
        return {"policy": self.policy, "iterations": int(self.iterations), "total_s": float(self.total_s),
                "iterations_per_hour": float(self.iterations_per_hour), "compute_s": float(self.compute_s),
                "reconfig_s": float(self.reconfig_s), "stalled_s": float(self.stalled_s),
                "switches": int(self.switches), "solver_s": float(self.solver_s), "decisions": int(self.decisions),
                "decision_s": None if self.decision_s is None else float(self.decision_s),
                "completed": self.completed}


def switch_time(instance, old: Plan, new: Plan, bw_gbps: np.ndarray, lat_ms: np.ndarray) -> float:
    """Seconds to move state from ``old``'s placement to ``new``'s (module docstring)."""
    units = instance.units
    moves: dict[tuple[str, str], float] = defaultdict(float)
    old_dom = [[None] * len(units) for _ in range(old.replicas)]
    for r, row in enumerate(old.placement):
        for st, d in zip(old.stages, row):
            for u in range(st.start, st.end):
                old_dom[r][u] = d
    for r, row in enumerate(new.placement):
        src = old_dom[r % old.replicas]
        for st, d in zip(new.stages, row):
            for u in range(st.start, st.end):
                if src[u] != d:
                    moves[(src[u], d)] += 16.0 * units[u].params
    if not moves:
        return 0.0
    pairs = list(moves)
    routes = [instance.routes[p].links for p in pairs]
    bw = flow_bandwidth(bw_gbps[None, :], routes)[0]
    worst = 0.0
    for (p, nbytes), b, links in zip(moves.items(), bw, routes):
        t = nbytes / b if b > 0 else np.inf
        worst = max(worst, t + sum(lat_ms[l] for l in links) * MS)
    return float(worst)


class _Times:
    """Iteration time of a plan in every epoch, computed once per plan (vectorised)."""

    def __init__(self, instance, trace):
        self.instance, self.trace = instance, trace
        self.plans: list[Plan] = []
        self.T: list[np.ndarray] = []
        self._index: dict[str, int] = {}

    def add(self, plan: Plan) -> int:
        key = plan.model_copy(update={"predicted": None, "solver": None}).to_json(indent=None)
        if key not in self._index:
            self._index[key] = len(self.plans)
            self.plans.append(plan)
            self.T.append(Evaluator(self.instance, plan).iteration_times(self.trace.states))
        return self._index[key]


def rollout(instance, trace, policy: str, iterations: int, plan: Plan | None = None, solver: str = "greedy",
            every_min: float = 30.0, threshold: float = 0.10, solver_time="measured", time_limit: float = 10.0,
            candidates=(), seed: int = 0, rl_policy=None) -> RolloutResult:
    """Run ``iterations`` training iterations through ``trace`` under ``policy``
    (``rl_policy``: for the ``rl`` policy, a saved policy's path, its bytes, a
    loaded model or a :class:`planner.solvers.rl.Replanner`)."""
    from ..solvers.registry import plan as make_plan

    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    times = _Times(instance, trace)
    if policy == "oracle":
        return oracle_rollout(instance, trace, iterations, list(candidates) + ([plan] if plan else []),
                              times=times)
    replan = None
    if policy == "rl":
        from ..solvers.rl import Replanner

        replan = rl_policy if isinstance(rl_policy, Replanner) else Replanner(instance, rl_policy, seed=seed)
    if plan is not None:
        start = plan
    elif replan is not None:
        start = replan()
    else:
        start = make_plan(instance, solver=solver if policy == "resolve" else "greedy", seed=seed,
                          time_limit=time_limit if policy == "resolve" else None)
    cur = times.add(start)
    t = compute = reconfig = stalled = solver_s = 0.0
    switches, done, decisions = 0, 0, 0
    chosen_T = times.T[cur][trace.epoch_at(0.0)]
    next_check = every_min * 60.0
    pending = None  # (ready time, plan index)
    last_epoch = -1
    series: dict[int, list] = {}
    log = logging.getLogger("planner.rollout")
    tick = time.perf_counter()
    while done < iterations:
        if time.perf_counter() - tick > 5.0:  # progress for long rollouts (stderr in the CLI)
            tick = time.perf_counter()
            log.info("rollout %s: %d of %d iterations", policy, done, iterations)
        if stop.requested():  # Ctrl-C: the iterations so far, marked incomplete
            return _result(policy, done, t, compute, reconfig, stalled, switches, solver_s, times, series,
                           completed=False, decisions=decisions)
        e = trace.epoch_at(t)
        # policy decisions at this iteration boundary
        if policy != "static":
            if pending is not None and t >= pending[0]:
                cand = pending[1]
                pending = None
                if cand != cur and times.T[cand][e] < times.T[cur][e]:
                    st = trace.states
                    dt = switch_time(instance, times.plans[cur], times.plans[cand],
                                     st.bandwidth_gbps[e], st.latency_ms[e])
                    # switch when the time saved over the next `every_min` minutes pays for the move
                    saved = (1 - times.T[cand][e] / times.T[cur][e]) * every_min * 60.0 \
                        if np.isfinite(times.T[cur][e]) else np.inf
                    if np.isfinite(dt) and saved > dt:
                        t += dt
                        reconfig += dt
                        switches += 1
                        cur = cand
                        chosen_T = times.T[cur][e]
                        e = trace.epoch_at(t)
            want = False
            if pending is None:
                if policy in ("greedy", "rl"):
                    want = e != last_epoch
                else:
                    slow = times.T[cur][e] > chosen_T * (1 + threshold)
                    want = t >= next_check or slow
            if want:
                if replan is not None:
                    st = trace.states
                    now = NetworkStates(st.bandwidth_gbps[e:e + 1], st.latency_ms[e:e + 1])
                    t0 = time.perf_counter()
                    new = replan(now)
                else:
                    t0 = time.perf_counter()
                    new = make_plan(instance_at(instance, trace.states, e),
                                    solver="greedy" if policy == "greedy" else solver, seed=seed,
                                    time_limit=None if policy == "greedy" else time_limit)
                took = time.perf_counter() - t0 if solver_time == "measured" else float(solver_time)
                solver_s += took
                decisions += 1
                pending = (t + took, times.add(new.model_copy(update={"instance": instance.name})))
                next_check = t + every_min * 60.0
                if np.isfinite(times.T[cur][e]):
                    chosen_T = times.T[cur][e]  # slowdowns count from the last re-plan
                last_epoch = e
                if took == 0.0:
                    continue  # adopt it right away, at this same boundary
        T = times.T[cur][e]
        if not np.isfinite(T):  # the plan cannot run: wait for the next epoch
            if e + 1 >= trace.epochs:
                return _result(policy, done, t, compute, reconfig, stalled, switches, solver_s, times, series,
                               completed=False, decisions=decisions)
            wait = trace.times[e + 1] - t
            t += wait
            stalled += wait
            continue
        t += T
        compute += T
        done += 1
        series.setdefault(e, [0, 0.0, cur])
        series[e][0] += 1
        series[e][1] += T
    return _result(policy, done, t, compute, reconfig, stalled, switches, solver_s, times, series,
                   decisions=decisions)


def _result(policy, done, t, compute, reconfig, stalled, switches, solver_s, times, series, completed=True,
            decisions=0):
    trace = times.trace
    rows = [Epoch(e, float(trace.times[e]), n, tot / n, p) for e, (n, tot, p) in sorted(series.items())]
    return RolloutResult(policy, done, t, compute, reconfig, stalled, switches, solver_s, decisions, times.plans,
                         rows, completed)


def oracle_rollout(instance, trace, iterations: int, candidates, times: _Times | None = None) -> RolloutResult:
    """The hindsight bound over ``candidates`` (plus greedy's plan for every epoch).

    With T*(e) the best candidate's iteration time in epoch e, an iteration
    that may start at s or later finishes at the earliest at
    h(s) = min(s + T*(e(s)), min over epoch starts b > s of b + T*(e(b))).
    h is non-decreasing, and any policy's k-th iteration ends no earlier
    than h applied to its (k-1)-th end, so iterating h from 0 is a lower
    bound on every policy that uses these plans.  Waiting shows as stalled time.
    """
    from ..solvers.greedy import greedy

    times = times or _Times(instance, trace)
    for p in candidates:
        times.add(p)
    for e in range(trace.epochs):
        try:
            times.add(greedy(instance_at(instance, trace.states, e)).model_copy(update={"instance": instance.name}))
        except Exception:  # an epoch where nothing fits: other candidates cover it
            pass
    T = np.vstack(times.T)  # (plans, epochs)
    best = T.min(axis=0)
    arg = T.argmin(axis=0)
    starts = trace.times
    finish_at_start = starts + best
    suffix = np.minimum.accumulate(finish_at_start[::-1])[::-1]  # min over epochs >= e
    t = compute = stalled = 0.0
    series: dict[int, list] = {}
    for _ in range(iterations):
        e = trace.epoch_at(t)
        now = t + best[e]
        later = suffix[e + 1] if e + 1 < trace.epochs else np.inf
        if later < now:  # waiting for a better epoch finishes earlier
            e2 = e + 1 + int(np.argmin(finish_at_start[e + 1:]))
            stalled += starts[e2] - t
            t, e = starts[e2], e2
        if not np.isfinite(best[e]):
            return _result("oracle", sum(v[0] for v in series.values()), t, compute, 0.0, stalled, 0, 0.0,
                           times, series, completed=False)
        t += best[e]
        compute += best[e]
        series.setdefault(e, [0, 0.0, int(arg[e])])
        series[e][0] += 1
        series[e][1] += best[e]
    return _result("oracle", iterations, t, compute, 0.0, stalled, 0, 0.0, times, series)
