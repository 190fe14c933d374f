"""The CP-SAT planner: the joint problem of :mod:`planner.solvers.milp` (domain
assignment, partition, tensor parallelism, replicas, micro-batch size and
schedule kind, minimising T_est or its cost counterpart) solved with an
independent OR-Tools CP-SAT formulation (:mod:`planner.solvers.formulations.cpsat`).

The outer search over shapes is :func:`planner.solvers.shapesearch.shape_search`
(shared with the MILP): greedy incumbent and hint, shapes best-first by a
combinatorial bound, each shape's model with a share of the remaining time
and the cutoff ``objective <= incumbent`` (plus the rounding bound); its
CP-SAT bound, converted back through the rounding bound, becomes the
shape's bound.  Gap = (incumbent - smallest shape bound) / incumbent.
Every returned plan is re-scored by the evaluator: the reported objective
is the evaluator's T_est (or cost with T_est), seconds (or currency).

``spec`` (default :data:`~planner.problem.specversion.DEFAULT_SPEC`) is the
SPEC version planned for.  Under 3 each shape's model is the v3 form of
:func:`planner.solvers.formulations.cpsat.build` (directed link and uplink
resources, n(q) = max or sum, direct routes, processor-shared syncs,
``reduce_broadcast``, unit overhead, the flush-based gpipe period), exact for
the v3 T_est up to its rounding, and the shapes' stage bounds are the
search's (:func:`planner.solvers.shapesearch.stage_bounds` at the same
version: under 3 without :mod:`planner.solvers.formulations.milp_bounds`,
which is v2's).

GPU types (SPEC v3 (g)): on a mixed instance each (replica, stage) takes its
domain's type's figures and memory (``_typed_compute`` in
:mod:`planner.solvers.formulations.cpsat`), and the shapes' bounds come from
the optimistic instance (:func:`planner.solvers.shapesearch.search_space`).

Example
-------
>>> plan = cpsat(instance, time_limit=30, seed=0)                # doctest: +SKIP
>>> plan.solver.status, plan.solver.gap
('optimal', 0.0)
"""

from __future__ import annotations

import gc
import logging
import time

from . import stop
from ..problem.plan import Plan
from .executor import executor_context
from .shapesearch import ShapeOutcome, build_model, keep_if_faster, plan_shape, same_shape, shape_search

log = logging.getLogger("planner.cpsat")


def cpsat(instance, time_limit: float | None = 60.0, seed: int = 0, workers: int = 2, gap: float = 1e-3,
          stages: int | None = None, replicas: int | None = None, tp: int | None = None,
          micro_batch_size: int | None = None, schedule: str | None = None,
          forbid=(), require=(), deterministic: bool = False, warm_start: bool = True,
          rounding: float = 1e-4, presolve: str = "noprobe", polish: bool = True,
          log_progress: bool = False, executor: str | None = None, address: str | None = None,
          jobs: int | None = None, start: Plan | None = None, bounding: float = 0.4, spec: int | None = None,
          calibrated: bool = False, **_) -> Plan:
    """Plan with CP-SAT; see the module docstring.

    ``time_limit`` seconds in all (None: no limit); with ``deterministic``
    it is CP-SAT deterministic time summed over the shapes' solves (so a
    seed gives the same plan whatever the load, wall time varies; it runs
    on one worker, see :func:`~planner.solvers.formulations.cpsat.configure`).  ``gap`` relative optimality
    tolerance, ``workers`` and ``seed`` for CP-SAT, ``rounding`` the largest
    relative rounding error of the integer time unit (see
    :mod:`planner.solvers.formulations.cpsat`).  Pins (``stages``, ``replicas``,
    ``tp``, ``micro_batch_size``, ``schedule``, ``forbid``/``require``
    domain names) restrict the plan space as for the MILP.  ``executor``
    (``serial``, ``process``, ``ray``; with ``address`` and ``jobs``) solves
    waves of ``jobs`` shapes at once (:mod:`planner.solvers.executor`); with
    ``deterministic`` and one worker the plan and bound are then the same on
    every executor for the same ``jobs``.  ``start``: a plan that joins
    greedy's as a first incumbent (and hint) when it satisfies the pins;
    ``bounding`` the share of the time the shapes' cheap bounds may take.
    ``spec``: the SPEC version planned for (see the module docstring).
    ``calibrated`` (with ``deterministic``): ``time_limit`` is deterministic
    *seconds* of :mod:`planner.solvers.workunits` instead of CP-SAT's own
    deterministic time: each shape's model building counts by the model's size
    (:data:`~planner.solvers.workunits.CPSAT_BUILD_PER_S`) and its search as
    CP-SAT's deterministic time over :data:`~planner.solvers.workunits.CPSAT_DET_PER_S`
    (what ``auto`` uses, so that the engine's budget tracks the clock).
    """
    from ..problem.specversion import check_spec
    from .workunits import CPSAT_DET_PER_S

    spec = check_spec(spec)
    calibrated = calibrated and deterministic
    solve_shape = CpsatShape(instance, workers, seed, gap, deterministic, warm_start, rounding, presolve,
                             log_progress, spec=spec, calibrated=calibrated)
    def polish_plan(plan, best, seconds, ctx) -> Plan:
        return _polish(instance, plan, best, ctx.space, ctx.forbid, ctx.require,
                       seconds * CPSAT_DET_PER_S if calibrated else seconds, workers, seed,
                       deterministic, rounding, presolve, spec)

    pins = dict(stages=stages, replicas=replicas, tp=tp, micro_batch_size=micro_batch_size, schedule=schedule)
    with executor_context(executor, address, jobs) as ex:
        return shape_search(instance, solve_shape, name="cpsat", time_limit=time_limit, gap=gap, pins=pins,
                            forbid=forbid, require=require, polish=polish_plan if polish else None,
                            deterministic=deterministic, log=log, executor=ex, start=start, bounding=bounding,
                            spec=spec)


