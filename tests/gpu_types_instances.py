"""Tiny instances with two GPU types (SPEC v3 (g)), shared by the tests of the planners.

``tiny_mixed`` is a packaged test instance (``tiny-3dc`` or ``tiny-line``) with one or two
domains given a second type from ``[[gpus]]``: by default "toy-2tf", twice as fast as the
instance's toy GPU, with the memory given (the toy GPU has 80 MB, 72 MB usable).

>>> inst = tiny_mixed("tiny-3dc", fast=("gamma",))           # doctest: +SKIP
>>> inst.heterogeneous
True
"""

from __future__ import annotations

from planner import Instance


def tiny_mixed(name: str = "tiny-3dc", fast=("gamma",), speedup: float = 2.0, memory_gb: float | None = None,
               **workload) -> Instance:
    """Packaged instance ``name`` with the domains ``fast`` on a type "toy-2tf" of ``speedup``
    times the peak of the instance's ``[gpu]`` (same mfu) and ``memory_gb`` (default: the
    same memory); ``workload`` fields replace the instance's."""
    from planner.problem.io import instances_dir, load_instance

    base = load_instance(instances_dir() / f"{name}.toml")
    data = base.to_dict()
    data["workload"]["model"] = base.workload.model
    data["workload"].update(workload)
    gpu = data["gpu"]
    data["gpus"] = [dict(gpu, name="toy-2tf", peak_tflops=gpu["peak_tflops"] * speedup,
                         memory_gb=gpu["memory_gb"] if memory_gb is None else memory_gb)]
    for d in data["domains"]:
        if d["name"] in fast:
            d["gpu"] = "toy-2tf"
    return Instance.from_dict(data)


def toy_mixed(domains=(("slow", 4, "slow"), ("fast", 2, "fast"), ("slow2", 4, "slow")), speedup: float = 3.0,
              memory_gb=(80.0, 80.0), global_batch_size: int = 4, model=None, **workload) -> Instance:
    """A toy two-type instance small enough to enumerate: ``domains`` as (name, GPUs, type),
    in a line of 1 Gbit/s, 2 ms links, type "slow" (0.5 GFLOP/s achieved) and "fast"
    (``speedup`` times that), ``memory_gb`` (slow, fast); the model ``helpers.tiny_model``
    (embed, 2 blocks, head: a block's forward is ~34 ms at b = 1, s = 128 on "slow")."""
    from helpers import tiny_model

    wl = {"model": model or tiny_model(), "global_batch_size": global_batch_size, "seq_len": 128,
          "micro_batch_sizes": [1], "tensor_parallel": [1], "recompute": False}
    wl.update(workload)
    names = [d[0] for d in domains]
    return Instance.from_dict({
        "name": "toy-mixed",
        "gpus": [{"name": "slow", "peak_tflops": 1e-3, "mfu": 0.5, "memory_gb": memory_gb[0]},
                 {"name": "fast", "peak_tflops": 1e-3 * speedup, "mfu": 0.5, "memory_gb": memory_gb[1]}],
        "domains": [{"name": n, "gpus": g, "gpus_per_node": 4, "intra_bandwidth_gbps": 100.0, "gpu": k}
                    for n, g, k in domains],
        "links": [{"a": a, "b": b, "bandwidth_gbps": 1.0, "latency_ms": 2.0} for a, b in zip(names, names[1:])],
        "workload": wl, "options": {"max_stages": 4}})
