"""Synthetic clustered instances of any size, from a seed (``planner generate``).

A national-scale network in the shape of China's East-Data-West-Computing
programme or a cloud with regions and zones, but with made-up figures:
``clusters`` clusters whose centres lie in a 2,000 km square, each holding
some of the ``domains`` datacenters within 100 km of its centre.  Inside a
cluster, every datacenter is linked to its cluster's gateways (its first two
datacenters) and to its nearest neighbours (a full mesh for clusters of at
most ``METRO_NEIGHBOURS + 1`` datacenters): metro links of
``METRO_GBPS`` Gbit/s and 0.2-2 ms one way.  Between clusters, gateway i of
one cluster is linked to gateway i of every other cluster: a backbone of
100-400 Gbit/s and about 1-21 ms one way (distance x 1.5 route factor x 5
us/km).  Routes between datacenters of different clusters therefore relay
through the gateways, as traffic does on a real backbone.

``gpus`` GPUs are spread over the datacenters (at least 8 each; lognormal
sizes), the GPU is the A100-80GB of NVIDIA's datasheet (312 TFLOP/s bf16, 80
GB, NVLink 600 GB/s both ways), MFU 0.45, 200 Gbit/s per GPU inside a
datacenter.  Nothing is sourced: the figures are only plausible, and the
header of the file says so.

Deterministic for a seed (Python's ``random.Random``, whose ``random()``
stream is stable across versions), pure (no file I/O: the command line
writes it with :func:`planner.problem.io.write_instance`, which loads it back
to validate it first).

Example
-------
>>> data = generate_instance(domains=12, gpus=1024, seed=1, clusters=3)
>>> len(data["domains"]), sum(d["gpus"] for d in data["domains"])
(12, 1024)
>>> sorted({d["region"] for d in data["domains"]})
['cluster-00', 'cluster-01', 'cluster-02']
>>> generate_instance(domains=12, gpus=1024, seed=1, clusters=3) == data
True
"""

from __future__ import annotations

import math
import random

from . import limits as L
from .errors import InputError

MIN_GPUS = 8               # GPUs per datacenter at least (one node)
GATEWAYS = 2               # backbone gateways per cluster (fewer in a smaller cluster)
METRO_NEIGHBOURS = 7       # metro links per datacenter to its nearest neighbours (plus the gateways)
METRO_GBPS = 800.0         # metro link: two 400G DCI wavelengths (assumed)
METRO_KM = 100.0           # datacenters lie within this radius of their cluster's centre
METRO_ROUTE_FACTOR = 2.0   # fibre path / straight line inside a metro area
METRO_MIN_MS = 0.2         # equipment and a short fibre: no metro link is faster
BACKBONE_KM = 2000.0       # cluster centres lie in a square of this side
BACKBONE_ROUTE_FACTOR = 1.5
BACKBONE_GBPS = (100.0, 200.0, 400.0)  # leased wavelengths per gateway pair (assumed)
FIBRE_MS_PER_KM = 0.005    # light in fibre, ~5 us/km
GPU = {"name": "A100-80GB", "peak_tflops": 312.0, "memory_gb": 80.0, "mfu": 0.45,
       "nvlink_bandwidth_gbps": 2400.0}
INTRA_GBPS = 200.0         # one InfiniBand HDR port per GPU

