"""`planner calibrate` end to end (issue 24.3): CSVs and plan files in, a fitted
instance out that loads and evaluates to the fitted figures; hostile CSVs refused
with exit 2 naming the file and the field, never a traceback."""

import json
import math
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent / "scoring"))
from test_calibrate import INST, PLANS, TRUTH, measured_runs, measured_transfers  # noqa: E402

from planner.cli import main  # noqa: E402
from planner.problem.io import load_instance, save_plan  # noqa: E402
from planner.problem.plan import Plan  # noqa: E402
from planner.scoring.evaluator import Evaluator  # noqa: E402


def run(*args, env=None):
    r = CliRunner().invoke(main, [str(a) for a in args], env=env)
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    return r


@pytest.fixture
def measured(tmp_path):
    """runs.csv (four plans), transfers.csv, at the figures of TRUTH; tiny-3dc.toml, the
    instance measured (the packaged one with its alpha-gamma link back: test_calibrate.INST)."""
    from planner.problem.io import write_instance

    data = INST.to_dict()
    data["workload"]["model"] = "tiny"
    write_instance(data, ["tiny-3dc with an alpha-gamma link"], tmp_path / "tiny-3dc.toml")
    lines = ["# measured at TRUTH", "plan,seconds"]
    for i, r in enumerate(measured_runs(TRUTH)):
        save_plan(r.plan, tmp_path / f"p{i}.json")
        lines.append(f"p{i}.json,{r.seconds!r}")
    (tmp_path / "runs.csv").write_text("\n".join(lines) + "\n")
    rows = ["a,b,bytes,seconds,group"] + [f"{t.a},{t.b},{t.bytes!r},{t.seconds!r},{t.group or ''}"
                                          for t in measured_transfers()]
    (tmp_path / "transfers.csv").write_text("\n".join(rows) + "\n")
    return tmp_path


