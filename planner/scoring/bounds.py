"""Lower bounds on the iteration time of any feasible plan of an instance.

Each part is a valid bound on its own; :func:`lower_bound` reports their
maximum and names the part that binds.  Parts (seconds):

* ``compute``: all the iteration's FLOPs spread over every GPU of the
  instance at peak * mfu.
* ``stage_work``: the heaviest unit cannot be split across stages; its
  stage processes a replica's whole batch, and at most
  min(GPUs, global_batch/min_micro_batch * max_tp) GPUs share that work.
* ``round_trip``: one micro-batch of the smallest size must go forward
  and backward through every unit at the largest tp (pipeline fill); when
  no single domain can host the whole plan (whatever its schedule: one
  micro-batch in flight per stage fits where 1f1b does not), it also crosses
  the WAN and back, at least twice the smallest link latency (the Little's-law term of
  SPEC 7 is >= this round trip divided by the in-flight count, and T >= one
  round trip).
* ``shapes`` (SPEC v3, instances up to :data:`SHAPE_BOUND_MAX_DOMAINS` domains):
  the smallest over every shape (tp, micro-batch, replicas, stages) of a bound
  holding for every plan of the shape -- the pipeline's serial work and fill
  over the best partition, the WAN its GPUs force, the slower GPU types it must
  use (:mod:`planner.scoring.shapebound`; per dp_sync class, :func:`sync_classes`).
* ``wan_volume``: when every plan must cross the WAN, each replica sends
  its micro-batches' activations over at least one link; all replicas
  together send global_batch * seq_len * (cheapest cut's bytes per token)
  each way, through at most the sum of all link bandwidths.

``spec`` (default :data:`~planner.problem.specversion.DEFAULT_SPEC`) is the
version of the evaluator the bound holds for.  Under SPEC v3 uplink caps,
processor sharing and the routes' latencies can only slow a plan against
these parts, but full duplex lets the forward channels use both directions
of every link: ``wan_volume`` then divides by twice the sum of the link
bandwidths (or the sum of the domains' uplinks, when every domain has one
and that is less: every forward channel leaves its first domain through its
uplink).  The unit overhead (v3) adds ``(1 + beta) * o`` per unit with
FLOPs and micro-batch to ``compute`` (at the smallest tp, the largest
micro-batch) and to ``round_trip``; ``stage_work`` is unchanged.  A 2-member
ring or a direct route changes none of these parts: none charges the
gradient sync, and every route has at least one link of at least the
smallest latency.

GPU types (SPEC v3 (g)): with several types the parts are those of the
*optimistic* instance (:func:`fastest_type_instance`): every domain gets the
type with the largest peak * mfu, the largest NVLink bandwidth (none, that
is free tensor-parallel communication, when some type has none), the
smallest unit overhead and the largest memory.  Every plan feasible on the
instance is feasible there (memory only grows; GPUs, nodes and links are the
same), and its f and g are no larger on every (replica, stage); T is
non-decreasing in every f and g (SPEC 7, "GPU types"), so a lower bound
there is one here.  ``cost_lower_bound`` takes the cheapest price per
achieved FLOP over the domains.

Example
-------
>>> lb = lower_bound(instance)                            # doctest: +SKIP
>>> lb.value, lb.binding
(12.3, 'compute')
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..problem.network import GBPS, MS
from ..problem.plan import SolverInfo
from ..problem.specversion import check_spec
from ..problem.space import LEAN, PlanSpace
from . import placebound
from .shapebound import shape_bound, slow_types
from .syncbound import sync_subclasses


@dataclass(frozen=True)
class Bound:
    value: float  # seconds
    binding: str
    parts: dict[str, float]
    wan_forced: bool


def single_domain_possible(space: PlanSpace) -> bool:
    """True when some plan uses one domain only (no WAN traffic at all).

    Any schedule counts, explicit ones included: the memory test is the
    leanest schedule's (:data:`planner.problem.space.LEAN`, one micro-batch in
    flight per stage), which every schedule needs at least."""
    inst = space.instance
    gbs = inst.workload.global_batch_size
    for d in inst.domains:
        for tp in inst.workload.tensor_parallel:
            if tp > d.gpus_per_node or tp > d.gpus:
                continue
            slots = d.gpus // tp
            for b in inst.workload.micro_batch_sizes:
                for S in range(1, min(slots, inst.max_stages, inst.num_units) + 1):
                    R = max(r for r in space.replica_options[b] if r * S <= slots) \
                        if any(r * S <= slots for r in space.replica_options[b]) else None
                    if R and space.feasible(tp, b, LEAN, S, gbs // (R * b)):
                        return True
    return False


def lower_bound(instance, space: PlanSpace | None = None, spec: int | None = None) -> Bound:
    """The instance's lower bound on iteration time (seconds) under the evaluator of
    version ``spec``; see module docstring."""
    spec = check_spec(spec)
    key = "lower_bound" if spec == 2 else f"lower_bound_v{spec}"
    cache = instance.__dict__.setdefault("_planner_cache", {})
    if key in cache:
        return cache[key]
    if instance.heterogeneous:  # the optimistic one-type instance (module docstring)
        bound = lower_bound(fastest_type_instance(instance), spec=spec)
        if spec >= 3 and len(instance.domains) <= SHAPE_BOUND_MAX_DOMAINS:
            # the per-shape part knows which domains have the slower types
            typed = _shapes_part(instance)
            if math.isfinite(typed) and typed > bound.parts.get("shapes", 0.0):
                parts = {**bound.parts, "shapes": typed}
                binding = max(parts, key=parts.get)
                bound = Bound(parts[binding], binding, parts, bound.wan_forced)
        cache[key] = bound
        return bound
    space = space or PlanSpace(instance)
    wl = instance.workload
    gbs, s = wl.global_batch_size, wl.seq_len
    flops = instance.gpu.flops_per_s
    mult = 1 + space.bwd
    units = instance.units
    n_gpus = instance.total_gpus
    t_max = max(t for t in wl.tensor_parallel if any(d.gpus_per_node >= t for d in instance.domains))
    b_min = min(wl.micro_batch_sizes)
    parts = {"compute": gbs * s * mult * space.flops_total / (n_gpus * flops)}
    heaviest = max(u.fwd_flops_per_token for u in units)
    parts["stage_work"] = gbs * s * mult * heaviest / (min(n_gpus, gbs // b_min * t_max) * flops)
    fill = b_min * s * mult * space.flops_total / (t_max * flops)
    overhead = (instance.gpu.unit_overhead_ms or 0.0) * MS if spec >= 3 else 0.0
    if overhead > 0:
        # every unit with FLOPs costs o forward and beta * o backward per micro-batch on
        # each of its stage's t GPUs: at least gbs / b_max * t_min such passes per unit
        n_o = sum(1 for u in units if u.fwd_flops_per_token > 0)
        t_min = min(wl.tensor_parallel)
        parts["compute"] += gbs / max(wl.micro_batch_sizes) * t_min * mult * n_o * overhead / n_gpus
        fill += mult * n_o * overhead
    forced = len(instance.domains) > 1 and not single_domain_possible(space)
    if forced and instance.links:
        fill += 2 * min(link.latency_ms for link in instance.links) * MS
        cut = min(u.out_bytes_per_token for u in units[:-1]) if len(units) > 1 else 0.0
        total_bw = sum(link.bandwidth_gbps for link in instance.links) * GBPS
        if spec >= 3:  # full duplex: forward channels may run both ways on every link
            total_bw *= 2
            if all(d.uplink_gbps is not None for d in instance.domains):
                total_bw = min(total_bw, sum(d.uplink_gbps for d in instance.domains) * GBPS)
        parts["wan_volume"] = gbs * s * cut / total_bw
    parts["round_trip"] = fill
    if spec >= 3 and len(instance.domains) <= SHAPE_BOUND_MAX_DOMAINS:
        shapes = _shapes_part(instance)
        if math.isfinite(shapes):
            parts["shapes"] = shapes
    binding = max(parts, key=parts.get)
    bound = Bound(parts[binding], binding, parts, forced)
    cache[key] = bound
    return bound


#: the per-shape part (:mod:`planner.scoring.shapebound`) is skipped above this many
#: domains (the national-scale instances keep the instance-wide parts: their shape
#: enumeration does not depend on the domains, but their solvers call the bound on
#: many aggregated instances and none of them is within reach of it anyway)
SHAPE_BOUND_MAX_DOMAINS = 40


def _shape_value(instance, ring_bits, objective: str, floor=None) -> float:
    """:func:`planner.scoring.shapebound.shape_bound`'s value for ``instance``: on its
    optimistic one-type copy, told which domains have the slower types (SPEC v3 (g)) and,
    with ``floor`` (a :class:`planner.scoring.syncbound.SyncFloor`), the sync every stage
    of the class's plans pays; cached per (ring_bits, objective, floor)."""
    cache = instance.__dict__.setdefault("_planner_cache", {})
    key = ("shape_bound", ring_bits, objective, floor)
    if key not in cache:
        cache[key] = shape_bound(fastest_type_instance(instance), ring_bits, objective,
                                 slow_types(instance), per_step=floor).value
    return cache[key]


