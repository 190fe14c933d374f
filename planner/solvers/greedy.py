"""The greedy planner: the fast heuristic a practitioner would write.

1. Enumerate (tensor parallel, micro-batch size, schedule, stages,
   replicas) best-first by a compute-only estimate, cutting the layers into
   balanced stages by bisection + packing (``planner.problem.partition``) under the
   memory rule (and the same cut with its boundaries moved by a unit or two to
   where less activation crosses, when that costs little balance); keep the most promising shapes, plus the best ones that fit
   inside the largest one, two or three domains (little or no WAN).
2. For each, place stages on domains: order the domains as a chain that
   starts at a large (or, for ``objective = "cost"``, cheap) domain and
   always moves on along the highest-bandwidth, lowest-latency route, then
   either *fill* (each replica takes the next S slots along the chain, so
   consecutive stages share a domain where possible) or *align* (stage j of
   every replica sits in the same domain, so gradient rings stay inside a
   domain).
3. Score every candidate with T_est (or its cost); simulate the best
   ``RERANK`` exactly (a count, not a clock, so that the result does not
   depend on the machine's load; the time limit still applies) and keep the fastest
   simulated one (T_est misjudges some unbalanced pipelines over the WAN).
   With ``robust=K`` the statistic of T_est over K states decides alone.

It is always feasible when the instance is (any memory-feasible shape whose
GPUs fit is placed; when no shape fits with 1f1b or gpipe, the best plan
that fits with fewer micro-batches in flight,
:func:`lean_plans`), and otherwise raises
``InfeasibleError`` with the reason.  Typical run time: milliseconds to a fraction of a second.

Its budget: ``time_limit`` seconds (default :data:`DEFAULT_TIME_LIMIT`, 60),
a stop request (Ctrl-C, SIGTERM, the ``--memory-limit`` of
:mod:`planner.solvers.stop`) and its own resident memory
(:func:`planner.solvers.stop.over_memory`: the ``--memory-limit``, else
4 GB more than the process held when greedy started), checked between plans (a stop request or the memory cap still lets
the first plan be made: the incumbent to return).  A huge instance (a million replicas of a
pipeline have plans of tens of millions of slots) stops at the first of them
with the best plan so far and its ``solver.status`` saying why
(``time_limit``, ``interrupted``, ``memory_limit``), or raises
``TimeLimitError`` / :class:`planner.problem.errors.Stopped` when it had none.

Example
-------
>>> plan = greedy(instance)                              # doctest: +SKIP
>>> plan.solver.status
'heuristic'
"""

from __future__ import annotations

import heapq
import logging
import math
import time

import numpy as np

from ..problem.errors import InfeasibleError, Stopped, TimeLimitError, human_bytes
from ..problem.specversion import check_spec
from ..scoring.evaluator import Evaluator, check_plan
from ..problem.plan import Plan, SolverInfo
from ..problem.space import LEAN, PlanSpace, Shape
from .inflight import inflight_schedule
from . import stop

KEEP = 24  # shapes kept from the best-first enumeration
KEEP_LOCAL = 6  # single-domain shapes kept
RERANK = 8  # candidates (best by T_est) re-ranked by the exact simulation
DEFAULT_TIME_LIMIT = 60.0  # seconds, when none is given
MEMORY_CHECK_S = 0.1  # how often (at most) the resident memory is read

log = logging.getLogger("planner.greedy")


