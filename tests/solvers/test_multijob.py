"""planner.multiplan (planner/solvers/multijob/): one job is planner.plan's plan, every
multi-plan is feasible and scored by multievaluate, quotas and allowed domains hold, the
planner is never worse than a baseline, deterministic budgets repeat, time limits hold."""

from __future__ import annotations

import json
import math
import time

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import job_table, with_jobs

import planner
from planner.cli import main
from planner.problem.io import load_multi_instance
from planner.scoring.evaluator import evaluate
from planner.scoring.multievaluate import better, multi_bound, multievaluate
from planner.solvers.multijob import baselines as B
from planner.solvers.multijob import references
from planner.solvers.multijob.columns import TRIM_TOLERANCE, ColumnPool
from planner.solvers.multijob.master import OBJECTIVES


@pytest.fixture(scope="module")
def two_jobs():
    return load_multi_instance("two-jobs")




def _decision(p):
    """What a plan decides (no solver figures, no timings)."""
    return p.model_dump(mode="json", include={"replicas", "tp", "micro_batch_size", "num_micro_batches", "stages",
                                              "placement", "schedule", "dp_sync"})


def _fast(minst, **kw):
    """A deterministic budget of a few plans: the same answer at any load."""
    return planner.multiplan(minst, time_limit=kw.pop("time_limit", 6.0), deterministic=True, **kw)


def test_one_job_is_planner_plan_with_everything(two_jobs):
    one = with_jobs(two_jobs, [job_table(two_jobs, 0)])
    mp = planner.multiplan(one, time_limit=5.0, seed=3)
    want = planner.plan(one.job_instance(0), solver="greedy", time_limit=5.0, seed=3)
    (a,) = mp.jobs
    assert _decision(a.plan) == _decision(want)
    assert a.gpus == {d.name: d.gpus for d in one.domains}
    assert all(v == 1.0 for v in a.link_share.values()) and len(a.link_share) == len(one.links)
    assert all(v == 1.0 for v in a.uplink_share.values())
    ev = evaluate(one.job_instance(0), want)
    (f,) = multievaluate(one, mp).jobs
    for got, exp in ((f.iteration_time_s, ev.iteration_time_s), (f.effective_time_s, ev.effective_time_s),
                     (f.throughput_tokens_per_s, ev.effective_tokens_per_s)):
        assert got == pytest.approx(exp, rel=1e-9, abs=0)
    assert f.rho == 1.0


def test_two_jobs_feasible_scored_and_never_worse_than_a_baseline(two_jobs):
    refs = references(two_jobs)
    mp = _fast(two_jobs, references=refs, time_limit=12.0)
    ev = multievaluate(two_jobs, mp)
    assert ev.feasible, ev.violations
    info = mp.solver
    # the claimed objective is multievaluate's; the master counted the same value
    assert info.objective == ev.objective_value
    assert info.model_extra["master_value"] == pytest.approx(ev.objective_value, rel=1e-6)
    assert info.bound == multi_bound(two_jobs, "maxmin", refs)
    assert ev.objective_value <= info.bound + 1e-12  # maxmin: the bound is an upper bound
    assert info.model_extra["master_lp"] >= info.model_extra["master_value"] - 1e-9
    got = (ev.objective_value, ev.tiebreak)
    for name, fn in B.BASELINES.items():
        if name == "edf":
            continue  # planned for the deadline objective
        bev = multievaluate(two_jobs, fn(two_jobs, refs))
        if bev.feasible and all(j.admitted for j in bev.jobs):
            assert not better("maxmin", (bev.objective_value, bev.tiebreak), got), name


@pytest.mark.parametrize("objective", [o for o in OBJECTIVES if o != "maxmin"])
def test_every_objective_feasible_and_no_worse_than_its_baselines(two_jobs, objective):
    refs = references(two_jobs)
    mp = _fast(two_jobs, objective=objective, references=refs, time_limit=4.0)
    ev = multievaluate(two_jobs, mp)
    assert ev.feasible, ev.violations
    assert mp.objective == objective and mp.solver.objective == ev.objective_value
    if objective != "deadline":
        assert all(j.admitted for j in ev.jobs)
    bound = mp.solver.bound
    if bound is not None:
        worse_than_bound = better(objective, (bound, math.inf), (ev.objective_value, 0.0))
        assert worse_than_bound or bound == pytest.approx(ev.objective_value)
    for name, fn in B.BASELINES.items():
        bev = multievaluate(two_jobs, fn(two_jobs, refs, objective=objective))
        if bev.feasible and (objective == "deadline" or all(j.admitted for j in bev.jobs)):
            assert not better(objective, (bev.objective_value, bev.tiebreak),
                              (ev.objective_value, ev.tiebreak)), name


