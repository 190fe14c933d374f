"""Switch-aware re-planning: the per-epoch candidate plans, the decision loop
they share, and two rules that weigh a switch against its cost.

Once per epoch (at the first iteration boundary after the WAN state
changes) a policy gets a :class:`Situation`: the current plan and four
candidate *slots* with their iteration times under the epoch's state, the
previous epoch's, and the switch time to each:

* ``greedy``: the greedy plan for the epoch's state (computed once per trace
  by :class:`EpochPlans` and shared by every policy of a benchmark row);
* ``start``: the plan the job started with (greedy on the base network);
* ``robust``: greedy against 64 states sampled from a generated week
  (``planner plan --robust 64``), computed before the job starts;
* ``previous``: the plan in use before the last switch;
* ``best_seen``: of every plan the job has met so far (the start and robust
  plans, a library of greedy's plans for 32 states sampled from a generated
  week, and the RL planner's and the exact portfolio's (``auto``, 30 s by a
  deterministic budget) plans for the base network, made before the job
  like the robust plan, and greedy's plans of the epochs gone by), of the 8 fastest under this epoch's state the one that
  completes the most iterations in the next 30 minutes, its switch paid
  first (:func:`best_reachable`: a plan behind a down link is never picked).  Greedy's plan for one state is often not the best plan for
  it: one it found for another state may be faster (on aws-multiregion,
  by a median 15% over a day); the hindsight oracle picks from all of them.

It keeps the plan (``None``) or names a slot.  Rules:

* :class:`Hysteresis`: switch to the slot with the largest net gain when the
  time it saves over the next ``horizon_min`` minutes (or what is left of
  the job) exceeds the switch time by ``margin`` (a fraction of it), the slot
  is at least ``min_gain`` faster now, and it was faster in the previous
  epoch's state too (no switching on one noisy epoch);
* :class:`Lookahead` (MPC): sample ``samples`` futures of the next
  ``horizon`` epochs from the trace model
  (:func:`planner.problem.traces.sample_futures`), score the current plan
  and every slot over all of them with one batched evaluator call per plan,
  and switch to the slot that completes the most iterations within the
  horizon, switch time paid, when that beats keeping by ``margin``.

Where time goes: the candidates (greedy's wall time, measured once per
epoch) and their scoring (evaluator calls; the look-ahead's sampling) run on
the planning host beside the job, as re-planning does in
:mod:`planner.dynamics.rollout` (``solver_s``, ``decisions``); the new plan
can be adopted at the first iteration boundary after they are ready.  The
choice itself (``policy_s``, ``choices``) is timed apart.

Example
-------
>>> plans = EpochPlans(instance, trace)                               # doctest: +SKIP
>>> res = epoch_rollout(instance, trace, Hysteresis(), 1000, plans)
>>> res.total_s, res.switches
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..problem.network import instance_at
from ..problem.traces import sample_futures
from ..scoring.evaluator import Evaluator
from .job import Job, PlanTimes, RolloutResult, plan_key, switch_time

SLOTS = ("greedy", "start", "robust", "previous", "best_seen")
ROBUST_K = 64
LIBRARY_K = 32
# base-network plans added to the library, made before the job: the RL planner's (skipped without
# the rl extra) and the exact portfolio's ("the last exact plan"), by a deterministic budget so a seed
# gives the same library whatever the machine's load
LIBRARY_PLANNERS = ("rl", "auto")
LIBRARY_OPTIONS = {"auto": {"time_limit": 30.0, "deterministic": True}}
BEST_SEEN_K = 8  # best_seen: the plans fastest now among which the reachable best is picked
BEST_SEEN_HORIZON_S = 1800.0  # ... by the iterations each completes in this time, its switch paid first


@contextmanager
def _quiet_greedy():
    """Greedy's progress lines off (one per epoch or state would drown the caller's)."""
    log = logging.getLogger("planner.greedy")
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        log.setLevel(level)


class EpochPlans:
    """The candidate plans of one (instance, trace), computed once and shared by
    every rollout of that trace: greedy for every epoch's state (with its
    measured wall time, s), the start plan and the robust plan.  ``memo``
    holds every plan's iteration times over the trace (see :class:`PlanTimes`)."""

    def __init__(self, instance, trace, seed: int = 0, start=None, planners=LIBRARY_PLANNERS):
        self.instance, self.trace, self.seed = instance, trace, seed
        self.planners = tuple(planners)
        self.memo: dict = {}
        self._greedy: dict[int, tuple] = {}
        self._start = start
        self._robust = None
        self._library = None

    def greedy(self, epoch: int):
        """(greedy's plan for the state of ``epoch`` or None when nothing fits, wall time s)."""
        if epoch not in self._greedy:
            from ..solvers.greedy import greedy

            t0 = time.perf_counter()
            with _quiet_greedy():
                try:
                    p = greedy(instance_at(self.instance, self.trace.states, epoch))
                    p = p.model_copy(update={"instance": self.instance.name})
                except Exception:  # an epoch in which nothing fits (every route down): no candidate
                    p = None
            self._greedy[epoch] = (p, time.perf_counter() - t0)
        return self._greedy[epoch]

    def start(self):
        """Greedy's plan for the base network (the static policy's)."""
        if self._start is None:
            from ..solvers.registry import plan as make_plan

            self._start = make_plan(self.instance, solver="greedy", seed=self.seed)
        return self._start

    def robust(self):
        """Greedy's plan against 64 states sampled from a generated week (mean T_est)."""
        if self._robust is None:
            from ..solvers.registry import plan as make_plan

            self._robust = make_plan(self.instance, solver="greedy", robust=ROBUST_K, robust_stat="mean",
                                     seed=self.seed)
        return self._robust

    def save(self, path) -> None:
        """Write every greedy plan computed so far (with its wall time) as JSON, to reuse with :meth:`load`."""
        import json

        from ..problem.files import write_atomic

        data = {"instance": self.instance.name, "epochs": self.trace.epochs,
                "greedy": {str(e): [p.to_dict() if p is not None else None, s] for e, (p, s) in self._greedy.items()}}
        write_atomic(path, json.dumps(data))

    def load(self, path) -> "EpochPlans":
        """Read greedy plans written by :meth:`save` for the same instance and trace (a cache)."""
        import json

        from ..problem.plan import Plan

        data = json.loads(Path(path).read_text())
        if data.get("instance") != self.instance.name or data.get("epochs") != self.trace.epochs:
            return self
        for e, (p, s) in data["greedy"].items():
            self._greedy[int(e)] = (Plan.from_dict(p) if p is not None else None, float(s))
        return self

    def library(self) -> list:
        """Greedy's plans for LIBRARY_K states sampled (seeded) from a generated week of drift,
        and the plans of ``planners`` for the base network (default: the RL planner, whose
        plans are up to 30% faster than greedy's on packaged instances, and ``auto``, the exact
        portfolio, with the options of :data:`LIBRARY_OPTIONS`: 30 s by a deterministic budget,
        up to 45% faster than greedy's), made before the job starts: plans a later state may
        favour (distinct ones only)."""
        if self._library is None:
            from ..solvers.greedy import greedy, sample_states
            from ..solvers.registry import plan as make_plan

            states = sample_states(self.instance, LIBRARY_K, self.seed)
            out, keys = [], set()
            with _quiet_greedy():
                for k in range(states.count):
                    try:
                        p = greedy(instance_at(self.instance, states, k)).model_copy(
                            update={"instance": self.instance.name})
                    except Exception:  # nothing fits that state
                        continue
                    if plan_key(p) not in keys:
                        keys.add(plan_key(p))
                        out.append(p)
            for name in self.planners:  # the stronger planners' plans for the base network
                try:
                    p = make_plan(self.instance, solver=name, seed=self.seed,
                                  **LIBRARY_OPTIONS.get(name, {})).model_copy(update={"instance": self.instance.name})
                except ImportError as exc:  # the optional extra (e.g. rl) is not installed
                    logging.getLogger("planner.dynamics").info("library: no %s plan (%s)", name, exc)
                    continue
                except Exception:  # nothing fits
                    continue
                if plan_key(p) not in keys:
                    keys.add(plan_key(p))
                    out.append(p)
            self._library = out
        return self._library

    def all_greedy(self) -> list:
        """Greedy's plan of every epoch (computed now if not yet), None where nothing fits."""
        return [self.greedy(e)[0] for e in range(self.trace.epochs)]

    def fill(self) -> None:
        """Every plan a policy may ask for computed now (the start plan, the robust plan, the
        library, greedy's plan of every epoch), so that nothing is computed lazily later: filled in
        the middle of a training run, they changed what a seed trains (two trainings with seed 0
        on the same worlds differed when the first had filled them)."""
        self.start()
        self.robust()
        self.library()
        self.all_greedy()


