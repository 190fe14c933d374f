"""Job mixes for several jobs sharing the datacenters (SPEC v3 section 10), drawn from a
published LLM-cluster trace (``planner generate-mix``, ``instances/mix-*.toml``).

**Sizes (the trace).** Kalos, the LLM-pretraining cluster of Shanghai AI Lab's Acme datacenter
(Hu et al., "Characterization of Large Language Model Development in the Datacenter", NSDI 2024;
repository InternLM/AcmeTrace, commit 6d6ac9c).  The job trace CSVs are not in the stored copy of
the repository; what is, and what is used:

* ``figure/cdf_job_gpunum.pdf`` (the paper's GPU-count figure): panel (a), the CDF of GPU jobs by
  GPU count, and panel (b), the CDF of GPU time by GPU count, for each cluster.  The Kalos curves
  (the dashed orange paths) were read off the PDF's vector paths (exact coordinates, not pixels)
  at x = 2^k + 1.5: :data:`KALOS_JOBS_CDF` and :data:`KALOS_GPU_TIME_CDF` (percent; panel (b)
  is one straight segment from 0.138% at x = 0 to 0.161% at x = 7 there, so x = 4 reads 0.150).
* ``data/cluster_summary.csv``, row Kalos: 19,907 GPU jobs (``gpu_job_num``); GPU time
  1,667,685,146 + 3,239,202,064 + 426,292,851 GPU-seconds (completed, cancelled, failed);
  ``avg_gpu_num`` 26.77, ``med_gpu_num`` 1, ``max_gpu`` 1024.  The digitised panel (a) gives a
  mean of 26.83 GPUs (each bucket at its upper end), 0.2% above the CSV's 26.77: the check that
  the curves were read right (``tests/problem/test_mixes.py``).

A job of a mix is a *multi-node* job: at least 8 GPUs, one node (Kalos nodes hold 8 GPUs: the
README's example rows have ``node_num`` 8, ``gpu_num`` 64).  That is 11.64% of Kalos's GPU jobs
(the 1- and 2-GPU jobs below it are 88.36%) and 99.85% of its GPU time.  Its GPU count n is drawn
from panel (a) given n >= 8, each bucket (2^(k-1), 2^k] at 2^k; its duration d from an
exponential whose mean is the bucket's mean duration, GPU time / (jobs x n) from both panels
and the CSV (:func:`size_buckets`), at least :data:`MIN_DURATION_S`.  So, in expectation, a
mix has panel (a)'s GPU counts and panel (b)'s split of GPU time.

**On a cluster.** The mix keeps each job's duration and scales the GPU counts so that the
jobs ask for ``load`` x the cluster's GPUs in all: g_j = max(1, round(n_j * load * G / sum_k n_k)).
A job's work is g_j GPUs for d_j seconds at the cluster's mean peak x MFU: ``iterations`` is
that many FLOPs over the model's FLOPs per iteration (3 x forward, SPEC 3).

**Models by GPU-hours.** The catalogue (default :data:`DEFAULT_MODELS`, the packaged models from
1.3B to 70B) is sorted by parameters; a job takes the model at the quantile of its trace
GPU-hours n_j d_j / 3600 under the distribution above (:func:`gpu_hours_cdf`): the top 1/M of
GPU-hours the largest model, and so on, so each model is drawn equally often and larger jobs
train larger models.  Its batch is the model's published training batch (:data:`BATCHES`).

**Deadlines** are multiples of the job's alone duration, as the schedulers' papers set them:
``"elasticflow"``: uniform in [0.5, 1.5] (ElasticFlow, ASPLOS 2023: pkusys/ElasticFlow commit
04a0109, ``ElasticFlow/trace_generator/generate_trace.py`` line 116,
``ddl = arrival_time + int(random.uniform(args.min_ddl, args.max_ddl) * job.duration)`` with
``--min_ddl 0.5 --max_ddl 1.5``, lines 156-157); ``"gavel"``: 1.2, 2 or 10 with probability
0.33, 0.34, 0.33 (Gavel, OSDI 2020: stanford-futuredata/gavel commit c4fa400,
``scheduler/utils.py`` lines 132-141, the SLO of ``job.SLO * job.duration``, scheduler.py line 493);
``None``: no deadlines.  The alone duration is, as in both (``job.duration``: the trace's duration
on the requested GPUs), the job's work on its g_j GPUs at peak x MFU (= d_j up to rounding the
iterations), unless ``alone_seconds`` gives another (e.g. iterations x the reference time).
**Weights**: ``"gavel"``: 5 with probability 0.2, else 1 (Gavel ``scheduler/utils.py`` lines
125-129, ``priority_weight``); ``"equal"``: 1.

Deterministic for a seed (``random.Random`` seeded with strings, one stream per kind of draw,
so the deadline or weight rule does not change the sizes); pure (data in, instance dict out;
the command line and ``instances/_generate.py`` load the base instance and the models).

Example
-------
>>> base = {"name": "c", "gpu": {"name": "A100", "peak_tflops": 312.0, "memory_gb": 80.0,
...         "mfu": 0.45}, "domains": [{"name": "a", "gpus": 64}, {"name": "b", "gpus": 64}],
...         "links": [{"a": "a", "b": "b", "bandwidth_gbps": 100.0, "latency_ms": 10.0}],
...         "workload": {"model": "x"}, "options": {"max_stages": 8}}
>>> cat = [{"name": "m1", "params": 1.3e9, "flops_per_token": 8e9},
...        {"name": "m7", "params": 6.7e9, "flops_per_token": 4e10}]
>>> data = generate_mix(base, jobs=4, seed=1, models=cat)
>>> [j["name"] for j in data["jobs"]] == [f"j{i:02d}-{j['model']}" for i, j in enumerate(data["jobs"])]
True
>>> "workload" in data, data["options"]["multi_objective"]
(False, 'maxmin')
>>> generate_mix(base, jobs=4, seed=1, models=cat) == data
True
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .errors import InputError

ACME_REPO = "InternLM/AcmeTrace"
ACME_COMMIT = "6d6ac9c"
# Kalos, percent of GPU jobs with at most x GPUs (figure/cdf_job_gpunum.pdf panel (a)), and
# percent of GPU time in jobs of at most x GPUs (panel (b)), at x = 4, 8, ..., 1024.
KALOS_JOBS_CDF = {4: 88.356, 8: 93.917, 16: 94.258, 32: 94.650, 64: 95.303, 128: 95.680,
                  256: 96.896, 512: 98.940, 1024: 100.0}
KALOS_GPU_TIME_CDF = {4: 0.150, 8: 0.624, 16: 0.624, 32: 1.959, 64: 3.259, 128: 3.747,
                      256: 24.884, 512: 64.142, 1024: 100.0}
# data/cluster_summary.csv, row Kalos
KALOS_GPU_JOBS = 19907
KALOS_GPU_SECONDS = 1667685146.0 + 3239202064.0 + 426292851.0  # completed + cancelled + failed
KALOS_AVG_GPU_NUM = 26.77
KALOS_MAX_GPU = 1024
MIN_GPUS = 8  # a multi-node job: one Kalos node holds 8 GPUs
MIN_DURATION_S = 60.0  # no job shorter (the 16-GPU bucket has ~0 GPU time in panel (b))

# ElasticFlow's deadline multiples (uniform) and Gavel's (discrete), see the module docstring.
ELASTICFLOW_DDL = (0.5, 1.5)
GAVEL_SLO = ((0.33, 1.2), (0.67, 2.0), (1.0, 10.0))  # (cumulative probability, multiple)
GAVEL_HIGH_WEIGHT = (0.2, 5.0)  # (probability, weight); else 1
DEADLINE_RULES = ("elasticflow", "gavel", None)
WEIGHT_RULES = ("gavel", "equal")
OBJECTIVES = ("maxmin", "weighted", "deadline", "cost", "makespan")

# The packaged models a mix draws from (tiny and gpt3-175b left out: a toy, and one that fits
# few of the packaged clusters), smallest first once sorted by parameters.
DEFAULT_MODELS = ("gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "llama2-7b", "llama3-8b", "gpt3-13b",
                  "llama2-13b", "llama2-70b", "llama3-70b")
# Training batch (sequences, tokens per sequence) as published: GPT-3 (Brown et al. 2020,
# Table 2.1: 1M tokens at 1.3B and 2.7B, 2M at 6.7B and 13B, 3.2M at 175B, context 2048);
# LLaMA-2 (Touvron et al. 2023: 4M tokens, context 4096; shared/data/llm_configs.csv); Llama 3
# (Dubey et al. 2024: context 8192; the 16M-token batch of 405B, as instances/edwc-300dc).
BATCHES = {"gpt3-1.3b": (512, 2048), "gpt3-2.7b": (512, 2048), "gpt3-6.7b": (1024, 2048),
           "gpt3-13b": (1024, 2048), "gpt3-175b": (1536, 2048), "llama2-7b": (1024, 4096),
           "llama2-13b": (1024, 4096), "llama2-70b": (1024, 4096), "llama3-8b": (2048, 8192),
           "llama3-70b": (2048, 8192), "tiny": (16, 512)}
DEFAULT_BATCH = (1024, 4096)
MICRO_BATCH_SIZES = [1, 2, 4]
TENSOR_PARALLEL = [1, 2, 4, 8]


@dataclass(frozen=True)
class Bucket:
    """Trace jobs of ``gpus`` GPUs (the bucket (gpus/2, gpus]): share of the multi-node jobs,
    share of their GPU time, and mean duration in seconds."""

    gpus: int
    job_share: float
    gpu_time_share: float
    mean_duration_s: float


def size_buckets(min_gpus: int = MIN_GPUS) -> list[Bucket]:
    """The Kalos jobs of at least ``min_gpus`` GPUs by bucket (shares sum to 1).

    Mean duration of bucket n = (its GPU-time share x Kalos GPU-seconds) / (its job share x
    Kalos GPU jobs x n).

    >>> [b.gpus for b in size_buckets()]
    [8, 16, 32, 64, 128, 256, 512, 1024]
    >>> round(sum(b.job_share for b in size_buckets()), 12)
    1.0
    """
    xs = sorted(KALOS_JOBS_CDF)
    rows = []
    for lo, hi in zip(xs, xs[1:]):
        if hi < min_gpus:
            continue
        jobs = (KALOS_JOBS_CDF[hi] - KALOS_JOBS_CDF[lo]) / 100.0
        gtime = (KALOS_GPU_TIME_CDF[hi] - KALOS_GPU_TIME_CDF[lo]) / 100.0
        mean = gtime * KALOS_GPU_SECONDS / (jobs * KALOS_GPU_JOBS * hi) if jobs > 0 else 0.0
        rows.append((hi, jobs, gtime, mean))
    tj, tg = sum(r[1] for r in rows), sum(r[2] for r in rows)
    return [Bucket(n, j / tj, g / tg, m) for n, j, g, m in rows]


def _duration_cdf(t: float, mean: float) -> float:
    """P(max(MIN_DURATION_S, Exp(mean)) <= t)."""
    if t < MIN_DURATION_S:
        return 0.0
    return 1.0 if mean <= 0 else 1.0 - math.exp(-t / mean)


def gpu_hours_cdf(hours: float, buckets: list[Bucket] | None = None) -> float:
    """P(n d / 3600 <= hours) for a job drawn as the module docstring says (GPU-hours in the
    trace's units, before scaling to a cluster).

    >>> gpu_hours_cdf(0.0), gpu_hours_cdf(1e9)
    (0.0, 1.0)
    """
    buckets = size_buckets() if buckets is None else buckets
    return sum(b.job_share * _duration_cdf(hours * 3600.0 / b.gpus, b.mean_duration_s) for b in buckets)


def catalogue(models) -> list[dict]:
    """Catalogue entries ``{"name", "params", "flops_per_token"}`` (training FLOPs per token:
    3 x the forward FLOPs of SPEC 3's units at the model's batch ``seq_len``) of
    :class:`planner.problem.model.ModelSpec` objects, smallest first."""
    out = []
    for m in models:
        seq = BATCHES.get(m.name, DEFAULT_BATCH)[1]
        fwd = sum(u.fwd_flops_per_token for u in m.units(seq_len=seq))
        out.append({"name": m.name, "params": m.total_params(), "flops_per_token": 3.0 * fwd})
    return sorted(out, key=lambda e: (e["params"], e["name"]))


@dataclass(frozen=True)
class JobDraw:
    """One job of a mix: the trace draw (``trace_gpus`` n, ``duration_s`` d), its GPUs on the
    cluster (``gpus`` g), model, iterations, alone duration (s), deadline multiple, weight."""

    name: str
    trace_gpus: int
    duration_s: float
    gpus: int
    gpu_hours_quantile: float
    model: str
    iterations: int
    alone_s: float
    deadline_multiple: float | None
    weight: float

    @property
    def deadline_hours(self) -> float | None:
        return None if self.deadline_multiple is None else self.deadline_multiple * self.alone_s / 3600.0


def effective_flops_per_gpu(base: dict) -> float:
    """Mean peak x MFU over the cluster's GPUs, FLOP/s (each domain's type: its ``gpu`` name
    among ``[[gpus]]``, else ``[gpu]``)."""
    types = {}
    if isinstance(base.get("gpu"), dict):
        types[base["gpu"].get("name")] = base["gpu"]
    for g in base.get("gpus") or []:
        types[g.get("name")] = g
    default = base.get("gpu", {}).get("name") if isinstance(base.get("gpu"), dict) else None
    total = flops = 0.0
    for i, d in enumerate(base.get("domains") or []):
        t = types.get(d.get("gpu", default))
        if t is None:
            raise InputError(f"domain {d.get('name')!r} names no GPU type of the base instance",
                             f"domains[{i}].gpu")
        total += d["gpus"]
        flops += d["gpus"] * t["peak_tflops"] * 1e12 * t["mfu"]
    if total <= 0:
        raise InputError("the base instance has no GPUs", "domains")
    return flops / total


def draw_jobs(base: dict, jobs: int, seed: int, models: list[dict], *, load: float = 1.0,
              deadlines: str | None = "elasticflow", weights: str = "gavel",
              alone_seconds: dict[str, float] | None = None) -> list[JobDraw]:
    """The ``jobs`` jobs of a mix on ``base``'s cluster (see the module docstring);
    ``models``: :func:`catalogue` entries (any order)."""
    if not isinstance(jobs, int) or jobs < 1:
        raise InputError(f"the number of jobs must be an integer >= 1, not {jobs!r}", "jobs")
    if not (isinstance(load, (int, float)) and math.isfinite(load) and load > 0):
        raise InputError(f"load must be a finite number > 0, not {load!r}", "load")
    if deadlines not in DEADLINE_RULES:
        raise InputError(f"deadlines must be one of elasticflow, gavel, none; not {deadlines!r}", "deadlines")
    if weights not in WEIGHT_RULES:
        raise InputError(f"weights must be one of {', '.join(WEIGHT_RULES)}; not {weights!r}", "weights")
    if not models:
        raise InputError("the model catalogue is empty", "models")
    cat = sorted(models, key=lambda e: (e["params"], e["name"]))
    buckets = size_buckets()
    G = sum(d["gpus"] for d in base.get("domains") or [])
    per_gpu = effective_flops_per_gpu(base)
    sizes = random.Random(f"mix:{seed}:sizes")
    dl = random.Random(f"mix:{seed}:deadlines")
    wt = random.Random(f"mix:{seed}:weights")

    draws = []
    for _ in range(jobs):
        u, acc, pick = sizes.random(), 0.0, buckets[-1]
        for b in buckets:
            acc += b.job_share
            if u < acc:
                pick = b
                break
        d = -pick.mean_duration_s * math.log(1.0 - sizes.random()) if pick.mean_duration_s > 0 else 0.0
        draws.append((pick.gpus, max(MIN_DURATION_S, d)))
    asked = sum(n for n, _ in draws)

    out = []
    for i, (n, d) in enumerate(draws):
        g = min(G, max(1, round(n * load * G / asked)))
        q = gpu_hours_cdf(n * d / 3600.0, buckets)
        m = cat[min(len(cat) - 1, int(q * len(cat)))]
        gbs, seq = BATCHES.get(m["name"], DEFAULT_BATCH)
        per_iter = gbs * seq * m["flops_per_token"]
        iters = max(1, round(g * d * per_gpu / per_iter))
        name = f"j{i:02d}-{m['name']}"
        alone = iters * per_iter / (g * per_gpu)
        if alone_seconds is not None:
            if name not in alone_seconds:
                raise InputError(f"no alone duration for job {name!r}", f"alone_seconds.{name}")
            alone = float(alone_seconds[name])
        k = None
        if deadlines == "elasticflow":
            k = ELASTICFLOW_DDL[0] + (ELASTICFLOW_DDL[1] - ELASTICFLOW_DDL[0]) * dl.random()
        elif deadlines == "gavel":
            r = dl.random()
            k = next(mult for p, mult in GAVEL_SLO if r < p)
        w = GAVEL_HIGH_WEIGHT[1] if weights == "gavel" and wt.random() < GAVEL_HIGH_WEIGHT[0] else 1.0
        out.append(JobDraw(name, n, d, g, q, m["name"], iters, alone, k, w))
    return out


def mix_instance(base: dict, draws: list[JobDraw], *, name: str, objective: str = "maxmin",
                 description: str | None = None) -> dict:
    """The instance dict of a mix: ``base``'s cluster (GPUs, domains, links, options,
    compression, quality) with ``[[jobs]]`` from ``draws`` in place of ``[workload]``."""
    if objective not in OBJECTIVES:
        raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}; not {objective!r}", "objective")
    data = {"name": name}
    if description:
        data["description"] = description
    for key in ("gpu", "gpus", "domains", "links", "compression", "quality"):
        if key in base:
            data[key] = base[key]
    jobs = []
    for j in draws:
        gbs, seq = BATCHES.get(j.model, DEFAULT_BATCH)
        entry = {"name": j.name, "model": j.model, "global_batch_size": gbs, "seq_len": seq,
                 "micro_batch_sizes": list(MICRO_BATCH_SIZES), "tensor_parallel": list(TENSOR_PARALLEL),
                 "recompute": False, "iterations": j.iterations, "weight": j.weight}
        if j.deadline_hours is not None:
            entry["deadline_hours"] = float(f"{j.deadline_hours:.6g}")
        jobs.append(entry)
    data["jobs"] = jobs
    data["options"] = dict(base.get("options") or {}, multi_objective=objective)
    return data


def generate_mix(base: dict, jobs: int, seed: int, models: list[dict], *, load: float = 1.0,
                 deadlines: str | None = "elasticflow", weights: str = "gavel",
                 objective: str = "maxmin", name: str | None = None,
                 alone_seconds: dict[str, float] | None = None) -> dict:
    """A mix of ``jobs`` jobs on ``base``'s cluster as an instance dict (SPEC 9 ``[[jobs]]``);
    see :func:`draw_jobs` and :func:`mix_instance`."""
    draws = draw_jobs(base, jobs, seed, models, load=load, deadlines=deadlines, weights=weights,
                      alone_seconds=alone_seconds)
    name = name or f"mix-{base.get('name', 'cluster')}-{jobs}-s{seed}"
    desc = (f"{jobs} jobs drawn from the AcmeTrace Kalos sizes (seed {seed}) on "
            f"{base.get('name', 'the')} cluster")
    return mix_instance(base, draws, name=name, objective=objective, description=desc)


def header(data: dict, draws: list[JobDraw], command: str, base_name: str) -> list[str]:
    """Comment lines heading a mix file: its sources, how it was made and each job's draw."""
    G = sum(d["gpus"] for d in data["domains"])
    lines = [
        f"{data['name']}: {len(draws)} training jobs sharing {base_name}'s cluster ({G:,} GPUs; "
        "SPEC v3 section 10).",
        f"Generated by: {command}",
        "Sizes: AcmeTrace Kalos (Hu et al., NSDI 2024; InternLM/AcmeTrace commit "
        f"{ACME_COMMIT}): the GPU-count CDF of",
        "  jobs and of GPU time read off figure/cdf_job_gpunum.pdf (vector paths), jobs of >= 8 "
        "GPUs; mean duration",
        "  per GPU-count bucket from both and data/cluster_summary.csv (19,907 GPU jobs, "
        "5.33e9 GPU-seconds);",
        "  duration ~ exponential around it (>= 60 s); GPU counts scaled so the jobs ask for "
        "load x the cluster.",
        "Models: the packaged model at the quantile of the job's trace GPU-hours (larger jobs, "
        "larger models);",
        "  batch as published (GPT-3 Table 2.1, LLaMA-2 4M tokens, Llama 3 8192 x 2048);",
        "  iterations = GPUs x duration x mean peak x MFU / (3 x forward FLOPs per iteration).",
        "Deadlines: multiple x alone duration (the work on its GPUs at peak x MFU); ElasticFlow "
        "(pkusys/ElasticFlow",
        "  04a0109 trace_generator/generate_trace.py: uniform 0.5-1.5) or Gavel (stanford-futuredata/"
        "gavel c4fa400",
        "  scheduler/utils.py: 1.2 / 2 / 10); weights: Gavel's (5 with probability 0.2, else 1).",
        "See planner/problem/mixes.py.",
        "",
        "job: trace GPUs n, duration d, GPUs on this cluster g, GPU-hours quantile, model, "
        "iterations, deadline multiple, weight",
    ]
    for j in draws:
        k = "-" if j.deadline_multiple is None else f"{j.deadline_multiple:.3f}"
        lines.append(f"  {j.name}: n={j.trace_gpus} d={j.duration_s:.0f}s g={j.gpus} "
                     f"q={j.gpu_hours_quantile:.3f} {j.model} iters={j.iterations} k={k} w={j.weight:g}")
    return lines
