"""The MILP planner: jointly optimal domain assignment, partition, tensor
parallelism, replicas, micro-batch size and schedule kind for T_est (or
its cost counterpart), with a proven gap.

The search is a branch-and-bound over *shapes* (tp, micro-batch size,
schedule kind, replicas), each a MILP (:mod:`planner.formulations.milp`)
that chooses the number of stages, the partition and the placement:

1. the greedy plan is the first incumbent (and the warm start of its shape);
2. every shape gets a cheap lower bound (compute of a perfectly balanced
   pipeline over the most stages its GPUs allow); shapes are visited
   best-first and skipped once their bound reaches the incumbent;
3. each visited shape's MILP runs with a share of the remaining time and a
   cutoff at the incumbent; its dual bound (or, when it proves nothing
   better exists, the incumbent) becomes the shape's bound;
4. the global bound is the smallest shape bound; the gap is
   (incumbent - bound) / incumbent.

Every returned plan is re-scored by the evaluator; the reported objective is
the evaluator's T_est (or cost with T_est), which the MILP value matches.

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
from dataclasses import dataclass, field

from .errors import InfeasibleError
from .evaluator import Evaluator
from .greedy import greedy, infeasibility_reasons
from .plan import Plan, SolverInfo
from .network import GBPS, MS
from .space import PlanSpace, Shape

log = logging.getLogger("planner.milp")


@dataclass(order=True)
class _Node:
    bound: float
    shape: Shape = field(compare=False)


def _score(instance, plan) -> float:
    ev = Evaluator(instance, plan)
    te = float(ev.estimate_times()[0])
    return te if instance.options.objective == "time" else float(ev.cost(te))


def shape_lower_bound(space: PlanSpace, shape: Shape) -> float | None:
    """Lower bound on T_est (s) of every plan of ``shape`` (with ``shape.stages``
    = S > 0 fixed), None when no plan of the shape fits.

    * compute: the memory-feasible partition into S stages with the smallest
      slowest stage (``space.partition`` is exact for that) gives c_max;
    * the WAN: if a replica's S x t GPUs do not fit in one domain, it crosses
      at least k - 1 boundaries, k the fewest domains whose slots hold S
      stages; each costs at least the smallest link latency and A / (largest
      link bandwidth) each way;
    * period: tau >= c_max, >= that transfer time, and for 1f1b (Little's law
      at stage 0) >= Q_0 / min(m, S); T_est >= (m - 1) tau + Q_0.
    """
    inst = space.instance
    gbs = inst.workload.global_batch_size
    S, t, b = shape.stages, shape.tp, shape.micro_batch
    m = shape.micro_batches(gbs)
    slots = sorted(space.slots(t).values(), reverse=True)
    if S * shape.replicas > sum(slots) or S > min(inst.max_stages, inst.num_units):
        return None
    cuts = space.partition(t, b, shape.schedule, S, m)
    if cuts is None:
        return None
    c = [space.compute_time(space.table.interval(a, e)[0], t, b) for a, e in cuts]
    ctot, cmax = sum(c), max(c)
    held, k = 0, 0
    for n in slots:
        held, k = held + n, k + 1
        if held >= S:
            break
    crossings = k - 1
    q0, x_min = ctot, 0.0
    if crossings and inst.links:
        tok = b * inst.workload.seq_len
        A = min(u.out_bytes_per_token for u in inst.units[:-1]) * tok if len(inst.units) > 1 else 0.0
        x_min = A / (max(l.bandwidth_gbps for l in inst.links) * GBPS)
        lat_min = min(l.latency_ms for l in inst.links) * MS
        q0 += 2 * crossings * (x_min + lat_min)
    if shape.schedule == "gpipe":
        tau = max(cmax, 2 * x_min)  # forward and backward phases each wait for a transfer
    else:
        tau = max(cmax, x_min, q0 / min(m, S))
    return (m - 1) * tau + q0


def stage_bounds(space: PlanSpace, shape: Shape) -> dict[int, float]:
    """S -> lower bound on T_est (s) for every feasible stage count of ``shape``."""
    inst = space.instance
    top = min(inst.max_stages, inst.num_units, sum(space.slots(shape.tp).values()) // shape.replicas)
    out = {}
    for S in ([shape.stages] if shape.stages else range(1, top + 1)):
        lb = shape_lower_bound(space, Shape(shape.tp, shape.micro_batch, shape.schedule, S, shape.replicas))
        if lb is not None:
            out[S] = lb
    return out


def _shapes(space: PlanSpace, pins: dict):
    inst = space.instance
    for t in inst.workload.tensor_parallel:
        if pins.get("tp") not in (None, t):
            continue
        for b in inst.workload.micro_batch_sizes:
            if pins.get("micro_batch_size") not in (None, b):
                continue
            for sched in inst.options.schedules:
                if pins.get("schedule") not in (None, sched):
                    continue
                for R in space.replica_options[b]:
                    if pins.get("replicas") not in (None, R):
                        continue
                    yield Shape(t, b, sched, pins.get("stages") or 0, R)


def _plan_matches(plan: Plan, pins: dict, forbid, require) -> bool:
    if pins.get("tp") not in (None, plan.tp) or pins.get("micro_batch_size") not in (None, plan.micro_batch_size):
        return False
    if pins.get("schedule") not in (None, plan.schedule_kind) or pins.get("replicas") not in (None, plan.replicas):
        return False
    if pins.get("stages") not in (None, plan.num_stages):
        return False
    used = {d for row in plan.placement for d in row}
    return not (used & set(forbid)) and set(require) <= used


def milp(instance, time_limit: float | None = 60.0, seed: int = 0, threads: int = 1, gap: float = 1e-3,
         stages: int | None = None, replicas: int | None = None, tp: int | None = None,
         micro_batch_size: int | None = None, schedule: str | None = None,
         forbid=(), require=(), warm_start: bool = True, polish: bool = True, **_) -> Plan:
    """Plan with the MILP; see the module docstring.

    ``time_limit`` seconds in all (None: no limit), ``gap`` relative
    optimality tolerance, ``threads`` and ``seed`` for HiGHS (deterministic
    for a given seed and thread count when the time limit is not reached).
    Pins (``stages``, ``replicas``, ``tp``, ``micro_batch_size``,
    ``schedule``, ``forbid``/``require`` domain names) restrict the plan
    space to ask "what if".
    """
    import pyomo.environ as pyo
    from pyomo.common.tee import capture_output
    from pyomo.contrib.appsi.base import TerminationCondition as TC
    from pyomo.contrib.appsi.solvers.highs import Highs

    from .formulations.milp import build, extract, time_scale

    t0 = time.perf_counter()
    end = t0 + (time_limit if time_limit is not None else math.inf)
    deadline = end - (0.1 * time_limit if time_limit is not None and polish else 0.0)
    pins = dict(stages=stages, replicas=replicas, tp=tp, micro_batch_size=micro_batch_size, schedule=schedule)
    space = PlanSpace(instance)
    kind = instance.options.objective

    # 1. the greedy incumbent (when it satisfies the pins)
    best_plan, best = None, math.inf
    try:
        g = greedy(instance, time_limit=max(1.0, 0.1 * (time_limit or 10)))
        if _plan_matches(g, pins, forbid, require):
            best_plan, best = g, _score(instance, g)
    except InfeasibleError:
        pass
    ts = time_scale(best if best < math.inf and kind == "time" else
                    float(Evaluator(instance, best_plan).estimate_times()[0]) if best_plan else 1.0)
    log.info("milp: greedy incumbent %.6g (%s)", best, kind)

    # 2. shapes, best-first by their lower bound
    price_min = min(d.price_per_gpu_hour for d in instance.domains)
    nodes = []
    for sh in _shapes(space, pins):
        per_s = stage_bounds(space, sh)
        if not per_s:
            continue
        lb = min(per_s.values())
        if kind == "cost":  # every GPU of the plan costs at least the cheapest price for T
            lb = min(v * price_min * sh.replicas * sh.tp * S for S, v in per_s.items()) / 3600.0
        nodes.append(_Node(lb, sh))
    nodes.sort()
    if not nodes and best_plan is None:
        raise InfeasibleError(f"instance {instance.name} has no feasible plan"
                              + (" with the pinned choices" if any(pins.values()) or forbid or require else ""),
                              infeasibility_reasons(space))
    bounds: list[float] = []
    timed_out = False
    build_total = 0.0
    for i, node in enumerate(nodes):
        if node.bound >= best * (1 - gap):
            bounds.append(node.bound)
            continue
        left = deadline - time.perf_counter()
        if left <= 0.05:
            timed_out = True
            bounds.append(node.bound)
            continue
        open_nodes = sum(1 for n in nodes[i:] if n.bound < best * (1 - gap))
        share = left if math.isinf(left) else max(left / open_nodes, min(left, 1.0))
        tb = time.perf_counter()
        cs = time_scale(best) if kind == "cost" and best < math.inf else None
        try:
            M = build(instance, node.shape, objective=kind, forbid=forbid, require=require, space=space, ts=ts,
                      cost_scale=cs, cost_cutoff=best if best < math.inf else None,
                      stage_bounds={S: v * ts for S, v in stage_bounds(space, node.shape).items()})
        except NotImplementedError as err:
            raise InfeasibleError(str(err)) from None
        except ValueError:  # no room for this shape
            bounds.append(math.inf)
            continue
        scale = ts if kind == "time" else M.cost_scale
        if time.perf_counter() >= deadline:
            timed_out = True
            bounds.append(node.bound)
            continue
        if best < math.inf:
            M.cutoff = pyo.Constraint(expr=M.obj.expr <= best * scale * (1 + 1e-9))
        warm = False
        if warm_start and best_plan is not None and _same_shape(best_plan, node.shape):
            warm = _load_plan(M, best_plan)
        build_s = time.perf_counter() - tb
        build_total += build_s
        opt = Highs()
        opt.config.time_limit = max(0.05, min(share, deadline - time.perf_counter()))
        opt.config.mip_gap = gap
        opt.config.load_solution = False
        opt.config.warmstart = warm
        opt.highs_options = {"random_seed": int(seed), "threads": int(threads), "output_flag": False,
                             "mip_abs_gap": 0.0}
        with capture_output(capture_fd=True):  # HiGHS prints a banner on stdout
            res = opt.solve(M)
        tc = res.termination_condition
        solve_s = time.perf_counter() - tb - build_s
        if tc == TC.infeasible:
            # nothing in this shape beats the incumbent (or the shape is infeasible)
            shape_bound = best if best < math.inf else math.inf
        else:
            db = res.best_objective_bound
            shape_bound = max(node.bound, db / scale) if db is not None and math.isfinite(db) else node.bound
            if tc == TC.maxTimeLimit:
                timed_out = True
        if res.best_feasible_objective is not None and res.best_feasible_objective / scale < best * (1 - 1e-9):
            opt.load_vars()
            cuts, placement = extract(M)
            cand = Plan.build(cuts, placement, tp=node.shape.tp, micro_batch_size=node.shape.micro_batch,
                              instance=instance, schedule=node.shape.schedule)
            score = _score(instance, cand)
            if score < best * (1 - 1e-9):
                best_plan, best = cand, score
        bounds.append(min(shape_bound, best))
        outcome = "nothing better than the incumbent" if tc == TC.infeasible else tc.name
        log.info("milp: shape tp=%d b=%d %s R=%d S=%d: %s in %.2fs (build %.2fs), shape bound %.6g; "
                 "incumbent %.6g", node.shape.tp, node.shape.micro_batch, node.shape.schedule,
                 node.shape.replicas, node.shape.stages, outcome, solve_s, build_s, shape_bound, best)
    if best_plan is None:
        raise InfeasibleError(f"instance {instance.name} has no feasible plan"
                              + (" with the pinned choices" if any(pins.values()) or forbid or require else ""),
                              infeasibility_reasons(space))
    if polish and kind == "time" and end - time.perf_counter() > 0.5:
        best_plan = _polish(instance, best_plan, best, space, ts, end, seed, threads, forbid, require)
    bound = min(bounds + [best]) if bounds else best
    gap_now = 0.0 if best <= 0 else max(0.0, (best - bound) / best)
    status = "optimal" if gap_now <= gap + 1e-12 else ("time_limit" if timed_out else "feasible")
    info = SolverInfo(name="milp", status=status, objective=best, bound=bound, gap=gap_now,
                      time_s=time.perf_counter() - t0, shapes=len(nodes), build_s=build_total)
    log.info("milp: %s, objective %.6g, bound %.6g, gap %.2f%%, %d shapes, %.1fs (%.1fs building models)",
             status, best, bound, 100 * gap_now, len(nodes), info.time_s, build_total)
    return best_plan.model_copy(update={"solver": info})


def _polish(instance, plan: Plan, best: float, space, ts, end, seed, threads, forbid, require) -> Plan:
    """Among plans of the incumbent's shape with the same T_est, prefer the one the
    exact simulation finds fastest: minimise every replica's period, transfer
    and synchronisation time (a secondary objective) subject to T <= T_est*.
    T_est is many-to-one; this tie-break changes neither the objective nor
    the bound."""
    import pyomo.environ as pyo
    from pyomo.common.tee import capture_output
    from pyomo.contrib.appsi.solvers.highs import Highs

    from .formulations.milp import build, extract

    shape = Shape(plan.tp, plan.micro_batch_size, plan.schedule_kind, plan.num_stages, plan.replicas)
    try:
        M = build(instance, shape, objective="time", forbid=forbid, require=require, space=space, ts=ts)
    except (ValueError, NotImplementedError):
        return plan
    M.obj.deactivate()
    M.keep = pyo.Constraint(expr=M.T <= best * ts * (1 + 1e-9))
    secondary = sum(M.tau[r] for r in M.Rr) + sum(M.X[k] + M.Lat[k] for k in M.X) + sum(M.AR[q] for q in M.Qs)
    M.obj2 = pyo.Objective(expr=secondary, sense=pyo.minimize)
    warm = _load_plan(M, plan)
    opt = Highs()
    opt.config.time_limit = max(0.1, end - time.perf_counter())
    opt.config.load_solution = False
    opt.config.warmstart = warm
    opt.highs_options = {"random_seed": int(seed), "threads": int(threads), "output_flag": False}
    with capture_output(capture_fd=True):
        res = opt.solve(M)
    if res.best_feasible_objective is None:
        return plan
    opt.load_vars()
    cuts, placement = extract(M)
    cand = Plan.build(cuts, placement, tp=shape.tp, micro_batch_size=shape.micro_batch, instance=instance,
                      schedule=shape.schedule)
    ev_new, ev_old = Evaluator(instance, cand), Evaluator(instance, plan)
    if float(ev_new.estimate_times()[0]) > best * (1 + 1e-9):
        return plan
    t_new, t_old = float(ev_new.iteration_times()[0]), float(ev_old.iteration_times()[0])
    log.info("milp: polish (same T_est, shorter exact simulation): %.6g s -> %.6g s", t_old, t_new)
    return cand if t_new < t_old else plan


def _same_shape(plan: Plan, shape: Shape) -> bool:
    return (plan.tp, plan.micro_batch_size, plan.schedule_kind, plan.replicas) == \
        (shape.tp, shape.micro_batch, shape.schedule, shape.replicas) and \
        (not shape.stages or shape.stages == plan.num_stages)


def _load_plan(M, plan: Plan) -> bool:
    """Set the model's binaries to ``plan`` and solve the LP for the rest (a MIP start)."""
    import pyomo.environ as pyo
    from pyomo.common.tee import capture_output
    from pyomo.contrib.appsi.solvers.highs import Highs

    D = M.data
    S = plan.num_stages
    if S > D.Q or any(d not in D.domains for row in plan.placement for d in row):
        return False
    fixed = []
    for j, st in enumerate(plan.stages):
        q = S - 1 - j
        for u in range(st.start, st.end):
            for qq in range(D.Q):
                M.y[u, qq].fix(1.0 if qq == q else 0.0)
    for r, row in enumerate(plan.placement):
        for qq in range(D.Q):
            for d in D.domains:
                M.z[r, qq, d].fix(1.0 if (qq < S and row[S - 1 - qq] == d) else 0.0)
    fixed = [v for v in M.component_data_objects(pyo.Var) if v.fixed]
    others = [v for v in M.component_data_objects(pyo.Var, descend_into=True)
              if v.is_binary() and not v.fixed]
    # derived binaries (counts, hops) follow from y and z: let the LP/MIP find them
    lp = Highs()
    lp.config.load_solution = False
    lp.highs_options = {"output_flag": False}
    ok = False
    try:
        with capture_output(capture_fd=True):
            res = lp.solve(M)
        if res.best_feasible_objective is not None:
            lp.load_vars()
            ok = True
    finally:
        for v in fixed:
            v.unfix()
    del others
    return ok
