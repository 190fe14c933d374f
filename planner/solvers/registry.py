"""One calling convention for every planner.

``plan(instance, solver="greedy", time_limit=..., seed=...)`` runs a solver,
checks its plan with the evaluator and returns a :class:`planner.problem.plan.Plan`
carrying ``solver`` (name, status, objective, bound, gap, time) and
``predicted`` (exact iteration time, T_est, throughput, cost, ratio to the
lower bound).  A solver is a function
``solve(instance, *, time_limit, seed, **options) -> Plan`` registered in
``SOLVERS``; it may fill ``plan.solver`` with its own status and bound.
Every plan :func:`plan` and :func:`refine` return is stamped
(:meth:`Plan.stamped`) with the hashes of the instance and of the plan, so a
tool shows its claims only while both still match (SPEC section 9).

Example
-------
>>> p = plan(instance, solver="greedy")                    # doctest: +SKIP
>>> p.solver.status, p.predicted.iteration_time_s
('heuristic', 12.5)
>>> p = plan(instance, solver="auto", time_limit=60)      # doctest: +SKIP

``hier`` (:mod:`planner.solvers.hierarchy`) plans many domains in groups
first, then domains, with a bound valid for the real instance.
``auto`` (:mod:`planner.solvers.portfolio`) runs greedy, the MILP and CP-SAT
(in parallel processes), the annealing by exact simulation
(:mod:`planner.solvers.anneal`, also alone as ``anneal``) and the schedule
refinement within one wall-clock budget: the way to plan with a budget.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
from typing import Callable

import numpy as np

from ..scoring.bounds import lower_bound, settle_claims
from ..problem.errors import InputError
from ..scoring.evaluator import Evaluator, simulated_score
from . import stop
from .greedy import greedy
from ..problem.plan import Plan, Predicted, SolverInfo, claims_check
from .syncchoice import choose_sync, sync_enabled

from .milp import milp
from .cpsat import cpsat

log = logging.getLogger("planner")


def _rl(instance, **options) -> Plan:
    from .rl import rl  # optional extra: imported only when asked for

    return rl(instance, **options)


def _auto(instance, **options) -> Plan:
    """The portfolio (:func:`planner.solvers.portfolio.auto`) with this module's schedule refinement."""
    from .portfolio import auto

    return auto(instance, refine=refine, type_aware=GPU_TYPE_SOLVERS, **options)


def _anneal(instance, **options) -> Plan:
    from .anneal import anneal_solver

    return anneal_solver(instance, **options)


def _hier(instance, **options) -> Plan:
    """Hierarchical planning (:func:`planner.solvers.hierarchy.hier`): groups of domains, then domains."""
    from .hierarchy import hier

    return hier(instance, type_aware=GPU_TYPE_SOLVERS, **options)


SOLVERS: dict[str, Callable[..., Plan]] = {"greedy": greedy, "milp": milp, "cpsat": cpsat, "rl": _rl,
                                          "auto": _auto, "anneal": _anneal, "hier": _hier}
DEFAULT_SOLVER = "greedy"


def register(name: str, solve: Callable[..., Plan]) -> None:
    """Add a planner of your own under ``name`` (a function with the calling convention
    above); ``plan(..., solver=name)`` then runs it and checks its plan."""
    SOLVERS[name] = solve


FINISH_SHARE, FINISH_MAX_S = 0.1, 1.0  # of a time limit kept back for checking the result: min(10%, 1 s)
REFINE_MIN_S = 0.5  # the schedule refinement needs at least this much of the time limit (s)
# SPEC 11: with [options] dp_sync, this share of the solve time (at most SYNC_MAX_S s) chooses the
# sync option with the plan (planner.solvers.syncchoice.choose_sync), for the solvers that do not
# choose it themselves (SYNC_CHOOSING)
SYNC_SHARE, SYNC_MAX_S = 0.15, 15.0
SYNC_CHOOSING = frozenset({"auto"})


class PlanCheckError(RuntimeError):
    """A solver returned a plan the evaluator rejects: a bug, never user input."""


