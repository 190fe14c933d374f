"""Grouped replicas (issue 15): the evaluator simulates one replica per group of
replicas with identical boundary figures.  On random plans with many replicas over
random WANs (multi-hop routes, latencies whose float sums depend on the order,
equal and unequal intra-domain bandwidths) and random batches of network states
(links sometimes down), the grouped path must give the ungrouped one's numbers
bit for bit: the per-replica transfer times and latencies, the gradient
synchronisation, the exact iteration times, T_est, the WAN bytes and the GPU price."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import Evaluator, Instance, NetworkStates, Plan
from planner.problem.model import ModelSpec

GPU = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}


@st.composite
def cases(draw, v3: bool = False):
    """(instance, plan, states); ``v3`` adds SPEC v3 fields (uplinks, gradient_sync,
    unit overhead) and gradient-accumulation schedules, drawn after the v2 ones."""
    D = draw(st.integers(2, 7))
    names = [f"d{i}" for i in range(D)]
    pairs = {(draw(st.integers(0, i - 1)), i) for i in range(1, D)}  # spanning tree
    for i in range(D):
        for k in range(i + 1, D):
            if draw(st.integers(0, 3)) == 0:
                pairs.add((i, k))
    links = [{"a": names[i], "b": names[k],
              "bandwidth_gbps": draw(st.sampled_from([1.0, 2.5, 10.0, 100.0])),
              "latency_ms": draw(st.sampled_from([0.0, 0.1, 0.2, 0.3, 1.7, 2.9, 12.34]))}
             for i, k in sorted(pairs)]
    intra = st.sampled_from([100.0, 200.0, 200.0, 400.0])
    domains = [{"name": n, "gpus": 10_000, "intra_bandwidth_gbps": draw(intra),
                "price_per_gpu_hour": draw(st.sampled_from([0.0, 1.1, 2.3]))} for n in names]
    S = draw(st.integers(1, 5))
    units = [{"name": f"u{u}", "params": draw(st.floats(1e4, 1e8)),
              "fwd_flops_per_token": draw(st.floats(1e7, 1e10)),
              "out_bytes_per_token": draw(st.floats(1.0, 1e5)),
              "stored_bytes_per_token": 0.0} for u in range(S + draw(st.integers(0, 2)))]
    pool = [draw(st.lists(st.sampled_from(names), min_size=S, max_size=S)) for _ in range(draw(st.integers(1, 4)))]
    R = draw(st.integers(1, 24))
    placement = [draw(st.sampled_from(pool)) if draw(st.integers(0, 3)) else
                 draw(st.lists(st.sampled_from(names), min_size=S, max_size=S)) for _ in range(R)]
    m = draw(st.integers(1, 4))
    gpu, wl_extra = GPU, {}
    if v3:
        for d in domains:
            if draw(st.integers(0, 2)) == 0:
                d["uplink_gbps"] = draw(st.sampled_from([0.7, 5.0, 50.0]))
        gpu = {**GPU, "unit_overhead_ms": draw(st.sampled_from([0.0, 0.3]))}
        wl_extra = {"gradient_sync": draw(st.sampled_from(["ring", "reduce_broadcast"]))}
    inst = Instance.from_dict({
        "name": "g", "gpu": gpu, "domains": domains, "links": links,
        "workload": {"model": ModelSpec(name="m", units=units), "global_batch_size": R * m, "seq_len": 8,
                     "micro_batch_sizes": [1], "tensor_parallel": [1], **wl_extra},
        "options": {"wan_price_per_gb": 0.01}})
    n = len(units)
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), min_size=S - 1, max_size=S - 1))) if S > 1 else []
    bounds = list(zip([0, *cuts], [*cuts, n]))
    schedule = draw(st.sampled_from(["1f1b", "gpipe"]))
    if v3 and m > 1 and draw(st.booleans()):  # two GPipe rounds: gradient accumulation
        h = m // 2
        rounds = [range(h), range(h, m)]
        schedule = [[f"{k}{i}" for r in rounds for k in "FB" for i in r]] * S
    plan = Plan.build(bounds, placement, tp=1, micro_batch_size=1, instance=inst, schedule=schedule)
    K = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    base = NetworkStates.base(inst, K)
    bw = base.bandwidth_gbps * rng.lognormal(0, 0.3, base.bandwidth_gbps.shape)
    if draw(st.booleans()):
        bw[rng.random(bw.shape) < 0.15] = 0.0  # links down
    lat = base.latency_ms * rng.uniform(1.0, 1.5, base.latency_ms.shape)
    return inst, plan, NetworkStates(bw, lat)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_grouped_is_the_ungrouped_computation_bit_for_bit(case):
    check_grouped(*case)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(v3=True))
def test_grouped_is_the_ungrouped_computation_bit_for_bit_v3(case):
    # SPEC v3: direct routes, directed links and uplinks, n_F + n_B or max(n_F, n_B)
    check_grouped(*case, spec=3)


def check_grouped(inst, plan, states, spec=None):
    grouped = Evaluator(inst, plan, spec=spec)
    flat = Evaluator(inst, plan, group_replicas=False, spec=spec)
    fig = grouped.fig
    assert fig.groups <= plan.replicas
    full, per_group = fig.comm(states), fig.comm_groups(states)
    np.testing.assert_array_equal(per_group.x[:, fig.group_of], full.x)
    np.testing.assert_array_equal(per_group.l[:, fig.group_of], full.l)
    np.testing.assert_array_equal(per_group.ar, full.ar)
    np.testing.assert_array_equal(grouped.iteration_times(states), flat.iteration_times(states))
    np.testing.assert_array_equal(grouped.estimate_times(states), flat.estimate_times(states))
    # cost figures: the per-replica loops they replaced, in the same order
    total = 0.0
    for row in plan.placement:
        for k in range(plan.num_stages - 1):
            if row[k] != row[k + 1]:
                total += 2 * fig.A[k] * fig.m
    for j in range(plan.num_stages):
        kr = fig.ring_k[j]
        if kr > 1:
            total += kr * 2 * (kr - 1) / kr * fig.G[j]
    assert fig.wan_bytes() == total
    assert fig.gpu_hour_price() == sum(plan.tp * inst.domain(d).price_per_gpu_hour
                                       for row in plan.placement for d in row)
    # identical rows are one group; a group's replicas have identical rows of figures
    for r, g in enumerate(fig.group_of):
        rep = fig.group_rep[g]
        if plan.placement[r] == plan.placement[rep]:
            continue
        np.testing.assert_array_equal(full.x[:, r], full.x[:, rep])


def test_many_replicas_few_groups():
    # 1,000 replicas over 3 domains: fill-style rows repeat, so a handful of groups
    inst = Instance.from_dict({
        "name": "g", "gpu": GPU,
        "domains": [{"name": n, "gpus": 10_000, "intra_bandwidth_gbps": 200.0} for n in "abc"],
        "links": [{"a": "a", "b": "b", "bandwidth_gbps": 100.0, "latency_ms": 3.0},
                  {"a": "b", "b": "c", "bandwidth_gbps": 100.0, "latency_ms": 4.0}],
        "workload": {"model": ModelSpec(name="m", units=[
            {"name": f"u{i}", "params": 1e6, "fwd_flops_per_token": 1e9, "out_bytes_per_token": 1e3,
             "stored_bytes_per_token": 0.0} for i in range(4)]),
            "global_batch_size": 1000, "seq_len": 8, "micro_batch_sizes": [1], "tensor_parallel": [1]}})
    rows = [["a"] * 4, ["b"] * 4, ["a", "a", "b", "b"], ["b", "b", "c", "c"]]
    plan = Plan.build([(i, i + 1) for i in range(4)], [rows[r % 4] for r in range(1000)], tp=1,
                      micro_batch_size=1, instance=inst)
    ev = Evaluator(inst, plan)
    assert ev.fig.groups == 3  # a-a-a-a and b-b-b-b both stay inside 200 Gbit/s domains
    assert ev.iteration_times()[0] == Evaluator(inst, plan, group_replicas=False).iteration_times()[0]