# Peak resident bytes per variable plus constraint of one shape's CP-SAT model, built and
# then solved by one worker (OR-Tools 9.15; gcp-16's shapes of 375k-880k, 9.4-16.6 KB measured
# by benchmarks/memory.py --release-ratio and a per-shape trace, issue 29): with
# stop.model_memory_bytes() it sets the largest model a shape may build.
CPSAT_BYTES_PER_ITEM = 16_000


def max_model_size() -> int:
    """The most variables plus constraints one shape's CP-SAT model may have under the
    memory budget in force (:func:`planner.solvers.stop.model_memory_bytes`): 250,000
    by default (4 GB), 80% of ``--memory-limit`` otherwise."""
    return int(stop.model_memory_bytes() / CPSAT_BYTES_PER_ITEM)


class CpsatShape:
    """One shape's CP-SAT model (``solve_shape`` of the shape search): a module-level
    class, so that it can be pickled to another process or a Ray worker."""

    def __init__(self, instance, workers: int, seed: int, gap: float, deterministic: bool, warm_start: bool,
                 rounding: float, presolve: str, log_progress: bool = False, spec: int | None = None,
                 calibrated: bool = False):
        from ..problem.specversion import check_spec

        self.calibrated = calibrated
        self.instance, self.workers, self.seed, self.gap = instance, workers, seed, gap
        self.spec = check_spec(spec)
        self.deterministic, self.warm_start, self.rounding = deterministic, warm_start, rounding
        self.presolve, self.log_progress = presolve, log_progress

    def __setstate__(self, state):  # pickles from before ``spec`` are v2's
        self.__dict__.update({"spec": 2, "calibrated": False, **state})

    def __call__(self, shape, share, ctx) -> ShapeOutcome:
        try:
            return self._solve(shape, share, ctx)
        finally:  # the shape's model is garbage now: give its pages back (stop.release_freed_memory)
            gc.collect()
            stop.release_freed_memory()

    def _solve(self, shape, share, ctx) -> ShapeOutcome:
        from ortools.sat.python import cp_model

        from .formulations.cpsat import build, configure

        instance, rounding, deterministic = self.instance, self.rounding, self.deterministic
        kind = instance.options.objective
        tb = time.perf_counter()
        best = ctx.incumbent
        cm, none = build_model(lambda: build(
            instance, shape, objective=kind, forbid=ctx.forbid, require=ctx.require, space=ctx.space,
            cutoff=best if best < float("inf") else None, rounding=rounding, spec=self.spec,
            stage_bounds=ctx.stage_bounds, max_size=max_model_size()),
            deadline=None if deterministic else tb + share)
        if none is not None:
            return none
        hinted = False
        if self.warm_start:
            for cand in (ctx.shape_plan, ctx.incumbent_plan):
                if cand is not None and same_shape(cand, shape) and cm.hint(cand):
                    hinted = True
                    break
        build_s = time.perf_counter() - tb
        limit = share if deterministic else share - build_s
        built, size = 0.0, 0  # calibrated: the model's building in deterministic seconds
        if self.calibrated:
            from .workunits import CPSAT_BUILD_PER_S, CPSAT_DET_PER_S

            proto = cm.model.Proto()
            size = len(proto.variables) + len(proto.constraints)  # the model's size
            built = size / CPSAT_BUILD_PER_S
            limit = (share - built) * CPSAT_DET_PER_S
        if limit <= 0.05:
            return ShapeOutcome("unknown", build_s=build_s, spent=built, detail="no time left after building")
        solver = configure(cp_model.CpSolver(), time_limit=limit, workers=self.workers, seed=self.seed,
                           gap=max(0.0, self.gap - 2 * rounding),  # leave room for the rounding bound
                           deterministic=deterministic, presolve=self.presolve)
        if self.log_progress:
            solver.parameters.log_search_progress = True
            solver.log_callback = lambda line: log.info("cpsat: %s", line)
        with stop.stoppable(solver.stop_search):  # Ctrl-C, the memory cap
            status = solver.solve(cm.model)
        note = ("hinted, " if hinted else "") + f"unit {cm.unit_s:.0e} s"
        spent = solver.response_proto.deterministic_time
        if self.calibrated:
            spent = built + spent / CPSAT_DET_PER_S
        if status == cp_model.INFEASIBLE:  # nothing in this shape beats the incumbent (or no plan)
            return ShapeOutcome("infeasible", build_s=build_s, spent=spent, detail=note, size=size)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # out of time before anything was proven
            return ShapeOutcome("unknown", build_s=build_s, spent=spent, detail=note, size=size)
        cuts, placement = cm.extract(solver)
        cand = Plan.build(cuts, placement, tp=shape.tp, micro_batch_size=shape.micro_batch,
                          instance=instance, schedule=shape.schedule)
        return ShapeOutcome("optimal" if status == cp_model.OPTIMAL else "feasible",
                            bound=cm.true_lower(solver.best_objective_bound / cm.obj_scale), plan=cand,
                            build_s=build_s, spent=spent, detail=note, size=size)


