"""SPEC v3 section 11 (``dp_sync``): the independent reference
(``tests/reference_sim_v3.py``, written from the SPEC text alone) by hand, and
the package's evaluator against it.

* Closed forms worked by hand on tiny instances (two domains a, b joined by one
  10 Gbit/s link; units of F_ONE FLOPs take f = 1 s, g = 2 s): every_step at 4
  bits with a codec, diloco, streaming with the stall hidden, binding and the
  floor binding, the outer rings as extra channels n_O, memory with outer
  state, WAN bytes, and the quality lookup (instance rows, defaults, no match).
* SPEC 11's identity: H = 1, q = 16, the replicas of every stage in distinct
  domains: diloco's T_eff equals the every-step T.
* The package's Evaluator equals the reference to 1e-9 relative on random
  small instances and plans (hypothesis), under random network states too:
  T_in, T^est_in, T_eff, T^est_eff, scores, cost, memory, WAN bytes, the
  reported figures of ``evaluate`` and feasibility (memory with outer state).
  Every closed form above is checked on the package too (:func:`both`).
* Two findings of this reference, fixed in the package: T_eff was NaN, not
  infinity, when a boundary crosses a down link; the payload was capped at 16
  bits for q > 16.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from planner import Deadlock, Evaluator, InputError, Instance, NetworkStates, Plan, evaluate
from planner.problem.dpsync import DpSync
from planner.problem.model import ModelSpec

from reference_sim_v3 import (RefDeadlock, RefNoQuality, ref3_comm, ref3_effective,
                              ref3_effective_estimate, ref3_quality, ref3_simulate,
                              ref3_stage_figures, ref3_sync, ref3_violations)
from test_reference_agreement_v3 import SETTINGS, close, draw_states, explicit_ops, wan

REL = 1e-9
GPU = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}
F_ONE = 5e13 / 128  # f = 1 s, g = 2 s with b = 1, s = 128, t = 1 on GPU
A_ONE = 1.25e9 / 128  # 1.25e9 B per micro-batch: x = 1 s over one 10 Gbit/s direction
P_BIG = 2.5e9  # params per unit: G = 5e9 B, G^o = 1.25e9 B at 4 bits


def approx(v):
    return pytest.approx(v, rel=REL, abs=1e-12)


# ---------------------------------------------------------------- builders
def base_instance(units, R, *, latency_ms=5.0, gpus=64, memory_gb=80.0):
    """Two domains a, b (intra 200 Gbit/s = 25e9 B/s), one 10 Gbit/s link; gpipe, m = 1."""
    return Instance.from_dict({
        "name": "dp", "gpu": {**GPU, "memory_gb": memory_gb},
        "domains": [{"name": n, "gpus": gpus, "intra_bandwidth_gbps": 200.0} for n in "ab"],
        "links": [{"a": "a", "b": "b", "bandwidth_gbps": 10.0, "latency_ms": latency_ms}],
        "workload": {"model": ModelSpec(name="m", units=[
            {"name": f"u{i}", "params": P_BIG, "fwd_flops_per_token": F_ONE,
             "out_bytes_per_token": out, "stored_bytes_per_token": 0.0}
            for i, out in enumerate(units)]),
            "global_batch_size": R, "seq_len": 128, "micro_batch_sizes": [1],
            "tensor_parallel": [1]}})


def with_sync_fields(inst, *, codec_gbps=None, outer_bytes=8.0, quality=(),
                     modes=("every_step", "diloco", "streaming")):
    """``inst`` rebuilt with SPEC 11's instance fields: ``[compression]``, ``[[quality]]``
    and ``[options] dp_sync``."""
    data = inst.to_dict()
    data["workload"]["model"] = inst.workload.model
    data["options"]["dp_sync"] = list(modes)
    data["compression"] = {"outer_state_bytes_per_param": outer_bytes}
    if codec_gbps is not None:
        data["compression"]["codec_gbps"] = codec_gbps
    data["quality"] = list(quality)
    return Instance.from_dict(data)


def with_dp_sync(inst, bounds, placement, **sync):
    """A plan (gpipe, b = 1, t = 1) with ``dp_sync`` (None when empty)."""
    return Plan.build(bounds, placement, tp=1, micro_batch_size=1, instance=inst, schedule="gpipe",
                      dp_sync=DpSync(**sync) if sync else None)


def both(inst, plan, bw_gbps=None, lat_ms=None):
    """The reference's figures (:func:`ref3_effective`), after checking that the package's
    Evaluator and ``evaluate`` give the same to 1e-9: so every closed form below holds
    for both."""
    ref = ref3_effective(inst, plan, bw_gbps, lat_ms)
    states = NetworkStates.base(inst)
    if bw_gbps is not None or lat_ms is not None:
        bw = bw_gbps if bw_gbps is not None else [lk.bandwidth_gbps for lk in inst.links]
        lat = lat_ms if lat_ms is not None else [lk.latency_ms for lk in inst.links]
        states = NetworkStates(np.array([bw], dtype=float), np.array([lat], dtype=float))
    ev = Evaluator(inst, plan)
    got = {"T_in": ev.iteration_times(states)[0], "T_eff": ev.effective_times(states)[0],
           "Test_in": ev.estimate_times(states)[0], "Test_eff": ev.effective_estimate_times(states)[0],
           "e": ev.quality[0], "score": ev.scores(states)[0]}
    for key, val in got.items():
        assert close(float(val), ref[key]), (key, float(val), ref[key])
    if bw_gbps is None and lat_ms is None:
        full = evaluate(inst, plan)
        assert all(close(a, b / 1e9) for a, b in zip(full.memory_gb_per_gpu, ref["memory"]))
        assert close(full.wan_gb_per_iteration, ref["wan_bytes"] / 1e9)
        assert close(full.effective_time_s, ref["T_eff"])
    return ref


def one_stage_two_per_domain(**kw):
    """Instance 1: one stage of one unit (P = 2.5e9), R = 4, replicas 0, 1 in a and 2, 3 in b."""
    base = base_instance([0.0], R=4)
    return with_sync_fields(base, **kw), [(0, 1)], [["a"], ["a"], ["b"], ["b"]]


def two_stages_crossed(**kw):
    """Instance 2: two stages of one unit each, boundary A = 1.25e9 B, latency 0,
    replica 0 [a, b], replica 1 [b, a] (two groups of one replica)."""
    base = base_instance([A_ONE, 0.0], R=2, latency_ms=0.0)
    return with_sync_fields(base, **kw), [(0, 1), (1, 2)], [["a", "b"], ["b", "a"]]


# ---------------------------------------------------------------- instance 1
# E = c = 3 s for every replica (S = 1, m = 1). Intra: 25e9 B/s; link 1.25e9 B/s each way,
# 5 ms one way. Codec 40 Gbit/s = 5e9 B/s: X = 2 P / 5e9 = 1 s.
def test_plain_every_step_closed_form():
    # G = 5e9: intra phi(2) G / 25e9 = 0.2; cross phi(2) G / 1.25e9 + 2 * 0.005 = 4.01
    inst, bounds, placement = one_stage_two_per_domain(codec_gbps=40.0)
    plan = with_dp_sync(inst, bounds, placement)
    r = both(inst, plan)
    assert r["T_in"] == approx(3 + 0.2 + 4.01) and r["T_eff"] == r["T_in"]
    assert r["Test_eff"] == approx(7.21) and r["Test_in"] == approx(7.21)
    assert (r["e"], r["source"]) == (1.0, None)
    assert r["wan_bytes"] == approx(2 * 5e9)  # 2 (K - 1) G
    assert r["memory"] == approx([16 * P_BIG])


def test_every_step_4_bits_with_codec_closed_form():
    # G^o = P * 4 / 8 = 1.25e9: intra 1.25e9 / 25e9 = 0.05, cross 1.25e9 / 1.25e9 + 0.01 = 1.01,
    # X = 1: AR = 2.06, T = T_eff = T_est = 5.06; e = 1 (default row 1)
    inst, bounds, placement = one_stage_two_per_domain(codec_gbps=40.0)
    plan = with_dp_sync(inst, bounds, placement, mode="every_step", bits=4)
    r = both(inst, plan)
    comm = r["comm"]
    assert comm["intra"] == approx([0.05]) and comm["cross"] == approx([1.01])
    assert comm["X"] == approx([1.0]) and comm["AR"] == approx([2.06])
    for key in ("T_in", "T_eff", "Test_in", "Test_eff"):
        assert r[key] == approx(5.06), key
    assert (r["e"], r["source"]) == (1.0, "default row 1")
    assert r["wan_bytes"] == approx(2 * 1.25e9)  # 2 (K - 1) G^o
    assert r["memory"] == approx([16 * P_BIG])  # no outer state for every_step
    # without a codec X = 0; at 16 bits X = 0 even with one
    inst0, _, _ = one_stage_two_per_domain()
    assert both(inst0, plan)["T_eff"] == approx(4.06)
    assert ref3_comm(inst, with_dp_sync(inst, bounds, placement, mode="every_step"))["X"] == [0.0]
    # one replica: no sync, no codec
    single = with_sync_fields(base_instance([0.0], R=1), codec_gbps=40.0)
    assert ref3_simulate(single, with_dp_sync(single, bounds, [["a"]], mode="every_step", bits=4)) == 3.0


@pytest.mark.parametrize("outer_state,memory", [("gpu", 24 * P_BIG), ("cpu", 16 * P_BIG)])
def test_diloco_closed_form(outer_state, memory):
    # groups {0, 1} in a, {2, 3} in b: M = 2, AR^in = intra only = G / 25e9 = 0.2, T_in = 3.2;
    # outer K = 2 over G^o = 1.25e9: O = 1 + 2 * 0.005 = 1.01, X = 1;
    # T_sync = 3 + 0.2 + 1 + 1.01 = 5.21; H = 10: T_eff = 3.2 + (5.21 - 3.2) / 10 = 3.401
    inst, bounds, placement = one_stage_two_per_domain(codec_gbps=40.0)
    plan = with_dp_sync(inst, bounds, placement, mode="diloco", H=10, bits=4, outer_state=outer_state)
    r = both(inst, plan)
    comm = r["comm"]
    assert comm["M"] == 2 and comm["charged"] == [True]
    assert comm["AR"] == approx([0.2]) and comm["O"] == approx([1.01]) and comm["X"] == approx([1.0])
    assert r["T_in"] == approx(3.2) and r["T_eff"] == approx(3.401)
    assert r["Test_in"] == approx(3.2) and r["Test_eff"] == approx(3.401)
    assert (r["e"], r["source"]) == (1.0, "default row 2")
    assert r["wan_bytes"] == approx(2 * 1.25e9 / 10)  # inner syncs stay inside a and b
    # memory: 16 P + phi_o * 8 P (phi_o = 1 on the GPU, 0 on the CPU under diloco)
    assert r["memory"] == approx([memory])
    # 16 bits, no codec: O = 5e9 / 1.25e9 + 0.01 = 4.01, T_eff = 3.2 + 4.01 / 10
    inst16, _, _ = one_stage_two_per_domain()
    plan16 = with_dp_sync(inst16, bounds, placement, mode="diloco", H=10)
    assert both(inst16, plan16)["T_eff"] == approx(3.2 + 0.401)


def test_diloco_one_group_is_the_every_step_iteration():
    # every replica's stage 0 in a: M = 1, the inner sync is section 5's, T_eff = T_in = T
    inst, bounds, _ = one_stage_two_per_domain(codec_gbps=40.0)
    placement = [["a"]] * 4
    plain = both(inst, with_dp_sync(inst, bounds, placement))
    r = both(inst, with_dp_sync(inst, bounds, placement, mode="diloco", H=30, bits=4))
    assert r["comm"]["M"] == 1 and r["comm"]["X"] == [0.0]  # no outer sync: no codec either
    assert r["T_eff"] == r["T_in"] == plain["T_in"] == approx(3 + 1.5 * 5e9 / 25e9)


@pytest.mark.parametrize("F,nu,H,bw,want", [
    # link 10 Gbit/s: O^bw = 1, O^lat = 0.01; F = 2: o = 0.51, X / F = 0.5; T_in = 3.2
    (2, 1, 10, 10.0, 3.2),  # W = 1 * 3.2 + 0 + 0 = 3.2 >= 1.01: hidden
    (2, 0, 10, 10.0, 3.2 + 0.2 * 1.01),  # W = 0: s = 1.01, T_in + (F / H) s
    # 1 Gbit/s: O^bw = 10, o = 5.01; nu = H = F = 2: W = 6.4 hides 5.51, the floor
    # (F o + X) / H = (10.02 + 1) / 2 = 5.51 binds
    (2, 2, 2, 1.0, 5.51),
])
def test_streaming_closed_forms(F, nu, H, bw, want):
    inst, bounds, placement = one_stage_two_per_domain(codec_gbps=40.0)
    plan = with_dp_sync(inst, bounds, placement, mode="streaming", H=H, bits=4, fragments=F, overlap=nu)
    r = both(inst, plan, bw_gbps=[bw])
    assert r["T_in"] == approx(3.2) and r["comm"]["a"] == [0.0]
    assert r["T_eff"] == approx(want) and r["Test_eff"] == approx(want)
    assert r["memory"] == approx([24 * P_BIG])
    plan_cpu = with_dp_sync(inst, bounds, placement, mode="streaming", H=H, bits=4, fragments=F,
                            overlap=nu, outer_state="cpu")
    assert both(inst, plan_cpu)["memory"] == approx([(16 + 8 / F) * P_BIG])


# ---------------------------------------------------------------- instance 2
# Two stages, replicas [a, b] and [b, a]; latency 0. Both outer rings (stages 0 and 1, K = 2)
# put one hop on each direction of the link: 2 outer users of equal volume per direction.
def test_streaming_outer_rings_are_extra_channels_and_a_j():
    # streaming: n(a->b) = max(n_F, n_B) + n_O = 1 + 2 = 3, so x = 1.25e9 / (1.25e9 / 3) = 3.
    # Replica 0: F0 [0, 1], arrives 4, F1 [4, 5], B1 [5, 7], arrives 10, B0 [10, 12]:
    # E = (12, 7), a = (0, 4), T_in = 12 (groups of one replica: AR^in = 0).
    # Outer, 4 bits: G^o = 1.25e9, shares cap / 2: O^bw = 2, O^lat = 0, no codec.
    # F = 1, nu = 0, H = 10: W_0 = 0 + (12 - 12) + 0 = 0, s_0 = 2; W_1 = 0 + 5 + 4 = 9, s_1 = 0;
    # T_eff = 12 + 2 / 10 = 12.2.  nu = 1: W_0 = 12 hides it: T_eff = 12.
    inst, bounds, placement = two_stages_crossed()
    plan = with_dp_sync(inst, bounds, placement, mode="streaming", H=10, bits=4, fragments=1, overlap=0)
    r = both(inst, plan)
    comm = r["comm"]
    assert [x for row in comm["x"] for x in row] == approx([3.0, 3.0])
    assert r["E"] == approx([12.0, 7.0]) and comm["a"] == approx([0.0, 4.0])
    assert comm["Obw"] == approx([2.0, 2.0]) and comm["Olat"] == [0.0, 0.0]
    assert r["T_in"] == approx(12.0) and r["T_eff"] == approx(12.2)
    # the estimate: Q_0 = 3 + 3 + 2 * 3 = 12, E^est = (12, 12 - (2 + 3)), a^est_1 = 1 + 3
    assert r["Test_in"] == approx(12.0) and r["Test_eff"] == approx(12.2)
    assert r["a_est"] == approx([0.0, 4.0])
    hidden = with_dp_sync(inst, bounds, placement, mode="streaming", H=10, bits=4, overlap=1)
    assert both(inst, hidden)["T_eff"] == approx(12.0)
    # WAN: boundaries 2 m A per replica, outer 2 (K - 1) G^o / H per stage
    assert r["wan_bytes"] == approx(2 * 2 * 1.25e9 + 2 * 2 * 1.25e9 / 10)


def test_diloco_has_no_extra_channels():
    # x = 1: E = (8, 5); O_j = 2 (4 bits); T_sync = max(8 + 2, 5 + 2) = 10, T_eff = 8 + 2 / 10
    inst, bounds, placement = two_stages_crossed()
    plan = with_dp_sync(inst, bounds, placement, mode="diloco", H=10, bits=4)
    r = both(inst, plan)
    assert [x for row in r["comm"]["x"] for x in row] == approx([1.0, 1.0]) and r["E"] == approx([8.0, 5.0])
    assert r["T_in"] == approx(8.0) and r["T_eff"] == approx(8.2) and r["Test_eff"] == approx(8.2)


def test_identity_diloco_H1_16_bits_is_every_step():
    # every-step: both stages' rings share each direction (cap / 2): AR = 5e9 / 6.25e8 = 8,
    # T = max(8 + 8, 5 + 8) = 16; diloco H = 1, q = 16: T_in = 8, O = 8, T_eff = 16
    inst, bounds, placement = two_stages_crossed()
    plain = both(inst, with_dp_sync(inst, bounds, placement))
    dil = both(inst, with_dp_sync(inst, bounds, placement, mode="diloco", H=1))
    assert plain["T_eff"] == approx(16.0) and dil["T_in"] == approx(8.0)
    assert dil["T_eff"] == approx(16.0) and dil["Test_eff"] == approx(plain["Test_eff"])
    assert dil["wan_bytes"] == approx(plain["wan_bytes"])


# ---------------------------------------------------------------- quality, memory feasibility
@pytest.mark.parametrize("placement,sync,want", [
    ([["a"]] * 4, {"mode": "every_step", "bits": 8}, (1.0, "default row 1")),
    ([["a"]] * 4, {"mode": "every_step"}, (1.0, None)),
    ([["a"], ["b"]] * 2, {"mode": "diloco", "H": 100}, (1.0, "default row 2")),
    ([["a"], ["b"], ["c"], ["a"]], {"mode": "streaming", "H": 30}, (0.92, "default row 3")),
    ([["a"], ["b"], ["c"], ["a"]], {"mode": "diloco", "H": 31}, (0.76, "default row 4")),
    ([["a"], ["b"], ["c"], ["d"], ["e"]], {"mode": "diloco", "H": 30}, (0.74, "default row 5")),
    ([["a"], ["b"], ["c"], ["d"], ["e"]], {"mode": "diloco", "H": 31}, None),
    ([["a"], ["b"]], {"mode": "diloco", "H": 101}, None),
    ([["a"], ["b"]], {"mode": "streaming", "H": 10, "bits": 3}, None),
    ([["a"]] * 2, {"mode": "every_step", "bits": 2}, None),
    # M = 1 is looked up too (reading): H = 101 matches no default row
    ([["a"]] * 2, {"mode": "diloco", "H": 101}, None),
])
def test_quality_default_rows(placement, sync, want):
    plan = SimpleNamespace(placement=placement, dp_sync=sync)
    inst = SimpleNamespace(quality=[])
    if want is None:
        with pytest.raises(RefNoQuality):
            ref3_quality(inst, plan)
    else:
        assert ref3_quality(inst, plan) == want


def test_quality_instance_rows_come_first():
    rows = [SimpleNamespace(modes=["streaming"], max_groups=None, max_H=None, min_bits=2, e=0.5,
                            source="mine"),
            SimpleNamespace(modes=["diloco"], max_groups=2, max_H=1000, min_bits=None, e=0.9,
                            source=None)]
    inst = SimpleNamespace(quality=rows)
    two = [["a"], ["b"]]
    assert ref3_quality(inst, SimpleNamespace(placement=two, dp_sync={"mode": "streaming", "H": 10})) \
        == (0.5, "mine")
    assert ref3_quality(inst, SimpleNamespace(placement=two, dp_sync={"mode": "diloco", "H": 500,
                                                                      "bits": 1})) == (0.9, None)
    # M = 3: the diloco row does not match, nor does a default (bits 1 < 4)
    with pytest.raises(RefNoQuality):
        ref3_quality(inst, SimpleNamespace(placement=[["a"], ["b"], ["c"]],
                                           dp_sync={"mode": "diloco", "H": 5, "bits": 1}))
    # every_step at 16 bits is e = 1 whatever the rows
    rows.insert(0, SimpleNamespace(modes=["every_step"], max_groups=None, max_H=None, min_bits=None,
                                   e=0.3, source="x"))
    assert ref3_quality(inst, SimpleNamespace(placement=two, dp_sync=None)) == (1.0, None)
    assert ref3_quality(inst, SimpleNamespace(placement=two, dp_sync={"mode": "every_step", "bits": 8})) \
        == (0.3, "x")


def test_memory_with_outer_state_decides_feasibility():
    # reserve 0.10: memory_gb = 70 gives 63e9 B, where 16 P = 40e9 and 24 P = 60e9 fit;
    # memory_gb = 60: limit 54e9: 24 P = 60e9 does not, the CPU copy (16 P) does
    for memory_gb, gpu_ok in ((70.0, True), (60.0, False)):
        base = base_instance([0.0], R=4, memory_gb=memory_gb)
        inst = with_sync_fields(base)
        for outer_state, ok in (("gpu", gpu_ok), ("cpu", True)):
            plan = with_dp_sync(inst, [(0, 1)], [["a"], ["a"], ["b"], ["b"]], mode="diloco", H=10,
                                outer_state=outer_state)
            assert (not ref3_violations(inst, plan)) == ok, (memory_gb, outer_state)
            assert evaluate(inst, plan).feasible == ok, (memory_gb, outer_state)
        # streaming on the CPU keeps 1/F of it on the GPU: 16 P + 8 P / 2 = 50e9 fits 54e9
        plan = with_dp_sync(inst, [(0, 1)], [["a"], ["a"], ["b"], ["b"]], mode="streaming", H=10,
                            fragments=2, outer_state="cpu")
        assert not ref3_violations(inst, plan) and evaluate(inst, plan).feasible
    # a mode the instance does not allow is infeasible
    inst = with_sync_fields(base_instance([0.0], R=4), modes=("every_step",))
    plan = with_dp_sync(inst, [(0, 1)], [["a"], ["b"], ["a"], ["b"]], mode="diloco", H=10)
    assert any("not allowed" in v for v in ref3_violations(inst, plan))
    assert not evaluate(inst, plan).feasible


# ---------------------------------------------------------------- the package against the reference
TYPES = [{"name": "T0", "peak_tflops": 300.0, "mfu": 0.5, "memory_gb": 80.0},
         {"name": "T1", "peak_tflops": 60.0, "mfu": 0.4, "memory_gb": 40.0, "unit_overhead_ms": 2.0}]


@st.composite
def sync_cases(draw, identity=False, modes=("every_step", "diloco", "streaming"), wide=False):
    """(instance, plan, states, tags) with SPEC 11 fields: 1-4 domains, 1-3 stages,
    1-4 replicas placed at random (whole replicas per domain, groups spanning domains,
    stages elsewhere), every mode, H, bits, F, nu, outer_state, with or without a codec
    and instance quality rows; uplinks and GPU types now and then; gpipe, 1f1b, explicit.
    ``identity``: R <= D, the replicas of every stage in distinct domains, diloco with
    H = 1 at 16 bits (SPEC 11's identity).  ``wide``: D, R, S >= 2 (outer rings beside
    boundaries, groups whose inner rings span domains)."""
    D = draw(st.integers(2 if wide else 1, 4))
    names = draw(st.permutations(["a", "b", "c", "d"]))[:D]
    typed = draw(st.integers(0, 3)) == 0
    domains = []
    for n in names:
        d = {"name": n, "gpus": 1000, "intra_bandwidth_gbps": draw(st.sampled_from([50.0, 200.0])),
             "price_per_gpu_hour": draw(st.sampled_from([0.0, 1.5]))}
        if draw(st.integers(0, 3)) == 0:
            d["uplink_gbps"] = draw(st.sampled_from([0.5, 3.0, 100.0]))
        if typed and draw(st.booleans()):
            d["gpu"] = draw(st.sampled_from(["T0", "T1"]))
        domains.append(d)
    links = draw(wan(names))
    n = draw(st.sampled_from([2, 3, 4] if wide else [1, 2, 3, 3, 4]))
    units = [{"name": f"u{i}",
              "params": draw(st.sampled_from([0.0, 1e6, 3e7, 2e8])),
              "fwd_flops_per_token": draw(st.sampled_from([0.0, 1e9, 3e10])),
              "out_bytes_per_token": draw(st.sampled_from([0.0, 1e4, 1e6])),
              "stored_bytes_per_token": draw(st.sampled_from([0.0, 1e4, 1e6]))} for i in range(n)]
    R = draw(st.integers(1, D) if identity else st.integers(2 if wide else 1, 4))
    S = draw(st.integers(2 if wide else 1, min(n, 3)))
    m = draw(st.integers(1, 4))
    b = draw(st.sampled_from([1, 2]))
    tp = draw(st.sampled_from([1, 1, 2]))
    kind = draw(st.sampled_from(["gpipe", "1f1b", "explicit"]))
    mode = draw(st.sampled_from(modes))
    H = draw(st.sampled_from([1, 2, 10, 10, 30, 100, 200]))
    sync = {"mode": mode, "bits": draw(st.sampled_from([2, 4, 4, 8, 16, 16, 32]))}
    if mode != "every_step":
        sync["H"] = H
        sync["outer_state"] = draw(st.sampled_from(["gpu", "cpu"]))
    if identity:
        sync = {"mode": "diloco", "H": 1, "bits": 16, "outer_state": sync.get("outer_state", "gpu")}
    if mode == "streaming" and not identity:
        sync["fragments"] = draw(st.integers(1, min(H, 4)))
        sync["overlap"] = draw(st.sampled_from([v for v in (0, 0, 1, 2, 3) if v <= H]))
    data = {"name": "dp", "domains": domains, "links": links,
            "gpu": {"name": "G", "peak_tflops": 100.0, "mfu": 0.5,
                    "memory_gb": draw(st.sampled_from([80.0, 80.0, 3.0, 1.0])),
                    "unit_overhead_ms": draw(st.sampled_from([0.0, 0.5]))},
            "workload": {"model": ModelSpec(name="m", units=units), "global_batch_size": R * b * m,
                         "seq_len": draw(st.sampled_from([16, 128])), "micro_batch_sizes": [b],
                         "tensor_parallel": [tp], "recompute": draw(st.booleans()),
                         "gradient_sync": draw(st.sampled_from(["ring", "ring", "reduce_broadcast"]))},
            "options": {"wan_price_per_gb": draw(st.sampled_from([0.0, 0.02])),
                        "objective": draw(st.sampled_from(["time", "cost"])),
                        "dp_sync": draw(st.sampled_from([["every_step", "diloco", "streaming"],
                                                         ["every_step", "diloco", "streaming"],
                                                         ["every_step"]]))}}
    if typed:
        data["gpus"] = TYPES
    compression = {}
    if draw(st.booleans()):
        compression["codec_gbps"] = draw(st.sampled_from([1.0, 40.0, 400.0]))
    if draw(st.booleans()):
        compression["outer_state_bytes_per_param"] = draw(st.sampled_from([0.0, 8.0, 12.0]))
    if compression:
        data["compression"] = compression
    if draw(st.booleans()):
        rows = [{"modes": ["diloco"], "max_groups": 3, "max_H": 1000, "e": 0.85, "source": "mine"},
                {"modes": ["every_step", "diloco", "streaming"], "min_bits": 2, "e": 0.8}]
        data["quality"] = draw(st.permutations(rows))[:draw(st.integers(1, 2))]
    inst = Instance.from_dict(data)
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=S - 1, max_size=S - 1,
                                unique=True))) if S > 1 else []
    bounds = list(zip([0, *cuts], [*cuts, n]))
    placement = []
    if identity:
        perms = [draw(st.permutations(names)) for _ in range(S)]
        placement = [[perms[j][r] for j in range(S)] for r in range(R)]
    for _ in range(0 if identity else R):
        style = draw(st.sampled_from([0, 1, 2, 2, 3]))
        if style == 0:  # the whole replica in one domain
            placement.append([draw(st.sampled_from(names))] * S)
        elif style == 1 and placement:  # a copy of an earlier replica (same group)
            placement.append(list(draw(st.sampled_from(placement))))
        elif style == 2 and placement:  # an earlier replica's group, elsewhere after stage 0
            first = draw(st.sampled_from(placement))[0]
            placement.append([first] + [draw(st.sampled_from(names)) for _ in range(S - 1)])
        else:
            placement.append([draw(st.sampled_from(names)) for _ in range(S)])
    schedule = draw(explicit_ops(S, m)) if kind == "explicit" else kind
    plan = Plan.build(bounds, placement, tp=tp, micro_batch_size=b, instance=inst, schedule=schedule,
                      dp_sync=DpSync(**sync))
    return inst, plan, draw_states(draw, links, draw(st.integers(1, 3))), f"{mode} {kind}"


def _assert_rows(got, want, what, case):
    inst, plan, states, _ = case
    got = np.atleast_1d(np.asarray(got, dtype=float))
    assert len(got) == len(want), (what, got, want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert close(float(a), float(b)), (
            f"{what} state {k}: package {a!r} != reference {b!r}\n"
            f"plan={plan.to_json(indent=None)}\ninstance={inst.to_dict()}\n"
            f"bw={states.bandwidth_gbps.tolist()} lat={states.latency_ms.tolist()}")


def _coverage_events(want):
    comm = want[0]["comm"]
    sync = comm["sync"]
    if any(w["T_eff"] > w["T_in"] * (1 + 1e-9) for w in want):
        event("outer sync shows in T_eff")
    if any(comm["X"]):
        event("codec time")
    if any(comm["nO"].get(q, 0) for q in comm["nF"]) or any(comm["nO"].get(q, 0) for q in comm["nB"]):
        event("streaming: outer rings on a boundary resource")
    if sync["mode"] != "every_step" and any(
            k[0] is not None and len(ds) > 1 for k, ds in comm["set_domains"].items()):
        event("a group's inner ring spans domains")
    if sync["mode"] == "streaming" and any(comm["charged"]):
        w = want[0]
        T_in, F, H = w["T_in"], sync["fragments"], sync["H"]
        if not math.isinf(w["T_eff"]) and w["T_eff"] > T_in * (1 + 1e-9):
            floor = max((F * (comm["Obw"][j] / F + comm["Olat"][j]) + comm["X"][j]) / H
                        for j, c in enumerate(comm["charged"]) if c)
            event("streaming: the floor binds" if close(w["T_eff"], floor) else "streaming: a stall")


def _states(states):
    return [(list(states.bandwidth_gbps[k]), list(states.latency_ms[k])) for k in range(states.count)]


@settings(SETTINGS, max_examples=150)
@given(st.one_of(sync_cases(), sync_cases(modes=("diloco", "streaming"), wide=True)))
def test_package_equals_reference_on_random_sync_plans(case):
    inst, plan, states, tag = case
    try:
        e_ref, source = ref3_quality(inst, plan)
    except RefNoQuality:
        event("no quality row")
        with pytest.raises(InputError):
            Evaluator(inst, plan).quality
        return
    ev = Evaluator(inst, plan)
    assert close(ev.quality[0], e_ref)
    if source is not None and source.startswith("default row"):
        # SPEC 11: "the row's source, or "default row N""; the package adds the table's
        # source column after it ("default row 1: CocktailSGD ...")
        assert ev.quality[1].startswith(source + ":") or ev.quality[1] == source, ev.quality
    est = [ref3_effective_estimate(inst, plan, *s) for s in _states(states)]
    _assert_rows(ev.estimate_times(states), [a for a, _ in est], "T^est_in", case)
    _assert_rows(ev.effective_estimate_times(states), [b for _, b in est], "T^est_eff", case)
    try:
        want = [ref3_effective(inst, plan, *s) for s in _states(states)]
    except RefDeadlock:
        event("deadlock")
        with pytest.raises(Deadlock):
            ev.iteration_times(states)
        return
    event(tag)
    _assert_rows(ev.iteration_times(states), [w["T_in"] for w in want], "T_in", case)
    T_eff = ev.effective_times(states)
    _assert_rows(T_eff, [w["T_eff"] for w in want], "T_eff", case)
    _assert_rows(ev.scores(states), [w["score"] for w in want], "score", case)
    _assert_rows(ev.cost(T_eff), [w["cost"] for w in want], "cost", case)
    # replicas grouped by identical figures (the default) or one by one: the same numbers
    flat = Evaluator(inst, plan, group_replicas=False)
    _assert_rows(flat.effective_times(states), [w["T_eff"] for w in want], "T_eff ungrouped", case)
    _coverage_events(want)
    # figures of the base state: memory with outer state, WAN bytes, cost, feasibility
    full = evaluate(inst, plan)
    base = want[0]
    assert all(close(a, b / 1e9) for a, b in zip(full.memory_gb_per_gpu, base["memory"]))
    assert close(full.wan_gb_per_iteration, base["wan_bytes"] / 1e9)
    assert close(full.effective_time_s, base["T_eff"]) and close(full.quality_factor, base["e"])
    assert close(full.iteration_time_s, base["T_in"]) and close(full.estimate_s, base["Test_in"])
    assert close(full.effective_estimate_s, base["Test_eff"])
    tokens = inst.workload.global_batch_size * inst.workload.seq_len
    if 0 < base["T_eff"] < math.inf:  # SPEC 11: raw tokens over T_eff, effective ones times e
        assert close(full.throughput_tokens_per_s, tokens / base["T_eff"])
        assert close(full.effective_tokens_per_s, tokens * base["e"] / base["T_eff"])
    assert full.sync_groups == len({row[0] for row in plan.placement})
    plain_T = ref3_effective(inst, plan.model_copy(update={"dp_sync": None}))["T_in"]
    if base["comm"]["sync"]["mode"] == "every_step" and base["comm"]["sync"]["bits"] == 16:
        assert full.per_step_time_s is None
    else:  # the same placement with a per-step 16-bit sync
        assert close(full.per_step_time_s, plain_T)
    if not math.isinf(base["T_eff"]):
        assert close(full.cost_per_iteration, base["cost"])
    bad = ref3_violations(inst, plan)
    others = [v for v in full.violations if v.rule != "deadlock"]
    event("feasible" if not bad else "infeasible")
    assert (not others) == (not bad), (full.violations, bad)



@settings(SETTINGS, max_examples=60)
@given(sync_cases(identity=True))
def test_identity_diloco_H1_at_16_bits_is_every_step_T(case):
    # SPEC 11: "With H = 1, q = 16 and the replicas of every stage in distinct domains (one
    # replica per group), T_eff is the every-step T" -- on the reference and the package
    inst, plan, states, _ = case
    plain = plan.model_copy(update={"dp_sync": None})
    ev, ev_plain = Evaluator(inst, plan), Evaluator(inst, plain)
    _assert_rows(ev.effective_estimate_times(states), ev_plain.estimate_times(states), "T^est", case)
    try:
        want = [ref3_effective(inst, plain, *s)["T_eff"] for s in _states(states)]
    except RefDeadlock:
        return
    got_ref = [ref3_effective(inst, plan, *s)["T_eff"] for s in _states(states)]
    _assert_rows(got_ref, want, "reference diloco T_eff vs every-step T", case)
    _assert_rows(ev.effective_times(states), ev_plain.iteration_times(states), "package", case)
    _assert_rows(ev.effective_times(states), want, "package vs reference", case)
    event(f"M = {len(plan.placement)}")


@settings(SETTINGS, max_examples=80)
@given(sync_cases(), st.sampled_from([0.98, 0.9999, 1.0001, 1.02]))
def test_memory_infeasible_exactly_when_reference_memory_with_outer_state_exceeds(case, factor):
    # the GPU's memory is set just under or over the reference's largest M_j (outer state
    # included), on one GPU type: the plan is infeasible for memory exactly when it is over
    inst, plan, _, _ = case
    try:
        ref3_quality(inst, plan)
    except RefNoQuality:
        return  # an input error, not infeasibility (the first test checks it)
    data = inst.to_dict()
    data["workload"]["model"] = inst.workload.model
    data.pop("gpus", None)
    for d in data["domains"]:
        d.pop("gpu", None)
    probe = Instance.from_dict(data)
    need = max(ref3_stage_figures(probe, plan)["memory_bytes"])
    if need == 0:
        return
    data["gpu"]["memory_gb"] = need * factor / (0.9 * 1e9)
    inst2 = Instance.from_dict(data)
    over = need > inst2.gpu.memory_gb * 1e9 * (1 - inst2.options.memory_reserve_fraction)
    assert over == (factor < 1)
    full = evaluate(inst2, plan)
    assert any(v.rule == "memory" for v in full.violations) == over, (full.violations, need)
    assert any("memory" in v for v in ref3_violations(inst2, plan)) == over
    sync = ref3_sync(plan)
    if over and sync["mode"] != "every_step":
        event("over with outer state")




@pytest.mark.parametrize("sync", [{"mode": "diloco", "H": 10, "bits": 4},
                                  {"mode": "streaming", "H": 10, "bits": 4, "fragments": 2,
                                   "overlap": 0}])
def test_down_link_gives_infinite_effective_time(sync):
    # instance 2 (two stages of one unit, replicas [a, b] and [b, a]); state 1 takes the
    # only link down: the reference gives T_in = T_eff = inf (and the estimates alike)
    inst = base_instance([A_ONE, 0.0], R=2, latency_ms=0.0)
    plan = Plan.build([(0, 1), (1, 2)], [["a", "b"], ["b", "a"]], tp=1, micro_batch_size=1,
                      instance=inst, schedule="gpipe", dp_sync=DpSync(**sync))
    states = NetworkStates(np.array([[10.0], [0.0]]), np.array([[0.0], [0.0]]))
    ref = ref3_effective(inst, plan, [0.0], [0.0])
    assert math.isinf(ref["T_in"]) and math.isinf(ref["T_eff"]) and math.isinf(ref["Test_eff"])
    ev = Evaluator(inst, plan)
    assert math.isinf(ev.iteration_times(states)[1])
    with np.errstate(invalid="ignore"):
        got = (ev.effective_times(states)[1], ev.effective_estimate_times(states)[1],
               ev.scores(states)[1])
    assert all(math.isinf(v) and v > 0 for v in got), got


@pytest.mark.parametrize("sync,T_eff,wan_gb", [
    # every_step: G^o = 32 P / 8 = 1e10: intra 1e10 / 25e9 = 0.4, cross 1e10 / 1.25e9 + 0.01
    ({"mode": "every_step", "bits": 32}, 3 + 0.4 + 8.01, 2 * 1e10 / 1e9),
    # diloco: T_in = 3.2, O = 8.01: T_eff = 3.2 + 8.01 / 10
    ({"mode": "diloco", "H": 10, "bits": 32}, 3.2 + 0.801, 2 * 1e10 / 10 / 1e9),
])
def test_payload_above_16_bits_is_p_q_over_8(sync, T_eff, wan_gb):
    inst, bounds, placement = one_stage_two_per_domain()
    plan = with_dp_sync(inst, bounds, placement, **sync)
    ref = ref3_effective(inst, plan)
    assert ref["T_eff"] == approx(T_eff) and ref["wan_bytes"] / 1e9 == approx(wan_gb)
    both(inst, plan)