# GPU types for ``gpu_types`` (issue 25, SPEC v3 [[gpus]]): datasheet figures as tabulated in
# shared/data/gpu_specs.csv (dense bf16 TFLOP/s, HBM GB; NVLink one way = half the bidirectional
# total x 8, SPEC 2), MFU from shared/data/mfu_reported.csv where a run on that type is reported;
# each entry names its sources.  ``intra`` is the per-GPU bandwidth inside a datacenter (Gbit/s).
GPU_TYPES = (
    {"name": "A100-40GB", "peak_tflops": 312.0, "memory_gb": 40.0, "mfu": 0.45, "nvlink_bandwidth_gbps": 2400.0,
     "intra": 200.0, "source": "gpu_specs.csv A100-40GB SXM4 (NVIDIA A100 datasheet); MFU 0.45 as A100-80GB"},
    {"name": "A100-80GB", "peak_tflops": 312.0, "memory_gb": 80.0, "mfu": 0.45, "nvlink_bandwidth_gbps": 2400.0,
     "intra": 200.0, "source": "gpu_specs.csv A100-80GB SXM4; MFU 0.45: mfu_reported.csv A100 runs 41.5-56%"},
    {"name": "H100-SXM-80GB", "peak_tflops": 989.0, "memory_gb": 80.0, "mfu": 0.42, "nvlink_bandwidth_gbps": 3600.0,
     "intra": 400.0, "source": "gpu_specs.csv H100 SXM5 (NVIDIA H100 datasheet); MFU 0.42: mfu_reported.csv "
                               "Llama 3 405B 41-43%, llm-foundry 70B 42.6%"},
    {"name": "H100-PCIe-80GB", "peak_tflops": 756.0, "memory_gb": 80.0, "mfu": 0.42, "nvlink_bandwidth_gbps": 2400.0,
     "intra": 400.0, "source": "gpu_specs.csv H100 PCIe (600 GB/s NVLink bridge); MFU ASSUMED as H100 SXM"},
    {"name": "H200-SXM-141GB", "peak_tflops": 989.0, "memory_gb": 141.0, "mfu": 0.42, "nvlink_bandwidth_gbps": 3600.0,
     "intra": 400.0, "source": "gpu_specs.csv H200 SXM; MFU ASSUMED as H100 SXM (same compute, none reported)"},
    {"name": "V100-SXM2-32GB", "peak_tflops": 125.0, "memory_gb": 32.0, "mfu": 0.30, "nvlink_bandwidth_gbps": 1200.0,
     "intra": 100.0, "source": "gpu_specs.csv V100 SXM2 (125 TFLOP/s fp16: no bf16, fp16 ASSUMED; 32 GB part); "
                               "MFU 0.30: Megatron-LM 8.3B on V100, 39 TFLOP/s = 30% of peak (Shoeybi et al. "
                               "2019; nv-adlr.github.io/MegatronLMV1: 48% later for 1.2B on one GPU); intra "
                               "100 Gbit/s (EDR InfiniBand) ASSUMED"},
)


def default_clusters(domains: int) -> int:
    """About 30 datacenters per cluster, at least 1 and at most 100 clusters.

    >>> default_clusters(300), default_clusters(5)
    (10, 1)
    """
    return max(1, min(100, round(domains / 30)))


def default_global_batch(gpus: int) -> int:
    """Sequences per iteration: 1024 (4M tokens at 4096), doubled while a replica of 64
    GPUs (8 stages x 8) would leave GPUs unused, so the batch can feed every GPU.

    >>> default_global_batch(1_000), default_global_batch(150_000)
    (1024, 4096)
    """
    gbs = 1024
    while gbs * 64 < gpus and gbs < L.MAX_GLOBAL_BATCH // 2:
        gbs *= 2
    return gbs


def _split(total: int, parts: int, rng: random.Random, least: int, sigma: float) -> list[int]:
    """``total`` split into ``parts`` integers >= ``least`` with lognormal weights."""
    w = [rng.lognormvariate(0.0, sigma) for _ in range(parts)]
    spare = total - least * parts
    s = sum(w)
    out = [least + int(spare * x / s) for x in w]
    for i in sorted(range(parts), key=lambda i: -w[i])[: total - sum(out)]:
        out[i] += 1  # the rounding remainder to the largest weights
    return out


def _km(a: tuple[float, float], b: tuple[float, float]) -> float:
    return math.hypot(a[0] - b[0], a[1] - b[1])