def _subclasses(instance):
    """:func:`planner.scoring.syncbound.sync_subclasses` of ``instance`` (cached): the
    classes of :func:`sync_classes`, DiLoCo and streaming split by their number of groups,
    each ``(ring_bits, floor, e_max)``."""
    cache = instance.__dict__.setdefault("_planner_cache", {})
    if "sync_subclasses" not in cache:
        cache["sync_subclasses"] = sync_subclasses(instance, sync_classes(instance))
    return cache["sync_subclasses"]


def _shapes_part(instance) -> float:
    """The per-shape part of :func:`lower_bound` (seconds): the smallest over the sync
    classes (:func:`_subclasses`) of :func:`_time_shape_value`."""
    return min(_time_shape_value(instance, bits, floor) for bits, floor, _ in _subclasses(instance))


def _time_shape_value(instance, ring_bits, floor=None) -> float:
    """The per-shape part on T of :func:`lower_bound` for one class (``ring_bits``,
    ``floor``): :func:`_shape_value`, refined per placement (:func:`_placement_value`, a
    bound for every plan of the ``ring_bits`` class, so of each of its subclasses) on
    instances of at most :data:`planner.scoring.placebound.MAX_DOMAINS` domains."""
    value = _shape_value(instance, ring_bits, "time", floor)
    if len(instance.domains) <= placebound.MAX_DOMAINS and math.isfinite(value):
        value = max(value, _placement_value(instance, ring_bits))
    return value


