"""Columns: one job's plan on one slice of the cluster, with its figures (SPEC 10).

A column holds an allocation (GPUs per domain, a share of each link and of
each uplink), the plan made for it by a single-job planner
(``planner.plan(minst.slice_instance(...), solver=...)``) and the figures the
master needs: the time per effective iteration ``T_eff / e`` (s), the
effective throughput (tokens/s), ``rho`` (throughput over the job's
reference), the completion ``iterations * T_eff`` (s), the cost of the whole
job (currency; the allocated GPUs charged, used or not) and whether the
deadline is met.  Its figures are the core's (:func:`job_time`), so a
multi-plan made of columns scores, job by job, what the column said.

:class:`ColumnPool` makes columns and caches them by what decides their time:
the job's workload keys, the GPUs per domain and the link and uplink shares.
A made column keeps the allocation it was made for and, beside it, the GPUs its
plan uses (the minimum SPEC 10 allows).  Trimming (link shares lowered to the
least that keeps its time within :data:`TRIM_TOLERANCE` of the untrimmed
slice's, :func:`trim`, up to :data:`TRIM_EVALUATIONS` evaluations) is lazy: the
caller trims the columns the master picks (:meth:`ColumnPool.trimmed`).

What repeats is cached: a plan depends on the job's workload keys and the slice
only, so jobs with the same workload share their plans (``_plans``), and a
plan's score on an allocation is computed once per workload (``_times``).
``fast=True`` plans by greedy without its exact re-ranking (``rerank=False``:
tens of times faster for a 70B model; the column's figures are still the core's
exact ones): the pricing columns; the chosen ones are re-planned exactly.

Example
-------
>>> pool = ColumnPool(minst, references, solver="greedy")          # doctest: +SKIP
>>> col = pool.make(0, {"us-east1": 64}, {"us-east1|us-west1": 0.5})
>>> col.rho, col.gpus, col.link_share
(0.42, {'us-east1': 64}, {})
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass

from ...problem.errors import InfeasibleError, InputError, TimeLimitError
from ...problem.jobs import WORKLOAD_KEYS, link_key
from ...problem.plan import Plan
from ...scoring.multievaluate import job_time

log = logging.getLogger("planner")

TRIM_TOLERANCE = 0.01  # a trimmed column's time is at most 1% above its slice's
TRIM_EVALUATIONS = 40  # evaluations one trim may spend
SHARE_DIGITS = 6  # shares are rounded to this many decimals (cache keys, files)
WAN_FREE_GBPS = 1e6  # "as if the WAN were free": every link and uplink at this bandwidth


@dataclass(frozen=True, eq=False)
class Column:
    """One job's allocation and plan, with its figures (see the module docstring).

    ``slice_throughput`` is the plan's throughput on the slice it was planned on
    (before trimming); ``source`` says which step made it (``equal``,
    ``baseline:static_split``, ``price``, ...)."""

    job: int
    name: str
    gpus: dict
    link_share: dict
    uplink_share: dict
    plan: Plan
    time_s: float  # T_eff / e, s
    throughput: float  # effective tokens/s
    rho: float
    completion_s: float
    cost: float
    deadline_met: bool
    slice_throughput: float = 0.0
    source: str = ""
    trimmed: bool = False
    fast: bool = False  # planned by the cheaper pricing planner (greedy without re-ranking)
    eval_s: float = 0.0  # seconds its evaluation took (the final multievaluate's share)

    @property
    def total_gpus(self) -> int:
        return sum(self.gpus.values())


def _round(shares: dict | None, keep_zero: bool = False) -> dict:
    """Shares rounded DOWN to :data:`SHARE_DIGITS` decimals (so that shares summing to 1,
    six times 1/6, still do: rounded to the nearest they would sum to 1.000002); zeros
    dropped (a link not listed has share 0) unless ``keep_zero`` (an uplink not listed
    has its default share).

    >>> sum(_round({str(i): 1 / 6 for i in range(6)}).values()) <= 1
    True
    """
    scale = 10 ** SHARE_DIGITS
    out = {k: min(1.0, math.floor(float(v) * scale + 1e-6) / scale) for k, v in (shares or {}).items()}
    return out if keep_zero else {k: v for k, v in out.items() if v > 0}


def link_keys(instance) -> tuple[str, ...]:
    """The link keys "a|b" of an instance, in file order."""
    return tuple(link_key(l) for l in instance.links)


def default_uplinks(minst, gpus: dict) -> dict:
    """SPEC 10's default uplink shares: g_d / gpus_d for the domains with GPUs."""
    cap = {d.name: d.gpus for d in minst.domains}
    return {d: min(1.0, g / cap[d]) for d, g in gpus.items() if g > 0}


