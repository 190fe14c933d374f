"""The package's evaluator under SPEC v3 (``spec=3``) agrees with the independent
v3 reference (``tests/reference_sim_v3.py``, written from the SPEC text alone).

Hypothesis builds small random v3 instances and plans:

* WANs that are sometimes not complete (multi-hop routes) and sometimes break
  the triangle inequality (a slow direct link beside a fast two-hop path: v3
  takes the link, v2 relayed);
* optional ``uplink_gbps`` per domain (small ones bind), ``gradient_sync`` ring or
  ``reduce_broadcast``, ``unit_overhead_ms``, explicit units with and without
  parameters (G_j = 0: no sync in v3) and FLOPs (not counted in n_j);
* placements with boundaries crossing links in opposite directions (replica rows
  reversed), rings of 2 to 4 members with unequal volumes on shared resources;
* schedules gpipe, 1f1b, random explicit op lists (some deadlock), gradient
  accumulation (k GPipe rounds concatenated) and k 1f1b rounds concatenated;
* batches of network states with links sometimes down;

and compares, to 1e-9 relative: T, T_est, every stage end E_j and E^est_j,
AR_j, compute, memory, WAN bytes, cost and feasibility.  Then SPEC 7's
exactness promise (sim / T_est in [0.999, 1.001]) for gpipe and gradient
accumulation, grouped replicas equal to ungrouped ones bit for bit under v3,
and the version switch itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from planner import Deadlock, Evaluator, Instance, InputError, NetworkStates, Plan, evaluate
from planner.problem.model import ModelSpec
from planner.scoring import DEFAULT_SPEC

from reference_sim_v3 import (RefDeadlock, ref3_comm, ref3_cost, ref3_estimate_ends, ref3_flushes,
                              ref3_op_lists, ref3_routes, ref3_stage_ends, ref3_stage_figures,
                              ref3_violations, ref3_wan_bytes)

REL = 1e-9
GPU = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def close(a: float, b: float, rel: float = REL) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


# ---------------------------------------------------------------- strategies
@st.composite
def wan(draw, names):
    """Connected WAN: a spanning tree plus extra links; latencies in halves of a ms,
    and now and then a slow direct link (50 ms) beside faster relays."""
    D = len(names)
    pairs = {(draw(st.integers(0, i - 1)), i) for i in range(1, D)}
    for i in range(D):
        for k in range(i + 1, D):
            if draw(st.integers(0, 2)) == 0:
                pairs.add((i, k))
    links = []
    for i, k in draw(st.permutations(sorted(pairs))):
        a, b = (names[i], names[k]) if draw(st.booleans()) else (names[k], names[i])
        slow = draw(st.integers(0, 4)) == 0  # breaks the triangle inequality
        links.append({"a": a, "b": b,
                      "bandwidth_gbps": draw(st.sampled_from([1.0, 2.5, 10.0, 40.0])),
                      "latency_ms": 50.0 if slow else draw(st.integers(0, 10)) / 2})
    return links


def units_strategy(n):
    return st.lists(st.fixed_dictionaries({
        "params": st.sampled_from([0.0, 1e5, 1e6, 3e7]),
        "fwd_flops_per_token": st.sampled_from([0.0, 1e9, 3e10, 2e11]),
        "out_bytes_per_token": st.sampled_from([0.0, 1e3, 1e5, 1e6]),
        "stored_bytes_per_token": st.sampled_from([0.0, 1e4, 1e6]),
        "tp_bytes_per_token": st.sampled_from([0.0, 1e4])}), min_size=n, max_size=n)


def rounds_ops(S, rounds, inner):
    """Rounds of micro-batches concatenated, each a GPipe round (``inner="gpipe"``:
    gradient accumulation) or a 1f1b round."""
    from planner.problem.oplists import op_list

    lists = [[] for _ in range(S)]
    start = 0
    for size in rounds:
        for j in range(S):
            lists[j] += [f"{k}{i + start}" for k, i in
                         (op for op in op_list(inner, j, S, size))]
        start += size
    return lists


def draw_states(draw, links, K: int) -> NetworkStates:
    """K network states of ``links`` (dicts with bandwidth_gbps, latency_ms) for hypothesis:
    the first the links' own figures, the others random, one link in ten down."""
    L = len(links)
    bw, lat = np.zeros((K, L)), np.zeros((K, L))
    for k in range(K):
        for i, lk in enumerate(links):
            if k == 0:
                bw[k, i], lat[k, i] = lk["bandwidth_gbps"], lk["latency_ms"]
                continue
            bw[k, i] = 0.0 if draw(st.integers(0, 9)) == 0 else draw(st.floats(0.1, 100.0))
            lat[k, i] = draw(st.floats(0.0, 60.0))
    return NetworkStates(bw, lat)


