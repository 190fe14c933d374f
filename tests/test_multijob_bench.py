"""benchmarks/multijob.py (issue 27): the goal verdicts on made-up rows, the cost mixes'
deadlines, the references' key, and a ``--quick`` run end to end (its results file names
the command and commit, prints every goal met or missed, has a row for the planner and
every baseline, draws its picture, stores the references and reuses them)."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import multijob as B
from helpers import benchmark_module, readme_block


def row(mix, method, value=None, min_rho=None, time_s=1.0, master_lp=None, met_weight=None, met=None,
        jobs=2, cost=None, feasible=True):
    return B.Row(mix, "x", method, value=value, min_rho=min_rho, time_s=time_s, master_lp=master_lp,
                 met_weight=met_weight, met=met, jobs=jobs, cost=cost, feasible=feasible)


def verdicts(goals):
    return [ok for _, ok, _ in goals]


def test_maxmin_goals_follow_the_thresholds():
    rows = [row("a", "planner", 0.5, 0.5, 10.0, 0.504), row("a", "wan_blind_maxmin", 0.4, 0.4),
            row("a", "static_split", 0.45, 0.45),
            row("b", "planner", 0.9, 0.9, 10.0, 0.9), row("b", "wan_blind_maxmin", 0.6, 0.6)]
    # ratios 1.25 and 1.5: median 1.375; lp within 1%; never below; within 60 s
    assert verdicts(B.maxmin_goals(rows, 60.0)) == [True, True, True, True]
    assert verdicts(B.maxmin_goals(rows, 5.0))[0] is False  # 10 s > 5 s
    rows[0] = row("a", "planner", 0.5, 0.5, 10.0, 0.51)  # master_lp 2% above
    assert verdicts(B.maxmin_goals(rows, 60.0))[1] is False
    rows[2] = row("a", "static_split", 0.55, 0.55)  # a baseline beats the planner
    g = B.maxmin_goals(rows, 60.0)
    assert g[2][1] is False and "static_split" in g[2][2]
    rows[1] = row("a", "wan_blind_maxmin", 0.45, 0.45)  # ratio 1.11 and 1.5: median 1.31
    assert verdicts(B.maxmin_goals(rows, 60.0))[3] is True
    rows[3] = row("b", "planner", 0.66, 0.66, 10.0, 0.66)  # ratios 1.11, 1.10: median < 1.25
    assert verdicts(B.maxmin_goals(rows, 60.0))[3] is False
    # an infeasible baseline does not count against the planner; a planner without a plan fails
    assert verdicts(B.maxmin_goals([row("a", "planner", 0.5, 0.5, 1.0, 0.5),
                                    row("a", "edf", 0.9, 0.9, feasible=False),
                                    row("a", "wan_blind_maxmin", 0.2, 0.2)], 60.0)) == [True] * 4
    assert not any(verdicts(B.maxmin_goals([row("a", "planner"), row("a", "wan_blind_maxmin", 0.2, 0.2)], 60.0)))


def test_deadline_and_cost_goals():
    d = [row("a", "planner", met_weight=6.0), row("a", "edf", met_weight=2.0),
         row("b", "planner", met_weight=1.5), row("b", "edf", met_weight=3.0)]
    assert verdicts(B.deadline_goals(d)) == [True]  # 7.5 >= 1.46 x 5 = 7.3
    d[2] = row("b", "planner", met_weight=0.0)
    assert verdicts(B.deadline_goals(d)) == [False]  # 6 < 1.46 x 5
    c = [row("a", "planner", cost=70.0, met=2), row("a", "static_split", cost=100.0, met=2),
         row("b", "planner", cost=90.0, met=2), row("b", "static_split", cost=100.0, met=2)]
    assert verdicts(B.cost_goals(c, [])) == [True]  # median saving 20%
    c[0] = row("a", "planner", cost=80.0, met=1)  # a deadline missed
    assert verdicts(B.cost_goals(c, [])) == [False]
    c[0] = row("a", "planner", cost=95.0, met=2)  # savings 5%, 10%
    assert verdicts(B.cost_goals(c, ["z"])) == [False]


def test_deadline_goal_arithmetic():
    """7 vs 1.46 x 5 = 7.3: missed; 7.3 exactly: met."""
    d = [row("a", "planner", met_weight=7.0), row("a", "edf", met_weight=5.0)]
    assert verdicts(B.deadline_goals(d)) == [False]
    d[0] = row("a", "planner", met_weight=7.3)
    assert verdicts(B.deadline_goals(d)) == [True]


def test_cost_mix_deadlines_round_up_the_completions():
    data = {"name": "m", "options": {"multi_objective": "maxmin"},
            "jobs": [{"name": "a", "deadline_hours": 0.1}, {"name": "b"}]}
    comp = {"a": 12345.678, "b": 3600.0 * 7.123456789}
    out = B.with_deadlines(data, comp)
    assert out["options"]["multi_objective"] == "cost"
    for j in out["jobs"]:
        h = comp[j["name"]] / 3600
        assert h <= j["deadline_hours"] <= h * (1 + 1.01e-5)
    assert data["jobs"][0]["deadline_hours"] == 0.1  # the input is not changed


def test_references_key_ignores_what_references_do_not_depend_on():
    data = {"name": "m", "gpu": {"name": "g"}, "domains": [{"name": "a", "gpus": 8}],
            "options": {"max_stages": 4, "multi_objective": "maxmin"},
            "jobs": [{"name": "j", "model": "x", "iterations": 5, "weight": 1.0, "deadline_hours": 2.0}]}
    k = B.refs_key(data)
    same = dict(data, name="other", options={"max_stages": 4, "multi_objective": "cost"},
                jobs=[{"name": "j", "model": "x", "iterations": 9, "weight": 5.0}])
    assert B.refs_key(same) == k
    assert B.refs_key(dict(data, jobs=[dict(data["jobs"][0], model="y")])) != k
    assert B.refs_key(dict(data, domains=[{"name": "a", "gpus": 16}])) != k


@pytest.mark.slow
def test_quick_run_writes_the_results_and_reuses_the_references(tmp_path):
    args = ["--quick", "--jobs", "2", "--time-limit", "3", "--ref-limit", "0.5", "--objectives", "maxmin",
            "--results-dir", str(tmp_path)]
    assert B.main(args) == 0
    text = (tmp_path / "multijob_quick.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "Command: `python benchmarks/multijob.py " + " ".join(args) + "`"
    assert lines[2].startswith("Commit: ") and len(lines[2]) > len("Commit: ")
    goals = [ln for ln in lines if ln.startswith("- met: maxmin") or ln.startswith("- **missed**: maxmin")]
    assert len(goals) == 4
    from planner.solvers.multijob.baselines import BASELINES

    table = [ln for ln in lines if ln.startswith("| aws-multiregion-2j-s0 |")]
    assert [ln.split(" | ")[1] for ln in table] == ["planner"] + list(BASELINES)
    assert (tmp_path / "multijob_quick_maxmin.png").stat().st_size > 1000
    store = json.loads((tmp_path / "multijob_quick_refs.json").read_text())
    entry = store["aws-multiregion-2j-s0"]
    assert entry["method"] == {"solver": "greedy", "time_limit_per_job_s": 0.5, "seed": 0}
    assert len(entry["references"]) == 2 and all(v > 0 and math.isfinite(v) for v in entry["references"].values())
    # the stored references are reused: a second lookup computes nothing
    from planner.problem.mixes import generate_mix
    from planner.cli import mix_catalogue

    data = generate_mix(B.base_data("aws-multiregion"), 2, 0, mix_catalogue(B.QUICK_MODELS), objective="maxmin",
                        name="aws-multiregion-2j-s0")
    refs, new = B.cached_references(B.load_mix(data), data, store, 0.5)
    assert new is False and refs == entry["references"]
    refs, new = B.cached_references(B.load_mix(data), data, store, 0.25)  # another method: computed again
    assert new is True


@pytest.mark.parametrize("objective", ["maxmin", "deadline", "cost"])
def test_picture_draws_every_objective(tmp_path, objective):
    rows = [B.Row("a", objective, "planner", value=1.0, min_rho=0.5, met_weight=2.0, cost=80.0),
            B.Row("a", objective, "static_split", value=0.5, min_rho=0.25, met_weight=1.0, cost=100.0)]
    B.picture(rows, objective, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000

def test_readme_several_jobs_table_matches_the_committed_results():
    """The README's several-jobs table is what benchmarks/readme_multijob.py makes of the committed
    results files, and it carries every objective's goal lines (maxmin, deadline, cost, scale)."""
    mod = benchmark_module("readme_multijob")
    assert mod.main(["--check"]) == 0, "run benchmarks/readme_multijob.py"
    block = readme_block(mod)
    for objective in ("maxmin", "deadline", "cost", "scale"):
        assert f"| {objective} |" in block
