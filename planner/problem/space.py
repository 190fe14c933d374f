"""The discrete plan space of an instance: tensor-parallel degrees,
micro-batch sizes, schedules, stage counts, replica counts, and the memory-
feasible balanced partitions among them.  Greedy, the bounds and the exact
solvers share it.

Example
-------
>>> space = PlanSpace(instance)                            # doctest: +SKIP
>>> space.partition(tp=8, micro_batch=1, schedule="1f1b", stages=4, micro_batches=32)
[(0, 22), (22, 43), (43, 63), (63, 82)]
"""

from __future__ import annotations

from itertools import accumulate

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .limits import MAX_STAGE_MICRO_BATCHES
from .model import BYTES_PER_PARAM_STATE
from .specversion import check_spec
from .partition import UnitTable, balanced_partition, light_boundaries, pack, typed_partition


#: the memory rule of the leanest explicit schedule (one micro-batch in flight per
#: stage): a shape infeasible with it holds no plan whatever its schedule
LEAN = "lean"


class ShapeInfeasible(ValueError):
    """A shape proven to hold no feasible plan (under the pins); the message
    says why without naming the shape, so a search reports each reason once.
    Any other error while building a shape's model is not a proof."""



@dataclass(frozen=True, order=True)
class Shape:
    """A point of the discrete space (everything but the placement)."""

    tp: int
    micro_batch: int
    schedule: str
    stages: int
    replicas: int

    def micro_batches(self, global_batch: int) -> int:
        return global_batch // (self.replicas * self.micro_batch)


