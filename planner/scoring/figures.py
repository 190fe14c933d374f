"""Per-stage figures of a plan and its communication under network states
(SPEC section 5).  Everything is in SI units: seconds, bytes, bytes/s.

``PlanFigures(instance, plan)`` precomputes what does not depend on the
network state (compute times, boundary bytes, memory, which links each flow
crosses); :meth:`PlanFigures.comm` turns a batch of K network states into
transfer times, latencies and gradient-synchronisation times.

Example
-------
>>> fig = PlanFigures(instance, plan)           # doctest: +SKIP
>>> x, l, ar = fig.comm(NetworkStates.base(instance))
>>> x.shape, ar.shape                            # (K, R, S-1), (K, S)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..problem.model import BYTES_PER_PARAM_GRAD, BYTES_PER_PARAM_STATE
from ..problem.network import GBPS, NetworkStates, flow_bandwidth, flow_latency
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
        self._setup_flows()

    # -- which links each flow crosses (fixed routes) --------------------------
    def _setup_flows(self):
        inst, plan = self.instance, self.plan
        routes = inst.routes
        S, R = self.S, self.R
        # pipeline flows: one per (replica, boundary) between different domains
        self.intra_bw = np.zeros((R, max(S - 1, 0)))  # bytes/s where same domain, else 0
        self.flow_of = -np.ones((R, max(S - 1, 0)), dtype=int)
        self.flow_routes: list[tuple[int, ...]] = []
        for r, row in enumerate(plan.placement):
            for k in range(S - 1):
                u, v = row[k], row[k + 1]
                if u == v:
                    self.intra_bw[r, k] = inst.domain(u).intra_bandwidth_gbps * GBPS
                else:
                    self.flow_of[r, k] = len(self.flow_routes)
                    self.flow_routes.append(routes[(u, v)].links)
        # gradient synchronisation: intra part (state independent) and ring hops
        self.ar_intra = np.zeros(S)
        self.ring_k = np.ones(S, dtype=int)
        self.hop_routes: list[tuple[int, ...]] = []
        self.hops_of: list[list[int]] = [[] for _ in range(S)]
        if R > 1:
            order = inst.domain_index
            for j in range(S):
                n = Counter(row[j] for row in plan.placement)
                for d, cnt in n.items():
                    if cnt > 1:
                        bw = inst.domain(d).intra_bandwidth_gbps * GBPS
                        self.ar_intra[j] = max(self.ar_intra[j],
                                               2 * (cnt - 1) / cnt * (self.G[j] / plan.tp) / bw)
                ring = sorted(n, key=order.__getitem__)
                self.ring_k[j] = len(ring)
                if len(ring) > 1:
                    for a, b in zip(ring, ring[1:] + ring[:1]):
                        self.hops_of[j].append(len(self.hop_routes))
                        self.hop_routes.append(routes[(a, b)].links)

    @property
    def crosses_wan(self) -> bool:
        return bool(self.flow_routes or self.hop_routes)

    def comm(self, states: NetworkStates) -> Comm:
        """Transfer times, latencies and AR for every state in ``states``."""
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

    def wan_bytes(self) -> float:
        """Bytes crossing domains per iteration (SPEC 6 cost): boundaries both
        ways for every micro-batch, plus the cross part of the gradient rings."""
        total = 0.0
        for r in range(self.R):
            for k in range(self.S - 1):
                if self.flow_of[r, k] >= 0:
                    total += 2 * self.A[k] * self.m
        for j in range(self.S):
            kr = self.ring_k[j]
            if kr > 1:
                total += kr * 2 * (kr - 1) / kr * self.G[j]
        return total

    def gpu_hour_price(self) -> float:
        """Sum over used GPUs of price_per_gpu_hour."""
        inst = self.instance
        return sum(self.plan.tp * inst.domain(d).price_per_gpu_hour
                   for row in self.plan.placement for d in row)
