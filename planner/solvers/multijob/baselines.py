"""Baselines for several jobs (SPEC 10), scored by the same evaluator with the same references.

Each ``(minst, references, pool=None, objective=None) -> MultiPlan``; plans come
from the pool's single-job planner (greedy by default), so a baseline and the
column planner differ in the allocation only.

* :func:`static_split`: whole datacenters to jobs in proportion to their weights.
* :func:`equal_share`: ``floor(gpus_d / J)`` of every domain, ``1/J`` of every link and uplink.
* :func:`wan_blind_maxmin`: GPU shares by max-min over throughputs computed as if
  the WAN were free (plans on slices whose links are :data:`WAN_FREE_GBPS`), then
  each link split equally among the jobs whose routes use it.
* :func:`one_datacenter`: each job confined to one datacenter.
* :func:`greedy_by_weight`: jobs by decreasing weight, each planned on what is left.
* :func:`edf`: earliest deadline first: jobs by increasing deadline, each given its
  WAN-blind plan on the GPUs left while any fits.
* :func:`sequential`: each job alone on the whole cluster, one after the other
  (its completions; a report, not a multi-plan).

Every baseline's allocation is also a column of the planner
(:func:`planner.solvers.multijob.colgen.multiplan`), which is therefore never
worse than any of them.

Example
-------
>>> refs = references(minst)                                # doctest: +SKIP
>>> mp = wan_blind_maxmin(minst, refs)
>>> multievaluate(minst, mp).objective_value
0.517
"""

from __future__ import annotations

import math

from ...problem.jobs import equal_slice
from ...problem.plan import SolverInfo
from .columns import (ColumnPool, WAN_FREE_GBPS, assemble, clip, default_uplinks, link_keys,
                      reference_plans, split_links, traffic_links, wan_free)

__all__ = ["BASELINES", "edf", "edf_order", "equal_share", "greedy_by_weight", "one_datacenter", "sequential",
           "static_split", "wan_blind_maxmin", "WAN_FREE_GBPS"]


def _pool(minst, references, pool):
    return pool if pool is not None else ColumnPool(minst, references)


def _done(minst, name, objective, cols, references, pool, equal_tput=None):
    info = SolverInfo(name=f"baseline:{name}", status="heuristic")
    return assemble(minst, objective or minst.options.multi_objective, cols, references, equal_tput, info)


def _by_weight(minst) -> list[int]:
    """Jobs by decreasing weight, ties in file order."""
    return sorted(range(len(minst.jobs)), key=lambda j: (-minst.jobs[j].weight, j))


def _needs(minst, plans: dict) -> dict:
    """Link keys each job's plan sends over on the whole cluster's routes."""
    out = {}
    for j, p in plans.items():
        out[j] = traffic_links(minst.job_instance(j), p)
    return out


def _score_with_links(minst, pool, allocs: dict, plans: dict, source: str) -> list:
    """Columns of ``plans`` on ``allocs`` (job -> GPUs), each link split equally among
    the jobs whose plan's routes use it, uplinks at their default share."""
    shares = split_links(minst, _needs(minst, plans))
    cols = [None] * len(minst.jobs)
    for j, p in plans.items():
        g = allocs[j]
        cols[j] = pool.add(pool.score(j, g, shares[j], default_uplinks(minst, g), p, source))
    return cols


def static_split(minst, references, pool=None, objective=None):
    """Whole datacenters to jobs by weight: domains by decreasing GPUs (ties: file
    order), each to the allowed job furthest below its weight's share of all GPUs
    (under its ``max_gpus``); a job's links are those among its domains and on
    the routes between them (split equally where jobs meet), its uplinks whole."""
    pool = _pool(minst, references, pool)
    J = len(minst.jobs)
    have = static_domains(minst)
    plans, allocs = {}, {}
    for j in range(J):
        g = clip(minst, j, have[j])
        if not g:
            continue
        inst = minst.job_instance(j)
        mine = set(g)
        keys = link_keys(inst)
        needed = {k for k in keys if set(k.split("|")) <= mine}
        names = sorted(mine)
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                if (names[a], names[b]) in inst.routes:
                    needed.update(keys[i] for i in inst.routes[(names[a], names[b])].links)
        links = {k: 1.0 for k in needed}
        col = pool.make(j, g, links, {d: 1.0 for d in g}, source="baseline:static_split", trim_it=False)
        if col is not None:
            plans[j], allocs[j] = col.plan, g
    # links met by several jobs' routes: split equally; a job's uplinks whole
    shares = split_links(minst, _needs(minst, plans))
    cols = [None] * J
    for j, p in plans.items():
        cols[j] = pool.add(pool.score(j, allocs[j], shares[j], {d: 1.0 for d in allocs[j]}, p,
                                      "baseline:static_split"))
    return _done(minst, "static_split", objective, cols, references, pool)


