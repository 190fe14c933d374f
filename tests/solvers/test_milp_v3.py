"""Issue 24: the MILP family and the instance lower bound under SPEC v3 (spec=3).

Brute force over every plan of tiny instances that use the v3 fields (an
uplink, ``reduce_broadcast``, ``unit_overhead_ms``, a mesh whose direct link
is slower than the relay, replicas whose boundaries cross a link in opposite
directions), scored by the evaluator at spec=3: every bound stays below the
best objective, and the per-replica MILP at spec=3 finds the best T_est of
its shape."""

import random

import pytest

from helpers import all_plans, inflight_variants
from planner import Instance
from planner.problem.model import ModelSpec
from planner.scoring.bounds import lower_bound, objective_lower_bound
from planner.scoring.evaluator import Evaluator, check_plan

GPU = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}


def tiny_v3(seed: int, domains: int = 3, gpus: int = 2):
    """Three domains (a triangle whose direct a-c link is slower than a-b-c on odd seeds),
    three units with the same boundary bytes; seeds turn on an uplink (seed % 4 in (1, 3)),
    reduce_broadcast (seed % 3 == 1) and a unit overhead (seed % 2 == 0)."""
    rng = random.Random(seed)
    out = rng.uniform(2e3, 4e4)
    units = [{"name": f"u{i}", "params": rng.uniform(2e7, 4e8), "fwd_flops_per_token": rng.uniform(1e9, 2e10),
              "out_bytes_per_token": out, "stored_bytes_per_token": rng.uniform(1e3, 1e4)} for i in range(3)]
    names = ["a", "b", "c"][:domains]
    doms = [{"name": n, "gpus": gpus, "gpus_per_node": 8, "intra_bandwidth_gbps": rng.uniform(20, 200),
             "price_per_gpu_hour": 1.0} for n in names]
    if seed % 4 in (1, 3):
        doms[rng.randrange(domains)]["uplink_gbps"] = rng.choice([0.05, 0.5, 5.0])
    links = [{"a": "a", "b": "b", "bandwidth_gbps": rng.choice([0.1, 1.0, 5.0]), "latency_ms": rng.uniform(1, 10)}]
    if domains == 3:
        links.append({"a": "b", "b": "c", "bandwidth_gbps": rng.choice([0.1, 1.0, 5.0]),
                      "latency_ms": rng.uniform(1, 10)})
        slow = seed % 2 == 1  # the direct link slower than the relay: SPEC v3 still takes it
        links.append({"a": "a", "b": "c", "bandwidth_gbps": rng.choice([0.1, 1.0, 5.0]),
                      "latency_ms": (links[0]["latency_ms"] + links[1]["latency_ms"]) * (3 if slow else 0.5)})
    gpu = dict(GPU, unit_overhead_ms=rng.uniform(0.5, 5.0) if seed % 2 == 0 else 0.0)
    wl = {"model": ModelSpec(name="rand", units=units), "global_batch_size": 4, "seq_len": 256,
          "micro_batch_sizes": [2], "tensor_parallel": [1], "recompute": False,
          "gradient_sync": "reduce_broadcast" if seed % 3 == 1 else "ring"}
    return Instance.from_dict({"name": f"v3-{seed}", "gpu": gpu, "domains": doms, "links": links,
                               "workload": wl, "options": {"objective": "time"}})


def evaluated(instance, explicit: bool = True):
    """(plan, evaluator at spec=3) for every feasible plan of a tiny instance (1f1b
    plans also with every explicit in-flight variant when ``explicit``)."""
    for p in all_plans(instance):
        variants = [p]
        if explicit and p.schedule == "1f1b" and p.num_stages > 1:
            variants += list(inflight_variants(instance, p))
        for q in variants:
            ev = Evaluator(instance, q, spec=3)
            if not check_plan(instance, q, ev.fig):
                yield q, ev


def brute_force_v3(instance):
    """(best simulated T over every plan, best T_est over 1f1b/gpipe plans, by shape)."""
    best_T, best_est = None, {}
    for q, ev in evaluated(instance):
        T = float(ev.iteration_times()[0])
        best_T = T if best_T is None else min(best_T, T)
        if isinstance(q.schedule, str):
            key = (q.tp, q.micro_batch_size, q.schedule, q.replicas)
            te = float(ev.estimate_times()[0])
            best_est[key] = min(best_est.get(key, te), te)
    return best_T, best_est


_CACHE: dict = {}


def _brute(seed):
    if seed not in _CACHE:
        _CACHE[seed] = brute_force_v3(tiny_v3(seed))
    return _CACHE[seed]


@pytest.mark.parametrize("seed", range(8))
def test_lower_bound_v3_holds_over_every_plan(seed):
    inst = tiny_v3(seed)
    best_T, _ = _brute(seed)
    lb = lower_bound(inst, spec=3)
    assert lb.value <= best_T * (1 + 1e-9), (lb, best_T)
    assert objective_lower_bound(inst, spec=3) <= best_T * (1 + 1e-9)


def test_wan_volume_v3_counts_both_directions():
    # two 1-GPU domains that each hold one unit only: every plan crosses the link
    rng_units = [{"name": f"u{i}", "params": 1e8, "fwd_flops_per_token": 1e6, "out_bytes_per_token": 1e5,
                  "stored_bytes_per_token": 1.0} for i in range(2)]
    gpu = dict(GPU, memory_gb=1e8 * 16 * 1.5 / 0.9e9)
    inst = Instance.from_dict({
        "name": "duplex", "gpu": gpu, "links": [{"a": "a", "b": "b", "bandwidth_gbps": 0.1, "latency_ms": 1.0}],
        "domains": [{"name": n, "gpus": 1, "intra_bandwidth_gbps": 100.0} for n in "ab"],
        "workload": {"model": ModelSpec(name="two", units=rng_units), "global_batch_size": 2, "seq_len": 64,
                     "micro_batch_sizes": [1], "tensor_parallel": [1]}})
    v2, v3 = lower_bound(inst), lower_bound(inst, spec=3)
    assert v2.wan_forced and v3.parts["wan_volume"] == pytest.approx(v2.parts["wan_volume"] / 2)
    best_T, _ = brute_force_v3(inst)
    assert v3.value <= best_T * (1 + 1e-9)