def _placement_value(instance, ring_bits) -> float:
    """:func:`planner.scoring.placebound.refined_shape_values`'s bound on T for small
    ``instance`` (the per-shape parts, every shape kept, refined per placement); cached."""
    cache = instance.__dict__.setdefault("_planner_cache", {})
    key = ("placement_bound", ring_bits)
    if key not in cache:
        parts = shape_bound(fastest_type_instance(instance), ring_bits, "time", slow_types(instance),
                            prune=False).parts
        cache[key] = placebound.refined_shape_values(instance, parts, ring_bits)[0] if parts else 0.0
    return cache[key]


def sync_classes(instance) -> list[tuple[int | None, float]]:
    """The plans the tool accepts, in two classes by what their per-step sync must send
    (SPEC 11): ``(ring_bits, e_max)`` with ``ring_bits`` the fewest bits per parameter
    an every-step sync may use (16, or less when a quality row covers a compressed
    one: default row 1 covers 4 bits on every instance, since a plan file may carry
    it), or None for DiLoCo and streaming (their per-step sync may stay inside one
    domain); ``e_max`` the largest quality factor any plan of the class can have
    (first matching row, over every H, bits and number of groups a plan may carry,
    not only the ``[options]`` candidates).

    >>> sync_classes(load_instance("gcp-16"))               # doctest: +SKIP
    [(4, 1.0)]
    """
    from ..problem.dpsync import FULL_BITS, MAX_H, DpSync, quality_row, quality_rows

    cache = instance.__dict__.setdefault("_planner_cache", {})
    if "sync_classes" in cache:
        return cache["sync_classes"]
    modes = instance.options.sync_modes
    rows = quality_rows(instance)
    out: list[tuple[int | None, float]] = []
    if "every_step" in modes:
        covered = [(q, quality_row(rows, DpSync(mode="every_step", bits=q), 1)) for q in range(1, 33)
                   if q != FULL_BITS]
        covered = [(q, row.e) for q, row in covered if row is not None]
        out.append((min([FULL_BITS] + [q for q, _ in covered]), max([1.0] + [e for _, e in covered])))
    outer = [mode for mode in ("diloco", "streaming") if mode in modes]
    if outer:
        D = max(len(instance.domains), 1)
        Hs = {1, MAX_H} | {h for r in rows if r.max_H for h in (r.max_H, min(r.max_H + 1, MAX_H))}
        Ms = {1, D} | {k for r in rows if r.max_groups for k in (r.max_groups, r.max_groups + 1) if k <= D}
        es = [row.e for mode in outer for H in Hs for q in range(1, 33) for M in Ms
              if (row := quality_row(rows, DpSync(mode=mode, H=H, bits=q), M)) is not None]
        out.append((None, max(es) if es else 1.0))
    cache["sync_classes"] = out
    return out


