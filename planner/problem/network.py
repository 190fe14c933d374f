"""Routes, network states and link sharing (SPEC sections 2, 5 and 8).

Routes are fixed on the instance's base network: the path of least total
latency, ties to fewer hops, then to the lexicographically smallest list of
domain names (SPEC v2).  Under SPEC v3 a pair of domains joined by a link
uses that link whatever the latencies elsewhere (:meth:`Routes.with_direct_links`).
A *network state* gives every link a bandwidth (Gbit/s, 0 = down) and a
one-way latency (ms); a batch of K states is two arrays of shape (K, links).

Transfers share *resources* (:class:`Resources`): under v2 each undirected
link; under v3 each link direction and each domain's uplink out and in.  A set
of *flows* (each a route) shares every link equally among the flows that use
it; a flow gets the smallest share along its route (:func:`flow_bandwidth`).

Example
-------
>>> import numpy as np
>>> shares = flow_bandwidth(np.array([[100.0, 40.0]]), [[0], [0, 1]])
>>> shares.tolist()  # bytes/s: link 0 shared by two flows, link 1 by one
[[6250000000.0, 5000000000.0]]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import InputError

GBPS = 1e9 / 8  # bytes/s per Gbit/s
MS = 1e-3  # seconds per millisecond


@dataclass(frozen=True)
class Route:
    """A path between two domains on the base network."""

    nodes: tuple[str, ...]
    links: tuple[int, ...]  # link indices along the path
    latency_ms: float  # on the base network

    @property
    def hops(self) -> int:
        return len(self.links)


class Routes(Mapping):
    """Every route of an instance's base network: a read-only mapping
    ``(src, dst) -> Route`` over the ordered pairs of distinct, connected domains.

    Held as arrays over domain indices (instance order): ``pred[s, v]`` the
    domain before v on the route from s (-1: none), ``hops[s, v]`` and
    ``link[u, v]`` the index of the link u-v (-1: none).  A :class:`Route` is
    built on first access and kept; iteration runs over sources, then
    destinations, in instance order.  At 300 domains the arrays take ~1 MB where
    89,700 ``Route`` objects would take ~35 MB.

    >>> routes = shortest_routes(instance)              # doctest: +SKIP
    >>> routes[("a", "c")].nodes, ("a", "c") in routes   # doctest: +SKIP
    (('a', 'b', 'c'), True)
    """

    def __init__(self, names, link_latency_ms, link, pred, hops, direct: bool = False):
        self.names = tuple(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self._lat = link_latency_ms  # per link, ms (the instance's figures)
        self.link, self.pred, self.hops = link, pred, hops
        self.direct = direct  # SPEC v3: a linked pair uses its link
        self._cache: dict[tuple[str, str], Route] = {}

    def with_direct_links(self) -> "Routes":
        """The SPEC v3 routes (section 2): a pair joined by a link uses that link, every
        other pair its least-latency route as here.  ``pred`` and ``hops`` stay those
        of the least-latency routes (a longer route is walked along them), so the two
        objects share their arrays."""
        return Routes(self.names, self._lat, self.link, self.pred, self.hops, direct=True)

    def __getitem__(self, key) -> Route:
        route = self._cache.get(key)
        if route is not None:
            return route
        a, b = key
        s, v = self.index.get(a), self.index.get(b)
        if s is None or v is None or s == v or self.pred[s, v] < 0:
            raise KeyError(key)
        if self.direct and self.link[s, v] >= 0:
            i = int(self.link[s, v])
            route = Route((a, b), (i,), self._lat[i])
            self._cache[key] = route
            return route
        nodes, links = [v], []
        while v != s:
            u = int(self.pred[s, v])
            links.append(int(self.link[u, v]))
            nodes.append(u)
            v = u
        nodes.reverse()
        links.reverse()
        # the exact sum along the path, in path order (the search compared rounded sums)
        route = Route(tuple(self.names[i] for i in nodes), tuple(links), sum(self._lat[i] for i in links))
        self._cache[key] = route
        return route

    def __contains__(self, key) -> bool:
        try:
            a, b = key
        except (TypeError, ValueError):
            return False
        s, v = self.index.get(a), self.index.get(b)
        return s is not None and v is not None and s != v and self.pred[s, v] >= 0

    def __iter__(self):
        for s, v in zip(*np.nonzero(self.pred >= 0)):
            yield self.names[s], self.names[v]

    def __len__(self) -> int:
        return int(np.count_nonzero(self.pred >= 0))

    def link_paths(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        """Links of the routes from ``src[i]`` to ``dst[i]`` (domain indices), in path
        order: an (n_pairs, longest) int array padded with -1, and the hop counts.
        Every pair must have a route (distinct, connected domains)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        hops = self.hops[src, dst].astype(np.int64)
        if len(src) and (hops < 1).any():
            i = int(np.argmax(hops < 1))
            raise KeyError((self.names[src[i]], self.names[dst[i]]))
        direct = self.link[src, dst] >= 0 if self.direct else np.zeros(len(src), dtype=bool)
        hops = np.where(direct, 1, hops)
        out = np.full((len(src), int(hops.max(initial=0))), -1, dtype=np.int64)
        if direct.any():
            out[direct, 0] = self.link[src[direct], dst[direct]]
        walk = np.nonzero(~direct)[0]
        cur = dst[walk].copy()
        for step in range(out.shape[1]):  # from the last link back
            on = np.nonzero(hops[walk] > step)[0]
            w = walk[on]
            u = self.pred[src[w], cur[on]]
            out[w, hops[w] - 1 - step] = self.link[u, cur[on]]
            cur[on] = u
        return out, hops

    def _direct(self, out: np.ndarray, per_link) -> np.ndarray:
        """``out`` with the figure of its link on every linked pair (v3 routes)."""
        if self.direct:
            s, v = np.nonzero(self.link >= 0)
            out[s, v] = np.asarray(per_link, float)[self.link[s, v]]
        return out

    def _by_hops(self, init, step) -> np.ndarray:
        """(n, n) figures built along every route, hop level by hop level:
        ``out[s, v] = step(out[s, u], link u-v)`` with u the domain before v."""
        n = len(self.names)
        out = np.array(init, dtype=float)
        for h in range(1, int(self.hops.max(initial=0)) + 1):
            s, v = np.nonzero(self.hops == h)
            u = self.pred[s, v]
            out[s, v] = step(out[s, u], self.link[u, v])
        return out

    def bottleneck_gbps(self, bandwidth_gbps) -> np.ndarray:
        """(n, n) smallest link bandwidth along each route for per-link figures
        ``bandwidth_gbps`` (inf on the diagonal, 0 where there is no route)."""
        bw = np.asarray(bandwidth_gbps, float)
        n = len(self.names)
        init = np.zeros((n, n))
        np.fill_diagonal(init, np.inf)
        return self._direct(self._by_hops(init, lambda prev, li: np.minimum(prev, bw[li])), bw)

    def latency_matrix(self) -> np.ndarray:
        """(n, n) base latency (ms) of each route, the same sum in the same order as
        ``Route.latency_ms``, so the same bits (0 on the diagonal, inf where no route)."""
        lat = np.asarray(self._lat, float)
        n = len(self.names)
        init = np.full((n, n), np.inf)
        np.fill_diagonal(init, 0.0)
        return self._direct(self._by_hops(init, lambda prev, li: prev + lat[li]), lat)


