"""The evaluator: exact iteration time, the estimate, memory, cost and
feasibility of a plan (SPEC sections 5-8), vectorised over network states.

``Evaluator(instance, plan)`` compiles the plan once; its methods score it
under the base network or a batch of K states:

>>> ev = Evaluator(instance, plan)                       # doctest: +SKIP
>>> ev.iteration_times(states)        # (K,) seconds, exact simulation
>>> ev.estimate_times(states)         # (K,) seconds, T_est of SPEC 7
>>> evaluate(instance, plan).iteration_time_s            # base network

``spec`` chooses the version of the model: 2 or 3 (SPEC v3 changes (a)-(f):
full duplex, direct routes, uplinks, ``reduce_broadcast``, unit overhead, the
flush-based T_est); the default, :data:`planner.problem.specversion.DEFAULT_SPEC`,
is 3, which every planner models (docs/model.md, section 10); 2 is kept for
comparison:

>>> Evaluator(instance, plan, spec=2).iteration_times()  # doctest: +SKIP

Every solver's plan passes through :func:`evaluate`; its ``violations``
list every broken feasibility rule with the figures involved.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

import numpy as np

from .figures import PlanFigures
from ..problem.network import NetworkStates
from .estimate import stage_end_estimates
from ..problem.errors import InputError
from ..problem.oplists import Deadlock
from ..problem.specversion import check_spec, refuse_v3_fields
from .simulator import Program, compile_program, simulate_ends_and_starts, simulate_times
from ..problem.dpsync import quality_of

ESTIMATE_FLAG = 1.01  # simulated / estimated above this is flagged (issue 24: "the estimate")


@dataclass(frozen=True)
class Violation:
    """One broken feasibility rule: ``rule`` is a short tag, ``message`` says
    which GPUs, which memory, which link, with the numbers."""

    rule: str
    message: str


@dataclass
class Evaluation:
    """The evaluator's figures for one plan under one network state."""

    iteration_time_s: float
    estimate_s: float
    throughput_tokens_per_s: float
    cost_per_iteration: float
    cost_estimate: float  # cost with T_est in place of T
    feasible: bool
    violations: list[Violation] = field(default_factory=list)
    memory_gb_per_gpu: list[float] = field(default_factory=list)
    memory_limit_gb: float = 0.0  # usable per GPU; with GPU types, the smallest over the stages'
    compute_s: list[float] = field(default_factory=list)  # c_j per micro-batch (GPU types: the largest over replicas)
    allreduce_s: list[float] = field(default_factory=list)  # AR_j
    gpus_used: dict[str, int] = field(default_factory=dict)
    wan_gb_per_iteration: float = 0.0
    lower_bound_s: float | None = None
    # SPEC v3 section 11: with a plain sync these are T, T_est, 1 and the throughput
    effective_time_s: float = 0.0  # T_eff
    effective_estimate_s: float = 0.0  # T^est_eff
    quality_factor: float = 1.0  # e
    quality_source: str = "synchronous training"
    effective_tokens_per_s: float = 0.0  # global_batch_size * seq_len * e / T_eff
    dp_sync: dict | None = None  # the plan's option (None: every step, 16 bits)
    sync_groups: int = 1  # M: distinct stage-0 domains
    outer_sync_s: list[float] = field(default_factory=list)  # O_j = O^bw_j + O^lat_j (0 where not charged)
    per_step_time_s: float | None = None  # the same placement with a per-step 16-bit sync (None when plain)

    @property
    def objective_s(self) -> float:
        """Seconds per iteration of effective tokens, T_eff / e: the time objective of
        SPEC 11 times global_batch_size * seq_len (T for a plain plan)."""
        return self.effective_time_s / self.quality_factor

    @property
    def bound_ratio(self) -> float | None:
        """Iteration time over the instance's lower bound (>= 1)."""
        if not self.lower_bound_s:
            return None
        return self.iteration_time_s / self.lower_bound_s

    @property
    def simulated_over_estimate(self) -> float | None:
        """T / T_est: 1 (to rounding) for gpipe-shaped flushes, where SPEC 7 makes T_est
        exact; above :data:`ESTIMATE_FLAG` worth flagging (T_est is a ranking
        figure for other schedules, never a reason to discard a plan).  None when
        T_est is 0 or not finite."""
        if not self.estimate_s or not math.isfinite(self.estimate_s):
            return None
        return self.iteration_time_s / self.estimate_s

    def objective(self, kind: str = "time") -> float:
        """T^est_eff / e or its cost counterpart: what solvers optimise (T_est for a plain plan)."""
        if kind == "time":
            return self.effective_estimate_s / self.quality_factor
        return self.cost_estimate / self.quality_factor

    def to_dict(self) -> dict:
        d = asdict(self)
        d["violations"] = [asdict(v) for v in self.violations]
        d["bound_ratio"] = self.bound_ratio
        d["simulated_over_estimate"] = self.simulated_over_estimate
        d["objective_s"] = self.objective_s
        return d