@st.composite
def explicit_ops(draw, S, m):
    """Random valid op lists; "free" permutes F and B (deadlocks often)."""
    free = draw(st.booleans())
    lists = []
    for _ in range(S):
        f_left, b_ready, ops = list(range(m)), [], []
        while f_left or b_ready:
            choices = [("F", i) for i in (f_left if free else f_left[:1])]
            choices += [("B", i) for i in (b_ready if free else sorted(b_ready)[:1])]
            kind, i = draw(st.sampled_from(choices))
            (f_left if kind == "F" else b_ready).remove(i)
            if kind == "F":
                b_ready.append(i)
            ops.append(f"{kind}{i}")
        lists.append(ops)
    return lists


@st.composite
def v3_cases(draw, schedules=("gpipe", "1f1b", "explicit", "accumulation", "1f1b-rounds")):
    """(instance, plan, K >= 2 states, schedule kind) with SPEC v3 fields."""
    D = draw(st.integers(2, 4))
    names = draw(st.permutations(["a", "b", "c", "d", "e"]))[:D]
    small_gpus = draw(st.integers(0, 5)) == 0
    domains = []
    for n in names:
        d = {"name": n, "gpus": draw(st.sampled_from([2, 4])) if small_gpus else 1000,
             "intra_bandwidth_gbps": draw(st.sampled_from([50.0, 200.0])),
             "price_per_gpu_hour": draw(st.sampled_from([0.0, 1.5]))}
        if draw(st.integers(0, 2)) == 0:
            d["uplink_gbps"] = draw(st.sampled_from([0.5, 3.0, 100.0]))
        domains.append(d)
    links = draw(wan(names))
    n = draw(st.integers(1, 5))
    units = [{"name": f"u{i}", **u} for i, u in enumerate(draw(units_strategy(n)))]
    R = draw(st.sampled_from([1, 2, 2, 3, 4]))
    S = draw(st.integers(1, min(n, 4)))
    kind = draw(st.sampled_from(schedules))
    if kind in ("accumulation", "1f1b-rounds"):
        rounds = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
        m = sum(rounds)
    else:
        m = draw(st.integers(1, 6))
    b = draw(st.sampled_from([1, 2]))
    tp = draw(st.sampled_from([1, 2]))
    gpu = {**GPU, "memory_gb": draw(st.sampled_from([80.0, 80.0, 0.05])),
           "unit_overhead_ms": draw(st.sampled_from([0.0, 0.0, 0.4, 7.0]))}
    if draw(st.booleans()):
        gpu["nvlink_bandwidth_gbps"] = 100.0
    inst = Instance.from_dict({
        "name": "v3", "gpu": gpu, "domains": domains, "links": links,
        "workload": {"model": ModelSpec(name="m", units=units), "global_batch_size": R * b * m,
                     "seq_len": draw(st.sampled_from([16, 128])), "micro_batch_sizes": [b],
                     "tensor_parallel": [tp], "recompute": draw(st.booleans()),
                     "gradient_sync": draw(st.sampled_from(["ring", "reduce_broadcast"]))},
        "options": {"wan_price_per_gb": draw(st.sampled_from([0.0, 0.02]))}})
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=S - 1, max_size=S - 1,
                                unique=True))) if S > 1 else []
    bounds = list(zip([0, *cuts], [*cuts, n]))
    row = [draw(st.sampled_from(names)) for _ in range(S)]
    placement = []
    for _ in range(R):
        style = draw(st.integers(0, 3))
        if style == 0:  # the first row backwards: boundaries in opposite directions
            placement.append(list(reversed(row)) if S > 1 else list(row))
        elif style == 1:
            placement.append(list(row))
        else:
            placement.append([draw(st.sampled_from(names)) for _ in range(S)])
    if kind == "explicit":
        schedule = draw(explicit_ops(S, m))
    elif kind == "accumulation":
        schedule = rounds_ops(S, rounds, "gpipe")
    elif kind == "1f1b-rounds":
        schedule = rounds_ops(S, rounds, "1f1b")
    else:
        schedule = kind
    plan = Plan.build(bounds, placement, tp=tp, micro_batch_size=b, instance=inst, schedule=schedule)
    return inst, plan, draw_states(draw, links, draw(st.integers(2, 3))), kind