class _Budget:
    """Greedy's stop rule: the deadline (``time.perf_counter()``), a stop request,
    the memory cap; :meth:`why` names the first that holds (None: go on)."""

    def __init__(self, deadline: float, time_limit: float):
        self.deadline, self.time_limit = deadline, time_limit
        self.reason: str | None = None
        self.own_deadline = False  # the time limit that ran out was greedy's own, not the caller's stop request
        self.found = False  # a shape was found: a stop request may end the enumeration now
        self._next_mem = 0.0
        self._rss0 = stop.memory_baseline()  # without --memory-limit, greedy's own growth is capped

    def why(self) -> str | None:
        if self.reason is not None:
            return self.reason
        now = time.perf_counter()
        if now >= self.deadline or stop.requested() == "time_limit":
            self.reason, self.own_deadline = "time_limit", now >= self.deadline
        elif stop.requested():
            self.reason = stop.requested()
        elif now >= self._next_mem:
            self._next_mem = now + MEMORY_CHECK_S
            if stop.over_memory(self._rss0):
                self.reason = "memory_limit"
                log.warning("greedy: resident memory %s passed the cap of %s (--memory-limit; default: %s more than "
                            "when greedy started): "
                            "stopping with the best plan so far", human_bytes(stop.rss_bytes(children=False)),
                            human_bytes(stop.memory_cap_bytes(self._rss0)),
                            human_bytes(stop.DEFAULT_HEURISTIC_MEMORY_BYTES))
        return self.reason

    def nothing_found(self):
        """The error when the budget ran out before any plan."""
        if self.reason == "time_limit":  # greedy's own limit, or the command's (a stop request)
            limit = f"the time limit of {self.time_limit:g} s" if self.own_deadline else "the time limit"
            return TimeLimitError(f"greedy: {limit} ran out before any plan was "
                                  "found (nothing is proven about feasibility; give it more time)")
        if self.reason == "memory_limit":
            return Stopped("memory_limit", f"greedy: resident memory passed {human_bytes(stop.memory_cap_bytes(self._rss0))} "
                                           "before any plan was found (--memory-limit GB sets the cap)")
        return Stopped(self.reason, f"greedy: stopped ({self.reason}) before any plan was found")


def _best_shapes(space: PlanSpace, keep: int, max_gpus: int | None, budget: _Budget, tp_comm: bool = True):
    """Best-first over shapes by the pipeline time without the network, (m-1)*max c + sum c
    (c: compute and, with ``tp_comm``, the tensor-parallel all-reduces)."""
    inst = space.instance
    gbs = inst.workload.global_batch_size

    def stage_time(a, b, sh):
        return (space.stage_time(a, b, sh.tp, sh.micro_batch) if tp_comm else
                space.compute_time(space.table.interval(a, b)[0], sh.tp, sh.micro_batch))

    heap = []
    for sh in space.shapes(max_gpus):
        m = sh.micro_batches(gbs)
        ctot = stage_time(0, inst.num_units, sh)
        heap.append(((m - 1) * ctot / sh.stages + ctot, sh.tp * sh.stages * sh.replicas, sh, None))
    heapq.heapify(heap)
    out = []
    # a stop request (not the time limit) lets the first shape through: its plan is the incumbent to keep
    while heap and len(out) < keep and not (budget.why() and (budget.found or budget.reason == "time_limit")):
        score, gpus, sh, cuts = heapq.heappop(heap)
        if cuts is not None:
            out.append((sh, cuts))
            budget.found = True
            continue
        m = sh.micro_batches(gbs)
        cuts = space.partition(sh.tp, sh.micro_batch, sh.schedule, sh.stages, m)
        if cuts is None:
            continue
        cmax = max(stage_time(a, b, sh) for a, b in cuts)
        ctot = stage_time(0, inst.num_units, sh)
        heapq.heappush(heap, ((m - 1) * cmax + ctot, gpus, sh, cuts))
    return out


def domain_chain(instance, tp: int, start: str, slots: dict[str, int]) -> list[str]:
    """Domains with slots, from ``start`` onwards along the best routes: each next one
    the least by (price if ``objective = "cost"``, highest route bottleneck bandwidth,
    lowest route latency, most slots, instance order) from the last one.

    >>> domain_chain(instance, 8, "zhangjiakou", PlanSpace(instance).slots(8))   # doctest: +SKIP
    ['zhangjiakou', 'horinger', ...]
    """
    tables = route_tables(instance)
    idx = instance.domain_index
    cost = instance.options.objective == "cost"
    price = tables["price"] if cost else np.zeros(len(idx))
    bw, lat = tables["bottleneck"], tables["latency"]
    left = np.array(sorted(idx[d] for d in slots if slots[d] > 0 and d != start), dtype=np.int64)
    slot = np.zeros(len(idx))
    for d, k in slots.items():
        slot[idx[d]] = k
    chain = [idx[start]]
    while len(left):
        c = chain[-1]
        # the least key (price, -bandwidth, latency, -slots, index): lexsort's last key is primary
        i = np.lexsort((left, -slot[left], lat[c, left], -bw[c, left], price[left]))[0]
        chain.append(int(left[i]))
        left = np.delete(left, i)
    names = instance.domain_names
    return [names[i] for i in chain]


