"""Explanations name a bottleneck the evaluator confirms; what-if helpers
return new instances; text and HTML views carry the plan's figures."""

import pytest

from planner import Evaluator, InputError, evaluate, explain, load_instance, plan as make_plan
from helpers import unit_instances


def relaxed_time(inst, plan, link_index, bandwidth=None, latency=None):
    link = inst.links[link_index]
    new = inst.with_link(link.a, link.b,
                         bandwidth_gbps=link.bandwidth_gbps * bandwidth if bandwidth else None,
                         latency_ms=link.latency_ms * latency if latency else None)
    return float(Evaluator(new, plan).iteration_times()[0])


@pytest.mark.parametrize("name", unit_instances())
def test_bottleneck_confirmed_by_the_evaluator(name):
    from gpu_types_instances import plan_any

    inst = load_instance(name)
    p = plan_any(inst)  # a GPU-type instance: a hand plan while the planners refuse it
    e = explain(inst, p)
    T0 = evaluate(inst, p).iteration_time_s
    assert e.iteration_time_s == pytest.approx(T0, rel=1e-12)
    b = e.bottleneck
    assert b is not None and b.gain >= max(s.gain for s in e.sensitivities) - 1e-15
    # independently: relax each WAN link the plan uses by 10% through a new instance
    used = {l for row in p.placement for a, c in zip(row, row[1:]) if a != c
            for l in inst.direct_routes[(a, c)].links}  # SPEC v3: a linked pair uses its link
    for l in sorted(used)[:6]:
        t_bw = relaxed_time(inst, p, l, bandwidth=1.1)
        assert (T0 - t_bw) / T0 <= b.gain + 1e-12
        name_l = f"{inst.links[l].a}-{inst.links[l].b}"
        mine = [s for s in e.sensitivities if s.resource == f"bandwidth of link {name_l}"]
        assert mine and mine[0].iteration_time_s == pytest.approx(t_bw, rel=1e-12)
        if inst.links[l].latency_ms > 0:
            t_lat = relaxed_time(inst, p, l, latency=0.9)
            assert (T0 - t_lat) / T0 <= b.gain + 1e-12
    # the bottleneck relaxation really shortens the iteration by the stated amount
    if b.kind == "link_bandwidth":
        l = next(i for i, k in enumerate(inst.links) if f"{k.a}-{k.b}" == b.target)
        assert relaxed_time(inst, p, l, bandwidth=1.1) == pytest.approx(b.iteration_time_s, rel=1e-12)
    text = str(e)
    assert "Bottleneck:" in text and b.resource in text


def test_what_if_returns_new_objects():
    inst = load_instance("tiny-3dc")
    p = make_plan(inst)
    fast = inst.with_link("beta", "gamma", bandwidth_gbps=500.0)
    assert inst.links[1].bandwidth_gbps == 5.0 and fast.links[1].bandwidth_gbps == 500.0
    assert evaluate(fast, p).iteration_time_s <= evaluate(inst, p).iteration_time_s
    more = inst.with_domain("beta", gpus=64)
    assert more.domain("beta").gpus == 64 and inst.domain("beta").gpus == 8
    with pytest.raises(InputError):
        inst.with_domain("beta", gpus=0)
    with pytest.raises(InputError):
        inst.with_link("alpha", "nowhere", bandwidth_gbps=1.0)
    bigger = inst.with_model("gpt3-1.3b")
    assert bigger.workload.model.name == "gpt3-1.3b" and inst.workload.model.name == "tiny"


def test_text_and_html_views():
    inst = load_instance("tiny-3dc")
    p = make_plan(inst)
    assert "tiny-3dc" in str(inst) and "alpha" in inst._repr_html_()
    s, h = str(p), p._repr_html_()
    assert f"{p.replicas} replica(s)" in s and "<table>" in h
    rows = p.to_dataframe(inst)
    assert len(rows) == p.num_stages
    tr = p.to_dataframe(inst, "transfers")
    assert len(tr) == p.replicas * (p.num_stages - 1)


def test_plot_shortcuts():
    import matplotlib

    matplotlib.use("Agg")
    inst = load_instance("tiny-3dc")
    p = make_plan(inst)
    assert p.gantt(inst).axes and inst.draw(p).axes


def _mid_crossing_line(schedule="1f1b"):
    """Four one-unit stages, f = 1 s and g = 2 s, nothing crossing boundaries (x = 0),
    stages 0-1 in domain a and 2-3 in b, one link of 1 s latency; m = 8."""
    from planner import Plan
    from planner.problem.model import ModelSpec

    from helpers import make_instance

    gpu = {"name": "G", "peak_tflops": 100.0, "memory_gb": 80.0, "mfu": 0.5}
    units = [{"name": f"u{i}", "params": 1e6, "fwd_flops_per_token": 5e13 / 128, "out_bytes_per_token": 0.0,
              "stored_bytes_per_token": 0.0} for i in range(4)]
    inst = make_instance([("a", 8), ("b", 8)], [("a", "b", 10.0, 1000.0)], model=ModelSpec(name="m", units=units),
                         gpu=gpu, global_batch_size=8, seq_len=128, micro_batch_sizes=[1], tensor_parallel=[1])
    return inst, Plan.build([(i, i + 1) for i in range(4)], [["a", "a", "b", "b"]], tp=1, micro_batch_size=1,
                            instance=inst, schedule=schedule)


