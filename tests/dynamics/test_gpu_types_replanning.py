"""Re-planning on an instance with several GPU types (SPEC v3 (g)): the rollouts'
policies plan with the types (greedy per epoch, the switch rules' candidates)
and every plan a job runs fits each type's memory."""

import pytest

from planner import Evaluator
from planner.problem import traces
from planner.problem.network import instance_at
from planner.dynamics.policies import EpochPlans
from planner.dynamics.rollout import rollout
from planner.solvers.greedy import greedy

from gpu_types_instances import TOY_2TF, tiny_mixed


@pytest.mark.parametrize("policy", ["greedy", "hysteresis"])
def test_rollout_on_a_mixed_instance(policy):
    inst = tiny_mixed("tiny-3dc", ("gamma",), gpu=TOY_2TF)
    tr = traces.generate(inst, hours=2, seed=3)
    # the switch rules' candidates without the library's 30 s auto plan (tested in test_policies)
    plans = EpochPlans(inst, tr, seed=0, planners=()) if policy == "hysteresis" else None
    r = rollout(inst, tr, policy, iterations=300, solver_time=1.0, plans=plans)
    assert r.iterations == 300 and r.completed
    assert r.total_s == pytest.approx(r.compute_s + r.reconfig_s + r.stalled_s, rel=1e-12)
    assert r.plans
    for p in r.plans:  # every plan run is feasible on the real types (memory per type)
        assert not Evaluator(inst, p).violations()
    if policy == "greedy":  # the first plan is greedy's on the first epoch's state, typed
        first = greedy(instance_at(inst, tr.states, 0))
        assert (r.plans[0].placement, r.plans[0].bounds()) == (first.placement, first.bounds())
