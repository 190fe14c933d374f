"""The planning problem for one *shape* as a mixed-integer linear program
(Pyomo), exact for the analytic estimate T_est of SPEC section 7.

A shape fixes tensor parallelism ``t``, micro-batch size ``b``, the
schedule kind and the replica count ``R`` (hence ``m``); the model chooses
the number of stages, the layer partition and the domain of every stage of
every replica.  The driver in :mod:`planner.milp` enumerates shapes
best-first and proves the gap over all of them.  The formulation is written
up in ``docs/formulations.md``; names below follow it.

Stages are indexed from the END of the pipeline by *slots* q = 0..Q-1 (slot 0
is the last stage).  Then the 1f1b in-flight limit min(m, S - j) is
min(m, q + 1) whatever S is, and the number of stages S is simply the number
of used slots: unused slots (at the front) hold no units, no GPUs and no
transfers, and every sum below is unchanged by them.

Example
-------
>>> from planner.formulations.milp import build                  # doctest: +SKIP
>>> model = build(instance)          # the greedy plan's shape
>>> model.T.value, len(model.z)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pyomo.environ as pyo

from ..network import GBPS, MS
from ..space import PlanSpace, Shape


@dataclass
class Data:
    """Numbers of one (instance, shape) pair, in seconds and bytes."""

    shape: Shape
    m: int
    Q: int  # slots
    units: list[int]
    domains: list[str]  # domains that can host a stage of tp t
    f: list[float]  # forward seconds per micro-batch, per unit
    g: list[float]
    p: list[float]  # parameters per unit
    mem: list[float]  # 16 * params per unit (bytes)
    act: list[float]  # stored bytes per micro-batch per unit (b*s*stored)
    A: float  # boundary bytes per micro-batch
    w: list[int]  # in-flight limit per slot
    mem_cap: float  # bytes per stage (t GPUs)
    cap: dict[str, int]  # stage slots per domain (gpus // t)
    routes: dict  # (d, e) -> (links, latency seconds)
    link_bw: list[float]  # bytes/s
    intra_bw: dict[str, float]  # bytes/s
    price: dict[str, float]
    order: list[str]  # all domains in instance order
    wan_price: float
    ts: float  # model time units per second


# Scaling (HiGHS tolerances are absolute, ~1e-7): bytes are counted in GB,
# parameters in billions (so 2 bytes/param gives GB), time in units of
# 1/ts seconds with ts chosen so that iteration times are of order 1-10,
# bandwidths in GB per time unit.
GB = 1e9


def time_scale(seconds: float) -> float:
    """A power of ten that brings ``seconds`` to [1, 10)."""
    import math

    if not seconds or not math.isfinite(seconds) or seconds <= 0:
        return 1.0
    return 10.0 ** (-math.floor(math.log10(seconds)))


def shape_data(instance, shape: Shape, space: PlanSpace | None = None,
               forbid: frozenset = frozenset(), ts: float = 1.0) -> Data:
    """The shape's figures in model units (GB, billions of parameters, 1/ts s)."""
    space = space or PlanSpace(instance)
    wl = instance.workload
    t, b = shape.tp, shape.micro_batch
    m = shape.micro_batches(wl.global_batch_size)
    slots = {d: n for d, n in space.slots(t).items() if d not in forbid and n > 0}
    Q = min(instance.max_stages, instance.num_units, sum(slots.values()) // shape.replicas)
    if shape.stages:
        Q = min(Q, shape.stages)
    if Q < 1:
        raise ValueError(f"shape {shape} has no room: {sum(slots.values())} stage slots of tp={t} "
                         f"for {shape.replicas} replicas")
    units = instance.units
    outs = {u.out_bytes_per_token for u in units[:-1]}
    if len(outs) > 1:
        raise NotImplementedError("the MILP assumes every unit sends the same bytes per token "
                                  "across a boundary (true for architecture-defined models)")
    tok = b * wl.seq_len
    rate = t * instance.gpu.flops_per_s
    f = [u.fwd_flops_per_token * tok / rate * ts for u in units]
    bwd = space.bwd
    w = [m if shape.schedule == "gpipe" else min(m, q + 1) for q in range(Q)]
    doms = [d for d in instance.domain_names if d in slots]
    routes = {}
    for d in doms:
        for e in doms:
            if d != e:
                r = instance.routes[(d, e)]
                routes[(d, e)] = (r.links, r.latency_ms * MS * ts)
    return Data(shape=shape, m=m, Q=Q, units=list(range(len(units))), domains=doms, f=f,
                g=[bwd * x for x in f], p=[u.params / GB for u in units],
                mem=[16 * u.params / GB for u in units],
                act=[u.stored_bytes_per_token * tok / GB for u in units],
                A=(units[0].out_bytes_per_token if units else 0.0) * tok / GB,
                w=w, mem_cap=instance.memory_limit_bytes * t / GB, cap=slots, routes=routes,
                link_bw=[l.bandwidth_gbps * GBPS / GB / ts for l in instance.links],
                intra_bw={d.name: d.intra_bandwidth_gbps * GBPS / GB / ts for d in instance.domains},
                price={d.name: d.price_per_gpu_hour for d in instance.domains},
                order=list(instance.domain_names), wan_price=instance.options.wan_price_per_gb, ts=ts)


def build(instance, shape: Shape | None = None, objective: str | None = None,
          forbid=(), require=(), space: PlanSpace | None = None, ts: float | None = None,
          cost_scale: float | None = None, cost_cutoff: float | None = None,
          stage_bounds: dict[int, float] | None = None) -> pyo.ConcreteModel:
    """The MILP of ``instance`` for ``shape`` (default: the greedy plan's shape).

    ``objective`` is ``"time"`` (T_est) or ``"cost"`` (default: the
    instance's); ``forbid`` lists domains that may host nothing, ``require``
    domains that must host at least one stage; ``stage_bounds`` maps a
    number of stages S to a valid lower bound on T (model units) for plans
    with S stages (only the listed S are allowed).
    """
    if shape is None or ts is None:
        from ..evaluator import Evaluator
        from ..greedy import greedy

        p = greedy(instance)
        shape = shape or Shape(p.tp, p.micro_batch_size, p.schedule_kind, 0, p.replicas)
        ts = ts or time_scale(float(Evaluator(instance, p).estimate_times()[0]))
    objective = objective or instance.options.objective
    D = shape_data(instance, shape, space, frozenset(forbid), ts)
    M = pyo.ConcreteModel(name=f"{instance.name}-t{shape.tp}-b{shape.micro_batch}-{shape.schedule}-R{shape.replicas}")
    M.data = D
    R, Q, m = shape.replicas, D.Q, D.m
    t = shape.tp
    N = len(D.units)
    L = len(D.link_bw)

    # ---- sets ---------------------------------------------------------------
    M.U = pyo.RangeSet(0, N - 1)  # units
    M.Qs = pyo.RangeSet(0, Q - 1)  # slots, 0 = last stage
    M.B = pyo.RangeSet(0, Q - 2) if Q > 1 else pyo.Set(initialize=[])  # boundary q: slot q+1 -> q
    M.Rr = pyo.RangeSet(0, R - 1)  # replicas
    M.Dm = pyo.Set(initialize=D.domains, ordered=True)  # domains able to host a stage
    M.Pairs = pyo.Set(initialize=list(D.routes), dimen=2)  # ordered pairs of distinct domains
    M.Lk = pyo.RangeSet(0, L - 1) if L else pyo.Set(initialize=[])

    # ---- partition: unit u on slot q ------------------------------------------
    M.y = pyo.Var(M.U, M.Qs, domain=pyo.Binary)
    M.used = pyo.Var(M.Qs, bounds=(0, 1))  # slot q is a stage (0/1 through the constraints)
    M.one_slot = pyo.Constraint(M.U, rule=lambda M, u: sum(M.y[u, q] for q in M.Qs) == 1)
    sigma = {u: sum(q * M.y[u, q] for q in M.Qs) for u in M.U}  # slot index of unit u
    M.last_unit_last_slot = pyo.Constraint(expr=M.y[N - 1, 0] == 1)
    # units run front to back over consecutive slots: sigma_u - sigma_{u+1} in {0, 1}
    M.order = pyo.Constraint(pyo.RangeSet(0, N - 2) if N > 1 else [], rule=lambda M, u:
                             pyo.inequality(0, sigma[u] - sigma[u + 1], 1))
    M.used_def = pyo.Constraint(M.Qs, rule=lambda M, q: M.used[q] <= sum(M.y[u, q] for u in M.U))
    M.used_lb = pyo.Constraint(M.U, M.Qs, rule=lambda M, u, q: M.used[q] >= M.y[u, q])
    M.used_mono = pyo.Constraint(pyo.RangeSet(0, Q - 2) if Q > 1 else [],
                                 rule=lambda M, q: M.used[q] >= M.used[q + 1])
    if shape.stages:  # exactly S stages: every slot is used
        if Q < shape.stages:
            raise ValueError(f"shape {shape} has room for only {Q} stages")
        for q in range(Q):
            M.used[q].fix(1.0)
    F = {q: sum(D.f[u] * M.y[u, q] for u in M.U) for q in M.Qs}
    G = {q: sum(D.g[u] * M.y[u, q] for u in M.U) for q in M.Qs}
    C = {q: F[q] + G[q] for q in M.Qs}
    P = {q: sum(D.p[u] * M.y[u, q] for u in M.U) for q in M.Qs}
    # memory per stage: 16 P + w_q * b s stored <= usable memory * t
    M.memory = pyo.Constraint(M.Qs, rule=lambda M, q: sum((D.mem[u] + D.w[q] * D.act[u]) * M.y[u, q]
                                                          for u in M.U) <= D.mem_cap)

    # ---- placement: replica r's slot q in domain d --------------------------------
    M.z = pyo.Var(M.Rr, M.Qs, M.Dm, domain=pyo.Binary)
    M.place = pyo.Constraint(M.Rr, M.Qs, rule=lambda M, r, q: sum(M.z[r, q, d] for d in M.Dm) == M.used[q])
    M.capacity = pyo.Constraint(M.Dm, rule=lambda M, d: sum(M.z[r, q, d] for r in M.Rr for q in M.Qs)
                                <= D.cap[d])
    # replicas are interchangeable: order them by the domain of their first stage, then
    # (ties) by their last stage's, so symmetric copies are not explored twice
    idx = {d: i for i, d in enumerate(D.domains)}
    code = {r: sum(idx[d] * M.z[r, Q - 1, d] for d in M.Dm) * len(D.domains) * (Q + 1)
            + sum(sum(idx[d] * M.z[r, q, d] for d in M.Dm) for q in M.Qs) for r in M.Rr}
    M.symmetry = pyo.Constraint(pyo.RangeSet(0, R - 2) if R > 1 else [],
                                rule=lambda M, r: code[r] <= code[r + 1])
    for d in require:
        if d in idx:
            setattr(M, f"require_{idx[d]}", pyo.Constraint(
                expr=sum(M.z[r, q, d] for r in M.Rr for q in M.Qs) >= 1))

    # ---- pipeline transfers -------------------------------------------------------
    # v[r,q,l] = 1 when replica r's boundary q crosses WAN link l (lower bounds suffice:
    # crossing only costs, so the optimum sets v to the indicator of the chosen route)
    M.v = pyo.Var(M.Rr, M.B, M.Lk, bounds=(0, 1))
    M.X = pyo.Var(M.Rr, M.B, domain=pyo.NonNegativeReals)  # transfer time, s
    M.Lat = pyo.Var(M.Rr, M.B, domain=pyo.NonNegativeReals)  # route latency, s
    cons = pyo.ConstraintList()
    M.crossing = cons
    for r in range(R):
        for q in range(Q - 1):
            for (d, e), (links, lat) in D.routes.items():
                both = M.z[r, q + 1, d] + M.z[r, q, e] - 1
                for l in links:
                    cons.add(M.v[r, q, l] >= both)
                if lat > 0:
                    cons.add(M.Lat[r, q] >= lat * both)
            for d in D.domains:
                cons.add(M.X[r, q] >= D.A / D.intra_bw[d] * (M.z[r, q + 1, d] + M.z[r, q, d] - 1))
    # link sharing: users of link l; a crossing flow's time is A * users / bandwidth
    users = {l: sum(M.v[r, q, l] for r in M.Rr for q in M.B) for l in M.Lk}
    max_users = R * max(Q - 1, 0)
    M.share = pyo.ConstraintList()
    for r in range(R):
        for q in range(Q - 1):
            for l in range(L):
                big = D.A * max_users / D.link_bw[l]
                M.share.add(M.X[r, q] >= D.A / D.link_bw[l] * users[l] - big * (1 - M.v[r, q, l]))

    # ---- gradient synchronisation per slot ------------------------------------------
    M.AR = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
    if R > 1:
        _gradient_sync(M, D, R, Q, P, t)
    else:
        for q in range(Q):
            M.AR[q].fix(0.0)

    # ---- T_est per replica (SPEC 7) ---------------------------------------------------
    M.tau = pyo.Var(M.Rr, domain=pyo.NonNegativeReals)
    M.T = pyo.Var(domain=pyo.NonNegativeReals)
    M.est = pyo.ConstraintList()
    Xq = lambda r, q: M.X[r, q] if q < Q - 1 else 0.0
    Lq = lambda r, q: M.Lat[r, q] if q < Q - 1 else 0.0
    for r in range(R):
        # round trip from slot q: compute of slots <= q, both ways over boundaries < q
        Qrt = {q: sum(C[i] for i in range(q + 1)) + sum(2 * (Xq(r, i) + Lq(r, i)) for i in range(q))
               for q in range(Q)}
        if shape.schedule == "gpipe":
            alpha = pyo.Var(domain=pyo.NonNegativeReals)
            beta = pyo.Var(domain=pyo.NonNegativeReals)
            M.add_component(f"alpha_{r}", alpha)
            M.add_component(f"beta_{r}", beta)
            for q in range(Q):
                M.est.add(alpha >= F[q])
                M.est.add(beta >= G[q])
            for q in range(Q - 1):
                M.est.add(alpha >= M.X[r, q])
                M.est.add(beta >= M.X[r, q])
            M.est.add(M.tau[r] == alpha + beta)
        else:
            for q in range(Q):
                M.est.add(M.tau[r] >= C[q])
                M.est.add(M.tau[r] * D.w[q] >= Qrt[q])  # Little's law
            for q in range(Q - 1):
                M.est.add(M.tau[r] >= M.X[r, q])
        # T >= T_r - D_j + AR_j, written with positive terms only:
        # (m-1) tau + sum_{later slots' earlier stages} (f + x + l) + round trip from q + AR_q
        for q in range(Q):
            front = sum(F[i] for i in range(q + 1, Q)) + sum(Xq(r, i) + Lq(r, i) for i in range(q, Q - 1))
            M.est.add(M.T >= (m - 1) * M.tau[r] + front + Qrt[q] + M.AR[q])

    # ---- valid lower bounds per number of stages (cuts) ---------------------------------
    if stage_bounds:
        # sigma[S] = 1 for the chosen number of stages; T >= LB(S)
        admissible = sorted(S for S in stage_bounds if S <= Q)
        if not admissible:
            raise ValueError(f"shape {shape} has no admissible number of stages within {Q} slots")
        M.Sset = pyo.Set(initialize=admissible)
        M.sigma = pyo.Var(M.Sset, domain=pyo.Binary)
        M.sigma_one = pyo.Constraint(expr=sum(M.sigma[S] for S in M.Sset) == 1)
        M.sigma_count = pyo.Constraint(expr=sum(S * M.sigma[S] for S in M.Sset) == sum(M.used[q] for q in M.Qs))
        M.stage_cut = pyo.Constraint(expr=M.T >= sum(stage_bounds[S] * M.sigma[S] for S in M.Sset))

    # ---- objective ---------------------------------------------------------------------
    if objective == "cost":
        _cost_objective(M, D, R, Q, P, t, cost_scale, cost_cutoff)
    else:
        M.obj = pyo.Objective(expr=M.T, sense=pyo.minimize)
    return M


def _gradient_sync(M, D, R, Q, P, t):
    """AR_q = intra ring + cross-domain ring (SPEC 5), exactly, via one-hot counts."""
    doms = D.domains
    order = D.order
    # o[q,d]: slot q has a replica in d (exact: between the max and the sum of z)
    M.o = pyo.Var(M.Qs, M.Dm, bounds=(0, 1))
    M.o_lb = pyo.Constraint(M.Rr, M.Qs, M.Dm, rule=lambda M, r, q, d: M.o[q, d] >= M.z[r, q, d])
    M.o_ub = pyo.Constraint(M.Qs, M.Dm, rule=lambda M, q, d: M.o[q, d] <= sum(M.z[r, q, d] for r in M.Rr))
    # nu[q,d,n]: exactly n replicas of slot q in d (one-hot)
    M.Nn = pyo.RangeSet(0, R)
    M.nu = pyo.Var(M.Qs, M.Dm, M.Nn, domain=pyo.Binary)
    M.nu_one = pyo.Constraint(M.Qs, M.Dm, rule=lambda M, q, d: sum(M.nu[q, d, n] for n in M.Nn) == 1)
    M.nu_count = pyo.Constraint(M.Qs, M.Dm, rule=lambda M, q, d: sum(n * M.nu[q, d, n] for n in M.Nn)
                                == sum(M.z[r, q, d] for r in M.Rr))
    Gmax = 2 * sum(D.p)
    M.intra = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
    M.intra_c = pyo.ConstraintList()
    for q in range(Q):
        for d in doms:
            big = 2 * Gmax / t / D.intra_bw[d]
            for n in range(2, R + 1):
                M.intra_c.add(M.intra[q] >= 2 * (n - 1) / n * (2 * P[q] / t) / D.intra_bw[d]
                              - big * (1 - M.nu[q, d, n]))
    # kappa[q,k]: the replicas of slot q sit in exactly k domains (one-hot)
    Kmax = min(R, len(doms))
    M.Kk = pyo.RangeSet(0, Kmax)
    M.kappa = pyo.Var(M.Qs, M.Kk, domain=pyo.Binary)
    M.kappa_one = pyo.Constraint(M.Qs, rule=lambda M, q: sum(M.kappa[q, k] for k in M.Kk) == 1)
    M.kappa_count = pyo.Constraint(M.Qs, rule=lambda M, q: sum(k * M.kappa[q, k] for k in M.Kk)
                                   == sum(M.o[q, d] for d in M.Dm))
    M.cross = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
    if Kmax >= 2:
        # hop a -> b is in slot q's ring when both host it and no domain between them
        # (cyclically, in instance order) does
        pos = {d: i for i, d in enumerate(order)}
        hostable = set(doms)

        def between(a, b):
            i, j = pos[a], pos[b]
            span = order[i + 1:j] if i < j else order[i + 1:] + order[:j]
            return [c for c in span if c in hostable]

        M.h = pyo.Var(M.Qs, M.Pairs, bounds=(0, 1))
        M.h_lb = pyo.Constraint(M.Qs, M.Pairs, rule=lambda M, q, a, b: M.h[q, a, b] >= M.o[q, a] + M.o[q, b]
                                - sum(M.o[q, c] for c in between(a, b)) - 1)
        L = len(D.link_bw)
        ring_users = {l: sum(M.h[q, a, b] for q in range(Q) for (a, b), (links, _) in D.routes.items()
                             if l in links) for l in range(L)}
        M.mu = pyo.Var(M.Qs, M.Lk, bounds=(0, 1))  # slot q's ring crosses link l
        M.psi = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)  # 1 / ring bandwidth, s per byte
        M.lam = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)  # ring latency, s
        M.ring = pyo.ConstraintList()
        max_pairs = Q * len(doms)
        psi_max = max_pairs / min(D.link_bw) if L else 0.0
        for q in range(Q):
            for (a, b), (links, lat) in D.routes.items():
                for l in links:
                    M.ring.add(M.mu[q, l] >= M.h[q, a, b])
                M.ring.add(M.lam[q] >= lat * M.h[q, a, b])
            for l in range(L):
                M.ring.add(M.psi[q] >= ring_users[l] / D.link_bw[l] - max_pairs / D.link_bw[l] * (1 - M.mu[q, l]))
        # pi[u,q] = psi_q * y[u,q] (binary x bounded continuous, from below)
        M.pi = pyo.Var(M.U, M.Qs, domain=pyo.NonNegativeReals)
        for q in range(Q):
            for u in range(len(D.units)):
                M.ring.add(M.pi[u, q] >= M.psi[q] - psi_max * (1 - M.y[u, q]))
        lat_max = max((lat for _, lat in D.routes.values()), default=0.0)
        for q in range(Q):
            vol = 2 * sum(D.p[u] * M.pi[u, q] for u in range(len(D.units)))  # G_q / ring bandwidth
            big = 2 * Gmax * psi_max + 2 * Kmax * lat_max
            for k in range(2, Kmax + 1):
                M.ring.add(M.cross[q] >= 2 * (k - 1) / k * vol + 2 * (k - 1) * M.lam[q]
                           - big * (1 - M.kappa[q, k]))
    M.ar_def = pyo.Constraint(M.Qs, rule=lambda M, q: M.AR[q] == M.intra[q] + M.cross[q])