def test_explain_names_the_window_that_sets_the_estimate_period():
    # w = (4, 3, 2, 1).  The window [1, 2] around the crossing holds 2 micro-batches over a
    # 3 + 3 + 2 * 1 = 8 s round trip: a 4 s period, above c = 3 s and every other window
    # (suffix [1, 3]: 11 / 3 s; [0, 3]: 14 / 4 s).  T_est = 7 * 4 + 14 = 42 s.
    inst, p = _mid_crossing_line()
    e = explain(inst, p)
    assert e.estimate_s == pytest.approx(42.0, rel=1e-12)
    text = " ".join(str(e).split())
    assert ("the period is set by the window between stages 1 and 2 (replica 0): a 8 s round trip "
            "with 2 micro-batches per round trip, a 4 s period") in text
    assert "Pipeline period (simulation)" not in text


def test_explain_period_without_a_binding_window():
    # the same pipeline in one domain: no latency, every window's period is 3 s = c,
    # so the compute of a stage sets it (the first of the equal stages); gpipe says so
    from planner import Plan

    inst, _ = _mid_crossing_line()
    one = Plan.build([(i, i + 1) for i in range(4)], [["a"] * 4], tp=1, micro_batch_size=1, instance=inst)
    assert "the period is set by the compute of stage 0" in str(explain(inst, one))
    inst, g = _mid_crossing_line("gpipe")
    assert "forward and backward phases apart (gpipe)" in str(explain(inst, g))


def test_link_utilisation_counts_outer_syncs_once_every_h_steps():
    """Under diloco (SPEC 11) a link carrying only the outer rings is busy 1/H of their
    volume per step: ten times busier at H = 10 than at H = 100 (the inner step does not
    depend on H), and the rings of a grouped plan stay below 100% busy."""
    from planner.problem.dpsync import DpSync
    from planner.solvers.syncchoice import group_plans

    inst = load_instance("diloco-70b")
    best = min(group_plans(inst), key=lambda p: evaluate(inst, p).effective_time_s)
    got = {}
    for H in (10, 100):
        p = best.model_copy(update={"dp_sync": DpSync(mode="diloco", H=H, bits=4)})
        got[H] = explain(inst, p).link_utilisation
    inner = {frozenset((row[k], row[k + 1])) for row in best.placement for k in range(best.num_stages - 1)}
    outer_only = [f"{link.a}-{link.b}" for link in inst.links if frozenset((link.a, link.b)) not in inner
                  and f"{link.a}-{link.b}" in got[10]]
    assert len(outer_only) == 2  # two groups of two sites: the links joining the groups' sites of one stage
    for name in outer_only:
        assert got[10][name] == pytest.approx(10 * got[100][name], rel=1e-9)
    assert max(got[100].values()) < 1.0


def test_link_utilisation_of_one_diloco_group_is_its_inner_sync_alone():
    """With every replica's stage 0 in one domain (M = 1) diloco has no outer sync (SPEC
    11) even where a later stage spans two domains: the links carry the pipeline and
    that stage's inner ring every step, as under the plain 16-bit every-step sync, and
    nothing once every H steps."""
    from planner import Plan
    from planner.problem.dpsync import DpSync

    inst = load_instance("diloco-70b")
    a, b, c = "us-east-1", "us-west-2", "ap-northeast-1"
    S = 8
    bounds = [(0, 11)] + [(1 + round(80 * k / S), 1 + round(80 * (k + 1) / S)) for k in range(1, S - 1)] + [(71, 82)]
    rows = [[a] * 4 + [b] * 4] * 2 + [[a] * 4 + [c] * 4] * 2  # stages 4-7 in two domains
    plain = Plan.build(bounds, rows, tp=8, micro_batch_size=1, instance=inst)
    one = plain.model_copy(update={"dp_sync": DpSync(mode="diloco", H=10, bits=4)})
    assert Evaluator(inst, one).evaluate().feasible
    got, want = explain(inst, one).link_utilisation, explain(inst, plain).link_utilisation
    ratio = evaluate(inst, plain).iteration_time_s / evaluate(inst, one).iteration_time_s
    assert got.keys() == want.keys() and (f"{b}-{c}" in got or f"{c}-{b}" in got)
    for name in got:
        assert got[name] == pytest.approx(want[name] * ratio, rel=1e-9)
