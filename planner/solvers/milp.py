"""The MILP planner: jointly optimal domain assignment, partition, tensor
parallelism, replicas, micro-batch size and schedule kind for T_est (or
its cost counterpart), with a proven gap.

The outer search over *shapes* (tp, micro-batch size, schedule kind,
replicas) is :func:`planner.solvers.shapesearch.shape_search` (shared with the
CP-SAT planner): greedy incumbent, shapes best-first by a combinatorial
bound, each shape's MILP (:mod:`planner.solvers.formulations.milp`, which chooses
the number of stages, the partition and the placement) with a share of
the remaining time, the incumbent as a cutoff and the greedy plan as a
warm start; its dual bound becomes the shape's bound; the gap is
(incumbent - smallest shape bound) / incumbent.

Every returned plan is re-scored by the evaluator; the reported objective is
the evaluator's T_est (or cost with T_est), which the MILP value matches.

``spec`` (default :data:`~planner.problem.specversion.DEFAULT_SPEC`) is the
SPEC version planned for.  Under 3 each shape is solved with the per-replica
model's v3 form (:func:`planner.solvers.formulations.milp.build`, and
first the aggregated one's, :mod:`planner.solvers.formulations.milp_agg`;
the stage-count bounds of :mod:`planner.solvers.formulations.milp_bounds`
still model v2 and are not used), whose dual bound is a lower bound on the
v3 T_est (its processor sharing is a relaxation), and the shapes' bounds are
:func:`planner.solvers.shapesearch.shape_lower_bound`'s, which hold under v3.

GPU types (SPEC v3 (g)): on a mixed instance the per-replica model's
(replica, stage) times and memory are those of the domain's type
(``_typed_compute`` in :mod:`planner.solvers.formulations.milp`); the
aggregated model counts the types present per slot and stays a lower bound
(``_typed_counts`` in :mod:`planner.solvers.formulations.milp_agg`), and the
shapes' bounds come from the optimistic instance
(:func:`planner.solvers.shapesearch.search_space`).

Example
-------
>>> plan = milp(instance, time_limit=30, seed=0)                 # doctest: +SKIP
>>> plan.solver.status, plan.solver.gap
('optimal', 0.0)
"""

from __future__ import annotations

import logging
import math
import time

from . import stop
from ..scoring.evaluator import Evaluator
from .executor import executor_context
from .highs import HIGHS_OPTIONS, MatrixHighs, highs_work  # noqa: F401  (HIGHS_OPTIONS: public here too)
from ..problem.plan import Plan
from .shapesearch import ShapeOutcome, build_model, keep_if_faster, plan_shape, same_shape, shape_search
from .shapesearch import shape_lower_bound, stage_bounds  # noqa: F401  (public here too)

log = logging.getLogger("planner.milp")

def _run(M, time_limit: float | None, seed: int, threads: int, gap: float | None = None, start=None,
         deterministic: bool = False):
    """Solve ``M`` with HiGHS (its matrix handed over directly), completing the partial
    assignment ``start`` into a MIP start; a :class:`planner.solvers.highs.MatrixResult`.
    ``deterministic``: ``time_limit`` is deterministic seconds
    (:func:`planner.solvers.highs.highs_work`, the model's building and hand-over
    included), no wall-clock limit."""
    if deterministic:
        return MatrixHighs(None, seed, threads, gap, work_limit=max(0.0, time_limit)).solve(M, start=start)
    return MatrixHighs(time_limit, seed, threads, gap).solve(M, start=start)