def finish(instance, result: Plan, name: str, elapsed: float) -> Plan:
    """Score ``result`` with the evaluator and attach predicted/solver figures.

    The claims are SPEC 7's (:func:`planner.scoring.bounds.settle_claims`):
    ``objective`` is the evaluator's (simulated seconds, or cost per
    iteration), ``bound`` the instance's lower bound on it over every plan,
    explicit schedules included, ``status`` ``optimal`` only when the gap
    between them allows it; a search's own figures on T_est over plans with a
    named schedule are kept as ``estimate_*``."""
    ev = Evaluator(instance, result)
    e = ev.evaluate(lower_bound_s=lower_bound(instance).value)
    if not e.feasible:
        raise PlanCheckError(f"solver {name} returned an infeasible plan: "
                             + "; ".join(v.message for v in e.violations))
    # the evaluator's objective, simulated (SPEC 7, 11: T_eff / e or the cost over e; T for a plain
    # plan; Evaluation.objective is the estimate's)
    objective = e.objective_s if instance.options.objective == "time" else e.cost_per_iteration / e.quality_factor
    _last_evaluation[:] = [None, None]
    info = result.solver
    if info is None:
        info = SolverInfo(name=name, status="heuristic")
    info = settle_claims(instance, info, objective).model_copy(update={"name": name, "time_s": elapsed})
    predicted = Predicted(iteration_time_s=e.iteration_time_s, estimate_s=e.estimate_s,
                          throughput_tokens_per_s=e.throughput_tokens_per_s,
                          cost_per_iteration=e.cost_per_iteration,
                          lower_bound_s=e.lower_bound_s, bound_ratio=e.bound_ratio,
                          simulated_over_estimate=e.simulated_over_estimate,
                          **({} if result.dp_sync is None else dict(
                              effective_time_s=e.effective_time_s, effective_estimate_s=e.effective_estimate_s,
                              quality_factor=e.quality_factor, quality_source=e.quality_source,
                              effective_tokens_per_s=e.effective_tokens_per_s,
                              per_step_time_s=e.per_step_time_s)))
    done = result.model_copy(update={"solver": info, "predicted": predicted, "instance": instance.name})
    _last_evaluation[:] = [done, e]
    return done


def _finish_reserve(time_limit: float) -> float:
    """Seconds of ``time_limit`` kept back for checking the result with the evaluator."""
    return min(FINISH_SHARE * time_limit, FINISH_MAX_S)


IDLE_STARTUP_S = 2.0  # the CLI's start-up (interpreter, imports, loading) on an idle machine, seconds


def auto_work_s(time_limit: float, startup_s: float = 0.0) -> float:
    """The deterministic seconds a seeded ``auto`` spends for ``time_limit`` (s, wall):
    :data:`planner.solvers.workunits.DET_SHARE` of what is left after ``startup_s`` of
    start-up and the result's check (:func:`_finish_reserve`), at least a tenth of it.
    A function of the nominal limit only, so that the same command spends the same work.

    >>> round(auto_work_s(60.0, startup_s=IDLE_STARTUP_S), 2)     # doctest: +SKIP
    42.6
    """
    from .workunits import DET_SHARE

    return DET_SHARE * max(0.1 * time_limit, time_limit - startup_s - _finish_reserve(time_limit))


def solve_seconds(time_limit: float, syncing: bool = False) -> tuple[float, float | None]:
    """(seconds :func:`plan` hands a solver out of ``time_limit``, seconds it keeps for the sync
    choice or None): the evaluator's check of the result kept back (:func:`_finish_reserve`),
    and with ``[options] dp_sync`` (``syncing``, SPEC 11) the sync choice's share.  A solver
    that refines its schedule gets 75% of the first for the search.

    >>> solve_seconds(30.0), solve_seconds(30.0, True)
    ((29.0, None), (24.65, 4.35))
    """
    solve_s = max(0.1 * time_limit, time_limit - _finish_reserve(time_limit))
    sync_s = min(SYNC_SHARE * solve_s, SYNC_MAX_S) if syncing else None
    return solve_s - (sync_s or 0.0), sync_s


