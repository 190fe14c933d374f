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
          rounding: float = 1e-4, presolve: str = "noprobe", polish: bool = True,
          log_progress: bool = False, **_) -> Plan:
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

    from .formulations.cpsat import build, configure

    t0 = time.perf_counter()
    total = time_limit if time_limit is not None else math.inf
    reserve = 0.1 * total if polish and math.isfinite(total) and instance.options.objective == "time" else 0.0
    budget = total - reserve  # the shape search; the rest polishes (or is given back)
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
    # 3. best-first over shapes; shapes cut off by the time limit are revisited with the
    #    time left (and the better incumbent) in further rounds
    bound_of: dict[int, float] = {}
    final: set[int] = set()
    shape_best: dict[int, Plan] = {}
    timed_out = False
    build_total = 0.0
    state = dict(best=best, best_plan=best_plan)

    def solve_node(i: int, share: float) -> None:
        nonlocal timed_out, build_total, spent_det
        node = nodes[i]
        best, best_plan = state["best"], state["best_plan"]
        tb = time.perf_counter()
        try:
            cm = build(instance, node.shape, objective=kind, forbid=forbid, require=require, space=space,
                       cutoff=best if best < math.inf else None,
                       stage_bounds=per_shape[node.shape], rounding=rounding)
        except NotImplementedError as err:
            raise InfeasibleError(str(err)) from None
        except ValueError as err:  # no room for this shape
            log.info("cpsat: shape %s skipped: %s", node.shape, err)
            bound_of[i] = math.inf
            final.add(i)
            return
        hinted = False
        if warm_start:
            for cand in (shape_best.get(i), best_plan):
                if cand is not None and _same_shape(cand, node.shape) and cm.hint(cand):
                    hinted = True
                    break
        build_s = time.perf_counter() - tb
        build_total += build_s
        if not deterministic:
            share = min(share, end - time.perf_counter())
            if share <= 0.05:
                timed_out = True
                return
        solver = configure(cp_model.CpSolver(), time_limit=share, workers=workers, seed=seed,
                           gap=max(0.0, gap - 2 * rounding),  # leave room for the rounding bound
                           deterministic=deterministic, presolve=presolve)
        if log_progress:
            solver.parameters.log_search_progress = True
            solver.log_callback = lambda line: log.info("cpsat: %s", line)
        status = solver.solve(cm.model)
        spent_det += solver.response_proto.deterministic_time
        solve_s = time.perf_counter() - tb - build_s
        if status == cp_model.INFEASIBLE:
            # nothing in this shape beats the incumbent (or the shape is infeasible)
            shape_bound = best
            final.add(i)
        elif status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            shape_bound = max(node.bound, cm.true_lower(solver.best_objective_bound / cm.obj_scale))
            if status == cp_model.OPTIMAL:
                final.add(i)
            else:
                timed_out = True
            cuts, placement = cm.extract(solver)
            cand = Plan.build(cuts, placement, tp=node.shape.tp, micro_batch_size=node.shape.micro_batch,
                              instance=instance, schedule=node.shape.schedule)
            problems = check_plan(instance, cand)
            if problems:  # never expected: the model encodes every rule of SPEC 4-5
                log.warning("cpsat: shape %s gave an infeasible plan: %s", node.shape,
                            "; ".join(v.message for v in problems))
            else:
                shape_best[i] = cand
                score = _score(instance, cand)
                if score < best * (1 - 1e-9):
                    state["best"], state["best_plan"] = score, cand
        else:  # UNKNOWN: out of time before anything was proven
            shape_bound = node.bound
            timed_out = True
        bound_of[i] = max(bound_of.get(i, node.bound), min(shape_bound, state["best"]))
        log.info("cpsat: shape tp=%d b=%d %s R=%d: %s in %.2fs (build %.2fs%s, unit %.0e s), shape bound %.6g; "
                 "incumbent %.6g", node.shape.tp, node.shape.micro_batch, node.shape.schedule,
                 node.shape.replicas, solver.status_name(status), solve_s, build_s,
                 ", hinted" if hinted else "", cm.unit_s, bound_of[i], state["best"])

    for rnd in range(20):
        todo = [i for i in range(len(nodes)) if i not in final
                and bound_of.get(i, nodes[i].bound) < state["best"] * (1 - gap)]
        if not todo:
            break
        for k, i in enumerate(todo):
            if bound_of.get(i, nodes[i].bound) >= state["best"] * (1 - gap):
                continue  # the incumbent improved meanwhile
            rest = left()
            if rest <= 0.05:
                timed_out = True
                break
            open_nodes = sum(1 for j in todo[k:] if bound_of.get(j, nodes[j].bound) < state["best"] * (1 - gap))
            share = rest if math.isinf(rest) else max(rest / open_nodes, min(rest, 1.0))
            solve_node(i, share)
        if left() <= 0.05:
            break
        if todo:
            log.info("cpsat: round %d done, %d shapes open", rnd + 1,
                     sum(1 for i in range(len(nodes)) if i not in final
                         and bound_of.get(i, nodes[i].bound) < state["best"] * (1 - gap)))
    best, best_plan = state["best"], state["best_plan"]
    bounds = [min(bound_of.get(i, nodes[i].bound), best) for i in range(len(nodes))]
    if best_plan is None:
        raise InfeasibleError(f"instance {instance.name} has no feasible plan"
                              + (" with the pinned choices" if any(pins.values()) or forbid or require else ""),
                              infeasibility_reasons(space))
    if reserve > 0:
        rest = (total - spent_det) if deterministic else (t0 + total - time.perf_counter())
        if rest > 0.2:
            best_plan = _polish(instance, best_plan, best, space, forbid, require, rest, workers, seed,
                                deterministic, rounding, presolve)
    bound = min(bounds + [best]) if bounds else best
    gap_now = 0.0 if best <= 0 else max(0.0, (best - bound) / best)
    status = "optimal" if gap_now <= gap + 1e-12 else ("time_limit" if timed_out else "feasible")
    info = SolverInfo(name="cpsat", status=status, objective=best, bound=bound, gap=gap_now,
                      time_s=time.perf_counter() - t0, shapes=len(nodes), build_s=build_total,
                      deterministic_time=spent_det)
    log.info("cpsat: %s, objective %.6g, bound %.6g, gap %.2f%%, %d shapes, %.1fs (%.1fs building models)",
             status, best, bound, 100 * gap_now, len(nodes), info.time_s, build_total)
    return best_plan.model_copy(update={"solver": info})