@dataclass
class Situation:
    """What a policy sees once per epoch.  Options: index 0 keeps the current plan,
    1..5 the slots of :data:`SLOTS`.  Times in seconds."""

    epoch: int
    t: float  # the trace's clock now, s
    remaining: int  # iterations left
    cur: int  # plan index (into ``times``)
    options: list  # plan index per option (None: no such plan)
    T: np.ndarray  # (6,) iteration time of each option under the epoch's state (inf: none or cannot run)
    T_prev: np.ndarray  # (6,) the same under the previous epoch's state
    dt: np.ndarray  # (6,) switch time to each option under the epoch's state (0 for keeping)
    since_switch_s: float  # since the last switch (or the start)
    T_base: float  # the start plan's iteration time on the base network
    times: PlanTimes
    trace: object
    instance: object

    @property
    def left_s(self) -> float:
        """Time the job still needs at the best of the current and the slots' speeds now."""
        finite = self.T[np.isfinite(self.T)]
        return self.remaining * (float(self.T[0]) if math.isfinite(self.T[0]) else
                                 float(finite.min()) if len(finite) else self.T_base)

    def valid(self) -> np.ndarray:
        """(6,) bool: the options one may choose (keep always; a slot that exists, differs
        from the current plan, can run now and can be moved to)."""
        ok = np.array([True] + [o is not None and o != self.cur for o in self.options[1:]])
        ok[1:] &= np.isfinite(self.T[1:]) & np.isfinite(self.dt[1:])
        return ok