def _state(states, k):
    return list(states.bandwidth_gbps[k]), list(states.latency_ms[k])


def _assert_close_rows(got, want, what, case):
    inst, plan, states, _ = case
    for k, (a_row, b_row) in enumerate(zip(got, want)):
        for j, (a, b) in enumerate(zip(np.atleast_1d(a_row), np.atleast_1d(b_row))):
            assert close(float(a), float(b)), (
                f"{what} state {k} stage {j}: package {a!r} != reference {b!r}\n"
                f"plan={plan.to_json(indent=None)}\ninstance={inst.to_dict()}\n"
                f"bw={states.bandwidth_gbps.tolist()} lat={states.latency_ms.tolist()}")


def _events(case):
    inst, plan, _, kind = case
    comm = ref3_comm(inst, plan)
    event(f"schedule {kind}, {len(ref3_flushes(ref3_op_lists(plan)))} flush(es), "
          f"{'n_F + n_B' if not comm['gpipe_shaped'] else 'max(n_F, n_B)'}")
    if any(v > 1 for v in comm["n"].values()):
        event("a shared boundary resource")
    if any(q[0] != "link" for q in comm["n"]):
        event("a boundary uses an uplink")
    if any(len(set(v)) > 1 for v in comm["sync_users"].values()):
        event("unequal syncs share a resource")
    routes = inst.direct_routes
    if any(routes[key].links != inst.routes[key].links for key in routes):
        event("a direct link beats a relay (triangle broken)")


# ---------------------------------------------------------------- properties
@SETTINGS
@given(v3_cases())
def test_times_and_stage_ends_agree_with_reference(case):
    inst, plan, states, _ = case
    _events(case)
    ev = Evaluator(inst, plan, spec=3)
    ends_est = ev.estimate_ends(states)
    ar = ev.fig.comm(states).ar
    want_est, want_ar = [], []
    for k in range(states.count):
        E_est, comm = ref3_estimate_ends(inst, plan, *_state(states, k))
        want_est.append(E_est)
        want_ar.append(comm["AR"])
    _assert_close_rows(ar, want_ar, "AR", case)
    _assert_close_rows(ends_est, want_est, "E^est", case)
    _assert_close_rows(ev.estimate_times(states),
                       [max(e + a for e, a in zip(E, A)) for E, A in zip(want_est, want_ar)],
                       "T_est", case)
    try:
        want = [ref3_stage_ends(inst, plan, *_state(states, k))[0] for k in range(states.count)]
    except RefDeadlock:
        with pytest.raises(Deadlock):
            ev.iteration_times(states)
        assert any(v.rule == "deadlock" for v in ev.violations())
        event("deadlock")
        return
    _assert_close_rows(ev.stage_ends(states), want, "E", case)
    T = ev.iteration_times(states)
    _assert_close_rows(T, [max(e + a for e, a in zip(E, A)) for E, A in zip(want, want_ar)], "T", case)
    # cost per iteration (SPEC 6), for the simulated T of each state
    _assert_close_rows(ev.cost(T), [ref3_cost(inst, plan, float(t)) for t in T], "cost", case)


