"""GPU types (issue 25) in what a person reads: the summary, explain, the map, the
Gantt chart and the HTML report name the type per stage and per domain when the
instance has more than one type, and nothing changes for a one-type instance.
Explain's move of the slowest stage to a faster type is re-simulated: its figures are
the evaluator's on the moved plan, built again here by hand."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from rich.console import Console  # noqa: E402

import planner  # noqa: E402
import planner.presentation.plot as pp  # noqa: E402
from planner import Evaluator, Instance, Plan  # noqa: E402
from gpu_types_instances import one_type_named  # noqa: E402
from planner.presentation.display import instance_text, stage_rows  # noqa: E402
from planner.presentation.explain import explain  # noqa: E402
from planner.presentation.html_report import render  # noqa: E402
from planner.presentation.report import (STAGE_COLUMNS, TYPE_COLUMN, plan_summary, stage_columns,  # noqa: E402
                                         stage_table, summary_rows)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def mixed():
    return planner.load_instance("tiny-mixed")  # alpha, gamma: toy-1tf; beta: toy-2tf


def two_stages(inst, rows, tp=4):
    n = inst.num_units
    return Plan.build([(0, n // 2), (n // 2, n)], rows, tp=tp, micro_batch_size=1, instance=inst)


def two_classes(inst):
    """Two replicas on [toy-1tf, toy-2tf] (alpha, beta) and [toy-2tf, toy-1tf] (beta, gamma):
    two classes; replica 1's slow stage 1 (5 units) binds."""
    return Plan.build([(0, 5), (5, 10)], [["alpha", "beta"], ["beta", "gamma"]], tp=2, micro_batch_size=1,
                      instance=inst)


def text_of(renderable, width=120) -> str:
    con = Console(width=width, record=True)
    con.print(renderable)
    return con.export_text()


def test_summary_names_the_type_of_each_stage_and_domain(mixed):
    p = two_stages(mixed, [["alpha", "beta"], ["gamma", "beta"]], tp=2)
    ev = Evaluator(mixed, p).evaluate()
    assert ev.feasible, ev.violations
    cols = stage_columns(mixed)
    assert cols == STAGE_COLUMNS[:-1] + (TYPE_COLUMN, "domains")
    rows = stage_table(mixed, p, ev)
    k = cols.index(TYPE_COLUMN)
    assert [r[k] for r in rows] == ["toy-1tf x2", "toy-2tf x2"]  # alpha and gamma, beta twice
    assert all(len(r) == len(cols) for r in rows)
    # each stage's memory limit is its own type's: 72 MB on toy-1tf, 54 MB on toy-2tf
    m = cols.index("mem/GPU")
    assert rows[0][m].endswith("/72 MB") and rows[1][m].endswith("/54 MB")
    out = text_of(plan_summary(mixed, p, ev))
    assert "GPU type" in out
    line = next(l for l in out.splitlines() if "│     1 │" in l)
    assert "toy-2tf" in line and "beta" in line and "toy-1tf" not in line
    for dom, kind in (("alpha", "toy-1tf"), ("beta", "toy-2tf"), ("gamma", "toy-1tf")):
        assert any(l.split("│")[1].strip() == dom and l.split("│")[2].strip() == kind
                   for l in out.splitlines() if l.count("│") == 5), dom  # GPUs per domain: its type
    types = dict(summary_rows(mixed, p, ev))["GPU types"]
    assert "toy-1tf (0.5 TFLOP/s achieved, 0.08 GB): stage 0 on alpha, gamma, 4 of 28 GPUs" in types
    assert "toy-2tf (1 TFLOP/s achieved, 0.06 GB): stage 1 on beta, 4 of 8 GPUs" in types
    # the notebook rows and the instance text
    sr = stage_rows(mixed, p)
    assert [r["gpu_types"] for r in sr] == [["toy-1tf", "toy-1tf"], ["toy-2tf", "toy-2tf"]]
    assert sr[1]["memory_limit_gb"] == pytest.approx(0.06 * 0.9)
    assert "beta                  8 x toy-2tf" in instance_text(mixed)


