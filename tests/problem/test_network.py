"""Routes (SPEC 2) and link sharing (SPEC 5) on hand-made graphs."""

import numpy as np
import pytest

from helpers import make_instance
from planner import NetworkStates, Plan
from planner.scoring.figures import PlanFigures


def names(inst, a, b):
    return inst.routes[(a, b)].nodes


def test_least_latency_then_fewer_hops_then_lexicographic():
    # a-d direct 10 ms; a-b-d 4+6 = 10 ms (tie on latency, more hops); a-c-d 3+3 = 6 ms best
    inst = make_instance([("a", 8), ("b", 8), ("c", 8), ("d", 8)],
                         [("a", "d", 10, 10.0), ("a", "b", 10, 4.0), ("b", "d", 10, 6.0),
                          ("a", "c", 10, 3.0), ("c", "d", 10, 3.0)])
    assert names(inst, "a", "d") == ("a", "c", "d")
    assert inst.routes[("a", "d")].latency_ms == pytest.approx(6.0)
    # remove the fast path: direct (1 hop) beats a-b-d (2 hops) at equal latency
    inst2 = make_instance([("a", 8), ("b", 8), ("d", 8)],
                          [("a", "d", 10, 10.0), ("a", "b", 10, 4.0), ("b", "d", 10, 6.0)])
    assert names(inst2, "a", "d") == ("a", "d")
    # two equal two-hop paths: lexicographically smaller middle wins, each direction
    inst3 = make_instance([("a", 8), ("m", 8), ("n", 8), ("z", 8)],
                          [("a", "n", 10, 1.0), ("n", "z", 10, 1.0), ("a", "m", 10, 1.0), ("m", "z", 10, 1.0)])
    assert names(inst3, "a", "z") == ("a", "m", "z")
    assert names(inst3, "z", "a") == ("z", "m", "a")


def test_float_sum_ties_are_ties():
    # 0.1 + 0.2 != 0.3 in floating point, but the routes tie on latency: fewer hops wins
    inst = make_instance([("a", 8), ("b", 8), ("c", 8)],
                         [("a", "b", 10, 0.1), ("b", "c", 10, 0.2), ("a", "c", 10, 0.3)])
    assert names(inst, "a", "c") == ("a", "c")


def test_link_sharing_and_min_share_along_route():
    # line a-b-c; replica 0: a->b->c crosses both links; replica 1: b->c shares link b-c
    inst = make_instance([("a", 8), ("b", 8), ("c", 8)], [("a", "b", 80, 5.0), ("b", "c", 40, 7.0)],
                         global_batch_size=8)
    plan = Plan.build([(0, 1), (1, 2), (2, 4)], [["a", "b", "c"], ["b", "b", "c"]], tp=1,
                      micro_batch_size=1, instance=inst)
    fig = PlanFigures(inst, plan)
    comm = fig.comm(NetworkStates.base(inst))
    A = fig.A
    # link a-b: one flow (r0 k0) -> 80 Gbit/s; link b-c: two flows (r0 k1, r1 k1) -> 20 each
    assert comm.x[0, 0, 0] == pytest.approx(A[0] / (80e9 / 8))
    assert comm.x[0, 0, 1] == pytest.approx(A[1] / (20e9 / 8))
    assert comm.x[0, 1, 1] == pytest.approx(A[1] / (20e9 / 8))
    assert comm.x[0, 1, 0] == pytest.approx(A[0] / (200e9 / 8))  # same domain: intra bandwidth
    assert comm.l[0, 0, 1] == pytest.approx(7e-3) and comm.l[0, 1, 0] == 0.0
    # a link going down makes the flows that use it infinitely slow
    st = NetworkStates(np.array([[80.0, 0.0]]), np.array([[5.0, 7.0]]))
    assert np.isinf(fig.comm(st).x[0, 0, 1])


def test_gradient_ring_closed_form():
    # stage 0 replicas in a and c (route a-b-c), stage 1 both in b: intra ring only
    inst = make_instance([("a", 8), ("b", 8), ("c", 8)], [("a", "b", 80, 5.0), ("b", "c", 40, 7.0)],
                         global_batch_size=8)
    plan = Plan.build([(0, 2), (2, 4)], [["a", "b"], ["c", "b"]], tp=2, micro_batch_size=1, instance=inst)
    fig = PlanFigures(inst, plan, spec=2)
    ar = fig.comm(NetworkStates.base(inst)).ar[0]
    G0, G1 = 2 * fig.P[0], 2 * fig.P[1]
    # v2: ring a->c->a: both hops cross links a-b and b-c, two (stage, hop) pairs per link
    ring_bw = min(80, 40) / 2 * 1e9 / 8
    assert ar[0] == pytest.approx(2 * 1 / 2 * G0 / ring_bw + 2 * 1 * 12e-3)
    # v3 (full duplex): hop a->c uses each link's a->c direction, hop c->a the other: no sharing
    ar3 = PlanFigures(inst, plan, spec=3).comm(NetworkStates.base(inst)).ar[0]
    assert ar3[0] == pytest.approx(2 * 1 / 2 * G0 / (40 * 1e9 / 8) + 2 * 1 * 12e-3)
    assert ar3[1] == pytest.approx(ar[1])  # inside b: no WAN
    # two replicas of stage 1 in b: 2(n-1)/n * (G/t) / intra
    assert ar[1] == pytest.approx(2 * 1 / 2 * (G1 / 2) / (200e9 / 8))