QUOTAS = [
    ({"max_gpus": 5}, {"max_gpus": 7, "allowed_domains": ["beta"]}),
    ({"allowed_domains": ["gamma", "beta"], "max_gpus": 9}, {"allowed_domains": ["alpha"]}),
    ({"max_gpus": 3}, {"max_gpus": 2}),  # the least each job runs on (3 and 2 GPUs)
]


@pytest.mark.parametrize("first,second", QUOTAS)
def test_quotas_and_allowed_domains_never_violated(two_jobs, first, second):
    minst = with_jobs(two_jobs, [job_table(two_jobs, 0, **first), job_table(two_jobs, 1, **second)])
    refs = references(minst)
    plans = [_fast(minst, references=refs, time_limit=5.0)]
    plans += [fn(minst, refs) for fn in B.BASELINES.values()]
    for mp in plans:
        for spec, a in zip(minst.jobs, mp.jobs):
            allowed = set(minst.allowed(spec.name))
            assert set(d for d, n in a.gpus.items() if n) <= allowed, (mp.solver.name, a.name)
            if spec.max_gpus is not None:
                assert sum(a.gpus.values()) <= spec.max_gpus, (mp.solver.name, a.name)
            if a.plan is not None:
                assert set(a.plan.gpus_per_domain()) <= allowed
        ev = multievaluate(minst, mp)
        assert not any("allowed" in v or "max_gpus" in v for v in ev.violations)
    assert multievaluate(minst, plans[0]).feasible


def test_a_quota_no_plan_fits_is_infeasible(two_jobs):
    minst = with_jobs(two_jobs, [job_table(two_jobs, 0, max_gpus=2), job_table(two_jobs, 1)])  # "small" needs 3
    with pytest.raises(planner.InfeasibleError):
        _fast(minst, time_limit=3.0)


def test_deterministic_budget_repeats(two_jobs):
    a = _fast(two_jobs, seed=1, time_limit=2.0).to_dict()
    b = _fast(two_jobs, seed=1, time_limit=2.0).to_dict()
    for d in (a, b):
        d["solver"].pop("time_s")
        for j in d["jobs"]:
            j["plan"]["solver"].pop("time_s", None)
            j["plan"]["solver"].pop("plan_sha256", None)  # the hash covers time_s
    assert a == b


def test_time_limit_honoured(two_jobs):
    t = time.perf_counter()
    mp = planner.multiplan(two_jobs, time_limit=2.0)
    spent = time.perf_counter() - t
    assert spent < 2.0 * 1.5 + 1.0
    assert multievaluate(two_jobs, mp).feasible
    assert mp.solver.status in ("time_limit", "heuristic", "optimal")


def test_trimmed_columns_within_one_percent(two_jobs):
    refs = references(two_jobs)
    pool = ColumnPool(two_jobs, refs)
    untrimmed = pool.make(0, {"alpha": 8, "beta": 4, "gamma": 6}, {"alpha|beta": 0.5, "beta|gamma": 0.5})
    col = pool.make(0, {"alpha": 8, "beta": 4, "gamma": 6}, {"alpha|beta": 0.5, "beta|gamma": 0.5},
                    trim_it=True)
    assert pool.trimmed(untrimmed) is col  # trimmed once, lazily
    assert col is not None and untrimmed is not None
    assert col.throughput >= untrimmed.throughput / (1 + TRIM_TOLERANCE) - 1e-9
    assert all(col.link_share.get(k, 0) <= v + 1e-12 for k, v in untrimmed.link_share.items())
    assert set(col.link_share) <= set(untrimmed.link_share)
    assert col.gpus == {d: n for d, n in col.plan.gpus_per_domain().items() if n}
    # the column's figures are the core's for its allocation
    from planner.scoring.multievaluate import job_time

    t, ev = job_time(two_jobs, 0, col.gpus, col.link_share, col.uplink_share, col.plan)
    assert t == col.time_s and ev.effective_tokens_per_s == col.throughput


def test_cli_multiplan_json_and_out(two_jobs, tmp_path):
    out = tmp_path / "mp.json"
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--time-limit", "4", "--deterministic", "--json",
                                  "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["feasible"] and doc["objective"] == "maxmin" and doc["solver"]["name"] == "multiplan"
    again = json.loads(CliRunner().invoke(main, ["multievaluate", "two-jobs", str(out), "--json"]).output)
    assert again["objective_value"] == doc["objective_value"]


def test_cli_refuses_bad_input(tmp_path):
    r = CliRunner().invoke(main, ["multiplan", "tiny-3dc", "--time-limit", "2"])
    assert r.exit_code == 2, r.output  # a one-job instance
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--objective", "fastest"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--solver", "nope", "--time-limit", "1"])
    assert r.exit_code == 2