def route_tables(instance) -> dict:
    """Per instance (cached): route bottleneck bandwidth and latency matrices, prices."""
    cache = instance.__dict__.setdefault("_planner_cache", {})
    if "greedy_routes" not in cache:
        routes = instance.routes_for(check_spec(None))  # the routes of the version in force
        cache["greedy_routes"] = {
            "bottleneck": routes.bottleneck_gbps([l.bandwidth_gbps for l in instance.links]),
            "latency": routes.latency_matrix(),
            "price": np.array([d.price_per_gpu_hour for d in instance.domains])}
    return cache["greedy_routes"]


def place_fill(chain, slots, stages: int, replicas: int):
    """Replica r takes slots r*S .. r*S+S-1 along the chain."""
    need = stages * replicas  # never more slots than the plan needs (a domain may have 10^9 GPUs)
    seq = [d for d in chain for _ in range(min(slots[d], need))]
    if len(seq) < need:
        return None
    return [seq[r * stages:(r + 1) * stages] for r in range(replicas)]


def place_aligned(chain, slots, stages: int, replicas: int):
    """Stage j of all replicas in one domain; stages walk the chain."""
    free = dict(slots)
    col, i = [], 0
    for _ in range(stages):
        while i < len(chain) and free[chain[i]] < replicas:
            i += 1
        if i == len(chain):
            return None
        col.append(chain[i])
        free[chain[i]] -= replicas
    return [list(col) for _ in range(replicas)]


def _starts(instance, slots: dict[str, int], n: int = 2) -> list[str]:
    cost = instance.options.objective == "cost"
    bw = {d: 0.0 for d in slots}
    for link in instance.links:
        for end in (link.a, link.b):
            if end in bw:
                bw[end] += link.bandwidth_gbps
    key = (lambda d: (instance.domain(d).price_per_gpu_hour, -slots[d], -bw[d])) if cost else \
        (lambda d: (-slots[d], -bw[d], instance.domain_index[d]))
    return sorted((d for d in slots if slots[d] > 0), key=key)[:n]


def sample_states(instance, k: int, seed: int = 0):
    """K network states drawn (seeded) from a week of generated trace (``planner.problem.traces``)."""
    from ..problem.network import NetworkStates
    from ..problem.traces import generate

    tr = generate(instance, hours=24 * 7, seed=seed)
    idx = np.random.default_rng(seed).choice(tr.epochs, size=k, replace=k > tr.epochs)
    return NetworkStates(tr.states.bandwidth_gbps[idx], tr.states.latency_ms[idx])


def robust_score(values: np.ndarray, stat: str) -> float:
    """Mean or 95th percentile of T_est over sampled states (inf if any state is infinite)."""
    if stat == "mean":
        return float(np.mean(values))
    if stat == "p95":
        return float(np.percentile(values, 95))
    raise ValueError("robust statistic is 'mean' or 'p95'")


def _shape_kind(plan: Plan) -> tuple:
    return (plan.tp, plan.micro_batch_size, plan.replicas)


