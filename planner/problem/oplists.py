"""Micro-batch schedules: per-stage op lists (SPEC section 6).

An op is ``(kind, i)``: kind ``F`` (forward) or ``B`` (backward) of
micro-batch ``i``.  ``gpipe`` and ``1f1b`` are generated; an explicit
schedule is one op list per stage, written ``"F0"``, ``"B3"`` in files.

Example
-------
>>> [format_op(op) for op in op_list("1f1b", stage=2, stages=4, micro_batches=4)]
['F0', 'F1', 'B0', 'F2', 'B1', 'F3', 'B2', 'B3']
>>> inflight_counts("1f1b", stages=4, micro_batches=8)
[4, 3, 2, 1]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from .errors import InputError

F, B = "F", "B"
Op = tuple[str, int]
NAMED = ("1f1b", "gpipe")
_OP = re.compile(r"^([FB])(\d+)$")


def op_list(kind: str, stage: int, stages: int, micro_batches: int) -> list[Op]:
    """The op list of ``stage`` (0-based) under a named schedule."""
    m = micro_batches
    if kind == "gpipe":
        return [(F, i) for i in range(m)] + [(B, i) for i in range(m)]
    if kind == "1f1b":
        w = min(stages - stage - 1, m)
        ops = [(F, i) for i in range(w)]
        for q in range(m - w):
            ops += [(F, w + q), (B, q)]
        return ops + [(B, i) for i in range(m - w, m)]
    raise ValueError(f"unknown schedule {kind!r}")


def inflight_op_list(w: int, micro_batches: int) -> list[Op]:
    """One stage's op list under 1f1b with in-flight limit ``w`` micro-batches:
    ``w - 1`` warm-up forwards, then forward/backward pairs, then the drain.

    ``w = min(m, S - j)`` is 1f1b's own stage j, ``w = m`` gpipe's order on that
    stage; the largest in-flight count is ``min(w, m)``, so SPEC 7's ``w_j`` is
    the limit itself and T_est applies as to 1f1b.

    >>> [format_op(op) for op in inflight_op_list(3, micro_batches=4)]
    ['F0', 'F1', 'F2', 'B0', 'F3', 'B1', 'B2', 'B3']
    """
    m = micro_batches
    warm = min(max(w, 1), m) - 1
    ops = [(F, i) for i in range(warm)]
    for q in range(m - warm):
        ops += [(F, warm + q), (B, q)]
    return ops + [(B, i) for i in range(m - warm, m)]


def op_lists(schedule, stages: int, micro_batches: int) -> list[list[Op]]:
    """Op lists of all stages: ``schedule`` is a name or explicit lists."""
    if isinstance(schedule, str):
        return [op_list(schedule, j, stages, micro_batches) for j in range(stages)]
    return [[parse_op(o) if isinstance(o, str) else tuple(o) for o in ops] for ops in schedule]


@lru_cache(maxsize=1 << 16)
def parse_op(text: str) -> Op:
    match = _OP.match(text.strip())
    if not match:
        raise ValueError(f"bad op {text!r}: expected F<i> or B<i>")
    return match.group(1), int(match.group(2))


def format_op(op: Op) -> str:
    return f"{op[0]}{op[1]}"


def check_op_lists(lists: Sequence[Sequence[Op]], stages: int, micro_batches: int,
                   field: str = "schedule.ops") -> None:
    """Raise ``InputError`` unless every stage holds each F(i), B(i) once, F before B."""
    if len(lists) != stages:
        raise InputError(f"{len(lists)} op lists for {stages} stages", field)
    m = micro_batches
    for j, ops in enumerate(lists):
        seen_f: set[int] = set()
        seen_b: set[int] = set()
        for pos, (kind, i) in enumerate(ops):
            where = f"{field}[{j}][{pos}]"
            if not 0 <= i < m:
                raise InputError(f"micro-batch {i} outside 0..{m - 1}", where)
            if kind == F:
                if i in seen_f:
                    raise InputError(f"F{i} appears twice on stage {j}", where)
                seen_f.add(i)
            else:
                if i in seen_b:
                    raise InputError(f"B{i} appears twice on stage {j}", where)
                if i not in seen_f:
                    raise InputError(f"B{i} comes before F{i} on stage {j}", where)
                seen_b.add(i)
        if len(seen_f) != m or len(seen_b) != m:
            missing = [f"F{i}" for i in range(m) if i not in seen_f] + \
                      [f"B{i}" for i in range(m) if i not in seen_b]
            raise InputError(f"stage {j} lacks {', '.join(missing[:6])}"
                             + (" ..." if len(missing) > 6 else ""), f"{field}[{j}]")


def max_inflight(ops: Sequence[Op]) -> int:
    """Largest number of micro-batches with F done and B not yet done."""
    live = best = 0
    for kind, _ in ops:
        live += 1 if kind == F else -1
        best = max(best, live)
    return best


def inflight_counts(schedule, stages: int, micro_batches: int) -> list[int]:
    """In-flight limit w_j per stage (SPEC 5): m for gpipe, min(m, S-j) for 1f1b."""
    if schedule == "gpipe":
        return [micro_batches] * stages
    if schedule == "1f1b":
        return [min(micro_batches, stages - j) for j in range(stages)]
    return [max_inflight(ops) for ops in op_lists(schedule, stages, micro_batches)]


@dataclass(frozen=True)
class Flush:
    """One flush of a schedule (SPEC 7, v3): ``size`` micro-batches (m_s), the largest
    in-flight count of each stage within it (``inflight``, w_{j,s}), and whether every
    stage runs all its forwards before all its backwards (``gpipe_shaped``)."""

    size: int
    inflight: tuple[int, ...]
    gpipe_shaped: bool


def flushes(lists: Sequence[Sequence[Op]], micro_batches: int) -> list[Flush]:
    """The flushes of valid op lists (SPEC 7, v3), in order.

    A cut is a count c such that after its first p = 2c ops no micro-batch is in
    flight on any stage (then c forwards and c backwards are done) and the c
    micro-batches completed form the same set on every stage.  The set test is
    exact and linear: stage j completes the same first c micro-batches as stage 0
    when the largest position, in stage j's order of backwards, of stage 0's first
    c backwards is c - 1.  The whole lists are the last cut.

    >>> [(f.size, f.inflight, f.gpipe_shaped) for f in flushes(op_lists("1f1b", 2, 3), 3)]
    [(3, (2, 1), False)]
    >>> acc = [[(F, 0), (F, 1), (B, 0), (B, 1), (F, 2), (B, 2)]] * 2   # two GPipe rounds
    >>> [(f.size, f.inflight, f.gpipe_shaped) for f in flushes(acc, 3)]
    [(2, (2, 2), True), (1, (1, 1), True)]
    """
    m = micro_batches
    fwd = np.array([[kind == F for kind, _ in ops] for ops in lists], dtype=bool)  # (S, 2m)
    ids = np.array([[i for _, i in ops] for ops in lists], dtype=np.int64)
    live = np.cumsum(np.where(fwd, 1, -1), axis=1)  # in flight after each op
    empty = live[:, 1::2] == 0  # after 2c ops, c = 1..m
    done = ids[~fwd].reshape(len(lists), m)  # each stage's micro-batches in order of their B
    pos = np.empty_like(done)
    pos[np.arange(len(lists))[:, None], done] = np.arange(m)
    same = np.maximum.accumulate(pos[:, done[0]], axis=1) == np.arange(m)
    cuts = [0] + (np.nonzero((empty & same).all(axis=0))[0] + 1).tolist()
    out = []
    for lo, hi in zip(cuts, cuts[1:]):
        part = fwd[:, 2 * lo:2 * hi]
        out.append(Flush(hi - lo, tuple(int(v) for v in live[:, 2 * lo:2 * hi].max(axis=1)),
                         bool((part[:, 1:] <= part[:, :-1]).all())))
    return out


class Deadlock(Exception):
    """An explicit schedule whose stages wait on each other forever."""

    def __init__(self, waiting: dict[int, Op]):
        self.waiting = waiting
        desc = ", ".join(f"stage {j} waits at {format_op(op)}" for j, op in sorted(waiting.items()))
        super().__init__(f"schedule deadlocks: {desc}")


def dependency_order(lists: Sequence[Sequence[Op]]) -> list[tuple[int, int]]:
    """An order of (stage, position) in which every op's inputs come first.

    F(i) on stage j > 0 needs F(i) of stage j-1; B(i) on stage j < S-1 needs
    B(i) of stage j+1; each op needs its predecessor in its own list.  The
    order depends only on the op lists, not on durations, so a cycle of
    waits is found here once and raised as :class:`Deadlock`.
    """
    S = len(lists)
    done_f = [set() for _ in range(S)]
    done_b = [set() for _ in range(S)]
    ptr = [0] * S
    order: list[tuple[int, int]] = []
    total = sum(len(x) for x in lists)
    while len(order) < total:
        progress = False
        for j in range(S):
            ops = lists[j]
            while ptr[j] < len(ops):
                kind, i = ops[ptr[j]]
                if kind == F and j > 0 and i not in done_f[j - 1]:
                    break
                if kind == B and j < S - 1 and i not in done_b[j + 1]:
                    break
                (done_f if kind == F else done_b)[j].add(i)
                order.append((j, ptr[j]))
                ptr[j] += 1
                progress = True
        if not progress:
            raise Deadlock({j: lists[j][ptr[j]] for j in range(S) if ptr[j] < len(lists[j])})
    return order
