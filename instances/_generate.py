#!/usr/bin/env python3
"""Regenerate the planner instance files instances/*.toml from the shared data.

Deterministic and stdlib-only (plus tomllib), except the job mixes (mix-*.toml), which
``planner generate-mix`` makes: for them it imports the planner package. Every figure in every instance is
either read from a CSV in the shared data directory or is a named constant in
this file with the reason for it next to it; the header comment of each
generated file repeats both. Edit this script, not the generated files.

Shared data directory: ``<repo>/../shared/data`` (i.e.
``Path(__file__).resolve().parents[2] / "shared" / "data"``), or the directory
named by the environment variable ``PLANNER_SHARED_DATA``.

    python instances/_generate.py            # write all instance files and README.md
    python instances/_generate.py --check    # exit 1 if a file is out of date
    python instances/_generate.py --summary  # also print feasibility figures

After building, each instance is checked against the SPEC (sections 2-5):
keys, names, a connected WAN, uplinks (v3) finite and positive, the v3 routes
(a linked pair takes its link) that the header lists, t <= gpus_per_node, and that at least one
feasible plan exists (memory per GPU of every stage within
memory_gb * (1 - memory_reserve_fraction), enough GPUs, a whole number of
micro-batches). The check searches replicas R = 1, stages S <= max_stages,
every t, b and schedule, with a greedy contiguous partition.
"""
from __future__ import annotations

import csv
import heapq
import math
import os
import random
import re
import sys
import textwrap
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS_DIR = HERE.parent / "models"