def best_reachable(now: np.ndarray, cost, horizon_s: float, k: int = BEST_SEEN_K) -> int | None:
    """The best_seen slot: of the ``k`` plans fastest under this epoch's state
    (``now``: iteration time of every plan met so far, s), the one completing the
    most iterations in the next ``horizon_s`` seconds, its switch time
    (``cost(plan index)``, s) paid first; None when none can run and be reached.
    A plan the job cannot move to (a down link on the way) is never the pick,
    which matters most when the current plan is stalled.

    >>> best_reachable(np.array([10.0, 5.0, 6.0]), {0: 0.0, 1: np.inf, 2: 60.0}.get, 1800.0)
    2
    """
    best, best_done = None, 0.0
    for o in np.argsort(now, kind="stable")[:k]:
        if not math.isfinite(now[o]):
            break
        done = max(horizon_s - cost(int(o)), 0.0) / now[o]
        if done > best_done:
            best, best_done = int(o), done
    return best


def rounds(instance, trace, iterations: int, plans: EpochPlans, solver_time="measured", start=None,
           start_epoch: int = 0, prepare=None):
    """The shared decision loop, as a generator: it yields a :class:`Situation` once
    per epoch and receives the choice (None or 0: keep; k: slot k); it returns
    ``(job, solver_s, decisions)`` (``StopIteration.value``).  ``solver_time``:
    "measured" (greedy's measured time plus the scoring's) or fixed seconds per
    epoch; ``prepare(situation)`` (e.g. the look-ahead's scoring) runs beside
    the job and counts as solver time."""
    times = PlanTimes(instance, trace, plans.memo)
    start_plan = start or plans.start()
    start_idx = times.add(start_plan)
    T_base = float(Evaluator(instance, start_plan).iteration_times()[0])
    robust_idx = None
    job = Job(trace, times, iterations, start_idx, start_s=float(trace.times[start_epoch]))
    previous = None
    last_switch = job.t
    last_e = -1
    solver_s, decisions = 0.0, 0
    st = trace.states
    while not job.finished:
        e = trace.epoch_at(job.t)
        if e == last_e:
            job.run_until(float(trace.times[e + 1]) if e + 1 < trace.epochs else math.inf)
            continue
        last_e = e
        if robust_idx is None:  # made before the job starts (not charged as solver time): the robust plan, the library
            robust_idx = times.add(plans.robust())
            for p in plans.library():
                times.add(p)
        g, g_s = plans.greedy(e)  # greedy's measured wall time (computed once per trace, maybe just now)
        t0 = time.perf_counter()
        g_idx = times.add(g) if g is not None else None
        cost_of: dict[int, float] = {job.cur: 0.0}  # slots often hold the same plan: one switch_time per plan

        def cost(o):
            if o not in cost_of:
                cost_of[o] = switch_time(instance, times.plans[job.cur], times.plans[o], st.bandwidth_gbps[e],
                                         st.latency_ms[e])
            return cost_of[o]

        now = np.array([T[e] for T in times.T])  # every plan met so far, under this epoch's state
        left = (job.iterations - job.done) * (now[job.cur] if math.isfinite(now[job.cur]) else T_base)
        best_seen = best_reachable(now, cost, min(BEST_SEEN_HORIZON_S, left))
        options = [job.cur, g_idx, start_idx, robust_idx, previous, best_seen]
        Tn = np.array([times.T[o][e] if o is not None else np.inf for o in options])
        Tp = np.array([times.T[o][max(e - 1, 0)] if o is not None else np.inf for o in options])
        dt = np.array([0.0] + [np.inf if o is None else cost(o) for o in options[1:]])
        sit = Situation(e, job.t, job.iterations - job.done, job.cur, options, Tn, Tp, dt,
                        job.t - last_switch, T_base, times, trace, instance)
        if prepare is not None:
            prepare(sit)
        took = g_s + time.perf_counter() - t0 if solver_time == "measured" else float(solver_time)
        solver_s += took
        decisions += 1
        if took > 0:
            job.run_until(job.t + took)  # the job trains on while the candidates are prepared
            if job.finished:
                break
        choice = yield sit
        if choice and options[choice] is not None and options[choice] != job.cur:
            e2 = trace.epoch_at(job.t)  # the candidates' preparation may have run into the next epoch
            cost = dt[choice] if e2 == e else switch_time(instance, times.plans[job.cur], times.plans[options[choice]],
                                                          st.bandwidth_gbps[e2], st.latency_ms[e2])
            if math.isfinite(cost):
                previous = job.cur
                job.switch(options[choice], cost)
                last_switch = job.t
    return job, solver_s, decisions