def fastest_type_instance(instance):
    """``instance`` with one GPU type for every domain, at least as fast and as large
    as each of its types: the peak and mfu of the type with the largest peak * mfu,
    the largest ``nvlink_bandwidth_gbps`` (none when some type has none), the
    smallest ``unit_overhead_ms``, the largest ``memory_gb``.  ``instance`` itself
    when its domains have one type.  Cached on the instance.

    >>> fastest_type_instance(mixed).gpu.peak_tflops      # doctest: +SKIP
    989.0
    """
    if not instance.heterogeneous:
        return instance
    cache = instance.__dict__.setdefault("_planner_cache", {})
    if "fastest_type_instance" not in cache:
        from ..problem.instance import Instance

        types = [instance.gpu_types[u] for u in instance.types_used]
        fast = max(types, key=lambda g: g.flops_per_s)
        nvlink = [g.nvlink_bandwidth_gbps for g in types]
        gpu = {"name": "optimistic", "peak_tflops": fast.peak_tflops, "mfu": fast.mfu,
               "memory_gb": max(g.memory_gb for g in types),
               "unit_overhead_ms": min(g.unit_overhead_ms for g in types)}
        if None not in nvlink:
            gpu["nvlink_bandwidth_gbps"] = max(nvlink)
        data = instance.to_dict()
        data["workload"]["model"] = instance.workload.model
        data["gpu"] = gpu
        data.pop("gpus", None)
        for d in data["domains"]:
            d.pop("gpu", None)
        cache["fastest_type_instance"] = Instance.from_dict(data)
    return cache["fastest_type_instance"]


def cost_lower_bound(instance, spec: int | None = None) -> float:
    """Every FLOP runs on some GPU-second priced at least the cheapest GPU-hour (any
    ``spec``: the v3 unit overhead only adds GPU-seconds).  With several GPU types:
    every FLOP costs at least the smallest price_per_gpu_hour / (peak * mfu) over
    the domains."""
    sp = PlanSpace(fastest_type_instance(instance))
    wl = instance.workload
    if instance.heterogeneous:
        per_flop = min(d.price_per_gpu_hour / instance.domain_gpu(d.name).flops_per_s for d in instance.domains)
        return wl.global_batch_size * wl.seq_len * (1 + sp.bwd) * sp.flops_total * per_flop / 3600.0
    gpu_seconds = (wl.global_batch_size * wl.seq_len * (1 + sp.bwd) * sp.flops_total
                   / instance.gpu.flops_per_s)
    return gpu_seconds / 3600.0 * min(d.price_per_gpu_hour for d in instance.domains)


def objective_lower_bound(instance, spec: int | None = None) -> float:
    """A lower bound on the instance's objective for any plan: :func:`lower_bound`
    (seconds) for a time instance, :func:`cost_lower_bound` for a cost one, under
    the evaluator of version ``spec``.  Both bound T_in and its cost, and T_eff >=
    T_in for every ``dp_sync``; the objective divides by the plan's quality factor e,
    so the bound divides by the largest e the instance allows (SPEC 11 "Solvers";
    1 without ``[options] dp_sync``).  Under SPEC v3 the per-shape part
    (:mod:`planner.scoring.shapebound`) is taken per class of
    :func:`planner.scoring.syncbound.sync_subclasses` (:func:`sync_classes`, DiLoCo and
    streaming split by their number of groups): every-step plans pay every stage's
    sync at the fewest bits a row covers and divide by their class's largest e,
    DiLoCo and streaming plans with M groups pay their groups' inner sync and divide
    by the largest e of their M; the bound is the smallest.  On a time instance of
    at most :data:`planner.scoring.placebound.MAX_DOMAINS` domains each class's per-shape
    part is refined per placement (:mod:`planner.scoring.placebound`: placements
    enumerated within a deterministic work budget, each shape kept at its part when
    too large)."""
    spec = check_spec(spec)
    cache = instance.__dict__.setdefault("_planner_cache", {})
    key = ("objective_lower_bound", spec)
    if key in cache:
        return cache[key]
    time = instance.options.objective == "time"
    if spec < 3:
        value = (lower_bound(instance, spec=spec).value if time else cost_lower_bound(instance, spec)) \
            / max(e for _, e in sync_classes(instance))
    else:
        if time:  # the instance-wide parts hold for every class
            base = max(v for k, v in lower_bound(instance, spec=spec).parts.items() if k != "shapes")
        else:
            base = cost_lower_bound(instance, spec)
        per_class = []
        for bits, floor, e_max in _subclasses(instance):
            shapes = ((_time_shape_value(instance, bits, floor) if time else _shape_value(instance, bits, "cost", floor))
                      if len(instance.domains) <= SHAPE_BOUND_MAX_DOMAINS else 0.0)
            per_class.append(max(base, shapes if math.isfinite(shapes) else 0.0) / e_max)
        value = min(per_class)
    cache[key] = value
    return value


