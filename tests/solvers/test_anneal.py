"""Simulated annealing scored by the exact simulation (planner.solvers.anneal)."""

import pytest

from helpers import all_plans, make_instance
from planner import Plan
from planner.scoring.evaluator import Evaluator, check_plan
from planner.solvers.anneal import anneal, simulated_score
from planner.solvers.greedy import greedy


def tiny():
    return make_instance([("a", 3), ("b", 3)], [("a", "b", 1.0, 20.0)], global_batch_size=8)


def bad_plan(inst):
    # every replica crosses the slow WAN twice
    return Plan.build([(0, 1), (1, 2), (2, 4)], [["a", "b", "a"], ["b", "a", "b"]], tp=1,
                      micro_batch_size=1, instance=inst, schedule="gpipe")


def sim(inst, p):
    return float(Evaluator(inst, p).iteration_times()[0])


def shape_optimum(inst, R, tp, b):
    """Brute force: the shortest simulated time over every feasible plan of the shape."""
    best = None
    for p in all_plans(inst):
        if (p.replicas, p.tp, p.micro_batch_size) != (R, tp, b) or check_plan(inst, p):
            continue
        T = sim(inst, p)
        best = T if best is None else min(best, T)
    return best


def test_reaches_the_brute_force_optimum_of_the_shape_from_a_bad_plan():
    inst = tiny()
    start = bad_plan(inst)
    assert not check_plan(inst, start)
    opt = shape_optimum(inst, 2, 1, 1)
    assert opt < sim(inst, start) * 0.9  # the start is really bad
    out = anneal(inst, start, time_limit=None, max_evals=3000, seed=1)
    assert not check_plan(inst, out)
    assert (out.replicas, out.tp, out.micro_batch_size) == (2, 1, 1)
    assert sim(inst, out) == pytest.approx(opt, rel=1e-9)
    assert out.solver.end_s == pytest.approx(sim(inst, out)) and out.solver.start_s == pytest.approx(sim(inst, start))


@pytest.mark.parametrize("seed", [0, 3])
def test_never_worse_than_the_start_and_feasible(seed):
    inst = tiny()
    for start in (bad_plan(inst), greedy(inst)):
        out = anneal(inst, start, time_limit=None, max_evals=300, seed=seed)
        assert check_plan(inst, out) == []
        assert sim(inst, out) <= sim(inst, start) * (1 + 1e-12)
        assert out.solver.evaluations >= 1 and out.solver.candidates == 300


def test_same_seed_and_budget_give_the_same_plan():
    inst = tiny()
    a = anneal(inst, bad_plan(inst), time_limit=None, max_evals=400, seed=7)
    b = anneal(inst, bad_plan(inst), time_limit=None, max_evals=400, seed=7)
    assert a.model_copy(update={"solver": None}) == b.model_copy(update={"solver": None})
    assert a.solver.evaluations == b.solver.evaluations


def test_pins_are_kept():
    inst = tiny()
    out = anneal(inst, bad_plan(inst), time_limit=None, max_evals=1500, seed=2, stages=3, schedule="gpipe",
                 require=["a", "b"])
    assert out.num_stages == 3 and out.schedule == "gpipe"
    assert {d for row in out.placement for d in row} == {"a", "b"}
    assert check_plan(inst, out) == []


def test_cost_objective_scores_the_simulated_cost():
    inst = make_instance([("a", 3, 1.0), ("b", 3, 5.0)], [("a", "b", 1.0, 20.0)], global_batch_size=8,
                         options={"objective": "cost"})
    start = bad_plan(inst)
    out = anneal(inst, start, time_limit=None, max_evals=1500, seed=0)
    ev_out, ev_start = Evaluator(inst, out), Evaluator(inst, start)
    c_out = float(ev_out.cost(ev_out.iteration_times())[0])
    c_start = float(ev_start.cost(ev_start.iteration_times())[0])
    assert c_out <= c_start and out.solver.end_s == pytest.approx(c_out)
    assert simulated_score(inst, out) == pytest.approx(c_out)


def test_wall_clock_budget_is_honoured_loosely():
    import time

    inst = tiny()
    t = time.perf_counter()
    anneal(inst, bad_plan(inst), time_limit=1.0, seed=0)
    assert time.perf_counter() - t < 1.0 + 5.0