_last_evaluation: list = [None, None]  # the plan :func:`finish` returned last, and its Evaluation


def evaluation_of(p: Plan):
    """The evaluator's figures of ``p`` (an ``Evaluation``) if ``p`` is the very plan
    :func:`finish` returned last (no second simulation of a large plan), else None."""
    plan_, e = _last_evaluation
    return e if plan_ is p else None


def refine(instance, p: Plan, time_limit: float = 60.0, seed: int = 0, workers: int = 2,
           memory: str = "gpu", equal_memory: bool = False, deterministic: bool = False,
           calibrated: bool = False, wall_limit: float | None = None) -> Plan:
    """``p`` with a faster micro-batch schedule for the same placement and
    partition, scored by the evaluator; ``p`` itself when none simulates faster
    or the instance takes no explicit op lists (``options.explicit_schedules``).

    Two steps: the per-stage in-flight limits
    (:func:`planner.solvers.inflight.tune_inflight`, at most a quarter of
    ``time_limit``: 1f1b with a deeper warm-up where a slow boundary sets the
    period), then the CP-SAT optimum over all op orders
    (:func:`planner.solvers.schedule_opt.optimize_schedule`) with the rest.
    The fastest by exact simulation is kept, among schedules that simulate
    within 1% of their own T_est (:data:`planner.solvers.inflight.FAITHFUL`; a
    CP-SAT order can hold many micro-batches at one moment only, which makes
    SPEC 7's ``w_j`` and so T_est optimistic).  ``memory`` is the budget
    (:func:`planner.solvers.schedule_opt.budget_caps`): ``"gpu"`` each stage's
    GPU memory, ``"peak"`` the same peak memory per GPU as ``p``'s own
    schedule, ``"stage"`` (or ``equal_memory=True``) no stage holding more
    micro-batches than under ``p``'s own schedule.  ``deterministic``: both
    steps by counts (simulations, CP-SAT's deterministic time), not the clock;
    with ``calibrated`` too, ``time_limit`` is deterministic seconds of
    :mod:`planner.solvers.workunits` (a quarter for the in-flight limits, by the
    plan's simulation cost, the rest CP-SAT's deterministic time at
    :data:`~planner.solvers.workunits.CPSAT_DET_PER_S`), and ``wall_limit`` seconds,
    if given, a wall-clock backstop for both steps (what ``auto`` uses).

    The result's ``solver`` figures are the refined plan's
    (:func:`planner.scoring.bounds.settle_claims`; the search's stay as
    ``estimate_*``, about plans with a named schedule) and gain
    ``inflight`` (the limits, when that step won), ``schedule_kept``
    (``"inflight"``, ``"cpsat"`` or None: which step's schedule the plan has), ``schedule_status``,
    ``schedule_makespan_s``, ``schedule_bound_s``, ``schedule_gap`` (CP-SAT's
    schedule, whether kept or not), ``schedule_not_kept`` (why, when CP-SAT's
    schedule is not the plan's) and ``schedule_time_s``; its ``predicted``
    figures are the evaluator's.  A stamped ``p`` whose claims do not hold for
    ``instance`` (:func:`planner.problem.plan.claims_check`) keeps only its
    solver's name: the result claims what this refinement shows, no more.
    """
    from .inflight import FAITHFUL, tune_inflight
    from .schedule_opt import ScheduleTooLarge, budget_caps, optimize_schedule

    t0 = time.perf_counter()
    if p.solver is not None and p.solver.instance_sha256 and claims_check(instance, p) is not None:
        # claims made for another instance, or an edited plan: none carried over (SPEC 9)
        p = p.model_copy(update={"solver": SolverInfo(name=p.solver.name, status="heuristic"), "predicted": None})
    if p.predicted is None or p.solver is None:
        p = finish(instance, p, p.solver.name if p.solver else "plan", 0.0)
    if not instance.options.explicit_schedules:  # both steps write explicit op lists
        log.info("schedule not refined: options.explicit_schedules is false")
        return p
    base = p.solver
    cap = budget_caps(instance, p, "stage" if equal_memory else memory)
    if deterministic and calibrated:
        from .workunits import CPSAT_DET_PER_S, sim_count

        tuned = tune_inflight(instance, p, caps=cap, time_limit=None if wall_limit is None else 0.25 * wall_limit,
                              max_evals=sim_count(p, 0.25 * time_limit, least=10))
    else:
        tuned = tune_inflight(instance, p, caps=cap, time_limit=None if deterministic else 0.25 * time_limit,
                              max_evals=200 + 40 * p.num_stages if deterministic else None)
    inflight = getattr(tuned.solver, "inflight", None) if tuned is not p else None
    # the objective by simulation (T, or SPEC 11's T_eff / e; or the cost): what finish() claims
    best, best_s = p, p.solver.objective
    if inflight is not None:
        best = finish(instance, tuned.model_copy(update={"solver": None}), f"{base.name}+schedule", 0.0)
        best_s = best.solver.objective
    extra = {"inflight": inflight, "schedule_kept": "inflight" if inflight is not None else None,
             "schedule_not_kept": None}
    left = time_limit - (time.perf_counter() - t0) if not deterministic else time_limit
    wall_left = None if wall_limit is None else wall_limit - (time.perf_counter() - t0)
    if deterministic and calibrated:
        left = 0.75 * time_limit
    try:
        if left < 0.5 or (wall_left is not None and wall_left < 0.5):
            raise ScheduleTooLarge("no time left for CP-SAT")
        if deterministic and calibrated:
            left *= CPSAT_DET_PER_S  # CP-SAT's own deterministic time
        new = optimize_schedule(instance, best, time_limit=left, seed=seed, workers=workers, inflight_cap=cap,
                                deterministic=deterministic, wall_limit=wall_left)
        sched = new.solver
        extra.update(schedule_status=sched.status, schedule_makespan_s=sched.objective,
                     schedule_bound_s=sched.bound, schedule_gap=sched.gap)
        sim = sched.model_extra["simulated_s"]
        if best.dp_sync is not None or instance.options.objective != "time":  # compare objectives
            sim = simulated_score(instance, new.model_copy(update={"solver": None}))
            sim = math.inf if sim is None else sim
        if sim < best_s * (1 - 1e-12):
            cand = finish(instance, new.model_copy(update={"solver": None}), f"{base.name}+schedule", 0.0)
            if cand.predicted.iteration_time_s <= (1 + FAITHFUL) * cand.predicted.estimate_s:
                best, best_s, extra["inflight"], extra["schedule_kept"] = cand, sim, None, "cpsat"
            else:
                log.info("schedule: CP-SAT's order simulates at %.6g s, %.3g x its T_est; not kept",
                         sim, sim / cand.predicted.estimate_s)
                extra["schedule_not_kept"] = f"it simulates {sim / cand.predicted.estimate_s:.3g} x its T_est"
        else:
            extra["schedule_not_kept"] = "it simulates no faster"
    except ScheduleTooLarge as err:
        log.warning("schedule not refined by CP-SAT: %s", err)
        extra.update(schedule_status="too large", schedule_makespan_s=None, schedule_bound_s=None,
                     schedule_gap=None)
    extra["schedule_time_s"] = time.perf_counter() - t0
    if best is p:
        info = base.model_copy(update={"time_s": (base.time_s or 0.0) + extra["schedule_time_s"], **extra})
        return p.model_copy(update={"solver": info}).stamped(instance)
    info = base.model_copy(update={"name": f"{base.name}+schedule",
                                   "time_s": (base.time_s or 0.0) + extra["schedule_time_s"], **extra})
    return best.model_copy(update={"solver": settle_claims(instance, info, best.solver.objective)}).stamped(instance)


