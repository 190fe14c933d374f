"""SAILOR's planner-evaluation configurations (SOSP'25 artifact, Figures 8b, 10, 11, 12) as
SPEC v3 instances, and SAILOR's picked plan on each as a planner ``Plan``.

Data in, result out: ``sailor_picks.json`` (what SAILOR's planner picked), ``network.csv``
(SAILOR's profiled node-to-node bandwidths), ``profile_opt350.csv`` (its per-layer times) and
the constants below, each sourced in ``sources.toml``.  Units: seconds, Gbit/s, one-way
milliseconds, GB (1e9 bytes), USD.  README.md says why each encoding was chosen.

- One domain per (zone, GPU type) of the configuration.
- ``A100-40``: a GPU of 42.34 GB (SAILOR's ``mem_per_gpu``), peak 312 TFLOP/s, NVLink 2400
  Gbit/s one way, 4 per node.
- ``V100-16x4``: SAILOR only ever runs V100-16 at tensor parallelism 4 (one node) in these
  configurations while the A100s run at tp 1, and a planner Plan has one tp for every stage:
  a V100 node is therefore one device of 4 x 125 TFLOP/s and 4 x 17.18 GB (tp 4 splits weights
  and activations evenly, SPEC's M_j / t), its tensor-parallel all-reduces inside its mfu, one
  device per "node" (``gpus_per_node = 1``, so no further tp on it).
- mfu per type: the value for which SPEC's block time f + g (with the NVLink all-reduces y)
  equals SAILOR's profiled forward + backward time of one OPT-350 layer at SAILOR's picked
  micro-batch size and tp (``calibrated_mfu``).
- Links: a full mesh; bandwidth = the node-pair figure x the smaller domain's node count
  (every node sends in parallel), the domain's ``uplink_gbps`` = its nodes x its same-zone
  node-pair figure (the nodes' NICs), ``intra_bandwidth_gbps`` = the same-zone node-pair
  figure.  Latency one way: 0.05 ms inside a zone, 0.25 ms between us-central1 zones (both
  ASSUMED: SAILOR's network profile has no latency), 24.4 ms us-central1 <-> us-west1
  (Skyplane RTT / 2).

>>> inst = instance("het-32-96")
>>> [d.name for d in inst.domains], inst.workload.global_batch_size
(['us-central1-a.A100-40', 'us-central1-a.V100-16x4'], 1024)
>>> sp = sailor_plan("het-32-96")
>>> sp.plan.replicas, sp.plan.tp, sp.instance.workload.global_batch_size  # 27 x 2 x ceil(1024/54)
(27, 1, 1026)
"""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner import Instance, Plan  # noqa: E402
from planner.problem.files import toml_text  # noqa: E402

try:  # as a package (tests) or with benchmarks/ on sys.path (the scripts)
    from ..fidelity.rebuild import bounds_from_counts, gpt_units
except ImportError:  # pragma: no cover
    from fidelity.rebuild import bounds_from_counts, gpt_units  # type: ignore

HERE = Path(__file__).resolve().parent
INSTANCES = HERE / "instances"

SEQ, GBS = 2048, 1024                  # training_config_opt_350.json
A100 = dict(name="A100-40", peak_tflops=312.0, memory_gb=42.338615296, nvlink_bandwidth_gbps=2400.0)
V100X4 = dict(name="V100-16x4", peak_tflops=4 * 125.0, memory_gb=4 * 17.179869184)
PRICE = {"A100-40": 3.673385, "V100-16x4": 4 * 2.859998}   # USD per device-hour (constants.py)
GPUS_PER_NODE = 4
LAT_SAME_ZONE_MS, LAT_REGION_MS = 0.05, 0.25                # ASSUMED (no latency in SAILOR's data)
LAT_CENTRAL_WEST_MS = (32.95 + 64.54) / 2 / 2               # Skyplane RTTs, one way
WAN_PRICE = 0.01                                            # inter-zone egress, USD/GB (modal)


def units() -> list[dict]:
    """OPT-350's 26 units as SAILOR counts them: embedding (vocab + 2048 learned positions),
    24 blocks, head; fp32 activations (the AE runs pass no --fp16), no recomputation."""
    return gpt_units(24, 1024, 4096, 50272, SEQ, head="lm", act_bytes=4, positions=2048, recompute=False)


@lru_cache(maxsize=None)
def picks() -> dict[str, dict]:
    """SAILOR's first plan per configuration, by name (sailor_picks.json)."""
    return {p["name"]: p for p in json.loads((HERE / "sailor_picks.json").read_text())["picks"]}