def generate_instance(domains: int, gpus: int, seed: int = 0, *, clusters: int | None = None,
                      model: str = "llama2-70b", global_batch_size: int | None = None,
                      seq_len: int = 4096, max_stages: int = 32, gpu_types: int | None = None) -> dict:
    """A synthetic clustered instance as a dict shaped like the instance file
    (``workload.model`` is the model's name); see the module docstring.

    ``domains`` datacenters holding ``gpus`` GPUs in all, grouped into ``clusters``
    clusters (default :func:`default_clusters`); ``region`` of each domain is its
    cluster.  ``global_batch_size`` defaults to :func:`default_global_batch`.
    ``gpu_types`` N (SPEC v3 ``[[gpus]]``): N types drawn from :data:`GPU_TYPES`, each
    domain naming one (every type on at least one domain; a domain's internal bandwidth
    that of its type); None: the one ``[gpu]`` A100-80GB, the same file as without it.
    Raises ``InputError`` for sizes out of range.

    >>> data = generate_instance(6, 480, seed=2, clusters=2, gpu_types=3)
    >>> len(data["gpus"]), len({d["gpu"] for d in data["domains"]})
    (3, 3)
    """
    if gpu_types is not None and not 1 <= gpu_types <= min(len(GPU_TYPES), domains):
        raise InputError(f"{gpu_types} GPU types for {domains} domains; between 1 and "
                         f"{min(len(GPU_TYPES), domains)} (the table has {len(GPU_TYPES)})", "gpu_types")
    if not 1 <= domains <= L.MAX_DOMAINS:
        raise InputError(f"{domains} domains; between 1 and {L.MAX_DOMAINS}", "domains")
    if gpus < MIN_GPUS * domains or gpus > L.MAX_TOTAL_GPUS:
        raise InputError(f"{gpus} GPUs for {domains} domains; at least {MIN_GPUS} per domain "
                         f"and at most {L.MAX_TOTAL_GPUS:.0e} in all", "gpus")
    clusters = default_clusters(domains) if clusters is None else clusters
    if not 1 <= clusters <= domains:
        raise InputError(f"{clusters} clusters for {domains} domains; between 1 and {domains}", "clusters")
    rng = random.Random(seed)
    sizes = _split(domains, clusters, rng, 1, 0.4)
    centres = [(rng.uniform(0, BACKBONE_KM), rng.uniform(0, BACKBONE_KM)) for _ in range(clusters)]
    counts = _split(gpus, domains, rng, MIN_GPUS, 0.8)
    # synthetic coordinates for maps: 1 degree ~ 111 km around (35 N, 100 E)
    doms, where, members = [], [], []
    for c, (size, centre) in enumerate(zip(sizes, centres)):
        members.append([])
        for i in range(size):
            r, a = METRO_KM * math.sqrt(rng.random()), rng.uniform(0, 2 * math.pi)
            pos = (centre[0] + r * math.cos(a), centre[1] + r * math.sin(a))
            members[-1].append(len(doms))
            where.append(pos)
            doms.append({"name": f"c{c:02d}-dc{i:02d}", "gpus": counts[len(doms)], "gpus_per_node": 8,
                         "intra_bandwidth_gbps": INTRA_GBPS, "price_per_gpu_hour": 0.0,
                         "region": f"cluster-{c:02d}",
                         "lat": round(35.0 + (pos[1] - BACKBONE_KM / 2) / 111.0, 4),
                         "lon": round(100.0 + (pos[0] - BACKBONE_KM / 2) / 111.0, 4),
                         "utc_offset_hours": 8.0})
    links, pairs = [], set()

    def link(i: int, j: int, gbps: float, ms: float) -> None:
        key = (min(i, j), max(i, j))
        if i != j and key not in pairs:
            pairs.add(key)
            links.append({"a": doms[key[0]]["name"], "b": doms[key[1]]["name"],
                          "bandwidth_gbps": gbps, "latency_ms": round(ms, 3)})

    for ids in members:  # metro: gateways and nearest neighbours
        gates = ids[:GATEWAYS]
        for i in ids:
            near = sorted((j for j in ids if j != i), key=lambda j: (_km(where[i], where[j]), j))
            for j in [*gates, *near[:METRO_NEIGHBOURS]]:
                ms = max(METRO_MIN_MS, _km(where[i], where[j]) * METRO_ROUTE_FACTOR * FIBRE_MS_PER_KM)
                link(i, j, METRO_GBPS, ms)
    for a in range(clusters):  # backbone: gateway g of cluster a to gateway g of cluster b
        for b in range(a + 1, clusters):
            ms = _km(centres[a], centres[b]) * BACKBONE_ROUTE_FACTOR * FIBRE_MS_PER_KM
            for g in range(min(GATEWAYS, len(members[a]), len(members[b]))):
                link(members[a][g], members[b][g], rng.choice(BACKBONE_GBPS), max(ms, METRO_MIN_MS))
    gbs = global_batch_size or default_global_batch(gpus)
    types_part = {"gpu": dict(GPU)}
    if gpu_types is not None:  # drawn after everything else: the rest is as without types
        types = rng.sample(range(len(GPU_TYPES)), gpu_types)
        order = [types[i % gpu_types] for i in range(domains)]
        rng.shuffle(order)
        for d, t in zip(doms, order):
            d["gpu"] = GPU_TYPES[t]["name"]
            d["intra_bandwidth_gbps"] = GPU_TYPES[t]["intra"]
        types_part = {"gpus": [{k: v for k, v in GPU_TYPES[t].items() if k not in ("intra", "source")}
                               for t in sorted(types)]}
    return {
        "name": f"synthetic-{domains}dc-{gpus}gpu-s{seed}" + (f"-{gpu_types}types" if gpu_types else ""),
        "description": (f"SYNTHETIC: {domains} datacenters in {clusters} clusters, {gpus:,} GPUs, "
                        f"model {model} (planner generate, seed {seed})"),
        **types_part,
        "domains": doms,
        "links": links,
        "workload": {"model": model, "global_batch_size": gbs, "seq_len": seq_len,
                     "micro_batch_sizes": [b for b in (1, 2, 4) if gbs % b == 0],
                     "tensor_parallel": [1, 2, 4, 8], "recompute": False},
        "options": {"schedules": ["1f1b", "gpipe"], "max_stages": max_stages, "objective": "time",
                    "memory_reserve_fraction": 0.10, "wan_price_per_gb": 0.0},
    }


