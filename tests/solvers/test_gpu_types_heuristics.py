"""Greedy, hier, anneal and auto plan with GPU types (SPEC v3 (g)): a stage of a
replica placed in domain d runs at the figures of d's type; the evaluator judges.

* closed form: two domains of one GPU each, types of speed ratio 2 (or 3), two
  stages: greedy cuts the equal units 2:1 (3:1), the stages then take equal time
  and T = (m + 1) c + 2 ms (gpipe); the type-blind even split on the same two
  GPUs re-simulated is at least m times its slow stage, far slower;
* on tiny mixed instances every one of these planners returns a plan the
  evaluator accepts, anneal, hier and auto no slower than greedy;
* a type-blind plan (greedy on the instance with every domain given the fastest
  type, re-simulated on the real types) is never faster than greedy's, and
  slower where the types matter;
* feasibility reasons name the types; auto leaves out the engines that plan one
  type; hier's groups have one type and its optimistic aggregate is as fast and
  as large as every member.
"""

from __future__ import annotations

import pytest

from planner import Evaluator, InfeasibleError, evaluate
from planner.solvers.greedy import greedy
from planner.solvers.registry import GPU_TYPE_SOLVERS, plan as run_plan

from gpu_types_instances import TOY_2TF, tiny_mixed, two_speeds, type_blind


def simulated(instance, plan) -> float:
    ev = Evaluator(instance, plan)
    assert not ev.violations(), [v.message for v in ev.violations()]
    return float(ev.iteration_times()[0])


@pytest.mark.parametrize("ratio, memory, split", [(2.0, (0.16, 0.32), (8, 4)), (3.0, (0.2, 0.32), (9, 3))])
def test_greedy_cuts_layers_in_proportion_to_speed(ratio, memory, split):
    m = 8
    inst = two_speeds(units=12, ratio=ratio, m=m, memory=memory, schedules=("gpipe",))
    p = greedy(inst)
    assert p.placement == [["fast", "slow"]] and p.num_stages == 2
    assert tuple(b - a for a, b in p.bounds()) == split
    c = split[0] * 3.0 / ratio  # = split[1] * 3.0: both stages take c per micro-batch
    assert c == pytest.approx(split[1] * 3.0)
    T = simulated(inst, p)
    assert T == pytest.approx((m + 1) * c + 2e-3, rel=1e-9)  # gpipe: (m + S - 1) c + a latency each way
    # the type-blind even split on the same GPUs: the slow stage alone is busy m * 6 units * 3 s
    even = p.model_copy(update={"stages": [p.stages[0].model_copy(update={"end": 6}),
                                           p.stages[1].model_copy(update={"start": 6})]})
    assert simulated(inst, even) >= m * 6 * 3.0 > T


@pytest.mark.parametrize("name", ["two-speeds", "tiny-3dc+gamma", "tiny-line+b"])
def test_type_blind_plan_is_no_faster_than_greedys(name):
    inst = {"two-speeds": two_speeds, "tiny-3dc+gamma": lambda: tiny_mixed("tiny-3dc", ("gamma",), gpu=TOY_2TF),
            "tiny-line+b": lambda: tiny_mixed("tiny-line", ("b",), gpu=TOY_2TF)}[name]()
    T = simulated(inst, greedy(inst))
    blind = greedy(type_blind(inst))  # planned as if every GPU were the fastest type
    ev = Evaluator(inst, blind)
    if ev.violations():  # it does not even fit the real types' memory
        return
    T_blind = float(ev.iteration_times()[0])
    assert T <= T_blind * (1 + 1e-12)
    if name != "tiny-line+b":  # where the types matter: strictly (and clearly) faster
        assert T < 0.9 * T_blind


@pytest.mark.parametrize("solver", ["anneal", "hier", "auto"])
@pytest.mark.parametrize("name", ["two-speeds", "tiny-3dc+gamma"])
def test_every_heuristic_plans_a_mixed_instance_no_slower_than_greedy(solver, name):
    inst = two_speeds() if name == "two-speeds" else tiny_mixed("tiny-3dc", ("gamma",), gpu=TOY_2TF)
    assert inst.heterogeneous and solver in GPU_TYPE_SOLVERS
    g = run_plan(inst, "greedy", seed=0)
    p = run_plan(inst, solver, time_limit=3, seed=0)
    e = evaluate(inst, p)
    assert e.feasible and e.iteration_time_s == p.predicted.iteration_time_s
    assert p.predicted.iteration_time_s <= g.predicted.iteration_time_s * (1 + 1e-12)
    # the plan uses both types where that pays: not only the slow domains
    types = {inst.domain_gpu(d).name for row in p.placement for d in row}
    assert "fast" in types or "toy-2tf" in types
    if solver == "auto":
        for name_ in ("milp", "cpsat"):
            if name_ not in GPU_TYPE_SOLVERS:
                assert p.solver.engines[name_].startswith("left out")


def test_feasibility_reasons_name_the_types():
    inst = two_speeds(memory=(0.01, 0.02))  # 9 and 18 MB usable: no unit of 16 MB fits the fast type alone
    with pytest.raises(InfeasibleError) as err:
        greedy(inst)
    text = str(err.value)
    assert "fast usable 9.0 MB" in text and "slow usable 18.0 MB" in text, text


def test_greedy_plan_fits_each_types_memory():
    # fast has less memory (54 MB usable against 72 MB): every stage on it must fit 54 MB
    inst = tiny_mixed("tiny-3dc", ("gamma", "beta"), gpu=TOY_2TF)
    p = greedy(inst)
    e = evaluate(inst, p)
    assert e.feasible
    for j, mem in enumerate(e.memory_gb_per_gpu):
        limits = [0.9 * inst.domain_gpu(row[j]).memory_gb for row in p.placement]
        assert mem <= min(limits) * (1 + 1e-9)


def test_hier_groups_have_one_type_and_the_optimistic_aggregate_dominates():
    from planner.solvers.hierarchy import aggregate, group_domains

    inst = tiny_mixed("tiny-3dc", ("gamma",), gpu=TOY_2TF)
    groups = group_domains(inst, max_groups=2)  # alpha, beta (toy) and gamma (toy-2tf)
    assert [len({inst.domain_type[inst.domain_index[d]] for d in g}) for g in groups] == [1, 1]
    mixed_group = group_domains(inst, max_groups=1)
    assert mixed_group == [("alpha", "beta", "gamma")]
    for groups_, want_types in ((groups, 2), (mixed_group, 1)):
        for agg in aggregate(inst, groups_):
            assert len(agg.instance.types_used) == want_types
            for a, members in agg.members.items():
                g = agg.instance.domain_gpu(a)
                for d in members:
                    real = inst.domain_gpu(d)
                    assert g.flops_per_s >= real.flops_per_s and g.memory_gb >= real.memory_gb
