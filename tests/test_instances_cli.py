"""Every packaged instance: validates, gets a feasible greedy plan whose
figures the evaluator reproduces, and round-trips through the CLI."""

import json

import pytest
from click.testing import CliRunner

from planner import Plan, evaluate, load_instance, load_plan, plan as make_plan
from helpers import over_capacity_plan_file, unit_instances
from planner.cli import main
from planner.problem.io import DEFAULT_INSTANCE, available

INSTANCES = unit_instances()  # the national-scale ones: tests/problem/test_large_instances.py


def test_regimes_present():
    assert DEFAULT_INSTANCE in INSTANCES
    assert len(INSTANCES) >= 9
    objectives = {load_instance(n).options.objective for n in INSTANCES}
    assert objectives == {"time", "cost"}
    assert max(len(load_instance(n).domains) for n in INSTANCES) >= 16


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in ("edwc-full", "memory-bound") else n
                                  for n in INSTANCES])  # those two: 40 s and more each
def test_greedy_plan_feasible_and_reproducible(name):
    from planner.problem.errors import InputError
    from planner.solvers.registry import GPU_TYPE_SOLVERS

    inst = load_instance(name)
    if inst.heterogeneous and "greedy" not in GPU_TYPE_SOLVERS:
        # the GPU-type instances (issue 25) until greedy plans with types: refused, naming the field
        with pytest.raises(InputError) as err:
            make_plan(inst, solver="greedy")
        assert err.value.field.startswith("domains[") and err.value.field.endswith("].gpu")
        return
    p = make_plan(inst, solver="greedy")
    ev = evaluate(inst, p)
    assert ev.feasible, ev.violations
    assert p.solver.status == "heuristic"
    assert ev.iteration_time_s == pytest.approx(p.predicted.iteration_time_s, rel=1e-12)
    assert ev.estimate_s == pytest.approx(p.predicted.estimate_s, rel=1e-12)
    assert ev.iteration_time_s >= ev.lower_bound_s * (1 - 1e-9)
    used = p.gpus_per_domain()
    assert all(used[d] <= inst.domain(d).gpus for d in used)
    assert Plan.from_json(p.to_json()) == p


def test_cli_plan_out_and_evaluate(tmp_path):
    out = tmp_path / "plan.json"
    runner = CliRunner()
    res = runner.invoke(main, ["plan", "tiny-line", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["solver"]["name"] == "greedy" and doc["evaluation"]["feasible"] is True
    res2 = runner.invoke(main, ["evaluate", "tiny-line", str(out), "--json"])
    assert res2.exit_code == 0
    ev = json.loads(res2.stdout)
    assert ev["iteration_time_s"] == pytest.approx(doc["predicted"]["iteration_time_s"], rel=1e-12)
    inst = load_instance("tiny-line")
    assert load_plan(out, inst).placement == doc["placement"]


def test_cli_default_instance_summary():
    res = CliRunner().invoke(main, ["plan"])
    assert res.exit_code == 0, res.output
    for word in ("stages", "replica", "throughput", "lower bound", DEFAULT_INSTANCE):
        assert word in res.stdout


def test_cli_evaluate_infeasible_plan_exit_3(tmp_path):
    path, small = over_capacity_plan_file(tmp_path)  # every stage in the smallest domain
    res = CliRunner().invoke(main, ["evaluate", "tiny-3dc", str(path), "--json"])
    assert res.exit_code == 3
    doc = json.loads(res.stdout)
    assert doc["feasible"] is False and doc["violations"][0]["rule"] == "gpu_capacity"
    assert small in doc["violations"][0]["message"]


def test_cli_list():
    res = CliRunner().invoke(main, ["list"])
    assert res.exit_code == 0
    assert DEFAULT_INSTANCE in res.stdout and "llama2-70b" in res.stdout


def test_cli_pictures(tmp_path):
    g, m = tmp_path / "g.png", tmp_path / "m.png"
    res = CliRunner().invoke(main, ["plan", "tiny-3dc", "--gantt", str(g), "--map", str(m), "-q"])
    assert res.exit_code == 0, res.output
    assert g.stat().st_size > 5000 and m.stat().st_size > 5000
    assert "Gantt chart written" in res.stdout


def test_evaluate_prints_the_summary_of_a_plan_file(tmp_path):
    """`planner evaluate INSTANCE PLAN` (no --json) prints the summary and exits 0."""
    p = tmp_path / "p.json"
    res = CliRunner().invoke(main, ["plan", "tiny-3dc", "--out", str(p), "-q"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["evaluate", "tiny-3dc", str(p)])
    assert res.exit_code == 0, res.output
    assert "tiny-3dc" in res.output and "internal error" not in res.output
