"""Issue 29, "Dominance": ``auto`` no worse than each of its parts alone at the same
(deterministic) budget, and the mechanisms that make it so (planner.solvers.portfolio)."""

import pytest

from helpers import all_plans, make_instance, tiny_model
from planner.scoring.evaluator import Evaluator, check_plan
from planner.solvers.portfolio import (ALONE_CPSAT_SHARE, DETERMINISTIC_BACKSTOP, alone_engines,
                                       anneal_alone, cpsat_alone)
from planner.solvers.registry import plan, refine, solve_seconds
from planner.solvers.shapesearch import ShapeOutcome, score, shape_search

B = 2.0  # deterministic seconds (CP-SAT, MILP, the annealing)


def tiny():
    return make_instance([("a", 3), ("b", 3)], [("a", "b", 1.0, 20.0)], global_batch_size=8)


def slow_wan():
    return make_instance([("a", 2), ("b", 2), ("c", 1)], [("a", "b", 0.5, 30.0), ("b", "c", 2.0, 5.0)],
                         model=tiny_model(layers=2, hidden=512, vocab=1000), global_batch_size=4)


def parts_alone(inst, budget):
    """Each part alone with the deterministic budget ``budget``, as benchmarks/dominance.py
    --det-compare runs it: name -> the evaluator's objective."""
    solve_s = solve_seconds(budget)[0]
    runs = {"greedy": plan(inst, solver="greedy"),
            "cpsat": plan(inst, solver="cpsat", time_limit=budget, deterministic=True, workers=1),
            "anneal": plan(inst, solver="anneal", time_limit=DETERMINISTIC_BACKSTOP * budget,
                           max_work=solve_s)}
    return {k: p.solver.objective for k, p in runs.items()}


@pytest.mark.slow
@pytest.mark.parametrize("make", [tiny, slow_wan])
def test_deterministic_auto_is_no_worse_than_each_part_alone(make):
    inst = make()
    parts = parts_alone(inst, B)
    got = plan(inst, solver="auto", time_limit=B, deterministic=True)
    assert check_plan(inst, got) == []
    for name, value in parts.items():
        assert got.solver.objective <= value * (1 + 1e-9), (name, value, got.solver.objective)
    assert "anneal" in got.solver.engines  # the annealing alone ran as an engine


def test_cpsat_alone_engine_returns_the_plans_cpsat_alone_computes():
    # the containment argument: the engine's last plan is the very plan plan(solver="cpsat") returns
    inst = slow_wan()
    budget = 3.0  # the refinement's share, a quarter of 2.7 s, is above plan()'s minimum, 0.5 s
    alone = plan(inst, solver="cpsat", time_limit=budget, deterministic=True, workers=1)
    got = cpsat_alone(inst, solve_seconds(budget)[0], deterministic=True, workers=1, refine=refine)
    assert len(got) == 2
    key = lambda p: (p.bounds(), p.placement, p.schedule, p.replicas, p.tp, p.micro_batch_size)  # noqa: E731
    assert key(got[-1]) == key(alone)
    # the first is CP-SAT's own plan, before the refinement: never faster than the refined one
    ev0, ev1 = Evaluator(inst, got[0]), Evaluator(inst, got[1])
    assert float(ev1.iteration_times()[0]) <= float(ev0.iteration_times()[0]) * (1 + 1e-12)
    assert 0 < ALONE_CPSAT_SHARE < 1


def test_alone_engines_are_the_annealing_alone_unless_pinned():
    assert alone_engines(False) == {"anneal": anneal_alone}
    assert alone_engines(True) == {}  # pinned: the annealing alone takes no pins


def test_a_start_handed_to_the_shape_search_is_used(monkeypatch):
    # the search's own incumbents made poor (greedy's plan the worst feasible plan, no per-shape
    # warm start) and an engine that finds nothing: the result is the start, and every per-shape
    # solve is handed the start's objective as its incumbent (its cutoff)
    import planner.solvers.shapesearch as ss

    inst = slow_wan()
    feasible = sorted((p for p in all_plans(inst) if not check_plan(inst, p)), key=lambda p: score(inst, p))
    best, worst = feasible[0], feasible[-1]
    assert score(inst, best) < score(inst, worst) * (1 - 1e-6)
    monkeypatch.setattr(ss, "greedy", lambda instance, **_: worst)
    monkeypatch.setattr(ss, "shape_plan", lambda *a, **k: None)
    seen = []

    def nothing(shape, share, ctx):
        seen.append(ctx.incumbent)
        return ShapeOutcome("unknown")

    alone = shape_search(inst, nothing, name="t", time_limit=1.0, deterministic=True, rounds=1)
    assert score(inst, alone) == pytest.approx(score(inst, worst), rel=1e-12)  # no start: the poor incumbent
    seen.clear()
    got = shape_search(inst, nothing, name="t", time_limit=1.0, deterministic=True, start=best, rounds=1)
    assert score(inst, got) <= score(inst, best) * (1 + 1e-12)
    assert seen and max(seen) <= score(inst, best) * (1 + 1e-12)