def _candidates(instance, budget: _Budget, states=None, robust_stat: str = "mean", kind=_shape_kind) -> list:
    """The candidate plans of the kept shapes, scored: a list of (T_est or its cost
    (the statistic over ``states`` when given), GPUs used, order, plan), best first:
    the best :data:`RERANK` and the best of each ``kind(plan)`` (default: tp,
    micro-batch, replicas), the rest dropped as they come (on a huge instance each plan is large).  Stops when
    ``budget`` says so (with the plans so far; ``TimeLimitError``/``Stopped`` when
    there is none yet)."""
    t0 = time.perf_counter()
    space = PlanSpace(instance)
    shapes = _best_shapes(space, KEEP, None, budget)
    # the same order by compute alone: the WAN, which neither order sees, often
    # decides, and a tensor-parallel degree whose all-reduces cost more can still win
    shapes += [s for s in _best_shapes(space, KEEP, None, budget, tp_comm=False) if s[0] not in {x[0] for x in shapes}]
    # few-domain shapes: the best ones that fit in the k largest domains (k = 1..3),
    # which the compute-only order ranks behind WAN-spanning shapes with more GPUs
    sizes = sorted((d.gpus for d in instance.domains), reverse=True)
    for k in range(1, min(3, len(sizes) - 1) + 1):
        shapes += _best_shapes(space, KEEP_LOCAL, sum(sizes[:k]), budget)
    if instance.options.objective == "cost":
        # cheap capacity first: the best shapes that fit the cheapest domains
        total = 0
        for d in sorted(instance.domains, key=lambda d: (d.price_per_gpu_hour, -d.gpus))[:-1]:
            total += d.gpus
            shapes += _best_shapes(space, KEEP_LOCAL, total, budget)
    if not shapes and budget.why():
        raise budget.nothing_found()
    if not shapes:
        raise InfeasibleError(f"instance {instance.name} has no feasible plan", infeasibility_reasons(space))
    scored = []  # (T_est or its cost, GPUs, order, plan)
    seen = set()
    n_scored = 0
    if time.perf_counter() - t0 > 1.0:  # only long runs report progress
        log.info("greedy: %d candidate shapes in %.1f s", len(shapes), time.perf_counter() - t0)
    tick = time.perf_counter()
    for n_done, (sh, cuts) in enumerate(shapes):
        if time.perf_counter() - tick > 2.0:  # progress on large instances (stderr in the CLI)
            tick = time.perf_counter()
            log.info("greedy: %d of %d shapes placed, %d plans scored", n_done, len(shapes), n_scored)
        if scored and budget.why():
            break
        m = sh.micro_batches(instance.workload.global_batch_size)
        light = space.light_partition(sh.tp, sh.micro_batch, sh.schedule, sh.stages, m)
        for c in (cuts, light):
            if c is None:
                continue
            for plan in _placements(instance, space, sh, c, seen):
                ev = Evaluator(instance, plan)
                t_est = (robust_score(ev.estimate_times(states), robust_stat) if states is not None
                         else float(ev.estimate_times()[0]))
                score = float(ev.objective(t_est))
                scored.append((score, plan.gpus_used, n_scored, plan))
                n_scored += 1
                if len(scored) > 4 * RERANK + 2 * len(shapes):
                    scored = _prune(scored, kind)
                if budget.why():
                    break
            if budget.why():
                break
    if not scored and budget.why():
        raise budget.nothing_found()
    if not scored:
        raise InfeasibleError(f"instance {instance.name} has no feasible placement",
                              infeasibility_reasons(space))
    return _prune(scored, kind)


def _prune(scored: list, kind=_shape_kind) -> list:
    """``scored`` best first, keeping the best :data:`RERANK` and the best of each
    ``kind``: all that :func:`greedy`, :func:`shape_starts` (and, with its own kind,
    the RL planner's menu) read."""
    scored.sort(key=lambda c: c[:3])
    keep, kinds = [], set()
    for n, c in enumerate(scored):
        k = kind(c[3])
        if n < RERANK or k not in kinds:
            keep.append(c)
        kinds.add(k)
    return keep