def data_dir() -> Path:
    env = os.environ.get("PLANNER_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


# --------------------------------------------------------------------------
# Reading the shared data
# --------------------------------------------------------------------------

def read_csv(name: str) -> tuple[str, list[dict[str, str]]]:
    """(source line without the leading '# ', rows as dicts)."""
    lines = (data_dir() / name).read_text(encoding="utf-8").splitlines()
    comment = lines[0].lstrip("#").strip() if lines and lines[0].startswith("#") else ""
    body = [ln for ln in lines if ln and not ln.startswith("#")]
    return comment, list(csv.DictReader(body))


def read_matrix(name: str) -> tuple[str, dict[tuple[str, str], float]]:
    """Skyplane-style matrix: rows = src, columns = dst, empty/NA = missing."""
    lines = (data_dir() / name).read_text(encoding="utf-8").splitlines()
    comment = lines[0].lstrip("#").strip()
    rows = list(csv.reader(ln for ln in lines[1:] if ln))
    cols = rows[0][1:]
    out: dict[tuple[str, str], float] = {}
    for row in rows[1:]:
        src = row[0]
        for dst, cell in zip(cols, row[1:]):
            cell = cell.strip()
            if cell and cell.upper() != "NA":
                out[(src, dst)] = float(cell)
    return comment, out


def routes(domains: list[str], links: list[dict], direct: bool = True) -> dict[tuple[str, str], list[str]]:
    """SPEC section 2 routes: a linked pair takes its link (v3; ``direct=False``: v2, which
    does not); any other pair the path of least total latency, then fewer hops, then the
    lexicographically smallest list of domain names."""
    adj: dict[str, list[tuple[str, float]]] = {d: [] for d in domains}
    for l in links:
        adj[l["a"]].append((l["b"], l["latency_ms"]))
        adj[l["b"]].append((l["a"], l["latency_ms"]))
    out = {}
    for src in domains:
        best: dict[str, tuple] = {src: (0.0, 0, [src])}
        heap = [(0.0, 0, [src])]
        done = set()
        while heap:
            key = heapq.heappop(heap)
            u = key[2][-1]
            if u in done:
                continue
            done.add(u)
            for v, lat in adj[u]:
                if v in done:
                    continue
                cand = (key[0] + lat, key[1] + 1, key[2] + [v])
                if v not in best or cand < best[v]:
                    best[v] = cand
                    heapq.heappush(heap, cand)
        for dst, key in best.items():
            out[(src, dst)] = key[2]
    if direct:
        for l in links:
            out[(l["a"], l["b"])], out[(l["b"], l["a"])] = [l["a"], l["b"]], [l["b"], l["a"]]
    return out


def fact(rows: list[dict[str, str]], key: str, col: str = "fact") -> dict[str, str]:
    for r in rows:
        if r[col].startswith(key):
            return r
    raise KeyError(key)


# --------------------------------------------------------------------------
# Common figures (each with its source)
# --------------------------------------------------------------------------

def nvlink_one_way_gbps(total_gb_per_s: str) -> float | None:
    """SPEC 2 (v2) ``nvlink_bandwidth_gbps`` from gpu_specs.csv's ``nvlink_gbps_total``:
    that column is the datasheet's bidirectional total per GPU in GB/s (e.g. "600" for
    A100 SXM); one direction is half of it, times 8 bits: 600 GB/s -> 300 GB/s -> 2400
    Gbit/s.  None when the cell is empty or not a leading number."""
    head = total_gb_per_s.strip().split(" ")[0]
    try:
        return float(head) / 2 * 8
    except ValueError:
        return None


def gpu(name: str, mfu: float, mfu_reason: str) -> tuple[dict, list[str]]:
    """GPU table from gpu_specs.csv (dense bf16 TFLOP/s, HBM GB, NVLink one way)."""
    _, rows = read_csv("gpu_specs.csv")
    key = GPU_ROWS[name]
    r = next(r for r in rows if (r["gpu"], r["form_factor"]) == key)
    table = {"name": name if name != "H100" else "H100-SXM-80GB",
             "peak_tflops": float(r["bf16_dense_tflops"]),
             "memory_gb": float(r["hbm_gb"]), "mfu": mfu}
    nv = nvlink_one_way_gbps(r["nvlink_gbps_total"])
    lines = [
        f"GPU {table['name']}: peak {r['bf16_dense_tflops']} TFLOP/s dense bf16, {r['hbm_gb']} GB "
        f"{r['hbm_type']} -- gpu_specs.csv (NVIDIA {key[0].split('-')[0]} datasheet / whitepaper).",
    ]
    if nv is not None:
        table["nvlink_bandwidth_gbps"] = nv
        lines.append(
            f"nvlink_bandwidth_gbps {nv:g}: gpu_specs.csv gives NVLink {r['nvlink_gbps_total']} GB/s per "
            f"GPU, the bidirectional total; one direction (SPEC 2) is half: {float(r['nvlink_gbps_total']) / 2:g} "
            f"GB/s = {nv:g} Gbit/s. It prices tensor-parallel all-reduces (SPEC 5, v2).")
    else:
        lines.append(f"nvlink_bandwidth_gbps absent: gpu_specs.csv has no NVLink figure for {name}; "
                     "tensor-parallel communication is free.")
    lines.append(f"MFU {mfu}: {mfu_reason} -- mfu_reported.csv.")
    return table, lines


GPU_ROWS = {"A100-40GB": ("A100-40GB", "SXM4"), "A100-80GB": ("A100-80GB", "SXM4"),
            "H100": ("H100", "SXM5")}  # gpu() name -> (gpu, form_factor) row of gpu_specs.csv

MFU_A100 = 0.45
MFU_A100_REASON = ("published A100-80GB bf16 runs report 41.5% (Megatron-LM 22B), 51.4% (Megatron-LM "
                   "175B), 52% (Narayanan et al. SC21, 3072 GPUs) and 53.3% (llm-foundry 70B, 64 GPUs); "
                   "0.45 is a conservative mid-low value, chosen when the model (v1) charged no tensor-parallel "
                   "communication and kept in v2, which charges it from nvlink_bandwidth_gbps")
MFU_H100 = 0.42
MFU_H100_REASON = ("published H100 bf16 runs report 43% / 41% (Llama 3 405B on 8K / 16K GPUs) and "
                   "42.6% (llm-foundry 70B, 64 GPUs)")

# Per-GPU bandwidth between GPUs of one domain (interconnect_facts.csv):
IB_HDR_GBPS = 200.0   # InfiniBand HDR port, one per A100 (DGX A100: 8 x 200G ConnectX-6)
IB_NDR_GBPS = 400.0   # InfiniBand NDR port, one per H100 (DGX H100: 8 x 400G ConnectX-7)
# AWS p4d.24xlarge (8 x A100-40GB, 96 vCPUs) has 400 Gbit/s of EFA-enabled networking per
# instance, i.e. 50 per GPU (AWS_P4D_SRC below; not in the shared data).
AWS_P4D_NIC_GBPS = 400.0
AWS_P4D_VCPUS = 96
AWS_P4D_SRC = ("AWS Compute Blog, 'Amazon EC2 P4d instances deep dive' (2020-11-03, "
               "aws.amazon.com/blogs/compute/amazon-ec2-p4d-instances-deep-dive/): 96 vCPUs, "
               "400 Gbps EFA-enabled networking")
AWS_P4D_GBPS_PER_GPU = AWS_P4D_NIC_GBPS / 8
# Azure ND96isr_H100_v5 (8 x H100): one 400 Gbit/s NDR InfiniBand link per GPU (general
# knowledge); equals the NDR figure above.
AZURE_NDH100_GBPS_PER_GPU = IB_NDR_GBPS
# GCP a3-megagpu-8g (8 x H100): 8 GPU NICs (NVIDIA AICR "GKE TCPXO networking" guide) of
# 200 Gbit/s each (general knowledge, not verified this session).
GCP_A3MEGA_GBPS_PER_GPU = 200.0

# --------------------------------------------------------------------------
# Uplinks (SPEC v3 sections 2 and 5): what a domain can send to the WAN in total, and
# separately receive from it
# --------------------------------------------------------------------------
# A domain's uplink is its GPU hosts (gpus / gpus_per_node VMs) times the most one such VM may
# send to other regions: the transfers of a plan (pipeline boundaries, gradient syncs) leave
# from and arrive at the GPUs' own VMs, so whatever striping the links assume, a region cannot
# move more than its VMs' WAN caps together. SPEC v3 has one figure for both directions; the
# clouds state per-VM caps (AWS: inbound and outbound alike; Azure: all destinations), and the
# same figure is used for ingress. Only the cloud instances have one: no sourced per-hub or
# per-datacenter WAN-port figure exists for the EDWC clusters (see uplink_absent_note), and
# the tiny instances are synthetic.
AWS_BANDWIDTH_DOC = ("AWS EC2 User Guide, 'Amazon EC2 instance network bandwidth' "
                     "(docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html): "
                     "traffic to other Regions may use up to 50% of an instance's bandwidth with >= 32 "
                     "vCPUs (or 5 Gbps, whichever is larger), else 5 Gbps; bandwidth figures apply to "
                     "inbound and outbound traffic alike")
# Azure ND96isr_H100_v5: 8 NICs, 80,000 Mbps expected network bandwidth per VM ("the maximum
# aggregated bandwidth allocated per VM type across all NICs, for all destinations").
AZURE_NDH100_VM_GBPS = 80.0
AZURE_NDH100_SRC = ("Azure VM sizes, ND H100 v5 series (MicrosoftDocs/azure-docs "
                    "articles/virtual-machines/sizes/gpu-accelerated/includes/nd-h100-v5-series-specs.md "
                    "@44d9173: Network 8 NICs, 80000 Mbps; includes/virtual-machines-common-sizes-table-defs.md: "
                    "'maximum aggregated bandwidth allocated per VM type across all NICs, for all destinations')")


def aws_interregion_vm_gbps(nic_gbps: float, vcpus: int) -> tuple[float, str]:
    """Most one AWS instance sends to other Regions, Gbit/s, from interconnect_facts.csv's
    "AWS inter-region per-instance egress cap" row ("5 Gbps (or 50% of NIC for >=32 vCPU)"):
    max(5, 50% x NIC) with >= 32 vCPUs, else 5.  p4d.24xlarge (400 Gbit/s, 96 vCPUs): 200."""
    _, rows = read_csv("interconnect_facts.csv")
    r = fact(rows, "AWS inter-region per-instance egress cap", "item")
    m = re.fullmatch(r"([\d.]+) Gbps \(or ([\d.]+)% of NIC for >=(\d+) vCPU\)", r["value"])
    assert m, ("interconnect_facts.csv: unexpected AWS inter-region cap", r["value"])
    floor, pct, min_vcpus = float(m[1]), float(m[2]), int(m[3])
    cap = max(floor, pct / 100 * nic_gbps) if vcpus >= min_vcpus else floor
    return cap, (f"interconnect_facts.csv 'AWS inter-region per-instance egress cap' = {r['value']} "
                 f"({r['source']}); checked against {AWS_BANDWIDTH_DOC}")


def gcp_external_vm_gbps() -> tuple[float, str]:
    """Most one GCP VM sends to an external IP address (the path the Skyplane GCP grid
    measured), Gbit/s, from interconnect_facts.csv: 7."""
    _, rows = read_csv("interconnect_facts.csv")
    r = fact(rows, "GCP VM egress to external IP", "item")
    return float(r["value"]), (f"interconnect_facts.csv '{r['item']}' = {r['value']} {r['unit']} ({r['source']})")


def uplink(domain: dict, vm_gbps: float, note: str) -> None:
    """Give ``domain`` its uplink: VMs (gpus / gpus_per_node) x ``vm_gbps``, with a comment."""
    vms, rest = divmod(domain["gpus"], domain["gpus_per_node"])
    assert rest == 0, (domain["name"], "GPUs not a whole number of VMs")
    domain["uplink_gbps"] = round(vms * vm_gbps, 6)
    domain["_comment"] = f"uplink: {vms} VMs x {vm_gbps:g} Gbit/s ({note})"


def uplink_hdr(vm: str, vm_gbps: float, why: list[str], domains: list[dict], links: list[dict]) -> list[str]:
    ups = sorted({d["uplink_gbps"] for d in domains})
    rng = f"{ups[0]:,.0f}" if len(ups) == 1 else f"{ups[0]:,.0f}-{ups[-1]:,.0f}"
    total = {d["name"]: 0.0 for d in domains}
    for l in links:
        total[l["a"]] += l["bandwidth_gbps"]
        total[l["b"]] += l["bandwidth_gbps"]
    ratio = sorted(d["uplink_gbps"] / total[d["name"]] for d in domains)
    return [
        f"uplink_gbps (SPEC v3 sections 2, 5: a domain's total WAN egress, and separately its ingress) = its",
        f"  {vm} VMs (gpus / 8) x {vm_gbps:g} Gbit/s, the most one VM may send to other regions: {rng} Gbit/s.",
    ] + why + [
        "  SPEC v3 has one figure for both directions; the per-VM egress cap is used for ingress too.",
        f"  A domain's uplink is {ratio[0]:.2f}-{ratio[-1]:.2f}x the sum of its links' bandwidths "
        + ("(it binds only when many transfers leave or enter one domain at once)." if ratio[0] < 1
           else "(it never binds: the links cap first)."),
    ]


def uplink_absent_note(what: str) -> list[str]:
    return [
        f"uplink_gbps absent (no cap): no sourced per-{what} WAN-port figure exists in the shared data or "
        "the public sources consulted (china_edwc_facts.csv gives backbone capacity -- 32 Tb/s per fibre, "
        ">660 Tb/s in all -- not what one hub or datacenter can send); the leased wavelengths (links) are the "
        "only network caps here.",
    ]

# Approximate on-demand list prices per GPU-hour (USD), ASSUMED (general knowledge of 2023-24
# list prices; not in the shared data; per-GPU = per-instance / 8):
AWS_P4D_USD_PER_GPU_H = 4.10        # p4d.24xlarge ~ $32.77/h in us-east-1
AZURE_NDH100_USD_PER_GPU_H = 12.30  # ND96isr_H100_v5 ~ $98.32/h in East US
GCP_A3_USD_PER_GPU_H = 11.00        # a3-highgpu-8g ~ $88/h in us-central1

# --------------------------------------------------------------------------
# China East-Data-West-Computing (EDWC) network
# --------------------------------------------------------------------------

EDWC_FIBRE_MS_PER_KM = 0.005  # light in fibre ~5 us/km (n ~ 1.47), as in the estimate CSV
# Dedicated wavelengths leased per cluster pair (an ASSUMPTION: how much of China Mobile's
# 400G OTN backbone -- 32 Tb/s per fibre, >660 Tb/s backbone -- a single training job gets).
# 100 Gbit/s (one 100G wavelength, 1/320 of a fibre) per pair by default; 400 Gbit/s (one
# 400G wavelength) on the two corridors where china_edwc_facts.csv reports 400G service:
# Beijing(-Tianjin-Hebei) -> Inner Mongolia (first inter-provincial 400G backbone, commercial
# 2024-03-08) and Ningbo (Yangtze River Delta) -> Gui'an.
EDWC_WAVELENGTH_GBPS = 100.0
EDWC_400G_GBPS = 400.0
EDWC_400G_CORRIDORS = {frozenset(("zhangjiakou", "horinger")),
                       frozenset(("yrd_demo_zone", "guian"))}

# EDWC GPU-hour prices, ASSUMED: same A100 server everywhere, so a common base for hardware
# amortisation, network and operations, plus power = kW per GPU (incl. host share) x PUE x
# tariff. PUE targets are from china_edwc_facts.csv (east <= 1.25, west <= 1.2). Tariffs are
# ASSUMED industrial rates: east ~0.10 USD/kWh (~0.7 CNY), west ~0.05 USD/kWh (~0.35 CNY,
# renewable-rich hubs). Power is a small share of an A100-hour, so west is only a bit cheaper.
EDWC_BASE_USD_PER_GPU_H = 1.50
EDWC_KW_PER_GPU = 0.8
EDWC_PUE = {"east": 1.25, "west": 1.20}
EDWC_TARIFF_USD_PER_KWH = {"east": 0.10, "west": 0.05}


def edwc_data():
    ccomment, clusters = read_csv("china_edwc_clusters.csv")
    dcomment, dist = read_csv("china_edwc_pairwise_distance_latency_est.csv")
    fcomment, facts = read_csv("china_edwc_facts.csv")
    km = {frozenset((r["a"], r["b"])): float(r["great_circle_km"]) for r in dist}
    caict = fact(facts, "CAICT 2024Q1 inter-cluster-city optical-layer latency")
    avg_ms, max_ms = (float(x.split()[-1]) for x in caict["value"].split(","))
    mean_km = sum(km.values()) / len(km)
    # Route factor calibrated so the mean one-way estimate over ALL cluster pairs equals the
    # CAICT measured optical-layer average (the CAICT figure is over cluster cities).
    rf = round(avg_ms / (mean_km * EDWC_FIBRE_MS_PER_KM), 3)
    return dict(clusters={r["cluster_id"]: r for r in clusters}, km=km, facts=facts,
                caict=caict, avg_ms=avg_ms, max_ms=max_ms, mean_km=mean_km, rf=rf,
                n_pairs=len(km))


def edwc_price(role: str) -> float:
    power = EDWC_KW_PER_GPU * EDWC_PUE[role] * EDWC_TARIFF_USD_PER_KWH[role]
    return round(EDWC_BASE_USD_PER_GPU_H + power, 2)


def edwc_network(ids: list[str], gpus: dict[str, int], prices: dict[str, float],
                 intra: float) -> tuple[list[dict], list[dict], list[str]]:
    E = edwc_data()
    domains = []
    for cid in ids:
        c = E["clusters"][cid]
        hub = c["hub"].split(" (")[0]
        domains.append({
            "name": cid, "gpus": gpus[cid], "gpus_per_node": 8,
            "intra_bandwidth_gbps": intra, "price_per_gpu_hour": prices[cid],
            "region": f"{hub} hub, {c['role']}",
            "lat": float(c["lat"]), "lon": float(c["lon"]), "utc_offset_hours": 8.0,
        })
    links = []
    lat_sel = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            km = E["km"][frozenset((a, b))]
            lat = round(km * E["rf"] * EDWC_FIBRE_MS_PER_KM, 2)
            lat_sel.append(lat)
            bw = EDWC_400G_GBPS if frozenset((a, b)) in EDWC_400G_CORRIDORS else EDWC_WAVELENGTH_GBPS
            links.append({"a": a, "b": b, "bandwidth_gbps": bw, "latency_ms": lat,
                          "_comment": f"{km:.0f} km great circle"
                                      + ("; 400G corridor" if bw == EDWC_400G_GBPS else "")})
    all_max = max(E["km"].values()) * E["rf"] * EDWC_FIBRE_MS_PER_KM
    caict = E["caict"]
    hdr = [
        "Network (China East-Data-West-Computing):",
        "  clusters, hubs, east/west role and approximate coordinates: china_edwc_clusters.csv",
        "    (NDRC/CAC/MIIT/NEA approvals, Feb 2022, as reported by Xinhua/China Daily 2022-02-17;",
        "    coordinates are approximate city/county-seat positions).",
        "  latency_ms (one way) = great-circle km x route factor x 0.005 ms/km; great-circle km",
        "    from china_edwc_pairwise_distance_latency_est.csv (haversine on those coordinates).",
        f"  route factor {E['rf']}: chosen so the mean one-way estimate over all {E['n_pairs']} cluster",
        f"    pairs (mean {E['mean_km']:.1f} km) equals the measured CAICT 2024Q1 inter-cluster-city",
        f"    optical-layer average of {E['avg_ms']} ms (china_edwc_facts.csv: {caict['source']}).",
        f"    The resulting maximum over all pairs is {all_max:.1f} ms vs the measured max "
        f"{E['max_ms']} ms.",
        f"    Over the {len(lat_sel)} pairs used here: mean {sum(lat_sel) / len(lat_sel):.2f} ms, "
        f"min {min(lat_sel):.2f}, max {max(lat_sel):.2f}.",
        "  links: full mesh, one per cluster pair; routes are therefore direct.",
        f"  bandwidth_gbps: ASSUMED dedicated wavelengths leased by the job on China Mobile's 400G OTN",
        "    backbone (china_edwc_facts.csv / interconnect_facts.csv: 32 Tb/s per fibre, >660 Tb/s",
        f"    backbone, 6028 km 400G field reach): {EDWC_WAVELENGTH_GBPS:.0f} Gbit/s per pair, "
        f"{EDWC_400G_GBPS:.0f} Gbit/s on the",
        "    corridors with reported 400G service (Beijing->Inner Mongolia, first inter-provincial",
        "    400G backbone, commercial 2024-03-08; Ningbo(YRD)->Gui'an 400G OTN link).",
    ] + uplink_absent_note("hub")
    return domains, links, hdr


EDWC_PRICE_HDR = [
    f"price_per_gpu_hour (USD): ASSUMED {EDWC_BASE_USD_PER_GPU_H:.2f} base (A100 amortisation, network,",
    f"  operations) + power {EDWC_KW_PER_GPU} kW/GPU x PUE x tariff; PUE east 1.25 / west 1.20 (targets in",
    "  china_edwc_facts.csv); tariff ASSUMED east 0.10, west 0.05 USD/kWh. East "
    f"{edwc_price('east'):.2f}, west {edwc_price('west'):.2f}.",
]

# --------------------------------------------------------------------------
# Cloud regions (Skyplane 2022 matrices)
# --------------------------------------------------------------------------

# Approximate location of each cloud region (general knowledge, descriptive only).
REGION_INFO = {
    # AWS
    "us-east-1": ("N. Virginia", 39.04, -77.49, -5.0),
    "us-east-2": ("Ohio", 39.96, -83.00, -5.0),
    "us-west-1": ("N. California", 37.34, -121.89, -8.0),
    "us-west-2": ("Oregon", 45.84, -119.70, -8.0),
    "ca-central-1": ("Montreal", 45.50, -73.57, -5.0),
    "eu-west-1": ("Ireland", 53.35, -6.26, 0.0),
    "eu-west-2": ("London", 51.51, -0.13, 0.0),
    "eu-central-1": ("Frankfurt", 50.11, 8.68, 1.0),
    "eu-north-1": ("Stockholm", 59.33, 18.07, 1.0),
    "ap-northeast-1": ("Tokyo", 35.68, 139.69, 9.0),
    "ap-southeast-1": ("Singapore", 1.35, 103.82, 8.0),
    "ap-south-1": ("Mumbai", 19.08, 72.88, 5.5),
    "sa-east-1": ("Sao Paulo", -23.55, -46.63, -3.0),
    "ap-southeast-2": ("Sydney", -33.87, 151.21, 10.0),
    # Azure
    "eastus": ("Virginia", 36.67, -78.39, -5.0),
    "westus": ("California", 37.78, -122.42, -8.0),
    "westus3": ("Arizona", 33.45, -112.07, -7.0),
    "northcentralus": ("Illinois", 41.88, -87.63, -6.0),
    "canadacentral": ("Toronto", 43.65, -79.38, -5.0),
    "westeurope": ("Netherlands", 52.37, 4.90, 1.0),
    "northeurope": ("Ireland", 53.35, -6.26, 0.0),
    "uksouth": ("London", 51.51, -0.13, 0.0),
    "germanywestcentral": ("Frankfurt", 50.11, 8.68, 1.0),
    "francecentral": ("Paris", 48.86, 2.35, 1.0),
    "japaneast": ("Tokyo", 35.68, 139.69, 9.0),
    "koreacentral": ("Seoul", 37.57, 126.98, 9.0),
    "australiaeast": ("New South Wales", -33.87, 151.21, 10.0),
    # GCP
    "us-central1": ("Iowa", 41.26, -95.86, -6.0),
    "us-east1": ("South Carolina", 33.20, -80.01, -5.0),
    "us-east4": ("N. Virginia", 39.04, -77.49, -5.0),
    "us-west1": ("Oregon", 45.59, -121.18, -8.0),
    "northamerica-northeast1": ("Montreal", 45.50, -73.57, -5.0),
    "europe-west1": ("Belgium", 50.45, 3.82, 1.0),
    "europe-west2": ("London", 51.51, -0.13, 0.0),
    "europe-west3": ("Frankfurt", 50.11, 8.68, 1.0),
    "europe-west4": ("Netherlands", 53.44, 6.83, 1.0),
    "europe-north1": ("Finland", 60.57, 27.20, 2.0),
    "asia-northeast1": ("Tokyo", 35.68, 139.69, 9.0),
    "asia-east1": ("Taiwan", 24.05, 120.52, 8.0),
    "asia-southeast1": ("Singapore", 1.35, 103.82, 8.0),
    "asia-south1": ("Mumbai", 19.08, 72.88, 5.5),
    "australia-southeast1": ("Sydney", -33.87, 151.21, 10.0),
    "southamerica-east1": ("Sao Paulo", -23.55, -46.63, -3.0),
}

SKYPLANE_RTT_SRC = ("Skyplane profiles/latency.csv (avg ping RTT, 2022-04-16), "
                    "skyplane-project/skyplane commit d3d50e1f")
SKYPLANE_TPUT_SRC = ("Skyplane profiles/throughput.csv (iperf3, 64 TCP connections, VM-to-VM, "
                     "2022-01, premium tier)")


def cloud_network(cloud: str, regions: list[str], key_of, gpus: dict[str, int], price: float,
                  intra: float, vm_pairs: int, uplink_vm: tuple[float, str] | None = None
                  ) -> tuple[list[dict], list[dict], dict]:
    """Full mesh over the chosen regions. latency = mean of the two measured RTT directions / 2;
    bandwidth = min of the two measured throughput directions x vm_pairs.  ``uplink_vm``
    (Gbit/s per VM, a short note): each region's uplink is its VMs x that figure."""
    _, rtt = read_matrix(f"matrix_{cloud}_rtt_ms_skyplane2022.csv")
    _, tput = read_matrix(f"matrix_{cloud}_tput_gbps_skyplane2022.csv")
    domains = []
    for r in regions:
        city, lat, lon, utc = REGION_INFO[r]
        domains.append({"name": r, "gpus": gpus[r], "gpus_per_node": 8,
                        "intra_bandwidth_gbps": intra, "price_per_gpu_hour": price,
                        "region": f"{key_of(r)} ({city})", "lat": lat, "lon": lon,
                        "utc_offset_hours": utc})
        if uplink_vm is not None:
            uplink(domains[-1], *uplink_vm)
    links = []
    stats = {"lat": [], "bw": [], "asym": 0, "missing": []}
    for i, a in enumerate(regions):
        for b in regions[i + 1:]:
            ka, kb = key_of(a), key_of(b)
            rt = [rtt[p] for p in ((ka, kb), (kb, ka)) if p in rtt]
            tp = [tput[p] for p in ((ka, kb), (kb, ka)) if p in tput]
            if not rt or not tp:
                stats["missing"].append(f"{a}-{b}")
                continue
            one_way = round(sum(rt) / len(rt) / 2, 2)
            per_vm = min(tp)
            bw = round(per_vm * vm_pairs, 2)
            rt_s = "/".join(f"{x:g}" for x in rt)
            tp_s = "/".join(f"{x:g}" for x in tp)
            if len(tp) == 2 and abs(tp[0] - tp[1]) > 0.1 * max(tp):
                stats["asym"] += 1
            links.append({"a": a, "b": b, "bandwidth_gbps": bw, "latency_ms": one_way,
                          "_comment": f"RTT {rt_s} ms -> {one_way} one way; "
                                      f"tput {tp_s} Gbit/s -> min {per_vm:g} x {vm_pairs}"})
            stats["lat"].append(one_way)
            stats["bw"].append(bw)
    return domains, links, stats


def cloud_hdr(cloud: str, vm_pairs: int, stats: dict, vm_note: list[str]) -> list[str]:
    lat, bw = stats["lat"], stats["bw"]
    return [
        f"Network ({cloud.upper()} inter-region, measured):",
        f"  latency_ms = (RTT a->b + RTT b->a) / 2 / 2 from matrix_{cloud}_rtt_ms_skyplane2022.csv",
        f"    ({SKYPLANE_RTT_SRC}).",
        f"  bandwidth_gbps = min(throughput a->b, b->a) x {vm_pairs} from "
        f"matrix_{cloud}_tput_gbps_skyplane2022.csv",
        f"    ({SKYPLANE_TPUT_SRC}). Links are undirected, so the smaller direction is taken"
        f" ({stats['asym']} pairs differ by > 10%).",
    ] + vm_note + [
        f"  links: full mesh over the chosen regions ({len(lat)} pair{'s' if len(lat) > 1 else ''})"
        + ("; every route is therefore direct (SPEC v3 section 2), also where the measured RTTs"
           " break the triangle inequality (see Routes below)." if len(lat) > 1 else "."),
        f"  one-way latency {min(lat):.1f}-{max(lat):.1f} ms (mean {sum(lat) / len(lat):.1f}); "
        f"bandwidth {min(bw):.2f}-{max(bw):.2f} Gbit/s (mean {sum(bw) / len(bw):.2f}).",
    ]


def aws_egress(regions: list[str]) -> tuple[float, list[str]]:
    _, rows = read_csv("aws_interregion_egress_usd_per_gb_2023.csv")
    price = {(r["src"], r["dst"]): float(r["cost"]) for r in rows}
    vals = [price[(a, b)] for a in regions for b in regions if a != b]
    counts: dict[float, int] = {}
    for v in vals:
        counts[v] = counts.get(v, 0) + 1
    modal = max(sorted(counts), key=lambda v: counts[v])
    dist = ", ".join(f"{v:g} USD/GB on {counts[v]} of {len(vals)} ordered pairs" for v in sorted(counts))
    return modal, [
        f"  wan_price_per_gb {modal:g}: modal AWS inter-region transfer price among the chosen regions",
        f"    ({dist}) -- aws_interregion_egress_usd_per_gb_2023.csv (skyplane aws_transfer_costs.csv",
        "    @0513671c, 2023-04-27). One scalar per instance, so the modal value is used.",
    ]


# --------------------------------------------------------------------------
# Instances
# --------------------------------------------------------------------------

LLAMA2_BATCH_NOTE = ("global_batch_size x seq_len = 4M tokens, the LLaMA-2 training batch "
                     "(llm_configs.csv batch_tokens 4M)")


def workload(model: str, gbs: int, seq: int, mbs=(1, 2, 4), tps=(1, 2, 4, 8), recompute=False):
    return {"model": model, "global_batch_size": gbs, "seq_len": seq,
            "micro_batch_sizes": list(mbs), "tensor_parallel": list(tps), "recompute": recompute}


def options(max_stages: int, objective="time", wan_price=0.0, reserve=0.10,
            schedules=("1f1b", "gpipe"), dp_sync=None):
    """The ``[options]`` table; ``dp_sync``: the allowed sync modes (SPEC v3 section 11),
    absent (only every_step) when None."""
    o = {"schedules": list(schedules), "max_stages": max_stages, "objective": objective,
         "memory_reserve_fraction": reserve, "wan_price_per_gb": wan_price}
    if dp_sync is not None:
        o["dp_sync"] = list(dp_sync)
    return o


# --------------------------------------------------------------------------
# Communication reduction (SPEC v3 section 11): [options] dp_sync and [[quality]] rows
# --------------------------------------------------------------------------

DP_SYNC_ALL = ("every_step", "diloco", "streaming")

# Chinchilla's parametric loss L(N, D) = E + A / N^alpha + B / D^beta (Hoffmann et al. 2022,
# arXiv 2203.15556, Eq. 10, fitted constants of its section 3.3 / Approach 3).  SPEC v3 section
# 11 maps a published loss gap at equal tokens to a quality factor with its data term: e = D'/D
# where L(N, D') = (1 + gap) L(N, D), at D = 20 tokens per parameter.
CHINCHILLA_E, CHINCHILLA_A, CHINCHILLA_B = 1.69, 406.4, 410.7
CHINCHILLA_ALPHA, CHINCHILLA_BETA = 0.34, 0.28
TOKENS_PER_PARAM = 20


def chinchilla_e(params: float, gap: float) -> float:
    """Quality factor e = D'/D of a relative loss gap ``gap`` at ``params`` parameters and
    D = 20 tokens per parameter: synchronous training reaches with D' tokens the loss the
    option reaches with D.  chinchilla_e(13e9, 0.0029) = 0.921 (SPEC 11 row 3, 0.92)."""
    D = TOKENS_PER_PARAM * params
    data = CHINCHILLA_B / D ** CHINCHILLA_BETA
    loss = CHINCHILLA_E + CHINCHILLA_A / params ** CHINCHILLA_ALPHA + data
    return (CHINCHILLA_B / (data + gap * loss)) ** (1 / CHINCHILLA_BETA) / D


CHINCHILLA_SRC = ("mapped to tokens by the Chinchilla data term (arXiv 2203.15556, Eq. 10) at {size} "
                  "parameters and 20 tokens per parameter (SPEC v3 section 11)")
# SPEC v3 section 11's rows: (modes, max_groups, max_H, min_bits, e at 13B, loss gap or None, source).
# Rows 3, 4 and 5 carry a loss gap, which the Chinchilla mapping turns into e at another size; rows 1
# and 2 are ties (e = 1 at any size).
SPEC11_ROWS = [
    (["every_step"], None, None, 4, 1.00, None,
     "CocktailSGD (ICML 2023, PMLR v202): 4-bit with sparsification 'without hurting convergence'; "
     "fine-tuning evidence"),
    (["diloco", "streaming"], 2, 100, 4, 1.00, None,
     "arXiv 2503.09799 Table 5 (M=2, 10B: -0.19%, capped at 1); arXiv 2501.18512 Table 1 (M=2, H=100, "
     "4-bit: tie at 250B tokens)"),
    (["diloco", "streaming"], 4, 30, 4, 0.92, 0.0029, "arXiv 2503.09799 Table 5 (M=4, 10B: +0.29%)"),
    (["diloco", "streaming"], 4, 100, 4, 0.76, 0.01,
     "+1% assumed, pessimistic (1B: +1.6%, arXiv 2501.18512 Table 6)"),
    (["diloco", "streaming"], 8, 30, 4, 0.74, 0.011, "arXiv 2503.09799 Table 4 (M=8, 2.4B: +1.1%)"),
]
# The 70B figures SPEC 11 states (rows 3 and 4 only); chinchilla_e must reproduce them and the 13B ones.
SPEC11_70B = {3: 0.89, 4: 0.67}


def quality_rows(params: float, size: str, remap: tuple[int, ...] = (3, 4)) -> list[dict]:
    """The full ``[[quality]]`` list (first match wins, so all five rows) at ``params``
    parameters: the rows in ``remap`` by :func:`chinchilla_e` of their loss gap (asserted to
    give SPEC 11's 13B figures, and its 70B ones for rows 3 and 4), the others as SPEC 11's
    defaults.  SPEC 11 states 70B figures for rows 3 and 4 only; row 5 is remapped only
    where an instance can reach it (more than 4 groups)."""
    rows = []
    for i, (modes, M, H, q, e13, gap, src) in enumerate(SPEC11_ROWS, start=1):
        row = {"modes": modes}
        if M is not None:
            row["max_groups"] = M
        if H is not None:
            row["max_H"] = H
        row["min_bits"] = q
        if gap is not None:
            assert round(chinchilla_e(13e9, gap), 2) == e13, (i, chinchilla_e(13e9, gap))
            if i in SPEC11_70B:
                assert round(chinchilla_e(70e9, gap), 2) == SPEC11_70B[i], (i, chinchilla_e(70e9, gap))
        if i in remap:
            row["e"] = round(chinchilla_e(params, gap), 2)
            row["source"] = f"SPEC v3 section 11 row {i} at {size}: {src}; " + CHINCHILLA_SRC.format(size=size)
            if i not in SPEC11_70B:
                row["source"] += " (SPEC 11 states no 70B figure for this row; its method applied)"
        else:
            row["e"] = e13
            row["source"] = f"SPEC v3 section 11 default row {i}: {src}"
            if gap is not None:
                row["source"] += " (the default's 13B figure)"
        rows.append(row)
    return rows


def dp_sync_note(why: list[str]) -> list[str]:
    """Header lines for an instance whose [options] allow every sync mode: ``why`` (indented
    lines), then the candidates."""
    return ["dp_sync = every_step, diloco, streaming (SPEC v3 section 11):"] + why + [
        "  The candidate H, bits, fragments and overlap are the SPEC defaults ([10, 30, 100], [4, 8, 16],",
        "  [1, 2, 4], [1]); the solvers choose among them and the plain per-step sync.",
    ]


def edwc_dp_sync_note(model: str, ks: tuple[int, int], rows: str) -> list[str]:
    """Why an EDWC instance allows every sync mode: the per-step bf16 gradient ring of ``model``
    over one 100 Gbit/s wavelength, across ``ks`` = (fewest, most) clusters; ``rows``: which
    quality rows apply."""
    m = load_model(model)
    P = sum(u[0] for u in model_units(m, 4096, False))
    lo, hi = (2 * (k - 1) / k * 2 * P * 8 / (EDWC_WAVELENGTH_GBPS * 1e9) for k in ks)
    return dp_sync_note([
        f"  a per-step gradient ring across clusters moves 2(K-1)/K x {2 * P / 1e9:.0f} GB per "
        f"wavelength direction,",
        f"  ~{lo:.1f}-{hi:.1f} s on {EDWC_WAVELENGTH_GBPS:.0f} Gbit/s for K = {ks[0]}-{ks[1]} clusters, "
        "of the order of a step's compute, so",
        f"  syncing across clusters every H steps may pay. {rows}",
    ])


def inst_edwc_llama2_13b():
    ids = ["zhangjiakou", "yrd_demo_zone", "shaoguan", "horinger", "guian", "zhongwei"]
    # GPUs available to this job (ASSUMED): east hubs are rack-constrained (real-time demand,
    # ~63-65% utilisation, china_edwc_facts.csv), west hubs host the larger batch capacity.
    gpus = {"zhangjiakou": 128, "yrd_demo_zone": 64, "shaoguan": 64,
            "horinger": 256, "guian": 192, "zhongwei": 128}
    E = edwc_data()
    prices = {c: edwc_price(E["clusters"][c]["role"]) for c in ids}
    g, ghdr = gpu("A100-80GB", MFU_A100, MFU_A100_REASON)
    domains, links, nhdr = edwc_network(ids, gpus, prices, IB_HDR_GBPS)
    hdr = [
        "edwc-llama2-13b: the packaged DEFAULT instance.",
        "Regime: realistic national backbone -- short WAN latency (2-16 ms one way) and 100-400 Gbit/s",
        "  leased wavelengths between six clusters of China's East-Data-West-Computing programme",
        "  (one per hub for 6 of the 8 hubs, 3 east + 3 west), LLaMA-2 13B on A100-80GB. Pipelines",
        "  across clusters are cheap; data parallelism across clusters pays a 26 GB gradient ring.",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {IB_HDR_GBPS:.0f}: one InfiniBand HDR 200 Gbit/s port per A100 (DGX A100 8 x 200G)",
        "  -- interconnect_facts.csv.",
        "gpus: ASSUMED allocation for this job (east 64-128, west 128-256); east hubs are",
        "  rack-constrained (rack utilisation ~63%, china_edwc_facts.csv), west hubs hold batch capacity.",
    ] + EDWC_PRICE_HDR + [""] + nhdr + [
        "wan_price_per_gb 0: leased wavelengths are flat-rate, not billed per GB.",
        "",
    ] + edwc_dp_sync_note("llama2-13b", (2, len(ids)), EDWC_13B_ROWS) + [
        "",
        "Workload: model llama2-13b (../models/llama2-13b.toml from llm_configs.csv: Touvron et al. 2023);",
        f"  {LLAMA2_BATCH_NOTE}; seq_len 4096 as trained.",
    ]
    inst = {"name": "edwc-llama2-13b",
            "description": "LLaMA-2 13B on A100-80GB across 6 East-Data-West-Computing clusters (default instance)",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("llama2-13b", 1024, 4096),
            "options": options(max_stages=16, dp_sync=DP_SYNC_ALL)}
    return inst, hdr


EDWC_13B_ROWS = ("No [[quality]] rows: SPEC 11's defaults are for 13B parameters, this model's size.")
EDWC_70B_ROWS = ("[[quality]]: SPEC 11's five rows at 70B (rows 3, 4 and 5 by the Chinchilla mapping: "
                 "0.89, 0.67 as SPEC 11 states, and 0.65 for row 5, reachable here with 5-8 groups, "
                 "for which SPEC 11 states no 70B figure).")


def inst_edwc_full():
    E = edwc_data()
    ids = list(E["clusters"])  # CSV order: 6 east clusters then 4 west
    # ASSUMED allocation: 128 GPUs in each east cluster, 256 in each west cluster.
    gpus = {c: (128 if E["clusters"][c]["role"] == "east" else 256) for c in ids}
    prices = {c: edwc_price(E["clusters"][c]["role"]) for c in ids}
    g, ghdr = gpu("A100-80GB", MFU_A100, MFU_A100_REASON)
    domains, links, nhdr = edwc_network(ids, gpus, prices, IB_HDR_GBPS)
    hdr = [
        "edwc-full: all 10 East-Data-West-Computing clusters (8 hubs), LLaMA-2 70B on A100-80GB.",
        "Regime: the default network at full size -- 10 domains, 45 links, 1,792 GPUs, a model that",
        "  needs >= 3 pipeline stages of 8 GPUs (memory) and whose 138 GB gradient makes WAN data",
        "  parallelism expensive; placement over many nearby clusters is the question.",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {IB_HDR_GBPS:.0f}: InfiniBand HDR per A100 -- interconnect_facts.csv.",
        "gpus: ASSUMED 128 per east cluster, 256 per west cluster (west hubs are the batch-capacity",
        "  hubs, china_edwc_clusters.csv role column).",
    ] + EDWC_PRICE_HDR + [""] + nhdr + [
        "wan_price_per_gb 0: leased wavelengths are flat-rate.",
        "",
    ] + edwc_dp_sync_note("llama2-70b", (2, len(ids)), EDWC_70B_ROWS) + [
        "",
        "Workload: model llama2-70b (../models/llama2-70b.toml from llm_configs.csv: Touvron et al. 2023,",
        f"  HF config); {LLAMA2_BATCH_NOTE}; seq_len 4096.",
    ]
    inst = {"name": "edwc-full",
            "description": "LLaMA-2 70B on A100-80GB across all 10 East-Data-West-Computing clusters",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("llama2-70b", 1024, 4096),
            "options": options(max_stages=32, dp_sync=DP_SYNC_ALL),
            "quality": quality_rows(70e9, "70B", remap=(3, 4, 5))}
    return inst, hdr


def inst_cost_edwc():
    E = edwc_data()
    ids = ["zhangjiakou", "yrd_demo_zone", "shaoguan", "tianfu", "horinger", "guian", "zhongwei"]
    # Three ASSUMED pricing tiers (USD per GPU-hour):
    #   east hubs: capacity rented on demand from a public cloud at an AWS p4d-like list price;
    #   tianfu (Chengdu, hydro-rich but an 'east' real-time hub): a 1-year reserved rental;
    #   west hubs: the job owner's own capacity = EDWC base + west power (as in the default).
    tiers = {"zhangjiakou": "on-demand", "yrd_demo_zone": "on-demand", "shaoguan": "on-demand",
             "tianfu": "reserved", "horinger": "owned", "guian": "owned", "zhongwei": "owned"}
    tier_price = {"on-demand": AWS_P4D_USD_PER_GPU_H, "reserved": 2.50, "owned": edwc_price("west")}
    prices = {c: tier_price[tiers[c]] for c in ids}
    # ASSUMED allocation: plenty of expensive GPUs, few cheap ones -- one owned west cluster
    # (16 GPUs) cannot hold LLaMA-2 70B, so the cheapest plans must span west clusters and pay
    # per-GB WAN charges, or move to the reserved / on-demand clusters.
    gpus = {"zhangjiakou": 64, "yrd_demo_zone": 64, "shaoguan": 64, "tianfu": 32,
            "horinger": 16, "guian": 16, "zhongwei": 16}
    g, ghdr = gpu("A100-80GB", MFU_A100, MFU_A100_REASON)
    domains, links, nhdr = edwc_network(ids, gpus, prices, IB_HDR_GBPS)
    wan = 0.02
    hdr = [
        "cost-edwc: objective = cost. LLaMA-2 70B on A100-80GB over 7 EDWC clusters with three",
        f"  price tiers ({max(prices.values()) / min(prices.values()):.1f}x spread) and per-GB WAN charges.",
        "Regime: price matters. The cheap (owned, west) clusters are small: no single one holds the",
        "  model, so the cheapest plan trades GPU-hours against WAN bytes and pipeline bubbles.",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {IB_HDR_GBPS:.0f}: InfiniBand HDR per A100 -- interconnect_facts.csv.",
        "gpus: ASSUMED allocation (east 64, tianfu 32, west 16 each).",
        "price_per_gpu_hour (USD), ASSUMED tiers:",
        f"  on-demand {tier_price['on-demand']:.2f} (zhangjiakou, yrd_demo_zone, shaoguan): public-cloud A100 list",
        "    price (p4d.24xlarge ~ $32.77/h / 8; general knowledge, not in the shared data);",
        f"  reserved {tier_price['reserved']:.2f} (tianfu): a 1-year reserved rental (assumed);",
        f"  owned {tier_price['owned']:.2f} (horinger, guian, zhongwei): own capacity, EDWC base + west power as in",
        "    edwc-llama2-13b (PUE 1.20 from china_edwc_facts.csv, tariff assumed).",
        f"wan_price_per_gb {wan}: cloud inter-region reference price (GCP us-central1<->us-west1 0.02 USD/GB,",
        "  interconnect_facts.csv from Sailor providers/gcp/communication_cost.json; AWS US/EU",
        "  inter-region 0.02, aws_interregion_egress_usd_per_gb_2023.csv), standing in for a",
        "  pay-per-GB inter-region service instead of flat-rate wavelengths.",
        "",
    ] + nhdr + [
        "",
        "Workload: model llama2-70b (../models/llama2-70b.toml, llm_configs.csv: Touvron et al. 2023);",
        f"  {LLAMA2_BATCH_NOTE}; seq_len 4096.",
    ]
    inst = {"name": "cost-edwc",
            "description": "Cost objective: LLaMA-2 70B over 7 EDWC clusters with 3 price tiers and per-GB WAN charges",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("llama2-70b", 1024, 4096),
            "options": options(max_stages=32, objective="cost", wan_price=wan)}
    return inst, hdr


def inst_memory_bound():
    E = edwc_data()
    # one cluster per hub (8 hubs)
    ids = ["zhangjiakou", "yrd_demo_zone", "shaoguan", "tianfu", "horinger", "guian",
           "qingyang", "zhongwei"]
    gpus = {c: 32 for c in ids}
    prices = {c: edwc_price(E["clusters"][c]["role"]) for c in ids}
    g, ghdr = gpu("A100-40GB", MFU_A100, MFU_A100_REASON)
    domains, links, nhdr = edwc_network(ids, gpus, prices, IB_HDR_GBPS)
    inst = {"name": "memory-bound",
            "description": "GPT-3 175B on A100-40GB, 32 GPUs per EDWC cluster: memory forces a deep pipeline",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("gpt3-175b", 1536, 2048, mbs=(1, 2)),
            "options": options(max_stages=32)}
    _, S, _ = min_plan(inst, "1f1b", 8)
    hdr = [
        "memory-bound: GPT-3 175B on A100-40GB, 32 GPUs in each of 8 EDWC clusters (one per hub).",
        "Regime: GPU memory forces a deep pipeline. Weights + gradients + Adam take 16 B/param x",
        f"  {weight_params(inst) / 1e9:.1f}B = {16 * weight_params(inst) / 1e12:.2f} TB; with "
        f"{usable_bytes(inst) / 1e9:.0f} GB usable per GPU (40 GB, 10% reserve) even t = 8 needs",
        f"  >= {S} 1F1B stages (generator check below; smaller t needs more than max_stages), i.e.",
        f"  >= {S * 8} GPUs = >= {math.ceil(S * 8 / 32)} clusters per replica, so the pipeline crosses "
        "the WAN several times",
        f"  and at most {sum(gpus.values()) // (S * 8)} replicas fit. GPipe (all m micro-batches in flight) "
        "cannot fit at all.",
        "",
    ] + ghdr + [
        "  (A100-40GB: the SXM4 40 GB part of gpu_specs.csv; MFU taken as for the 80 GB part.)",
        f"intra_bandwidth_gbps {IB_HDR_GBPS:.0f}: InfiniBand HDR per A100 -- interconnect_facts.csv.",
        "gpus: ASSUMED 32 per cluster (4 nodes), a small slice of each hub.",
    ] + EDWC_PRICE_HDR + [""] + nhdr + [
        "wan_price_per_gb 0: leased wavelengths are flat-rate.",
        "",
        "Workload: model gpt3-175b (../models/gpt3-175b.toml from llm_configs.csv: Brown et al. 2020",
        "  Table 2.1); global_batch_size 1536 x seq_len 2048 = 3.2M tokens, the GPT-3 175B batch",
        "  (llm_configs.csv batch_tokens 3.2M); micro-batch sizes 1-2.",
    ]
    return inst, hdr


# ---- clouds ----

def inst_aws_multiregion():
    regions = ["us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1",
               "eu-west-1", "eu-west-2", "eu-central-1"]
    gpus = {r: 16 for r in regions}
    g, ghdr = gpu("A100-40GB", MFU_A100, MFU_A100_REASON)
    cap, cap_src = aws_interregion_vm_gbps(AWS_P4D_NIC_GBPS, AWS_P4D_VCPUS)
    domains, links, st = cloud_network("aws", regions, lambda r: f"aws:{r}", gpus,
                                       AWS_P4D_USD_PER_GPU_H, AWS_P4D_GBPS_PER_GPU, 1,
                                       (cap, "AWS inter-region cap: 50% of a p4d.24xlarge's 400 Gbit/s"))
    mdl = load_model("llama2-7b")
    act = 2 * mdl["hidden_size"] * 4096          # boundary bytes per micro-batch, b = 1
    x_lo, x_hi = (act / (bw * 1e9 / 8) * 1e3 for bw in (max(st["bw"]), min(st["bw"])))
    note = [
        "  Aggregate bandwidth ASSUMPTION: one gateway VM pair per region pair, i.e. the measured",
        "    per-VM figure as is (x 1). AWS caps inter-region egress at 5 Gbit/s per instance (< 32",
        "    vCPUs; 50% of the NIC above that) and per flow (interconnect_facts.csv; the Skyplane AWS",
        f"    grid tops out at ~4.7). It binds: a LLaMA-2 7B micro-batch boundary (b=1, {act / 1e6:.1f} MB)",
        f"    takes {x_lo:.0f}-{x_hi:.0f} ms on an unshared link vs ~10-40 ms of compute per stage (t=8,",
        "    S=4-16). Even this is optimistic for stock NCCL over a WAN, which is window-limited to",
        "    ~30 Mbit / RTT (wan_variability_facts.csv).",
    ]
    wan, whdr = aws_egress(regions)
    hdr = [
        f"aws-multiregion: LLaMA-2 7B on p4d-class A100-40GB, 16 GPUs (2 instances) in each of "
        f"{len(regions)} AWS",
        "  regions (US east/west, Canada, Europe).",
        f"Regime: WAN-BANDWIDTH bound. Links are {min(st['bw']):.1f}-{max(st['bw']):.1f} Gbit/s "
        "(measured per-VM throughput) while the",
        "  model's activations are large relative to its per-stage compute, so any plan that crosses",
        "  regions is limited by boundary transfer time, and a cross-region ring for the 13.5 GB",
        "  gradient takes tens of seconds per iteration. The model fits in one region (16 GPUs):",
        "  whether and how to use the other regions' GPUs is decided by WAN bandwidth.",
        "",
    ] + ghdr + [
        "  (p4d.24xlarge carries A100-40GB; MFU as for A100-80GB.)",
        f"intra_bandwidth_gbps {AWS_P4D_GBPS_PER_GPU:g}: p4d.24xlarge has 400 Gbit/s EFA per 8-GPU instance",
        f"  ({AWS_P4D_SRC}; not in the shared data).",
        f"price_per_gpu_hour {AWS_P4D_USD_PER_GPU_H:.2f}: ASSUMED on-demand p4d.24xlarge ~ $32.77/h / 8 (us-east-1 list",
        "  price, general knowledge); the same in every region for simplicity.",
        "gpus: ASSUMED 16 per region (2 x p4d.24xlarge), a typical on-demand quota.",
    ] + uplink_hdr("p4d.24xlarge", cap, [f"  Sources: {cap_src}; NIC and vCPUs: {AWS_P4D_SRC}."],
                   domains, links) + [
        "",
    ] + cloud_hdr("aws", 1, st, note) + whdr + [
        "",
        "Workload: model llama2-7b (../models/llama2-7b.toml from llm_configs.csv: Touvron et al. 2023);",
        f"  {LLAMA2_BATCH_NOTE}; seq_len 4096.",
    ]
    inst = {"name": "aws-multiregion",
            "description": "WAN-bandwidth bound: LLaMA-2 7B over 7 AWS regions joined by 3-5 Gbit/s measured links",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("llama2-7b", 1024, 4096),
            "options": options(max_stages=16, wan_price=wan)}
    return inst, hdr


AZURE_VM_PAIRS = 8
AZURE_UPLINK_WHY = [
    f"  Source: {AZURE_NDH100_SRC}.",
    "  (The 8 x 400 Gbit/s InfiniBand links of the VM do not leave the region; the 80 Gbit/s is its",
    "  Ethernet bandwidth, the part that reaches other regions.)",
]


def inst_azure_multiregion():
    regions = ["eastus", "westus", "westeurope", "japaneast", "australiaeast"]
    gpus = {r: 16 for r in regions}
    g, ghdr = gpu("H100", MFU_H100, MFU_H100_REASON)
    domains, links, st = cloud_network("azure", regions, lambda r: f"azure:{r}", gpus,
                                       AZURE_NDH100_USD_PER_GPU_H, AZURE_NDH100_GBPS_PER_GPU,
                                       AZURE_VM_PAIRS, (AZURE_NDH100_VM_GBPS, "ND96isr_H100_v5: 80,000 Mbps per VM"))
    note = [
        f"  Aggregate bandwidth ASSUMPTION: {AZURE_VM_PAIRS} gateway VM pairs per region pair, striped in",
        f"    parallel (Skyplane-style), so {AZURE_VM_PAIRS} x the measured per-VM D32_v5 throughput (~8-22",
        "    Gbit/s, NIC 16 Gbit/s). With ~60-120 Gbit/s a 67 MB LLaMA-2 70B activation (b=1) takes",
        "    5-9 ms, an order of magnitude below the 31-123 ms one-way latency: latency is what binds.",
    ]
    wan = 0.02
    hdr = [
        "azure-multiregion: LLaMA-2 70B on ND H100 v5-class H100, 16 GPUs (2 VMs) in each of 5 Azure",
        "  regions on 4 continents (US east, US west, West Europe, Japan East, Australia East).",
        "Regime: WAN-LATENCY bound. One-way latency 31-123 ms with plenty of bandwidth. No region",
        "  can hold the model (it needs >= 3 stages of 8 GPUs, generator check below; a region has",
        "  16), so every plan crosses >= 1 long link. 1F1B keeps at most S - j micro-batches in flight per round trip,",
        "  so its period is latency-bound (Little's law term of SPEC section 7): on H100 a stage",
        "  computes a micro-batch in tens of ms while each WAN hop adds 2 x 31-123 ms to the round",
        "  trip. GPipe would hide latency but stores all m micro-batches and cannot fit here.",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {AZURE_NDH100_GBPS_PER_GPU:.0f}: one NDR InfiniBand 400 Gbit/s link per GPU on ND H100 v5",
        "  (general knowledge; the NDR figure of interconnect_facts.csv).",
        f"price_per_gpu_hour {AZURE_NDH100_USD_PER_GPU_H:.2f}: ASSUMED ND96isr_H100_v5 on-demand ~ $98/h / 8 "
        "(general knowledge).",
        "gpus: ASSUMED 16 per region (2 VMs of 8).",
        "Region choice: one or two regions per continent, skipping near neighbours (e.g. uksouth",
        "  4 ms from westeurope) so that every cross-region hop is long.",
    ] + uplink_hdr("ND96isr_H100_v5", AZURE_NDH100_VM_GBPS, AZURE_UPLINK_WHY, domains, links) + [
        "",
    ] + cloud_hdr("azure", AZURE_VM_PAIRS, st, note) + [
        f"  wan_price_per_gb {wan}: ASSUMED; Azure prices are not in the shared data, so the 0.02 USD/GB",
        "    intra-continent price of AWS (aws_interregion_egress_usd_per_gb_2023.csv) and GCP",
        "    (interconnect_facts.csv) is used; intercontinental transfer is dearer in reality.",
        "",
        "Workload: model llama2-70b (../models/llama2-70b.toml from llm_configs.csv: Touvron et al. 2023);",
        f"  {LLAMA2_BATCH_NOTE}; seq_len 4096.",
    ]
    inst = {"name": "azure-multiregion",
            "description": "WAN-latency bound: LLaMA-2 70B on H100 over 5 Azure regions on 4 continents (31-123 ms one way)",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("llama2-70b", 1024, 4096),
            "options": options(max_stages=32, wan_price=wan)}
    return inst, hdr


TWO_DC_VM_PAIRS = 8


def inst_two_dc():
    regions = ["us-east-1", "us-west-2"]
    gpus = {r: 32 for r in regions}
    g, ghdr = gpu("A100-40GB", MFU_A100, MFU_A100_REASON)
    cap, cap_src = aws_interregion_vm_gbps(AWS_P4D_NIC_GBPS, AWS_P4D_VCPUS)
    domains, links, st = cloud_network("aws", regions, lambda r: f"aws:{r}", gpus,
                                       AWS_P4D_USD_PER_GPU_H, AWS_P4D_GBPS_PER_GPU, TWO_DC_VM_PAIRS,
                                       (cap, "AWS inter-region cap: 50% of a p4d.24xlarge's 400 Gbit/s"))
    note = [
        f"  Aggregate bandwidth ASSUMPTION: {TWO_DC_VM_PAIRS} gateway VM pairs striped in parallel (Skyplane-style),",
        "    each at the measured m5.8xlarge rate, which sits at AWS's 5 Gbit/s per-instance",
        "    inter-region cap for < 32 vCPUs (interconnect_facts.csv). (The p4d hosts themselves, with",
        "    96 vCPUs, may use 50% of their NIC inter-region, so this is not an upper limit.)",
    ]
    wan, whdr = aws_egress(regions)
    hdr = [
        "two-dc: GPT-3 6.7B on p4d-class A100-40GB in two AWS regions, us-east-1 (N. Virginia) and",
        "  us-west-2 (Oregon), 32 GPUs each.",
        "Regime: the simplest geo-distributed case -- one coast-to-coast link (34 ms one way,",
        f"  ~{st['bw'][0]:.0f} Gbit/s). The model fits in either region, so the question is whether the",
        "  second region's GPUs are worth a WAN pipeline boundary or a cross-country gradient ring.",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {AWS_P4D_GBPS_PER_GPU:g}: p4d.24xlarge 400 Gbit/s EFA per 8 GPUs ({AWS_P4D_SRC}).",
        f"price_per_gpu_hour {AWS_P4D_USD_PER_GPU_H:.2f}: ASSUMED p4d.24xlarge on-demand ~ $32.77/h / 8.",
        "gpus: ASSUMED 32 per region (4 x p4d.24xlarge).",
    ] + uplink_hdr("p4d.24xlarge", cap, [f"  Sources: {cap_src}; NIC and vCPUs: {AWS_P4D_SRC}."],
                   domains, links) + [
        "",
    ] + cloud_hdr("aws", TWO_DC_VM_PAIRS, st, note) + whdr + [
        "",
        "Workload: model gpt3-6.7b (../models/gpt3-6.7b.toml from llm_configs.csv: Brown et al. 2020",
        "  Table 2.1); global_batch_size 1024 x seq_len 2048 = 2M tokens, the GPT-3 6.7B batch",
        "  (llm_configs.csv batch_tokens 2M).",
    ]
    inst = {"name": "two-dc",
            "description": "Two AWS regions (us-east-1, us-west-2), GPT-3 6.7B on 64 A100-40GB",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("gpt3-6.7b", 1024, 2048),
            "options": options(max_stages=16, wan_price=wan)}
    return inst, hdr


GCP_VM_PAIRS = 8


def inst_gcp_16():
    _, rtt = read_matrix("matrix_gcp_rtt_ms_skyplane2022.csv")
    zones = sorted({s for s, _ in rtt}, key=lambda z: [k[0] for k in rtt].index(z))
    # matrix order; region name = zone without the '-a'/'-b' suffix
    zone_of = {z.split(":")[1].rsplit("-", 1)[0]: z for z in zones}
    regions = list(zone_of)
    na = {"us-central1", "us-east1", "us-east4", "us-west1", "northamerica-northeast1"}
    # ASSUMED allocation: 128 H100 in each North American region, 64 elsewhere.
    gpus = {r: (128 if r in na else 64) for r in regions}
    g, ghdr = gpu("H100", MFU_H100, MFU_H100_REASON)
    cap, cap_src = gcp_external_vm_gbps()
    domains, links, st = cloud_network("gcp", regions, lambda r: zone_of[r], gpus,
                                       GCP_A3_USD_PER_GPU_H, GCP_A3MEGA_GBPS_PER_GPU, GCP_VM_PAIRS,
                                       (cap, "GCP per-VM egress to external IPs, NOT verified in GCP docs"))
    _, var = read_csv("skyplane_snapshot_variability.csv")
    v = fact(var, "gcp_2022-01_vs_2022-04", "comparison")
    worst = min(links, key=lambda l: l["bandwidth_gbps"])
    note = [
        f"  Aggregate bandwidth ASSUMPTION: {GCP_VM_PAIRS} gateway VM pairs per region pair (n2-standard-32,",
        "    7 Gbit/s egress cap each; interconnect_facts.csv), so 8 x the per-VM figure.",
        "  Caveat: the 2022-01 GCP grid is low; the 2022-04 grid measured a median "
        f"{float(v['median_ratio']):.2f}x more",
        f"    (p10 {float(v['p10_ratio']):.2f}, p90 {float(v['p90_ratio']):.2f}; "
        "skyplane_snapshot_variability.csv). Kept as is (conservative).",
        f"  The smallest link, {worst['a']}-{worst['b']} ({worst['bandwidth_gbps']:g} Gbit/s), comes from one",
        "    0.41 Gbit/s europe-west4->us-east1 measurement (5.45 the other way); kept under the",
        "    min-of-directions rule: a realistic degraded path that routing does not avoid.",
    ]
    wan = 0.02
    hdr = [
        "gcp-16: the LARGE instance. LLaMA-2 70B on H100 in all 16 GCP regions of the Skyplane grid",
        f"  ({sum(gpus.values()):,} GPUs: 128 in each of the 5 North American regions, 64 in the other 11).",
        f"Regime: scale -- {len(regions)} domains, {len(links)} measured links ({min(st['lat']):.0f}-"
        f"{max(st['lat']):.0f} ms one way, {min(st['bw']):.0f}-{max(st['bw']):.0f} Gbit/s), a model",
        "  that fits in any one region; solvers must pick a few regions and a placement that keeps",
        "  gradient rings inside regions and pipeline boundaries on fast short links.",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {GCP_A3MEGA_GBPS_PER_GPU:.0f}: a3-megagpu-8g, 8 x 200 Gbit/s GPU NICs (NVIDIA AICR GKE TCPXO",
        "  guide; per-NIC rate general knowledge). (interconnect_facts.csv's NDR 400 is for on-prem H100.)",
        f"price_per_gpu_hour {GCP_A3_USD_PER_GPU_H:.2f}: ASSUMED a3-highgpu-8g on-demand ~ $88/h / 8 (general knowledge).",
        "gpus: ASSUMED.",
        "Domain names: region = Skyplane zone without its zone letter (gcp:us-central1-a -> us-central1).",
    ] + uplink_hdr("a3-megagpu-8g", cap, [
        f"  Source: {cap_src}.",
        "  CAVEAT: the 7 Gbit/s is the ceiling observed in the Skyplane grid; the GCP documentation of the "
        "external-IP egress cap was NOT verified. It applies to traffic to external IP addresses, the path "
        "the link figures were measured on; inside one VPC network (internal IPs) an A3 Mega VM may send far "
        "more (1,800 Gbit/s total, GCP 'Networking and GPU machines', "
        "docs.cloud.google.com/compute/docs/gpus/gpu-network-bandwidth), so this uplink holds for the "
        "measured path only.",
    ], domains, links) + [
        "",
    ] + cloud_hdr("gcp", GCP_VM_PAIRS, st, note) + [
        f"  wan_price_per_gb {wan}: GCP inter-region us-central1<->us-west1 price (interconnect_facts.csv,",
        "    Sailor providers/gcp/communication_cost.json); intercontinental egress is dearer.",
        "",
        "Workload: model llama2-70b (../models/llama2-70b.toml from llm_configs.csv: Touvron et al. 2023);",
        f"  {LLAMA2_BATCH_NOTE}; seq_len 4096.",
    ]
    inst = {"name": "gcp-16",
            "description": "Large: LLaMA-2 70B on 1,344 H100 across all 16 GCP regions (Skyplane measured WAN)",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("llama2-70b", 1024, 4096),
            "options": options(max_stages=32, wan_price=wan)}
    return inst, hdr


# ---- national scale (issue 15): datacenters inside clusters, zones inside regions ----

SCALE_SEED = 15  # random.Random(SCALE_SEED): the draws below (stable across Python versions)
# EDWC datacenters, all ASSUMED (the shared data names clusters, not their datacenters):
EDWC_DC_KM = 60.0          # datacenters lie within this radius of their cluster's coordinates
EDWC_DC_MIN_MS = 0.2       # floor of a metro link: transponders, switching, short fibre
EDWC_METRO_GBPS = 800.0    # metro link: two 400G wavelengths (the 400G OTN of china_edwc_facts.csv)
EDWC_METRO_NEIGHBOURS = 6  # metro links per datacenter to its nearest neighbours (plus the gateways)
EDWC_GATEWAYS = 2          # datacenters per cluster hosting the backbone (two diverse paths)
# GPUs per datacenter: log-uniform, multiples of 64. East hubs are rack-constrained
# (real-time demand, ~63% utilisation), west hubs are the batch / training capacity.
EDWC_DC_GPUS = {"east": (64, 1024), "west": (128, 2048)}
# Datacenters per cluster, ASSUMED: more in the west (batch capacity) and in the large east
# clusters (Zhangjiakou, the Yangtze River Delta, Tianfu) than in Wuhu, Chongqing, Qingyang.
EDWC_DCS_120 = {"zhangjiakou": 14, "yrd_demo_zone": 12, "wuhu": 6, "shaoguan": 8, "tianfu": 10,
                "chongqing": 6, "horinger": 20, "guian": 18, "qingyang": 8, "zhongwei": 18}
EDWC_DCS_300 = {"zhangjiakou": 35, "yrd_demo_zone": 30, "wuhu": 15, "shaoguan": 20, "tianfu": 25,
                "chongqing": 15, "horinger": 50, "guian": 45, "qingyang": 20, "zhongwei": 45}
# The workload of the national-scale instances: Llama-3 70B at its 8192-token context and the
# Llama 3 16M-token batch (llm_configs.csv: Llama-3.1 405B batch_tokens 16M; the CSV gives none
# for 70B), 2048 sequences: up to 2048 data-parallel replicas, enough to feed 150,000 GPUs.
LLAMA3_GBS, LLAMA3_SEQ = 2048, 8192
LLAMA3_BATCH_NOTE = ("global_batch_size 2048 x seq_len 8192 = 16.8M tokens: the Llama 3 16M-token batch "
                     "(llm_configs.csv: Llama-3.1 405B batch_tokens 16M; none is given for 70B), at the "
                     "8192-token context Llama-3 70B was trained with; up to 2048 replicas (b = 1)")


def _km_offset(lat: float, lon: float, dx_km: float, dy_km: float) -> tuple[float, float]:
    return (round(lat + dy_km / 111.0, 4), round(lon + dx_km / (111.0 * math.cos(math.radians(lat))), 4))


def _log_uniform_gpus(rng: random.Random, lo: int, hi: int, step: int = 64) -> int:
    return max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi))) // step * step))