PIN_OPTIONS = ("stages", "replicas", "tp", "micro_batch_size", "schedule", "forbid", "require", "gap")
_PLAN_OPTIONS = {"refine_schedule", "robust", "robust_stat", "time_limit", "seed"}


def _parameters(fn) -> set[str]:
    import inspect

    return {n for n, p in inspect.signature(fn).parameters.items()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "instance"}


def solver_options(solver: str) -> set[str]:
    """The keywords ``plan(..., solver=solver, **options)`` accepts."""
    if solver == "auto":
        from .portfolio import auto as fn

        names = _parameters(fn) - {"engines", "refine", "type_aware"}
    elif solver == "anneal":
        from .anneal import anneal, anneal_solver

        names = _parameters(anneal_solver) | (_parameters(anneal) - {"start"})
    elif solver == "rl":
        names = {"policy", "states", "seed", "samples"}
    elif solver == "hier":
        from .hierarchy import hier as fn

        names = _parameters(fn) - {"type_aware"}
    else:
        names = _parameters(SOLVERS[solver])
    return names | _PLAN_OPTIONS


def _check_run(options: dict, name) -> None:
    """The run's own options, the same ranges as the command line's option types
    (planner/cli.py): ``time_limit`` a finite number > 0 (or None), ``seed`` an
    integer in 0..MAX_SEED, ``threads``/``workers``/``jobs`` integers in
    1..MAX_WORKERS, ``robust`` in 0..MAX_ROBUST, ``robust_stat`` mean or p95,
    ``executor`` serial, process or ray.  Booleans are not numbers."""
    from ..problem import limits

    def number(v, integer=False):
        return not isinstance(v, (bool, np.bool_)) and isinstance(v, numbers.Integral if integer else numbers.Real)

    t = options.get("time_limit")
    if t is not None and not (number(t) and math.isfinite(t) and t > 0):
        raise InputError(f"a time limit is a finite number of seconds > 0, not {t!r}", name("time_limit"))
    ranges = {"seed": (0, limits.MAX_SEED), "threads": (1, limits.MAX_WORKERS), "workers": (1, limits.MAX_WORKERS),
              "jobs": (1, limits.MAX_WORKERS), "robust": (0, limits.MAX_ROBUST)}
    for key, (lo, hi) in ranges.items():
        v = options.get(key)
        if v is not None and not (number(v, integer=True) and lo <= v <= hi):
            raise InputError(f"an integer from {lo} to {hi}, not {v!r}", name(key))
    choices = {"robust_stat": ("mean", "p95"), "executor": ("serial", "process", "ray")}
    for key, allowed in choices.items():
        v = options.get(key)
        if v is not None and v not in allowed:
            raise InputError(f"one of {', '.join(allowed)}, not {v!r}", name(key))