def greedy(instance, time_limit: float | None = None, seed: int = 0, robust: int = 0,
           robust_stat: str = "mean", rerank: bool = True, **_) -> Plan:
    """Plan with the greedy heuristic; see the module docstring.

    ``time_limit`` (s; None: :data:`DEFAULT_TIME_LIMIT`) caps the search, as do
    a stop request and the memory cap (see the module docstring): the best plan
    so far is returned, its ``solver.status`` saying why (``time_limit``,
    ``interrupted``, ``memory_limit``).  With ``robust=K`` every candidate is scored by the mean (or, with
    ``robust_stat="p95"``, the 95th percentile) of T_est over K network
    states sampled from a generated week of WAN drift (``seed`` picks them),
    trading a little peak speed for stability.  ``rerank=False`` returns the
    best candidate by T_est (or its cost) without the exact re-ranking (the
    exact planners' incumbent).  Greedy is otherwise deterministic.  Raises ``InfeasibleError`` when no plan exists.
    """
    t0 = time.perf_counter()
    limit = DEFAULT_TIME_LIMIT if time_limit is None else float(time_limit)
    budget = _Budget(t0 + limit, limit)
    states = sample_states(instance, robust, seed) if robust else None
    try:
        scored = _candidates(instance, budget, states, robust_stat)
    except InfeasibleError:
        # no shape fits with 1f1b or gpipe: one may with fewer micro-batches in flight
        lean = lean_plans(instance, k=1, time_limit=max(0.1, budget.deadline - time.perf_counter()))
        if not lean:
            raise
        return lean[0]
    if states is not None or not rerank or budget.why():  # stopped: no simulation (a huge plan's takes long)
        return _stopped(scored[0][3], budget.reason, t0)
    # T_est misjudges some pipelines over the WAN: simulate the best few exactly
    best = None
    for k, (score, gpus, i, plan) in enumerate(scored[:RERANK]):
        if k and budget.why():
            break
        ev = Evaluator(instance, plan)
        t = float(ev.iteration_times()[0])
        exact = float(ev.objective(t))
        if best is None or (exact, score, gpus, i) < best[:4]:
            best = (exact, score, gpus, i, plan)
    return _stopped(best[4], budget.reason, t0)


def _stopped(plan: Plan, reason: str | None, t0: float) -> Plan:
    """``plan`` as greedy returns it: with a ``SolverInfo`` saying why it stopped
    early (``time_limit``, ``interrupted``, ``memory_limit``), else as it is (the
    registry calls it ``heuristic``)."""
    if reason is None:
        return plan
    log.warning("greedy: stopped early (%s) after %.1f s: the best plan so far", reason, time.perf_counter() - t0)
    return plan.model_copy(update={"solver": SolverInfo(name="greedy", status=reason,
                                                        time_s=time.perf_counter() - t0)})


def _chains(instance, space: PlanSpace, tp: int):
    """The slots of ``tp`` GPUs and the domain chains from the best start domains
    (they depend on tp only: kept on ``space`` for the shapes that share it).  With
    several GPU types (SPEC v3 (g)) also a chain from the largest domain of each type,
    fastest type first (:func:`type_starts`)."""
    memo = space.__dict__.setdefault("_greedy_chains", {})
    if tp not in memo:
        slots = space.slots(tp)
        starts = _starts(instance, slots)
        if instance.heterogeneous:
            starts += [d for d in type_starts(instance, slots) if d not in starts]
        memo[tp] = slots, [domain_chain(instance, tp, start, slots) for start in starts]
    return memo[tp]


def type_starts(instance, slots: dict[str, int]) -> list[str]:
    """Per GPU type with slots, fastest (peak * mfu) first, its domain with the most
    slots (instance order on ties): where a chain starts so that a pipeline's first
    stages, and small plans altogether, land on that type.

    >>> type_starts(mixed, PlanSpace(mixed).slots(1))                 # doctest: +SKIP
    ['fast', 'slow']
    """
    best: dict[int, str] = {}
    for d in instance.domain_names:
        if slots.get(d, 0) <= 0:
            continue
        u = instance.domain_type[instance.domain_index[d]]
        if u not in best or slots[d] > slots[best[u]]:
            best[u] = d
    return [best[u] for u in sorted(best, key=lambda u: (-instance.gpu_types[u].flops_per_s, u))]


def stage_types(instance, placement) -> tuple[tuple[int, ...], ...]:
    """Per stage, the GPU types (indices into ``instance.gpu_types``) its replicas run on."""
    types, idx = instance.domain_type, instance.domain_index
    return tuple(tuple(sorted({types[idx[row[j]]] for row in placement})) for j in range(len(placement[0])))


