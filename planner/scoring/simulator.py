"""Exact simulation of one training iteration (SPEC section 6), vectorised
over network states.

The op lists fix the order of everything: each stage runs its ops in list
order, each channel sends in the order its producer emits.  So the
iteration is a max-plus program that does not depend on the durations:
``start = max(ready, previous end)``, ``end = start + d``,
``send_end = max(producer end, previous send end) + x``,
``arrive = send_end + l``.  :func:`compile_program` derives that program
once per schedule (finding deadlocks while doing so) and allocates its
values to a small set of registers; :meth:`Program.run` executes it on
vectors whose entries are (replica, network state) pairs, so a batch of K
states costs a few thousand NumPy calls on long vectors, not K Python
simulations.

Example
-------
>>> prog = compile_program("gpipe", stages=4, micro_batches=8)
>>> import numpy as np
>>> f, g = np.ones(4), 2 * np.ones(4)
>>> x = np.zeros((3, 1)); l = np.ones((3, 1))      # (boundaries, vector)
>>> float(prog.run(f, g, x, l).max())             # stage ends, max over stages
39.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..problem.oplists import B, F, dependency_order, op_lists

# opcodes: dst = a OP b
_MAX, _ADDC, _ADDX, _ADDL, _CONST = range(5)
_CHUNK = 8192  # vector length per pass; keeps the live registers in cache


@dataclass
class Program:
    """A compiled iteration: instructions on virtual registers.

    ``code`` rows are ``(op, dst, a, b)``: for ``_MAX`` a and b are
    registers; ``_ADDC`` adds the compute time of stage b (F or B, encoded
    as 2*stage + kind); ``_ADDX``/``_ADDL`` add the transfer time/latency of
    boundary b; ``_CONST`` sets dst to a compute time (op starting at 0).
    """

    stages: int
    micro_batches: int
    code: list[tuple[int, int, int, int]]
    nregs: int
    outputs: list[int]  # register holding E_j, per stage (then, with ``starts``, stage j >= 1's first start)
    op_regs: dict = field(default_factory=dict)  # (stage, kind, i) -> (start, end, ready, prev) regs
    xfer_regs: dict = field(default_factory=dict)  # (dir, boundary, i) -> (start, end, arrive) regs
    phys: list[int] | None = None  # physical register of each virtual one
    nphys: int = 0

    def run(self, f, g, x, l, chunk: int = _CHUNK) -> np.ndarray:
        """Stage end times E, shape (S, n), for n vectors of durations.

        ``f``, ``g``: (S,) compute seconds (same for every vector entry);
        ``x``, ``l``: (S-1, n) transfer time and latency of each boundary.
        """
        x = np.asarray(x, dtype=float)
        l = np.asarray(l, dtype=float)
        n = x.shape[1] if x.ndim == 2 and x.shape[0] else (l.shape[1] if l.ndim == 2 else 1)
        if self.stages == 1:
            n = max(n, 1)
        out = np.empty((len(self.outputs), n))
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            calls, dur, xb, lb, outs = self._bound(hi - lo)
            dur[0::2], dur[1::2] = f, g
            if self.stages > 1:
                np.copyto(xb, x[:, lo:hi])
                np.copyto(lb, l[:, lo:hi])
            for fn, a, b, o in calls:
                fn(a, b, out=o)
            for j, v in enumerate(outs):
                out[j, lo:hi] = v
        return out

    def _bound(self, n: int):
        """The program's NumPy calls pre-bound to buffers of length n (cached):
        dispatching a bound call costs less than decoding an instruction."""
        cache = self.__dict__.setdefault("_bound_cache", {})
        if n not in cache:
            regs = np.empty((self.nphys, n))
            view = list(regs)
            dur = np.empty(2 * self.stages)
            xb = np.empty((max(self.stages - 1, 0), n))
            lb = np.empty((max(self.stages - 1, 0), n))
            zero = np.zeros(n)
            ph = self.phys
            calls = []
            for op, d, a, b in self.code:
                if op == _MAX:
                    calls.append((np.maximum, view[ph[a]], view[ph[b]], view[ph[d]]))
                elif op == _ADDC:
                    calls.append((np.add, view[ph[a]], dur[b:b + 1], view[ph[d]]))
                elif op == _ADDX:
                    calls.append((np.add, view[ph[a]], xb[b], view[ph[d]]))
                elif op == _ADDL:
                    calls.append((np.add, view[ph[a]], lb[b], view[ph[d]]))
                else:
                    calls.append((np.add, zero, dur[b:b + 1], view[ph[d]]))
            if len(cache) > 4:
                cache.clear()
            cache[n] = (calls, dur, xb, lb, [view[ph[r]] for r in self.outputs])
        return cache[n]

    def registers(self, f, g, x, l) -> np.ndarray:
        """Every register's value, shape (nregs, n): needs ``keep_all``."""
        if self.nphys != self.nregs:
            raise ValueError("compile with keep_all=True to read every value back")
        dur = np.empty(2 * self.stages)
        dur[0::2], dur[1::2] = f, g
        n = x.shape[1] if self.stages > 1 else 1
        regs = np.empty((self.nregs, n))
        self._execute(regs, dur, np.asarray(x, float), np.asarray(l, float))
        return regs

    def _execute(self, regs, dur, x, l):
        view = list(regs)
        xv = list(np.ascontiguousarray(x)) if x is not None and len(x) else []
        lv = list(np.ascontiguousarray(l)) if l is not None and len(l) else []
        ph = self.phys
        maximum, add = np.maximum, np.add
        for op, d, a, b in self.code:
            if op == _MAX:
                maximum(view[ph[a]], view[ph[b]], out=view[ph[d]])
            elif op == _ADDC:
                add(view[ph[a]], dur[b], out=view[ph[d]])
            elif op == _ADDX:
                add(view[ph[a]], xv[b], out=view[ph[d]])
            elif op == _ADDL:
                add(view[ph[a]], lv[b], out=view[ph[d]])
            else:
                view[ph[d]].fill(dur[b])
        return view