def check_options(instance, solver: str, options: dict, cli: bool = False) -> dict:
    """``options`` checked against ``solver`` and ``instance``; returns them with
    ``forbid``/``require`` as tuples (a single string is one domain).  The one
    check of :func:`plan`'s keywords, the command line's (``plan``) included:
    the run's own (``time_limit``, ``seed``, threads ...: :func:`_check_run`)
    and the pins.

    Unknown keywords raise ``TypeError`` naming them; pins out of range or
    contradicting each other raise ``InputError`` (exit 2) naming the options
    (``--stages`` with ``cli=True``, ``stages`` otherwise)."""
    name = (lambda k: "--" + k.replace("_", "-")) if cli else (lambda k: k)
    unknown = sorted(set(options) - solver_options(solver))
    if unknown:
        pins = [k for k in unknown if k in PIN_OPTIONS]
        if pins and solver in ("greedy", "rl", "anneal", "hier"):
            raise InputError(f"{', '.join(map(name, pins))} apply to solver milp, cpsat or auto, not {solver}",
                             name(pins[0]))
        raise TypeError(f"plan() got unexpected keyword argument{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(map(repr, unknown))} for solver {solver!r}")
    options = dict(options)
    _check_run(options, name)
    wl = instance.workload
    for key in ("forbid", "require"):
        value = options.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            value = (value,)
        value = tuple(value)
        for d in value:
            if not isinstance(d, str) or d not in instance.domain_index:
                raise InputError(f"unknown domain {d!r}; domains: {', '.join(instance.domain_names)}", name(key))
        options[key] = value
    both = sorted(set(options.get("forbid") or ()) & set(options.get("require") or ()))
    if both:
        raise InputError(f"both name {', '.join(map(repr, both))}: a domain cannot be forbidden and required", f"{name('forbid')}/{name('require')}")
    gap = options.get("gap")
    if gap is not None and not (isinstance(gap, (int, float)) and 0 <= gap < 1):
        raise InputError(f"a relative tolerance must lie in [0, 1), not {gap!r}", name("gap"))
    top = min(instance.max_stages, instance.num_units)
    ranges = {"stages": (range(1, top + 1), f"between 1 and {top} (the model's {instance.num_units} units, "
                                            f"max_stages {instance.max_stages})"),
              "tp": (wl.tensor_parallel, f"one of the instance's tensor_parallel {list(wl.tensor_parallel)}"),
              "micro_batch_size": (wl.micro_batch_sizes,
                                   f"one of the instance's micro_batch_sizes {list(wl.micro_batch_sizes)}"),
              "schedule": (instance.options.schedules,
                           f"one of the instance's schedules {list(instance.options.schedules)}"),
              "replicas": (range(1, wl.global_batch_size + 1),
                           f"between 1 and the global batch size {wl.global_batch_size}")}
    for key, (allowed, what) in ranges.items():
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or value not in allowed):
            raise InputError(f"{value!r} is out of range: {what}", name(key))
    R, b = options.get("replicas"), options.get("micro_batch_size")
    if R is not None:
        sizes = [b] if b is not None else list(wl.micro_batch_sizes)
        if not any(wl.global_batch_size % (R * x) == 0 for x in sizes):
            both_named = f"{R}" + (f" with micro-batch size {b}" if b else "")
            raise InputError(f"{both_named}: the global batch size {wl.global_batch_size} is not a multiple of "
                             f"replicas x micro-batch size for any allowed micro-batch size",
                             name("replicas") + (f"/{name('micro_batch_size')}" if b else ""))
    return options


