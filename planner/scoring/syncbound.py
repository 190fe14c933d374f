"""The per-step gradient sync every stage pays, and the quality factor per number of
groups: two refinements of the per-shape bound (:mod:`planner.scoring.shapebound`,
issue 29, fourth pass).  Units: seconds, bytes, bytes/s.

**Every stage pays its sync (SPEC 5, 11).**  T >= E_j + AR_j for every stage j
(SPEC 6: T = max_j (E_j + AR_j)), and E_j >= sum_{i<j} (f_i + x_i) + m c_j (the
shape bound's term (2)): whatever the placement, not only for a stage whose
replicas cross the WAN.  A stage with R >= 2 replicas spread over K domains,
n_d of them in domain d, has

    AR_j = max_{d: n_d > 1} phi(n_d) (G_j / t) / intra_d
           + [K > 1] (phi(K) G_j / ring_bandwidth + 2 (K - 1) ring_latency)  (+ X_j >= 0).

The largest n_d is at least ceil(R / K) and phi is non-decreasing (2(n-1)/n for a
ring, 2 for reduce-broadcast), intra_d is at most the fastest intra bandwidth of a
domain whose nodes take t, the ring bandwidth at most ``cap`` (the largest capacity
of any route, :func:`planner.scoring.shapebound.network_figures`) and every hop's
latency at least the smallest link latency; K is at least the fewest domains whose
slots (of t GPUs) hold R.  So

    AR_j >= min over K of  phi(ceil(R/K)) G_j / (t intra_max)
                           + [K > 1] (phi(K) G_j / cap + 2 (K - 1) l_min)          (S)

with G_j = P_j q / 8 for an every-step sync at q bits (SPEC 11: both parts carry
G^o_j), 16 bits for the inner sync of DiLoCo and streaming.  The per-shape programme
takes max((1), (3), sum_{i<j} (f_i + x_i) + m c_j + (S)) per stage
(:func:`planner.scoring.shapebound._pipeline_dp`'s ``every``).

**Groups (SPEC 11).**  Under DiLoCo and streaming the replicas whose stage 0 sits in
one domain form a group, M groups in all; the inner sync of stage j is (S)'s sync of
each group's replicas alone, the largest over groups, so it is at least that of the
largest group, of R_g >= ceil(R / M) replicas.  Its stage 0 sits in one domain by
definition: AR^in_0 >= phi(R_g) 2 P_0 / (t intra_max) exactly (K = 1); its other
stages pay (S) with R_g replicas.  M <= R, and stage 0's R cells lie in M domains,
so R <= the sum of the M largest slots.  T_eff >= T_in (SPEC 11), so a bound on T_in
over the plans with M in [M_lo, M_hi] divided by the largest e of those M is a bound
on their objective; the instance's bound is the smallest over the classes
(:func:`sync_subclasses`).  With M = 1 the one group's inner sync is the every-step
sync at 16 bits and T_eff = T_in: the every-step programme at 16 bits holds.

>>> SyncFloor(16, groups=4, groups_lo=3).admits(128, [32, 32, 32, 32])
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..problem.network import GBPS


def phi(n, reduce_broadcast: bool = False):
    """SPEC 5's volume factor for a sync over ``n`` members (array or int): 2(n-1)/n
    for a ring, 2 for reduce-broadcast; 0 for n <= 1.

    >>> float(phi(4)), float(phi(4, True)), float(phi(1))
    (1.5, 2.0, 0.0)
    """
    n = np.asarray(n, float)
    return np.where(n > 1, 2.0 if reduce_broadcast else 2.0 * (n - 1) / np.maximum(n, 1), 0.0)


@dataclass(frozen=True)
class SyncFloor:
    """What every stage's per-step sync costs at least, for one class of plans (module
    docstring): ``bits`` per parameter of the per-step payload (an every-step sync's q,
    16 for DiLoCo's and streaming's inner sync); ``groups`` None for an every-step sync
    (one sync over all R replicas), else M_hi: the plans have ``groups_lo`` <= M <=
    ``groups`` groups, and the largest has >= ceil(R / M_hi) replicas with its stage 0
    in one domain."""

    bits: int
    groups: int | None = None
    groups_lo: int = 1

    def admits(self, R: int, slots) -> bool:
        """Whether a plan of R replicas of this class can exist on domains of ``slots``
        (cells of t GPUs each): M <= R and stage 0's R cells in at most M_hi domains.

        >>> SyncFloor(16, groups=2, groups_lo=2).admits(128, [32, 32, 32, 32])
        False
        """
        if self.groups is None:
            return True
        top = sorted((int(k) for k in slots if k > 0), reverse=True)
        return R >= self.groups_lo and len(top) >= self.groups_lo and R <= sum(top[:self.groups])

    def group_size(self, R: int) -> int:
        """The fewest replicas the largest group of a plan of the class has (R for an
        every-step sync)."""
        return R if self.groups is None else -(-R // self.groups)

    def stage_floor(self, instance, R: int, t: int, P, slots, cap: float, lat_min: float,
                    crossing: bool = False) -> np.ndarray:
        """``[a, e]``: a lower bound (s) on AR_j (AR^in_j for a group class) of a stage
        holding parameters ``P[a, e]`` (an array, e.g. units a..e-1) in a plan of R replicas
        at tp ``t`` (module docstring, (S)); row a = 0 is stage 0.  ``slots``: cells of t
        GPUs per domain; ``cap``, ``lat_min``: the routes' largest capacity (bytes/s) and
        the smallest link latency (s).  ``crossing``: of a stage whose replicas span at
        least two domains (K >= 2 in (S); every row alike).

        Example: 32 replicas in one domain of 200 Gbit/s, t = 4, 1e9 parameters at 16
        bits: phi(32) 2e9 / 4 / 25e9 = 0.03875 s.
        """
        P = np.asarray(P, float)
        rb = instance.workload.gradient_sync == "reduce_broadcast"
        n = self.group_size(R)
        out = np.zeros_like(P)
        if n < 2:
            return out
        intra = max(d.intra_bandwidth_gbps for d in instance.domains
                    if d.gpus_per_node >= t and d.gpus >= t) * GBPS
        pay = P * self.bits / 8.0
        local = pay / (t * intra)
        held = np.cumsum(sorted((int(k) for k in slots if k > 0), reverse=True))
        k_min = int(np.searchsorted(held, n) + 1)  # the fewest domains whose slots hold n
        best = np.full_like(P, np.inf)
        for K in range(max(min(k_min, n), 2 if crossing else 1), min(n, len(held)) + 1):
            term = float(phi(-(-n // K), rb)) * local
            if K > 1 and cap > 0:
                term = term + float(phi(K, rb)) * pay / cap + 2 * (K - 1) * lat_min
            best = np.minimum(best, term)
        if not np.isfinite(best).all():  # no K possible (the shape has no plan): charge nothing
            best = np.where(np.isfinite(best), best, 0.0)
        out = np.where(P > 0, best, 0.0)
        if self.groups is not None and not crossing:  # the largest group's stage 0 sits in one domain
            out[0] = np.where(P[0] > 0, float(phi(n, rb)) * local[0], 0.0)
        return out


def group_quality(instance) -> dict[int, float]:
    """M -> the largest quality factor e of a DiLoCo or streaming option (any H, bits) with
    M groups that a quality row covers, for M = 1 .. the number of domains; an M no row
    covers is absent (no plan may carry it).  Empty when neither mode is allowed.

    >>> group_quality(load_instance("diloco-13b"))          # doctest: +SKIP
    {1: 1.0, 2: 1.0, 3: 0.92, 4: 0.92}
    """
    from ..problem.dpsync import MAX_H, DpSync, quality_row, quality_rows

    modes = [mode for mode in ("diloco", "streaming") if mode in instance.options.sync_modes]
    rows = quality_rows(instance)
    Hs = {1, MAX_H} | {h for r in rows if r.max_H for h in (r.max_H, min(r.max_H + 1, MAX_H))}
    out = {}
    for M in range(1, max(len(instance.domains), 1) + 1):
        es = [row.e for mode in modes for H in Hs for q in range(1, 33)
              if (row := quality_row(rows, DpSync(mode=mode, H=H, bits=q), M)) is not None]
        if es:
            out[M] = max(es)
    return out


def sync_subclasses(instance, classes) -> list[tuple[int | None, SyncFloor, float]]:
    """The plans the tool accepts in classes ``(ring_bits, floor, e_max)``: ``classes`` is
    :func:`planner.scoring.bounds.sync_classes`' list; its every-step class gets the floor
    at its bits, and DiLoCo/streaming plans are split by their number of groups M: M = 1
    (the every-step programme at 16 bits), then runs of M >= 2 with the same largest e
    (module docstring).  Every accepted plan lies in one class, and e_max is at least its e.

    >>> sync_subclasses(load_instance("diloco-13b"), [(4, 1.0), (None, 1.0)])   # doctest: +SKIP
    [(4, SyncFloor(bits=4, ...), 1.0), (16, SyncFloor(bits=16, groups=1, ...), 1.0), ...]
    """
    out = []
    for bits, e in classes:
        if bits is not None:
            out.append((bits, SyncFloor(bits), e))
    if any(bits is None for bits, _ in classes):
        eM = group_quality(instance)
        if 1 in eM:
            out.append((16, SyncFloor(16, groups=1, groups_lo=1), eM[1]))
        runs: list[list] = []
        for M in sorted(k for k in eM if k >= 2):
            if runs and runs[-1][1] == M - 1 and math.isclose(runs[-1][2], eM[M]):
                runs[-1][1] = M
            else:
                runs.append([M, M, eM[M]])
        out += [(None, SyncFloor(16, groups=hi, groups_lo=lo), e) for lo, hi, e in runs]
    return out


def stage0_cut_term(cuts, slots, R: int, S: int, m: int, c_sum: float, a_min: float, groups: int | None,
                    groups_lo: int = 1) -> float:
    """A lower bound on T (s) of every plan of R replicas of S stages whose stage 0 sits in
    M domains, ``groups_lo`` <= M <= ``groups`` (DiLoCo and streaming with few groups),
    from the activations leaving those domains; 0 when it gives nothing.

    Proof.  Let U be the domains holding stage 0 (|U| = M), s_U their slots (``slots``:
    cells of t GPUs per domain).  A replica wholly in U takes S cells there, the others
    one each (their stage 0), so at most w = floor((s_U - R) / (S - 1)) replicas are
    whole in U, and p >= R - w replicas have a first stage outside U: its boundary's
    forward channel goes from a domain of U to one outside, so its route crosses the cut
    (U, rest) on a link from U's side (and leaves through U's uplinks).  As in
    :func:`planner.scoring.shapebound.boundary_cut_term` (its channels may be of
    different boundaries: n_F(q) counts every forward channel), some such channel has
    bandwidth <= C_U / p, C_U the cut's capacity one way, and its replica pays
    T >= sum c + (m + 1) p A_min / C_U + 2 l_U.  U is unknown: the bound is the
    smallest over the sides of the cuts (``cuts``: :func:`planner.scoring.shapebound.network_cuts`,
    every bipartition joined by a link; a side with no link across cannot send to the rest,
    so it holds whole replicas only) with between ``groups_lo`` and ``groups`` domains and
    room for stage 0.  0 with S = 1, without groups, when U may be every domain, or when
    the cuts are not all enumerated (over 16 domains).

    Example: four domains of 32 slots, full mesh of 1.25 GB/s links, R = 64, S = 2, at
    most 2 groups: U is two domains, no replica is whole in U, the cut carries 5 GB/s one
    way: T >= sum c + 17 * 64 A / 5e9 + 2 l with m = 16.
    """
    if S < 2 or groups is None or cuts is None:
        return 0.0
    slots = np.asarray(slots, int)
    D = len(slots)
    if groups >= D or len(cuts.total) != 2 ** (D - 1) - 1:
        return 0.0  # U may be every domain (no cut), or a side without links: no bound
    sides = np.concatenate([cuts.in_x, ~cuts.in_x])
    total = np.concatenate([cuts.total, cuts.total])
    latency = np.concatenate([cuts.latency, cuts.latency])
    size = sides.sum(axis=1)
    s_u = sides @ slots
    ok = (size >= max(1, groups_lo)) & (size <= groups) & (s_u >= R)
    if not ok.any():
        return 0.0
    p = R - np.floor((s_u - R) / (S - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(p > 0, c_sum + (m + 1) * p * a_min / total + 2 * latency, 0.0)
    return float(value[ok].min())


def run_dp(base, ring, stages: int, step: float, L: int, every=None) -> np.ndarray:
    """``[S - 1]``: for S = 1 .. ``stages``, the smallest over partitions into S stages, each
    stage *whole* (its R replicas in one domain: term ``base``, or ``every``) or *crossing*
    (replicas in >= 2 domains: the larger of that and ``ring``, its sync over the WAN), with
    every maximal run of consecutive whole stages at most ``L`` long, of the largest stage
    term; stage j adds ``2 j step`` to ``base`` and ``j step`` to ``every`` and ``ring``
    (as :func:`planner.scoring.shapebound._pipeline_dp`).

    Why runs (every-step sync, R >= 2, the shape not fitting one domain).  Either some
    boundary joins two whole stages in different domains -- then its R forward channels
    share one route and the module docstring of :mod:`planner.scoring.shapebound`'s (b)
    holds -- or none does: then each maximal run of whole stages sits in one domain, whose
    slots hold L R cells at most (L = the most slots of a domain // R), and the crossing
    stages between runs each pay their ring term (2).  So every plan of the second kind is
    bounded by this programme, whatever its placement: where its crossing stages are, the
    programme may designate them.

    >>> inf = np.inf
    >>> base = np.array([[inf, 1, 5, 9], [inf, inf, 1, 5], [inf, inf, inf, 1], [inf] * 4])
    >>> run_dp(base, base + 10, 3, 0.0, 1).tolist()    # S = 2, 3: some stage must cross
    [9.0, 11.0, 11.0]
    >>> run_dp(base, base + 10, 3, 0.0, 2).tolist()    # two whole stages may be adjacent
    [9.0, 5.0, 11.0]
    """
    n = base.shape[1] - 1
    w0 = base[0] if every is None else np.maximum(base[0], every[0])
    best = np.full((L + 1, n + 1), np.inf)  # [run length of the last stage (0: it crosses), e]
    best[0] = np.maximum(w0, ring[0])
    if L >= 1:
        best[1] = w0
    out = [best[:, n].min()]
    for j in range(1, stages):
        whole = base + 2 * j * step
        if every is not None:
            whole = np.maximum(whole, every + j * step)
        cross = np.maximum(whole, ring + j * step)
        new = np.full_like(best, np.inf)
        new[0] = np.maximum(best.min(axis=0)[:, None], cross).min(axis=0)
        for k in range(1, L + 1):
            new[k] = np.maximum(best[k - 1][:, None], whole).min(axis=0)
        best = new
        out.append(best[:, n].min())
    return np.array(out)