def metro_links(ids: list[int], where: list[tuple[float, float]], gates: int, neighbours: int,
                gbps: float, ms_of_km, names: list[str]) -> list[dict]:
    """Links of one cluster: every datacenter to the gateways and to its nearest neighbours."""
    out, seen = [], set()
    for i in ids:
        near = sorted((j for j in ids if j != i), key=lambda j: (math.dist(where[i], where[j]), j))
        for j in [*ids[:gates], *near[:neighbours]]:
            key = (min(i, j), max(i, j))
            if i == j or key in seen:
                continue
            seen.add(key)
            km = math.dist(where[key[0]], where[key[1]])
            out.append({"a": names[key[0]], "b": names[key[1]], "bandwidth_gbps": gbps,
                        "latency_ms": round(ms_of_km(km), 3), "_comment": f"metro, {km:.0f} km"})
    return out


def edwc_datacenters(name: str, per_cluster: dict[str, int]) -> tuple[dict, list[str]]:
    E = edwc_data()
    rng = random.Random(SCALE_SEED * 1000 + sum(per_cluster.values()))
    ids = list(E["clusters"])  # CSV order: 6 east clusters then 4 west
    g, ghdr = gpu("A100-80GB", MFU_A100, MFU_A100_REASON)
    domains, where, members = [], [], {}
    for cid in ids:
        c = E["clusters"][cid]
        hub = c["hub"].split(" (")[0]
        lo, hi = EDWC_DC_GPUS[c["role"]]
        members[cid] = []
        for i in range(per_cluster[cid]):
            r, a = EDWC_DC_KM * math.sqrt(rng.random()), rng.uniform(0.0, 2 * math.pi)
            dx, dy = r * math.cos(a), r * math.sin(a)
            lat, lon = _km_offset(float(c["lat"]), float(c["lon"]), dx, dy)
            members[cid].append(len(domains))
            where.append((dx, dy))
            domains.append({"name": f"{cid}-dc{i:02d}", "gpus": _log_uniform_gpus(rng, lo, hi),
                            "gpus_per_node": 8, "intra_bandwidth_gbps": IB_HDR_GBPS,
                            "price_per_gpu_hour": edwc_price(c["role"]),
                            "region": f"{cid} cluster ({hub} hub, {c['role']})",
                            "lat": lat, "lon": lon, "utc_offset_hours": 8.0})
    names = [d["name"] for d in domains]
    rf = E["rf"]
    links = []
    for cid in ids:
        links += metro_links(members[cid], where, EDWC_GATEWAYS, EDWC_METRO_NEIGHBOURS, EDWC_METRO_GBPS,
                             lambda km: max(EDWC_DC_MIN_MS, km * rf * EDWC_FIBRE_MS_PER_KM), names)
    n_metro = len(links)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            km = E["km"][frozenset((a, b))]
            lat = round(km * rf * EDWC_FIBRE_MS_PER_KM, 2)
            bw = EDWC_400G_GBPS if frozenset((a, b)) in EDWC_400G_CORRIDORS else EDWC_WAVELENGTH_GBPS
            for k in range(EDWC_GATEWAYS):
                links.append({"a": names[members[a][k]], "b": names[members[b][k]], "bandwidth_gbps": bw,
                              "latency_ms": lat, "_comment": f"backbone {a}-{b}, {km:.0f} km great circle"
                              + ("; 400G corridor" if bw == EDWC_400G_GBPS else "")})
    metro_ms = [l["latency_ms"] for l in links[:n_metro]]
    total = sum(d["gpus"] for d in domains)
    east = sum(d["gpus"] for d in domains if "east)" in d["region"])
    n = len(domains)
    hdr = [
        f"{name}: China's East-Data-West-Computing network expanded to {n} datacenters: all 10 clusters",
        f"  (8 hubs), {min(per_cluster.values())}-{max(per_cluster.values())} datacenters each, "
        f"{total:,} A100-80GB, Llama-3 70B.",
        "Regime: NATIONAL SCALE (issue 15) -- hundreds of domains in a two-level network: metro links of",
        f"  {min(metro_ms):g}-{max(metro_ms):g} ms inside a cluster, a 2-16 ms backbone between clusters; "
        "the planner must",
        "  choose clusters and datacenters, keep pipelines and gradient rings on metro links, and",
        "  scale (routes, evaluator, greedy) to ~10^5 GPUs and ~10^3 replicas. Each domain's 'region'",
        "  is its cluster (a hierarchical planner groups by it).",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {IB_HDR_GBPS:.0f}: InfiniBand HDR per A100 -- interconnect_facts.csv.",
        "Datacenters (ALL ASSUMED; the shared data names the clusters, not their datacenters):",
        "  count per cluster: " + ", ".join(f"{c} {per_cluster[c]}" for c in ids) + ";",
        "    more in the west hubs (batch / training capacity, china_edwc_clusters.csv role) and the large",
        "    east clusters. Scale check: the 10 clusters hold > 1.46M racks (china_edwc_facts.csv, lower",
        f"    confidence), ~{1.46e6 / n:,.0f} racks per datacenter at {n} datacenters; {total:,} GPUs at "
        "8 per",
        f"    server and ~4 servers per rack take ~{total / 32:,.0f} racks, a small share.",
        f"  gpus: log-uniform, multiples of 64, east {EDWC_DC_GPUS['east'][0]}-{EDWC_DC_GPUS['east'][1]}, "
        f"west {EDWC_DC_GPUS['west'][0]}-{EDWC_DC_GPUS['west'][1]} (east hubs",
        "    are rack-constrained, ~63% utilisation, china_edwc_facts.csv); drawn with Python's",
        f"    random.Random({SCALE_SEED * 1000 + n}); east {east:,} GPUs, west {total - east:,}.",
        f"  position: uniform in a disc of {EDWC_DC_KM:g} km around the cluster's coordinates (the clusters",
        "    span several districts or counties, china_edwc_clusters.csv note column); lat/lon derived.",
        "",
    ] + EDWC_PRICE_HDR + [
        "",
        "Network:",
        f"  metro (inside a cluster, {n_metro:,} links): every datacenter to the cluster's {EDWC_GATEWAYS} gateway",
        f"    datacenters (its first two, dc00 and dc01) and to its {EDWC_METRO_NEIGHBOURS} nearest neighbours;",
        f"    latency = max({EDWC_DC_MIN_MS:g} ms, km x route factor {rf} x {EDWC_FIBRE_MS_PER_KM} ms/km), within "
        "the 1 ms city",
        "    latency circle targeted for 2025 (china_edwc_facts.csv);",
        f"    bandwidth ASSUMED {EDWC_METRO_GBPS:.0f} Gbit/s: two 400G wavelengths (the 400G OTN of",
        "    china_edwc_facts.csv / interconnect_facts.csv).",
        f"  backbone ({len(links) - n_metro} links): gateway k of each cluster to gateway k of every other "
        f"(k = 0, 1: two",
        "    diverse paths per cluster pair), each with the latency and bandwidth of that cluster pair in",
        "    edwc-full: great-circle km (china_edwc_pairwise_distance_latency_est.csv) x route factor",
        f"    {rf} (calibrated to the CAICT 2024Q1 9.7 ms average, see edwc-full) x 0.005 ms/km;",
        f"    {EDWC_WAVELENGTH_GBPS:.0f} Gbit/s leased wavelengths, {EDWC_400G_GBPS:.0f} on the two 400G corridors "
        "(ASSUMED, as edwc-full).",
        "  links: not a full mesh (that would be n(n-1)/2 links); routes between clusters relay through",
        "    the gateways and share the backbone, as traffic on a real backbone does.",
    ] + uplink_absent_note("datacenter") + [
        "wan_price_per_gb 0: leased wavelengths are flat-rate.",
        "",
        "Workload: model llama3-70b (../models/llama3-70b.toml from llm_configs.csv: Llama 3 paper / HF",
        f"  config); {LLAMA3_BATCH_NOTE}.",
    ]
    inst = {"name": name,
            "description": f"National scale: Llama-3 70B on {total:,} A100 in {n} datacenters of the 10 "
                           "East-Data-West-Computing clusters (metro + backbone)",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("llama3-70b", LLAMA3_GBS, LLAMA3_SEQ),
            "options": options(max_stages=32)}
    return inst, hdr


