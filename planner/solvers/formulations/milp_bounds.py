"""Lower bounds per number of stages, for the MILP of one shape.

``stage_count_bounds(instance, shape)`` returns, for every admissible number
of stages S of a shape (tp, micro-batch, schedule, replicas), a lower bound
on T_est (seconds) of every plan of the shape with S stages;
``cost_stage_bounds`` the same for the cost objective.  They refine
:func:`planner.solvers.shapesearch.shape_lower_bound` with what the instance's own
figures force (``docs/formulations.md``, MILP section 2.1, states every step
and why it is valid):

* the pipeline path of the most spread replica: a dynamic programme over
  domain subsets gives, for every number k of domains it uses, the cheapest
  walk (transfer alone on the route's narrowest link + latency, under the
  shortest-path closure) that visits them, plus every boundary's minimum;
* the replica with the longest path: every domain the R replicas use is on
  some replica's path, so that replica's domains hold its S stages and
  contain the domain (:meth:`StageBounds.covering_path`, subset DP);
* the period: best memory-feasible partition, the largest transfer,
  Little's law on the suffix windows whose first stage holds fewer than m
  micro-batches (1f1b, SPEC 7 v2: the others are dropped), and the WAN
  volume of the crossing flows;
* gradient rings (R > 1): per stage, the intra ring and the best cross ring
  any K domains allow; the row/column trade-off (replicas using at most k
  domains leave at most the k largest cap_d // R single-domain stages); one
  shared ring when every replica stays inside one domain; the WAN volume of
  the rings against the compute the other stages must then hold.

``tests/test_milp.py`` checks every bound against brute force per stage
count on small random instances.

``spec``: these bounds are SPEC v2's (routes by least latency, one count per
undirected link, 2-member rings halved, the gpipe period of every stage);
under ``spec=3`` direct routes, full duplex and the flush-based gpipe period
can make a plan faster than they allow, so ``stage_count_bounds`` and
``cost_stage_bounds`` return no bound there (callers fall back to
:func:`planner.solvers.shapesearch.shape_lower_bound`, which holds under v3)
until they are ported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...problem.model import BYTES_PER_PARAM_GRAD
from ...problem.network import GBPS, MS
from ...problem.partition import little_period
from ...problem.space import PlanSpace, Shape

_DP_MAX_DOMAINS = 16
_COVER_MAX_DOMAINS = 12


@dataclass
class _Pairs:
    """Pairwise WAN figures between domains (seconds, bytes/s)."""

    names: list[str]
    lat: np.ndarray  # (n, n) route latency, seconds (0 on the diagonal)
    inv_bw: np.ndarray  # (n, n) 1 / bottleneck bandwidth of the route, s/byte
    ring2_inv_bw: np.ndarray  # (n, n) 1 / bandwidth of the 2-ring a->b->a (its hops share links)
    intra_bw: np.ndarray  # (n,) bytes/s


def _pairs(instance) -> _Pairs:
    cache = instance.__dict__.setdefault("_planner_cache", {})
    if "milp_pairs" in cache:
        return cache["milp_pairs"]
    names = list(instance.domain_names)
    n = len(names)
    bw = np.array([l.bandwidth_gbps * GBPS for l in instance.links])
    lat = np.zeros((n, n))
    inv = np.zeros((n, n))
    ring2 = np.zeros((n, n))
    routes = instance.routes
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j or (a, b) not in routes:
                if i != j:
                    lat[i, j] = inv[i, j] = ring2[i, j] = math.inf
                continue
            r = routes[(a, b)]
            lat[i, j] = r.latency_ms * MS
            inv[i, j] = max((1.0 / bw[k] if bw[k] > 0 else math.inf) for k in r.links) if r.links else 0.0
            back = routes[(b, a)].links
            users: dict[int, int] = {}
            for k in list(r.links) + list(back):
                users[k] = users.get(k, 0) + 1
            ring2[i, j] = max((u / bw[k] if bw[k] > 0 else math.inf) for k, u in users.items()) if users else 0.0
    out = _Pairs(names, lat, inv, ring2, np.array([d.intra_bandwidth_gbps * GBPS for d in instance.domains]))
    cache["milp_pairs"] = out
    return out


def _closure(w: np.ndarray) -> np.ndarray:
    """All-pairs shortest paths (Floyd-Warshall) of a non-negative matrix."""
    d = w.copy()
    for k in range(len(d)):
        d = np.minimum(d, d[:, k:k + 1] + d[k:k + 1, :])
    return d


def _ham_paths(w: np.ndarray) -> np.ndarray:
    """Cheapest Hamiltonian path of every subset of nodes (bitmask index) under ``w``."""
    n = len(w)
    full = 1 << n
    dp = np.full((full, n), np.inf)
    dp[1 << np.arange(n), np.arange(n)] = 0.0
    pc = np.array([bin(x).count("1") for x in range(full)]) if n <= 12 else \
        np.unpackbits(np.arange(full, dtype=np.uint32).view(np.uint8).reshape(-1, 4), axis=1).sum(axis=1)
    for p in range(1, n):
        masks = np.nonzero(pc == p)[0]
        cur = dp[masks]
        cand = (cur[:, :, None] + w[None, :, :]).min(axis=1)
        for v in range(n):
            sel = ((masks >> v) & 1) == 0
            nm = masks[sel] | (1 << v)
            dp[nm, v] = np.minimum(dp[nm, v], cand[sel, v])
    best = dp.min(axis=1)
    best[0] = 0.0
    return best


class StageBounds:
    """Per-instance tables for :func:`stage_count_bounds` (cached on the instance)."""

    def __init__(self, instance, space: PlanSpace | None = None):
        self.instance = instance
        self.space = space or PlanSpace(instance)
        self.pairs = _pairs(instance)
        self._paths: dict = {}
        self._by_k: dict = {}
        self._bounds: dict = {}

    # -- pipeline path ---------------------------------------------------------
    def _path_table(self, A: float, hostable: tuple[int, ...]):
        """(b0, per-subset crossing cost array or None, closure matrix) for boundary bytes A."""
        key = (A, hostable)
        if key not in self._paths:
            pr = self.pairs
            idx = list(hostable)
            w = A * pr.inv_bw[np.ix_(idx, idx)] + pr.lat[np.ix_(idx, idx)]
            np.fill_diagonal(w, np.inf)
            x_in = A / pr.intra_bw[idx].max()
            b0 = min(x_in, float(w.min())) if len(idx) > 1 else x_in
            wp = np.maximum(w - b0, 0.0)
            np.fill_diagonal(wp, 0.0)
            wp = _closure(wp)
            ham = _ham_paths(wp) if len(idx) <= _DP_MAX_DOMAINS else None
            self._paths[key] = (b0, ham, wp)
        return self._paths[key]

    def path_by_domains(self, A: float, hostable: list[int], caps: list[int], S: int) -> dict[int, float]:
        """k -> lower bound on the sum over boundaries of (x + l), seconds, of a replica
        of S stages spread over exactly k domains (for every k such a replica can have)."""
        if S <= 1:
            return {1: 0.0}
        b0, ham, wp = self._path_table(A, tuple(hostable))
        n = len(hostable)
        out: dict[int, float] = {}
        if ham is not None:
            key = (A, tuple(hostable), tuple(caps))
            if key not in self._by_k:
                masks = np.arange(1 << n)
                capsum = np.zeros(1 << n, dtype=np.int64)
                pc = np.zeros(1 << n, dtype=np.int64)
                for i in range(n):
                    bit = (masks >> i) & 1
                    capsum += bit * int(caps[i])
                    pc += bit
                per_k = {}
                for k in range(1, n + 1):
                    sel = pc == k
                    cs, hm = capsum[sel], ham[sel]
                    order = np.argsort(cs, kind="stable")
                    cs, hm = cs[order], hm[order]
                    suf = np.minimum.accumulate(hm[::-1])[::-1]
                    per_k[k] = (cs, suf)
                self._by_k[key] = per_k
            for k, (cs, suf) in self._by_k[key].items():
                if k > S:
                    break
                i = int(np.searchsorted(cs, S, side="left"))
                if i < len(cs):
                    out[k] = (S - 1) * b0 + float(suf[i])
        else:  # the cheapest forest with k - 1 edges (Kruskal) under the closure
            edges = sorted((wp[i, j], i, j) for i in range(n) for j in range(i + 1, n))
            parent = list(range(n))

            def find(a):
                while parent[a] != a:
                    parent[a] = parent[parent[a]]
                    a = parent[a]
                return a

            forest = [0.0]
            for c, i, j in edges:
                a, b = find(i), find(j)
                if a != b:
                    parent[a] = b
                    forest.append(forest[-1] + c)
            top = sorted(caps, reverse=True)
            for k in range(1, min(S, n) + 1):
                if sum(top[:k]) >= S:
                    out[k] = (S - 1) * b0 + forest[k - 1]
        return out

    def covering_path(self, A: float, hostable: list[int], caps: list[int], S: int, R: int) -> float:
        """Lower bound (s) on the largest sum over boundaries of (x + l) of any replica,
        when R replicas of S stages share the domains: the used domains U hold
        R S >= slots, every domain of U is on some replica's path, and that replica's
        domains A (with d in A, A in U) hold its S stages, so

            max_r path_r >= min_U max_{d in U} min_{d in A subset U, cap(A) >= S} ham(A).

        Subset dynamic programmes (n <= 12 domains; 0.0 beyond, or for one replica,
        where the most spread replica's bound already says as much)."""
        n = len(hostable)
        if R <= 1 or S <= 1 or n > _COVER_MAX_DOMAINS:
            return 0.0
        key = ("cover", A, tuple(hostable), tuple(caps), S)
        if key not in self._by_k:
            b0, ham, _ = self._path_table(A, tuple(hostable))
            full = 1 << n
            masks = np.arange(full)
            bits = ((masks[:, None] >> np.arange(n)[None, :]) & 1).astype(bool)
            capsum = bits.astype(np.int64) @ np.asarray(caps, dtype=np.int64)
            worst = np.full(full, -np.inf)  # max over d in U of the cheapest path through d
            for d in range(n):
                g = np.where(bits[:, d] & (capsum >= S), ham, np.inf)
                for i in range(n):  # g[U] = min over subsets A of U (SOS dynamic programme)
                    sel = bits[:, i]
                    g[sel] = np.minimum(g[sel], g[masks[sel] ^ (1 << i)])
                worst = np.where(bits[:, d], np.maximum(worst, g), worst)
            self._by_k[key] = (b0, capsum, worst)
        b0, capsum, worst = self._by_k[key]
        ok = (capsum >= R * S) & np.isfinite(worst)
        if not ok.any():
            return 0.0
        return (S - 1) * b0 + float(worst[ok].min())

    def wan_capacity(self, hostable: list[int]) -> float:
        """Sum of the bandwidths (bytes/s) of the links some route between two of
        ``hostable`` uses: every cross-domain byte per second passes through them."""
        names = self.pairs.names
        links = set()
        for i in hostable:
            for j in hostable:
                if i != j and (names[i], names[j]) in self.instance.routes:
                    links.update(self.instance.routes[(names[i], names[j])].links)
        return sum(self.instance.links[l].bandwidth_gbps * GBPS for l in links)

    # -- gradient synchronisation ----------------------------------------------
    def ar_coefficients(self, hostable: list[int], caps: list[int], R: int, t: int) -> dict[int, tuple]:
        """K -> (phi_K, xi_K, psi_K) for every number K of domains a stage's R replicas
        can span: AR_j >= (phi_K + xi_K) P_j + psi_K (P in parameters, seconds), phi the
        intra-domain ring, xi the cross-domain ring's volume when it shares no link."""
        pr = self.pairs
        caps_sorted = sorted(caps, reverse=True)
        held, k_min = 0, 0
        for c in caps_sorted:
            held, k_min = held + c, k_min + 1
            if held >= R:
                break
        if held < R:
            return {}
        g = BYTES_PER_PARAM_GRAD
        bin_max = pr.intra_bw[hostable].max()
        idx = list(hostable)
        n = len(idx)
        iu = np.triu_indices(n, 1)
        sym = lambda a: np.minimum(a, a.T)[iu]  # a pair, whichever direction is faster
        lat_pairs = np.sort(sym(pr.lat[np.ix_(idx, idx)]))
        inv_pairs = np.sort(sym(pr.inv_bw[np.ix_(idx, idx)]))  # ascending 1/bw = fastest first
        ring2_inv = sym(pr.ring2_inv_bw[np.ix_(idx, idx)])
        out = {}
        for K in range(max(k_min, 1), min(R, n) + 1):
            per = math.ceil(R / K)
            phi = 2 * (per - 1) / per * g / (t * bin_max) if per > 1 else 0.0
            psi = xi = 0.0
            if K >= 2:
                if K == 2:
                    inv_ring = float(ring2_inv.min())
                    lat_ring = float(lat_pairs[0])
                else:
                    inv_ring = float(inv_pairs[K - 1])
                    lat_ring = float(lat_pairs[K - 1])
                xi = 2 * (K - 1) / K * g * inv_ring
                psi = 2 * (K - 1) * lat_ring
            out[K] = (phi, xi, psi)
        return out


def stage_tables(instance, space: PlanSpace | None = None) -> StageBounds:
    cache = instance.__dict__.setdefault("_planner_cache", {})
    sb = cache.get("milp_stage_bounds")
    if sb is None:
        sb = cache["milp_stage_bounds"] = StageBounds(instance, space)
    return sb


def _min_max(lo: float, hi: float, dec, inc, iters: int = 60) -> float:
    """min over x in [lo, hi] of max(dec(x), inc(x)), dec non-increasing, inc non-decreasing."""
    if hi <= lo or dec(hi) >= inc(hi):
        return max(dec(hi), inc(hi))
    if dec(lo) <= inc(lo):
        return max(dec(lo), inc(lo))
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if dec(mid) > inc(mid):
            lo = mid
        else:
            hi = mid
    return min(max(dec(lo), inc(lo)), max(dec(hi), inc(hi)))


def stage_count_bounds(instance, shape: Shape, space: PlanSpace | None = None, forbid=(),
                       max_stages: int | None = None, spec: int | None = None) -> dict[int, float]:
    """S -> lower bound on T_est (seconds) of the plans of ``shape`` with S stages,
    for every S that has a memory-feasible partition and room (see module docstring;
    ``spec=3``: none yet)."""
    from ...problem.specversion import check_spec

    if check_spec(spec) >= 3:
        return {}
    return {S: min(per_k.values()) for S, per_k in
            _bounds_by_domains(instance, shape, space, forbid, max_stages).items()}


def _bounds_by_domains(instance, shape: Shape, space: PlanSpace | None = None, forbid=(),
                       max_stages: int | None = None) -> dict[int, dict[int, float]]:
    """S -> {k: lower bound on T_est (s) of the plans with S stages whose most spread
    replica uses exactly k domains} (cached per shape and forbidden domains)."""
    tab = stage_tables(instance, space)
    key = (shape.tp, shape.micro_batch, shape.schedule, shape.stages, shape.replicas, frozenset(forbid))
    if key not in tab._bounds:
        tab._bounds[key] = _compute_bounds(instance, shape, tab, forbid)
    out = tab._bounds[key]
    return {S: v for S, v in out.items() if not max_stages or S <= max_stages}


def _compute_bounds(instance, shape: Shape, tab, forbid) -> dict[int, dict[int, float]]:
    space = tab.space
    wl = instance.workload
    t, b, R = shape.tp, shape.micro_batch, shape.replicas
    m = shape.micro_batches(wl.global_batch_size)
    slots = {d: n for d, n in space.slots(t).items() if d not in set(forbid) and n > 0}
    if not slots:
        return {}
    index = instance.domain_index
    hostable = [index[d] for d in instance.domain_names if d in slots]
    caps = [slots[instance.domain_names[i]] for i in hostable]
    top = min(instance.max_stages, instance.num_units, sum(caps) // R)
    units = instance.units
    tok = b * wl.seq_len
    A = (min(u.out_bytes_per_token for u in units[:-1]) if len(units) > 1 else 0.0) * tok
    rate = t * instance.gpu.flops_per_s
    f_tot = space.flops_total * tok / rate
    c_tot = (1 + space.bwd) * f_tot
    p = [u.params for u in units]
    p_tot, p_unit, p_lo = sum(p), max(p), min(p)
    # seconds of compute per parameter, at most (a stage's c_j <= rho * P_j)
    c_u = [(1 + space.bwd) * u.fwd_flops_per_token * tok / rate for u in units]
    rho = max((c / q for c, q in zip(c_u, p) if q > 0), default=math.inf)
    if any(q <= 0 and c > 0 for c, q in zip(c_u, p)):
        rho = math.inf
    if R > 1:
        ar = tab.ar_coefficients(hostable, caps, R, t)
        if not ar:
            return {}
        k_R = min(ar)
    else:
        ar, k_R = {1: (0.0, 0.0, 0.0)}, 1
    ar_multi = {K: v for K, v in ar.items() if K >= 2}
    # at most sum(k largest cap_d // R) stages have all their replicas in one domain
    # when every replica uses at most k domains (those stages' domains are used by all)
    per_dom = sorted((c // R for c in caps), reverse=True)
    top_cap = [0]
    for c in sorted(caps, reverse=True):
        top_cap.append(top_cap[-1] + c)
    top_cap += [top_cap[-1]] * (len(caps) + 2)
    pr = tab.pairs
    x_wan = min((A * pr.inv_bw[i, j] for i in hostable for j in hostable if i != j), default=math.inf)
    x_in = A / pr.intra_bw[hostable].max()
    bw_sum = tab.wan_capacity(hostable)  # bytes/s over every link a route between them uses
    lat_min = min((min(pr.lat[i, j], pr.lat[j, i]) for i in hostable for j in hostable if i != j), default=0.0)
    out = {}
    for S in ([shape.stages] if shape.stages else range(1, top + 1)):
        if S > top or S * R > sum(caps):
            continue
        cuts = space.partition(t, b, shape.schedule, S, m)
        if cuts is None:
            continue
        c_max = max(space.compute_time(space.table.interval(a, e)[0], t, b) for a, e in cuts)
        paths = tab.path_by_domains(A, hostable, caps, S)
        fit_one = sum(c // S for c in caps)  # replicas that can sit in one domain each
        if R > fit_one:  # some replica must cross: the most spread uses two domains or more
            paths = {k: v for k, v in paths.items() if k >= 2}
        pmax = max(p_tot / S, p_unit)
        best = {}
        b0 = tab._path_table(A, tuple(hostable))[0] if S > 1 else 0.0

        def front(q0):
            """The 1f1b window [0, S - 1] (Little's law at the front, round trip q0): it
            counts (SPEC 7 v2) only when the front stage holds fewer than m, w_0 = S < m."""
            return q0 / S if S < m else 0.0

        def vol_row(flows):
            """T bound from the replica owning the flow on the most loaded link: with F
            crossing flows some link has users / bandwidth >= F / sum of bandwidths."""
            if flows <= 0 or bw_sum <= 0 or S < 2:
                return (m - 1) * c_max + c_tot
            xv = A * flows / bw_sum
            qv = c_tot + 2 * (xv + lat_min) + 2 * (S - 2) * b0
            tv = max(c_max, 2 * xv) if shape.schedule == "gpipe" else max(c_max, xv, front(qv))
            return (m - 1) * tv + qv

        # the replica with the longest path (maybe not the most spread one): its own
        # T_r >= (m - 1) tau_r + Q_0 with tau_r >= c_max and (1f1b) Little's law
        cover = tab.covering_path(A, hostable, caps, S, R) if S > 1 else 0.0
        q_c = c_tot + 2 * cover
        if shape.schedule != "gpipe" and S > 1:
            # Little's law at every stage with the partition it leaves (any replica)
            lsuf = [min(tab.path_by_domains(A, hostable, caps, S - j).values(), default=0.0) for j in range(S)]
            w = [min(m, S - j) for j in range(S)]
            tau_l = little_period(space.table, w, lsuf, space.compute_time(1.0, t, b),
                                  lambda j: instance.memory_limit_bytes * t, lambda j: w[j] * tok,
                                  tau0=max(c_max, front(c_tot + 2 * lsuf[0])), m=m)
        else:
            tau_l = c_max
        val_cover = (m - 1) * (c_max if shape.schedule == "gpipe" else max(tau_l, front(q_c))) + q_c
        for k, path in paths.items():
            x_lb = 0.0 if S == 1 else (x_wan if k >= 2 else min(x_in, x_wan))
            q0 = c_tot + 2 * path
            if shape.schedule == "gpipe":
                tau = max(c_max, 2 * x_lb)
            else:
                tau = max(tau_l, x_lb, front(q0))
            val_k = (m - 1) * tau + q0  # the most spread replica
            if best and val_k >= min(best.values()):
                best[k] = val_k  # valid for k, and k cannot lower the minimum: skip the rest
                continue
            if R == 1:
                best[k] = max(val_k, vol_row(k - 1))
                continue
            # stages whose replicas all sit in one domain ("single"): in k0 <= k domains
            # D0 that every replica uses, at most cap_d // R per domain; each replica then
            # holds at least S - (its k - k0 other domains' slots) stages in D0, so
            # R * (S - topcap(k - k0)) <= cap(D0) <= topcap(k0)
            single_max = max((sum(per_dom[:k0]) for k0 in range(k + 1)
                              if R * max(0, S - top_cap[k - k0]) <= top_cap[k0]), default=0)
            if k_R >= 2:
                single_max = 0
            base = (m - 1) * tau + f_tot + path
            vals = []
            for c0 in range(min(single_max, S) + 1):
                # replicas inside one domain: with single stages they must all be in the
                # one domain d of D0, which then also holds R * c0 slots of single stages
                if c0 == 0:
                    r0 = fit_one
                elif c0 == S:
                    r0 = R if any(c >= R * S for c in caps) else 0
                else:
                    r0 = max([(c - R * c0) // (S - c0) for c in caps if c // R >= c0] + [0])
                cross_rows = R - min(R, r0)
                if k == 1 and cross_rows:
                    continue  # every replica inside one domain is impossible here
                flows = (k - 1) + max(0, cross_rows - 1) if k >= 2 else cross_rows
                multi = S - c0  # stages spanning >= 2 domains
                val = max(val_k, vol_row(flows))
                pool = ar_multi if multi >= S else ar
                if not pool:
                    continue  # every stage across domains, but one domain hosts them all
                val = max(val, base + min((ph + xi) * pmax + ps for ph, xi, ps in pool.values()))
                if k == 1:
                    # every replica inside one domain: each stage's replicas span the same
                    # K >= k_one domains (at most cap_d // S replicas per domain), so the S
                    # rings are one ring and share each of its links S times
                    held, k1 = 0, 0
                    for c in sorted((c // S for c in caps), reverse=True):
                        held, k1 = held + c, k1 + 1
                        if held >= R:
                            break
                    same = [(ph + S * xi) * pmax + ps for K, (ph, xi, ps) in ar.items() if K >= k1]
                    if same:
                        val = max(val, base + min(same))
                if multi and ar_multi:
                    kap = min(ar_multi)
                    c_k = 4 * (kap - 1) / kap  # gradient bytes x 2(K-1)/K per parameter, K >= kap
                    psi = min(ps for _, _, ps in ar_multi.values())

                    def inc(X, multi=multi, c_k=c_k, kap=kap, psi=psi):  # multi stages hold X
                        per = min((ph + xi) * X / multi + ps for ph, xi, ps in ar_multi.values())
                        vol = psi + c_k * kap * X / bw_sum if bw_sum > 0 else 0.0
                        return base + max(per, vol)

                    if multi >= S:
                        val = max(val, inc(p_tot))
                    elif math.isfinite(rho):
                        # the other S - multi stages hold compute >= c_tot - rho * X
                        dec = lambda X, multi=multi: (m - 1) * max(tau, (c_tot - rho * X) / (S - multi)) + q0
                        val = max(val, _min_max(multi * p_lo, p_tot, dec, inc, iters=40))
                    else:
                        val = max(val, inc(multi * p_lo))
                vals.append(val)
            if vals:
                best[k] = min(vals)
        if best:
            out[S] = {k: max(v, val_cover) for k, v in best.items()}
    return out


def cost_stage_bounds(instance, shape: Shape, space: PlanSpace | None = None, forbid=(),
                      max_stages: int | None = None, spec: int | None = None) -> dict[int, float]:
    """S -> lower bound on the cost per iteration (with T_est for T) of the plans of
    ``shape`` with S stages.

    GPU cost: T_est times the prices of the plan's R S t GPUs, at least the R S
    cheapest stage slots; for one replica spread over exactly k domains, the S
    cheapest slots of some k domains holding S stages (with T_est at least the
    bound for k).  WAN cost: every boundary that crosses domains moves 2 A m
    bytes (the replicas that cannot sit in one domain cross at least once, the
    most spread replica k - 1 times); when no domain holds all R replicas of a
    stage, every stage's ring moves at least 2 (k_R - 1) G_j bytes.  ``spec=3``: none yet."""
    from ...problem.specversion import check_spec

    if check_spec(spec) >= 3:
        return {}
    tab = stage_tables(instance, space)
    space = tab.space
    per = _bounds_by_domains(instance, shape, space, forbid, max_stages)
    if not per:
        return {}
    wl = instance.workload
    t, b, R = shape.tp, shape.micro_batch, shape.replicas
    m = shape.micro_batches(wl.global_batch_size)
    slots = {d: n for d, n in space.slots(t).items() if d not in set(forbid) and n > 0}
    index = instance.domain_index
    hostable = [index[d] for d in instance.domain_names if d in slots]
    caps = [slots[instance.domain_names[i]] for i in hostable]
    price = [instance.domains[i].price_per_gpu_hour * t for i in hostable]  # per slot-hour
    units = instance.units
    A = (min(u.out_bytes_per_token for u in units[:-1]) if len(units) > 1 else 0.0) * b * wl.seq_len
    wp = instance.options.wan_price_per_gb / 1e9
    p_tot = sum(u.params for u in units)
    n = len(hostable)
    order = sorted(range(n), key=lambda i: price[i])

    def cheapest(count, members=None):  # price of the `count` cheapest slots (among members)
        total, left = 0.0, count
        for i in order:
            if members is not None and not members[i]:
                continue
            take = min(caps[i], left)
            total, left = total + take * price[i], left - take
            if not left:
                return total
        return math.inf

    held, k_R = 0, 0
    for c in sorted(caps, reverse=True):
        held, k_R = held + c, k_R + 1
        if held >= R:
            break
    ring_bytes = 2 * (k_R - 1) * BYTES_PER_PARAM_GRAD * p_tot if R > 1 and k_R >= 2 else 0.0
    small = n <= 12  # per-subset slot prices for one replica
    if small:
        masks = np.arange(1 << n)
        bits = ((masks[:, None] >> np.arange(n)[None, :]) & 1).astype(bool)
        pc = bits.sum(axis=1)
        capsum = bits.astype(np.int64) @ np.asarray(caps, dtype=np.int64)
    out = {}
    for S, by_k in per.items():
        fit_one = sum(c // S for c in caps)
        cross_rows = max(0, R - fit_one)
        best = math.inf
        one = {}  # k -> the S cheapest slots of some k domains holding S stages (any replica)
        if small:
            for k in range(1, min(n, S) + 1):
                sel = np.nonzero((pc == k) & (capsum >= S))[0]
                one[k] = min((cheapest(S, bits[i]) for i in sel), default=math.inf)
        for k, T in by_k.items():
            if R == 1 and small:
                gpu = one[k]
            else:
                gpu = cheapest(R * S)
            crossings = max(cross_rows, k - 1 + max(0, cross_rows - 1)) if R > 1 else k - 1
            wan = wp * (2 * A * m * crossings + ring_bytes)
            best = min(best, T * gpu / 3600.0 + wan)
        if R > 1 and small and one:
            # every replica alone: its S slots' prices times T (>= the smallest bound over
            # k) and its own crossings, whatever the others do.  A replica may use any
            # number k of domains (by_k bounds only the most spread one), except that the
            # cross_rows replicas that cannot sit in one domain use k >= 2
            T_min = min(by_k.values())
            alone = {k: T_min * one[k] / 3600.0 + wp * 2 * A * m * (k - 1) for k in one}
            any_k = min(alone.values())
            spread = min((v for k, v in alone.items() if k >= 2), default=math.inf)
            if cross_rows and math.isfinite(spread):
                total = (R - cross_rows) * any_k + cross_rows * spread
            else:
                total = R * any_k
            best = max(best, total + wp * ring_bytes)
        if math.isfinite(best):
            out[S] = best
    return out


def ring_lower_figures(D) -> dict[int, tuple[float, float]]:
    """k -> (smallest 1 / ring bandwidth, smallest ring latency) any ring of k
    domains of the MILP data ``D`` can have (model units), for k >= 2.

    k = 2: the hops a -> b and b -> a share their routes' links; k >= 3: the
    ring's k hops are k distinct pairs, so its slowest hop is no faster than
    the k-th fastest pair and its longest latency no shorter than the k-th
    shortest (each pair taken alone on its route)."""
    doms = D.domains
    inv: dict[frozenset, float] = {}
    lat: dict[frozenset, float] = {}
    ring2: dict[frozenset, float] = {}
    for (a, b), (links, l) in D.routes.items():
        key = frozenset((a, b))
        v = max((1.0 / D.link_bw[k] for k in links), default=0.0)
        inv[key] = min(inv.get(key, math.inf), v)
        lat[key] = min(lat.get(key, math.inf), l)
        if (b, a) in D.routes:
            users: dict[int, int] = {}
            for k in list(links) + list(D.routes[(b, a)][0]):
                users[k] = users.get(k, 0) + 1
            v2 = max((u / D.link_bw[k] for k, u in users.items()), default=0.0)
            ring2[key] = min(ring2.get(key, math.inf), v2)
    invs, lats = sorted(inv.values()), sorted(lat.values())
    out = {}
    for k in range(2, len(doms) + 1):
        if k == 2:
            out[k] = (min(ring2.values(), default=0.0), lats[0] if lats else 0.0)
        else:
            out[k] = (invs[k - 1] if len(invs) >= k else invs[-1] if invs else 0.0,
                      lats[k - 1] if len(lats) >= k else lats[-1] if lats else 0.0)
    return out
