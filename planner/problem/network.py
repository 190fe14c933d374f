"""Routes, network states and link sharing (SPEC sections 2, 5 and 8).

Routes are fixed on the instance's base network: the path of least total
latency, ties to fewer hops, then to the lexicographically smallest list of
domain names.  A *network state* gives every link a bandwidth (Gbit/s, 0 =
down) and a one-way latency (ms); a batch of K states is two arrays of
shape (K, links).  A set of *flows* (each a route) shares every link
equally among the flows that use it; a flow gets the smallest share along
its route.

Example
-------
>>> import numpy as np
>>> shares = flow_bandwidth(np.array([[100.0, 40.0]]), [[0], [0, 1]])
>>> shares.tolist()  # bytes/s: link 0 shared by two flows, link 1 by one
[[6250000000.0, 5000000000.0]]
"""

from __future__ import annotations

import heapq
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


def shortest_routes(instance) -> dict[tuple[str, str], Route]:
    """Route for every ordered pair of distinct, connected domains.

    Dijkstra with the key (latency, hops, node names); latency is compared
    after rounding to 1e-9 ms so that float summation order cannot break a
    tie the data intends.
    """
    g = instance.graph
    routes: dict[tuple[str, str], Route] = {}
    for src in instance.domain_names:
        best: dict[str, tuple] = {}
        heap = [(0.0, 0, (src,), ())]
        while heap:
            lat, hops, path, links = heapq.heappop(heap)
            node = path[-1]
            if node in best:
                continue
            best[node] = (lat, hops, path, links)
            for nbr, data in g[node].items():
                if nbr not in best:
                    new_lat = round(lat + data["latency_ms"], 9)
                    heapq.heappush(heap, (new_lat, hops + 1, path + (nbr,), links + (data["index"],)))
        for dst, (lat, _, path, links) in best.items():
            if dst != src:
                # recompute the exact sum along the path (rounding was only for ordering)
                exact = sum(instance.links[i].latency_ms for i in links)
                routes[(src, dst)] = Route(path, links, exact)
    return routes


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
