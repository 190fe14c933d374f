"""planner.multiplan at scale (issue 27): a feasible multi-plan whenever the equal share or
the static split is one, the time limit honoured with the best so far, references passed
in (the CLI's --references), plans shared by jobs of one workload, lazy trimming."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

import planner
from planner.cli import main
from planner.problem.io import load_multi_instance
from planner.problem.jobs import MultiInstance
from planner.scoring.multievaluate import better, job_time, multievaluate
from planner.solvers.multijob import baselines as B
from planner.solvers.multijob import references
from planner.solvers.multijob.columns import ColumnPool


@pytest.fixture(scope="module")
def two_jobs():
    return load_multi_instance("two-jobs")


def _copies(minst, n, **options):
    """``n`` jobs: copies of two-jobs' "small" (same workload), alternately weight 1 and 2."""
    base = minst.jobs[0].model_dump(exclude_none=True)
    jobs = [{**base, "name": f"j{i}", "weight": 1.0 + i % 2} for i in range(n)]
    data = minst.to_dict()
    data["jobs"] = jobs
    data["options"] = {**data.get("options", {}), **options}
    return MultiInstance.from_dict(data)


@pytest.fixture(scope="module")
def six(two_jobs):
    return _copies(two_jobs, 6)


@pytest.fixture(scope="module")
def six_refs(six):
    return references(six)


def test_feasible_whenever_equal_share_or_static_split_is(six, six_refs):
    """Six jobs on 36 GPUs: the equal share (6 GPUs of alpha, 1 of beta, 2 of gamma each)
    admits every job; the planner, however small its budget of plans, returns a feasible
    multi-plan admitting every job, no worse than those two baselines."""
    eq = multievaluate(six, B.equal_share(six, six_refs))
    st = multievaluate(six, B.static_split(six, six_refs))
    assert eq.feasible and all(j.admitted for j in eq.jobs)  # the premise
    mp = planner.multiplan(six, time_limit=1.0, deterministic=True, references=six_refs)
    ev = multievaluate(six, mp)
    assert ev.feasible, ev.violations
    assert all(j.admitted for j in ev.jobs)
    got = (ev.objective_value, ev.tiebreak)
    for base in (eq, st):
        if base.feasible and all(j.admitted for j in base.jobs):
            assert not better("maxmin", (base.objective_value, base.tiebreak), got)


@pytest.mark.parametrize("limit", [0.6, 2.0])
def test_time_limit_honoured_with_the_best_so_far(six, six_refs, limit):
    """The clock budget covers everything (references passed in); the answer is feasible
    and its claimed objective is multievaluate's."""
    six.__dict__.pop("_multijob_references", None)  # no reference plan to reuse: every plan is made
    t = time.perf_counter()
    mp = planner.multiplan(six, time_limit=limit, references=six_refs)
    spent = time.perf_counter() - t
    assert spent <= 1.25 * limit + 0.5, spent
    ev = multievaluate(six, mp)
    assert ev.feasible, ev.violations
    assert mp.solver.objective == ev.objective_value
    assert mp.solver.status in ("time_limit", "heuristic", "optimal")
    assert mp.solver.model_extra["references_given"] is True
    assert [a.reference_throughput_tokens_per_s for a in mp.jobs] == [six_refs[s.name] for s in six.jobs]


def test_references_computed_inside_the_limit_are_timed(six):
    t = time.perf_counter()
    mp = planner.multiplan(six, time_limit=3.0)
    spent = time.perf_counter() - t
    assert spent <= 1.25 * 3.0 + 0.5
    extra = mp.solver.model_extra
    assert extra["references_given"] is False and 0 <= extra["references_s"] <= spent


def test_jobs_of_one_workload_share_their_plans(six, six_refs):
    """Jobs 0 and 2 (one workload) on one slice: one plan made, the same time, the plan
    named after each job, and each column's figures the core's (job_time)."""
    pool = ColumnPool(six, six_refs)
    g, links = {"alpha": 8, "beta": 4}, {"alpha|beta": 0.5}
    a = pool.make(0, g, links)
    made = pool.plans_made
    b = pool.make(2, g, links)
    assert pool.plans_made == made
    assert a is not None and b is not None and a.time_s == b.time_s
    assert (a.plan.instance, b.plan.instance) == ("j0", "j2")
    for j, c in ((0, a), (2, b)):
        t, ev = job_time(six, j, c.gpus, c.link_share, c.uplink_share, c.plan)
        assert t == c.time_s and ev.effective_tokens_per_s == c.throughput
    # lazy trimming: nothing trimmed until asked, then once
    assert not any(c.trimmed for c in pool.columns)
    tr = pool.trimmed(a)
    assert tr.trimmed and pool.trimmed(a) is tr
    assert all(tr.link_share.get(k, 0.0) <= v + 1e-12 for k, v in a.link_share.items())


def test_cli_references_file(two_jobs, tmp_path):
    refs = references(two_jobs)
    good = tmp_path / "refs.json"
    good.write_text(json.dumps({"two-jobs": {"key": "x", "references": refs}}))  # a benchmark's sidecar
    out = tmp_path / "mp.json"
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--time-limit", "3", "--deterministic", "-q",
                                  "--references", str(good), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert {j["name"]: j["reference_throughput_tokens_per_s"] for j in doc["jobs"]} == refs
    plain = tmp_path / "plain.json"
    for body, field in (({**refs, "ghost": 1.0}, "references.ghost"),
                        ({"small": refs["small"]}, "references.wide"),
                        ({**refs, "wide": -3}, "references.wide"),
                        ({"other-mix": {"references": refs}}, "two-jobs")):
        plain.write_text(json.dumps(body))
        r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--time-limit", "2", "-q",
                                      "--references", str(plain)])
        assert r.exit_code == 2, r.output
        assert str(plain) in r.output and field in r.output and "Traceback" not in r.output
    plain.write_text("{not json")
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--references", str(plain), "-q"])
    assert r.exit_code == 2 and str(plain) in r.output
