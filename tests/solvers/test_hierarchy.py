"""Hierarchical planning (planner.solvers.hierarchy, ``--solver hier``).

The claim behind the bound (docs/formulations.md, "Hierarchical planning"):
every real plan P maps to an aggregated plan phi(P) (each domain replaced by
its group) that is feasible in the aggregated instance and whose T_est (and
cost with T_est) is no larger.  It is checked directly on random feasible
plans of random grouped instances, and through its consequence, the solver's
bound never above the brute-force optimum.
"""

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouped import grouped_instance
from helpers import compositions, make_instance, tiny_model
from planner import Plan
from planner.problem.errors import InputError
from planner.problem.names import name_problem
from planner.problem.model import ModelSpec
from planner.scoring.evaluator import Evaluator, check_plan
from planner.solvers.hierarchy import (aggregate, check_groups, disaggregate, group_domains, hier,
                                       to_aggregate)
from planner.solvers.registry import plan as run_plan


def t_est(inst, p) -> float:
    ev = Evaluator(inst, p)
    return float(ev.objective(ev.estimate_times())[0])


def feasible_plans(inst):
    """Every feasible plan of a tiny instance, replicas up to order (T_est does not
    depend on the order of the replicas): capacity-respecting placements only."""
    wl = inst.workload
    names = inst.domain_names
    gbs = wl.global_batch_size
    for t in wl.tensor_parallel:
        cap = {d.name: d.gpus // t for d in inst.domains if d.gpus_per_node >= t}
        for b in wl.micro_batch_sizes:
            for R in range(1, gbs // b + 1):
                if gbs % (R * b):
                    continue
                for sched in inst.options.schedules:
                    for S in range(1, inst.max_stages + 1):
                        if R * S > sum(cap.values()):
                            continue
                        rows = [r for r in itertools.product(names, repeat=S)
                                if all(r.count(d) <= cap[d] for d in set(r))]
                        for cuts in compositions(inst.num_units, S):
                            first = True
                            for combo in itertools.combinations_with_replacement(range(len(rows)), R):
                                use = {}
                                for i in combo:
                                    for d in rows[i]:
                                        use[d] = use.get(d, 0) + 1
                                if any(n > cap[d] for d, n in use.items()):
                                    continue
                                p = Plan.build(cuts, [list(rows[i]) for i in combo], tp=t, micro_batch_size=b,
                                               instance=inst, schedule=sched)
                                if first:
                                    if check_plan(inst, p):
                                        break  # memory does not depend on the placement
                                    first = False
                                yield p


def random_plan(inst, rng):
    """A random feasible plan (random shape, random cuts, random placement within the
    GPUs), or None after a few tries."""
    wl = inst.workload
    gbs = wl.global_batch_size
    for _ in range(50):
        t = int(rng.choice(wl.tensor_parallel))
        b = int(rng.choice(wl.micro_batch_sizes))
        Rs = [R for R in range(1, gbs // b + 1) if gbs % (R * b) == 0]
        R = int(rng.choice(Rs))
        S = int(rng.integers(1, inst.max_stages + 1))
        slots = [d.name for d in inst.domains if d.gpus_per_node >= t for _ in range(d.gpus // t)]
        if R * S > len(slots):
            continue
        cuts = list(compositions(inst.num_units, S))
        pick = rng.permutation(len(slots))[:R * S]
        flat = [slots[i] for i in pick]
        p = Plan.build(cuts[int(rng.integers(len(cuts)))], [flat[r * S:(r + 1) * S] for r in range(R)], tp=t,
                       micro_batch_size=b, instance=inst, schedule=str(rng.choice(inst.options.schedules)))
        if not check_plan(inst, p):
            return p
    return None


def class_of(aggs, tp):
    return next(a for a in aggs if tp in a.tps)


# -- the aggregated instance: figures and the dominance behind the bound ----------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), groups=st.integers(2, 3), per_group=st.integers(1, 3),
       cost=st.booleans(), gpus=st.sampled_from([(1, 2), (2, 4), (3, 5)]), hidden=st.sampled_from([64, 512]))
def test_every_real_plan_maps_to_an_aggregated_plan_no_slower(seed, groups, per_group, cost, gpus, hidden):
    inst = grouped_instance(groups, per_group, seed=seed, tiny_gpus=gpus, tiny_hidden=hidden)
    if cost:
        inst = inst.with_options(objective="cost", wan_price_per_gb=0.5)
    gs = group_domains(inst, max_groups=groups)
    aggs = aggregate(inst, gs)
    hostable = [t for t in inst.workload.tensor_parallel if any(d.gpus >= t for d in inst.domains)]
    assert set(hostable) <= {t for a in aggs for t in a.tps}  # every degree some domain can host
    rng = np.random.default_rng(seed)
    for _ in range(20):
        p = random_plan(inst, rng)
        if p is None:
            continue
        agg = class_of(aggs, p.tp)
        assert agg.bounds
        q = to_aggregate(agg, p)
        assert check_plan(agg.instance, q) == []  # GPUs, memory, routes: feasible in the aggregate
        assert t_est(agg.instance, q) <= t_est(inst, p) * (1 + 1e-9)


def test_slots_are_exact_per_tensor_parallel_degree():
    # 12 GPUs in each of two domains: tp 8 gives one stage each, two in all, not floor(24/8) = 3
    inst = make_instance([{"name": "a", "gpus": 12, "intra_bandwidth_gbps": 200.0, "region": "x"},
                          {"name": "b", "gpus": 12, "intra_bandwidth_gbps": 200.0, "region": "x"},
                          {"name": "c", "gpus": 8, "intra_bandwidth_gbps": 200.0, "region": "y"}],
                         [("a", "b", 100.0, 1.0), ("b", "c", 10.0, 20.0)], tensor_parallel=[1, 8])
    gs = group_domains(inst)
    assert gs == [("a", "b"), ("c",)]
    aggs = aggregate(inst, gs)
    assert [a.tps for a in aggs] == [(1,), (8,)]  # 24 // 8 = 3 != 1 + 1: one instance per degree
    by_tp = {a.tps[0]: {d.name: d.gpus for d in a.instance.domains} for a in aggs}
    assert by_tp[1] == {"x": 24, "c": 8} and by_tp[8] == {"x": 16, "c": 8}  # a lone domain keeps its name
    # multiples of every degree: one instance serves them all
    inst2 = inst.with_domain("a", gpus=16).with_domain("b", gpus=8)
    assert [a.tps for a in aggregate(inst2, gs)] == [(1, 8)]


def test_max_bandwidth_alone_would_not_bound_link_sharing():
    """Why the aggregated links carry 4 beta_max * U and not the best link's bandwidth
    (nor 4 beta_max): five replicas cross between the same two groups, each on a link
    of its own; on one aggregated link they would share it five ways."""
    n = 5
    doms = [{"name": f"{g}{i}", "gpus": 1, "intra_bandwidth_gbps": 200.0, "region": g}
            for g in "ab" for i in range(n)]
    links = [(f"a{i}", f"b{i}", 1.0, 0.1) for i in range(n)]  # every link 1 Gbit/s: beta_max = 1
    links += [(f"{g}{i}", f"{g}{i + 1}", 1.0, 0.0) for g in "ab" for i in range(n - 1)]
    # few parameters (cheap gradient rings), heavy activations (transfers decide)
    units = [{"name": f"u{k}", "params": 10.0, "fwd_flops_per_token": 1e6, "out_bytes_per_token": 1e5,
              "stored_bytes_per_token": 1.0} for k in range(4)]
    inst = make_instance(doms, links, model=ModelSpec(name="wide", units=units), global_batch_size=2 * n,
                         tensor_parallel=[1], micro_batch_sizes=[1])
    p = Plan.build([(0, 2), (2, 4)], [[f"a{i}", f"b{i}"] for i in range(n)], tp=1, micro_batch_size=1,
                   instance=inst, schedule="1f1b")
    assert check_plan(inst, p) == []
    (agg,) = aggregate(inst, group_domains(inst))
    assert t_est(agg.instance, to_aggregate(agg, p)) <= t_est(inst, p)
    for bw in (1.0, 4.0):  # the best link between the groups; four times it
        naive = agg.instance.with_link("a", "b", bandwidth_gbps=bw)
        assert t_est(naive, to_aggregate(agg, p)) > t_est(inst, p)


def test_a_group_whose_domains_share_a_stage_needs_the_intra_floor(monkeypatch):
    """The proof's case B: stage 0's three replicas in a1, a2 (one group) and b1. The
    real ring crosses three links of 100 Gbit/s and has no intra part; the aggregate
    puts two replicas in one domain, an intra ring, which must be no slower than
    what the real cross ring spends: the floor SPEED_UP * beta_max on the aggregated
    intra bandwidth (a real intra bandwidth of 1 Gbit/s would be far too slow)."""
    from planner.solvers import hierarchy

    doms = [{"name": n, "gpus": 1, "intra_bandwidth_gbps": 1.0, "region": n[0]} for n in ("a1", "a2", "b1")]
    links = [("a1", "a2", 100.0, 0.0), ("a2", "b1", 100.0, 0.0), ("a1", "b1", 100.0, 0.0)]
    inst = make_instance(doms, links, model=tiny_model(hidden=512, vocab=1000), global_batch_size=3,
                         tensor_parallel=[1], micro_batch_sizes=[1])
    p = Plan.build([(0, 4)], [["a1"], ["a2"], ["b1"]], tp=1, micro_batch_size=1, instance=inst, schedule="1f1b")
    assert check_plan(inst, p) == []
    (agg,) = aggregate(inst, group_domains(inst))
    assert t_est(agg.instance, to_aggregate(agg, p)) <= t_est(inst, p)
    monkeypatch.setattr(hierarchy, "SPEED_UP", 0.5)  # a floor too low: the bound breaks
    (low,) = aggregate(inst, group_domains(inst))
    assert t_est(low.instance, to_aggregate(low, p)) > t_est(inst, p)


# -- the bound against brute force ---------------------------------------------------

@pytest.mark.parametrize("seed, groups, per_group, gpus, max_stages", [
    (1, 2, 2, (1, 2), 3), (2, 2, 2, (1, 2), 3), (3, 3, 2, (1,), 2), (4, 2, 2, (2,), 2)])
def test_hier_bound_never_above_the_brute_force_optimum(seed, groups, per_group, gpus, max_stages):
    inst = grouped_instance(groups, per_group, seed=seed, tiny_gpus=gpus).with_options(max_stages=max_stages)
    gs = group_domains(inst, max_groups=groups)
    aggs = aggregate(inst, gs)
    flat_best = math.inf
    agg_best = {a.tps: math.inf for a in aggs}
    for p in feasible_plans(inst):
        te = t_est(inst, p)
        flat_best = min(flat_best, te)
        a = class_of(aggs, p.tp)
        agg_best[a.tps] = min(agg_best[a.tps], t_est(a.instance, to_aggregate(a, p)))
    assert math.isfinite(flat_best)
    assert min(agg_best.values()) <= flat_best * (1 + 1e-9)
    p = run_plan(inst, solver="hier", time_limit=4.0, seed=0, max_groups=groups)
    info = p.solver
    assert check_plan(inst, p) == []
    assert info.name == "hier" and info.bound is not None
    assert info.bound <= flat_best * (1 + 1e-9) and info.estimate_bound <= flat_best * (1 + 1e-9)
    te = t_est(inst, p)
    if isinstance(p.schedule, str):  # (an explicit schedule from the annealing may beat the named ones)
        assert te >= flat_best * (1 - 1e-9)
    # the search's claims are on T_est (estimate_*), the plan's on the simulated time (SPEC 7)
    if info.estimate_gap is not None:
        assert info.estimate_gap == pytest.approx(max(0.0, (te - info.estimate_bound) / te), abs=1e-12)
    sim = p.predicted.iteration_time_s
    assert info.gap == pytest.approx(max(0.0, (sim - info.bound) / sim), abs=1e-12)
    if info.estimate_status == "optimal":
        assert te <= flat_best / (1 - 1e-3) + 1e-15
    else:
        assert info.estimate_status in ("feasible", "time_limit")
    assert info.status in ("optimal", "feasible", "time_limit")


# -- groups and disaggregation ---------------------------------------------------------

def test_groups_are_runs_by_region_or_latency():
    inst = grouped_instance(3, 3, seed=5)
    assert group_domains(inst) == [tuple(f"r{g:02d}-d{i:02d}" for i in range(3)) for g in range(3)]
    assert len(group_domains(inst, max_groups=2)) == 2  # adjacent regions merged
    # no regions: latency clustering finds the same runs (intra-region routes < 3 ms, inter > 5 ms)
    plain = inst.model_copy(update={"domains": [d.model_copy(update={"region": ""}) for d in inst.domains]})
    assert group_domains(plain, max_groups=9) == group_domains(inst)
    assert group_domains(plain, threshold_ms=0.0, max_groups=9) == [(d,) for d in inst.domain_names]
    for gs in (group_domains(plain, max_groups=k) for k in (1, 2, 4)):
        order = [d for g in gs for d in g]
        assert order == list(inst.domain_names) and len(gs) <= 4


def test_user_groups_must_be_runs_covering_every_domain():
    inst = grouped_instance(2, 2, seed=0)
    a, b, c, d = inst.domain_names
    assert check_groups(inst, [[c, d], [b, a]], inst.domain_names) == [(a, b), (c, d)]
    with pytest.raises(InputError, match="consecutive"):
        check_groups(inst, [[a, c], [b, d]], inst.domain_names)
    with pytest.raises(InputError, match="exactly once"):
        check_groups(inst, [[a, b], [c]], inst.domain_names)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_disaggregated_plans_are_feasible_and_map_back(seed):
    inst = grouped_instance(3, 3, seed=seed, tiny_gpus=(2, 4))
    gs = group_domains(inst)
    rng = np.random.default_rng(seed)
    aggs = aggregate(inst, gs)
    for _ in range(10):
        p = random_plan(inst, rng)
        if p is None:
            continue
        agg = class_of(aggs, p.tp)
        q = to_aggregate(agg, p)  # an aggregated plan: back to real domains
        outs = disaggregate(inst, agg, q)
        assert outs
        for out in outs:
            assert check_plan(inst, out) == []
            assert to_aggregate(agg, out).placement == q.placement


def test_hier_pins_and_forbid_are_honoured():
    inst = grouped_instance(2, 3, seed=3, tiny_gpus=(2, 4))
    banned = inst.domain_names[0]
    p = run_plan(inst, solver="hier", time_limit=3.0, tp=1, forbid=[banned], polish=True)
    assert p.tp == 1 and banned not in {d for row in p.placement for d in row}
    assert check_plan(inst, p) == []
    with pytest.raises(InputError, match="--require|require"):
        run_plan(inst, solver="hier", time_limit=3.0, require=[banned])


# -- auto goes hierarchical only beyond the flat models' reach --------------------------

def test_auto_uses_hier_only_when_the_flat_models_are_too_big(monkeypatch):
    from planner.problem.io import instances_dir, load_instance
    from planner.solvers import portfolio

    from planner.problem.files import available

    for name in available("instances"):  # the packaged one-job instances up to 16 domains: unchanged
        path = instances_dir() / f"{name}.toml"
        inst = load_instance(path)
        if len(inst.domains) <= 16:
            assert not portfolio.flat_too_big(inst), path.name
    assert portfolio.flat_too_big(grouped_instance(10, 10, seed=0, tiny=False))  # 100 domains
    inst = grouped_instance(2, 2, seed=1, tiny_gpus=(1, 2)).with_options(max_stages=3)
    assert not portfolio.flat_too_big(inst)
    monkeypatch.setattr(portfolio, "FLAT_ARCS_MAX", 0)
    p = run_plan(inst, solver="auto", time_limit=8.0, seed=0)
    assert set(p.solver.engines) == {"greedy", "hier"}
    assert check_plan(inst, p) == []
    best = min(t_est(inst, q) for q in feasible_plans(inst))
    assert p.solver.bound <= best * (1 + 1e-9)


def test_aggregated_instances_have_valid_names():
    """The aggregated instance's name and its group domains' names are valid names
    (SPEC 9): the loader refused 'x/groups' and would refuse a region with a space or
    a long 'first..last' group name, so hier failed on such instances."""
    long = "d" * 40
    inst = make_instance([{"name": f"{long}1", "gpus": 8, "intra_bandwidth_gbps": 200.0, "region": "US East"},
                          {"name": f"{long}2", "gpus": 8, "intra_bandwidth_gbps": 200.0, "region": "US East"},
                          {"name": "c", "gpus": 8, "intra_bandwidth_gbps": 200.0, "region": "y"},
                          {"name": "e", "gpus": 8, "intra_bandwidth_gbps": 200.0, "region": "y"}],
                         [(f"{long}1", f"{long}2", 100.0, 1.0), (f"{long}2", "c", 10.0, 20.0),
                          ("c", "e", 100.0, 1.0)], tensor_parallel=[1, 8])
    inst = inst.model_copy(update={"name": "n" * 64})
    aggs = aggregate(inst, [(f"{long}1", f"{long}2"), ("c", "e")])
    assert aggs
    for agg in aggs:
        names = [agg.instance.name] + [d.name for d in agg.instance.domains]
        assert all(name_problem(n) is None for n in names), names
        assert len(set(names[1:])) == len(names) - 1
