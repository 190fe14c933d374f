"""Calibration (issue 24.3): fitting mfu, unit_overhead_ms, link figures and uplinks
to measurements.  "Measured" runs come from the evaluator at known figures (SPEC v3),
"measured" transfers from the closed form written here, independently of the
fitting module: latency + bytes / bandwidth, equal transfers measured together
each getting 1/n of a shared uplink."""

import math

import numpy as np
import pytest

import planner
from planner.problem.errors import InputError
from planner.problem.io import load_instance
from planner.problem.measurements import Run, Transfer
from planner.problem.plan import Plan, Stage
from planner.scoring.calibrate import _with_figures, calibrate
from planner.scoring.evaluator import Evaluator

GBPS = 1e9 / 8
def _triangle():
    """tiny-3dc with its former alpha-gamma link (1 Gbit/s, 8 ms) back: three links to fit
    (the packaged one relays alpha-gamma through beta since SPEC v3)."""
    base = load_instance("tiny-3dc", spec=3)
    data = base.to_dict()
    data["workload"]["model"] = base.workload.model
    if len(data["links"]) == 2:
        data["links"].append({"a": "alpha", "b": "gamma", "bandwidth_gbps": 1.0, "latency_ms": 8.0})
    return type(base).from_dict(data)


INST = _triangle()  # alpha-beta 10 Gbit/s 2 ms, beta-gamma 5/3, alpha-gamma 1/8; mfu 0.5
TRUTH = {"gpu.mfu": 0.42, "gpu.unit_overhead_ms": 0.3,
         "links[0].bandwidth_gbps": 7.0, "links[0].latency_ms": 2.5,
         "links[1].bandwidth_gbps": 4.0, "links[1].latency_ms": 3.3,
         "links[2].bandwidth_gbps": 1.5, "links[2].latency_ms": 6.0,
         "domains[0].uplink_gbps": 9.0}


def plan(R, t, b, stages, placement, schedule="1f1b"):
    m = INST.workload.global_batch_size // (R * b)
    return Plan(replicas=R, tp=t, micro_batch_size=b, num_micro_batches=m,
                stages=[Stage(start=s, end=e) for s, e in stages], placement=placement, schedule=schedule)


PLANS = [plan(1, 4, 1, [(0, 10)], [["alpha"]]),
         plan(1, 2, 2, [(0, 5), (5, 10)], [["alpha", "beta"]]),
         plan(2, 2, 4, [(0, 4), (4, 10)], [["alpha", "gamma"], ["beta", "gamma"]], "gpipe"),
         plan(1, 4, 4, [(0, 3), (3, 6), (6, 10)], [["alpha", "beta", "gamma"]])]


def measured_runs(truth, plans=PLANS, noise=None):
    inst = _with_figures(INST, truth)
    out = []
    for i, p in enumerate(plans):
        t = float(Evaluator(inst, p, spec=3).iteration_times()[0])
        out.append(Run(p, t * (1 + (noise[i] if noise is not None else 0.0)), f"p{i}"))
    return out


def closed_form(a, b, nbytes, bw, lat_ms, uplink=None, n=1):
    """One transfer of ``n`` equal ones measured together out of a domain with ``uplink``."""
    rate = bw if uplink is None else min(bw, uplink / n)
    return lat_ms / 1e3 + nbytes / (rate * GBPS)


def measured_transfers(bw_ab=7.0, bw_ba=7.0):
    """alpha-beta at two sizes each way (directions bw_ab, bw_ba), beta-gamma at two
    sizes one way, and alpha -> beta with alpha -> gamma measured together (group g1),
    sharing alpha's 9 Gbit/s uplink; every transfer into or out of alpha is also under
    that uplink (9 > its links: it binds only the group)."""
    up = TRUTH["domains[0].uplink_gbps"]
    rows = []
    for size in (1e6, 1e8):
        rows.append(Transfer("alpha", "beta", size, closed_form("alpha", "beta", size, bw_ab, 2.5, up)))
        rows.append(Transfer("beta", "alpha", size, closed_form("beta", "alpha", size, bw_ba, 2.5, up)))
        rows.append(Transfer("beta", "gamma", size, closed_form("beta", "gamma", size, 4.0, 3.3)))
        rows.append(Transfer("alpha", "gamma", size, closed_form("alpha", "gamma", size, 1.5, 6.0, up)))
    rows.append(Transfer("alpha", "beta", 1e8, closed_form("alpha", "beta", 1e8, bw_ab, 2.5, up, n=2), "g1"))
    rows.append(Transfer("alpha", "gamma", 1e8, closed_form("alpha", "gamma", 1e8, 1.5, 6.0, up, n=2), "g1"))
    return rows


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * abs(b)


