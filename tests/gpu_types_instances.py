"""Small instances with several GPU types (SPEC v3 (g)) for the planners' tests.

* :func:`tiny_mixed` -- ``instances/tiny-3dc.toml`` (or ``tiny-line.toml``) with a
  ``[[gpus]]`` entry "toy-2tf", twice as fast as the toy GPU with less memory,
  assigned to some domains;
* :func:`toy_mixed` -- a toy two-type line small enough to enumerate (the exact
  planners' brute-force tests);
* :func:`two_speeds` -- two domains of one GPU each, types of speed ratio
  ``ratio``: the closed form of the layer split;
* :func:`type_blind` -- the same instance with every domain given the fastest
  type (the plan a type-blind planner makes, to be re-simulated on the real types).
* :func:`hand_plan` -- two stages on two domains of different types of a packaged
  mixed instance (edwc-mixed, aws-a100-h100, tiny-mixed: :data:`MIXED`);
  :func:`plan_any` plans with ``planner.plan`` when the solver plans with types, else
  builds that plan.
"""

from __future__ import annotations

from planner import Instance
from planner.problem.io import instances_dir, load_instance
from planner.problem.model import ModelSpec

TOY_2TF = {"name": "toy-2tf", "peak_tflops": 2.0, "memory_gb": 0.06, "mfu": 0.5}


def tiny_mixed(name: str = "tiny-3dc", fast=("gamma",), speedup: float = 2.0, memory_gb: float | None = None,
               gpu: dict | None = None, **workload) -> Instance:
    """Packaged instance ``name`` with the domains ``fast`` on a second type: ``gpu`` when
    given (e.g. :data:`TOY_2TF`: 2 TFLOP/s peak, 60 MB, 54 MB usable against the toy's
    72 MB), else "toy-2tf" with ``speedup`` times the peak of the instance's ``[gpu]``
    (its other figures, mfu included) and ``memory_gb`` (default: the same memory);
    ``workload`` fields replace the instance's."""
    base = load_instance(instances_dir() / f"{name}.toml")
    data = base.to_dict()
    data["workload"]["model"] = base.workload.model
    data["workload"].update(workload)
    toy = data["gpu"]
    data["gpus"] = [dict(gpu) if gpu is not None else
                    dict(toy, name="toy-2tf", peak_tflops=toy["peak_tflops"] * speedup,
                         memory_gb=toy["memory_gb"] if memory_gb is None else memory_gb)]
    for d in data["domains"]:
        if d["name"] in fast:
            d["gpu"] = data["gpus"][0]["name"]
    return Instance.from_dict(data)


def two_speeds(units: int = 12, ratio: float = 2.0, m: int = 8, memory=(0.16, 0.32), max_stages: int = 2,
               schedules=("1f1b", "gpipe")) -> Instance:
    """Domains ``fast`` (type "fast": ``ratio`` x 1e12 FLOP/s achieved, ``memory[0]`` GB) and
    ``slow`` (1e12 FLOP/s, ``memory[1]`` GB), one GPU each, joined by a 100 Gbit/s, 1 ms
    link; ``units`` equal units of 1e12 FLOPs per token and 1e6 parameters (16 MB of
    state each), nothing stored or sent; b = s = t = 1, ``m`` micro-batches.  A unit takes
    c = 3 s on ``slow`` and 3 / ratio s on ``fast``.  With the default memory the whole
    model (192 MB) fits neither fast GPU (144 MB usable: 9 units) but does fit slow's."""
    model = ModelSpec(name="flat", units=[
        {"name": f"u{i}", "params": 1e6, "fwd_flops_per_token": 1e12, "out_bytes_per_token": 0.0,
         "stored_bytes_per_token": 0.0} for i in range(units)])
    return Instance.from_dict({
        "name": "two-speeds",
        "gpus": [{"name": "fast", "peak_tflops": 2.0 * ratio, "mfu": 0.5, "memory_gb": memory[0]},
                 {"name": "slow", "peak_tflops": 2.0, "mfu": 0.5, "memory_gb": memory[1]}],
        "domains": [{"name": "fast", "gpus": 1, "gpus_per_node": 1, "intra_bandwidth_gbps": 100.0, "gpu": "fast"},
                    {"name": "slow", "gpus": 1, "gpus_per_node": 1, "intra_bandwidth_gbps": 100.0, "gpu": "slow"}],
        "links": [{"a": "fast", "b": "slow", "bandwidth_gbps": 100.0, "latency_ms": 1.0}],
        "workload": {"model": model, "global_batch_size": m, "seq_len": 1, "micro_batch_sizes": [1],
                     "tensor_parallel": [1]},
        "options": {"max_stages": max_stages, "schedules": list(schedules)}})


def type_blind(instance: Instance) -> Instance:
    """``instance`` with every domain given the fastest type's figures (peak * mfu,
    NVLink, unit overhead) and its own memory: what a planner that ignores the
    types sees."""
    types = instance.gpu_types
    fast = max((types[u] for u in instance.types_used), key=lambda g: g.flops_per_s)
    data = instance.to_dict()
    data["workload"]["model"] = instance.workload.model
    speed = {k: v for k, v in fast.model_dump().items() if k not in ("name", "memory_gb")}
    data["gpus"] = [dict(g.model_dump(exclude_none=True), **{k: v for k, v in speed.items() if v is not None},
                         name=g.name) for g in types]
    data.pop("gpu", None)
    for d, u in zip(data["domains"], instance.domain_type):
        d["gpu"] = types[u].name
    return Instance.from_dict(data)


MIXED = ("edwc-mixed", "aws-a100-h100", "tiny-mixed")


def hand_plan(inst):
    """Two stages on two domains of different GPU types (see the module docstring)."""
    from planner import Plan

    first: dict[str, str] = {}
    for d in inst.domains:
        first.setdefault(inst.domain_gpu(d.name).name, d.name)
    a, b = list(first.values())[:2]
    n = inst.num_units
    return Plan.build([(0, n // 2), (n // 2, n)], [[a, b]], tp=max(inst.workload.tensor_parallel),
                      micro_batch_size=1, instance=inst)


def plan_any(inst, **kw):
    """greedy's plan (or ``planner.plan``'s with ``kw``), or :func:`hand_plan` for an
    instance with several GPU types while greedy refuses them."""
    from planner import plan
    from planner.solvers.registry import GPU_TYPE_SOLVERS

    if inst.heterogeneous and kw.get("solver", "greedy") not in GPU_TYPE_SOLVERS:
        return hand_plan(inst)
    return plan(inst, **kw)


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


def one_type_named(instance: Instance, name: str = "only") -> Instance:
    """``instance`` (one ``[gpu]``) with that type named through ``[[gpus]]`` by every
    domain: SPEC 2, "with one type everything is as without [[gpus]]"."""
    data = instance.to_dict()
    data["workload"]["model"] = instance.workload.model
    data["gpus"] = [dict(data.pop("gpu"), name=name)]
    for d in data["domains"]:
        d["gpu"] = name
    return Instance.from_dict(data)