def milp(instance, time_limit: float | None = 60.0, seed: int = 0, threads: int = 1, gap: float = 1e-3,
         stages: int | None = None, replicas: int | None = None, tp: int | None = None,
         micro_batch_size: int | None = None, schedule: str | None = None,
         forbid=(), require=(), warm_start: bool = True, polish: bool = True, aggregate: bool = True,
         executor: str | None = None, address: str | None = None, jobs: int | None = None,
         start: Plan | None = None, bounding: float = 0.4, spec: int | None = None, deterministic: bool = False,
         **_) -> Plan:
    """Plan with the MILP; see the module docstring.

    ``time_limit`` seconds in all (None: no limit); with ``deterministic``
    (one thread) it is deterministic seconds of HiGHS work summed over the shapes'
    solves (:func:`planner.solvers.highs.highs_work`: the models' size, a pure LP's
    simplex iterations and the MIP's limit checks, calibrated to seconds in :mod:`planner.solvers.workunits`),
    so that a seed gives the same plan and bound whatever the load (the wall time
    varies; ``solver.deterministic_time`` reports what was spent).  ``gap`` relative
    optimality tolerance, ``threads`` and ``seed`` for HiGHS (deterministic
    for a given seed and thread count when the time limit is not reached).
    Pins (``stages``, ``replicas``, ``tp``, ``micro_batch_size``,
    ``schedule``, ``forbid``/``require`` domain names) restrict the plan
    space to ask "what if".  ``aggregate`` (time objective): solve each
    shape of two or more replicas with the aggregated-replica model
    (:mod:`planner.solvers.formulations.milp_agg`) first, and the per-replica model
    only where the two differ.  ``executor`` (``serial``, ``process``, ``ray``;
    with ``address`` and ``jobs``) solves waves of ``jobs`` shapes at once
    (:mod:`planner.solvers.executor`); HiGHS has only wall-clock limits, so the
    plan may then depend on the machine's load.  ``start``: a plan that joins
    greedy's as a first incumbent (and warm start) when it satisfies the pins;
    ``bounding`` the share of the time the shapes' cheap bounds may take.
    ``spec``: the SPEC version planned for (see the module docstring).
    """
    from ..problem.specversion import check_spec

    spec = check_spec(spec)
    if deterministic and threads != 1:
        raise ValueError("milp: deterministic mode runs HiGHS on one thread (threads=1)")
    solve_shape = MilpShape(instance, seed, threads, gap, warm_start, aggregate, spec=spec,
                            deterministic=deterministic)
    ts_for = solve_shape.ts_for
    def polish_plan(plan, best, seconds, ctx) -> Plan:
        return _polish(instance, plan, best, ctx.space, ts_for(ctx), time.perf_counter() + seconds, seed,
                       threads, ctx.forbid, ctx.require, spec, work=seconds if deterministic else None)

    pins = dict(stages=stages, replicas=replicas, tp=tp, micro_batch_size=micro_batch_size, schedule=schedule)
    with executor_context(executor, address, jobs) as ex:
        return shape_search(instance, solve_shape, name="milp", time_limit=time_limit, gap=gap, pins=pins,
                            forbid=forbid, require=require, polish=polish_plan if polish else None, log=log,
                            executor=ex, start=start, bounding=bounding, spec=spec, deterministic=deterministic)


