"""Robust planning with the exact solvers (planner.robust)."""

import numpy as np
import pytest
from click.testing import CliRunner

from planner import load_instance, plan as make_plan
from planner.cli import main
from planner.scoring.evaluator import check_plan
from planner.solvers.greedy import sample_states
from planner.problem.network import NetworkStates
from planner.solvers.robust import score_over, statistic_instance


def test_statistic_instance_is_the_per_link_statistic():
    inst = load_instance("tiny-3dc")
    L = len(inst.links)
    bw = np.array([[10.0 * (k + 1) + i for i in range(L)] for k in range(20)])
    lat = np.array([[1.0 * k + 2 * i for i in range(L)] for k in range(20)])
    st = NetworkStates(bw, lat)
    m = statistic_instance(inst, st, "mean")
    p = statistic_instance(inst, st, "p95")
    for i, link in enumerate(m.links):
        assert link.bandwidth_gbps == pytest.approx(bw[:, i].mean())
        assert link.latency_ms == pytest.approx(lat[:, i].mean())
    for i, link in enumerate(p.links):
        assert link.bandwidth_gbps == pytest.approx(np.percentile(bw[:, i], 5))  # pessimistic: low bandwidth
        assert link.latency_ms == pytest.approx(np.percentile(lat[:, i], 95))  # and high latency
    with pytest.raises(ValueError):
        statistic_instance(inst, st, "median")


@pytest.mark.parametrize("stat", ["mean", "p95"])
def test_robust_milp_never_worse_than_greedy_on_its_statistic(stat):
    inst = load_instance("tiny-3dc")
    k, seed = 32, 1
    states = sample_states(inst, k, seed)
    r = make_plan(inst, solver="milp", time_limit=8, robust=k, robust_stat=stat, seed=seed)
    assert not check_plan(inst, r)
    got = score_over(inst, r, states, stat)
    assert r.solver.model_extra["robust_score"] == pytest.approx(got, rel=1e-12)
    for other in (make_plan(inst, solver="greedy"), make_plan(inst, solver="greedy", robust=k, robust_stat=stat,
                                                                  seed=seed)):
        assert got <= score_over(inst, other, states, stat) * (1 + 1e-12)


def test_cli_robust_with_milp_and_refusal_for_rl():
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "milp", "--time-limit", "5", "--robust", "16",
                                  "-q"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "rl", "--robust", "16", "-q"])
    assert r.exit_code == 2 and "--robust" in r.output
