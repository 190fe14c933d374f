"""Rollouts of plans with ``dp_sync`` (SPEC 8 and 11): blocks of H iterations under the
state at the block's start, switches only between blocks, moves carrying the outer
state.  Checked against a step-by-step recomputation by hand."""

from __future__ import annotations

import numpy as np
import pytest

from planner import Evaluator
from planner.dynamics.job import starts_before
from planner.dynamics.rollout import rollout, switch_time
from planner.problem import traces
from planner.problem.dpsync import DpSync
from tests.dpsync_instances import local, wan_bound


def test_starts_before_runs_whole_blocks():
    assert starts_before(0, 2, 5, 99) == 3
    assert starts_before(0, 2, 5, 99, block=4) == 4  # the block starting at 0 runs whole
    assert starts_before(0, 2, 9, 99, block=4) == 8  # blocks start at 0 and 8
    assert starts_before(0, 2, 9, 6, block=4) == 6  # the last block cut at the job's end


@pytest.mark.parametrize("sync", [DpSync(mode="diloco", H=5, bits=4),
                                  DpSync(mode="streaming", H=5, bits=4, fragments=2)])
def test_static_rollout_of_a_diloco_plan_by_hand(sync):
    inst = wan_bound()
    plan = local(inst).model_copy(update={"dp_sync": sync})
    tr = traces.generate(inst, hours=2, seed=3)
    ev = Evaluator(inst, plan)
    T = ev.effective_times(tr.states) / ev.quality[0]  # one iteration of effective tokens
    n = 203
    r = rollout(inst, tr, "static", iterations=n, plan=plan)
    t, done = 0.0, 0
    while done < n:  # a block of H iterations runs under the state at its start
        e = tr.epoch_at(t)
        k = min(sync.H, n - done)
        t += k * T[e]
        done += k
    assert r.iterations == n and r.completed
    assert r.total_s == pytest.approx(t, rel=1e-12)
    # T_eff / e is what the block takes per iteration: a diloco block is (H-1) T_in + T_sync
    if sync.mode == "diloco":
        T_in = ev.iteration_times(tr.states)
        assert np.all(T * ev.quality[0] * sync.H >= (sync.H - 1) * T_in * (1 - 1e-12))


def test_a_switch_moves_the_outer_state_too():
    inst = wan_bound()
    old = local(inst)
    new = old.model_copy(update={"placement": [["b"], ["b"], ["c"]],
                                 "dp_sync": DpSync(mode="diloco", H=5, bits=4)})
    bw = np.array([l.bandwidth_gbps for l in inst.links])
    lat = np.array([l.latency_ms for l in inst.links])
    P = sum(u.params for u in inst.units)
    one_way = bw[0] * 1e9 / 8
    # replica 0 moves a -> b: (16 + 8) bytes per parameter over the a-b link
    want = (16 + 8) * P / one_way + lat[0] / 1e3
    assert switch_time(inst, old, new, bw, lat) == pytest.approx(want, rel=1e-12)
    cpu = new.model_copy(update={"dp_sync": DpSync(mode="diloco", H=5, bits=4, outer_state="cpu")})
    assert switch_time(inst, old, cpu, bw, lat) == pytest.approx(16 * P / one_way + lat[0] / 1e3, rel=1e-12)
