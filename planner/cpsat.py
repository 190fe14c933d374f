"""The CP-SAT planner: the joint problem of :mod:`planner.milp` (domain
assignment, partition, tensor parallelism, replicas, micro-batch size and
schedule kind, minimising T_est or its cost counterpart) solved with an
independent OR-Tools CP-SAT formulation (:mod:`planner.formulations.cpsat`).

The outer search is the MILP's (and reuses its pieces): the greedy plan is
the first incumbent and the hint of its shape's model; shapes (tp,
micro-batch size, schedule kind, replicas) are visited best-first by
:func:`planner.milp.shape_lower_bound` and skipped once their bound reaches
the incumbent; each visited shape's model gets a share of the remaining time
and the cutoff ``objective <= incumbent`` (plus the rounding bound); its
CP-SAT bound, converted back through the rounding bound, becomes the shape's
bound.  Gap = (incumbent - smallest shape bound) / incumbent.  Every
returned plan is re-scored by the evaluator: the reported objective is the
evaluator's T_est (or cost with T_est), seconds (or currency).

Example
-------
>>> plan = cpsat(instance, time_limit=30, seed=0)                # doctest: +SKIP
>>> plan.solver.status, plan.solver.gap
('optimal', 0.0)
"""

from __future__ import annotations

import logging
import math
import time

from .errors import InfeasibleError
from .evaluator import Evaluator, check_plan
from .greedy import greedy, infeasibility_reasons
from .milp import _Node, _plan_matches, _same_shape, _score, _shapes, stage_bounds
from .plan import Plan, SolverInfo
from .space import PlanSpace

log = logging.getLogger("planner.cpsat")