def test_cpsat_twin_same_optimum_over_real_columns(two_jobs):
    """The two masters over one pool of real columns (both jobs, every objective): the same
    first value (to CP-SAT's 1e-6 scaling) and capacities respected."""
    from planner.solvers.multijob.colgen import capacity
    from planner.solvers.multijob.master import fits, master_value, solve_master, solve_master_cpsat

    refs = references(two_jobs)
    pool = ColumnPool(two_jobs, refs)
    for fn in B.BASELINES.values():
        fn(two_jobs, refs, pool=pool)
    assert len(pool.columns) >= 6
    weights = [s.weight for s in two_jobs.jobs]
    cap = capacity(two_jobs)
    for objective in OBJECTIVES:
        a = solve_master(pool.columns, weights, cap, objective)
        b = solve_master_cpsat(pool.columns, weights, cap, objective)
        assert (a.value is None) == (b.value is None), objective
        if a.value is None:
            continue
        assert fits(pool.columns, a.choice, cap) and fits(pool.columns, b.choice, cap)
        va = master_value(pool.columns, weights, a.choice, objective)
        vb = master_value(pool.columns, weights, b.choice, objective)
        assert vb == pytest.approx(va, rel=1e-5), objective


@given(gpus=st.dictionaries(st.sampled_from(["alpha", "beta", "gamma"]), st.integers(0, 40), max_size=3),
       allowed=st.one_of(st.none(), st.lists(st.sampled_from(["alpha", "beta", "gamma"]), min_size=1,
                                             max_size=3, unique=True)),
       quota=st.one_of(st.none(), st.integers(1, 40)))
@settings(max_examples=60, deadline=None)
def test_clip_keeps_allowed_domains_and_quota(two_jobs, gpus, allowed, quota):
    """Every column's GPUs go through clip: within the allowed domains and the domain's
    GPUs, at most max_gpus, and no GPU taken away that the rules allow."""
    from planner.solvers.multijob.columns import clip

    minst = with_jobs(two_jobs, [job_table(two_jobs, 0, allowed_domains=allowed, max_gpus=quota), job_table(two_jobs, 1)])
    out = clip(minst, 0, gpus)
    ok = set(minst.allowed(0))
    cap = {d.name: d.gpus for d in minst.domains}
    assert set(out) <= ok and all(0 < n <= cap[d] for d, n in out.items())
    assert all(n <= gpus[d] for d, n in out.items())
    room = sum(min(gpus.get(d, 0), cap[d]) for d in ok)
    assert sum(out.values()) == (room if quota is None else min(quota, room))


def test_a_slice_cut_in_two_keeps_its_larger_part(two_jobs):
    """GPUs in alpha and gamma with no link share: they cannot work together; the column
    is planned on the part with more GPUs (alpha), not left to crash the planner."""
    from planner.solvers.multijob.columns import connected_gpus

    inst = two_jobs.slice_instance(0, {"alpha": 8, "gamma": 6}, {})
    assert connected_gpus(inst, {"alpha": 8, "gamma": 6}) == {"alpha": 8}
    both = two_jobs.slice_instance(0, {"alpha": 8, "gamma": 6}, {"alpha|beta": 0.5, "beta|gamma": 0.5})
    assert connected_gpus(both, {"alpha": 8, "gamma": 6}) == {"alpha": 8, "gamma": 6}
    col = ColumnPool(two_jobs, references(two_jobs)).make(0, {"alpha": 8, "gamma": 6}, {})
    assert col is not None and set(col.gpus) == {"alpha"}


def test_cli_exit_3_when_no_allocation_fits(two_jobs, tmp_path):
    """A quota below the least GPUs a job runs on: no multi-plan (SPEC 9: exit 3, one line)."""
    minst = with_jobs(two_jobs, [job_table(two_jobs, 0, max_gpus=2), job_table(two_jobs, 1)])
    path = tmp_path / "tight.json"
    path.write_text(json.dumps(minst.to_dict()))
    r = CliRunner().invoke(main, ["multiplan", str(path), "--time-limit", "3", "--deterministic", "-q"])
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output


def test_wan_blind_maxmin_admits_what_fits_when_the_least_shares_do_not(two_jobs):
    """With one share step (every job's least share is the whole cluster) three jobs cannot
    all hold one: the policy admits the first by least level, weight and file order, leaves
    the others out, and never hands out more than the cluster."""
    jobs = [job_table(two_jobs, 0, name=n) for n in ("a", "b", "c")]
    minst = with_jobs(two_jobs, jobs, multi_objective="deadline")
    refs = references(minst, time_limit=5.0)
    mp = B.wan_blind_maxmin(minst, refs, steps=1)
    admitted = [a.name for a in mp.jobs if a.admitted]
    assert admitted == ["a"]
    ev = multievaluate(minst, mp)
    assert ev.feasible, ev.violations
