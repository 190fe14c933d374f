"""Issue 29, "Reproducible": deterministic work units (planner.solvers.workunits) make the
MILP and a seeded ``auto`` give the same plan for the same command whatever the load; the
wall clock stays a backstop."""

import subprocess
import sys
import time

import pytest

from helpers import make_instance, tiny_model
from planner.scoring.evaluator import check_plan
from planner.solvers import stop
from planner.solvers.anneal import anneal
from planner.solvers.greedy import greedy
from planner.solvers.highs import MatrixHighs, highs_work
from planner.solvers.milp import milp
from planner.solvers.portfolio import auto
from planner.solvers.workunits import MOVE_S, sim_seconds


def slow_wan():
    # a bigger model on a slow link: the placement matters, the stage count too
    return make_instance([("a", 2), ("b", 2), ("c", 1)], [("a", "b", 0.5, 30.0), ("b", "c", 2.0, 5.0)],
                         model=tiny_model(layers=2, hidden=512, vocab=1000), global_batch_size=4)


def bare(p):
    return p.model_copy(update={"solver": None, "predicted": None})


class busy_neighbour:
    """A CPU-bound python process beside the test (the load the work units must not feel)."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def knapsack():
    """A small MILP that needs branching: a 0/1 knapsack of 50 items under 5 capacities (HiGHS
    branches on it: hundreds of simplex iterations, a dozen nodes)."""
    import random

    import pyomo.environ as pyo

    r = random.Random(1)
    n, k = 50, 5
    w = [[r.randint(5, 60) for _ in range(n)] for _ in range(k)]
    v = [r.randint(10, 80) for _ in range(n)]
    M = pyo.ConcreteModel()
    M.x = pyo.Var(range(n), domain=pyo.Binary)
    M.c = pyo.ConstraintList()
    for j in range(k):
        M.c.add(sum(w[j][i] * M.x[i] for i in range(n)) <= sum(w[j]) // 3)
    M.obj = pyo.Objective(expr=-sum(v[i] * M.x[i] for i in range(n)), sense=pyo.minimize)
    return M


def test_highs_work_limit_stops_by_count_and_reports_the_work():
    full = MatrixHighs(seed=0).solve(knapsack())
    assert full.status == "optimal" and full.checks > 0 and not full.cut
    # the reported work is the closed form of the counts HiGHS reported
    assert full.work == pytest.approx(highs_work(full.size, 0, full.checks)) and full.checks > 0
    # an ample work limit changes nothing; one below the hand-over alone stops before the solve
    ample = MatrixHighs(seed=0, work_limit=100 * full.work).solve(knapsack())
    assert (ample.status, ample.objective, ample.checks, ample.work) == \
        (full.status, full.objective, full.checks, full.work)
    none = MatrixHighs(seed=0, work_limit=0.5 * highs_work(full.size)).solve(knapsack())
    assert none.cut and none.status == "time_limit" and none.checks == 0
    # a limit inside the solve: stopped by the count, at a point the count decides (repeatable)
    mid = 0.5 * (highs_work(full.size) + full.work)
    a = MatrixHighs(seed=0, work_limit=mid).solve(knapsack())
    b = MatrixHighs(seed=0, work_limit=mid).solve(knapsack())
    assert a.cut and a.work >= mid and a.work < full.work
    assert (a.status, a.objective, a.bound, a.checks, a.work) == (b.status, b.objective, b.bound, b.checks, b.work)


def test_milp_deterministic_same_plan_and_bound_under_load():
    inst = slow_wan()
    a = milp(inst, time_limit=0.3, seed=0, deterministic=True)
    with busy_neighbour():
        b = milp(inst, time_limit=0.3, seed=0, deterministic=True)
    assert check_plan(inst, a) == []
    assert bare(a) == bare(b)
    for k in ("status", "objective", "bound"):
        assert getattr(a.solver, k) == getattr(b.solver, k)
    spent = a.solver.model_extra["deterministic_time"]
    assert spent == b.solver.model_extra["deterministic_time"] and spent > 0


def test_milp_deterministic_needs_one_thread():
    with pytest.raises(ValueError, match="one thread"):
        milp(slow_wan(), time_limit=0.3, deterministic=True, threads=2)


def test_anneal_max_work_spends_its_budget_and_counts_it():
    inst = slow_wan()
    g = greedy(inst)
    budget = 40 * sim_seconds(g)
    out = anneal(inst, g, time_limit=None, max_work=budget, seed=1)
    si = out.solver
    # it stops at the first candidate past the budget: over it by at most one simulation and one move
    from planner.solvers.workunits import SIM_CALL_S, SIM_OPS_PER_S

    biggest = SIM_CALL_S + inst.max_stages * g.num_micro_batches / SIM_OPS_PER_S
    assert budget <= si.work_s <= budget + biggest + MOVE_S
    # the work is the closed form of what it simulated: a fixed cost per simulation, one per stage x micro-batch

    assert si.work_s == pytest.approx((si.evaluations - 1) * SIM_CALL_S + si.sim_ops / SIM_OPS_PER_S
                                      + si.candidates * MOVE_S)
    assert si.cut_by_clock is False
    again = anneal(inst, g, time_limit=None, max_work=budget, seed=1)
    assert bare(again) == bare(out) and again.solver.candidates == si.candidates


def test_auto_seeded_and_deterministic_same_plan_twice():
    inst = slow_wan()
    runs = [auto(inst, time_limit=4.0, seed=2, deterministic=True, refine_schedule=False) for _ in range(2)]
    assert bare(runs[0]) == bare(runs[1])
    info = runs[0].solver
    assert info.budget == "deterministic" and info.cut_by_clock == []
    assert "milp" in info.engines and not info.engines["milp"].startswith(("left out", "cut"))
    # the seeded default spends the same work units: without a cut by the clock, the same plan
    seeded = auto(inst, time_limit=4.0, seed=2, refine_schedule=False)
    assert seeded.solver.budget == "work units"
    if not seeded.solver.cut_by_clock:
        assert bare(seeded) == bare(runs[0])


def sleepy(instance, **_):
    """An engine far slower than any budget: it hands over greedy's plan only when asked to stop."""
    while not stop.requested():
        time.sleep(0.02)
    return greedy(instance)