class MilpShape:
    """One shape's MILP (``solve_shape`` of the shape search): a module-level class, so
    that it can be pickled to another process or a Ray worker.  ``ts`` is the time scale
    (model units per second), fixed from the first incumbent it sees."""

    def __init__(self, instance, seed: int, threads: int, gap: float, warm_start: bool, aggregate: bool,
                 spec: int | None = None, deterministic: bool = False):
        from ..problem.specversion import check_spec

        self.instance, self.seed, self.threads, self.gap = instance, seed, threads, gap
        self.deterministic = deterministic
        self.warm_start, self.aggregate = warm_start, aggregate
        self.spec = check_spec(spec)
        self.ts: float | None = None

    def __setstate__(self, state):  # pickles from before ``spec`` are v2's
        self.__dict__.update({"spec": 2, "deterministic": False, **state})

    def ts_for(self, ctx) -> float:
        """The time scale (model units per second), fixed from the first incumbent."""
        from .formulations.milp import time_scale

        if self.ts is None:
            p = ctx.incumbent_plan
            self.ts = time_scale(float(Evaluator(self.instance, p, spec=self.spec).estimate_times()[0])
                                 if p else 1.0)
        return self.ts

    def __call__(self, shape, share, ctx) -> ShapeOutcome:
        import pyomo.environ as pyo

        from .formulations.milp import build, extract, time_scale

        instance, seed, threads, gap, warm_start = self.instance, self.seed, self.threads, self.gap, self.warm_start
        kind = instance.options.objective
        if kind == "time" and self.aggregate and shape.replicas > 1:  # (one replica: nothing to aggregate)
            return _solve_aggregate(instance, shape, share, ctx, self.ts_for(ctx), seed, threads, gap, warm_start,
                                    spec=self.spec, stage_bounds=ctx.stage_bounds, deterministic=self.deterministic)
        tb = time.perf_counter()
        ts, best = self.ts_for(ctx), ctx.incumbent
        cs = time_scale(best) if kind == "cost" and best < math.inf else None
        M, none = build_model(lambda: build(
            instance, shape, objective=kind, forbid=ctx.forbid, require=ctx.require, space=ctx.space,
            ts=ts, cost_scale=cs, cost_cutoff=best if best < math.inf else None,
            stage_bounds={S: v * ts for S, v in ctx.stage_bounds.items()}, spec=self.spec),
            deadline=None if self.deterministic else tb + share)
        if none is not None:
            return none
        scale = ts if kind == "time" else M.cost_scale
        if best < math.inf:
            M.cutoff = pyo.Constraint(expr=M.obj.expr <= best * scale * (1 + 1e-9))
        start = _first_start(M, shape, ctx, _plan_start) if warm_start else None
        build_s = time.perf_counter() - tb
        if self.deterministic:  # deterministic seconds: the model's building counts in the solve's work
            res = _run(M, share, seed, threads, gap=gap, start=start, deterministic=True)
        else:
            res = _run(M, max(0.05, share - build_s), seed, threads, gap=gap, start=start)
        note = "warm start" if res.started else ""
        spent = res.work
        if res.status == "infeasible":  # nothing in this shape beats the incumbent (or no plan at all)
            return ShapeOutcome("infeasible", build_s=build_s, spent=spent, detail=note)
        bound = res.bound / scale if res.bound is not None else None
        cand = None
        if res.objective is not None:
            res.load()
            cuts, placement = extract(M)
            cand = Plan.build(cuts, placement, tp=shape.tp, micro_batch_size=shape.micro_batch,
                              instance=instance, schedule=shape.schedule)
        status = "optimal" if res.status == "optimal" else ("feasible" if cand is not None else "unknown")
        return ShapeOutcome(status, bound=bound, plan=cand, build_s=build_s, spent=spent, detail=note)


def _first_start(M, shape, ctx, to_start) -> dict | None:
    """The MIP start from the shape's own plan, else from the incumbent if of the shape."""
    for cand in (ctx.shape_plan, ctx.incumbent_plan):
        if cand is not None and same_shape(cand, shape):
            start = to_start(M, cand)
            if start is not None:
                return start
    return None


