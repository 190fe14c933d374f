"""Branch-and-bound over plan *shapes*, shared by the exact planners.

A shape is (tp, micro-batch size, schedule kind, replicas); within a shape,
a per-shape model (the MILP of :mod:`planner.solvers.formulations.milp` or the
CP-SAT model of :mod:`planner.solvers.formulations.cpsat`) chooses the number of
stages, the partition and the placement.  :func:`shape_search` is the one
outer search both use:

1. the greedy plan (best by T_est) is the first incumbent (when it
   satisfies the pins); before a shape is solved, a greedy plan of that
   shape (:func:`planner.solvers.greedy.shape_plan`) is its warm start and may
   improve the incumbent;
2. every shape gets a cheap lower bound (:func:`stage_bounds`: compute of
   the best memory-feasible partition, the fewest WAN crossings its GPUs
   force, Little's law); shapes are visited best-first and skipped once
   their bound reaches the incumbent (within ``gap``);
3. each visited shape's model gets a share of the remaining time and the
   incumbent as a cutoff; the bound it proves becomes the shape's bound,
   and its plan, re-scored by the evaluator, may become the incumbent;
4. shapes the time limit cut short are revisited, with the time left and
   the better incumbent, in further rounds;
5. the global bound is the smallest shape bound and the gap
   (incumbent - bound) / incumbent; optionally the last 10% of the time
   polishes the incumbent (a tie-break among plans of equal objective, which
   may also find a lower one): the solver's own secondary objective, kept only
   when the exact simulation is faster (:func:`keep_if_faster`).

The per-shape solve is a callable ``solve_shape(shape, share, context)``
returning a :class:`ShapeOutcome`; everything solver-specific (model
building, scaling, hints, solver options) lives behind it.

Example
-------
>>> def solve_shape(shape, share, ctx):          # doctest: +SKIP
...     ...                                      # build and solve one model
...     return ShapeOutcome("optimal", bound=3.2, plan=p)
>>> best = shape_search(inst, solve_shape, name="mysolver", time_limit=30)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from . import stop
from ..problem.errors import InfeasibleError, InputError, Stopped, TimeLimitError
from ..problem.specversion import check_spec
from ..scoring.bounds import estimate_family, fastest_type_instance, gap_claim, lower_bound
from ..scoring.evaluator import Evaluator, check_plan
from .greedy import greedy, infeasibility_reasons, shape_plan
from ..problem.network import GBPS, MS
from ..problem.plan import Plan, SolverInfo
from ..problem.space import PlanSpace, Shape, ShapeInfeasible

PINS = ("stages", "replicas", "tp", "micro_batch_size", "schedule")


@dataclass(order=True)
class _Node:
    bound: float
    shape: Shape = field(compare=False)


@dataclass
class ShapeOutcome:
    """What one per-shape solve established.

    ``status``: ``"optimal"`` (the shape is solved: ``bound`` is final),
    ``"infeasible"`` (nothing in the shape beats the incumbent, or no plan
    at all), ``"skipped"`` (proven to hold no plan: the model builder raised
    :class:`planner.problem.space.ShapeInfeasible`), ``"unsearched"`` (the
    model could not be built for another reason: nothing proven, the shape
    keeps its cheap bound), ``"feasible"`` (time ran out with a plan),
    ``"unknown"`` (time ran out with nothing);
    ``bound`` a proven lower bound on the shape's objective (seconds or
    currency; None: nothing proven), ``plan`` the best plan the solve found
    (re-scored by the search), ``build_s`` model-building time, ``spent``
    deterministic time (solvers that report one), ``detail`` a log note, ``size`` the
    model's size where reported (:mod:`planner.solvers.workunits`).
    """
    status: str
    bound: float | None = None
    plan: Plan | None = None
    build_s: float = 0.0
    spent: float = 0.0
    detail: str = ""
    size: int = 0  # the model's size (solvers that report one; for calibrating work units)


@dataclass
class SearchContext:
    """What a per-shape solve may use: the instance, its :class:`PlanSpace`,
    the incumbent objective and plan, the shape's plan found in an earlier
    round (a hint), the shape's per-stage-count bounds (seconds) and the pins."""
    instance: object
    space: PlanSpace
    incumbent: float
    incumbent_plan: Plan | None
    shape_plan: Plan | None
    stage_bounds: dict[int, float]
    forbid: tuple = ()
    require: tuple = ()