def compile_program(schedule, stages: int, micro_batches: int, keep_all: bool = False,
                    starts: bool = False) -> Program:
    """Compile the iteration of a schedule into a :class:`Program`.

    ``schedule`` is ``"gpipe"``, ``"1f1b"`` or explicit op lists.  Raises
    :class:`planner.problem.oplists.Deadlock` if the op lists wait on each other.
    With ``keep_all`` every value keeps its own register, so that op and
    transfer times can be read back (used for traces and Gantt charts).
    With ``starts`` the program also outputs, after the S stage ends, the start of
    the first op of every stage j >= 1 (stage 0 starts at 0): SPEC 11's a_j.
    """
    S = stages
    lists = op_lists(schedule, S, micro_batches)
    order = dependency_order(lists)
    code: list[tuple[int, int, int, int]] = []
    nreg = 0

    def new():
        nonlocal nreg
        nreg += 1
        return nreg - 1

    prev_end = [None] * S
    chan_end = {}  # (dir, k) -> reg of last send end; dir 0 fwd (k -> k+1), 1 bwd (k+1 -> k)
    arrive = {}  # (stage, kind, i) -> reg of input arrival
    op_regs, xfer_regs = {}, {}
    for j, pos in order:
        kind, i = lists[j][pos]
        dcode = 2 * j + (0 if kind == F else 1)
        ready = arrive.pop((j, kind, i), None)
        prev = prev_end[j]
        if ready is None and prev is None:
            start = None
            end = new()
            code.append((_CONST, end, -1, dcode))
        else:
            if ready is None:
                start = prev
            elif prev is None:
                start = ready
            else:
                start = new()
                code.append((_MAX, start, ready, prev))
            end = new()
            code.append((_ADDC, end, start, dcode))
        op_regs[(j, kind, i)] = (start, end, ready, prev)
        prev_end[j] = end
        # the output transfer this op produces
        if kind == F and j < S - 1:
            key, k, dst = (0, j), j, (j + 1, F, i)
        elif kind == B and j > 0:
            key, k, dst = (1, j - 1), j - 1, (j - 1, B, i)
        else:
            continue
        last = chan_end.get(key)
        if last is None:
            s0 = end
        else:
            s0 = new()
            code.append((_MAX, s0, end, last))
        se = new()
        code.append((_ADDX, se, s0, k))
        ar = new()
        code.append((_ADDL, ar, se, k))
        chan_end[key] = se
        arrive[dst] = ar
        xfer_regs[(key[0], k, i)] = (s0, se, ar)
    outputs = [prev_end[j] for j in range(S)]
    if starts:  # a stage's first op waits only for its input: its start is the arrival register
        outputs += [op_regs[(j,) + tuple(lists[j][0])][2] for j in range(1, S)]
    prog = Program(S, micro_batches, code, nreg, outputs, op_regs, xfer_regs)
    _allocate(prog, keep_all)
    return prog


