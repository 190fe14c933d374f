"""Choosing the data-parallel sync (SPEC v3 section 11) with the placement.

The sync option (mode, H, bits, fragments, overlap) is one categorical choice per
plan.  For a fixed placement, partition and schedule, each option's T^est_eff / e
(or its cost) is arithmetic on figures the evaluator already has, so the choice is
an enumeration (:func:`with_best_sync`).  Which placements to pair it with is the
search: every planner's own plan, and the family where every datacenter hosts
whole replicas (:func:`local_plans`), which needs no WAN traffic per step and is
where DiLoCo pays, and the family where groups of datacenters each host whole
pipelines (:func:`group_plans`), which pays where one datacenter is too small for
the compute and few groups keep the quality factor at 1.  :func:`choose_sync` runs
them all and keeps the best plan by exact
simulation; ``planner.plan`` calls it for every solver when the instance allows a
sync other than the plain one (``[options] dp_sync``).

An instance without ``[options] dp_sync`` is untouched: its only option is the
plain sync, and these functions return their input.

Example
-------
>>> best = choose_sync(instance, greedy(instance), time_limit=5)     # doctest: +SKIP
>>> best.dp_sync.label()                                             # doctest: +SKIP
'diloco H=30 4-bit'
"""

from __future__ import annotations

import heapq
import logging
import math
import time

from ..problem.dpsync import DpSync, covered, sync_groups, sync_options
from ..problem.network import GBPS
from ..problem.errors import InputError
from ..problem.plan import Plan, SolverInfo, Stage
from ..problem.space import PlanSpace
from ..scoring.evaluator import Evaluator, check_plan, simulated_score
from .greedy import domain_chain, route_tables
from .inflight import tune_inflight
from .shapesearch import plan_matches

log = logging.getLogger(__name__)


def sync_enabled(instance) -> bool:
    """Whether ``instance`` lets plans use a sync other than the plain one."""
    return instance.options.dp_sync is not None and any(not s.plain for s in sync_options(instance))


def sync_choices(instance, plan: Plan) -> list[DpSync]:
    """The options ``plan``'s placement may take: the instance's candidates whose mode
    is allowed and that a quality row covers with the plan's M groups."""
    M = sync_groups(plan)
    return [s for s in sync_options(instance) if covered(instance, s, M)]


def with_best_sync(instance, plan: Plan, spec: int | None = None, confirm: int = 3
                   ) -> tuple[Plan, float] | None:
    """``plan`` with the sync option minimising the instance's objective (T_eff / e, or
    the cost over e), and that objective by exact simulation; None when no option is
    feasible.  Every option is ranked by its estimate (T^est_eff / e; options of one
    mode and bits share their figures: :meth:`Evaluator.option_estimates`), the best
    ``confirm`` are simulated.  An outer sync whose outer state does not fit on the GPU
    is tried with it on the CPU.  The plain sync is among them when allowed.

    >>> p, score = with_best_sync(instance, plan)                    # doctest: +SKIP
    """
    plain = plan.model_copy(update={"dp_sync": None})
    try:
        ev0 = Evaluator(instance, plain, spec=spec)
    except InputError:
        return None
    if any(v.rule != "dp_sync" for v in check_plan(instance, plain, ev0.fig)):
        return None  # memory (the outer state only adds to it), capacity, routes ...
    by_kind: dict[tuple, list] = {}
    for i, s in enumerate(sync_choices(instance, plan)):
        by_kind.setdefault((s.mode, s.bits), []).append((i, s))
    ranked = []
    for opts in by_kind.values():
        rep = opts[0][1]
        try:
            ev = ev0 if rep.plain else Evaluator(instance, plan.model_copy(update={"dp_sync": rep}), spec=spec)
        except InputError:
            continue
        syncs = [s for _, s in opts]
        vals = ev.option_estimates(syncs)
        retry = [k for k, v in enumerate(vals) if v is None and syncs[k].outer]
        if retry:  # the outer state on the CPU where it does not fit on the GPU
            cpu = [syncs[k].model_copy(update={"outer_state": "cpu"}) for k in retry]
            for k, s_cpu, v in zip(retry, cpu, ev.option_estimates(cpu)):
                syncs[k], vals[k] = s_cpu, v
        for (i, _), s, v in zip(opts, syncs, vals):
            if v is not None and math.isfinite(v):
                ranked.append((v, i, s))
    ranked.sort(key=lambda r: (r[0], r[1]))
    best = None
    for _, _, s in ranked[:max(1, confirm)]:
        q = plan.model_copy(update={"dp_sync": None if s.plain else s})
        val = simulated_score(instance, q, spec=spec)  # None: infeasible, or never ends
        if val is None:
            continue
        if best is None or val < best[1] * (1 - 1e-12):
            best = (q, val)
    return best