def _polish(instance, plan: Plan, best: float, space, forbid, require, time_limit, workers, seed,
            deterministic, rounding, presolve) -> Plan:
    """Among plans of the incumbent's shape with T_est <= T_est* (up to the rounding),
    prefer the one the exact simulation finds fastest: minimise every replica's period,
    transfer and synchronisation time (a secondary objective), and keep the result only
    if the evaluator confirms T_est <= T_est* and a shorter simulated iteration.  T_est is
    many-to-one; this changes neither the objective nor the bound."""
    from ortools.sat.python import cp_model

    from .formulations.cpsat import build, configure
    from .space import Shape

    shape = Shape(plan.tp, plan.micro_batch_size, plan.schedule_kind, plan.num_stages, plan.replicas)
    try:
        cm = build(instance, shape, objective="time", forbid=forbid, require=require, space=space,
                   cutoff=best, rounding=rounding)
    except (ValueError, NotImplementedError):
        return plan
    cm.hint(plan)
    x = [v for row in cm.extra["x"] for v in row]
    l = [v for row in cm.extra["l"] for v in row]
    cm.model.minimize(sum(cm.extra["tau"]) + sum(x) + sum(l) + sum(cm.extra["AR"]))
    solver = configure(cp_model.CpSolver(), time_limit=time_limit, workers=workers, seed=seed,
                       deterministic=deterministic, presolve=presolve)
    status = solver.solve(cm.model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return plan
    cuts, placement = cm.extract(solver)
    cand = Plan.build(cuts, placement, tp=shape.tp, micro_batch_size=shape.micro_batch, instance=instance,
                      schedule=shape.schedule)
    if check_plan(instance, cand):
        return plan
    ev_new, ev_old = Evaluator(instance, cand), Evaluator(instance, plan)
    if float(ev_new.estimate_times()[0]) > best * (1 + 1e-9):
        return plan
    t_new, t_old = float(ev_new.iteration_times()[0]), float(ev_old.iteration_times()[0])
    log.info("cpsat: polish (same T_est, shorter exact simulation): %.6g s -> %.6g s", t_old, min(t_new, t_old))
    return cand if t_new < t_old else plan
