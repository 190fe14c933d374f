"""Columns priced by the deadline (planner/solvers/multijob/deadline.py), the master's
admission under ``deadline`` against brute force over real columns, cost columns meeting
their deadlines by an independent evaluation, and EDF's order."""

from __future__ import annotations

import itertools
import random

import pytest

from helpers import job_table, with_jobs

from planner.problem.io import load_multi_instance
from planner.problem.jobs import MultiInstance
from planner.scoring.evaluator import evaluate
from planner.solvers.multijob import baselines as B
from planner.solvers.multijob.colgen import capacity
from planner.solvers.multijob.columns import ColumnPool
from planner.solvers.multijob.deadline import copy_to, domain_classes, price_deadline, smallest_meeting
from planner.solvers.multijob.master import fits, master_value, solve_master


@pytest.fixture(scope="module")
def two_jobs():
    return load_multi_instance("two-jobs")




class _C:
    def __init__(self, k, t):
        self.k, self.completion_s = k, t


@pytest.mark.parametrize("seed", range(30))
def test_smallest_meeting_is_the_least_k_by_brute_force(seed):
    """Completion a + W / k (non-increasing): the least k meeting the limit, as enumeration
    finds it; None when even n_max misses; with W / k alone, three plans suffice."""
    rng = random.Random(seed)
    n_max = rng.randint(1, 200)
    a, W = rng.choice([0.0, rng.uniform(0, 5)]), rng.uniform(1, 1000)
    limit = rng.uniform(a, a + 3 * W / max(1, n_max // 4))
    made = []

    def make(k, _l, _u):
        made.append(k)
        return _C(k, a + W / k)

    got = smallest_meeting(lambda k: (k, {}, {}), n_max, limit, make, max_evaluations=64)
    want = next((k for k in range(1, n_max + 1) if a + W / k <= limit), None)
    if want is None:
        assert got is None and made == [n_max]
    else:
        assert got.k == want
    if a == 0 and want is not None and want > 1:
        made.clear()
        assert smallest_meeting(lambda k: (k, {}, {}), n_max, limit, make).k == want
        assert len(made) <= 3


def test_smallest_meeting_within_its_budget_still_meets():
    """A budget too small to converge still returns a k that meets the limit."""
    for n_max in (7, 64, 128, 1000):
        got = smallest_meeting(lambda k: (k, {}, {}), n_max, 100.0 / 3.5, lambda k, _l, _u: _C(k, 100.0 / k + 3.0),
                               max_evaluations=2)
        assert got is not None and got.completion_s <= 100.0 / 3.5


def _deadline_mix(two_jobs, objective, hours):
    """Three jobs on tiny-3dc's cluster, each with a deadline: two copies of ``small`` (one of
    weight 3) and ``wide`` (weight 2, alpha and beta only); beta at alpha's price."""
    jobs = [job_table(two_jobs, 0, deadline_hours=hours[0]), job_table(two_jobs, 1, deadline_hours=hours[1]),
            job_table(two_jobs, 0, name="small3", weight=3.0, deadline_hours=hours[2])]
    minst = with_jobs(two_jobs, jobs, multi_objective=objective)
    data = minst.to_dict()  # beta priced as alpha: the two alike (one class, copies between them)
    data["domains"] = [dict(d, price_per_gpu_hour=1.0) if d["name"] == "beta" else d for d in data["domains"]]
    return MultiInstance.from_dict(data)


def _alone_hours(minst) -> list[float]:
    """Each job's completion (h) at its reference throughput: alone on the whole cluster."""
    from planner.solvers.multijob import references

    refs = references(minst)
    return [s.iterations * s.global_batch_size * s.seq_len / refs[s.name] / 3600.0 for s in minst.jobs]


def _columns(minst):
    from planner.solvers.multijob import references

    refs = references(minst)
    pool = ColumnPool(minst, refs)

    def make(j, g, links, ups=None, source="", fast=None):
        return pool.make(j, g, links, ups, source=source, fast=fast)

    price_deadline(minst, pool, None, minst.options.multi_objective, make)
    return pool


def test_master_admits_the_weight_maximal_set(two_jobs):
    """Real columns of a tiny deadline mix: the master's admitted weight meeting deadlines is
    the largest of every choice of at most one column per job that fits (enumerated)."""
    alone = _alone_hours(_deadline_mix(two_jobs, "deadline", [100.0, 100.0, 100.0]))
    # deadlines each job meets alone but (the small ones) only with much of the cluster
    minst = _deadline_mix(two_jobs, "deadline", [alone[0] * 1.6, alone[1] * 1.3, alone[2] * 1.6])
    pool = _columns(minst)
    cols = [c for c in pool.columns]
    met = [c for c in cols if c.deadline_met]
    assert {c.job for c in met} == {0, 1, 2}  # each job has a column meeting its deadline
    weights = [s.weight for s in minst.jobs]
    cap = capacity(minst)
    res = solve_master(cols, weights, cap, "deadline")
    options = [[k for k, c in enumerate(cols) if c.job == j] + [None] for j in range(3)]
    best = max(master_value(cols, weights, list(ch), "deadline") for ch in itertools.product(*options)
               if fits(cols, ch, cap))
    assert res.status == "optimal" and fits(cols, res.choice, cap)
    assert master_value(cols, weights, res.choice, "deadline") == pytest.approx(best)
    assert best >= max(weights)  # the heaviest job alone meets its deadline


def test_cost_columns_never_miss_their_deadline(two_jobs):
    """Every column the deadline pricing returns as meeting (one domain, its copies, a share)
    meets its deadline by a fresh evaluation of its plan on its slice; a multiplan under cost
    keeps every job within its deadline."""
    alone = _alone_hours(_deadline_mix(two_jobs, "cost", [100.0, 100.0, 100.0]))
    minst = _deadline_mix(two_jobs, "cost", [alone[0] * 2.0, alone[1] * 2.5, alone[2] * 3.0])
    from planner.solvers.multijob import references

    pool = ColumnPool(minst, references(minst))
    cap = {d.name: d.gpus for d in minst.domains}
    assert ["alpha", "beta"] in domain_classes(minst, 0)  # alike but for their size: one bisection
    checked = copied = 0
    for j, spec in enumerate(minst.jobs):
        limit = 3600.0 * spec.deadline_hours
        for group in domain_classes(minst, j):
            rep = group[0]
            got = smallest_meeting(lambda k, rep=rep: ({rep: k}, {}, {rep: k / cap[rep]}), cap[rep], limit,
                                   lambda g, lk, u, j=j: pool.make(j, g, lk, u))
            if got is None:
                continue
            for c in [got] + [copy_to(pool, got, d) for d in minst.allowed(j) if d != rep and
                              len(got.gpus) == 1]:
                if c is None or not c.deadline_met:
                    continue
                ev = evaluate(minst.slice_instance(j, c.gpus, c.link_share, c.uplink_share), c.plan)
                assert ev.feasible
                assert spec.iterations * ev.effective_time_s <= limit * (1 + 1e-12)
                assert c.completion_s == pytest.approx(spec.iterations * ev.effective_time_s, rel=1e-12)
                checked += 1
                copied += c.source == "deadline:copy"
    assert checked >= 4 and copied >= 1


def test_multiplan_under_cost_meets_every_deadline(two_jobs):
    """Under cost, the multi-plan meets every deadline (multievaluate's figures) and costs
    no more than the static split when that meets them too."""
    import planner
    from planner.scoring.multievaluate import multievaluate

    alone = _alone_hours(_deadline_mix(two_jobs, "cost", [100.0, 100.0, 100.0]))
    minst = _deadline_mix(two_jobs, "cost", [alone[0] * 3.0, alone[1] * 3.0, alone[2] * 3.0])
    mp = planner.multiplan(minst, objective="cost", time_limit=1.0, deterministic=True)
    ev = multievaluate(minst, mp)
    assert ev.feasible and all(f.deadline_met for f in ev.jobs)
    st = multievaluate(minst, B.static_split(minst, {a.name: a.reference_throughput_tokens_per_s for a in mp.jobs},
                                             objective="cost"))
    if st.feasible:
        assert ev.objective_value <= st.objective_value * (1 + 1e-9)


def test_edf_order_is_by_deadline(two_jobs):
    """EDF takes jobs by increasing deadline (none last, ties in file order), and the first
    job in that order gets its WAN-blind plan on the whole cluster."""
    jobs = [job_table(two_jobs, 0, name="late", deadline_hours=9.0), job_table(two_jobs, 0, name="none"),
            job_table(two_jobs, 0, name="early", deadline_hours=0.5), job_table(two_jobs, 0, name="tie", deadline_hours=9.0)]
    for j in jobs:
        j.pop("deadline_hours", None) if j["name"] == "none" else None
    minst = with_jobs(two_jobs, jobs, multi_objective="deadline")
    assert [minst.jobs[j].name for j in B.edf_order(minst)] == ["early", "late", "tie", "none"]
    from planner.solvers.multijob import references

    refs = references(minst)
    pool = ColumnPool(minst, refs)
    mp = B.edf(minst, refs, pool=pool)
    first = {a.name: a for a in mp.jobs}["early"]
    blind = B._blind_plan(pool, 2, {d.name: d.gpus for d in minst.domains})
    assert first.admitted
    assert {d: n for d, n in first.gpus.items() if n} == {d: n for d, n in blind[0].gpus_per_domain().items() if n}
    taken = {}
    for a in mp.jobs:  # what the earlier jobs in the order took is not given twice
        for d, n in a.gpus.items():
            taken[d] = taken.get(d, 0) + n
    assert all(taken.get(d.name, 0) <= d.gpus for d in minst.domains)


def test_cost_infeasible_names_the_job_that_cannot_meet_its_deadline(two_jobs):
    """Under cost every job must meet its deadline: a job whose deadline no column meets is
    named with its fastest column's completion (hours, above the deadline); the other is not."""
    import re

    from planner.problem.errors import InfeasibleError
    from planner.solvers.multijob.colgen import multiplan

    jobs = [job_table(two_jobs, 0, name="hopeless", deadline_hours=1e-6),
            job_table(two_jobs, 1, name="easy", deadline_hours=1000.0)]
    minst = with_jobs(two_jobs, jobs, multi_objective="cost")
    with pytest.raises(InfeasibleError) as err:
        multiplan(minst, time_limit=5, deterministic=True)
    msg = str(err.value)
    assert "job 'hopeless' meets its deadline of 1e-06 h in none of its" in msg, msg
    assert "'easy'" not in msg and "objective deadline admits" in msg
    fastest = float(re.search(r"the fastest finishes in ([0-9.e+-]+) h", msg).group(1))
    assert fastest > 1e-6
