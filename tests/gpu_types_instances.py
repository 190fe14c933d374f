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
