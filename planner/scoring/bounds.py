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
  no single domain can host the whole plan, it also crosses the WAN and
  back, at least twice the smallest link latency (the Little's-law term of
  SPEC 7 is >= this round trip divided by the in-flight count, and T >= one
  round trip).
* ``wan_volume``: when every plan must cross the WAN, each replica sends
  its micro-batches' activations over at least one link; all replicas
  together send global_batch * seq_len * (cheapest cut's bytes per token)
  each way, through at most the sum of all link bandwidths.

Example
-------
>>> lb = lower_bound(instance)                            # doctest: +SKIP
>>> lb.value, lb.binding
(12.3, 'compute')
"""

from __future__ import annotations

from dataclasses import dataclass

from ..problem.network import GBPS, MS
from ..problem.plan import Plan
from ..problem.space import PlanSpace


@dataclass(frozen=True)
class Bound:
    value: float  # seconds
    binding: str
    parts: dict[str, float]
    wan_forced: bool


def single_domain_possible(space: PlanSpace) -> bool:
    """True when some plan uses one domain only (no WAN traffic at all)."""
    inst = space.instance
    gbs = inst.workload.global_batch_size
    for d in inst.domains:
        for tp in inst.workload.tensor_parallel:
            if tp > d.gpus_per_node or tp > d.gpus:
                continue
            slots = d.gpus // tp
            for b in inst.workload.micro_batch_sizes:
                for sched in inst.options.schedules:
                    for S in range(1, min(slots, inst.max_stages, inst.num_units) + 1):
                        R = max(r for r in space.replica_options[b] if r * S <= slots) \
                            if any(r * S <= slots for r in space.replica_options[b]) else None
                        if R and space.feasible(tp, b, sched, S, gbs // (R * b)):
                            return True
    return False


def lower_bound(instance, space: PlanSpace | None = None) -> Bound:
    """The instance's lower bound on iteration time (seconds); see module docstring."""
    cache = instance.__dict__.setdefault("_planner_cache", {})
    if "lower_bound" in cache:
        return cache["lower_bound"]
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
    forced = len(instance.domains) > 1 and not single_domain_possible(space)
    if forced and instance.links:
        fill += 2 * min(link.latency_ms for link in instance.links) * MS
        cut = min(u.out_bytes_per_token for u in units[:-1]) if len(units) > 1 else 0.0
        total_bw = sum(link.bandwidth_gbps for link in instance.links) * GBPS
        parts["wan_volume"] = gbs * s * cut / total_bw
    parts["round_trip"] = fill
    binding = max(parts, key=parts.get)
    bound = Bound(parts[binding], binding, parts, forced)
    cache["lower_bound"] = bound
    return bound


def cost_lower_bound(instance) -> float:
    """Every FLOP runs on some GPU-second priced at least the cheapest GPU-hour."""
    sp = PlanSpace(instance)
    wl = instance.workload
    gpu_seconds = (wl.global_batch_size * wl.seq_len * (1 + sp.bwd) * sp.flops_total
                   / instance.gpu.flops_per_s)
    return gpu_seconds / 3600.0 * min(d.price_per_gpu_hour for d in instance.domains)


def objective_lower_bound(instance) -> float:
    """A lower bound on the instance's objective for any plan: :func:`lower_bound`
    (seconds) for a time instance, :func:`cost_lower_bound` for a cost one."""
    return lower_bound(instance).value if instance.options.objective == "time" else cost_lower_bound(instance)


def widen_claims(instance, p: Plan) -> Plan:
    """The figures of a plan whose schedule is explicit (a refined schedule).

    A search's status and bound are about plans with the instance's named
    schedules (``options.schedules``: 1f1b, gpipe); a refined schedule lies
    outside that space and may beat its optimum.  They move to
    ``named_status`` and ``named_bound``; ``bound`` becomes the instance's lower
    bound (:func:`lower_bound`, or its cost counterpart),
    valid for every plan whatever its schedule; ``optimal`` becomes
    ``feasible``; the gap is recomputed against that bound.  Plans with a
    named schedule, or already widened, are returned unchanged.
    """
    info = p.solver
    if info is None or isinstance(p.schedule, str) or "named_bound" in (info.model_extra or {}):
        return p
    universal = objective_lower_bound(instance)
    objective = info.objective
    bound = universal if objective is None else min(universal, objective)
    gap = None if objective is None or objective <= 0 else max(0.0, (objective - bound) / objective)
    status = "feasible" if info.status == "optimal" else info.status
    return p.model_copy(update={"solver": info.model_copy(update={
        "named_status": info.status, "named_bound": info.bound, "status": status, "bound": bound, "gap": gap})})
