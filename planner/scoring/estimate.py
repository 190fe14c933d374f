"""The analytic estimate T_est that solvers optimise (SPEC section 7).

Vectorised over K network states: all arguments are NumPy arrays and the
result has shape (K,).  For S equal stages with no communication,
T_est = (m + S - 1) * c for gpipe and 1f1b, the exact simulated time.

The schedule is a sequence of flushes (:class:`planner.problem.oplists.Flush`):
SPEC v3 cuts the op lists where no micro-batch is in flight (k GPipe rounds of
gradient accumulation are k flushes), SPEC v2 takes the whole schedule as one.
Flush s of m_s micro-batches takes ``P_s = (m_s - 1) tau_s + Q_0``; each starts
when stage 0 ends the one before; stage j ends the last one ``D_j`` earlier
than stage 0 (:func:`stage_end_estimates`).  A gpipe-shaped flush (every F
before every B on each stage) has the period of its forward phase plus its
backward phase; under v3 (``downstream``) stage j's backward phase is set by
the stages and boundaries downstream of j only.

The 1f1b (and explicit) period obeys Little's law on every window of stages
[j, k]: the window holds ``w_j - w_k + 1`` micro-batches while one of them
goes from j to k and back (``W_{j,k}``), so the period is at least
``W_{j,k} / (w_j - w_k + 1)``.  Windows whose first stage holds all m
micro-batches (``w_j >= m``) never wait for a backward and are dropped;
windows holding no micro-batch (``w_j - w_k + 1 <= 0``) are skipped.
:func:`window_terms` is the one place that computes them, for
:func:`estimate_times` and :func:`window_period` alike.

Example
-------
Four stages, f = 1 s and g = 2 s, 1 s of latency on the middle boundary only
(the WAN crossing), m = 8.  The inner window [1, 2] holds w_1 - w_2 + 1 = 2
micro-batches over a round trip of 3 + 3 + 2 * 1 = 8 s, so the period is 4 s,
more than any suffix window (v1 took (12 + 2) / 4 = 3.5 s):

>>> import numpy as np
>>> f, g = np.ones(4), 2 * np.ones(4)
>>> x = np.zeros((1, 1, 3)); l = np.array([[[0.0, 1.0, 0.0]]]); ar = np.zeros((1, 4))
>>> w = np.array([4, 3, 2, 1])
>>> window_period(f + g, x[0, 0], l[0, 0], w, m=8)
(4.0, 1, 2)
>>> estimate_times(f, g, x, l, ar, m=8, w=w, gpipe=False).tolist()  # 7 * 4 + 12 + 2
[42.0]
>>> estimate_times(f, g, x, l, ar, m=8, w=np.full(4, 8), gpipe=True).tolist()  # 7 * 3 + 14
[35.0]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ..problem.oplists import Flush


def window_terms(c, comm, w, m: int | None) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Little's-law periods of every window [j, k], one first stage j at a time.

    c    : (S,) compute seconds per micro-batch of each stage.
    comm : (..., S-1) seconds ``2 (x_b + l_b)`` of each boundary (any leading shape,
           e.g. (K, R) states and replicas).
    w    : (S,) in-flight limit per stage; m : micro-batches per replica (``None``:
           drop no window).

    Yields ``(j, k, v)`` with ``k`` the (n,) last stages of the windows that count and
    ``v`` the (..., n) periods ``W_{j,k} / (w_j - w_k + 1)`` in seconds, where
    ``W_{j,k} = sum_{i=j..k} c_i + sum_{b=j..k-1} 2 (x_b + l_b)``.  First stages with
    ``w_j >= m`` yield nothing.  Memory is O(size of ``comm``): one j at a time.
    """
    c = np.asarray(c, float)
    w = np.asarray(w, float)
    comm = np.asarray(comm, float)
    S = len(c)
    for j in range(S):
        if m is not None and w[j] >= m:
            continue  # stage j holds every micro-batch: it never waits for a backward
        held = w[j] - w[j:] + 1  # micro-batches the window [j, k] holds, k = j..S-1
        ok = held > 0
        if not ok.any():
            continue
        W = np.zeros(comm.shape[:-1] + (S - j,))
        W[..., 1:] = np.cumsum(comm[..., j:], axis=-1)  # sum_{b=j..k-1} 2 (x_b + l_b)
        W += np.cumsum(c[j:])  # + sum_{i=j..k} c_i
        yield j, np.arange(j, S)[ok], W[..., ok] / held[ok]


def estimate_times(f, g, x, l, ar, m: int, w, gpipe: bool) -> np.ndarray:
    """T_est of SPEC v2 for K states, seconds, shape (K,): one flush.

    f, g : (S,) forward/backward seconds per micro-batch of each stage.
    x, l : (K, R, S-1) transfer time and latency (s) of each boundary, per replica.
    ar   : (K, S) gradient synchronisation seconds of each stage.
    m    : micro-batches per replica; w : (S,) in-flight limit per stage.
    gpipe: use the gpipe period (forward and backward phases apart); otherwise the
           window period of 1f1b and explicit schedules.
    """
    E = stage_end_estimates(f, g, x, l, [Flush(m, tuple(w), gpipe)], downstream=False)
    return (E + ar).max(axis=1)