def cpsat(instance, time_limit: float | None = 60.0, seed: int = 0, workers: int = 2, gap: float = 1e-3,
          stages: int | None = None, replicas: int | None = None, tp: int | None = None,
          micro_batch_size: int | None = None, schedule: str | None = None,
          forbid=(), require=(), deterministic: bool = False, warm_start: bool = True,
          rounding: float = 1e-4, log_progress: bool = False, **_) -> Plan:
    """Plan with CP-SAT; see the module docstring.

    ``time_limit`` seconds in all (None: no limit); with ``deterministic``
    it is CP-SAT deterministic time summed over the shapes' solves (so a
    seed gives the same plan whatever the load, wall time varies; several
    workers then interleave deterministically).  ``gap`` relative optimality
    tolerance, ``workers`` and ``seed`` for CP-SAT, ``rounding`` the largest
    relative rounding error of the integer time unit (see
    :mod:`planner.formulations.cpsat`).  Pins (``stages``, ``replicas``,
    ``tp``, ``micro_batch_size``, ``schedule``, ``forbid``/``require``
    domain names) restrict the plan space as for the MILP.
    """
    from ortools.sat.python import cp_model

    from .formulations.cpsat import build

    t0 = time.perf_counter()
    budget = time_limit if time_limit is not None else math.inf
    end = t0 + budget
    spent_det = 0.0  # deterministic time used (deterministic mode)
    pins = dict(stages=stages, replicas=replicas, tp=tp, micro_batch_size=micro_batch_size, schedule=schedule)
    space = PlanSpace(instance)
    kind = instance.options.objective

    def left() -> float:
        return budget - spent_det if deterministic else end - time.perf_counter()

    # 1. the greedy incumbent (when it satisfies the pins)
    best_plan, best = None, math.inf
    try:
        g = greedy(instance, time_limit=max(1.0, 0.1 * (time_limit or 10)))
        if _plan_matches(g, pins, forbid, require):
            best_plan, best = g, _score(instance, g)
    except InfeasibleError:
        pass
    ref_s = float(Evaluator(instance, best_plan).estimate_times()[0]) if best_plan is not None else None
    log.info("cpsat: greedy incumbent %.6g (%s)", best, kind)

    # 2. shapes, best-first by their lower bound
    price_min = min(d.price_per_gpu_hour for d in instance.domains)
    nodes, per_shape = [], {}
    for sh in _shapes(space, pins):
        per_s = stage_bounds(space, sh)
        if not per_s:
            continue
        lb = min(per_s.values())
        if kind == "cost":  # every GPU of the plan costs at least the cheapest price for T
            lb = min(v * price_min * sh.replicas * sh.tp * S for S, v in per_s.items()) / 3600.0
        nodes.append(_Node(lb, sh))
        per_shape[sh] = per_s
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
        rest = left()
        if rest <= 0.05:
            timed_out = True
            bounds.append(node.bound)
            continue
        open_nodes = sum(1 for n in nodes[i:] if n.bound < best * (1 - gap))
        share = rest if math.isinf(rest) else max(rest / open_nodes, min(rest, 1.0))
        tb = time.perf_counter()
        try:
            cm = build(instance, node.shape, objective=kind, forbid=forbid, require=require, space=space,
                       ref_s=ref_s, cutoff=best if best < math.inf else None,
                       stage_bounds=per_shape[node.shape], rounding=rounding)
        except NotImplementedError as err:
            raise InfeasibleError(str(err)) from None
        except ValueError as err:  # no room for this shape
            log.info("cpsat: shape %s skipped: %s", node.shape, err)
            bounds.append(math.inf)
            continue
        hinted = warm_start and best_plan is not None and _same_shape(best_plan, node.shape) and cm.hint(best_plan)
        build_s = time.perf_counter() - tb
        build_total += build_s
        if not deterministic:
            share = min(share, end - time.perf_counter())
            if share <= 0.05:
                timed_out = True
                bounds.append(node.bound)
                continue
        solver = cp_model.CpSolver()
        p = solver.parameters
        if deterministic:
            p.max_deterministic_time = share
            if workers > 1:
                p.interleave_search = True
        else:
            p.max_time_in_seconds = share
        p.num_workers = int(workers)
        p.random_seed = int(seed)
        p.relative_gap_limit = max(0.0, gap - 2 * rounding)  # leave room for the rounding bound
        p.absolute_gap_limit = 0.0
        if log_progress:
            p.log_search_progress = True
            solver.log_callback = lambda line: log.info("cpsat: %s", line)
        status = solver.solve(cm.model)
        spent_det += solver.response_proto.deterministic_time
        solve_s = time.perf_counter() - tb - build_s
        cutoff_on = best < math.inf
        if status == cp_model.INFEASIBLE:
            # nothing in this shape beats the incumbent (or the shape is infeasible)
            shape_bound = best if cutoff_on else math.inf
        elif status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            shape_bound = max(node.bound, cm.true_lower(solver.best_objective_bound / cm.obj_scale))
            if status == cp_model.FEASIBLE:
                timed_out = True
        else:  # UNKNOWN: out of time before anything was proven
            shape_bound = node.bound
            timed_out = True
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            cuts, placement = cm.extract(solver)
            cand = Plan.build(cuts, placement, tp=node.shape.tp, micro_batch_size=node.shape.micro_batch,
                              instance=instance, schedule=node.shape.schedule)
            problems = check_plan(instance, cand)
            score = math.inf if problems else _score(instance, cand)
            if problems:  # never expected: the model encodes every rule of SPEC 4-5
                log.warning("cpsat: shape %s gave an infeasible plan: %s", node.shape,
                            "; ".join(v.message for v in problems))
            if score < best * (1 - 1e-9):
                best_plan, best = cand, score
        bounds.append(min(shape_bound, best))
        log.info("cpsat: shape tp=%d b=%d %s R=%d: %s in %.2fs (build %.2fs%s, unit %.0e s), shape bound %.6g; "
                 "incumbent %.6g", node.shape.tp, node.shape.micro_batch, node.shape.schedule,
                 node.shape.replicas, solver.status_name(status), solve_s, build_s,
                 ", hinted" if hinted else "", cm.unit_s, shape_bound, best)
    if best_plan is None:
        raise InfeasibleError(f"instance {instance.name} has no feasible plan"
                              + (" with the pinned choices" if any(pins.values()) or forbid or require else ""),
                              infeasibility_reasons(space))
    bound = min(bounds + [best]) if bounds else best
    gap_now = 0.0 if best <= 0 else max(0.0, (best - bound) / best)
    status = "optimal" if gap_now <= gap + 1e-12 else ("time_limit" if timed_out else "feasible")
    info = SolverInfo(name="cpsat", status=status, objective=best, bound=bound, gap=gap_now,
                      time_s=time.perf_counter() - t0, shapes=len(nodes), build_s=build_total,
                      deterministic_time=spent_det)
    log.info("cpsat: %s, objective %.6g, bound %.6g, gap %.2f%%, %d shapes, %.1fs (%.1fs building models)",
             status, best, bound, 100 * gap_now, len(nodes), info.time_s, build_total)
    return best_plan.model_copy(update={"solver": info})
