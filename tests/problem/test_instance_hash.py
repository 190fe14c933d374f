"""Issue 28 item 6: ``solver.instance_sha256`` (SPEC section 9) is the hash of the
*loaded* instance: the same for every file form of one instance (TOML or JSON,
keys in any order, defaults written or left out, integers for floats), another
for any changed figure; ``plan_sha256`` changes with any field a person edits."""

import json
import tomllib

import pytest

from planner.problem.files import toml_text
from planner.problem.io import instances_dir, load_instance
from planner.problem.plan import CLAIM_REASONS, Plan, SolverInfo, claims_check, instance_sha256


def _reversed(value):
    """Every table with its keys in the opposite order (lists keep theirs)."""
    if isinstance(value, dict):
        return {k: _reversed(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed(v) for v in value]
    return value


def _ints(value):
    """Integral floats written as integers (100.0 -> 100), as a person types them."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


@pytest.fixture(scope="module")
def source():
    path = instances_dir() / "tiny-3dc.toml"
    return load_instance(path), tomllib.loads(path.read_text())


def test_hash_is_the_same_for_toml_json_key_order_and_defaults(tmp_path, source):
    inst, data = source
    h = instance_sha256(inst)
    assert len(h) == 64 and int(h, 16) >= 0
    forms = {"reversed.json": json.dumps(_reversed(data)),
             "ints.json": json.dumps(_ints(data), indent=4),
             "reversed.toml": toml_text(_reversed(_ints(data)))}
    bare = json.loads(json.dumps(data))  # the defaults left out
    del bare["options"]["memory_reserve_fraction"], bare["options"]["schedules"], bare["workload"]["recompute"]
    forms["bare.json"] = json.dumps(bare)
    for name, text in forms.items():
        (tmp_path / name).write_text(text)
        assert instance_sha256(load_instance(tmp_path / name)) == h, name
    # load order: other instances loaded in between do not change it
    for other in ("two-dc", "gcp-16", "tiny-3dc"):
        load_instance(other)
    assert instance_sha256(load_instance(tmp_path / "reversed.json")) == h == instance_sha256(inst)


def test_hash_changes_with_every_kind_of_figure(source):
    inst, _ = source
    h = instance_sha256(inst)
    changed = [inst.with_link("alpha", "beta", bandwidth_gbps=1.0),
               inst.with_link("alpha", "beta", latency_ms=2.5),
               inst.with_domain("gamma", gpus=8),
               inst.with_workload(global_batch_size=32),
               inst.with_options(objective="cost")]
    hashes = {instance_sha256(i) for i in changed}
    assert h not in hashes and len(hashes) == len(changed)


def test_plan_hash_changes_when_a_field_is_edited_and_survives_the_file(source):
    inst, _ = source
    p = Plan.build([(0, 5), (5, 10)], [["alpha", "beta"], ["alpha", "gamma"]], tp=1, micro_batch_size=2,
                   instance=inst).model_copy(update={"solver": SolverInfo(
                       name="mine", status="optimal", objective=1.5, bound=1.4, gap=1 / 15,
                       extra_figure=float("inf"), note=None)})
    s = p.stamped(inst)
    assert claims_check(inst, s) is None
    again = Plan.from_json(s.to_json())  # inf written as null, None left out: still the solver's plan
    assert again.solver.plan_sha256 == s.solver.plan_sha256 and claims_check(inst, again) is None
    edits = [s.model_copy(update={"placement": [["alpha", "gamma"], ["alpha", "beta"]]}),
             s.model_copy(update={"schedule": "gpipe"}),
             s.model_copy(update={"solver": s.solver.model_copy(update={"gap": 0.0})}),
             s.model_copy(update={"solver": s.solver.model_copy(update={"status": "optimal!"})})]
    for e in edits:
        assert claims_check(inst, e) == ("edited", CLAIM_REASONS["edited"])
    assert claims_check(inst.with_link("alpha", "beta", bandwidth_gbps=1.0), s) == ("stale", CLAIM_REASONS["stale"])
    assert claims_check(inst, p) == ("absent", CLAIM_REASONS["absent"])