def _polish(instance, plan: Plan, best: float, space, forbid, require, time_limit, workers, seed,
            deterministic, rounding, presolve, spec: int | None = None) -> Plan:
    """Among plans of the incumbent's shape with T_est <= T_est* (up to the rounding),
    prefer the one the exact simulation finds fastest: minimise every replica's period,
    transfer and synchronisation time (a secondary objective, as the MILP's polish), and
    keep the result only
    if the evaluator confirms T_est <= T_est* and a shorter simulated iteration.  T_est is
    many-to-one; this changes neither the objective nor the bound."""
    from ortools.sat.python import cp_model

    from .formulations.cpsat import build, configure

    shape = plan_shape(plan)
    t0 = time.perf_counter()
    try:
        with stop.build_deadline(None if deterministic else t0 + time_limit):
            cm = build(instance, shape, objective="time", forbid=forbid, require=require, space=space,
                       cutoff=best, rounding=rounding, spec=spec)
    except (ValueError, NotImplementedError, stop.OutOfTime):
        return plan
    time_limit = time_limit if deterministic else max(0.05, time_limit - (time.perf_counter() - t0))
    cm.hint(plan)
    x = [v for row in cm.extra["x"] for v in row]
    l = [v for row in cm.extra["l"] for v in row]
    secondary = sum(cm.extra["tau"]) + sum(x) + sum(l) + sum(cm.extra["AR"])
    cm.model.minimize(secondary)
    solver = configure(cp_model.CpSolver(), time_limit=time_limit, workers=workers, seed=seed,
                       deterministic=deterministic, presolve=presolve)
    with stop.stoppable(solver.stop_search):
        status = solver.solve(cm.model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return plan
    cuts, placement = cm.extract(solver)
    cand = Plan.build(cuts, placement, tp=shape.tp, micro_batch_size=shape.micro_batch, instance=instance,
                      schedule=shape.schedule)
    return keep_if_faster(instance, plan, cand, best, log, "cpsat", spec)