def epoch_rollout(instance, trace, rule, iterations: int, plans: EpochPlans | None = None, name: str | None = None,
                  solver_time="measured", start=None) -> RolloutResult:
    """A job of ``iterations`` iterations through ``trace`` deciding once per epoch
    with ``rule`` (a callable Situation -> None or slot number, with an optional
    ``prepare(situation)``)."""
    plans = plans or EpochPlans(instance, trace)
    gen = rounds(instance, trace, iterations, plans, solver_time, start, prepare=getattr(rule, "prepare", None))
    policy_s, choices = 0.0, 0
    try:
        sit = next(gen)
        while True:
            t0 = time.perf_counter()
            choice = rule(sit)
            policy_s += time.perf_counter() - t0
            choices += 1
            sit = gen.send(choice)
    except StopIteration as stop:
        job, solver_s, decisions = stop.value
    return job.result(name or getattr(rule, "name", "epoch"), solver_s, decisions, policy_s, choices)


@dataclass
class Hysteresis:
    """Switch only when the predicted gain over a horizon beats the switch time by
    a margin (module docstring).  ``horizon_min`` minutes, ``margin`` and
    ``min_gain`` fractions."""

    horizon_min: float = 30.0
    margin: float = 0.5
    min_gain: float = 0.02
    name: str = "hysteresis"

    def __call__(self, sit: Situation):
        ok = sit.valid()
        ok[0] = False
        if not ok.any():
            return None
        T0 = sit.T[0]
        if not math.isfinite(T0):  # the plan cannot run: the fastest slot that can, net of its move
            k = int(np.argmin(np.where(ok, sit.T + sit.dt / max(1, sit.remaining), np.inf)))
            return k
        H = min(self.horizon_min * 60.0, sit.left_s)
        gain = H * (1.0 - sit.T / T0) - (1.0 + self.margin) * sit.dt
        with np.errstate(invalid="ignore"):
            steady = (sit.T <= T0 * (1.0 - self.min_gain)) & (sit.T_prev < sit.T_prev[0])
        cand = ok & steady & (gain > 0)
        if not cand.any():
            return None
        return int(np.argmax(np.where(cand, gain, -np.inf)))


