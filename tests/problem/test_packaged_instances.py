"""The packaged instances (instances/*.toml, made by instances/_generate.py) under SPEC v3:
their uplinks are what the sourced per-VM figures give, recomputed here from the shared
data file independently of the generator; tiny-3dc still forces a relay; and the files are
what the generator makes of the shared data today."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest

from planner import load_instance
from planner.problem.files import available

# Per-VM figures that are not in the shared data, with their sources (as in the generator's
# headers, written down again here so that a changed constant there fails this test):
P4D_NIC_GBPS, P4D_VCPUS = 400.0, 96  # AWS Compute Blog "Amazon EC2 P4d instances deep dive" (2020-11-03)
P5_NIC_GBPS, P5_VCPUS = 3200.0, 192  # AWS "Amazon EC2 Capacity Blocks for ML Pricing": p5.48xlarge
ND_H100_V5_VM_GBPS = 80.0  # Azure ND H100 v5 series: 80,000 Mbps per VM (MicrosoftDocs/azure-docs)

WITH_UPLINKS = {"aws-multiregion", "two-dc", "azure-multiregion", "gcp-16", "azure-zones", "aws-a100-h100"}
from gpu_types_instances import MIXED, hand_plan  # noqa: E402  GPU types (SPEC v3 (g), issue 25)


def interconnect_facts(shared_data) -> dict[str, dict[str, str]]:
    with open(shared_data / "interconnect_facts.csv", encoding="utf-8") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {r["item"]: r for r in rows}


def per_vm_gbps(shared_data) -> dict[str, float]:
    """Cloud -> the most one GPU VM sends to other regions, Gbit/s."""
    facts = interconnect_facts(shared_data)
    aws = facts["AWS inter-region per-instance egress cap"]["value"]  # "5 Gbps (or 50% of NIC for >=32 vCPU)"
    floor, pct, vcpus = (float(x) for x in re.findall(r"[\d.]+", aws))
    assert (floor, pct, vcpus) == (5.0, 50.0, 32.0), aws
    p4d = max(floor, pct / 100 * P4D_NIC_GBPS) if P4D_VCPUS >= vcpus else floor
    p5 = max(floor, pct / 100 * P5_NIC_GBPS) if P5_VCPUS >= vcpus else floor
    gcp = float(facts["GCP VM egress to external IP / other cloud"]["value"])
    return {"aws": p4d, "aws-p5": p5, "gcp": gcp, "azure": ND_H100_V5_VM_GBPS}


def cloud_of(region: str) -> str | None:
    head = region.split(":")[0]
    return head if head in ("aws", "gcp", "azure") else None


@pytest.mark.parametrize("name", available("instances"))
def test_uplinks_are_vms_times_the_sourced_per_vm_cap(name, shared_data):
    caps = per_vm_gbps(shared_data)
    assert caps["aws"] == 200.0 and caps["aws-p5"] == 1600.0 and caps["gcp"] == 7.0
    inst = load_instance(name, spec=3)
    # the VM of each (cloud, GPU type): p4d, p5, ND H100 v5, a3-mega
    vm_of = {("aws", "A100-40GB"): "aws", ("aws", "H100-SXM-80GB"): "aws-p5",
             ("azure", "H100-SXM-80GB"): "azure", ("gcp", "H100-SXM-80GB"): "gcp"}
    for d in inst.domains:
        cloud = cloud_of(d.region)
        if name not in WITH_UPLINKS:
            assert d.uplink_gbps is None, (name, d.name)
            continue
        key = (cloud, inst.domain_gpu(d.name).name)
        assert key in vm_of, (name, d.name, d.region, key)
        vms, rest = divmod(d.gpus, d.gpus_per_node)
        assert rest == 0 and d.gpus_per_node == 8
        assert d.uplink_gbps == pytest.approx(vms * caps[vm_of[key]], rel=1e-12), (name, d.name)
    assert (name in WITH_UPLINKS) == any(d.uplink_gbps is not None for d in inst.domains)


def test_tiny_3dc_relays_under_spec_v3():
    inst = load_instance("tiny-3dc", spec=3)
    assert not any({l.a, l.b} == {"alpha", "gamma"} for l in inst.links)
    multi = {k: r for k, r in inst.direct_routes.items() if r.hops >= 2}
    assert set(multi) == {("alpha", "gamma"), ("gamma", "alpha")}
    assert multi[("alpha", "gamma")].nodes == ("alpha", "beta", "gamma")
    assert multi[("alpha", "gamma")].latency_ms == pytest.approx(2.0 + 3.0)
    # no link loses to a relay, so v2's routes are v3's: v2 figures stay as they were
    assert all(inst.routes[k].nodes == r.nodes for k, r in inst.direct_routes.items())


def test_packaged_files_are_what_the_generator_makes(root, shared_data):
    res = subprocess.run([sys.executable, str(root / "instances" / "_generate.py"), "--check"],
                         capture_output=True, text=True, timeout=120,
                         env={"PLANNER_SHARED_DATA": str(shared_data), "PATH": ""})
    assert res.returncode == 0, res.stderr


def _gpu_rows(shared_data) -> dict[tuple[str, str], dict[str, str]]:
    with open(shared_data / "gpu_specs.csv", encoding="utf-8") as f:
        return {(r["gpu"], r["form_factor"]): r for r in csv.DictReader(l for l in f if not l.startswith("#"))}


@pytest.mark.parametrize("name", MIXED)
def test_mixed_instances_load_and_score_a_hand_plan(name, shared_data):
    """The GPU-type instances load under SPEC v3 with more than one type (and not under v2);
    the datasheet types carry gpu_specs.csv's figures; a hand pipeline whose first stage sits
    on one type and second on the other scores feasible, and each stage's compute c_j is the
    SPEC 5 closed form at ITS domain's type (recomputed here from the units), so a type
    applied to the wrong stage fails."""
    from planner import Evaluator, InputError

    inst = load_instance(name, spec=3)
    assert inst.heterogeneous and len(inst.types_used) == 2
    with pytest.raises(InputError):
        load_instance(name, spec=2)  # [[gpus]] and a domain's gpu are v3 fields
    with pytest.raises(InputError):
        inst.gpu  # several types: no one type to take
    rows = _gpu_rows(shared_data)
    sheet = {"H100-SXM-80GB": ("H100", "SXM5"), "A100-40GB": ("A100-40GB", "SXM4")}
    for g in inst.gpu_types:
        if g.name in sheet:
            r = rows[sheet[g.name]]
            assert (g.peak_tflops, g.memory_gb) == (float(r["bf16_dense_tflops"]), float(r["hbm_gb"]))
            assert g.nvlink_bandwidth_gbps == float(r["nvlink_gbps_total"]) / 2 * 8
    # one domain of each type (the first of each), two stages split at the middle unit
    plan = hand_plan(inst)
    n, tp = inst.num_units, plan.tp
    (a, b) = plan.placement[0]
    ta, tb = inst.domain_gpu(a).name, inst.domain_gpu(b).name
    ev = Evaluator(inst, plan).evaluate()
    assert ev.feasible, ev.violations
    w = inst.workload
    tokens = plan.micro_batch_size * w.seq_len
    beta = 3 if w.recompute else 2
    for j, (lo, hi), dom in ((0, (0, n // 2), a), (1, (n // 2, n), b)):
        g = inst.domain_gpu(dom)
        units = inst.units[lo:hi]
        F = sum(u.fwd_flops_per_token for u in units)
        flops = g.peak_tflops * 1e12 * g.mfu
        TP = sum(getattr(u, "tp_bytes_per_token", 0.0) for u in units)
        y = 0.0 if (tp == 1 or g.nvlink_bandwidth_gbps is None) else \
            2 * (tp - 1) / tp * tokens * TP / (g.nvlink_bandwidth_gbps * 1e9 / 8)
        n_j = sum(1 for u in units if u.fwd_flops_per_token > 0)
        o = g.unit_overhead_ms / 1e3
        c = (1 + beta) * F * tokens / (tp * flops) + 2 * y + (1 + beta) * n_j * o
        assert ev.compute_s[j] == pytest.approx(c, rel=1e-9), (name, j, dom)
    assert ta != tb