def inst_edwc_120dc():
    return edwc_datacenters("edwc-120dc", EDWC_DCS_120)


def inst_edwc_300dc():
    return edwc_datacenters("edwc-300dc", EDWC_DCS_300)


# Azure regions and availability zones (issue 15). Approximate location of each region of
# azure_p95_rtt_ms_full.csv (general knowledge, descriptive only: maps and time zones).
AZURE_REGIONS = {
    "Australia Central": ("Canberra", -35.28, 149.13, 10.0),
    "Australia Central 2": ("Canberra", -35.31, 149.19, 10.0),
    "Australia East": ("New South Wales", -33.87, 151.21, 10.0),
    "Australia Southeast": ("Victoria", -37.81, 144.96, 10.0),
    "Austria East": ("Vienna", 48.21, 16.37, 1.0),
    "Belgium Central": ("Brussels", 50.85, 4.35, 1.0),
    "Brazil South": ("Sao Paulo", -23.55, -46.63, -3.0),
    "Canada Central": ("Toronto", 43.65, -79.38, -5.0),
    "Canada East": ("Quebec City", 46.81, -71.21, -5.0),
    "Central India": ("Pune", 18.52, 73.86, 5.5),
    "Central US": ("Iowa", 41.59, -93.62, -6.0),
    "Denmark East": ("Copenhagen", 55.68, 12.57, 1.0),
    "East Asia": ("Hong Kong", 22.32, 114.17, 8.0),
    "East US": ("Virginia", 36.67, -78.39, -5.0),
    "East US 2": ("Virginia", 36.85, -78.0, -5.0),
    "France Central": ("Paris", 48.86, 2.35, 1.0),
    "France South": ("Marseille", 43.30, 5.37, 1.0),
    "Germany North": ("Berlin", 52.52, 13.40, 1.0),
    "Germany West Central": ("Frankfurt", 50.11, 8.68, 1.0),
    "Indonesia Central": ("Jakarta", -6.21, 106.85, 7.0),
    "Israel Central": ("Israel", 32.09, 34.78, 2.0),
    "Italy North": ("Milan", 45.46, 9.19, 1.0),
    "Japan East": ("Tokyo", 35.68, 139.69, 9.0),
    "Japan West": ("Osaka", 34.69, 135.50, 9.0),
    "Jio India West": ("Jamnagar", 22.47, 70.06, 5.5),
    "Korea Central": ("Seoul", 37.57, 126.98, 9.0),
    "Korea South": ("Busan", 35.18, 129.08, 9.0),
    "Malaysia West": ("Kuala Lumpur", 3.14, 101.69, 8.0),
    "Mexico Central": ("Queretaro", 20.59, -100.39, -6.0),
    "New Zealand North": ("Auckland", -36.85, 174.76, 12.0),
    "North Central US": ("Illinois", 41.88, -87.63, -6.0),
    "North Europe": ("Ireland", 53.35, -6.26, 0.0),
    "Norway East": ("Oslo", 59.91, 10.75, 1.0),
    "Norway West": ("Stavanger", 58.97, 5.73, 1.0),
    "Poland Central": ("Warsaw", 52.23, 21.01, 1.0),
    "Qatar Central": ("Doha", 25.29, 51.53, 3.0),
    "South Africa North": ("Johannesburg", -26.20, 28.05, 2.0),
    "South Africa West": ("Cape Town", -33.92, 18.42, 2.0),
    "South Central US": ("Texas", 29.42, -98.49, -6.0),
    "South India": ("Chennai", 13.08, 80.27, 5.5),
    "Southeast Asia": ("Singapore", 1.35, 103.82, 8.0),
    "Spain Central": ("Madrid", 40.42, -3.70, 1.0),
    "Sweden Central": ("Gavle", 60.67, 17.14, 1.0),
    "Switzerland North": ("Zurich", 47.38, 8.54, 1.0),
    "Switzerland West": ("Geneva", 46.20, 6.14, 1.0),
    "UAE Central": ("Abu Dhabi", 24.47, 54.37, 4.0),
    "UAE North": ("Dubai", 25.20, 55.27, 4.0),
    "UK South": ("London", 51.51, -0.13, 0.0),
    "UK West": ("Cardiff", 51.48, -3.18, 0.0),
    "West Central US": ("Wyoming", 41.14, -104.82, -7.0),
    "West Europe": ("Netherlands", 52.37, 4.90, 1.0),
    "West US": ("California", 37.78, -122.42, -8.0),
    "West US 2": ("Washington", 47.23, -119.85, -8.0),
    "West US 3": ("Arizona", 33.45, -112.07, -7.0),
}
AZURE_ZONES = 3            # ASSUMED: every region with three availability zones (as Azure's AZ regions have)
AZURE_ZONE_MS = 1.0        # ASSUMED one way between zones of a region (Azure: < 2 ms round trip)
AZURE_ZONE_KM = 25.0       # map offset of a zone from its region's point (drawing only)
AZURE_ZONE_GPUS = (128, 1024)  # ASSUMED H100 per zone, log-uniform, multiples of 64
AZURE_GATEWAYS = 2         # zones per region with inter-region links (zone 1 to zone 1, zone 2 to zone 2)
AZURE_NIC_GBPS = 16.0      # Azure D32_v5 NIC (matrix_azure_tput header): the per-VM cap


