"""One iteration, op by op: start and end of every forward, backward and
transfer, per replica, and the critical path that sets the iteration time.
The times come from the same compiled program as the evaluator, so they add
up to exactly its iteration time.  Used by Gantt charts and explanations.

Example
-------
>>> tr = trace(instance, plan)                            # doctest: +SKIP
>>> tr.iteration_time_s, tr.ops[0]
(7.28, Op(replica=0, stage=0, kind='F', micro_batch=0, start=0.0, end=0.031))
>>> [seg.kind for seg in tr.critical_path][:3]
['F', 'send', 'F']
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .evaluator import Evaluator
from ..problem.network import NetworkStates
from ..problem.oplists import B, F
from .simulator import compile_program


@dataclass(frozen=True)
class Op:
    replica: int
    stage: int
    kind: str  # "F" or "B"
    micro_batch: int
    start: float
    end: float


@dataclass(frozen=True)
class Transfer:
    replica: int
    boundary: int  # between stage k and k+1
    direction: str  # "fwd" (k -> k+1) or "bwd" (k+1 -> k)
    micro_batch: int
    start: float  # send start
    end: float  # send end
    arrive: float  # end + latency


@dataclass(frozen=True)
class Segment:
    """A piece of the critical path: compute ("F"/"B"), a transfer ("send",
    "latency"), or gradient synchronisation ("allreduce")."""

    kind: str
    replica: int
    stage: int  # for transfers: the boundary
    micro_batch: int
    start: float
    end: float


@dataclass
class Trace:
    iteration_time_s: float
    stage_end: np.ndarray  # (R, S) last op end per replica and stage
    allreduce: np.ndarray  # (S,) AR_j
    ops: list[Op] = field(default_factory=list)
    transfers: list[Transfer] = field(default_factory=list)
    critical_path: list[Segment] = field(default_factory=list)
    bottleneck_stage: int = 0
    bottleneck_replica: int = 0
    # GPU types (SPEC v3 (g)): replicas with the same row of types form a class; each
    # replica's ops run at its own class's figures.  ``classes`` of them, the bottleneck
    # replica's is ``binding_class`` (index into ``PlanFigures.class_f``), ``class_time_s``
    # each class's own max_j (E_j + AR_j) over its replicas, seconds
    classes: int = 1
    binding_class: int = 0
    replica_class: np.ndarray | None = None  # (R,) class of every replica
    class_time_s: np.ndarray | None = None  # (classes,)


def trace(instance, plan, states: NetworkStates | None = None) -> Trace:
    """Op-level times of one iteration under one network state (base by default).

    With several GPU types each replica runs at the figures of its own class (its row
    of types, ``PlanFigures.class_f``, ``class_g``), as the evaluator simulates it, so
    every op time is exact and ``iteration_time_s`` is the evaluator's T; the critical
    path runs on the bottleneck replica, in the binding class (``Trace.binding_class``).

    >>> tr = trace(inst, plan)                             # doctest: +SKIP
    >>> tr.classes, tr.binding_class, tr.class_time_s     # doctest: +SKIP
    (2, 1, array([6.9, 7.28]))
    """
    ev = Evaluator(instance, plan)
    st = ev.one_state(states, "trace")
    fig = ev.fig
    comm = fig.comm(st)
    S, R, m = plan.num_stages, plan.replicas, plan.num_micro_batches
    prog = compile_program(plan.schedule_spec if isinstance(plan.schedule_spec, str)
                           else tuple(tuple(o) for o in plan.schedule_spec), S, m, keep_all=True)
    x = comm.x[0].T if S > 1 else np.zeros((0, R))  # (S-1, R)
    l = comm.l[0].T if S > 1 else np.zeros((0, R))
    klass = fig.replica_class  # (R,) each replica's row of GPU types
    regs = np.empty((prog.nregs, R))
    for k in range(fig.classes):  # one class (one type everywhere): one run over every replica
        cols = np.nonzero(klass == k)[0] if fig.classes > 1 else slice(None)
        f, g = fig.class_f[k], fig.class_g[k]
        regs[:, cols] = prog.registers(f, g, x[:, cols], l[:, cols]) if S > 1 else _single(prog, f, g, R)[:, cols]
    durs = [{F: fig.class_f[k], B: fig.class_g[k]} for k in range(fig.classes)]
    ops, xfers = [], []
    for (j, kind, i), (s_reg, e_reg, _, _) in prog.op_regs.items():
        for r in range(R):
            end = regs[e_reg, r]
            start = regs[s_reg, r] if s_reg is not None else end - durs[klass[r]][kind][j]
            ops.append(Op(r, j, kind, i, float(start), float(end)))
    for (d, k, i), (s0, se, ar) in prog.xfer_regs.items():
        for r in range(R):
            xfers.append(Transfer(r, k, "fwd" if d == 0 else "bwd", i, float(regs[s0, r]),
                                  float(regs[se, r]), float(regs[ar, r])))
    ops.sort(key=lambda o: (o.replica, o.stage, o.start))
    E = np.array([[regs[prog.outputs[j], r] for j in range(S)] for r in range(R)])
    total = E.max(axis=0) + comm.ar[0]
    j_star = int(np.argmax(total))
    r_star = int(np.argmax(E[:, j_star]))
    class_time = np.array([(E[klass == k].max(axis=0) + comm.ar[0]).max() for k in range(fig.classes)])
    tr = Trace(float(total.max()), E, comm.ar[0].copy(), ops, xfers, bottleneck_stage=j_star,
               bottleneck_replica=r_star, classes=fig.classes, binding_class=int(klass[r_star]),
               replica_class=klass.copy(), class_time_s=class_time)
    with np.errstate(invalid="ignore"):  # inf - inf when a link is down
        tr.critical_path = _critical_path(prog, regs, durs[klass[r_star]], j_star, r_star, E, comm.ar[0], x, l)
    return tr


def _single(prog, f, g, R):
    dur = np.empty(2)
    dur[0], dur[1] = f[0], g[0]
    regs = np.empty((prog.nregs, R))
    prog._execute(regs, dur, None, None)
    return regs


def _critical_path(prog, regs, dur, j, r, E, ar, x, l) -> list[Segment]:
    """Walk back from the op that finishes last on the bottleneck stage."""
    owner = {}  # end register -> op key
    for key, (s_reg, e_reg, _, _) in prog.op_regs.items():
        owner[e_reg] = key
    by_arrival = {}
    for (d, k, i), (s0, se, ar_reg) in prog.xfer_regs.items():
        by_arrival[ar_reg] = (d, k, i, s0, se)
    send_end_owner = {v[4]: (v[0], v[1], v[2], v[3]) for v in by_arrival.values()}
    path: list[Segment] = []
    if ar[j] > 0:
        path.append(Segment("allreduce", r, j, -1, float(E[r, j]), float(E[r, j] + ar[j])))
    key = owner[prog.outputs[j]]
    tol = 1e-12
    while key is not None:
        jj, kind, i = key
        s_reg, e_reg, ready, prev = prog.op_regs[key]
        end = regs[e_reg, r]
        start = end - dur[kind][jj]
        path.append(Segment(kind, r, jj, i, float(start), float(end)))
        if start <= tol:
            break
        # which input set the start: the arrival, else the previous op
        if ready is not None and abs(regs[ready, r] - start) <= tol * max(1.0, start):
            d, k, i2, s0, se = by_arrival[ready]
            send_start, send_end = regs[s0, r], regs[se, r]
            if regs[ready, r] > send_end:
                path.append(Segment("latency", r, k, i2, float(send_end), float(regs[ready, r])))
            path.append(Segment("send", r, k, i2, float(send_start), float(send_end)))
            # the send started when its producer ended, or when the channel freed up
            if s0 in owner:
                key = owner[s0]
                continue
            while s0 not in owner:  # a max of producer end and previous send end
                producer = prog.op_regs[(k if d == 0 else k + 1, F if d == 0 else B, i2)][1]
                if abs(regs[producer, r] - send_start) <= tol * max(1.0, send_start):
                    s0 = producer
                    break
                prev_send = [se2 for se2, v in send_end_owner.items()
                             if v[0] == d and v[1] == k and abs(regs[se2, r] - send_start) <= tol * max(1.0, send_start)]
                if not prev_send:
                    s0 = producer
                    break
                _, _, i2, s0_prev = send_end_owner[prev_send[0]]
                path.append(Segment("send", r, k, i2, float(regs[s0_prev, r]), float(regs[prev_send[0], r])))
                send_start, s0 = regs[s0_prev, r], s0_prev
            key = owner.get(s0)
        elif prev is not None:
            key = owner[prev]
        else:
            break
    path.reverse()
    return path
