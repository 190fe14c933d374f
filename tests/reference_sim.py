"""An independent, deliberately simple reference for SPEC sections 2, 3, 5, 6, 7 (v2).

Written from /work/shared/SPEC.md alone, without looking at the package's
simulator, figures or estimate modules, so that the property tests in
``test_reference_agreement.py`` compare two independent readings of the
SPEC.  Pure Python, stdlib only; slow and obvious on purpose.

Reading of the SPEC where it leaves room (kept identical to what the
package is expected to do; a disagreement is a finding, not a tweak):

* A boundary flow between stages k and k+1 of a replica follows
  ``route(placement[k], placement[k+1])`` (the ordered route, from the
  upstream domain); its x and l are used by both the forward and the
  backward channel of that boundary.
* A flow / ring hop whose route crosses a link with bandwidth 0 has
  infinite transfer time, even if it carries 0 bytes (SPEC 8: "a plan
  whose flows use it has T = infinity").
* Pipeline flows share WAN links only with pipeline flows; gradient ring
  hops only with ring hops (SPEC 5 states the two splits separately).
* A ring hop from domain u to domain v follows ``route(u, v)``; with K = 2
  the ring has two hops (u -> v, v -> u), both counted in the split.
* The estimate is infinite whenever a replica's pipeline time T_r is
  infinite (avoids inf - inf in T_r - D_j).
"""

from __future__ import annotations

import math

GBPS = 1e9 / 8  # bytes/s per Gbit/s
MS = 1e-3  # seconds per millisecond
INF = math.inf


class RefDeadlock(Exception):
    """The reference simulation can make no progress."""


# ---------------------------------------------------------------- schedules
def ref_op_lists(plan):
    """Per stage, a list of (kind, micro-batch) pairs (SPEC 6)."""
    S, m = len(plan.stages), plan.num_micro_batches
    sched = plan.schedule
    out = []
    if isinstance(sched, str):
        for j in range(S):
            if sched == "gpipe":
                ops = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
            elif sched == "1f1b":
                w = min(S - j - 1, m)
                ops = [("F", i) for i in range(w)]
                for q in range(m - w):
                    ops.append(("F", w + q))
                    ops.append(("B", q))
                ops += [("B", i) for i in range(m - w, m)]
            else:
                raise ValueError(sched)
            out.append(ops)
    else:
        for strs in sched.ops:
            out.append([(s[0], int(s[1:])) for s in strs])
    return out


def ref_inflight(plan):
    """w_j: m (gpipe), min(m, S - j) (1f1b), largest F-done-B-not-done count (explicit)."""
    S, m = len(plan.stages), plan.num_micro_batches
    if plan.schedule == "gpipe":
        return [m] * S
    if plan.schedule == "1f1b":
        return [min(m, S - j) for j in range(S)]
    res = []
    for ops in ref_op_lists(plan):
        cur = best = 0
        for kind, _ in ops:
            cur += 1 if kind == "F" else -1
            best = max(best, cur)
        res.append(best)
    return res


# ---------------------------------------------------------------- figures
def ref_tp_comm(instance, plan):
    """y_j of SPEC 5 (v2), seconds per pass: the tensor-parallel all-reduces.

    Formula models: every block all-reduces V = 2 b s h bytes twice per pass, as a
    ring over t GPUs: y_j = n_j * 2 * 2(t-1)/t * V / B.  Explicit units: each unit's
    tp_bytes_per_token replaces 2 V / (b s), so it adds 2(t-1)/t * tp * b * s / B.
    t = 1 or no nvlink_bandwidth_gbps: 0.
    """
    t, b, s = plan.tp, plan.micro_batch_size, instance.workload.seq_len
    S = len(plan.stages)
    nv = instance.gpu.nvlink_bandwidth_gbps
    if t == 1 or nv is None:
        return [0.0] * S
    B = nv * 1e9 / 8
    ring = 2 * (t - 1) / t
    model = instance.workload.model
    listed = model.units_
    y = []
    for st in plan.stages:
        if listed is None:
            # units: embed (0), blocks 1..N, head (N + 1)
            n_blocks = sum(1 for u in range(st.start, st.end) if 1 <= u <= model.num_layers)
            V = 2 * b * s * model.hidden_size
            y.append(n_blocks * 2 * ring * V / B)
        else:
            y.append(sum(ring * u.tp_bytes_per_token * b * s / B for u in listed[st.start:st.end]))
    return y