def static_domains(minst) -> list[dict]:
    """The static split's datacenters per job (no plan needed): domains by decreasing
    GPUs (ties: file order), each to the allowed job furthest below its weight's share
    of all GPUs (under its ``max_gpus``); job -> {domain: GPUs} (empty: left out, unless
    ``clip`` keeps part of a domain beyond the quota).

    >>> [sorted(h) for h in static_domains(minst)]                 # doctest: +SKIP
    [['alpha'], ['beta', 'gamma']]
    """
    J, W = len(minst.jobs), sum(s.weight for s in minst.jobs)
    total = minst.total_gpus
    have = [dict() for _ in range(J)]
    for d in sorted(minst.domains, key=lambda d: -d.gpus):
        cands = [j for j in range(J) if d.name in minst.allowed(j)
                 and (minst.jobs[j].max_gpus is None or sum(have[j].values()) + d.gpus <= minst.jobs[j].max_gpus
                      or not have[j])]
        if not cands:
            continue
        j = max(cands, key=lambda j: (minst.jobs[j].weight / W * total - sum(have[j].values()), -j))
        have[j][d.name] = d.gpus
    return have


def equal_share(minst, references, pool=None, objective=None):
    """Every job on the equal slice (SPEC 10): ``floor(gpus_d / J)`` GPUs of every
    allowed domain, ``1/J`` of every link and uplink."""
    pool = _pool(minst, references, pool)
    cols = []
    for j in range(len(minst.jobs)):
        g, links, ups = equal_slice(minst, j)
        cols.append(pool.make(j, {d: n for d, n in g.items() if n}, links, ups, source="baseline:equal_share",
                              trim_it=False))
    eq = {minst.jobs[j].name: c.slice_throughput for j, c in enumerate(cols) if c is not None}
    return _done(minst, "equal_share", objective, cols, references, pool, eq)


def _fraction(minst, j, f: float) -> dict:
    """``floor(f * gpus_d)`` GPUs of every allowed domain of job j, within its quota."""
    return clip(minst, j, {d.name: int(math.floor(f * d.gpus + 1e-9)) for d in minst.domains
                           if d.name in minst.allowed(j)})


def _blind_plan(pool, j, gpus):
    """Job j's plan on its GPUs with the WAN free, and its throughput there (None: no plan)."""
    if not gpus:
        return None
    minst = pool.minst
    key = ("blind", pool._workload_key(j), tuple(sorted(gpus.items())))  # shared by jobs of one workload
    if key not in pool.cache:
        full = {k: 1.0 for k in link_keys(minst)}
        inst = wan_free(minst.slice_instance(j, gpus, full, {d.name: 1.0 for d in minst.domains}))
        p = pool.plan_on(j, inst, fast=pool.fast)
        if p is not None and pool.fast:
            pool._fast_plans.add(id(p))
        tput = None
        if p is not None:
            pr = p.predicted
            tput = (pr.model_extra or {}).get("effective_tokens_per_s") or pr.throughput_tokens_per_s
        pool.cache[key] = None if p is None else (p, tput)
    got = pool.cache[key]
    return None if got is None else (pool.as_job(got[0], j), got[1])


