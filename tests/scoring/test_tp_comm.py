"""Tensor-parallel communication y_j (SPEC 5, v2): closed forms and v1 defaults."""

from __future__ import annotations

import numpy as np
import pytest

from planner import Evaluator, Plan
from planner.problem.model import ModelSpec
from planner.scoring.figures import PlanFigures

from helpers import make_instance

GPU = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}
MODEL = ModelSpec(name="m", num_layers=4, hidden_size=64, ffn_hidden_size=256, num_heads=4,
                  vocab_size=100)


def _figures(nvlink, tp, bounds=((0, 2), (2, 5), (5, 6)), b=2, model=MODEL):
    gpu = GPU if nvlink is None else {**GPU, "nvlink_bandwidth_gbps": nvlink}
    inst = make_instance([("a", 64)], [], model=model, gpu=gpu, micro_batch_sizes=[b],
                         tensor_parallel=[tp], global_batch_size=8)
    plan = Plan.build(list(bounds), [["a"] * len(bounds)], tp=tp, micro_batch_size=b, instance=inst)
    return inst, PlanFigures(inst, plan)


@pytest.mark.parametrize("tp", [2, 4, 8])
@pytest.mark.parametrize("nvlink", [2400.0, 7.5])
def test_formula_model_matches_the_spec(tp, nvlink):
    # Stages: [embed, block0], [block1..3], [head]: n_j = 1, 3, 0 blocks.
    # SPEC: y_j = n_j * 2 * 2(t-1)/t * V / B with V = 2 b s h, B = nvlink * 1e9 / 8.
    inst, fig = _figures(nvlink, tp)
    _, fig1 = _figures(None, tp)
    b, s, h = 2, inst.workload.seq_len, 64
    V, B = 2 * b * s * h, nvlink * 1e9 / 8
    want = np.array([n * 2 * 2 * (tp - 1) / tp * V / B for n in (1, 3, 0)])
    assert fig.y == pytest.approx(want, rel=1e-12)
    # added once to the forward and once to the backward time of a micro-batch
    assert fig.f - fig1.f == pytest.approx(want, rel=1e-9, abs=1e-18)
    assert fig.g - fig1.g == pytest.approx(want, rel=1e-9, abs=1e-18)
    assert fig.c - fig1.c == pytest.approx(2 * want, rel=1e-9, abs=1e-18)


@pytest.mark.parametrize("nvlink,tp", [(None, 4), (2400.0, 1), (None, 1)])
def test_no_nvlink_or_no_tp_costs_nothing(nvlink, tp):
    _, fig = _figures(nvlink, tp)
    _, fig1 = _figures(None, tp)
    assert not fig.y.any()
    assert np.array_equal(fig.f, fig1.f) and np.array_equal(fig.g, fig1.g)


def test_explicit_units_tp_bytes_per_token():
    # Unit figures: tp_bytes_per_token 1000 and 3000 (the third unit omits it: 0).
    # One stage over all three units, b = 2, s = 128, t = 4, B = 80 Gbit/s = 1e10 B/s:
    # y = 2(4-1)/4 * (1000 + 3000 + 0) * 2 * 128 / 1e10 = 1.5 * 1.024e6 / 1e10 = 1.536e-4 s.
    units = [{"name": f"u{i}", "params": 1e3, "fwd_flops_per_token": 1e6, "out_bytes_per_token": 8.0,
              "stored_bytes_per_token": 8.0, **({"tp_bytes_per_token": tb} if tb is not None else {})}
             for i, tb in enumerate((1000.0, 3000.0, None))]
    model = ModelSpec(name="u", units=units)
    inst, fig = _figures(80.0, 4, bounds=((0, 3),), model=model)
    assert inst.workload.seq_len == 128
    assert fig.y == pytest.approx([1.536e-4], rel=1e-12)
    ev = Evaluator(inst, fig.plan)
    # one stage, no communication: T = T_est = m * c, with c including 2 y
    m = fig.m
    assert float(ev.iteration_times()[0]) == pytest.approx(m * float(fig.c[0]), rel=1e-12)
    # c = (1 + 2) * F * b * s / (t * peak * mfu) + 2 y, F = 3 units * 1e6 FLOPs per token
    assert float(fig.c[0]) == pytest.approx(3 * 3e6 * 256 / (4 * 5e13) + 2 * 1.536e-4, rel=1e-12)