def ref_stage_figures(instance, plan):
    """Per-stage figures of SPEC 5 as a dict of lists (seconds, bytes)."""
    units = instance.units
    gpu = instance.gpu
    wl = instance.workload
    b, s, t = plan.micro_batch_size, wl.seq_len, plan.tp
    speed = t * gpu.peak_tflops * 1e12 * gpu.mfu
    bwd_factor = 3.0 if wl.recompute else 2.0
    inflight = ref_inflight(plan)
    y = ref_tp_comm(instance, plan)
    fig = {"f": [], "g": [], "c": [], "A": [], "P": [], "stored": [], "inflight": inflight,
           "memory_bytes": [], "y": y}
    for j, st in enumerate(plan.stages):
        us = units[st.start:st.end]
        F = sum(u.fwd_flops_per_token for u in us)
        f = F * b * s / speed + y[j]
        g = bwd_factor * F * b * s / speed + y[j]
        P = sum(u.params for u in us)
        stored = sum(u.stored_bytes_per_token for u in us)
        fig["f"].append(f)
        fig["g"].append(g)
        fig["c"].append(f + g)
        fig["A"].append(us[-1].out_bytes_per_token * b * s)
        fig["P"].append(P)
        fig["stored"].append(stored)
        fig["memory_bytes"].append((16 * P + inflight[j] * b * s * stored) / t)
    return fig


# ---------------------------------------------------------------- routing
def ref_routes(instance):
    """{(src, dst): (names tuple, link-index tuple)} by brute-force path enumeration.

    Key: (total base latency, hops, list of names).  Tests use latencies that
    are exactly representable so that float sums compare exactly.
    """
    names = [d.name for d in instance.domains]
    adj = {n: [] for n in names}
    for idx, lk in enumerate(instance.links):
        adj[lk.a].append((lk.b, idx))
        adj[lk.b].append((lk.a, idx))
    routes = {}
    for src in names:
        best = {}

        def dfs(node, path, links, lat):
            if node != src:
                key = (lat, len(links), path)
                if node not in best or key < best[node][0]:
                    best[node] = (key, path, links)
            for nxt, idx in adj[node]:
                if nxt not in path:
                    dfs(nxt, path + (nxt,), links + (idx,), lat + instance.links[idx].latency_ms)

        dfs(src, (src,), (), 0.0)
        for dst, (_, path, links) in best.items():
            routes[(src, dst)] = (path, links)
    return routes


# ---------------------------------------------------------------- communication
def _shared_bw_lat(route_lists, bw_gbps, lat_ms):
    """For each route (list of link indices), (bandwidth bytes/s, latency s)
    with each link split equally among the routes that use it."""
    users = [0] * len(bw_gbps)
    for links in route_lists:
        for L in links:
            users[L] += 1
    out = []
    for links in route_lists:
        bw = min(bw_gbps[L] * GBPS / users[L] for L in links)
        lat = sum(lat_ms[L] * MS for L in links)
        out.append((bw, lat))
    return out


def _time(nbytes, bw):
    return INF if bw == 0 else nbytes / bw


def ref_comm(instance, plan, bw_gbps, lat_ms):
    """x[r][k], l[r][k] per (replica, boundary) and AR[j] per stage, seconds."""
    fig = ref_stage_figures(instance, plan)
    routes = ref_routes(instance)
    dom = {d.name: d for d in instance.domains}
    order = {d.name: i for i, d in enumerate(instance.domains)}
    R, S, t = len(plan.placement), len(plan.stages), plan.tp

    # pipeline flows
    flows = []  # (r, k, route links)
    for r, row in enumerate(plan.placement):
        for k in range(S - 1):
            if row[k] != row[k + 1]:
                flows.append((r, k, routes[(row[k], row[k + 1])][1]))
    shares = _shared_bw_lat([f[2] for f in flows], bw_gbps, lat_ms)
    x = [[None] * (S - 1) for _ in range(R)]
    l = [[None] * (S - 1) for _ in range(R)]
    for r, row in enumerate(plan.placement):
        for k in range(S - 1):
            if row[k] == row[k + 1]:
                x[r][k] = fig["A"][k] / (dom[row[k]].intra_bandwidth_gbps * GBPS)
                l[r][k] = 0.0
    for (r, k, _), (bw, lat) in zip(flows, shares):
        x[r][k] = _time(fig["A"][k], bw)
        l[r][k] = lat

    # gradient synchronisation
    AR = [0.0] * S
    if R > 1:
        hops = []  # (stage, route links)
        ring_domains = []
        for j in range(S):
            ds = sorted({plan.placement[r][j] for r in range(R)}, key=order.__getitem__)
            ring_domains.append(ds)
            if len(ds) > 1:
                for i in range(len(ds)):
                    hops.append((j, routes[(ds[i], ds[(i + 1) % len(ds)])][1]))
        hop_shares = _shared_bw_lat([h[1] for h in hops], bw_gbps, lat_ms)
        for j in range(S):
            G = 2.0 * fig["P"][j]
            intra = 0.0
            for d in ring_domains[j]:
                n = sum(1 for r in range(R) if plan.placement[r][j] == d)
                if n > 1:
                    intra = max(intra, 2 * (n - 1) / n * (G / t)
                                / (dom[d].intra_bandwidth_gbps * GBPS))
            cross = 0.0
            K = len(ring_domains[j])
            if K > 1:
                mine = [sh for (jj, _), sh in zip(hops, hop_shares) if jj == j]
                ring_bw = min(bw for bw, _ in mine)
                ring_lat = max(lat for _, lat in mine)
                cross = 2 * (K - 1) / K * _time(G, ring_bw) + 2 * (K - 1) * ring_lat
            AR[j] = intra + cross
    return {"x": x, "l": l, "AR": AR, "fig": fig}