@lru_cache(maxsize=None)
def network() -> dict[tuple[str, str, str, str], float]:
    """Saturated node-pair bandwidth, Gbit/s, keyed (zone_a, type_a, zone_b, type_b)."""
    with open(HERE / "network.csv") as f:
        return {(r["zone_a"], r["type_a"], r["zone_b"], r["type_b"]): float(r["gbit_s"]) for r in csv.DictReader(f)}


@lru_cache(maxsize=None)
def profile() -> dict[tuple[str, int, int], float]:
    """SAILOR's forward + backward seconds of one OPT-350 layer (unit 1), keyed (gpu, mbs, tp)."""
    with open(HERE / "profile_opt350.csv") as f:
        return {(r["gpu"], int(r["mbs"]), int(r["tp"])): float(r["fwd_s"]) + float(r["bwd_s"])
                for r in csv.DictReader(f) if r["unit"] == "1"}


def calibrated_mfu(gpu: str, mbs: int, tp: int) -> float:
    """mfu for which SPEC's f + g of one block (beta = 2, tp all-reduces at NVLink) equals the
    profiled layer time at (mbs, tp); ``gpu`` ``"V100-16x4"`` is one device at SAILOR's tp 4.

    >>> round(calibrated_mfu("A100-40", 2, 1), 4)
    0.0814
    """
    blk = units()[1]
    tokens = mbs * SEQ
    if gpu == "V100-16x4":
        measured, t, spec = profile()[("V100-16", mbs, 4)], 1, V100X4
    else:
        measured, t, spec = profile()[(gpu, mbs, tp)], tp, A100
    y = 0.0
    if t > 1 and spec.get("nvlink_bandwidth_gbps"):
        y = 2 * (t - 1) / t * tokens * blk["tp_bytes_per_token"] / (spec["nvlink_bandwidth_gbps"] * 1e9 / 8)
    compute = measured - 2 * y
    if compute <= 0:
        raise ValueError(f"{gpu} mbs {mbs} tp {tp}: profiled {measured} s is below the NVLink time {2 * y} s")
    return 3 * blk["fwd_flops_per_token"] * tokens / (t * spec["peak_tflops"] * 1e12 * compute)


def _type(gpu_zone_entry: str) -> str:
    return "V100-16x4" if gpu_zone_entry == "V100-16" else gpu_zone_entry


def _dname(zone: str, typ: str) -> str:
    return f"{zone}.{typ}"


def _latency(za: str, zb: str) -> float:
    if za == zb:
        return LAT_SAME_ZONE_MS
    if za.rsplit("-", 1)[0] == zb.rsplit("-", 1)[0]:
        return LAT_REGION_MS
    return LAT_CENTRAL_WEST_MS


def sailor_shape(name: str) -> tuple[int, dict[str, int]]:
    """(micro-batch size, tp per SAILOR type) of SAILOR's pick ``name``."""
    p = picks()[name]
    tps: dict[str, set] = {}
    for stage in p["stages"]:
        for gpu, tp, _zone in stage:
            tps.setdefault(gpu, set()).add(tp)
    if any(len(v) > 1 for v in tps.values()):
        raise ValueError(f"{name}: one GPU type at several tp {tps}: not expressible")
    return p["mbs"], {g: next(iter(v)) for g, v in tps.items()}