def _solve_aggregate(instance, shape, share, ctx, ts, seed, threads, gap, warm_start, spec: int = 2,
                     stage_bounds: dict | None = None, deterministic: bool = False) -> ShapeOutcome:
    """One shape, time objective: the aggregated model's optimum is a lower bound on
    the shape's T_est; its solution, split into replica paths, a plan.  When the
    plan's T_est is above that bound (a replica crosses the WAN more than once and
    the model only bounds its round trip), the per-replica model gets the rest of
    the share, warm-started from the plan, with the bound as a floor."""
    import pyomo.environ as pyo

    from .formulations import milp_agg

    def score(instance, plan) -> float:  # shapesearch.score, at the version planned for
        ev = Evaluator(instance, plan, spec=spec)
        return float(ev.objective(ev.estimate_times())[0])

    tb = time.perf_counter()
    best = ctx.incumbent
    stage_bounds = ctx.stage_bounds if stage_bounds is None else stage_bounds
    M, none = build_model(lambda: milp_agg.build(
        instance, shape, forbid=ctx.forbid, require=ctx.require, space=ctx.space, ts=ts,
        cutoff=best if best < math.inf else None, stage_bounds={S: v * ts for S, v in stage_bounds.items()},
        spec=spec), deadline=None if deterministic else tb + share)
    if none is not None:
        return none
    if best < math.inf:
        M.cutoff = pyo.Constraint(expr=M.T <= best * ts * (1 + 1e-9))
    start = _first_start(M, shape, ctx, _counts_start) if warm_start and not M.data.pruned else None
    build_s = time.perf_counter() - tb
    end = tb + share
    if deterministic:
        res = _run(M, share, seed, threads, gap=gap, start=start, deterministic=True)
    else:
        res = _run(M, max(0.05, end - time.perf_counter()), seed, threads, gap=gap, start=start)
    spent = res.work
    note = "aggregated" + (", warm start" if res.started else "")
    if res.status == "infeasible":
        return ShapeOutcome("infeasible", build_s=build_s, spent=spent, detail=note)
    db = res.bound
    bound = db / ts if db is not None else None
    cand = None
    if res.objective is not None and not M.data.pruned:
        res.load()
        cuts, placement = milp_agg.decompose(M)
        cand = Plan.build(cuts, placement, tp=shape.tp, micro_batch_size=shape.micro_batch,
                          instance=instance, schedule=shape.schedule)
    if res.status != "optimal":
        return ShapeOutcome("feasible" if cand is not None else "unknown", bound=bound, plan=cand,
                            build_s=build_s, spent=spent, detail=note)
    value = score(instance, cand) if cand is not None else math.inf
    if bound is None or value <= max(bound, 0.0) * (1 + gap) + 1e-12:
        return ShapeOutcome("optimal", bound=bound, plan=cand, build_s=build_s, spent=spent, detail=note)
    # the relaxation is solved but its plan is above it: the per-replica model decides,
    # if the share has time to build it (about R times the aggregated model)
    from .formulations.milp import build, extract

    if (share - spent < shape.replicas * highs_work(res.size) if deterministic
            else end - time.perf_counter() < shape.replicas * build_s):
        return ShapeOutcome("feasible", bound=bound, plan=cand, build_s=build_s, spent=spent,
                            detail=note + ", no time for the per-replica model")
    tb2 = time.perf_counter()
    cut = min(best, value)
    try:
        E = build(instance, shape, objective="time", forbid=ctx.forbid, require=ctx.require, space=ctx.space,
                  ts=ts, cost_cutoff=cut, stage_bounds={S: max(v * ts, db) for S, v in stage_bounds.items()},
                  spec=spec)
    except (ValueError, NotImplementedError):
        return ShapeOutcome("feasible", bound=bound, plan=cand, build_s=build_s, spent=spent, detail=note)
    E.cutoff = pyo.Constraint(expr=E.obj.expr <= cut * ts * (1 + 1e-9))
    start = _plan_start(E, cand) if cand is not None else None
    build_s += time.perf_counter() - tb2
    rest = (share - spent) if deterministic else end - time.perf_counter()
    if rest <= 0.05:
        return ShapeOutcome("feasible", bound=bound, plan=cand, build_s=build_s, spent=spent, detail=note)
    res = _run(E, rest, seed, threads, gap=gap, start=start, deterministic=deterministic)
    spent += res.work
    note += ", per-replica"
    if res.status == "infeasible":  # nothing beats min(incumbent, cand): cand (or the incumbent) is optimal
        return ShapeOutcome("optimal", bound=cut, plan=cand, build_s=build_s, spent=spent, detail=note)
    if res.bound is not None:
        bound = max(bound, res.bound / ts)
    if res.objective is not None:
        res.load()
        cuts, placement = extract(E)
        cand = Plan.build(cuts, placement, tp=shape.tp, micro_batch_size=shape.micro_batch,
                          instance=instance, schedule=shape.schedule)
    return ShapeOutcome("optimal" if res.status == "optimal" else "feasible", bound=bound, plan=cand,
                        build_s=build_s, spent=spent, detail=note)


