"""Bad input gets one clear message naming the file and the field, exit 2;
an infeasible instance gets the reason, exit 3; never a traceback."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.problem.io import instances_dir

BASE = instances_dir() / "tiny-3dc.toml"


def write_variant(tmp_path, edit, name="bad.toml"):
    data = tomllib.loads(BASE.read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(_to_toml(data))
    return path


def _val(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    return repr(v)


def _to_toml(data):
    """Minimal TOML writer for the instance layout (tables and arrays of tables)."""
    lines = [f"{k} = {_val(v)}" for k, v in data.items() if not isinstance(v, (dict, list))
             or (isinstance(v, list) and not (v and isinstance(v[0], dict)))]
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f"[{k}]")
            lines += [f"{kk} = {_val(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines.append(f"[[{k}]]")
                lines += [f"{kk} = {_val(vv)}" for kk, vv in item.items()]
    return "\n".join(lines) + "\n"


def run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


CASES = [
    ("negative bandwidth", lambda d: d["links"][1].update(bandwidth_gbps=-5.0), "links[1].bandwidth_gbps"),
    ("mfu above 1", lambda d: d["gpu"].update(mfu=1.5), "gpu.mfu"),
    ("mfu zero", lambda d: d["gpu"].update(mfu=0.0), "gpu.mfu"),
    ("zero GPUs", lambda d: d["domains"][2].update(gpus=0), "domains[2].gpus"),
    ("unknown key", lambda d: d["domains"][0].update(colour="red"), "domains[0].colour"),
    ("unknown top key", lambda d: d.update(foo=1), "foo"),
    ("wrong type", lambda d: d["workload"].update(global_batch_size="many"), "workload.global_batch_size"),
    ("unknown domain in link", lambda d: d["links"][0].update(b="atlantis"), "links[0].b"),
    ("duplicate domain", lambda d: d["domains"][1].update(name="alpha"), "domains[1].name"),
    ("disconnected WAN", lambda d: d.update(links=[d["links"][0]]), "links"),
    ("micro-batch never divides", lambda d: d["workload"].update(micro_batch_sizes=[1, 3]),
     "workload.micro_batch_sizes[1]"),
    ("no model file", lambda d: d["workload"].update(model="gpt-9"), "workload.model"),
    ("missing field", lambda d: d["gpu"].pop("memory_gb"), "gpu.memory_gb"),
    ("bad objective", lambda d: d["options"].update(objective="speed"), "options.objective"),
    ("tp above node", lambda d: d["workload"].update(tensor_parallel=[1, 16]), "workload.tensor_parallel[1]"),
    ("self loop", lambda d: d["links"][0].update(b="alpha"), "links[0].b"),
    ("nvlink infinite", lambda d: d["gpu"].update(nvlink_bandwidth_gbps=float("inf")), "gpu.nvlink_bandwidth_gbps"),
    ("nvlink nan", lambda d: d["gpu"].update(nvlink_bandwidth_gbps=float("nan")), "gpu.nvlink_bandwidth_gbps"),
    ("nvlink negative", lambda d: d["gpu"].update(nvlink_bandwidth_gbps=-2400.0), "gpu.nvlink_bandwidth_gbps"),
    ("nvlink zero", lambda d: d["gpu"].update(nvlink_bandwidth_gbps=0.0), "gpu.nvlink_bandwidth_gbps"),
    ("nvlink string", lambda d: d["gpu"].update(nvlink_bandwidth_gbps="2400"), "gpu.nvlink_bandwidth_gbps"),
    # SPEC v3 fields (section 9): finite numbers in range, booleans and strings refused
    ("uplink zero", lambda d: d["domains"][0].update(uplink_gbps=0.0), "domains[0].uplink_gbps"),
    ("uplink negative", lambda d: d["domains"][1].update(uplink_gbps=-10.0), "domains[1].uplink_gbps"),
    ("uplink infinite", lambda d: d["domains"][0].update(uplink_gbps=float("inf")), "domains[0].uplink_gbps"),
    ("uplink nan", lambda d: d["domains"][0].update(uplink_gbps=float("nan")), "domains[0].uplink_gbps"),
    ("uplink above cap", lambda d: d["domains"][0].update(uplink_gbps=2e9), "domains[0].uplink_gbps"),
    ("uplink string", lambda d: d["domains"][0].update(uplink_gbps="400"), "domains[0].uplink_gbps"),
    ("uplink boolean", lambda d: d["domains"][0].update(uplink_gbps=True), "domains[0].uplink_gbps"),
    ("overhead negative", lambda d: d["gpu"].update(unit_overhead_ms=-0.5), "gpu.unit_overhead_ms"),
    ("overhead above cap", lambda d: d["gpu"].update(unit_overhead_ms=2e6), "gpu.unit_overhead_ms"),
    ("overhead infinite", lambda d: d["gpu"].update(unit_overhead_ms=float("inf")), "gpu.unit_overhead_ms"),
    ("overhead nan", lambda d: d["gpu"].update(unit_overhead_ms=float("nan")), "gpu.unit_overhead_ms"),
    ("overhead string", lambda d: d["gpu"].update(unit_overhead_ms="1"), "gpu.unit_overhead_ms"),
    ("overhead boolean", lambda d: d["gpu"].update(unit_overhead_ms=True), "gpu.unit_overhead_ms"),
    ("gradient_sync unknown", lambda d: d["workload"].update(gradient_sync="allreduce"), "workload.gradient_sync"),
    ("gradient_sync boolean", lambda d: d["workload"].update(gradient_sync=True), "workload.gradient_sync"),
]

FAST = {"name": "toy-2tf", "peak_tflops": 2.0, "memory_gb": 0.16, "mfu": 0.5}


def _typed(**changes):
    """tiny-3dc with a [[gpus]] type named by gamma, ``changes`` applied to that entry."""
    def edit(d):
        d["gpus"] = [dict(FAST, **changes)]
        d["domains"][2]["gpu"] = "toy-2tf"
    return edit


def _no_gpu_table(d):
    d["gpus"] = [dict(d.pop("gpu")), FAST]
    for dom in d["domains"]:
        dom["gpu"] = "toy-1tf"


# SPEC v3 change (g), section 9: [[gpus]] entries follow [gpu]'s rules; names unique over both
# tables; a domain's gpu names a type and is required without [gpu]
CASES += [
    ("gpus empty", lambda d: d.update(gpus=[]), "gpus"),
    ("gpus mfu above 1", _typed(mfu=1.5), "gpus[0].mfu"),
    ("gpus peak zero", _typed(peak_tflops=0.0), "gpus[0].peak_tflops"),
    ("gpus memory infinite", _typed(memory_gb=float("inf")), "gpus[0].memory_gb"),
    ("gpus memory above cap", _typed(memory_gb=2e6), "gpus[0].memory_gb"),
    ("gpus nvlink nan", _typed(nvlink_bandwidth_gbps=float("nan")), "gpus[0].nvlink_bandwidth_gbps"),
    ("gpus overhead negative", _typed(unit_overhead_ms=-1.0), "gpus[0].unit_overhead_ms"),
    ("gpus overhead boolean", _typed(unit_overhead_ms=True), "gpus[0].unit_overhead_ms"),
    ("gpus name with space", lambda d: d.update(gpus=[dict(FAST, name="toy 2tf")]), "gpus[0].name"),
    ("gpus name missing", lambda d: d.update(gpus=[{k: v for k, v in FAST.items() if k != "name"}]),
     "gpus[0].name"),
    ("gpus unknown key", _typed(colour="red"), "gpus[0].colour"),
    ("gpus name repeats [gpu]", lambda d: d.update(gpus=[dict(FAST, name="toy-1tf")]), "gpus[0].name"),
    ("gpus name repeated", lambda d: d.update(gpus=[FAST, dict(FAST, mfu=0.4)]), "gpus[1].name"),
    ("domain gpu unknown", lambda d: d["domains"][1].update(gpu="H100"), "domains[1].gpu"),
    ("domain gpu number", lambda d: d["domains"][1].update(gpu=3), "domains[1].gpu"),
    ("domain gpu absent without [gpu]", lambda d: (_no_gpu_table(d), d["domains"][0].pop("gpu")),
     "domains[0].gpu"),
    ("neither gpu table", lambda d: d.pop("gpu"), "gpu"),
]


@pytest.mark.parametrize("label,edit,field", CASES, ids=[c[0] for c in CASES])
def test_bad_instance_names_file_and_field(tmp_path, label, edit, field):
    path = write_variant(tmp_path, edit)
    res = run("validate", path)
    assert res.exit_code == 2, res.output
    msg = res.stderr.strip()
    assert "\n" not in msg and "Traceback" not in msg
    assert str(path) in msg and f"{field}:" in msg


V3_ONLY = [
    ("uplink", lambda d: d["domains"][2].update(uplink_gbps=400.0), "domains[2].uplink_gbps"),
    ("reduce_broadcast", lambda d: d["workload"].update(gradient_sync="reduce_broadcast"), "workload.gradient_sync"),
    ("unit overhead", lambda d: d["gpu"].update(unit_overhead_ms=0.5), "gpu.unit_overhead_ms"),
]


@pytest.mark.parametrize("label,edit,field", V3_ONLY, ids=[c[0] for c in V3_ONLY])
def test_v3_only_field_taken_by_default_refused_under_v2(tmp_path, label, edit, field):
    # SPEC v3 fields validate under the default version (3); asked for SPEC v2 (the API's
    # spec=2), which does not model them, the load refuses them naming file and field
    from planner.problem.errors import InputError
    from planner.problem.io import load_instance
    from planner.scoring import DEFAULT_SPEC

    assert DEFAULT_SPEC == 3
    path = write_variant(tmp_path, edit)
    res = run("validate", path)
    assert res.exit_code == 0, res.output
    assert load_instance(path).name == "tiny-3dc"
    with pytest.raises(InputError) as err:
        load_instance(path, spec=2)
    assert field in str(err.value) and "SPEC v2 does not model" in str(err.value)


@pytest.mark.parametrize("edit", [_typed(), _no_gpu_table], ids=["mixed", "gpus only"])
def test_gpu_types_validate_and_are_refused_under_v2(tmp_path, edit):
    from planner.problem.errors import InputError
    from planner.problem.io import load_instance

    path = write_variant(tmp_path, edit)
    res = run("validate", path)
    assert res.exit_code == 0, res.output
    inst = load_instance(path)
    names = [inst.domain_gpu(d).name for d in inst.domain_names]
    assert names == (["toy-1tf", "toy-1tf", "toy-2tf"] if edit is not _no_gpu_table else ["toy-1tf"] * 3)
    with pytest.raises(InputError) as err:
        load_instance(path, spec=2)
    assert "SPEC v2 does not model" in str(err.value)
    assert "gpus" in str(err.value) or "].gpu" in str(err.value)


def test_one_type_instance_means_what_it_meant(tmp_path):
    # every domain naming the [gpu] type, or [[gpus]] with one type for all: the same GPU as [gpu]
    from planner.problem.io import load_instance

    base = load_instance(BASE)
    inst = load_instance(write_variant(tmp_path, _no_gpu_table))
    assert not inst.heterogeneous and inst.gpu.model_dump() == base.gpu.model_dump()
    assert inst.memory_limit_bytes == base.memory_limit_bytes
    mixed = load_instance(write_variant(tmp_path, _typed(), name="mixed.toml"))
    assert mixed.heterogeneous
    with pytest.raises(Exception) as err:
        mixed.gpu  # no single type: code modelling one type must not take one silently
    assert "domains[2].gpu" in str(err.value)


def test_v3_fields_at_their_v2_defaults_validate(tmp_path):
    def edit(d):
        d["gpu"].update(unit_overhead_ms=0.0)
        d["workload"].update(gradient_sync="ring")
    res = run("validate", write_variant(tmp_path, edit))
    assert res.exit_code == 0, res.output


def test_good_instance_validates():
    res = run("validate", BASE)
    assert res.exit_code == 0 and res.stdout.startswith("ok: tiny-3dc")


def test_not_toml_and_missing_file(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text("name = \n")
    res = run("validate", bad)
    assert res.exit_code == 2 and str(bad) in res.stderr and "TOML" in res.stderr
    res = run("validate", tmp_path / "nope.toml")
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_json_instance_accepted(tmp_path):
    import json
    data = tomllib.loads(BASE.read_text())
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(data))
    # the model name resolves from the packaged models even next to a JSON file elsewhere
    assert run("validate", path).exit_code == 0


def test_bad_model_file_named(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.toml").write_text('name = "mine"\nnum_layers = -2\n')
    path = write_variant(tmp_path, lambda d: d["workload"].update(model="mine"))
    res = run("validate", path)
    assert res.exit_code == 2
    assert "mine.toml" in res.stderr and "num_layers" in res.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "-1.0", '"4h"'])
def test_bad_tp_bytes_per_token_named(tmp_path, value):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.toml").write_text(
        'name = "mine"\n[[units]]\nname = "u"\nparams = 1.0\nfwd_flops_per_token = 1.0\n'
        f'out_bytes_per_token = 1.0\nstored_bytes_per_token = 1.0\ntp_bytes_per_token = {value}\n')
    path = write_variant(tmp_path, lambda d: d["workload"].update(model="mine"))
    res = run("validate", path)
    assert res.exit_code == 2, res.output
    assert "mine.toml" in res.stderr and "tp_bytes_per_token" in res.stderr


def test_good_nvlink_and_tp_bytes_validate(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.toml").write_text(
        'name = "mine"\n[[units]]\nname = "u"\nparams = 1.0\nfwd_flops_per_token = 1.0\n'
        'out_bytes_per_token = 1.0\nstored_bytes_per_token = 1.0\ntp_bytes_per_token = 512\n')
    def edit(d):
        d["workload"].update(model="mine")
        d["gpu"].update(nvlink_bandwidth_gbps=2400)
    assert run("validate", write_variant(tmp_path, edit)).exit_code == 0


def test_infeasible_instance_exit_3_with_reason(tmp_path):
    # 70B-style memory need on toy GPUs: the model cannot fit
    path = write_variant(tmp_path, lambda d: d["gpu"].update(memory_gb=0.001))
    res = run("plan", path)
    assert res.exit_code == 3
    assert "no feasible plan" in res.stderr and "usable per GPU" in res.stderr and "tp=" in res.stderr


def test_plan_file_errors(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"replicas": 1}')
    res = run("evaluate", BASE, bad)
    assert res.exit_code == 2 and str(bad) in res.stderr
    bad.write_text("{not json")
    res = run("evaluate", BASE, bad)
    assert res.exit_code == 2 and "JSON" in res.stderr


def test_console_script_no_traceback(tmp_path):
    path = write_variant(tmp_path, lambda d: d["links"][0].update(bandwidth_gbps=-1.0))
    exe = Path(sys.executable).with_name("planner")
    proc = subprocess.run([str(exe), "validate", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_writes_are_atomic(tmp_path):
    """A write that fails half-way leaves the old file as it was and no temporary file."""
    from planner.problem.files import atomic_path, write_atomic

    target = tmp_path / "plan.json"
    write_atomic(target, "old\n")
    try:
        with atomic_path(target) as tmp:
            tmp.write_text("half of the new")
            raise KeyboardInterrupt  # Ctrl-C in the middle of writing
    except KeyboardInterrupt:
        pass
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n" and len(list(tmp_path.iterdir())) == 1


def test_undecodable_and_directory_inputs_name_the_file(tmp_path):
    bad = tmp_path / "inst.toml"
    bad.write_bytes("name = \"caf\u00e9\"\n".encode("latin-1"))
    res = run("validate", bad)
    assert res.exit_code == 2 and str(bad) in res.stderr and "UTF-8" in res.stderr and "line 1" in res.stderr
    res = run("validate", tmp_path)
    assert res.exit_code == 2 and "directory" in res.stderr


# -- names (SPEC 9): refused at load, the same by the API and the command line ------------

HOSTILE_NAMES = ["alpha$(touch PWNED)", "../../escaped", "a/b", "a b", 'x"y', "x'y", "a|b", "a;b", "`id`",
                 "alpha\n", "a\\b", ".hidden", "-rf", "", "x" * 65, "a\x00b", "a\u2028b", "a\u202eb"]
GOOD_NAMES = ["北京", "贵州-dc01", "us-east-1", "a.b_c-d", "_x", "9", "x" * 64]


def _renamed(where: str, name: str) -> dict:
    """tiny-3dc with ``name`` as the instance's, the GPU type's or domain alpha's name."""
    data = tomllib.loads(BASE.read_text())
    if where == "name":
        data["name"] = name
    elif where == "gpu.name":
        data["gpu"]["name"] = name
    else:
        data["domains"][0]["name"] = name
        for link in data["links"]:
            for end in ("a", "b"):
                if link[end] == "alpha":
                    link[end] = name
    return data