def wan_blind_maxmin(minst, references, pool=None, objective=None, steps: int | None = None):
    """GPU shares by max-min over WAN-free throughputs: each job's share f_j of every
    allowed domain (multiples of ``1 / steps``, default ``4 J``) raised, the job
    with the least ``rho / w`` first (rho over its reference, throughput with the
    WAN free), while ``sum f_j <= 1``; then each link split equally among the jobs
    whose plan's routes use it, uplinks at their default share."""
    pool = _pool(minst, references, pool)
    J = len(minst.jobs)
    steps = steps or 4 * J
    level = [0] * J
    value = [0.0] * J
    blind: dict[int, tuple] = {}

    def at(j, k):
        return _blind_plan(pool, j, _fraction(minst, j, k / steps))

    for j in range(J):  # the least level with a plan
        for k in range(1, steps + 1):
            got = at(j, k)
            if got is not None:
                level[j], blind[j] = k, got
                ref = references.get(minst.jobs[j].name) or got[1]
                value[j] = min(1.0, got[1] / ref) / minst.jobs[j].weight
                break
    # the least levels may not fit together (several jobs each needing much of every domain): the
    # policy then admits jobs by increasing least level (ties: weight, file order) while they fit,
    # and leaves the rest out (scored as not admitted)
    if sum(level[j] for j in blind) > steps:
        used = 0
        for j in sorted(blind, key=lambda j: (level[j], -minst.jobs[j].weight, j)):
            if used + level[j] <= steps:
                used += level[j]
            else:
                del blind[j]
                level[j], value[j] = 0, 0.0
    frozen = {j for j in range(J) if j not in blind}
    while sum(level) <= steps:
        open_ = [j for j in range(J) if j not in frozen]
        if not open_:
            break
        j = min(open_, key=lambda j: (value[j], j))
        if sum(level) + 1 > steps or level[j] >= steps:
            frozen.add(j)
            continue
        got = at(j, level[j] + 1)
        ref = None if got is None else (references.get(minst.jobs[j].name) or got[1])
        v = -1.0 if got is None else min(1.0, got[1] / ref) / minst.jobs[j].weight
        if v > value[j] * (1 + 1e-12):
            level[j] += 1
            blind[j], value[j] = got, v
        else:  # more GPUs do not help it: leave them to the others
            frozen.add(j)
    assert sum(level) <= steps, "shares over 1"  # the admission above and each raise keep the sum
    allocs = {j: _fraction(minst, j, level[j] / steps) for j in blind}
    plans = {j: blind[j][0] for j in blind}
    cols = _score_with_links(minst, pool, allocs, plans, "baseline:wan_blind_maxmin")
    return _done(minst, "wan_blind_maxmin", objective, cols, references, pool)


def one_datacenter(minst, references, pool=None, objective=None):
    """Each job in one datacenter: jobs by decreasing weight pick the allowed domain
    with the most GPUs per job already there plus one (ties: file order); a domain's
    GPUs are split among its jobs by weight (floors).  No WAN link."""
    pool = _pool(minst, references, pool)
    J = len(minst.jobs)
    where: dict[int, str] = {}
    count = {d.name: 0 for d in minst.domains}
    gpus = {d.name: d.gpus for d in minst.domains}
    order = list(minst.domain_names)
    for j in _by_weight(minst):
        d = max(minst.allowed(j), key=lambda d: (gpus[d] / (count[d] + 1), -order.index(d)))
        where[j] = d
        count[d] += 1
    cols = [None] * J
    for j, d in where.items():
        mates = [k for k in where if where[k] == d]
        share = minst.jobs[j].weight / sum(minst.jobs[k].weight for k in mates)
        g = clip(minst, j, {d: int(math.floor(share * gpus[d] + 1e-9))})
        if g:
            cols[j] = pool.make(j, g, {}, {d: g[d] / gpus[d]}, source="baseline:one_datacenter", trim_it=False)
    return _done(minst, "one_datacenter", objective, cols, references, pool)


