"""Per-stage in-flight limits (planner.solvers.inflight) and the claims of plans outside
the named schedules (planner.scoring.bounds.settle_claims)."""

import itertools

import pytest

from helpers import all_plans, make_instance
from planner import Plan
from planner.problem.oplists import inflight_counts, inflight_op_list, op_list
from planner.scoring.bounds import lower_bound, settle_claims
from planner.scoring.evaluator import Evaluator, check_plan
from planner.solvers.anneal import anneal
from planner.solvers.inflight import inflight_schedule, tune_inflight
from planner.solvers.registry import finish, refine


def slow_wan():
    # two stages on either side of a 40 ms link: 1f1b's window [0, 1] sets the period
    return make_instance([("a", 2), ("b", 2)], [("a", "b", 100.0, 40.0)], global_batch_size=16,
                         micro_batch_sizes=[1], tensor_parallel=[1])


def two_stage_plan(inst, schedule="1f1b"):
    return Plan.build([(0, 2), (2, 4)], [["a", "b"]], tp=1, micro_batch_size=1, instance=inst,
                      schedule=schedule)


def sim(inst, p):
    return float(Evaluator(inst, p).iteration_times()[0])


def t_est(inst, p):
    return float(Evaluator(inst, p).estimate_times()[0])


@pytest.mark.parametrize("S,m", [(1, 1), (2, 3), (4, 4), (5, 8), (6, 2)])
def test_the_family_holds_1f1b_and_gpipe(S, m):
    for j in range(S):
        assert inflight_op_list(min(m, S - j), m) == op_list("1f1b", j, S, m)
        assert inflight_op_list(m, m) == op_list("gpipe", j, S, m)
    for w in itertools.product(range(1, m + 1), repeat=min(S, 3)):
        assert inflight_counts(inflight_schedule(w, m).ops, len(w), m) == list(w)  # SPEC 7's w_j is the limit


def test_tuning_finds_the_brute_force_best_limits_and_the_estimate_describes_it():
    inst = slow_wan()
    p = finish(inst, two_stage_plan(inst), "plan", 0.0)
    m = p.num_micro_batches
    brute = min(sim(inst, p.model_copy(update={"schedule": inflight_schedule(w, m)}))
                for w in itertools.product(range(1, m + 1), repeat=2)
                if not check_plan(inst, p.model_copy(update={"schedule": inflight_schedule(w, m)})))
    out = tune_inflight(inst, p, time_limit=None, max_evals=10_000)
    assert out is not p and out.solver.inflight[0] > 2  # a deeper warm-up on stage 0
    assert sim(inst, out) == pytest.approx(brute, rel=1e-12)
    assert sim(inst, out) < 0.9 * sim(inst, p)  # 1f1b waits on the WAN round trip
    assert sim(inst, out) <= 1.01 * t_est(inst, out)
    # and no single limit moved makes it faster (a local optimum of the coordinate descent)
    w = out.solver.inflight
    for j, v in itertools.product(range(2), range(1, m + 1)):
        trial = list(w)
        trial[j] = v
        q = out.model_copy(update={"schedule": inflight_schedule(trial, m)})
        if not check_plan(inst, q):
            assert sim(inst, q) >= sim(inst, out) * (1 - 1e-12)


def test_tuning_respects_caps_and_returns_the_plan_when_nothing_helps():
    inst = slow_wan()
    p = finish(inst, two_stage_plan(inst), "plan", 0.0)
    capped = tune_inflight(inst, p, time_limit=None, max_evals=1000, caps=[2, 1])
    assert capped is p  # 1f1b's own limits are the only ones under these caps
    one = make_instance([("a", 4)], [], global_batch_size=8, micro_batch_sizes=[1], tensor_parallel=[1])
    q = finish(one, Plan.build([(0, 4)], [["a"]], tp=1, micro_batch_size=1, instance=one), "plan", 0.0)
    assert tune_inflight(one, q, time_limit=None, max_evals=100) is q  # one stage: nothing to tune


def test_the_instance_bound_holds_for_every_in_flight_schedule():
    inst = make_instance([("a", 2), ("b", 2)], [("a", "b", 10.0, 30.0)], global_batch_size=4)
    lb = lower_bound(inst).value
    seen = 0
    for p in all_plans(inst):
        if p.num_stages < 2 or check_plan(inst, p):
            continue
        m = p.num_micro_batches
        for w in itertools.product(range(1, m + 1), repeat=p.num_stages):
            q = p.model_copy(update={"schedule": inflight_schedule(w, m)})
            if check_plan(inst, q):
                continue
            seen += 1
            assert lb <= t_est(inst, q) * (1 + 1e-12) and lb <= sim(inst, q) * (1 + 1e-12)
    assert seen > 20


def test_a_refined_plan_claims_no_optimum_of_the_named_space():
    inst = slow_wan()
    p = finish(inst, two_stage_plan(inst), "plan", 0.0)
    claimed = p.model_copy(update={"solver": p.solver.model_copy(update={
        "status": "optimal", "bound": p.solver.objective, "gap": 0.0})})
    out = refine(inst, claimed, time_limit=5, deterministic=True)
    assert out.predicted.iteration_time_s < p.predicted.iteration_time_s
    info = out.solver
    assert info.status == "feasible" and info.estimate_status == "optimal"
    assert info.estimate_bound == pytest.approx(p.solver.objective)
    assert info.bound == pytest.approx(lower_bound(inst).value) and info.bound <= info.objective
    assert info.objective == out.predicted.iteration_time_s  # the evaluator's, simulated
    assert info.gap == pytest.approx((info.objective - info.bound) / info.objective)
    assert out.predicted.iteration_time_s <= 1.01 * out.predicted.estimate_s
    assert settle_claims(inst, info, info.objective) == info  # the estimate figures move once only


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_annealing_with_limits_returns_faithful_plans_no_worse_than_its_start(seed):
    inst = slow_wan()
    p = finish(inst, two_stage_plan(inst, "gpipe"), "plan", 0.0)
    out = anneal(inst, p, time_limit=None, max_evals=400, seed=seed)
    assert not check_plan(inst, out)
    assert sim(inst, out) <= sim(inst, p) * (1 + 1e-12)
    assert sim(inst, out) <= 1.01 * t_est(inst, out)
    again = anneal(inst, p, time_limit=None, max_evals=400, seed=seed)
    assert again.schedule == out.schedule and again.placement == out.placement


def test_limits_for_period_are_the_smallest_that_meet_the_target():
    import numpy as np
    from planner.scoring.estimate import window_terms
    from planner.solvers.inflight import limits_for_period

    rng = np.random.default_rng(3)
    for _ in range(200):
        S = int(rng.integers(2, 7))
        c = rng.uniform(0.5, 2.0, S)
        rounds = rng.choice([0.0, 0.1, 3.0, 8.0], S - 1)
        tau = float(c.max() * rng.uniform(1.0, 3.0))
        w = limits_for_period(c, rounds, tau, cap=[10**6] * S)

        def worst(v):
            return max((float(p.max()) for _, _, p in window_terms(c, rounds[None, :], np.asarray(v, float), None)),
                       default=0.0)

        assert w[-1] == 1 and worst(w) <= tau * (1 + 1e-9)
        for j in range(S - 1):  # one less anywhere and some window misses the target
            if w[j] > 1:
                assert worst(w[:j] + [w[j] - 1] + w[j + 1:]) > tau * (1 + 1e-12)