@pytest.mark.parametrize("where", ["name", "gpu.name", "domains[0].name"])
@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=repr)
def test_hostile_names_refused_by_api_and_cli_alike(tmp_path, monkeypatch, where, name):
    import json

    import planner
    from planner.problem.errors import InputError

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(_renamed(where, name)))
    res = run("validate", path)
    assert res.exit_code == 2, res.output
    with pytest.raises(InputError) as err:
        planner.load_instance(path)
    assert err.value.field == where and err.value.file == str(path)
    assert res.stderr == f"error: {err.value}\n"  # one line, the same words
    assert "valid name" in res.stderr and "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inst.json"]


@pytest.mark.parametrize("where", ["name", "gpu.name", "domains[0].name"])
@pytest.mark.parametrize("name", GOOD_NAMES)
def test_unicode_and_punctuated_names_pass(tmp_path, where, name):
    import json

    import planner

    path = tmp_path / "inst.json"
    path.write_text(json.dumps(_renamed(where, name), ensure_ascii=False))
    assert run("validate", path).exit_code == 0
    inst = planner.load_instance(path)
    assert name in (inst.name, inst.gpu.name, inst.domains[0].name)


def test_every_packaged_instance_has_valid_names():
    import planner
    from planner.problem.io import available
    from planner.problem.names import name_problem

    for ref in available("instances"):
        inst = planner.load_instance(ref)
        for n in (inst.name, *(g.name for g in inst.gpu_types), *inst.domain_names):
            assert name_problem(n) is None, (ref, n)


def test_toml_writer_reads_back_any_name():
    """The instance writer (import-network, generate) quotes what the loader would refuse too:
    values read back to the same strings, and a header line stays one comment."""
    from planner.problem.files import toml_text

    for name in HOSTILE_NAMES + GOOD_NAMES + ["a\x1bb\x7f", 'k"] = 1\n[x]']:
        data = {"name": name, "domains": [{"name": name, "gpus": 8}], "workload": {name: name}}
        text = toml_text(data, [f"sites: {name}", name])
        assert tomllib.loads(text) == data, repr(name)
        assert [line for line in text.splitlines() if line.startswith("#")] == text.splitlines()[:2]