def stage_end_estimates(f, g, x, l, flushes: Sequence[Flush], downstream: bool = True) -> np.ndarray:
    """E^est_j (SPEC 7) for K states, seconds, shape (K, S): the largest over replicas
    of ``sum_{s<last} P_{s,0} + P_{last,j} - D_j``; T_est = max_j (E^est_j + AR_j).

    f, g      : (S,) forward/backward seconds per micro-batch of each stage.
    x, l      : (K, R, S-1) transfer time and latency (s) of each boundary, per replica.
    flushes   : the schedule's flushes, in order (SPEC v2: one, the whole schedule).
    downstream: v3's gpipe-shaped period, stage j's backward phase set by stages
                i >= j and boundaries k >= j only (False: by all, as v2).
    Infinite (never NaN) for every stage when a replica's round trip Q_0 is.
    """
    f, g = np.asarray(f, float), np.asarray(g, float)
    c = f + g
    K, R = x.shape[0], x.shape[1]
    S = len(f)
    comm = 2.0 * (x + l)  # (K, R, S-1)
    # Q_0 = sum_i c_i + sum_k 2(x_k + l_k), both summed from the last stage
    csuf = np.cumsum(c[::-1])[::-1]
    Q0 = csuf[0] + (np.cumsum(comm[:, :, ::-1], axis=2)[:, :, -1] if S > 1 else np.zeros((K, R)))
    xmax = x.max(axis=2) if S > 1 else np.zeros((K, R))

    def period(fl: Flush, per_stage: bool) -> np.ndarray:
        """tau_s, (K, R); (K, R, S) for a gpipe-shaped flush under ``downstream`` when
        ``per_stage`` (stage 0's, the whole pipeline's, otherwise)."""
        if fl.gpipe_shaped:
            fwd = np.maximum(f.max(), xmax)
            if not (downstream and per_stage):
                return fwd + np.maximum(g.max(), xmax)
            xsuf = np.zeros((K, R, S))  # max_{j <= k <= S-2} x_k (0 past the last boundary)
            if S > 1:
                xsuf[:, :, :-1] = np.maximum.accumulate(x[:, :, ::-1], axis=2)[:, :, ::-1]
            gsuf = np.maximum.accumulate(g[::-1])[::-1]  # max_{i >= j} g_i
            return fwd[:, :, None] + np.maximum(gsuf, xsuf)
        tau = np.maximum(c.max(), xmax)  # (K, R)
        for _, _, v in window_terms(c, comm, fl.inflight, fl.size):
            tau = np.maximum(tau, v.max(axis=2))
        return tau

    memo: dict = {}

    def flush_time(fl: Flush, per_stage: bool) -> np.ndarray:
        """P_s = (m_s - 1) tau_s + Q_0, (K, R) or (K, R, S); equal flushes computed once."""
        key = (fl, per_stage)
        if key not in memo:
            tau = period(fl, per_stage)
            q0 = Q0 if tau.ndim == 2 else Q0[:, :, None]
            with np.errstate(invalid="ignore"):  # (m-1) * inf with m = 1 is 0 * inf
                memo[key] = np.where(np.isinf(tau), np.inf, (fl.size - 1) * tau) + q0
        return memo[key]

    # drain D_j = sum_{i<j} (g_i + x_i + l_i): prefix sums with D_0 = 0
    D = np.zeros((K, R, S))
    if S > 1:
        D[:, :, 1:] = np.cumsum(g[None, None, :-1] + x + l, axis=2)
    last = flush_time(flushes[-1], per_stage=True)
    if last.ndim == 2:
        last = last[:, :, None]
    if len(flushes) > 1:  # each earlier flush ends when stage 0 ends it
        before = flush_time(flushes[0], per_stage=False)
        for fl in flushes[1:-1]:
            before = before + flush_time(fl, per_stage=False)
        last = before[:, :, None] + last
    with np.errstate(invalid="ignore"):
        E = (last - D).max(axis=1)
    E[np.isnan(E)] = np.inf  # inf - inf: a link is down, the plan cannot run
    return E


def window_period(c, x, l, w, m: int | None = None) -> tuple[float, int, int]:
    """The largest window period (s) of one replica, with its window [j, k].

    The window term of T_est's 1f1b period (SPEC 7, v2), through the same
    :func:`window_terms`: ``max W_{j,k} / (w_j - w_k + 1)`` over the windows that
    count.  With ``m`` given, windows whose first stage has ``w_j >= m`` are dropped
    as in T_est; ``None`` keeps them all.  Returns ``(0.0, 0, S - 1)`` when no window
    counts.

    c : (S,) compute per micro-batch of each stage; x, l : (S-1,) transfer time and
    latency of each boundary; w : (S,) in-flight limit per stage.

    >>> window_period([1.0, 1.0, 1.0], [0.0, 0.0], [0.0, 2.0], [3, 2, 1])
    (3.0, 1, 2)
    """
    comm = 2.0 * (np.asarray(x, float) + np.asarray(l, float))
    best = (0.0, 0, len(c) - 1)
    for j, k, v in window_terms(c, comm, w, m):
        i = int(np.argmax(v))
        if v[i] > best[0]:
            best = (float(v[i]), j, int(k[i]))
    return best
