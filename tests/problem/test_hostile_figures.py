"""Issue 17 (a): non-finite and absurd figures in instances, models, plans and
traces are refused with exit 2, naming the file and the field, with the reason."""

import copy
import math

import numpy as np
import pytest
from click.testing import CliRunner

from planner import load_instance
from planner.cli import main
from planner.problem import limits
from planner.problem.errors import InputError
from planner.problem.files import read_mapping
from planner.problem.instance import Instance
from planner.problem.io import instances_dir
from planner.problem.model import ModelSpec
from planner.problem.space import PlanSpace

BASE = read_mapping(instances_dir() / "tiny-3dc.toml")
MODEL = load_instance("tiny-3dc").workload.model


def _data(**edits):
    d = copy.deepcopy(BASE)
    d["workload"]["model"] = MODEL
    for path, value in edits.items():
        node = d
        keys = [int(k) if k.isdigit() else k for k in path.split("__")]
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return d


@pytest.mark.parametrize("path, field", [
    ("links__0__bandwidth_gbps", "links[0].bandwidth_gbps"),
    ("links__1__latency_ms", "links[1].latency_ms"),
    ("gpu__peak_tflops", "gpu.peak_tflops"),
    ("gpu__mfu", "gpu.mfu"),
    ("gpu__memory_gb", "gpu.memory_gb"),
    ("domains__0__intra_bandwidth_gbps", "domains[0].intra_bandwidth_gbps"),
    ("domains__2__price_per_gpu_hour", "domains[2].price_per_gpu_hour"),
    ("options__wan_price_per_gb", "options.wan_price_per_gb"),
])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_floats_refused_naming_the_field(path, field, value):
    with pytest.raises(InputError) as e:
        Instance.from_dict(_data(**{path: value}))
    assert e.value.field == field
    assert "finite" in e.value.message or "greater" in e.value.message


@pytest.mark.parametrize("path, value, field", [
    ("domains__0__gpus", 10**11, "domains[0].gpus"),
    ("workload__global_batch_size", 10**12, "workload.global_batch_size"),
    ("workload__seq_len", 10**12, "workload.seq_len"),
    ("domains__0__gpus_per_node", 10**9, "domains[0].gpus_per_node"),
    ("options__max_stages", 10**9, "options.max_stages"),
    ("links__0__bandwidth_gbps", 1e300, "links[0].bandwidth_gbps"),
])
def test_absurd_figures_refused_with_the_reason(path, value, field):
    with pytest.raises(InputError) as e:
        Instance.from_dict(_data(**{path: value}))
    assert e.value.field == field
    assert limits.reason(field) in e.value.message


def test_total_gpus_capped_even_when_each_domain_is_within_the_cap():
    d = _data()
    for dom in d["domains"]:
        dom["gpus"] = limits.MAX_TOTAL_GPUS // 2
    with pytest.raises(InputError) as e:
        Instance.from_dict(d)
    assert e.value.field == "domains" and "Earth" in e.value.message


@pytest.mark.parametrize("field, value", [("num_layers", 10**9), ("hidden_size", 10**9),
                                          ("vocab_size", 10**12), ("ffn_hidden_size", math.inf)])
def test_model_figures_capped(field, value):
    spec = dict(name="m", num_layers=2, hidden_size=64, ffn_hidden_size=256, num_heads=4, vocab_size=100)
    spec[field] = value
    with pytest.raises(InputError) as e:
        Instance.from_dict(_data(workload__model=spec))
    assert e.value.field.endswith(field)


def test_explicit_unit_figures_finite():
    units = [dict(name="u", params=1.0, fwd_flops_per_token=math.nan, out_bytes_per_token=1.0,
                  stored_bytes_per_token=1.0)]
    with pytest.raises(Exception):
        ModelSpec.model_validate({"name": "m", "units": units})
    with pytest.raises(InputError) as e:
        Instance.from_dict(_data(workload__model={"name": "m", "units": units}))
    assert e.value.field.endswith("fwd_flops_per_token")


def test_cli_inf_bandwidth_and_huge_gpus_exit_2(tmp_path):
    text = (instances_dir() / "tiny-3dc.toml").read_text()
    (tmp_path / "models").symlink_to(instances_dir().parent / "models")
    for old, new, field in (("bandwidth_gbps = 10.0", "bandwidth_gbps = inf", "links[0].bandwidth_gbps"),
                            ("gpus = 16", "gpus = 100000000000", "domains[0].gpus")):
        f = tmp_path / "i.toml"
        f.write_text(text.replace(old, new, 1))
        r = CliRunner().invoke(main, ["plan", str(f), "--solver", "greedy", "-q"])
        assert r.exit_code == 2, r.output
        assert str(f) in r.output and field in r.output and "Traceback" not in r.output


def test_plan_space_never_holds_more_stage_micro_batches_than_the_cap():
    inst = Instance.from_dict(_data(workload__global_batch_size=2 * limits.MAX_STAGE_MICRO_BATCHES,
                                    workload__micro_batch_sizes=[1, 2]))
    space = PlanSpace(inst)
    gbs = inst.workload.global_batch_size
    shapes = list(space.shapes())
    assert all(sh.stages * sh.micro_batches(gbs) <= limits.MAX_STAGE_MICRO_BATCHES for sh in shapes)
    assert space.partition(1, 1, "1f1b", 2, limits.MAX_STAGE_MICRO_BATCHES) is None


def test_plan_file_over_the_cap_refused(tmp_path):
    from planner import Plan

    inst = Instance.from_dict(_data(workload__global_batch_size=4 * limits.MAX_STAGE_MICRO_BATCHES,
                                    workload__micro_batch_sizes=[1]))
    p = Plan.build([(0, inst.num_units)], [["alpha"]], tp=4, micro_batch_size=1, instance=inst)
    with pytest.raises(InputError) as e:
        p.check_against(inst)
    assert e.value.field == "num_micro_batches"


def test_trace_non_finite_value_refused(tmp_path):
    from planner.problem import traces

    inst = load_instance("tiny-3dc")
    tr = traces.generate(inst, hours=1, seed=0)
    f = tmp_path / "t.csv"
    traces.save(tr, f)
    lines = f.read_text().splitlines()
    cells = lines[2].split(",")
    cells[1] = "inf"
    lines[2] = ",".join(cells)
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as e:
        traces.load(f, inst)
    assert e.value.file == str(f) and e.value.field.endswith("bandwidth_gbps") and "finite" in str(e.value)
