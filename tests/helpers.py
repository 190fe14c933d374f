"""Small builders and a brute-force planner shared by the tests."""

from __future__ import annotations

import itertools
import re
from contextlib import contextmanager

from planner import Instance, Plan
from planner.scoring.evaluator import Evaluator, check_plan
from planner.problem.model import ModelSpec

GPU = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}


@contextmanager
def names_unchecked():
    """The loader's name check (SPEC 9, planner.problem.names) off inside the block, as when
    an instance is made by code without it: for tests of the writers' own quoting."""
    from planner.problem import names

    old = names._NAME
    names._NAME = re.compile(r".*", re.S)
    try:
        yield
    finally:
        names._NAME = old


def tiny_model(layers=2, hidden=64, vocab=100):
    return ModelSpec(name="m", num_layers=layers, hidden_size=hidden, ffn_hidden_size=4 * hidden,
                     num_heads=4, vocab_size=vocab)


def random_units(rng, n: int, params=(2e7, 5e8), out=(1e3, 1e5)) -> list[dict]:
    """``n`` random model units (a ``ModelSpec``'s ``units``) drawn from ``rng``: parameters
    uniform in ``params``, FLOPs per token in [1e9, 3e10], boundary bytes per token around
    one draw from ``out`` (x 0.5-1.5 per unit), stored bytes 0.1-1 of 16 P / 256."""
    o = rng.uniform(*out)
    units = []
    for i in range(n):
        p = rng.uniform(*params)
        units.append({"name": f"u{i}", "params": p, "fwd_flops_per_token": rng.uniform(1e9, 3e10),
                      "out_bytes_per_token": o * rng.uniform(0.5, 1.5),
                      "stored_bytes_per_token": 16 * p * rng.uniform(0.1, 1) / 256})
    return units


def make_instance(domains, links, model=None, gpu=None, **workload):
    wl = {"model": model or tiny_model(), "global_batch_size": 8, "seq_len": 128,
          "micro_batch_sizes": [1, 2], "tensor_parallel": [1, 2], "recompute": False}
    options = workload.pop("options", {})
    wl.update(workload)
    doms = [d if isinstance(d, dict) else {"name": d[0], "gpus": d[1], "gpus_per_node": 8,
                                           "intra_bandwidth_gbps": 200.0,
                                           "price_per_gpu_hour": d[2] if len(d) > 2 else 1.0}
            for d in domains]
    lks = [l if isinstance(l, dict) else {"a": l[0], "b": l[1], "bandwidth_gbps": l[2], "latency_ms": l[3]}
           for l in links]
    return Instance.from_dict({"name": "t", "gpu": gpu or GPU, "domains": doms, "links": lks,
                               "workload": wl, "options": options})


def compositions(n, parts):
    """All ways to cut range(n) into `parts` non-empty contiguous stages."""
    for cuts in itertools.combinations(range(1, n), parts - 1):
        b = (0, *cuts, n)
        yield list(zip(b, b[1:]))


