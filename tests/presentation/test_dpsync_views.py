"""Issue 26 (SPEC v3 section 11): every view shows a plan's data-parallel sync option with
the evaluator's own figures (the sync, H, bits, fragments, overlap, raw and effective
throughput, the quality factor and its source, the per-step trade-off), and a plain plan's
views stay as they were.  The plans: LLaMA-2 13B on ``diloco-13b`` (4 sites x 128
A100-80GB, 10 Gbit/s), two replicas of one tp-8 stage per site, so M = 4 groups."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from planner import Plan, load_instance
from planner.problem.dpsync import DpSync
from planner.scoring.evaluator import Evaluator
from planner.presentation.display import plan_text
from planner.presentation.report import _fmt_s, summary_rows, sync_figures

GBS_SEQ = 1024 * 4096
SYNCS = {
    "diloco": DpSync(mode="diloco", H=30, bits=4),
    "streaming": DpSync(mode="streaming", H=100, bits=8, fragments=2, overlap=1),
    "every_step": DpSync(mode="every_step", bits=8),
}


@pytest.fixture(scope="module")
def inst():
    return load_instance("diloco-13b")


def _plan(inst, sync: DpSync | None) -> Plan:
    rows = [[d.name] for d in inst.domains for _ in range(2)]
    p = Plan.build([(0, inst.num_units)], rows, tp=8, micro_batch_size=1, instance=inst)
    return p if sync is None else p.model_copy(update={"dp_sync": sync})


@pytest.fixture(scope="module")
def evaluated(inst):
    out = {}
    for key, sync in SYNCS.items():
        plan = _plan(inst, sync)
        out[key] = (plan, Evaluator(inst, plan).evaluate())
    return out


@pytest.mark.parametrize("key", list(SYNCS))
def test_sync_figures_are_the_evaluators(inst, evaluated, key):
    """Every figure of sync_figures is the evaluator's; the per-step time is that of the same
    plan without dp_sync, simulated apart; the ratio and the effective tokens are the SPEC 11
    closed forms of those figures; M = 4 and e from the first covering row."""
    plan, ev = evaluated[key]
    assert ev.feasible, ev.violations
    f = sync_figures(ev)
    sync = SYNCS[key]
    assert f["label"] == sync.label() and f["mode"] == sync.mode and f["bits"] == sync.bits
    assert f["H"] == (sync.H if sync.outer else None)
    assert (f["fragments"], f["overlap"]) == ((2, 1) if key == "streaming" else (None, None))
    assert f["groups"] == ev.sync_groups == 4
    assert f["inner_time_s"] == ev.iteration_time_s and f["effective_time_s"] == ev.effective_time_s
    assert f["effective_estimate_s"] == ev.effective_estimate_s
    plain = Evaluator(inst, _plan(inst, None))
    per = float(plain.iteration_times()[0])
    assert f["per_step_time_s"] == pytest.approx(per, rel=1e-12)
    e = {"diloco": 0.92, "streaming": 0.76, "every_step": 1.0}[key]  # rows 3, 4 (M=4, H<=30 / <=100), 1
    assert f["quality_factor"] == ev.quality_factor == e
    assert f["quality_source"] == ev.quality_source and f["quality_source"]
    assert f["effective_tokens_per_s"] == pytest.approx(GBS_SEQ * e / ev.effective_time_s, rel=1e-12)
    assert f["throughput_tokens_per_s"] == pytest.approx(GBS_SEQ / ev.effective_time_s, rel=1e-12)
    assert f["per_step_ratio"] == pytest.approx(per * e / ev.effective_time_s, rel=1e-12)
    if key == "every_step":
        assert ev.effective_time_s == ev.iteration_time_s  # SPEC 11: T_eff = T
    else:
        assert ev.effective_time_s >= ev.iteration_time_s  # outer syncs only add time


def test_the_regime_diloco_beats_the_per_step_sync(evaluated):
    """diloco-13b's point: across 10 Gbit/s links, the per-step 16-bit ring costs more per
    effective token than DiLoCo every 30 steps at 4 bits."""
    _, ev = evaluated["diloco"]
    assert sync_figures(ev)["per_step_ratio"] > 1


@pytest.mark.parametrize("key", list(SYNCS))
def test_summary_rows_show_the_sync(inst, evaluated, key):
    plan, ev = evaluated[key]
    f = sync_figures(ev)
    rows = dict(summary_rows(inst, plan, ev))
    assert rows["dp sync"].startswith(f"{f['label']}, 4 group(s)")
    assert f"{f['throughput_tokens_per_s']:,.0f} tokens/s raw" in rows["throughput"]
    assert f"{f['effective_tokens_per_s']:,.0f} effective tokens/s" in rows["throughput"]
    assert f"e = {f['quality_factor']:.3g} ({f['quality_source']})" == rows["quality"]
    ratio = f["per_step_ratio"]
    assert _fmt_s(f["per_step_time_s"]) in rows["per-step sync"]
    how = f"{ratio:.3g} x slower" if ratio > 1 else f"{1 / ratio:.3g} x faster"
    assert how in rows["per-step sync"]
    if key != "every_step":
        assert rows["effective"].startswith(_fmt_s(ev.effective_time_s))
        assert rows["inner step"].startswith(_fmt_s(ev.iteration_time_s))
    assert f"dp sync: {f['label']}" in plan_text(plan)


def test_plain_plan_views_unchanged(inst):
    """No dp_sync and an explicit every-step 16-bit sync show the same rows, without any
    sync row, and the same plan text and explanation keys as before the option existed."""
    from planner.presentation.explain import explain

    bare = _plan(inst, None)
    written = _plan(inst, DpSync())
    ev0, ev1 = Evaluator(inst, bare).evaluate(), Evaluator(inst, written).evaluate()
    assert sync_figures(ev0) is None and sync_figures(ev1) is None
    r0, r1 = summary_rows(inst, bare, ev0), summary_rows(inst, written, ev1)
    assert r0 == r1
    assert [k for k, _ in r0] == ["instance", "shape", "iteration", "throughput", "cost"]
    assert plan_text(bare) == plan_text(written) and "dp sync" not in plan_text(bare)
    d = explain(inst, bare).to_dict()
    assert "dp_sync" not in d


def test_explain_shows_the_sync(inst, evaluated):
    from planner.presentation.explain import explain

    plan, ev = evaluated["diloco"]
    e = explain(inst, plan)
    assert e.dp_sync == sync_figures(ev)
    text = str(e)
    assert f"Data-parallel sync: {SYNCS['diloco'].label()} over 4 group(s)" in text
    assert f"{ev.effective_time_s:.4g} s per step with the outer syncs" in text
    assert f"e = {ev.quality_factor:.3g}" in text and "Per-step sync: the same placement" in text
    assert e.to_dict()["dp_sync"]["per_step_time_s"] == ev.per_step_time_s


def test_evaluate_json_and_html_report(inst, evaluated, tmp_path):
    from click.testing import CliRunner

    from planner.cli import main
    from planner.presentation.html_report import render

    plan, ev = evaluated["streaming"]
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    res = CliRunner().invoke(main, ["evaluate", "diloco-13b", str(path), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got["dp_sync"] == SYNCS["streaming"].to_dict() == ev.dp_sync
    for key in ("effective_time_s", "effective_estimate_s", "quality_factor", "quality_source",
                "effective_tokens_per_s", "throughput_tokens_per_s", "per_step_time_s", "sync_groups",
                "iteration_time_s"):
        assert got[key] == getattr(ev, key), key
    page = render(inst, plan)
    f = sync_figures(ev)
    assert f["label"] in page and "per-step 16-bit sync would take" in page
    assert f"{f['effective_tokens_per_s']:,.0f} effective tokens/s" in page


def _export(inst, plan, fmt, version=None):
    from planner.presentation.export import export

    return export(inst, plan, fmt, version)


def test_export_torchtitan_writes_fault_tolerance(inst, evaluated):
    """torchtitan 0.2.2 (TOML job file): [fault_tolerance] carries the plan's H, mode and
    quantisation (TorchFT's keys); what it cannot say is a warning naming it."""
    plan, ev = evaluated["streaming"]
    ex = _export(inst, plan, "torchtitan", "0.2.2")
    ft = tomllib.loads(ex.files["torchtitan.toml"])["fault_tolerance"]
    assert ft == {"enable": True, "semi_sync_method": "diloco", "sync_steps": 100, "should_quantize": True,
                  "fragment_sync_delay": 1}
    text = " ".join(ex.warnings)
    assert "Nesterov" in text and "F = 2 fragments" in text and "replica_id" in text
    assert _fmt_s(ev.per_step_time_s) in text
    assert "fault_tolerance" in ex.files["README.md"]


@pytest.mark.parametrize("fmt,version", [("megatron", None), ("deepspeed", None), ("torchtitan", "0.3.0")])
def test_export_warns_what_to_add(inst, evaluated, fmt, version):
    plan, ev = evaluated["diloco"]
    ex = _export(inst, plan, fmt, version)
    w = [x for x in ex.warnings if "H = 30" in x]
    assert len(w) == 1, ex.warnings
    for word in ("Nesterov", "lr 0.7", "momentum 0.9", "4 bits", "4 group(s)", _fmt_s(ev.per_step_time_s)):
        assert word in w[0], word
    assert "fault_tolerance" not in "".join(v for k, v in ex.files.items() if k != "README.md")


def test_export_every_step_bits(inst, evaluated):
    plan, ev = evaluated["every_step"]
    ex = _export(inst, plan, "deepspeed")
    w = [x for x in ex.warnings if "8 bits per parameter" in x]
    assert len(w) == 1 and "OneBitAdam" in w[0]
    assert "OneBitAdam" not in ex.files["ds_config.json"]  # 1 bit is not the plan's 8: not written
    ex = _export(inst, plan, "megatron")
    assert any("8 bits per parameter" in x and "no gradient-compression setting" in x for x in ex.warnings)


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan", "deepspeed"])
def test_export_of_a_plain_plan_is_unchanged(inst, fmt):
    """Writing the plain sync out changes nothing but plan.json (which holds the plan as given)."""
    a = _export(inst, _plan(inst, None), fmt)
    b = _export(inst, _plan(inst, DpSync()), fmt)
    assert a.warnings == b.warnings
    assert {k: v for k, v in a.files.items() if k not in ("plan.json", "README.md")} == \
        {k: v for k, v in b.files.items() if k not in ("plan.json", "README.md")}
    strip = lambda t: re.sub(r"\{.*\}", "", t, flags=re.S)  # noqa: E731  the README quotes plan.json
    assert strip(a.files["README.md"]) == strip(b.files["README.md"])
