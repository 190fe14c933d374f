"""Op-level trace: consistent with the evaluator, and a gap-free critical path."""

import pytest

from planner import load_instance, plan as make_plan
from planner.scoring.trace import trace


@pytest.mark.parametrize("name", ["tiny-3dc", "tiny-line", "two-dc"])
def test_trace_matches_evaluator_and_critical_path_is_contiguous(name):
    inst = load_instance(name)
    p = make_plan(inst)
    tr = trace(inst, p)
    assert tr.iteration_time_s == pytest.approx(p.predicted.iteration_time_s, rel=1e-12)
    S, R, m = p.num_stages, p.replicas, p.num_micro_batches
    assert len(tr.ops) == 2 * S * R * m
    assert len(tr.transfers) == 2 * (S - 1) * R * m
    # ops on one stage of one replica never overlap
    for r in range(R):
        for j in range(S):
            mine = sorted((o for o in tr.ops if o.replica == r and o.stage == j), key=lambda o: o.start)
            assert all(a.end <= b.start + 1e-12 for a, b in zip(mine, mine[1:]))
    # the critical path runs from 0 to T without gaps
    cp = tr.critical_path
    assert cp[0].start == pytest.approx(0.0, abs=1e-12)
    assert cp[-1].end == pytest.approx(tr.iteration_time_s, rel=1e-12)
    for a, b in zip(cp, cp[1:]):
        assert b.start == pytest.approx(a.end, rel=1e-9, abs=1e-12)