@pytest.mark.parametrize("start", [
    {},  # the instance's own figures
    {"gpu.mfu": 0.9, "gpu.unit_overhead_ms": 2.0, "links[0].bandwidth_gbps": 40.0, "links[0].latency_ms": 0.0,
     "links[1].bandwidth_gbps": 1.0, "links[1].latency_ms": 20.0, "domains[0].uplink_gbps": 30.0},
])
def test_synthetic_truth_is_recovered_from_different_starts(start):
    inst = _with_figures(INST, start) if start else INST
    cal = calibrate(inst, measured_runs(TRUTH), measured_transfers())
    got = cal.figures()
    assert set(got) == set(TRUTH), (set(got) ^ set(TRUTH), cal.unchanged)
    for f, v in TRUTH.items():
        assert close(got[f], v), (f, got[f], v)
    assert cal.rms_after < 1e-9 < cal.rms_before
    # the fitted instance is what the figures say
    assert cal.instance.gpu.mfu == got["gpu.mfu"] and cal.instance.links[0].latency_ms == got["links[0].latency_ms"]
    assert cal.instance.domains[0].uplink_gbps == got["domains[0].uplink_gbps"]
    for r in cal.rows:
        assert abs(r.residual_after) < 1e-9


def test_transfer_rows_follow_the_closed_form():
    """Before the fit the transfers are modelled with the instance's own figures: the
    closed form by hand (no uplinks in tiny-3dc; alpha-beta 10 Gbit/s, 2 ms)."""
    cal = calibrate(INST, measured_runs(TRUTH), measured_transfers())
    row = next(r for r in cal.rows if r.label.startswith("alpha->beta 1e+08"))
    assert math.isclose(row.before_s, 2e-3 + 1e8 / (10 * GBPS), rel_tol=1e-12)
    g = [r for r in cal.rows if r.label.endswith("[g1]")]
    # after: alpha's fitted 9 Gbit/s uplink is shared by the two (4.5 each); alpha->beta's link is 7
    assert math.isclose(g[0].after_s, 2.5e-3 + 1e8 / (4.5 * GBPS), rel_tol=1e-6)
    assert math.isclose(g[1].after_s, 6e-3 + 1e8 / (1.5 * GBPS), rel_tol=1e-6)


def test_link_bandwidth_is_the_smaller_direction():
    cal = calibrate(INST, measured_runs(TRUTH), measured_transfers(bw_ab=7.0, bw_ba=5.0))
    bw = next(f for f in cal.fitted if f.field == "links[0].bandwidth_gbps")
    assert close(bw.after, 5.0, 1e-5)
    assert "alpha->beta 7" in bw.note and "beta->alpha 5" in bw.note
    # the instance has one bandwidth per link: the faster direction is modelled slower than measured
    fast = next(r for r in cal.rows if r.label == "alpha->beta 1e+08 B")
    assert fast.residual_after > 0.1


def test_noise_leaves_residuals_and_the_fit_beats_the_truth():
    noise = [0.03, -0.02, 0.01, -0.04]
    runs = measured_runs(TRUTH, noise=noise)
    cal = calibrate(INST, runs)
    after = np.array([r.residual_after for r in cal.rows])
    assert cal.rms_after > 1e-3 and math.isclose(cal.rms_after, float(np.sqrt(np.mean(after ** 2))))
    for r, run in zip(cal.rows, runs):
        assert r.measured_s == run.seconds and r.residual_after == r.after_s / r.measured_s - 1
    # least squares: no worse than the true figures on the same noisy data
    at_truth = _with_figures(cal.instance, {"gpu.mfu": 0.42, "gpu.unit_overhead_ms": 0.3})
    truth_res = np.array([Evaluator(at_truth, r.plan, spec=3).iteration_times()[0] / r.seconds - 1 for r in runs])
    assert np.sum(after ** 2) <= np.sum(truth_res ** 2) * (1 + 1e-9)
    assert 0.3 < cal.figures()["gpu.mfu"] < 0.55


def test_one_plan_measured_twice_cannot_separate_the_overhead_from_mfu():
    runs = measured_runs(TRUTH, plans=[PLANS[0], PLANS[0]])
    cal = calibrate(INST, runs)
    assert set(cal.figures()) == {"gpu.mfu"}
    left = next(u for u in cal.unchanged if u.field == "gpu.unit_overhead_ms")
    assert left.value == 0.0 and "gpu.mfu" in left.reason and "Jacobian" in left.reason
    assert cal.instance.gpu.unit_overhead_ms == 0.0
    assert cal.rms_after < 1e-9  # mfu alone matches the one plan's time


