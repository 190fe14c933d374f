"""The shape search on an executor (planner.solvers.executor; ``planner plan --executor``).

A wave's shapes are solved with what the waves before it established, so with
deterministic budgets the plan and bound cannot depend on where the shapes ran.
"""

import pytest
from click.testing import CliRunner

import planner
from planner.cli import main
from planner.solvers.cpsat import cpsat
from planner.solvers.executor import make_executor

BUDGET = 0.1  # CP-SAT deterministic seconds on tiny-line: some shapes are cut short (status time_limit)


def figures(p):
    return (p.replicas, p.tp, p.micro_batch_size, p.schedule, p.bounds(), p.placement,
            p.solver.status, p.solver.objective, p.solver.bound, p.solver.model_extra["deterministic_time"])


def run(executor, jobs):
    return cpsat(planner.load_instance("tiny-line"), time_limit=BUDGET, deterministic=True, workers=1, seed=0,
                 executor=executor, jobs=jobs)


def test_executor_map_keeps_the_order_and_copies_its_arguments():
    state = {"n": 0}

    with make_executor("serial", jobs=3) as ex:
        assert ex.width == 3
        assert ex.map(pow, [(2, 3), (3, 2), (10, 0)]) == [8, 9, 1]
        assert ex.map(dict.setdefault, [(state, "n", 5)]) == [0]
    assert state == {"n": 0}  # each item works on a copy, as a remote worker would
    with pytest.raises(ValueError, match="executor"):
        make_executor("threads")


def test_waves_of_one_are_the_sequential_search():
    a, b = run(None, None), run("serial", 1)
    assert figures(a) == figures(b)
    assert a.solver.status == "time_limit"  # the budget cut some shapes short: the test is not vacuous


@pytest.mark.slow
def test_serial_and_ray_give_identical_plans_and_bounds():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        here, there = run("serial", 2), run("ray", 2)
    finally:
        ray.shutdown()
    assert figures(here) == figures(there)
    assert here.solver.bound <= here.solver.objective


def test_cli_executor_options_are_checked():
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "greedy", "--executor", "serial", "-q"])
    assert r.exit_code == 2 and "--executor" in r.output
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "cpsat", "--jobs", "2", "-q"])
    assert r.exit_code == 2 and "--executor" in r.output
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "cpsat", "--executor", "serial",
                                  "--address", "auto", "-q"])
    assert r.exit_code == 2 and "--address" in r.output
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "cpsat", "--executor", "serial", "--jobs", "2",
                                  "--deterministic", "--time-limit", "2", "--no-refine-schedule", "--json", "-q"])
    assert r.exit_code == 0, r.output
