"""Issue 24 ("the estimate"): simulated / estimated is 1 for gpipe plans (SPEC 7 makes
T_est exact for gpipe-shaped flushes) and, for other plans, reported with the plan
(``predicted.simulated_over_estimate``, the benchmark's ``sim_over_est``) and flagged
in the summary above 1.01 -- never a reason to discard a plan."""

import dataclasses

import pytest

from planner import load_instance
from planner import plan as make_plan
from planner.bench import random_plan
from planner.presentation.report import summary_rows
from planner.scoring.evaluator import ESTIMATE_FLAG, Evaluator


def feasible_plans(inst, n):
    """``n`` random feasible plans (seeded), every shape, both schedules."""
    return [p for p in (random_plan(inst, seed=s) for s in range(n)) if p is not None]


def test_gpipe_plans_simulate_at_their_estimate_and_others_are_flagged_above_1_01():
    inst = load_instance("tiny-3dc")
    seen = {"gpipe": 0, False: 0, True: 0}
    for p in feasible_plans(inst, 120):
        ev = Evaluator(inst, p).evaluate()
        ratio = ev.iteration_time_s / ev.estimate_s
        row = dict(summary_rows(inst, p, ev))["iteration"]
        flagged = "above the estimate" in row
        assert flagged == (ratio > ESTIMATE_FLAG), (ratio, row)
        if p.schedule_kind == "gpipe":
            assert abs(ratio - 1) <= 1e-3, ratio  # SPEC 7: exact for gpipe-shaped flushes
            seen["gpipe"] += 1
        else:
            seen[flagged] += 1
    assert seen["gpipe"] and seen[False], seen  # both kinds occur: the check is not vacuous
    # under SPEC v3 T_est of 1f1b plans is almost never below T by 1% (max 1.005 over 180 random
    # plans of six packaged instances): the flag itself, on the same plan with T moved around 1.01
    ev = Evaluator(inst, p).evaluate()
    for r, want in ((1.0099, False), (1.0101, True), (1.5, True)):
        moved = dataclasses.replace(ev, iteration_time_s=ev.estimate_s * r)
        row = dict(summary_rows(inst, p, moved))["iteration"]
        assert ("above the estimate" in row) == want, (r, row)
    assert f"{0.5:.1%} above" in dict(summary_rows(inst, p, moved))["iteration"]


def test_the_plan_carries_the_ratio():
    inst = load_instance("two-dc")
    p = make_plan(inst, solver="greedy")
    e = Evaluator(inst, p).evaluate()
    assert p.predicted.simulated_over_estimate == pytest.approx(e.iteration_time_s / e.estimate_s, rel=1e-12)