def instance_dict(name: str, calibrate_at: tuple[int, int] | None = None) -> dict:
    """The configuration ``name`` of sailor_picks.json as an instance table (SPEC v3), each
    type's mfu calibrated at SAILOR's picked (micro-batch, A100 tp), or at ``calibrate_at``."""
    p = picks()[name]
    mbs, tps = sailor_shape(name)
    a100_tp = tps.get("A100-40", 1)
    if calibrate_at is not None:
        mbs, a100_tp = calibrate_at
    net = network()
    doms, types_used = [], []
    for key, count in p["cluster"].items():
        gpu, zone = key.split("_", 1)
        typ = _type(gpu)
        if typ not in types_used:
            types_used.append(typ)
        nodes = count // GPUS_PER_NODE
        node_bw = net[(zone, gpu, zone, gpu)]
        doms.append(dict(name=_dname(zone, typ), gpus=count if typ == "A100-40" else nodes,
                         gpus_per_node=GPUS_PER_NODE if typ == "A100-40" else 1,
                         intra_bandwidth_gbps=node_bw, price_per_gpu_hour=PRICE[typ], gpu=typ,
                         uplink_gbps=round(nodes * node_bw, 6), region=f"gcp:{zone}",
                         _zone=zone, _sgpu=gpu, _nodes=nodes))
    links = []
    for i, a in enumerate(doms):
        for b in doms[i + 1:]:
            bw = min(net[(a["_zone"], a["_sgpu"], b["_zone"], b["_sgpu"])],
                     net[(b["_zone"], b["_sgpu"], a["_zone"], a["_sgpu"])])
            links.append(dict(a=a["name"], b=b["name"], bandwidth_gbps=round(bw * min(a["_nodes"], b["_nodes"]), 6),
                              latency_ms=_latency(a["_zone"], b["_zone"])))
    gpus = []
    for typ in types_used:
        spec = dict(A100 if typ == "A100-40" else V100X4)
        mfu_mbs = mbs
        spec["mfu"] = round(calibrated_mfu(typ, mfu_mbs, a100_tp if typ == "A100-40" else 4), 6)
        gpus.append(spec)
    for d in doms:
        for k in ("_zone", "_sgpu", "_nodes"):
            d.pop(k)
    objective = "cost" if p["objective"] == "iteration_cost" else "time"
    return dict(name=f"sailor-{name}", description=f"SAILOR {p['figure']}: {p['trace']}",
                gpus=gpus, domains=doms, links=links,
                workload=dict(model=dict(name="opt-350", units=units()), global_batch_size=GBS, seq_len=SEQ,
                              micro_batch_sizes=[1, 2, 4, 8], tensor_parallel=[1, 2, 4], recompute=False,
                              gradient_sync="ring"),
                options=dict(schedules=["1f1b"], objective=objective, wan_price_per_gb=WAN_PRICE))


def instance(name: str, calibrate_at: tuple[int, int] | None = None) -> Instance:
    """The rebuilt instance, read from ``instances/<name>.toml`` when written, else built;
    with ``calibrate_at`` = (micro-batch, A100 tp), built with every mfu calibrated there."""
    if calibrate_at is not None:
        return Instance.from_dict(instance_dict(name, calibrate_at))
    path = INSTANCES / f"{name}.toml"
    if path.exists():
        from planner import load_instance
        return load_instance(str(path))
    return Instance.from_dict(instance_dict(name))


@dataclass(frozen=True)
class SailorPlan:
    """SAILOR's pick as a Plan on ``instance`` (the configuration with SAILOR's batch rounding:
    global batch = R x b x ceil(1024 / (R x b)), as its planner counts micro-batches)."""

    instance: Instance
    plan: Plan
    note: str


def sailor_plan(name: str) -> SailorPlan:
    """SAILOR's first plan for configuration ``name``: stage j of replica r sits in the domain
    of ``stages[j][r]`` (SAILOR lists each stage's data-parallel copies in replica order)."""
    p = picks()[name]
    mbs, tps = sailor_shape(name)
    stages = p["stages"]
    R = len(stages[0])
    if any(len(s) != R for s in stages):
        raise ValueError(f"{name}: stages with different data-parallel degrees")
    m = math.ceil(GBS / (R * mbs))
    base = instance(name)
    data = base.to_dict()
    data["workload"]["model"] = base.workload.model
    data["workload"]["global_batch_size"] = R * mbs * m
    data["workload"]["micro_batch_sizes"] = [mbs]
    data["name"] = f"{base.name}.sailor-batch"
    inst = Instance.from_dict(data)
    placement = [[_dname(stages[j][r][2], _type(stages[j][r][0])) for j in range(len(stages))] for r in range(R)]
    tp = tps.get("A100-40", 1)
    plan = Plan.build(bounds_from_counts(p["units_per_stage"]), placement, tp=tp, micro_batch_size=mbs,
                      instance=inst, schedule="1f1b")
    note = f"batch {R * mbs * m}" if R * mbs * m != GBS else ""
    return SailorPlan(inst, plan, note)


def write_instances() -> list[Path]:
    """Write ``instances/<name>.toml`` for every configuration of sailor_picks.json."""
    INSTANCES.mkdir(exist_ok=True)
    out = []
    for name, p in picks().items():
        header = [f"sailor-{name}: SAILOR's {p['figure']} configuration ({p['trace']}), rebuilt as a SPEC v3 instance.",
                  "Generated by benchmarks/sailor/build.py from benchmarks/sailor/*.csv, sailor_picks.json;",
                  "sources in benchmarks/sailor/sources.toml, encodings in benchmarks/sailor/README.md."]
        path = INSTANCES / f"{name}.toml"
        path.write_text(toml_text(instance_dict(name), header))
        out.append(path)
    return out


if __name__ == "__main__":
    for path in write_instances():
        print(path.relative_to(HERE.parents[1]))
