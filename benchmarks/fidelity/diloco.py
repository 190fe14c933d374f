"""The DiLoCo fidelity benchmark's rebuilt setups (issue 26, item 5): every row of
``diloco_published.toml`` as a planner instance and plan, scored by the package's
evaluator (SPEC v3 section 11).

The setup every row shares (the papers' simulations, as far as they are stated):
``workers`` datacenters (default M = 2), each one domain holding one data-parallel
replica on one GPU, joined by a full mesh of links at the bandwidth under test
(latency 0: the papers state none); the model is one unit of ``params``
parameters with Kaplan's 6N FLOPs per token (2N forward, 4N backward), and the
GPU's peak is chosen so that one step computes in the paper's ``step_s`` at its
MFU of 60%.  So the pure compute time of a step is ``step_s``, the DP sync is
SPEC 5's ring over the M datacenters (phi(2) = 1: G / R), and the outer sync of
DiLoCo is SPEC 11's O = phi(M) G^o / R.  Compute utilisation (CU) is pure
compute time over the effective iteration time T_eff.

A what-if the evaluator lacks (``backward_overlap`` of :func:`closed_form_t_eff`):
the papers' simulator overlaps the (outer) gradient reduction with the backward
pass, layer by layer (Streaming DiLoCo, Figures 3 and 14); SPEC starts a stage's
sync after its last backward.  The closed form below is SPEC 11 on this
one-stage setup; the what-if adds that overlap.

Example
-------
>>> s = Setup(params=1e9, step_s=0.1, mode="diloco", H=100)
>>> round(closed_form_t_eff(s, 1.6), 6)   # 16e9 bits at 1.6 Gbit/s every 100 steps
0.2
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from planner import Plan
from planner.problem import limits as L
from planner.problem.instance import Instance

DATA = Path(__file__).with_name("diloco_published.toml")
MFU = 0.6                     # both papers: "a MFU of 60%"
WORKERS = 2                   # M: not stated for the simulations; the papers' runs use M = 2
FULL_BITS = 16                # bf16 gradients (SPEC 5: G = 2 bytes per parameter)
SPEC = 3
LOW_GBPS, HIGH_GBPS = 1e-3, 1e6   # bisection bracket (Gbit/s)


@lru_cache(maxsize=1)
def load() -> dict:
    """The published figures (``diloco_published.toml``): ``cu_targets``, ``cu`` rows,
    ``hours`` rows and ``sources``."""
    with DATA.open("rb") as fh:
        return tomllib.load(fh)


@dataclass(frozen=True)
class Setup:
    """One published configuration: ``params`` synced parameters, ``step_s`` pure compute
    seconds per step, the sync (``mode``, ``H``, ``bits``, ``fragments``, ``overlap``), and
    the ``workers`` (datacenters) M with one replica each, ``latency_ms`` one way."""

    params: float
    step_s: float
    mode: str = "every_step"
    H: int | None = None
    bits: int = FULL_BITS
    fragments: int = 1
    overlap: int = 1
    workers: int = WORKERS
    latency_ms: float = 0.0
    layers: int | None = None  # only the backward-overlap what-if uses it

    def dp_sync(self):
        """The plan's ``dp_sync`` (None: every step at 16 bits, SPEC 5 exactly)."""
        if self.mode == "every_step" and self.bits == FULL_BITS:
            return None
        from planner.problem.dpsync import DpSync

        if self.mode == "every_step":
            return DpSync(mode="every_step", bits=self.bits)
        if self.mode == "diloco":
            return DpSync(mode="diloco", H=self.H, bits=self.bits)
        return DpSync(mode="streaming", H=self.H, bits=self.bits, fragments=self.fragments,
                      overlap=self.overlap)


def setup_of(row: dict, **changes) -> Setup:
    """The :class:`Setup` of a ``[[cu]]`` or ``[[hours]]`` row (``changes`` override)."""
    keys = ("params", "step_s", "mode", "H", "bits", "fragments", "overlap", "layers")
    return Setup(**{**{k: row[k] for k in keys if k in row}, **changes})


def peak_tflops(s: Setup) -> float:
    """The GPU peak (TFLOP/s) at which one token's 6N FLOPs take ``step_s`` at MFU 0.6."""
    return 6.0 * s.params / (MFU * s.step_s) / 1e12


def instance(s: Setup, gbps: float) -> Instance:
    """``s.workers`` datacenters ``dc0``.. of one GPU each, a full mesh at ``gbps`` Gbit/s
    and ``s.latency_ms``; a one-unit model of ``s.params`` parameters; one sequence of one
    token per replica and step; the option of ``s`` allowed and covered by a quality row
    (e = 1: only time is compared here)."""
    M = s.workers
    names = [f"dc{i}" for i in range(M)]
    gpu = dict(name="paper-accelerator", peak_tflops=peak_tflops(s), memory_gb=L.MAX_MEMORY_GB, mfu=MFU)
    domains = [dict(name=d, gpus=1, gpus_per_node=1, intra_bandwidth_gbps=L.MAX_BANDWIDTH_GBPS)
               for d in names]
    links = [dict(a=names[i], b=names[k], bandwidth_gbps=float(gbps), latency_ms=float(s.latency_ms))
             for i in range(M) for k in range(i + 1, M)]
    unit = dict(name="model", params=float(s.params), fwd_flops_per_token=2.0 * s.params,
                out_bytes_per_token=0.0, stored_bytes_per_token=0.0)
    data = dict(name="diloco-fidelity", gpu=gpu, domains=domains, links=links,
                workload=dict(model=dict(name="published", units=[unit]), global_batch_size=M, seq_len=1,
                              micro_batch_sizes=[1], tensor_parallel=[1], recompute=False))
    if s.mode != "every_step" or s.bits != FULL_BITS:
        data["options"] = dict(dp_sync=[s.mode], dp_sync_H=[s.H or 1], dp_sync_bits=[s.bits],
                               dp_sync_fragments=[s.fragments], dp_sync_overlap=[s.overlap])
        data["quality"] = [dict(modes=["every_step", "diloco", "streaming"], e=1.0,
                                source="diloco fidelity benchmark: time only")]
    return Instance.from_dict(data)