#: compiled programs kept, counted in instructions (about 200 bytes each: some 400 MB); a
#: count of programs did not bound the memory, one of 16 stages x 768 micro-batches holds
#: 24 MB, and 256 of them (the former ``lru_cache``) grew a benchmark's process past 12 GB
PROGRAM_CACHE_INSTRUCTIONS = 2_000_000
_programs: OrderedDict = OrderedDict()  # key -> Program, least recently used first
_programs_size = [0]
_programs_lock = threading.Lock()


def _program(schedule, stages: int, micro_batches: int, keep_all: bool = False, starts: bool = False) -> Program:
    """:func:`compile_program`, memoised least-recently-used within
    :data:`PROGRAM_CACHE_INSTRUCTIONS` (the latest program is always kept)."""
    key = (schedule, stages, micro_batches, keep_all, starts)
    with _programs_lock:
        prog = _programs.get(key)
        if prog is not None:
            _programs.move_to_end(key)
            return prog
    prog = compile_program(schedule, stages, micro_batches, keep_all, starts)
    with _programs_lock:
        if key not in _programs:
            _programs[key] = prog
            _programs_size[0] += len(prog.code)
        while _programs_size[0] > PROGRAM_CACHE_INSTRUCTIONS and len(_programs) > 1:
            _, old = _programs.popitem(last=False)
            _programs_size[0] -= len(old.code)
    return prog


def program_for(plan, keep_all: bool = False, starts: bool = False) -> Program:
    """The compiled (cached) program of ``plan``'s schedule; may raise Deadlock.
    ``starts``: it also outputs each stage's first start (SPEC 11's a_j)."""
    spec = plan.schedule_spec
    key = spec if isinstance(spec, str) else tuple(tuple(ops) for ops in spec)
    return _program(key, plan.num_stages, plan.num_micro_batches, keep_all, starts)


