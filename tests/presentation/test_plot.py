"""Figures: the Gantt chart, the map and the comparison draw what the trace,
the instance and the plans say (counted through the artists' gids)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import planner  # noqa: E402
import planner.presentation.plot as pp  # noqa: E402
from planner.problem.plan import Plan  # noqa: E402
from planner.solvers.registry import finish  # noqa: E402
from planner.scoring.trace import trace  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def tiny():
    inst = planner.load_instance("tiny-3dc")
    return inst, planner.plan(inst)


def gid(ax, name):
    return [a for a in (*ax.patches, *ax.lines, *ax.texts, *ax.collections) if a.get_gid() == name]


def saved(fig, path):
    fig.savefig(path, dpi=60)
    assert path.stat().st_size > 5000  # a real picture, not an empty canvas
    return path


def test_gantt_draws_every_op_transfer_and_the_critical_path(tiny, tmp_path):
    inst, p = tiny
    tr = trace(inst, p)
    R, S, m = p.replicas, p.num_stages, p.num_micro_batches
    assert R <= 4  # every replica is drawn
    fig = pp.gantt(inst, p)
    ax = fig.axes[0]
    ms = 1e3  # T < 1 s: the axis is in milliseconds
    assert "ms" in ax.get_xlabel()

    fwd, bwd = gid(ax, "compute:F"), gid(ax, "compute:B")
    assert len(fwd) == len(bwd) == R * S * m
    assert len(fwd) + len(bwd) == len(tr.ops)
    # each bar sits where its op ran
    bars = {(b.op.replica, b.op.stage, b.op.kind, b.op.micro_batch): b for b in fwd + bwd}
    for op in tr.ops:
        b = bars[(op.replica, op.stage, op.kind, op.micro_batch)]
        assert b.get_x() == pytest.approx(op.start * ms)
        assert b.get_width() == pytest.approx((op.end - op.start) * ms)
    # compute rows of one replica/stage share a y; different rows differ
    rows = {(b.op.replica, b.op.stage): b.get_y() for b in fwd}
    assert len(set(rows.values())) == R * S

    sends, lats = gid(ax, "transfer:send"), gid(ax, "transfer:latency")
    assert len(sends) == len(tr.transfers) == 2 * (S - 1) * R * m
    assert len(lats) == sum(t.arrive > t.end for t in tr.transfers) > 0
    assert sum(b.get_width() for b in sends) == pytest.approx(sum(t.end - t.start for t in tr.transfers) * ms)

    crit = gid(ax, "critical")
    assert len(crit) == len(tr.critical_path)
    assert sum(b.get_width() for b in crit) == pytest.approx(p.predicted.iteration_time_s * ms, rel=1e-9)
    assert {b.segment.kind for b in crit} >= {"F", "B", "send"}

    labels = [t.get_text() for t in ax.get_yticklabels()]
    for r in range(R):
        for j in range(S):
            assert f"r{r} stage {j} · {p.placement[r][j]}" in labels
    assert sum("↔" in s for s in labels) == R * (S - 1)  # one transfer row per boundary
    title = ax.get_title()
    assert inst.name in title and p.schedule_kind in title
    assert f"{p.predicted.iteration_time_s * ms:.3g} ms" in title
    assert "shown" not in title
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"forward", "backward", "critical path"} <= set(legend)
    assert gid(ax, "mb-label")  # micro-batch numbers on the wide bars
    saved(fig, tmp_path / "gantt.png")


def test_gantt_limits_rows_to_some_replicas():
    inst = planner.load_instance("edwc-llama2-13b")
    p = planner.plan(inst)
    tr = trace(inst, p)
    R, S, m = p.replicas, p.num_stages, p.num_micro_batches
    assert R > 4
    fig = pp.gantt(inst, p)
    ax = fig.axes[0]
    drawn = sorted({0, tr.bottleneck_replica})
    assert ax.get_xlabel() == "time (s)"
    assert len(gid(ax, "compute:F")) + len(gid(ax, "compute:B")) == 2 * S * m * len(drawn)
    assert {b.op.replica for b in gid(ax, "compute:F")} == set(drawn)
    assert len(gid(ax, "transfer:send")) == 2 * (S - 1) * m * len(drawn)
    assert f"of {R} shown" in ax.get_title()
    # the bottleneck replica is drawn, so the whole critical path is
    assert sum(b.get_width() for b in gid(ax, "critical")) == pytest.approx(tr.iteration_time_s, rel=1e-9)
    # gradient synchronisation after each stage's end, on every drawn row
    ar = gid(ax, "allreduce")
    assert len(ar) == S * len(drawn)
    for b in ar:
        assert b.get_x() + b.get_width() <= tr.iteration_time_s * (1 + 1e-9)

    # an explicit list, into a given axes
    fig2, ax2 = plt.subplots()
    assert pp.gantt(inst, p, ax=ax2, replicas=[3], critical=False) is fig2
    assert {b.op.replica for b in gid(ax2, "compute:B")} == {3}
    assert not gid(ax2, "critical")
    assert "replica 3 of" in ax2.get_title()


def test_gantt_single_stage_has_no_transfer_rows(tmp_path):
    inst = planner.load_instance("tiny-3dc")
    p = finish(inst, Plan.build([(0, inst.num_units)], [["alpha"]], tp=4, micro_batch_size=4,
                                instance=inst, schedule="1f1b"), "manual", 0.0)
    fig = pp.gantt(inst, p)
    ax = fig.axes[0]
    assert len(gid(ax, "compute:F")) == p.num_micro_batches
    assert not gid(ax, "transfer:send")
    assert sum(b.get_width() for b in gid(ax, "critical")) == pytest.approx(
        p.predicted.iteration_time_s * 1e3, rel=1e-9)
    saved(fig, tmp_path / "gantt1.png")


def test_compare_one_bar_per_plan(tiny, tmp_path):
    inst, greedy = tiny
    other = finish(inst, Plan.build([(0, inst.num_units)], [["alpha"]], tp=4, micro_batch_size=4,
                                    instance=inst, schedule="1f1b"), "manual", 0.0)
    fig = pp.compare({"greedy": greedy, "one stage": other})
    ax = fig.axes[0]
    bars = gid(ax, "plan")
    assert [b.get_label() for b in bars] == ["greedy", "one stage"]
    assert [b.get_height() for b in bars] == pytest.approx(
        [greedy.predicted.iteration_time_s, other.predicted.iteration_time_s])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["greedy", "one stage"]
    values = [t.get_text() for t in gid(ax, "value-label")]
    assert values == [f"{greedy.predicted.iteration_time_s * 1e3:.3g} ms",
                      f"{other.predicted.iteration_time_s * 1e3:.3g} ms"]
    (lb,) = gid(ax, "lower-bound")
    assert lb.get_ydata()[0] == pytest.approx(greedy.predicted.lower_bound_s)
    (est,) = gid(ax, "estimate")
    assert list(est.get_ydata()) == pytest.approx([greedy.predicted.estimate_s, other.predicted.estimate_s])
    saved(fig, tmp_path / "compare.png")

    # a list, another metric, explicit labels: no lower bound for a throughput
    fig = pp.compare([greedy, other], metric="throughput_tokens_per_s", labels=["a", "b"])
    ax = fig.axes[0]
    assert [b.get_height() for b in gid(ax, "plan")] == pytest.approx(
        [greedy.predicted.throughput_tokens_per_s, other.predicted.throughput_tokens_per_s])
    assert [b.get_label() for b in gid(ax, "plan")] == ["a", "b"]
    assert not gid(ax, "lower-bound") and not gid(ax, "estimate")
    # default labels from the solver names
    ax = pp.compare([greedy, other]).axes[0]
    assert [b.get_label() for b in gid(ax, "plan")] == ["greedy", "manual"]
    with pytest.raises(ValueError):
        pp.compare([Plan.from_json(greedy.model_copy(update={"predicted": None}).to_json())])


def test_draw_nodes_links_and_flows(tiny, tmp_path):
    inst, p = tiny  # no coordinates: spring layout
    fig = pp.draw(inst)
    ax = fig.axes[0]
    (nodes,) = gid(ax, "domain")
    assert len(nodes.get_offsets()) == len(inst.domains)
    assert len(gid(ax, "link")) == len(inst.links)
    labels = [t.get_text() for t in gid(ax, "link-label")]
    assert len(labels) == len(inst.links)
    for link in inst.links:
        assert f"{link.bandwidth_gbps:g} Gbit/s / {link.latency_ms:g} ms" in labels
    names = [t.get_text() for t in gid(ax, "domain-label")]
    assert [n.split("\n")[0] for n in names] == list(inst.domain_names)
    assert not gid(ax, "flow")
    saved(fig, tmp_path / "map.png")

    # with the plan: the links its pipelines cross, with flow counts, and GPUs used
    fig = pp.draw(inst, p)
    ax = fig.axes[0]
    flows = pp.pipeline_flows(inst, p)
    expected = {}
    for row in p.placement:
        for u, v in zip(row, row[1:]):
            if u != v:
                for li in inst.routes[(u, v)].links:
                    expected[li] = expected.get(li, 0) + 1
    assert dict(flows) == expected
    assert len(gid(ax, "flow")) == len(flows) > 0
    assert sorted(t.get_text() for t in gid(ax, "flow-label")) == sorted(
        f"{n} flow{'s' if n > 1 else ''}" for n in flows.values())
    used = p.gpus_per_domain()
    for text in (t.get_text() for t in gid(ax, "domain-label")):
        name = text.split("\n")[0]
        assert f"{used.get(name, 0)} used" in text
    saved(fig, tmp_path / "map-plan.png")


def test_draw_uses_coordinates_when_every_domain_has_them(tmp_path):
    inst = planner.load_instance("edwc-llama2-13b")
    fig = pp.draw(inst)
    ax = fig.axes[0]
    (nodes,) = gid(ax, "domain")
    assert nodes.get_offsets().ravel().tolist() == pytest.approx([v for d in inst.domains for v in (d.lon, d.lat)])
    assert len(gid(ax, "link")) == len(inst.links) == len(gid(ax, "link-label"))
    assert "longitude" in ax.get_xlabel()
    saved(fig, tmp_path / "map-geo.png")


def test_gantt_refuses_an_iteration_that_never_ends(tiny):
    inst, p = tiny
    base = planner.NetworkStates.base(inst)
    bw = base.bandwidth_gbps.copy()
    bw[0, 0] = 0.0  # alpha-beta down: the plan's pipelines cross it
    with pytest.raises(ValueError, match="never ends"):
        pp.gantt(inst, p, states=planner.NetworkStates(bw, base.latency_ms))


def test_names_the_font_cannot_draw_are_transliterated_without_warnings():
    """A domain named in Chinese (the EDWC hubs) never renders as boxes: the default
    font draws it, or it is transliterated; no "Glyph missing" warning either way."""
    import warnings

    from helpers import make_instance
    from planner.presentation.plot import _has_glyph, printable

    inst = make_instance([("北京", 4), ("贵州", 4)], [("北京", "贵州", 10.0, 20.0)])
    inst = inst.model_copy(update={"name": "东数西算"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a Glyph missing warning fails the test
        fig = pp.draw(inst)
        fig.canvas.draw()
    texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    drawn = "".join(texts)
    assert all(_has_glyph(c) for c in drawn if not c.isspace()), drawn
    assert printable("北京") in drawn
    assert printable("us-east-1") == "us-east-1"
    if not _has_glyph("北"):
        assert printable("北京") == "Bei Jing"