def greedy_by_weight(minst, references, pool=None, objective=None):
    """Jobs by decreasing weight (ties: file order), each planned on the GPUs, link
    and uplink shares the earlier ones left (within its allowed domains and quota),
    keeping the GPUs its plan uses and its shares trimmed."""
    pool = _pool(minst, references, pool)
    free_g = {d.name: d.gpus for d in minst.domains}
    free_l = {k: 1.0 for k in link_keys(minst)}
    free_u = {d.name: 1.0 for d in minst.domains}
    cols = [None] * len(minst.jobs)
    for j in _by_weight(minst):
        g = {d: n for d, n in free_g.items() if n > 0}
        col = pool.make(j, g, {k: v for k, v in free_l.items() if v > 1e-9},
                        {d: max(0.0, free_u[d]) for d in g}, source="baseline:greedy_by_weight", trim_it=True)
        if col is None:
            continue
        cols[j] = col
        for d, n in col.gpus.items():
            free_g[d] -= n
        for k, v in col.link_share.items():
            free_l[k] = max(0.0, free_l[k] - v)
        for d, u in col.uplink_share.items():
            free_u[d] = max(0.0, free_u[d] - u)
    return _done(minst, "greedy_by_weight", objective, cols, references, pool)


def edf_order(minst) -> list[int]:
    """Job indices by increasing ``deadline_hours``, jobs without one last, ties in file order.

    >>> edf_order(minst)                                        # doctest: +SKIP
    [2, 0, 3, 1]
    """
    return sorted(range(len(minst.jobs)), key=lambda j: (minst.jobs[j].deadline_hours is None,
                                                         minst.jobs[j].deadline_hours or 0.0, j))


def edf(minst, references, pool=None, objective=None):
    """Earliest deadline first (issue 27: "jobs admitted by increasing deadline with
    WAN-blind allocations while GPUs remain"): jobs in :func:`edf_order`, each admitted
    with its WAN-blind plan on the GPUs left (allowed domains, quota; it keeps the GPUs the
    plan uses) while one fits; then each link split equally among the admitted jobs whose
    routes use it.  No admission test: a job is admitted whether or not it will meet its
    deadline, and takes as many GPUs as its plan uses, as ElasticFlow's EDF baseline gives
    each job in deadline order its most useful GPU count (``max_gpu``) or, when fewer are
    free, the most that fit (pkusys/ElasticFlow commit 0d29ad9,
    ``ElasticFlow/scheduler/scheduler.py``, ``edf_sim_allocation``)."""
    pool = _pool(minst, references, pool)
    J = len(minst.jobs)
    order = edf_order(minst)
    free_g = {d.name: d.gpus for d in minst.domains}
    allocs, plans = {}, {}
    for j in order:
        got = _blind_plan(pool, j, clip(minst, j, {d: n for d, n in free_g.items() if n > 0}))
        if got is None:
            continue
        p = got[0]
        used = {d: n for d, n in p.gpus_per_domain().items() if n}
        allocs[j], plans[j] = used, p
        for d, n in used.items():
            free_g[d] -= n
    cols = _score_with_links(minst, pool, allocs, plans, "baseline:edf")
    return _done(minst, "edf", objective or "deadline", cols, references, pool)


BASELINES = {"static_split": static_split, "equal_share": equal_share, "wan_blind_maxmin": wan_blind_maxmin,
             "one_datacenter": one_datacenter, "greedy_by_weight": greedy_by_weight, "edf": edf}
"""Every multi-plan baseline by name."""


def sequential(minst, references=None, pool=None, solver: str = "greedy", seed: int = 0,
               time_limit: float | None = None) -> list[dict]:
    """Each job alone on the whole cluster (its allowed domains, every link), one after
    the other in file order: per job ``name``, ``start_s``, ``completion_s`` (s from
    0), ``throughput_tokens_per_s`` and ``effective_time_s``.  A report beside the
    multi-plans, not one of them."""
    plans = reference_plans(minst, solver=solver, seed=seed, time_limit=time_limit)
    rows, clock = [], 0.0
    for j, spec in enumerate(minst.jobs):
        p = plans[spec.name]
        pr = p.predicted
        T = (pr.model_extra or {}).get("effective_time_s") or pr.iteration_time_s
        tput = (pr.model_extra or {}).get("effective_tokens_per_s") or pr.throughput_tokens_per_s
        start, clock = clock, clock + spec.iterations * T
        rows.append({"name": spec.name, "start_s": start, "completion_s": clock,
                     "throughput_tokens_per_s": tput, "effective_time_s": T})
    return rows