def all_plans(instance, max_gpus=None):
    """Every plan of a tiny instance (feasible or not) using at most
    ``max_gpus`` GPUs (default: all the instance's GPUs)."""
    wl = instance.workload
    names = instance.domain_names
    n = instance.num_units
    gbs = wl.global_batch_size
    for t in wl.tensor_parallel:
        for b in wl.micro_batch_sizes:
            for R in range(1, gbs // b + 1):
                if gbs % (R * b) or R * t > (max_gpus or instance.total_gpus):
                    continue
                for sched in instance.options.schedules:
                    for S in range(1, min(n, instance.max_stages) + 1):
                        if R * S * t > (max_gpus or instance.total_gpus):
                            continue
                        for cuts in compositions(n, S):
                            for flat in itertools.product(names, repeat=R * S):
                                placement = [list(flat[r * S:(r + 1) * S]) for r in range(R)]
                                yield Plan.build(cuts, placement, tp=t, micro_batch_size=b,
                                                 instance=instance, schedule=sched)


def brute_force(instance, key="time", max_gpus=None):
    """(best T_est, best exact T, plan with best T_est) over feasible plans, or None."""
    best_est = best_T = None
    best_plan = None
    for p in all_plans(instance, max_gpus):
        if check_plan(instance, p):
            continue
        ev = Evaluator(instance, p)
        te = float(ev.estimate_times()[0])
        T = float(ev.iteration_times()[0])
        if key == "cost":
            te, T = float(ev.cost(te)), float(ev.cost(T))
        if best_est is None or te < best_est:
            best_est, best_plan = te, p
        best_T = T if best_T is None else min(best_T, T)
    return None if best_plan is None else (best_est, best_T, best_plan)


def over_capacity_plan_file(tmp_path, name: str = "tiny-3dc"):
    """A plan file for packaged instance ``name`` with every stage of every replica in
    its smallest domain (over its GPU capacity): ``(path, that domain's name)``."""
    import planner

    inst = planner.load_instance(name)
    p = planner.plan(inst)
    small = min(inst.domains, key=lambda d: d.gpus).name
    bad = p.model_copy(update={"placement": [[small] * p.num_stages for _ in range(p.replicas)],
                               "predicted": None, "solver": None})
    path = tmp_path / "bad.json"
    path.write_text(bad.to_json())
    return path, small


def unit_instances(max_domains: int = 40) -> list[str]:
    """The packaged instances small enough for unit tests: the national-scale ones
    (edwc-120dc, edwc-300dc, azure-zones: 100-300 domains) are measured by
    ``benchmarks/scale.py`` and loaded by tests/problem/test_large_instances.py."""
    from planner import load_instance
    from planner.problem.io import available

    return [n for n in available("instances") if len(load_instance(n).domains) <= max_domains]


def inflight_variants(instance, plan):
    """``plan`` with every per-stage in-flight limit w_j in 1..min(m, S - j) (1f1b's
    and fewer: down to one micro-batch in flight per stage) and m (gpipe's), as
    explicit schedules (:func:`planner.solvers.inflight.inflight_schedule`)."""
    from planner.solvers.inflight import inflight_schedule

    S, m = plan.num_stages, plan.num_micro_batches
    choices = [sorted(set(range(1, min(m, S - j) + 1)) | {m}) for j in range(S)]
    for w in itertools.product(*choices):
        yield plan.model_copy(update={"schedule": inflight_schedule(w, m)})


def brute_force_any_schedule(instance, max_gpus=None):
    """(best evaluator objective, its plan, plans that fit only with fewer micro-batches
    in flight than 1f1b) over every plan of a tiny instance with a named schedule or
    an explicit one from :func:`inflight_variants` (simulated time, or cost per
    iteration for a cost instance); (None, None, 0) when none is feasible."""
    best, best_plan, lean_only = None, None, 0
    for p in all_plans(instance, max_gpus):
        if p.schedule == "gpipe" or not isinstance(p.schedule, str):
            variants = [p]
        else:  # each placement once: 1f1b, then its explicit variants
            variants = [p, *inflight_variants(instance, p)] if p.num_stages > 1 else [p]
        named_ok = False
        for k, q in enumerate(variants):
            if check_plan(instance, q):
                continue
            named_ok = named_ok or k == 0
            if k and not named_ok and isinstance(p.schedule, str) and p.schedule == "1f1b":
                lean_only += 1
            ev = Evaluator(instance, q)
            value = float(ev.objective(ev.iteration_times())[0])
            if best is None or value < best:
                best, best_plan = value, q
    return best, best_plan, lean_only


def with_jobs(minst, jobs, **options):
    """A copy of the multi-job instance ``minst`` with the job tables ``jobs`` (dicts) and
    ``options`` added to its ``[options]``."""
    from planner.problem.jobs import MultiInstance

    data = minst.to_dict()
    data["jobs"] = jobs
    data["options"] = {**data.get("options", {}), **options}
    return MultiInstance.from_dict(data)


def job_table(minst, i, **changes):
    """Job ``i`` of ``minst`` as a table (dict) with ``changes``; keys set to None are dropped."""
    d = minst.jobs[i].model_dump(exclude_none=True)
    d.update(changes)
    return {k: v for k, v in d.items() if v is not None}


def benchmark_module(name: str):
    """The script ``benchmarks/NAME.py`` loaded as a module (the README's table makers)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def readme_block(mod, start: str | None = None, end: str | None = None, doc: str = "README.md") -> str:
    """The README's (or ``doc``'s) text between a table maker's markers (``mod.START``,
    ``mod.END``, or ``start``, ``end``)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / doc).read_text()
    return text[text.index(start or mod.START):text.index(end or mod.END)]