def test_one_type_output_unchanged(mixed):
    """One type, whether [gpu] or one [[gpus]] entry every domain names: no type column,
    no 'GPU types' row, the same tables as before."""
    base = planner.load_instance("tiny-3dc")
    one = one_type_named(base)
    p = two_stages(base, [["alpha", "beta"]])
    for inst in (base, one):
        ev = Evaluator(inst, p).evaluate()
        assert stage_columns(inst) == STAGE_COLUMNS
        assert all(len(r) == len(STAGE_COLUMNS) for r in stage_table(inst, p, ev))
        assert "GPU types" not in dict(summary_rows(inst, p, ev))
        assert "gpu_types" not in stage_rows(inst, p)[0]
        assert "GPU type" not in text_of(plan_summary(inst, p, ev))
    assert stage_table(base, p, Evaluator(base, p).evaluate()) == stage_table(one, p, Evaluator(one, p).evaluate())


def test_explain_moves_the_slowest_stage_to_the_fastest_type_and_re_simulates(mixed):
    p = two_stages(mixed, [["alpha", "gamma"]])
    e = explain(mixed, p)
    ev = Evaluator(mixed, p).evaluate()
    j = max(range(2), key=lambda i: ev.compute_s[i])
    move = e.type_move
    assert move["stage"] == j and move["from_type"] == "toy-1tf" and move["to_type"] == "toy-2tf"
    assert move["domains"] == ["beta"]  # the only toy-2tf domain
    # the moved plan, built here, scored by the evaluator: the figures explain reports
    rows = [list(r) for r in p.placement]
    rows[0][j] = "beta"
    moved = p.model_copy(update={"placement": rows})
    T1 = float(Evaluator(mixed, moved).iteration_times()[0])
    assert move["moved_s"] == T1 and move["iteration_time_s"] == ev.iteration_time_s == e.iteration_time_s
    assert T1 < ev.iteration_time_s  # twice the speed on the slowest stage
    assert f"{T1:.4g} s instead of {ev.iteration_time_s:.4g} s" in e.gpu_type
    assert f"GPU type: stage {j}, the slowest" in str(e) and "runs on toy-1tf" in str(e)


def test_explain_says_when_the_slowest_stage_is_on_the_fastest_type(mixed):
    p = two_stages(mixed, [["beta", "beta"]], tp=4)  # both stages on toy-2tf (beta's 8 GPUs)
    e = explain(mixed, p)
    assert e.type_move is None and "runs on toy-2tf" in e.gpu_type and "It is the fastest type." in e.gpu_type
    # a faster type without the memory for the stage is not offered: at tp 2, units 0-6 take
    # 66.6 MB per GPU, within toy-1tf's 72 MB usable, over toy-2tf's 54
    heavy = Plan.build([(0, 7), (7, mixed.num_units)], [["alpha", "gamma"]], tp=2, micro_batch_size=1,
                       instance=mixed)
    fig = Evaluator(mixed, heavy).fig
    assert int(fig.c.argmax()) == 0
    assert mixed.memory_limit_of(mixed.gpu_types[1]) < fig.memory[0] <= mixed.memory_limit_of(mixed.gpu_types[0])
    e2 = explain(mixed, heavy)
    assert e2.type_move is None and "runs on toy-1tf" in e2.gpu_type
    assert "No faster type has the memory for it." in e2.gpu_type


def test_explain_of_a_one_type_plan_has_no_type_line():
    inst = planner.load_instance("tiny-3dc")
    e = explain(inst, two_stages(inst, [["alpha", "beta"]]))
    assert e.gpu_type == "" and e.type_move is None and "GPU type" not in str(e)


def test_gantt_and_map_name_the_types(mixed):
    p = two_stages(mixed, [["alpha", "beta"]])
    ax = pp.gantt(mixed, p).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "r0 stage 0 · alpha · toy-1tf" in labels and "r0 stage 1 · beta · toy-2tf" in labels
    ax = pp.draw(mixed, p).axes[0]
    texts = [t.get_text() for t in ax.texts if t.get_gid() == "domain-label"]
    assert any(t.startswith("beta\n8 x toy-2tf") for t in texts)
    assert any(t.startswith("alpha\n16 x toy-1tf") for t in texts)
    assert "28 x toy-1tf + 8 x toy-2tf" in ax.get_title()
    one = planner.load_instance("tiny-3dc")  # one type: as before
    ax = pp.draw(one, two_stages(one, [["alpha", "beta"]])).axes[0]
    assert any(t.get_text().startswith("alpha\n16 GPUs") for t in ax.texts if t.get_gid() == "domain-label")