FLAT_ARCS_MAX = 40 * 40 * 32  # domains^2 x stage slots of one shape's flat model beyond which auto goes hierarchical
FLAT_BUILD_ARCS_PER_S = 8000.0  # how fast such a model is built (edwc-120dc: 460,800 arcs, over 85 s under load)


def flat_build_estimate(instance) -> float:
    """Predicted seconds to build one shape's flat MILP or CP-SAT model of ``instance``
    when it is beyond :data:`FLAT_ARCS_MAX` (0 below it, where builds take well under
    a second and the measured build times take over): a shape search does not start
    a build it cannot finish within its time limit, and returns its incumbent with
    status ``time_limit`` instead (``--solver hier`` plans such instances)."""
    arcs = len(instance.domains) ** 2 * instance.max_stages
    return arcs / FLAT_BUILD_ARCS_PER_S if arcs > FLAT_ARCS_MAX else 0.0


def build_model(make: Callable[[], object], deadline: float | None = None
                ) -> tuple[object | None, "ShapeOutcome | None"]:
    """A shape's model from ``make()``: ``(model, None)``, or ``(None, outcome)`` when
    the shape gets none -- ``skipped`` when its build proves it holds no plan
    (``ShapeInfeasible``), ``unsearched`` when it could not be built (``ValueError``:
    no proof, so the search cannot claim optimality), ``unknown`` when the build
    passed ``deadline`` (``time.perf_counter()``) or a stop was requested.  A
    formulation that cannot express the instance (``NotImplementedError``) raises
    ``InfeasibleError``."""
    t0 = time.perf_counter()
    try:
        with stop.build_deadline(deadline):
            return make(), None
    except stop.OutOfTime:
        return None, ShapeOutcome("unknown", build_s=time.perf_counter() - t0, detail="no time left while building")
    except NotImplementedError as err:
        raise InfeasibleError(str(err)) from None
    except ShapeInfeasible as err:
        return None, ShapeOutcome("skipped", detail=str(err))
    except ValueError as err:
        return None, ShapeOutcome("unsearched", detail=str(err))


def search_space(instance) -> PlanSpace:
    """The :class:`PlanSpace` the shape search bounds shapes with: the instance's own, or,
    when its domains have several GPU types (SPEC v3 (g)), that of the *optimistic*
    instance (:func:`planner.scoring.bounds.fastest_type_instance`: every domain at the
    fastest type's speed with the largest memory).  Its stage slots, replica counts and
    backward factor are the instance's; its partitions and compute times are optimistic,
    so every bound taken from it (:func:`shape_lower_bound`, :func:`stage_bounds`) holds
    for every plan of the instance (SPEC 7, "GPU types": T_est is non-decreasing in every
    f and g, and memory only grows).  The formulations tabulate each type's figures
    themselves.

    >>> search_space(mixed).instance.heterogeneous            # doctest: +SKIP
    False
    """
    return PlanSpace(fastest_type_instance(instance))


def score(instance, plan, spec: int | None = None) -> float:
    """The plan's objective from the evaluator of SPEC version ``spec``: T_est (s) or
    cost per iteration with T_est."""
    ev = Evaluator(instance, plan, spec=spec)
    return float(ev.objective(ev.estimate_times())[0])


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
      on the whole pipeline, SPEC 7 v2) >= Q_0 / S when S < m (the window is
      dropped when stage 0 holds all m); T_est >= (m - 1) tau + Q_0.
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
        # Little's law on the whole pipeline counts only when stage 0 holds fewer than m
        tau = max(cmax, x_min, q0 / S if S < m else 0.0)
    return (m - 1) * tau + q0