def plan(s: Setup, inst: Instance) -> Plan:
    """Replica r on ``dc{r}``, one stage, one micro-batch, with the sync of ``s``."""
    sync = s.dp_sync()
    extra = {} if sync is None else {"dp_sync": sync}
    return Plan.build([(0, 1)], [[f"dc{r}"] for r in range(s.workers)], tp=1, micro_batch_size=1,
                      instance=inst, schedule="1f1b", **extra)


def effective_s(s: Setup, gbps: float) -> float:
    """The evaluator's effective seconds per iteration T_eff (SPEC 11) at ``gbps``."""
    from planner.scoring.evaluator import Evaluator

    inst = instance(s, gbps)
    ev = Evaluator(inst, plan(s, inst), spec=SPEC)
    times = ev.effective_times() if hasattr(ev, "effective_times") else ev.iteration_times()
    return float(times[0])


def compute_s(s: Setup) -> float:
    """Pure compute seconds per step as the evaluator sees it: T of one replica alone (no
    sync at all); equals ``s.step_s`` by construction."""
    from planner.scoring.evaluator import Evaluator

    one = Setup(params=s.params, step_s=s.step_s, workers=1)
    inst = instance(one, 1.0)
    return float(Evaluator(inst, plan(one, inst), spec=SPEC).iteration_times()[0])


def cu(s: Setup, gbps: float) -> float:
    """Compute utilisation at ``gbps``: pure compute time / T_eff."""
    return compute_s(s) / effective_s(s, gbps)


def bisect_gbps(cu_at, target: float, rel: float = 1e-6) -> float:
    """The smallest bandwidth (Gbit/s) whose ``cu_at(gbps)`` reaches ``target``, by bisection
    on log(gbps) in [1e-3, 1e6] (CU is non-decreasing in the bandwidth); inf if even 1e6
    does not reach it.

    >>> round(bisect_gbps(lambda w: w / (1 + w), 0.5), 4)
    1.0
    """
    lo, hi = math.log(LOW_GBPS), math.log(HIGH_GBPS)
    if cu_at(math.exp(hi)) < target:
        return math.inf
    if cu_at(math.exp(lo)) >= target:
        return math.exp(lo)
    while hi - lo > rel:
        mid = 0.5 * (lo + hi)
        if cu_at(math.exp(mid)) >= target:
            hi = mid
        else:
            lo = mid
    return math.exp(hi)


def gbps_for_cu(s: Setup, target: float) -> float:
    """The link bandwidth (Gbit/s) at which the evaluator's CU reaches ``target``."""
    c = compute_s(s)
    return bisect_gbps(lambda w: c / effective_s(s, w), target)


# --- SPEC 11 on this setup in closed form (the test's reference, and the what-if) -----------

def closed_form_t_eff(s: Setup, gbps: float, backward_overlap: bool = False) -> float:
    """T_eff (seconds) of SPEC 11 for this setup, written out: t = ``step_s``; ring over
    K = M one-replica domains at R = ``gbps`` with latency l; phi = 2(K-1)/K; G^o = P q/8;
    c = phi G^o / R + 2(K-1) l (the sync, or the outer sync O).

    - every_step: T = t + c
    - diloco: T_eff = t + c / H
    - streaming: o = c_bw / F + c_lat, s = max(0, o - nu t), T_eff = max(t + (F/H) s, F o / H)

    ``backward_overlap`` (what-if, not SPEC; needs ``s.layers`` = L): the sync of a layer
    starts when its backward is done, layer by layer as in the papers' simulated schedule;
    with the backward b = 2t/3, the exposed sync becomes max(c - b (1 - 1/L), c / L)
    (every_step, diloco), and the streaming window grows by b (1 - 1/L)."""
    t, K, R = s.step_s, s.workers, gbps * 1e9 / 8.0  # R in bytes/s
    if K == 1:
        return t
    phi = 2.0 * (K - 1) / K
    lat = 2.0 * (K - 1) * s.latency_ms / 1e3
    bw = phi * s.params * s.bits / 8.0 / R
    window, floor_share = 0.0, 1.0
    if backward_overlap:
        L = s.layers
        window, floor_share = backward_s(s) * (1.0 - 1.0 / L), 1.0 / L
    if s.mode in ("every_step", "diloco"):
        c = bw + lat
        exposed = max(c - window, c * floor_share) if backward_overlap else c
        return t + exposed / (1 if s.mode == "every_step" else s.H)
    o = bw / s.fragments + lat
    stall = max(0.0, o - s.overlap * t - window)
    return max(t + s.fragments / s.H * stall, s.fragments * o / s.H)


def closed_form_gbps(s: Setup, target: float, backward_overlap: bool = False) -> float:
    """Bandwidth for a CU ``target`` under :func:`closed_form_t_eff`."""
    return bisect_gbps(lambda w: s.step_s / closed_form_t_eff(s, w, backward_overlap), target)


def backward_s(s: Setup) -> float:
    """The backward pass of a step: 4N of the 6N FLOPs per token, 2/3 of ``step_s``."""
    return 2.0 * s.step_s / 3.0
