"""Per-stage figures of a plan and its communication under network states
(SPEC section 5).  Everything is in SI units: seconds, bytes, bytes/s.

``PlanFigures(instance, plan, spec)`` precomputes what does not depend on the
network state (compute times, boundary bytes, memory, the flushes of the
schedule, which resources each transfer uses and how they are shared);
:meth:`PlanFigures.comm` turns a batch of K network states into transfer
times, latencies and gradient-synchronisation times for every replica, and
:meth:`PlanFigures.comm_groups` the same for one replica per group of replicas
with identical boundary figures (``fig.groups`` of them, ``fig.group_of[r]``
the group of replica r): what the evaluator simulates.

One implementation serves both versions of the model (``spec``, default
:data:`~planner.problem.specversion.DEFAULT_SPEC`).  SPEC v2 is v3 with: routes
by least latency always; one resource per undirected link, shared equally by
the boundaries crossing it; no uplinks; a gradient-ring hop counted once per
undirected link it crosses (so a 2-member ring halves its link) with equal
shares whatever the volumes; stages without gradients still in the rings; no
unit overhead; ``gradient_sync`` always a ring.

Example
-------
>>> fig = PlanFigures(instance, plan, spec=3)                 # doctest: +SKIP
>>> x, l, ar = fig.comm(NetworkStates.base(instance))         # doctest: +SKIP
>>> x.shape, ar.shape               # (K, R, S-1), (K, S)     # doctest: +SKIP
>>> g = fig.comm_groups(NetworkStates.base(instance))         # doctest: +SKIP
>>> (g.x[:, fig.group_of] == x).all()  # bit for bit          # doctest: +SKIP
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import chain

import numpy as np

from ..problem.dpsync import EVERY_STEP, FULL_BITS, sync_groups
from ..problem.errors import InputError
from ..problem.model import BYTES_PER_PARAM_GRAD, BYTES_PER_PARAM_STATE
from ..problem.network import GBPS, MS, NetworkStates, Resources
from ..problem.oplists import Flush, flushes, inflight_counts, op_lists
from ..problem.specversion import check_spec, refuse_v3_fields


@dataclass(frozen=True)
class Background:
    """The other jobs' users of the resources, for one job's figures under shared sharing
    (SPEC 10): ``channels`` (resources,) the sum of the other jobs' n(q) (pipeline channels,
    streaming outer rings included); ``ring`` and ``outer`` the other jobs' gradient-sync
    users as ``(resource ids, volumes in bytes)``, one entry per (hop, resource), for the
    per-step (or inner) rings and the outer rings.  Resource ids are those of
    :class:`~planner.problem.network.Resources` on the same instance (the jobs share its
    links and uplinks).  Empty: the figures of the job alone, bit for bit."""

    channels: np.ndarray | None = None
    ring: tuple[np.ndarray, np.ndarray] | None = None
    outer: tuple[np.ndarray, np.ndarray] | None = None


@dataclass
class Comm:
    """Communication figures for K states (seconds)."""

    x: np.ndarray  # (K, R, S-1) transfer time of one micro-batch over boundary k
    l: np.ndarray  # (K, R, S-1) one-way latency of boundary k
    ar: np.ndarray  # (K, S) gradient synchronisation time of stage j


def phi(members, kind: str = "ring"):
    """Bytes each member of a gradient sync sends per byte of gradient (SPEC 5):
    ``2 (n - 1) / n`` for a ring of n members, 2 for ``reduce_broadcast``."""
    members = np.asarray(members)
    if kind == "reduce_broadcast":
        return np.full(members.shape, 2.0)
    return 2 * (members - 1) / members


@lru_cache(maxsize=256)
def _flushes(schedule, stages: int, micro_batches: int) -> tuple[Flush, ...]:
    return tuple(flushes(op_lists(schedule, stages, micro_batches), micro_batches))


def plan_flushes(plan, spec: int, inflight) -> tuple[Flush, ...]:
    """The flushes T_est sums (SPEC 7): v3 cuts the op lists into flushes; v2 takes
    the whole schedule as one, gpipe-shaped for ``gpipe`` only, with w_j = ``inflight``."""
    if spec < 3:
        return (Flush(plan.num_micro_batches, tuple(int(w) for w in inflight), plan.schedule == "gpipe"),)
    sched = plan.schedule_spec
    key = sched if isinstance(sched, str) else tuple(tuple(ops) for ops in sched)
    return _flushes(key, plan.num_stages, plan.num_micro_batches)


class PlanFigures:
    """State-independent figures of ``plan`` on ``instance`` under SPEC version ``spec``.

    Attributes (numpy arrays over stages j): ``f``, ``g``, ``c`` forward,
    backward and total compute seconds per micro-batch, each including ``y``, the
    tensor-parallel all-reduce seconds of one pass, and (v3) the fixed overhead
    ``n_j o`` forward, ``beta n_j o`` backward; ``A`` boundary bytes per
    micro-batch (stage j -> j+1); ``P`` parameters; ``stored`` activation bytes
    per token kept for backward; ``inflight`` micro-batches in flight;
    ``memory`` bytes per GPU; ``memory_limit`` usable bytes per GPU of each stage (the
    smallest over the GPU types hosting it); ``flushes`` the schedule's flushes (SPEC 7).

    GPU types (SPEC v3 (g)): ``type_of`` (R, S) index into ``instance.gpu_types`` of
    every (replica, stage); replicas with the same row form a class
    (``replica_class`` (R,), ``group_class`` (G,)), with figures ``class_f``,
    ``class_g`` (classes, S), what the evaluator simulates.  ``f``, ``g`` are then
    per stage the largest over the classes and ``c`` the largest c over replicas
    (display figures); with one type they are exactly the one-type figures.

    Raises ``InputError`` when ``spec`` is 2 and the instance uses a field only
    v3 models (:func:`planner.problem.specversion.refuse_v3_fields`).
    """

    def __init__(self, instance, plan, spec: int | None = None, background: Background | None = None):
        self.spec = check_spec(spec)
        self.background = background
        refuse_v3_fields(instance, self.spec)
        self.instance, self.plan = instance, plan
        self.routes = instance.routes_for(self.spec)
        self.resources = Resources(instance, directed=self.spec >= 3)
        self.sync = instance.workload.gradient_sync if self.spec >= 3 else "ring"
        wl = instance.workload
        units = instance.units
        S, R, t, b = plan.num_stages, plan.replicas, plan.tp, plan.micro_batch_size
        self.S, self.R, self.m = S, R, plan.num_micro_batches
        tokens = b * wl.seq_len
        bwd = 3.0 if wl.recompute else 2.0
        F = np.array([sum(u.fwd_flops_per_token for u in units[s.start:s.end]) for s in plan.stages])
        # y_j: tensor-parallel all-reduces of one pass, the same forward and backward (SPEC 5, v2)
        tpb = np.array([sum(u.tp_bytes_per_token for u in units[s.start:s.end]) for s in plan.stages])
        n = np.array([sum(u.fwd_flops_per_token > 0 for u in units[s.start:s.end]) for s in plan.stages])
        idx = instance.domain_index
        self.domain_of = np.fromiter(map(idx.__getitem__, chain.from_iterable(plan.placement)),
                                     dtype=np.int64, count=R * S).reshape(R, S)
        # GPU types (SPEC v3 (g)): (r, j) runs on the type of placement[r][j]; the figures of a
        # stage are tabulated per type used, and replicas with the same type row form a class
        self.type_of = np.asarray(instance.domain_type, dtype=np.int64)[self.domain_of]  # (R, S)
        used = np.unique(self.type_of)
        table_f, table_g, table_y = {}, {}, {}
        for u in used.tolist():
            gpu = instance.gpu_types[u]
            rate = t * gpu.flops_per_s
            y = np.asarray(gpu.tp_allreduce_s(tpb * tokens, t), float)
            f = F * tokens / rate + y
            g = bwd * F * tokens / rate + y
            overhead = gpu.unit_overhead_ms * MS if self.spec >= 3 else 0.0
            if overhead:  # v3 (f): n_j units with FLOPs, o seconds each forward, beta o backward
                f = f + n * overhead
                g = g + bwd * n * overhead
            table_f[u], table_g[u], table_y[u] = f, g, y
        rows, self.replica_class = np.unique(self.type_of, axis=0, return_inverse=True)
        self.replica_class = self.replica_class.ravel()
        cols = np.arange(S)
        pick = lambda table, row: np.array([table[u][j] for j, u in zip(cols, row.tolist())])  # noqa: E731
        if len(used) == 1:  # one type: the figures of SPEC 5 without types, bit for bit
            self.class_f, self.class_g = table_f[int(used[0])][None, :], table_g[int(used[0])][None, :]
            self.y = table_y[int(used[0])]
        else:
            self.class_f = np.array([pick(table_f, row) for row in rows])
            self.class_g = np.array([pick(table_g, row) for row in rows])
            self.y = np.array([table_y[u] for u in used.tolist()]).max(axis=0)
        # f, g, c over stages: the plan's when every replica has the same types; otherwise, per
        # stage, each the largest over the classes, so c may be less than f + g (display figures:
        # the evaluator simulates each class with its own class_f, class_g)
        self.f, self.g = self.class_f.max(axis=0), self.class_g.max(axis=0)
        self.c = (self.class_f + self.class_g).max(axis=0)
        self.A = np.array([units[s.end - 1].out_bytes_per_token * tokens for s in plan.stages])
        self.P = np.array([sum(u.params for u in units[s.start:s.end]) for s in plan.stages])
        self.stored = np.array([sum(u.stored_bytes_per_token for u in units[s.start:s.end])
                                for s in plan.stages])
        self.inflight = np.array(inflight_counts(plan.schedule_spec, S, self.m))
        self._setup_sync(instance, plan)
        # bytes per stage (over its t GPUs) that do not grow with micro-batches in flight: weights,
        # gradients and optimizer state, plus SPEC 11's phi_o beta_o P_j of outer state
        self.fixed_bytes = (BYTES_PER_PARAM_STATE + self.outer_state_share * self.beta_o) * self.P
        self.memory = (self.fixed_bytes + self.inflight * tokens * self.stored) / t
        # usable bytes per GPU of each stage: the smallest over the types hosting it (SPEC 5)
        limits = np.array([instance.memory_limit_of(gpu) for gpu in instance.gpu_types])
        self.memory_limit = limits[self.type_of].min(axis=0)
        self.G = BYTES_PER_PARAM_GRAD * self.P
        # the payload of a compressed every-step sync, G^o_j = P_j q / 8 (SPEC 11); G itself when plain
        dp = self.dp
        self.G_sync = self.G * (dp.bits / FULL_BITS) if (dp.mode == "every_step" and dp.bits != FULL_BITS) else self.G
        self.G_outer = self.G * (dp.bits / FULL_BITS) if dp.bits != FULL_BITS else self.G
        self.flushes = plan_flushes(plan, self.spec, self.inflight)
        # n(q) = max(n_F, n_B) when every flush is gpipe-shaped (the replicas run in phase, so
        # forward and backward transfers are never in flight together), else n_F + n_B (v3)
        self.add_directions = self.spec >= 3 and not all(fl.gpipe_shaped for fl in self.flushes)
        self._setup_groups()

    def _setup_sync(self, instance, plan):
        """The plan's ``dp_sync`` (SPEC 11): the option, M groups (replicas by stage-0 domain),
        the outer state's share of memory, and the codec's rate."""
        dp = plan.dp_sync or EVERY_STEP
        if self.spec < 3 and not dp.plain:
            raise InputError("a SPEC v3 field; SPEC v2 does not model dp_sync (spec=2 was asked for)", "dp_sync")
        self.dp = dp
        self.M = sync_groups(plan)
        comp = instance.compression
        self.beta_o = comp.outer_state_bytes_per_param
        self.outer_state_share = dp.outer_state_share
        self.codec_rate = None if comp.codec_gbps is None else comp.codec_gbps * GBPS

    def codec_times(self, charged) -> np.ndarray:
        """X_j (S,), seconds: ``(2 P_j / t) / codec rate`` for the stages in ``charged`` (a bool
        mask) when the payload is compressed, ``[compression] codec_gbps`` is given and
        P_j > 0; else 0 (SPEC 11)."""
        if self.codec_rate is None or not self.dp.compressed:
            return np.zeros(self.S)
        on = np.asarray(charged, bool) & (self.P > 0)
        return np.where(on, (2.0 * self.P / self.plan.tp) / self.codec_rate, 0.0)

    def _synced(self, j: int) -> bool:
        """Whether stage j's replicas in several domains sync over the WAN: always in v2,
        only with gradients (G_j > 0) in v3 (SPEC 5: "0 when G_j = 0")."""
        return self.spec < 3 or self.G[j] > 0

    # -- replicas grouped by what they send over (state independent) ------------
    def _setup_groups(self):
        """Group the replicas whose every boundary has the same figures in every state:
        the same intra-domain bandwidth, or the same pair of domains (hence the same
        route, share and latency).  The simulator and T_est then run once per group,
        G <= R (greedy's 2,048-replica plans over 300 domains have a few dozen).
        Also the gradient-ring tables, the WAN bytes and the GPU price, all fixed by
        the placement; no Python loop runs over replicas."""
        inst, plan = self.instance, self.plan
        S, R = self.S, self.R
        n = len(inst.domain_index)
        P = self.domain_of  # (R, S) domain index of every stage of every replica
        # replicas of different classes (GPU type rows) are never grouped together
        klass = self.replica_class[:, None] if self.classes > 1 else np.zeros((R, 0), dtype=np.int64)
        intra = np.array([d.intra_bandwidth_gbps * GBPS for d in inst.domains])
        self._own_extra = self._streaming_users(P, n)
        self._extra_users = self._own_extra
        bg = self.background
        if bg is not None and bg.channels is not None:  # SPEC 10 shared: the other jobs' n(q) too
            self._extra_users = (bg.channels if self._own_extra is None else self._own_extra + bg.channels)
        self._intra = intra
        # pipeline boundaries: a route id (a pair of domains) or -1 - (intra class) inside one domain
        if S > 1:
            a, b = P[:, :-1], P[:, 1:]
            same = a == b
            code = np.empty((R, S - 1), dtype=np.int64)
            pairs, inv, flows = np.unique((a * n + b)[~same], return_inverse=True, return_counts=True)
            self.pipe = _ChannelTable(self.routes, self.resources, pairs // n, pairs % n, flows,
                                      self.add_directions, self._extra_users)
            code[~same] = inv.ravel()
            bw_classes, cls = np.unique(intra[a[same]], return_inverse=True)
            code[same] = -1 - cls.ravel()
            _, first, group_of = np.unique(np.concatenate([code, klass], axis=1), axis=0,
                                           return_index=True, return_inverse=True)
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
        elif self.classes > 1:  # one stage: one group per class, in order of its first replica
            _, first, group_of = np.unique(self.replica_class, return_index=True, return_inverse=True)
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            self.group_rep = first[order]
            self.group_of = rank[group_of.ravel()]
            G = len(first)
            self.g_same = np.zeros((G, 0), dtype=bool)
            self.g_intra = np.zeros((G, 0))
            self.g_route = np.zeros((G, 0), dtype=np.int64)
        else:
            self.pipe = _ChannelTable(self.routes, self.resources, np.zeros(0, np.int64), np.zeros(0, np.int64),
                                      np.zeros(0), self.add_directions)
            self.group_rep = np.zeros(1, dtype=np.int64)
            self.group_of = np.zeros(R, dtype=np.int64)
            self.g_same = np.zeros((1, 0), dtype=bool)
            self.g_intra = np.zeros((1, 0))
            self.g_route = np.zeros((1, 0), dtype=np.int64)
        self.group_class = self.replica_class[self.group_rep]
        self._setup_rings(P, intra)
        # cost figures (SPEC 6), summed in the order of the per-replica loops they replace
        cross = P[:, :-1] != P[:, 1:]
        parts = [(2 * self.A[:-1] * self.m)[None, :].repeat(R, axis=0)[cross]]
        if not self.dp.outer:
            kr = self.ring_k
            parts.append(np.array([kr[j] * 2 * (kr[j] - 1) / kr[j] * self.G_sync[j] for j in range(S) if kr[j] > 1]))
        else:  # SPEC 11: the inner rings' cross parts every step, the outer rings' every H steps
            kr = self.r_k
            parts.append(np.array([2.0 * (k - 1) * self.G[j] for j, k in zip(self.r_stage.tolist(), kr.tolist())
                                   if k > 1]))
            parts.append(np.array([2.0 * (self.ring_k[j] - 1) * self.G_outer[j] / self.dp.H
                                   for j in self.outer_stages.tolist()]))
        seq = np.concatenate([np.zeros(1)] + [np.asarray(x, float) for x in parts])
        self._wan_bytes = float(np.add.accumulate(seq)[-1])
        price = np.array([d.price_per_gpu_hour for d in inst.domains])
        self._gpu_price = float(np.add.accumulate(np.concatenate([[0.0], plan.tp * price[P.ravel()]]))[-1])

    def _setup_rings(self, P, intra):
        """Gradient synchronisation (SPEC 5): one *ring* per stage over all replicas, or
        under diloco and streaming (SPEC 11) one per (group, stage) over the group's
        replicas (the inner sync).  A ring's intra part, and the hops of its cross-domain
        sync d_1 -> d_2 -> ... -> d_K -> d_1 over its domains in instance order, all in
        one :class:`_RingTable` (every (ring, hop) a user of the resources it crosses).
        Then the outer rings of diloco and streaming, in their own table."""
        S, n = self.S, len(intra)
        G = self.G_sync
        r_stage, r_intra, r_k = [], [], []
        hop_ring, hop_pair = [], []
        self.ring_k = np.ones(S, dtype=int)  # K_j: domains holding stage j over all replicas
        if self.R > 1:
            member_sets = ([np.arange(self.R)] if not self.dp.outer else
                           [np.nonzero(P[:, 0] == d)[0] for d in np.unique(P[:, 0])])
            for j in range(S):
                self.ring_k[j] = len(np.unique(P[:, j]))
                for members in member_sets:
                    if len(members) < 2:
                        continue
                    doms, cnt = np.unique(P[members, j], return_counts=True)
                    many = cnt > 1
                    val = 0.0
                    if many.any():
                        val = max(0.0, float(np.max(phi(cnt[many], self.sync) * (G[j] / self.plan.tp)
                                                    / intra[doms[many]])))
                    ring = len(r_stage)
                    r_stage.append(j)
                    r_intra.append(val)
                    r_k.append(len(doms))
                    if len(doms) > 1 and self._synced(j):
                        hop_ring.append(np.full(len(doms), ring))
                        hop_pair.append(doms * n + np.roll(doms, -1))
        self.r_stage = np.array(r_stage, dtype=np.int64)
        self.r_intra = np.array(r_intra, dtype=float)
        self.r_k = np.array(r_k, dtype=np.int64)
        # AR_j's intra part alone (display): the largest over the stage's rings
        self.ar_intra = np.zeros(S)
        if len(r_stage):
            np.maximum.at(self.ar_intra, self.r_stage, self.r_intra)
        hop_ring = np.concatenate(hop_ring) if hop_ring else np.zeros(0, np.int64)
        hop_pair = np.concatenate(hop_pair) if hop_pair else np.zeros(0, np.int64)
        kr = self.r_k[hop_ring]
        self.ring = _RingTable(self.routes, self.resources, hop_pair // n, hop_pair % n,
                               phi(kr, self.sync) * G[self.r_stage[hop_ring]], equal=self.spec < 3,
                               background=None if self.background is None else self.background.ring)
        # rings with hops, and their hop indices padded with the sentinel column H
        self.ring_rows, first, width = np.unique(hop_ring, return_index=True, return_counts=True)
        wmax = int(width.max(initial=0))
        self.ring_pad = np.where(np.arange(wmax) < width[:, None], first[:, None] + np.arange(wmax),
                                 self.ring.size)
        # one ring per stage, in stage order: the plain sync's AR is the ring values themselves
        self._one_ring_per_stage = len(r_stage) == S and bool((self.r_stage == np.arange(S)).all())
        self._setup_outer(P, n)

    def _outer_hops(self, P, n):
        """Stages with an outer sync (SPEC 11: diloco or streaming, M > 1, K_j > 1, G_j > 0)
        and their hops over the K_j domains in instance order: (stages, hop stage, src, dst)."""
        none = np.zeros(0, np.int64)
        if not self.dp.outer or self.M < 2 or self.R < 2:
            return none, none, none, none
        stages, h_stage, h_src, h_dst = [], [], [], []
        for j in range(self.S):
            doms = np.unique(P[:, j])
            if len(doms) > 1 and self.G[j] > 0:
                stages.append(j)
                h_stage.append(np.full(len(doms), j))
                h_src.append(doms)
                h_dst.append(np.roll(doms, -1))
        if not stages:
            return none, none, none, none
        return (np.array(stages, np.int64), np.concatenate(h_stage), np.concatenate(h_src),
                np.concatenate(h_dst))

    def _setup_outer(self, P, n):
        """The outer rings (SPEC 11): volume phi(K_j) G^o_j, sharing among themselves only."""
        self.outer_stages, h_stage, src, dst = self._outer_hops(P, n)
        self.outer_charged = np.zeros(self.S, dtype=bool)
        self.outer_charged[self.outer_stages] = True
        kr = self.ring_k[h_stage]
        self.outer = _RingTable(self.routes, self.resources, src, dst,
                                phi(kr, self.sync) * self.G_outer[h_stage], equal=False,
                                background=None if self.background is None else self.background.outer)
        _, first, width = np.unique(h_stage, return_index=True, return_counts=True)
        wmax = int(width.max(initial=0))
        self.outer_pad = np.where(np.arange(wmax) < width[:, None], first[:, None] + np.arange(wmax),
                                  self.outer.size)

    def _streaming_users(self, P, n):
        """n_O(q) (SPEC 11, streaming): the outer rings' (stage, hop) pairs using each resource,
        one more channel each in the pipeline's n(q); None otherwise."""
        if self.dp.mode != "streaming":
            return None
        _, _, src, dst = self._outer_hops(P, n)
        if not len(src):
            return None
        links, hops = self.routes.link_paths(src, dst)
        res = self.resources.paths(src, dst, links, hops)
        return _count(res, np.ones(len(src)), self.resources.count)

    def channel_users(self) -> np.ndarray:
        """n(q) of this plan alone, (resources,): its pipeline channels (``n_F + n_B`` or the
        larger, SPEC 5) plus a streaming sync's outer rings (SPEC 11); what another job's
        :class:`Background` adds under shared sharing (SPEC 10)."""
        own = self.pipe.counts.astype(float)
        return own if self._own_extra is None else own + self._own_extra

    def sync_users(self) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """This plan's gradient-sync users, ``(ring, outer)``, each ``(resource ids, volumes)``
        one entry per (hop, resource): what another job's :class:`Background` adds (SPEC 10)."""
        return self.ring.entries, self.outer.entries

    @property
    def classes(self) -> int:
        """Distinct rows of GPU types over the replicas (1 with one type everywhere)."""
        return len(self.class_f)

    @property
    def groups(self) -> int:
        """Distinct replicas (see :meth:`_setup_groups`)."""
        return len(self.group_rep)

    # -- which links each flow crosses, per replica (for explain) ------------------
    @cached_property
    def _flows(self):
        inst, plan = self.instance, self.plan
        routes = self.routes
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
                if len(ring) > 1 and self._synced(j):
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

    @cached_property
    def _per_flow(self):
        """Every (replica, boundary) across domains as its own channel: the ungrouped
        computation of :meth:`comm` (the same counts, summed flow by flow)."""
        P = self.domain_of
        rr, kk = np.nonzero(P[:, :-1] != P[:, 1:])
        table = _ChannelTable(self.routes, self.resources, P[rr, kk], P[rr, kk + 1], np.ones(len(rr)),
                              self.add_directions, self._extra_users)
        return rr, kk, table

    def comm(self, states: NetworkStates) -> Comm:
        """Transfer times, latencies and AR for every state in ``states``, for every
        replica: the per-flow computation, kept as the reference that
        :meth:`comm_groups` must match bit for bit."""
        K, S, R = states.count, self.S, self.R
        x = np.empty((K, R, max(S - 1, 0)))
        l = np.zeros((K, R, max(S - 1, 0)))
        if S > 1:
            same = self.domain_of[:, :-1] == self.domain_of[:, 1:]
            rr, kk = np.nonzero(same)
            x[:, rr, kk] = self.A[kk] / self._intra[self.domain_of[rr, kk]]
            rr, kk, table = self._per_flow
            if table.size:
                fbw, lat = table.figures(states)
                with np.errstate(divide="ignore"):
                    x[:, rr, kk] = np.divide(self.A[kk], fbw, out=np.full_like(fbw, np.inf), where=fbw > 0)
                l[:, rr, kk] = lat
        return Comm(x, l, self.sync_times(states))

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
        return Comm(x, l, self.sync_times(states))

    def sync_times(self, states: NetworkStates) -> np.ndarray:
        """AR_j (K, S), seconds: per ring, its intra part plus, for a ring over K > 1
        domains, ``phi(K) G / ring_bandwidth + 2 (K - 1) ring_latency`` with the ring's
        smallest hop share and largest hop latency (SPEC 5); per stage the largest over
        its rings (one ring per stage but under diloco and streaming, where this is the
        inner sync AR^in_j of SPEC 11).  A compressed every-step sync adds X_j."""
        K, S = states.count, self.S
        val = np.broadcast_to(self.r_intra, (K, len(self.r_intra))).copy()
        if self.ring.size:
            bw, lat = self.ring.figures(states)
            rows = self.ring_rows
            pad = self.ring_pad
            ring_bw = np.concatenate([bw, np.full((K, 1), np.inf)], axis=1)[:, pad].min(axis=2)
            ring_lat = np.concatenate([lat, np.full((K, 1), -np.inf)], axis=1)[:, pad].max(axis=2)
            kr = self.r_k[rows]
            G = self.G_sync[self.r_stage[rows]]
            with np.errstate(divide="ignore"):
                vol = np.where(ring_bw > 0, phi(kr, self.sync) * G / np.where(
                    ring_bw > 0, ring_bw, 1.0), np.inf)
            val[:, rows] += vol + 2 * (kr - 1) * ring_lat
        if self._one_ring_per_stage:
            ar = val
        else:
            ar = np.zeros((K, S))
            for j in np.unique(self.r_stage).tolist():
                ar[:, j] = val[:, self.r_stage == j].max(axis=1)
        if self.dp.mode == "every_step" and self.dp.compressed and self.R > 1:
            ar = ar + self.codec_times(np.ones(S, bool))
        return ar

    def outer_times(self, states: NetworkStates) -> tuple[np.ndarray, np.ndarray]:
        """The outer sync of SPEC 11, ``(O^bw, O^lat)``, each (K, S) seconds:
        ``phi(K_j) G^o_j / ring_bandwidth_j`` and ``2 (K_j - 1) ring_latency_j`` over the
        outer rings (sharing among themselves only); 0 where O_j is not charged."""
        K, S = states.count, self.S
        obw, olat = np.zeros((K, S)), np.zeros((K, S))
        if self.outer.size:
            bw, lat = self.outer.figures(states)
            js = self.outer_stages
            ring_bw = np.concatenate([bw, np.full((K, 1), np.inf)], axis=1)[:, self.outer_pad].min(axis=2)
            ring_lat = np.concatenate([lat, np.full((K, 1), -np.inf)], axis=1)[:, self.outer_pad].max(axis=2)
            kr = self.ring_k[js]
            with np.errstate(divide="ignore"):
                obw[:, js] = np.where(ring_bw > 0, phi(kr, self.sync) * self.G_outer[js] / np.where(
                    ring_bw > 0, ring_bw, 1.0), np.inf)
            olat[:, js] = 2 * (kr - 1) * ring_lat
        return obw, olat

    def wan_bytes(self) -> float:
        """Bytes crossing domains per iteration (SPEC 6 cost): boundaries both
        ways for every micro-batch, plus the cross part of the gradient rings
        (``2 (K - 1) / K G_j`` per hop for both ``gradient_sync`` kinds)."""
        return self._wan_bytes

    def gpu_hour_price(self) -> float:
        """Sum over used GPUs of price_per_gpu_hour."""
        return self._gpu_price


def _latency_table(links: np.ndarray, hops: np.ndarray):
    """One gather per route length: ``[(rows, links[rows, :h])]`` (see :func:`_latencies`)."""
    return [(np.nonzero(hops == h)[0], links[hops == h][:, :h]) for h in np.unique(hops).tolist()]


def _latencies(states: NetworkStates, table, size: int) -> np.ndarray:
    """(K, size) one-way latency in seconds of each route of ``table``: the sum of its
    links' latencies in path order."""
    lat = np.empty((states.count, size))
    for rs, links in table:
        if links.shape[1] == 1:
            lat[:, rs] = states.latency_ms[:, links[:, 0]]
        else:
            lat[:, rs] = states.latency_ms[:, links].sum(axis=2)
    return lat * MS


def _count(res: np.ndarray, weight, size: int) -> np.ndarray:
    """Per resource id, the sum of ``weight[i]`` over the rows i of ``res`` that use it."""
    on = res >= 0
    return np.bincount(res[on], weights=np.repeat(np.asarray(weight, float), on.sum(axis=1)),
                       minlength=size)


class _ChannelTable:
    """Boundary transfers between distinct pairs of domains, compiled to arrays so that
    their bandwidths and latencies under K states cost a few NumPy calls (SPEC 5).

    ``src``, ``dst``: domain indices of each pair; ``flows``: boundaries (over replicas
    and stages) between them.  A pair's forward channel runs along route(src, dst),
    its backward channel along that path reversed; n_F(q), n_B(q) count the channels
    using resource q, n(q) is their sum (``add``) or their larger (under v2, with
    undirected resources, the count of flows per link), plus ``extra[q]`` (the outer
    rings of a streaming sync, SPEC 11), and a pair gets the smallest
    ``cap(q) / n(q)`` over the resources of either channel.  Its latency is that of
    the forward route."""

    def __init__(self, routes, resources: Resources, src, dst, flows, add: bool, extra=None):
        self.size = len(src)
        self.resources = resources
        links, hops = routes.link_paths(src, dst)  # (pairs, width) in path order, -1 padded
        fwd = resources.paths(src, dst, links, hops)
        if resources.directed:
            bwd = resources.paths(src, dst, links, hops, reverse=True)
            n_f, n_b = _count(fwd, flows, resources.count), _count(bwd, flows, resources.count)
            users = n_f + n_b if add else np.maximum(n_f, n_b)
            self.counts = users
            if extra is not None:  # streaming's outer rings, one more channel each (SPEC 11)
                users = users + extra
            res = np.concatenate([fwd, bwd], axis=1)
        else:
            users, res = _count(fwd, flows, resources.count), fwd
            self.counts = users
            if extra is not None:
                users = users + extra
        on = res >= 0
        self.used, col = np.unique(res[on], return_inverse=True)
        self.scale = GBPS / users[self.used]  # bytes/s per Gbit/s of capacity, shared
        self.cols = np.full(res.shape, len(self.used), dtype=np.int64)  # padding: an inf column
        self.cols[on] = col
        self.by_len = _latency_table(links, hops)

    def figures(self, states: NetworkStates) -> tuple[np.ndarray, np.ndarray]:
        """(K, pairs) bytes/s (the smallest share over both channels) and seconds."""
        K = states.count
        share = np.empty((K, len(self.used) + 1))
        share[:, :-1] = self.resources.capacity_gbps(states.bandwidth_gbps, self.used) * self.scale
        share[:, -1] = np.inf
        return share[:, self.cols].min(axis=2), _latencies(states, self.by_len, self.size)


class _RingTable:
    """The hops of every cross-domain gradient sync, one row per (stage, hop), with
    their shares of the resources they use (SPEC 5).

    Hop h goes from ``src[h]`` to ``dst[h]`` along their route carrying ``volume[h]``
    bytes (``phi(K_j) G_j``).  ``equal`` (v2): each hop is one user of each resource
    and gets ``cap / n``; otherwise processor sharing: a hop of volume V gets
    ``cap * V / sum_u min(V_u, V)`` over the users u of the resource, and over the
    ``background`` users ``(resource ids, volumes)`` of other jobs (SPEC 10 shared
    sharing; None: none).  ``entries``: this table's own users as ``(resource ids,
    volumes)``, one per (hop, resource)."""

    def __init__(self, routes, resources: Resources, src, dst, volume, equal: bool, background=None):
        self.size = len(src)
        self.resources = resources
        links, hops = routes.link_paths(src, dst)
        res = resources.paths(src, dst, links, hops)
        on = res >= 0
        self.used, col = np.unique(res[on], return_inverse=True)
        vol = np.repeat(np.asarray(volume, float), on.sum(axis=1))
        self.entries = (res[on], vol)
        if equal:
            share = (GBPS / np.bincount(col, minlength=len(self.used)).astype(float))[col]
        else:
            share = GBPS * vol / _processor_sharing(col, vol, len(self.used), self.used, background)
        self.scale = np.ones(res.shape)
        self.scale[on] = share
        self.cols = np.full(res.shape, len(self.used), dtype=np.int64)
        self.cols[on] = col
        self.by_len = _latency_table(links, hops)

    def figures(self, states: NetworkStates) -> tuple[np.ndarray, np.ndarray]:
        """(K, hops) bytes/s (each hop's smallest share) and seconds."""
        K = states.count
        cap = np.empty((K, len(self.used) + 1))
        cap[:, :-1] = self.resources.capacity_gbps(states.bandwidth_gbps, self.used)
        cap[:, -1] = np.inf
        return (cap[:, self.cols] * self.scale).min(axis=2), _latencies(states, self.by_len, self.size)


def concurrent_transfers(instance, src, dst, nbytes, bandwidth_gbps, latency_ms, spec: int | None = None
                         ) -> np.ndarray:
    """Seconds each of several transfers takes when all start together (a plan
    switch's moves, SPEC 8): transfer i carries ``nbytes[i]`` bytes from domain
    ``src[i]`` to ``dst[i]`` (indices) along its route, and takes its route's
    latency plus its bytes over its smallest share.  Under v3 (``spec`` >= 3)
    routes are direct, each link direction and uplink is a resource, and the
    users of a resource share it by processor sharing, as gradient syncs do;
    under v2 each link is shared equally.  ``bandwidth_gbps``, ``latency_ms``:
    one state, per link.  ``inf`` for a transfer over a link that is down.

    >>> concurrent_transfers(inst, [0], [1], [1e9], [8.0], [10.0])  # doctest: +SKIP
    array([1.01])
    """
    spec = check_spec(spec)
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    if len(src) == 0:
        return np.zeros(0)
    table = _RingTable(instance.routes_for(spec), Resources(instance, directed=spec >= 3), src, dst,
                       np.asarray(nbytes, float), equal=spec < 3)
    states = NetworkStates(np.asarray(bandwidth_gbps, float)[None, :], np.asarray(latency_ms, float)[None, :])
    share, lat = table.figures(states)
    with np.errstate(divide="ignore"):
        return (np.asarray(nbytes, float) / share[0]) + lat[0]


def _processor_sharing(col: np.ndarray, vol: np.ndarray, size: int, used=None, background=None) -> np.ndarray:
    """For every (user, resource) entry, ``sum_u min(V_u, V)`` over the users u of its
    resource ``col`` (V its own volume, bytes): after that many bytes have passed the
    resource at full capacity, the user's last byte has (SPEC 5).  One small matrix
    per resource; entries are the hops of the plan's rings, a few hundred at most.
    ``background``: other users ``(resource ids, volumes)`` (SPEC 10), matched to the
    columns by ``used`` (the resource id of each column), added after the own users."""
    den = np.empty(len(col))
    order = np.argsort(col, kind="stable")
    bounds = np.searchsorted(col[order], np.arange(size + 1))
    for q in range(size):
        rows = order[bounds[q]:bounds[q + 1]]
        v = vol[rows]
        den[rows] = np.minimum(v[:, None], v[None, :]).sum(axis=0)
    if background is not None and len(background[0]):
        bres, bvol = np.asarray(background[0], dtype=np.int64), np.asarray(background[1], float)
        for q in range(size):
            other = bvol[bres == used[q]]
            if len(other):
                rows = order[bounds[q]:bounds[q + 1]]
                den[rows] = den[rows] + np.minimum(other[:, None], vol[rows][None, :]).sum(axis=0)
    return den