def azure_zone_gbps() -> tuple[float, str]:
    """Zone-to-zone bandwidth: GCP cross-zone NCCL p2p per VM (interconnect_facts.csv) x 8 pairs."""
    _, rows = read_csv("interconnect_facts.csv")
    r = fact(rows, "GCP cross-zone NCCL p2p", "item")
    gbit = float(r["unit"].split("~")[1].split(" ")[0]) if "~" in r["unit"] else 20.0
    return gbit * AZURE_VM_PAIRS, (f"{AZURE_VM_PAIRS} x {gbit:g} Gbit/s: the GCP cross-zone NCCL p2p figure "
                                   f"({r['value']} {r['unit']}, {r['source']}; interconnect_facts.csv), "
                                   "the only cross-zone figure in the shared data, for Azure too")


def inst_azure_zones():
    pcomment, p95 = read_matrix("azure_p95_rtt_ms_full.csv")
    _, tput = read_matrix("matrix_azure_tput_gbps_skyplane2022.csv")
    regions = list(dict.fromkeys(a for a, _ in p95))
    key = {r: r.lower().replace(" ", "") for r in regions}
    measured = {k.split(":")[1] for k, _ in tput}
    # fit per-VM throughput = a * RTT^b (least squares in logs) on the measured pairs, P95 RTT
    _, avg_rtt = read_matrix("matrix_azure_rtt_ms_skyplane2022.csv")
    xs, ys, ratio = [], [], []
    for i, a in enumerate(regions):
        for b in regions[i + 1:]:
            if key[a] in measured and key[b] in measured:
                ka, kb = f"azure:{key[a]}", f"azure:{key[b]}"
                t = min(tput[(ka, kb)], tput[(kb, ka)])
                rtt = (p95[(a, b)] + p95[(b, a)]) / 2
                xs.append(math.log(rtt))
                ys.append(math.log(t))
                ratio.append((avg_rtt[(ka, kb)] + avg_rtt[(kb, ka)]) / 2 / rtt)
    ratio.sort()
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    icpt = my - slope * mx
    r2 = 1 - sum((y - icpt - slope * x) ** 2 for x, y in zip(xs, ys)) / sum((y - my) ** 2 for y in ys)
    rng = random.Random(SCALE_SEED)
    g, ghdr = gpu("H100", MFU_H100, MFU_H100_REASON)
    zone_bw, zone_note = azure_zone_gbps()
    domains, links, first = [], [], {}
    for r in regions:
        city, lat, lon, utc = AZURE_REGIONS[r]
        first[r] = len(domains)
        for z in range(AZURE_ZONES):
            ang = 2 * math.pi * z / AZURE_ZONES
            zlat, zlon = _km_offset(lat, lon, AZURE_ZONE_KM * math.cos(ang), AZURE_ZONE_KM * math.sin(ang))
            domains.append({"name": f"{key[r]}-z{z + 1}", "gpus": _log_uniform_gpus(rng, *AZURE_ZONE_GPUS),
                            "gpus_per_node": 8, "intra_bandwidth_gbps": AZURE_NDH100_GBPS_PER_GPU,
                            "price_per_gpu_hour": AZURE_NDH100_USD_PER_GPU_H,
                            "region": f"azure:{key[r]} ({city})", "lat": zlat, "lon": zlon,
                            "utc_offset_hours": utc})
            uplink(domains[-1], AZURE_NDH100_VM_GBPS, "ND96isr_H100_v5: 80,000 Mbps per VM")
        for z in range(AZURE_ZONES):
            for w in range(z + 1, AZURE_ZONES):
                links.append({"a": domains[first[r] + z]["name"], "b": domains[first[r] + w]["name"],
                              "bandwidth_gbps": zone_bw, "latency_ms": AZURE_ZONE_MS, "_comment": "zones of one region"})
    n_zone = len(links)
    fitted, lat_all, bw_all = 0, [], []
    for i, a in enumerate(regions):
        for b in regions[i + 1:]:
            rtt = (p95[(a, b)] + p95[(b, a)]) / 2
            if key[a] in measured and key[b] in measured:
                ka, kb = f"azure:{key[a]}", f"azure:{key[b]}"
                per_vm, how = min(tput[(ka, kb)], tput[(kb, ka)]), "measured"
            else:
                per_vm, how = min(AZURE_NIC_GBPS, math.exp(icpt) * rtt ** slope), "fit"
                fitted += 1
            bw = round(per_vm * AZURE_VM_PAIRS, 2)
            one_way = round(rtt / 2, 2)
            lat_all.append(one_way)
            bw_all.append(bw)
            for z in range(AZURE_GATEWAYS):
                links.append({"a": domains[first[a] + z]["name"], "b": domains[first[b] + z]["name"],
                              "bandwidth_gbps": bw, "latency_ms": one_way,
                              "_comment": f"P95 RTT {p95[(a, b)]:g}/{p95[(b, a)]:g} ms; {how} {per_vm:.2f} Gbit/s "
                                          f"per VM x {AZURE_VM_PAIRS}"})
    n = len(domains)
    total = sum(d["gpus"] for d in domains)
    pairs = len(regions) * (len(regions) - 1) // 2
    hdr = [
        f"azure-zones: {len(regions)} Azure regions x {AZURE_ZONES} availability zones = {n} domains, "
        f"{total:,} H100, LLaMA-2 70B.",
        "Regime: GLOBAL SCALE (issue 15) -- a cloud with regions and zones: zones ~1 ms apart inside a",
        f"  region, {min(lat_all):.1f}-{max(lat_all):.0f} ms one way between regions. The planner must "
        "pick regions and keep",
        "  pipelines and gradient rings inside a region's zones; each domain's 'region' is its cloud",
        "  region (a hierarchical planner groups by it).",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {AZURE_NDH100_GBPS_PER_GPU:.0f}: one NDR InfiniBand 400 Gbit/s link per GPU on ND "
        "H100 v5 (as azure-multiregion).",
        f"price_per_gpu_hour {AZURE_NDH100_USD_PER_GPU_H:.2f}: ASSUMED ND96isr_H100_v5 on-demand ~ $98/h / 8 (as "
        "azure-multiregion).",
        f"gpus: ASSUMED, log-uniform {AZURE_ZONE_GPUS[0]}-{AZURE_ZONE_GPUS[1]} per zone in multiples of 64, drawn with "
        f"Python's random.Random({SCALE_SEED}).",
    ] + uplink_hdr("ND96isr_H100_v5", AZURE_NDH100_VM_GBPS, AZURE_UPLINK_WHY, domains, links) + [
        f"Zones: ASSUMED {AZURE_ZONES} per region for every region (Azure's availability-zone regions have three;",
        "  in reality some regions have none). Domain name = region name in lower case without spaces",
        "  + '-z1'..'-z3'; lat/lon = the region's approximate city (general knowledge) offset by",
        f"  {AZURE_ZONE_KM:g} km per zone, for drawing only.",
        "",
        "Network:",
        f"  zones of a region: full mesh ({n_zone} links), {AZURE_ZONE_MS:g} ms one way (ASSUMED: Azure states a < 2 ms",
        f"    round-trip latency perimeter between zones; general knowledge), {zone_bw:g} Gbit/s = {zone_note}.",
        f"  between regions: zone k of each region to zone k of every other (k = 1, 2: {AZURE_GATEWAYS} links per",
        f"    region pair, {len(links) - n_zone:,} links):",
        "    latency_ms = (P95 RTT a->b + b->a) / 2 / 2 from azure_p95_rtt_ms_full.csv",
        f"      ({pcomment.split(';')[0].replace('source: ', '')}).",
        f"      The monthly P95 is pessimistic: on the {len(ratio)} pairs Skyplane also measured, its average",
        f"      RTT (matrix_azure_rtt_ms_skyplane2022.csv) is {ratio[0]:.2f}-{ratio[-1]:.2f}x the P95, median "
        f"{ratio[len(ratio) // 2]:.2f}.",
        f"    bandwidth_gbps = per-VM throughput x {AZURE_VM_PAIRS} gateway VM pairs (as azure-multiregion): the",
        "      smaller measured direction of matrix_azure_tput_gbps_skyplane2022.csv",
        f"      ({SKYPLANE_TPUT_SRC})",
        f"      for the {pairs - fitted} pairs of the {len(measured)} measured regions; for the other {fitted} pairs, "
        "a fit on those,",
        f"      per-VM Gbit/s = {math.exp(icpt):.2f} x (P95 RTT ms)^{slope:.3f} (least squares in logs, R^2 {r2:.2f}),",
        f"      capped at the {AZURE_NIC_GBPS:g} Gbit/s D32_v5 NIC; {min(bw_all):.1f}-{max(bw_all):.1f} Gbit/s.",
        "  links: not a full mesh over zones; routes between regions relay through zones 1 and 2; a linked",
        "    pair takes its link (SPEC v3), also where the P95 RTTs break the triangle inequality.",
        "  wan_price_per_gb 0.02: ASSUMED as azure-multiregion (Azure prices are not in the shared data).",
        "",
        "Workload: model llama2-70b (../models/llama2-70b.toml from llm_configs.csv: Touvron et al. 2023);",
        "  global_batch_size 4096 x seq_len 4096 = 16.8M tokens, the Llama 3 16M-token batch",
        "  (llm_configs.csv: Llama-3.1 405B batch_tokens 16M; LLaMA-2 itself used 4M), so that up to 4096",
        "  replicas can use the GPUs.",
    ]
    inst = {"name": "azure-zones",
            "description": f"Global scale: LLaMA-2 70B on {total:,} H100 in {n} availability zones of "
                           f"{len(regions)} Azure regions (measured P95 RTTs)",
            "gpu": g, "domains": domains, "links": links,
            "workload": workload("llama2-70b", 4096, 4096),
            "options": options(max_stages=32, wan_price=0.02)}
    return inst, hdr


# ---- tiny test instances (synthetic) ----

TOY_GPU = {"name": "toy-1tf", "peak_tflops": 1.0, "memory_gb": 0.08, "mfu": 0.5}
TOY_HDR = [
    "SYNTHETIC instance for tests; no figure is sourced. The GPU is a toy (1 TFLOP/s, 80 MB, MFU",
    "  0.5) scaled to the 6.8M-parameter 'tiny' model so that compute (~53 ms per micro-batch for",
    "  the whole model at b=1, s=512), transfers (262 KB per boundary: 2 ms at 1 Gbit/s) and",
    "  latency (ms) are of the same order, and memory binds: the 109 MB of weight state plus",
    "  activations exceed one toy GPU (72 MB usable): a plan needs t = 4, or S >= 2 at t = 2,",
    "  or S >= 3 at t = 1 (generator check below).",
    "  nvlink_bandwidth_gbps absent: gpu_specs.csv has no NVLink figure for the toy GPU, so",
    "  tensor-parallel communication is free here (SPEC 5, v2: as in v1).",
]


def inst_tiny_3dc():
    doms = [("alpha", 16, 1.0), ("beta", 8, 2.0), ("gamma", 12, 0.5)]
    domains = [{"name": n, "gpus": k, "gpus_per_node": 4, "intra_bandwidth_gbps": 100.0,
                "price_per_gpu_hour": p} for n, k, p in doms]
    # No alpha-gamma link: their traffic must relay via beta (SPEC v3 routes a linked pair over
    # its link, so the slower direct alpha-gamma link of SPEC v2 days, 1 Gbit/s and 8 ms, which
    # the 5 ms relay beat, would no longer relay anything; v2 never used it).
    links = [
        {"a": "alpha", "b": "beta", "bandwidth_gbps": 10.0, "latency_ms": 2.0},
        {"a": "beta", "b": "gamma", "bandwidth_gbps": 5.0, "latency_ms": 3.0,
         "_comment": "no alpha-gamma link: alpha-gamma traffic relays via beta (2 + 3 = 5 ms)"},
    ]
    hdr = ["tiny-3dc: 3 domains, alpha-beta-gamma with no alpha-gamma link, model tiny.",
           "Regime: small test case; alpha and gamma are not linked, so their traffic relays via beta",
           "  (5 ms) and shares the alpha-beta and beta-gamma links with the one-hop flows: routing,",
           "  link sharing and relaying are exercised under SPEC v3 (which routes a linked pair over",
           "  its link). Until v3 a slower direct alpha-gamma link (1 Gbit/s, 8 ms) forced the relay; v2",
           "  routed nothing over it, so v2 figures are as they were."] + TOY_HDR
    inst = {"name": "tiny-3dc", "description": "Synthetic test: 3 domains, alpha-gamma relayed via beta, tiny model, toy GPU",
            "gpu": dict(TOY_GPU), "domains": domains, "links": links,
            "workload": workload("tiny", 16, 512, tps=(1, 2, 4)),
            "options": options(max_stages=8, wan_price=0.01)}
    return inst, hdr


def inst_tiny_line():
    domains = [{"name": n, "gpus": 8, "gpus_per_node": 4, "intra_bandwidth_gbps": 100.0,
                "price_per_gpu_hour": 1.0} for n in "abcd"]
    links = [
        {"a": "a", "b": "b", "bandwidth_gbps": 10.0, "latency_ms": 2.0},
        {"a": "b", "b": "c", "bandwidth_gbps": 2.0, "latency_ms": 5.0},
        {"a": "c", "b": "d", "bandwidth_gbps": 10.0, "latency_ms": 2.0},
    ]
    hdr = ["tiny-line: 4 domains in a line a-b-c-d, model tiny.",
           "Regime: small test case with multi-hop routes (a to d is 3 hops, 9 ms) and a slow middle",
           "  link b-c (2 Gbit/s) that every flow between {a,b} and {c,d} shares."] + TOY_HDR
    inst = {"name": "tiny-line", "description": "Synthetic test: 4 domains in a line a-b-c-d, tiny model, toy GPU",
            "gpu": dict(TOY_GPU), "domains": domains, "links": links,
            "workload": workload("tiny", 16, 512, tps=(1, 2, 4)),
            "options": options(max_stages=8, wan_price=0.01)}
    return inst, hdr


# ---- GPU types (issue 25, SPEC v3 change (g)): instances mixing accelerator generations ----

