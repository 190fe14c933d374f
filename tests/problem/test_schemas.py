"""JSON Schemas of the file formats (docs/schemas/): up to date with the generator, and in
agreement with the readers -- every packaged instance and model file and every plan the
planner writes validates, and documents the readers refuse (an unknown key, a value out of
range, a missing field, a wrong type) the schema refuses too."""

import copy
import json
import tomllib
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

import planner
from planner.cli import main
from planner.problem.errors import InputError
from planner.problem.files import find_model, load_model
from planner.problem.instance import Instance
from planner.problem.io import load_multi_instance
from planner.problem.plan import ExplicitSchedule, Plan
from planner.problem.schemas import KINDS, schema, schema_text

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schemas"


def validator(kind):
    s = json.loads((SCHEMAS / f"{kind}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def valid(kind, doc) -> bool:
    return validator(kind).is_valid(doc)


@pytest.mark.parametrize("kind", KINDS)
def test_committed_schemas_are_up_to_date(kind):
    """Regenerate with: planner schema KIND --out docs/schemas/KIND.schema.json"""
    assert (SCHEMAS / f"{kind}.schema.json").read_text() == schema_text(kind)


@pytest.mark.parametrize("kind", KINDS)
def test_cli_prints_and_writes_the_schema(kind, tmp_path):
    r = CliRunner().invoke(main, ["schema", kind])
    assert r.exit_code == 0 and r.output == schema_text(kind)
    out = tmp_path / "s.json"
    r = CliRunner().invoke(main, ["schema", kind, "--out", str(out)])
    assert r.exit_code == 0 and out.read_text() == schema_text(kind)
    r = CliRunner().invoke(main, ["schema", "trace"])
    assert r.exit_code == 2 and "KIND" in r.output


@pytest.mark.parametrize("path", sorted((ROOT / "instances").glob("*.toml")), ids=lambda p: p.stem)
def test_every_packaged_instance_validates(path):
    data = tomllib.loads(path.read_text())
    kind = "multi-instance" if "jobs" in data else "instance"  # SPEC 10: [[jobs]] files have their own schema
    errors = [e.message for e in validator(kind).iter_errors(data)]
    assert errors == []
    assert not validator("instance" if kind != "instance" else "multi-instance").is_valid(data)
    if kind == "instance":
        planner.load_instance(path)  # and the reader agrees
    else:
        load_multi_instance(path)


@pytest.mark.parametrize("path", sorted((ROOT / "models").glob("*.toml")), ids=lambda p: p.stem)
def test_every_packaged_model_validates(path):
    assert [e.message for e in validator("model").iter_errors(tomllib.loads(path.read_text()))] == []


def plans():
    inst = planner.load_instance("tiny-3dc")
    p = planner.plan(inst, solver="greedy")
    ev = planner.evaluate(inst, p)
    written = json.loads(planner.problem.files.strict_json({**p.to_dict(), "evaluation": ev.to_dict()}))
    ops = [["F0", "F1", "B0", "F2", "B1", "F3", "B2", "F4", "B3", "F5", "B4", "F6", "B5", "F7", "B6", "B7"]]
    explicit = p.model_copy(update={"schedule": ExplicitSchedule(ops=ops * p.num_stages), "solver": None})
    golden = [json.loads(f.read_text()) for f in sorted((ROOT / "tests").rglob("golden/**/plan.json"))]
    assert golden
    return [written, p.to_dict(), explicit.to_dict(), *golden]


def test_every_plan_the_planner_writes_validates():
    for doc in plans():
        assert [e.message for e in validator("plan").iter_errors(doc)] == []
        Plan.from_dict(doc)


def test_schema_key_is_accepted_by_schema_and_readers(tmp_path):
    doc = {"$schema": "../docs/schemas/plan.schema.json", **plans()[1]}
    assert valid("plan", doc)
    Plan.from_dict(doc)
    inst = tomllib.loads((ROOT / "instances" / "tiny-3dc.toml").read_text())
    inst["$schema"] = "docs/schemas/instance.schema.json"
    assert valid("instance", inst)
    path = tmp_path / "i.json"
    inst["workload"]["model"] = load_model(find_model("tiny")).model_dump(by_alias=True, exclude_none=True)
    path.write_text(json.dumps(inst))
    assert planner.load_instance(path).name == "tiny-3dc"


def instance_doc():
    data = tomllib.loads((ROOT / "instances" / "tiny-3dc.toml").read_text())
    data["workload"]["model"] = load_model(find_model("tiny")).model_dump(by_alias=True, exclude_none=True)
    return data


def mutate(doc, path, value=None, delete=False):
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


INSTANCE_BAD = [
    (("colour",), "red", False),
    (("domains", 0, "gpus"), -4, False),
    (("domains", 0, "gpus"), "many", False),
    (("gpu", "mfu"), 1.5, False),
    (("links", 0, "latency_ms"), None, True),
    (("workload", "model", "hidden_size"), 0, False),
    (("workload", "model", "num_layers"), None, True),
    (("options", "objective"), "speed", False),
    (("options", "schedules"), ["zb"], False),
    # issue 28: booleans are not numbers, strings are not numbers, numbers are not booleans
    (("domains", 0, "gpus"), "16", False),
    (("domains", 0, "gpus"), True, False),
    (("links", 0, "bandwidth_gbps"), "100", False),
    (("gpu", "mfu"), True, False),
    (("workload", "micro_batch_sizes"), [1, True], False),
    (("workload", "global_batch_size"), "16", False),
    (("workload", "recompute"), "yes", False),
    (("workload", "recompute"), 1, False),
    (("workload", "model", "hidden_size"), "64", False),
    (("workload", "model", "gated_mlp"), "true", False),
]


@pytest.mark.parametrize("path,value,delete", INSTANCE_BAD, ids=lambda v: str(v))
def test_schema_and_reader_refuse_the_same_instances(path, value, delete):
    doc = instance_doc()
    assert valid("instance", doc)
    Instance.from_dict(doc)
    bad = mutate(doc, path, value, delete)
    assert not valid("instance", bad)
    with pytest.raises(InputError):
        Instance.from_dict(bad)


PLAN_BAD = [
    (("replicas",), 0, False),
    (("tp",), 1.5, False),
    (("stages", 0, "start"), None, True),
    (("schedule",), "pipedream", False),
    (("placement",), "alpha", False),
    (("solver", "name"), None, True),
    (("shape",), "wide", False),
    (("tp",), True, False),  # issue 28
    (("micro_batch_size",), "1", False),
    (("stages", 0, "end"), "3", False),
]


@pytest.mark.parametrize("path,value,delete", PLAN_BAD, ids=lambda v: str(v))
def test_schema_and_reader_refuse_the_same_plans(path, value, delete):
    doc = plans()[1]
    bad = mutate(doc, path, value, delete)
    assert not valid("plan", bad)
    with pytest.raises(InputError):
        Plan.from_dict(bad)


def test_a_model_needs_units_or_an_architecture():
    arch = tomllib.loads((ROOT / "models" / "tiny.toml").read_text())
    half = {k: v for k, v in arch.items() if k not in ("vocab_size",)}
    assert valid("model", arch) and not valid("model", half)
    units = {"name": "u", "units": [{"name": "a", "params": 1, "fwd_flops_per_token": 2, "out_bytes_per_token": 3,
                                     "stored_bytes_per_token": 4}]}
    assert valid("model", units)
    from planner.problem.model import ModelSpec
    ModelSpec.model_validate(units)
    with pytest.raises(ValueError):
        ModelSpec.model_validate(half)


def test_schema_of_unknown_kind():
    with pytest.raises(ValueError):
        schema("trace")


@pytest.mark.parametrize("kind, path, value, field", [
    ("instance", ("domains", 0, "gpus"), "16", "domains[0].gpus"),
    ("instance", ("workload", "micro_batch_sizes"), [1, True], "workload.micro_batch_sizes"),
    ("plan", ("tp",), True, "tp"),
])
def test_loaders_refuse_booleans_and_strings_for_numbers_naming_the_field(kind, path, value, field, tmp_path):
    """Issue 28: `"tp": true` and `gpus = "16"` loaded (as 1 and 16) although the schemas refuse them;
    the command line exits 2 naming the file and the field."""
    if kind == "instance":
        doc = mutate(instance_doc(), path, value)
        f = tmp_path / "i.json"
        f.write_text(json.dumps(doc))
        r = CliRunner().invoke(main, ["validate", str(f)])
    else:
        doc = mutate(plans()[1], path, value)
        f = tmp_path / "p.json"
        f.write_text(json.dumps(doc))
        r = CliRunner().invoke(main, ["evaluate", "tiny-3dc", str(f)])
    assert r.exit_code == 2, r.output
    assert f"{f}: {field}:" in r.output and "expected" in r.output, r.output
