"""Rebuild the published runs of ``runs.toml`` as planner instances and plans
"as run", score them with the SPEC v3 evaluator, calibrate one run per
hardware type and predict every ratio (issue 24, the fidelity benchmark).

Everything here is data in, result out; ``benchmarks/fidelity.py`` prints
and writes the results.  Units: seconds, Gbit/s, one-way milliseconds, bytes.

The encodings (README.md of this directory says why):

- DT-FM and Megatron on p3.2xlarge: one domain per machine (1 GPU), a full
  mesh of links at the tc rate with the tc delay as one-way latency, and
  ``uplink_gbps`` = the tc rate (netem caps each machine's egress; v3 caps
  egress and, separately, ingress).  ``default`` network: 9.76 Gbit/s (the
  measured NCCL point-to-point rate, 64 MiB in 55 ms) and 0.05 ms one way.
- Collectives: a boundary transfer (point-to-point) or a gradient sync
  (all-reduce, central PS) of a model without FLOPs.
- SAILOR on Clariden: one domain of 4-GPU nodes, TP 4, 1f1b, fp32.
- FluidStack: three region domains, pipelines inside regions, data
  parallelism across them (a reading: the placement is not published).

>>> rb = rebuild("xl0423_B64_default", {"v100_p3_2xlarge": 0.3})
>>> rb.instance.workload.global_batch_size, rb.plan.num_stages
(64, 8)
>>> round(model_time(rb), 2) > 0
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy.optimize import brentq, least_squares

from planner import Instance, Plan
from planner.scoring.evaluator import Evaluator, check_plan

try:  # as a package (tests, python -m) or with benchmarks/ on sys.path (the script)
    from . import data as fd
except ImportError:  # pragma: no cover
    import data as fd  # type: ignore

SPEC = 3  # every rebuilt run is scored under SPEC v3, whatever the package default

# --- hardware figures (sources: README.md of this directory, shared gpu_specs.csv) ---------------
V100 = dict(name="V100-SXM2-16GB", peak_tflops=125.0, memory_gb=16.0)
A40 = dict(name="A40", peak_tflops=150.0, memory_gb=48.0)
# fp32 training (run_opt.slurm passes neither --fp16 nor --bf16): peak 67 TFLOP/s (H100 SXM FP32);
# NVLink as the H100 SXM5 of gpu_specs.csv, 900 GB/s bidirectional = 3600 Gbit/s one way (ASSUMED
# for the GH200 quad node)
GH200 = dict(name="GH200-96GB", peak_tflops=67.0, memory_gb=96.0, nvlink_bandwidth_gbps=3600.0)
DEFAULT_NIC_GBPS = 9.76   # p3.2xlarge, measured: NCCL 64 MiB in 55 ms = 2^26 * 8 / 0.055 s
DEFAULT_DELAY_MS = 0.05   # half of the stated "about 0.1ms"
P3_16X_NIC_GBPS = 25.0    # p3.16xlarge (NeurIPS2022_submission.md, case 1)
P3_16X_NVLINK_GBPS = 1200.0  # V100 NVLink 300 GB/s total per GPU, one way
SLINGSHOT_GBPS = 200.0    # Alps: one 200 Gbit/s Cassini NIC per GH200 (ASSUMED, general knowledge)
FS_INTRA_GBPS = 10.0      # FluidStack machines inside one region (ASSUMED; not published)
FS_MACHINES_PER_REGION = 8  # 24 machines in 3 regions (ASSUMED even split; not published)
MiB = 2 ** 20

HARDWARE = {  # hardware key -> what runs.toml's calibration entry names
    "v100_p3_2xlarge": "V100-SXM2-16GB on p3.2xlarge",
    "v100_p3_16xlarge": "V100-SXM2-16GB on p3.16xlarge",
    "a40": "A40 (FluidStack)",
    "gh200": "GH200-96GB (Clariden)",
}


@dataclass(frozen=True)
class Rebuilt:
    """One run as an instance and a plan "as run"; ``hardware`` keys the calibrated figures."""

    name: str
    instance: Instance
    plan: Plan
    hardware: str
    note: str = ""
    extra_s: float = 0.0  # what-if only: a fixed time per iteration added to T (none in SPEC v3)


# --- models ----------------------------------------------------------------------------------------

def block_unit(i: int, h: int, ffn: int, seq_len: int, act_bytes: int = 2) -> dict:
    """One transformer block as SPEC section 3 writes it (non-gated, a = k), with
    ``act_bytes`` bytes per activation value (2: fp16/bf16, 4: fp32); recompute
    stores only the block's input (``act_bytes * h`` per token)."""
    P = 4 * h * h + 2 * h * ffn
    return dict(name=f"block{i}", params=float(P), fwd_flops_per_token=float(2 * P + 4 * seq_len * h),
                out_bytes_per_token=float(act_bytes * h), stored_bytes_per_token=float(act_bytes * h),
                tp_bytes_per_token=float(2 * act_bytes * h))


