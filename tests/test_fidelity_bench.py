"""The fidelity benchmark's rebuilt runs (benchmarks/fidelity/rebuild.py, issue 24):
every run of runs.toml rebuilds as a valid instance and plan that use the SPEC v3
fields of its setup, a calibration run is matched exactly, and the communication
micro-benchmarks give SPEC's closed forms."""

import math

import pytest

from benchmarks.fidelity import data as fd
from benchmarks.fidelity import rebuild as rb
from planner import Plan
from planner.problem.specversion import v3_only_fields

D = fd.load()
FIGS = {"v100_p3_2xlarge": 0.3, "v100_p3_16xlarge": 0.35, "a40": 0.3, "gh200": 0.5}
MiB = 2 ** 20


@pytest.mark.parametrize("run", sorted(D.runs))
def test_every_run_rebuilds_as_a_valid_feasible_plan(run):
    r = rb.rebuild(run, FIGS)
    r.plan.check_against(r.instance)  # shape: units, domains, batch
    assert Plan.from_json(r.plan.to_json()) == r.plan
    assert rb.violations(r) == []  # GPUs, memory, routes, schedule
    T = rb.model_time(r)
    assert math.isfinite(T) and T > 0
    row = fd.rows_of(D.runs[run], D)[0]
    # the plan is the run's shape: data parallelism, and the batch it trained on
    dp = int(row.get("dp") or row.get("nodes") or 1) if "algorithm" not in row else int(row["nodes"])
    if D.runs[run]["file"] != "dtfm_fluidstack3_times.csv":
        assert r.plan.replicas == dp
    if "global_batch" in row:
        assert r.instance.workload.global_batch_size == int(row["global_batch"])


def test_tc_runs_use_the_v3_fields_of_their_setup():
    central = rb.rebuild("xl0427_L24_d10b1", FIGS)
    used = v3_only_fields(central.instance)
    assert "workload.gradient_sync" in used  # central PS
    assert sum(f.endswith("uplink_gbps") for f in used) == 64  # tc on every machine's egress
    assert {d.uplink_gbps for d in central.instance.domains} == {1.0}
    assert {link.latency_ms for link in central.instance.links} == {10.0}
    # two gradient-accumulation steps: two gpipe-shaped flushes of 64 micro-batches
    assert central.plan.num_micro_batches == 128 and central.plan.schedule_kind == "explicit"
    sailor = rb.rebuild("opt350_n1_g32", {"gh200": 0.5, "gh200_overhead_ms": 0.5})
    assert sailor.instance.gpu.unit_overhead_ms == 0.5


@pytest.mark.parametrize("hw", ["v100_p3_2xlarge", "gh200"])
def test_calibration_run_matches_exactly_and_is_monotone(hw):
    run = rb.calibration_runs()[hw]
    mfu = rb.fit_mfu(run, hw)
    assert 0 < mfu <= 1
    T = rb.model_time(rb.rebuild(run, {hw: mfu}))
    assert T == pytest.approx(fd.run_value(run), rel=1e-9)
    # a ratio of the calibration run to itself is exactly 1, and a higher mfu is faster
    assert T / rb.model_time(rb.rebuild(run, {hw: mfu})) == 1.0
    assert rb.model_time(rb.rebuild(run, {hw: mfu * 1.1})) < T


def test_p2p_ratio_is_the_closed_form_of_one_transfer():
    """NCCL 128 vs 64 MiB at tc delay 10 ms (rate: the NIC's 9.76 Gbit/s):
    (l + 2^27 * 8 / R) / (l + 2^26 * 8 / R), SPEC's boundary transfer x + l."""
    res = {r.name: r for r in rb.predict({}, only={"size_p2p_nccl_d10_128_over_64",
                                                    "net_p2p_nccl64_b1_over_default"})}
    R, l = rb.DEFAULT_NIC_GBPS * 1e9, 0.010
    want = (l + 2 ** 27 * 8 / R) / (l + 2 ** 26 * 8 / R)
    assert res["size_p2p_nccl_d10_128_over_64"].modelled == pytest.approx(want, rel=1e-12)
    l0 = rb.DEFAULT_DELAY_MS / 1e3
    want = (l0 + 2 ** 26 * 8 / 1e9) / (l0 + 2 ** 26 * 8 / R)
    assert res["net_p2p_nccl64_b1_over_default"].modelled == pytest.approx(want, rel=1e-12)
    # T of the two-stage rebuild is one transfer each way: 2 (x + l)
    T = rb.model_time(rb.rebuild("p2p_nccl64_d10", {}))
    assert T == pytest.approx(2 * (l + 2 ** 26 * 8 / R), rel=1e-12)


@pytest.mark.parametrize("run, phi", [("dp_allreduce_1024_8_d10b1", 2 * 7 / 8),
                                      ("dp_allreduce_1024_4_d10b1", 2 * 3 / 4),
                                      ("dp_central_1024_8_d10b1", 2.0)])
def test_collective_is_spec_gradient_sync(run, phi):
    """K one-GPU machines at 1 Gbit/s, 10 ms: phi(K) G / R + 2 (K - 1) l with G = 1024 MiB."""
    r = rb.rebuild(run, {})
    K = r.plan.replicas
    want = phi * 2 ** 30 * 8 / 1e9 + 2 * (K - 1) * 0.010
    assert rb.model_time(r) == pytest.approx(want, rel=1e-12)


def test_stage_overhead_what_if_adds_its_time_per_micro_batch_and_stage():
    """The what-if unit costs exactly c0 per micro-batch and stage (forward + backward): on the
    single pipeline at the default network (compute-bound, equal stages) T grows by (m + S - 1) c0."""
    run, c0 = "xl0423_B64_default", 0.02
    base = rb.model_time(rb.rebuild(run, FIGS))
    more = rb.model_time(rb.rebuild(run, FIGS, stage_overhead_s=c0, iteration_overhead_s=0.5))
    assert more - base == pytest.approx((64 + 7) * c0 + 0.5, rel=1e-9)


def test_ga_schedule_of_one_step_is_gpipe():
    ops = rb.ga_schedule(3, 4, 1)
    assert ops[0] == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"] and len(ops) == 3
    assert rb.ga_schedule(2, 2, 2)[1] == ["F0", "F1", "B0", "B1", "F2", "F3", "B2", "B3"]


def test_bounds_put_embed_first_and_head_last():
    assert rb.even_bounds(24, 8)[0] == (0, 4) and rb.even_bounds(24, 8)[-1] == (22, 26)
    assert rb.bounds_from_counts([5, 7, 7, 7]) == [(0, 5), (5, 12), (12, 19), (19, 26)]
