"""The package's vectorised evaluator agrees with an independent reference.

``reference_sim`` is written from the SPEC alone; here hypothesis builds
small random instances (2-4 domains, WAN graphs that are sometimes not
complete, so multi-hop routes and shared links occur; GPUs with and without
NVLink, explicit units with and without ``tp_bytes_per_token``), random plans
(replicas, stages, tp, micro-batch sizes, placements, gpipe / 1f1b /
random explicit schedules, some of which deadlock), long unbalanced
pipelines with a few WAN crossings in the middle (where a window that is
not a suffix sets the 1f1b period, and m <= S drops windows), and random
batches of network states (links sometimes down), and compares

* ``Evaluator.iteration_times``  with ``ref_simulate``   (rel 1e-9),
* ``Evaluator.estimate_times``   with ``ref_estimate``   (rel 1e-9),
* ``evaluate(...).memory_gb_per_gpu`` / ``compute_s`` / ``allreduce_s``
  with the reference's per-stage figures.

Then a few closed forms computed by hand, and the deadlock contract.

``reference_sim`` is SPEC v2's: the evaluator runs with ``spec=2`` here
(the v3 path has its own reference, ``tests/scoring/test_reference_agreement_v3.py``).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from functools import partial

from planner import Deadlock, Instance, NetworkStates, Plan
from planner import Evaluator as _Evaluator
from planner import evaluate as _evaluate
from planner.problem.model import ModelSpec

from reference_sim import (RefDeadlock, ref_comm, ref_estimate, ref_routes, ref_simulate,
                           ref_stage_figures)

Evaluator = partial(_Evaluator, spec=2)  # the v2 path, against the v2 reference
evaluate = partial(_evaluate, spec=2)
REL = 1e-9
GPU = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}


def close(a: float, b: float, rel: float = REL) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


# ---------------------------------------------------------------- strategies
@st.composite
def units_model(draw):
    if draw(st.booleans()):
        n = draw(st.integers(2, 6))
        units = []
        for u in range(n):
            units.append({
                "name": f"u{u}",
                "params": draw(st.floats(1e4, 1e8)),
                "fwd_flops_per_token": draw(st.floats(1e7, 1e10)),
                # occasionally nothing crosses the boundary
                "out_bytes_per_token": draw(st.sampled_from([0.0, 1e2, 1e3])) if draw(
                    st.integers(0, 5)) == 0 else draw(st.floats(1.0, 1e5)),
                "stored_bytes_per_token": draw(st.floats(0.0, 1e5)),
            })
            if draw(st.booleans()):  # absent: 0 (SPEC 5, v2)
                units[-1]["tp_bytes_per_token"] = draw(st.sampled_from([0.0, 1.0, 1e3, 1e5]))
        return ModelSpec(name="m", units=units)
    h = draw(st.sampled_from([32, 64, 128]))
    heads = draw(st.sampled_from([2, 4]))
    return ModelSpec(name="m", num_layers=draw(st.integers(1, 4)), hidden_size=h,
                     ffn_hidden_size=draw(st.sampled_from([2, 4])) * h, num_heads=heads,
                     num_kv_heads=draw(st.sampled_from([1, heads])),
                     vocab_size=draw(st.integers(50, 500)), gated_mlp=draw(st.booleans()))


def gpus():
    """The test GPU, with or without NVLink (Gbit/s one way; small ones make y_j count)."""
    return st.sampled_from([None, 0.5, 20.0, 2400.0]).map(
        lambda nv: GPU if nv is None else {**GPU, "nvlink_bandwidth_gbps": nv})


@st.composite
def wan(draw, names, tie_heavy=False):
    """Connected WAN over ``names``: a random spanning tree plus random extra links."""
    D = len(names)
    pairs = set()
    for i in range(1, D):
        pairs.add((draw(st.integers(0, i - 1)), i))
    sparse = draw(st.booleans())
    for i in range(D):
        for k in range(i + 1, D):
            if (i, k) not in pairs and draw(st.integers(0, 5 if sparse else 1)) == 0:
                pairs.add((i, k))
    uniform = tie_heavy and draw(st.booleans())  # every link 1 ms: fewest hops wins
    links = []
    for i, k in draw(st.permutations(sorted(pairs))):  # link order is arbitrary
        a, b = (names[i], names[k]) if draw(st.booleans()) else (names[k], names[i])
        links.append({"a": a, "b": b,
                      "bandwidth_gbps": draw(st.sampled_from([1.0, 2.5, 10.0, 40.0, 100.0])),
                      # integers / halves: exact sums, so routing ties are real ties
                      "latency_ms": (1.0 if uniform
                                     else draw(st.sampled_from([0.0, 1.0, 1.0, 2.0])) if tie_heavy
                                     else draw(st.integers(0, 40)) / 2)})
    return links


@st.composite
def explicit_ops(draw, S, m):
    """Random valid op lists (each F(i), B(i) once, F(i) before B(i)).

    Mode "ordered" keeps F and B in micro-batch order (rarely deadlocks);
    mode "free" also permutes them (deadlocks often)."""
    free = draw(st.booleans())
    lists = []
    for _ in range(S):
        f_left = list(range(m))
        b_ready: list[int] = []
        b_left = set(range(m))
        ops = []
        while f_left or b_left:
            choices = []
            if f_left:
                choices += [("F", i) for i in (f_left if free else f_left[:1])]
            if b_ready:
                choices += [("B", i) for i in (b_ready if free else [min(b_ready)])]
            kind, i = draw(st.sampled_from(choices))
            if kind == "F":
                f_left.remove(i)
                b_ready.append(i)
            else:
                b_ready.remove(i)
                b_left.discard(i)
            ops.append(f"{kind}{i}")
        lists.append(ops)
    return lists


@st.composite
def cases(draw, max_domains=4, tie_heavy=False):
    """(instance, plan, K >= 2 network states).  ``tie_heavy``: latencies in
    {0, 1, 2} ms so that many routes tie on latency and hops."""
    D = draw(st.integers(2, max_domains))
    # instance order differs from name order, so "instance domain order"
    # (rings) and "lexicographically smallest names" (routes) are both tested
    names = draw(st.permutations(["a", "b", "c", "d", "e", "f", "g"]))[:D]
    domains = [{"name": n, "gpus": 1000, "gpus_per_node": 8,
                "intra_bandwidth_gbps": draw(st.sampled_from([50.0, 200.0, 800.0])),
                "price_per_gpu_hour": 1.0} for n in names]
    links = draw(wan(names, tie_heavy))
    model = draw(units_model())
    R = draw(st.sampled_from([1, 2, 2, 3, 4]))
    b = draw(st.sampled_from([1, 2, 4]))
    m = draw(st.sampled_from([1, 2, 3, 4, 5, 6, 8]))
    tp = draw(st.sampled_from([1, 2, 4]))
    wl = {"model": model, "global_batch_size": R * b * m,
          "seq_len": draw(st.sampled_from([16, 64, 128])), "micro_batch_sizes": [b],
          "tensor_parallel": [tp], "recompute": draw(st.booleans())}
    inst = Instance.from_dict({"name": "r", "gpu": draw(gpus()), "domains": domains, "links": links,
                               "workload": wl, "options": {"memory_reserve_fraction": 0.1}})
    n = inst.num_units
    S = min(n, draw(st.sampled_from([1, 2, 2, 3, 3, 4, 4])))
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=S - 1, max_size=S - 1,
                                unique=True))) if S > 1 else []
    bounds = list(zip([0, *cuts], [*cuts, n]))
    placement = []
    for _ in range(R):
        row = []
        for j in range(S):
            if j and draw(st.integers(0, 3)) == 0:
                row.append(row[-1])  # same-domain boundary now and then
            else:
                row.append(draw(st.sampled_from(names)))
        placement.append(row)
    kind = draw(st.sampled_from(["gpipe", "1f1b", "explicit"]))
    schedule = draw(explicit_ops(S, m)) if kind == "explicit" else kind
    plan = Plan.build(bounds, placement, tp=tp, micro_batch_size=b, instance=inst,
                      schedule=schedule)
    # K >= 2 network states
    K = draw(st.integers(2, 3))
    L = len(links)
    bw = np.zeros((K, L))
    lat = np.zeros((K, L))
    for k in range(K):
        for i, lk in enumerate(links):
            if k == 0 and draw(st.booleans()):
                bw[k, i], lat[k, i] = lk["bandwidth_gbps"], lk["latency_ms"]  # base figures
                continue
            down = draw(st.integers(0, 11)) == 0
            bw[k, i] = 0.0 if down else draw(st.floats(0.1, 200.0))
            lat[k, i] = draw(st.floats(0.0, 80.0))
    return inst, plan, NetworkStates(bandwidth_gbps=bw, latency_ms=lat)


def _ref_times(fn, inst, plan, states):
    return [fn(inst, plan, list(states.bandwidth_gbps[k]), list(states.latency_ms[k]))
            for k in range(states.count)]


def _assert_all_close(got, want, what, inst, plan, states):
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert close(float(a), b), (
            f"{what} state {k}: package {a!r} != reference {b!r}\n"
            f"plan={plan.to_json(indent=None)}\n"
            f"links={[l.model_dump() for l in inst.links]}\n"
            f"bw={states.bandwidth_gbps.tolist()} lat={states.latency_ms.tolist()}")


SETTINGS = settings(max_examples=250, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SETTINGS_SMALL = settings(SETTINGS, max_examples=120)


@st.composite
def long_pipeline_cases(draw):
    """(instance, plan, K >= 2 states): 5-10 stages of unbalanced explicit units, one
    replica or two, runs of stages in one domain joined by 1-3 WAN crossings anywhere
    in the pipeline (often the middle), 1f1b or an ordered explicit schedule, m from
    1 to 12 (so m <= S drops windows), sometimes tensor parallel over NVLink."""
    S = draw(st.integers(5, 10))
    units = [{"name": f"u{i}", "params": 1e6,
              "fwd_flops_per_token": F_ONE * draw(st.sampled_from([0.25, 0.5, 1.0, 1.0, 2.0, 4.0])),
              "out_bytes_per_token": draw(st.sampled_from([0.0, 1e5, 1e6, 1e7])),
              "stored_bytes_per_token": 0.0,
              "tp_bytes_per_token": draw(st.sampled_from([0.0, 1e6, 1e8]))} for i in range(S)]
    names = ["a", "b", "c", "d"]
    links = [{"a": u, "b": v, "bandwidth_gbps": draw(st.sampled_from([1.0, 10.0, 100.0])),
              "latency_ms": draw(st.sampled_from([0.0, 50.0, 500.0, 2000.0]))}
             for u, v in zip(names, names[1:])]
    R = draw(st.sampled_from([1, 1, 2]))
    m = draw(st.integers(1, 12))
    tp = draw(st.sampled_from([1, 2, 4]))
    inst = Instance.from_dict({
        "name": "long", "gpu": draw(gpus()),
        "domains": [{"name": n, "gpus": 1000, "intra_bandwidth_gbps": 800.0} for n in names],
        "links": links,
        "workload": {"model": ModelSpec(name="m", units=units), "global_batch_size": R * m,
                     "seq_len": 128, "micro_batch_sizes": [1], "tensor_parallel": [tp]}})
    placement = []
    for _ in range(R):
        cuts = set(draw(st.lists(st.integers(1, S - 1), min_size=1, max_size=3)))
        row, d = [], draw(st.integers(0, 3))
        for j in range(S):
            if j in cuts:
                d = (d + draw(st.sampled_from([1, 2, 3]))) % 4
            row.append(names[d])
        placement.append(row)
    schedule = draw(explicit_ops(S, m)) if draw(st.integers(0, 3)) == 0 else "1f1b"
    plan = Plan.build([(i, i + 1) for i in range(S)], placement, tp=tp, micro_batch_size=1,
                      instance=inst, schedule=schedule)
    K = 2
    bw = np.array([[lk["bandwidth_gbps"] for lk in links]] * K)
    lat = np.array([[lk["latency_ms"] for lk in links]] * K)
    for i in range(len(links)):  # the second state moves every link
        bw[1, i] = draw(st.floats(0.5, 200.0))
        lat[1, i] = draw(st.floats(0.0, 3000.0))
    return inst, plan, NetworkStates(bandwidth_gbps=bw, latency_ms=lat)


# ---------------------------------------------------------------- properties
def check_iteration_times(case):
    inst, plan, states = case
    ev = Evaluator(inst, plan)
    try:
        want = _ref_times(ref_simulate, inst, plan, states)
    except RefDeadlock:
        with pytest.raises(Deadlock):
            ev.iteration_times(states)
        return
    got = ev.iteration_times(states)
    assert got.shape == (states.count,)
    _assert_all_close(got, want, "iteration time", inst, plan, states)


def check_estimate_times(case):
    inst, plan, states = case
    got = Evaluator(inst, plan).estimate_times(states)
    want = _ref_times(ref_estimate, inst, plan, states)
    assert got.shape == (states.count,)
    _assert_all_close(got, want, "estimate", inst, plan, states)


@SETTINGS
@given(cases())
def test_iteration_times_agree_with_reference(case):
    check_iteration_times(case)


@SETTINGS
@given(cases())
def test_estimate_times_agree_with_reference(case):
    check_estimate_times(case)


@SETTINGS_SMALL
@given(cases())
def test_stage_figures_agree_with_reference(case):
    inst, plan, _ = case
    ev = evaluate(inst, plan)
    fig = ref_stage_figures(inst, plan)
    assert len(ev.memory_gb_per_gpu) == plan.num_stages
    for j in range(plan.num_stages):
        assert close(ev.memory_gb_per_gpu[j], fig["memory_bytes"][j] / 1e9), ("memory", j)
        assert close(ev.compute_s[j], fig["c"][j]), ("compute", j)
    base_bw = [l.bandwidth_gbps for l in inst.links]
    base_lat = [l.latency_ms for l in inst.links]
    AR = ref_comm(inst, plan, base_bw, base_lat)["AR"]
    for j in range(plan.num_stages):
        assert close(ev.allreduce_s[j], AR[j]), ("allreduce", j, ev.allreduce_s[j], AR[j])


@SETTINGS_SMALL
@given(cases(max_domains=6, tie_heavy=True))
def test_iteration_times_agree_with_reference_many_route_ties(case):
    # up to 6 domains, latencies in {0, 1, 2} ms: routes tie on latency and
    # hops, so the name tie-break and route(u, v) != reverse(route(v, u))
    # (possible from 6 domains on) reach the link sharing.
    check_iteration_times(case)


@SETTINGS_SMALL
@given(cases(max_domains=6, tie_heavy=True))
def test_estimate_times_agree_with_reference_many_route_ties(case):
    check_estimate_times(case)


def _binding_window(inst, plan):
    """The (j, k) window that sets the 1f1b period of replica 0 on the base network
    (``None`` if c_j or x_k binds); for hypothesis.event, to see the coverage."""
    from planner.scoring.estimate import window_period

    ev = Evaluator(inst, plan)
    fig, comm = ev.fig, ev.fig.comm(NetworkStates.base(inst))
    v, j, k = window_period(fig.c, comm.x[0, 0], comm.l[0, 0], fig.inflight, fig.m)
    floor = max(float(fig.c.max()), float(comm.x[0, 0].max(initial=0.0)))
    return (j, k) if v > floor * (1 + 1e-9) else None


@SETTINGS_SMALL
@given(long_pipeline_cases())
def test_long_pipelines_agree_with_reference(case):
    inst, plan, _ = case
    win = _binding_window(inst, plan)
    event("no window binds" if win is None else
          "a suffix window binds" if win[1] == plan.num_stages - 1 else "an inner window binds")
    check_estimate_times(case)
    check_iteration_times(case)


@st.composite
def wan_instances(draw):
    """Just an instance with 2-7 domains and tie-heavy latencies (routing only)."""
    D = draw(st.sampled_from([2, 3, 4, 5, 6, 6, 7, 7, 7]))
    names = draw(st.permutations(["a", "b", "c", "d", "e", "f", "g"]))[:D]
    links = draw(wan(names, tie_heavy=True))
    return Instance.from_dict({
        "name": "w", "gpu": GPU,
        "domains": [{"name": n, "gpus": 8, "intra_bandwidth_gbps": 200.0} for n in names],
        "links": links,
        "workload": {"model": ModelSpec(name="m", units=[{
            "name": "u", "params": 1.0, "fwd_flops_per_token": 1.0, "out_bytes_per_token": 1.0,
            "stored_bytes_per_token": 1.0}]), "global_batch_size": 1, "seq_len": 1,
            "micro_batch_sizes": [1]}})


@settings(SETTINGS, max_examples=400)
@given(wan_instances())
def test_routes_agree_with_reference(inst):
    mine = ref_routes(inst)
    theirs = inst.routes
    assert set(mine) == set(theirs)
    for key, (nodes, links) in mine.items():
        assert tuple(theirs[key].nodes) == nodes, key
        assert tuple(theirs[key].links) == links, key


# ---------------------------------------------------------------- hand-checked closed forms
# Units chosen so that f = 1 s and g = 2 s exactly: peak 100 TFLOP/s * mfu 0.5
# = 5e13 FLOP/s; b = 1, s = 128, t = 1, so F = 5e13 / 128 = 390625000000 FLOPs per
# token gives f = F * 1 * 128 / 5e13 = 1 (every number an exact float).
# out_bytes_per_token = 0, so every transfer time x = 0 exactly.
F_ONE = 5e13 / 128


def _line_instance(S, m, latency_ms, same_domain=False):
    units = [{"name": f"u{i}", "params": 1e6, "fwd_flops_per_token": F_ONE,
              "out_bytes_per_token": 0.0, "stored_bytes_per_token": 0.0} for i in range(S)]
    names = [f"d{i}" for i in range(S)]
    domains = [{"name": n, "gpus": 8, "gpus_per_node": 8, "intra_bandwidth_gbps": 200.0}
               for n in names]
    links = [{"a": names[i], "b": names[i + 1], "bandwidth_gbps": 10.0, "latency_ms": latency_ms}
             for i in range(S - 1)]
    inst = Instance.from_dict({
        "name": "line", "gpu": GPU, "domains": domains, "links": links,
        "workload": {"model": ModelSpec(name="m", units=units), "global_batch_size": m,
                     "seq_len": 128, "micro_batch_sizes": [1], "tensor_parallel": [1]}})
    bounds = [(i, i + 1) for i in range(S)]
    placement = [[names[0]] * S] if same_domain else [names]
    return inst, bounds, placement


def _both(inst, plan):
    """(package T, reference T, package T_est, reference T_est) on the base network."""
    bw = [l.bandwidth_gbps for l in inst.links]
    lat = [l.latency_ms for l in inst.links]
    ev = Evaluator(inst, plan)
    return (float(ev.iteration_times()[0]), ref_simulate(inst, plan, bw, lat),
            float(ev.estimate_times()[0]), ref_estimate(inst, plan, bw, lat))


@pytest.mark.parametrize("S,m", [(1, 1), (1, 5), (2, 1), (2, 4), (3, 3), (4, 8), (4, 2)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_equal_stages_no_communication(S, m, schedule):
    # All stages in one domain, 0 bytes per boundary: x = 0, l = 0.
    # Both schedules then run in T = (m + S - 1) * c with c = f + g = 3.
    # (1f1b with m < S, e.g. S = 4, m = 2: stage 3 runs F0 [3,4] B0 [4,6]
    # F1 [6,7] B1 [7,9]; B1 then drains through stages 2, 1, 0 at 2 s each:
    # 9 + 6 = 15 = (2 + 4 - 1) * 3.)
    inst, bounds, placement = _line_instance(S, m, 1000.0, same_domain=True)
    plan = Plan.build(bounds, placement, tp=1, micro_batch_size=1, instance=inst,
                      schedule=schedule)
    T, T_ref, T_est, T_est_ref = _both(inst, plan)
    want = (m + S - 1) * 3.0
    assert T == pytest.approx(want, rel=REL)
    assert T_ref == pytest.approx(want, rel=REL)
    # SPEC 7 says T_est equals it too, for both schedules and every m.  For
    # 1f1b with m < S this needs v2's dropped windows: stages with
    # w_j = min(m, S - j) = m hold every micro-batch, so their windows do not
    # count (v1 took Q_0 / w_0 = S c / m, giving 18 > 15 for S = 4, m = 2);
    # the windows left hold w_j - w_k + 1 = k - j + 1 stages of c each: period c.
    assert T_est == pytest.approx(want, rel=REL)
    assert T_est_ref == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("S,m,lat_s", [(2, 1, 1.0), (2, 3, 0.5), (3, 4, 1.0), (4, 8, 1.0),
                                       (4, 8, 2.0), (4, 2, 3.0)])
def test_gpipe_latency_closed_form(S, m, lat_s):
    # gpipe, stage j in domain d_j on a line, per-hop latency l, x = 0.
    # F(i) on stage j starts at i*f + j*(f + l), so the last forward ends at
    # (m + S - 1) f + (S - 1) l; the backward phase mirrors it:
    # T = (m + S - 1) c + 2 (S - 1) l.
    inst, bounds, placement = _line_instance(S, m, lat_s * 1000.0)
    plan = Plan.build(bounds, placement, tp=1, micro_batch_size=1, instance=inst,
                      schedule="gpipe")
    want = (m + S - 1) * 3.0 + 2 * (S - 1) * lat_s
    T, T_ref, _, _ = _both(inst, plan)
    assert T == pytest.approx(want, rel=REL)
    assert T_ref == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("lat_s,gpipe,one_f_one_b", [(1.0, 39.0, 49.0), (2.0, 45.0, 65.0)])
def test_four_stage_latency_examples(lat_s, gpipe, one_f_one_b):
    # S = 4, m = 8, f = 1, g = 2, per-hop latency l, x = 0.
    # gpipe: (8 + 3) * 3 + 2 * 3 * l = 33 + 6 l  -> 39 (l = 1), 45 (l = 2).
    # 1f1b, worked by hand with SPEC 6's rules (op[start, end]); warm-up
    # w_j = 3, 2, 1, 0; an F leaving stage j arrives at j+1 after l, a B
    # leaving stage j arrives at j-1 after l.  l = 1:
    #  st0 F0[0,1] F1[1,2] F2[2,3] F3[3,4] B0[16,18] F4[18,19] B1[19,21] F5[21,22]
    #      B2[24,26] F6[26,27] B3[29,31] F7[31,32] B4[34,36] B5[37,39] B6[42,44] B7[47,49]
    #  st1 F0[2,3] F1[3,4] F2[4,5] B0[13,15] F3[15,16] B1[16,18] F4[20,21] B2[21,23]
    #      F5[23,24] B3[26,28] F6[28,29] B4[31,33] F7[33,34] B5[34,36] B6[39,41] B7[44,46]
    #  st2 F0[4,5] F1[5,6] B0[10,12] F2[12,13] B1[13,15] F3[17,18] B2[18,20] F4[22,23]
    #      B3[23,25] F5[25,26] B4[28,30] F6[30,31] B5[31,33] F7[35,36] B6[36,38] B7[41,43]
    #  st3 F0[6,7] B0[7,9] F1[9,10] B1[10,12] F2[14,15] B2[15,17] F3[19,20] B3[20,22]
    #      F4[24,25] B4[25,27] F5[27,28] B5[28,30] F6[32,33] B6[33,35] F7[37,38] B7[38,40]
    #  (e.g. B0: st3 [7,9] -> st2 ready 10 -> st1 ready 13 -> st0 ready 16;
    #   F2 on st2 waits for B0 [10,12] because 1f1b puts B0 before it.)
    #  T = 49.  l = 2, stage 0 (the last to finish):
    #  st0 F0[0,1] F1[1,2] F2[2,3] F3[3,4] B0[22,24] F4[24,25] B1[25,27] F5[27,28]
    #      B2[32,34] F6[34,35] B3[39,41] F7[41,42] B4[46,48] B5[49,51] B6[56,58] B7[63,65]
    #  T = 65.  (SPEC 7's Little's-law term: Q_0 = 12 + 6 l, w_0 = 4.)
    inst, bounds, placement = _line_instance(4, 8, lat_s * 1000.0)
    for schedule, want in (("gpipe", gpipe), ("1f1b", one_f_one_b)):
        plan = Plan.build(bounds, placement, tp=1, micro_batch_size=1, instance=inst,
                          schedule=schedule)
        T, T_ref, _, _ = _both(inst, plan)
        assert T_ref == pytest.approx(want, rel=REL), (schedule, T_ref)
        assert T == pytest.approx(want, rel=REL), (schedule, T)


def _two_domain_line(S, m, first_b, latency_ms):
    """S one-unit stages (f = 1 s, g = 2 s, x = 0), stages < first_b in domain a, the
    rest in b, one link a-b of ``latency_ms``; 1f1b."""
    units = [{"name": f"u{i}", "params": 1e6, "fwd_flops_per_token": F_ONE,
              "out_bytes_per_token": 0.0, "stored_bytes_per_token": 0.0} for i in range(S)]
    inst = Instance.from_dict({
        "name": "mid", "gpu": GPU,
        "domains": [{"name": n, "gpus": 8, "intra_bandwidth_gbps": 200.0} for n in "ab"],
        "links": [{"a": "a", "b": "b", "bandwidth_gbps": 10.0, "latency_ms": latency_ms}],
        "workload": {"model": ModelSpec(name="m", units=units), "global_batch_size": m,
                     "seq_len": 128, "micro_batch_sizes": [1], "tensor_parallel": [1]}})
    placement = [["a" if j < first_b else "b" for j in range(S)]]
    return inst, Plan.build([(i, i + 1) for i in range(S)], placement, tp=1, micro_batch_size=1,
                            instance=inst, schedule="1f1b")


@pytest.mark.parametrize("S,first_b", [(4, 2), (6, 3)])
def test_inner_window_sets_the_period_closed_form(S, first_b):
    # f = 1, g = 2 (c = 3), x = 0, latency l = 1 s on the one WAN crossing, between
    # stages first_b - 1 and first_b; 1f1b, w_j = S - j (m >= S).  A window [j, k]
    # holds k - j + 1 micro-batches; with the crossing inside it its round trip is
    # 3 (k - j + 1) + 2 l, so its period is 3 + 2 / (k - j + 1): largest for the
    # two stages around the crossing, 3 + 2 / 2 = 4 s.  The suffixes (v1) give at
    # most 3 + 2 / (S - first_b + 1): 3.67 (S = 4) and 3.5 (S = 6).
    # T_est = (m - 1) * 4 + Q_0 with Q_0 = 3 S + 2 l.
    for m in (8, 16):
        inst, plan = _two_domain_line(S, m, first_b, 1000.0)
        T, T_ref, T_est, T_est_ref = _both(inst, plan)
        want = (m - 1) * 4.0 + 3 * S + 2.0
        assert T_est == pytest.approx(want, rel=REL)
        assert T_est_ref == pytest.approx(want, rel=REL)
        assert T == pytest.approx(T_ref, rel=REL)
        assert T <= T_est
    from planner.scoring.estimate import window_period
    ev = Evaluator(inst, plan)
    comm = ev.fig.comm(NetworkStates.base(inst))
    assert window_period(ev.fig.c, comm.x[0, 0], comm.l[0, 0], ev.fig.inflight, m) == (4.0, first_b - 1, first_b)
    # the simulation runs at that period: 8 more micro-batches cost 8 * 4 s
    T8 = float(Evaluator(*_two_domain_line(S, 8, first_b, 1000.0)).iteration_times()[0])
    T16 = float(Evaluator(*_two_domain_line(S, 16, first_b, 1000.0)).iteration_times()[0])
    assert T16 - T8 == pytest.approx(8 * 4.0, rel=REL)


def test_windows_of_stages_holding_every_micro_batch_are_dropped():
    # S = 4, m = 3, the crossing (l = 1 s) between stages 1 and 2: w = (3, 3, 2, 1).
    # Stages 0 and 1 hold all 3 micro-batches, so their windows are dropped (v1's
    # suffix from stage 0 gave (12 + 2) / 3 = 4.67 s).  Left: [2, 2], [2, 3], [3, 3],
    # all 3 s without the crossing: tau = 3, T_est = 2 * 3 + 12 + 2 = 20 s.
    inst, plan = _two_domain_line(4, 3, 2, 1000.0)
    T, T_ref, T_est, T_est_ref = _both(inst, plan)
    assert T_est == pytest.approx(20.0, rel=REL) and T_est_ref == pytest.approx(20.0, rel=REL)
    assert T == pytest.approx(T_ref, rel=REL) and T <= T_est


def test_asymmetric_route_ties_hand_checked():
    # A 6-cycle a-b-e-f-d-c-a, every link 10 Gbit/s (1.25e9 B/s), 1 ms.
    # a -> f: a-b-e-f and a-c-d-f tie (3 ms, 3 hops); names: [a,b,e,f] < [a,c,d,f].
    # f -> a: f-e-b-a and f-d-c-a tie; names: [f,d,c,a] < [f,e,b,a].
    # So route(a, f) and route(f, a) share no link.
    names = ["a", "b", "c", "d", "e", "f"]
    cycle = [("a", "b"), ("b", "e"), ("e", "f"), ("f", "d"), ("d", "c"), ("c", "a")]
    # Two units, f = 1 s, g = 2 s; unit 0 sends 9765625 B/token * 128 tokens
    # = 1.25e9 B per micro-batch: x = 1 s over an unshared 10 Gbit/s link.
    units = [{"name": f"u{i}", "params": 1e6, "fwd_flops_per_token": F_ONE,
              "out_bytes_per_token": 1.25e9 / 128, "stored_bytes_per_token": 0.0}
             for i in range(2)]
    inst = Instance.from_dict({
        "name": "ring6", "gpu": GPU,
        "domains": [{"name": n, "gpus": 8, "intra_bandwidth_gbps": 200.0} for n in names],
        "links": [{"a": a, "b": b, "bandwidth_gbps": 10.0, "latency_ms": 1.0} for a, b in cycle],
        "workload": {"model": ModelSpec(name="m", units=units), "global_batch_size": 2,
                     "seq_len": 128, "micro_batch_sizes": [1], "tensor_parallel": [1]}})
    assert inst.routes[("a", "f")].nodes == ("a", "b", "e", "f")
    assert inst.routes[("f", "a")].nodes == ("f", "d", "c", "a")
    assert ref_routes(inst)[("a", "f")][0] == ("a", "b", "e", "f")
    assert ref_routes(inst)[("f", "a")][0] == ("f", "d", "c", "a")
    # Replica 0: a -> f, replica 1: f -> a; m = 1, gpipe.  The two flows use
    # disjoint links: x = 1 s, l = 3 ms each.
    #   st0 F [0, 1]; send [1, 2], arrives 2.003; st1 F [2.003, 3.003],
    #   B [3.003, 5.003]; send [5.003, 6.003], arrives 6.006; st0 B [6.006, 8.006].
    # Gradient rings (R = 2): stage 0 and stage 1 each sit in {a, f}; ring in
    # instance order a -> f -> a: hops route(a, f) and route(f, a), disjoint;
    # each link carries one hop of each of the 2 stages: 6.25e8 B/s.
    # G = 2 * 1e6 B: cross = 2(2-1)/2 * 2e6 / 6.25e8 + 2(2-1) * 0.003
    #                      = 0.0032 + 0.006 = 0.0092 s.
    # T = max(8.006 + 0.0092, 5.003 + 0.0092) = 8.0152 s.
    plan = Plan.build([(0, 1), (1, 2)], [["a", "f"], ["f", "a"]], tp=1, micro_batch_size=1,
                      instance=inst, schedule="gpipe")
    bw = [l.bandwidth_gbps for l in inst.links]
    lat = [l.latency_ms for l in inst.links]
    assert ref_simulate(inst, plan, bw, lat) == pytest.approx(8.0152, rel=REL)
    assert evaluate(inst, plan).allreduce_s == pytest.approx([0.0092, 0.0092], rel=REL)
    assert float(Evaluator(inst, plan).iteration_times()[0]) == pytest.approx(8.0152, rel=REL)


# ---------------------------------------------------------------- deadlock contract
def test_deadlocking_explicit_schedule_is_reported_promptly():
    # Stage 0 waits for B0's gradient before sending F1, stage 1 wants F1
    # before it runs B0: a cycle of waits.
    inst, bounds, placement = _line_instance(2, 2, 10.0)
    ops = [["F0", "B0", "F1", "B1"], ["F0", "F1", "B0", "B1"]]
    plan = Plan.build(bounds, placement, tp=1, micro_batch_size=1, instance=inst, schedule=ops)
    bw = [l.bandwidth_gbps for l in inst.links]
    lat = [l.latency_ms for l in inst.links]
    with pytest.raises(RefDeadlock):
        ref_simulate(inst, plan, bw, lat)
    t0 = time.perf_counter()
    with pytest.raises(Deadlock):
        Evaluator(inst, plan).iteration_times(NetworkStates.base(inst, repeat=2))
    ev = evaluate(inst, plan)
    assert time.perf_counter() - t0 < 5.0
    assert ev.feasible is False
    assert any(v.rule == "deadlock" for v in ev.violations)


def test_deadlocked_plan_cost_is_not_nan():
    # Found while writing the test above: with price_per_gpu_hour = 0 (the
    # default) the deadlocked plan's T = inf gives cost = inf / 3600 * 0 = NaN,
    # which `planner evaluate --json` would print as the non-JSON token NaN.
    # An iteration that never finishes should cost inf (or at least a number).
    inst, bounds, placement = _line_instance(2, 2, 10.0)
    ops = [["F0", "B0", "F1", "B1"], ["F0", "F1", "B0", "B1"]]
    plan = Plan.build(bounds, placement, tp=1, micro_batch_size=1, instance=inst, schedule=ops)
    ev = evaluate(inst, plan)
    assert math.isinf(ev.iteration_time_s)
    assert not math.isnan(ev.cost_per_iteration)