def clip(minst, j: int, gpus: dict) -> dict:
    """``gpus`` within job j's allowed domains and quota (``max_gpus``): other
    domains dropped, then the largest counts lowered one GPU at a time (ties: file
    order) until the total is at most the quota."""
    spec = minst.jobs[j]
    allowed = set(spec.allowed_domains or [d.name for d in minst.domains])
    order = [d.name for d in minst.domains]
    cap = {d.name: d.gpus for d in minst.domains}
    out = {d: min(int(gpus.get(d, 0)), cap[d]) for d in order if d in allowed and int(gpus.get(d, 0)) > 0}
    if spec.max_gpus is not None:
        excess = sum(out.values()) - spec.max_gpus
        while excess > 0:
            big = max(out, key=lambda d: (out[d], -order.index(d)))
            cut = min(excess, max(1, out[big] - max((v for k, v in out.items() if k != big), default=0)))
            out[big] -= cut
            excess -= cut
            if out[big] == 0:
                del out[big]
    return out


def connected_gpus(instance, gpus: dict) -> dict:
    """``gpus`` restricted to the connected part of ``instance``'s WAN holding the most of
    them (ties: the part of the first domain in file order): a slice whose link shares cut
    the WAN leaves GPUs that cannot work together."""
    import networkx as nx

    held = {d: n for d, n in gpus.items() if n}
    parts = list(nx.connected_components(instance.graph))
    if len(parts) <= 1:
        return held
    order = {d: i for i, d in enumerate(instance.domain_names)}
    best = max(parts, key=lambda p: (sum(held.get(d, 0) for d in p), -min(order[d] for d in p)))
    return {d: n for d, n in held.items() if d in best}


def traffic_links(instance, plan: Plan) -> set[str]:
    """The link keys the plan's transfers may use on ``instance``: the routes
    between the domains of consecutive stages of a replica and between any two
    domains holding one stage (a superset of the gradient syncs' pairs)."""
    pairs = set()
    R, S = plan.replicas, plan.num_stages
    for r in range(R):
        row = plan.placement[r]
        for s in range(S - 1):
            if row[s] != row[s + 1]:
                pairs.add(tuple(sorted((row[s], row[s + 1]))))
    for s in range(S):
        doms = sorted({plan.placement[r][s] for r in range(R)})
        for a in range(len(doms)):
            for b in range(a + 1, len(doms)):
                pairs.add((doms[a], doms[b]))
    routes, keys = instance.routes, link_keys(instance)
    used = set()
    for a, b in pairs:
        if (a, b) in routes:
            used.update(keys[i] for i in routes[(a, b)].links)
    return used


