"""Grouped plans (issue 29): under DiLoCo and streaming, groups of datacenters each
host whole pipelines cut across the group's datacenters, every replica of a group
with stage j in the same datacenter, so each stage's per-step sync stays inside one
datacenter.

Properties: the chains split the datacenters; the stage split is valid whenever one
exists (brute force); every grouped plan is feasible and keeps each group's stages
in one datacenter per stage index; on diloco-70b a grouped plan beats every
whole-replica plan, and the planners return it; the search is deterministic."""

from __future__ import annotations

import itertools

import pytest

import planner
from planner.problem.dpsync import sync_groups
from planner.problem.io import load_instance
from planner.scoring.evaluator import check_plan, simulated_score
from planner.solvers.syncchoice import _group_split, group_chains, group_plans, local_plans, with_best_sync
from tests.helpers import make_instance


@pytest.fixture(scope="module")
def d70():
    return load_instance("diloco-70b")


@pytest.fixture(scope="module")
def d70_plans(d70):
    return group_plans(d70)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_chains_split_the_datacenters(d70, k):
    chains = group_chains(d70, k, 8)
    assert len(chains) == 4 // k
    names = [d for ch in chains for d in ch]
    assert all(len(ch) == k for ch in chains)
    assert len(set(names)) == len(names) and set(names) <= set(d70.domain_names)
    without = group_chains(d70, 2, 8, forbid=["us-east-1"])
    assert len(without) == 1 and "us-east-1" not in without[0]  # three sites left: one chain of two


def test_stage_split_is_valid_whenever_one_exists():
    for caps in itertools.product(range(0, 5), repeat=3):
        for S in range(1, 10):
            exists = any(sum(s) == S for s in itertools.product(*[range(1, c + 1) for c in caps]))
            got = _group_split(S, list(caps))
            assert (got is not None) == exists, (caps, S)
            if got is not None:
                assert sum(got) == S and all(1 <= g <= c for g, c in zip(got, caps))


def test_grouped_plans_keep_each_groups_stages_in_one_datacenter(d70, d70_plans):
    assert d70_plans
    for p in d70_plans:
        assert not check_plan(d70, p)
        groups: dict[str, list] = {}
        for row in p.placement:
            groups.setdefault(row[0], []).append(row)
        assert sync_groups(p) == len(groups) >= 2
        used = [set(rows[0]) for rows in groups.values()]
        assert all(a.isdisjoint(b) for a, b in itertools.combinations(used, 2))  # groups share no datacenter
        for rows in groups.values():
            assert all(row == rows[0] for row in rows)  # stage j of a group: one datacenter
            assert len(set(rows[0])) >= 2  # the pipeline crosses the group's WAN
        assert p.dp_sync is not None and p.dp_sync.outer


def test_a_grouped_plan_beats_every_whole_replica_plan_on_diloco_70b(d70, d70_plans):
    """Four 128-GPU sites joined by 10 Gbit/s: whole replicas per site need four groups
    (e = 0.89 at best); two groups of two sites compute at e = 1 with the activations
    on one 10 Gbit/s link per group, which deep in-flight limits hide."""
    local = min(with_best_sync(d70, p)[1] for p in local_plans(d70))
    grouped = min(simulated_score(d70, p) for p in d70_plans)
    assert grouped < 0.95 * local
    got = planner.plan(d70, solver="greedy", time_limit=60)
    assert got.solver.objective <= grouped * (1 + 1e-9)
    assert sync_groups(got) == 2


def test_grouped_plans_are_deterministic(d70_plans):
    again = group_plans(load_instance("diloco-70b"))  # a fresh instance: no cache
    assert [p.model_dump() for p in again] == [p.model_dump() for p in d70_plans]


def test_no_grouped_plans_without_an_outer_sync():
    inst = make_instance([("a", 8), ("b", 8), ("c", 8), ("d", 8)],
                         [("a", "b", 1.0, 30.0), ("c", "d", 1.0, 30.0), ("b", "c", 1.0, 30.0)])
    assert group_plans(inst) == []


def test_a_grouped_plan_found_past_the_sync_choices_deadline_is_kept(d70, d70_plans, monkeypatch):
    """The grouped plans come simulated with their best sync (group_plans_scored): when
    building them runs past the sync choice's deadline (a loaded machine), the choice
    still takes the best of them, with that score and no new simulation, instead of
    breaking off with the whole-replica plans (edwc-full at 20 s: 11.69 s found, 13.50 s
    returned)."""
    import math
    import time

    from planner.solvers import syncchoice
    from planner.solvers.greedy import greedy

    real = syncchoice.group_plans_scored
    pairs = real(d70)
    assert [p.model_dump() for p, _ in pairs] == [p.model_dump() for p in d70_plans]
    for p, v in pairs:  # each score is its plan's simulated objective
        assert v == pytest.approx(simulated_score(d70, p), rel=1e-12)

    def slow(instance, *a, deadline=math.inf, **k):
        out = real(instance, *a, **k)
        time.sleep(max(0.0, deadline - time.perf_counter()) + 0.05)  # done only after the deadline
        return out

    monkeypatch.setattr(syncchoice, "group_plans_scored", slow)
    chosen, score = syncchoice.choose_sync_scored(d70, greedy(d70), time_limit=3.0)
    assert score == pytest.approx(min(v for _, v in pairs), rel=1e-12)
    assert sync_groups(chosen) == 2
