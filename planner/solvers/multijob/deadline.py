"""Columns priced by the deadline: the least slice on which a job just meets it (SPEC 10,
objectives ``deadline`` and ``cost``).

Under ``deadline`` the master packs as much weight of jobs meeting their deadline as the
cluster holds, and under ``cost`` it charges every allocated GPU-hour (``price_per_gpu_hour``
of its domain) and every WAN gigabyte (``wan_price_per_gb``) with every deadline met.  Both
want, per job, columns that meet the deadline with as little as possible: few GPUs (for
longer), no WAN where one domain suffices, the cheaper domains.  :func:`price_deadline`
makes them, each by bisection (:func:`smallest_meeting`) on an integer size k of one family
of slices, the completion ``iterations * T_eff`` (s) taken as non-increasing in k:

* **one domain**: k GPUs of one domain (no link).  Domains alike for a plan (the same GPU
  type, intra-domain bandwidth, GPUs per node and price: :func:`domain_classes`) share one
  bisection, on the largest of them; its deadline-meeting columns are then copied to every
  other domain of the class with room for them (:func:`copy_to`, the plan's placement
  renamed and re-scored exactly: one evaluation, no plan);
* **several domains**, for jobs no one domain serves: k / :data:`SHARE_STEPS` of the GPUs of
  a *near set* (:func:`near_sets`: one of the job's largest domains and the 1, 2 or 3 others
  its routes reach best; the smallest set meeting the deadline per root) and of the links on
  the routes among them; failing those, of every allowed domain (the planner picks the
  domains it uses); the root of each near pair whole with k GPUs of its partner
  (``deadline:top_up``: leaves the partner's other GPUs to a job needing one domain); and,
  once the master's LP has priced the GPUs, for every job, of the
  domains priced least (``deadline:free``: a job moved there frees the contested ones);
* **the incumbent shrunk**: k / :data:`SHARE_STEPS` of the GPUs of the job's chosen column in
  each of its domains, its link shares kept: the same domains, fewer GPUs.

Every bisection starts with the whole family (k = n_max: if that misses the deadline, no
smaller member is tried), then guesses k from the time scaling as 1 / k, then halves
``[lo, hi]``; at most :data:`MAX_EVALUATIONS` plans each.  Plans are made by the pool's
planner (``fast``: greedy without its re-ranking, as the other pricing columns); the figures
are the core's exact ones, so ``deadline_met`` is what ``multievaluate`` will say.

Example
-------
>>> price_deadline(minst, pool, best, "deadline", make)          # doctest: +SKIP
>>> sorted({c.source for c in pool.columns if c.source.startswith("deadline")})  # doctest: +SKIP
['deadline:copy', 'deadline:domain', 'deadline:free', 'deadline:near', 'deadline:shrink', 'deadline:top_up']
"""

from __future__ import annotations

import math

SHARE_STEPS = 32  # the share families in steps of 1/32 of every domain (or of the incumbent's GPUs)
MAX_EVALUATIONS = 5  # plans one bisection may make
GUESS_MARGIN = 1.05  # after a miss, the guess asks 5% more than the 1/k scaling says
NEAR_ROOTS = 2  # near sets grow around this many of a job's largest domains
NEAR_SIZES = (2, 3, 4)  # ... with this many domains in all
NEAR_MISS = 0.02  # a whole family missing its deadline by at most 2%: planned again exactly


def deadline_s(minst, j: int) -> float | None:
    """Job j's deadline in seconds (None: it has none)."""
    h = minst.jobs[j].deadline_hours
    return None if h is None else 3600.0 * h


def smallest_meeting(alloc, n_max: int, limit_s: float, make, max_evaluations: int = MAX_EVALUATIONS,
                     exact=None):
    """The column of the least k in 1..``n_max`` whose completion is at most ``limit_s``
    (seconds), by bisection; ``alloc(k)`` gives ``(gpus, link_share, uplink_share)``,
    ``make(gpus, links, ups)`` the column (or None: no plan fits).  None when k = n_max
    misses too.  Each next k is guessed from the last column by a time scaling as 1 / k: after a
    column meeting the deadline, the k that would just meet it (or one below the least k known
    to meet, hi); after one missing it, that k with :data:`GUESS_MARGIN` more; the middle of
    ``(lo, hi)`` when the guess is outside (lo: the greatest k known to miss).  It stops when
    hi = lo + 1 or after ``max_evaluations`` plans.  With a time exactly W / k it takes three
    plans.  ``exact``: a maker like ``make`` by the exact planner, tried on k = n_max when
    ``make``'s column misses by at most :data:`NEAR_MISS` (a deadline met by a hair).  Completion is taken as non-increasing in k (a
    planner's heuristic may break it: the result then meets the deadline but may not be the
    least).

    >>> class C:
    ...     def __init__(self, k): self.completion_s, self.k = 100.0 / k, k
    >>> smallest_meeting(lambda k: (k, {}, {}), 64, 10.0, lambda g, l, u: C(g)).k
    10
    >>> smallest_meeting(lambda k: (k, {}, {}), 64, 1.0, lambda g, l, u: C(g)) is None
    True
    """
    if n_max < 1:
        return None
    evals = 0
    c = make(*alloc(n_max))
    evals += 1
    if c is not None and exact is not None and limit_s < c.completion_s <= limit_s * (1 + NEAR_MISS):
        c = exact(*alloc(n_max)) or c
    if c is None or c.completion_s > limit_s:
        return None
    best, lo, hi, last_k, last = c, 0, n_max, n_max, c  # lo misses (0 GPUs: trivially), hi meets
    while hi - lo > 1 and evals < max_evaluations:
        k = None
        if last is not None and last.completion_s > 0:
            if last.completion_s <= limit_s:  # met: the 1 / k estimate of the least, else just below
                k = min(hi - 1, math.ceil(last_k * last.completion_s / limit_s - 1e-9))
            else:  # missed: the estimate with a margin, to land above the least
                k = math.ceil(last_k * last.completion_s / limit_s * GUESS_MARGIN)
        if k is None or not lo < k < hi:
            k = (lo + hi) // 2
        c = make(*alloc(k))
        evals += 1
        if c is not None and c.completion_s <= limit_s:
            best, hi = c, k
        else:
            lo = k
        last_k, last = k, c
    return best