# AWS on-demand list prices (USD per instance-hour, us-east-1, Linux), per GPU = / 8. These are the
# list prices in force from the P5 launch (July 2023) until AWS cut P4d/P5 on-demand prices in
# June 2025 (by up to 33% / 45%: usage.ai, "LLM Cost Optimization on AWS", 2026); what matters
# here is their ratio, ~3.0x per GPU.
AWS_P5_USD_PER_H = 98.32   # p5.48xlarge, 8 x H100 80GB
AWS_P4D_USD_PER_H = 32.77  # p4d.24xlarge, 8 x A100 40GB
AWS_PRICE_SRC = ("aws.amazon.com/ec2/pricing/on-demand/ (us-east-1, Linux) as reported for P5 by The Next "
                 "Platform, 'H100 GPU Instance Pricing On AWS: Grin And Bear It' (2023-07-27), and "
                 "awsnegotiations.com 'AWS GPU Instance Cost Strategy' (2026: p5.48xlarge list ~$98.30/h); "
                 "p4d.24xlarge $32.77/h as in the other AWS instances; NOT re-checked against the AWS "
                 "page this session; AWS cut both in June 2025")
AWS_P5_USD_PER_GPU_H = round(AWS_P5_USD_PER_H / 8, 2)
AWS_P4D_LIST_USD_PER_GPU_H = round(AWS_P4D_USD_PER_H / 8, 2)
# p5.48xlarge: 192 vCPUs and 3200 Gbit/s of EFA networking per instance (8 x H100), i.e. 400 per GPU.
AWS_P5_NIC_GBPS = 3200.0
AWS_P5_VCPUS = 192
AWS_P5_SRC = ("AWS 'Amazon EC2 Capacity Blocks for ML Pricing' (aws.amazon.com/ec2/capacityblocks/pricing/): "
              "p5.48xlarge 8 x H100, 192 vCPU, 640 GB HBM3, 3200 Gigabit network")
AWS_P5_GBPS_PER_GPU = AWS_P5_NIC_GBPS / 8

# EDWC with two generations, ASSUMED: east (real-time demand) hubs host the newest H100 servers,
# west (batch) hubs the older A100-40GB fleet. The H100 hour's base is the A100 base scaled by the
# per-GPU AWS list-price ratio p5 / p4d (both above), its power by the TDP ratio of gpu_specs.csv.
EDWC_MIXED_IDS = ["zhangjiakou", "yrd_demo_zone", "shaoguan", "horinger", "guian", "zhongwei"]
EDWC_MIXED_GPUS = {"zhangjiakou": 64, "yrd_demo_zone": 32, "shaoguan": 32,
                   "horinger": 256, "guian": 192, "zhongwei": 128}


def tdp_w(name: str) -> float:
    """TDP in watts of a gpu() type, gpu_specs.csv ``tdp_w``."""
    _, rows = read_csv("gpu_specs.csv")
    return float(next(r for r in rows if (r["gpu"], r["form_factor"]) == GPU_ROWS[name])["tdp_w"])


def edwc_mixed_price(role: str, kind: str) -> float:
    """USD per GPU-hour of an EDWC cluster of ``role`` with GPU ``kind`` (A100-40GB or H100)."""
    scale = AWS_P5_USD_PER_GPU_H / AWS_P4D_LIST_USD_PER_GPU_H if kind == "H100" else 1.0
    kw = EDWC_KW_PER_GPU * tdp_w(kind) / tdp_w("A100-80GB")
    return round(EDWC_BASE_USD_PER_GPU_H * scale + kw * EDWC_PUE[role] * EDWC_TARIFF_USD_PER_KWH[role], 2)


EXPORT_CONTROL_NOTE = [
    "  CAVEAT: since US export controls (Oct 2022, Oct 2023) Chinese datacenters buy export variants",
    "  (A800/H800: the same compute and memory, NVLink cut to 400 GB/s) or domestic accelerators",
    "  (Huawei Ascend 910B); the datasheet A100/H100 figures stand in for them, so NVLink is optimistic.",
]


def inst_edwc_mixed():
    E = edwc_data()
    ids = EDWC_MIXED_IDS
    kind = {c: "H100" if E["clusters"][c]["role"] == "east" else "A100-40GB" for c in ids}
    h100, h_hdr = gpu("H100", MFU_H100, MFU_H100_REASON)
    a100, a_hdr = gpu("A100-40GB", MFU_A100, MFU_A100_REASON)
    type_name = {"H100": h100["name"], "A100-40GB": a100["name"]}
    prices = {c: edwc_mixed_price(E["clusters"][c]["role"], kind[c]) for c in ids}
    domains, links, nhdr = edwc_network(ids, EDWC_MIXED_GPUS, prices, IB_HDR_GBPS)
    for d in domains:
        d["gpu"] = type_name[kind[d["name"]]]
        d["intra_bandwidth_gbps"] = IB_NDR_GBPS if kind[d["name"]] == "H100" else IB_HDR_GBPS
    east = [c for c in ids if kind[c] == "H100"]
    west = [c for c in ids if kind[c] != "H100"]
    speed = (h100["peak_tflops"] * h100["mfu"]) / (a100["peak_tflops"] * a100["mfu"])
    hdr = [
        "edwc-mixed: LLaMA-2 13B over six East-Data-West-Computing clusters with TWO GPU GENERATIONS",
        f"  (SPEC v3 [[gpus]]): H100 in the east hubs ({', '.join(east)}),",
        f"  A100-40GB in the west hubs ({', '.join(west)}).",
        f"Regime: GPU types. An H100 computes {speed:.1f}x as fast (peak x MFU) with twice the memory, but the",
        f"  east holds {sum(EDWC_MIXED_GPUS[c] for c in east)} of them against "
        f"{sum(EDWC_MIXED_GPUS[c] for c in west)} A100s in the west: which stages (and",
        "  replicas) go on the fast type, and whether a pipeline mixing types beats the one-type ones.",
        "  The network is edwc-llama2-13b's (2-16 ms, 100-400 Gbit/s).",
        "Type per domain: ASSUMED (east hubs serve real-time demand and got the newest servers; the west",
        "  hubs' batch fleet is a generation older).",
        "",
    ] + h_hdr + a_hdr + [
        "  (A100-40GB: the SXM4 40 GB part of gpu_specs.csv; MFU taken as for the 80 GB part.)",
    ] + EXPORT_CONTROL_NOTE + [
        f"intra_bandwidth_gbps: {IB_NDR_GBPS:.0f} (one InfiniBand NDR port per H100, DGX H100) in the east,",
        f"  {IB_HDR_GBPS:.0f} (HDR per A100, DGX A100) in the west -- interconnect_facts.csv.",
        "gpus: ASSUMED allocation: " + ", ".join(f"{c} {EDWC_MIXED_GPUS[c]}" for c in ids) + ".",
        "price_per_gpu_hour (USD), ASSUMED: west (A100-40GB) as edwc-llama2-13b,",
        f"  {EDWC_BASE_USD_PER_GPU_H:.2f} base + {EDWC_KW_PER_GPU} kW x PUE x tariff;",
        f"  east (H100) base {EDWC_BASE_USD_PER_GPU_H:.2f} x {AWS_P5_USD_PER_GPU_H:.2f} / "
        f"{AWS_P4D_LIST_USD_PER_GPU_H:.2f} (the per-GPU ratio of AWS p5 / p4d list",
        f"  prices: {AWS_PRICE_SRC}),",
        f"  power {EDWC_KW_PER_GPU} kW x {tdp_w('H100'):g} / {tdp_w('A100-80GB'):g} W (gpu_specs.csv TDPs). "
        f"East {prices[east[0]]:.2f}, west {prices[west[0]]:.2f}.",
        "",
    ] + nhdr + [
        "wan_price_per_gb 0: leased wavelengths are flat-rate, not billed per GB.",
        "",
    ] + edwc_dp_sync_note("llama2-13b", (2, len(ids)), EDWC_13B_ROWS) + [
        "",
        "Workload: model llama2-13b (../models/llama2-13b.toml from llm_configs.csv: Touvron et al. 2023);",
        f"  {LLAMA2_BATCH_NOTE}; seq_len 4096 as trained.",
    ]
    inst = {"name": "edwc-mixed",
            "description": "GPU types: LLaMA-2 13B over 6 EDWC clusters, H100 in the east hubs, A100-40GB in the west",
            "gpus": [h100, a100], "domains": domains, "links": links,
            "workload": workload("llama2-13b", 1024, 4096),
            "options": options(max_stages=16, dp_sync=DP_SYNC_ALL)}
    return inst, hdr


# DiLoCo instances (issue 26): four datacenters at real AWS regions' measured latencies, joined by
# slow dedicated links, where a per-step gradient ring across sites is far slower than a step's compute.
DILOCO_REGIONS = ["us-east-1", "us-west-2", "eu-central-1", "ap-northeast-1"]  # 3 continents
DILOCO_GPUS = 128  # per datacenter: 16 DGX A100-80GB servers (ASSUMED)
DILOCO_LINK_GBPS = 10.0  # ASSUMED: one 10 Gbit/s dedicated connection per site pair


def inst_diloco(name: str, model: str, size: str, max_stages: int, quality: float | None):
    """``diloco-13b`` / ``diloco-70b``: the same four sites, 10 Gbit/s everywhere, the model
    ``model``; ``quality``: the nominal parameter count (70e9 for "70B") at which SPEC 11's rows
    are written as [[quality]] (rows 3 and 4 by :func:`chinchilla_e`), None for no rows."""
    regions = DILOCO_REGIONS
    gpus = {r: DILOCO_GPUS for r in regions}
    g, ghdr = gpu("A100-80GB", MFU_A100, MFU_A100_REASON)
    domains, links, st = cloud_network("aws", regions, lambda r: f"aws:{r}", gpus,
                                       AWS_P4D_USD_PER_GPU_H, IB_HDR_GBPS, 1)
    measured = []
    for l in links:  # the latency is measured; the bandwidth is the assumed dedicated link
        measured.append(l["bandwidth_gbps"])
        l["bandwidth_gbps"] = DILOCO_LINK_GBPS
        l["_comment"] = l["_comment"].split("; tput")[0] + f"; {DILOCO_LINK_GBPS:g} Gbit/s ASSUMED"
    lat = st["lat"]
    wan, whdr = aws_egress(regions)
    w = workload(model, 1024, 4096)
    m = load_model(model)
    P = sum(u[0] for u in model_units(m, w["seq_len"], w["recompute"]))
    K = len(regions)
    ring_s = 2 * (K - 1) / K * 2 * P * 8 / (DILOCO_LINK_GBPS * 1e9)
    total = K * DILOCO_GPUS
    step_s = 6 * P * w["global_batch_size"] * w["seq_len"] / (total * g["peak_tflops"] * 1e12 * g["mfu"])
    outer_s = 2 * (K - 1) / K * P * 4 / 8 * 8 / (DILOCO_LINK_GBPS * 1e9)
    hdr = [
        f"{name}: LLaMA-2 {size} on A100-80GB in four datacenters ({DILOCO_GPUS} GPUs each) on three",
        "  continents, at the measured latencies of AWS " + ", ".join(regions) + ",",
        f"  every pair joined by a {DILOCO_LINK_GBPS:g} Gbit/s link.",
        "Regime: DiLoCo (SPEC v3 section 11). A per-step bf16 gradient ring over the four sites moves",
        f"  2(K-1)/K x 2P = {2 * (K - 1) / K * 2 * P / 1e9:.0f} GB per link direction: ~{ring_s:.0f} s on "
        f"{DILOCO_LINK_GBPS:g} Gbit/s, against ~{step_s:.1f} s of compute",
        f"  for a step on all {total} GPUs (6 P FLOPs per token at peak x MFU; rough, the evaluator's",
        "  figures are what count). One site alone has a quarter of the GPUs; a pipeline across sites",
        f"  pays {min(lat):.0f}-{max(lat):.0f} ms per hop. DiLoCo and Streaming DiLoCo sync across "
        "sites every H steps",
        f"  (4-bit outer ring ~{outer_s:.0f} s, i.e. ~{outer_s / 100:.2f} s per step at H = 100) at the "
        "quality factor e",
        "  of the [[quality]] rows (or SPEC 11's defaults): is the effective throughput worth it?",
        "",
    ] + ghdr + [
        f"intra_bandwidth_gbps {IB_HDR_GBPS:.0f}: one InfiniBand HDR 200 Gbit/s port per A100 (DGX A100 8 x 200G)",
        "  -- interconnect_facts.csv.",
        f"gpus: ASSUMED {DILOCO_GPUS} per datacenter (16 DGX A100 servers).",
        f"price_per_gpu_hour {AWS_P4D_USD_PER_GPU_H:.2f}: ASSUMED, the p4d.24xlarge list price per GPU as in "
        "aws-multiregion (the",
        "  A100-80GB p4de lists higher); the objective is time.",
        "uplink_gbps absent: the sites are joined by dedicated links, which are the only network caps.",
        "",
        "Network (latency measured between AWS regions; bandwidth assumed):",
        "  latency_ms = (RTT a->b + RTT b->a) / 2 / 2 from matrix_aws_rtt_ms_skyplane2022.csv",
        f"    ({SKYPLANE_RTT_SRC}).",
        f"  one-way latency {min(lat):.1f}-{max(lat):.1f} ms (mean {sum(lat) / len(lat):.1f}).",
        f"  bandwidth_gbps {DILOCO_LINK_GBPS:g}: ASSUMED, one dedicated {DILOCO_LINK_GBPS:g} Gbit/s "
        "connection (port or wavelength) per site",
        "    pair: the slow-WAN setting DiLoCo targets. For scale, the measured per-VM throughput",
        f"    between these regions is {min(measured):.2f}-{max(measured):.2f} Gbit/s "
        f"(matrix_aws_tput_gbps_skyplane2022.csv, {SKYPLANE_TPUT_SRC}).",
        f"  links: full mesh ({len(links)} pairs); every route is direct (SPEC v3 section 2).",
    ] + whdr + [
        "",
    ] + dp_sync_note(["  the point of this instance. The per-step sync stays a candidate, so a plan's",
                      "  every-step figure is there to compare."])
    if quality:
        hdr += [
            f"[[quality]]: SPEC 11's five rows (first match wins, so the full list), rows 3 and 4 at {size}:",
            "  the same loss gaps mapped by the Chinchilla data term at " + size + " (SPEC 11 gives 0.89 and 0.67;",
            "  the generator recomputes them from arXiv 2203.15556 Eq. 10: E 1.69, A 406.4, B 410.7,",
            "  alpha 0.34, beta 0.28). Rows 1, 2 (ties, e = 1) and 5 as SPEC 11's defaults; with four",
            "  sites M <= 4, so rows 3 and 4 cover every diloco/streaming option with H <= 100.",
        ]
    hdr += [
        "",
        f"Workload: model {model} (../models/{model}.toml from llm_configs.csv: Touvron et al. 2023);",
        f"  {LLAMA2_BATCH_NOTE}; seq_len 4096.",
    ]
    inst = {"name": name,
            "description": f"DiLoCo: LLaMA-2 {size} on 4 x {DILOCO_GPUS} A100-80GB in 4 datacenters on 3 "
                           f"continents joined by {DILOCO_LINK_GBPS:g} Gbit/s links",
            "gpu": g, "domains": domains, "links": links, "workload": w,
            "options": options(max_stages=max_stages, wan_price=wan, dp_sync=DP_SYNC_ALL)}
    if quality:
        inst["quality"] = quality_rows(quality, size)
    return inst, hdr


def inst_diloco_13b():
    return inst_diloco("diloco-13b", "llama2-13b", "13B", 16, quality=None)


def inst_diloco_70b():
    return inst_diloco("diloco-70b", "llama2-70b", "70B", 32, quality=70e9)


AWS_MIXED_REGIONS = {"us-east-1": "H100", "us-east-2": "H100", "us-west-2": "A100-40GB",
                     "eu-west-1": "A100-40GB", "eu-central-1": "A100-40GB"}
AWS_MIXED_GPUS = {"H100": 16, "A100-40GB": 32}  # per region: 2 x p5.48xlarge, 4 x p4d.24xlarge
AWS_MIXED_VM_PAIRS = 8


def inst_aws_a100_h100():
    regions = list(AWS_MIXED_REGIONS)
    kind = AWS_MIXED_REGIONS
    h100, h_hdr = gpu("H100", MFU_H100, MFU_H100_REASON)
    a100, a_hdr = gpu("A100-40GB", MFU_A100, MFU_A100_REASON)
    gpus = {r: AWS_MIXED_GPUS[kind[r]] for r in regions}
    domains, links, st = cloud_network("aws", regions, lambda r: f"aws:{r}", gpus, 0.0, 0.0,
                                       AWS_MIXED_VM_PAIRS)
    p4d_cap, cap_src = aws_interregion_vm_gbps(AWS_P4D_NIC_GBPS, AWS_P4D_VCPUS)
    p5_cap, _ = aws_interregion_vm_gbps(AWS_P5_NIC_GBPS, AWS_P5_VCPUS)
    for d in domains:
        h = kind[d["name"]] == "H100"
        d["gpu"] = h100["name"] if h else a100["name"]
        d["intra_bandwidth_gbps"] = AWS_P5_GBPS_PER_GPU if h else AWS_P4D_GBPS_PER_GPU
        d["price_per_gpu_hour"] = AWS_P5_USD_PER_GPU_H if h else AWS_P4D_LIST_USD_PER_GPU_H
        uplink(d, p5_cap if h else p4d_cap,
               "AWS inter-region cap: 50% of a " + ("p5.48xlarge's 3200" if h else "p4d.24xlarge's 400") + " Gbit/s")
    note = [
        f"  Aggregate bandwidth ASSUMPTION: {AWS_MIXED_VM_PAIRS} gateway VM pairs striped in parallel (Skyplane-style),",
        "    each at the measured m5.8xlarge rate (as two-dc).",
    ]
    wan, whdr = aws_egress(regions)
    h_regions = [r for r in regions if kind[r] == "H100"]
    a_regions = [r for r in regions if kind[r] != "H100"]
    speed = (h100["peak_tflops"] * h100["mfu"]) / (a100["peak_tflops"] * a100["mfu"])
    hdr = [
        "aws-a100-h100: LLaMA-2 13B on an AWS tenant's mixed fleet (SPEC v3 [[gpus]]): p5.48xlarge (H100)",
        f"  in {', '.join(h_regions)}, p4d.24xlarge (A100-40GB) in {', '.join(a_regions)}.",
        f"Regime: GPU types with real prices. An H100 hour costs {AWS_P5_USD_PER_GPU_H / AWS_P4D_LIST_USD_PER_GPU_H:.1f}x "
        f"an A100 hour for {speed:.1f}x the speed",
        "  (peak x MFU) and twice the memory; the H100 regions are small (16 GPUs each) and an ocean away",
        "  from two of the A100 regions: types, prices and WAN latency pull in different directions.",
        "Type per region and GPUs per region: ASSUMED (a typical on-demand quota; P5 and P4d are offered",
        "  in these regions, check the console for current capacity).",
        "",
    ] + h_hdr + a_hdr + [
        "  (p4d.24xlarge carries A100-40GB; MFU as for A100-80GB.)",
        f"intra_bandwidth_gbps: {AWS_P5_GBPS_PER_GPU:g} on p5 (3200 Gbit/s EFA per 8 GPUs; {AWS_P5_SRC}),",
        f"  {AWS_P4D_GBPS_PER_GPU:g} on p4d (400 Gbit/s EFA per 8 GPUs; {AWS_P4D_SRC}).",
        f"price_per_gpu_hour: on-demand list prices / 8: p5.48xlarge ${AWS_P5_USD_PER_H}/h -> "
        f"{AWS_P5_USD_PER_GPU_H:.2f},",
        f"  p4d.24xlarge ${AWS_P4D_USD_PER_H}/h -> {AWS_P4D_LIST_USD_PER_GPU_H:.2f}; sources: {AWS_PRICE_SRC}.",
        "  The us-east-1 price is used in every region.",
        f"gpus: ASSUMED {AWS_MIXED_GPUS['H100']} per H100 region (2 x p5.48xlarge), "
        f"{AWS_MIXED_GPUS['A100-40GB']} per A100 region (4 x p4d.24xlarge).",
        "uplink_gbps (SPEC v3 sections 2, 5) = the region's VMs (gpus / 8) x the most one VM may send",
        f"  to other regions: p5.48xlarge {p5_cap:g} Gbit/s (50% of 3200, 192 vCPUs), p4d.24xlarge",
        f"  {p4d_cap:g} (50% of 400, 96 vCPUs).",
        f"  Sources: {cap_src}; p5: {AWS_P5_SRC}; p4d: {AWS_P4D_SRC}.",
        "  SPEC v3 has one figure for both directions; the per-VM egress cap is used for ingress too.",
        "",
    ] + cloud_hdr("aws", AWS_MIXED_VM_PAIRS, st, note) + whdr + [
        "",
        "Workload: model llama2-13b (../models/llama2-13b.toml from llm_configs.csv: Touvron et al. 2023);",
        f"  {LLAMA2_BATCH_NOTE}; seq_len 4096.",
    ]
    inst = {"name": "aws-a100-h100",
            "description": "GPU types: LLaMA-2 13B on AWS p5 (H100) and p4d (A100-40GB) regions at on-demand prices",
            "gpus": [h100, a100], "domains": domains, "links": links,
            "workload": workload("llama2-13b", 1024, 4096),
            "options": options(max_stages=16, wan_price=wan)}
    return inst, hdr