def test_one_size_per_link_leaves_its_latency_and_no_group_leaves_uplinks():
    rows = [Transfer("alpha", "beta", 1e8, 0.12), Transfer("beta", "alpha", 1e8, 0.12),
            Transfer("alpha", "beta", 1e8, 0.121)]
    cal = calibrate(INST, measured_runs(TRUTH), rows)
    assert "links[0].bandwidth_gbps" in cal.figures() and "links[0].latency_ms" not in cal.figures()
    lat = next(u for u in cal.unchanged if u.field == "links[0].latency_ms")
    assert lat.value == 2.0 and "bandwidth" in lat.reason and "two" not in lat.reason or "small and a large" in lat.reason
    ups = [u for u in cal.unchanged if u.field.endswith("uplink_gbps")]
    assert len(ups) == 3 and all("together" in u.reason for u in ups)
    assert any("group" in n for n in cal.notes)
    others = [u for u in cal.unchanged if u.field.startswith(("links[1]", "links[2]"))]
    assert len(others) == 4 and all("no measured transfer crosses" in u.reason for u in others)


def test_an_uplink_that_limits_nothing_is_left_as_it_was():
    """Two transfers measured together out of alpha on slow links: alpha's uplink (absent,
    i.e. no cap) never binds at the fitted figures, so it stays absent."""
    rows = []
    for size in (1e6, 1e8):
        rows.append(Transfer("alpha", "gamma", size, closed_form("", "", size, 1.5, 6.0)))
        rows.append(Transfer("alpha", "beta", size, closed_form("", "", size, 1.0, 2.0)))
        rows.append(Transfer("alpha", "gamma", size, closed_form("", "", size, 1.5, 6.0), f"g{size:g}"))
        rows.append(Transfer("alpha", "beta", size, closed_form("", "", size, 1.0, 2.0), f"g{size:g}"))
    cal = calibrate(INST, measured_runs(TRUTH), rows)
    assert "domains[0].uplink_gbps" not in cal.figures()
    up = next(u for u in cal.unchanged if u.field == "domains[0].uplink_gbps")
    assert up.value is None and "limits no measured transfer" in up.reason
    assert cal.instance.domains[0].uplink_gbps is None
    assert close(cal.figures()["links[0].bandwidth_gbps"], 1.0) and close(cal.figures()["links[2].latency_ms"], 6.0)


@pytest.mark.parametrize("runs, transfers, field", [
    ([(PLANS[0], 0.3)], None, "runs"),  # one run, two figures
    ([(PLANS[0], 0.3), (PLANS[1], float("nan"))], None, "runs[1].seconds"),
    ([(PLANS[0], 0.3), (PLANS[1], -1.0)], None, "runs[1].seconds"),
    ([(PLANS[0], 0.3), (plan(1, 4, 1, [(0, 10)], [["omega"]]), 0.3)], None, "runs[1]"),
    ([(PLANS[0], 0.3), (PLANS[1], 0.3)], [("alpha", "beta", 1e8, 0.1)], "transfers"),  # 1 row, 2 figures
    ([(PLANS[0], 0.3), (PLANS[1], 0.3)], [("alpha", "zeta", 1e8, 0.1)], "transfers[0].b"),
    ([(PLANS[0], 0.3), (PLANS[1], 0.3)], [("alpha", "beta", 0.0, 0.1)], "transfers[0].bytes"),
    ([(PLANS[0], 0.3), (PLANS[1], 0.3)], [("alpha", "beta", 1e8, math.inf)], "transfers[0].seconds"),
])
def test_refusals_name_the_field(runs, transfers, field):
    with pytest.raises(InputError) as err:
        calibrate(INST, runs, transfers)
    assert err.value.field == field, str(err.value)


def test_public_api():
    compute = {"gpu.mfu": 0.42, "gpu.unit_overhead_ms": 0.3}
    cal = planner.calibrate(INST, [(p, r.seconds) for p, r in zip(PLANS, measured_runs(compute))])
    assert isinstance(cal, planner.Calibration)
    assert close(cal.figures()["gpu.mfu"], 0.42) and close(cal.figures()["gpu.unit_overhead_ms"], 0.3)
    d = cal.to_dict()
    assert {r["kind"] for r in d["rows"]} == {"run"} and d["rms_relative_after"] < 1e-9