def t_upper_bound(D, R, Q) -> float:
    """A valid upper bound on T_est (model units) of every plan of the shape."""
    m = D.m
    ctot = sum(D.f) + sum(D.g)
    bw_min = min(D.link_bw) if D.link_bw else math.inf
    x_max = max(D.A * R * max(Q - 1, 1) / bw_min, D.A / min(D.intra_bw.values()))
    lat_max = max((lat for _, lat in D.routes.values()), default=0.0)
    q_max = ctot + 2 * max(Q - 1, 0) * (x_max + lat_max)
    tau = 2 * max(ctot, x_max) if D.shape.schedule == "gpipe" else max(ctot, x_max, q_max)
    G = 2 * sum(D.p)
    ar = 2 * G / D.shape.tp / min(D.intra_bw.values()) + 2 * G * Q * len(D.domains) / bw_min \
        + 2 * len(D.domains) * lat_max if R > 1 else 0.0
    return (m - 1) * tau + 2 * q_max + ar


def _cost_objective(M, D, R, Q, P, t, cost_scale=None, cost_cutoff=None):
    """Cost per iteration with T_est for T: T/3600 * price of used GPUs + WAN GB * price.

    T x z is linearised from below with big-M = an upper bound on T: the
    structural bound of :func:`t_upper_bound`, tightened when a cutoff
    (incumbent cost) and positive prices cap T for any better plan."""
    Tmax = t_upper_bound(D, R, Q)
    pmin = min(D.price[d] for d in D.domains)
    if cost_cutoff is not None and pmin > 0:
        Tmax = min(Tmax, cost_cutoff * 3600.0 * D.ts / (pmin * t * R))
        M.T_cap = pyo.Constraint(expr=M.T <= Tmax)
    if cost_scale is None:
        ctot = (sum(D.f) + sum(D.g)) / D.ts * D.m
        rough = ctot * R * t * max(max(D.price.values()), 1e-9) / 3600 + 2 * D.A * D.m * R * D.wan_price
        cost_scale = time_scale(rough)
    M.cost_scale = cost_scale
    M.Tz = pyo.Var(M.Rr, M.Qs, M.Dm, domain=pyo.NonNegativeReals)  # T * z (from below)
    M.Tz_c = pyo.Constraint(M.Rr, M.Qs, M.Dm, rule=lambda M, r, q, d: M.Tz[r, q, d] >= M.T - Tmax * (1 - M.z[r, q, d]))
    gpu_cost = sum(t * D.price[d] / (3600.0 * D.ts) * M.Tz[r, q, d] for r in M.Rr for q in M.Qs for d in M.Dm)
    wan = 0.0
    if D.wan_price > 0:
        # boundary crossings: 2 * A * m bytes per crossing boundary (both directions)
        M.cross_b = pyo.Var(M.Rr, M.B, bounds=(0, 1))
        M.cross_b_c = pyo.ConstraintList()
        for r in range(R):
            for q in range(Q - 1):
                for (d, e) in D.routes:
                    M.cross_b_c.add(M.cross_b[r, q] >= M.z[r, q + 1, d] + M.z[r, q, e] - 1)
        wan = 2 * D.A * D.m * sum(M.cross_b[r, q] for r in M.Rr for q in M.B)
        if R > 1 and hasattr(M, "kappa"):
            M.ringbytes = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
            Gmax = 2 * sum(D.p)
            for q in range(Q):
                for k in range(2, len(M.Kk)):
                    M.cross_b_c.add(M.ringbytes[q] >= 2 * (k - 1) * 2 * P[q]
                                    - 2 * (k - 1) * Gmax * (1 - M.kappa[q, k]))
            wan = wan + sum(M.ringbytes[q] for q in M.Qs)
        wan = wan * D.wan_price
    M.obj = pyo.Objective(expr=cost_scale * (gpu_cost + wan), sense=pyo.minimize)


def extract(M):
    """(cuts, placement) of the model's current solution, stages front to back."""
    D = M.data
    Q, R = D.Q, D.shape.replicas
    slot_of = [max(range(Q), key=lambda q: pyo.value(M.y[u, q])) for u in D.units]
    used = sorted({s for s in slot_of}, reverse=True)  # front (highest slot) first
    cuts, start = [], 0
    for q in used:
        n = sum(1 for s in slot_of if s == q)
        cuts.append((start, start + n))
        start += n
    placement = [[max(D.domains, key=lambda d: pyo.value(M.z[r, q, d])) for q in used] for r in range(R)]
    return cuts, placement