def _counts_start(M, plan: Plan) -> dict | None:
    """``plan`` as a partial assignment of the aggregated model (partition, counts and
    flows; HiGHS completes the rest), None if it does not fit the model."""
    D = M.data
    S = plan.num_stages
    if S > D.Q or S not in set(M.Sset) or any(d not in D.domains for row in plan.placement for d in row):
        return None
    out = _partition_start(M, plan)
    for qq in range(D.Q):
        for d in D.domains:
            out[M.n[qq, d]] = sum(1 for row in plan.placement if qq < S and row[S - 1 - qq] == d)
    for k in range(D.Q - 1):
        for a, b in M.Arcs:
            out[M.f[k, a, b]] = sum(1 for row in plan.placement
                                    if k + 1 < S and row[S - 2 - k] == a and row[S - 1 - k] == b)
    return out


def _polish(instance, plan: Plan, best: float, space, ts, end, seed, threads, forbid, require,
            spec: int | None = None, work: float | None = None) -> Plan:
    """Among plans of the incumbent's shape with the same T_est, prefer the one the
    exact simulation finds fastest: minimise every replica's period, transfer and
    synchronisation time (model time units), a secondary objective, subject to
    T <= T_est*.  First with the plan's placement fixed (only the partition moves: a
    small model, solved in a second or two), then with the placement free from that
    plan for the time left.  T_est is many-to-one; this tie-break changes neither the
    objective nor the bound.  ``work``: deterministic seconds instead of the clock
    (``end`` unused): 60% for the first solve, what is left for the second."""
    import pyomo.environ as pyo

    from .formulations.milp import build, extract

    shape = plan_shape(plan)
    try:
        with stop.build_deadline(None if work is not None else end):
            M = build(instance, shape, objective="time", forbid=forbid, require=require, space=space, ts=ts,
                      spec=spec)
    except (ValueError, NotImplementedError, stop.OutOfTime):
        return plan
    M.obj.deactivate()
    M.keep = pyo.Constraint(expr=M.T <= best * ts * (1 + 1e-9))
    secondary = sum(M.tau[r] for r in M.Rr) + sum(M.X[k] + M.Lat[k] for k in M.X) + sum(M.AR[q] for q in M.Qs)
    M.obj2 = pyo.Objective(expr=secondary, sense=pyo.minimize)

    used = [0.0]

    def solve(current: Plan, seconds: float, start=None) -> Plan:
        start = start if start is not None else _plan_start(M, current)
        res = _run(M, max(0.1, seconds), seed, threads, start=start, deterministic=work is not None)
        used[0] += res.work
        if res.objective is None:
            return current
        res.load()
        cuts, placement = extract(M)
        cand = Plan.build(cuts, placement, tp=shape.tp, micro_batch_size=shape.micro_batch, instance=instance,
                          schedule=shape.schedule)
        return keep_if_faster(instance, current, cand, best, log, "milp", spec)

    start = _plan_start(M, plan)
    if start is None:
        return plan
    placed = [M.z[r, q, d] for r in M.Rr for q in M.Qs for d in M.Dm]
    for v in placed:
        v.fix(start[v])
    plan = solve(plan, 0.6 * (work if work is not None else end - time.perf_counter()), start)
    for v in placed:
        v.unfix()
    rest = (work - used[0]) if work is not None else end - time.perf_counter()
    if rest > 0.5:
        plan = solve(plan, rest)
    return plan


def _plan_start(M, plan: Plan) -> dict | None:
    """``plan`` as a partial assignment of the per-replica model (partition and
    placement; HiGHS completes the rest), None if it does not fit the model."""
    D = M.data
    S = plan.num_stages
    if S > D.Q or any(d not in D.domains for row in plan.placement for d in row):
        return None
    out = _partition_start(M, plan)
    for r, row in enumerate(plan.placement):
        for qq in range(D.Q):
            for d in D.domains:
                out[M.z[r, qq, d]] = 1.0 if (qq < S and row[S - 1 - qq] == d) else 0.0
    return out


def _partition_start(M, plan: Plan):
    """The model's unit-on-slot variables for ``plan``'s stages (slots from the end)."""
    from pyomo.common.collections import ComponentMap

    D, S = M.data, plan.num_stages
    out = ComponentMap()  # variables are keys by identity
    for j, st in enumerate(plan.stages):
        q = S - 1 - j
        for u in range(st.start, st.end):
            for qq in range(D.Q):
                out[M.y[u, qq]] = 1.0 if qq == q else 0.0
    return out
