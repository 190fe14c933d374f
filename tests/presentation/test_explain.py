"""Explanations name a bottleneck the evaluator confirms; what-if helpers
return new instances; text and HTML views carry the plan's figures."""

import pytest

from planner import Evaluator, InputError, evaluate, explain, load_instance, plan as make_plan
from planner.problem.io import available


def relaxed_time(inst, plan, link_index, bandwidth=None, latency=None):
    link = inst.links[link_index]
    new = inst.with_link(link.a, link.b,
                         bandwidth_gbps=link.bandwidth_gbps * bandwidth if bandwidth else None,
                         latency_ms=link.latency_ms * latency if latency else None)
    return float(Evaluator(new, plan).iteration_times()[0])


@pytest.mark.parametrize("name", available("instances"))
def test_bottleneck_confirmed_by_the_evaluator(name):
    inst = load_instance(name)
    p = make_plan(inst)
    e = explain(inst, p)
    T0 = evaluate(inst, p).iteration_time_s
    assert e.iteration_time_s == pytest.approx(T0, rel=1e-12)
    b = e.bottleneck
    assert b is not None and b.gain >= max(s.gain for s in e.sensitivities) - 1e-15
    # independently: relax each WAN link the plan uses by 10% through a new instance
    used = {l for row in p.placement for a, c in zip(row, row[1:]) if a != c
            for l in inst.routes[(a, c)].links}
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