def _placements(instance, space: PlanSpace, sh: Shape, cuts, seen: set, memory_rule: str | None = None):
    """The chain placements (fill and aligned, from the best start domains) of a shape
    with a fixed partition, each once.

    With several GPU types (SPEC v3 (g)) each placement also gets the partition
    balanced for the types it lands on (:meth:`PlanSpace.typed_partition`: faster
    types take more layers, each stage within the memory of its types), and a plan
    is yielded only when it fits the memory of the types hosting it, under the
    in-flight rule of ``memory_rule`` (default the shape's schedule; :data:`LEAN`
    for :func:`lean_plans`)."""
    slots, chains = _chains(instance, space, sh.tp)
    mixed = instance.heterogeneous
    m = sh.micro_batches(instance.workload.global_batch_size) if mixed else 0
    for chain in chains:
        for placer in (place_fill, place_aligned):
            placement = placer(chain, slots, sh.stages, sh.replicas)
            if placement is None:
                continue
            options = [cuts]
            if mixed:  # the cut balanced for the placement's types (fits their memory), and the given one if it fits
                types = stage_types(instance, placement)
                rule = memory_rule or sh.schedule
                typed = space.typed_partition(sh.tp, sh.micro_batch, rule, sh.stages, m, types)
                options = [] if typed is None else [typed]
                if list(cuts) != typed and space.fits_types(cuts, sh.tp, sh.micro_batch, rule, m, types):
                    options.append(cuts)
            for c in options:
                key = (sh, tuple(c), hash(tuple(map(tuple, placement))))  # a hash: placements can be huge
                if key in seen:
                    continue
                seen.add(key)
                yield Plan.build(c, placement, tp=sh.tp, micro_batch_size=sh.micro_batch, instance=instance,
                                 schedule=sh.schedule)


def shape_plan(instance, shape: Shape, stage_counts, space: PlanSpace | None = None, forbid=()) -> Plan | None:
    """The greedy plan of one shape (tp, micro-batch, schedule, replicas): for each
    stage count in ``stage_counts`` (e.g. the most promising few), the balanced
    memory-feasible partition and the chain placements; the best by T_est (or its
    cost) that avoids ``forbid``, or None.  A warm start for the exact planners."""
    space = space or PlanSpace(instance)
    gbs = instance.workload.global_batch_size
    best, seen = None, set()
    for S in stage_counts:
        sh = Shape(shape.tp, shape.micro_batch, shape.schedule, S, shape.replicas)
        cuts = space.partition(sh.tp, sh.micro_batch, sh.schedule, S, sh.micro_batches(gbs))
        if cuts is None:
            continue
        m = sh.micro_batches(instance.workload.global_batch_size)
        light = space.light_partition(sh.tp, sh.micro_batch, sh.schedule, sh.stages, m)
        plans = [p for c in (cuts, light) if c is not None for p in _placements(instance, space, sh, c, seen)]
        for plan in plans:
            if forbid and any(d in forbid for row in plan.placement for d in row):
                continue
            ev = Evaluator(instance, plan)
            score = float(ev.objective(ev.estimate_times())[0])
            if best is None or score < best[0]:
                best = (score, plan)
    return None if best is None else best[1]


