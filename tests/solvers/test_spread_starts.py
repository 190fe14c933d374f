"""``greedy.spread_starts``: a pipeline across datacenters as a start for ``auto``'s annealing.

On two-dc greedy's best shapes keep each replica in one datacenter (the best T_est under
1f1b); the same shapes placed stage-aligned put stage 0 in one datacenter and stage 1 in
the other, rank below by T_est, and anneal (explicit schedules) to a faster plan.
"""

from planner.problem.io import load_instance
from planner.scoring.evaluator import Evaluator, check_plan
from planner.solvers.anneal import anneal
from planner.solvers.greedy import shape_starts, spread_starts


def test_spread_starts_keep_the_shape_and_spread_every_replica():
    inst = load_instance("two-dc")
    starts = shape_starts(inst, k=4)
    spread = spread_starts(inst, starts)
    assert spread
    shapes = {(p.tp, p.micro_batch_size, p.replicas, tuple(p.bounds())) for p in starts}
    for q in spread:
        assert check_plan(inst, q) == []
        assert (q.tp, q.micro_batch_size, q.replicas, tuple(q.bounds())) in shapes
        assert all(len(set(row)) == 2 for row in q.placement)  # each replica over both datacenters
        # stage-aligned: stage j of every replica in one domain
        assert all(len({row[j] for row in q.placement}) == 1 for j in range(q.num_stages))
    ests = [float(Evaluator(inst, q).estimate_times()[0]) for q in spread]
    assert ests == sorted(ests)


def test_the_spread_start_anneals_below_greedys_start_on_two_dc():
    """By a count of candidates (deterministic): from greedy's plan the annealing stays near
    14.8 s; from the spread start it reaches a pipeline across the two datacenters below 12 s."""
    inst = load_instance("two-dc")
    starts = shape_starts(inst, k=4)
    home = anneal(inst, starts[0], time_limit=None, max_evals=400, seed=0)
    away = anneal(inst, spread_starts(inst, starts)[0], time_limit=None, max_evals=400, seed=0)
    t_home = float(Evaluator(inst, home).iteration_times()[0])
    t_away = float(Evaluator(inst, away).iteration_times()[0])
    assert t_away < 0.85 * t_home
    assert all(len(set(row)) == 2 for row in away.placement)


def test_a_one_domain_instance_has_no_spread_start():
    inst = load_instance("two-dc")
    data = inst.to_dict()
    data["workload"]["model"] = inst.workload.model
    data["domains"] = data["domains"][:1]
    data["links"] = []
    data["domains"][0].pop("uplink_gbps", None)
    from planner import Instance

    one = Instance.from_dict(data)
    assert spread_starts(one, shape_starts(one, k=4)) == []


def test_a_start_with_explicit_op_lists_keeps_them():
    """A start may carry explicit op lists (in-flight limits: a grouped plan does); its
    spread copy keeps them, op for op (Plan.build took the schedule object for op lists)."""
    from planner.solvers.inflight import inflight_schedule

    inst = load_instance("two-dc")
    starts = [p.model_copy(update={"schedule": inflight_schedule([p.num_stages] + [1] * (p.num_stages - 1),
                                                                 p.num_micro_batches)})
              for p in shape_starts(inst, k=4) if p.num_stages > 1]
    assert starts
    spread = spread_starts(inst, starts)
    assert spread
    for q in spread:
        assert q.schedule in [p.schedule for p in starts] and not isinstance(q.schedule, str)


def test_spread_starts_stop_at_their_deadline_keeping_what_they_have():
    import time

    inst = load_instance("two-dc")
    starts = shape_starts(inst, k=4)
    assert spread_starts(inst, starts, deadline=time.perf_counter() - 1.0) == []  # nothing checked past it
    assert spread_starts(inst, starts, deadline=time.perf_counter() + 600.0) == spread_starts(inst, starts)