class PlanSpace:
    """Precomputed tables for one instance (see module docstring).

    ``gpu`` is the GPU type the shape figures (:meth:`compute_time`,
    :meth:`stage_time`) and the type-blind partitions (:meth:`partition`) use: the
    one type of every domain, or, on an instance with several types (SPEC v3 (g)),
    :func:`planning_gpu` (the GPU-weighted mean speed, the largest memory: a shape
    ranks by the fleet's average GPU and no shape that fits some type's memory is
    ruled out).  :meth:`typed_partition` cuts for the types a placement lands on."""

    def __init__(self, instance):
        self.instance = instance
        wl = instance.workload
        units = instance.units
        self.table = UnitTable([u.fwd_flops_per_token for u in units],
                               [BYTES_PER_PARAM_STATE * u.params for u in units],
                               [u.stored_bytes_per_token for u in units])
        self.bwd = 3.0 if wl.recompute else 2.0
        self.flops_total = self.table.flops[-1]
        self.tp_bytes = [0.0, *accumulate(float(u.tp_bytes_per_token) for u in units)]  # prefix sums
        self.gpu = planning_gpu(instance)
        self.memory_limit = (instance.memory_limit_bytes if not instance.heterogeneous
                             else instance.memory_limit_of(self.gpu))  # usable bytes per GPU
        self._cache: dict = _partition_cache(instance, self.memory_limit)

    # -- capacity ----------------------------------------------------------
    def slots(self, tp: int) -> dict[str, int]:
        """Stage slots of ``tp`` GPUs per domain (domains whose nodes fit tp)."""
        return {d.name: d.gpus // tp for d in self.instance.domains
                if d.gpus_per_node >= tp and d.gpus >= tp}

    @cached_property
    def replica_options(self) -> dict[int, list[int]]:
        """Micro-batch size -> replica counts R with R*b dividing the global batch."""
        gbs = self.instance.workload.global_batch_size
        most = self.instance.total_gpus  # R * S * tp <= GPUs: never more replicas than GPUs
        return {b: [r for r in divisors(gbs // b) if r <= most] if gbs % b == 0 else []
                for b in self.instance.workload.micro_batch_sizes}

    # -- compute -----------------------------------------------------------
    def compute_time(self, flops_per_token: float, tp: int, micro_batch: int) -> float:
        """Forward+backward seconds of one micro-batch over ``flops_per_token``."""
        inst = self.instance
        return ((1 + self.bwd) * flops_per_token * micro_batch * inst.workload.seq_len
                / (tp * self.gpu.flops_per_s))

    def stage_time(self, a: int, b: int, tp: int, micro_batch: int) -> float:
        """c = f + g of a stage holding units [a, b) (s per micro-batch): compute plus the
        tensor-parallel all-reduces, which SPEC 5 adds to the forward and the backward.

        >>> PlanSpace(instance).stage_time(0, 4, tp=4, micro_batch=1)    # doctest: +SKIP
        """
        inst = self.instance
        nbytes = (self.tp_bytes[b] - self.tp_bytes[a]) * micro_batch * inst.workload.seq_len
        return (self.compute_time(self.table.interval(a, b)[0], tp, micro_batch)
                + 2.0 * float(self.gpu.tp_allreduce_s(nbytes, tp)))

    # -- memory-feasible balanced partitions -------------------------------
    def _inflight(self, schedule: str, stages: int, m: int):
        """Micro-batches stage j holds in flight: gpipe m, 1f1b min(m, S - j), and
        ``LEAN`` one (an explicit schedule running each micro-batch's forward and
        backward before the next: the least activation memory of any schedule)."""
        if schedule == "gpipe":
            return lambda j: m
        if schedule == LEAN:
            return lambda j: 1
        return lambda j: min(m, stages - j)

    def partition(self, tp: int, micro_batch: int, schedule: str, stages: int,
                  micro_batches: int, balance: bool = True):
        """Balanced partition into ``stages`` stages fitting memory, or None (also when
        stages x micro_batches passes ``limits.MAX_STAGE_MICRO_BATCHES``: the schedule
        the simulator compiles would grow with it)."""
        if stages * micro_batches > MAX_STAGE_MICRO_BATCHES:
            return None
        key = (tp, micro_batch, schedule, stages,
               micro_batches if schedule == "gpipe" else min(micro_batches, stages), balance)
        if key not in self._cache:
            limit, act = self._memory_rule(tp, micro_batch, schedule, stages, micro_batches)
            if balance:
                self._cache[key] = balanced_partition(self.table, stages, limit, act)
            else:
                self._cache[key] = pack(self.table, stages, float("inf"), limit, act)
        return self._cache[key]

    def light_partition(self, tp: int, micro_batch: int, schedule: str, stages: int,
                        micro_batches: int):
        """The balanced partition with its boundaries moved to where less activation
        crosses them (``partition.light_boundaries``; activation and gradient timed at
        the median link bandwidth), or None when it is the same or the instance has no links."""
        cuts = self.partition(tp, micro_batch, schedule, stages, micro_batches)
        if cuts is None or self.median_link_bytes_per_s is None:
            return None
        tokens = micro_batch * self.instance.workload.seq_len
        # a boundary's link carries the activation forward and its gradient back per micro-batch
        send = [2.0 * u.out_bytes_per_token * tokens / self.median_link_bytes_per_s for u in self.instance.units]
        return light_boundaries(self.table, cuts, send, lambda a, b: self.stage_time(a, b, tp, micro_batch),
                                *self._memory_rule(tp, micro_batch, schedule, stages, micro_batches), micro_batches)

    # -- GPU types (SPEC v3 (g)): partitions for the types a placement lands on ----------
    def type_times(self, gpu_type: int, tp: int, micro_batch: int) -> np.ndarray:
        """Prefix sums (s) of c = f + g per unit on GPU type ``gpu_type`` (an index into
        ``instance.gpu_types``): a stage over units [a, b) takes ``p[b] - p[a]`` seconds per
        micro-batch (SPEC 5: compute at the type's peak * mfu, the tensor-parallel
        all-reduces at its NVLink bandwidth, v3's unit overhead).

        >>> PlanSpace(instance).type_times(1, tp=1, micro_batch=1)[-1]   # doctest: +SKIP
        0.0265
        """
        memo = self.__dict__.setdefault("_type_times", {})
        key = (gpu_type, tp, micro_batch)
        if key not in memo:
            gpu = self.instance.gpu_types[gpu_type]
            tokens = micro_batch * self.instance.workload.seq_len
            flops = np.asarray(self.table.flops)
            tp_bytes = np.asarray(self.tp_bytes)
            counted = np.concatenate([[0.0], np.cumsum([u.fwd_flops_per_token > 0 for u in self.instance.units])])
            overhead = gpu.unit_overhead_ms / 1000.0 if check_spec(None) >= 3 else 0.0
            memo[key] = ((1 + self.bwd) * flops * tokens / (tp * gpu.flops_per_s)
                         + 2.0 * np.asarray(gpu.tp_allreduce_s(tp_bytes * tokens, tp), float)
                         + (1 + self.bwd) * counted * overhead)
        return memo[key]

    def typed_partition(self, tp: int, micro_batch: int, schedule: str, stages: int, micro_batches: int,
                        types) -> list[tuple[int, int]] | None:
        """The partition into ``stages`` stages whose slowest (replica, stage) is fastest
        when stage j runs on the GPU types ``types[j]`` (indices into
        ``instance.gpu_types``; several when replicas put stage j on different types),
        every stage fitting the memory of the smallest type hosting it
        (:func:`planner.problem.partition.typed_partition`); None when none fits.  Cuts
        layers in proportion to the speed of the type each stage lands on: with two
        stages on types twice as fast as each other, about 2:1.

        >>> PlanSpace(mixed).typed_partition(1, 1, "1f1b", 2, 4, ((1,), (0,)))   # doctest: +SKIP
        [(0, 6), (6, 9)]
        """
        if stages * micro_batches > MAX_STAGE_MICRO_BATCHES:
            return None
        types = tuple(tuple(sorted(set(t))) for t in types)
        key = ("typed", tp, micro_batch, schedule, stages,
               micro_batches if schedule == "gpipe" else min(micro_batches, stages), types)
        if key not in self._cache:
            inst = self.instance
            w = self._inflight(schedule, stages, micro_batches)
            tokens = micro_batch * inst.workload.seq_len
            caps = [min(inst.memory_limit_of(inst.gpu_types[u]) for u in ts) * tp for ts in types]
            times = [np.array([self.type_times(u, tp, micro_batch) for u in ts]) for ts in types]
            self._cache[key] = typed_partition(self.table, stages, times, caps.__getitem__,
                                               lambda j: w(j) * tokens)
        return self._cache[key]

    def fits_types(self, cuts, tp: int, micro_batch: int, schedule: str, micro_batches: int, types) -> bool:
        """Whether every stage of ``cuts`` fits the usable memory of the smallest of its GPU
        types ``types[j]`` under ``schedule``'s in-flight rule (no tolerance: what fits here
        fits SPEC 5's rule).

        >>> PlanSpace(mixed).fits_types([(0, 5), (5, 10)], 1, 1, "1f1b", 4, ((0,), (1,)))  # doctest: +SKIP
        True
        """
        inst = self.instance
        w = self._inflight(schedule, len(cuts), micro_batches)
        tokens = micro_batch * inst.workload.seq_len
        for j, ((a, b), ts) in enumerate(zip(cuts, types)):
            _, mem, stored = self.table.interval(a, b)
            if mem + w(j) * tokens * stored > min(inst.memory_limit_of(inst.gpu_types[u]) for u in ts) * tp:
                return False
        return True

    def _memory_rule(self, tp, micro_batch, schedule, stages, micro_batches):
        """(limit(j), act(j)) of the partition functions: the memory per stage slot (bytes)
        and the tokens of stored activation stage j keeps in flight."""
        cap = self.memory_limit * tp
        w = self._inflight(schedule, stages, micro_batches)
        tokens = micro_batch * self.instance.workload.seq_len
        return (lambda j: cap), (lambda j: w(j) * tokens)

    @cached_property
    def median_link_bytes_per_s(self) -> float | None:
        """The median bandwidth of the instance's links (bytes/s), None without links."""
        bw = sorted(link.bandwidth_gbps for link in self.instance.links)
        return bw[len(bw) // 2] * 1e9 / 8 if bw else None

    def feasible(self, tp, micro_batch, schedule, stages, micro_batches) -> bool:
        return self.partition(tp, micro_batch, schedule, stages, micro_batches, balance=False) is not None

    def shapes(self, max_gpus: int | None = None):
        """Every (tp, b, schedule, S, R) whose GPUs fit the slots, unfiltered by memory
        (but within ``limits.MAX_STAGE_MICRO_BATCHES``)."""
        inst = self.instance
        n_units = inst.num_units
        for tp in inst.workload.tensor_parallel:
            total_slots = sum(self.slots(tp).values())
            if max_gpus is not None:
                total_slots = min(total_slots, max_gpus // tp)
            for b in inst.workload.micro_batch_sizes:
                for sched in inst.options.schedules:
                    for S in range(1, min(inst.max_stages, n_units, total_slots) + 1):
                        for R in self.replica_options[b]:
                            if R * S > total_slots:
                                break
                            if S * (inst.workload.global_batch_size // (R * b)) > MAX_STAGE_MICRO_BATCHES:
                                continue  # see partition()
                            yield Shape(tp, b, sched, S, R)


def planning_gpu(instance):
    """The GPU type a :class:`PlanSpace` ranks shapes with: the one type of every domain;
    with several types (SPEC v3 (g)), a type with the GPU-weighted mean peak * mfu of
    the domains (as ``peak_tflops``, ``mfu`` 1), the smallest NVLink bandwidth (none
    when some type has none), the mean unit overhead and the largest memory.

    >>> planning_gpu(mixed).memory_gb                                   # doctest: +SKIP
    80.0
    """
    if not instance.heterogeneous:
        return instance.gpu
    cache = instance.__dict__.setdefault("_planner_cache", {})
    if "planning_gpu" not in cache:
        from .instance import GPU

        types = [instance.gpu_types[u] for u in instance.domain_type]
        gpus = [d.gpus for d in instance.domains]
        total = float(sum(gpus))
        speed = sum(g.flops_per_s * k for g, k in zip(types, gpus)) / total
        nvlink = [g.nvlink_bandwidth_gbps for g in types]
        cache["planning_gpu"] = GPU.model_construct(
            name="planning", peak_tflops=speed / 1e12, mfu=1.0, memory_gb=max(g.memory_gb for g in types),
            nvlink_bandwidth_gbps=None if None in nvlink else min(nvlink),
            unit_overhead_ms=sum(g.unit_overhead_ms * k for g, k in zip(types, gpus)) / total)
    return cache["planning_gpu"]


_PARTITIONS: dict[tuple, dict] = {}  # what a partition depends on -> its cache (a few entries)


def _partition_cache(instance, memory_limit: float) -> dict:
    """The partition cache of every instance with the same model, sequence length,
    recompute and usable memory per GPU (what a memory-feasible partition depends on):
    the aggregated instances of the hierarchical planner and what-if copies share it.
    With several GPU types (SPEC v3 (g)) the types' figures are in the key too (the
    typed partitions depend on them)."""
    wl = instance.workload
    key = (wl.model.model_dump_json(), wl.seq_len, wl.recompute, memory_limit)
    if instance.heterogeneous:
        key += (tuple(g.model_dump_json() for g in instance.gpu_types), instance.options.memory_reserve_fraction,
                check_spec(None))
    if key not in _PARTITIONS:
        if len(_PARTITIONS) >= 8:
            _PARTITIONS.pop(next(iter(_PARTITIONS)))
        _PARTITIONS[key] = {}
    return _PARTITIONS[key]


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` >= 1 in increasing order, in O(sqrt n) steps.

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]
