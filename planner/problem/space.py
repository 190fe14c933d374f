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

from .limits import MAX_STAGE_MICRO_BATCHES
from .model import BYTES_PER_PARAM_STATE
from .partition import UnitTable, balanced_partition, light_boundaries, pack


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
    """Precomputed tables for one instance (see module docstring)."""

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
        self._cache: dict = _partition_cache(instance)

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
                / (tp * inst.gpu.flops_per_s))

    def stage_time(self, a: int, b: int, tp: int, micro_batch: int) -> float:
        """c = f + g of a stage holding units [a, b) (s per micro-batch): compute plus the
        tensor-parallel all-reduces, which SPEC 5 adds to the forward and the backward.

        >>> PlanSpace(instance).stage_time(0, 4, tp=4, micro_batch=1)    # doctest: +SKIP
        """
        inst = self.instance
        nbytes = (self.tp_bytes[b] - self.tp_bytes[a]) * micro_batch * inst.workload.seq_len
        return (self.compute_time(self.table.interval(a, b)[0], tp, micro_batch)
                + 2.0 * float(inst.gpu.tp_allreduce_s(nbytes, tp)))

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

    def _memory_rule(self, tp, micro_batch, schedule, stages, micro_batches):
        """(limit(j), act(j)) of the partition functions: the memory per stage slot (bytes)
        and the tokens of stored activation stage j keeps in flight."""
        cap = self.instance.memory_limit_bytes * tp
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


_PARTITIONS: dict[tuple, dict] = {}  # what a partition depends on -> its cache (a few entries)


def _partition_cache(instance) -> dict:
    """The partition cache of every instance with the same model, sequence length,
    recompute and usable memory per GPU (what a memory-feasible partition depends on):
    the aggregated instances of the hierarchical planner and what-if copies share it."""
    wl = instance.workload
    key = (wl.model.model_dump_json(), wl.seq_len, wl.recompute, instance.memory_limit_bytes)
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
