"""Sub-fleets (planner.problem.subfleet) and auto's floor on a mixed fleet: never slower
than greedy's plan of one GPU type's domains alone."""

import pytest

from planner.problem.errors import InputError
from planner.problem.io import load_instance
from planner.problem.subfleet import subfleet, type_subfleets
from planner.scoring.evaluator import Evaluator, check_plan


def test_type_subfleets_hold_each_type_alone():
    inst = load_instance("aws-a100-h100")
    subs = dict(type_subfleets(inst))
    assert set(subs) == {inst.gpu_types[u].name for u in inst.types_used}
    for gpu, sub in subs.items():
        assert not sub.heterogeneous and sub.gpu.name == gpu
        names = {d.name for d in sub.domains}
        assert names == {d.name for d in inst.domains if inst.domain_gpu(d.name).name == gpu}
        assert all(e.a in names and e.b in names for e in sub.links)
        assert sum(d.gpus for d in sub.domains) == sum(inst.domain(n).gpus for n in names)
    assert type_subfleets(load_instance("two-dc")) == []  # one type


def test_a_subfleet_whose_wan_relays_through_others_is_skipped():
    inst = load_instance("tiny-mixed")  # alpha and gamma (toy-1tf) are joined only through beta
    assert [g for g, _ in type_subfleets(inst)] == ["toy-2tf"]
    with pytest.raises(InputError):
        subfleet(inst, ["alpha", "gamma"])


def test_a_plan_of_a_subfleet_is_a_plan_of_the_fleet_and_auto_is_no_slower():
    from planner import plan

    inst = load_instance("tiny-mixed")
    ((gpu, sub),) = type_subfleets(inst)
    q = plan(sub, solver="greedy").model_copy(update={"solver": None, "predicted": None})
    assert check_plan(inst, q) == []
    t_sub = float(Evaluator(inst, q).iteration_times()[0])
    assert t_sub == pytest.approx(float(Evaluator(sub, q).iteration_times()[0]), rel=1e-12)
    p = plan(inst, solver="auto", time_limit=8, seed=0)
    assert float(Evaluator(inst, p).iteration_times()[0]) <= t_sub * (1 + 1e-9)
