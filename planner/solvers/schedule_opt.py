"""Optimal micro-batch schedules over a WAN (OR-Tools CP-SAT).

For a fixed placement, partition and micro-batch size, find explicit
per-stage op lists (SPEC section 6) that minimise the exactly simulated
iteration time, with every stage's in-flight micro-batches within what its
GPU memory allows (SPEC section 5).

Model (per group of replicas with identical transfer figures; the op lists
are shared by all replicas):

* intervals F[j,i], B[j,i] for forward/backward of micro-batch i on stage j,
  send intervals on every channel, all in integer time units;
* micro-batches keep their order on every stage and channel (F(i) before
  F(i+1), B(i) before B(i+1)): micro-batches are identical, so this loses
  nothing, and it makes a channel's send order equal its producer's op order
  as the simulator requires;
* the only decisions are how forwards and backwards interleave: a literal
  ``before[j,i,k]`` = "F(i) precedes B(k) on stage j", shared by every
  replica group (so they all run the same op lists), fixed to 1 for k >= i
  and to 0 for k <= i - cap_j (at most cap_j micro-batches in flight);
* arrivals: F(i) on stage j+1 starts after the send from stage j ends plus
  the latency, B likewise backwards; the makespan is max_j end(B[j,m-1]) + AR_j.

Times are scaled to integers with a power-of-ten unit of about 1e-5 of the
1f1b iteration time (``unit_s`` in the result); rounding each duration to
the unit moves the makespan by at most half a unit per op on the critical
path.  The returned schedule is re-scored by the exact evaluator.

Example
-------
>>> better = optimize_schedule(instance, plan, time_limit=30)     # doctest: +SKIP
>>> better.schedule.kind, better.predicted.iteration_time_s
('explicit', 41.2)
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from . import stop
from ..problem.errors import InfeasibleError
from ..scoring.evaluator import Evaluator, check_plan
from ..problem.plan import ExplicitSchedule, Plan, SolverInfo
from ..problem.oplists import B, F, format_op, op_lists

log = logging.getLogger("planner.scheduling")


def memory_caps(instance, plan) -> list[int]:
    """Largest in-flight count per stage that fits GPU memory (SPEC 5), capped at m: the
    usable memory of the smallest GPU type hosting the stage (SPEC v3 (g)), less the weights,
    optimizer state and outer state (SPEC 11) the stage keeps whatever is in flight."""
    ev = Evaluator(instance, plan)
    fig = ev.fig
    tok = plan.micro_batch_size * instance.workload.seq_len
    room = fig.memory_limit * plan.tp - fig.fixed_bytes  # weights, optimizer and outer state
    caps = []
    for j in range(plan.num_stages):
        per = tok * fig.stored[j]
        if room[j] < per - 1e-9 * max(per, 1.0):
            s = plan.stages[j]
            raise InfeasibleError(f"stage {j} (units {s.start}-{s.end - 1}) cannot hold even one micro-batch "
                                  f"in flight within {fig.memory_limit[j] / 1e9:.1f} GB per GPU")
        caps.append(plan.num_micro_batches if per <= 0 else int(min(plan.num_micro_batches,
                                                                      math.floor(room[j] / per + 1e-9))))
    return caps


MEMORY_BUDGETS = ("gpu", "peak", "stage")
LITERALS_PER_SECOND = 5_000  # model size allowed per second of time limit (building runs at ~20-40k/s)
MIN_LITERALS = 50_000


class ScheduleTooLarge(ValueError):
    """The schedule model would be too large to build within a reasonable time."""


def budget_caps(instance, plan, memory: str = "gpu") -> list[int]:
    """In-flight micro-batches allowed per stage under a memory budget.

    * ``"gpu"``: whatever fits each stage's GPU memory (:func:`memory_caps`);
    * ``"peak"``: the same *peak* memory per GPU as ``plan``'s own schedule
      (e.g. 1f1b): every stage may use up to the largest per-GPU footprint
      any stage has under that schedule (the convention of "same memory as
      1F1B" in the pipeline-schedule literature, e.g. zero-bubble ZB-H1);
    * ``"stage"``: no stage holds more micro-batches than under ``plan``'s
      own schedule (the strictest reading of "equal memory").
    """
    from ..scoring.figures import PlanFigures

    if memory not in MEMORY_BUDGETS:
        raise ValueError(f"memory budget is one of {', '.join(MEMORY_BUDGETS)}, not {memory!r}")
    caps = memory_caps(instance, plan)
    fig = PlanFigures(instance, plan)
    if memory == "stage":
        return [max(1, min(c, int(w))) for c, w in zip(caps, fig.inflight)]
    if memory == "peak":
        peak = float(np.max(fig.memory))  # bytes per GPU
        tok = plan.micro_batch_size * instance.workload.seq_len
        out = []
        for j, c in enumerate(caps):
            per = tok * fig.stored[j]
            room = peak * plan.tp - fig.fixed_bytes[j]
            out.append(c if per <= 0 else max(1, min(c, int(math.floor(room / per + 1e-9)))))
        return out
    return caps


def inflight_bound(instance, plan, caps: list[int]) -> float:
    """Lower bound (s) on the iteration time of *every* schedule of ``plan``
    (same placement, partition, micro-batches) whose stage j never holds more
    than ``caps[j]`` micro-batches in flight (Little's law).

    Micro-batch i is resident on stage j from the start of F(i) to the end
    of B(i): at least its round trip ``Q_{j,r}`` (SPEC 7).  At most
    ``caps[j]`` are resident at once, and stage j starts no earlier than its
    forward prefix ``P_{j,r} = sum_{i<j} (f_i + x_{i,r} + l_{i,r})``, so
    ``E_j >= P_{j,r} + m Q_{j,r} / caps[j]`` and
    ``T >= max_{j,r} (P_{j,r} + m Q_{j,r} / caps[j] + AR_j)``; the stage's
    own work gives ``E_j >= P_{j,r} + m c_j``, and the bound takes the larger.

    >>> inflight_bound(inst, plan, [4, 3, 2, 1])              # doctest: +SKIP
    46.0
    """
    ev = Evaluator(instance, plan)
    fig = ev.fig
    comm = fig.comm(ev._states(None))
    x, l, ar = comm.x[0], comm.l[0], comm.ar[0]
    S, m = plan.num_stages, plan.num_micro_batches
    best = 0.0
    for r in range(plan.replicas):
        # replica r's own figures (its class's: GPU types, SPEC v3 (g))
        k = fig.replica_class[r]
        f, g = np.asarray(fig.class_f[k], float), np.asarray(fig.class_g[k], float)
        c = f + g
        for j in range(S):
            Q = c[j:].sum() + 2.0 * (x[r, j:].sum() + l[r, j:].sum())
            P = f[:j].sum() + x[r, :j].sum() + l[r, :j].sum()
            best = max(best, P + max(m * Q / caps[j], m * c[j]) + ar[j])
    return float(best)


def _unit(seconds: float) -> float:
    return 10.0 ** math.floor(math.log10(max(seconds, 1e-12) / 1e5))


def optimize_schedule(instance, plan, time_limit: float = 60.0, seed: int = 0, workers: int = 2,
                      inflight_cap: int | list[int] | None = None, deterministic: bool = False,
                      log_progress: bool = False, max_literals: int | None = None,
                      wall_limit: float | None = None) -> Plan:
    """The plan with an optimised explicit schedule (same placement and partition).

    ``inflight_cap`` further limits the micro-batches in flight per stage (an
    int for all stages or a list).  ``time_limit`` is wall-clock seconds;
    with ``deterministic`` it is CP-SAT's deterministic time instead, so a
    seed gives the same schedule whatever the machine's load (the wall time
    then varies; ``wall_limit`` seconds, if given, stays a wall-clock backstop).  Raises :class:`ScheduleTooLarge` when the model would
    need more than ``max_literals`` interleaving literals (default: 5,000 per
    second of ``time_limit``, at least 50,000; building a larger model would
    not respect the time limit).
    The result carries ``solver`` (status, CP-SAT makespan, bound, gap) and
    ``predicted`` figures from the evaluator.
    """
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    S, m = plan.num_stages, plan.num_micro_batches
    caps = _caps(instance, plan, inflight_cap, time_limit if max_literals is None else None, max_literals)
    d = _Data(instance, plan, caps)

    # the model: interleaving literals, then per replica group its ops and channels; min makespan
    M = cp_model.CpModel()
    before = _interleaving(M, S, m, caps)
    makespan = M.new_int_var(0, d.horizon, "makespan")
    for gi, ((cls, key), _members) in enumerate(d.groups.items()):
        xk, lk = key[:S - 1], key[S - 1:]
        fq, gq = d.cfq[cls], d.cgq[cls]
        Fs, Bs = _stage_ops(M, before, caps, m, d.horizon, gi, fq, gq)
        _channels(M, Fs, Bs, d.horizon, gi, fq, gq, xk, lk)
        for j in range(S):  # the makespan: each stage's last backward, then its gradient all-reduce
            M.add(makespan >= Bs[j][m - 1] + gq[j] + d.arq[j])
    M.minimize(makespan)
    _hint(M, before, d.ref[0])

    solver = _solver(seed, workers, time_limit, deterministic, wall_limit, log_progress)
    with stop.stoppable(solver.stop_search):  # Ctrl-C: stop with the best schedule so far
        status = solver.solve(M)
    if status == cp_model.INFEASIBLE or status == cp_model.MODEL_INVALID:
        raise InfeasibleError(f"CP-SAT found no schedule ({solver.status_name(status)})")
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    bound = solver.best_objective_bound * d.unit
    if found:
        lists, obj = _read_lists(solver, before, S, m), solver.objective_value * d.unit
    if not found or (status != cp_model.OPTIMAL and obj > d.ref[1]):
        # nothing better than the reference schedule within the time: return it (explicitly)
        lists, obj = [[format_op(o) for o in ops] for ops in d.ref[0]], d.ref[1]
        log.info("cpsat: no schedule better than %s within the time limit", d.ref[2])
    new = plan.model_copy(update={"schedule": ExplicitSchedule(ops=lists), "predicted": None, "solver": None})
    new = Plan.model_validate(new.model_dump())
    violations = check_plan(instance, new)
    if violations:
        raise RuntimeError("schedule optimiser produced an invalid plan: " + "; ".join(v.message for v in violations))
    status_name = "optimal" if status == cp_model.OPTIMAL else (stop.requested() or "time_limit")
    bound = min(max(bound, inflight_bound(instance, plan, caps)), obj)
    simulated = float(Evaluator(instance, new).iteration_times()[0])
    info = SolverInfo(name="cpsat-schedule", status=status_name, objective=obj, bound=bound,
                      gap=max(0.0, (obj - bound) / obj) if obj > 0 else 0.0, time_s=time.perf_counter() - t0,
                      unit_s=d.unit, simulated_s=simulated, reference=d.ref[2], reference_s=d.ref[1], caps=caps)
    log.info("cpsat: schedule %s, makespan %.6g s (bound %.6g), simulated %.6g s; %s %.6g s",
             status_name, obj, bound, simulated, d.ref[2], d.ref[1])
    return new.model_copy(update={"solver": info})


def _caps(instance, plan, inflight_cap, time_limit: float | None, max_literals: int | None) -> list[int]:
    """Cap_j, the in-flight limit per stage: memory's (:func:`memory_caps`) and ``inflight_cap``'s;
    raises :class:`ScheduleTooLarge` past ``max_literals`` interleaving literals (None: from
    ``time_limit``, see :func:`optimize_schedule`)."""
    S, m = plan.num_stages, plan.num_micro_batches
    caps = memory_caps(instance, plan)
    if inflight_cap is not None:
        extra = [inflight_cap] * S if isinstance(inflight_cap, int) else list(inflight_cap)
        caps = [max(1, min(c, e)) for c, e in zip(caps, extra)]
    size = sum(m * (min(c, m) - 1) for c in caps)  # interleaving literals
    if max_literals is None:
        max_literals = int(max(MIN_LITERALS, LITERALS_PER_SECOND * time_limit))
    if size > max_literals:
        raise ScheduleTooLarge(f"{S} stages x {m} micro-batches with up to {max(caps)} in flight need {size:,} "
                               f"interleaving literals, more than the {max_literals:,} the time limit allows "
                               f"({LITERALS_PER_SECOND:,} a second, at least {MIN_LITERALS:,}); a longer time "
                               "limit or fewer micro-batches in flight go further")
    return caps


class _Data:
    """The model's data, in integer time units: ``unit`` (s), per replica class ``cfq``/``cgq``
    (forward/backward per stage), ``arq`` (all-reduce per stage), ``groups`` ((class, transfer
    and latency figures) -> replicas: one set of intervals each), ``horizon``, and ``ref``, the
    best named schedule (:func:`_reference`), which sets the unit and hints the search."""

    def __init__(self, instance, plan, caps):
        ev = Evaluator(instance, plan)
        fig = ev.fig
        comm = fig.comm(ev._states(None))
        x, l, ar = comm.x[0], comm.l[0], comm.ar[0]  # (R, S-1), (R, S-1), (S,)
        if not np.all(np.isfinite(x)) or not np.all(np.isfinite(l)):
            raise InfeasibleError("a link the plan uses is down: no schedule can finish")
        # reference schedules: 1f1b (if it fits) and the all-sequential one
        self.ref = _reference(instance, plan, caps)
        self.unit = unit = _unit(self.ref[1])
        q = lambda v: int(round(float(v) / unit))
        # each replica's compute is its class's (GPU types, SPEC v3 (g); one class without them)
        self.cfq = [[q(v) for v in row] for row in fig.class_f]
        self.cgq = [[q(v) for v in row] for row in fig.class_g]
        self.arq = [q(v) for v in ar]
        self.groups: dict[tuple, list[int]] = {}
        for r in range(plan.replicas):
            key = tuple(q(v) for v in x[r]) + tuple(q(v) for v in l[r])
            self.groups.setdefault((int(fig.replica_class[r]), key), []).append(r)
        # one micro-batch at a time through every stage and channel always fits in this
        self.horizon = (plan.num_micro_batches * (max(sum(a) + sum(b) for a, b in zip(self.cfq, self.cgq))
                                                  + 2 * max(sum(key) for _, key in self.groups))
                        + max(self.arq, default=0) + 1)


def _interleaving(M, S: int, m: int, caps: list[int]) -> dict:
    """before[j, i, k]: "F(i) precedes B(k) on stage j", a literal, or fixed: True for k >= i,
    False for k <= i - cap_j (at most cap_j in flight); monotone: F(i) before B(k) implies
    F(i-1) before B(k) and F(i) before B(k+1)."""
    before = {}
    for j in range(S):
        for i in range(m):
            for k in range(m):
                if k >= i:
                    before[j, i, k] = True
                elif k <= i - caps[j]:
                    before[j, i, k] = False
                else:
                    before[j, i, k] = M.new_bool_var(f"before_{j}_{i}_{k}")
    for j in range(S):
        for i in range(m):
            for k in range(m):
                lit = before[j, i, k]
                if isinstance(lit, bool):
                    continue
                for a, b in ((i - 1, k), (i, k + 1)):
                    if 0 <= a < m and b < m and not isinstance(before[j, a, b], bool):
                        M.add_implication(lit, before[j, a, b])
    return before


def _stage_ops(M, before: dict, caps: list[int], m: int, horizon: int, gi: int, fq, gq):
    """Group ``gi``'s forward and backward start times (Fs, Bs)[j][i]: one op at a time per stage,
    micro-batches in order, and the interleaving ``before`` decides (F(i) before B(i) always; F(i)
    after B(i - cap_j) at the in-flight cap)."""
    S = len(fq)
    Fs = [[M.new_int_var(0, horizon, f"F{gi}_{j}_{i}") for i in range(m)] for j in range(S)]
    Bs = [[M.new_int_var(0, horizon, f"B{gi}_{j}_{i}") for i in range(m)] for j in range(S)]
    for j in range(S):
        ivs = []
        for i in range(m):
            ivs.append(M.new_fixed_size_interval_var(Fs[j][i], fq[j], f"iF{gi}_{j}_{i}"))
            ivs.append(M.new_fixed_size_interval_var(Bs[j][i], gq[j], f"iB{gi}_{j}_{i}"))
            if i + 1 < m:
                M.add(Fs[j][i] + fq[j] <= Fs[j][i + 1])
                M.add(Bs[j][i] + gq[j] <= Bs[j][i + 1])
        M.add_no_overlap(ivs)  # redundant with the literals, helps propagation
        for i in range(m):
            for k in range(m):
                lit = before[j, i, k]
                if lit is True:  # F(i) before B(i); the chains order the rest
                    if k == i:
                        M.add(Fs[j][i] + fq[j] <= Bs[j][k])
                elif lit is False:  # the in-flight cap: F(i) after B(i - cap)
                    if k == i - caps[j]:
                        M.add(Bs[j][k] + gq[j] <= Fs[j][i])
                else:
                    M.add(Fs[j][i] + fq[j] <= Bs[j][k]).only_enforce_if(lit)
                    M.add(Bs[j][k] + gq[j] <= Fs[j][i]).only_enforce_if(~lit)
    return Fs, Bs


def _channels(M, Fs, Bs, horizon: int, gi: int, fq, gq, xk, lk) -> None:
    """Group ``gi``'s channels of each boundary k: sends in micro-batch order, each taking x_k,
    and F(i) on stage k+1 (B(i) on stage k) after its send ends plus the latency l_k."""
    S, m = len(Fs), len(Fs[0])
    for k in range(S - 1):
        prev_f = prev_b = None
        for i in range(m):
            sf = M.new_int_var(0, horizon, f"sf{gi}_{k}_{i}")  # send start, forward
            M.add(sf >= Fs[k][i] + fq[k])
            if prev_f is not None:
                M.add(sf >= prev_f + xk[k])
            M.add(Fs[k + 1][i] >= sf + xk[k] + lk[k])
            prev_f = sf
            sb = M.new_int_var(0, horizon, f"sb{gi}_{k}_{i}")  # send start, backward
            M.add(sb >= Bs[k + 1][i] + gq[k + 1])
            if prev_b is not None:
                M.add(sb >= prev_b + xk[k])
            M.add(Bs[k][i] >= sb + xk[k] + lk[k])
            prev_b = sb


def _hint(M, before: dict, ref_lists) -> None:
    """Hint every interleaving literal with the reference schedule's order."""
    for j, ops in enumerate(ref_lists):
        pos = {op: p for p, op in enumerate(ops)}
        m = len(ops) // 2
        for i in range(m):
            for k in range(m):
                lit = before[j, i, k]
                if not isinstance(lit, bool):
                    M.add_hint(lit, pos[(F, i)] < pos[(B, k)])


def _solver(seed: int, workers: int, time_limit: float, deterministic: bool, wall_limit: float | None,
            log_progress: bool):
    """A CP-SAT solver with the seed, workers, memory cap and time limit (deterministic or wall)."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.random_seed = int(seed)
    p.num_workers = int(workers)
    p.max_memory_in_mb = stop.solver_memory_mb()  # CP-SAT stops its search there (planner.solvers.stop)
    p.catch_sigint_signal = False  # Ctrl-C reaches planner.solvers.stop
    if deterministic:
        p.max_deterministic_time = float(time_limit)
        if wall_limit is not None:  # a backstop: past it the result depends on the load
            p.max_time_in_seconds = max(0.05, float(wall_limit))
    else:
        p.max_time_in_seconds = float(time_limit)
    p.log_search_progress = bool(log_progress)
    if log_progress:
        solver.log_callback = lambda line: log.info("cpsat: %s", line)
    return solver


def _read_lists(solver, before: dict, S: int, m: int) -> list[list[str]]:
    """Each stage's op list from the solution's interleaving literals."""
    lists = []
    for j in range(S):
        ops, i, k = [], 0, 0
        while i < m or k < m:
            if i < m and (k >= m or _val(solver, before[j, i, k])):
                ops.append(format_op((F, i)))
                i += 1
            else:
                ops.append(format_op((B, k)))
                k += 1
        lists.append(ops)
    return lists


def _val(solver, lit) -> bool:
    return lit if isinstance(lit, bool) else bool(solver.value(lit))


def _reference(instance, plan, caps):
    """(op lists, simulated seconds, name) of the best named schedule that fits the caps."""
    S, m = plan.num_stages, plan.num_micro_batches
    best = None
    for name in ("1f1b", "gpipe"):
        w = [m] * S if name == "gpipe" else [min(m, S - j) for j in range(S)]
        if any(a > c for a, c in zip(w, caps)):
            continue
        p = plan.model_copy(update={"schedule": name})
        T = float(Evaluator(instance, p).iteration_times()[0])
        if best is None or T < best[1]:
            best = (op_lists(name, S, m), T, name)
    if best is None:  # one micro-batch at a time always fits
        lists = [[op for i in range(m) for op in ((F, i), (B, i))] for _ in range(S)]
        p = plan.model_copy(update={"schedule": ExplicitSchedule(ops=[[format_op(o) for o in ops] for ops in lists])})
        best = (lists, float(Evaluator(instance, p).iteration_times()[0]), "sequential")
    return best