def test_round_trip_the_written_instance_evaluates_to_the_fitted_figures(measured):
    out = measured / "fitted.toml"
    r = run("calibrate", measured / "tiny-3dc.toml", measured / "runs.csv", "--transfers", measured / "transfers.csv",
            "--out", out, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    fitted = {f["field"]: f["after"] for f in doc["fitted"]}
    for f, v in TRUTH.items():
        assert abs(fitted[f] - v) <= 1e-6 * v, (f, fitted[f])
    inst = load_instance(out, spec=3)
    assert inst.gpu.mfu == fitted["gpu.mfu"] and inst.gpu.unit_overhead_ms == fitted["gpu.unit_overhead_ms"]
    assert inst.domains[0].uplink_gbps == fitted["domains[0].uplink_gbps"]
    for i in range(3):
        assert inst.links[i].bandwidth_gbps == fitted[f"links[{i}].bandwidth_gbps"]
        assert inst.links[i].latency_ms == fitted[f"links[{i}].latency_ms"]
    assert inst.workload.model.name == "tiny"  # the model still named, found from the new folder
    rows = [row for row in doc["rows"] if row["kind"] == "run"]
    for i, row in enumerate(rows):
        t = float(Evaluator(inst, PLANS[i], spec=3).iteration_times()[0])
        assert t == row["after_s"] and abs(row["residual_after"]) < 1e-9
    assert doc["rms_relative_after"] < 1e-9 < doc["rms_relative_before"]
    text = out.read_text()
    assert text.startswith("# Calibrated by `planner calibrate`") and "fitted gpu.mfu: 0.5 -> 0.42" in text
    # evaluate, at SPEC v3, reads it (the overhead and the uplink are v3 fields)
    table = run("calibrate", out, measured / "runs.csv")
    assert table.exit_code == 0, table.output
    assert "measured vs modelled" in table.output and "left as they were" in table.output


def test_table_names_what_was_left_and_why(measured):
    (measured / "one-size.csv").write_text("a,b,bytes,seconds\nalpha,beta,1e8,0.12\nalpha,beta,1e8,0.121\n")
    r = run("calibrate", measured / "tiny-3dc.toml", measured / "runs.csv", "--transfers", measured / "one-size.csv",
            env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "links[0] alpha-beta latency_ms = 2" in out and "cannot separate latency from bandwidth" in out
    assert "uplinks need transfers measured together" in out


def test_out_refuses_to_overwrite_an_input(measured):
    r = run("calibrate", measured / "p0.json", measured / "runs.csv", "--out", measured / "runs.csv")
    assert r.exit_code == 2


HOSTILE_RUNS = {
    "empty": ("", None),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", None),
    "nul": ("plan,seconds\np0.json\x00,1\n", "line 2"),
    "wrong header": ("file,time\np0.json,1\n", "line 1"),
    "header only": ("plan,seconds\n", None),
    "nan": ("plan,seconds\np0.json,nan\np1.json,1\n", "line 2, column seconds"),
    "inf": ("plan,seconds\np0.json,1e400\np1.json,1\n", "line 2, column seconds"),
    "huge": ("plan,seconds\np0.json,1e300\np1.json,1\n", "line 2, column seconds"),
    "negative": ("plan,seconds\np0.json,-3\np1.json,1\n", "line 2, column seconds"),
    "zero": ("plan,seconds\np0.json,1\np1.json,0\n", "line 3, column seconds"),
    "words": ("plan,seconds\np0.json,fast\n", "line 2, column seconds"),
    "cells": ("plan,seconds\np0.json,1,2\n", "line 2"),
    "missing plan": ("plan,seconds\np0.json,1\nnowhere.json,1\n", "line 3, column plan"),
    "plan is a folder": ("plan,seconds\n.,1\n", "line 2, column plan"),
    "unknown domain": ("plan,seconds\np0.json,1\nomega.json,1\n", "line 3, column plan"),
    "not a plan": ("plan,seconds\nruns.csv,1\n", "line 2, column plan"),
    "one run": ("plan,seconds\np0.json,0.4\n", "runs"),
    "deadlocking plan": ("plan,seconds\np0.json,0.4\ndead.json,0.3\n", "line 3: plan dead.json: its simulated"),
    "binary plan": ("plan,seconds\np0.json,0.4\nbin.json,0.3\n", "line 3, column plan"),
}


def _one_error_line(r, path, field):
    """Exit 2 with one line, ``error: ...``, naming the file and (when given) the field."""
    assert r.exit_code == 2, r.output
    lines = [l for l in r.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert str(path) in lines[0], lines[0]
    if field:
        assert field in lines[0], lines[0]


@pytest.mark.parametrize("name", sorted(HOSTILE_RUNS))
def test_hostile_runs_csv_exits_2_naming_file_and_field(measured, name):
    text, field = HOSTILE_RUNS[name]
    p = measured / "runs.csv"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    omega = PLANS[0].model_copy(update={"placement": [["omega"]]})
    save_plan(omega, measured / "omega.json")
    (measured / "bin.json").write_bytes(b"\x94\x00\xff" * 50)
    ops = [f"{k}{i}" for i in range(4) for k in "FB"]
    dead = Plan(replicas=1, tp=4, micro_batch_size=4, num_micro_batches=4, stages=PLANS[1].stages,
                placement=[["alpha", "beta"]],  # stage 1 runs F1 before F0; stage 0 sends F1 after B0
                schedule={"kind": "explicit", "ops": [ops, ["F1", "F0"] + ops[1:2] + ops[3:]]})
    save_plan(dead, measured / "dead.json")
    _one_error_line(run("calibrate", measured / "tiny-3dc.toml", p), p, field)


HOSTILE_TRANSFERS = {
    "empty": ("", None),
    "binary": (b"\xff\xd8\xff\xe0\x00\x10JFIF", None),
    "wrong header": ("src,dst,bytes,seconds\nalpha,beta,1,1\n", "line 1"),
    "extra column": ("a,b,bytes,seconds,group,when\nalpha,beta,1,1,g,now\n", "line 1"),
    "unknown domain": ("a,b,bytes,seconds\nalpha,zeta,1e8,0.1\n", "line 2, column b"),
    "bad name": ("a,b,bytes,seconds\nal$pha,beta,1e8,0.1\n", "line 2, column a"),
    "name with space": ("a,b,bytes,seconds\nalpha,be ta,1e8,0.1\n", "line 2, column b"),
    "self": ("a,b,bytes,seconds\nalpha,alpha,1e8,0.1\n", "line 2, column b"),
    "zero bytes": ("a,b,bytes,seconds\nalpha,beta,0,0.1\n", "line 2, column bytes"),
    "nan bytes": ("a,b,bytes,seconds\nalpha,beta,NaN,0.1\n", "line 2, column bytes"),
    "huge bytes": ("a,b,bytes,seconds\nalpha,beta,1e30,0.1\n", "line 2, column bytes"),
    "negative seconds": ("a,b,bytes,seconds\nalpha,beta,1e8,-0.1\n", "line 2, column seconds"),
    "inf seconds": ("a,b,bytes,seconds\nalpha,beta,1e8,inf\n", "line 2, column seconds"),
    "bad group": ("a,b,bytes,seconds,group\nalpha,beta,1e8,0.1,g/1\n", "line 2, column group"),
    "quote": ('a,b,bytes,seconds\n"alpha,beta,1e8,0.1\n', "line 2"),
    "one transfer": ("a,b,bytes,seconds\nalpha,beta,1e8,0.1\n", "transfers"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_TRANSFERS))
def test_hostile_transfers_csv_exits_2_naming_file_and_field(measured, name):
    text, field = HOSTILE_TRANSFERS[name]
    p = measured / "transfers.csv"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    _one_error_line(run("calibrate", measured / "tiny-3dc.toml", measured / "runs.csv", "--transfers", p), p, field)


def test_json_is_strict(measured):
    r = run("calibrate", measured / "tiny-3dc.toml", measured / "runs.csv", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["spec"] == 3 and doc["out"] is None
    assert all(math.isfinite(row["after_s"]) for row in doc["rows"])


def test_a_model_named_by_path_is_rewritten_relative_to_the_new_file(measured):
    root = Path(__file__).resolve().parents[1]
    src = measured / "src"
    src.mkdir()
    (src / "tiny-copy.toml").write_text((root / "models" / "tiny.toml").read_text())
    text = (root / "instances" / "tiny-3dc.toml").read_text().replace('model = "tiny"', 'model = "tiny-copy.toml"')
    (src / "inst.toml").write_text(text)
    (measured / "elsewhere").mkdir()
    out = measured / "elsewhere" / "fitted.toml"
    r = run("calibrate", src / "inst.toml", measured / "runs.csv", "--out", out)
    assert r.exit_code == 0, r.output
    assert 'model = "../src/tiny-copy.toml"' in out.read_text()
    assert load_instance(out, spec=3).workload.model == load_instance(src / "inst.toml").workload.model