TOY_GPU_FAST = {"name": "toy-2tf", "peak_tflops": 2.0, "memory_gb": 0.06, "mfu": 0.5}


def inst_tiny_mixed():
    base, _ = inst_tiny_3dc()
    domains = [dict(d, gpu=TOY_GPU_FAST["name"] if d["name"] == "beta" else TOY_GPU["name"])
               for d in base["domains"]]
    hdr = ["tiny-mixed: tiny-3dc with two GPU types (SPEC v3 [[gpus]]), model tiny.",
           "Regime: small test case for GPU types: beta (8 GPUs, the relay between alpha and gamma) has",
           "  toy-2tf, twice as fast as toy-1tf (2 TFLOP/s) with 60 MB instead of 80 (54 MB usable), so a stage",
           "  is faster on beta but may not fit there; alpha and gamma keep toy-1tf. Network as tiny-3dc."
           ] + TOY_HDR + [
           "  toy-2tf: SYNTHETIC as well, no NVLink figure either."]
    inst = {"name": "tiny-mixed",
            "description": "Synthetic test: tiny-3dc with a faster, smaller toy GPU type in beta",
            "gpus": [dict(TOY_GPU), dict(TOY_GPU_FAST)], "domains": domains, "links": base["links"],
            "workload": base["workload"], "options": base["options"]}
    return inst, hdr


BUILDERS = [inst_edwc_llama2_13b, inst_edwc_full, inst_aws_multiregion, inst_azure_multiregion,
            inst_two_dc, inst_memory_bound, inst_cost_edwc, inst_gcp_16, inst_edwc_120dc,
            inst_edwc_300dc, inst_azure_zones, inst_tiny_3dc, inst_tiny_line,
            inst_edwc_mixed, inst_aws_a100_h100, inst_tiny_mixed, inst_diloco_13b, inst_diloco_70b]

# One row per instance for README.md: (regime it exercises, data files used).
README_ROWS = {
    "edwc-llama2-13b": (
        "**default**; realistic national backbone: 2-16 ms, 100-400 Gbit/s leased wavelengths",
        "china_edwc_{clusters,pairwise_distance_latency_est,facts}, gpu_specs, mfu_reported, "
        "interconnect_facts, llm_configs"),
    "edwc-full": (
        "all 10 clusters / 45 links; model needs >= 3 stages, WAN data parallelism is costly",
        "as edwc-llama2-13b"),
    "aws-multiregion": (
        "WAN-bandwidth bound: 3.6-4.7 Gbit/s measured links (1 VM pair); activations and gradients "
        "dominate",
        "matrix_aws_{rtt,tput}_skyplane2022, aws_interregion_egress_usd_per_gb_2023, "
        "interconnect_facts, gpu_specs, mfu_reported, llm_configs"),
    "azure-multiregion": (
        "WAN-latency bound: 31-123 ms one way, 62-113 Gbit/s (8 VM pairs); model cannot fit in "
        "one region",
        "matrix_azure_{rtt,tput}_skyplane2022, gpu_specs, mfu_reported, interconnect_facts, "
        "llm_configs"),
    "two-dc": (
        "simplest geo case: one 34 ms coast-to-coast link; is the second region worth it?",
        "matrix_aws_{rtt,tput}_skyplane2022, aws_interregion_egress_usd_per_gb_2023, "
        "interconnect_facts, gpu_specs, mfu_reported, llm_configs"),
    "memory-bound": (
        "memory forces >= 13 stages of 8 GPUs, i.e. >= 4 clusters per replica; GPipe infeasible",
        "as edwc-llama2-13b"),
    "cost-edwc": (
        "objective = cost: 3 price tiers (1.55-4.10 USD/GPU-h), 0.02 USD/GB WAN; cheap clusters too "
        "small for the model",
        "as edwc-llama2-13b, plus interconnect_facts / aws egress for the per-GB price"),
    "gcp-16": (
        "LARGE: 16 domains, 120 measured links, 1,344 H100; scalability of solvers",
        "matrix_gcp_{rtt,tput}_skyplane2022, skyplane_snapshot_variability, interconnect_facts, "
        "gpu_specs, mfu_reported, llm_configs"),
    "edwc-120dc": (
        "NATIONAL SCALE: EDWC expanded to datacenters, 4-20 per cluster; metro links 0.2-1 ms + "
        "2-16 ms backbone between cluster gateways; Llama-3 70B, up to 2048 replicas",
        "as edwc-llama2-13b"),
    "edwc-300dc": (
        "NATIONAL SCALE, the largest: 300 datacenters, 15-50 per cluster, ~150,000 GPUs; as edwc-120dc",
        "as edwc-llama2-13b"),
    "azure-zones": (
        "GLOBAL SCALE: 54 regions x 3 availability zones (1 ms apart), P95 RTTs between regions, "
        "bandwidth measured or fitted; LLaMA-2 70B, up to 4096 replicas",
        "azure_p95_rtt_ms_full, matrix_azure_tput_skyplane2022, interconnect_facts, gpu_specs, "
        "mfu_reported, llm_configs"),
    "tiny-3dc": (
        "tests: alpha-beta-gamma without an alpha-gamma link, so that traffic relays via beta (SPEC v3); "
        "toy GPU",
        "synthetic"),
    "tiny-line": (
        "tests: line a-b-c-d, multi-hop routes sharing a slow middle link; toy GPU",
        "synthetic"),
    "edwc-mixed": (
        "GPU TYPES: H100 in 3 east hubs (128), A100-40GB in 3 west hubs (576); which stages go on the "
        "fast type",
        "as edwc-llama2-13b"),
    "aws-a100-h100": (
        "GPU TYPES with real prices: p5 (H100, 12.29 USD/GPU-h) in 2 US regions, p4d (A100-40GB, 4.10) "
        "in 3 US/EU regions",
        "matrix_aws_{rtt,tput}_skyplane2022, aws_interregion_egress_usd_per_gb_2023, "
        "interconnect_facts, gpu_specs, mfu_reported, llm_configs"),
    "tiny-mixed": (
        "tests: tiny-3dc with a faster, smaller toy type (toy-2tf) in beta",
        "synthetic"),
    "diloco-13b": (
        "DILOCO: 4 sites x 128 A100 on 3 continents, 10 Gbit/s links (34-111 ms): a per-step gradient "
        "ring across sites costs several times a step's compute; dp_sync every_step/diloco/streaming",
        "matrix_aws_{rtt,tput}_skyplane2022, aws_interregion_egress_usd_per_gb_2023, interconnect_facts, "
        "gpu_specs, mfu_reported, llm_configs"),
    "diloco-70b": (
        "DILOCO as diloco-13b with LLaMA-2 70B and [[quality]] rows at 70B (0.89, 0.67 for rows 3, 4)",
        "as diloco-13b"),
}


UPLINK_RESULTS = HERE.parent / "benchmarks" / "results" / "uplinks.md"