class ColumnPool:
    """Makes and keeps the columns of one mix (see the module docstring).

    ``references``: job name -> tput* (tokens/s); ``solver``, ``seed``: the
    single-job planner and its seed; ``column_time_limit``: seconds per plan
    (None: the solver's default).  ``columns``: every distinct column made, in
    order; ``cache``: allocation key -> column (None: no plan fits the slice)."""

    def __init__(self, minst, references: dict, solver: str = "greedy", seed: int = 0,
                 column_time_limit: float | None = None, deterministic: bool = False):
        self.minst, self.references = minst, references
        self.solver, self.seed = solver, seed
        self.column_time_limit, self.deterministic = column_time_limit, deterministic
        self.columns: list[Column] = []
        self.cache: dict = {}
        self._keys: dict = {}  # (job, allocation key, fast) -> the column kept
        self._plans: dict = {}  # (workload and slice key, fast) -> Plan | None: shared by jobs
        self._times: dict = {}  # (workload key, id(plan), allocation key) -> (plan, T, Evaluation, s) | None
        self._trimmed: dict = {}  # id(column) -> its trimmed column
        self._base: dict = {}  # id(a plan named after a job) -> the plan as made (scores shared by the jobs)
        self._eval_s = (0.0, 0)  # seconds of the evaluations made here, and their count
        self._fresh = None  # (plan, Evaluation on its slice) of the plan plan_for made last, else None
        self._fast_plans: set = set()  # ids of the plans made by the pricing planner (kept in _plans)
        self.plans_made = 0
        self.plan_seconds = 0.0
        self.stop_check = None  # a callable: True when no more plans may be made
        self.limit_fn = None  # a callable giving the seconds one plan may take now (else column_time_limit)
        self.fast = False  # make()'s default planner: the pricing one (greedy without re-ranking) when True

    # -- keys ---------------------------------------------------------------
    def _workload_key(self, j: int) -> str:
        memo = self.__dict__.setdefault("_wkeys", {})
        if j not in memo:
            spec = self.minst.jobs[j]
            memo[j] = json.dumps(spec.model_dump(include=set(WORKLOAD_KEYS), mode="json"), sort_keys=True,
                                 default=str)
        return memo[j]

    def key(self, j: int, gpus: dict, link_share: dict, uplink_share: dict | None):
        """What decides a column's plan and time: the job's workload keys, the GPUs per
        domain and the (rounded) link and uplink shares."""
        up = None if uplink_share is None else tuple(sorted(_round(uplink_share, True).items()))
        return (self._workload_key(j), tuple(sorted((d, g) for d, g in gpus.items() if g)),
                tuple(sorted(_round(link_share).items())), up)

    # -- figures -------------------------------------------------------------
    def score(self, j: int, gpus: dict, link_share: dict, uplink_share: dict, plan: Plan, source: str = "",
              slice_throughput: float | None = None, trimmed: bool = False) -> Column | None:
        """The column of ``plan`` on this allocation, with the core's figures
        (:func:`job_time`); None when the plan is infeasible there."""
        spec = self.minst.jobs[j]
        tkey = self._time_key(j, gpus, link_share, uplink_share, plan)
        if tkey not in self._times:
            t0 = time.perf_counter()
            try:
                t, ev = job_time(self.minst, j, gpus, link_share, uplink_share, plan)
            except (InfeasibleError, InputError, KeyError):  # KeyError: a pair of the plan has no route left
                t, ev = None, None
            took = time.perf_counter() - t0
            self._eval_s = (self._eval_s[0] + took, self._eval_s[1] + 1)
            self._times[tkey] = (plan, t, ev, took)  # the plan kept: its id stays unique
        _, t, ev, took = self._times[tkey]
        if ev is None or not ev.feasible or not (t and math.isfinite(t)):
            return None
        tput = ev.effective_tokens_per_s
        ref = self.references.get(spec.name) or tput
        T = ev.effective_time_s
        completion = spec.iterations * T
        # SPEC 10: the allocated GPUs are charged, used or not (as the core's multievaluate counts)
        price = sum(g * d.price_per_gpu_hour for d in self.minst.domains for g in [gpus.get(d.name, 0)])
        per_iter = T / 3600.0 * price + ev.wan_gb_per_iteration * self.minst.options.wan_price_per_gb
        cost = spec.iterations * per_iter
        met = spec.deadline_hours is None or completion <= 3600.0 * spec.deadline_hours
        return Column(job=j, name=spec.name, gpus=dict(gpus), link_share=dict(link_share),
                      uplink_share=dict(uplink_share), plan=plan, time_s=t, throughput=tput,
                      rho=tput / max(ref, tput), completion_s=completion, cost=cost, deadline_met=met,
                      slice_throughput=tput if slice_throughput is None else slice_throughput, source=source,
                      trimmed=trimmed, fast=id(plan) in self._fast_plans, eval_s=took)

    def _time_key(self, j: int, gpus: dict, link_share: dict, uplink_share: dict, plan: Plan) -> tuple:
        """What decides a plan's figures on an allocation: the workload, the plan as made
        (before :meth:`as_job` named it after a job) and the allocation."""
        base = self._base.get(id(plan), plan)
        return (self._workload_key(j), id(base), self.key(j, gpus, link_share, uplink_share)[1:])

    def add(self, col: Column | None) -> Column | None:
        """Keep ``col`` unless an equal allocation of the same job, planned by the same
        planner (pricing or exact), is kept already; the column kept.  (An exact re-plan of
        a pricing column is kept beside it: the master takes the better.)"""
        if col is None:
            return None
        k = (col.job, self.key(col.job, col.gpus, col.link_share, col.uplink_share), col.fast)
        if k in self._keys:
            return self._keys[k]
        self._keys[k] = col
        self.columns.append(col)
        return col

    def scratch(self) -> "ColumnPool":
        """A pool sharing this one's plans and scores (and its planner, budget and mode) but
        not its columns: for multi-plans that are only to be scored, not offered to the master."""
        other = ColumnPool(self.minst, self.references, solver=self.solver, seed=self.seed,
                           column_time_limit=self.column_time_limit, deterministic=self.deterministic)
        for name in ("_plans", "_times", "_base", "_fast_plans", "_eval_s"):
            setattr(other, name, getattr(self, name))
        for name in ("_wkeys", "_renamed", "_moved", "_sigs"):
            other.__dict__[name] = self.__dict__.setdefault(name, {})
        other.stop_check, other.limit_fn, other.fast = self.stop_check, self.limit_fn, self.fast
        return other

    def find(self, j: int, gpus: dict, link_share: dict, uplink_share: dict, fast: bool | None = None):
        """The kept column of job j on this allocation (as :meth:`add` keys it), the exact
        planner's first (``fast``: only that planner's); None when there is none.  No plan."""
        key = self.key(j, gpus, link_share, uplink_share)
        for f in ((False, True) if fast is None else (fast,)):
            col = self._keys.get((j, key, f))
            if col is not None:
                return col
        return None

    # -- making --------------------------------------------------------------
    def plan_on(self, j: int, instance, time_limit: float | None = None, fast: bool = False) -> Plan | None:
        """The single-job planner's plan on ``instance`` (None: no plan fits, or the
        budget is out).  ``fast``: greedy without its exact re-ranking (other solvers:
        as they are)."""
        from ..registry import plan as run_plan

        if self.stop_check is not None and self.stop_check():
            return None
        if time_limit is not None:
            limit = time_limit
        elif self.limit_fn is not None:
            limit = self.limit_fn()
        else:
            limit = self.column_time_limit
        options = {}
        if self.deterministic and self.solver in ("cpsat", "auto", "hier"):
            options["deterministic"] = True
        if fast and self.solver == "greedy":
            options["rerank"] = False
        t0 = time.perf_counter()
        try:
            self.plans_made += 1
            return run_plan(instance, solver=self.solver, time_limit=limit, seed=self.seed, **options)
        except (InfeasibleError, TimeLimitError):  # TimeLimitError: no plan within its limit
            return None
        except KeyError as err:  # a planner meeting two GPU domains without a route (a bug there)
            log.warning("column of %s not planned: %s has no route", self.minst.jobs[j].name, err)
            return None
        finally:
            self.plan_seconds += time.perf_counter() - t0

    def plan_for(self, j: int, gpus: dict, link_share: dict, uplink_share: dict, instance,
                 time_limit: float | None = None, fast: bool = False) -> Plan | None:
        """Job j's plan on its slice ``instance`` (the allocation given with it), shared
        by every job of the same workload (the plan's ``instance`` renamed to the job)."""
        fast = fast and self.solver == "greedy"
        k = self.key(j, gpus, link_share, uplink_share)
        if not k[2]:  # no link: the uplinks carry nothing, the plan does not depend on them
            k = k[:3] + (None,)
        if not k[2] and len(k[1]) == 1:
            # one domain, no link: the plan of any domain alike (all but its name) moved here
            (dom, g), = k[1]
            twin = self._twin(j, (k[0], (("#like", self._domain_sig(dom)), g)), dom, gpus, link_share, uplink_share,
                              instance, time_limit, fast)
            return twin
        pkey = (k, fast)
        exact = (pkey[0], False)
        if fast and self._plans.get(exact) is not None:  # the exact plan is known: no cheaper one
            pkey = exact
        self._fresh = None
        if pkey not in self._plans:
            p = self.plan_on(j, instance, time_limit, fast)
            if p is None and self.stop_check is not None and self.stop_check():
                return None  # stopped, not infeasible: not remembered
            self._plans[pkey] = p
            if p is not None:
                from ..registry import evaluation_of

                ev = evaluation_of(p)  # the planner's own evaluation on this slice: the column's figures
                self._fresh = None if ev is None else (p, ev)
            if p is not None and fast:
                self._fast_plans.add(id(p))
        return self.as_job(self._plans[pkey], j)

    def _domain_sig(self, dom: str) -> str:
        """What a plan in domain ``dom`` alone (no link) depends on: the domain's fields but
        its name, size, place and uplink (and its price unless the planner's objective is
        cost), as JSON."""
        memo = self.__dict__.setdefault("_sigs", {})
        if dom not in memo:
            d = self.minst.domains[self.minst.domain_names.index(dom)]
            skip = {"name", "gpus", "region", "lat", "lon", "utc_offset_hours", "uplink_gbps"}
            if self.minst.job_instance(0).options.objective != "cost":
                skip.add("price_per_gpu_hour")
            memo[dom] = json.dumps(d.model_dump(exclude=skip, mode="json"), sort_keys=True, default=str)
        return memo[dom]

    def _twin(self, j, sig, dom, gpus, link_share, uplink_share, instance, time_limit, fast):
        """Job j's plan alone in domain ``dom`` (no link): made once per workload, domain
        kind and size (``sig``), its placement moved to ``dom``."""
        pkey = (sig, fast)
        exact = (sig, False)
        if fast and self._plans.get(exact) is not None:
            pkey = exact
        self._fresh = None
        if pkey not in self._plans:
            p = self.plan_on(j, instance, time_limit, fast)
            if p is None and self.stop_check is not None and self.stop_check():
                return None
            if p is not None:
                from ..registry import evaluation_of

                ev = evaluation_of(p)
                self._fresh = None if ev is None else (p, ev)
                if fast:
                    self._fast_plans.add(id(p))
            self._plans[pkey] = None if p is None else (p, p.placement[0][0])
        got = self._plans[pkey]
        if got is None:
            return None
        p, home = got
        if home != dom:
            memo = self.__dict__.setdefault("_moved", {})
            if (id(p), dom) not in memo:
                q = p.model_copy(update={"placement": [[dom if x == home else x for x in row]
                                                       for row in p.placement]})
                memo[(id(p), dom)] = (p, q)
                if id(p) in self._fast_plans:
                    self._fast_plans.add(id(q))
            p = memo[(id(p), dom)][1]
        return self.as_job(p, j)

    def as_job(self, p: Plan | None, j: int) -> Plan | None:
        """``p`` (made for a job of the same workload) named after job j: one copy per
        plan and job (the score cache keys on the plan's identity)."""
        name = self.minst.jobs[j].name
        if p is None or p.instance == name:
            return p
        memo = self.__dict__.setdefault("_renamed", {})
        if (id(p), name) not in memo:
            memo[(id(p), name)] = (p, p.model_copy(update={"instance": name}))
            self._base[id(memo[(id(p), name)][1])] = p
            if id(p) in self._fast_plans:
                self._fast_plans.add(id(memo[(id(p), name)][1]))
        return memo[(id(p), name)][1]

    def make(self, j: int, gpus: dict, link_share: dict, uplink_share: dict | None = None, source: str = "",
             trim_it: bool = False, time_limit: float | None = None, fast: bool | None = None) -> Column | None:
        """Job j's column on this slice (cached): planned (``fast``: by the pricing
        planner; None: the pool's ``fast``), scored on the allocation given and also kept with the GPUs its plan
        uses; ``trim_it``: the column trimmed (:meth:`trimmed`) is returned instead."""
        fast = self.fast if fast is None else fast
        gpus = clip(self.minst, j, gpus)
        if not gpus:
            return None
        link_share = _round(link_share)
        uplink_share = default_uplinks(self.minst, gpus) if uplink_share is None else _round(uplink_share, True)
        key = (j, self.key(j, gpus, link_share, uplink_share), trim_it, fast)
        if key in self.cache:
            return self.cache[key]
        col = None
        try:
            inst = self.minst.slice_instance(j, gpus, link_share, uplink_share)
        except InputError:
            inst = None
        if inst is not None:
            part = connected_gpus(inst, gpus)
            if part != gpus:  # the slice's WAN is cut in two: the part with the most GPUs
                uplink_share = {d: u for d, u in uplink_share.items() if d in part}
                col = self.make(j, part, link_share, uplink_share, source, trim_it, time_limit, fast)
                self.cache[key] = col
                return col
        p = None if inst is None else self.plan_for(j, gpus, link_share, uplink_share, inst, time_limit, fast)
        if p is None and self.stop_check is not None and self.stop_check():
            return None  # the budget stopped the plan: nothing remembered
        if p is not None:
            fresh = self._fresh
            tkey = self._time_key(j, gpus, link_share, uplink_share, p)
            if fresh is not None and self._base.get(id(p), p) is fresh[0] and tkey not in self._times:
                # the planner evaluated its plan on this very slice (registry.finish): job_time's figures
                took = self._eval_s[0] / self._eval_s[1] if self._eval_s[1] else 0.2  # for the time reserve
                self._times[tkey] = (fresh[0], fresh[1].objective_s, fresh[1], took)
            col = self.score(j, gpus, link_share, uplink_share, p, source)
            if col is not None:
                # kept with the GPUs the plan uses too (the same time, fewer GPUs): the master may
                # leave the rest to others; trimming waits until the master picks it
                used = {d: n for d, n in p.gpus_per_domain().items() if n}
                if used != col.gpus:
                    self.add(self.score(j, used, link_share, {d: u for d, u in uplink_share.items()
                                                               if d in used or u > 0}, p, source))
                if trim_it:
                    col = self.trimmed(col)
        self.cache[key] = col
        if col is not None:
            log.info("column %d (%s, %s): %d GPUs, %d links, rho %.4f", len(self.columns), col.name, source,
                     col.total_gpus, len(col.link_share), col.rho)
        return self.add(col)

    def trimmed(self, col: Column) -> Column:
        """``col`` trimmed (:func:`trim`), once per column, and kept."""
        if col.trimmed:
            return col
        if id(col) not in self._trimmed:
            self._trimmed[id(col)] = (col, self.add(trim(self, col)))
        return self._trimmed[id(col)][1]


