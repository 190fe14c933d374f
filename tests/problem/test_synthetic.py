"""``planner generate`` and planner.problem.synthetic: deterministic, validated by
the loader, the sizes asked for, clusters as regions; small generated instances
plan with greedy and evaluate; bad sizes are refused with exit 2."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from planner import evaluate, load_instance, plan as make_plan
from planner.cli import main
from planner.problem.errors import InputError
from planner.problem.files import toml_text
from planner.problem.synthetic import generate_instance, header


def write(tmp_path, data, name="g.toml"):
    path = tmp_path / name
    path.write_text(toml_text(data, header(data, "test")))
    return path


@pytest.mark.parametrize("domains,gpus,clusters,seed,regions", [(1, 8, None, 0, 1), (7, 700, 2, 3, 2),
                                                                 (40, 20_000, 4, 1, 4), (300, 150_000, None, 0, 10)])
def test_sizes_regions_and_determinism(tmp_path, domains, gpus, clusters, seed, regions):
    data = generate_instance(domains, gpus, seed, clusters=clusters)
    assert data == generate_instance(domains, gpus, seed, clusters=clusters)
    assert data != generate_instance(domains, gpus, seed + 1, clusters=clusters) or domains == 1
    inst = load_instance(write(tmp_path, data))
    assert len(inst.domains) == domains and inst.total_gpus == gpus
    assert all(d.gpus >= 8 for d in inst.domains)
    assert len({d.region for d in inst.domains}) == regions
    n = len(inst.domains)
    assert len(inst.routes) == n * (n - 1)  # connected
    # metro links 0.2-2 ms inside a cluster; the backbone joins gateways of different clusters
    region = {d.name: d.region for d in inst.domains}
    for link in inst.links:
        if region[link.a] == region[link.b]:
            assert 0.2 <= link.latency_ms <= 2.0 + 1e-9
    # the batch can feed every GPU with replicas of 64 GPUs
    assert inst.workload.global_batch_size * 64 >= gpus or inst.workload.global_batch_size >= 2**22


def test_toml_header_says_synthetic(tmp_path):
    data = generate_instance(12, 1200, 5, clusters=3)
    text = toml_text(data, header(data, "planner generate --domains 12 --gpus 1200 --seed 5"))
    assert text.startswith("# synthetic-12dc-1200gpu-s5: SYNTHETIC instance; no figure is sourced.")
    assert "planner generate --domains 12" in text


@pytest.mark.parametrize("seed", [0, 1])
def test_small_generated_instance_plans_and_evaluates(tmp_path, seed):
    inst = load_instance(write(tmp_path, generate_instance(24, 24 * 128, seed, clusters=3)))
    p = make_plan(inst, solver="greedy")
    ev = evaluate(inst, p)
    assert ev.feasible, ev.violations
    assert ev.iteration_time_s == pytest.approx(p.predicted.iteration_time_s, rel=1e-12)
    assert ev.iteration_time_s >= ev.lower_bound_s * (1 - 1e-9)
    used = p.gpus_per_domain()
    assert all(used[d] <= inst.domain(d).gpus for d in used)


@pytest.mark.parametrize("kwargs,field", [(dict(domains=0, gpus=8), "domains"),
                                          (dict(domains=1001, gpus=10**6), "domains"),
                                          (dict(domains=10, gpus=79), "gpus"),
                                          (dict(domains=10, gpus=800, clusters=11), "clusters")])
def test_bad_sizes(kwargs, field):
    with pytest.raises(InputError) as e:
        generate_instance(**kwargs)
    assert e.value.field == field


def test_cli_generate(tmp_path):
    out = tmp_path / "x.toml"
    args = ["generate", "--domains", "30", "--gpus", "4000", "--seed", "2", "--clusters", "3", "--out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    first = out.read_text()
    assert "SYNTHETIC" in first and "--domains 30 --gpus 4000 --seed 2 --clusters 3" in first
    assert CliRunner().invoke(main, args).exit_code == 0 and out.read_text() == first  # deterministic
    res = CliRunner().invoke(main, ["validate", str(out)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["plan", str(out), "--solver", "greedy", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["evaluation"]["feasible"] is True
    bad = CliRunner().invoke(main, ["generate", "--domains", "3", "--gpus", "10", "--out", str(tmp_path / "y.toml")])
    assert bad.exit_code == 2 and "--gpus" in bad.output and not (tmp_path / "y.toml").exists()
    bad = CliRunner().invoke(main, ["generate", "--domains", "3", "--gpus", "100", "--model", "nope",
                                    "--out", str(tmp_path / "y.toml")])
    assert bad.exit_code == 2 and "--model" in bad.output


# -- GPU types (issue 25): planner generate --gpu-types N ----------------------------------

def _datasheet(shared_data) -> dict[str, dict[str, str]]:
    import csv

    with open(shared_data / "gpu_specs.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
    key = {"A100-40GB": ("A100-40GB", "SXM4"), "A100-80GB": ("A100-80GB", "SXM4"),
           "H100-SXM-80GB": ("H100", "SXM5"), "H100-PCIe-80GB": ("H100", "PCIe"),
           "H200-SXM-141GB": ("H200", "SXM"), "V100-SXM2-32GB": ("V100-16/32GB", "SXM2")}
    return {n: next(r for r in rows if (r["gpu"], r["form_factor"]) == k) for n, k in key.items()}


def test_gpu_type_table_is_the_datasheet(shared_data):
    """Every type of the synthetic table carries gpu_specs.csv's peak, memory and NVLink
    (one way = half the bidirectional total, x 8), and names a source."""
    from planner.problem.synthetic import GPU_TYPES

    sheet = _datasheet(shared_data)
    assert {g["name"] for g in GPU_TYPES} == set(sheet)
    for g in GPU_TYPES:
        r = sheet[g["name"]]
        assert g["peak_tflops"] == float(r["bf16_dense_tflops"].split()[0])
        mem = r["hbm_gb"].split("/")[-1]  # V100: the 32 GB part
        assert g["memory_gb"] == float(mem)
        assert g["nvlink_bandwidth_gbps"] == float(r["nvlink_gbps_total"].split()[0]) / 2 * 8
        assert "gpu_specs.csv" in g["source"] and 0 < g["mfu"] < 1


@pytest.mark.parametrize("n,domains,seed", [(1, 5, 0), (2, 12, 1), (3, 12, 2), (6, 8, 3)])
def test_generated_gpu_types(tmp_path, n, domains, seed):
    from planner.problem.synthetic import GPU_TYPES

    data = generate_instance(domains, domains * 64, seed, clusters=2, gpu_types=n)
    assert data == generate_instance(domains, domains * 64, seed, clusters=2, gpu_types=n)  # seeded
    inst = load_instance(write(tmp_path, data), spec=3)
    assert len(inst.gpu_types) == n and len(inst.types_used) == n  # every drawn type has a domain
    assert inst.heterogeneous == (n > 1)
    table = {g["name"]: g for g in GPU_TYPES}
    for d in inst.domains:
        g = inst.domain_gpu(d.name)
        assert (g.peak_tflops, g.memory_gb, g.mfu) == tuple(table[g.name][k] for k in ("peak_tflops", "memory_gb", "mfu"))
        assert d.intra_bandwidth_gbps == table[g.name]["intra"]
    # the network and GPU counts are those of the file without types (types are drawn last)
    plain = generate_instance(domains, domains * 64, seed, clusters=2)
    assert "gpu" in plain and "gpus" not in plain
    assert data["links"] == plain["links"]
    assert [d["gpus"] for d in data["domains"]] == [d["gpus"] for d in plain["domains"]]
    text = write(tmp_path, data).read_text()
    assert all(f"{g.name}: " in text for g in inst.gpu_types)  # the header names each type and its source


def test_cli_generate_gpu_types(tmp_path):
    out = tmp_path / "m.toml"
    args = ["generate", "--domains", "9", "--gpus", "720", "--seed", "4", "--clusters", "3",
            "--gpu-types", "3", "--model", "llama2-13b", "--out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "--gpu-types 3" in out.read_text()
    inst = load_instance(out)
    assert len(inst.types_used) == 3 and inst.name.endswith("-3types")
    res = CliRunner().invoke(main, ["validate", str(out)])
    assert res.exit_code == 0, res.output
    bad = CliRunner().invoke(main, ["generate", "--domains", "2", "--gpus", "100", "--gpu-types", "3",
                                    "--out", str(tmp_path / "z.toml")])
    assert bad.exit_code == 2 and "--gpu-types" in bad.stderr and not (tmp_path / "z.toml").exists()