def uplink_readme(insts: list[dict]) -> list[str]:
    """README section on uplink_gbps: what each instance has, its source, and the table of
    benchmarks/results/uplinks.md (made by benchmarks/uplinks.py) when it exists."""
    def span(values) -> str:
        v = sorted(set(values))
        return f"{v[0]:,.0f}" if len(v) == 1 else f"{v[0]:,.0f}-{v[-1]:,.0f}"

    def bullet(text: str) -> list[str]:
        return textwrap.wrap(text, width=92, initial_indent="- ", subsequent_indent="  ",
                             break_long_words=False, break_on_hyphens=False)

    rows = []
    for inst in insts:
        doms = [d for d in inst["domains"] if "uplink_gbps" in d]
        if doms:
            vms = [d["gpus"] // d["gpus_per_node"] for d in doms]
            per_vm = span(d["uplink_gbps"] / v for d, v in zip(doms, vms))
            vm, why = UPLINK_VM[inst["name"]]
            rows.append(f"| `{inst['name']}` | {span(d['uplink_gbps'] for d in doms)} | "
                        f"{span(vms)} {vm} x {per_vm} ({why}) |")
    out = [
        "## Uplinks (SPEC v3)",
        "",
        "`uplink_gbps` caps what a domain sends to the WAN in total and, separately, what it",
        "receives (SPEC v3 sections 2 and 5). The cloud instances have one per region (zone): its",
        "GPU VMs (gpus / 8) times the most one VM may send to other regions, since a plan's",
        "transfers leave from and arrive at the GPUs' own VMs. SPEC v3 has one figure for both",
        "directions; the clouds state per-VM egress caps, and the same figure is used for ingress.",
        "",
        "| instance | uplink_gbps per domain | VMs x Gbit/s per VM (what caps a VM) |",
        "|---|---|---|",
    ] + rows + [
        "",
    ] + bullet(f"**AWS**: {AWS_BANDWIDTH_DOC}; the row 'AWS inter-region per-instance egress cap' of "
               f"`interconnect_facts.csv` says the same. p4d.24xlarge: {AWS_P4D_SRC}.") + bullet(
        f"**Azure**: {AZURE_NDH100_SRC}.") + [
        "- **GCP**: `interconnect_facts.csv`, 'GCP VM egress to external IP / other cloud' = 7 Gbit/s per",
        "  VM, the ceiling observed in the Skyplane GCP grid; the GCP documentation of that cap was",
        "  **not verified**. It holds for traffic to external IP addresses, the path the links were",
        "  measured on; inside one VPC network an A3 Mega VM may send up to 1,800 Gbit/s.",
        "- **EDWC** (`edwc-*`, `cost-edwc`, `memory-bound`): no uplink. No sourced figure exists for",
        "  what one hub, cluster or datacenter can send to the backbone: `china_edwc_facts.csv` gives",
        "  the backbone's capacity (32 Tb/s per fibre, > 660 Tb/s in all) and 400G services on two",
        "  corridors, not a per-hub WAN port. The leased wavelengths (links) stay the only caps.",
        "- **tiny-\\***: synthetic, no uplink.",
        "",
    ]
    if UPLINK_RESULTS.exists():
        text = UPLINK_RESULTS.read_text(encoding="utf-8").rstrip("\n").splitlines()
        out += ["What the uplinks change, from `benchmarks/results/uplinks.md` (command and commit in its",
                "first lines; regenerate it, then this README):", ""] + text
    return out


def gpu_types_readme(insts: list[dict]) -> list[str]:
    """README section on the instances with several GPU types (SPEC v3 change (g))."""
    rows = []
    for inst in insts:
        if "gpus" not in inst:
            continue
        for g in inst["gpus"]:
            doms = [d for d in inst["domains"] if d["gpu"] == g["name"]]
            nv = g.get("nvlink_bandwidth_gbps")
            rows.append(f"| `{inst['name']}` | {g['name']} | {g['peak_tflops']:g} | {g['mfu']:g} | "
                        f"{g['memory_gb']:g} | {'-' if nv is None else f'{nv:g}'} | "
                        f"{', '.join(d['name'] for d in doms)} ({sum(d['gpus'] for d in doms):,} GPUs) |")
    return [
        "## GPU types (SPEC v3)",
        "",
        "Three instances mix GPU types: `[[gpus]]` lists the types and each domain's `gpu` names",
        "its own (SPEC v3 sections 2, 4, 5); a stage of a replica runs at the speed and memory of",
        "its domain's type. The datasheet figures are `gpu_specs.csv`'s (H100 SXM5, A100-40GB SXM4),",
        "the MFUs those of the one-type instances (`mfu_reported.csv`), and which domain has which",
        "type is assumed (headers). `aws-a100-h100` prices each region at its instance's on-demand",
        "list price per GPU (p5.48xlarge 98.32, p4d.24xlarge 32.77 USD/h, us-east-1, before AWS's",
        "June 2025 cut; sources in the header); `edwc-mixed` scales the EDWC base price by that",
        "ratio for its H100 hubs. `planner generate --gpu-types N` makes synthetic mixed fleets.",
        "",
        "| instance | type | peak TFLOP/s | mfu | memory GB | NVLink Gbit/s | domains |",
        "|---|---|---|---|---|---|---|",
    ] + rows


def dp_sync_readme(insts: list[dict]) -> list[str]:
    """README section on the instances whose [options] allow DiLoCo (SPEC v3 section 11)."""
    rows = []
    for inst in insts:
        modes = inst["options"].get("dp_sync")
        if modes is None:
            continue
        q = inst.get("quality", [])
        es = ", ".join(f"{r['e']:g}" for r in q) if q else "SPEC 11 defaults (13B)"
        rows.append(f"| `{inst['name']}` | `{inst['workload']['model']}` | {len(inst['domains'])} | "
                    f"{', '.join(modes)} | {es} |")
    return [
        "## Communication reduction (SPEC v3 section 11)",
        "",
        "These instances allow DiLoCo and Streaming DiLoCo beside the per-step sync (`[options] dp_sync`);",
        "the other candidates (H, bits, fragments, overlap) are the SPEC defaults. `[[quality]]` rows, where",
        "written, are SPEC 11's five rows at the model's size (the Chinchilla mapping of the same loss",
        "gaps; headers give the sources); without them SPEC 11's defaults, which are for 13B, apply.",
        "`diloco-13b` and `diloco-70b` are built for it (10 Gbit/s between four sites); on the EDWC",
        "instances with 6-10 clusters a cross-cluster gradient ring costs about a step's compute.",
        "Not on `edwc-120dc` / `edwc-300dc`: their plans spread replicas over tens to hundreds of",
        "datacenters, past the largest group count any quality row covers (8), and they are",
        "scalability benchmarks. The cloud and tiny instances keep the per-step sync only.",
        "",
        "| instance | model | domains | dp_sync | [[quality]] e, in order |",
        "|---|---|---|---|---|",
    ] + rows


# README: the VM type of each instance with uplinks, and what caps one VM's WAN traffic
UPLINK_VM = {
    "aws-multiregion": ("p4d.24xlarge", "AWS inter-region cap: 50% of its 400 Gbit/s"),
    "two-dc": ("p4d.24xlarge", "as aws-multiregion"),
    "azure-multiregion": ("ND96isr_H100_v5", "its network bandwidth, all destinations"),
    "gcp-16": ("a3-megagpu-8g", "egress to external IPs; not verified"),
    "azure-zones": ("ND96isr_H100_v5", "as azure-multiregion"),
    "aws-a100-h100": ("p5.48xlarge or p4d.24xlarge", "AWS inter-region cap: 50% of 3200 or 400 Gbit/s"),
}


def readme(insts: list[dict], mixes: dict[str, str]) -> str:
    out = [
        "# Instances",
        "",
        "Planner instances (format: SPEC section 9). Every file but `two-jobs.toml` (a",
        "hand-written synthetic test of several jobs, SPEC section 10) is generated by",
        "[`_generate.py`](_generate.py) from the sourced data in `../shared/data`",
        "(override with `PLANNER_SHARED_DATA=/path`); its header comment names the",
        "source of every figure, the reasoning for the assumed ones, the regime it is",
        "meant to exercise and a feasibility check against SPEC section 5. Edit the",
        "generator, not the TOML files:",
        "",
        "```",
        "python instances/_generate.py            # rewrite instances/*.toml and this README",
        "python instances/_generate.py --check    # fail if a file is out of date",
        "python instances/_generate.py --summary  # print the feasibility figures",
        "```",
        "",
        "| instance | domains | GPUs | GPU | model | regime it exercises | sources (`../shared/data/*.csv`) |",
        "|---|---|---|---|---|---|---|",
    ]
    for inst in insts:
        regime, src = README_ROWS[inst["name"]]
        out.append(f"| `{inst['name']}` | {len(inst['domains'])} | "
                   f"{sum(d['gpus'] for d in inst['domains']):,} | "
                   f"{' + '.join(g['name'] for g in gpu_types(inst))} | "
                   f"`{inst['workload']['model']}` | {regime} | {src} |")
    out += [
        "",
        "## Calibration and assumptions (details in each file's header)",
        "",
        "- **EDWC latency**: one-way = great-circle km x route factor x 0.005 ms/km. The route",
        "  factor (1.781) makes the mean over all 45 cluster pairs equal the CAICT 2024Q1 measured",
        "  optical-layer average of 9.7 ms; the resulting maximum is 15.8 ms (measured 17.1).",
        "- **EDWC bandwidth** (assumed): a leased 100 Gbit/s wavelength per cluster pair on China",
        "  Mobile's 400G OTN backbone, 400 Gbit/s on the two corridors with reported 400G service",
        "  (Beijing-Inner Mongolia, Ningbo(YRD)-Gui'an). Flat-rate, so `wan_price_per_gb = 0`",
        "  except in `cost-edwc`.",
        "- **Cloud latency**: mean of the two measured RTT directions / 2. **Cloud bandwidth**: the",
        "  smaller of the two measured VM-to-VM throughputs x N gateway VM pairs, N = 1 (AWS",
        "  multi-region, bandwidth-bound on purpose), 8 (Azure, two-dc, GCP). Full meshes, so every",
        "  route is direct (SPEC v3), also where measured RTTs break the triangle inequality.",
        "- **MFU**: 0.45 for A100, 0.42 for H100 (`mfu_reported.csv`).",
        "- **Intra-domain bandwidth per GPU**: 200 Gbit/s InfiniBand HDR (EDWC A100 clusters),",
        "  400 NDR (Azure ND H100 v5), 50 (AWS p4d: 400 Gbit/s EFA per 8 GPUs), 200 (GCP a3-mega).",
        "- **Prices** are assumptions (not in the shared data): on-demand list prices per GPU-hour",
        "  (p4d 4.10, ND H100 v5 12.30, a3 11.00 USD); EDWC 1.50 base + power (east 1.60, west",
        "  1.55). AWS per-GB price from the AWS transfer-price table; 0.02 USD/GB elsewhere.",
        "- **Batch**: LLaMA-2 instances use 1024 x 4096 = 4M tokens; GPT-3 instances the paper's",
        "  batch (2M tokens for 6.7B, 3.2M for 175B).",
        "- **GPU counts per domain** are assumed allocations for one job.",
        "- `tiny-*` are synthetic: a toy GPU (1 TFLOP/s, 80 MB, MFU 0.5) scaled to the 6.8M-parameter",
        "  `tiny` model so that compute, transfers, latency and memory all matter at millisecond scale.",
        "  `tiny-3dc` has no alpha-gamma link, so alpha-gamma traffic relays via beta under SPEC v3,",
        "  which routes every linked pair over its link.",
        "",
    ] + uplink_readme(insts) + [
        "",
    ] + gpu_types_readme(insts) + [
        "",
    ] + dp_sync_readme(insts) + [
        "",
    ] + mix_readme(mixes) + [
        "",
        "## National scale (issue 15)",
        "",
        "`edwc-120dc`, `edwc-300dc` and `azure-zones` have 120-300 domains and 60,000-150,000 GPUs;",
        "each domain's `region` is its EDWC cluster or Azure region. They are not full meshes",
        "(300 domains would need 44,850 links): inside a cluster (region) every datacenter (zone)",
        "links to the cluster's two gateways and its nearest neighbours (all zones of a region to each",
        "other), and the gateways carry the backbone: gateway k of each cluster to gateway k of every",
        "other, with the EDWC pair's latency and wavelength (edwc-*) or the measured P95 RTT and the",
        "measured or fitted throughput (azure-zones). Everything about the datacenters and zones",
        "themselves (counts, GPUs, metro latency floor and bandwidth, zone latency) is assumed; the",
        "headers say how. The unit tests only load them; `benchmarks/scale.py` plans on them, and",
        "`planner generate` makes synthetic instances of the same shape at any size",
        "([docs/scale.md](../docs/scale.md)).",
        "",
    ]
    return "\n".join(out)


# --------------------------------------------------------------------------
# TOML output
# --------------------------------------------------------------------------


def fmt(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(round(v, 6))
        return r if ("." in r or "e" in r) else r + ".0"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(fmt(x) for x in v) + "]"
    raise TypeError(type(v))


def table_lines(d: dict) -> list[str]:
    out = []
    if "_comment" in d:
        out.append(f"# {d['_comment']}")
    out += [f"{k} = {fmt(v)}" for k, v in d.items() if not k.startswith("_")]
    return out


def wrap(lines: list[str], width: int = 98) -> list[str]:
    out = []
    for ln in lines:
        if len(ln) <= width:
            out.append(ln)
            continue
        indent = len(ln) - len(ln.lstrip(" "))
        out += textwrap.wrap(ln, width=width, subsequent_indent=" " * (indent + 2),
                             break_long_words=False, break_on_hyphens=False)
    return out


def render(inst: dict, header: list[str], summary: list[str]) -> str:
    out = [("# " + ln).rstrip() for ln in wrap(header)]
    out += ["#"] + [("# " + ln).rstrip() for ln in wrap(summary)]
    out += ["#", "# Generated by instances/_generate.py from ../shared/data; edit the generator, "
                 "not this file.", ""]
    out.append(f"name = {fmt(inst['name'])}")
    out.append(f"description = {fmt(inst['description'])}")
    if "gpu" in inst:
        out += ["", "[gpu]"] + table_lines(inst["gpu"])
    for g in inst.get("gpus", []):  # SPEC v3 (g): GPU types, named by the domains' gpu
        out += ["", "[[gpus]]"] + table_lines(g)
    for d in inst["domains"]:
        out += ["", "[[domains]]"] + table_lines(d)
    for l in inst["links"]:
        out += ["", "[[links]]"] + table_lines(l)
    out += ["", "[workload]"] + table_lines(inst["workload"])
    out += ["", "[options]"] + table_lines(inst["options"])
    for q in inst.get("quality", []):  # SPEC v3 section 11: tried in order, before the defaults
        out += ["", "[[quality]]"] + table_lines(q)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# Checks against the SPEC (sections 2-5)
# --------------------------------------------------------------------------

RELAYS_LISTED = 30  # a header lists at most this many links that a relay would beat
RELAYS_UNLINKED_LISTED = 10  # ... and at most this many relayed pairs without a link
TOP_KEYS = {"name", "description", "gpu", "gpus", "domains", "links", "workload", "options",
            "quality"}  # [[quality]]: SPEC v3 section 11
GPU_KEYS = {"name", "peak_tflops", "memory_gb", "mfu"}
GPU_OPTIONAL_KEYS = {"nvlink_bandwidth_gbps"}  # SPEC 2, v2
DOMAIN_KEYS = {"name", "gpus", "gpus_per_node", "intra_bandwidth_gbps", "price_per_gpu_hour",
               "region", "lat", "lon", "utc_offset_hours", "uplink_gbps",  # uplink_gbps: SPEC 2, v3
               "gpu"}  # a domain's GPU type: SPEC 2, v3 (g)
LINK_KEYS = {"a", "b", "bandwidth_gbps", "latency_ms"}
WORKLOAD_KEYS = {"model", "global_batch_size", "seq_len", "micro_batch_sizes",
                 "tensor_parallel", "recompute"}
OPTION_KEYS = {"schedules", "max_stages", "objective", "memory_reserve_fraction",
               "wan_price_per_gb"}
OPTION_OPTIONAL_KEYS = {"dp_sync"}  # SPEC v3 section 11
QUALITY_KEYS = {"modes", "e"}
QUALITY_OPTIONAL_KEYS = {"max_groups", "max_H", "min_bits", "source"}


def load_model(name: str) -> dict:
    return tomllib.loads((MODELS_DIR / f"{name}.toml").read_text(encoding="utf-8"))


def model_units(m: dict, s: int, recompute: bool) -> list[tuple[float, float, float]]:
    """(params, fwd FLOPs/token, stored bytes/token) per unit, SPEC section 3."""
    h, f, a, V, N = (m["hidden_size"], m["ffn_hidden_size"], m["num_heads"], m["vocab_size"],
                     m["num_layers"])
    k = m.get("num_kv_heads", a)
    P = 2 * h * h + 2 * h * h * k / a + (3 if m["gated_mlp"] else 2) * h * f
    blk = (P, 2 * P + 4 * s * h, 2 * h if recompute else 34 * h)
    return [(V * h, 0.0, 0.0)] + [blk] * N + [(V * h, 2 * V * h, 4 * V)]


def fits(units, S, t, b, s, m, sched, cap) -> bool:
    """Greedy furthest-reach contiguous partition into exactly S stages within memory."""
    n = len(units)
    if S > n:
        return False
    i = 0
    for j in range(S):
        infl = m if sched == "gpipe" else min(m, S - j)
        last = n - (S - 1 - j)          # leave at least one unit per later stage
        P = st = 0.0
        e = i
        while e < last:
            p2, st2 = P + units[e][0], st + units[e][2]
            if (16 * p2 + infl * b * s * st2) / t > cap:
                break
            P, st, e = p2, st2, e + 1
        if e == i:
            return False
        i = e
    return i == n


def check(inst: dict) -> list[str]:
    """Validate; return summary lines. Raises AssertionError on a problem."""
    name = inst["name"]
    assert set(inst) <= TOP_KEYS, name
    assert ("gpu" in inst) != ("gpus" in inst), (name, "exactly one of [gpu] and [[gpus]]")
    types = gpu_types(inst)
    assert len({g["name"] for g in types}) == len(types), (name, "GPU type names repeat")
    for g in types:
        assert GPU_KEYS <= set(g) <= GPU_KEYS | GPU_OPTIONAL_KEYS, name
        nv = g.get("nvlink_bandwidth_gbps")
        assert nv is None or (math.isfinite(nv) and nv > 0), (name, nv)
    names = [d["name"] for d in inst["domains"]]
    assert len(set(names)) == len(names), name
    for d in inst["domains"]:
        assert set(k for k in d if not k.startswith("_")) <= DOMAIN_KEYS, (name, d)
        # SPEC v3 (g): with [[gpus]] every domain names one; with [gpu] none does
        assert ("gpu" in d) == ("gpus" in inst), (name, d["name"], "domain gpu")
        assert "gpu" not in d or d["gpu"] in {g["name"] for g in types}, (name, d)
        assert d["gpus"] >= 1 and d["gpus_per_node"] >= 1
        up = d.get("uplink_gbps")
        assert up is None or (isinstance(up, float) and math.isfinite(up) and 0 < up <= 1e9), (name, d)
    pairs = set()
    for l in inst["links"]:
        assert set(k for k in l if not k.startswith("_")) == LINK_KEYS, (name, l)
        assert l["a"] in names and l["b"] in names and l["a"] != l["b"], (name, l)
        p = frozenset((l["a"], l["b"]))
        assert p not in pairs, (name, "duplicate link", l)
        pairs.add(p)
        assert l["bandwidth_gbps"] > 0 and l["latency_ms"] > 0, (name, l)
    # connectivity
    seen, todo = {names[0]}, [names[0]]
    while todo:
        u = todo.pop()
        for p in pairs:
            if u in p:
                (v,) = p - {u}
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
    assert seen == set(names), (name, "WAN not connected")
    w, o = inst["workload"], inst["options"]
    assert set(w) == WORKLOAD_KEYS and OPTION_KEYS <= set(o) <= OPTION_KEYS | OPTION_OPTIONAL_KEYS, name
    assert set(o.get("dp_sync", DP_SYNC_ALL)) <= set(DP_SYNC_ALL), name
    for row in inst.get("quality", []):
        assert QUALITY_KEYS <= set(row) <= QUALITY_KEYS | QUALITY_OPTIONAL_KEYS, (name, row)
        assert set(row["modes"]) <= set(DP_SYNC_ALL) and 0 < row["e"] <= 10, (name, row)
    assert all(t <= d["gpus_per_node"] for t in w["tensor_parallel"] for d in inst["domains"]), name
    assert o["objective"] in ("time", "cost") and set(o["schedules"]) <= {"1f1b", "gpipe"}, name
    rt = routes(names, inst["links"])  # SPEC v3: linked pairs direct
    relayed = sorted(f"{a}-{b} via {'-'.join(p[1:-1])}" for (a, b), p in rt.items()
                     if a < b and len(p) > 2)
    assert all(frozenset((a, b)) not in pairs for (a, b), p in rt.items() if len(p) > 2), name
    n_unlinked = len(names) * (len(names) - 1) // 2 - len(pairs)
    v2 = routes(names, inst["links"], direct=False)
    detours = sorted(f"{a}-{b} (via {'-'.join(p[1:-1])})" for (a, b), p in v2.items()
                     if a < b and len(p) > 2 and frozenset((a, b)) in pairs)
    total = sum(d["gpus"] for d in inst["domains"])
    P_total = weight_params(inst)
    def size(nbytes: float) -> str:
        return f"{nbytes / 1e9:,.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:,.1f} MB"

    count = f"{P_total / 1e9:.3f}B" if P_total >= 1e9 else f"{P_total / 1e6:.3f}M"
    usable = "; ".join(f"{size(usable_bytes(inst, g))} usable per {g['name']}" for g in types) \
        if len(types) > 1 else f"{size(usable_bytes(inst))} usable per GPU"
    lines = [f"Feasibility (generator check, SPEC section 5): weight state 16 B x "
             f"{count} params = {size(16 * P_total)}; "
             f"{usable}; {total:,} GPUs in {len(names)} domains.",
             "  Smallest feasible replica count R and, for it, fewest stages S, per schedule and t:"]
    def listed(items: list[str], most: int) -> str:
        return (": " + ", ".join(items[:most]) if items else "") + (
            f", ... ({len(items) - most} more)" if len(items) > most else "")

    def count(n: int, what: str) -> str:
        return f"{n:,} {what}{'' if n == 1 else 's'}"

    routes_line = (f"Routes (SPEC v3 section 2): every linked pair takes its link ({count(len(pairs), 'link')}); "
                   + (f"the {count(n_unlinked, 'pair')} without a link "
                      + ("routes via a relay" if n_unlinked == 1 else "route via relays")
                      + listed(relayed, RELAYS_UNLINKED_LISTED) + "." if n_unlinked
                      else "every pair is linked, so every route is direct.")
                   + (f" {count(len(detours), 'link')} {'has' if len(detours) == 1 else 'have'} more latency "
                      "than a relay (measured delays break the triangle inequality), which v3 does not "
                      "take (v2 did)" + listed(detours, RELAYS_LISTED) + "." if detours else ""))
    any_ok = False
    for sched in o["schedules"]:
        for g in (types if len(types) > 1 else [None]):
            row = []
            for t in w["tensor_parallel"]:
                found = min_plan(inst, sched, t, g)
                if found:
                    any_ok = True
                    R, S, b = found
                    row.append(f"t={t}: R={R} S={S}")
            on = "" if g is None else f" on the {g['name']} domains alone"
            lines.append(f"  {sched}{on}: " + ("; ".join(row) if row else "no feasible plan (in-flight memory)"))
    assert any_ok, (name, "no feasible plan")
    return [routes_line] + lines


def weight_params(inst: dict) -> float:
    w = inst["workload"]
    return sum(u[0] for u in model_units(load_model(w["model"]), w["seq_len"], w["recompute"]))


def gpu_types(inst: dict) -> list[dict]:
    """The instance's GPU types: its ``[gpu]`` table, or its ``[[gpus]]`` entries (SPEC v3 (g))."""
    return list(inst["gpus"]) if "gpus" in inst else [inst["gpu"]]


def domain_type(inst: dict, d: dict) -> dict:
    """The GPU type of domain ``d``: the ``[[gpus]]`` entry it names, else ``[gpu]``."""
    return next(g for g in inst["gpus"] if g["name"] == d["gpu"]) if "gpu" in d else inst["gpu"]


def usable_bytes(inst: dict, g: dict | None = None) -> float:
    """Usable bytes per GPU of type ``g`` (default: the instance's one ``[gpu]``)."""
    g = inst["gpu"] if g is None else g
    return g["memory_gb"] * 1e9 * (1 - inst["options"]["memory_reserve_fraction"])


def min_plan(inst: dict, sched: str, t: int, g: dict | None = None):
    """Fewest replicas R, then fewest stages S (then smallest b) of a feasible plan with tp t:
    every stage within memory, R*S stages of t GPUs placeable (each stage in one domain),
    a whole number m = global_batch_size / (R*b) of micro-batches. None if there is none.
    ``g``: a GPU type of a mixed instance; the plan then uses only the domains of that type
    (a plan mixing types is feasible when one on a single type is, SPEC 4 and 5: this check
    asks only that some plan exists)."""
    w, o = inst["workload"], inst["options"]
    units = model_units(load_model(w["model"]), w["seq_len"], w["recompute"])
    cap = usable_bytes(inst, g)
    slots = sum(d["gpus"] // t for d in inst["domains"] if t <= d["gpus_per_node"]
                and (g is None or domain_type(inst, d) is g))
    gbs = w["global_batch_size"]
    for R in range(1, slots + 1):
        best = None
        for b in sorted(w["micro_batch_sizes"]):
            if gbs % (R * b):
                continue
            m = gbs // (R * b)
            for S in range(1, min(o["max_stages"], slots // R) + 1):
                if fits(units, S, t, b, w["seq_len"], m, sched, cap):
                    if best is None or S < best[1]:
                        best = (R, S, b)
                    break
        if best:
            return best
    return None


# --------------------------------------------------------------------------


# ---- job mixes (issue 27, SPEC v3 section 10): several jobs sharing a packaged cluster ----
# Made by planner.problem.mixes, the generator of `planner generate-mix`, so that the command in
# each file's header makes the same file; its sources (AcmeTrace Kalos sizes, ElasticFlow /
# Gavel deadline multiples and weights) are in that module and in the file's header.
# (file name, base instance, jobs, seed, models or None = mixes.DEFAULT_MODELS). The AWS mix
# leaves out the 70B models and takes 6 jobs: 128 A100-40GB hold at most about two 70B jobs
# (16 B/param of state), and a mix must fit at once (every job admitted under maxmin).
MIXES = [("mix-gcp16-20", "gcp-16", 20, 0, None),
         ("mix-edwc", "edwc-full", 20, 0, None),
         ("mix-aws", "aws-multiregion", 6, 0, ("gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "llama2-7b",
                                              "llama3-8b", "gpt3-13b", "llama2-13b"))]


def build_mix(name: str, base_text: str, base_name: str, jobs: int, seed: int, models) -> str:
    """The text of mix ``name``: ``planner generate-mix`` of the base instance's text."""
    sys.path.insert(0, str(HERE.parent))
    from planner.cli import mix_catalogue  # the package: the mixes are the command's files
    from planner.problem.files import toml_text
    from planner.problem.mixes import DEFAULT_MODELS, draw_jobs, header, mix_instance

    base = tomllib.loads(base_text)
    names = DEFAULT_MODELS if models is None else models
    draws = draw_jobs(base, jobs, seed, mix_catalogue(names))
    data = mix_instance(base, draws, name=name, description=(
        f"{jobs} jobs drawn from the AcmeTrace Kalos sizes (seed {seed}) on {base_name}'s cluster"))
    command = " ".join([f"planner generate-mix {base_name}", f"--jobs {jobs}", f"--seed {seed}"]
                       + ([f"--models {','.join(names)}"] if models is not None else [])
                       + [f"--name {name}"])
    return toml_text(data, header(data, draws, command, base_name))


def mix_readme(texts: dict[str, str]) -> list[str]:
    """README section on the job mixes."""
    out = ["## Job mixes (SPEC v3 section 10: several jobs, `[[jobs]]`)", "",
           "Made by `planner generate-mix` (planner/problem/mixes.py), the command in each header:",
           "job sizes from the AcmeTrace Kalos trace (NSDI 2024), models by GPU-hours, deadlines",
           "as ElasticFlow's multiples of the alone duration, Gavel's weights. Plan them with",
           "`planner multiplan`; `benchmarks/multijob.py` compares the planner with the baselines.", "",
           "| mix | cluster | jobs | models |", "|---|---|---|---|"]
    for name, base, jobs, _, _ in MIXES:
        models = sorted({j["model"] for j in tomllib.loads(texts[name])["jobs"]})
        out.append(f"| `{name}` | `{base}` | {jobs} | {', '.join(f'`{m}`' for m in models)} |")
    return out


def main(argv: list[str]) -> int:
    check_only = "--check" in argv
    show = "--summary" in argv
    stale = []
    built = []
    rendered = {}
    for build in BUILDERS:
        inst, hdr = build()
        built.append(inst)
        summary = check(inst)
        text = render(inst, hdr, summary)
        rendered[inst["name"]] = text
        # round trip: the file parses and carries no helper keys
        parsed = tomllib.loads(text)
        assert parsed["name"] == inst["name"]
        path = HERE / f"{inst['name']}.toml"
        if check_only:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
        if show:
            print(f"{inst['name']}: {len(inst['domains'])} domains, "
                  f"{sum(d['gpus'] for d in inst['domains'])} GPUs, {len(inst['links'])} links")
            for ln in summary:
                print("   " + ln)
    mixes = {}
    for name, base, jobs, seed, models in MIXES:
        text = build_mix(name, rendered[base], base, jobs, seed, models)
        mixes[name] = text
        path = HERE / f"{name}.toml"
        if check_only:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
    text = readme(built, mixes)
    path = HERE / "README.md"
    if check_only:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path.name)
    else:
        path.write_text(text, encoding="utf-8")
    if check_only and stale:
        print("out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