def _allocate(prog: Program, keep_all: bool) -> None:
    """Linear-scan register allocation on the straight-line code."""
    n = prog.nregs
    if keep_all:
        prog.phys, prog.nphys = list(range(n)), n
        return
    last_use = [-1] * n
    for t, (op, d, a, b) in enumerate(prog.code):
        last_use[d] = max(last_use[d], t)
        if op == _MAX:
            last_use[a] = t
            last_use[b] = t
        elif op != _CONST:
            last_use[a] = t
    end = len(prog.code)
    for r in prog.outputs:
        last_use[r] = end
    phys = [-1] * n
    free: list[int] = []
    nphys = 0
    for t, (op, d, a, b) in enumerate(prog.code):
        srcs = (a, b) if op == _MAX else ((a,) if op != _CONST else ())
        for s in srcs:
            if last_use[s] == t and phys[s] >= 0 and phys[s] not in free:
                free.append(phys[s])
        if free:
            phys[d] = free.pop()
        else:
            phys[d] = nphys
            nphys += 1
    prog.phys, prog.nphys = phys, nphys


def simulate_times(program: Program, f, g, x, l) -> np.ndarray:
    """Stage finish times E_j over replicas: (K, S) from x, l of shape (K, R, S-1)."""
    if len(program.outputs) != program.stages:
        raise ValueError("a program compiled with starts: use simulate_ends_and_starts")
    K, R = x.shape[0], x.shape[1]
    S = program.stages
    # vector entries ordered (replica, state): boundary-major arrays (S-1, R*K)
    xv = np.ascontiguousarray(np.transpose(x, (2, 1, 0)).reshape(S - 1, R * K)) if S > 1 else np.zeros((0, R * K))
    lv = np.ascontiguousarray(np.transpose(l, (2, 1, 0)).reshape(S - 1, R * K)) if S > 1 else np.zeros((0, R * K))
    if S == 1:
        E = program.run(f, g, np.zeros((0, R * K)), np.zeros((0, R * K)))
        E = np.broadcast_to(E[:, :1], (1, R * K))
    else:
        E = program.run(f, g, xv, lv)
    return E.reshape(S, R, K).max(axis=1).T


def simulate_ends_and_starts(program: Program, f, g, x, l) -> tuple[np.ndarray, np.ndarray]:
    """``(E, a)``, each (K, S): stage finish times, the latest over replicas, and the
    start of each stage's first op, the earliest over replicas (a_0 = 0), for a
    program compiled with ``starts=True``; x, l of shape (K, R, S-1)."""
    K, R = x.shape[0], x.shape[1]
    S = program.stages
    if S == 1:
        E = program.run(f, g, np.zeros((0, 1)), np.zeros((0, 1)))
        return np.broadcast_to(E[:1, :1], (K, 1)).copy(), np.zeros((K, 1))
    xv = np.ascontiguousarray(np.transpose(x, (2, 1, 0)).reshape(S - 1, R * K))
    lv = np.ascontiguousarray(np.transpose(l, (2, 1, 0)).reshape(S - 1, R * K))
    out = program.run(f, g, xv, lv)
    E = out[:S].reshape(S, R, K).max(axis=1).T
    a = np.zeros((K, S))
    a[:, 1:] = out[S:].reshape(S - 1, R, K).min(axis=1).T
    return E, a
