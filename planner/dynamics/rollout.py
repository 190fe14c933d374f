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
* ``hysteresis``, ``mpc``: switch-aware rules deciding once per epoch among
  candidate plans (:mod:`planner.dynamics.policies`);
* ``controller``: the learned keep-or-switch controller
  (:mod:`planner.dynamics.controller`; ``controller``: its file, default the
  packaged one);
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

import numpy as np

from ..solvers import stop
from ..problem.network import NetworkStates, instance_at
from ..problem.plan import Plan
from .job import Epoch, PlanTimes, RolloutResult, starts_before, switch_time  # noqa: F401  (switch_time: public here too)
from .policies import EpochPlans, Hysteresis, Lookahead, epoch_rollout

POLICIES = ("static", "greedy", "resolve", "rl", "hysteresis", "mpc", "controller", "oracle")
PROGRESS_EVERY_S = 5.0  # long work logs a progress line (logger "planner.rollout"; stderr in the CLI) this often


_Times = PlanTimes  # the name this module used before job.py


def rollout(instance, trace, policy: str, iterations: int, plan: Plan | None = None, solver: str = "greedy",
            every_min: float = 30.0, threshold: float = 0.10, solver_time="measured", time_limit: float = 10.0,
            candidates=(), seed: int = 0, rl_policy=None, controller=None, plans: EpochPlans | None = None,
            margin: float | None = None) -> RolloutResult:
    """Run ``iterations`` training iterations through ``trace`` under ``policy``
    (``rl_policy``: for the ``rl`` policy, a saved policy's path, its bytes, a
    loaded model or a :class:`planner.solvers.rl.Replanner`; ``controller``: for
    the ``controller`` policy, a saved controller's path or a loaded
    :class:`planner.dynamics.controller.Controller` (default: the packaged one);
    ``plans``: the per-epoch candidate plans of ``trace``, shared between the
    rollouts of one trace (:class:`planner.dynamics.policies.EpochPlans`);
    ``margin``: the hysteresis or look-ahead margin, default theirs)."""
    from ..solvers.registry import plan as make_plan

    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    times = _Times(instance, trace, plans.memo if plans is not None else None)
    if policy == "oracle":
        return oracle_rollout(instance, trace, iterations, list(candidates) + ([plan] if plan else []),
                              times=times, plans=plans)
    if policy in ("hysteresis", "mpc", "controller"):
        plans = plans or EpochPlans(instance, trace, seed=seed, start=plan)
        if policy == "controller":
            from .controller import Controller

            rule = controller if isinstance(controller, Controller) else Controller.load(controller)
        else:
            kw = {} if margin is None else {"margin": margin}
            rule = Hysteresis(**kw) if policy == "hysteresis" else Lookahead(seed=seed, **kw)
        return epoch_rollout(instance, trace, rule, iterations, plans, name=policy, solver_time=solver_time,
                             start=plan)
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
        if time.perf_counter() - tick > PROGRESS_EVERY_S:  # progress for long rollouts (stderr in the CLI)
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
            if want and policy == "greedy" and plans is not None:  # this epoch's greedy, computed once per trace
                new, measured = plans.greedy(e)
                last_epoch = e
                want = False
                if new is not None:  # else nothing fits this epoch's state: keep the plan
                    took = measured if solver_time == "measured" else float(solver_time)
                    solver_s += took
                    decisions += 1
                    pending = (t + took, times.add(new))
                    next_check = t + every_min * 60.0
                    if np.isfinite(times.T[cur][e]):
                        chosen_T = times.T[cur][e]
                    if took == 0.0:
                        continue
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
        # every iteration that starts before anything can happen (the next epoch, the
        # pending plan, the next periodic re-plan) runs now, in closed form
        lim = trace.times[e + 1] if e + 1 < trace.epochs else np.inf
        if pending is not None:
            lim = min(lim, pending[0])
        if policy == "resolve":
            lim = min(lim, next_check)
        k = starts_before(t, T, lim, iterations - done, times.blocks[cur])
        t += k * T
        compute += k * T
        done += k
        series.setdefault(e, [0, 0.0, cur])
        series[e][0] += k
        series[e][1] += k * T
    return _result(policy, done, t, compute, reconfig, stalled, switches, solver_s, times, series,
                   decisions=decisions)