def gpt_units(num_layers: int, h: int, ffn: int, vocab: int, seq_len: int, head: str = "lm",
              act_bytes: int = 2, positions: int = 0, recompute: bool = True) -> list[dict]:
    """Units of a GPT: ``embed`` (vocab + learned positions, no FLOPs), ``num_layers``
    blocks, and the head: ``"lm"`` (V x h, 2Vh FLOPs per token) or ``"classifier"``
    (DT-FM's 2-class GLUE head: 2h parameters, FLOPs 0)."""
    blocks = [block_unit(i, h, ffn, seq_len, act_bytes) for i in range(num_layers)]
    if not recompute:
        for b in blocks:
            b["stored_bytes_per_token"] = 17.0 * act_bytes * h  # SPEC's 34h bytes at 2 bytes per value
    embed = dict(name="embed", params=float((vocab + positions) * h), fwd_flops_per_token=0.0,
                 out_bytes_per_token=float(act_bytes * h), stored_bytes_per_token=0.0)
    if head == "lm":
        hd = dict(name="head", params=float(vocab * h), fwd_flops_per_token=float(2 * vocab * h),
                  out_bytes_per_token=0.0, stored_bytes_per_token=float(4 * vocab))
    else:
        hd = dict(name="head", params=float(2 * h), fwd_flops_per_token=0.0, out_bytes_per_token=0.0,
                  stored_bytes_per_token=0.0)
    return [embed, *blocks, hd]


def even_bounds(num_layers: int, stages: int) -> list[tuple[int, int]]:
    """Stage bounds over ``embed + blocks + head``: embed on stage 0, head on the last."""
    lps = num_layers // stages
    ends = [1 + lps * (j + 1) for j in range(stages)]
    ends[-1] += 1
    return list(zip([0] + ends[:-1], ends))


def with_stage_overhead(units: list[dict], bounds, seconds: float, flops_per_s: float, tokens: int,
                        beta: float) -> tuple[list[dict], list[tuple[int, int]]]:
    """What-if, not SPEC: a fixed ``seconds`` per micro-batch and stage (forward plus backward,
    split 1 : beta as compute is), whatever the stage holds.  Written in SPEC terms as a unit
    without parameters at the head of every stage whose FLOPs take that long at ``flops_per_s``."""
    per_token = seconds / (1 + beta) * flops_per_s / tokens
    out, new_bounds = [], []
    for j, (a, b) in enumerate(bounds):
        start = len(out)
        out.append(dict(name=f"stage_overhead{j}", params=0.0, fwd_flops_per_token=per_token,
                        out_bytes_per_token=units[a]["out_bytes_per_token"], stored_bytes_per_token=0.0))
        out += units[a:b]
        new_bounds.append((start, len(out)))
    return out, new_bounds


def bounds_from_counts(counts: list[int]) -> list[tuple[int, int]]:
    """Stage bounds from units per stage, e.g. ``[5, 7, 7, 7]``."""
    out, pos = [], 0
    for c in counts:
        out.append((pos, pos + c))
        pos += c
    return out


def ga_schedule(stages: int, per_step: int, steps: int) -> list[list[str]]:
    """Gradient accumulation as run by DT-FM: ``steps`` GPipe rounds of ``per_step``
    micro-batches, one after the other (SPEC v3 (e): ``steps`` gpipe-shaped flushes)."""
    ops = []
    for s in range(steps):
        mbs = range(s * per_step, (s + 1) * per_step)
        ops += [f"F{i}" for i in mbs] + [f"B{i}" for i in mbs]
    return [list(ops) for _ in range(stages)]


# --- instances -------------------------------------------------------------------------------------

def _workload(units, global_batch, seq_len, mbs, tp, recompute, sync) -> dict:
    return dict(model=dict(name="rebuilt", units=units), global_batch_size=int(global_batch),
                seq_len=int(seq_len), micro_batch_sizes=[int(mbs)], tensor_parallel=[int(tp)],
                recompute=recompute, gradient_sync=sync)


