"""Small instances with several GPU types (SPEC v3 (g)) for the planners' tests.

* :func:`tiny_mixed` -- ``instances/tiny-3dc.toml`` (or ``tiny-line.toml``) with a
  ``[[gpus]]`` entry "toy-2tf", twice as fast as the toy GPU with less memory,
  assigned to some domains;
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


def tiny_mixed(base: str = "tiny-3dc", fast=("gamma",), gpu: dict | None = None) -> Instance:
    """``base`` with the domains ``fast`` on "toy-2tf" (2 TFLOP/s peak, 60 MB: twice the
    toy GPU's speed, 54 MB usable against 72 MB), the others on the ``[gpu]`` toy."""
    inst = load_instance(instances_dir() / f"{base}.toml")
    data = inst.to_dict()
    data["workload"]["model"] = inst.workload.model
    data["gpus"] = [dict(gpu or TOY_2TF)]
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