class Evaluator:
    """A plan compiled for fast repeated scoring (see module docstring).

    Replicas whose boundaries have the same figures (the same routes, or the same
    intra-domain bandwidth) are simulated once (``fig.groups`` of them): the
    iteration time is a maximum over replicas, and a replica's simulation depends
    on its own figures only, so the result is the same to the bit.
    ``group_replicas=False`` simulates every replica (the reference the tests and
    ``benchmarks/scale.py`` compare with).  ``spec``: the model version (see the
    module docstring); under 2 an instance using a v3-only field raises ``InputError``.
    """

    def __init__(self, instance, plan, group_replicas: bool = True, spec: int | None = None, background=None):
        plan.check_against(instance)
        self.instance, self.plan = instance, plan
        self.spec = check_spec(spec)
        self.background = background  # SPEC 10 shared sharing: the other jobs' users (figures.Background)
        self.fig = PlanFigures(instance, plan, self.spec, background)
        self.group_replicas = group_replicas
        self._base = None
        # SPEC 11: the quality factor e of the plan's sync, and its source (InputError: no row covers it)
        self.quality = quality_of(instance, plan.dp_sync, self.fig.M)

    def _comm(self, st: NetworkStates):
        return self.fig.comm_groups(st) if self.group_replicas else self.fig.comm(st)

    def _states(self, states) -> NetworkStates:
        if states is None:
            if self._base is None:
                self._base = NetworkStates.base(self.instance)
            return self._base
        states.check_links(self.instance)
        return states

    def one_state(self, states: NetworkStates | None, caller: str) -> NetworkStates:
        """``states`` (or the base network) checked to hold exactly one state."""
        st = self._states(states)
        if st.count != 1:
            raise ValueError(f"{caller}() takes one network state; use iteration_times() for a batch")
        return st

    def stage_ends(self, states: NetworkStates | None = None) -> np.ndarray:
        """E_j (SPEC 6): when stage j ends its last op, over replicas, shape (K, S), seconds.

        Raises :class:`planner.problem.oplists.Deadlock` for a deadlocking schedule.
        """
        return self._simulate(self._comm(self._states(states)))

    def _classes(self, comm):
        """``(f, g, x, l)`` of each class of replicas with the same GPU types (SPEC v3 (g):
        (r, j) runs at the speed of its domain's type): the class's compute figures and its
        replicas' (or groups') communication columns.  One class with one type everywhere."""
        fig = self.fig
        if fig.classes == 1:
            yield fig.class_f[0], fig.class_g[0], comm.x, comm.l
            return
        of = fig.group_class if self.group_replicas else fig.replica_class
        for k in range(fig.classes):
            cols = np.nonzero(of == k)[0]
            yield fig.class_f[k], fig.class_g[k], comm.x[:, cols], comm.l[:, cols]

    def _by_class(self, comm, stage_ends) -> np.ndarray:
        """``stage_ends(f, g, x, l)`` (K, S) taken per class (:meth:`_classes`), the largest
        over the classes: E_j is a maximum over replicas and each replica's figures are its
        own."""
        out = None
        for f, g, x, l in self._classes(comm):
            E = stage_ends(f, g, x, l)
            out = E if out is None else np.maximum(out, E)
        return out

    def _simulate(self, comm) -> np.ndarray:
        prog = program_for(self.plan)
        return self._by_class(comm, lambda f, g, x, l: simulate_times(prog, f, g, x, l))  # (K, S)

    def iteration_times(self, states: NetworkStates | None = None) -> np.ndarray:
        """Exact simulated iteration time per state, T = max_j (E_j + AR_j), shape (K,), seconds.

        Raises :class:`planner.problem.oplists.Deadlock` for a deadlocking schedule.
        """
        comm = self._comm(self._states(states))
        return (self._simulate(comm) + comm.ar).max(axis=1)

    def relaxed_times(self, states: NetworkStates | None = None, compute=1.0, allreduce: float = 1.0
                      ) -> np.ndarray:
        """T per state, shape (K,), seconds, with every replica's stage j computing ``compute[j]``
        times faster (f and g of each class divided by it; a scalar: every stage) and gradient
        synchronisation ``allreduce`` times faster: the what-ifs of ``planner explain``, simulated
        like :meth:`iteration_times` (per class of GPU types, exact).  With both 1 it is
        :meth:`iteration_times` bit for bit.

        >>> ev.relaxed_times(compute=np.array([1.1, 1.0]))    # stage 0 10% faster  # doctest: +SKIP
        array([7.01])
        """
        comm = self._comm(self._states(states))
        prog = program_for(self.plan)
        div = np.asarray(compute, dtype=float)
        E = self._by_class(comm, lambda f, g, x, l: simulate_times(prog, f / div, g / div, x, l))
        return (E + comm.ar / allreduce).max(axis=1)

    def class_times(self, states: NetworkStates | None = None) -> np.ndarray:
        """Each class of replicas' (same row of GPU types, ``fig.replica_class``) own
        max_j (E_j + AR_j), shape (K, classes), seconds: T is its largest column, the
        *binding* class (one column with one type everywhere).

        >>> ev.class_times().argmax(axis=1)     # the binding class  # doctest: +SKIP
        array([1])
        """
        comm = self._comm(self._states(states))
        prog = program_for(self.plan)
        return np.stack([(simulate_times(prog, f, g, x, l) + comm.ar).max(axis=1)
                         for f, g, x, l in self._classes(comm)], axis=1)

    def estimate_ends(self, states: NetworkStates | None = None) -> np.ndarray:
        """E^est_j (SPEC 7), shape (K, S), seconds."""
        return self._estimate(self._comm(self._states(states)))

    def _estimate(self, comm) -> np.ndarray:
        fig = self.fig
        return self._by_class(comm, lambda f, g, x, l: stage_end_estimates(
            f, g, x, l, fig.flushes, downstream=self.spec >= 3))

    def estimate_times(self, states: NetworkStates | None = None) -> np.ndarray:
        """T_est = max_j (E^est_j + AR_j) per state, shape (K,), seconds."""
        comm = self._comm(self._states(states))
        return (self._estimate(comm) + comm.ar).max(axis=1)

    # -- SPEC 11: the data-parallel sync's outer steps -------------------------
    def _ends_starts(self, comm) -> tuple[np.ndarray, np.ndarray]:
        """(E, a), each (K, S): stage ends (latest over replicas) and the start of each
        stage's first op (earliest over replicas), per class of GPU types."""
        prog = program_for(self.plan, starts=True)
        E = a = None
        for f, g, x, l in self._classes(comm):
            Ek, ak = simulate_ends_and_starts(prog, f, g, x, l)
            E = Ek if E is None else np.maximum(E, Ek)
            a = ak if a is None else np.minimum(a, ak)
        return E, a

    def _estimate_starts(self, comm) -> np.ndarray:
        """a^est_j (K, S) = min_r sum_{i<j} (f_{i,r} + x_{i,r} + l_{i,r}) (SPEC 11)."""
        K, S = comm.ar.shape
        a = np.zeros((K, S))
        if S > 1:
            a[:, 1:] = np.min([np.cumsum(f[:-1] + x + l, axis=2).min(axis=1)
                               for f, g, x, l in self._classes(comm)], axis=0)
        return a

    def _effective(self, E, ar, states, starts=None, dp=None) -> tuple[np.ndarray, np.ndarray]:
        """(T_in, T_eff) per state (SPEC 11) from stage ends E and inner syncs ar (K, S);
        ``starts()`` gives a_j (K, S), called for streaming only.  ``dp``: another option
        of the same mode and bits as the plan's (other H, F, nu), on the same figures."""
        fig = self.fig
        dp = dp or fig.dp
        T_in = (E + ar).max(axis=1)
        if not dp.outer or not fig.outer_charged.any():
            return T_in, T_in
        obw, olat = fig.outer_times(states)
        return T_in, outer_effective(dp, T_in, E, ar, obw, olat, fig.codec_times(fig.outer_charged),
                                     fig.outer_charged, starts)

    def effective_times(self, states: NetworkStates | None = None) -> np.ndarray:
        """T_eff per state (SPEC 11), shape (K,), seconds: the iteration time with the
        outer syncs amortised (diloco) or overlapped (streaming); T for a plain plan."""
        st = self._states(states)
        comm = self._comm(st)
        return self._effective_sim(comm, st)[1]

    def _effective_sim(self, comm, st):
        fig = self.fig
        if fig.dp.mode == "streaming" and fig.outer_charged.any():
            E, a = self._ends_starts(comm)
            return self._effective(E, comm.ar, st, lambda: a)
        return self._effective(self._simulate(comm), comm.ar, st)

    def effective_estimate_times(self, states: NetworkStates | None = None) -> np.ndarray:
        """T^est_eff per state (SPEC 11), shape (K,), seconds: T_est for a plain plan."""
        st = self._states(states)
        comm = self._comm(st)
        return self._effective(self._estimate(comm), comm.ar, st, lambda: self._estimate_starts(comm))[1]

    def option_estimates(self, options, states: NetworkStates | None = None) -> list[float | None]:
        """T^est_eff / e (or the cost over e) under one state for each of ``options``,
        options of the plan's own mode and bits that differ in H, fragments, overlap or
        outer_state only (their figures are the plan's); None for an option a quality
        row does not cover or whose outer state does not fit memory.  What
        :func:`planner.solvers.syncchoice.with_best_sync` ranks with, without an
        Evaluator per option.

        >>> ev.option_estimates([DpSync(mode="diloco", H=h, bits=4) for h in (10, 30)])  # doctest: +SKIP
        [12.3, 11.9]
        """
        fig, inst = self.fig, self.instance
        st = self.one_state(states, "option_estimates")
        comm = self._comm(st)
        E = self._estimate(comm)
        a = []
        starts = lambda: a[0] if a else (a.append(self._estimate_starts(comm)) or a[0])  # noqa: E731
        base = fig.memory - fig.outer_state_share * fig.beta_o * fig.P / self.plan.tp
        out = []
        for dp in options:
            if (dp.mode, dp.bits) != (fig.dp.mode, fig.dp.bits):
                raise ValueError(f"option {dp.label()} is not of the plan's mode and bits ({fig.dp.label()})")
            try:
                e = quality_of(inst, dp, fig.M)[0]
            except InputError:
                out.append(None)
                continue
            if np.any(base + dp.outer_state_share * fig.beta_o * fig.P / self.plan.tp > fig.memory_limit * (1 + 1e-12)):
                out.append(None)
                continue
            T = self._effective(E, comm.ar, st, starts, dp=dp)[1]
            out.append(float(self.objective(T)[0]) / e)
        return out

    def scores(self, states: NetworkStates | None = None) -> np.ndarray:
        """The instance's objective per state, from the simulation (SPEC 11): T_eff / e
        seconds (time) or cost(T_eff) / e (cost); T or the cost for a plain plan.

        >>> Evaluator(inst, plan).scores()               # doctest: +SKIP
        array([14.69])
        """
        return self.objective(self.effective_times(states)) / self.quality[0]

    def estimate_scores(self, states: NetworkStates | None = None) -> np.ndarray:
        """:meth:`scores` with T^est_eff: what solvers optimise."""
        return self.objective(self.effective_estimate_times(states)) / self.quality[0]

    def cost(self, seconds) -> np.ndarray:
        """Cost per iteration for iteration times ``seconds`` (SPEC 6)."""
        fig = self.fig
        t = np.asarray(seconds, dtype=float)
        with np.errstate(invalid="ignore"):  # inf * 0 for free GPUs
            cost = t / 3600.0 * fig.gpu_hour_price() + fig.wan_bytes() / 1e9 * self.instance.options.wan_price_per_gb
        return np.where(np.isinf(t), np.inf, cost)  # a plan that never ends costs without bound

    def objective(self, seconds) -> np.ndarray:
        """The instance's objective for iteration times ``seconds``: the times themselves
        (``objective = "time"``) or the cost per iteration (``"cost"``)."""
        return np.asarray(seconds, dtype=float) if self.instance.options.objective == "time" else self.cost(seconds)

    def throughput(self, seconds) -> np.ndarray:
        wl = self.instance.workload
        with np.errstate(divide="ignore"):
            return wl.global_batch_size * wl.seq_len / np.asarray(seconds)

    def violations(self) -> list[Violation]:
        return check_plan(self.instance, self.plan, self.fig)

    def evaluate(self, states: NetworkStates | None = None, lower_bound_s: float | None = None) -> Evaluation:
        """All figures under one state (the base network by default)."""
        self.one_state(states, "evaluate")
        fig, inst = self.fig, self.instance
        violations = self.violations()
        deadlock = any(v.rule == "deadlock" for v in violations)
        st = self._states(states)
        comm = self._comm(st)
        if deadlock:
            T = Te = T_eff = Te_eff = float("inf")
        else:
            T, T_eff = (float(v[0]) for v in self._effective_sim(comm, st))
            Te, Te_eff = (float(v[0]) for v in self._effective(
                self._estimate(comm), comm.ar, st, lambda: self._estimate_starts(comm)))
        e, source = self.quality
        wl = inst.workload
        obw, olat = fig.outer_times(st)
        per_step = None
        if not fig.dp.plain and not deadlock:
            plain = Evaluator(inst, self.plan.model_copy(update={"dp_sync": None}), self.group_replicas, self.spec,
                              self.background)
            per_step = float(plain.iteration_times(st)[0])
        return Evaluation(
            iteration_time_s=T, estimate_s=Te,
            throughput_tokens_per_s=float(self.throughput(T_eff)),
            cost_per_iteration=float(self.cost(T_eff)), cost_estimate=float(self.cost(Te_eff)),
            effective_time_s=T_eff, effective_estimate_s=Te_eff, quality_factor=e, quality_source=source,
            effective_tokens_per_s=float(wl.global_batch_size * wl.seq_len * e / T_eff) if T_eff > 0 else 0.0,
            dp_sync=None if self.plan.dp_sync is None else self.plan.dp_sync.to_dict(),
            sync_groups=fig.M, outer_sync_s=[float(v) for v in (obw + olat)[0]], per_step_time_s=per_step,
            feasible=not violations, violations=violations,
            memory_gb_per_gpu=[float(v) / 1e9 for v in fig.memory],
            memory_limit_gb=float(fig.memory_limit.min()) / 1e9,
            compute_s=[float(v) for v in fig.c], allreduce_s=[float(v) for v in comm.ar[0]],
            gpus_used=dict(self.plan.gpus_per_domain()),
            wan_gb_per_iteration=fig.wan_bytes() / 1e9, lower_bound_s=lower_bound_s)


