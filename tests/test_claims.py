"""Issue 19, "say only what is true": the tool's claims and everyday output.

Each test states a property a wrong answer would break: no input file is
lost, a plan file written by any command is read by every command, pins are
honoured or refused, statuses are not stronger than the search behind them.
"""

import json
import math
import shutil

import pytest
from click.testing import CliRunner

from planner import Plan
from planner.cli import main
from planner.problem.io import instances_dir


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _strict_loads(text):
    def bad(token):
        raise AssertionError(f"non-strict JSON token {token}")
    return json.loads(text, parse_constant=bad)


# -- item 1: data loss ---------------------------------------------------------

def test_plan_out_refuses_to_overwrite_its_instance(tmp_path):
    inst = tmp_path / "two-dc.toml"
    shutil.copy(instances_dir() / "tiny-3dc.toml", inst)
    before = inst.read_bytes()
    res = run("plan", inst, "--out", inst, "-q")
    assert res.exit_code == 2, res.output
    assert "--out" in res.output and str(inst) in res.output
    assert inst.read_bytes() == before


def test_plan_out_refuses_to_overwrite_a_file_that_is_not_a_plan(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    res = run("plan", "tiny-3dc", "--out", notes, "-q")
    assert res.exit_code == 2 and "--out" in res.output and "not a plan" in res.output
    assert notes.read_text() == "my notes\n"


def test_plan_out_replaces_an_older_plan_and_pictures_never_replace_inputs(tmp_path):
    out = tmp_path / "p.json"
    assert run("plan", "tiny-3dc", "--out", out, "-q").exit_code == 0
    assert run("plan", "tiny-3dc", "--out", out, "-q").exit_code == 0  # a plan may replace a plan
    res = run("evaluate", "tiny-3dc", out, "--gantt", out)
    assert res.exit_code == 2 and "--gantt" in res.output
    Plan.from_json(out.read_text())
    res = run("schedule", "tiny-3dc", out, "--out", out, "-q")
    assert res.exit_code == 2 and "--out" in res.output


# -- item 8: one plan format ---------------------------------------------------

def test_plan_json_is_read_by_evaluate_explain_and_schedule(tmp_path):
    res = run("plan", "tiny-3dc", "--json", "-q")
    assert res.exit_code == 0
    doc = _strict_loads(res.output)
    path = tmp_path / "p.json"
    path.write_text(res.output)
    res = run("evaluate", "tiny-3dc", path, "--json")
    assert res.exit_code == 0, res.output
    assert _strict_loads(res.output)["iteration_time_s"] == pytest.approx(doc["evaluation"]["iteration_time_s"],
                                                                        rel=1e-12)
    assert run("explain", "tiny-3dc", path).exit_code == 0


def test_unknown_plan_key_is_named(tmp_path):
    res = run("plan", "tiny-3dc", "--json", "-q")
    doc = json.loads(res.output)
    doc["colour"] = "red"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    res = run("evaluate", "tiny-3dc", path)
    assert res.exit_code == 2 and "'colour'" in res.output and str(path) in res.output


def test_strict_json_has_no_infinity_and_says_why():
    from planner.problem.files import strict_json

    text = strict_json({"a": math.inf, "b": [1.0, math.nan], "c": 2.0})
    doc = _strict_loads(text)
    assert doc["a"] is None and doc["b"] == [1.0, None] and doc["c"] == 2.0
    assert doc["null_reasons"] == {"a": "infinite", "b[1]": "not a number"}
