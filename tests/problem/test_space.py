"""The plan space's replica options: divisors, without scanning the global batch."""

from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import make_instance
from planner.problem.space import PlanSpace, divisors

DOMAINS = [("a", 3), ("b", 2)]
LINKS = [("a", "b", 10.0, 5.0)]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000))
def test_divisors_match_brute_force(n):
    assert divisors(n) == [r for r in range(1, n + 1) if n % r == 0]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40).map(lambda k: 6 * k))
def test_replica_options_give_whole_micro_batch_counts_and_no_more_replicas_than_gpus(gbs):
    inst = make_instance(DOMAINS, LINKS, global_batch_size=gbs, micro_batch_sizes=[1, 2, 3])
    for b, rs in PlanSpace(inst).replica_options.items():
        assert rs == [r for r in range(1, inst.total_gpus + 1) if gbs % (r * b) == 0], (gbs, b, rs)


def test_a_huge_global_batch_is_not_scanned():
    # 2^23 sequences (2^40 is refused: over limits.MAX_GLOBAL_BATCH): the square-root
    # scan is capped by the 5 GPUs
    inst = make_instance(DOMAINS, LINKS, global_batch_size=2 ** 23, micro_batch_sizes=[1])
    assert PlanSpace(inst).replica_options == {1: [1, 2, 4]}


def test_stage_time_is_the_evaluators_c_with_tensor_parallel_all_reduces():
    import numpy as np

    import planner
    from planner.scoring.figures import PlanFigures

    inst = planner.load_instance("two-dc")  # A100 with NVLink: y_j > 0 at tp > 1
    assert inst.gpu.nvlink_bandwidth_gbps
    for tp in (2, 4, 8):
        space = PlanSpace(inst)
        n = inst.num_units
        cuts = [(0, n // 3), (n // 3, n)]
        got = [space.stage_time(a, b, tp, 1) for a, b in cuts]
        plan = planner.Plan.build(cuts, [["us-east-1", "us-east-1"]], tp=tp, micro_batch_size=1, instance=inst)
        assert np.allclose(got, PlanFigures(inst, plan).c, rtol=1e-12)
        assert got[1] > space.compute_time(space.table.interval(*cuts[1])[0], tp, 1)  # the all-reduce counts