def outer_effective(dp, T_in, E, ar, obw, olat, X, charged, starts) -> np.ndarray:
    """T_eff (K,) of SPEC 11 for an outer sync ``dp`` (diloco or streaming), seconds:
    from T_in (K,), the stage ends E, inner syncs ``ar``, the outer sync's parts
    ``obw``, ``olat`` (K, S), the codec times X (S,) and the stages with O_j charged;
    ``starts()`` gives a_j (K, S) (streaming only).

    diloco: ``T_in + (max_j (E_j + AR^in_j + X_j + O_j) - T_in) / H``; streaming:
    ``max(T_in + (F / H) max_j s_j, max_j (F o_j + X_j) / H)`` with
    ``o_j = O^bw_j / F + O^lat_j`` and the stall ``s_j = max(0, o_j + X_j / F - W_j)``,
    ``W_j = nu T_in + (T_in - E_j - AR^in_j) + a_j``.
    """
    with np.errstate(invalid="ignore"):  # inf - inf where a link is down: T_eff is then inf (SPEC 8)
        if dp.mode == "diloco":
            T_sync = (E + ar + X + obw + olat).max(axis=1)
            T = T_in + (T_sync - T_in) / dp.H
        else:
            F, nu = dp.fragments, dp.overlap
            o = obw / F + olat
            W = nu * T_in[:, None] + (T_in[:, None] - E - ar) + starts()
            stall = np.maximum(0.0, o + X / F - W)[:, charged].max(axis=1)
            floor = (F * o + X)[:, charged].max(axis=1) / dp.H
            T = np.maximum(T_in + (F / dp.H) * stall, floor)
    return np.where(np.isnan(T), np.inf, T)


