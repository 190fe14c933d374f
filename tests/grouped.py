"""Grouped instances for the hierarchical planner's tests and measurements (test-only).

:func:`grouped_instance` builds a deterministic instance of ``groups`` regions
of ``per_group`` datacenters each, in that order (a region's domains are
consecutive, and ``region`` names the region): inside a region every pair of
domains is linked (short, fast links), and every two regions are joined by
``gateways`` links between random members (long, slower links).  Figures are
drawn from ``numpy.random.default_rng(seed)``; they are made up, not measured.

``tiny=True`` (the brute-force tests): the 4-unit tiny model (``tiny_hidden``
64; 512 makes gradient rings and transfers weigh more than compute),
``tiny_gpus`` (default 1 or 2) GPUs per domain, global batch 4.  Otherwise LLaMA-2 70B on H100 (or ``model``), 32-128
GPUs per domain, the packaged instances' workload figures.

Run as a script to write a ~100-domain instance for the measurements:
``python tests/grouped.py --groups 10 --per-group 10 --out /tmp/grouped-100.json``.
"""

from __future__ import annotations

import json

import numpy as np

from planner import Instance
from planner.problem.model import ModelSpec

H100 = {"name": "H100-SXM-80GB", "peak_tflops": 989.0, "memory_gb": 80.0, "mfu": 0.42,
        "nvlink_bandwidth_gbps": 3600.0}
TINY_GPU = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}


def tiny_model(hidden: int = 64):
    return ModelSpec(name="m", num_layers=2, hidden_size=hidden, ffn_hidden_size=4 * hidden, num_heads=4,
                     vocab_size=100 if hidden <= 64 else 1000)


def grouped_dict(groups: int = 3, per_group: int = 2, seed: int = 0, tiny: bool = False, gateways: int = 2,
                 model="llama2-70b", tiny_gpus=(1, 2), tiny_hidden: int = 64) -> dict:
    """The instance as a dict shaped like the instance file (see the module docstring)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 100, size=(groups, 2))  # region positions; inter-region latency grows with distance
    domains, links = [], []
    names = [[f"r{g:02d}-d{i:02d}" for i in range(per_group)] for g in range(groups)]
    for g in range(groups):
        for i, name in enumerate(names[g]):
            gpus = int(rng.choice(tiny_gpus)) if tiny else int(rng.choice([32, 64, 96, 128]))
            domains.append({"name": name, "gpus": gpus, "gpus_per_node": 8,
                            "intra_bandwidth_gbps": float(rng.choice([100.0, 200.0, 400.0])),
                            "price_per_gpu_hour": round(float(rng.uniform(2.0, 4.0)), 2),
                            "region": f"region-{g:02d}"})
        for i in range(per_group):
            for k in range(i + 1, per_group):
                links.append({"a": names[g][i], "b": names[g][k],
                              "bandwidth_gbps": round(float(rng.uniform(100.0, 400.0)), 1),
                              "latency_ms": round(float(rng.uniform(0.3, 2.5)), 2)})
    for g in range(groups):
        for h in range(g + 1, groups):
            dist = float(np.linalg.norm(centres[g] - centres[h]))
            pairs = set()
            for _ in range(gateways):
                pairs.add((int(rng.integers(per_group)), int(rng.integers(per_group))))
            for i, k in sorted(pairs):
                links.append({"a": names[g][i], "b": names[h][k],
                              "bandwidth_gbps": round(float(rng.uniform(10.0, 50.0)), 1),
                              "latency_ms": round(5.0 + 0.8 * dist + float(rng.uniform(0.0, 5.0)), 2)})
    if tiny:
        workload = {"model": tiny_model(tiny_hidden), "global_batch_size": 4, "seq_len": 128, "micro_batch_sizes": [1, 2],
                    "tensor_parallel": [1, 2], "recompute": False}
        gpu = TINY_GPU
    else:
        workload = {"model": model, "global_batch_size": 1024, "seq_len": 4096, "micro_batch_sizes": [1, 2],
                    "tensor_parallel": [1, 2, 4, 8], "recompute": False}
        gpu = H100
    return {"name": f"grouped-{groups}x{per_group}-s{seed}", "description": "made-up grouped instance (tests/grouped.py)",
            "gpu": gpu, "domains": domains, "links": links, "workload": workload,
            "options": {"schedules": ["1f1b", "gpipe"]}}


def grouped_instance(groups: int = 3, per_group: int = 2, seed: int = 0, tiny: bool = True, **kw) -> Instance:
    """The grouped instance (see :func:`grouped_dict`), loaded and validated."""
    from planner.problem.files import find_model, load_model

    data = grouped_dict(groups, per_group, seed, tiny, **kw)
    if isinstance(data["workload"]["model"], str):
        data["workload"]["model"] = load_model(find_model(data["workload"]["model"]))
    return Instance.from_dict(data)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=10)
    ap.add_argument("--per-group", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="llama2-70b")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    data = grouped_dict(a.groups, a.per_group, a.seed, tiny=False, model=a.model)
    with open(a.out, "w") as fh:
        json.dump(data, fh, indent=1)
    print(f"{len(data['domains'])} domains, {len(data['links'])} links written to {a.out}")
