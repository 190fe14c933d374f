"""The analytic estimate T_est that solvers optimise (SPEC section 7).

Vectorised over K network states: all arguments are NumPy arrays and the
result has shape (K,).  For S equal stages with no communication,
T_est = (m + S - 1) * c for gpipe and 1f1b, the exact simulated time.

Example
-------
>>> import numpy as np
>>> f, g = np.ones(4), 2 * np.ones(4)
>>> x = np.zeros((1, 1, 3)); l = np.ones((1, 1, 3)); ar = np.zeros((1, 4))
>>> estimate_times(f, g, x, l, ar, m=8, w=np.array([8, 8, 8, 8]), gpipe=True).tolist()
[39.0]
"""

from __future__ import annotations

import numpy as np


def estimate_times(f, g, x, l, ar, m: int, w, gpipe: bool) -> np.ndarray:
    """T_est for K states.

    f, g : (S,) forward/backward seconds per micro-batch of each stage.
    x, l : (K, R, S-1) transfer time and latency of each boundary, per replica.
    ar   : (K, S) gradient synchronisation seconds of each stage.
    m    : micro-batches per replica; w : (S,) in-flight limit per stage.
    gpipe: use the gpipe period (forward and backward phases apart).
    """
    f, g = np.asarray(f, float), np.asarray(g, float)
    c = f + g
    K, R = x.shape[0], x.shape[1]
    S = len(f)
    comm = 2.0 * (x + l)  # (K, R, S-1)
    # Q_j = sum_{i>=j} c_i + sum_{k>=j} 2(x_k + l_k): suffix sums, (K, R, S)
    csuf = np.cumsum(c[::-1])[::-1]
    commsuf = np.zeros((K, R, S))
    if S > 1:
        commsuf[:, :, :-1] = np.cumsum(comm[:, :, ::-1], axis=2)[:, :, ::-1]
    Q = csuf[None, None, :] + commsuf
    xmax = x.max(axis=2) if S > 1 else np.zeros((K, R))
    if gpipe:
        tau = np.maximum(f.max(), xmax) + np.maximum(g.max(), xmax)
    else:
        tau = np.maximum(np.maximum(c.max(), xmax), (Q / np.asarray(w, float)).max(axis=2))
    with np.errstate(invalid="ignore"):  # (m-1) * inf with m = 1 is 0 * inf
        T = np.where(np.isinf(tau), np.inf, (m - 1) * tau) + Q[:, :, 0]  # (K, R)
    # drain D_j = sum_{i<j} (g_i + x_i + l_i): prefix sums with D_0 = 0
    D = np.zeros((K, R, S))
    if S > 1:
        D[:, :, 1:] = np.cumsum(g[None, None, :-1] + x + l, axis=2)
    with np.errstate(invalid="ignore"):
        out = (T[:, :, None] - D + ar[:, None, :]).max(axis=(1, 2))
    out[np.isnan(out)] = np.inf  # inf - inf: a link is down, the plan cannot run
    return out


def window_period(c, x, l, w) -> tuple[float, int, int]:
    """The largest 1f1b window period (s) of one replica, with its window [j, k].

    Between stages j and k a 1f1b pipeline holds w_j - w_k + 1 micro-batches while
    one of them runs forward from j to k and back, so its steady-state period is at
    least ``(sum_{i=j..k} c_i + 2 sum_{j<=b<k} (x_b + l_b)) / (w_j - w_k + 1)`` for
    every window.  SPEC 7's Little's law is the case k = S - 1 only; the exact
    simulation obeys every window (docs/model.md, section 9, item 13).

    c : (S,) compute per micro-batch of each stage; x, l : (S-1,) transfer time and
    latency of each boundary; w : (S,) in-flight limit per stage.

    >>> window_period([1.0, 1.0, 1.0], [0.0, 0.0], [0.0, 2.0], [3, 2, 1])  # doctest: +ELLIPSIS
    (3.0, 1, 2)
    """
    c = np.asarray(c, float)
    xl = np.asarray(x, float) + np.asarray(l, float)
    csum = np.concatenate([[0.0], np.cumsum(c)])
    lsum = np.concatenate([[0.0], np.cumsum(xl)])
    S = len(c)
    best = (0.0, 0, S - 1)
    for j in range(S):
        k = np.arange(j, S)
        held = np.asarray(w, float)[j] - np.asarray(w, float)[k] + 1
        v = (csum[k + 1] - csum[j] + 2 * (lsum[k] - lsum[j])) / held
        i = int(np.argmax(v))
        if v[i] > best[0]:
            best = (float(v[i]), j, int(k[i]))
    return best
