"""SAILOR's configurations rebuilt as instances (benchmarks/sailor/, issue 25): each packaged
TOML is what build.py makes from its sourced data, SAILOR's pick becomes a Plan that uses
exactly the GPUs SAILOR's planner chose, and the mfu calibration reproduces SAILOR's profiled
layer time in the evaluator."""

import math
from collections import Counter

import pytest

from benchmarks.sailor import build
from planner import Evaluator, Instance, Plan

NAMES = sorted(build.picks())


@pytest.mark.parametrize("name", NAMES)
def test_packaged_instance_is_the_generated_one(name):
    packaged = build.instance(name)
    fresh = Instance.from_dict(build.instance_dict(name))
    assert packaged.to_dict() == fresh.to_dict()
    # one domain per (zone, type) of SAILOR's trace, with its GPUs (a V100 node = one device)
    gpus = {d.name: d.gpus for d in packaged.domains}
    for key, count in build.picks()[name]["cluster"].items():
        gpu, zone = key.split("_", 1)
        typ = "V100-16x4" if gpu == "V100-16" else gpu
        assert gpus[f"{zone}.{typ}"] == (count if typ == "A100-40" else count // 4)


@pytest.mark.parametrize("name", NAMES)
def test_sailor_plan_uses_the_gpus_sailor_chose(name):
    pick = build.picks()[name]
    sp = build.sailor_plan(name)
    want = Counter()
    for stage in pick["stages"]:
        for gpu, tp, zone in stage:
            want[f"{zone}.{'V100-16x4' if gpu == 'V100-16' else gpu}"] += 1 if gpu == "V100-16" else tp
    got = Counter()
    for row in sp.plan.placement:
        for d in row:
            got[d] += 1 if d.endswith("V100-16x4") else sp.plan.tp
    assert got == want
    R, b = sp.plan.replicas, sp.plan.micro_batch_size
    assert sp.instance.workload.global_batch_size == R * b * math.ceil(1024 / (R * b))
    ev = Evaluator(sp.instance, sp.plan, spec=3)
    over = [v.message for v in ev.violations()]
    if name == "geo-5x128":  # SAILOR's pick puts 33 nodes in a zone of 32
        assert over == ["domain us-central1-c.A100-40: plan uses 132 GPUs, 128 available"]
    else:
        assert over == []
        assert math.isfinite(float(ev.iteration_times()[0]))


@pytest.mark.parametrize("gpu,mbs,tp", [("A100-40", 2, 1), ("A100-40", 4, 4), ("A100-40", 8, 2),
                                        ("V100-16x4", 1, 4), ("V100-16x4", 8, 4)])
def test_calibrated_mfu_reproduces_the_profiled_layer_time(gpu, mbs, tp):
    """One OPT-350 block on one device, one micro-batch: the evaluator's T = f + g must be
    SAILOR's profiled forward + backward time of a layer at (mbs, tp)."""
    spec = dict(build.A100 if gpu == "A100-40" else build.V100X4, mfu=build.calibrated_mfu(gpu, mbs, tp))
    t = tp if gpu == "A100-40" else 1
    inst = Instance.from_dict(dict(
        name="one-block", gpus=[spec],
        domains=[dict(name="d", gpus=4, gpus_per_node=4, intra_bandwidth_gbps=100.0, gpu=spec["name"])],
        links=[], workload=dict(model=dict(name="blk", units=[build.units()[1]]), global_batch_size=mbs,
                                seq_len=build.SEQ, micro_batch_sizes=[mbs], tensor_parallel=[t])))
    plan = Plan.build([(0, 1)], [["d"]], tp=t, micro_batch_size=mbs, instance=inst, schedule="1f1b")
    T = float(Evaluator(inst, plan, spec=3).iteration_times()[0])
    measured = build.profile()[(gpu if gpu == "A100-40" else "V100-16", mbs, tp)]
    assert T == pytest.approx(measured, rel=1e-9)