def trim(pool: ColumnPool, col: Column, evaluations: int = TRIM_EVALUATIONS) -> Column:
    """``col`` with the GPUs its plan uses, then link and uplink shares lowered
    while its time stays within :data:`TRIM_TOLERANCE` of ``col``'s: links the
    plan's transfers cannot use dropped, then one factor for the rest
    (bisection), then link by link and uplink by uplink (bisection), at most
    ``evaluations`` (:data:`TRIM_EVALUATIONS`) evaluations in all.  Every step is checked with the
    core's evaluation, so the result's figures are exact."""
    j, limit = col.job, col.time_s * (1 + TRIM_TOLERANCE)
    used = {d: n for d, n in col.plan.gpus_per_domain().items() if n}
    budget = [evaluations]

    def attempt(links, ups):
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        c = pool.score(j, used, _round(links), _round(ups, True), col.plan, col.source,
                       slice_throughput=col.slice_throughput, trimmed=True)
        return c if c is not None and c.time_s <= limit else None

    ups0 = {d: u for d, u in col.uplink_share.items() if d in used or u > 0}
    best = attempt(col.link_share, ups0)
    if best is None:
        return col
    links, ups = dict(best.link_share), dict(best.uplink_share)
    try:
        inst = pool.minst.slice_instance(j, used, links, ups)
        wanted = traffic_links(inst, col.plan)
    except InputError:
        wanted = set(links)
    fewer = {k: v for k, v in links.items() if k in wanted}
    if fewer != links:
        c = attempt(fewer, ups)
        if c is not None:
            best, links = c, fewer

    def bisect(make, steps):
        nonlocal best
        lo, hi = 0.0, 1.0  # factor: hi keeps the time, lo is tried first
        c = attempt(*make(0.0))
        if c is not None:
            best = c
            return 0.0
        for _ in range(steps):
            mid = (lo + hi) / 2
            c = attempt(*make(mid))
            if c is None:
                lo = mid
            else:
                best, hi = c, mid
        return hi

    if links:
        f = bisect(lambda f: ({k: v * f for k, v in links.items()}, ups), 6)
        links = {k: v * f for k, v in links.items() if v * f > 0}
        for k in sorted(links, key=lambda k: -links[k]):
            base = links[k]
            f = bisect(lambda f: ({**links, k: base * f}, ups), 3)
            links = {**links, k: base * f}
            links = {a: v for a, v in links.items() if v > 0}
    for d in sorted(ups, key=lambda d: -ups[d]):
        base = ups[d]
        f = bisect(lambda f: (links, {**ups, d: base * f}), 3)
        ups = {**ups, d: base * f}
    return best