def machines_instance(name: str, n: int, gpus: int, gpu: dict, rate_gbps: float, delay_ms: float,
                      units, global_batch: int, seq_len: int, mbs: int = 1, tp: int = 1,
                      recompute: bool = True, sync: str = "ring", uplink_gbps: float | None = None,
                      intra_gbps: float | None = None, latency_factor: float = 1.0) -> Instance:
    """``n`` machines as domains ``m00``.. (``gpus`` each) joined by a full mesh at
    ``rate_gbps`` and ``delay_ms`` one way, each machine's WAN traffic capped at
    ``uplink_gbps`` (default ``rate_gbps``; 0: no cap) each way.  ``latency_factor``
    (what-if, not the setup): link latency = factor x delay."""
    up = rate_gbps if uplink_gbps is None else uplink_gbps
    names = [f"m{i:02d}" for i in range(n)]
    domains = [dict(name=d, gpus=gpus, gpus_per_node=gpus, intra_bandwidth_gbps=intra_gbps or rate_gbps,
                    **({"uplink_gbps": up} if up else {})) for d in names]
    links = [dict(a=names[i], b=names[k], bandwidth_gbps=rate_gbps, latency_ms=delay_ms * latency_factor)
             for i in range(n) for k in range(i + 1, n)]
    return Instance.from_dict(dict(name=name, gpu=gpu, domains=domains, links=links,
                                   workload=_workload(units, global_batch, seq_len, mbs, tp, recompute, sync)))


def net_figures(row: dict) -> tuple[float, float]:
    """(one-way delay ms, rate Gbit/s) of a row's tc setting; empty = the default network."""
    d, b = row.get("delay_ms", ""), row.get("bandwidth_gbps", "")
    return (float(d) if d else DEFAULT_DELAY_MS), (float(b) if b else DEFAULT_NIC_GBPS)


# --- one builder per source ------------------------------------------------------------------------

def _dtfm_xl(name: str, row: dict, mfu: float, stage_overhead_s: float = 0.0, iteration_overhead_s: float = 0.0,
             **variant) -> Rebuilt:
    L, S, R = int(row["num_layers"]), int(row["stages"]), int(row["dp"])
    per_step, steps = int(row["batch_per_step"]), int(row["ga_steps"])
    delay, rate = net_figures(row)
    sync = "reduce_broadcast" if row["dp_mode"] == "central_ps" else "ring"
    units = gpt_units(L, 2048, 8192, 28996, 2048, head="classifier", positions=2048)
    bounds = even_bounds(L, S)
    if stage_overhead_s:
        units, bounds = with_stage_overhead(units, bounds, stage_overhead_s, V100["peak_tflops"] * 1e12 * mfu,
                                            2048, 3.0)
    inst = machines_instance(name, S * R, 1, dict(V100, mfu=mfu), rate, delay, units,
                             per_step * steps * R, 2048, sync=sync, **variant)
    rows = [[f"m{S * r + j:02d}" for j in range(S)] for r in range(R)]
    sched = "gpipe" if steps == 1 else ga_schedule(S, per_step, steps)
    plan = Plan.build(bounds, rows, tp=1, micro_batch_size=1, instance=inst, schedule=sched)
    note = {"sharded_ps": "sharded PS as a ring (same volume, 2(K-1) latencies)",
            "central_ps": "central PS: reduce_broadcast"}.get(row["dp_mode"], "")
    return Rebuilt(name, inst, plan, "v100_p3_2xlarge", note, iteration_overhead_s)


