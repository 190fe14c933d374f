"""A training job's clock through a network trace, with exact accounting
(SPEC section 8): what every re-planning policy shares.

* :func:`switch_time`: seconds to move from one plan's placement to another's;
* :class:`PlanTimes`: every plan's iteration time in every epoch of the trace,
  computed once per plan with the vectorised evaluator;
* :class:`Job`: the job's clock for policies that decide once per epoch; it
  runs the iterations of an epoch in closed form (an epoch of 300 s holds up
  to a million iterations of a tiny model) and keeps, exactly,
  ``t = compute + reconfiguration + stalled``;
* :class:`RolloutResult`: what a rollout reports.

Each iteration runs under the state in force when it starts; a plan that
uses a link that is down (T = inf) waits, *stalled*, for the next epoch.

Example
-------
>>> times = PlanTimes(instance, trace)                     # doctest: +SKIP
>>> job = Job(trace, times, iterations=1000, plan=times.add(plan))
>>> job.run_until(trace.times[1]); job.t, job.done, job.stalled
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..problem.plan import Plan
from ..scoring.evaluator import Evaluator
from ..scoring.figures import concurrent_transfers


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
    policy_s: float = 0.0  # wall time of the keep-or-switch choices themselves (rules, controller)
    choices: int = 0  # keep-or-switch choices made

    @property
    def decision_s(self) -> float | None:
        """Mean solver wall time of one re-planning decision (None without decisions)."""
        return self.solver_s / self.decisions if self.decisions else None

    @property
    def choice_ms(self) -> float | None:
        """Mean wall time (ms) of one keep-or-switch choice given scored candidates (None without)."""
        return 1e3 * self.policy_s / self.choices if self.choices else None

    @property
    def iterations_per_hour(self) -> float:
        return self.iterations / self.total_s * 3600.0 if self.total_s > 0 else 0.0

    def summary(self) -> dict:
        return {"policy": self.policy, "iterations": int(self.iterations), "total_s": float(self.total_s),
                "iterations_per_hour": float(self.iterations_per_hour), "compute_s": float(self.compute_s),
                "reconfig_s": float(self.reconfig_s), "stalled_s": float(self.stalled_s),
                "switches": int(self.switches), "solver_s": float(self.solver_s), "decisions": int(self.decisions),
                "decision_s": None if self.decision_s is None else float(self.decision_s),
                "choice_ms": None if self.choice_ms is None else float(self.choice_ms),
                "completed": self.completed}


def switch_time(instance, old: Plan, new: Plan, bw_gbps: np.ndarray, lat_ms: np.ndarray,
                spec: int | None = None) -> float:
    """Seconds to move state from ``old``'s placement to ``new``'s under one state
    (``bw_gbps``, ``lat_ms``: per link, Gbit/s and ms).

    For every (replica, unit) whose domain changes, the unit's 16 bytes per
    parameter (plus the new plan's outer state, SPEC 11: :func:`outer_state_bytes`)
    move over the route; all moves start together and share each
    resource (SPEC 8: by processor sharing under v3, equally under v2, see
    :func:`planner.scoring.figures.concurrent_transfers`); the switch takes the
    longest move (its route's latency plus its bytes over its smallest share).
    Replica r of the new plan takes over from replica r mod R_old.  0.0 for
    the same placement, inf when a needed link is down.
    """
    units = instance.units
    # SPEC 8, 11: a move carries 16 bytes per parameter, plus the outer state the new plan keeps
    # on the GPU (phi_o beta_o: diloco or streaming)
    per_param = 16.0 + outer_state_bytes(instance, new)
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
                    moves[(src[u], d)] += per_param * units[u].params
    if not moves:
        return 0.0
    idx = {name: i for i, name in enumerate(instance.domain_names)}
    src, dst = zip(*((idx[a], idx[b]) for a, b in moves))
    times = concurrent_transfers(instance, src, dst, list(moves.values()), bw_gbps, lat_ms, spec=spec)
    return float(times.max())


def outer_state_bytes(instance, plan: Plan) -> float:
    """Bytes per parameter of outer state ``plan`` keeps on the GPU (SPEC 11: phi_o beta_o;
    0 for a per-step sync)."""
    dp = plan.dp_sync
    return 0.0 if dp is None else dp.outer_state_share * instance.compression.outer_state_bytes_per_param


def block(plan: Plan) -> int:
    """Iterations a plan runs between two points where it may switch (SPEC 8): H for
    diloco and streaming (a block ends with an outer sync), else 1."""
    return plan.dp_sync.period if plan.dp_sync is not None else 1


def plan_key(plan: Plan) -> str:
    """A plan's identity without its predicted figures and solver record."""
    return plan.model_copy(update={"predicted": None, "solver": None, "instance": ""}).to_json(indent=None)


class PlanTimes:
    """Iteration time (s) of a plan in every epoch of ``trace``, computed once per
    plan (one vectorised evaluator call); ``memo`` (key -> times) may be shared
    between rollouts of the same trace.  With ``dp_sync`` (SPEC 11) the time of one
    iteration of *effective* tokens, T_eff / e: a diloco block of H iterations takes
    ``(H - 1) T_in + T_sync = H T_eff``, a streaming block ``H T_eff`` (SPEC 8), and
    e turns iterations into effective ones (docs/model.md); ``blocks[k]`` is the
    plan's H (1 for a per-step sync)."""

    def __init__(self, instance, trace, memo: dict | None = None):
        self.instance, self.trace = instance, trace
        self.plans: list[Plan] = []
        self.T: list[np.ndarray] = []
        self.blocks: list[int] = []
        self._index: dict[str, int] = {}
        self.memo = {} if memo is None else memo

    def add(self, plan: Plan) -> int:
        key = plan_key(plan)
        if key not in self._index:
            self._index[key] = len(self.plans)
            self.plans.append(plan)
            if key not in self.memo:
                ev = Evaluator(self.instance, plan)
                self.memo[key] = (ev.iteration_times(self.trace.states) if plan.dp_sync is None else
                                  ev.effective_times(self.trace.states) / ev.quality[0])
            self.T.append(self.memo[key])
            self.blocks.append(block(plan))
        return self._index[key]


def starts_before(t: float, T: float, lim: float, most: int, block: int = 1) -> int:
    """How many iterations of ``T`` s, back to back from ``t``, start before ``lim``
    (at least 1, at most ``most``); e.g. ``starts_before(0, 2, 5, 99) == 3``.  With
    ``block`` > 1 the iterations run in blocks of that many (a diloco or streaming
    plan, SPEC 8): every block that starts before ``lim`` runs whole (the last one
    cut at ``most``), e.g. ``starts_before(0, 2, 5, 99, block=4) == 4``."""
    if block > 1:
        return min(most, block * starts_before(t, block * T, lim, -(-most // block)))
    if not math.isfinite(lim):
        return most
    k = max(1, min(most, math.ceil((lim - t) / T)))
    while k > 1 and t + (k - 1) * T >= lim:  # rounding: every start is before lim
        k -= 1
    while k < most and t + k * T < lim:
        k += 1
    return k


class Job:
    """The clock of a job of ``iterations`` iterations through ``trace`` on plan
    index ``plan`` of ``times`` (see the module docstring).  All times in s."""

    def __init__(self, trace, times: PlanTimes, iterations: int, plan: int, start_s: float = 0.0):
        self.trace, self.times, self.iterations = trace, times, int(iterations)
        self.t = float(start_s)
        self.start_s = float(start_s)
        self.done = 0
        self.compute = self.reconfig = self.stalled = 0.0
        self.switches = 0
        self.cur = plan
        self.stuck = False  # the plan cannot run in the last epoch: the job never ends
        self.series: dict[int, list] = {}

    @property
    def finished(self) -> bool:
        return self.done >= self.iterations or self.stuck

    @property
    def elapsed(self) -> float:
        return self.t - self.start_s

    def switch(self, plan: int, seconds: float) -> None:
        """Adopt plan index ``plan`` after a reconfiguration of ``seconds``."""
        self.t += seconds
        self.reconfig += seconds
        self.switches += 1
        self.cur = plan

    def run_until(self, stop_s: float) -> None:
        """Run the iterations that start before ``stop_s`` (the last one ends at or
        after it), stalling through epochs in which the plan cannot run."""
        tr = self.trace
        while self.t < stop_s and not self.finished:
            e = tr.epoch_at(self.t)
            end = float(tr.times[e + 1]) if e + 1 < tr.epochs else math.inf
            T = float(self.times.T[self.cur][e])
            if not math.isfinite(T):
                if not math.isfinite(end):
                    self.stuck = True
                    return
                self.stalled += end - self.t
                self.t = end
                continue
            k = starts_before(self.t, T, min(end, stop_s), self.iterations - self.done, self.times.blocks[self.cur])
            self.t += k * T
            self.compute += k * T
            self.done += k
            row = self.series.setdefault(e, [0, 0.0, self.cur])
            row[0] += k
            row[1] += k * T

    def result(self, policy: str, solver_s: float = 0.0, decisions: int = 0, policy_s: float = 0.0,
               choices: int = 0) -> RolloutResult:
        tr = self.trace
        rows = [Epoch(e, float(tr.times[e]), n, tot / n, p) for e, (n, tot, p) in sorted(self.series.items())]
        return RolloutResult(policy, self.done, self.elapsed, self.compute, self.reconfig, self.stalled,
                             self.switches, solver_s, decisions, self.times.plans, rows,
                             completed=self.done >= self.iterations, policy_s=policy_s, choices=choices)