def wan_free(instance):
    """``instance`` with every link and uplink at :data:`WAN_FREE_GBPS` (latencies kept):
    the WAN-blind view of a slice."""
    data = instance.to_dict()
    for link in data["links"]:
        link["bandwidth_gbps"] = WAN_FREE_GBPS
    for d in data["domains"]:
        d.pop("uplink_gbps", None)
    return instance._replace(data)


def split_links(minst, needs: dict[int, set]) -> dict[int, dict]:
    """Each link split equally among the jobs that need it: ``needs[j]`` the link keys
    job j's transfers use; returns job -> {key: 1 / (jobs needing key)}."""
    count: dict[str, int] = {}
    for keys in needs.values():
        for k in keys:
            count[k] = count.get(k, 0) + 1
    return {j: {k: 1.0 / count[k] for k in keys} for j, keys in needs.items()}


def assemble(minst, objective: str, cols: list, references: dict, equal_tput: dict | None = None,
             solver=None):
    """The multi-plan (:class:`planner.problem.multiplan.MultiPlan`) of one column (or
    None: not admitted) per job, with the references and equal-share throughputs."""
    from ...problem.multiplan import JobAllocation, MultiPlan

    jobs = []
    for j, (spec, c) in enumerate(zip(minst.jobs, cols)):
        eq = (equal_tput or {}).get(spec.name)
        ref = references.get(spec.name)
        if c is None:
            jobs.append(JobAllocation(name=spec.name, admitted=False, gpus={}, link_share={}, uplink_share={},
                                      reference_throughput_tokens_per_s=ref,
                                      equal_share_throughput_tokens_per_s=eq, plan=None))
        else:
            jobs.append(JobAllocation(name=spec.name, admitted=True, gpus=dict(c.gpus),
                                      link_share=dict(c.link_share), uplink_share=dict(c.uplink_share),
                                      reference_throughput_tokens_per_s=ref,
                                      equal_share_throughput_tokens_per_s=eq, plan=c.plan))
    return MultiPlan(instance=minst.name, objective=objective, jobs=jobs, solver=solver)