def header(data: dict, command: str) -> list[str]:
    """The comment lines that head a generated file: that it is synthetic, how it was
    made (``command``) and what the figures are."""
    lat = sorted(l["latency_ms"] for l in data["links"])
    regions = sorted({d["region"] for d in data["domains"]})
    if "gpus" in data:
        source = {g["name"]: g["source"] for g in GPU_TYPES}
        count = {g["name"]: sum(d["gpus"] for d in data["domains"] if d["gpu"] == g["name"]) for g in data["gpus"]}
        gpu_lines = [f"GPU types ({len(data['gpus'])}, drawn from planner/problem/synthetic.py GPU_TYPES; "
                     "which domain has which type is random):"] + [
            f"  {g['name']}: {g['peak_tflops']:g} TFLOP/s, {g['memory_gb']:g} GB, MFU {g['mfu']:g}, "
            f"{count[g['name']]:,} GPUs -- {source[g['name']]}" for g in data["gpus"]]
    else:
        gpu_lines = ["GPU: A100-80GB datasheet figures, MFU 0.45; coordinates are made up (for maps only)."]
    return [
        f"{data['name']}: SYNTHETIC instance; "
        + ("only the GPU types' figures are sourced." if "gpus" in data else "no figure is sourced."),
        f"Generated by: {command}",
        f"{len(data['domains'])} datacenters in {len(regions)} clusters ('region' = cluster), "
        f"{sum(d['gpus'] for d in data['domains']):,} GPUs, {len(data['links']):,} links"
        + (f" ({lat[0]:g}-{lat[-1]:g} ms one way)." if lat else "."),
        f"Metro: each datacenter linked to its cluster's {GATEWAYS} gateways and {METRO_NEIGHBOURS} nearest",
        f"  neighbours, {METRO_GBPS:g} Gbit/s, {METRO_MIN_MS:g}-2 ms; backbone: gateway i of each cluster to",
        f"  gateway i of every other, {'/'.join(f'{x:g}' for x in BACKBONE_GBPS)} Gbit/s, distance x "
        f"{BACKBONE_ROUTE_FACTOR} x {FIBRE_MS_PER_KM} ms/km.",
    ] + gpu_lines + [
        "See planner/problem/synthetic.py.",
    ]
