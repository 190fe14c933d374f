"""benchmarks/v3_no_slowdown.py (issue 24, "No slowdown"): the verdicts, the
summary lines and the tables on made-up rows, the plan's v3 score against the
evaluator called directly, and the module's doctests.  The benchmark itself
(two trees, 60 s per plan) is run by hand, not here."""

import doctest
import json
import math
from pathlib import Path

from benchmarks import v3_no_slowdown as ns
from planner import Evaluator, load_instance
from planner.problem.io import instances_dir, save_plan
from planner.solvers.registry import plan as make_plan

OK = ns.Run(1.0, 0, Path("p.json"), "optimal")
NONE = ns.Run(1.0, 4, None, "time limit before any plan")


def pair(before, after, inst="x", solver="greedy"):
    """A Pair whose plans score ``before`` / ``after`` (None: no plan; "infeasible")."""
    def score(v):
        if v is None:
            return None
        if v == "infeasible":
            return ns.Score(5.0, 5.0, False)
        return ns.Score(v, v, True)

    return ns.Pair(inst, solver, "time", OK if before is not None else NONE, OK if after is not None else NONE,
                   score(before), score(after))


def test_verdicts_follow_the_tolerance_and_missing_plans():
    assert ns.verdict(pair(10.0, 10.0)) == "ok"
    assert ns.verdict(pair(10.0, 10.0 * 1.0009)) == "ok"  # within 0.1%
    assert ns.verdict(pair(10.0, 10.0 * 1.0011)) == "WORSE"
    assert ns.verdict(pair(10.0, 9.0)) == "ok"
    assert ns.verdict(pair(10.0, None)) == "WORSE"  # after lost the plan
    assert ns.verdict(pair(10.0, "infeasible")) == "WORSE"  # v3 refuses after's plan
    assert ns.verdict(pair(None, 10.0)) == "ok (before: none)"
    assert ns.verdict(pair(None, None)) == "n/a (neither)"
    assert ns.ratio(pair(math.inf, math.inf)) == 1.0
    assert ns.ratio(pair(2.0, 3.0)) == 1.5


def test_summary_counts_rows_and_names_the_worst():
    pairs = [pair(10.0, 10.0, "a"), pair(10.0, 12.5, "b", "milp"), pair(4.0, 3.0, "c"),
             pair(1.0, None, "d", "cpsat"), pair(None, None, "e")]
    text = ns.pair_summary(pairs)
    assert text.startswith("Plans: 2 of 4 ")  # a and c; b worse, d lost; e not counted
    assert "Worst ratio 1.2500 (b, milp)" in text and "best 0.7500 (c, greedy)" in text
    assert "d cpsat" in text and "1 row(s) with a plan on neither side" in text
    table = ns.pair_table(pairs)
    assert len(table) == 2 + len(pairs)
    flagged = [row.split(" | ")[0].strip("| ") for row in table[2:] if "WORSE" in row]
    assert flagged == ["b", "d"]


def test_speed_summary_is_the_geometric_mean_of_v3_over_today():
    rows = [ns.Speed("a", "greedy", 200.0, 200.0, 100.0, 0.0), ns.Speed("b", "milp", 100.0, 100.0, 200.0, 0.0)]
    text = ns.speed_summary(rows, 0.05)
    assert "geometric mean 1.00" in text  # sqrt(0.5 * 2)
    assert "worst 0.50 (a, greedy)" in text and "1 of 2 plans slower" in text
    assert [("SLOWER" in r) for r in ns.speed_table(rows, 0.05)[2:]] == [True, False]


def test_rel_diff_against_a_direct_computation():
    a, b = [1.0, 2.0, 4.0], [1.0, 2.2, 4.0]
    assert math.isclose(ns.rel_diff(a, b), 0.2 / 2.2)
    assert ns.rel_diff([math.inf], [1.0]) == math.inf
    assert ns.rel_diff(a, a) == 0.0


def test_plan_key_ignores_what_the_solver_says(tmp_path):
    doc = {"instance": "x", "replicas": 2, "tp": 4, "stages": [[0, 3]], "placement": [["a"], ["b"]],
           "solver": {"name": "greedy", "time_s": 0.1}, "predicted": {"iteration_time_s": 1.0}}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    (tmp_path / "b.json").write_text(json.dumps({**doc, "solver": {"name": "milp", "time_s": 3.0}, "predicted": {}}))
    (tmp_path / "c.json").write_text(json.dumps({**doc, "tp": 8}))
    keys = [ns.plan_key(tmp_path / f"{n}.json") for n in "abc"]
    assert keys[0] == keys[1] != keys[2]


def test_score_v3_is_the_evaluators_v3_time(tmp_path):
    path = instances_dir() / "tiny-3dc.toml"
    inst = load_instance(path, spec=3)
    plan = make_plan(inst, "greedy")
    save_plan(plan, tmp_path / "p.json")
    s = ns.score_v3(path, tmp_path / "p.json", {})
    assert s.feasible and not s.error
    assert s.objective == s.time_s == float(Evaluator(inst, plan, spec=3).iteration_times()[0])
    assert ns.score_v3(path, None, {}) is None
    (tmp_path / "bad.json").write_text("{not json")
    bad = ns.score_v3(path, tmp_path / "bad.json", {})
    assert bad.error and not ns.usable(bad)


def test_doctests():
    assert doctest.testmod(ns).failed == 0