def test_html_report_names_the_types(mixed):
    p = two_stages(mixed, [["alpha", "beta"]])
    page = render(mixed, p)
    assert "<th>GPU type</th>" in page
    assert "<td>beta</td><td>toy-2tf</td>" in page  # GPUs per domain
    assert "28 x toy-1tf + 8 x toy-2tf" in page and "GPU type: stage" in page
    # replicas with different rows of types: the schedule and the explanation too
    two = two_classes(mixed)
    assert Evaluator(mixed, two).evaluate().feasible
    page = render(mixed, two)
    assert "different rows of GPU types" not in page
    section = page[page.index('<section id="gantt">'):]
    assert "<svg" in section[:section.index("</section>")]  # the Gantt chart is drawn
    assert "2 rows of GPU types" in page and "GPU type: stage 1" in page and "Bottleneck:" in page


def test_cli_explain_and_evaluate_on_a_mixed_plan(tmp_path, mixed):
    from planner.cli import main

    p = two_stages(mixed, [["alpha", "gamma"]])
    path = tmp_path / "plan.json"
    path.write_text(p.to_json())
    res = CliRunner().invoke(main, ["explain", "tiny-mixed", str(path)])
    assert res.exit_code == 0, res.output
    assert "GPU type: stage" in res.stdout and "re-simulated" in res.stdout
    res = CliRunner().invoke(main, ["evaluate", "tiny-mixed", str(path)])
    assert res.exit_code == 0, res.output
    assert "GPU types" in res.stdout
    res = CliRunner().invoke(main, ["explain", "tiny-mixed", str(path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["type_move"]["to_type"] == "toy-2tf" and doc["type_move"]["domains"] == ["beta"]


# -- plans whose replicas run on different rows of GPU types (classes) ---------------------
def _variant(inst, peak=1.0, stage_flops=None, plan=None):
    """``inst`` with every type's peak times ``peak`` and, for ``stage_flops = (j, s)``, the
    FLOPs of the units of ``plan``'s stage j times ``s``: an independent way to make compute
    faster (tiny-mixed has no NVLink figure and no unit overhead, so c is FLOPs over speed)."""
    from dataclasses import asdict

    from planner.problem.model import ModelSpec

    data = inst.to_dict()
    units = [asdict(u) for u in inst.units]
    if stage_flops is not None:
        j, s = stage_flops
        a, e = plan.bounds()[j]
        for u in units[a:e]:
            u["fwd_flops_per_token"] *= s
    data["workload"]["model"] = ModelSpec(name="tiny-units", units=units)
    for g in data["gpus"]:
        g["peak_tflops"] *= peak
    return Instance.from_dict(data)


def _T(inst, plan) -> float:
    return float(Evaluator(inst, plan).iteration_times()[0])


def test_explain_of_two_classes_equals_the_evaluators_re_simulations(mixed):
    p = two_classes(mixed)
    ev = Evaluator(mixed, p)
    assert ev.fig.classes == 2
    assert all(g.unit_overhead_ms == 0 and g.nvlink_bandwidth_gbps is None for g in mixed.gpu_types)
    assert _T(_variant(mixed), p) == _T(mixed, p)  # the rebuilt instance scores the plan as the packaged one
    e = explain(mixed, p)
    T0 = _T(mixed, p)
    assert e.iteration_time_s == T0
    by = {s.resource: s for s in e.sensitivities}
    # every stage 10% faster: every type's peak x 1.1, a new instance, the evaluator
    assert by["compute of every stage (GPU speed)"].iteration_time_s == pytest.approx(
        _T(_variant(mixed, peak=1.1), p), rel=1e-12)
    # one stage 10% faster in both replicas (on both types): its units' FLOPs / 1.1
    for j in range(2):
        want = _T(_variant(mixed, stage_flops=(j, 1 / 1.1), plan=p), p)
        assert by[f"compute of stage {j}"].iteration_time_s == pytest.approx(want, rel=1e-12)
        assert by[f"compute of stage {j}"].gain == pytest.approx((T0 - want) / T0, rel=1e-9)
    # stage 1 holds the binding replica's slow copy: relaxing it helps most
    assert by["compute of stage 1"].gain > by["compute of stage 0"].gain > 0
    # the bottleneck is the largest gain, and every link figure is the evaluator's on a new instance
    assert e.bottleneck.gain == max(s.gain for s in e.sensitivities)
    for s in e.sensitivities:
        if s.kind == "link_bandwidth":
            a, b = s.target.split("-")
            faster = mixed.with_link(a, b, bandwidth_gbps=next(
                l.bandwidth_gbps for l in mixed.links if (l.a, l.b) == (a, b)) * 1.1)
            assert s.iteration_time_s == pytest.approx(_T(faster, p), rel=1e-12)


def test_explain_moves_the_binding_class_slow_stage_and_re_simulates(mixed):
    # class times: replica 0 [toy-1tf, toy-2tf], replica 1 [toy-2tf, toy-1tf]; replica 1 binds
    # (its slow stage 1 holds the heavier half), its stage 1 on gamma (toy-1tf) is the slowest;
    # moving it to beta (toy-2tf, 4 GPUs free) is re-simulated on the whole plan
    p = two_classes(mixed)
    ev = Evaluator(mixed, p)
    times = ev.class_times()[0]
    assert times.max() == ev.iteration_times()[0] and int(times.argmax()) == int(ev.fig.replica_class[1])
    e = explain(mixed, p)
    move = e.type_move
    assert move["stage"] == 1 and move["from_type"] == "toy-1tf" and move["to_type"] == "toy-2tf"
    assert move["replicas"] == [1] and move["domains"] == ["beta"]  # replica 0's stage 1 is on beta already
    moved = p.model_copy(update={"placement": [["alpha", "beta"], ["beta", "beta"]]})
    T1 = _T(mixed, moved)
    assert move["moved_s"] == T1 and move["iteration_time_s"] == e.iteration_time_s
    assert T1 < e.iteration_time_s
    assert "in replica 1 (the binding class: 2 rows of GPU types" in e.gpu_type and "runs on toy-1tf" in e.gpu_type
    assert f"{T1:.4g} s instead of {e.iteration_time_s:.4g} s" in e.gpu_type


def test_gantt_of_two_classes_draws_each_replica_at_its_types(mixed):
    from planner.scoring.trace import trace

    p = two_classes(mixed)
    T = _T(mixed, p)
    tr = trace(mixed, p)
    assert tr.iteration_time_s == pytest.approx(T, rel=1e-9, abs=0)
    # each class's makespan is the evaluator's simulation of that class
    assert tr.class_time_s == pytest.approx(Evaluator(mixed, p).class_times()[0], rel=1e-9)
    # every op lasts its own type's closed form: F tokens / (t peak mfu), backward twice that
    tokens = p.micro_batch_size * mixed.workload.seq_len
    for op in tr.ops:
        a, e = p.bounds()[op.stage]
        gpu = mixed.domain_gpu(p.placement[op.replica][op.stage])
        f = sum(u.fwd_flops_per_token for u in mixed.units[a:e]) * tokens / (p.tp * gpu.flops_per_s)
        assert op.end - op.start == pytest.approx(f * (1 if op.kind == "F" else 2), rel=1e-12)
    ax = pp.gantt(mixed, p).axes[0]
    k = 1e3  # T < 1 s: milliseconds
    ends = [patch.get_x() + patch.get_width() for patch in ax.patches
            if patch.get_gid() in ("compute:F", "compute:B", "allreduce")]
    assert max(ends) == pytest.approx(T * k, rel=1e-9)  # the drawn makespan is the evaluator's T
    line = next(l for l in ax.get_lines() if l.get_gid() == "iteration-end")
    assert line.get_xdata()[0] == pytest.approx(T * k, rel=1e-12)
    title = ax.get_title()
    assert "2 rows of GPU types" in title and "binding (critical path): toy-2tf / toy-1tf, replica 1" in title
    # replica 0's stage-0 bars (toy-1tf) are twice as long as replica 1's (toy-2tf)
    w = {(pt.op.replica, pt.op.stage): pt.get_width() for pt in ax.patches if pt.get_gid() == "compute:F"}
    assert w[(0, 0)] == pytest.approx(2 * w[(1, 0)], rel=1e-12)
    crit = [pt.segment for pt in ax.patches if pt.get_gid() == "critical"]
    assert crit and {s.replica for s in crit} == {1}