# ---------------------------------------------------------------- simulation
def _simulate_replica(ops, f, g, x, l):
    """End time of each stage's last op for one replica (SPEC 6)."""
    S = len(ops)
    ptr = [0] * S
    prev_end = [0.0] * S
    fend = [dict() for _ in range(S)]
    f_arrive = [dict() for _ in range(S)]  # f_arrive[j][i]: F(i) input at stage j
    b_arrive = [dict() for _ in range(S)]  # b_arrive[j][i]: B(i) input at stage j
    f_chan = [0.0] * S  # last send end on forward channel j -> j+1
    b_chan = [0.0] * S  # last send end on backward channel j -> j-1
    E = [0.0] * S
    remaining = sum(len(o) for o in ops)
    while remaining:
        progress = False
        for j in range(S):
            while ptr[j] < len(ops[j]):
                kind, i = ops[j][ptr[j]]
                if kind == "F":
                    if j == 0:
                        ready = 0.0
                    elif i in f_arrive[j]:
                        ready = f_arrive[j][i]
                    else:
                        break
                    start = max(ready, prev_end[j])
                    end = start + f[j]
                    fend[j][i] = end
                    if j < S - 1:
                        send_start = max(end, f_chan[j])
                        send_end = send_start + x[j]
                        f_chan[j] = send_end
                        f_arrive[j + 1][i] = send_end + l[j]
                else:
                    if i not in fend[j]:
                        raise AssertionError("B before F in an op list")
                    if j == S - 1:
                        ready = fend[j][i]
                    elif i in b_arrive[j]:
                        ready = max(b_arrive[j][i], fend[j][i])
                    else:
                        break
                    start = max(ready, prev_end[j])
                    end = start + g[j]
                    if j > 0:
                        send_start = max(end, b_chan[j])
                        send_end = send_start + x[j - 1]
                        b_chan[j] = send_end
                        b_arrive[j - 1][i] = send_end + l[j - 1]
                prev_end[j] = end
                E[j] = max(E[j], end)
                ptr[j] += 1
                remaining -= 1
                progress = True
        if not progress:
            raise RefDeadlock(f"no stage can proceed; positions {ptr}")
    return E


def ref_simulate(instance, plan, bw_gbps, lat_ms):
    """Iteration time T = max_j (E_j + AR_j) for one network state."""
    comm = ref_comm(instance, plan, bw_gbps, lat_ms)
    fig = comm["fig"]
    ops = ref_op_lists(plan)
    S = len(plan.stages)
    E = [0.0] * S
    for r in range(len(plan.placement)):
        Er = _simulate_replica(ops, fig["f"], fig["g"], comm["x"][r], comm["l"][r])
        E = [max(a, b) for a, b in zip(E, Er)]
    return max(E[j] + comm["AR"][j] for j in range(S))


# ---------------------------------------------------------------- estimate
def ref_estimate(instance, plan, bw_gbps, lat_ms):
    """T_est of SPEC 7 for one network state."""
    comm = ref_comm(instance, plan, bw_gbps, lat_ms)
    fig = comm["fig"]
    f, g, c = fig["f"], fig["g"], fig["c"]
    S, m = len(plan.stages), plan.num_micro_batches
    w = fig["inflight"]
    AR = comm["AR"]
    best = -INF
    for r in range(len(plan.placement)):
        x, l = comm["x"][r], comm["l"][r]
        Q = [sum(c[i] for i in range(j, S)) + sum(2 * (x[k] + l[k]) for k in range(j, S - 1))
             for j in range(S)]
        xmax = max(x, default=0.0)
        if plan.schedule == "gpipe":
            tau = max(max(f), xmax) + max(max(g), xmax)
        else:
            # v2: Little's law on every window [j, k]; a first stage holding all
            # m micro-batches drops its windows, an empty window is skipped
            tau = max(max(c), xmax)
            for j in range(S):
                if w[j] >= m:
                    continue
                for k in range(j, S):
                    held = w[j] - w[k] + 1
                    if held <= 0:
                        continue
                    W = (sum(c[i] for i in range(j, k + 1))
                         + 2 * sum(x[b] + l[b] for b in range(j, k)))
                    tau = max(tau, W / held)
        if math.isinf(Q[0]) or math.isinf(tau):
            return INF
        T_r = (m - 1) * tau + Q[0]
        for j in range(S):
            D = sum(g[i] + x[i] + l[i] for i in range(j))
            best = max(best, T_r - D + AR[j])
    return best