def stage_bounds(space: PlanSpace, shape: Shape, spec: int | None = None) -> dict[int, float]:
    """S -> lower bound on T_est (s) for every feasible stage count of ``shape``:
    the larger of :func:`shape_lower_bound` and the instance-derived bound of
    :func:`planner.solvers.formulations.milp_bounds.stage_count_bounds` (pipeline
    paths through the domains, gradient rings, WAN volume; SPEC v2 only: under v3,
    ``spec`` >= 3, the first alone, which holds there: unit overhead only lengthens
    stages, a route's bandwidth is at most the largest link's and its latency at
    least the smallest link's, and T_est >= its stage-0 term, whose gpipe period is
    v2's; the finer bounds count halved 2-member rings and equal sync shares)."""
    from .formulations.milp_bounds import stage_count_bounds

    inst = space.instance
    top = min(inst.max_stages, inst.num_units, sum(space.slots(shape.tp).values()) // shape.replicas)
    out = {}
    for S in ([shape.stages] if shape.stages else range(1, top + 1)):
        lb = shape_lower_bound(space, Shape(shape.tp, shape.micro_batch, shape.schedule, S, shape.replicas))
        if lb is not None:
            out[S] = lb
    finer = stage_count_bounds(inst, shape, space, spec=spec)
    return {S: max(v, finer.get(S, v)) for S, v in out.items()}


def shapes(space: PlanSpace, pins: dict):
    """Every shape the instance's options and the pins allow (stages = the pin or 0: free)."""
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


def plan_matches(plan: Plan, pins: dict, forbid=(), require=()) -> bool:
    """Whether ``plan`` satisfies the pins and the forbidden/required domains."""
    if pins.get("tp") not in (None, plan.tp) or pins.get("micro_batch_size") not in (None, plan.micro_batch_size):
        return False
    if pins.get("schedule") not in (None, plan.schedule_kind) or pins.get("replicas") not in (None, plan.replicas):
        return False
    if pins.get("stages") not in (None, plan.num_stages):
        return False
    used = {d for row in plan.placement for d in row}
    return not (used & set(forbid)) and set(require) <= used


def same_shape(plan: Plan, shape: Shape) -> bool:
    """Whether ``plan`` is of ``shape`` (any stage count when the shape leaves it free)."""
    return (plan.tp, plan.micro_batch_size, plan.schedule_kind, plan.replicas) == \
        (shape.tp, shape.micro_batch, shape.schedule, shape.replicas) and \
        (not shape.stages or shape.stages == plan.num_stages)


def plan_shape(plan: Plan) -> Shape:
    return Shape(plan.tp, plan.micro_batch_size, plan.schedule_kind, plan.num_stages, plan.replicas)


def _admits(space: PlanSpace, pins: dict, forbid=(), require=()) -> bool:
    """A necessary condition for a plan under the pins: some shape whose stages
    fit in memory (:func:`shape_lower_bound`) and whose replicas' stages fit in
    the stage slots of the domains not forbidden, every required domain
    having a slot.  False is a proof that no plan exists."""
    inst = space.instance
    top = min(inst.max_stages, inst.num_units)
    for sh in shapes(space, pins):
        slots = {d: n for d, n in space.slots(sh.tp).items() if d not in forbid}
        if any(slots.get(d, 0) < 1 for d in require):
            continue
        for S in ([sh.stages] if sh.stages else range(1, top + 1)):
            if S * sh.replicas > sum(slots.values()) or len(require) > S * sh.replicas:
                continue
            if shape_lower_bound(space, Shape(sh.tp, sh.micro_batch, sh.schedule, S, sh.replicas)) is not None:
                return True
    return False


def pin_reasons(space: PlanSpace, pins: dict, forbid=(), require=()) -> list[str]:
    """Which pins make the plan space empty: a pin that alone admits no plan, or
    else the pins whose removal alone would admit one (checked with :func:`_admits`)."""
    items = [(f"--{k.replace('_', '-')} {v}", k) for k, v in pins.items() if v is not None]
    items += [(f"--forbid {d}", ("forbid", d)) for d in forbid] + [(f"--require {d}", ("require", d)) for d in require]

    def with_only(keep) -> bool:
        p = {k: (v if k in keep else None) for k, v in pins.items()}
        return _admits(space, p, tuple(d for d in forbid if ("forbid", d) in keep),
                       tuple(d for d in require if ("require", d) in keep))

    everything = {key for _, key in items}
    if len(forbid) == len(space.instance.domains):
        return ["--forbid names every domain: no domain is left to host a stage"]
    alone = [label for label, key in items if not with_only({key})]
    if alone:
        return [f"{label} alone admits no plan (no stage count fits the model in memory within the GPUs "
                "it allows)" for label in alone]
    if not with_only(everything | set()):
        culprits = [label for label, key in items if with_only(everything - {key})]
        if culprits:
            return [f"the pins {', '.join(label for label, _ in items)} together admit no plan; dropping "
                    + " or ".join(culprits) + " would admit one"]
        return [f"the pins {', '.join(label for label, _ in items)} together admit no plan"]
    return [f"no plan satisfying the pins {', '.join(label for label, _ in items)} was found"]


def _no_plan(instance, space, pins, forbid, require) -> InfeasibleError:
    pinned = any(v is not None for v in pins.values()) or forbid or require
    if pinned and _admits(space, {k: None for k in pins}):  # the pins make it infeasible: say which
        return InfeasibleError(f"instance {instance.name} has no feasible plan with the pinned choices",
                               pin_reasons(space, pins, forbid, require))
    return InfeasibleError(f"instance {instance.name} has no feasible plan"
                           + (" with the pinned choices" if pinned else ""), infeasibility_reasons(space))


def shape_search(instance, solve_shape: Callable[[Shape, float, SearchContext], ShapeOutcome], *, name: str,
                 time_limit: float | None = 60.0, gap: float = 1e-3, pins: dict | None = None, forbid=(),
                 require=(), polish: Callable[[Plan, float, float, SearchContext], Plan] | None = None,
                 deterministic: bool = False, rounds: int = 20, log: logging.Logger | None = None,
                 executor=None, start: Plan | None = None, bounding: float = 0.4, spec: int | None = None,
                 **info_extra) -> Plan:
    """Best-first search over shapes with a per-shape exact solve; see the module docstring.

    ``solve_shape(shape, share_s, ctx)`` solves one shape within ``share_s``
    seconds (deterministic time when ``deterministic``); ``polish(plan,
    objective, seconds_left, ctx)`` may return a plan of equal objective that
    it prefers (given the last 10% of the time; the objective is "time"
    only).  Returns the incumbent with a :class:`SolverInfo` (status,
    objective, bound, gap, time); raises :class:`InfeasibleError` with the
    reasons when no plan exists.  ``time_limit`` seconds (None: none).

    ``executor`` (a :class:`planner.solvers.executor.Executor`; None: this
    process, one shape at a time) solves *waves* of ``executor.width`` shapes
    at once, each with the incumbent of the waves before it and
    ``width / open shapes`` of the time left; ``solve_shape`` must then be
    picklable (a module-level class, not a closure).  In deterministic mode a
    wave spends the largest deterministic time of its solves.  ``start`` (a
    plan of ``instance``) joins greedy's plan as a first incumbent when it is
    feasible and satisfies the pins.  ``bounding``: the share of the budget the
    shapes' cheap bounds may take before the rest keep the instance's analytic
    bound (computed only if visited).  ``spec``: the SPEC version planned for
    and scored with (default :data:`~planner.problem.specversion.DEFAULT_SPEC`).
    """
    search = _Search(instance, solve_shape, name, time_limit, gap, pins, forbid, require, polish is not None,
                     deterministic, log, executor, spec)
    search.first_incumbent(start)                # 1.
    search.bound_shapes(bounding)                # 2.
    search.solve_rounds(rounds)                  # 3-4.
    return search.result(polish, info_extra)     # 5.


class _Search:
    """:func:`shape_search`'s state: the incumbent (``best_plan``, objective ``best``), the
    shapes (``nodes``, best-first) with their proven bounds (``bound_of``; ``final``: solved
    or proven empty), the per-shape plans, and the time (``budget`` seconds; ``spent``
    deterministic time in deterministic mode)."""

    def __init__(self, instance, solve_shape, name, time_limit, gap, pins, forbid, require, polishes,
                 deterministic, log, executor, spec):
        self.instance, self.solve_shape, self.name, self.gap = instance, solve_shape, name, gap
        self.log = log or logging.getLogger(f"planner.{name}")
        self.pins = {k: (pins or {}).get(k) for k in PINS}
        self.forbid, self.require = tuple(forbid), tuple(require)
        self.t0 = time.perf_counter()
        self.spec = spec = check_spec(spec)
        self.kind = kind = instance.options.objective
        self.deterministic, self.executor = deterministic, executor
        self.width = executor.width if executor is not None else 1
        self.total = total = time_limit if time_limit is not None else math.inf
        self.reserve = 0.1 * total if polishes and math.isfinite(total) and kind == "time" else 0.0
        self.budget = total - self.reserve
        self.spent = 0.0  # deterministic time used (deterministic mode)
        self.space = search_space(instance)
        # greedy's warm starts: real types
        self.typed_space = PlanSpace(instance) if instance.heterogeneous else self.space
        if instance.heterogeneous and spec < 3:
            raise InputError("GPU types ([[gpus]], a domain's gpu) are SPEC v3: plan them with spec 3", "gpus")
        self.best_plan, self.best = None, math.inf
        self.greedy_plans: list[Plan] = []  # greedy's plans honouring the pins: the result never simulates slower
        self.sims: dict = {}  # plans simulated for the final comparison (id -> (plan, value))
        self.final_s = 0.0  # the time kept back for it
        self.nodes: list[_Node] = []
        self.per_shape: dict = {}
        self.bound_of: dict[int, float] = {}
        self.final: set[int] = set()
        self.shape_best: dict[int, Plan] = {}
        self.timed_out = self.out_of_time = False
        self.build_total = 0.0
        # the longest model build (and overrun) so far: no shape starts with less time left; before the
        # first build, a flat model beyond auto's size rule is predicted from its size (it cannot be
        # interrupted once started: 120 domains took over 85 s)
        self.build_est = flat_build_estimate(instance)
        self.skipped: dict[str, int] = {}     # reason -> shapes proven empty for it
        self.unsearched: dict[str, int] = {}  # reason -> shapes whose model could not be built

    def left(self) -> float:
        """Seconds (deterministic: deterministic seconds) left of the search's budget."""
        return self.budget - self.spent if self.deterministic else self.t0 + self.budget - time.perf_counter()

    def matches(self, plan) -> bool:
        """``plan`` honours the pins, the forbidden and the required."""
        return plan_matches(plan, self.pins, self.forbid, self.require)

    def offer(self, plan) -> bool:
        """``plan`` (feasible) becomes the incumbent when it scores lower; whether it did."""
        s = score(self.instance, plan, self.spec)
        if s < self.best * (1 - 1e-9):
            self.best_plan, self.best = plan, s
            return True
        return False

    def first_incumbent(self, start) -> None:
        """1. Greedy's plan (and ``start``) as the first incumbent."""
        instance, total = self.instance, self.total
        try:
            # as the greedy solver alone (the result is never slower than it), within half the time limit
            # (deterministic mode: greedy's own budget, never a share of a deterministic one, which would
            # make the incumbent depend on the machine's speed)
            g = greedy(instance, time_limit=0.5 * total if math.isfinite(total) and not self.deterministic else None)
            if self.matches(g):
                self.best_plan, self.best = g, score(instance, g, self.spec)
                self.greedy_plans.append(g)
        except (InfeasibleError, TimeLimitError, Stopped):
            pass
        if self.greedy_plans and math.isfinite(self.budget) and not self.deterministic:
            # the final comparison with greedy's plans simulates up to FINAL_SIMS plans: keep that time back
            ts = time.perf_counter()
            _simulated(instance, self.greedy_plans[0], self.sims)
            self.final_s = min(0.25 * total, FINAL_SIMS * (time.perf_counter() - ts))
            self.budget -= self.final_s
        if start is not None and self.matches(start) and not check_plan(instance, start):
            self.greedy_plans.append(start)
            self.offer(start)
        self.log.info("%s: greedy incumbent %.6g (%s)", self.name, self.best, self.kind)

    def bound_shapes(self, bounding: float) -> None:
        """2. Every shape with its cheap bound, best-first; past ``bounding`` of the budget the
        rest keep the instance's analytic bound (bounded if visited)."""
        instance, budget, kind = self.instance, self.budget, self.kind
        price_min = min(d.price_per_gpu_hour for d in instance.domains)
        later = []
        for sh in shapes(self.space, self.pins):
            if math.isfinite(budget) and self.left() < (1.0 - bounding) * budget:
                # out of time for bounds: the rest keep the instance's analytic bound (time; the
                # cost's 0), computed if visited
                later.append(_Node(lower_bound(instance, spec=self.spec).value if kind == "time" else 0.0, sh))
                continue
            per_s = stage_bounds(self.space, sh, self.spec)
            if not per_s:
                continue
            lb = min(per_s.values())
            if kind == "cost":  # every GPU of the plan costs at least the cheapest price for T_est
                lb = min(v * price_min * sh.replicas * sh.tp * S for S, v in per_s.items()) / 3600.0
            self.nodes.append(_Node(lb, sh))
            self.per_shape[sh] = per_s
        self.nodes.sort()
        if later:
            self.log.info("%s: %d shapes keep the instance's analytic bound %.6g (no time to bound them)",
                          self.name, len(later), later[0].bound)
            self.nodes += later  # after the bounded ones: visited last
        if not self.nodes and self.best_plan is None:
            raise _no_plan(instance, self.space, self.pins, self.forbid, self.require)

    def is_open(self, i: int) -> bool:
        """Shape i is not final and its bound is below the incumbent (within the gap)."""
        return i not in self.final and self.bound_of.get(i, self.nodes[i].bound) < self.best * (1 - self.gap)

    def run(self, items: list) -> list:
        """The wave's outcomes: in this process (no executor), else on the executor."""
        if self.executor is None:
            return [self.solve_shape(*it) for it in items]
        got = self.executor.map(self.solve_shape, items)
        return [o if o is not None else ShapeOutcome("unknown", detail="stopped") for o in got]

    def absorb(self, i: int, out: ShapeOutcome, solve_s: float) -> None:
        """A shape's outcome: its bound, its plan (maybe the new incumbent), the log line."""
        node, name, log = self.nodes[i], self.name, self.log
        if out.status == "skipped":  # proven empty
            self.bound_of[i] = math.inf
            self.final.add(i)
            self.skipped[out.detail] = self.skipped.get(out.detail, 0) + 1
            return
        if out.status == "unsearched":  # nothing proven: the shape keeps its cheap bound
            self.final.add(i)
            if out.detail not in self.unsearched:
                log.warning("%s: a shape could not be searched: %s", name, out.detail)
            self.unsearched[out.detail] = self.unsearched.get(out.detail, 0) + 1
            return
        if out.plan is not None:
            problems = check_plan(self.instance, out.plan)
            if problems:  # never expected: the models encode every rule of SPEC 4-5
                log.warning("%s: shape %s gave an infeasible plan: %s", name, node.shape,
                            "; ".join(v.message for v in problems))
            else:
                self.shape_best[i] = out.plan
                self.offer(out.plan)
        if out.status == "infeasible":  # nothing in this shape beats the incumbent
            shape_bound = self.best
            self.final.add(i)
        else:
            shape_bound = max(node.bound, out.bound) if out.bound is not None else node.bound
            if out.status == "optimal":
                self.final.add(i)
            else:
                self.timed_out = True
        self.bound_of[i] = max(self.bound_of.get(i, node.bound), min(shape_bound, self.best))
        sh = node.shape
        log.info("%s: shape tp=%d b=%d %s R=%d: %s in %.2fs (build %.2fs%s), shape bound %.6g; incumbent %.6g",
                 name, sh.tp, sh.micro_batch, sh.schedule, sh.replicas, out.status,
                 solve_s, out.build_s, f", {out.detail}" if out.detail else "",
                 self.bound_of[i], self.best)

    def warm_start(self, i: int) -> None:
        """A greedy plan of shape i: its warm start, and maybe a better incumbent."""
        node = self.nodes[i]
        per_s = self.per_shape[node.shape]
        h = shape_plan(self.instance, node.shape, sorted(per_s, key=per_s.get)[:3], self.typed_space, self.forbid)
        if h is not None and self.matches(h) and not check_plan(self.instance, h):
            self.shape_best[i] = h
            self.greedy_plans.append(h)
            self.offer(h)

    def next_wave(self, todo: list[int], k: int) -> tuple[list, bool, int]:
        """(wave, halt, k): up to ``width`` open shapes of ``todo`` from position k on, each with
        the incumbent of the waves before it and its share of the time left; ``halt`` when
        the time, or a stop, ends the rounds."""
        wave, halt = [], False
        while k < len(todo) and len(wave) < self.width:
            i = todo[k]
            k += 1
            if stop.requested():  # Ctrl-C or the memory cap: keep the incumbent
                halt = True
                break
            if not self.is_open(i):
                continue  # the incumbent improved meanwhile
            rest = self.left()
            if rest <= 0.05:
                self.timed_out = halt = True
                break
            n_open = sum(1 for j in todo[k - 1:] if self.is_open(j))
            share = rest if math.isinf(rest) else min(rest, max(rest * self.width / n_open, min(rest, 1.0)))
            if not self.deterministic and self.build_est and rest < self.build_est + 0.5:
                self.timed_out = self.out_of_time = halt = True  # too little time to build this shape's model
                break
            node = self.nodes[i]
            if node.shape not in self.per_shape:  # bounded lazily (see step 2)
                self.per_shape[node.shape] = stage_bounds(self.space, node.shape, self.spec)
                if not self.per_shape[node.shape]:
                    self.bound_of[i] = math.inf
                    self.final.add(i)
                    continue
            if i not in self.shape_best and not (self.best_plan is not None and same_shape(self.best_plan, node.shape)):
                self.warm_start(i)
                if not self.is_open(i):
                    continue
            ctx = SearchContext(self.instance, self.space, self.best, self.best_plan, self.shape_best.get(i),
                                self.per_shape[node.shape], self.forbid, self.require)
            wave.append((i, (node.shape, share, ctx)))
        return wave, halt, k

    def solve_wave(self, wave: list) -> None:
        """Solve one wave and absorb its outcomes (the time spent, the builds' estimate)."""
        ts = time.perf_counter()
        outs = self.run([item for _, item in wave])
        wall = time.perf_counter() - ts
        self.spent += max(out.spent for out in outs)
        self.build_total += sum(out.build_s for out in outs)
        # what a shape costs beyond the solver's share: model building and compiling it for the solver
        self.build_est = max(self.build_est, max(out.build_s for out in outs),
                             wall - max(item[1] for _, item in wave))
        for (i, _), out in zip(wave, outs):
            self.absorb(i, out, wall - out.build_s)

    def solve_rounds(self, rounds: int) -> None:
        """3-4. Rounds of best-first solves, in waves, until no shape is open or the time ends."""
        for rnd in range(rounds):
            todo = [i for i in range(len(self.nodes)) if self.is_open(i)]
            if not todo:
                break
            k = 0
            while k < len(todo):
                wave, halt, k = self.next_wave(todo, k)
                if wave:
                    self.solve_wave(wave)
                if halt:
                    break
            if self.left() <= 0.05 or self.out_of_time or stop.requested():
                self.timed_out = self.timed_out or any(self.is_open(i) for i in range(len(self.nodes)))
                break
            n_open = sum(1 for i in range(len(self.nodes)) if self.is_open(i))
            if n_open:
                self.log.info("%s: round %d done, %d shapes open", self.name, rnd + 1, n_open)

    def result(self, polish, info_extra: dict) -> Plan:
        """5. The incumbent polished, never slower than greedy's plans, with its bound, gap and status."""
        instance, name, log, nodes, bound_of = self.instance, self.name, self.log, self.nodes, self.bound_of
        for reason, n in self.skipped.items():
            log.info("%s: %d shape%s proven to hold no plan: %s", name, n, "s" if n > 1 else "", reason)
        stopped = stop.requested()
        if self.best_plan is None:
            if stopped:
                raise Stopped(stopped, f"{name}: stopped ({stopped}) before any plan was found")
            raise _no_plan(instance, self.space, self.pins, self.forbid, self.require)
        best_plan, best = self.best_plan, self.best
        if self.reserve > 0 and not stopped:
            rest = ((self.total - self.spent) if self.deterministic
                    else (self.t0 + self.total - self.final_s - time.perf_counter()))
            rest = min(rest, self.reserve)  # the last 10%, also when the search ends early
            if rest > 0.2 and rest > flat_build_estimate(instance):  # the polish builds a flat model too
                ctx = SearchContext(instance, self.space, best, best_plan, None, {}, self.forbid, self.require)
                best_plan = polish(best_plan, best, rest, ctx)
                best = min(best, score(instance, best_plan, self.spec))  # the polish may also lower the objective
        best_plan, best = _not_slower_than_greedy(instance, best_plan, best, self.greedy_plans, log, name, self.sims,
                                                  self.spec)
        gap, final = self.gap, self.final
        bounds = [min(bound_of.get(i, nodes[i].bound), best) for i in range(len(nodes))]
        bound = min(bounds + [best])
        gap_now = 0.0 if best <= 0 else max(0.0, (best - bound) / best)
        # "optimal" within the default tolerance, "within_gap" within a looser requested one
        status = gap_claim(gap_now, gap) or (stopped or ("time_limit" if self.timed_out else "feasible"))
        if status in ("optimal", "within_gap") and self.unsearched and any(
                i in final and bound_of.get(i, nodes[i].bound) < best * (1 - gap) for i in range(len(nodes))):
            status = "feasible"  # a shape that might hold a better plan was not searched
        if not isinstance(best_plan.schedule, str):  # greedy's lean plan: outside the family the shapes cover
            fam = [bound_of.get(i, nodes[i].bound) for i in range(len(nodes))]
            bound = min(fam) if fam and math.isfinite(min(fam)) else None
            gap_now = None if bound is None or best <= 0 else max(0.0, (best - bound) / best)
            status = stopped or ("time_limit" if self.timed_out else "feasible")
        if self.deterministic:
            info_extra.setdefault("deterministic_time", self.spent)
        pins = self.pins
        family = estimate_family(instance, pins.get("schedule"),
                                 pinned=any(v is not None for v in pins.values()) or bool(self.forbid or self.require))
        info = SolverInfo(name=name, status=status, objective=best, bound=bound, gap=gap_now,
                          time_s=time.perf_counter() - self.t0, shapes=len(nodes), build_s=self.build_total,
                          requested_gap=gap, estimate_family=family, **info_extra)
        log.info("%s: %s, objective %.6g, bound %s, gap %.2f%%, %d shapes, %.1fs (%.1fs building models)",
                 name, status, best, "-" if bound is None else f"{bound:.6g}", 100 * (gap_now or 0.0), len(nodes),
                 info.time_s, self.build_total)
        return best_plan.model_copy(update={"solver": info})


FINAL_SIMS = 6  # simulations after the search (the result against greedy's plans), timed before it


def _simulated(instance, plan: Plan, memo: dict | None = None, spec: int | None = None) -> float:
    """The plan's exact simulated objective: iteration time (s) or its cost (``memo``,
    keyed by the plan object, which the caller keeps alive: each plan simulated once)."""
    if memo is not None and id(plan) in memo:
        return memo[id(plan)][1]
    ev = Evaluator(instance, plan, spec=spec)
    value = float(ev.objective(ev.iteration_times())[0])
    if memo is not None:
        memo[id(plan)] = (plan, value)
    return value


def _not_slower_than_greedy(instance, plan: Plan, objective: float, greedy_plans: list[Plan], log,
                            name: str, memo: dict | None = None, spec: int | None = None
                            ) -> tuple[Plan, float]:
    """``plan`` (best by T_est) or, when one of greedy's plans with the same pins
    simulates faster (cheaper), that plan: an exact planner never returns a
    plan worse than greedy's by the exact simulation.  Returns (plan, its T_est objective)."""
    if not greedy_plans:
        return plan, objective
    memo = {} if memo is None else memo
    mine = _simulated(instance, plan, memo, spec)
    best_g = min(greedy_plans[:4], key=lambda p: _simulated(instance, p, memo, spec))
    theirs = _simulated(instance, best_g, memo, spec)
    if theirs < mine * (1 - 1e-12):
        log.info("%s: greedy's plan simulates better than the T_est optimum (%.6g vs %.6g): returning it",
                 name, theirs, mine)
        return best_g, score(instance, best_g, spec)
    return plan, objective


def keep_if_faster(instance, plan: Plan, cand: Plan | None, objective: float, log, name: str,
                   spec: int | None = None) -> Plan:
    """Polish helper: ``cand`` if it is feasible, its T_est is <= ``objective``
    and its exact simulation is shorter than ``plan``'s (SPEC version ``spec``),
    else ``plan``."""
    if cand is None or check_plan(instance, cand):
        return plan
    ev_new, ev_old = Evaluator(instance, cand, spec=spec), Evaluator(instance, plan, spec=spec)
    if float(ev_new.estimate_times()[0]) > objective * (1 + 1e-9):
        return plan
    t_new, t_old = float(ev_new.iteration_times()[0]), float(ev_old.iteration_times()[0])
    log.info("%s: polish (T_est kept, exact simulation): %.6g s -> %.6g s", name, t_old, min(t_new, t_old))
    return cand if t_new < t_old else plan
