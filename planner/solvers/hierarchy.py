"""``--solver hier``: hierarchical planning for many domains (groups, then domains).

The flat exact models grow with the square of the domain count (arcs between
domains, per stage slot) and cannot even be built within a minute beyond a few
dozen domains.  :func:`hier` plans in three levels:

1. **Groups.** :func:`group_domains` cuts the domains, in the instance's
   order, into runs of consecutive domains: the runs of equal ``region`` when
   the instance names regions that some domains share, else a latency
   clustering (adjacent runs merged by complete linkage on the one-way route
   latency while the linkage is at most ``threshold_ms``, 3 ms by default);
   in both cases adjacent runs are then merged, smallest linkage first, until
   at most ``max_groups`` are left (default ``ceil(sqrt(domains))``: ten
   groups of ten for a hundred domains).  Groups are *runs* because the
   gradient ring visits domains in instance order (SPEC 5): that is what
   makes the aggregated ring no slower than the real one.
2. **Top level.** :func:`aggregate` builds an :class:`Instance` with one
   domain per group and *optimistic* figures that make every real plan at
   least as fast in the aggregated instance (docs/formulations.md,
   "Hierarchical planning"): the group's stage slots exactly (per
   tensor-parallel degree), its cheapest price, intra-group bandwidth at
   least 4x the widest WAN link, inter-group links with the smallest route
   latency between the two groups and a bandwidth no number of flows can
   share below 4x the widest link.  The MILP (or CP-SAT) solves it; its
   bound is a lower bound on the real problem's ``T_est`` optimum.  A second,
   *representative* aggregate (typical figures, no bound) is solved around
   greedy's shape for a plan.
3. **Inside the groups.** :func:`disaggregate` maps every aggregated
   (replica, stage) to a domain of its group with a free slot (a stage never
   spans domains: a group of domains with ``n_d`` slots holds ``sum n_d``
   stages, the aggregated domain has exactly that many), by chains of
   domains from a large or a well-connected start, consecutive stages of a
   replica together ("fill") or stage j of every replica together
   ("aligned"); then greedy's plan joins the candidates, and the best one is
   polished on the real instance by exact simulation: per-stage in-flight
   limits (:func:`planner.solvers.inflight.tune_inflight`, a quarter of the
   polish), then :func:`planner.solvers.anneal.anneal`.

The result's ``bound`` is the larger of the aggregated level's (the smallest
over its tensor-parallel classes) and the instance's analytic bound; ``gap``
is on the returned plan's ``T_est``; ``status`` is ``optimal`` only when
that gap is within ``gap`` (``within_gap`` for a looser ``gap``,
:func:`planner.scoring.bounds.gap_claim`).  These are claims on T_est over
plans with a named schedule (``estimate_family``): ``plan(solver="hier")``
reports them as ``estimate_*`` and claims the instance's bound
(:func:`planner.scoring.bounds.settle_claims`).

Example
-------
>>> p = hier(instance, time_limit=60)                          # doctest: +SKIP
>>> p.solver.status, p.solver.bound, p.solver.groups[:2]
('time_limit', 14.2, ['us-central1..us-west1', 'europe-north1..europe-west4'])
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass

from ..problem.names import name_problem
from ..problem.errors import InfeasibleError, InputError, Stopped, TimeLimitError
from ..problem.instance import Instance
from ..problem.limits import MAX_BANDWIDTH_GBPS
from ..problem.plan import Plan, SolverInfo
from ..problem.specversion import check_spec
from ..scoring.bounds import estimate_family, fastest_type_instance, gap_claim, objective_lower_bound
from . import stop
from ..scoring.evaluator import simulated_score
from .anneal import anneal
from .greedy import domain_chain, greedy, shape_starts
from .inflight import tune_inflight
from .shapesearch import plan_matches, score

log = logging.getLogger("planner.hier")

SPEED_UP = 4.0  # optimistic figures: every aggregated flow and ring hop at least this times the widest link
THRESHOLD_MS = 3.0  # domains whose routes are all this short (one way) share a group
TOP_SHARE = 0.5  # the top level's share of the budget
PLAN_STARTS = 6  # greedy's plans of distinct shapes on the representative aggregate, each disaggregated
PLAN_WEIGHT = 0.4  # of that, the representative instance's part (the optimistic one's: the rest)
GREEDY_SHARE = 0.1  # greedy's cap (it joins the candidates)
TUNE_SHARE = 0.25  # of the polish: per-stage in-flight limits first, then the annealing
PROVEN_SHARE = 0.05  # the annealing's share once the start is proven optimal (it may still simulate faster)
EVALS_PER_S = 300  # deterministic mode: annealing candidates per second of its share


# -- 1. groups -------------------------------------------------------------------

def _latency(instance, a: str, b: str) -> float:
    """One-way route latency (ms) between two domains; 0 for a domain with itself."""
    return 0.0 if a == b else instance.routes_for(check_spec(None))[(a, b)].latency_ms


def group_domains(instance, threshold_ms: float = THRESHOLD_MS, max_groups: int | None = None,
                  domains=None) -> list[tuple[str, ...]]:
    """The domains (``domains``, default all, kept in instance order) cut into runs of
    consecutive domains; see the module docstring.

    >>> group_domains(instance, max_groups=4)                          # doctest: +SKIP
    [('us-central1', 'us-east1', 'us-east4', 'us-west1'), ...]
    """
    order = instance.domain_index
    names = sorted(domains if domains is not None else instance.domain_names, key=order.__getitem__)
    if not names:
        return []
    regions = [instance.domain(d).region for d in names]
    by_region = all(regions) and len(set(regions)) < len(names)
    kind = {d: instance.domain_type[order[d]] for d in names}  # GPU types (SPEC v3 (g))
    runs: list[list[str]] = []
    for d, reg in zip(names, regions):
        if by_region and runs and instance.domain(runs[-1][-1]).region == reg and kind[runs[-1][-1]] == kind[d]:
            runs[-1].append(d)
        else:
            runs.append([d])
    cap = max_groups if max_groups is not None else math.ceil(math.sqrt(len(names)))
    cap = max(1, cap)

    def linkage(a, b) -> tuple[bool, float]:
        """(whether the runs' GPU types differ, complete linkage: the longest route latency
        between them): runs of different types merge only to get within ``max_groups``."""
        return ({kind[x] for x in a} != {kind[y] for y in b},
                max(_latency(instance, x, y) for x in a for y in b))

    links = [linkage(runs[i], runs[i + 1]) for i in range(len(runs) - 1)]
    while len(runs) > 1:
        i = min(range(len(links)), key=lambda k: (links[k], k))
        if len(runs) <= cap and (by_region or links[i][0] or links[i][1] > threshold_ms):
            break
        runs[i:i + 2] = [runs[i] + runs[i + 1]]
        del links[i]
        if i > 0:
            links[i - 1] = linkage(runs[i - 1], runs[i])
        if i < len(runs) - 1:
            links[i] = linkage(runs[i], runs[i + 1])
    return [tuple(r) for r in runs]


def check_groups(instance, groups, domains) -> list[tuple[str, ...]]:
    """User-given ``groups`` (lists of domain names) checked: every domain of
    ``domains`` in exactly one group, each group a run of consecutive domains in
    instance order (``InputError`` naming the problem)."""
    order = instance.domain_index
    names = sorted(domains, key=order.__getitem__)
    out = [tuple(sorted(g, key=lambda d: order.get(d, -1))) for g in groups]
    flat = [d for g in out for d in g]
    unknown = sorted(set(flat) - set(names))
    if unknown:
        raise InputError(f"groups name domains that are not planned: {', '.join(unknown)}", "groups")
    if sorted(flat, key=order.__getitem__) != names:
        raise InputError("groups must hold every planned domain exactly once", "groups")
    pos = {d: i for i, d in enumerate(names)}
    for g in out:
        if not g or pos[g[-1]] - pos[g[0]] != len(g) - 1:
            raise InputError(f"group {list(g)} is not a run of consecutive domains in instance order "
                             "(the gradient ring visits domains in that order; see docs/formulations.md)",
                             "groups")
    return sorted(out, key=lambda g: order[g[0]])


# -- 2. the aggregated instance --------------------------------------------------

@dataclass(frozen=True)
class Aggregate:
    """An aggregated instance (one domain per group) for some tensor-parallel degrees.

    ``instance`` the aggregated :class:`Instance`; ``members`` maps each of its
    domains to the real domains of the group (instance order); ``tps`` the
    tensor-parallel degrees whose stage slots it counts exactly; ``bounds``
    True when its figures are the optimistic ones of :func:`aggregate` (its
    optimum is then a lower bound on the real problem's; False for the
    representative figures, or when a figure had to be clamped to the
    instance limits)."""
    instance: Instance
    members: dict[str, tuple[str, ...]]
    tps: tuple[int, ...]
    bounds: bool = True


def _slots(instance, names, t: int) -> int:
    """Stages of ``t`` GPUs the domains ``names`` hold together (a stage never spans domains)."""
    return sum(d.gpus // t for d in map(instance.domain, names) if d.gpus_per_node >= t and d.gpus >= t)


def _group_name(instance, group) -> str:
    if len(group) == 1:
        return group[0]
    reg = instance.domain(group[0]).region
    if reg and all(instance.domain(d).region == reg for d in group):
        return reg
    return f"{group[0]}..{group[-1]}"


def _bottleneck(instance, a: str, b: str) -> float:
    """The narrowest link (Gbit/s) of the route from ``a`` to ``b``."""
    return min(instance.links[i].bandwidth_gbps for i in instance.routes_for(check_spec(None))[(a, b)].links)


def aggregate(instance, groups, tps=None, optimistic: bool = True) -> list[Aggregate]:
    """The aggregated instances of ``groups`` (runs of consecutive domains), one per
    class of tensor-parallel degrees (``tps``, default the workload's).

    Optimistic figures (the proof that they keep every bound valid is in
    docs/formulations.md, "Hierarchical planning"); beta_max is the largest WAN
    link bandwidth (Gbit/s):

    * GPUs: ``t * sum_d floor(gpus_d / t)`` over the group's domains with
      ``gpus_per_node >= t``: exactly the group's stage slots for ``t``.  One
      instance serves every ``t`` when ``floor(sum_d gpus_d / t)`` equals that
      for all of them (e.g. every domain has a multiple of 8 GPUs); else one
      instance per ``t``;
    * ``gpus_per_node`` the group's largest, ``price_per_gpu_hour`` its smallest;
    * ``intra_bandwidth_gbps``: ``max(largest intra bandwidth, 4 * beta_max)``;
    * a link between every two groups: latency the smallest route latency
      between a domain of one and a domain of the other (ms), bandwidth
      ``4 * beta_max * U`` with U the most flows that can share a link (every
      pipeline boundary, or every ring hop): each flow gets at least 4 beta_max.

    ``optimistic=False`` gives *representative* figures instead, for planning
    (no bound): inside a group the smaller of its largest intra bandwidth and the
    median route bottleneck between two of its domains, and between two groups
    the widest route bottleneck (Gbit/s) and the smallest latency between their
    members, shared as the SPEC shares a link.

    >>> [a.tps for a in aggregate(instance, group_domains(instance))]   # doctest: +SKIP
    [(1, 2, 4, 8)]
    """
    wl = instance.workload
    tps = tuple(sorted(tps if tps is not None else wl.tensor_parallel))
    groups = [tuple(g) for g in groups]
    beta_max = max((l.bandwidth_gbps for l in instance.links), default=0.0)

    def one_instance_serves(ts) -> bool:
        for g in groups:
            total = sum(instance.domain(d).gpus for d in g)
            gpn = max(instance.domain(d).gpus_per_node for d in g)
            if any((total // t if gpn >= t and total >= t else 0) != _slots(instance, g, t) for t in ts):
                return False
        return True

    classes = [tps] if one_instance_serves(tps) else [(t,) for t in tps]
    out = []
    for ts in classes:
        if len(ts) == 1:
            t = ts[0]
            gpus = {g: t * _slots(instance, g, t) for g in groups}
            gpn = {g: max((instance.domain(d).gpus_per_node for d in g if instance.domain(d).gpus_per_node >= t),
                          default=t) for g in groups}
        else:
            gpus = {g: sum(instance.domain(d).gpus for d in g) for g in groups}
            gpn = {g: max(instance.domain(d).gpus_per_node for d in g) for g in groups}
        used = [g for g in groups if gpus[g] >= 1 and any(gpus[g] // t and gpn[g] >= t for t in ts)]
        if not used:
            continue
        slots_total = max(sum(_slots(instance, g, t) for g in used) for t in ts)
        users = max(slots_total - 1, instance.max_stages * len(used), 1)
        valid = optimistic
        link_bw = SPEED_UP * beta_max * users
        intra_floor = SPEED_UP * beta_max if optimistic else 0.0
        if link_bw > MAX_BANDWIDTH_GBPS or intra_floor > MAX_BANDWIDTH_GBPS:
            valid = False
            link_bw, intra_floor = min(link_bw, MAX_BANDWIDTH_GBPS), min(intra_floor, MAX_BANDWIDTH_GBPS)
        names = {g: _group_name(instance, g) for g in used}
        # group names become domain names of the aggregated instance: valid names (SPEC 9), unique
        names = {g: n if name_problem(n) is None else f"group{i}" for i, (g, n) in enumerate(names.items())}
        if len(set(names.values())) < len(used):
            names = {g: f"{names[g][:60]}-{i}" for i, g in enumerate(used)}
        doms = []
        for g in used:
            ds = [instance.domain(d) for d in g]
            intra = max(d.intra_bandwidth_gbps for d in ds)
            if not optimistic and len(g) > 1:  # a typical pair of the group's domains
                intra = min(intra, statistics.median(_bottleneck(instance, a, b) for a in g for b in g if a < b))
            doms.append({"name": names[g], "gpus": gpus[g], "gpus_per_node": gpn[g],
                         "intra_bandwidth_gbps": max(intra, intra_floor),
                         "price_per_gpu_hour": min(d.price_per_gpu_hour for d in ds),
                         "region": names[g]})
        links = []
        for i, g in enumerate(used):
            for h in used[i + 1:]:
                lat = min(_latency(instance, a, b) for a in g for b in h)
                bw = link_bw if optimistic else max(_bottleneck(instance, a, b) for a in g for b in h)
                links.append({"a": names[g], "b": names[h], "bandwidth_gbps": bw, "latency_ms": lat})
        data = instance.to_dict()
        if instance.heterogeneous:  # SPEC v3 (g): each group's type
            types = _group_types(instance, used, optimistic)
            data.pop("gpu", None)
            data["gpus"] = list({t["name"]: t for t in types.values()}.values())
            for d, g in zip(doms, used):
                d["gpu"] = types[g]["name"]
        else:
            data["gpu"] = instance.gpu.model_dump(exclude_none=True)  # the one GPU type
            data.pop("gpus", None)  # the groups name no type: each has [gpu]'s
        suffix = ".groups" + ("" if len(classes) == 1 else f".tp{ts[0]}")  # a valid name (SPEC 9): 64 at most
        data.update(name=instance.name[:64 - len(suffix)] + suffix, domains=doms, links=links)
        data["workload"]["tensor_parallel"] = list(ts)
        agg = Instance.from_dict(data)
        out.append(Aggregate(agg, {names[g]: g for g in used}, ts, valid))
    return out


def _group_types(instance, groups, optimistic: bool) -> dict:
    """Per group, the GPU type of its aggregated domain (a ``[[gpus]]`` entry as a dict):
    the type of its domains when they share one; for a group of several types, with
    ``optimistic`` the type at least as fast and as large as each of them (the largest
    peak * mfu, the largest NVLink bandwidth, none when some has none, the smallest unit
    overhead, the largest memory: every real plan stays at least as fast, the bound
    valid), else the type holding most of its GPUs (representative)."""
    types = instance.gpu_types
    taken = {g.name for g in types}
    out = {}
    for i, g in enumerate(groups):
        kinds = sorted({instance.domain_type[instance.domain_index[d]] for d in g})
        if len(kinds) == 1 or not optimistic:
            count = {u: sum(instance.domain(d).gpus for d in g
                            if instance.domain_type[instance.domain_index[d]] == u) for u in kinds}
            u = max(kinds, key=lambda k: (count[k], -k))
            out[g] = dict(types[u].model_dump(exclude_none=True), name=types[u].name)
            continue
        ts = [types[u] for u in kinds]
        fast = max(ts, key=lambda t: t.flops_per_s)
        name = f"optimistic{i}"
        while name in taken:
            name += "x"
        taken.add(name)
        nvlink = [t.nvlink_bandwidth_gbps for t in ts]
        out[g] = {"name": name, "peak_tflops": fast.peak_tflops, "mfu": fast.mfu,
                  "memory_gb": max(t.memory_gb for t in ts), "unit_overhead_ms": min(t.unit_overhead_ms for t in ts)}
        if None not in nvlink:
            out[g]["nvlink_bandwidth_gbps"] = max(nvlink)
    return out


def to_aggregate(agg: Aggregate, plan: Plan) -> Plan:
    """``plan`` (of the real instance) with every domain replaced by its group: the
    map of the proof, under which ``T_est`` never grows."""
    group_of = {d: a for a, g in agg.members.items() for d in g}
    return plan.model_copy(update={"placement": [[group_of[d] for d in row] for row in plan.placement],
                                   "instance": agg.instance.name, "solver": None, "predicted": None})


# -- 3. inside the groups --------------------------------------------------------

def disaggregate(instance, agg: Aggregate, plan: Plan) -> list[Plan]:
    """Real plans from an aggregated ``plan``: every (replica, stage) of a group moves
    to a domain of that group with a free slot of ``plan.tp`` GPUs.  Four variants:
    the group's domains chained (:func:`planner.solvers.greedy.domain_chain`) from its
    largest domain or from the one closest to the other groups the plan uses, and the
    group's pairs taken replica by replica ("fill": consecutive stages share a domain)
    or stage by stage ("aligned": a stage's replicas share a domain)."""
    t, S, R = plan.tp, plan.num_stages, plan.replicas
    items: dict[str, list[tuple[int, int]]] = {}
    for r, row in enumerate(plan.placement):
        for j, a in enumerate(row):
            items.setdefault(a, []).append((r, j))
    used_groups = set(items)
    out, seen = [], set()
    for start_rule in ("largest", "nearest"):
        for order in ("fill", "aligned"):
            placement = [[None] * S for _ in range(R)]
            for a, pairs in items.items():
                members = agg.members[a]
                slots = {d: instance.domain(d).gpus // t for d in members
                         if instance.domain(d).gpus_per_node >= t and instance.domain(d).gpus >= t}
                if start_rule == "largest":
                    start = max(slots, key=lambda d: (slots[d], -instance.domain_index[d]))
                else:
                    others = [d for b in used_groups if b != a for d in agg.members[b]]
                    start = min(slots, key=lambda d: (sum(_latency(instance, d, e) for e in others) if others else 0.0,
                                                      -slots[d], instance.domain_index[d]))
                chain = domain_chain(instance, t, start, slots)
                seq = [d for d in chain for _ in range(min(slots[d], len(pairs)))]
                key = (lambda p: p) if order == "fill" else (lambda p: (p[1], p[0]))
                for (r, j), d in zip(sorted(pairs, key=key), seq):
                    placement[r][j] = d
            if any(d is None for row in placement for d in row):  # never: the group has the slots
                continue
            k = tuple(map(tuple, placement))
            if k in seen:
                continue
            seen.add(k)
            out.append(plan.model_copy(update={"placement": placement, "instance": instance.name,
                                               "solver": None, "predicted": None}))
    return out


# -- the solver --------------------------------------------------------------------

def hier(instance, time_limit: float | None = 60.0, seed: int = 0, gap: float = 1e-3, top: str = "milp",
         groups=None, threshold_ms: float = THRESHOLD_MS, max_groups: int | None = None,
         deterministic: bool = False, polish: bool = True, stages: int | None = None,
         replicas: int | None = None, tp: int | None = None, micro_batch_size: int | None = None,
         schedule: str | None = None, forbid=(), executor: str | None = None, address: str | None = None,
         jobs: int | None = None, type_aware=frozenset(), **_) -> Plan:
    """Plan hierarchically; see the module docstring.

    ``time_limit`` seconds in all (None: 60): greedy (capped at a tenth) and the
    top level until half of it (per tensor-parallel class, 40% for the
    representative solve around greedy's tp, micro-batch size and stage count,
    60% for the optimistic one over every shape), the annealing the rest
    (``polish=False``: none, the top level until 90%).  ``top`` is ``"milp"`` or ``"cpsat"`` (forced with
    ``deterministic=True``: CP-SAT's deterministic time, greedy uncapped, the
    annealing by a count of candidates).  ``groups`` (lists of domain names,
    runs in instance order) overrides :func:`group_domains` (``threshold_ms``,
    ``max_groups``).  Pins as for the MILP except ``require``; ``executor``,
    ``address`` and ``jobs`` go to the top level's shape search.  Raises
    ``InfeasibleError`` when no plan exists.

    GPU types (SPEC v3 (g)): groups are runs of one type where ``max_groups``
    allows, and each aggregated domain carries its group's type
    (:func:`aggregate`).  ``type_aware`` names the solvers that plan with several
    types (the registry passes :data:`planner.solvers.registry.GPU_TYPE_SOLVERS`):
    a top solver not among them solves a mixed aggregate with every group given
    the fastest type (:func:`planner.scoring.bounds.fastest_type_instance`: its
    bound stays valid); greedy's starts on the aggregate and every real plan are
    typed.
    """
    if top not in ("milp", "cpsat"):
        raise InputError(f"top level solver {top!r}: choose milp or cpsat", "top")
    t0 = time.perf_counter()
    budget = 60.0 if time_limit is None else float(time_limit)
    forbid = tuple(forbid or ())
    pins = dict(stages=stages, replicas=replicas, tp=tp, micro_batch_size=micro_batch_size, schedule=schedule)
    names = [d for d in instance.domain_names if d not in set(forbid)]
    if not names:
        raise InfeasibleError(f"instance {instance.name}: every domain is forbidden", ["--forbid names every domain"])
    gs = check_groups(instance, groups, names) if groups is not None else \
        group_domains(instance, threshold_ms, max_groups, names)
    tps = [t for t in instance.workload.tensor_parallel if tp in (None, t)]
    bound_aggs, plan_aggs = aggregate(instance, gs, tps), aggregate(instance, gs, tps, optimistic=False)
    log.info("hier: %d domains in %d groups (%s); %d tensor-parallel class%s", len(names), len(gs),
             ", ".join(str(len(g)) for g in gs), len(bound_aggs), "es" if len(bound_aggs) != 1 else "")
    cands = _Candidates(instance, pins, forbid, deterministic, t0 + budget)

    # greedy: a candidate (the result never simulates slower than it), and the shape the
    # representative top level searches around
    plan_pins = {k: v for k, v in pins.items() if v is not None}
    try:
        g = greedy(instance, time_limit=None if deterministic else max(0.5, GREEDY_SHARE * budget), seed=seed)
        cands.offer("greedy", g)
        for key, value in (("tp", g.tp), ("micro_batch_size", g.micro_batch_size), ("stages", g.num_stages)):
            plan_pins.setdefault(key, value)
    except TimeLimitError:
        pass
    except InfeasibleError:
        if not forbid:
            raise  # no plan at all (greedy is complete on feasibility)

    top_share = TOP_SHARE if polish else 0.9  # without the annealing, nearly all the time
    opts = dict(seed=seed, gap=gap, polish=False)
    if deterministic:
        opts.update(deterministic=True, workers=1)
    else:
        opts.update(threads=1) if top == "milp" else opts.update(workers=1)
    if executor is not None:
        opts.update(executor=executor, address=address, jobs=jobs)
    lines, class_bounds, timed_out = _top_level(instance, list(zip(bound_aggs, plan_aggs)), cands, pins, plan_pins,
                                                "cpsat" if deterministic else top, opts, type_aware,
                                                t0 + top_share * budget, top_share, budget, deterministic)
    if not cands.items:
        if all(b == math.inf for b in class_bounds):
            raise InfeasibleError(f"instance {instance.name} has no feasible plan"
                                  + (" with the pinned choices" if any(v is not None for v in pins.values())
                                     or forbid else ""),
                                  ["the aggregated instance of every tensor-parallel class has no plan, and "
                                   "every real plan maps to one of them"])
        raise InfeasibleError(f"instance {instance.name}: hier found no plan ({'; '.join(lines) or 'no top level'})")
    low = min(c[2] for c in cands.items)
    who, best, best_val = next(c for c in cands.items if c[2] <= low * (1 + 1e-9))
    log.info("hier: best start from %s, simulated %.6g", who, best_val)

    # the bound: the top level's (smallest over its classes) and the analytic one
    bound = min(class_bounds) if class_bounds else 0.0
    if not math.isfinite(bound):
        bound = 0.0
    bound = max(bound, objective_lower_bound(instance))

    if polish and not stop.requested():
        who, best, best_val = _polish_best(instance, who, best, best_val, bound, t0 + budget, budget, gap, seed,
                                           deterministic, forbid, stages, schedule)

    # figures: gap on the returned plan's T_est
    objective = score(instance, best)
    if isinstance(best.schedule, str):  # an explicit schedule is outside the space the bound covers
        bound = min(bound, objective)
    gap_now = 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective)
    if objective < bound:  # an explicit schedule, faster than the named optimum: no gap to report
        gap_now = None
    status = gap_claim(gap_now, gap) or stop.requested() or ("time_limit" if timed_out else "feasible")
    pinned = any(v is not None for v in (stages, replicas, tp, micro_batch_size, schedule)) or bool(forbid)
    info = SolverInfo(name="hier", status=status, objective=objective, bound=bound, gap=gap_now,
                      time_s=time.perf_counter() - t0, incumbent=who, requested_gap=gap,
                      estimate_family=estimate_family(instance, schedule, pinned),
                      groups=[_group_name(instance, g) for g in gs], top_level=lines)
    log.info("hier: %s from %s, simulated %.6g, T_est %.6g, bound %.6g, gap %.2f%%", status, who, best_val,
             objective, bound, 100 * (gap_now or 0.0))
    # these are claims on T_est over plans with a named schedule: planner.solvers.registry.finish
    # moves them to estimate_* and claims the instance's bound, valid for any schedule
    return best.model_copy(update={"solver": info, "predicted": None})


class _Candidates:
    """Real plans offered by every step, ``items`` (who, plan, simulated objective)."""

    def __init__(self, instance, pins: dict, forbid, deterministic: bool, end: float):
        self.instance, self.pins, self.forbid, self.deterministic, self.end = instance, pins, forbid, deterministic, end
        self.items: list[tuple[str, Plan, float]] = []

    def offer(self, who: str, p: Plan, until: float | None = None) -> float:
        """Add a real plan to the candidates; its simulated objective (inf: rejected).  Past
        ``until`` (default: the end of the budget; never with ``deterministic``) a plan is
        not simulated once there is a candidate: a simulation of a deep pipeline takes
        tenths of a second, and a run of them overran the limit."""
        if not plan_matches(p, self.pins, self.forbid):
            return math.inf
        if self.items and not self.deterministic and time.perf_counter() > (self.end if until is None else until):
            return math.inf
        val = simulated_score(self.instance, p)
        if val is None:
            return math.inf
        self.items.append((who, p, val))
        return val


def _top_level(instance, runs: list, cands: _Candidates, pins: dict, plan_pins: dict, top_name: str, opts: dict,
               type_aware, top_end: float, top_share: float, budget: float,
               deterministic: bool) -> tuple[list[str], list[float], bool]:
    """The top level: per tensor-parallel class (``runs``: its optimistic and representative
    aggregates), the representative instance for a plan (around ``plan_pins``, from greedy's
    starts), the optimistic one for a bound (and a plan too), each with the exact planner
    ``top_name`` until ``top_end`` (deterministic: ``top_share`` of ``budget`` seconds in all); every plan
    disaggregated and offered.  Returns (the log lines, each class's proven bound, timed out)."""
    lines: list[str] = []
    class_bounds: list[float] = []
    timed_out = False
    solve = _top_solver(top_name)
    weight_left = float(len(runs))  # each class: PLAN_WEIGHT for the plan, the rest for the bound
    for i, (agg, rep) in enumerate(runs):
        what = f"tp {','.join(map(str, agg.tps))}"
        proven = 0.0  # this class's bound; 0 when nothing is proven
        for role, a in (("plan", rep), ("bound", agg)):
            if stop.requested():
                timed_out = True
                break
            role_pins = plan_pins if role == "plan" else {k: v for k, v in pins.items() if v is not None}
            weight = PLAN_WEIGHT if role == "plan" else 1.0 - PLAN_WEIGHT
            share = (weight * top_share * budget / len(runs)) if deterministic else \
                max(0.2, weight * (top_end - time.perf_counter()) / max(weight_left, 1e-9))
            weight_left -= weight
            start = None
            if role == "plan":  # greedy's best plans of distinct shapes on the aggregate, then its best shape
                found, start = _plan_starts(instance, a, pins, lambda who, q: cands.offer(who, q, until=top_end),
                                            f"top-start{i}" if len(runs) > 1 else "top-start",
                                            None if deterministic else 0.3 * share)
                role_pins = found or role_pins
            if role_pins.get("tp") not in (None, *a.tps):
                continue  # greedy's tensor-parallel degree is in another class
            top_inst = a.instance
            if top_inst.heterogeneous and top_name not in type_aware:  # it plans one type: the fastest
                top_inst = fastest_type_instance(top_inst)
            try:
                res = solve(top_inst, time_limit=share, start=start, bounding=0.4 if role == "plan" else 0.9,
                            **opts, **role_pins)
            except InfeasibleError:
                lines.append(f"{what} ({role}): no plan")
                if role == "bound":
                    proven = math.inf  # no real plan of this class either: each maps to an aggregated one
                continue
            except Stopped:
                lines.append(f"{what} ({role}): stopped")
                timed_out = True
                continue
            info = res.solver
            lines.append(f"{what} ({role}): {info.status}, T_est {info.objective:.6g}, bound {info.bound:.6g}")
            log.info("hier: top level %s", lines[-1])
            if role == "bound":
                timed_out = timed_out or info.status not in ("optimal", "within_gap")
                if a.bounds and info.bound is not None:
                    proven = info.bound
            for k, p in enumerate(disaggregate(instance, a, res)):
                cands.offer(f"top-{role}{i}.{k}" if len(runs) > 1 else f"top-{role}.{k}", p)
        class_bounds.append(proven)
    return lines, class_bounds, timed_out


def _polish_best(instance, who: str, best: Plan, best_val: float, bound: float, end: float, budget: float,
                 gap: float, seed: int, deterministic: bool, forbid, stages, schedule) -> tuple[str, Plan, float]:
    """Polish: 1f1b with deeper warm-ups, then the annealing on the real instance until ``end``
    (briefly when the start's T_est is proven optimal); (who, plan, simulated objective)."""
    left = end - 0.2 - time.perf_counter()
    share = (1 - TOP_SHARE) * budget
    if score(instance, best) * (1 - gap) <= bound + 1e-12:
        left, share = min(left, PROVEN_SHARE * budget), PROVEN_SHARE * budget
    anneal_pins = {k: v for k, v in (("stages", stages), ("schedule", schedule)) if v is not None}
    if schedule is None and (left > 0.4 or deterministic):  # 1f1b with deeper warm-ups first (cheap)
        t1 = time.perf_counter()
        tuned = tune_inflight(instance, best, time_limit=None if deterministic else TUNE_SHARE * left,
                              max_evals=100 + 20 * best.num_stages if deterministic else None)
        left -= time.perf_counter() - t1
        if tuned is not best:
            val = simulated_score(instance, tuned)
            if val is not None and val < best_val * (1 - 1e-12):
                who, best, best_val = f"{who}+inflight", tuned, val
    if left > 0.2 or deterministic:
        out = anneal(instance, best, time_limit=max(0.2, left) if not deterministic else None, seed=seed,
                     max_evals=max(50, int(EVALS_PER_S * share)) if deterministic else None,
                     forbid=forbid, **anneal_pins)
        if out.solver.end_s < best_val * (1 - 1e-12):
            who, best, best_val = f"{who}+anneal", out, out.solver.end_s
    return who, best, best_val


def _plan_starts(instance, agg: Aggregate, pins: dict, offer, who: str, time_limit: float | None) -> dict:
    """Greedy's best plans of ``PLAN_STARTS`` distinct shapes on the representative
    aggregate ``agg``, each disaggregated and offered as a real candidate; returns the
    pins (the user's, and the tp, micro-batch size and stage count of the start whose
    real plan simulates fastest) for the exact solve that follows, and that start (its
    first incumbent); ``({}, None)`` if none."""
    try:
        starts = shape_starts(agg.instance, k=PLAN_STARTS, time_limit=time_limit)
    except (InfeasibleError, TimeLimitError):
        return {}, None
    user = {k: v for k, v in pins.items() if v is not None}
    best, best_val = None, math.inf
    for k, s in enumerate(st for st in starts if plan_matches(st, pins)):
        for q in disaggregate(instance, agg, s):
            val = offer(f"{who}{k}", q)
            if val < best_val:
                best, best_val = s, val
    if best is None:
        return {}, None
    return {**user, "tp": best.tp, "micro_batch_size": best.micro_batch_size, "stages": best.num_stages}, best


def _top_solver(name: str):
    if name == "cpsat":
        from .cpsat import cpsat

        return cpsat
    from .milp import milp

    return milp