def local_plans(instance, space: PlanSpace | None = None, keep: int = 3, deadline: float = math.inf,
                forbid=(), require=()) -> list[Plan]:
    """Plans whose replicas each sit whole in one datacenter (no pipeline crosses the
    WAN, so only a sync does), for the ``keep`` most promising shapes per number of
    datacenters used.  A shape's R replicas fill the datacenters with the most GPUs
    first (the fewest groups M: the best quality factors and the least outer
    traffic; the ``require``d ones first, the ``forbid``den ones never); shapes rank by
    their pipeline time without the network, ``(m - 1) max c + sum c`` with the
    balanced memory-feasible partition.  Stops adding shapes at ``deadline``
    (``time.perf_counter()``), keeping what it has.

    >>> [sync_groups(p) for p in local_plans(instance)]               # doctest: +SKIP
    [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    """
    space = space or PlanSpace(instance)
    gbs = instance.workload.global_batch_size
    need = set(require)
    doms = sorted((d for d in instance.domains if d.name not in set(forbid)),
                  key=lambda d: (d.name not in need, -d.gpus, instance.domain_index[d.name]))
    heaps: dict[int, list] = {}
    for sh in space.shapes():
        per = sh.stages * sh.tp
        room = [d.gpus // per if d.gpus_per_node >= sh.tp else 0 for d in doms]
        if sum(room) < sh.replicas:
            continue
        rows, left = [], sh.replicas
        for d, n in zip(doms, room):
            take = min(n, left)
            rows += [d.name] * take
            left -= take
            if not left:
                break
        M = len(set(rows))
        m = sh.micro_batches(gbs)
        ctot = space.stage_time(0, instance.num_units, sh.tp, sh.micro_batch)
        heaps.setdefault(M, []).append(((m - 1) * ctot / sh.stages + ctot, sh.tp * per * sh.replicas, sh, rows, None))
    out = []
    for M in sorted(heaps):
        heap = heaps[M]
        heapq.heapify(heap)
        got = 0
        while heap and got < keep and time.perf_counter() < deadline:
            score, gpus, sh, rows, cuts = heapq.heappop(heap)
            m = sh.micro_batches(gbs)
            if cuts is not None:
                out.append(Plan(instance=instance.name, replicas=sh.replicas, tp=sh.tp,
                                micro_batch_size=sh.micro_batch, num_micro_batches=m,
                                stages=[Stage(start=a, end=b) for a, b in cuts],
                                placement=[[d] * sh.stages for d in rows], schedule=sh.schedule))
                got += 1
                continue
            cuts = space.partition(sh.tp, sh.micro_batch, sh.schedule, sh.stages, m)
            if cuts is None:
                continue
            cmax = max(space.stage_time(a, b, sh.tp, sh.micro_batch) for a, b in cuts)
            ctot = space.stage_time(0, instance.num_units, sh.tp, sh.micro_batch)
            heapq.heappush(heap, ((m - 1) * cmax + ctot, gpus, sh, rows, cuts))
    return out


def group_chains(instance, k: int, tp: int, forbid=(), require=(), space: PlanSpace | None = None
                 ) -> list[list[str]]:
    """The usable datacenters (slots of ``tp`` GPUs, not ``forbid``den) split into
    chains of ``k``: each from the one left with the most slots (the ``require``d
    first), extended along the best routes (:func:`planner.solvers.greedy.domain_chain`);
    the datacenters left over (fewer than ``k``) are unused.

    >>> group_chains(load_instance("diloco-70b"), 2, 8)              # doctest: +SKIP
    [['us-east-1', 'us-west-2'], ['eu-central-1', 'ap-northeast-1']]
    """
    need = set(require)
    left = {d: n for d, n in (space or PlanSpace(instance)).slots(tp).items() if n > 0 and d not in set(forbid)}
    order = instance.domain_index
    chains = []
    while len(left) >= k:
        start = min(left, key=lambda d: (d not in need, -left[d], order[d]))
        chain = domain_chain(instance, tp, start, left)[:k]
        chains.append(chain)
        for d in chain:
            del left[d]
    return chains


def _group_split(stages: int, caps) -> list[int] | None:
    """Stages per datacenter of a chain: at least one each, at most ``caps[i]``, as
    close to proportional to ``caps`` as whole stages go; None when they do not fit."""
    if len(caps) > stages or sum(caps) < stages or min(caps) < 1:
        return None
    split = [1] * len(caps)
    for _ in range(stages - len(caps)):  # each next stage where the most room is left, relatively
        i = max(range(len(caps)), key=lambda i: ((caps[i] - split[i]) / caps[i], -i))
        split[i] += 1
    return split


def group_plans(instance, space: PlanSpace | None = None, keep: int = 2, deadline: float = math.inf,
                forbid=(), require=(), max_evals: int = 48) -> list[Plan]:
    """:func:`group_plans_scored`'s plans (see there)."""
    return [p for p, _ in group_plans_scored(instance, space, keep, deadline, forbid, require, max_evals)]


def group_plans_scored(instance, space: PlanSpace | None = None, keep: int = 2, deadline: float = math.inf,
                       forbid=(), require=(), max_evals: int = 48) -> list[tuple[Plan, float | None]]:
    """Plans of M groups whose pipelines cross the WAN inside their group only: the
    datacenters split into chains of k >= 2 (:func:`group_chains`, M = D // k groups),
    each group's replicas cut across its chain alike, stage j of every replica of a
    group in the same datacenter.  Each stage's per-step (inner) sync then stays in
    one datacenter and the WAN carries the activations inside a group and the outer
    sync between groups: with few groups (SPEC 11's best quality rows) the whole
    cluster computes at e = 1 where whole-replica plans (:func:`local_plans`) need a
    group per datacenter.  The slow boundary inside a group sets the pipeline's
    period unless stages hold more micro-batches than 1f1b does, so every candidate
    gets its best sync (:func:`with_best_sync`), then its in-flight limits
    (:func:`planner.solvers.inflight.tune_inflight`, at most ``max_evals``
    simulations), then its best sync again.  The ``keep`` shapes per k with the least
    pipeline time ``(m - 1) max(c, x) + sum c`` (x: the slowest boundary's transfer per
    micro-batch with the group's replicas sharing its route) are tried; stops at
    ``deadline`` (``time.perf_counter()``), keeping what it has.  Each plan comes with
    its objective by exact simulation (None: no sync option of it was feasible).

    On diloco-70b (four sites, 10 Gbit/s links) two groups of two sites, 8 stages of
    t = 8 and 4 replicas each, simulate at 30.92 s per step at e = 1 (streaming), against
    33.48 s (T_eff / e) for the best plan of one group per site
    (tests/solvers/test_group_plans.py).

    >>> [sync_groups(p) for p in group_plans(load_instance("diloco-70b"))]  # doctest: +SKIP
    [2, 2]
    """
    if not any(s.outer for s in sync_options(instance)):
        return []
    cache = instance.__dict__.setdefault("_planner_cache", {})
    key = ("group_plans", keep, tuple(sorted(forbid)), tuple(sorted(require)), max_evals)
    if key in cache:  # complete runs only (below): they do not depend on the deadline
        return list(cache[key])
    space = space or PlanSpace(instance)
    gbs, seq = instance.workload.global_batch_size, instance.workload.seq_len
    tables = route_tables(instance)
    idx = instance.domain_index
    D = len(instance.domains)
    act = max(u.out_bytes_per_token for u in instance.units[:-1]) if instance.num_units > 1 else 0.0
    ranked: dict[int, list] = {}
    groups: dict[tuple[int, int], tuple] = {}  # (k, tp) -> (chains, slots, slowest chain link's bandwidth)
    ks = sorted({D // M for M in range(2, D // 2 + 1)})  # the longest chains for each M
    for sh in space.shapes():
        m = sh.micro_batches(gbs)
        ctot = space.stage_time(0, instance.num_units, sh.tp, sh.micro_batch)
        for k in ks:
            if (k, sh.tp) not in groups:
                chains = group_chains(instance, k, sh.tp, forbid, require, space)
                bw = min((tables["bottleneck"][idx[a], idx[b]] for ch in chains for a, b in zip(ch, ch[1:])),
                         default=0.0)
                groups[k, sh.tp] = chains, space.slots(sh.tp), bw
            chains, slots, bw = groups[k, sh.tp]
            M = len(chains)
            if M < 2 or sh.replicas % M or sh.stages < k:
                continue
            Rg = sh.replicas // M
            splits = [_group_split(sh.stages, [slots[d] // Rg for d in ch]) for ch in chains]
            if any(s is None for s in splits):
                continue
            x = Rg * act * sh.micro_batch * seq / (bw * GBPS) if bw > 0 else math.inf
            rows = [sum(([d] * n for d, n in zip(ch, split)), []) for ch, split in zip(chains, splits)
                    for _ in range(Rg)]
            score = (m - 1) * max(ctot / sh.stages, x) + ctot
            ranked.setdefault(k, []).append((score, sh.tp * sh.stages * sh.replicas, sh, rows))
    out = []
    for k in sorted(ranked):
        got = 0
        for _, _, sh, rows in sorted(ranked[k], key=lambda r: r[:2]):
            if got >= keep or time.perf_counter() >= deadline:
                break
            cuts = space.partition(sh.tp, sh.micro_batch, sh.schedule, sh.stages, sh.micro_batches(gbs))
            if cuts is None:
                continue
            plan = Plan.build(cuts, rows, tp=sh.tp, micro_batch_size=sh.micro_batch, instance=instance,
                              schedule=sh.schedule)
            synced = with_best_sync(instance, plan)
            if synced is None:
                continue
            left = deadline - time.perf_counter()
            tuned = tune_inflight(instance, synced[0], time_limit=left if math.isfinite(left) else None,
                                  max_evals=max_evals)
            tuned = tuned.model_copy(update={"solver": None, "predicted": None})
            resynced = with_best_sync(instance, tuned)  # the limits may favour another option
            out.append(resynced if resynced is not None else (tuned, None))
            got += 1
    if time.perf_counter() < deadline:
        cache[key] = tuple(out)
    return out


def choose_sync(instance, plan: Plan | None, time_limit: float | None = None, extra=(),
                spec: int | None = None, keep: int = 3, pins: dict | None = None, forbid=(), require=()
                ) -> Plan | None:
    """:func:`choose_sync_scored`'s plan (see there)."""
    return choose_sync_scored(instance, plan, time_limit, extra, spec, keep, pins, forbid, require)[0]


def choose_sync_scored(instance, plan: Plan | None, time_limit: float | None = None, extra=(),
                       spec: int | None = None, keep: int = 3, pins: dict | None = None, forbid=(), require=()
                       ) -> tuple[Plan | None, float | None]:
    """The best of ``plan`` with its best sync option, the ``extra`` plans, the
    whole-replica plans of :func:`local_plans` and the grouped plans of
    :func:`group_plans` with theirs, by exact simulation
    (SPEC 11's objective).  ``plan`` itself when the instance allows the plain sync
    only.  ``time_limit`` seconds (None: no limit) bounds the search for more
    candidates; the first candidate is always scored.  ``pins`` (stages, replicas, tp,
    micro_batch_size, schedule), ``forbid`` and ``require`` are the user's: a
    candidate breaking them is left out.  The result carries
    ``plan``'s ``solver`` info (or none) and no ``predicted`` figures.  Returns it with
    its objective by exact simulation (:func:`planner.scoring.evaluator.simulated_score`;
    None where nothing was scored: ``plan`` as it came), so that a caller past its own
    deadline need not simulate it again.

    >>> choose_sync(instance, plan, time_limit=5).dp_sync            # doctest: +SKIP
    """
    if not sync_enabled(instance):
        return plan, None
    t0 = time.perf_counter()
    deadline = t0 + time_limit if time_limit is not None else math.inf
    best = None
    if plan is not None:
        best = with_best_sync(instance, plan, spec)
    cands = [(c, None) for c in extra]
    if time.perf_counter() < deadline:
        cands += [(c, None) for c in local_plans(instance, keep=keep, deadline=deadline, forbid=forbid,
                                                 require=require)]
    if time.perf_counter() < deadline:  # simulated with their best sync already (unless another spec is asked)
        cands += [(c, v if spec is None else None) for c, v in
                  group_plans_scored(instance, deadline=deadline, forbid=forbid, require=require)]
    cands = [(c, v) for c, v in cands if plan_matches(c, pins or {}, forbid, require)]
    for cand, val in cands:
        if val is not None:  # its score is known: no simulation, so past the deadline too
            got = (cand, val)
        elif best is not None and time.perf_counter() >= deadline:
            continue
        else:
            got = with_best_sync(instance, cand, spec)
        if got is not None and (best is None or got[1] < best[1] * (1 - 1e-12)):
            best = got
    if best is None:
        return plan, None
    chosen = best[0]
    info = plan.solver if plan is not None else None
    if plan is None or chosen.model_dump(exclude={"solver", "predicted"}) != plan.model_dump(
            exclude={"solver", "predicted"}):
        # another plan than the search's: its own claims (status, estimate_*) are not about it
        extra = {"sync_choice_from": info.status} if info is not None else {}  # no None: the file drops it
        info = SolverInfo(name=info.name if info is not None else "sync", status="heuristic", bound=None,
                          sync_choice=chosen.dp_sync.label() if chosen.dp_sync else "every step",
                          sync_choice_s=time.perf_counter() - t0, **extra)
    log.info("sync choice: %s, %.6g (%.2fs)", chosen.dp_sync.label() if chosen.dp_sync else "every step",
             best[1], time.perf_counter() - t0)
    return chosen.model_copy(update={"solver": info, "predicted": None}), best[1]