def _robust_figures(instance, p: Plan, k: int, stat: str, seed: int) -> Plan:
    """``p`` with the robust figures in its solver info: ``robust_k``,
    ``robust_stat``, ``robust_score`` (the statistic over the K sampled states,
    recomputed for ``p`` itself) and ``robust_measure``, the sentence that says
    what the score is."""
    from .greedy import sample_states
    from .robust import score_over

    what = "T_est" if instance.options.objective == "time" else "the cost per iteration with T_est"
    value = score_over(instance, p, sample_states(instance, k, seed), stat)
    unit = " s" if instance.options.objective == "time" else " per iteration"
    measure = (f"{'the mean' if stat == 'mean' else 'the 95th percentile'} of {what} over {k} sampled network "
               f"states (seed {seed}): {value:.6g}{unit}")
    info = p.solver.model_copy(update={"robust_k": k, "robust_stat": stat, "robust_score": value,
                                       "robust_measure": measure})
    return p.model_copy(update={"solver": info})


#: The solvers that plan with several GPU types (SPEC v3 (g)); the others refuse a mixed
#: instance (:func:`refuse_gpu_types`).  One name per line.
GPU_TYPE_SOLVERS: frozenset[str] = frozenset({
    "greedy",
    "hier",
    "anneal",
    "auto",
    "milp",
    "cpsat",
    "rl",
})


def refuse_gpu_types(instance, solver: str | None = None) -> None:
    """Raise ``InputError`` naming the first domain whose ``gpu`` differs from the first
    domain's when the domains have several GPU types (SPEC v3 (g)) and ``solver`` does not
    plan with types (not in :data:`GPU_TYPE_SOLVERS`); ``planner evaluate`` and the
    :class:`~planner.scoring.evaluator.Evaluator` score such instances exactly."""
    if instance.heterogeneous and solver not in GPU_TYPE_SOLVERS:
        types = instance.domain_type
        i = next(i for i, t in enumerate(types) if t != types[0])
        names = ", ".join(instance.gpu_types[u].name for u in instance.types_used)
        raise InputError(f"the domains have several GPU types ({names}); the planners plan one GPU type for "
                         f"every domain in solver {solver!r} so far (planner evaluate scores a plan mixing types)",
                         f"domains[{i}].gpu")