def plan_throughput(p) -> float:
    """A plan's effective throughput (tokens/s) as its predicted figures give it."""
    pr = p.predicted
    return (pr.model_extra or {}).get("effective_tokens_per_s") or pr.throughput_tokens_per_s


def reference_plans(minst, solver: str = "greedy", seed: int = 0, time_limit: float | None = None,
                    deterministic: bool = False) -> dict:
    """Job name -> the plan of ``solver`` on ``minst.job_instance(j)`` (cached on ``minst``
    per solver, seed, time limit); a job whose planner finds no plan within ``time_limit``
    gets one more try with four times as much."""
    from ..registry import plan as run_plan

    cache = minst.__dict__.setdefault("_multijob_references", {})
    key = (solver, seed, time_limit, deterministic)
    if key not in cache:
        out = {}
        for j, spec in enumerate(minst.jobs):
            options = {"deterministic": True} if deterministic and solver in ("cpsat", "auto", "hier") else {}
            try:
                out[spec.name] = run_plan(minst.job_instance(j), solver=solver, time_limit=time_limit, seed=seed,
                                          **options)
            except TimeLimitError:  # no plan within the limit (a large cluster): once more with 4x the time
                if time_limit is None:
                    raise
                log.warning("reference of %s: no plan within %.3g s; once more with %.3g s", spec.name,
                            time_limit, 4 * time_limit)
                out[spec.name] = run_plan(minst.job_instance(j), solver=solver, time_limit=4 * time_limit,
                                          seed=seed, **options)
        cache[key] = out
    return cache[key]


def references(minst, time_limit: float | None = None, seed: int = 0, solver: str = "greedy",
               deterministic: bool = False) -> dict[str, float]:
    """tput*_j for every job (tokens/s): the throughput of ``solver``'s plan for the
    job alone on the whole cluster (``job_instance``).  One fixed method, computed
    once per mix: pass the result to every method compared on the mix.

    >>> references(minst)                           # doctest: +SKIP
    {'big': 1.6e5, 'small': 4.2e6}
    """
    plans = reference_plans(minst, solver=solver, seed=seed, time_limit=time_limit, deterministic=deterministic)
    return {name: plan_throughput(p) for name, p in plans.items()}


reference_throughputs = references  # the name inside multiplan, whose argument is called references