def infeasibility_reasons(space: PlanSpace) -> list[str]:
    """Why no plan fits: per tensor-parallel degree, GPUs needed vs available,
    or the unit that cannot fit in memory on its own."""
    inst = space.instance
    gbs = inst.workload.global_batch_size
    reasons = []
    limit = space.memory_limit  # with several GPU types: the largest type's (planning_gpu)
    for tp in inst.workload.tensor_parallel:
        slots = space.slots(tp)
        have = sum(slots.values())
        if have == 0:
            reasons.append(f"tp={tp}: no domain has {tp} GPUs in a node")
            continue
        need = None
        for b in inst.workload.micro_batch_sizes:
            for sched in inst.options.schedules:
                R = gbs // b  # most replicas: fewest micro-batches in flight
                for S in range(1, min(inst.max_stages, inst.num_units) + 1):
                    if space.feasible(tp, b, sched, S, gbs // (b * 1)) or \
                            space.feasible(tp, b, sched, S, max(1, gbs // (b * R))):
                        need = S if need is None else min(need, S)
                        break
        if need is None:
            tab, units = space.table, inst.units
            b = min(inst.workload.micro_batch_sizes)

            def need_alone(u):
                _, mem, stored = tab.interval(u, u + 1)
                return (mem + b * inst.workload.seq_len * stored) / tp

            worst = max(range(tab.n), key=need_alone)
            reasons.append(f"tp={tp}: no split into at most {inst.max_stages} stages fits "
                           f"{_usable(inst, limit)} per GPU (unit {units[worst].name} alone "
                           f"needs {human_bytes(need_alone(worst))} per GPU at micro-batch {b})")
        else:
            reasons.append(f"tp={tp}: the model needs at least {need} stages x {tp} GPUs = "
                           f"{need * tp} GPUs in memory ({_usable(inst, limit)} each); "
                           f"the domains offer {have * tp} GPUs in slots of {tp}")
    return reasons


def _usable(instance, limit: float) -> str:
    """The usable memory per GPU in words: ``"72 MB usable"``; with several GPU types
    (SPEC v3 (g)) each type's, largest first: ``"H100 usable 72 GB, A100 usable 36 GB"``."""
    if not instance.heterogeneous:
        return f"{human_bytes(limit)} usable"
    types = sorted((instance.gpu_types[u] for u in instance.types_used), key=lambda g: -g.memory_gb)
    return ", ".join(f"{g.name} usable {human_bytes(instance.memory_limit_of(g))}" for g in types)


def shape_starts(instance, k: int = 4, time_limit: float | None = None) -> list[Plan]:
    """The best plan by T_est (or its cost) of each of the ``k`` best distinct shapes
    (tensor parallelism, micro-batch size, replicas) among greedy's candidates: starting
    points for a local search that keeps the shape (:func:`planner.solvers.anneal.anneal`).

    >>> [p.replicas for p in shape_starts(instance, k=3)]          # doctest: +SKIP
    [4, 2, 8]
    """
    limit = DEFAULT_TIME_LIMIT if time_limit is None else float(time_limit)
    out, shapes = [], set()
    for _, _, _, plan in _candidates(instance, _Budget(time.perf_counter() + limit, limit)):
        key = (plan.tp, plan.micro_batch_size, plan.replicas)
        if key not in shapes:
            shapes.add(key)
            out.append(plan)
            if len(out) == k:
                break
    return out


def spread_starts(instance, plans, space: PlanSpace | None = None, deadline: float = math.inf) -> list[Plan]:
    """For each plan of ``plans`` with several stages, the same shape and partition
    placed stage-aligned along greedy's chains (stage j of every replica in one domain:
    :func:`place_aligned`) when that spreads each replica over several domains, best
    T_est (or its cost) first.  Starting points for a local search: a pipeline across
    datacenters often ranks below keeping each replica at home by T_est under 1f1b, yet
    anneals (explicit schedules, in-flight limits) to the faster plan (two-dc: 19.7 s by
    T_est, 11.6 s after annealing, against 14.8 s from greedy's best).  Stops adding
    plans at ``deadline`` (``time.perf_counter()``), keeping what it has.

    >>> [len(set(p.placement[0])) for p in spread_starts(instance, shape_starts(instance))]  # doctest: +SKIP
    [2, 2]
    """
    space = space or PlanSpace(instance)
    out, seen = [], set()
    for p in plans:
        if p.num_stages < 2:
            continue
        slots, chains = _chains(instance, space, p.tp)
        for chain in chains:
            placement = place_aligned(chain, slots, p.num_stages, p.replicas)
            if placement is None or len(set(placement[0])) < 2:
                continue
            if time.perf_counter() >= deadline:
                break
            key = (p.tp, p.micro_batch_size, p.replicas, tuple(p.bounds()), tuple(placement[0]))
            if key in seen or [list(r) for r in p.placement] == placement:
                continue
            seen.add(key)
            q = Plan.build(p.bounds(), placement, tp=p.tp, micro_batch_size=p.micro_batch_size,
                           instance=instance, schedule=p.schedule)
            if not check_plan(instance, q):
                ev = Evaluator(instance, q)
                out.append((float(ev.objective(ev.estimate_times())[0]), len(out), q))
    return [q for _, _, q in sorted(out, key=lambda t: t[:2])]


def _fitting_limits(instance, space: PlanSpace, plan: Plan) -> list[int]:
    """Per stage, the most micro-batches in flight (at most 1f1b's ``min(m, S - j)``,
    at least 1) whose activations fit the GPU memory of ``space``'s rule."""
    S, m = plan.num_stages, plan.num_micro_batches
    if instance.heterogeneous:  # each stage within the smallest memory of the types hosting it
        limits = [min(instance.memory_limit_of(instance.gpu_types[u]) for u in ts)
                  for ts in stage_types(instance, plan.placement)]
    else:
        limits = [instance.memory_limit_bytes] * S
    tokens = plan.micro_batch_size * instance.workload.seq_len
    out = []
    for j, (a, b) in enumerate(plan.bounds()):
        cap = limits[j] * plan.tp
        _, weights, stored = space.table.interval(a, b)
        most = min(m, S - j)
        fit = most if stored <= 0 else int((cap - weights) // (tokens * stored))
        out.append(max(1, min(most, fit)))
    return out


def lean_plans(instance, k: int = 2, time_limit: float | None = None, keep: int = 8,
               at_least_one: bool = True) -> list[Plan]:
    """Up to ``k`` plans (best T_est, or its cost, first) of shapes that fit GPU
    memory only with fewer micro-batches in flight than 1f1b and gpipe hold:
    their partition is balanced under the leanest schedule's memory rule
    (:data:`planner.problem.space.LEAN`, one micro-batch in flight per stage),
    placed as greedy places its shapes, with each stage's in-flight limit the
    largest that fits (at most 1f1b's).  The ``keep`` most promising such
    shapes by compute alone are placed; ``time_limit`` seconds cap the search, past
    which it goes on to its first plan only when ``at_least_one`` (greedy's fallback:
    an empty list reads as "no shape fits").  [] when every shape that fits at all also
    fits a named schedule."""
    deadline = time.perf_counter() + (time_limit if time_limit else 3600.0)
    space = PlanSpace(instance)
    gbs = instance.workload.global_batch_size
    named = instance.options.schedules
    shapes, seen_shape = [], set()
    for sh in space.shapes():
        key = (sh.tp, sh.micro_batch, sh.stages, sh.replicas)
        if sh.stages < 2 or key in seen_shape:  # one stage: 1f1b holds one micro-batch already
            continue
        seen_shape.add(key)
        if not at_least_one and time.perf_counter() > deadline:  # else every shape is a candidate (cheap:
            break  # 3,650 partitions in 0.1 s on memory-bound), lest [] pass for "no shape fits"
        m = sh.micro_batches(gbs)
        if any(space.feasible(sh.tp, sh.micro_batch, s, sh.stages, m) for s in named):
            continue  # a named schedule fits: the searches cover the shape (tune_inflight lowers limits)
        cuts = space.partition(sh.tp, sh.micro_batch, LEAN, sh.stages, m)
        if cuts is None:
            continue
        cmax = max(space.stage_time(a, b, sh.tp, sh.micro_batch) for a, b in cuts)
        ctot = space.stage_time(0, instance.num_units, sh.tp, sh.micro_batch)
        shapes.append(((m - 1) * cmax + ctot, sh.tp * sh.stages * sh.replicas, key, cuts))
    shapes.sort(key=lambda x: x[:3])
    scored, seen = [], set()

    def late() -> bool:  # past the limit, with what to return (each check below compiles the plan:
        return (scored or not at_least_one) and time.perf_counter() > deadline  # seconds when deep)

    for _, _, (tp, b, S, R), cuts in shapes[:keep]:
        if late():
            break
        m = gbs // (R * b)
        for p in _placements(instance, space, Shape(tp, b, "1f1b", S, R), cuts, seen, memory_rule=LEAN):
            if late():
                break
            for w in (_fitting_limits(instance, space, p), [1] * S):
                q = p.model_copy(update={"schedule": inflight_schedule(w, m)})
                ev = Evaluator(instance, q)
                if not check_plan(instance, q, ev.fig):  # else: the memory of another GPU type, say
                    scored.append((float(ev.objective(ev.estimate_times())[0]), len(scored), q))
                    break
    scored.sort(key=lambda x: x[:2])
    out, shapes_out = [], set()
    for _, _, q in scored:
        key = (q.tp, q.micro_batch_size, q.num_stages, q.replicas)
        if key not in shapes_out:
            shapes_out.add(key)
            out.append(q)
        if len(out) == k:
            break
    if out:
        logging.getLogger("planner.greedy").info("greedy: %d lean plan(s), best T_est %.6g", len(out),
                                                 scored[0][0])
    return out