@settings(SETTINGS, max_examples=80)
@given(v3_cases())
def test_figures_cost_and_feasibility_agree_with_reference(case):
    inst, plan, _, _ = case
    e = evaluate(inst, plan, spec=3)
    fig = ref3_stage_figures(inst, plan)
    for j in range(plan.num_stages):
        assert close(e.memory_gb_per_gpu[j], fig["memory_bytes"][j] / 1e9), ("memory", j)
        assert close(e.compute_s[j], fig["c"][0][j]), ("compute", j, e.compute_s[j], fig["c"][0][j])
    assert close(e.wan_gb_per_iteration, ref3_wan_bytes(inst, plan) / 1e9)
    AR = ref3_comm(inst, plan)["AR"]
    assert all(close(a, b) for a, b in zip(e.allreduce_s, AR)), (e.allreduce_s, AR)
    if not math.isinf(e.iteration_time_s):
        assert close(e.cost_per_iteration, ref3_cost(inst, plan, e.iteration_time_s))
    bad = ref3_violations(inst, plan)
    event("feasible" if e.feasible else "infeasible: " + ", ".join(sorted({v.rule for v in e.violations})))
    # the package also refuses deadlocks (section 6), which the reference leaves to its
    # simulation; the package's other rules (candidates, schedules allowed, max_stages)
    # hold by construction of the cases
    others = [v for v in e.violations if v.rule != "deadlock"]
    assert (not others) == (not bad), (e.violations, bad)


@st.composite
def exact_cases(draw):
    return draw(v3_cases(schedules=("gpipe", "accumulation")))


@settings(SETTINGS, max_examples=100)
@given(exact_cases())
def test_gpipe_and_gradient_accumulation_estimate_is_exact(case):
    # SPEC 7: "sim/T_est is 1.000 for gpipe and gradient accumulation": every flush is
    # gpipe-shaped; each is a tandem of servers (stages and channels)
    inst, plan, states, kind = case
    ev = Evaluator(inst, plan, spec=3)
    assert all(fl.gpipe_shaped for fl in ev.fig.flushes)
    T, T_est = ev.iteration_times(states), ev.estimate_times(states)
    for t, te in zip(T, T_est):
        if math.isinf(t) or math.isinf(te) or te == 0:  # a down link; or nothing to do
            assert t == te
            continue
        assert 0.999 <= t / te <= 1.001, (t, te)
    E, E_est = ev.stage_ends(states), ev.estimate_ends(states)
    fin = np.isfinite(E)
    np.testing.assert_allclose(E[fin], E_est[fin], rtol=1e-9)


# ---------------------------------------------------------------- routes and flushes alone
@st.composite
def wan_instances(draw):
    """An instance of 2-7 domains whose latencies tie often (0, 1, 2 ms) or break the
    triangle inequality (a 50 ms link beside relays): routing only."""
    D = draw(st.sampled_from([2, 3, 4, 5, 6, 7, 7]))
    names = draw(st.permutations(["a", "b", "c", "d", "e", "f", "g"]))[:D]
    links = draw(wan(names))
    for lk in links:
        if lk["latency_ms"] != 50.0:
            lk["latency_ms"] = draw(st.sampled_from([0.0, 1.0, 1.0, 2.0]))
    return Instance.from_dict({
        "name": "w", "gpu": GPU,
        "domains": [{"name": n, "gpus": 8, "intra_bandwidth_gbps": 200.0} for n in names],
        "links": links,
        "workload": {"model": ModelSpec(name="m", units=[{
            "name": "u", "params": 1.0, "fwd_flops_per_token": 1.0, "out_bytes_per_token": 1.0,
            "stored_bytes_per_token": 1.0}]), "global_batch_size": 1, "seq_len": 1,
            "micro_batch_sizes": [1]}})


