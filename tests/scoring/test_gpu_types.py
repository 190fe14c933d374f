"""GPU types (SPEC v3 change (g)): ``[[gpus]]`` and a domain's ``gpu``; stage j of
replica r runs at the speed and memory of the type of placement[r][j].

* The evaluator (``spec=3``) agrees with the independent reference
  (``tests/reference_sim_v3.py``, per-(replica, stage) figures written from the
  SPEC text) to 1e-9 on random mixed-type instances and plans: T, T_est, every
  E_j and E^est_j, AR, memory, cost and feasibility (memory per type, tp per
  domain's node size); grouped replicas equal ungrouped ones bit for bit.
* Closed forms by hand: two domains of two types, one stage each, the period
  is the slower type's; replicas of two types, the slower replica sets T.
* An instance whose domains all have one type, named through ``[[gpus]]``,
  scores bit for bit as the same instance with only ``[gpu]``.
* The instance lower bound holds on mixed instances (brute force over tiny
  plans); the planners not in ``GPU_TYPE_SOLVERS`` refuse several types, ``planner
  evaluate`` scores them.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from planner import Evaluator, Instance, InputError, Plan, evaluate
from planner.problem.model import ModelSpec
from planner.scoring.bounds import fastest_type_instance, lower_bound

from gpu_types_instances import one_type_named
from reference_sim_v3 import (RefDeadlock, ref3_cost, ref3_estimate_ends, ref3_stage_ends, ref3_stage_figures,
                              ref3_violations)
from test_reference_agreement_v3 import SETTINGS, _assert_close_rows, _state, close, v3_cases

TYPES = [  # (peak_tflops, mfu): achieved speeds 50, 150, 30, 50 TFLOP/s
    {"peak_tflops": 100.0, "mfu": 0.5},
    {"peak_tflops": 300.0, "mfu": 0.5},
    {"peak_tflops": 60.0, "mfu": 0.5},
    {"peak_tflops": 200.0, "mfu": 0.25},
]


@st.composite
def mixed_cases(draw, schedules=("gpipe", "1f1b", "explicit", "accumulation", "1f1b-rounds")):
    """A v3 case of ``test_reference_agreement_v3`` rebuilt with 1-3 ``[[gpus]]`` types
    (speed, memory, overhead and NVLink drawn), each domain naming one or keeping
    ``[gpu]`` (or, without ``[gpu]``, every domain naming one), and now and then a
    domain whose nodes are smaller than tp."""
    inst, plan, states, kind = draw(v3_cases(schedules))
    data = inst.to_dict()
    data["workload"]["model"] = inst.workload.model
    n_types = draw(st.integers(1, 3))
    types = []
    for i in range(n_types):
        g = {"name": f"T{i}", **draw(st.sampled_from(TYPES)),
             "memory_gb": draw(st.sampled_from([80.0, 80.0, 0.05, 0.2])),
             "unit_overhead_ms": draw(st.sampled_from([0.0, 0.0, 0.3, 5.0]))}
        if draw(st.booleans()):
            g["nvlink_bandwidth_gbps"] = draw(st.sampled_from([50.0, 400.0]))
        types.append(g)
    data["gpus"] = types
    names = [g["name"] for g in types]
    keep_table = draw(st.booleans())
    if not keep_table:
        data.pop("gpu")
    pool = names + ([None] if keep_table else [])
    cyclic, off = draw(st.integers(0, 3)) > 0, draw(st.integers(0, 3))
    for i, d in enumerate(data["domains"]):  # mostly neighbours of different types
        choice = pool[(i + off) % len(pool)] if cyclic else draw(st.sampled_from(pool))
        if choice is not None:
            d["gpu"] = choice
        if plan.tp > 1 and draw(st.integers(0, 7)) == 0:
            d["gpus_per_node"] = 1  # tp limited by each used domain's node size
    if all(d.get("gpus_per_node", 8) < plan.tp for d in data["domains"]):
        data["domains"][0]["gpus_per_node"] = 8
    mixed = Instance.from_dict(data)
    types_used = {mixed.domain_gpu(d).name for row in plan.placement for d in row}
    event(f"{len(types_used)} GPU type(s) in the plan")
    if len({tuple(mixed.domain_gpu(d).name for d in row) for row in plan.placement}) > 1:
        event("replicas of different type rows")
    return mixed, plan, states, kind


@SETTINGS
@given(mixed_cases())
def test_mixed_types_agree_with_reference(case):
    inst, plan, states, _ = case
    ev = Evaluator(inst, plan, spec=3)
    flat = Evaluator(inst, plan, spec=3, group_replicas=False)
    want_est, want_ar = [], []
    for k in range(states.count):
        E_est, comm = ref3_estimate_ends(inst, plan, *_state(states, k))
        want_est.append(E_est)
        want_ar.append(comm["AR"])
    ends_est = ev.estimate_ends(states)
    _assert_close_rows(ends_est, want_est, "E^est", case)
    assert np.array_equal(ends_est, flat.estimate_ends(states))
    _assert_close_rows(ev.estimate_times(states),
                       [max(e + a for e, a in zip(E, A)) for E, A in zip(want_est, want_ar)], "T_est", case)
    try:
        want = [ref3_stage_ends(inst, plan, *_state(states, k))[0] for k in range(states.count)]
    except RefDeadlock:
        event("deadlock")
        return
    ends = ev.stage_ends(states)
    _assert_close_rows(ends, want, "E", case)
    assert np.array_equal(ends, flat.stage_ends(states))  # grouping never crosses classes
    T = ev.iteration_times(states)
    _assert_close_rows(T, [max(e + a for e, a in zip(E, A)) for E, A in zip(want, want_ar)], "T", case)
    _assert_close_rows(ev.cost(T), [ref3_cost(inst, plan, float(t)) for t in T], "cost", case)


@settings(SETTINGS, max_examples=80)
@given(mixed_cases())
def test_mixed_figures_and_feasibility_agree_with_reference(case):
    inst, plan, _, _ = case
    e = evaluate(inst, plan, spec=3)
    fig = ref3_stage_figures(inst, plan)
    for j in range(plan.num_stages):
        assert close(e.memory_gb_per_gpu[j], fig["memory_bytes"][j] / 1e9)
        # compute_s: the largest c_{j,r} over replicas
        assert close(e.compute_s[j], max(row[j] for row in fig["c"])), (j, e.compute_s, fig["c"])
    assert close(e.memory_limit_gb, min(min(row) for row in fig["mem_limit"]) / 1e9)
    bad = ref3_violations(inst, plan)
    others = [v for v in e.violations if v.rule != "deadlock"]
    event("feasible" if not bad else "infeasible")
    assert (not others) == (not bad), (e.violations, bad)
    # each rule the reference finds is one the evaluator names
    if any("memory" in b for b in bad):
        assert any(v.rule == "memory" for v in others)
    if any("gpus_per_node" in b for b in bad):
        assert any(v.rule == "tensor_parallel" for v in others)


@settings(SETTINGS, max_examples=60)
@given(v3_cases())
def test_one_type_named_through_gpus_scores_bit_for_bit(case):
    # SPEC 2: "With one type everything is as without [[gpus]]"
    inst, plan, states, _ = case
    named = one_type_named(inst)
    a, b = Evaluator(inst, plan, spec=3), Evaluator(named, plan, spec=3)
    assert np.array_equal(a.estimate_times(states), b.estimate_times(states))
    try:
        T = a.iteration_times(states)
    except Exception:  # a deadlocking schedule: both refuse it
        with pytest.raises(Exception):
            b.iteration_times(states)
        return
    assert np.array_equal(T, b.iteration_times(states))
    ea, eb = evaluate(inst, plan, spec=3), evaluate(named, plan, spec=3)
    assert ea.to_dict() == eb.to_dict()


# ---------------------------------------------------------------- closed forms by hand
def two_types(order=("slow", "fast"), R=1, m=4, schedule="gpipe", memory=(80.0, 80.0), uplink=None):
    """Domains ``slow`` (1 TFLOP/s achieved) and ``fast`` (3 TFLOP/s); two units of
    1e12 FLOPs per token, no parameters, no activations crossing (A = 0), zero latency:
    b = s = t = 1 gives f = 1 s, g = 2 s on ``slow`` and f = 1/3 s, g = 2/3 s on ``fast``."""
    units = [{"name": f"u{i}", "params": 0.0, "fwd_flops_per_token": 1e12, "out_bytes_per_token": 0.0,
              "stored_bytes_per_token": 0.0} for i in range(2)]
    inst = Instance.from_dict({
        "name": "two-types",
        "gpu": {"name": "slow", "peak_tflops": 2.0, "mfu": 0.5, "memory_gb": memory[0]},
        "gpus": [{"name": "fast", "peak_tflops": 6.0, "mfu": 0.5, "memory_gb": memory[1]}],
        "domains": [{"name": "slow", "gpus": 8, "intra_bandwidth_gbps": 100.0},
                    {"name": "fast", "gpus": 8, "intra_bandwidth_gbps": 100.0, "gpu": "fast"}],
        "links": [{"a": "slow", "b": "fast", "bandwidth_gbps": 10.0, "latency_ms": 0.0}],
        "workload": {"model": ModelSpec(name="m", units=units), "global_batch_size": R * m, "seq_len": 1,
                     "micro_batch_sizes": [1], "tensor_parallel": [1]}})
    return inst


@pytest.mark.parametrize("order", [("slow", "fast"), ("fast", "slow")])
def test_two_stages_on_two_types_take_the_slower_period(order):
    # gpipe, S = 2: T = m c_slow + c_fast (the slow stage is busy m c_slow; the fast one adds
    # its own pass before or after), c_slow = 3 s, c_fast = 1 s; 1f1b with c_fast <= f_slow:
    # the slow stage never waits, T = m c_slow
    m = 4
    inst = two_types(m=m)
    for schedule, want in (("gpipe", m * 3.0 + 1.0), ("1f1b", m * 3.0 + (1.0 if order[0] == "fast" else 0.0))):
        plan = Plan.build([(0, 1), (1, 2)], [list(order)], tp=1, micro_batch_size=1, instance=inst,
                          schedule=schedule)
        ev = Evaluator(inst, plan, spec=3)
        T = float(ev.iteration_times()[0])
        assert T == pytest.approx(want, rel=1e-12), (schedule, order, T)
        if schedule == "gpipe":  # SPEC 7: exact for gpipe-shaped flushes
            assert float(ev.estimate_times()[0]) == pytest.approx(want, rel=1e-12)
    # the same plan on the fast type alone: (m + 1) c_fast for gpipe, much less
    fast = Plan.build([(0, 1), (1, 2)], [["fast", "fast"]], tp=1, micro_batch_size=1, instance=inst,
                      schedule="gpipe")
    assert float(Evaluator(inst, fast, spec=3).iteration_times()[0]) == pytest.approx((m + 1) * 1.0, rel=1e-12)


def test_1f1b_closed_form_fast_then_slow():
    # 1f1b, S = 2, fast stage 0 then slow stage 1 (the last stage runs F(i), B(i) back to back):
    # stage 1 starts at f_fast and is then busy m c_slow; stage 0's last B follows: + g_fast
    m = 4
    inst = two_types(m=m)
    plan = Plan.build([(0, 1), (1, 2)], [["fast", "slow"]], tp=1, micro_batch_size=1, instance=inst,
                      schedule="1f1b")
    assert float(Evaluator(inst, plan, spec=3).iteration_times()[0]) == pytest.approx(
        1 / 3 + m * 3.0 + 2 / 3, rel=1e-12)


def test_replicas_of_two_types_the_slower_sets_T():
    # one stage, two replicas, one per type, no gradients (P = 0: no sync): each replica runs
    # m c on its own type; T is the slow replica's m * 3 s, whichever replica comes first
    m = 4
    inst = two_types(R=2, m=m)
    for rows in ([["slow"], ["fast"]], [["fast"], ["slow"]]):
        plan = Plan.build([(0, 2)], rows, tp=1, micro_batch_size=1, instance=inst, schedule="gpipe")
        ev = Evaluator(inst, plan, spec=3)
        assert ev.fig.groups == 2 and ev.fig.classes == 2
        assert float(ev.iteration_times()[0]) == pytest.approx(m * 6.0, rel=1e-12)  # c = 6 s for 2 units
        assert float(ev.estimate_times()[0]) == pytest.approx(m * 6.0, rel=1e-12)
    fast_only = Plan.build([(0, 2)], [["fast"], ["fast"]], tp=1, micro_batch_size=1, instance=inst,
                           schedule="gpipe")
    assert float(Evaluator(inst, fast_only, spec=3).iteration_times()[0]) == pytest.approx(m * 2.0, rel=1e-12)


def test_memory_is_checked_against_the_hosting_type():
    # 16 B per parameter: 1e8 parameters are 1.6 GB per GPU: over slow's 1 GB (0.9 usable), under fast's 2 GB
    inst = two_types(memory=(1.0, 2.0))
    data = inst.to_dict()
    data["workload"]["model"] = ModelSpec(name="m", units=[
        {"name": "u", "params": 1e8, "fwd_flops_per_token": 1e12, "out_bytes_per_token": 0.0,
         "stored_bytes_per_token": 0.0}])
    inst = Instance.from_dict(data)
    on_fast = Plan.build([(0, 1)], [["fast"]], tp=1, micro_batch_size=1, instance=inst, schedule="gpipe")
    on_slow = Plan.build([(0, 1)], [["slow"]], tp=1, micro_batch_size=1, instance=inst, schedule="gpipe")
    assert evaluate(inst, on_fast, spec=3).feasible
    e = evaluate(inst, on_slow, spec=3)
    assert [v.rule for v in e.violations] == ["memory"]
    assert "0.90 GB usable on slow" in e.violations[0].message
    assert e.memory_limit_gb == pytest.approx(0.9)


# ---------------------------------------------------------------- bound and refusal
def test_optimistic_instance_is_at_least_as_fast_and_large():
    inst = two_types(memory=(40.0, 80.0))
    opt = fastest_type_instance(inst)
    assert not opt.heterogeneous and opt.gpu.flops_per_s == max(g.flops_per_s for g in inst.gpu_types)
    assert opt.gpu.memory_gb == 80.0
    assert fastest_type_instance(opt) is opt


@settings(SETTINGS, max_examples=60)
@given(mixed_cases(schedules=("gpipe", "1f1b", "explicit", "accumulation")))
def test_instance_bound_holds_on_mixed_plans(case):
    # SPEC 7: a bound holds for every plan the tool accepts; the random plans include
    # explicit schedules and mixed-type replicas
    inst, plan, _, _ = case
    ev = Evaluator(inst, plan, spec=3)
    if ev.violations():
        return
    T = float(ev.iteration_times()[0])
    lb = lower_bound(inst, spec=3).value
    assert lb <= T * (1 + 1e-12), (lb, T)
    event("bound tight within 2x" if T <= 2 * lb else "bound loose")


def test_bound_holds_on_every_tiny_plan_by_brute_force():
    # every placement of 1-2 stages x 1-2 replicas over the two types, both schedules
    from itertools import product

    inst = two_types(R=2, m=2)
    lb = lower_bound(inst, spec=3).value
    assert lb > 0
    best = math.inf
    for S, R, sched in product((1, 2), (1, 2), ("gpipe", "1f1b")):
        bounds = [(0, 2)] if S == 1 else [(0, 1), (1, 2)]
        for rows in product(product(("slow", "fast"), repeat=S), repeat=R):
            plan = Plan.build(bounds, [list(r) for r in rows], tp=1, micro_batch_size=1, instance=inst,
                              schedule=sched)
            ev = Evaluator(inst, plan, spec=3)
            if not ev.violations():
                best = min(best, float(ev.iteration_times()[0]))
    assert lb <= best * (1 + 1e-12), (lb, best)


def test_planners_refuse_several_types_and_evaluate_scores_them(tmp_path):
    from click.testing import CliRunner

    from planner.cli import main
    from planner.solvers.registry import GPU_TYPE_SOLVERS, SOLVERS
    from planner.solvers.registry import plan as run_plan

    inst = two_types()
    data = inst.to_dict()
    data["workload"]["model"] = "tiny"
    data["workload"].update(global_batch_size=4, seq_len=16)
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(data))
    refusing = sorted(set(SOLVERS) - GPU_TYPE_SOLVERS)  # the solvers that plan one type so far
    if refusing:
        with pytest.raises(InputError) as err:
            run_plan(inst, refusing[0])
        assert err.value.field == "domains[1].gpu" and "several GPU types" in str(err.value)
        res = CliRunner().invoke(main, ["plan", str(path), "--solver", refusing[0]])
        assert res.exit_code == 2, res.output
        assert str(path) in res.stderr and "domains[1].gpu:" in res.stderr and "\n" not in res.stderr.strip()
    # the type-aware planners plan it (tests/solvers/test_gpu_types_heuristics.py checks their plans)
    assert "greedy" in GPU_TYPE_SOLVERS
    assert evaluate(inst, run_plan(inst, "greedy"), spec=3).feasible
    # one type for every domain (named through [[gpus]]): the planners plan it
    one_data = inst.to_dict()
    one_data["workload"]["model"] = inst.workload.model
    for d in one_data["domains"]:
        d["gpu"] = "fast"
    one = Instance.from_dict(one_data)
    p = run_plan(one, "greedy")
    assert evaluate(one, p, spec=3).feasible
    # planner evaluate scores a plan mixing types inside one replica: T = m c_slow + c_fast
    plan = Plan.build([(0, 1), (1, 2)], [["slow", "fast"]], tp=1, micro_batch_size=1, instance=inst,
                      schedule="gpipe")
    inst_path, plan_path = tmp_path / "inst.json", tmp_path / "plan.json"
    inst_path.write_text(json.dumps(inst.to_dict()))
    plan_path.write_text(plan.to_json())
    res = CliRunner().invoke(main, ["evaluate", str(inst_path), str(plan_path), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["iteration_time_s"] == pytest.approx(4 * 3.0 + 1.0, rel=1e-12)


@pytest.mark.parametrize("solver", ["greedy"])  # deterministic; hier, milp, cpsat, anneal, rl checked by hand
def test_one_type_named_through_gpus_plans_as_before(solver):
    # the planners take an instance whose domains all name one [[gpus]] type (no [gpu]) and
    # plan it exactly as the same instance with [gpu]
    from planner.problem.io import instances_dir, load_instance
    from planner.solvers.registry import plan as run_plan

    base = load_instance(instances_dir() / "tiny-3dc.toml")
    one = one_type_named(base)
    a, b = run_plan(base, solver, time_limit=2, seed=0), run_plan(one, solver, time_limit=2, seed=0)
    assert (a.placement, a.stages, a.tp, a.schedule) == (b.placement, b.stages, b.tp, b.schedule)
    assert evaluate(base, a).iteration_time_s == evaluate(one, b).iteration_time_s


def test_gantt_and_explain_of_mixed_replicas(tmp_path):
    # a plan [slow, fast] x 2 (one class) and [slow, fast] + [fast, slow] (two classes) are both
    # drawn and explained; the trace times every replica at its own types (closed forms:
    # f = 1 s, g = 2 s on slow, a third of that on fast; gpipe T = m c_slow + c_fast = 7 s)
    from click.testing import CliRunner

    from planner.cli import main
    from planner.scoring.trace import trace

    inst = two_types(R=2, m=2)
    inst_path = tmp_path / "inst.json"
    inst_path.write_text(json.dumps(inst.to_dict()))
    for rows in ([["slow", "fast"], ["slow", "fast"]], [["slow", "fast"], ["fast", "slow"]]):
        plan = Plan.build([(0, 1), (1, 2)], rows, tp=1, micro_batch_size=1, instance=inst, schedule="gpipe")
        plan_path = tmp_path / "plan.json"
        plan_path.write_text(plan.to_json())
        for args in (["evaluate", str(inst_path), str(plan_path), "--gantt", str(tmp_path / "g.svg")],
                     ["explain", str(inst_path), str(plan_path)]):
            res = CliRunner().invoke(main, args)
            assert res.exit_code == 0, res.output
        tr = trace(inst, plan)  # the trace's last end is the evaluator's T (no sync: P = 0)
        assert tr.iteration_time_s == pytest.approx(2 * 3.0 + 1.0, rel=1e-12)
        assert float(tr.stage_end.max()) == pytest.approx(2 * 3.0 + 1.0, rel=1e-12)
        assert tr.classes == len({tuple(r) for r in rows})
        for op in tr.ops:
            third = 1.0 if rows[op.replica][op.stage] == "slow" else 1 / 3
            assert op.end - op.start == pytest.approx((1.0 if op.kind == "F" else 2.0) * third, rel=1e-12)


def test_trace_of_two_classes_names_the_binding_one():
    # 1f1b with c_fast <= f_slow: [slow, fast] takes m c_slow = 6 s, [fast, slow] m c_slow +
    # c_fast = 7 s (test_two_stages_on_two_types_take_the_slower_period): the second binds
    from planner.scoring.trace import trace

    inst = two_types(R=2, m=2)
    plan = Plan.build([(0, 1), (1, 2)], [["slow", "fast"], ["fast", "slow"]], tp=1, micro_batch_size=1,
                      instance=inst, schedule="1f1b")
    tr = trace(inst, plan)
    ev = Evaluator(inst, plan)
    assert tr.classes == 2 and tr.replica_class.tolist() == [0, 1]
    assert tr.class_time_s == pytest.approx([6.0, 7.0], rel=1e-12)
    assert ev.class_times()[0] == pytest.approx([6.0, 7.0], rel=1e-12)
    assert tr.binding_class == 1 and tr.bottleneck_replica == 1
    assert tr.iteration_time_s == float(ev.iteration_times()[0]) == pytest.approx(7.0, rel=1e-12)
    # the critical path runs on replica 1 from 0 to T without gaps
    cp = tr.critical_path
    assert {s.replica for s in cp} == {1}
    assert cp[0].start == pytest.approx(0.0, abs=1e-12) and cp[-1].end == pytest.approx(7.0, rel=1e-12)
    assert all(b.start == pytest.approx(a.end, rel=1e-9, abs=1e-12) for a, b in zip(cp, cp[1:]))
