"""Per-stage figures of a plan and its communication under network states
(SPEC section 5).  Everything is in SI units: seconds, bytes, bytes/s.

``PlanFigures(instance, plan)`` precomputes what does not depend on the
network state (compute times, boundary bytes, memory, which links each flow
crosses); :meth:`PlanFigures.comm` turns a batch of K network states into
transfer times, latencies and gradient-synchronisation times for every
replica, and :meth:`PlanFigures.comm_groups` the same for one replica per
group of replicas with identical boundary figures (``fig.groups`` of them,
``fig.group_of[r]`` the group of replica r): what the evaluator simulates.

Example
-------
>>> fig = PlanFigures(instance, plan)                         # doctest: +SKIP
>>> x, l, ar = fig.comm(NetworkStates.base(instance))         # doctest: +SKIP
>>> x.shape, ar.shape               # (K, R, S-1), (K, S)     # doctest: +SKIP
>>> g = fig.comm_groups(NetworkStates.base(instance))         # doctest: +SKIP
>>> (g.x[:, fig.group_of] == x).all()  # bit for bit          # doctest: +SKIP
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np

from ..problem.model import BYTES_PER_PARAM_GRAD, BYTES_PER_PARAM_STATE
from ..problem.network import GBPS, MS, NetworkStates, flow_bandwidth, flow_latency
from ..problem.oplists import inflight_counts


@dataclass
class Comm:
    """Communication figures for K states (seconds)."""

    x: np.ndarray  # (K, R, S-1) transfer time of one micro-batch over boundary k
    l: np.ndarray  # (K, R, S-1) one-way latency of boundary k
    ar: np.ndarray  # (K, S) gradient synchronisation time of stage j


class PlanFigures:
    """State-independent figures of ``plan`` on ``instance``.

    Attributes (numpy arrays over stages j): ``f``, ``g``, ``c`` forward,
    backward and total compute seconds per micro-batch, each including ``y``, the
    tensor-parallel all-reduce seconds of one pass; ``A`` boundary bytes
    per micro-batch (stage j -> j+1); ``P`` parameters; ``stored`` activation
    bytes per token kept for backward; ``inflight`` micro-batches in flight;
    ``memory`` bytes per GPU.
    """

    def __init__(self, instance, plan):
        self.instance, self.plan = instance, plan
        wl = instance.workload
        units = instance.units
        S, R, t, b = plan.num_stages, plan.replicas, plan.tp, plan.micro_batch_size
        self.S, self.R, self.m = S, R, plan.num_micro_batches
        tokens = b * wl.seq_len
        bwd = 3.0 if wl.recompute else 2.0
        rate = t * instance.gpu.flops_per_s
        F = np.array([sum(u.fwd_flops_per_token for u in units[s.start:s.end]) for s in plan.stages])
        # y_j: tensor-parallel all-reduces of one pass, the same forward and backward (SPEC 5, v2)
        tpb = np.array([sum(u.tp_bytes_per_token for u in units[s.start:s.end]) for s in plan.stages])
        self.y = np.asarray(instance.gpu.tp_allreduce_s(tpb * tokens, t), float)
        self.f = F * tokens / rate + self.y
        self.g = bwd * F * tokens / rate + self.y
        self.c = self.f + self.g
        self.A = np.array([units[s.end - 1].out_bytes_per_token * tokens for s in plan.stages])
        self.P = np.array([sum(u.params for u in units[s.start:s.end]) for s in plan.stages])
        self.stored = np.array([sum(u.stored_bytes_per_token for u in units[s.start:s.end])
                                for s in plan.stages])
        self.inflight = np.array(inflight_counts(plan.schedule_spec, S, self.m))
        self.memory = (BYTES_PER_PARAM_STATE * self.P + self.inflight * tokens * self.stored) / t
        self.G = BYTES_PER_PARAM_GRAD * self.P
        self._setup_groups()

    # -- replicas grouped by what they send over (state independent) ------------
    def _setup_groups(self):
        """Group the replicas whose every boundary has the same figures in every state:
        the same intra-domain bandwidth, or the same pair of domains (hence the same
        route, share and latency).  The simulator and T_est then run once per group,
        G <= R (greedy's 2,048-replica plans over 300 domains have a few dozen).
        Also the gradient-ring tables, the flows' link users, the WAN bytes and the GPU
        price, all fixed by the placement; no Python loop runs over replicas."""
        inst, plan = self.instance, self.plan
        S, R = self.S, self.R
        idx = inst.domain_index
        n = len(idx)
        routes = inst.routes
        P = np.fromiter(map(idx.__getitem__, chain.from_iterable(plan.placement)), dtype=np.int64,
                        count=R * S).reshape(R, S)
        self.domain_of = P  # (R, S) domain index of every stage of every replica
        intra = np.array([d.intra_bandwidth_gbps * GBPS for d in inst.domains])
        # pipeline boundaries: a route id (a pair of domains) or -1 - (intra class) inside one domain
        if S > 1:
            a, b = P[:, :-1], P[:, 1:]
            same = a == b
            code = np.empty((R, S - 1), dtype=np.int64)
            pairs, inv, flows = np.unique((a * n + b)[~same], return_inverse=True, return_counts=True)
            self.pipe = _RouteTable(routes, pairs // n, pairs % n, flows)
            code[~same] = inv.ravel()
            bw_classes, cls = np.unique(intra[a[same]], return_inverse=True)
            code[same] = -1 - cls.ravel()
            _, first, group_of = np.unique(code, axis=0, return_index=True, return_inverse=True)
            # groups in order of their first replica
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            self.group_rep = first[order]
            self.group_of = rank[group_of.ravel()]
            gcode = code[self.group_rep]
            self.g_same = gcode < 0
            self.g_intra = (np.where(self.g_same, bw_classes[np.maximum(-1 - gcode, 0)], 0.0)
                            if len(bw_classes) else np.zeros(gcode.shape))
            self.g_route = np.where(self.g_same, -1, gcode)
        else:
            self.pipe = _RouteTable(routes, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
            self.group_rep = np.zeros(1, dtype=np.int64)
            self.group_of = np.zeros(R, dtype=np.int64)
            self.g_same = np.zeros((1, 0), dtype=bool)
            self.g_intra = np.zeros((1, 0))
            self.g_route = np.zeros((1, 0), dtype=np.int64)
        # gradient synchronisation: intra part and the ring of each stage (domains in instance order)
        self.ar_intra = np.zeros(S)
        self.ring_k = np.ones(S, dtype=int)
        hop_stage, hop_pair = [], []
        if R > 1:
            for j in range(S):
                doms, cnt = np.unique(P[:, j], return_counts=True)
                many = cnt > 1
                if many.any():
                    c = cnt[many]
                    self.ar_intra[j] = max(0.0, float(np.max(
                        2 * (c - 1) / c * (self.G[j] / plan.tp) / intra[doms[many]])))
                self.ring_k[j] = len(doms)
                if len(doms) > 1:
                    hop_stage.append(np.full(len(doms), j))
                    hop_pair.append(doms * n + np.roll(doms, -1))
        hop_stage = np.concatenate(hop_stage) if hop_stage else np.zeros(0, np.int64)
        hop_pair = np.concatenate(hop_pair) if hop_pair else np.zeros(0, np.int64)
        pairs, inv, flows = np.unique(hop_pair, return_inverse=True, return_counts=True)
        self.ring = _RouteTable(routes, pairs // n, pairs % n, flows)
        inv = inv.ravel()
        self.ring_stages = np.unique(hop_stage)
        width = int(np.max(self.ring_k[self.ring_stages], initial=0))
        # (stages with a ring, width) route ids, padded with the sentinel column U
        self.ring_pad = np.full((len(self.ring_stages), width), self.ring.size, dtype=np.int64)
        for i, j in enumerate(self.ring_stages.tolist()):
            ids = inv[hop_stage == j]
            self.ring_pad[i, :len(ids)] = ids
        # cost figures (SPEC 6), summed in the order of the per-replica loops they replace
        cross = P[:, :-1] != P[:, 1:]
        parts = [(2 * self.A[:-1] * self.m)[None, :].repeat(R, axis=0)[cross]]
        kr = self.ring_k
        parts.append(np.array([kr[j] * 2 * (kr[j] - 1) / kr[j] * self.G[j] for j in range(S) if kr[j] > 1]))
        seq = np.concatenate([np.zeros(1)] + [np.asarray(x, float) for x in parts])
        self._wan_bytes = float(np.add.accumulate(seq)[-1])
        price = np.array([d.price_per_gpu_hour for d in inst.domains])
        self._gpu_price = float(np.add.accumulate(np.concatenate([[0.0], plan.tp * price[P.ravel()]]))[-1])

    @property
    def groups(self) -> int:
        """Distinct replicas (see :meth:`_setup_groups`)."""
        return len(self.group_rep)

    # -- which links each flow crosses, per replica (the ungrouped path) ---------
    @cached_property
    def _flows(self):
        inst, plan = self.instance, self.plan
        routes = inst.routes
        S, R = self.S, self.R
        # pipeline flows: one per (replica, boundary) between different domains
        intra_bw = np.zeros((R, max(S - 1, 0)))  # bytes/s where same domain, else 0
        flow_of = -np.ones((R, max(S - 1, 0)), dtype=int)
        flow_routes: list[tuple[int, ...]] = []
        for r, row in enumerate(plan.placement):
            for k in range(S - 1):
                u, v = row[k], row[k + 1]
                if u == v:
                    intra_bw[r, k] = inst.domain(u).intra_bandwidth_gbps * GBPS
                else:
                    flow_of[r, k] = len(flow_routes)
                    flow_routes.append(routes[(u, v)].links)
        # gradient rings: the hops of each stage
        hop_routes: list[tuple[int, ...]] = []
        hops_of: list[list[int]] = [[] for _ in range(S)]
        if R > 1:
            order = inst.domain_index
            for j in range(S):
                ring = sorted({row[j] for row in plan.placement}, key=order.__getitem__)
                if len(ring) > 1:
                    for a, b in zip(ring, ring[1:] + ring[:1]):
                        hops_of[j].append(len(hop_routes))
                        hop_routes.append(routes[(a, b)].links)
        return intra_bw, flow_of, flow_routes, hop_routes, hops_of

    @property
    def intra_bw(self) -> np.ndarray:
        """(R, S-1) bytes/s of boundaries inside one domain (0 across domains)."""
        return self._flows[0]

    @property
    def flow_of(self) -> np.ndarray:
        """(R, S-1) index into ``flow_routes`` of a boundary across domains (-1 inside one)."""
        return self._flows[1]

    @property
    def flow_routes(self) -> list[tuple[int, ...]]:
        """Links of every pipeline flow, one per (replica, boundary) across domains."""
        return self._flows[2]

    @property
    def hop_routes(self) -> list[tuple[int, ...]]:
        """Links of every gradient-ring hop, over all stages."""
        return self._flows[3]

    @property
    def hops_of(self) -> list[list[int]]:
        """Indices into ``hop_routes`` of each stage's ring."""
        return self._flows[4]

    @property
    def crosses_wan(self) -> bool:
        return bool(self.pipe.size or self.ring.size)

    def comm(self, states: NetworkStates) -> Comm:
        """Transfer times, latencies and AR for every state in ``states``, for every
        replica: the per-flow computation, kept as the reference that
        :meth:`comm_groups` must match bit for bit."""
        K, S, R = states.count, self.S, self.R
        x = np.empty((K, R, max(S - 1, 0)))
        l = np.zeros((K, R, max(S - 1, 0)))
        if S > 1:
            same = self.flow_of < 0
            rr, kk = np.nonzero(same)
            x[:, rr, kk] = self.A[kk] / self.intra_bw[rr, kk]
            if self.flow_routes:
                bw = flow_bandwidth(states.bandwidth_gbps, self.flow_routes)
                lat = flow_latency(states.latency_ms, self.flow_routes)
                rr, kk = np.nonzero(~same)
                fl = self.flow_of[rr, kk]
                fbw = bw[:, fl]
                with np.errstate(divide="ignore"):
                    x[:, rr, kk] = np.divide(self.A[kk], fbw, out=np.full_like(fbw, np.inf), where=fbw > 0)
                l[:, rr, kk] = lat[:, fl]
        ar = np.broadcast_to(self.ar_intra, (K, S)).copy()
        if self.hop_routes:
            bw = flow_bandwidth(states.bandwidth_gbps, self.hop_routes)
            lat = flow_latency(states.latency_ms, self.hop_routes)
            for j in range(S):
                hops = self.hops_of[j]
                if not hops:
                    continue
                kr = self.ring_k[j]
                ring_bw = bw[:, hops].min(axis=1)
                ring_lat = lat[:, hops].max(axis=1)
                with np.errstate(divide="ignore"):
                    vol = np.where(ring_bw > 0, 2 * (kr - 1) / kr * self.G[j] / np.where(
                        ring_bw > 0, ring_bw, 1.0), np.inf)
                ar[:, j] += vol + 2 * (kr - 1) * ring_lat
        return Comm(x, l, ar)

    def comm_groups(self, states: NetworkStates) -> Comm:
        """:meth:`comm` for one replica per group: x and l of shape (K, G, S-1), with
        the same arithmetic on the same figures, so every replica's column equals its
        group's bit for bit; ``ar`` as in :meth:`comm`.  No Python loop over flows."""
        K, S = states.count, self.S
        G = self.groups
        x = np.empty((K, G, max(S - 1, 0)))
        l = np.zeros((K, G, max(S - 1, 0)))
        if S > 1:
            gi, kk = np.nonzero(self.g_same)
            x[:, gi, kk] = self.A[kk] / self.g_intra[gi, kk]
            if self.pipe.size:
                bw, lat = self.pipe.figures(states)
                gc, kc = np.nonzero(~self.g_same)
                rid = self.g_route[gc, kc]
                fbw = bw[:, rid]
                with np.errstate(divide="ignore"):
                    x[:, gc, kc] = np.divide(self.A[kc], fbw, out=np.full_like(fbw, np.inf), where=fbw > 0)
                l[:, gc, kc] = lat[:, rid]
        ar = np.broadcast_to(self.ar_intra, (K, S)).copy()
        if self.ring.size:
            bw, lat = self.ring.figures(states)
            js = self.ring_stages
            pad = self.ring_pad
            ring_bw = np.concatenate([bw, np.full((K, 1), np.inf)], axis=1)[:, pad].min(axis=2)
            ring_lat = np.concatenate([lat, np.full((K, 1), -np.inf)], axis=1)[:, pad].max(axis=2)
            kr = self.ring_k[js]
            with np.errstate(divide="ignore"):
                vol = np.where(ring_bw > 0, 2 * (kr - 1) / kr * self.G[js] / np.where(
                    ring_bw > 0, ring_bw, 1.0), np.inf)
            ar[:, js] += vol + 2 * (kr - 1) * ring_lat
        return Comm(x, l, ar)

    def wan_bytes(self) -> float:
        """Bytes crossing domains per iteration (SPEC 6 cost): boundaries both
        ways for every micro-batch, plus the cross part of the gradient rings."""
        return self._wan_bytes

    def gpu_hour_price(self) -> float:
        """Sum over used GPUs of price_per_gpu_hour."""
        return self._gpu_price


class _RouteTable:
    """The routes of a set of flows, one per distinct (source, destination) pair, with
    how many flows take each, compiled to arrays so that the shares and latencies of
    all of them under K states cost a few NumPy calls: the same expressions as
    :func:`planner.problem.network.flow_bandwidth` and ``flow_latency`` on the same
    figures (link users count every flow), so the same bits.

    ``src``, ``dst``: domain indices of each distinct pair; ``flows``: flows per pair."""

    def __init__(self, routes, src, dst, flows):
        self.size = len(src)
        links, hops = routes.link_paths(src, dst)  # (pairs, width) in path order, -1 padded
        on = links >= 0
        used, col = np.unique(links[on], return_inverse=True)
        self.used = used
        users = np.zeros(len(used))
        np.add.at(users, col, np.repeat(np.asarray(flows, float), on.sum(axis=1)))
        self.scale = GBPS / users if len(used) else np.zeros(0)  # bytes/s per Gbit/s, shared
        self.cols = np.full(links.shape, len(used), dtype=np.int64)  # padding: an inf column
        self.cols[on] = col
        # latency: one gather per route length (a sum over the same links in the same order)
        self.by_len = [(np.nonzero(hops == h)[0], links[hops == h][:, :h]) for h in np.unique(hops).tolist()]

    def figures(self, states: NetworkStates) -> tuple[np.ndarray, np.ndarray]:
        """(K, routes) bytes/s (the smallest share along the route) and seconds."""
        bw = states.bandwidth_gbps
        K = bw.shape[0]
        share = np.empty((K, len(self.used) + 1))
        share[:, :-1] = bw[:, self.used] * self.scale
        share[:, -1] = np.inf
        out_bw = share[:, self.cols].min(axis=2)
        lat = np.empty((K, self.size))
        for rs, links in self.by_len:
            if links.shape[1] == 1:
                lat[:, rs] = states.latency_ms[:, links[:, 0]]
            else:
                lat[:, rs] = states.latency_ms[:, links].sum(axis=2)
        return out_bw, lat * MS