def domain_classes(minst, j: int) -> list[list[str]]:
    """Job j's allowed domains grouped by what a plan inside one domain depends on (GPU
    type, intra-domain bandwidth, GPUs per node, price per GPU-hour), each group largest
    first (ties: file order), groups in file order of their first domain."""
    allowed = set(minst.allowed(j))
    order = {d.name: i for i, d in enumerate(minst.domains)}
    groups: dict = {}
    for d in minst.domains:
        if d.name not in allowed or d.gpus < 1:
            continue
        key = (getattr(d, "gpu", None), d.intra_bandwidth_gbps, d.gpus_per_node, d.price_per_gpu_hour)
        groups.setdefault(key, []).append(d.name)
    cap = {d.name: d.gpus for d in minst.domains}
    return [sorted(g, key=lambda d: (-cap[d], order[d])) for g in groups.values()]


def copy_to(pool, col, domain: str, source: str = "deadline:copy"):
    """``col`` (a column inside one domain, no link) moved to ``domain``: its plan's placement
    renamed, scored exactly on ``domain``'s GPUs (None: it does not fit there)."""
    minst = pool.minst
    (src, n), = col.gpus.items()
    cap = {d.name: d.gpus for d in minst.domains}
    if cap[domain] < n:
        return None
    memo = pool.__dict__.setdefault("_copies", {})
    key = (id(col.plan), domain)
    if key not in memo:  # one copy per plan and domain (the score cache keys on the plan's identity)
        placement = [[domain if d == src else d for d in row] for row in col.plan.placement]
        memo[key] = (col.plan, col.plan.model_copy(update={"placement": placement}))
    plan = memo[key][1]
    if col.fast:
        pool._fast_plans.add(id(plan))
    return pool.add(pool.score(col.job, {domain: n}, {}, {domain: n / cap[domain]}, plan, source))


