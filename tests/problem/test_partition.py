"""Balanced partitioning against brute force over every cut."""

from hypothesis import given, settings, strategies as st

from helpers import compositions
from planner.problem.partition import UnitTable, balanced_partition, little_period


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


@settings(max_examples=400, deadline=None)
@given(flops=st.lists(st.integers(0, 20), min_size=1, max_size=9), data=st.data(),
       stages=st.integers(1, 5), cap=st.integers(5, 60), act=st.integers(0, 3), m=st.integers(1, 6))
def test_little_period_matches_brute_force(flops, data, stages, cap, act, m):
    """The smallest 1f1b period with Little's law at every stage equals the minimum,
    over every memory-feasible cut, of max(c_max, max_j (suffix_j + 2 lsuf_j) / w_j)."""
    n = len(flops)
    mems = data.draw(st.lists(st.integers(1, 15), min_size=n, max_size=n))
    stored = data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    # a replica's suffix latency: the sum of its boundaries' x + l from stage j on
    lat = data.draw(st.lists(st.sampled_from([0.0, 0.0, 1.0, 5.0, 9.0, 20.0]), min_size=stages, max_size=stages))
    lsuf = [sum(lat[j:stages - 1]) for j in range(stages)]
    rate = data.draw(st.sampled_from([0.5, 1.0, 3.0]))
    w = [min(m, stages - j) for j in range(stages)]
    tab = UnitTable(flops, mems, stored)
    limit = lambda j: float(cap)
    inflight = lambda j: float(act * w[j])

    def fits(cuts):
        return all(sum(mems[a:b]) + inflight(j) * sum(stored[a:b]) <= cap for j, (a, b) in enumerate(cuts))

    def period(cuts):
        c = [rate * sum(flops[a:b]) for a, b in cuts]
        return max([max(c)] + [(sum(c[j:]) + 2 * lsuf[j]) / w[j] for j in range(stages)])

    feasible = [c for c in compositions(n, stages) if fits(c)] if stages <= n else []
    if not feasible:
        return
    best = min(period(c) for c in feasible)
    got = little_period(tab, w, lsuf, rate, limit, inflight)
    assert got <= best * (1 + 1e-9) + 1e-12  # a lower bound ...
    assert got >= best * (1 - 1e-6) - 1e-9  # ... and an exact one


def test_little_period_lets_the_stages_behind_a_crossing_stay_light():
    """8 unit-compute units, 3 stages, w = (3, 2, 1), 9 s of latency behind stage 1:
    Little's law there allows 2 s of compute from stage 1 on, so the partition is
    (6, 1, 1) and the period 10 s (Little's law at the front alone says 26/3 s)."""
    tab = UnitTable([1] * 8, [0] * 8, [0] * 8)
    tau = little_period(tab, [3, 2, 1], [9.0, 9.0, 0.0], 1.0, lambda j: 1e9, lambda j: 0.0)
    assert abs(tau - 10.0) < 1e-6


@settings(max_examples=300, deadline=None)
@given(flops=st.lists(st.integers(0, 20), min_size=1, max_size=8), data=st.data(), stages=st.integers(1, 4),
       act=st.integers(0, 3))
def test_typed_partition_matches_brute_force(flops, data, stages, act):
    """GPU types (SPEC v3 (g)): stage j runs on 1-2 types with their own speeds (and a
    fixed time per unit) and memory; the slowest (stage, type) of the typed partition
    equals the brute-force minimum over every cut that fits every stage's memory."""
    import numpy as np

    from planner.problem.partition import typed_partition

    n = len(flops)
    mems = data.draw(st.lists(st.integers(1, 15), min_size=n, max_size=n))
    stored = data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    speeds = [data.draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2)) for _ in range(stages)]
    over = [[data.draw(st.sampled_from([0, 0, 1])) for _ in s] for s in speeds]  # time per unit, any flops
    caps = [data.draw(st.integers(5, 60)) for _ in range(stages)]
    inflight = lambda j: float(act * (stages - j))  # noqa: E731
    tab = UnitTable(flops, mems, stored)

    def time(j, a, b):
        return max(sum(flops[a:b]) / v + o * (b - a) for v, o in zip(speeds[j], over[j]))

    def fits(cuts):
        return all(sum(mems[a:b]) + inflight(j) * sum(stored[a:b]) <= caps[j] for j, (a, b) in enumerate(cuts))

    prefix = lambda v, o: np.concatenate([[0.0], np.cumsum([f / v + o for f in flops])])  # noqa: E731
    times = [np.array([prefix(v, o) for v, o in zip(speeds[j], over[j])]) for j in range(stages)]
    feasible = [c for c in compositions(n, stages) if fits(c)] if stages <= n else []
    got = typed_partition(tab, stages, times, lambda j: float(caps[j]), inflight)
    if not feasible:
        assert got is None
        return
    best = min(max(time(j, a, b) for j, (a, b) in enumerate(c)) for c in feasible)
    assert got is not None and len(got) == stages and fits(got)
    assert got[0][0] == 0 and got[-1][1] == n and all(a < b for a, b in got)
    assert max(time(j, a, b) for j, (a, b) in enumerate(got)) <= best * (1 + 1e-8) + 1e-12
