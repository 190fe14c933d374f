"""The portfolio ``--solver auto`` (planner.solvers.portfolio)."""

import time

import pytest
from click.testing import CliRunner

from helpers import brute_force, make_instance
from planner.cli import main
from planner.scoring.evaluator import Evaluator, check_plan
from planner.solvers.cpsat import cpsat
from planner.solvers.portfolio import auto
from planner.solvers.registry import plan

LIMIT = 6.0


def tiny():
    return make_instance([("a", 3), ("b", 3)], [("a", "b", 1.0, 20.0)], global_batch_size=8)


def slow_wan():
    # a bigger model on a slow link: the placement matters, the stage count too
    from helpers import tiny_model

    return make_instance([("a", 2), ("b", 2), ("c", 1)], [("a", "b", 0.5, 30.0), ("b", "c", 2.0, 5.0)],
                         model=tiny_model(layers=2, hidden=512, vocab=1000), global_batch_size=4)


def sim(inst, p):
    return float(Evaluator(inst, p).iteration_times()[0])


def boom(instance, **_):
    raise RuntimeError("engine exploded")


@pytest.mark.parametrize("make", [tiny, slow_wan])
def test_auto_no_slower_than_greedy_bound_valid_status_honest(make):
    inst = make()
    t = time.perf_counter()
    p = plan(inst, solver="auto", time_limit=LIMIT, seed=0)
    wall = time.perf_counter() - t
    assert wall <= LIMIT + 5.0
    assert check_plan(inst, p) == []
    g = plan(inst, solver="greedy")
    assert sim(inst, p) <= sim(inst, g) * (1 + 1e-12)
    best_est, best_T, _ = brute_force(inst)
    info = p.solver
    assert info.name == "auto" and info.bound is not None
    assert info.bound <= best_T * (1 + 1e-9)  # a valid lower bound on the simulated time
    assert info.estimate_bound <= best_est * (1 + 1e-9)  # a valid lower bound on T_est (named schedules)
    te = float(Evaluator(inst, p).estimate_times()[0])
    if info.estimate_status == "optimal" and isinstance(p.schedule, str):  # the proven T_est optimum
        assert te <= best_est * (1 + 1e-3) + 1e-15
    else:
        assert info.estimate_status in ("optimal", "feasible", "time_limit")
    if info.status == "optimal":  # proven against the instance's bound, valid for every plan
        assert sim(inst, p) <= best_T * (1 + 1e-3)
    else:
        assert info.status in ("feasible", "time_limit")
    assert info.incumbent and set(info.engines) >= {"greedy", "milp", "cpsat"}


def instance_wide_bound(monkeypatch):
    """The instance's bound without its per-shape part (issue 29): on ``tiny()`` that part
    equals the optimum, so auto would stop at once with greedy's plan proven optimal and
    the engines and the annealing these tests watch would not run."""
    import planner.scoring.bounds as bounds

    monkeypatch.setattr(bounds, "SHAPE_BOUND_MAX_DOMAINS", 0)


def test_never_optimal_when_the_returned_plan_is_not_the_proven_optimum(monkeypatch):
    # an "annealing" that claims a faster simulation for a plan whose T_est is above
    # the optimum the engines prove: auto takes it, and must not call it optimal
    import planner.solvers.portfolio as pf
    from planner import Plan
    from planner.problem.plan import SolverInfo

    inst = tiny()
    best_est, _, _ = brute_force(inst)
    worse = Plan.build([(0, 1), (1, 2), (2, 4)], [["a", "b", "a"], ["b", "a", "b"]], tp=1,
                       micro_batch_size=1, instance=inst, schedule="gpipe")
    assert float(Evaluator(inst, worse).estimate_times()[0]) > best_est * 1.01

    def fake_anneal(instance, start, **_):
        return worse.model_copy(update={"solver": SolverInfo(name="anneal", status="heuristic", end_s=0.0)})

    monkeypatch.setattr(pf, "anneal", fake_anneal)
    # deterministic: the annealing runs whatever the machine's load (by the clock it may find no time left)
    instance_wide_bound(monkeypatch)
    p = auto(inst, time_limit=LIMIT, seed=0, refine_schedule=False, deterministic=True)
    assert p.placement == worse.placement and p.solver.incumbent.endswith("+anneal")
    assert p.solver.status != "optimal"
    assert p.solver.bound <= best_est * (1 + 1e-9)
    te = float(Evaluator(inst, p).estimate_times()[0])
    assert p.solver.gap == pytest.approx((te - p.solver.bound) / te)


def test_the_per_shape_bound_proves_the_tiny_optimum():
    # issue 29: the bound (valid for every schedule) meets the brute-force optimum here,
    # so auto's plan is claimed optimal over every plan, not only over T_est
    inst = tiny()
    _, best_T, _ = brute_force(inst)
    p = auto(inst, time_limit=LIMIT, seed=0)
    assert p.solver.bound == pytest.approx(best_T, rel=1e-9)
    assert p.solver.status == "optimal"
    assert float(Evaluator(inst, p).iteration_times()[0]) <= best_T * (1 + 1e-9)


def test_an_engine_that_raises_does_not_break_auto(monkeypatch):
    instance_wide_bound(monkeypatch)
    inst = tiny()
    t = time.process_time()
    # deterministic: the engines are collected whatever the load (by the clock a loaded machine may cut
    # the failing engine off before its process has even started, "cut off at the deadline")
    p = auto(inst, time_limit=LIMIT, seed=0, engines={"milp": boom, "cpsat": cpsat}, refine_schedule=False,
             deterministic=True)
    # issue 29: deterministic mode may take longer than the limit on a loaded machine (its contract); what
    # its work units promise is this process's work within the budget (CPU time, whatever the load)
    assert time.process_time() - t <= LIMIT
    assert check_plan(inst, p) == []
    assert p.solver.engines["milp"].startswith("failed") and "exploded" in p.solver.engines["milp"]
    assert p.solver.status != "optimal" or "optimal" in p.solver.engines["cpsat"]


def test_every_engine_failing_still_gives_greedy_and_the_annealing(monkeypatch):
    instance_wide_bound(monkeypatch)
    inst = tiny()
    p = auto(inst, time_limit=4.0, seed=0, engines={"x": boom}, refine_schedule=False)
    assert check_plan(inst, p) == [] and p.solver.status == "time_limit"
    assert p.solver.incumbent.startswith("greedy")


@pytest.mark.slow
def test_deterministic_mode_is_reproducible():
    inst = slow_wan()
    a = auto(inst, time_limit=LIMIT, seed=3, deterministic=True, refine_schedule=False)
    b = auto(inst, time_limit=LIMIT, seed=3, deterministic=True, refine_schedule=False)
    assert a.model_copy(update={"solver": None}) == b.model_copy(update={"solver": None})
    # issue 29: the MILP has a deterministic budget now (HiGHS work) and stays in the portfolio
    assert "milp" in a.solver.engines and not a.solver.engines["milp"].startswith("left out")


def test_cli_runs_auto_and_names_the_incumbent():
    res = CliRunner().invoke(main, ["plan", "tiny-line", "--solver", "auto", "--time-limit", str(LIMIT), "-q"])
    assert res.exit_code == 0, res.output
    assert "auto: plan from" in res.output
    assert any(w in res.output.split("auto: plan from", 1)[1] for w in ("greedy", "milp", "cpsat"))
