"""The command line of several jobs (SPEC 9 and 10): planner multievaluate (exit 0, 3 with the
same JSON when infeasible, 2 naming the file, the job and the field), planner schema multiplan,
and planner plan / evaluate refusing a [[jobs]] instance."""

import json
import re
from pathlib import Path

from click.testing import CliRunner

from planner.cli import main
from planner.problem.schemas import schema_text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "two-jobs.multiplan.json"
JOB_KEYS = {"name", "admitted", "iteration_time_s", "effective_time_s", "throughput_tokens_per_s", "rho",
            "rho_share", "completion_s", "deadline_met", "cost"}


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_multievaluate_scores_the_example():
    r = run("multievaluate", "two-jobs", str(EXAMPLE), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [j["name"] for j in doc["jobs"]] == ["small", "wide"]
    assert all(JOB_KEYS <= set(j) for j in doc["jobs"])
    assert {"objective", "objective_value", "bound", "gap", "master_lp"} <= set(doc)
    assert doc["objective"] == "maxmin" and doc["bound"] is None and doc["gap"] is None
    rho = [j["rho"] for j in doc["jobs"]]
    assert doc["objective_value"] == min(rho[0] / 1.0, rho[1] / 2.0)  # weights 1 and 2
    for j in doc["jobs"]:
        assert j["rho"] <= 1 and j["completion_s"] == (1000 if j["name"] == "small" else 500) * j["effective_time_s"]
    shared = json.loads(run("multievaluate", "two-jobs", str(EXAMPLE), "--json", "--sharing", "shared").output)
    assert shared["sharing"] == "shared"
    text = run("multievaluate", "two-jobs", str(EXAMPLE))
    assert text.exit_code == 0 and "small" in text.output and re.search(r"objective\s+maxmin", text.output)


def test_infeasible_multiplan_exits_3_with_the_same_json(tmp_path):
    data = json.loads(EXAMPLE.read_text())
    data["jobs"][1]["gpus"]["alpha"] = 12  # 8 + 12 > 16 GPUs in alpha
    path = tmp_path / "mp.json"
    path.write_text(json.dumps(data))
    r = run("multievaluate", "two-jobs", str(path), "--json")
    assert r.exit_code == 3
    doc = json.loads(r.output)
    assert doc["feasible"] is False and any("domain alpha" in v for v in doc["violations"])
    assert all(JOB_KEYS <= set(j) for j in doc["jobs"])
    text = run("multievaluate", "two-jobs", str(path))
    assert text.exit_code == 3 and "INFEASIBLE" in text.output


def test_malformed_multiplan_exits_2_naming_file_job_and_field(tmp_path):
    data = json.loads(EXAMPLE.read_text())
    data["jobs"][1]["link_share"]["alpha|beta"] = 1.5
    path = tmp_path / "mp.json"
    path.write_text(json.dumps(data))
    r = run("multievaluate", "two-jobs", str(path), "--json")
    assert r.exit_code == 2
    assert str(path) in r.output and "jobs[1].link_share.alpha|beta" in r.output and "'wide'" in r.output
    r = run("multievaluate", "tiny-3dc", str(EXAMPLE))  # a one-job instance
    assert r.exit_code == 2 and "tiny-3dc.toml" in r.output and "jobs" in r.output


def test_plan_and_evaluate_refuse_a_jobs_instance():
    for args in (("plan", "two-jobs", "--solver", "greedy"), ("evaluate", "two-jobs", str(EXAMPLE))):
        r = run(*args)
        assert r.exit_code == 2 and "planner multiplan" in r.output and "two-jobs.toml" in r.output


def test_schema_multiplan_is_the_committed_one_and_the_example_validates():
    import jsonschema

    r = run("schema", "multiplan")
    assert r.exit_code == 0 and r.output == schema_text("multiplan")
    committed = json.loads((ROOT / "docs" / "schemas" / "multiplan.schema.json").read_text())
    v = jsonschema.Draft202012Validator(committed)
    assert list(v.iter_errors(json.loads(EXAMPLE.read_text()))) == []
    bad = json.loads(EXAMPLE.read_text())
    bad["jobs"][0]["gpus"]["alpha"] = -1
    assert not v.is_valid(bad)
