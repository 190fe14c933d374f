"""Balanced partitioning against brute force over every cut."""

from hypothesis import given, settings, strategies as st

from helpers import compositions
from planner.partition import UnitTable, balanced_partition


@settings(max_examples=500, deadline=None)
@given(flops=st.lists(st.integers(0, 20), min_size=1, max_size=9),
       mem=st.data(), stages=st.integers(1, 5), cap=st.integers(5, 60), act=st.integers(0, 3))
def test_min_max_compute_matches_brute_force(flops, mem, stages, cap, act):
    n = len(flops)
    mems = mem.draw(st.lists(st.integers(1, 15), min_size=n, max_size=n))
    stored = mem.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    tab = UnitTable(flops, mems, stored)
    limit = lambda j: float(cap)
    inflight = lambda j: float(act * (stages - j))  # 1f1b-like: earlier stages hold more

    def fits(cuts):
        return all(sum(mems[a:b]) + inflight(j) * sum(stored[a:b]) <= cap for j, (a, b) in enumerate(cuts))

    feasible = [c for c in compositions(n, stages)] if stages <= n else []
    feasible = [c for c in feasible if fits(c)]
    got = balanced_partition(tab, stages, limit, inflight)
    if not feasible:
        assert got is None
        return
    best = min(max(sum(flops[a:b]) for a, b in c) for c in feasible)
    assert got is not None and len(got) == stages and fits(got)
    assert got[0][0] == 0 and got[-1][1] == n and all(a < b for a, b in got)
    assert max(sum(flops[a:b]) for a, b in got) == best
