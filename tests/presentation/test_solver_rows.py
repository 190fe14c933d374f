"""The summary's solver rows (issue 28 items 7, 8): each printed (objective,
bound, gap) agrees with itself, and a CP-SAT schedule is credited only to a
plan that runs it -- also after the plan went through its file, where a
``schedule_kept`` of None is left out."""

import re

import pytest

from planner import load_instance, plan as make_plan
from planner.problem.plan import ExplicitSchedule, Plan
from planner.presentation.report import solver_rows

CPSAT = {"schedule_status": "optimal", "schedule_makespan_s": 26.61, "schedule_bound_s": 26.0,
         "schedule_gap": 0.0229, "schedule_time_s": 3.0}


@pytest.fixture(scope="module")
def base():
    inst = load_instance("tiny-3dc")
    return inst, make_plan(inst)


def _rows(inst, p):
    p = Plan.from_json(p.stamped(inst).to_json())  # through the file, as evaluate and report see it
    return dict(solver_rows(inst, p))


def test_cpsat_figures_only_for_a_plan_that_runs_its_schedule(base):
    inst, p = base
    info = p.solver.model_copy(update={**CPSAT, "schedule_kept": None, "schedule_not_kept": "it simulates no faster"})
    row = _rows(inst, p.model_copy(update={"solver": info}))["schedule"]
    assert "not kept: it simulates no faster" in row and "26.6" not in row and "makespan" not in row
    info = p.solver.model_copy(update={**CPSAT, "schedule_kept": None})  # older files: no reason recorded
    assert "not kept" in _rows(inst, p.model_copy(update={"solver": info}))["schedule"]
    ops = ExplicitSchedule(ops=[[f"{k}{i}" for i in range(p.num_micro_batches) for k in "FB"]] * p.num_stages)
    info = p.solver.model_copy(update={**CPSAT, "schedule_kept": "cpsat"})
    row = _rows(inst, p.model_copy(update={"solver": info, "schedule": ops}))["schedule"]
    assert "makespan 26.61 s" in row and "not kept" not in row
    gap = float(re.search(r"gap ([0-9.]+)%", row).group(1)) / 100
    assert gap == pytest.approx((26.61 - 26.0) / 26.61, abs=5e-4)


def test_the_printed_gap_is_the_one_of_the_printed_objective_and_bound(base):
    inst, p = base
    info = p.solver.model_copy(update={"objective": 14.69, "bound": 14.04, "gap": 0.001})  # a stale gap
    row = _rows(inst, p.model_copy(update={"solver": info}))["solver"]
    o, b, g = re.search(r"objective ([0-9.]+), bound ([0-9.]+), gap ([0-9.]+)%", row).groups()
    assert float(g) / 100 == pytest.approx((float(o) - float(b)) / float(o), abs=5e-4)
