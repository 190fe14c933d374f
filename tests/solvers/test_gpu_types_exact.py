"""The exact planners (MILP, CP-SAT) plan with GPU types (SPEC v3 (g)).

On toy instances with two types (``gpu_types_instances.toy_mixed``: a "slow" type and a
"fast" one 1.5 x faster, too few fast GPUs for a whole replica), each pinned shape is
enumerated: every partition and placement, scored by the evaluator.  Both solvers reach
the brute-force optimum of T_est (the objective they search), their search bound
(``estimate_bound``) is below it, and their ``bound`` is below the simulated time of
every plan of the family and of their own.  The fast type gets the heavy stage; a stage
that fits only the big-memory type sits there; one-type models are those of before
(CP-SAT protos fingerprinted at the commit before GPU types).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math

import pytest

from gpu_types_instances import one_type_named, toy_mixed
from helpers import compositions
from planner import Instance, Plan
from planner.problem.model import ModelSpec
from planner.scoring.evaluator import Evaluator, check_plan
from planner.solvers.registry import GPU_TYPE_SOLVERS, plan as run_plan

THREE = (("slow", 4, "slow"), ("fast", 1, "fast"), ("slow2", 4, "slow"))  # one fast GPU: mixing pays
TWO = (("slow", 4, "slow"), ("fast", 2, "fast"))
TWO_FAST_FIRST = (("fast", 2, "fast"), ("slow", 4, "slow"))
CASES = [(THREE, 1, "gpipe"), (THREE, 1, "1f1b"), (TWO, 2, "1f1b"), (TWO_FAST_FIRST, 2, "gpipe")]


def case_instance(i: int):
    domains, _, _ = CASES[i]
    return toy_mixed(domains=domains, speedup=1.5, global_batch_size=8)


@functools.lru_cache(maxsize=None)
def brute(i: int):
    """(best T_est, its placement, smallest simulated T) over every feasible plan of case i's
    shape (tp 1, b 1, its schedule and replicas; every partition into 1-4 stages, every
    placement)."""
    inst = case_instance(i)
    _, R, sched = CASES[i]
    best_te, best_rows, best_T = math.inf, None, math.inf
    for S in range(1, inst.max_stages + 1):
        for cuts in compositions(inst.num_units, S):
            for flat in itertools.product(inst.domain_names, repeat=S * R):
                p = Plan.build(cuts, [list(flat[r * S:(r + 1) * S]) for r in range(R)], tp=1, micro_batch_size=1,
                               instance=inst, schedule=sched)
                if check_plan(inst, p):
                    continue
                ev = Evaluator(inst, p)
                te, T = float(ev.estimate_times()[0]), float(ev.iteration_times()[0])
                if te < best_te:
                    best_te, best_rows = te, (cuts, p.placement)
                best_T = min(best_T, T)
    return best_te, best_rows, best_T


def solve(solver: str, i: int):
    inst = case_instance(i)
    _, R, sched = CASES[i]
    return inst, run_plan(inst, solver, time_limit=10, tp=1, micro_batch_size=1, schedule=sched, replicas=R,
                          refine_schedule=False)


@pytest.mark.parametrize("i", range(len(CASES)))
@pytest.mark.parametrize("solver", ["milp", "cpsat"])
def test_exact_planners_reach_the_brute_force_optimum_and_their_bounds_hold(solver, i):
    best_te, _, best_T = brute(i)
    inst, p = solve(solver, i)
    assert inst.heterogeneous and not check_plan(inst, p)
    ev = Evaluator(inst, p)
    te, T = float(ev.estimate_times()[0]), float(ev.iteration_times()[0])
    info = p.solver
    # the optimum of the family they search (T_est over the shape), within the default gap
    assert info.estimate_status == "optimal"
    assert best_te * (1 - 1e-9) <= te <= best_te * (1 + 1e-3), (te, best_te)
    assert info.estimate_objective == pytest.approx(te, rel=1e-12)
    # the search's bound holds over the family; the reported bound over every plan (SPEC 7)
    assert info.estimate_bound <= best_te * (1 + 1e-9)
    assert info.bound <= best_T * (1 + 1e-12) and info.bound <= T * (1 + 1e-12)
    assert info.objective == pytest.approx(T, rel=1e-12)


def test_the_optimum_mixes_types():
    # the cases are meaningful: the brute-force optimum puts stages on both types
    for i in range(len(CASES)):
        inst = case_instance(i)
        _, (_, rows), _ = brute(i)
        types = {inst.domain_gpu(d).name for row in rows for d in row}
        assert types == {"slow", "fast"}, (i, rows)


@pytest.mark.parametrize("solver", ["milp", "cpsat"])
def test_the_heavy_stage_sits_on_the_fast_type(solver):
    # two stages, one fast GPU: the stage with more FLOPs goes to the fast type, and the
    # swapped placement (heavy on slow) is slower by T_est
    inst, p = solve(solver, 0)
    assert p.num_stages == 2
    flops = [sum(u.fwd_flops_per_token for u in inst.units[s.start:s.end]) for s in p.stages]
    heavy = max(range(2), key=flops.__getitem__)
    assert flops[heavy] > flops[1 - heavy]
    row = p.placement[0]
    assert inst.domain_gpu(row[heavy]).name == "fast" and inst.domain_gpu(row[1 - heavy]).name == "slow"
    swapped = Plan.build([(s.start, s.end) for s in p.stages], [[row[1], row[0]]], tp=1, micro_batch_size=1,
                         instance=inst, schedule=p.schedule)
    assert float(Evaluator(inst, swapped).estimate_times()[0]) > float(Evaluator(inst, p).estimate_times()[0])


def memory_instance(fast_memory_gb: float) -> Instance:
    """Two units: ``light`` (no parameters, 1e9 FLOPs per token) and ``big`` (1e8 parameters:
    1.6 GB of weight state, 2e9 FLOPs per token); domains ``slow`` (2 GB, 1.8 usable) and
    ``fast`` (1.5 x faster, ``fast_memory_gb``), one GPU each."""
    units = [{"name": "light", "params": 0.0, "fwd_flops_per_token": 1e9, "out_bytes_per_token": 0.0,
              "stored_bytes_per_token": 0.0},
             {"name": "big", "params": 1e8, "fwd_flops_per_token": 2e9, "out_bytes_per_token": 0.0,
              "stored_bytes_per_token": 0.0}]
    return toy_mixed(domains=(("slow", 1, "slow"), ("fast", 1, "fast")), speedup=1.5,
                     memory_gb=(2.0, fast_memory_gb), model=ModelSpec(name="m", units=units), seq_len=1)


@pytest.mark.parametrize("solver", ["milp", "cpsat"])
def test_a_stage_that_fits_only_the_big_memory_type_is_placed_there(solver):
    # with room on both types the heavier "big" unit's stage goes to the fast type; with 1 GB
    # there (0.9 usable < 1.6 GB) it must sit on the slow type, and the plan is the brute force's
    roomy = memory_instance(2.0)
    p = run_plan(roomy, solver, time_limit=10, tp=1, micro_batch_size=1, schedule="gpipe", replicas=1,
                 refine_schedule=False)
    on = {u: row for s, row in zip(p.stages, p.placement[0]) for u in range(s.start, s.end)}
    assert on[1] == "fast"
    tight = memory_instance(1.0)
    p = run_plan(tight, solver, time_limit=10, tp=1, micro_batch_size=1, schedule="gpipe", replicas=1,
                 refine_schedule=False)
    assert not check_plan(tight, p)
    on = {u: row for s, row in zip(p.stages, p.placement[0]) for u in range(s.start, s.end)}
    assert on[1] == "slow"
    best = min(float(Evaluator(tight, q).estimate_times()[0]) for q in
               (Plan.build(cuts, [list(row)], tp=1, micro_batch_size=1, instance=tight, schedule="gpipe")
                for S in (1, 2) for cuts in compositions(2, S) for row in itertools.product(("slow", "fast"), repeat=S))
               if not check_plan(tight, q))
    assert float(Evaluator(tight, p).estimate_times()[0]) == pytest.approx(best, rel=1e-3)


def test_refinement_and_its_bound_take_each_replicas_own_types():
    # replicas with crossed types: per stage the slowest figures belong to no replica, so a bound
    # computed with them would exceed the plan's time; the schedule refinement keeps a plan no
    # slower than the one it is given
    from planner.solvers.registry import finish, refine
    from planner.solvers.schedule_opt import inflight_bound, memory_caps

    inst = toy_mixed(domains=TWO, speedup=10.0, global_batch_size=8)
    p = Plan.build([(0, 2), (2, 4)], [["slow", "fast"], ["fast", "slow"]], tp=1, micro_batch_size=1,
                   instance=inst, schedule="1f1b")
    assert not check_plan(inst, p)
    T = float(Evaluator(inst, p).iteration_times()[0])
    assert inflight_bound(inst, p, memory_caps(inst, p)) <= T * (1 + 1e-12)
    done = refine(inst, finish(inst, p, "given", 0.0), time_limit=3, deterministic=True)
    assert not check_plan(inst, done)
    assert done.predicted.iteration_time_s <= T * (1 + 1e-12)


def test_memory_caps_use_the_hosting_types_memory():
    # stage 0 (embed and a block: 0.89 MB of weight state, 0.28 MB stored per micro-batch) on the fast
    # type with 1.98 MB usable holds 3 of the 4 micro-batches; each cap is the smallest hosting type's
    from planner.scoring.figures import PlanFigures
    from planner.solvers.schedule_opt import memory_caps

    inst = toy_mixed(domains=TWO, speedup=1.5, memory_gb=(80.0, 0.0022), global_batch_size=8)
    p = Plan.build([(0, 2), (2, 4)], [["fast", "slow"], ["slow", "slow"]], tp=1, micro_batch_size=1, instance=inst,
                   schedule="gpipe")
    fig = PlanFigures(inst, p)
    tok = inst.workload.seq_len
    for j, cap in enumerate(memory_caps(inst, p)):
        limit = inst.memory_limit_of(inst.gpu_types[1 if j == 0 else 0])
        room = limit - 16 * fig.P[j]
        assert cap == min(p.num_micro_batches, math.floor(room / (tok * fig.stored[j]) + 1e-9))
    assert memory_caps(inst, p)[0] < p.num_micro_batches == memory_caps(inst, p)[1]


def test_milp_and_cpsat_are_gpu_type_solvers():
    assert {"milp", "cpsat"} <= GPU_TYPE_SOLVERS


# fingerprints of one-type CP-SAT models (sha256 of str(proto), first 16 hex digits) built at
# b63a5c4, before the formulations knew GPU types: a one-type instance builds the same model
# (update deliberately when a formulation changes)
FINGERPRINTS = [("tiny-3dc", (4, 4, "gpipe", 0, 1), "0f77f4d062955724"),
                ("tiny-3dc", (2, 2, "1f1b", 0, 2), "3401fddb37c4b13a"),
                ("tiny-line", (2, 1, "gpipe", 0, 2), "06731c82d8355cc0")]


@pytest.mark.parametrize("name,shape,digest", FINGERPRINTS)
def test_one_type_cpsat_models_are_those_of_before(name, shape, digest):
    from planner.problem.io import instances_dir, load_instance
    from planner.problem.space import PlanSpace, Shape
    from planner.solvers.formulations.cpsat import build

    inst = load_instance(instances_dir() / f"{name}.toml")
    cm = build(inst, Shape(*shape), space=PlanSpace(inst))
    assert hashlib.sha256(str(cm.model.proto).encode()).hexdigest()[:16] == digest
    # the same type named through [[gpus]] by every domain: the same model
    named = one_type_named(inst)
    assert str(build(named, Shape(*shape)).model.proto) == str(cm.model.proto)


@pytest.mark.parametrize("i", [2, 3])
def test_aggregated_model_with_types_is_a_lower_bound(i):
    # the aggregated model counts replicas per domain, with per-type presence and memory; its
    # optimum bounds the shape's T_est from below, and the plan it decomposes into is feasible
    from planner.problem.space import Shape
    from planner.solvers.formulations import milp_agg
    from planner.solvers.milp import _run
    from planner.solvers.shapesearch import search_space

    inst = case_instance(i)
    _, R, sched = CASES[i]
    best_te, _, _ = brute(i)
    ts = 1.0
    M = milp_agg.build(inst, Shape(1, 1, sched, 0, R), space=search_space(inst), ts=ts)
    res = _run(M, 10.0, 0, 1)
    assert res.status == "optimal"
    assert res.objective / ts <= best_te * (1 + 1e-6)
    res.load()
    cuts, placement = milp_agg.decompose(M)
    p = Plan.build(cuts, placement, tp=1, micro_batch_size=1, instance=inst, schedule=sched)
    assert not check_plan(inst, p)
    assert float(Evaluator(inst, p).estimate_times()[0]) >= best_te * (1 - 1e-9)
