"""A per-shape lower bound on the evaluator's iteration time (SPEC v3), valid for
every plan of the shape whatever its placement, partition and schedule (explicit
op lists included); the instance bound takes the smallest over the shapes.

A shape is (tp t, micro-batch b, replicas R, stages S), m = global_batch / (R b).
All figures are those of the *optimistic* one-type instance
(:func:`planner.scoring.bounds.fastest_type_instance`): every plan of the instance is a
plan there with no larger f, g and no smaller memory, and T is non-decreasing in
every f and g (SPEC 7, "GPU types").  Units: seconds, bytes, bytes/s.

**The pipeline (any schedule).**  Stage j of a replica runs its m forwards and m
backwards one at a time, m c_j seconds in all.  Its first op is a forward (every
F(i) precedes B(i) in its list), which cannot start before micro-batch i has gone
forward through stages 0..j-1 and their boundaries: a_j >= sum_{i<j} (f_i + x_i).
Its last op is a backward B(i*) ending at E_j; B(i*) on stage j-1 starts after
its gradient arrives (a send starts no earlier than its producer ends), and so
on up to stage 0.  Hence

    T >= E_0 >= sum_{i<j} (c_i + 2 x_i) + m c_j            for every stage j,   (1)
    T >= E_j + AR_j >= sum_{i<j} (f_i + x_i) + m c_j + AR_j.                      (2)

A transfer of boundary k takes x_k >= A_k / (the fastest bandwidth any boundary
can have: a domain's intra bandwidth, or a route's smallest capacity), so the
bound uses x_min, the smallest such over the possible cut points.  A stage's
memory per GPU needs at least one micro-batch in flight (every schedule keeps
F(i) before B(i)): (16 P_j + b s stored_j) / t <= the usable memory.  With these,
the smallest over partitions of max_j (1) is a dynamic programme over the units
(:func:`_pipeline_dp`), as exact as the terms.

**The WAN, when the shape does not fit one domain.**  If R S t exceeds the GPUs
(in slots of t) of every domain whose nodes fit t, the plan spans >= 2 domains.
Then either (a) some stage j has replicas in >= 2 domains, or (b) every stage's
replicas share one domain D_j and some boundary k has D_k != D_{k+1}.

* (a) The sync of stage j has a cross part over K >= 2 domains: phi(K) G_j /
  ring_bandwidth + 2 (K - 1) ring_latency >= phi(K) G_j / cap + 2 (K - 1) l_min, where
  cap bounds the capacity of every route (:func:`network_figures`; a share never
  exceeds the capacity), l_min the smallest link
  latency, G_j the payload (2 P_j at 16 bits; P_j q_min / 8 when an every-step
  sync compressed to q_min bits is accepted); K >= ceil(R / the most slots of one
  domain).  It enters (2) for each crossing stage: at most (the sum over domains
  of slots // R) stages can keep their R replicas in one domain, so at least S
  minus that many cross, and the programme counts the crossing stages.  When DiLoCo or
  streaming is allowed the per-step (inner) sync may stay in one domain: (a)
  then forces nothing and the bound for those plans drops the ring term (their
  T_eff >= T_in, SPEC 11).
* (b) All R forward channels of boundary k run along the same route, so each
  has bandwidth <= cap / R: x_k >= R A_k / cap.  The channel sends m transfers
  one at a time; the first cannot leave before micro-batch i's forward through
  stages 0..k, and after the last one arrives (latency >= l_min) its
  micro-batch goes forward through k+1.., back, and across boundary k again:
  T >= sum_i c_i + (m + 1) R A_min / cap + 2 l_min, with A_min the smallest
  boundary bytes over the cut points.  With S = 1 (b) is impossible, with R = 1
  (a) is.

The shape's bound is (1)'s programme when the shape fits one domain, else (a)'s
programme when some stage must cross, else the smaller of (a)'s and max((1), (b)).

**GPU types** (SPEC v3 (g)).  With ``slow`` (:func:`slow_types`): when R S exceeds
the slots of the domains with the fastest type, the R S (replica, stage) pairs
put at least R S - those slots on slower types, so some replica has at least
k = ceil(excess / R) of its stages there; (1) holds for that replica with those
stages' c at the slower types' optimistic figures (and their memory on the
largest of those types), the others' at the optimistic ones.  The programme
counts k such stages; the result is a second bound on the same shape, and the
shape takes the larger.  For a cost instance every bound on T is multiplied by
the price of the cheapest R S slots (every GPU of the plan is paid for T), and
the alternatives add the WAN bytes they force (a boundary: 2 global batch x
seq_len x the smallest cut's bytes per token; a crossing sync: 2 P q / 8 of the
smallest unit per crossing stage) at ``wan_price_per_gb``.  The instance's bound is the
smallest over every shape whose GPUs fit the instance, shapes whose (1) alone
already exceeds the best so far being skipped (their bound cannot be the
minimum).

>>> shape_bound(instance).value                          # doctest: +SKIP
11.2
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..problem.network import GBPS, MS
from ..problem.space import divisors

#: bytes of weights, gradients and Adam state per parameter (SPEC 3)
STATE_BYTES = 16.0


@dataclass(frozen=True)
class ShapeBound:
    """The smallest per-shape bound (seconds, or cost per iteration for ``cost``) and
    the shape attaining it ``(tp, b, R, S)``; ``shapes`` counts the shapes bounded by
    the programme (the others were skipped by their compute bound or have no plan)."""

    value: float
    shape: tuple | None
    shapes: int = 0
    skipped: int = 0
    parts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Network:
    """What the WAN terms read: ``cap`` the largest capacity of any route (bytes/s,
    the smallest of its links and its ends' uplinks; 0 without routes), ``lat_min``
    the smallest link latency (s), ``bw_any`` the fastest any boundary can be
    (bytes/s: intra bandwidths and ``cap``)."""

    cap: float
    lat_min: float
    bw_any: float


def network_figures(instance) -> Network:
    """:class:`Network` of ``instance``.  ``cap`` does not depend on the routes: a route
    from a to b leaves a on one of a's links and enters b on one of b's, and uses their
    uplinks, so its capacity is at most min(the fastest link at a, the fastest at b,
    uplink(a), uplink(b)); ``cap`` is the largest of these over pairs a != b (the
    second largest per-domain figure).  So it also holds on a slice of the instance
    (fewer links, no more bandwidth, other routes; SPEC 10).  Example: two domains on
    one 8 Gbit/s link, no uplinks: cap = 1e9 B/s."""
    doms = instance.domains
    intra = max(d.intra_bandwidth_gbps for d in doms) * GBPS
    if not instance.links or len(doms) < 2:
        return Network(0.0, 0.0, intra)
    fastest = {d.name: 0.0 for d in doms}
    for link in instance.links:
        for end in (link.a, link.b):
            fastest[end] = max(fastest[end], link.bandwidth_gbps)
    per_domain = sorted((min(fastest[d.name], np.inf if d.uplink_gbps is None else d.uplink_gbps)
                         for d in doms), reverse=True)
    cap_max = float(per_domain[1]) * GBPS
    lat = min(link.latency_ms for link in instance.links) * MS
    return Network(cap_max, lat, max(intra, cap_max))


@dataclass(frozen=True)
class SlowTypes:
    """The GPU types of a mixed instance other than the fastest (SPEC v3 (g)), as one
    optimistic type: ``gpu`` with their largest peak * mfu and NVLink bandwidth (none
    when one has none), their smallest unit overhead and largest memory; ``fast``,
    per domain in instance order, whether its type has the fastest peak * mfu."""

    gpu: object
    memory_limit: float
    fast: tuple[bool, ...]


def slow_types(instance) -> SlowTypes | None:
    """:class:`SlowTypes` of ``instance``, None with one type or when every type used
    is as fast as the fastest.  Example: 128 H100 + 576 A100 gives the A100 and
    ``fast`` True on the H100 domains."""
    if not instance.heterogeneous:
        return None
    from ..problem.instance import GPU

    types = instance.gpu_types
    top = max(types[u].flops_per_s for u in instance.types_used)
    slow = [types[u] for u in instance.types_used if types[u].flops_per_s < top]
    if not slow:
        return None
    nvlink = [g.nvlink_bandwidth_gbps for g in slow]
    fast = max(slow, key=lambda g: g.flops_per_s)
    gpu = GPU.model_construct(name="slow", peak_tflops=fast.peak_tflops, mfu=fast.mfu,
                              memory_gb=max(g.memory_gb for g in slow),
                              nvlink_bandwidth_gbps=None if None in nvlink else max(nvlink),
                              unit_overhead_ms=min(g.unit_overhead_ms for g in slow))
    return SlowTypes(gpu, instance.memory_limit_of(gpu),
                     tuple(types[u].flops_per_s >= top for u in instance.domain_type))


def _pipeline_dp(base, ring, stages, step, cap, ring_steps: int = 1):
    """Smallest over partitions into 1..``stages`` stages of the largest stage term,
    by the number of crossing stages.

    ``base[a, e]``: term (1) of a stage holding units [a, e) at index 0 (inf when it
    cannot exist); stage j adds ``2 j step``.  ``ring[a, e]``: the term of a
    designated ("crossing") stage at index 0, adding ``ring_steps j step`` (term (2)
    of a crossing stage: 1; term (1) on a slower GPU type: 2); such a stage takes the
    larger of its two terms; or None.  Returns ``v`` of shape (cap + 1, stages): ``v[c, S - 1]`` the
    value over partitions into S stages with c crossing stages (``cap``: at least
    ``cap``); inf where impossible.  Example: one unit of c = 1, m = 2 (base [[inf,
    2]]), no ring: v = [[2.0]]."""
    n = base.shape[1] - 1
    cap = cap if ring is not None else 0
    best = np.full((cap + 1, n + 1), np.inf)  # [c, e]: units [0, e) in j + 1 stages
    best[0] = base[0]
    if cap:
        best[1] = np.maximum(base[0], ring[0])
    v = [best[:, n].copy()]
    for j in range(1, stages):
        term = base + 2 * j * step
        new = np.maximum(best[:, :, None], term[None]).min(axis=1)  # the stage does not cross
        if cap:
            desig = np.maximum(term, ring + ring_steps * j * step)
            crossed = np.maximum(best[:, :, None], desig[None]).min(axis=1)  # it does: c + 1
            new[1:] = np.minimum(new[1:], crossed[:-1])
            new[cap] = np.minimum(new[cap], crossed[cap])
        best = new
        v.append(best[:, n].copy())
    return np.array(v).T


def shape_bound(instance, ring_bits: int | None = 16, objective: str = "time",
                slow: SlowTypes | None = None) -> ShapeBound:
    """The smallest per-shape bound over every shape of ``instance`` (see module
    docstring): on T (seconds) for ``objective="time"``, on the cost per iteration
    for ``"cost"``.  ``instance`` must be a one-type instance (the optimistic one).
    ``ring_bits``: the fewest bits per parameter an every-step sync may send (the
    crossing stage's payload is P_j ring_bits / 8); None when the per-step sync may
    stay inside one domain (DiLoCo, streaming), so (a) forces nothing.  ``slow``: the
    slower types of the mixed instance ``instance`` is the optimistic copy of (see
    :func:`slow_types`); then a shape with more (replica, stage) slots than the fastest
    type's domains hold has a replica with at least ceil(excess / R) stages on a
    slower type, and (1) holds for that replica with those stages' f and g on the slower
    type (their memory on its largest).  ``inf`` when no shape has a memory-feasible
    partition.

    >>> shape_bound(inst, ring_bits=4).value                 # doctest: +SKIP
    """
    wl = instance.workload
    gpu = instance.gpu
    units = instance.units
    n = len(units)
    gbs, s = wl.global_batch_size, wl.seq_len
    beta = 3.0 if wl.recompute else 2.0
    o = (gpu.unit_overhead_ms or 0.0) * MS
    rate = gpu.flops_per_s
    limit = instance.memory_limit_bytes
    net = network_figures(instance)
    F = np.array([u.fwd_flops_per_token for u in units], float)
    P = np.array([u.params for u in units], float)
    stored = np.array([u.stored_bytes_per_token for u in units], float)
    tpb = np.array([u.tp_bytes_per_token for u in units], float)
    nflop = (F > 0).astype(float)
    out_cut = np.array([u.out_bytes_per_token for u in units[:-1]], float)  # boundary after unit k
    pre = lambda v: np.concatenate([[0.0], np.cumsum(v)])  # noqa: E731
    Ppre, Spre = pre(P), pre(stored)
    Pint = Ppre[None, :] - Ppre[:, None]  # [a, e): parameters of units a..e-1
    Sint = Spre[None, :] - Spre[:, None]
    valid = np.triu(np.ones((n + 1, n + 1), bool), k=1)

    # the shapes' cheap compute bound first, to visit the most promising first
    todo = []
    for t in sorted(set(wl.tensor_parallel)):
        doms = [d for d in instance.domains if d.gpus_per_node >= t and d.gpus >= t]
        if not doms:
            continue
        slots_total = sum(d.gpus // t for d in doms)
        slots = [d.gpus // t for d in doms]
        fast_slots = (sum(d.gpus // t for d, quick in zip(instance.domains, slow.fast)
                          if quick and d.gpus_per_node >= t) if slow is not None else None)
        slot_prices = np.sort(np.concatenate([np.full(d.gpus // t, d.price_per_gpu_hour) for d in doms]))
        for b in sorted(set(wl.micro_batch_sizes)):
            if gbs % b:
                continue
            tokens = b * s
            y = np.asarray(gpu.tp_allreduce_s(tpb * tokens, t), float)
            f = F * tokens / (t * rate) + y + nflop * o
            g = beta * F * tokens / (t * rate) + y + beta * nflop * o
            c = f + g
            c_slow = None
            if slow is not None:
                srate = slow.gpu.flops_per_s
                sy = np.asarray(slow.gpu.tp_allreduce_s(tpb * tokens, t), float)
                so = slow.gpu.unit_overhead_ms * MS
                c_slow = (1 + beta) * F * tokens / (t * srate) + 2 * sy + (1 + beta) * nflop * so
            for R in divisors(gbs // b):
                if R > slots_total:
                    break
                m = gbs // (R * b)
                S_max = min(instance.max_stages, n, slots_total // R)
                if S_max < 1:
                    continue
                cheap = m * c.sum() / S_max
                todo.append((cheap, t, b, R, m, S_max, slots, f, c, tokens, slot_prices, c_slow, fast_slots))
    todo.sort(key=lambda row: row[0])

    best_value, best_shape, counted, skipped = np.inf, None, 0, 0
    for cheap, t, b, R, m, S_max, slots, f, c, tokens, slot_prices, c_slow, fast_slots in todo:
        slots_one = max(slots)
        if objective == "time" and cheap >= best_value:
            skipped += 1
            continue
        Cpre, Fpre = pre(c), pre(f)
        Cint = Cpre[None, :] - Cpre[:, None]
        fits = valid & ((STATE_BYTES * Pint + tokens * Sint) / t <= limit)
        if not fits[:, n].any():
            continue
        base = np.where(fits, Cpre[:, None] + m * Cint, np.inf)
        x_min = float(out_cut.min()) * tokens / net.bw_any if n > 1 else 0.0
        forced = R * S_max > slots_one  # some S of this (t, b, R) cannot sit in one domain
        unsplit = sum(k // R for k in slots)  # stages whose R replicas can share a domain
        K = -(-R // slots_one)  # a stage's replicas span at least K domains
        ring = None
        if forced and R > 1 and ring_bits is not None and net.cap > 0:
            phi = 2.0 if wl.gradient_sync == "reduce_broadcast" else 2.0 * (max(K, 2) - 1) / max(K, 2)
            lat = 2 * (max(K, 2) - 1) * net.lat_min
            sync = np.where(Pint > 0, phi * Pint * ring_bits / 8.0 / net.cap + lat, 0.0)
            ring = np.where(fits, Fpre[:, None] + m * Cint + sync, np.inf)
        v = _pipeline_dp(base, ring, S_max, x_min, max(1, S_max - unsplit))
        counted += 1
        v_slow = None
        if c_slow is not None and R * S_max > fast_slots:
            # a replica with k stages on a slower type: those stages' (1) at its figures
            Sfit = valid & ((STATE_BYTES * Pint + tokens * Sint) / t <= slow.memory_limit)
            Cs = pre(c_slow)
            slow_base = np.where(Sfit, Cpre[:, None] + m * (Cs[None, :] - Cs[:, None]), np.inf)
            v_slow = _pipeline_dp(base, slow_base, S_max, x_min, max(1, -(-(R * S_max - fast_slots) // R)),
                                  ring_steps=2)
        for S in range(1, S_max + 1):
            V0 = float(v[0, S - 1])
            if not np.isfinite(V0):
                continue
            if R * S <= slots_one:
                value, wan = V0, 0.0
            else:
                need = S - unsplit  # stages that must cross: (a) certainly holds when >= 1
                alts = []
                if R > 1:
                    if ring is None:
                        alts.append((V0, 0.0))  # the per-step sync may stay in one domain
                    else:
                        alts.append((float(v[min(max(need, 1), len(v) - 1):, S - 1].min()),
                                     2.0 * max(need, 1) * float(P.min()) * ring_bits / 8.0))
                if S > 1 and (need < 1 or ring is None):
                    if net.cap > 0:
                        a_min = float(out_cut.min()) * tokens
                        tb = float(c.sum()) + (m + 1) * R * a_min / net.cap + 2 * net.lat_min
                        alts.append((max(V0, tb), 2.0 * gbs * s * float(out_cut.min())))
                    else:
                        alts.append((V0, 0.0))
                if not alts:
                    continue
                value, wan = min(alts)
                if objective == "cost":
                    value = min(a * t * float(slot_prices[:R * S].sum()) / 3600.0
                                + w * instance.options.wan_price_per_gb / 1e9 for a, w in alts)
            if objective == "cost" and R * S <= slots_one:
                value = value * t * float(slot_prices[:R * S].sum()) / 3600.0
            if v_slow is not None and R * S > fast_slots:
                k = -(-(R * S - fast_slots) // R)
                typed = float(v_slow[min(k, len(v_slow) - 1):, S - 1].min())
                if objective == "cost":
                    typed *= t * float(slot_prices[:R * S].sum()) / 3600.0
                value = max(value, typed)
            if value < best_value:
                best_value, best_shape = value, (t, b, R, S)
    return ShapeBound(best_value, best_shape, counted, skipped)