@settings(SETTINGS, max_examples=300)
@given(wan_instances())
def test_direct_routes_agree_with_reference(inst):
    want = ref3_routes(inst)
    routes = inst.direct_routes
    assert set(want) == set(routes)
    idx = inst.domain_index
    src = np.array([idx[a] for a, _ in want])
    dst = np.array([idx[b] for _, b in want])
    links, hops = routes.link_paths(src, dst)
    bottleneck = routes.bottleneck_gbps([l.bandwidth_gbps for l in inst.links])
    latency = routes.latency_matrix()
    for i, (key, (nodes, path)) in enumerate(want.items()):
        assert routes[key].nodes == nodes and routes[key].links == path, key
        assert tuple(links[i, :hops[i]]) == path and (links[i, hops[i]:] == -1).all(), key
        assert bottleneck[idx[key[0]], idx[key[1]]] == min(inst.links[k].bandwidth_gbps for k in path)
        assert latency[idx[key[0]], idx[key[1]]] == pytest.approx(routes[key].latency_ms, rel=1e-12)
    event("a direct link beats a relay" if any(routes[k].links != inst.routes[k].links for k in want)
          else "direct links are the least-latency routes")


@settings(SETTINGS, max_examples=300)
@given(st.integers(1, 4).flatmap(lambda S: st.integers(1, 6).flatmap(
    lambda m: st.tuples(st.just(S), st.just(m), st.one_of(explicit_ops(S, m), st.lists(
        st.integers(1, 3), min_size=1, max_size=4).map(lambda r: rounds_ops(S, r, "gpipe")))))))
def test_flushes_agree_with_reference(case):
    from planner.problem.oplists import flushes, op_lists

    S, m, lists = case
    m = sum(1 for op in lists[0] if op[0] == "F")
    mine = flushes(op_lists(lists, S, m), m)
    want = ref3_flushes(ref3_op_lists(type("P", (), {"stages": [None] * S, "num_micro_batches": m,
                                                     "schedule": lists})()))
    assert [(f.size, list(f.inflight), f.gpipe_shaped) for f in mine] == \
        [(f["m"], f["w"], f["gpipe_shaped"]) for f in want]
    event(f"{len(mine)} flush(es)")


# ---------------------------------------------------------------- grouped replicas under v3
@settings(SETTINGS, max_examples=100)
@given(v3_cases())
def test_grouped_equals_ungrouped_bit_for_bit_v3(case):
    inst, plan, states, _ = case
    grouped, flat = Evaluator(inst, plan, spec=3), Evaluator(inst, plan, group_replicas=False, spec=3)
    fig = grouped.fig
    full, per_group = fig.comm(states), fig.comm_groups(states)
    np.testing.assert_array_equal(per_group.x[:, fig.group_of], full.x)
    np.testing.assert_array_equal(per_group.l[:, fig.group_of], full.l)
    np.testing.assert_array_equal(per_group.ar, full.ar)
    np.testing.assert_array_equal(grouped.estimate_times(states), flat.estimate_times(states))
    try:
        np.testing.assert_array_equal(grouped.iteration_times(states), flat.iteration_times(states))
    except Deadlock:
        pass


# ---------------------------------------------------------------- hand-checked v3 changes
F_ONE = 5e13 / 128  # f = 1 s, g = 2 s with b = 1, s = 128, t = 1 on GPU
A_ONE = 1.25e9 / 128  # x = 1 s over one unshared 10 Gbit/s direction


def _two_domains(out=A_ONE, params=1e6, units=2, gbs=2, uplink=None, sync="ring", overhead=0.0):
    doms = [{"name": n, "gpus": 64, "intra_bandwidth_gbps": 200.0} for n in "ab"]
    if uplink is not None:
        doms[0]["uplink_gbps"] = uplink
    return Instance.from_dict({
        "name": "two", "gpu": {**GPU, "unit_overhead_ms": overhead}, "domains": doms,
        "links": [{"a": "a", "b": "b", "bandwidth_gbps": 10.0, "latency_ms": 0.0}],
        "workload": {"model": ModelSpec(name="m", units=[
            {"name": f"u{i}", "params": params, "fwd_flops_per_token": F_ONE, "out_bytes_per_token": out,
             "stored_bytes_per_token": 0.0} for i in range(units)]),
            "global_batch_size": gbs, "seq_len": 128, "micro_batch_sizes": [1], "tensor_parallel": [1],
            "gradient_sync": sync}})


