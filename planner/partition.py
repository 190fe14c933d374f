"""Cutting the model's units into pipeline stages.

:func:`balanced_partition` splits the units into exactly S contiguous
stages so that the slowest stage's compute is as small as possible while
every stage fits in GPU memory (SPEC section 5).  It bisects on the
bottleneck compute and packs greedily from the first unit; because every
sub-interval of a feasible stage is feasible, furthest-reach packing is
optimal for a given bottleneck.

Example
-------
>>> p = UnitTable(flops=[0, 4, 4, 4, 4, 2], mem=[1, 1, 1, 1, 1, 1], stored=[0] * 6)
>>> balanced_partition(p, stages=3, limit=lambda j: 100.0, act=lambda j: 0.0)
[(0, 3), (3, 4), (4, 6)]
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Callable, Sequence


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


def _reach(tab: UnitTable, start: int, cap_flops: float, mem_cap: float, act: float) -> int:
    """Largest end u such that [start, u) fits the compute and memory caps."""
    fl, me, st = tab.flops, tab.mem, tab.stored
    u = bisect_right(fl, fl[start] + cap_flops * (1 + 1e-12), lo=start) - 1
    base_m, base_s = me[start], st[start]
    # memory is monotone in u: shrink until it fits (binary search)
    lo, hi = start, u
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if (me[mid] - base_m) + act * (st[mid] - base_s) <= mem_cap:
            lo = mid
        else:
            hi = mid - 1
    return lo


def pack(tab: UnitTable, stages: int, cap_flops: float, limit: Callable[[int], float],
         act: Callable[[int], float]) -> list[tuple[int, int]] | None:
    """Greedy furthest-reach packing into at most ``stages`` stages, then
    split to exactly ``stages``; None if the units do not fit.

    ``limit(j)`` is stage j's memory cap for the ``mem`` column, ``act(j)``
    the multiplier of the ``stored`` column (in-flight tokens)."""
    if stages > tab.n:
        return None
    cuts = []
    pos = 0
    for j in range(stages):
        if pos == tab.n:
            break
        end = _reach(tab, pos, cap_flops, limit(j), act(j))
        if end == pos:
            return None
        cuts.append((pos, end))
        pos = end
    if pos < tab.n:
        return None
    # fewer stages than asked: split the widest stages from the back (later
    # positions have fewer micro-batches in flight, so memory only loosens)
    while len(cuts) < stages:
        i = max(range(len(cuts)), key=lambda k: (cuts[k][1] - cuts[k][0], k))
        a, b = cuts[i]
        if b - a < 2:
            return None
        mid = a + (b - a) // 2
        cuts[i:i + 1] = [(a, mid), (mid, b)]
    return cuts


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