#: a relative gap at most this is called ``optimal`` (the solvers' default tolerance)
OPTIMAL_GAP = 1e-3


def gap_claim(gap: float | None, requested: float | None = None) -> str | None:
    """The claim a relative ``gap`` allows under the ``requested`` tolerance
    (None: :data:`OPTIMAL_GAP`): ``"optimal"`` when it is within both,
    ``"within_gap"`` when within the requested one only (a loose ``--gap``),
    else None.

    >>> gap_claim(0.0), gap_claim(0.71, 0.9), gap_claim(0.71)
    ('optimal', 'within_gap', None)
    """
    tol = OPTIMAL_GAP if requested is None else requested
    if gap is None or gap > tol + 1e-12:
        return None
    return "optimal" if gap <= OPTIMAL_GAP + 1e-12 else "within_gap"


def estimate_family(instance, schedule: str | None = None, pinned: bool = False) -> str:
    """The plans a search over named schedules covers, in words: ``"1f1b/gpipe
    plans, by T_est"`` (``schedule`` pinned: that one; ``pinned``: "within
    the pins")."""
    names = [schedule] if schedule else list(instance.options.schedules)
    measure = "T_est" if instance.options.objective == "time" else "the cost at T_est"
    return f"{'/'.join(names)} plans{' within the pins' if pinned else ''}, by {measure}"


def settle_claims(instance, info: SolverInfo, objective: float, spec: int | None = None) -> SolverInfo:
    """``info`` with the claims SPEC 7 allows ("Bounds and claims").

    ``objective`` is the evaluator's objective of the plan (exact simulation:
    seconds, or cost per iteration).  A search's own figures (``status``,
    ``objective``, ``bound``, ``gap``: on T_est, over plans with a named
    schedule) move to ``estimate_status``, ``estimate_objective``,
    ``estimate_bound`` and ``estimate_gap``, with ``estimate_family`` naming
    the plans they cover (the search may set it; default
    :func:`estimate_family`).  ``bound`` becomes
    :func:`objective_lower_bound`, valid for the evaluator's objective of
    every plan the tool accepts, explicit schedules included; ``gap`` is
    measured from it; ``status`` is :func:`gap_claim`'s (``optimal``, or
    ``within_gap`` of ``requested_gap``) when that gap allows it, else
    ``feasible`` for a search that finished, else the search's own
    (``time_limit``, ``interrupted`` ...); a heuristic stays ``heuristic``.
    Applying it again (a refined plan) recomputes the universal part only.
    ``spec``: the version of the evaluator that scored ``objective``.
    """
    update: dict = {}
    # a search's own claims (it has a bound of its own); a heuristic stopped early (time_limit,
    # interrupted, memory_limit, no bound) has none to keep
    if info.estimate_status is None and info.status != "heuristic" and info.bound is not None:
        update = dict(estimate_status=info.status, estimate_objective=info.objective,
                      estimate_bound=info.bound, estimate_gap=info.gap,
                      estimate_family=info.estimate_family or estimate_family(instance))
        searched = info.status
    else:
        searched = info.estimate_status or info.status
    bound = objective_lower_bound(instance, spec)
    gap = None if objective is None or not objective > 0 else max(0.0, (objective - bound) / objective)
    claim = gap_claim(gap, info.requested_gap)
    if searched == "heuristic":
        status = "heuristic"
    elif claim is not None:
        status = claim
    elif searched in ("optimal", "within_gap"):
        status = "feasible"
    else:
        status = searched
    update.update(status=status, objective=objective, bound=bound, gap=gap)
    return info.model_copy(update=update)
