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
ND_H100_V5_VM_GBPS = 80.0  # Azure ND H100 v5 series: 80,000 Mbps per VM (MicrosoftDocs/azure-docs)

WITH_UPLINKS = {"aws-multiregion", "two-dc", "azure-multiregion", "gcp-16", "azure-zones"}


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
    gcp = float(facts["GCP VM egress to external IP / other cloud"]["value"])
    return {"aws": p4d, "gcp": gcp, "azure": ND_H100_V5_VM_GBPS}


def cloud_of(region: str) -> str | None:
    head = region.split(":")[0]
    return head if head in ("aws", "gcp", "azure") else None


@pytest.mark.parametrize("name", available("instances"))
def test_uplinks_are_vms_times_the_sourced_per_vm_cap(name, shared_data):
    caps = per_vm_gbps(shared_data)
    assert caps["aws"] == 200.0 and caps["gcp"] == 7.0
    inst = load_instance(name, spec=3)
    gpu_of = {"aws": "A100-40GB", "azure": "H100-SXM-80GB", "gcp": "H100-SXM-80GB"}  # p4d, ND H100 v5, a3-mega
    for d in inst.domains:
        cloud = cloud_of(d.region)
        if name not in WITH_UPLINKS:
            assert d.uplink_gbps is None, (name, d.name)
            continue
        assert cloud is not None and inst.gpu.name == gpu_of[cloud], (name, d.name, d.region)
        vms, rest = divmod(d.gpus, d.gpus_per_node)
        assert rest == 0 and d.gpus_per_node == 8
        assert d.uplink_gbps == pytest.approx(vms * caps[cloud], rel=1e-12), (name, d.name)
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