def price_deadline(minst, pool, best, objective: str, make, prices: dict | None = None) -> None:
    """New columns meeting each job's deadline with the least (see the module docstring).
    ``best``: the master's incumbent (its ``choice``) or None; ``make(j, gpus, links, ups,
    source=..., fast=None)``: the caller's column maker (its budget checks included; ``fast=False``:
    the exact planner, for a family missing its deadline by a hair); ``prices``: the
    master LP's duals (``("gpu", d)``: what one more GPU of d is worth), None before the first
    LP.  Three passes over the jobs (by decreasing weight, then earliest deadline): one domain
    for every job; a share of every domain for the jobs no single domain serves, and, with
    ``prices``, for every job a share of the domains whose GPUs the LP prices least (the
    uncontested ones: a job moved there frees the contested domains for others); the
    incumbent shrunk where it spans several domains.  Jobs without a deadline are left to
    the other pricing."""
    cols = pool.columns
    J = len(minst.jobs)
    choice = best.choice if best is not None else [None] * J
    order = [j for j in sorted(range(J), key=lambda j: (-minst.jobs[j].weight, deadline_s(minst, j) or 0.0, j))
             if deadline_s(minst, j) is not None]
    cap = {d.name: d.gpus for d in minst.domains}
    one_domain = set()
    for j in order:  # 1. one domain, one bisection per class of alike domains, copied to the others
        limit, quota = deadline_s(minst, j), minst.jobs[j].max_gpus
        for group in domain_classes(minst, j):
            rep = group[0]
            n_max = cap[rep] if quota is None else min(cap[rep], quota)
            got = smallest_meeting(lambda k, rep=rep: ({rep: k}, {}, {rep: k / cap[rep]}), n_max, limit,
                                   lambda g, lk, u, j=j: make(j, g, lk, u, source="deadline:domain"),
                                   exact=lambda g, lk, u, j=j: make(j, g, lk, u, source="deadline:domain",
                                                                    fast=False))
            if got is None:
                continue
            one_domain.add(j)
            used = {d: n for d, n in got.plan.gpus_per_domain().items() if n}
            if list(used) != [rep]:
                continue
            c = pool.score(j, used, {}, {rep: used[rep] / cap[rep]}, got.plan, "deadline:domain")
            if c is not None and c.completion_s <= limit:
                for other in group[1:]:
                    copy_to(pool, c, other)
    gpu_price = {d: (prices or {}).get(("gpu", d), 0.0) for d in cap}
    for j in order:  # 2. several domains, for the jobs no one domain serves; the least priced ones
        allowed = [d for d in minst.allowed(j) if cap[d] > 0]
        limit = deadline_s(minst, j)
        families = []
        if j not in one_domain:  # near sets, smallest first per root, then a share of every domain
            families += [(doms, "deadline:near") for doms in near_sets(minst, j)]
            families.append((allowed, "deadline:share"))
        if prices and allowed:
            low = min(gpu_price[d] for d in allowed)
            free = [d for d in allowed if gpu_price[d] <= low + 1e-9 * max(1.0, abs(low))]
            if free != allowed:
                families.append((free, "deadline:free"))
        done_roots = set()
        for doms, source in families:
            if source == "deadline:near" and doms[0] in done_roots:
                continue  # a smaller set around this root meets the deadline already
            if source == "deadline:share" and done_roots:
                continue
            keys = route_links(minst, j, doms)

            def share(k, doms=doms, keys=keys):
                f = k / SHARE_STEPS
                g = {d: int(math.floor(f * cap[d] + 1e-9)) for d in doms}
                return {d: n for d, n in g.items() if n}, {key: f for key in keys}, None

            got = smallest_meeting(share, SHARE_STEPS, limit,
                                   lambda g, lk, u, j=j, source=source: make(j, g, lk, u, source=source),
                                   exact=lambda g, lk, u, j=j, source=source: make(j, g, lk, u, source=source,
                                                                                   fast=False))
            if got is not None and source == "deadline:near":
                done_roots.add(doms[0])
        if j not in one_domain:  # the largest domain whole, topped up with k GPUs of a near one
            for doms in near_sets(minst, j, sizes=(2,)):
                root, nb = doms
                keys = route_links(minst, j, doms)

                def top_up(k, root=root, nb=nb, keys=keys):
                    return {root: cap[root], nb: k}, {key: 1.0 for key in keys}, None

                smallest_meeting(top_up, cap[nb], limit,
                                 lambda g, lk, u, j=j: make(j, g, lk, u, source="deadline:top_up"))
    for j in order:  # 3. the incumbent's column shrunk, its domains and link shares kept
        c0 = cols[choice[j]] if j < len(choice) and choice[j] is not None else None
        if c0 is None or len(c0.gpus) < 2 or c0.completion_s > deadline_s(minst, j):
            continue

        def shrink(k, c0=c0):
            f = k / SHARE_STEPS
            return ({d: max(1, int(math.floor(f * n + 1e-9))) for d, n in c0.gpus.items()},
                    dict(c0.link_share), None)

        smallest_meeting(shrink, SHARE_STEPS, deadline_s(minst, j),
                         lambda g, lk, u, j=j: make(j, g, lk, u, source="deadline:shrink"))


def near_sets(minst, j: int, roots: int = NEAR_ROOTS, sizes=NEAR_SIZES) -> list[list[str]]:
    """Sets of job j's allowed domains around each of its ``roots`` largest (GPUs, then file
    order): the root and the m - 1 others its routes reach best (the route's narrowest link's
    bandwidth, larger first, then its latency), for m in ``sizes``; per root, smallest first."""
    inst = minst.job_instance(j)
    cap = {d.name: d.gpus for d in minst.domains}
    order = {d: i for i, d in enumerate(minst.domain_names)}
    allowed = [d for d in minst.allowed(j) if cap[d] > 0]
    routes = inst.routes
    out = []
    for root in sorted(allowed, key=lambda d: (-cap[d], order[d]))[:roots]:
        def reach(d, root=root):
            r = routes.get((root, d))
            if r is None:
                return (1, 0.0, 0.0, order[d])
            bw = min((inst.links[i].bandwidth_gbps for i in r.links), default=math.inf)
            return (0, -bw, r.latency_ms, order[d])
        others = sorted((d for d in allowed if d != root and (root, d) in routes), key=reach)
        for m in sizes:
            if m - 1 <= len(others):
                out.append([root] + others[:m - 1])
    return out


def route_links(minst, j: int, doms) -> list[str]:
    """The link keys on the routes between any two of ``doms`` (job j's whole-cluster routes)."""
    from .columns import link_keys

    inst = minst.job_instance(j)
    keys = link_keys(inst)
    out = set()
    for a in doms:
        for b in doms:
            if a != b and (a, b) in inst.routes:
                out.update(keys[i] for i in inst.routes[(a, b)].links)
    return sorted(out)