def test_the_wall_clock_cuts_a_slow_engine_and_says_so():
    inst = slow_wan()
    t = time.perf_counter()
    p = auto(inst, time_limit=4.0, seed=0, engines={"slow": sleepy}, refine_schedule=False)
    wall = time.perf_counter() - t
    assert wall <= 4.0 + 3.0
    assert check_plan(inst, p) == []
    assert "slow" in p.solver.cut_by_clock
    assert p.solver.engines["slow"].startswith(("cut by the clock", "cut off"))


def test_a_loaded_seeded_run_skips_what_it_has_no_time_left_for(monkeypatch):
    # seeded, greedy, the lean plans and the starts run to completion in counted work, with the
    # budget's end as their backstop; on a machine so loaded that greedy alone outlasts the budget
    # they used to run on after it, unbounded (memory-bound at --time-limit 15 took 48 s)
    from planner.solvers import portfolio

    def slowed(real):
        def run(*args, time_limit=None, **kw):  # a part's work on a loaded machine: its own limit, or 5 s
            time.sleep(5.0 if time_limit is None else min(5.0, time_limit))
            return real(*args, time_limit=time_limit, **kw)
        return run

    real_greedy = portfolio.greedy

    def late_greedy(instance, time_limit=None, **kw):
        time.sleep(2.5)  # past the 2 s budget before the first plan
        return real_greedy(instance, time_limit=time_limit, **kw)

    monkeypatch.setattr(portfolio, "greedy", late_greedy)
    monkeypatch.setattr(portfolio, "lean_plans", slowed(portfolio.lean_plans))
    monkeypatch.setattr(portfolio, "shape_starts", slowed(portfolio.shape_starts))
    inst = slow_wan()
    t = time.perf_counter()
    p = auto(inst, time_limit=2.0, seed=0, engines={"slow": sleepy}, refine_schedule=False)
    assert time.perf_counter() - t <= 2.5 + 2.0  # before: 12.5 s and more (each slowed part in full)
    assert check_plan(inst, p) == []
    assert {"lean plans", "shape starts"} <= set(p.solver.cut_by_clock)


def clocked(instance, **_):
    """An engine whose own wall-clock backstop cut it (as anneal_alone's can on a loaded machine)."""
    return anneal(instance, greedy(instance), time_limit=1e-6, max_work=100.0)


@pytest.mark.parametrize("engine", [sleepy, clocked])
def test_a_deterministic_run_past_its_backstop_says_so(monkeypatch, engine):
    # deterministic mode waits for the work units; past the backstop (a machine loaded far beyond
    # what it allows) the engine is cut, and the plan must not pass for the deterministic one
    from planner.solvers import portfolio

    monkeypatch.setattr(portfolio, "DETERMINISTIC_BACKSTOP", 1.0)
    inst = slow_wan()
    t = time.perf_counter()
    p = auto(inst, time_limit=2.0, seed=0, deterministic=True, engines={"slow": engine}, refine_schedule=False)
    assert time.perf_counter() - t <= 2.0 + 10.0
    assert check_plan(inst, p) == []
    assert p.solver.budget == "deterministic" and p.solver.cut_by_clock == ["slow"]


@pytest.mark.parametrize("deterministic", [True, False])
def test_cli_deterministic_budget_ignores_the_start_up(monkeypatch, deterministic):
    # a slow start-up (a loaded machine) leaves less of --time-limit; with --deterministic the
    # planner still gets the nominal limit (its parts' alone budgets), else what is left
    from click.testing import CliRunner

    import planner.cli as cli

    got, real = {}, cli.run_plan

    def fake_plan(inst, solver, time_limit, **_):
        got["time_limit"] = time_limit
        return real(inst, solver="greedy")

    monkeypatch.setattr(cli, "_own_process", lambda: True)
    monkeypatch.setattr(cli._stop, "process_age_s", lambda: 2.0)
    monkeypatch.setattr(cli, "run_plan", fake_plan)
    args = ["plan", "tiny-line", "--solver", "milp", "--time-limit", "5", "--json", "-q"]
    res = CliRunner().invoke(cli.main, args + (["--deterministic"] if deterministic else []))
    assert res.exit_code == 0, res.output
    assert got["time_limit"] == pytest.approx(5.0 if deterministic else 3.0)


def test_cli_budget_comes_from_the_nominal_time_limit():
    # the work units are a function of --time-limit alone, not of how long the start-up took
    import json

    from click.testing import CliRunner

    from planner.cli import main
    from planner.solvers.registry import IDLE_STARTUP_S, auto_work_s

    res = CliRunner().invoke(main, ["plan", "tiny-line", "--solver", "auto", "--time-limit", "3", "--deterministic",
                                    "--no-refine-schedule", "--json", "-q"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)["solver"]
    assert info["budget"] == "deterministic" and info["cut_by_clock"] == []
    assert info["deterministic_s"] == pytest.approx(auto_work_s(3.0, IDLE_STARTUP_S))
    assert auto_work_s(3.0, IDLE_STARTUP_S) < 3.0
