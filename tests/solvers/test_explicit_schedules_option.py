"""``options.explicit_schedules = false`` (what ``planner plan --target megatron|deepspeed`` sets):
no solver step returns explicit op lists, and the evaluator refuses them.

From tiny-3dc's greedy plan run as 1f1b, the schedule refinement, the in-flight tuning and the
annealing each return an explicit schedule when the instance allows it (checked here too, so
the test cannot pass by accident)."""

import planner
from planner.scoring.evaluator import Evaluator
from planner.solvers.anneal import anneal
from planner.solvers.inflight import tune_inflight
from planner.solvers.registry import finish, refine


def start(inst):
    g = planner.plan(inst, solver="greedy")
    return finish(inst, g.model_copy(update={"schedule": "1f1b", "predicted": None, "solver": None}), "greedy", 0.0)


def steps(inst, p):
    return {"refine": refine(inst, p, time_limit=4, deterministic=True),
            "inflight": tune_inflight(inst, p, time_limit=None, max_evals=200),
            "anneal": anneal(inst, p, time_limit=None, max_evals=300, seed=0)}


def test_no_step_writes_explicit_op_lists_when_the_instance_forbids_them():
    inst = planner.load_instance("tiny-3dc")
    p = start(inst)
    assert {k: q.schedule_kind for k, q in steps(inst, p).items()} == dict.fromkeys(("refine", "inflight",
                                                                                     "anneal"), "explicit")
    named = inst.with_options(explicit_schedules=False)
    for k, q in steps(named, p).items():
        assert isinstance(q.schedule, str), k
        assert Evaluator(named, q).evaluate().feasible, k
    explicit = steps(inst, p)["inflight"]
    ev = Evaluator(named, explicit).evaluate()
    assert not ev.feasible and any("explicit_schedules" in v.message for v in ev.violations)
