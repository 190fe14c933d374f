"""Cutting the model's units into pipeline stages.

:func:`balanced_partition` splits the units into exactly S contiguous
stages so that the slowest stage's compute is as small as possible while
every stage fits in GPU memory (SPEC section 5).  It bisects on the
bottleneck compute and packs greedily from the last unit backwards (see
:func:`pack` for why that is exact).

Example
-------
>>> p = UnitTable(flops=[0, 4, 4, 4, 4, 2], mem=[1, 1, 1, 1, 1, 1], stored=[0] * 6)
>>> balanced_partition(p, stages=3, limit=lambda j: 100.0, act=lambda j: 0.0)
[(0, 2), (2, 4), (4, 6)]
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import Callable, Sequence

import numpy as np


class UnitTable:
    """Prefix sums of per-unit compute (any unit), state memory (bytes) and
    stored activation (bytes per token) for fast interval sums."""

    def __init__(self, flops: Sequence[float], mem: Sequence[float], stored: Sequence[float]):
        self.n = len(flops)
        self.flops = [0.0, *accumulate(float(v) for v in flops)]
        self.mem = [0.0, *accumulate(float(v) for v in mem)]
        self.stored = [0.0, *accumulate(float(v) for v in stored)]

    def interval(self, a: int, b: int) -> tuple[float, float, float]:
        return (self.flops[b] - self.flops[a], self.mem[b] - self.mem[a],
                self.stored[b] - self.stored[a])


def _reach_back(tab: UnitTable, end: int, cap_flops: float, mem_cap: float, act: float, lo: int) -> int:
    """Smallest start s >= lo such that [s, end) fits the compute and memory caps."""
    fl, me, st = tab.flops, tab.mem, tab.stored
    s = max(lo, bisect_left(fl, fl[end] - cap_flops * (1 + 1e-12), hi=end))
    # memory grows as s decreases: binary search the smallest s that fits
    a, b = s, end
    while a < b:
        mid = (a + b) // 2
        if (me[end] - me[mid]) + act * (st[end] - st[mid]) <= mem_cap:
            b = mid
        else:
            a = mid + 1
    return a


def pack(tab: UnitTable, stages: int, cap_flops: float, limit: Callable[[int], float],
         act: Callable[[int], float], floor: Sequence[int] | None = None) -> list[tuple[int, int]] | None:
    """Exactly ``stages`` stages with compute <= ``cap_flops`` that fit memory, or None.

    Packs from the LAST stage backwards, each stage taking as many units as
    it can while leaving one unit for every earlier stage.  When memory
    caps only loosen towards the end of the pipeline (``limit(j)`` non-
    decreasing, ``act(j)`` non-increasing: true for gpipe and 1f1b), this
    furthest-reach packing finds a partition whenever one exists: by
    induction, its j-th stage from the end starts no later than that of any
    feasible partition.  ``floor[j]``, when given, is the earliest unit stage
    j may start at (stage j's suffix from there on is short enough); the
    induction holds with it once every floor leaves one unit per stage
    before the next floor (``lo`` below)."""
    n = tab.n
    if stages > n:
        return None
    lo = list(range(stages))
    if floor is not None:
        for j in range(stages):
            lo[j] = max(j, floor[j], lo[j - 1] + 1 if j else 0)
    cuts = []
    end = n
    for j in range(stages - 1, -1, -1):
        start = _reach_back(tab, end, cap_flops, limit(j), act(j), lo=lo[j])
        if j == 0 and start > 0:
            return None
        if start >= end:
            return None
        cuts.append((start, end))
        end = start
    return cuts[::-1]


def _fits(tab, cuts, limit, act) -> bool:
    for j, (a, b) in enumerate(cuts):
        _, me, st = tab.interval(a, b)
        if me + act(j) * st > limit(j) * (1 + 1e-12):
            return False
    return True


def balanced_partition(tab: UnitTable, stages: int, limit: Callable[[int], float],
                       act: Callable[[int], float], iters: int = 40) -> list[tuple[int, int]] | None:
    """Exactly ``stages`` stages minimising the largest stage compute under
    the memory caps; None when no partition into ``stages`` stages fits."""
    total = tab.flops[-1]
    best = pack(tab, stages, float("inf"), limit, act)
    if best is None or not _fits(tab, best, limit, act):
        return None
    lo, hi = total / stages, max(tab.interval(a, b)[0] for a, b in best)
    for _ in range(iters):
        if hi - lo <= 1e-9 * max(hi, 1e-30):
            break
        mid = (lo + hi) / 2
        cuts = pack(tab, stages, mid, limit, act)
        if cuts is not None and _fits(tab, cuts, limit, act):
            best, hi = cuts, max(tab.interval(a, b)[0] for a, b in cuts)
        else:
            lo = mid
    return best


def light_boundaries(tab: UnitTable, cuts: list[tuple[int, int]], send: Sequence[float],
                     stage_time: Callable[[int, int], float], limit: Callable[[int], float],
                     act: Callable[[int], float], micro_batches: int = 1,
                     reach: int = 2) -> list[tuple[int, int]] | None:
    """The partition ``cuts`` with each boundary whose send takes as long as both
    neighbouring stages or longer moved (by at most ``reach`` units, left to right) to
    where the pair's share of the pipeline, ``(m - 1) * max(a, z, x) + a + z + x``
    (a, z: the two stages' times, x: the send, m: ``micro_batches``), is
    smallest, every stage still fitting memory; None when no boundary moves.  Where a balanced cut falls
    after a unit whose output is large, this is the cut a practitioner would
    take instead, should the WAN carry that boundary.

    ``send[u]`` is the time (s) to send unit u's output (what the boundary after
    unit u carries), ``stage_time(a, b)`` a stage's time (s) over units [a, b).

    >>> t = UnitTable(flops=[5, 1, 5, 1], mem=[0] * 4, stored=[0] * 4)
    >>> light_boundaries(t, [(0, 1), (1, 4)], [9, 0, 0, 0], lambda a, b: t.interval(a, b)[0],
    ...                  lambda j: 1.0, lambda j: 0.0)
    [(0, 2), (2, 4)]
    """
    if len(cuts) < 2:
        return None
    bounds = [b for _, b in cuts[:-1]]
    n = tab.n
    for i, b in enumerate(bounds):
        start = bounds[i - 1] if i else 0
        end = bounds[i + 1] if i + 1 < len(bounds) else n

        def local(c):  # the pair's share of the pipeline: m-1 periods at its slowest, then its fill
            a, z = stage_time(start, c), stage_time(c, end)
            return (micro_batches - 1) * max(a, z, send[c - 1]) + a + z + send[c - 1]

        if send[b - 1] < max(stage_time(start, b), stage_time(b, end)) * (1 - 1e-9):
            continue  # the boundary's send is not what binds here: keep the balanced cut
        best, best_t = b, local(b)
        for c in range(max(start + 1, b - reach), min(end - 1, b + reach) + 1):
            t = local(c)
            if t < best_t * (1 - 1e-9) and _fits(tab, [(start, c), (c, end)],
                                                 lambda k: limit(i + k), lambda k: act(i + k)):
                best, best_t = c, t
        bounds[i] = best
    ends = [0, *bounds, n]
    moved = list(zip(ends[:-1], ends[1:]))
    return None if moved == list(cuts) else moved


def little_period(tab: UnitTable, w: Sequence[int], lsuf: Sequence[float], rate: float,
                  limit: Callable[[int], float], act: Callable[[int], float], tau0: float = 0.0,
                  iters: int = 40, m: int | None = None) -> float:
    """Lower bound (s) on the 1f1b period of a pipeline of S = len(w) stages: the
    smallest tau >= ``tau0`` for which some memory-feasible partition has every
    stage's compute c_j <= tau and Little's law on every suffix window (SPEC 7),

        sum_{i >= j} c_i + 2 lsuf[j] <= w[j] tau,

    for the stages whose in-flight limit ``w[j]`` is below ``m`` (the micro-batches
    per replica; v2 drops the windows of a stage that holds all m, so with ``m``
    given those stages impose nothing; ``None`` keeps every stage, v1's law).
    ``lsuf[j]`` (s) is a lower bound on the
    sum of x_k + l_k over the boundaries k >= j, ``rate`` seconds of compute per
    flop per token.  Little's law at the front alone lets compute sit anywhere;
    here the stages behind a WAN crossing must stay light while the stages in
    front are memory-bound.  Each tau is tested exactly by :func:`pack` with a
    floor per stage (the stage's suffix fits its budget from the floor on); the
    bisection returns the largest tau found infeasible (``tau0`` if feasible).

    >>> t = UnitTable(flops=[1, 1, 1, 1], mem=[0] * 4, stored=[0] * 4)
    >>> little_period(t, [2, 1], [0.0, 0.0], 1.0, lambda j: 1.0, lambda j: 0.0)  # doctest: +ELLIPSIS
    1.99999...
    """
    S, n, fl = len(w), tab.n, tab.flops

    def feasible(tau: float) -> bool:
        floor = []
        for j in range(S):
            if m is not None and w[j] >= m:
                floor.append(0)  # the window from j is dropped: no floor
                continue
            budget = (w[j] * tau - 2 * lsuf[j]) / rate  # flops per token allowed from stage j on
            if budget < 0:
                return False
            floor.append(bisect_left(fl, fl[n] - budget * (1 + 1e-9) - 1e-12 * fl[n]))
        return pack(tab, S, tau / rate * (1 + 1e-9), limit, act, floor) is not None

    lo = tau0
    if feasible(lo):
        return lo
    hi = max(lo, 1e-12)
    for _ in range(200):  # a feasible period exists iff a memory-feasible partition does
        hi *= 2
        if feasible(hi):
            break
        lo = hi
    else:
        return lo
    for _ in range(iters):
        if hi - lo <= 1e-9 * hi:
            break
        mid = 0.5 * (lo + hi)
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return lo


def typed_partition(tab: UnitTable, stages: int, times: Sequence, limit: Callable[[int], float],
                    act: Callable[[int], float], iters: int = 60) -> list[tuple[int, int]] | None:
    """Exactly ``stages`` stages minimising the slowest stage's time when each stage
    has its own speeds (GPU types, SPEC v3 (g)), every stage fitting memory; None when
    no partition into ``stages`` stages fits.

    ``times[j]`` is a 2-D array (types hosting stage j, n + 1) of non-decreasing
    prefix sums: stage j over units [a, b) takes ``max_k times[j][k, b] - times[j][k, a]``
    seconds (the slowest type hosting it).  ``limit(j)`` and ``act(j)`` are the memory
    rule of :func:`balanced_partition` (bytes per stage slot, tokens of stored
    activation in flight).  Exact up to the bisection's 1e-9: a period tau is
    feasible iff some partition has every stage within tau and its memory, which
    a sweep over the reachable stage ends tests (an interval [a, b) that fits
    still fits when shortened, so from each start the feasible ends are a run).

    >>> t = UnitTable(flops=[1] * 6, mem=[0] * 6, stored=[0] * 6)
    >>> fast, slow = np.arange(7) * 1.0, np.arange(7) * 2.0   # slow: twice the time per unit
    >>> typed_partition(t, 2, [fast[None], slow[None]], lambda j: 1.0, lambda j: 0.0)
    [(0, 4), (4, 6)]
    """
    n = tab.n
    if stages > n or stages < 1:
        return None
    me, st = np.asarray(tab.mem), np.asarray(tab.stored)
    pos = np.arange(n + 1)
    mem_end = []  # per stage: the furthest end from each start that fits memory
    for j in range(stages):
        h = me + act(j) * st  # non-decreasing in the end
        cap = limit(j)
        # no tolerance: a stage that fits here fits the evaluator's rule (within 1e-12) too
        mem_end.append(np.searchsorted(h, h + cap, side="right") - 1)
    times = [np.atleast_2d(np.asarray(tj, float)) for tj in times]

    def furthest(j: int, tau: float) -> np.ndarray:
        e = mem_end[j]
        for row in times[j]:
            e = np.minimum(e, np.searchsorted(row, row + tau * (1 + 1e-12), side="right") - 1)
        return np.minimum(e, n - (stages - 1 - j))  # one unit left for every later stage

    def sweep(tau: float):
        """The reachable ends after each stage (bool arrays), or None when n is not reached."""
        reach = np.zeros(n + 1, bool)
        reach[0] = True
        out = [reach]
        for j in range(stages):
            e = furthest(j, tau)
            ok = reach & (e > pos)
            diff = np.zeros(n + 2, np.int64)
            np.add.at(diff, pos[ok] + 1, 1)
            np.add.at(diff, e[ok] + 1, -1)
            reach = np.cumsum(diff[:-1]) > 0
            if not reach.any():
                return None
            out.append(reach)
        return out if out[-1][n] else None

    hi = max(float(np.max(tj[:, -1] - tj[:, 0])) for tj in times)  # the whole model on any stage
    if sweep(hi) is None:
        return None  # memory alone rules every partition out
    lo = 0.0
    for _ in range(iters):
        if hi - lo <= 1e-9 * max(hi, 1e-30):
            break
        mid = 0.5 * (lo + hi)
        if sweep(mid) is not None:
            hi = mid
        else:
            lo = mid
    reach = sweep(hi)
    cuts, end = [], n
    for j in range(stages - 1, -1, -1):  # back from the end: the earliest start that reaches it
        e = furthest(j, hi)
        s = int(np.flatnonzero(reach[j] & (pos < end) & (e >= end))[0])
        cuts.append((s, end))
        end = s
    return cuts[::-1]