def _megatron(name: str, row: dict, mfu: float, **variant) -> Rebuilt:
    L, P, T, D = (int(row[k]) for k in ("num_layers", "pp", "tp", "dp"))
    mbs, gbs = int(row["micro_batch"]), int(row["global_batch"])
    delay, rate = net_figures(row)
    units = gpt_units(L, 2048, 8192, 50257, 2048, head="lm", positions=2048)
    bounds = even_bounds(L, P)
    if row["hardware"].startswith("8x p3.16xlarge"):  # replica r on machine r (P x T = 8 GPUs)
        gpu = dict(V100, mfu=mfu, nvlink_bandwidth_gbps=P3_16X_NVLINK_GBPS)
        inst = machines_instance(name, 8, 8, gpu, P3_16X_NIC_GBPS, DEFAULT_DELAY_MS, units, gbs, 2048,
                                 mbs=mbs, tp=T, intra_gbps=P3_16X_NVLINK_GBPS, **variant)
        rows = [[f"m{r:02d}"] * P for r in range(D)]
        return Rebuilt(name, inst, Plan.build(bounds, rows, tp=T, micro_batch_size=mbs, instance=inst,
                                              schedule="1f1b"), "v100_p3_16xlarge")
    # 64 p3.2xlarge: T machines per domain; with T > 1 the "NVLink" of the type is the NIC, so
    # tensor-parallel all-reduces cross machines at the NIC rate (an encoding: SPEC keeps TP in a domain)
    gpu = dict(V100, mfu=mfu, **({"nvlink_bandwidth_gbps": rate} if T > 1 else {}))
    n = 64 // T
    inst = machines_instance(name, n, T, gpu, rate, delay, units, gbs, 2048, mbs=mbs, tp=T,
                             uplink_gbps=variant.pop("uplink_gbps", T * rate), **variant)
    rows = [[f"m{P * r + j:02d}" for j in range(P)] for r in range(D)]
    note = "TP across 2 machines: a 2-GPU domain whose NVLink is the NIC" if T > 1 else ""
    return Rebuilt(name, inst, Plan.build(bounds, rows, tp=T, micro_batch_size=mbs, instance=inst,
                                          schedule="1f1b"), "v100_p3_2xlarge", note)


def _p2p(name: str, row: dict, mfu: float, **variant) -> Rebuilt:
    """Two machines, one boundary of ``size_mb`` MiB each way; T = 2 (x + l), so a ratio of two
    such runs is the ratio of their one-way times x + l."""
    delay, rate = net_figures(row)
    A = float(row["size_mb"]) * MiB
    units = [dict(name="send", params=0.0, fwd_flops_per_token=0.0, out_bytes_per_token=A,
                  stored_bytes_per_token=0.0),
             dict(name="recv", params=0.0, fwd_flops_per_token=0.0, out_bytes_per_token=0.0,
                  stored_bytes_per_token=0.0)]
    inst = machines_instance(name, 2, 1, dict(V100, mfu=0.5), rate, delay, units, 1, 1, recompute=False,
                             **variant)
    plan = Plan.build([(0, 1), (1, 2)], [["m00", "m01"]], tp=1, micro_batch_size=1, instance=inst,
                      schedule="gpipe")
    return Rebuilt(name, inst, plan, "none", "T = 2 (x + l): the ratio is that of one transfer")


def _dp(name: str, row: dict, mfu: float, sync: str | None = None, **variant) -> Rebuilt:
    """K machines each holding one replica of a model of ``size_mb / 2`` MiB parameters without
    FLOPs: the iteration is one gradient sync of G = size_mb MiB (SPEC: G = 2 bytes/param)."""
    delay, rate = net_figures(row)
    K, G = int(row["nodes"]), float(row["size_mb"]) * MiB
    sync = sync or ("reduce_broadcast" if row["algorithm"] == "central_ps" else "ring")
    units = [dict(name="buffer", params=G / 2, fwd_flops_per_token=0.0, out_bytes_per_token=0.0,
                  stored_bytes_per_token=0.0)]
    inst = machines_instance(name, K, 1, dict(V100, mfu=0.5), rate, delay, units, K, 1, recompute=False,
                             sync=sync, **variant)
    plan = Plan.build([(0, 1)], [[f"m{r:02d}"] for r in range(K)], tp=1, micro_batch_size=1,
                      instance=inst, schedule="gpipe")
    return Rebuilt(name, inst, plan, "none", f"{row['algorithm']} as {sync}")


SAILOR_MODELS = {"OPT-350": dict(L=24, h=1024, vocab=50272), "GPT-NEO": dict(L=32, h=2560, vocab=128256)}


def _sailor(name: str, row: dict, mfu: float, overhead_ms: float = 0.0, **variant) -> Rebuilt:
    m = SAILOR_MODELS[row["model"]]
    nodes, dp, pp, tp = (int(row[k]) for k in ("nodes", "dp", "pp", "tp"))
    mbs, gbs = int(row["micro_batch"]), int(row["global_batch"])
    units = gpt_units(m["L"], m["h"], 4 * m["h"], m["vocab"], 2048, head="lm", act_bytes=4, recompute=False)
    gpu = dict(GH200, mfu=mfu, unit_overhead_ms=overhead_ms)
    domain = dict(name="clariden", gpus=4 * nodes, gpus_per_node=4, intra_bandwidth_gbps=SLINGSHOT_GBPS)
    inst = Instance.from_dict(dict(name=name, gpu=gpu, domains=[domain], links=[],
                                   workload=_workload(units, gbs, 2048, mbs, tp, False, "ring")))
    counts = [int(c) for c in row["units_per_stage"].split(";")]
    plan = Plan.build(bounds_from_counts(counts), [["clariden"] * pp for _ in range(dp)], tp=tp,
                      micro_batch_size=mbs, instance=inst, schedule="1f1b")
    return Rebuilt(name, inst, plan, "gh200")