def shortest_routes(instance) -> Routes:
    """Route for every ordered pair of distinct, connected domains (SPEC 2).

    The key is (latency, hops, list of names): latency is summed link by link
    from the source and rounded to 1e-9 ms at each step, so that float summation
    order cannot break a tie the data intends.  All sources are searched at once
    on arrays (Dijkstra on (latency, hops), one settled domain per source per
    step, O(n^3) vector work: ~0.1 s at 300 domains); then, hop level by hop
    level, each domain takes the predecessor whose own route is lexicographically
    smallest among those that reach it on a least (latency, hops) path.
    """
    names = instance.domain_names  # all it reads: the names and the links
    n = len(names)
    idx = {name: i for i, name in enumerate(names)}
    lat_link = [l.latency_ms for l in instance.links]
    link = np.full((n, n), -1, dtype=np.int32)
    W = np.full((n, n), np.inf)
    for i, l in enumerate(instance.links):
        a, b = idx[l.a], idx[l.b]
        link[a, b] = link[b, a] = i
        W[a, b] = W[b, a] = l.latency_ms
    D, H = _latency_hops(W)
    pred = _lexicographic_predecessors(W, D, H, names)
    return Routes(names, lat_link, link, pred, H)


def _adjacency(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Neighbours of every domain padded to the largest degree: (n, deg) indices
    (padding: n, a dummy column) and latencies (padding: inf)."""
    n = W.shape[0]
    linked = np.isfinite(W)
    deg = linked.sum(axis=1)
    width = max(int(deg.max(initial=0)), 1)
    nb = np.full((n, width), n, dtype=np.int64)
    wb = np.full((n, width), np.inf)
    u, v = np.nonzero(linked)  # row-major: grouped by u, v ascending
    col = np.arange(len(u)) - np.repeat(np.cumsum(deg) - deg, deg)
    nb[u, col] = v
    wb[u, col] = W[u, v]
    return nb, wb


def _latency_hops(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least rounded latency D and, among those paths, fewest hops H from every
    source (rows) to every domain; D = inf and H = -1 where there is no path.

    Each step settles, for every source at once, its unsettled domain of least
    (D, H) and relaxes that domain's links.  The order (D, H) is kept as one
    int64 per entry, ``rint(D * 1e9) * 1024 + H`` (D is a multiple of 1e-9 ms),
    so a step costs one argmin; when latencies are too large for it (a path
    over ~9,000 s) the two arrays are compared instead."""
    n = W.shape[0]
    nb, wb = _adjacency(W)
    N = n + 1  # one dummy column (index n) absorbs the padding of the neighbour lists
    D = np.full((n, N), np.inf)
    D[np.arange(n), np.arange(n)] = 0.0
    H = np.zeros((n, N), dtype=np.int64)
    done = np.zeros((n, N), dtype=bool)
    done[:, n] = True
    top = np.iinfo(np.int64).max
    finite = W[np.isfinite(W)]
    packed = n < 1024 and float(finite.sum()) < 9e6  # every path's key fits in int64
    key = np.full((n, N), top, dtype=np.int64)  # (D, H) of unsettled entries, top when settled
    key[np.arange(n), np.arange(n)] = 0
    Df, Hf, donef, keyf = D.ravel(), H.ravel(), done.ravel(), key.ravel()
    rows = np.arange(n)
    for _ in range(n):
        if packed:
            u = key.argmin(axis=1)
            live = key[rows, u] != top
        else:
            Dm = np.where(done, np.inf, D)
            low = Dm.min(axis=1)
            live = np.isfinite(low)
            u = np.where(Dm == low[:, None], H, top).argmin(axis=1)
        if not live.all():
            if not live.any():
                break
            r, u = rows[live], u[live]
        else:
            r = rows
        here = r * N + u
        donef[here] = True
        keyf[here] = top
        flat = (r * N)[:, None] + nb[u]  # (sources, degree) entries to relax
        cand = np.round(Df[here][:, None] + wb[u], 9)
        hu = np.broadcast_to(Hf[here][:, None] + 1, flat.shape)
        Dc, Hc = Df[flat], Hf[flat]
        better = ~donef[flat] & ((cand < Dc) | ((cand == Dc) & (hu < Hc)))
        fb, cb, hb = flat[better], cand[better], hu[better]
        Df[fb], Hf[fb] = cb, hb
        if packed:
            keyf[fb] = np.rint(cb * 1e9).astype(np.int64) * 1024 + hb
    D, H = D[:, :n], H[:, :n]
    H[~np.isfinite(D)] = -1
    return D, H


def _lexicographic_predecessors(W, D, H, names) -> np.ndarray:
    """pred[s, v]: among the neighbours u of v with round(D[s,u] + W[u,v], 9) == D[s,v]
    and H[s,u] + 1 == H[s,v], the one whose route from s is lexicographically smallest
    (by names).  Routes of one hop count are ranked per source, level by level: the
    rank of (rank of the predecessor's route, name of v).  The candidate (s, u, v)
    triples of a level are enumerated from whichever side is smaller: the edges out
    of the previous level's domains or the edges into this level's."""
    n = W.shape[0]
    nb, wb = _adjacency(W)
    deg = (nb < n).sum(axis=1)
    name_rank = np.empty(n, dtype=np.int64)
    name_rank[sorted(range(n), key=names.__getitem__)] = np.arange(n)
    pred = np.full((n, n), -1, dtype=np.int32)
    rank = np.zeros((n, n), dtype=np.int64)  # rank of the route s -> v among the routes of its hop count
    prev_s, prev_v = np.arange(n), np.arange(n)  # level 0: each source itself
    for h in range(1, int(H.max(initial=0)) + 1):
        s, v = np.nonzero(H == h)
        if not len(s):
            break
        if deg[prev_v].sum() <= deg[v].sum():  # from the previous level outwards
            ss, uu, vv = _expand(prev_s, prev_v, nb, deg)
            keep = H[ss, vv] == h
        else:  # into this level (the graph is undirected: in-neighbours = neighbours)
            ss, vv, uu = _expand(s, v, nb, deg)
            keep = H[ss, uu] == h - 1
        ss, uu, vv = ss[keep], uu[keep], vv[keep]
        tight = np.round(D[ss, uu] + W[uu, vv], 9) == D[ss, vv]
        ss, uu, vv = ss[tight], uu[tight], vv[tight]
        # per (s, v) the tight u of smallest rank
        o = np.lexsort((rank[ss, uu], vv, ss))
        ss, vv, uu = ss[o], vv[o], uu[o]
        first = np.ones(len(ss), dtype=bool)
        first[1:] = (ss[1:] != ss[:-1]) | (vv[1:] != vv[:-1])
        ss, vv, uu = ss[first], vv[first], uu[first]
        pred[ss, vv] = uu
        # rank the level's routes per source by (rank of the predecessor's route, name of v)
        o = np.lexsort((name_rank[vv], rank[ss, uu], ss))
        ss, vv = ss[o], vv[o]
        newsrc = np.ones(len(ss), dtype=bool)
        newsrc[1:] = ss[1:] != ss[:-1]
        starts = np.maximum.accumulate(np.where(newsrc, np.arange(len(ss)), 0))
        rank[ss, vv] = np.arange(len(ss)) - starts
        prev_s, prev_v = s, v
    return pred


def _expand(s, x, nb, deg):
    """(s, x, y) for every pair (s, x) and every neighbour y of x."""
    k = deg[x]
    ss, xx = np.repeat(s, k), np.repeat(x, k)
    col = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
    return ss, xx, nb[xx, col]


@dataclass(frozen=True)
class NetworkStates:
    """K network states: per-link bandwidth (Gbit/s) and one-way latency (ms).

    Arrays have shape (K, L) with L = number of links in instance order.
    """

    bandwidth_gbps: np.ndarray
    latency_ms: np.ndarray

    def __post_init__(self):
        bw = np.atleast_2d(np.asarray(self.bandwidth_gbps, dtype=float))
        lat = np.atleast_2d(np.asarray(self.latency_ms, dtype=float))
        if bw.shape != lat.shape:
            raise InputError(f"bandwidth shape {bw.shape} != latency shape {lat.shape}", "network state")
        if np.any(bw < 0) or np.any(np.isnan(bw)):
            raise InputError("bandwidth must be >= 0 (0 = link down)", "network state")
        if np.any(lat < 0) or np.any(np.isnan(lat)):
            raise InputError("latency must be >= 0", "network state")
        object.__setattr__(self, "bandwidth_gbps", bw)
        object.__setattr__(self, "latency_ms", lat)

    @property
    def count(self) -> int:
        return self.bandwidth_gbps.shape[0]

    @classmethod
    def base(cls, instance, repeat: int = 1) -> "NetworkStates":
        """The instance's own figures, ``repeat`` times."""
        bw = np.array([[l.bandwidth_gbps for l in instance.links]] * repeat, dtype=float)
        lat = np.array([[l.latency_ms for l in instance.links]] * repeat, dtype=float)
        return cls(bw.reshape(repeat, len(instance.links)), lat.reshape(repeat, len(instance.links)))

    def check_links(self, instance) -> None:
        if self.bandwidth_gbps.shape[1] != len(instance.links):
            raise InputError(f"network state has {self.bandwidth_gbps.shape[1]} links, the instance "
                             f"{len(instance.links)}", "network state")


class Resources:
    """The resources transfers share (SPEC 5), as integer ids with a capacity per state.

    SPEC v2 (``directed=False``): resource i is the undirected link i; both
    directions of a transfer use it.  SPEC v3 (``directed=True``): link i from its
    ``a`` end to its ``b`` end is ``2 i``, from ``b`` to ``a`` ``2 i + 1`` (full
    duplex: each carries ``bandwidth_gbps``); the uplink out of domain d is
    ``2 L + d`` and into d ``2 L + D + d``, for domains with ``uplink_gbps`` only.
    A transfer uses the links of its path in its direction and the uplinks out
    of its first and into its last domain (domains passed through are not charged).

    >>> res = Resources(instance, directed=True)                    # doctest: +SKIP
    >>> res.paths(src, dst, *instance.routes.link_paths(src, dst))  # (n, width) ids, -1 padded
    """

    def __init__(self, instance, directed: bool):
        self.directed = directed
        idx = {name: i for i, name in enumerate(instance.domain_names)}
        self.L, self.D = len(instance.links), len(idx)
        self.ends = np.array([[idx[l.a], idx[l.b]] for l in instance.links], dtype=np.int64).reshape(-1, 2)
        up = [d.uplink_gbps for d in instance.domains] if directed else [None] * self.D
        self.uplink_gbps = np.array([np.inf if u is None else float(u) for u in up])
        self.has_uplink = np.isfinite(self.uplink_gbps)
        self.count = 2 * self.L + 2 * self.D if directed else self.L

    def paths(self, src, dst, links, hops, reverse: bool = False) -> np.ndarray:
        """Resource ids of transfers from ``src[i]`` to ``dst[i]`` (domain indices) along
        ``links[i, :hops[i]]`` (:meth:`Routes.link_paths`): an (n, width) int array
        padded with -1.  ``reverse``: the transfers go the other way along the same
        links (a boundary's backward channel; under v2 the same resources)."""
        links = np.asarray(links, dtype=np.int64)
        if not self.directed:
            return links
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        on = links >= 0
        safe = np.where(on, links, 0)
        out = np.full((len(src), links.shape[1] + 2), -1, dtype=np.int64)
        cur = src.copy()
        for step in range(links.shape[1]):  # walk from src: a link left from its a end is 2i
            li, live = safe[:, step], on[:, step]
            a, b = self.ends[li, 0], self.ends[li, 1]
            backwards = (cur != a).astype(np.int64)
            out[live, step] = (2 * li + (backwards ^ reverse))[live]
            cur = np.where(live, a + b - cur, cur)
        first, last = (dst, src) if reverse else (src, dst)
        col = np.asarray(hops, dtype=np.int64)
        for ids, base in ((first, 2 * self.L), (last, 2 * self.L + self.D)):
            has = self.has_uplink[ids]
            out[has, col[has]] = base + ids[has]
            col = col + has
        return out[:, :max(int(col.max(initial=0)), 1)]

    def capacity_gbps(self, bandwidth_gbps: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """(K, len(ids)) capacity in Gbit/s of resources ``ids`` under K states: a
        link's bandwidth in the state (each direction), an uplink's ``uplink_gbps``."""
        bw = np.atleast_2d(bandwidth_gbps)
        if not self.directed:
            return bw[:, ids]
        ids = np.asarray(ids, dtype=np.int64)
        link = ids < 2 * self.L
        if link.all():
            return bw[:, ids // 2]
        out = np.empty((bw.shape[0], len(ids)))
        out[:, link] = bw[:, ids[link] // 2]
        out[:, ~link] = self.uplink_gbps[(ids[~link] - 2 * self.L) % self.D]
        return out


def flow_bandwidth(bandwidth_gbps: np.ndarray, routes: Sequence[Sequence[int]]) -> np.ndarray:
    """Bytes/s of each flow, shape (K, flows), with equal sharing per link.

    ``routes[f]`` lists the link indices flow f crosses; a link used by n
    flows gives each ``bandwidth / n``; a flow gets its smallest share.
    Flows with an empty route get ``inf`` (the caller handles intra-domain).
    """
    bw = np.atleast_2d(bandwidth_gbps)
    K = bw.shape[0]
    if not routes:
        return np.full((K, 0), np.inf)
    used = sorted({i for links in routes for i in links})
    col = {link: c for c, link in enumerate(used)}
    users = np.zeros(len(used))
    for links in routes:
        for i in links:
            users[col[i]] += 1
    share = bw[:, used] * (GBPS / users)  # only the links some flow crosses
    out = np.full((K, len(routes)), np.inf)
    # single-link routes (the common case on a mesh): one gather for all
    single = [f for f, links in enumerate(routes) if len(links) == 1]
    if single:
        out[:, single] = share[:, [col[routes[f][0]] for f in single]]
    for f, links in enumerate(routes):
        if len(links) > 1:
            out[:, f] = share[:, [col[i] for i in links]].min(axis=1)
    return out


def flow_latency(latency_ms: np.ndarray, routes: Sequence[Sequence[int]]) -> np.ndarray:
    """Seconds of one-way latency of each flow, shape (K, flows)."""
    lat = np.atleast_2d(latency_ms)
    out = np.zeros((lat.shape[0], len(routes)))
    single = [f for f, links in enumerate(routes) if len(links) == 1]
    if single:
        out[:, single] = lat[:, [routes[f][0] for f in single]]
    for f, links in enumerate(routes):
        if len(links) > 1:
            out[:, f] = lat[:, list(links)].sum(axis=1)
    return out * MS


def instance_at(instance, states: NetworkStates, k: int):
    """The instance with its links set to state k (a down link keeps a trickle of
    1e-6 Gbit/s so the instance stays valid and planners avoid it)."""
    data = instance.to_dict()
    for i, link in enumerate(data["links"]):
        link["bandwidth_gbps"] = max(float(states.bandwidth_gbps[k, i]), 1e-6)
        link["latency_ms"] = float(states.latency_ms[k, i])
    return type(instance).from_dict(data)
