"""Job mixes (planner/problem/mixes.py, ``planner generate-mix``, instances/mix-*.toml):
seeded reproducibility, the statistics of a large sample against the published AcmeTrace
Kalos figures within sampling error, the digitised curves against the trace's own summary
CSV, every packaged job fitting its model on its cluster, and the command line."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from planner.problem import mixes as M
from planner.problem.errors import InputError
from planner.problem.files import find_model, load_model

ROOT = Path(__file__).resolve().parents[2]
BASE = {"name": "c", "gpu": {"name": "A100", "peak_tflops": 312.0, "memory_gb": 80.0, "mfu": 0.45},
        "domains": [{"name": "a", "gpus": 64}, {"name": "b", "gpus": 192}],
        "links": [{"a": "a", "b": "b", "bandwidth_gbps": 100.0, "latency_ms": 10.0}],
        "workload": {"model": "x"}, "options": {"max_stages": 8}}
CAT = [{"name": "small", "params": 1e9, "flops_per_token": 6e9},
       {"name": "mid", "params": 7e9, "flops_per_token": 4.2e10},
       {"name": "big", "params": 7e10, "flops_per_token": 4.2e11}]


def test_same_seed_same_mix_and_rules_do_not_move_the_sizes():
    a = M.generate_mix(BASE, 12, 7, CAT)
    assert a == M.generate_mix(BASE, 12, 7, CAT)
    assert a != M.generate_mix(BASE, 12, 8, CAT)
    # the deadline and weight rules draw from their own streams: sizes and models stay
    b = M.generate_mix(BASE, 12, 7, CAT, deadlines="gavel", weights="equal")
    keep = ("name", "model", "iterations", "global_batch_size", "seq_len")
    assert [{k: j[k] for k in keep} for j in a["jobs"]] == [{k: j[k] for k in keep} for j in b["jobs"]]
    assert {j["weight"] for j in b["jobs"]} == {1.0}
    none = M.generate_mix(BASE, 12, 7, CAT, deadlines=None)
    assert all("deadline_hours" not in j for j in none["jobs"])
    # the catalogue's order does not matter (sorted by parameters)
    assert M.generate_mix(BASE, 12, 7, list(reversed(CAT))) == a


def test_a_mix_is_the_base_cluster_with_jobs_in_place_of_the_workload():
    data = M.generate_mix(BASE, 5, 1, CAT, objective="deadline", name="m")
    assert data["name"] == "m" and "workload" not in data
    for key in ("gpu", "domains", "links"):
        assert data[key] == BASE[key]
    assert data["options"] == {"max_stages": 8, "multi_objective": "deadline"}
    assert len(data["jobs"]) == 5 and len({j["name"] for j in data["jobs"]}) == 5


def test_gpus_scale_to_load_times_the_cluster_and_the_work_is_gpus_times_duration():
    G = 256
    draws = M.draw_jobs(BASE, 40, 3, CAT, load=1.5)
    asked = sum(d.trace_gpus for d in draws)
    for d in draws:
        assert d.gpus == min(G, max(1, round(d.trace_gpus * 1.5 * G / asked)))
        per_iter = M.BATCHES.get(d.model, M.DEFAULT_BATCH)[0] * M.BATCHES.get(d.model, M.DEFAULT_BATCH)[1] * \
            next(c["flops_per_token"] for c in CAT if c["name"] == d.model)
        flops = 312e12 * 0.45
        # iterations: the nearest whole number to GPUs x duration x peak x MFU / FLOPs per iteration
        exact = d.gpus * d.duration_s * flops / per_iter
        assert d.iterations == max(1, round(exact))
        assert d.alone_s == pytest.approx(d.iterations * per_iter / (d.gpus * flops))
        assert d.duration_s >= M.MIN_DURATION_S
    assert sum(d.gpus for d in draws) == pytest.approx(1.5 * G, rel=0.1)


def test_models_follow_the_gpu_hours_quantile():
    draws = M.draw_jobs(BASE, 300, 5, CAT)
    for d in draws:
        q = M.gpu_hours_cdf(d.trace_gpus * d.duration_s / 3600.0)
        assert d.gpu_hours_quantile == pytest.approx(q)
        assert d.model == CAT[min(2, int(q * 3))]["name"]
    # monotone: a job with more GPU-hours never gets a smaller model
    order = {c["name"]: i for i, c in enumerate(CAT)}
    by_h = sorted(draws, key=lambda d: d.trace_gpus * d.duration_s)
    assert all(order[a.model] <= order[b.model] for a, b in zip(by_h, by_h[1:]))
    # each model about a third of the jobs (the quantile is uniform)
    for c in CAT:
        share = sum(d.model == c["name"] for d in draws) / len(draws)
        assert abs(share - 1 / 3) < 4.5 * math.sqrt(2 / 9 / len(draws))


def test_large_sample_matches_the_published_kalos_statistics():
    """20,000 jobs: the share of jobs per GPU-count bucket is panel (a) of
    figure/cdf_job_gpunum.pdf given >= 8 GPUs, and the share of GPU time panel (b), within
    4.5 standard errors (the GPU-time ones by the delta method on the sample)."""
    N = 20000
    draws = M.draw_jobs(BASE, N, 11, CAT)
    xs = sorted(M.KALOS_JOBS_CDF)
    jobs_ge8 = 100.0 - M.KALOS_JOBS_CDF[4]
    time_ge8 = 100.0 - M.KALOS_GPU_TIME_CDF[4]
    x = [d.trace_gpus * d.duration_s for d in draws]
    total, mean_x = sum(x), sum(x) / N
    for lo, hi in zip(xs, xs[1:]):
        p = (M.KALOS_JOBS_CDF[hi] - M.KALOS_JOBS_CDF[lo]) / jobs_ge8
        got = sum(d.trace_gpus == hi for d in draws) / N
        assert abs(got - p) <= 4.5 * math.sqrt(p * (1 - p) / N), (hi, got, p)
        published = (M.KALOS_GPU_TIME_CDF[hi] - M.KALOS_GPU_TIME_CDF[lo]) / time_ge8
        inside = [xi if d.trace_gpus == hi else 0.0 for xi, d in zip(x, draws)]
        share = sum(inside) / total
        z = [(a - share * b) / mean_x for a, b in zip(inside, x)]
        se = math.sqrt(sum(v * v for v in z) / N / N)
        # the 60 s floor adds GPU time the published curve does not have: at most this share
        floor = hi * M.MIN_DURATION_S * p / (mean_x)
        assert abs(share - published) <= 4.5 * se + floor, (hi, share, published, se)
    assert {d.trace_gpus for d in draws} <= set(xs[1:]) and min(d.trace_gpus for d in draws) >= M.MIN_GPUS


def test_digitised_curves_agree_with_the_trace_summary_csv():
    """data/cluster_summary.csv, Kalos: avg_gpu_num 26.77, max_gpu 1024.  The mean of the
    digitised job CDF (jobs of at most 4 GPUs counted as 1, every bucket at its upper end)
    is within 1% of it; the buckets are monotone and end at 100%."""
    xs = sorted(M.KALOS_JOBS_CDF)
    mean = M.KALOS_JOBS_CDF[xs[0]] / 100.0 * 1 + sum(
        hi * (M.KALOS_JOBS_CDF[hi] - M.KALOS_JOBS_CDF[lo]) / 100.0 for lo, hi in zip(xs, xs[1:]))
    assert abs(mean - M.KALOS_AVG_GPU_NUM) / M.KALOS_AVG_GPU_NUM < 0.01
    assert xs[-1] == M.KALOS_MAX_GPU
    for cdf in (M.KALOS_JOBS_CDF, M.KALOS_GPU_TIME_CDF):
        vals = [cdf[x] for x in xs]
        assert vals == sorted(vals) and vals[-1] == 100.0
    # the mean durations reproduce the GPU time: sum over buckets of jobs x n x mean = total
    b = M.size_buckets()
    jobs = (100.0 - M.KALOS_JOBS_CDF[4]) / 100.0 * M.KALOS_GPU_JOBS
    gtime = sum(k.job_share * jobs * k.gpus * k.mean_duration_s for k in b)
    assert gtime == pytest.approx((100.0 - M.KALOS_GPU_TIME_CDF[4]) / 100.0 * M.KALOS_GPU_SECONDS, rel=1e-9)


def test_deadline_rules_draw_the_published_multiples():
    ef = M.draw_jobs(BASE, 4000, 2, CAT, deadlines="elasticflow")
    ks = [d.deadline_multiple for d in ef]
    assert min(ks) >= 0.5 and max(ks) < 1.5
    assert abs(sum(ks) / len(ks) - 1.0) < 4.5 * math.sqrt(1 / 12 / len(ks))
    assert all(d.deadline_hours == pytest.approx(d.deadline_multiple * d.alone_s / 3600) for d in ef)
    gv = M.draw_jobs(BASE, 4000, 2, CAT, deadlines="gavel")
    for k, p in ((1.2, 0.33), (2.0, 0.34), (10.0, 0.33)):
        got = sum(d.deadline_multiple == k for d in gv) / len(gv)
        assert abs(got - p) < 4.5 * math.sqrt(p * (1 - p) / len(gv))
    high = sum(d.weight == 5.0 for d in gv) / len(gv)
    assert {d.weight for d in gv} == {1.0, 5.0} and abs(high - 0.2) < 4.5 * math.sqrt(0.16 / len(gv))
    given = {d.name: 100.0 * (i + 1) for i, d in enumerate(M.draw_jobs(BASE, 3, 2, CAT))}
    for d in M.draw_jobs(BASE, 3, 2, CAT, alone_seconds=given):
        assert d.alone_s == given[d.name]


@pytest.mark.parametrize("kwargs, field", [({"jobs": 0}, "jobs"), ({"load": 0.0}, "load"),
                                           ({"load": math.inf}, "load"), ({"deadlines": "soon"}, "deadlines"),
                                           ({"weights": "heavy"}, "weights"), ({"models": []}, "models")])
def test_bad_arguments_name_the_field(kwargs, field):
    args = {"jobs": 3, "seed": 0, "models": CAT} | kwargs
    with pytest.raises(InputError) as e:
        M.draw_jobs(BASE, args.pop("jobs"), args.pop("seed"), args.pop("models"), **args)
    assert e.value.field == field
    with pytest.raises(InputError) as e:
        M.mix_instance(BASE, [], name="m", objective="fastest")
    assert e.value.field == "objective"


PACKAGED = ("mix-gcp16-20", "mix-edwc", "mix-aws")


def _job_alone(data: dict, job: dict):
    """The one-job instance of ``job`` on the mix's whole cluster (built here from the file,
    independently of planner.problem.jobs)."""
    from planner.problem.instance import Instance

    keys = ("model", "global_batch_size", "seq_len", "micro_batch_sizes", "tensor_parallel", "recompute")
    wl = {k: job[k] for k in keys} | {"model": load_model(find_model(job["model"]))}
    d = {k: v for k, v in data.items() if k != "jobs"}
    d["options"] = {k: v for k, v in data["options"].items() if k != "multi_objective"}
    return Instance.from_dict(d | {"workload": wl})


def _mix(name: str) -> dict:
    return tomllib.loads((ROOT / "instances" / f"{name}.toml").read_text())


def _workloads() -> list[tuple[str, str]]:
    """(mix, first job of each distinct workload) of the packaged mixes."""
    out = []
    for name in PACKAGED:
        seen = set()
        for job in _mix(name)["jobs"]:
            key = (job["model"], job["global_batch_size"], job["seq_len"])
            if key not in seen:
                seen.add(key)
                out.append((name, job["name"]))
    return out


@pytest.mark.parametrize("name, job", _workloads())
def test_every_packaged_job_fits_its_model_on_the_cluster(name, job):
    """Each distinct workload of a packaged mix has a feasible plan alone on the cluster
    (greedy, scored by the evaluator)."""
    from planner import evaluate, plan

    data = _mix(name)
    inst = _job_alone(data, next(j for j in data["jobs"] if j["name"] == job))
    p = plan(inst, "greedy", time_limit=2)
    assert evaluate(inst, p).feasible, (name, job)


@pytest.mark.parametrize("name", PACKAGED)
def test_packaged_mixes_fit_all_at_once(name):
    """The jobs' weight state (16 B per parameter, SPEC 3) fits in the cluster's usable
    memory all at once, as maxmin needs every job admitted: sum_j ceil(16 P_j / usable) <= G."""
    data = _mix(name)
    G = sum(d["gpus"] for d in data["domains"])
    usable = min(g["memory_gb"] for g in [data["gpu"]] + data.get("gpus", [])) * 1e9 * \
        (1 - data["options"].get("memory_reserve_fraction", 0.1))
    need = sum(math.ceil(16 * load_model(find_model(j["model"])).total_params() / usable) for j in data["jobs"])
    assert need <= G, (name, need, G)


def test_packaged_mixes_are_what_the_command_makes(tmp_path):
    """``planner generate-mix`` with the options in a packaged mix's header writes the
    packaged file byte for byte."""
    from click.testing import CliRunner

    from planner.cli import main

    for name in PACKAGED:
        path = ROOT / "instances" / f"{name}.toml"
        text = path.read_text()
        command = next(ln for ln in text.splitlines() if ln.startswith("# Generated by: planner generate-mix"))
        args = command.split("planner ", 1)[1].split()
        out = tmp_path / f"{name}.toml"
        res = CliRunner().invoke(main, args + ["--out", str(out)])
        assert res.exit_code == 0, res.output
        assert out.read_text() == text


def test_cli_refuses_bad_input_with_exit_2(tmp_path):
    from click.testing import CliRunner

    from planner.cli import main

    out = tmp_path / "m.toml"
    res = CliRunner().invoke(main, ["generate-mix", "aws-multiregion", "--jobs", "3", "--models",
                                    "gpt3-1.3b,nosuch", "--out", str(out)])
    assert res.exit_code == 2 and "--models" in res.output and "nosuch" in res.output
    assert not out.exists()
    res = CliRunner().invoke(main, ["generate-mix", str(tmp_path / "none.toml"), "--jobs", "3", "--out", str(out)])
    assert res.exit_code == 2 and not out.exists()