FS_REGIONS = ("East", "Mid", "West")


def fluidstack_network(encoding: str = "ring") -> list[dict]:
    """The three-region links: latency = half the published delay (read as a round trip),
    bandwidth = machines per region x the measured per-pair rate of one direction:
    ``"ring"`` the direction the gradient ring uses (East->Mid, Mid->West, West->East),
    ``"min"`` / ``"max"`` the smaller / larger of the two directions."""
    rows = fd.load().tables["dtfm_fluidstack3_network.csv"]
    val = {(r["quantity"], r["from_region"], r["to_region"]): float(r["value"]) for r in rows}
    links = []
    for a, b in (("East", "Mid"), ("Mid", "West"), ("West", "East")):
        ab, ba = val[("bandwidth_gbps", a, b)], val[("bandwidth_gbps", b, a)]
        bw = {"ring": ab, "min": min(ab, ba), "max": max(ab, ba)}[encoding]
        links.append(dict(a=a, b=b, bandwidth_gbps=FS_MACHINES_PER_REGION * bw,
                          latency_ms=val[("delay_ms", a, b)] / 2))
    return links


def _fluidstack(name: str, rows: list[dict], mfu: float, encoding: str = "ring", **variant) -> Rebuilt:
    """Pipeline 8 x DP 6, two pipelines inside each region, central PS across regions, 128
    sequences per step and replica in GA steps (a reading: the scheduler's placement is not
    published)."""
    row = rows[0]
    L, gbs, steps = int(row["num_layers"]), int(row["global_batch"]), int(row["ga_steps"])
    S, R, per_step = 8, 6, 128
    units = gpt_units(L, 2048, 8192, 28996, 2048, head="classifier", positions=2048)
    domains = [dict(name=r, gpus=2 * FS_MACHINES_PER_REGION, gpus_per_node=2,
                    intra_bandwidth_gbps=FS_INTRA_GBPS) for r in FS_REGIONS]
    inst = Instance.from_dict(dict(name=name, gpu=dict(A40, mfu=mfu), domains=domains,
                                   links=fluidstack_network(encoding),
                                   workload=_workload(units, gbs, 2048, 1, 1, True, "reduce_broadcast")))
    placement = [[FS_REGIONS[r // 2]] * S for r in range(R)]
    plan = Plan.build(even_bounds(L, S), placement, tp=1, micro_batch_size=1, instance=inst,
                      schedule=ga_schedule(S, per_step, steps))
    return Rebuilt(name, inst, plan, "a40", "placement not published: pipelines inside regions")


def rebuild(name: str, figures: dict[str, float], **variant) -> Rebuilt:
    """Run ``name`` of runs.toml rebuilt with the hardware figures ``figures``
    (``{hardware: mfu}``, and ``"gh200_overhead_ms"``); ``variant`` passes encoding
    choices through (``uplink_gbps=0`` drops uplinks, ``encoding`` for FluidStack,
    ``sync`` for collectives)."""
    d = fd.load()
    run = d.runs[name]
    rows = fd.rows_of(run, d)
    system, file = run["system"], run["file"]
    if file == "dtfm_gpt3_xl_runs.csv":
        return _dtfm_xl(name, rows[0], figures.get("v100_p3_2xlarge", 0.3), **variant)
    if file == "dtfm_megatron_runs.csv":
        hw = "v100_p3_16xlarge" if rows[0]["hardware"].startswith("8x p3.16xlarge") else "v100_p3_2xlarge"
        return _megatron(name, rows[0], figures.get(hw, 0.3), **variant)
    if file == "dtfm_p2p.csv":
        return _p2p(name, rows[0], 0.5, **variant)
    if file == "tc_simulate_dp.csv":
        return _dp(name, rows[0], 0.5, **variant)
    if file == "sailor_clariden.csv":
        return _sailor(name, rows[0], figures.get("gh200", 0.5), figures.get("gh200_overhead_ms", 0.0),
                       **variant)
    if file == "dtfm_fluidstack3_times.csv":
        return _fluidstack(name, rows, figures.get("a40", 0.3), **variant)
    raise ValueError(f"run {name}: no builder for {system} / {file}")


# --- scoring and calibration -------------------------------------------------------------------

def model_time(rb: Rebuilt) -> float:
    """The SPEC v3 evaluator's simulated iteration time T (seconds) of a rebuilt run."""
    return float(Evaluator(rb.instance, rb.plan, spec=SPEC).iteration_times()[0]) + rb.extra_s


def violations(rb: Rebuilt) -> list[str]:
    """SPEC feasibility rules the run as rebuilt breaks (memory, GPUs, routes ...)."""
    ev = Evaluator(rb.instance, rb.plan, spec=SPEC)
    return [v.message for v in check_plan(rb.instance, rb.plan, ev.fig)]


def calibration_runs() -> dict[str, str]:
    """``{hardware key: calibration run}`` from runs.toml (one run per hardware type)."""
    out = {}
    for c in fd.load().calibration:
        key = next(k for k, v in HARDWARE.items() if c["hardware"].startswith(v))
        out[key] = c["run"]
    return out


def fit_mfu(run: str, hardware: str, figures: dict[str, float] | None = None, **variant) -> float:
    """The ``mfu`` in (0, 1] for which the rebuilt ``run`` takes exactly its measured time
    (brentq; T falls as mfu grows)."""
    figures = dict(figures or {})
    target = fd.run_value(run)

    def resid(mfu):
        figures[hardware] = mfu
        return model_time(rebuild(run, figures, **variant)) - target

    return brentq(resid, 1e-3, 1.0, xtol=1e-12, rtol=1e-12)


def fit_mfu_and_overhead(runs: tuple[str, str], hardware: str = "gh200") -> tuple[float, float]:
    """``(mfu, unit_overhead_ms)`` matching two runs (least squares on relative residuals,
    bounds mfu in (0, 1], overhead in [0, 1000] ms): one run cannot separate them."""
    targets = [fd.run_value(r) for r in runs]

    def resid(x):
        figs = {hardware: x[0], f"{hardware}_overhead_ms": x[1]}
        return [model_time(rebuild(r, figs)) / t - 1 for r, t in zip(runs, targets)]

    sol = least_squares(resid, x0=[0.5, 1.0], bounds=([1e-3, 0.0], [1.0, 1000.0]), xtol=1e-14,
                        ftol=1e-14, gtol=1e-14)
    return float(sol.x[0]), float(sol.x[1])


def calibrate() -> dict[str, float]:
    """mfu per hardware type, each from its one calibration run (runs.toml)."""
    return {hw: fit_mfu(run, hw) for hw, run in calibration_runs().items()}


@dataclass
class RatioResult:
    name: str
    kind: str
    measured: float
    modelled: float
    numerator: str
    denominator: str
    hardware: str
    note: str = ""
    times: tuple[float, float] = field(default=(math.nan, math.nan))

    @property
    def error_pct(self) -> float:
        return (self.modelled / self.measured - 1) * 100


def predict(figures: dict[str, float], calibrated: set[str] = frozenset(), only=None,
            **variant) -> list[RatioResult]:
    """Every ratio of runs.toml (or those named in ``only``), modelled with ``figures``;
    ``calibrated`` names the runs the figures were fitted to (flagged in the note);
    ``variant`` goes to every :func:`rebuild`."""
    d = fd.load()
    cache: dict[str, tuple[float, Rebuilt]] = {}

    def time_of(run):
        if run not in cache:
            rb = rebuild(run, figures, **variant)
            cache[run] = (model_time(rb), rb)
        return cache[run]

    out = []
    for r in d.ratios:
        if only is not None and r["name"] not in only:
            continue
        (tn, rn), (td, rd) = time_of(r["numerator"]), time_of(r["denominator"])
        notes = [n for n in dict.fromkeys((rn.note, rd.note)) if n]
        fitted = [x for x in (r["numerator"], r["denominator"]) if x in calibrated]
        if fitted:
            notes.append("calibration run: " + ", ".join(fitted))
        out.append(RatioResult(r["name"], r["kind"], fd.ratio_value(r, d), tn / td, r["numerator"],
                               r["denominator"], rn.hardware, "; ".join(notes), (tn, td)))
    return out