@dataclass
class Lookahead:
    """Model-predictive re-planning over sampled futures (module docstring):
    ``samples`` paths of ``horizon`` epochs; switch when the best option
    completes ``margin`` (a fraction) more iterations than keeping."""

    samples: int = 8
    horizon: int = 6
    margin: float = 0.005
    seed: int = 0
    name: str = "mpc"

    def __post_init__(self):
        self._rng = np.random.default_rng(self.seed)
        self._scores = None

    def prepare(self, sit: Situation) -> None:
        """Score every option over sampled futures: expected iterations completed
        within the horizon (the rest of this epoch, then ``horizon`` epochs),
        the switch time paid first."""
        tr = sit.trace
        e = sit.epoch
        epoch_s = float(tr.times[1] - tr.times[0]) if tr.epochs > 1 else 300.0
        now_left = (float(tr.times[e + 1]) if e + 1 < tr.epochs else float(tr.times[e]) + epoch_s) - sit.t
        H = self.horizon
        futures = sample_futures(sit.instance, tr, e, H, self.samples, self._rng)
        # the job may end within the horizon: count no further than its remaining time
        window = min(now_left + H * epoch_s, sit.left_s)
        dur = np.concatenate([[max(now_left, 0.0)], np.full(H, epoch_s)])
        ends = np.cumsum(dur)
        dur = np.clip(window - (ends - dur), 0.0, dur)  # each step's share of the window
        scores = np.full(len(sit.options), -np.inf)
        cache = {}
        for k, o in enumerate(sit.options):
            if o is None or (k and not sit.valid()[k]):
                continue
            plan = sit.times.plans[o]
            key = plan_key(plan)
            if key not in cache:
                T = Evaluator(sit.instance, plan).iteration_times(futures).reshape(self.samples, H)
                cache[key] = np.concatenate([np.full((self.samples, 1), sit.T[k]), T], axis=1)
            T = cache[key]
            # the switch comes first, out of the first steps' time
            d = np.maximum(dur[None, :] - np.clip(sit.dt[k] - (ends - dur)[None, :], 0.0, dur[None, :]), 0.0)
            with np.errstate(divide="ignore"):
                rate = np.where(np.isfinite(T), 1.0 / T, 0.0)
            scores[k] = float((d * rate).sum(axis=1).mean())
        self._scores = scores

    def __call__(self, sit: Situation):
        s = self._scores
        if s is None or not np.isfinite(s).any():
            return None
        k = int(np.argmax(s))
        if k == 0 or s[k] <= max(s[0], 0.0) * (1.0 + self.margin):
            return None
        return k