@pytest.mark.parametrize("schedule,x", [("gpipe", 1.0), ("1f1b", 2.0)])
def test_opposite_boundaries_share_a_link_only_outside_gpipe_shapes(schedule, x):
    # replica 0 a -> b, replica 1 b -> a, m = 1 (gbs 2): under gpipe every flush is
    # gpipe-shaped, n(q) = max(n_F, n_B) = 1 on each direction, x = 1 s; 1f1b with m = 1
    # is gpipe-shaped too, so use m = 2 there (n_F + n_B = 2, x = 2 s)
    gbs = 2 if schedule == "gpipe" else 4
    inst = _two_domains(gbs=gbs, params=0.0)
    plan = Plan.build([(0, 1), (1, 2)], [["a", "b"], ["b", "a"]], tp=1, micro_batch_size=1,
                      instance=inst, schedule=schedule)
    comm = Evaluator(inst, plan, spec=3).fig.comm(NetworkStates.base(inst))
    np.testing.assert_allclose(comm.x, x, rtol=1e-12)
    # v2 counts two flows on the undirected link whatever the schedule
    np.testing.assert_allclose(Evaluator(inst, plan, spec=2).fig.comm(NetworkStates.base(inst)).x, 2.0)


def test_uplink_and_two_member_ring_full_duplex():
    # a's uplink of 5 Gbit/s caps its boundary (both channels use a's uplink, out or in)
    inst = _two_domains(uplink=5.0, params=0.0, gbs=1)
    plan = Plan.build([(0, 1), (1, 2)], [["a", "b"]], tp=1, micro_batch_size=1, instance=inst)
    assert Evaluator(inst, plan, spec=3).fig.comm(NetworkStates.base(inst)).x[0, 0, 0] == pytest.approx(2.0)
    # two replicas of one stage in a and b: the ring's hops a -> b and b -> a use opposite
    # directions, each unshared (v2 halved them): 2(2-1)/2 G / 1.25e9 B/s; G = 2 P
    for sync, vol in (("ring", 1.0), ("reduce_broadcast", 2.0)):
        inst = _two_domains(params=1.25e9 / 2, units=1, sync=sync)
        plan = Plan.build([(0, 1)], [["a"], ["b"]], tp=1, micro_batch_size=1, instance=inst)
        ar = Evaluator(inst, plan, spec=3).fig.comm(NetworkStates.base(inst)).ar[0, 0]
        assert ar == pytest.approx(vol)
    inst = _two_domains(params=1.25e9 / 2, units=1)
    assert Evaluator(inst, plan, spec=2).fig.comm(NetworkStates.base(inst)).ar[0, 0] == pytest.approx(2.0)


def test_unit_overhead():
    # 2 units of F_ONE each, 0.5 ms overhead: f = 2 + 2 * 0.0005, g = 4 + 2 * 2 * 0.0005
    inst = _two_domains(overhead=0.5, params=0.0, out=0.0, gbs=1)
    plan = Plan.build([(0, 2)], [["a"]], tp=1, micro_batch_size=1, instance=inst)
    fig = Evaluator(inst, plan, spec=3).fig
    assert fig.f[0] == pytest.approx(2.001) and fig.g[0] == pytest.approx(4.002)


# ---------------------------------------------------------------- the version switch
def test_default_spec_is_three_and_v2_refuses_v3_fields():
    assert DEFAULT_SPEC == 3
    for kw in ({"uplink": 5.0}, {"sync": "reduce_broadcast"}, {"overhead": 1.0}):
        inst = _two_domains(**kw)
        plan = Plan.build([(0, 1), (1, 2)], [["a", "b"]] * 2, tp=1, micro_batch_size=1, instance=inst)
        assert float(Evaluator(inst, plan).iteration_times()[0]) == evaluate(inst, plan, spec=3).iteration_time_s
        with pytest.raises(InputError, match="SPEC v2 does not model"):
            evaluate(inst, plan, spec=2)
    # the defaults (no uplink, "ring", 0 ms) are v2's too and pass both
    inst = _two_domains()
    plan = Plan.build([(0, 1), (1, 2)], [["a", "b"]] * 2, tp=1, micro_batch_size=1, instance=inst)
    assert Evaluator(inst, plan).spec == 3 and Evaluator(inst, plan, spec=2).spec == 2
    with pytest.raises(ValueError):
        Evaluator(inst, plan, spec=4)