def plan(instance, solver: str = DEFAULT_SOLVER, time_limit: float | None = None, seed: int = 0,
         **options) -> Plan:
    """Plan ``instance`` with ``solver``; see the module docstring.

    ``time_limit`` in seconds (None: the solver's default); ``seed`` makes
    randomised solvers reproducible.  ``refine_schedule=True`` (the default
    for ``cpsat``; ``auto`` refines within its own budget) then optimises the micro-batch schedule with CP-SAT
    (:func:`refine`) within the last quarter of the time limit (15 s without
    one; none when less than :data:`REFINE_MIN_S` is left).  ``robust=K`` (with ``robust_stat="mean"`` or ``"p95"``) plans
    against K sampled network states (:mod:`planner.solvers.robust`).  Raises ``InfeasibleError`` (with the
    reason) when the instance has no feasible plan.
    """
    if solver not in SOLVERS:
        raise InputError(f"unknown solver {solver!r}; choose from {', '.join(sorted(SOLVERS))}", "solver")
    refuse_gpu_types(instance, solver)
    options = check_options(instance, solver, {**options, "time_limit": time_limit, "seed": seed})
    del options["time_limit"], options["seed"]
    t0 = time.perf_counter()
    refine_schedule = options.pop("refine_schedule", None)
    if solver == "auto":  # the portfolio refines within its own budget
        if refine_schedule is not None:
            options["refine_schedule"] = refine_schedule
        refine_schedule = False
    elif refine_schedule is None:
        refine_schedule = solver == "cpsat"
    syncing = sync_enabled(instance)  # SPEC 11: choose the sync option with the plan (syncchoice)
    sync_s = None
    if time_limit is not None:  # else the solver's own default (milp, cpsat: 60 s)
        # the limit counts the evaluator's check of the result (finish) and any refinement too
        solve_s, sync_s = solve_seconds(time_limit, syncing)
        options["time_limit"] = 0.75 * solve_s if refine_schedule else solve_s
    robust, robust_stat = options.pop("robust", 0), options.pop("robust_stat", "mean")
    if robust and solver != "greedy":
        from .robust import robust_plan

        result = robust_plan(instance, SOLVERS[solver], robust, robust_stat, seed=seed, **options)
    else:
        if robust:
            options.update(robust=robust, robust_stat=robust_stat)
        result = SOLVERS[solver](instance, seed=seed, **options)
    if syncing and solver not in SYNC_CHOOSING:
        result = choose_sync(instance, result, time_limit=None if options.get("deterministic") else
                             sync_s if sync_s is not None else SYNC_MAX_S,  # deterministic: not by the clock
                             pins={k: options.get(k) for k in ("stages", "replicas", "tp", "micro_batch_size",
                                                               "schedule")},
                             forbid=options.get("forbid") or (), require=options.get("require") or ())
    done = finish(instance, result, solver, time.perf_counter() - t0)
    if robust:
        done = _robust_figures(instance, done, robust, robust_stat, seed)
    if refine_schedule and not stop.requested():
        left = (time_limit - _finish_reserve(time_limit) - (time.perf_counter() - t0) if time_limit is not None
                else 15.0)
        if options.get("deterministic") and time_limit is not None:  # its share by the budget, not the clock
            left = solve_s - options["time_limit"]
        if left >= REFINE_MIN_S:
            done = refine(instance, done, time_limit=left, seed=seed,
                          deterministic=bool(options.get("deterministic", False)))
        else:  # the time limit counts the refinement: none rather than an overrun
            log.info("schedule not refined: %.2f s of the time limit left", max(0.0, left))
    return done.stamped(instance)  # its claims hold for this instance and this plan only (SPEC 9)