def check_plan(instance, plan, fig: PlanFigures | None = None) -> list[Violation]:
    """Every feasibility rule the plan breaks (SPEC 4-6), with its figures."""
    fig = fig or PlanFigures(instance, plan)
    wl, opt = instance.workload, instance.options
    out: list[Violation] = []
    for d, used in sorted(plan.gpus_per_domain().items(), key=lambda kv: instance.domain_index[kv[0]]):
        have = instance.domain(d).gpus
        if used > have:
            out.append(Violation("gpu_capacity", f"domain {d}: plan uses {used} GPUs, {have} available"))
    if plan.tp not in wl.tensor_parallel:
        out.append(Violation("tensor_parallel", f"tp={plan.tp} is not a candidate {wl.tensor_parallel}"))
    for d in sorted({d for row in plan.placement for d in row}, key=instance.domain_index.__getitem__):
        if plan.tp > instance.domain(d).gpus_per_node:
            out.append(Violation("tensor_parallel", f"domain {d}: tp={plan.tp} exceeds gpus_per_node="
                                 f"{instance.domain(d).gpus_per_node}"))
    if plan.micro_batch_size not in wl.micro_batch_sizes:
        out.append(Violation("micro_batch_size", f"micro_batch_size={plan.micro_batch_size} is not a "
                             f"candidate {wl.micro_batch_sizes}"))
    if isinstance(plan.schedule, str) and plan.schedule not in opt.schedules:
        out.append(Violation("schedule", f"schedule {plan.schedule} not allowed (options.schedules = "
                             f"{opt.schedules})"))
    if not isinstance(plan.schedule, str) and not opt.explicit_schedules:
        out.append(Violation("schedule", "explicit op lists not allowed (options.explicit_schedules = false)"))
    if plan.dp_sync is not None and plan.dp_sync.mode not in opt.sync_modes:
        out.append(Violation("dp_sync", f"dp_sync mode {plan.dp_sync.mode} not allowed (options.dp_sync = "
                             f"{list(opt.sync_modes)})"))
    if plan.num_stages > instance.max_stages:
        out.append(Violation("max_stages", f"{plan.num_stages} stages > max_stages={instance.max_stages}"))
    for j, mem in enumerate(fig.memory):
        limit = fig.memory_limit[j]  # the smallest over the GPU types hosting stage j (SPEC 5)
        if mem > limit * (1 + 1e-12):
            s = plan.stages[j]
            on = ""
            if len(instance.gpu_types) > 1:
                lims = [instance.memory_limit_of(instance.gpu_types[u]) for u in fig.type_of[:, j]]
                on = f" on {instance.gpu_types[int(fig.type_of[int(np.argmin(lims)), j])].name}"
            out.append(Violation("memory", f"stage {j} (units {s.start}-{s.end - 1}): "
                                 f"{mem / 1e9:.2f} GB per GPU > {limit / 1e9:.2f} GB usable{on} "
                                 f"(tp={plan.tp}, {int(fig.inflight[j])} micro-batches in flight, "
                                 f"weights+optimizer {16 * fig.P[j] / plan.tp / 1e9:.2f} GB"
                                 + (f", outer state {fig.outer_state_share * fig.beta_o * fig.P[j] / plan.tp / 1e9:.2f} GB"
                                    if fig.outer_state_share else "") + ")"))
    for r, row in enumerate(plan.placement):
        for k in range(len(row) - 1):
            if row[k] != row[k + 1] and (row[k], row[k + 1]) not in instance.routes:
                out.append(Violation("route", f"replica {r}: no route between {row[k]} and {row[k + 1]}"))
    try:
        program_for(plan)
    except Deadlock as err:
        out.append(Violation("deadlock", str(err)))
    return out


