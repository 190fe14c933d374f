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
K, the fewest domains a stage's R replicas span, is the fewest domains whose slots
hold R (each domain holds at most its slots of them).

**Little's law on memory (second pass).**  Micro-batch i is in flight on stage j from
the end of its F(i) there to the end of its B(i) there, at least sum_{k>j} c_k + g_j
(the forward and backward through the later stages, then its own backward); stage j
holds at most w_j in flight at any time, w_j = min(m, the most the memory takes:
(16 P_j + w b s stored_j) / t <= the usable memory; SPEC 5's inflight_j is the largest
number in flight for every schedule).  These m intervals lie between the end of the
first F on j (>= sum_{k<=j} f_k) and T - sum_{k<j} g_k, and cover each instant at most
w_j times, so

    T >= sum_{k<j} c_k + f_j + m (sum_{k>j} c_k + g_j) / w_j.                       (3)

It depends on the stage's units only, so the programme takes max((1), (3)) per stage.

**Joint WAN (second pass).**  When R S exceeds every domain's slots, either every
replica sits in one domain (:func:`whole_replicas_bound`: all the stages' rings then
leave each used domain towards the same next domain, so their syncs share one link
direction and the uplink), or some replica is split: then one channel carries its m
transfers, T >= sum c + 2 l_min + m A_min / cap, and every used domain sends what its
partial replicas and stages force (:func:`spread_bound`, :func:`row_term`).  The shape
takes the larger of its bound above and the smaller of these two (every-step sync
classes only: with DiLoCo or streaming a stage's per-step sync may stay in a domain).

**Network cuts (third pass).**  A cut (X, Y) splits the domains in two; C (``total``) is
the capacity of the links across, one way, capped by each side's summed uplinks, w
(``widest``) the most one transfer across can get (the widest link across, each side's
largest uplink), l_X the smallest latency of a link across (:func:`network_cuts`).  When
R S exceeds the slots of each side, every plan of the shape has cells on both sides, so

* (A) no stage has replicas on both sides: then each side holds whole stages (R cells
  each; impossible unless both sides take R and S <= s_X // R + s_Y // R), some boundary
  is crossed by all R replicas the same way, and T >= sum c + (m + 1) R A_min / C + 2 l_X
  (:func:`boundary_cut_term`); or
* (B) some c >= c_min stages have replicas on both sides, c_min the fewest for which the
  other S - c stages, whole on a side, fit beside one cell per crossing stage on each side:
  S - c <= (s_X - c) // R + (s_Y - c) // R.  Each crossing stage's ring has a hop from X to
  Y over a link across, with latency >= l_X and share <= w, so its stage j pays
  T >= E_j + phi G_j / w + 2 (K - 1) l_X; and on each resource q across, the crossing stage
  with the largest volume there has a cross part >= (the volumes on q) / cap(q) (SPEC 5's
  shares), so with j0 the crossing stage of smallest E, T - E_j0 - 2 (K - 1) l_X >= (every
  crossing stage's V) / C, their parameters being at least max(the c_min smallest units',
  all minus (S - c_min) times the most a stage holds).  The programme designates j0 (any
  stage may be it) paying the larger of the two.

Both hold together with (1) and (3), so each cut gives min((A), (B)) and the shape takes
the largest over the cuts (all bipartitions up to 16 domains, each domain against the
rest above; the (B) programme is run for the two cuts that promise most, the others use
the generic crossing programme: smaller, still valid).  For DiLoCo and streaming, (B)
forces nothing; with R = 1, (B) is impossible.

**The sync every stage pays (fourth pass).**  With ``per_step`` (a
:class:`planner.scoring.syncbound.SyncFloor`: the class of plans the bound is for),
every stage also takes (2) with its least per-step sync (the intra part of its
largest domain, or a cross part) whatever its placement; a crossing stage's ring
adds its intra part; shapes the class cannot have are skipped; every-step classes
count runs of whole stages (:func:`planner.scoring.syncbound.run_dp`) and classes of
few DiLoCo/streaming groups the activations leaving stage 0's domains
(:func:`planner.scoring.syncbound.stage0_cut_term`).  Proofs in that module.

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
from .syncbound import run_dp, stage0_cut_term

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
class DomainCaps:
    """Per domain (instance order), what leaves it towards the WAN: ``top[d][k]`` the sum
    of its k fastest links (bytes/s, k = 0 .. its degree), ``uplink[d]`` its uplink
    (bytes/s, inf without one).  A transfer leaving d uses d's uplink (when it has one)
    and one outgoing direction of one of d's links (its route's first link), so k
    transfers leaving d at once use resources of total capacity at most
    :meth:`cap` (d, k) = min(uplink, the k fastest links)."""

    top: tuple
    uplink: np.ndarray

    def cap(self, d: int, k: np.ndarray) -> np.ndarray:
        """Capacity (bytes/s) of the resources ``k`` (an array of counts) transfers leaving
        domain ``d`` can use: min(uplink, the sum of the min(k, degree) fastest links)."""
        top = self.top[d]
        return np.minimum(self.uplink[d], top[np.minimum(k, len(top) - 1)])


def domain_caps(instance) -> DomainCaps:
    """:class:`DomainCaps` of ``instance`` (its links and uplinks; GPU types play no part).
    Example: two domains on one 8 Gbit/s link, no uplinks: top = ([0, 1e9], [0, 1e9])."""
    bws = {d.name: [] for d in instance.domains}
    for link in instance.links:
        bws[link.a].append(link.bandwidth_gbps * GBPS)
        bws[link.b].append(link.bandwidth_gbps * GBPS)
    top = tuple(np.concatenate([[0.0], np.cumsum(sorted(bws[d.name], reverse=True))]) for d in instance.domains)
    up = np.array([np.inf if d.uplink_gbps is None else d.uplink_gbps * GBPS for d in instance.domains])
    return DomainCaps(top, up)


def row_term(caps: DomainCaps, d: int, R: int, row_bytes: float, fill: float) -> np.ndarray:
    """``[p]`` for p = 0 .. R: a lower bound on T (s) of every plan in which domain ``d``
    holds part, not all, of p replicas (0 for p = 0).  Each such replica has a boundary
    with one side in d, whose forward channel (d upstream) or backward channel (d
    downstream) leaves d; the p channels are distinct.  A channel sends its m transfers
    of >= A_min bytes one at a time, each at bandwidth <= cap(q) / n(q) on every resource q
    it uses, with n(q) >= max(n_F(q), n_B(q)) (SPEC 5, whatever the schedule); its first
    send waits for a forward through the stages before the boundary and its last
    transfer's micro-batch still goes forward, back and across after it arrives, so its
    sends lie in a window of at most T - ``fill`` (``fill`` <= one micro-batch's c over
    all units + 2 l_min).  Hence (T - fill) cap(q) >= m A_min max(n_F(q), n_B(q)) on every
    resource q the channels use.  d's uplink (when it has one) carries all p:
    max(n_F, n_B) >= ceil(p / 2).  They leave on k <= min(p, degree) directions of d's
    links, of total capacity <= the k fastest, and sum_q max(n_F(q), n_B(q)) >= max(k,
    p / 2).  So T >= fill + ``row_bytes`` max(ceil(p/2) / uplink, min_k max(k, p/2) /
    top_k), ``row_bytes`` = m A_min.

    >>> caps = DomainCaps((np.array([0.0, 1e9, 2e9]),), np.array([np.inf]))
    >>> row_term(caps, 0, 2, 1e9, 0.5).tolist()     # one replica: 1 GB on one 1 GB/s link
    [0.0, 1.5, 1.5]
    """
    top = caps.top[d]
    deg = len(top) - 1
    p = np.arange(R + 1)
    if deg == 0:
        return np.where(p > 0, np.inf, 0.0)
    k = np.arange(1, deg + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_link = (np.maximum(k[None, :], p[:, None] / 2.0) / top[None, 1:])
        per_link = np.where(k[None, :] <= np.maximum(p[:, None], 1), per_link, np.inf).min(axis=1)
        per_up = np.ceil(p / 2.0) / caps.uplink[d]
    return np.where(p > 0, fill + row_bytes * np.maximum(per_link, per_up), 0.0)


def spread_bound(R: int, S: int, slots, caps: DomainCaps, row_bytes: float, col_bytes, sync_floor: float,
                 fill: float = 0.0, above: float = 0.0, iterations: int = 40) -> float:
    """A lower bound on T (s) of every plan with R replicas of S stages (R S cells, cell
    (r, j) on a domain holding t GPUs of it) when no domain holds all R S cells (R S >
    every ``slots[d]``, the most cells domain d can hold), from the WAN traffic each used
    domain must send out of itself -- the syncs of all the stages it holds seen together.

    **Per domain.**  Call row r (a replica) *partial* in d when d holds some but not all of
    its S cells, column j (a stage) partial when d holds some but not all of its R cells.
    A used domain d has p partial rows and q partial columns, and p + q >= 1 (a domain
    with only full rows and full columns holds a full row and a full column, hence every
    column and every row: all R S cells).

    * p partial rows: T >= :func:`row_term` (p).
    * Each partial column j has K_j >= 2 domains, so its ring has a hop leaving d carrying
      V_j = phi(K_j) G^o_j (SPEC 5, 11).  On a resource q, a stage's share is cap(q) V_j /
      sum_u min(V_u, V_j), so the stage with the largest volume on q has a cross part >=
      sum_u V_u / cap(q) + 2 (K - 1) l_min; with T >= E_j + AR_j, E_j >= m c_j:
      T - ``sync_floor`` >= sum_u V_u / cap(q) for every used q (``sync_floor`` <= m c_j +
      2 (K - 1) l_min for every stage j).  Summed over the <= q link directions and the
      uplink the hops leaving d use: T >= ``sync_floor`` + ``col_bytes[q]`` / cap_d(q),
      ``col_bytes[q]`` <= the smallest sum of V_j over q distinct stages (q = 0 .. S;
      ``col_bytes`` None: a partial column forces nothing, e.g. DiLoCo's inner sync).

    Both are made non-decreasing in p and q by taking suffix minima (smaller, still valid).

    **Cells.**  With p partial rows and q partial columns allowed, d holds at most: p q,
    p (S - 1) and q (R - 1) cells when it has no full row and no full column (each cell is
    in a partial row and a partial column, which miss a cell each); (R - 1) S with a full
    row and no full column (q = S); (S - 1) R with a full column and no full row (p = R);
    with both, every cell outside d lies in a partial row and a partial column, so p q >=
    R S - n_d (then ``slots[d]`` is allowed).  N_d(tau) is the largest of these over the
    (p, q) whose terms are <= tau, capped at ``slots[d]``; a plan with T = tau has sum_d
    n_d = R S with n_d <= N_d(T), so T >= inf{tau : sum_d N_d(tau) >= R S}, found by
    bisection (the lower end returned).  ``inf`` when even sum_d N_d(inf) < R S.  With
    ``above`` > 0 only a bound above it is sought: 0 when sum_d N_d(above) >= R S.

    >>> caps = DomainCaps((np.array([0.0, 1e9]), np.array([0.0, 1e9])), np.array([np.inf, np.inf]))
    >>> round(spread_bound(2, 1, [1, 1], caps, 0.0, np.array([0.0, 2e9]), 0.5), 6)  # 2 replicas, a 2 GB sync
    2.5
    """
    slots = np.asarray(slots, int)
    n_dom = len(slots)
    need = R * S
    q_all = np.arange(S + 1)
    lb_row = np.empty((n_dom, R + 1))
    lb_col = np.empty((n_dom, S + 1))
    for d in range(n_dom):
        rows = row_term(caps, d, R, row_bytes, fill)
        with np.errstate(divide="ignore", invalid="ignore"):
            if col_bytes is None:
                cols = np.zeros(S + 1)
            else:
                cols = np.where(q_all > 0, sync_floor + col_bytes / caps.cap(d, q_all), 0.0)
        rows = np.where(np.isnan(rows), np.inf, rows)
        cols = np.where(np.isnan(cols), np.inf, cols)
        lb_row[d] = np.minimum.accumulate(rows[::-1])[::-1]
        lb_col[d] = np.minimum.accumulate(cols[::-1])[::-1]

    def cells(tau: float) -> int:
        P = (lb_row <= tau).sum(axis=1) - 1  # the most partial rows allowed (0 .. R)
        Q = (lb_col <= tau).sum(axis=1) - 1
        n = np.where((P >= 1) & (Q >= 1), np.minimum(np.minimum(P * Q, P * (S - 1)), Q * (R - 1)), 0)
        if R >= 2:
            n = np.where(Q >= S, np.maximum(n, (R - 1) * S), n)
        if S >= 2:
            n = np.where(P >= R, np.maximum(n, (S - 1) * R), n)
        Pi, Qi = np.minimum(P, R - 1), np.minimum(Q, S - 1)
        both = (Pi >= 1) & (Qi >= 1) & (Pi * Qi >= need - slots)
        n = np.where(both, slots, n)
        return int(np.minimum(n, slots).sum())

    if cells(np.inf) < need:
        return np.inf
    finite = np.concatenate([lb_row[np.isfinite(lb_row)], lb_col[np.isfinite(lb_col)]])
    lo, hi = above, max(above, float(finite.max()) if finite.size else 0.0)
    if cells(lo) >= need:
        return 0.0
    if cells(hi) < need:  # only with an infinite term (a domain without links) could they fit
        return np.inf
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if cells(mid) >= need:
            hi = mid
        else:
            lo = mid
    return lo


def whole_replicas_bound(R: int, S: int, slots, caps: DomainCaps, volume, floor: float, lat_min: float,
                         ring: bool = True) -> float:
    """A lower bound on T (s) of every plan with R replicas of S stages in which every
    replica sits in one domain (no partial row), when no domain holds them all; ``inf``
    when the domains cannot hold R whole replicas.

    Then every stage j has its replicas in the same set U of the used domains (those
    holding a replica), |U| = D >= 2, so in every ring the hop leaving d goes to the same
    next domain of U (instance order), along the same route: all the S stages' hops leaving
    d share that route's first link direction and d's uplink, of capacity at most cap1_d =
    min(uplink, d's fastest link).  The stage j* with the largest volume there has a cross
    part >= sum_j V_j / cap1_d + 2 (D - 1) l_min (SPEC 5's shares), V_j = phi(D) G^o_j,
    sum_j G^o_j = ``volume`` / phi (``volume(D)``: phi(D) times the whole model's payload),
    and T >= E_j* + AR_j* with E_j* >= ``floor`` (<= m c of any stage holding at least 1/S
    of the parameters, as j* does).  Every used domain gives such a bound; the domains
    hold s_d // S replicas each, so U has at least D_min domains (the fewest that hold R)
    and contains a domain whose cap1 is at most that of the domain completing R when the
    domains are taken fastest cap1 first.

    >>> caps = DomainCaps((np.array([0.0, 1e9]), np.array([0.0, 1e9])), np.array([np.inf, np.inf]))
    >>> whole_replicas_bound(2, 2, [2, 2], caps, lambda D: 1e9, 1.0, 0.0)   # 1 GB over 1 GB/s after 1 s
    2.0
    """
    rows = np.asarray(slots, int) // S
    if rows.sum() < R:
        return np.inf
    D_min = max(2, int(np.searchsorted(np.cumsum(np.sort(rows)[::-1]), R) + 1))
    cap1 = np.array([min(caps.uplink[d], caps.top[d][1] if len(caps.top[d]) > 1 else 0.0)
                     for d in range(len(rows))])
    order = np.argsort(-cap1, kind="stable")
    last = order[int(np.searchsorted(np.cumsum(rows[order]), R))]
    if not cap1[last] > 0:
        return np.inf
    return float(floor + 2 * (D_min - 1) * lat_min + volume(D_min) / cap1[last])


#: bipartitions of the domains are enumerated in full up to this many domains (2^(D-1) - 1
#: of them); above it only the cuts around one domain are taken (each is valid on its own)
CUT_ENUMERATION_MAX_DOMAINS = 16


@dataclass(frozen=True)
class NetworkCuts:
    """The bipartitions (X, Y) of the domains that links join, as arrays over cuts
    (third pass, the module docstring's network cuts): ``in_x`` (cuts x domains, bool), ``total`` the sum
    of the capacities of the links across, one direction (bytes/s) capped by the
    uplinks of each side (the sum of X's, of Y's; inf where a domain has none),
    ``widest`` the largest capacity one transfer across can have (min of the widest
    link across, X's largest uplink, Y's largest uplink; bytes/s), ``latency`` the
    smallest latency of a link across (s).  Example: a line a - b - c with links of 1 and
    0.25 GB/s: the cut {a, b} | {c} has total = widest = 0.25e9."""

    in_x: np.ndarray
    total: np.ndarray
    widest: np.ndarray
    latency: np.ndarray


def network_cuts(instance) -> NetworkCuts:
    """:class:`NetworkCuts` of ``instance``: every bipartition up to
    :data:`CUT_ENUMERATION_MAX_DOMAINS` domains, else each domain against the rest;
    cuts no link crosses are dropped."""
    doms = instance.domains
    D = len(doms)
    index = {d.name: i for i, d in enumerate(doms)}
    if D < 2 or not instance.links:
        empty = np.zeros(0)
        return NetworkCuts(np.zeros((0, D), bool), empty, empty, empty)
    if D <= CUT_ENUMERATION_MAX_DOMAINS:
        masks = np.arange(1, 2 ** (D - 1))  # the last domain always in Y: each cut once
        in_x = ((masks[:, None] >> np.arange(D)[None, :]) & 1).astype(bool)
    else:
        in_x = np.eye(D, dtype=bool)
    a = np.array([index[link.a] for link in instance.links])
    b = np.array([index[link.b] for link in instance.links])
    bw = np.array([link.bandwidth_gbps for link in instance.links]) * GBPS
    lat = np.array([link.latency_ms for link in instance.links]) * MS
    across = in_x[:, a] != in_x[:, b]
    up = np.array([np.inf if d.uplink_gbps is None else d.uplink_gbps * GBPS for d in doms])
    up_x = np.where(in_x, up[None, :], 0.0)
    up_y = np.where(~in_x, up[None, :], 0.0)
    total = np.minimum(across @ bw, np.minimum(up_x.sum(axis=1), up_y.sum(axis=1)))
    widest = np.minimum(np.where(across, bw[None, :], 0.0).max(axis=1),
                        np.minimum(up_x.max(axis=1), up_y.max(axis=1)))
    latency = np.where(across, lat[None, :], np.inf).min(axis=1)
    keep = across.any(axis=1) & (total > 0) & (widest > 0)
    return NetworkCuts(in_x[keep], total[keep], widest[keep], latency[keep])


def boundary_cut_term(c_sum: float, m: int, R: int, a_min: float, total, latency):
    """Case (A) of the module docstring's network cuts: a lower bound on T (s) of every plan of R replicas
    in which no stage has replicas on both sides of a cut (of capacity ``total`` bytes/s
    one way, smallest latency ``latency`` s) and both sides hold stages: ``c_sum`` +
    (m + 1) R ``a_min`` / ``total`` + 2 ``latency`` (arrays over cuts).

    Proof.  Every stage's replicas lie on one side, so the set of stages in X is the
    same for every replica, neither empty nor all: some boundary k has stage k on one
    side and k + 1 on the other in every replica, and its R forward channels all cross
    the cut the same way.  Channel r's route leaves its side through some link direction
    q_r across (and uses the egress uplink of its first domain and the ingress uplink of
    its last, one on each side), and its bandwidth is at most cap(q) / n(q) with n(q) >=
    n_F(q), the forward channels using q (SPEC 5).  If every channel had x_r = A_k /
    bandwidth_r < R A_k / C, then n_F(q) < R cap(q) / C on every q used, and summed over
    the link directions used (or the uplinks used) sum_q n_F(q) < R, though each channel
    is counted at least once: so some channel has x >= R A_k / C, C = ``total`` (the
    links across, one way; and each side's uplinks).  That replica then runs, as in
    (b) of the module docstring: its first send waits for a forward through stages
    0..k, its m sends take m x one after the other, the last arrives >= the route's
    latency later (>= ``latency``: the route holds a link across), its micro-batch goes
    forward and back through stages k+1.., its gradient crosses back (x again, the same
    bandwidth both ways, and the latency), and goes back through k..0: T >= sum c +
    (m + 1) x + 2 l, with A_k >= ``a_min``.

    >>> float(boundary_cut_term(0.1, 3, 2, 1e6, np.array([1e8]), np.array([0.005]))[0])   # 0.1 + 4 * 2e-2 + 0.01
    0.19
    """
    with np.errstate(divide="ignore"):
        return c_sum + (m + 1) * R * a_min / np.asarray(total) + 2 * np.asarray(latency)


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


def _pipeline_dp(base, ring, stages, step, cap, ring_steps: int = 1, every=None):
    """Smallest over partitions into 1..``stages`` stages of the largest stage term,
    by the number of crossing stages.

    ``base[a, e]``: term (1) of a stage holding units [a, e) at index 0 (inf when it
    cannot exist); stage j adds ``2 j step``.  ``ring[a, e]``: the term of a
    designated ("crossing") stage at index 0, adding ``ring_steps j step`` (term (2)
    of a crossing stage: 1; term (1) on a slower GPU type: 2); such a stage takes the
    larger of its two terms; or None.  ``every[a, e]`` (or None): a term every stage
    takes the larger of, adding ``j step`` (term (2) with a sync every stage pays:
    :mod:`planner.scoring.syncbound`).  Returns ``v`` of shape (cap + 1, stages): ``v[c, S - 1]`` the
    value over partitions into S stages with c crossing stages (``cap``: at least
    ``cap``); inf where impossible.  Example: one unit of c = 1, m = 2 (base [[inf,
    2]]), no ring: v = [[2.0]]."""
    n = base.shape[1] - 1
    cap = cap if ring is not None else 0
    best = np.full((cap + 1, n + 1), np.inf)  # [c, e]: units [0, e) in j + 1 stages
    best[0] = base[0] if every is None else np.maximum(base[0], every[0])
    if cap:
        best[1] = np.maximum(best[0], ring[0])
    v = [best[:, n].copy()]
    for j in range(1, stages):
        term = base + 2 * j * step
        if every is not None:
            term = np.maximum(term, every + j * step)
        new = np.maximum(best[:, :, None], term[None]).min(axis=1)  # the stage does not cross
        if cap:
            desig = np.maximum(term, ring + ring_steps * j * step)
            crossed = np.maximum(best[:, :, None], desig[None]).min(axis=1)  # it does: c + 1
            new[1:] = np.minimum(new[1:], crossed[:-1])
            new[cap] = np.minimum(new[cap], crossed[cap])
        best = new
        v.append(best[:, n].copy())
    return np.array(v).T


def _in_flight_term(Cpre, Fpre, Pint, Sint, fits, limit, t, tokens, m):
    """Term (3) of a stage holding units [a, e) at index 0 (module docstring): Little's law
    on its in-flight micro-batches, ``inf`` where it does not fit.  ``Cpre``, ``Fpre``:
    prefix sums of the units' c and f (s); ``Pint``, ``Sint``: parameters and stored bytes
    per token of [a, e); ``limit``: usable bytes per GPU.  Example: one unit of f = 1,
    g = 2, m = 4 and room for 2 in flight: 1 + 4 * 2 / 2 = 5 s."""
    n = len(Cpre) - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        room = np.floor((limit * t - STATE_BYTES * Pint) / (tokens * Sint) * (1 + 1e-12))
    w = np.clip(np.where(Sint > 0, room, m), 1, m)
    f_int = Fpre[None, :] - Fpre[:, None]
    g_int = (Cpre[None, :] - Cpre[:, None]) - f_int
    suffix = (Cpre[n] - Cpre)[None, :]  # c of the units after the stage
    return np.where(fits, Cpre[:, None] + f_int + m * (suffix + g_int) / w, np.inf)


def _least_params(P_small, total: float, p_cap: float, q, S: int):
    """The fewest parameters ``q`` of ``S`` stages hold together (arrays or scalars): at least
    the ``q`` smallest units' (``P_small`` their prefix sums) and all ``total`` but what the other
    S - q stages can hold (``p_cap`` each at most)."""
    return np.maximum(P_small[np.minimum(q, len(P_small) - 1)], total - (S - q) * p_cap)


def shape_bound(instance, ring_bits: int | None = 16, objective: str = "time",
                slow: SlowTypes | None = None, joint: bool = True, little: bool = True,
                cuts: bool = True, per_step=None, prune: bool = True) -> ShapeBound:
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
    type (their memory on its largest).  ``per_step``: a
    :class:`planner.scoring.syncbound.SyncFloor`, the class of plans (every-step at its
    bits, or DiLoCo/streaming with a range of groups) whose per-step sync every stage
    pays (module docstring, fourth pass); None: the third pass.  ``inf`` when no shape
    (of the class) has a memory-feasible partition.  ``prune=False``: no shape is skipped
    by its compute bound, so ``parts`` holds every shape with a plan (each value still a
    bound for every plan of its shape).

    >>> shape_bound(inst, ring_bits=4).value                 # doctest: +SKIP
    """
    fig = _Figures(instance, ring_bits, objective, slow, joint, little, cuts, per_step)
    best_value, best_shape, counted, skipped = np.inf, None, 0, 0
    values: dict = {}  # shape -> its bound, for the shapes bounded in full
    for cand in _candidates(fig):  # the most promising first, by their cheap compute bound
        if prune and objective == "time" and cand.cheap >= best_value:
            skipped += 1
            continue
        shape = _Shape.of(fig, cand)
        if shape is None:  # no memory-feasible partition, or not a shape of the class
            continue
        counted += 1
        for S in range(1, cand.S_max + 1):
            value = shape.value(S, best_value)
            if value is None:
                continue
            values[(cand.t, cand.b, cand.R, S)] = value
            if value < best_value:
                best_value, best_shape = value, (cand.t, cand.b, cand.R, S)
    return ShapeBound(best_value, best_shape, counted, skipped, values)


class _Figures:
    """The instance's figures every shape reads (the optimistic one-type instance): units'
    FLOPs ``F``, parameters ``P``, stored and TP bytes per token; prefix sums and interval
    sums ``Pint``/``Sint`` ([a, e): units a..e-1); the network (:func:`network_figures`,
    :func:`domain_caps`, :func:`network_cuts`); and :func:`shape_bound`'s options."""

    def __init__(self, instance, ring_bits, objective, slow, joint, little, cuts, per_step):
        self.instance, self.ring_bits, self.objective, self.slow = instance, ring_bits, objective, slow
        self.joint, self.little, self.per_step = joint, little, per_step
        wl = self.wl = instance.workload
        self.gpu = instance.gpu
        units = instance.units
        self.n = len(units)
        self.gbs, self.s = wl.global_batch_size, wl.seq_len
        self.beta = 3.0 if wl.recompute else 2.0
        self.o = (self.gpu.unit_overhead_ms or 0.0) * MS
        self.rate = self.gpu.flops_per_s
        self.limit = instance.memory_limit_bytes
        self.net = network_figures(instance)
        self.caps = domain_caps(instance)
        self.F = np.array([u.fwd_flops_per_token for u in units], float)
        self.P = np.array([u.params for u in units], float)
        stored = np.array([u.stored_bytes_per_token for u in units], float)
        self.tpb = np.array([u.tp_bytes_per_token for u in units], float)
        self.nflop = (self.F > 0).astype(float)
        self.out_cut = np.array([u.out_bytes_per_token for u in units[:-1]], float)  # boundary after unit k
        self.Ppre, Spre = _pre(self.P), _pre(stored)
        self.Pint = self.Ppre[None, :] - self.Ppre[:, None]  # [a, e): parameters of units a..e-1
        self.Sint = Spre[None, :] - Spre[:, None]
        self.valid = np.triu(np.ones((self.n + 1, self.n + 1), bool), k=1)
        self.cut_figs = network_cuts(instance) if cuts else None
        self.P_small = _pre(np.sort(self.P))  # the sum of the k smallest units' parameters


def _pre(v):
    """Prefix sums with a leading 0."""
    return np.concatenate([[0.0], np.cumsum(v)])


@dataclass(frozen=True)
class _Candidate:
    """(t, b, R) with its cheap compute bound ``cheap`` = m sum c / S_max, the slots of t GPUs
    per domain, per-unit forward ``f`` and ``c`` = f + g at micro-batch b (seconds), the
    slots' prices in increasing order, and ``c_slow``/``fast_slots`` with GPU types."""

    cheap: float
    t: int
    b: int
    R: int
    m: int
    S_max: int
    slots: list
    f: np.ndarray
    c: np.ndarray
    tokens: int
    slot_prices: np.ndarray
    c_slow: np.ndarray | None
    fast_slots: int | None
    slots_all: list


def _candidates(fig: _Figures) -> list[_Candidate]:
    """Every (t, b, R) whose GPUs fit the instance, by increasing cheap compute bound."""
    instance, wl, gpu, slow = fig.instance, fig.wl, fig.gpu, fig.slow
    F, tpb, nflop, beta, o, rate, s = fig.F, fig.tpb, fig.nflop, fig.beta, fig.o, fig.rate, fig.s
    todo = []
    for t in sorted(set(wl.tensor_parallel)):
        doms = [d for d in instance.domains if d.gpus_per_node >= t and d.gpus >= t]
        if not doms:
            continue
        slots_total = sum(d.gpus // t for d in doms)
        slots = [d.gpus // t for d in doms]
        fast_slots = (sum(d.gpus // t for d, quick in zip(instance.domains, slow.fast)
                          if quick and d.gpus_per_node >= t) if slow is not None else None)
        slots_all = [d.gpus // t if d.gpus_per_node >= t else 0 for d in instance.domains]
        slot_prices = np.sort(np.concatenate([np.full(d.gpus // t, d.price_per_gpu_hour) for d in doms]))
        for b in sorted(set(wl.micro_batch_sizes)):
            if fig.gbs % b:
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
            for R in divisors(fig.gbs // b):
                if R > slots_total:
                    break
                m = fig.gbs // (R * b)
                S_max = min(instance.max_stages, fig.n, slots_total // R)
                if S_max < 1:
                    continue
                cheap = m * c.sum() / S_max
                todo.append(_Candidate(cheap, t, b, R, m, S_max, slots, f, c, tokens, slot_prices, c_slow,
                                       fast_slots, slots_all))
    todo.sort(key=lambda row: row.cheap)
    return todo


class _Shape:
    """One (t, b, R)'s programmes over S (module docstring): (1) with (3) (``base``), the
    crossing ring of (a) (``ring``), runs of whole stages (``v_run``), GPU types (``v_slow``),
    and the network cuts and joint WAN terms per S (:meth:`value`)."""

    @classmethod
    def of(cls, fig: _Figures, cand: _Candidate):
        """The shape's programmes, or None when no partition fits memory or the class
        (``per_step``) has no plan of the shape."""
        t, m, tokens, n = cand.t, cand.m, cand.tokens, fig.n
        Pint, Sint, valid, limit = fig.Pint, fig.Sint, fig.valid, fig.limit
        Cpre, Fpre = _pre(cand.c), _pre(cand.f)
        Cint = Cpre[None, :] - Cpre[:, None]
        fits = valid & ((STATE_BYTES * Pint + tokens * Sint) / t <= limit)
        if not fits[:, n].any():
            return None
        base = np.where(fits, Cpre[:, None] + m * Cint, np.inf)
        if fig.little:
            base = np.maximum(base, _in_flight_term(Cpre, Fpre, Pint, Sint, fits, limit, t, tokens, m))
        every = None  # the sync every stage pays (planner.scoring.syncbound), in a class of plans
        per_step = fig.per_step
        if per_step is not None:
            if not per_step.admits(cand.R, cand.slots_all):
                return None  # no plan of this class has the shape
            if cand.R > 1:
                floor_sync = per_step.stage_floor(fig.instance, cand.R, t, Pint, cand.slots_all, fig.net.cap,
                                                  fig.net.lat_min)
                every = np.where(fits, Fpre[:, None] + m * Cint + floor_sync, np.inf)
        return cls(fig, cand, Cpre, Fpre, Cint, fits, base, every)

    def __init__(self, fig, cand, Cpre, Fpre, Cint, fits, base, every):
        self.fig, self.cand = fig, cand
        self.Cpre, self.Fpre, self.Cint, self.fits, self.base, self.every = Cpre, Fpre, Cint, fits, base, every
        wl, net, out_cut, n, ring_bits = fig.wl, fig.net, fig.out_cut, fig.n, fig.ring_bits
        R, S_max, slots, m, tokens, c = cand.R, cand.S_max, cand.slots, cand.m, cand.tokens, cand.c
        Pint = fig.Pint
        self.slots_one = slots_one = max(slots)
        self.x_min = x_min = float(out_cut.min()) * tokens / net.bw_any if n > 1 else 0.0
        forced = R * S_max > slots_one  # some S of this (t, b, R) cannot sit in one domain
        self.unsplit = unsplit = sum(k // R for k in slots)  # stages whose R replicas can share a domain
        # a stage's replicas span at least K domains: the fewest whose slots hold R
        K = (int(np.searchsorted(np.cumsum(sorted(slots, reverse=True)), R) + 1) if fig.joint
             else -(-R // slots_one))
        self.K2 = K2 = max(K, 2)
        # a ring over K2 domains
        self.phi_min = phi_min = 2.0 if wl.gradient_sync == "reduce_broadcast" else 2.0 * (K2 - 1) / K2
        ring = None
        if forced and R > 1 and ring_bits is not None and net.cap > 0:
            lat = 2 * (K2 - 1) * net.lat_min
            sync = np.where(Pint > 0, phi_min * Pint * ring_bits / 8.0 / net.cap + lat, 0.0)
            if fig.per_step is not None:  # with the intra part of its largest domain (syncbound)
                sync = np.maximum(sync, fig.per_step.stage_floor(fig.instance, R, cand.t, Pint, cand.slots_all,
                                                                 net.cap, net.lat_min, crossing=True))
            ring = np.where(fits, Fpre[:, None] + m * Cint + sync, np.inf)
        self.ring = ring
        self.v = _pipeline_dp(base, ring, S_max, x_min, max(1, S_max - unsplit), every=every)
        # runs of whole stages (syncbound.run_dp): at most this many in a row share a domain
        self.L_run = L_run = slots_one // R
        self.v_run = (run_dp(base, ring, S_max, x_min, L_run, every) if fig.per_step is not None
                      and ring is not None and L_run < S_max else None)
        self.p_cap = float(np.where(fits, Pint, 0.0).max())  # the most parameters a stage can hold
        self.cut_side = self.cut_A = None
        self.cut_rings: dict = {}  # (S, c_min, a cut's figures) -> the programme with that crossing term
        cut_figs = fig.cut_figs
        if cut_figs is not None and len(cut_figs.total):
            sx = cut_figs.in_x @ np.asarray(cand.slots_all)
            self.cut_side = (sx, sum(cand.slots_all) - sx)
            a_min_cut = float(out_cut.min()) * tokens if n > 1 else 0.0
            self.cut_A = boundary_cut_term(float(c.sum()), m, R, a_min_cut, cut_figs.total, cut_figs.latency)
        self.v_slow = None
        if cand.c_slow is not None and R * S_max > cand.fast_slots:
            # a replica with k stages on a slower type: those stages' (1) at its figures
            Sfit = fig.valid & ((STATE_BYTES * Pint + tokens * fig.Sint) / cand.t <= fig.slow.memory_limit)
            Cs = _pre(cand.c_slow)
            slow_base = np.where(Sfit, Cpre[:, None] + m * (Cs[None, :] - Cs[:, None]), np.inf)
            self.v_slow = _pipeline_dp(base, slow_base, S_max, x_min,
                                       max(1, -(-(R * S_max - cand.fast_slots) // R)), ring_steps=2, every=every)
        self.row_bytes = m * float(out_cut.min()) * tokens if n > 1 else 0.0
        self.floor = m * float(c.min()) + 2 * (K2 - 1) * net.lat_min
        self.fill = float(c.sum()) + 2 * net.lat_min

    def _price(self, S: int) -> float:
        """Dollars per second of T: the cheapest R S slots' price (cost instances)."""
        return self._priced(1.0, S)

    def _priced(self, T: float, S: int) -> float:
        """The price of T seconds on the cheapest R S slots (cost instances)."""
        cand = self.cand
        return T * cand.t * float(cand.slot_prices[:cand.R * S].sum()) / 3600.0

    def value(self, S: int, best_value: float) -> float | None:
        """The bound on every plan of the shape with S stages (on T, or the cost), None when no
        partition into S stages fits; terms that cannot bring it below ``best_value`` skipped."""
        fig, cand = self.fig, self.cand
        R, m, tokens, c = cand.R, cand.m, cand.tokens, cand.c
        P, out_cut, net, ring_bits, objective = fig.P, fig.out_cut, fig.net, fig.ring_bits, fig.objective
        v, ring, unsplit, L_run, v_run = self.v, self.ring, self.unsplit, self.L_run, self.v_run
        V0 = float(v[0, S - 1])
        if not np.isfinite(V0):
            return None
        if R * S <= self.slots_one:
            value = V0
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
                    alts.append((max(V0, tb), 2.0 * fig.gbs * fig.s * float(out_cut.min())))
                else:
                    alts.append((V0, 0.0))
            if v_run is not None and S > 1 and ring is not None and S > L_run:
                # no two adjacent whole stages in different domains: runs of at most L_run,
                # else (b) at such a boundary (syncbound.run_dp)
                lower = float(v[min(need, len(v) - 1):, S - 1].min()) if need >= 1 else V0
                tb = (float(c.sum()) + (m + 1) * R * float(out_cut.min()) * tokens / net.cap
                      + 2 * net.lat_min)
                alts = [(max(alts[0][0], float(v_run[S - 1])), alts[0][1]),
                        (max(lower, tb), 2.0 * fig.gbs * fig.s * float(out_cut.min()))]
            if not alts:
                return None
            value = min(alts)[0]  # the smaller bound on T (ties: the less WAN)
            if objective == "cost":
                value = min(self._priced(a, S) + w * fig.instance.options.wan_price_per_gb / 1e9 for a, w in alts)
        if objective == "cost" and R * S <= self.slots_one:
            value = self._priced(value, S)
        if fig.joint and R * S > self.slots_one and ring_bits is not None and value < best_value:
            # the WAN every used domain must send, its stages' syncs seen together
            if objective == "cost":
                value = max(value, self._priced(spread, S) if (spread := self._joint(S, 0.0)) < np.inf else np.inf)
            else:
                value = max(value, self._joint(S, value))
        cut_side = self.cut_side
        if (cut_side is not None and value < best_value
                and ((R * S > cut_side[0]) & (R * S > cut_side[1])).any()):
            value = max(value, self._cut_value(S, V0))
        per_step = fig.per_step
        if per_step is not None and per_step.groups is not None and S > 1 and fig.n > 1 and value < best_value:
            # stage 0 in few domains: the replicas not whole there send activations out
            conf = stage0_cut_term(fig.cut_figs, cand.slots_all, R, S, m, float(c.sum()),
                                   float(out_cut.min()) * tokens, per_step.groups, per_step.groups_lo)
            if objective == "cost":
                conf *= self._price(S)
            value = max(value, conf)
        v_slow = self.v_slow
        if v_slow is not None and R * S > cand.fast_slots:
            k = -(-(R * S - cand.fast_slots) // R)
            typed = float(v_slow[min(k, len(v_slow) - 1):, S - 1].min())
            if objective == "cost":
                typed *= self._price(S)
            value = max(value, typed)
        return value

    def _joint(self, S: int, current: float) -> float:
        """A bound on T of every plan of the shape with S stages, or 0 when it cannot
        exceed ``current``: the smaller of the whole-replicas case and the
        split-replica case (:func:`whole_replicas_bound`, :func:`spread_bound`,
        :func:`row_term`)."""
        fig, cand = self.fig, self.cand
        R, m, net, Ppre, ring_bits = cand.R, cand.m, fig.net, fig.Ppre, fig.ring_bits
        heavy = np.where(self.fits & (fig.Pint * S >= float(Ppre[-1]) * (1 - 1e-12)), self.Cint, np.inf).min()
        payload = float(Ppre[-1]) * ring_bits / 8.0
        phi = (lambda D: 2.0) if fig.wl.gradient_sync == "reduce_broadcast" else (lambda D: 2.0 * (D - 1) / D)
        whole = (whole_replicas_bound(R, S, cand.slots_all, fig.caps, lambda D: phi(D) * payload, m * float(heavy),
                                      net.lat_min) if R > 1 and np.isfinite(heavy) else np.inf)
        if whole <= current:
            return 0.0
        if S == 1:  # every replica is whole
            return whole
        one = self.fill + self.row_bytes / net.cap if net.cap > 0 else 0.0  # one channel over the WAN
        q = np.arange(S + 1)
        params = _least_params(fig.P_small, float(Ppre[-1]), self.p_cap, q, S)
        cols = self.phi_min * params * ring_bits / 8.0 if R > 1 else None
        spread = spread_bound(R, S, cand.slots_all, fig.caps, self.row_bytes, cols, self.floor, self.fill,
                              above=max(current, one))
        return min(whole, max(spread, one))

    def _cut_ring(self, S: int, c_min: int, widest: float, latency: float, total: float) -> float:
        """Case (B) of the module docstring's network cuts at one cut, S stages, at least ``c_min`` crossing:
        the programme whose designated stage pays max(its own sync over ``widest``, the
        ``c_min`` smallest crossing volumes over ``total``) and 2 (K - 1) ``latency``."""
        key = (S, c_min, float(widest), float(latency), float(total))
        if key not in self.cut_rings:
            fig, Pint, phi, ring_bits = self.fig, self.fig.Pint, self.phi_min, self.fig.ring_bits
            shared = float(_least_params(fig.P_small, float(fig.Ppre[-1]), self.p_cap, c_min, S))
            own = np.maximum(phi * Pint * ring_bits / 8.0 / widest, phi * shared * ring_bits / 8.0 / total)
            sync = np.where(Pint > 0, own + 2 * (self.K2 - 1) * latency, 0.0)
            ring_c = np.where(self.fits, self.Fpre[:, None] + self.cand.m * self.Cint + sync, np.inf)
            self.cut_rings[key] = float(_pipeline_dp(self.base, ring_c, S, self.x_min, 1,
                                                     every=self.every)[1:, S - 1].min())
        return self.cut_rings[key]

    def _cut_value(self, S: int, V0: float, top: int = 2) -> float:
        """The largest over the cuts both of whose sides are too small for the R S cells
        of the module docstring's network-cut bound on the shape with S stages (on T, or on the cost for
        ``objective="cost"``); ``V0`` the programme without crossing; the ``top`` cuts with
        the largest (A) get their own (B) programme, the others the generic crossing one."""
        fig, cand = self.fig, self.cand
        R, ring_bits, cut_figs, P, out_cut = cand.R, fig.ring_bits, fig.cut_figs, fig.P, fig.out_cut
        v, ring, K2, phi = self.v, self.ring, self.K2, self.phi_min
        sx, sy = self.cut_side
        forced = (R * S > sx) & (R * S > sy)
        sx, sy = sx[forced], sy[forced]
        # (A) needs whole stages on both sides: R cells each, S columns in all
        a_ok = (S > 1) & (sx >= R) & (sy >= R) & (sx // R + sy // R >= S)
        a_T = np.where(a_ok, np.maximum(V0, self.cut_A[forced]), np.inf)
        if R == 1:  # a stage with one replica cannot sit on both sides: (A) holds
            b_T = np.full_like(a_T, np.inf)
        elif ring_bits is None:  # the per-step sync may stay on one side: (B) forces nothing
            b_T = np.full_like(a_T, V0)
        else:
            # the fewest crossing stages: the others are whole on a side, each crossing one
            # takes a slot on both sides
            cs = np.arange(1, S + 1)[:, None]
            ok = (sx[None] >= cs) & (sy[None] >= cs) & (S - cs <= (sx[None] - cs) // R + (sy[None] - cs) // R)
            c_min = np.where(ok.any(axis=0), ok.argmax(axis=0) + 1, 0)
            b_gen = float(v[1:, S - 1].min()) if ring is not None else V0
            b_T = np.where(c_min > 0, b_gen, np.inf)
            widest, latency, total = (cut_figs.widest[forced], cut_figs.latency[forced], cut_figs.total[forced])
            # which cuts get a programme: by the larger of what (B) could add at most
            shared = _least_params(fig.P_small, float(fig.Ppre[-1]), self.p_cap, c_min, S)
            reach = b_gen + phi * shared * ring_bits / 8.0 / total + 2 * (K2 - 1) * latency
            for i in np.argsort(-np.where(c_min > 0, np.minimum(a_T, reach), -np.inf), kind="stable")[:top]:
                if c_min[i] > 0:
                    b_T[i] = max(b_T[i], self._cut_ring(S, int(c_min[i]), widest[i], latency[i], total[i]))
        if fig.objective == "cost":
            price = self._price(S)
            wan = fig.instance.options.wan_price_per_gb / 1e9
            a_wan = 2.0 * fig.gbs * fig.s * float(out_cut.min()) * wan if fig.n > 1 else 0.0
            b_wan = 2.0 * float(P.min()) * ring_bits / 8.0 * wan if ring_bits is not None and R > 1 else 0.0
            values = np.minimum(a_T * price + a_wan, b_T * price + b_wan)
        else:
            values = np.minimum(a_T, b_T)
        return float(values.max()) if values.size else 0.0
