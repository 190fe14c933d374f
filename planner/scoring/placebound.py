"""A per-placement lower bound on the evaluator's iteration time (SPEC v3, time objective),
minimised over the placements of a shape by enumeration, for small instances (issue 29,
fourth pass).

The per-shape bound (:mod:`planner.scoring.shapebound`) must hold for every placement, so
it takes the fastest boundary any cut point could have and the smallest latency of any
link; on the tiny instances the best plans lose most of their time to the pipeline bubble
(stage 0 waits for its first backward, which crosses a 5 ms route twice), which no term
of the shape sees.  Here the placement is fixed (up to the order of the replicas: a
multiset of replica rows) and every term is taken with its own figures, each a lower
bound for every partition and schedule of that placement (explicit op lists included);
the partition is enumerated (every composition of the units into S stages), and the
bound of the placement is the smallest over the partitions of the largest term.

**Figures of a placement, for a partition** (seconds; r a replica, k a boundary, j a
stage).  c, f, g of (r, j) at the type of its domain (SPEC 5).  x_{k,r} = A_k / bw_{k,r}:
in one domain bw is its intra bandwidth; across domains bw_{k,r} <= the smallest over the
resources q of both channels of cap(q) / max(n_F(q), n_B(q)) (SPEC 5: n(q) is that or
n_F + n_B, plus streaming's outer users: never smaller), l_{k,r} its route's latency
(0 in one domain); X_{k,r} = x_{k,r} + l_{k,r}.  AR_j: the intra part exactly, the cross
part with its processor sharing exactly (it depends on the placement and the stages'
parameters only), at the fewest bits an every-step sync may use (``ring_bits``; the
codec time X_j >= 0 dropped); 0 when the per-step sync may stay in a domain (DiLoCo,
streaming: T_eff >= T_in >= max_j E_j).  w_j: the most micro-batches stage j can hold in
flight on every replica's GPU type, min(m, floor((t M - 16 P_j) / (b s stored_j)))
(every schedule's inflight_j is at most this, SPEC 5).

**Terms** (any schedule; replica r's figures, which the module leaves implicit).  Let
``before_j = sum_{i<j} (f_i + X_i)`` (stage j's first op, a forward, cannot start
earlier), ``D_j = sum_{i>j} c_i + 2 sum_{i>=j} X_i`` (after F(i) ends on j, B(i) cannot
start on j before micro-batch i has gone forward through the later stages, back, and across
both channels of every boundary from j on: each send starts no earlier than its producer
ends), and ``after_j = max(AR_j, sum_{i<j} (g_i + X_i) + AR_0)`` (T >= E_j + AR_j, and
E_0 >= E_j + that drain: the last B on j is followed by its gradient's way down to
stage 0).  For every stage j:

* serial: T >= before_j + m c_j + after_j (stage j runs its 2m ops one at a time);
* first backward: T >= before_j + f_j + D_j + m g_j + (m - w_j) f_j + after_j.  The first
  B in j's list, B(i), starts after F(i) ends on j plus D_j; every B and every F after it
  in the list runs after that start, and at most w_j forwards precede it (each of them is
  in flight when it starts);
* chains of in-flight intervals: T >= before_j + ceil(m / w_j) (f_j + D_j + g_j) + after_j.
  Micro-batch i is in flight on j from the end of its F to the end of its B, at least
  D_j + g_j; these m intervals overlap at most w_j at a time, so (an interval graph's
  colouring) they split into w_j chains of disjoint intervals, one of which holds
  k = ceil(m / w_j) of them.  Between two consecutive intervals of a chain, the later one's
  F runs on j (it starts after the earlier B ends: the stage runs one op at a time and the
  intervals are disjoint), so the chain spans at least k (D_j + g_j) + (k - 1) f_j, from
  the end of an F that starts no earlier than before_j.  (This implies Little's law,
  f_j + m (D_j + g_j) / w_j.);
* channel k (boundary between k and k + 1): T >= before_k + f_k + (m - 1) x_k + D_k + g_k
  + after_k.  The forward channel sends m transfers one at a time, the first after the
  first F on k ends; the last one's micro-batch then goes through the later stages, back
  across k, and B on k.

T is at least each term of each replica, for the plan's partition; the placement's bound
is the smallest over the memory-feasible partitions (every (r, j) with one micro-batch in
flight: (16 P_j + b s stored_j) / t <= its type's usable memory) of the largest term.

**Over placements.**  :func:`refined_shape_values` visits the shapes of
``shape_bound(...).parts`` (each a bound for every plan of its shape) in increasing order;
a shape whose part is below the best so far has its placements enumerated (rows of
domains whose nodes fit t, at most each domain's slots of cells), stopping as soon as one
placement's bound is at most the shape's part (the shape then keeps its part), or when the
enumeration exceeds a budget of placements (the shape keeps its part: still a bound).
Otherwise the shape's value is max(part, the smallest placement bound).  The instance
bound is the smallest over the shapes; shapes never visited have parts at least it.  The
budget counts placements, not seconds, so the result does not depend on the machine.

>>> refined_bound(load_instance("tiny-3dc"), ring_bits=4)       # doctest: +SKIP
0.0411...
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..problem.network import GBPS, MS, NetworkStates, Resources
from .shapebound import STATE_BYTES

#: figures (rows x partitions x stages) computed per instance and sync class at most
WORK_BUDGET = 1e7
#: what one placement counts at least (its Python work)
PLACEMENT_WORK = 2000
#: a shape with more partitions (compositions of the units into its stages) keeps its part
PARTS_MAX = 20000
#: figures spent on the pairs of rows of one shape at most
PAIR_WORK = 3e6
#: the refinement runs on instances with at most this many domains
MAX_DOMAINS = 4


def _partitions(n: int, S: int) -> np.ndarray:
    """Every composition of ``n`` units into ``S`` stages, as (count, S + 1) boundaries."""
    rows = [(0, *cuts, n) for cuts in itertools.combinations(range(1, n), S - 1)]
    return np.array(rows, dtype=np.int64).reshape(-1, S + 1)


class _Net:
    """The resources of an instance's base network (SPEC v3).  Pairs of domains are indexed
    ``a * D + b``; ``inc_f[pair]``, ``inc_b[pair]`` (pairs, resources) mark the resources of
    the pair's forward and backward channel (zero rows for a == b); ``lat[pair]`` its route's
    latency (s, 0 for a == b), ``routed[pair]`` whether it has a route (True for a == b);
    ``cap`` per resource (bytes/s), ``intra`` per domain (bytes/s); ``fwd[a, b]`` the forward
    resource ids (for the gradient rings' hops)."""

    def __init__(self, instance):
        routes = instance.routes_for(3)
        self.res = Resources(instance, directed=True)
        D = self.D = len(instance.domains)
        bw = NetworkStates.base(instance).bandwidth_gbps
        self.cap = self.res.capacity_gbps(bw, np.arange(self.res.count))[0] * GBPS
        self.inc_f = np.zeros((D * D, self.res.count))
        self.inc_b = np.zeros((D * D, self.res.count))
        self.lat = np.zeros(D * D)
        self.routed = np.zeros(D * D, bool)
        self.fwd = {}
        names = instance.domain_names
        for a in range(D):
            self.routed[a * D + a] = True
            for b in range(D):
                if a == b or (names[a], names[b]) not in routes:
                    continue
                links, hops = routes.link_paths([a], [b])
                f = self.res.paths([a], [b], links, hops)[0]
                r = self.res.paths([a], [b], links, hops, reverse=True)[0]
                self.fwd[a, b] = f[f >= 0]
                self.inc_f[a * D + b, f[f >= 0]] = 1.0
                self.inc_b[a * D + b, r[r >= 0]] = 1.0
                self.lat[a * D + b] = routes[(names[a], names[b])].latency_ms * MS
                self.routed[a * D + b] = True
        self.uses = (self.inc_f + self.inc_b) > 0
        self.intra = np.array([d.intra_bandwidth_gbps for d in instance.domains]) * GBPS
        self.columns: dict = {}  # (t, sorted column) -> :func:`_column_terms`

    def channels(self, rows: np.ndarray, shared: bool):
        """(inverse bandwidth s/byte, latency s) of every boundary of ``rows`` (n, S) of
        domain indices, each (n, S - 1), and whether every pair has a route (n,).
        ``shared``: the rows form one placement and their channels share the resources
        (n(q) = max(n_F, n_B) over all of them); else each row counts its own channels."""
        D = self.D
        pair = rows[:, :-1] * D + rows[:, 1:]
        same = rows[:, :-1] == rows[:, 1:]
        n_f = self.inc_f[pair].sum(axis=1)  # (n, resources)
        n_b = self.inc_b[pair].sum(axis=1)
        if shared:
            n_f = np.broadcast_to(n_f.sum(axis=0), n_f.shape)
            n_b = np.broadcast_to(n_b.sum(axis=0), n_b.shape)
        load = np.maximum(n_f, n_b) / self.cap  # seconds per byte of one channel, per resource
        inv = np.where(self.uses[pair], load[:, None, :], 0.0).max(axis=2)
        inv = np.where(same, 1.0 / self.intra[rows[:, :-1]], inv)
        return inv, self.lat[pair], self.routed[pair].all(axis=1)


def _rows(doms, slots, S: int, most: int, lat=None, floor: float = 0.0, cut: float = math.inf):
    """Every row (tuple of S domain indices from ``doms``) using at most ``slots[d]`` cells
    of each domain d, in lexicographic order; None when there are more than ``most``.
    Rows whose round trip is at least ``cut`` are left out: ``floor`` + 2 (the latencies
    ``lat[a][b]`` (s) of its boundaries) (T >= the first-backward term of stage 0 >= the
    compute of one micro-batch through every stage and back, ``floor``, plus every
    boundary's latency both ways)."""
    out: list[tuple] = []
    use = dict.fromkeys(doms, 0)
    row: list[int] = []

    def rec(spent):
        if len(out) > most:
            return
        if len(row) == S:
            out.append(tuple(row))
            return
        for d in doms:
            if use[d] < slots[d]:
                more = spent + (2 * lat[row[-1]][d] if row and lat is not None else 0.0)
                if floor + more >= cut:
                    continue
                use[d] += 1
                row.append(d)
                rec(more)
                row.pop()
                use[d] -= 1

    rec(0.0)
    return None if len(out) > most else out


def _placements(rows, slots, R: int, keep, partial=None):
    """Multisets of R rows (tuples of domain indices, from ``rows``) using at most
    ``slots[d]`` cells of each domain d, rows in non-decreasing order of index; a row is
    offered only while ``keep(i, chosen)`` holds for its index i and the indices already
    chosen (checked as the search reaches it), and a partial multiset of two or more rows
    is extended only while ``partial(rows)`` holds (None: always)."""
    use = dict.fromkeys(slots, 0)

    picked: list[int] = []

    def rec(start, left, chosen):
        if left == 0:
            yield tuple(chosen)
            return
        if partial is not None and len(chosen) >= 2 and not partial(chosen):
            return
        for i in range(start, len(rows)):
            if not keep(i, picked):
                continue
            row = rows[i]
            for d in row:
                use[d] += 1
            if all(use[d] <= slots[d] for d in row):
                chosen.append(row)
                picked.append(i)
                yield from rec(i, left - 1, chosen)
                chosen.pop()
                picked.pop()
            for d in row:
                use[d] -= 1

    yield from rec(0, R, [])


class _ShapeData:
    """Per-partition figures of a shape's stages: ``P`` (parts, S) parameters, ``A``
    (parts, S - 1) bytes of each boundary, and per GPU type k (stacked on the first axis)
    ``f``, ``g`` (types, parts, S) seconds, ``ok`` one micro-batch in flight fits, ``w``
    the most in flight that fit (1..m)."""

    def __init__(self, instance, t: int, b: int, S: int, m: int):
        wl = instance.workload
        units = instance.units
        n = len(units)
        tokens = b * wl.seq_len
        beta = 3.0 if wl.recompute else 2.0
        cuts = self.cuts = _partitions(n, S)
        pre = lambda v: np.concatenate([[0.0], np.cumsum(np.asarray(v, float))])  # noqa: E731
        lo, hi = cuts[:, :-1], cuts[:, 1:]
        seg = lambda v: (lambda p: p[hi] - p[lo])(pre(v))  # noqa: E731
        Fj = seg([u.fwd_flops_per_token for u in units])
        self.P = seg([u.params for u in units])
        stored = seg([u.stored_bytes_per_token for u in units])
        tpb = seg([u.tp_bytes_per_token for u in units])
        nflop = seg([float(u.fwd_flops_per_token > 0) for u in units])
        out = np.array([u.out_bytes_per_token for u in units], float)
        self.A = out[hi[:, :-1] - 1] * tokens  # (parts, S-1)
        f, g, w, ok = [], [], [], []
        for gpu in instance.gpu_types:
            rate = t * gpu.flops_per_s
            y = np.asarray(gpu.tp_allreduce_s(tpb * tokens, t), float)
            o = (gpu.unit_overhead_ms or 0.0) * MS
            f.append(Fj * tokens / rate + y + nflop * o)
            g.append(beta * Fj * tokens / rate + y + beta * nflop * o)
            room = instance.memory_limit_of(gpu) * t - STATE_BYTES * self.P
            act = tokens * stored
            ok.append(room >= act)  # one micro-batch in flight fits
            with np.errstate(divide="ignore", invalid="ignore"):
                most = np.where(act > 0, np.floor(room / np.where(act > 0, act, 1.0)), m)
            w.append(np.clip(most, 1, m))
        self.f, self.g, self.w, self.ok = np.array(f), np.array(g), np.array(w), np.array(ok)
        self.m, self.t, self.S = m, t, S
        self.cols = np.arange(S)[None, None, :]
        self.parts = np.arange(len(self.P))[None, :, None]

    def at(self, stage_ends) -> "_ShapeData":
        """A copy holding the one partition whose stages end at ``stage_ends`` (units)."""
        import copy

        i = int(np.nonzero((self.cuts[:, 1:] == np.asarray(stage_ends)).all(axis=1))[0][0])
        out = copy.copy(self)
        out.P, out.A, out.cuts = self.P[i:i + 1], self.A[i:i + 1], self.cuts[i:i + 1]
        out.f, out.g, out.w, out.ok = (a[:, i:i + 1] for a in (self.f, self.g, self.w, self.ok))
        out.parts = np.arange(1)[None, :, None]
        return out

    def per_row(self, table, types):
        """``table`` (types, parts, S) picked per row of ``types`` (n, S): (n, parts, S), or
        (1, parts, S) with one GPU type (the same for every row)."""
        if len(table) == 1:
            return table[:1]
        return table[types[:, None, :], self.parts, self.cols]


def _ring_times(net: _Net, cols, G, phi_kind: str, t: int):
    """AR_j (parts, S) of the placement with stage columns ``cols`` (lists of domain
    indices), payloads ``G`` (parts, S) bytes: SPEC 5's intra part and cross part with
    processor sharing, exactly."""
    parts, S = G.shape
    ar = np.zeros((parts, S))
    users = []  # (stage, resource ids of one hop, volume factor)
    ring_lat = np.zeros(S)
    Kj = np.ones(S, dtype=np.int64)
    for j, col in enumerate(cols):
        doms, cnt = np.unique(col, return_counts=True)
        for d, c in zip(doms.tolist(), cnt.tolist()):
            if c > 1:
                ph = 2.0 if phi_kind == "reduce_broadcast" else 2.0 * (c - 1) / c
                ar[:, j] = np.maximum(ar[:, j], ph * (G[:, j] / t) / net.intra[d])
        K = len(doms)
        Kj[j] = K
        if K > 1:
            lat = 0.0
            for a, b in zip(doms.tolist(), np.roll(doms, -1).tolist()):
                if (a, b) not in net.fwd:
                    ar[:, j] = np.inf
                    continue
                users.append((j, net.fwd[a, b]))
                lat = max(lat, float(net.lat[a * net.D + b]))
            ring_lat[j] = lat
    if users:
        phiK = np.where(Kj > 1, 2.0 if phi_kind == "reduce_broadcast" else 2.0 * (Kj - 1) / np.maximum(Kj, 1),
                        0.0)
        V = phiK[None, :] * G  # (parts, S)
        by_res: dict[int, list[int]] = {}
        for j, ids in users:
            for q in ids.tolist():
                by_res.setdefault(q, []).append(j)
        cross = np.zeros((parts, S))
        for q, stages in by_res.items():
            Vq = V[:, stages]  # (parts, users)
            den = np.minimum(Vq[:, :, None], Vq[:, None, :]).sum(axis=1)  # per user: sum_u min(V_u, V)
            for i, j in enumerate(stages):
                cross[:, j] = np.maximum(cross[:, j], den[:, i] / net.cap[q])
        on = (Kj > 1)[None, :] & (G > 0)
        ar = ar + np.where(on, cross + (2 * (Kj - 1) * ring_lat)[None, :], 0.0)
    return ar


def _row_times(data: _ShapeData, types, inv, lat, ar, w):
    """The module docstring's largest term per row and partition, (n, parts) seconds, for
    rows with GPU types ``types`` (n, S), boundary figures ``inv``, ``lat`` (n, S - 1),
    syncs ``ar`` (parts, S) and in-flight limits ``w`` (n or 1, parts, S); ``inf`` where a
    stage of the row does not fit."""
    m = data.m
    f, g = data.per_row(data.f, types), data.per_row(data.g, types)
    ok = data.per_row(data.ok, types).all(axis=2)
    c = f + g
    n, (_, parts, S) = len(types), f.shape
    x = data.A[None] * inv[:, None, :]
    X = x + lat[:, None, :]
    zero = np.zeros((n, parts, 1))
    Xp = np.concatenate([X, zero], axis=2)  # X_{S-1} = 0
    before = np.concatenate([zero, np.cumsum(f[:, :, :-1] + X, axis=2)], axis=2)
    drain = np.concatenate([zero, np.cumsum(g[:, :, :-1] + X, axis=2)], axis=2)
    after = np.maximum(ar[None], drain + ar[None, :, :1])
    c_later = np.cumsum(c[:, :, ::-1], axis=2)[:, :, ::-1] - c  # sum_{i>j} c_i
    Dj = c_later + 2 * np.cumsum(Xp[:, :, ::-1], axis=2)[:, :, ::-1]
    top = np.maximum(np.maximum(m * c, f + Dj + m * g + (m - w) * f), np.ceil(m / w) * (f + Dj + g))
    top = (before + top + after).max(axis=2)
    if S > 1:
        chan = before[:, :, :-1] + f[:, :, :-1] + (m - 1) * x + Dj[:, :, :-1] + g[:, :, :-1] + after[:, :, :-1]
        top = np.maximum(top, chan.max(axis=2))
    return np.where(ok, top, np.inf)


def row_bounds(instance, net: _Net, data: _ShapeData, rows) -> np.ndarray:
    """Per row (n, S) of domain indices, the bound of a placement made of that row alone
    (its own channels, no sync, its own in-flight limits), smallest over the partitions:
    at most the bound of every placement holding the row (more channels only share more,
    AR >= 0, more replicas only lower w and leave fewer partitions), and the placement's
    bound itself when R = 1 (no sync then)."""
    rows = np.asarray(rows, dtype=np.int64)
    types = np.asarray(instance.domain_type, dtype=np.int64)[rows]
    inv, lat, routed = net.channels(rows, shared=False)
    w = data.per_row(data.w, types)
    T = _row_times(data, types, inv, lat, np.zeros(data.P.shape), w).min(axis=1)
    return np.where(routed, T, np.inf)


def pair_bounds(instance, net: _Net, data: _ShapeData, rows, chunk: int = 512) -> np.ndarray:
    """(n, n) the bound of the placement made of rows i and j alone (i == j: two copies),
    their channels sharing the resources, no sync, one schedule: at most the bound of every
    placement holding both (the argument of :func:`row_bounds`)."""
    rows = np.asarray(rows, dtype=np.int64)
    n, S = rows.shape
    out = np.full((n, n), np.inf)
    if S < 2:
        alone = row_bounds(instance, net, data, rows)
        return np.maximum.outer(alone, alone)
    types = np.asarray(instance.domain_type, dtype=np.int64)[rows]
    pair = rows[:, :-1] * net.D + rows[:, 1:]
    same = rows[:, :-1] == rows[:, 1:]
    n_f, n_b = net.inc_f[pair].sum(axis=1), net.inc_b[pair].sum(axis=1)  # (n, resources)
    routed = net.routed[pair].all(axis=1)
    w_row = data.per_row(data.w, types)  # (n, parts, S)
    ii, jj = np.triu_indices(n)
    for lo in range(0, len(ii), chunk):
        gi, gj = ii[lo:lo + chunk], jj[lo:lo + chunk]
        load = np.maximum(n_f[gi] + n_f[gj], n_b[gi] + n_b[gj]) / net.cap  # (G, resources)
        vals = []
        for side in (gi, gj):
            inv = np.where(net.uses[pair[side]], load[:, None, :], 0.0).max(axis=2)
            inv = np.where(same[side], 1.0 / net.intra[rows[side, :-1]], inv)
            vals.append((inv, net.lat[pair[side]]))
        w = w_row if len(w_row) == 1 else np.minimum(w_row[gi], w_row[gj])
        T = np.maximum(*[_row_times(data, types[side], inv, lat, np.zeros(data.P.shape), w)
                         for side, (inv, lat) in zip((gi, gj), vals)]).min(axis=1)
        T = np.where(routed[gi] & routed[gj], T, np.inf)
        out[gi, gj] = T
        out[gj, gi] = T
    return out


def _column_terms(net: _Net, col, phi_kind: str, t: int) -> tuple[float, float]:
    """(a, l) with AR_j >= a G_j + l for a stage whose replicas sit in the domains ``col``
    (G_j > 0): the intra part exactly (a of it per byte), the cross part with the stage's
    own hops only (each of its hops' resources q carries at least its own hops' volumes:
    sum_u min(V_u, V) >= (own hops on q) V), its latency term exactly.  Independent of the
    other stages, so it is computed once per column."""
    doms, cnt = np.unique(np.asarray(col), return_counts=True)
    ph = (lambda k: 2.0) if phi_kind == "reduce_broadcast" else (lambda k: 2.0 * (k - 1) / k)
    a = max([ph(c) / t / net.intra[d] for d, c in zip(doms.tolist(), cnt.tolist()) if c > 1], default=0.0)
    K = len(doms)
    if K < 2:
        return a, 0.0
    own = np.zeros(net.res.count)
    lat = 0.0
    for x, y in zip(doms.tolist(), np.roll(doms, -1).tolist()):
        if (x, y) not in net.fwd:
            return math.inf, math.inf
        np.add.at(own, net.fwd[x, y], 1.0)
        lat = max(lat, float(net.lat[x * net.D + y]))
    return a + ph(K) * float(np.max(own / net.cap)), 2 * (K - 1) * lat


def placement_values(instance, net: _Net, data: _ShapeData, placement, ring_bits) -> np.ndarray:
    """:func:`placement_bound` per partition of ``data`` (parts,), exact syncs."""
    rows = np.asarray(placement, dtype=np.int64)
    R, S = rows.shape
    types = np.asarray(instance.domain_type, dtype=np.int64)[rows]
    inv, lat, routed = net.channels(rows, shared=True)
    if not routed.all():
        return np.full(len(data.P), np.inf)
    w = data.per_row(data.w, types).min(axis=0, keepdims=True)
    ar = (np.zeros(data.P.shape) if ring_bits is None or R == 1 else
          _ring_times(net, [rows[:, j] for j in range(S)], data.P * ring_bits / 8.0,
                      instance.workload.gradient_sync, data.t))
    return _row_times(data, types, inv, lat, ar, w).max(axis=0)


def placement_bound(instance, net: _Net, data: _ShapeData, placement, ring_bits, cut: float | None = None
                    ) -> float:
    """The module docstring's bound for one placement (R rows of domain indices) over every
    partition of ``data``'s shape; ``inf`` when no partition fits in memory.  ``cut``: when
    a weaker bound of the placement (the syncs with their own hops only) is already at least
    ``cut``, that one is returned (the caller needs no more)."""
    rows = np.asarray(placement, dtype=np.int64)  # (R, S)
    R, S = rows.shape
    types = np.asarray(instance.domain_type, dtype=np.int64)[rows]
    inv, lat, routed = net.channels(rows, shared=True)
    if not routed.all():
        return math.inf
    w = data.per_row(data.w, types).min(axis=0, keepdims=True)  # one schedule for every replica
    first = sorted({tuple(r): i for i, r in enumerate(rows.tolist())}.values())  # equal rows, equal terms
    types, inv, lat = types[first], inv[first], lat[first]
    if ring_bits is None or R == 1:
        return float(_row_times(data, types, inv, lat, np.zeros(data.P.shape), w).max(axis=0).min())
    G = data.P * ring_bits / 8.0
    kind = instance.workload.gradient_sync
    if cut is not None:  # first the syncs' own-hop bound (cached per column): enough when it reaches cut
        terms = []
        for j in range(S):
            key = (data.t, tuple(sorted(rows[:, j].tolist())))
            if key not in net.columns:
                net.columns[key] = _column_terms(net, rows[:, j], kind, data.t)
            terms.append(net.columns[key])
        a, l = np.array(terms).T
        with np.errstate(invalid="ignore"):
            ar = np.where(G > 0, a[None] * G + l[None], 0.0)
        low = float(_row_times(data, types, inv, lat, ar, w).max(axis=0).min())
        if low >= cut:
            return low
    ar = _ring_times(net, [rows[:, j] for j in range(S)], G, kind, data.t)
    return float(_row_times(data, types, inv, lat, ar, w).max(axis=0).min())


def refined_shape_values(instance, parts: dict, ring_bits, budget: float = WORK_BUDGET) -> tuple[float, dict]:
    """(the instance bound, shape -> its refined value for the shapes visited) from the
    per-shape ``parts`` (shape (t, b, R, S) -> a bound for every plan of the shape, on
    the instance's time), by the module docstring's enumeration.  ``budget``: the work
    allowed over all shapes, in figures computed (rows x partitions x stages, each
    placement counted at least :data:`PLACEMENT_WORK`); a shape that would exceed it keeps
    its part (deterministic: the result does not depend on the machine's speed)."""
    net = _Net(instance)
    gbs = instance.workload.global_batch_size
    n = len(instance.units)
    best, out, left = math.inf, {}, float(budget)
    lat = net.lat.reshape(net.D, net.D).tolist()
    for shape, part in sorted(parts.items(), key=lambda kv: kv[1]):
        if not part < best:
            break
        t, b, R, S = shape
        usable = [i for i, d in enumerate(instance.domains) if d.gpus_per_node >= t and d.gpus >= t]
        slots = {i: instance.domains[i].gpus // t for i in usable}
        size = math.comb(n - 1, S - 1) * S  # figures per row
        if math.comb(n - 1, S - 1) > PARTS_MAX or size > left:
            out[shape] = part  # too many partitions: the shape's part stands
            best = min(best, part)
            continue
        data = _ShapeData(instance, t, b, S, gbs // (R * b))
        rows = _rows(usable, slots, S, int(left // size), lat, float((data.f + data.g).sum(axis=2).min()), best)
        if rows is None:
            out[shape] = part  # too large to enumerate: the shape's part stands
            best = min(best, part)
            continue
        if not rows:  # every row's round trip reaches best (or none fits): so does every placement
            out[shape] = max(part, best)
            continue
        left -= len(rows) * size
        # a row alone (its own channels, no sync) bounds every placement holding it
        row_low = row_bounds(instance, net, data, rows).tolist()
        if R == 1:  # the rows are the placements (those left out reach best)
            low = min(row_low, default=math.inf)
            out[shape] = max(part, min(low, best))
            best = min(best, out[shape])
            continue
        low, done, before = math.inf, True, best
        alive = [i for i, v in enumerate(row_low) if v < best]  # the other rows are never offered
        pairs = None
        if 2 <= len(alive) and len(alive) * (len(alive) + 1) * size <= min(left / 4, PAIR_WORK):
            pairs = np.full((len(rows), len(rows)), np.inf)
            pairs[np.ix_(alive, alive)] = pair_bounds(instance, net, data, [rows[i] for i in alive])
            left -= len(alive) * (len(alive) + 1) * size

        def keep(i, chosen):
            cut = min(best, low)
            if not row_low[i] < cut:
                return False
            return pairs is None or all(pairs[i, j] < cut for j in chosen)

        for placement in _placements(rows, slots, R, keep):
            cost = max(PLACEMENT_WORK, len(set(placement)) * size)
            if cost > left:
                done = False
                break
            left -= cost
            low = min(low, placement_bound(instance, net, data, placement, ring_bits, cut=min(best, low)))
            if low <= part:
                break
        value = max(part, min(low, before)) if done else part
        out[shape] = value
        best = min(best, value)
    return best, out