def _result(policy, done, t, compute, reconfig, stalled, switches, solver_s, times, series, completed=True,
            decisions=0):
    trace = times.trace
    rows = [Epoch(e, float(trace.times[e]), n, tot / n, p) for e, (n, tot, p) in sorted(series.items())]
    return RolloutResult(policy, done, t, compute, reconfig, stalled, switches, solver_s, decisions, times.plans,
                         rows, completed)


def oracle_rollout(instance, trace, iterations: int, candidates, times: PlanTimes | None = None,
                   plans: EpochPlans | None = None) -> RolloutResult:
    """The hindsight bound over ``candidates`` (plus greedy's plan for every epoch).

    With T*(e) the best candidate's iteration time in epoch e, an iteration
    that may start at s or later finishes at the earliest at
    h(s) = min(s + T*(e(s)), min over epoch starts b > s of b + T*(e(b))).
    h is non-decreasing, and any policy's k-th iteration ends no earlier
    than h applied to its (k-1)-th end, so iterating h from 0 is a lower
    bound on every policy that uses these plans.  Waiting shows as stalled time.
    """
    times = times or PlanTimes(instance, trace, plans.memo if plans is not None else None)
    log = logging.getLogger("planner.rollout")
    tick = time.perf_counter()
    candidates = list(candidates)
    for i, p in enumerate(candidates):
        if time.perf_counter() - tick > PROGRESS_EVERY_S:  # progress: minutes on large instances
            tick = time.perf_counter()
            log.info("oracle: timing candidate plan %d of %d over %d epochs", i + 1, len(candidates), trace.epochs)
        times.add(p)
    plans = plans or EpochPlans(instance, trace)
    for e in range(trace.epochs):
        if time.perf_counter() - tick > PROGRESS_EVERY_S:
            tick = time.perf_counter()
            log.info("oracle: greedy's plan for epoch %d of %d", e + 1, trace.epochs)
        p = plans.greedy(e)[0]
        if p is not None:  # None: an epoch where nothing fits; other candidates cover it
            times.add(p)
    T = np.vstack(times.T)  # (plans, epochs)
    best = T.min(axis=0)
    arg = T.argmin(axis=0)
    starts = trace.times
    finish_at_start = starts + best
    suffix = np.minimum.accumulate(finish_at_start[::-1])[::-1]  # min over epochs >= e
    t = compute = stalled = 0.0
    series: dict[int, list] = {}
    done = 0
    while done < iterations:
        e = trace.epoch_at(t)
        now = t + best[e]
        later = suffix[e + 1] if e + 1 < trace.epochs else np.inf
        if later < now:  # waiting for a better epoch finishes earlier
            e2 = e + 1 + int(np.argmin(finish_at_start[e + 1:]))
            stalled += starts[e2] - t
            t, e = starts[e2], e2
            later = suffix[e + 1] if e + 1 < trace.epochs else np.inf
        if not np.isfinite(best[e]):
            return _result("oracle", done, t, compute, 0.0, stalled, 0, 0.0, times, series, completed=False)
        # the iterations that start in this epoch while not waiting is no better, in closed form
        lim = starts[e + 1] if e + 1 < trace.epochs else np.inf
        if np.isfinite(later):
            lim = min(lim, np.nextafter(later - best[e], np.inf))
        k = starts_before(t, best[e], lim, iterations - done)
        t += k * best[e]
        compute += k * best[e]
        done += k
        series.setdefault(e, [0, 0.0, int(arg[e])])
        series[e][0] += k
        series[e][1] += k * best[e]
    return _result("oracle", iterations, t, compute, 0.0, stalled, 0, 0.0, times, series)