def evaluate(instance, plan, states: NetworkStates | None = None, spec: int | None = None) -> Evaluation:
    """Evaluate ``plan`` on ``instance`` (base network unless one state is given).

    The result carries the exact iteration time (s), T_est (s), throughput
    (tokens/s), cost per iteration, memory per GPU (GB), feasibility with
    every violation, and the ratio to the instance's lower bound for the
    version ``spec`` (:func:`planner.scoring.bounds.lower_bound`).
    """
    from .bounds import lower_bound

    ev = Evaluator(instance, plan, spec=spec)
    return ev.evaluate(states, lower_bound_s=lower_bound(instance, spec=ev.spec).value)


def iteration_times(instance, plan, states: NetworkStates, spec: int | None = None) -> np.ndarray:
    """Exact iteration times (s) of ``plan`` under K states, shape (K,)."""
    return Evaluator(instance, plan, spec=spec).iteration_times(states)


def simulated_score(instance, plan: Plan, fidelity: bool = False, spec: int | None = None):
    """The plan's objective under the base network from the exact simulation: its
    time T_eff / e (s; T for a plain plan, SPEC 11), or its cost per iteration over e
    for a cost instance; None when ``check_plan`` rejects it.
    With ``fidelity=True``: ``(score, T / T_est)``, the simulated time over the
    estimate (SPEC 7), or None.

    >>> simulated_score(instance, greedy(instance))                 # doctest: +SKIP
    25.15
    """
    refuse_v3_fields(instance, spec)  # an instance the version cannot score is an error, not "infeasible"
    try:
        ev = Evaluator(instance, plan, spec=spec)
    except InputError:  # a plan that does not fit the instance
        return None
    if check_plan(instance, plan, ev.fig):
        return None
    T = float(ev.effective_times()[0])
    if not math.isfinite(T):
        return None
    score = float(ev.objective(T)) / ev.quality[0]
    if not fidelity:
        return score
    est = float(ev.effective_estimate_times()[0])
    return score, (T / est if est > 0 else math.inf)
