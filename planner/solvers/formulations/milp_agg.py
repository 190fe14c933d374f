"""The planning problem for one shape with *aggregated* replicas: a MILP whose
variables count replicas instead of naming them.

Replicas are interchangeable, so a placement is fully described, up to
renaming replicas, by how many replicas put each slot in each domain,
``n[q,d]``, and how many go from domain d (slot q+1) to domain e (slot q),
``f[q,d,e]``: the flows of a layered network whose every integral flow splits
into R replica paths.  The model has no replica index at all, so it neither
grows with R nor has symmetric copies for the branch-and-bound to explore.

What it keeps exact: the partition, memory, GPU capacity, routes, the link
sharing of pipeline flows (users of a link = the flows whose route uses it),
every gradient ring (intra and cross-domain, with its link sharing) and every
term of T_est that depends on the compute alone or on one boundary of one
replica.  What it relaxes: terms that add up several boundaries of one
replica (its round trip through two or more WAN crossings) are bounded by the
*average* replica's round trip.  The model's optimum is therefore a lower
bound on T_est over the shape (proof in ``docs/formulations.md``, MILP
section 3), and :func:`decompose` turns its solution into a plan, whose exact
T_est the caller scores: when the two meet, the shape is solved.

GPU types (SPEC v3 (g)): the counts gain the per-type presence of each slot
(exact memory per type) and the shared rows take the fastest type's figures,
with rows valid for the replica holding a type at a slot (:func:`_typed_counts`,
:func:`_typed_rows`): still a lower bound, no longer exact when replicas cross once.

Example
-------
>>> from planner.solvers.formulations.milp_agg import build, decompose       # doctest: +SKIP
>>> M = build(instance, shape, ts=1.0)
>>> cuts, placement = decompose(M)                                   # after solving
"""

from __future__ import annotations

import math

import pyomo.environ as pyo

from ...problem.space import PlanSpace, Shape, ShapeInfeasible
from .. import stop
from .milp import (_admissible, _gradient_sync, _partition, _pruned_model, _stage_cuts, arc_figures,
                   pairs_of_link, read_partition, shape_data, slowest_stage, t_upper_bound)


def build(instance, shape: Shape, forbid=(), require=(), space: PlanSpace | None = None, ts: float = 1.0,
          cutoff: float | None = None, stage_bounds: dict[int, float] | None = None,
          cuts: bool = True, spec: int | None = None) -> pyo.ConcreteModel:
    """The aggregated MILP (time objective) of ``instance`` for ``shape``.

    Arguments as in :func:`planner.solvers.formulations.milp.build`; ``cutoff`` is
    the incumbent's T_est in seconds (stage counts whose bound exceeds it are
    left out and the big-M values shrink to it); time is in model units of
    1/``ts`` seconds.  The objective ``T`` is a lower bound on the T_est of
    every plan of the shape and equals the T_est of the plans whose
    most-crossing replica crosses at most once.  ``spec=3``: SPEC v3's resources
    (directed links, uplinks; n(q) = max(n_F, n_B) or n_F + n_B as in
    :func:`planner.solvers.formulations.milp.build`), its gradient syncs and the
    flush-based gpipe period (stage j's backward phase from downstream only); the
    model stays a lower bound on T_est (the stage-count bounds of
    :mod:`.milp_bounds` are v2's and left out).
    """
    space = space or PlanSpace(instance)
    D = shape_data(instance, shape, space, frozenset(forbid), ts, spec=spec)
    v3 = D.spec >= 3
    cuts_v2 = cuts and not v3
    M = pyo.ConcreteModel(name=f"{instance.name}-agg-t{shape.tp}-b{shape.micro_batch}-{shape.schedule}"
                               f"-R{shape.replicas}")
    M.data = D
    lbs, dropped = _admissible(instance, shape, D, space, frozenset(forbid), "time", stage_bounds, cutoff, cuts_v2)
    if not lbs:
        if dropped is None:
            raise ShapeInfeasible("no stage count that fits the stage slots of the domains allowed holds the "
                                  "model in memory")
        return _pruned_model(M, D, "time", dropped, None)
    D.stage_lb = lbs
    Q = max(lbs)
    D.Q, D.w = Q, D.w[:Q]
    R, m, t = shape.replicas, D.m, shape.tp
    gpipe = shape.schedule == "gpipe"
    T_cap = t_upper_bound(D, R, Q)
    if cutoff is not None:
        T_cap = min(T_cap, cutoff * ts * (1 + 1e-9))

    if D.typed:
        # GPU types: the shared rows take every unit at its fastest type's figures (a lower
        # bound: T_est only grows with every f and g) and the largest memory; _typed_counts
        # adds the per-type presence of each slot, its memory, and the rows it makes valid
        D.f = [min(D.ft[k][u] for k in D.ft) for u in range(len(D.units))]
        D.g = [min(D.gt[k][u] for k in D.gt) for u in range(len(D.units))]

    # the model, one group of variables and constraints at a time (docs/formulations.md)
    used, P, C, F, G = _partition(M, D, lbs)  # sets, stage count, partition, memory
    c_tot = sum(D.f) + sum(D.g)
    stop.checkpoint()  # a large shape builds for seconds: stop here when out of time
    typed = _counts(M, D, R, Q, used, require)
    stop.checkpoint()
    arcs, solo, lat = _flows(M, D, R)
    if cuts and Q > 1:
        _run_length_cuts(M, D, Q)
    stop.checkpoint()
    umax, k_of = _link_sharing(M, D, R, Q, m, T_cap, c_tot)
    stop.checkpoint()
    _boundary_transfer(M, D, Q, solo, umax, k_of)
    b_min, below, above = _boundary_floor(M, Q, used, solo)
    # front slots of the windows that count: w_hi = hi + 1 < m (1f1b; none for gpipe)
    windows_from = [] if gpipe else [hi for hi in range(Q) if D.w[hi] < m]
    _compute_period(M, D, Q, m, C, F, G, used, b_min, windows_from)
    one = _boundary_periods(M, D, Q, m, arcs, lat, used, b_min, windows_from)
    _average_replica(M, D, R, Q, m, arcs, solo, lat, c_tot)
    stop.checkpoint()
    _sync(M, D, R, Q, P, t, cuts_v2)
    _slot_rows(M, D, Q, m, C, G, arcs, one, b_min, above, below, used, typed)
    stop.checkpoint()
    _stage_cuts(M, lbs)
    M.obj = pyo.Objective(expr=M.T, sense=pyo.minimize)  # objective: T, a lower bound on T_est
    return M


def _counts(M, D, R, Q, used, require) -> dict | None:
    """Counts: n[q, d] replicas put slot q in domain d; sum_d n[q, d] = R used_q,
    sum_q n[q, d] <= cap_d, each ``require``d domain hosts a stage.  With GPU types the
    per-type presence of each slot too; returns :func:`_typed_counts`'s table or None."""
    M.n = pyo.Var(M.Qs, M.Dm, domain=pyo.NonNegativeIntegers,
                  bounds=lambda M, q, d: (0, min(R, D.cap[d])))
    M.place = pyo.Constraint(M.Qs, rule=lambda M, q: sum(M.n[q, d] for d in M.Dm) == R * used[q])
    M.capacity = pyo.Constraint(M.Dm, rule=lambda M, d: sum(M.n[q, d] for q in M.Qs) <= D.cap[d])
    for i, d in enumerate(require):
        if d in D.domains:
            setattr(M, f"require_{i}", pyo.Constraint(expr=sum(M.n[q, d] for q in M.Qs) >= 1))
    return _typed_counts(M, D, R, Q) if D.typed else None


def _flows(M, D, R) -> tuple[list, dict, dict]:
    """Flows: f[q, d, e] replicas go from d (slot q+1) to e (slot q), sum_e f[q, d, e] =
    n[q+1, d], sum_d f[q, d, e] <= n[q, e]; u[q, d, e] = 1 when some replica takes the arc
    (f <= R u, u <= f).  Returns (arcs, solo, lat) of :func:`~.milp.arc_figures`.

    Integral flows of a layered network with integral margins split into R paths."""
    arcs, solo, lat = arc_figures(D)
    M.Arcs = pyo.Set(initialize=arcs, dimen=2)
    M.f = pyo.Var(M.B, M.Arcs, domain=pyo.NonNegativeIntegers, bounds=(0, R))
    M.flow_out = pyo.Constraint(M.B, M.Dm, rule=lambda M, q, d: sum(
        M.f[q, a, b] for a, b in arcs if a == d) == M.n[q + 1, d])
    # (<=: the boundary above the front stage carries nothing)
    M.flow_in = pyo.Constraint(M.B, M.Dm, rule=lambda M, q, e: sum(
        M.f[q, a, b] for a, b in arcs if b == e) <= M.n[q, e])
    M.u = pyo.Var(M.B, M.Arcs, domain=pyo.Binary)
    M.u_ub = pyo.Constraint(M.B, M.Arcs, rule=lambda M, q, a, b: M.f[q, a, b] <= R * M.u[q, a, b])
    M.u_lb = pyo.Constraint(M.B, M.Arcs, rule=lambda M, q, a, b: M.u[q, a, b] <= M.f[q, a, b])
    return arcs, solo, lat


def _run_length_cuts(M, D, Q) -> None:
    """Run lengths (valid inequalities): sum_k f[k, d, d] <= (1 - 1/L_d) sum_q n[q, d] with
    L_d = min(cap_d, Q).

    A replica's run of consecutive slots in d holds at most L_d slots and stays inside d
    for all but one of them, so the staying flows in d are at most (1 - 1/L_d) of d's slots
    (the LP's "spread" point, half a replica in d over every slot, violates it)."""
    def runs(M, d):
        L_d = min(D.cap[d], Q)
        return sum(M.f[k, d, d] for k in M.B) <= (1 - 1 / L_d) * sum(M.n[q, d] for q in M.Qs)
    M.run_length = pyo.Constraint(M.Dm, rule=runs)


def _link_sharing(M, D, R, Q, m, T_cap, c_tot) -> tuple[dict, dict]:
    """Link sharing of pipeline flows and the objective T: T >= coef A users_l / cap_l + c_tot
    for every link (v2) or resource (v3), coef = 2m (gpipe) or m + 1.

    v2: users of link l = the flows whose route uses it; v3: per resource q, the forward
    (n_F) and backward (n_B) channels using it, n(q) their max (gpipe-shaped) or sum.
    Returns (umax, k_of): each link's most users below T_cap and one flow's time alone."""
    v3 = D.spec >= 3
    gpipe = D.shape.schedule == "gpipe"
    if v3:
        fw_of: dict = {}
        for de in D.routes:
            for q_ in D.res_fwd[de]:
                fw_of.setdefault(q_, ([], []))[0].append(de)
            for q_ in D.res_bwd[de]:
                fw_of.setdefault(q_, ([], []))[1].append(de)
        link_pairs = {q_: fw + bw for q_, (fw, bw) in fw_of.items()}  # arcs using resource q_
        cap_of = D.res_cap
    else:
        link_pairs = pairs_of_link(D)
        cap_of = dict(enumerate(D.link_bw))
    M.Lu = pyo.Set(initialize=sorted(link_pairs))
    M.users = pyo.Var(M.Lu, domain=pyo.NonNegativeReals)
    if v3:
        M.nF = pyo.Var(M.Lu, domain=pyo.NonNegativeReals)
        M.nB = pyo.Var(M.Lu, domain=pyo.NonNegativeReals)
        M.users_def = pyo.ConstraintList()
        for l, (fw, bw) in fw_of.items():
            M.users_def.add(M.nF[l] == sum(M.f[q, d, e] for q in M.B for d, e in fw))
            M.users_def.add(M.nB[l] == sum(M.f[q, d, e] for q in M.B for d, e in bw))
            if D.gpipe_shaped:
                M.users_def.add(M.users[l] >= M.nF[l])
                M.users_def.add(M.users[l] >= M.nB[l])
            else:
                M.users_def.add(M.users[l] == M.nF[l] + M.nB[l])
    else:
        M.users_def = pyo.Constraint(M.Lu, rule=lambda M, l: M.users[l] == sum(
            M.f[q, d, e] for q in M.B for d, e in link_pairs[l]))
    k_of = {l: D.A / cap_of[l] for l in link_pairs}  # transfer time of one flow alone
    # a flow on link l takes A * users_l / bw_l per micro-batch; its replica's
    # T_r >= (m - 1) X + Q_0 >= (m + 1) X + c_tot (gpipe: 2 m X + c_tot); with no
    # user the row reads T >= c_tot, true of every plan: no big-M needed
    M.T = pyo.Var(domain=pyo.NonNegativeReals, bounds=(0, T_cap))
    coef = 2 * m if gpipe else m + 1
    M.link_load = pyo.Constraint(M.Lu, rule=lambda M, l: M.T >= coef * k_of[l] * M.users[l] + c_tot)
    umax = {l: min(R * max(Q - 1, 0), math.floor(T_cap / (coef * k_of[l]) * (1 + 1e-9)) if k_of[l] > 0 else R * Q)
            for l in link_pairs}
    for l in link_pairs:
        M.users[l].setub(max(umax[l], 0))
    return umax, k_of


def _boundary_transfer(M, D, Q, solo, umax, k_of) -> None:
    """One boundary of one replica: the arc's transfer Xa[q, d, e] >= solo u[q, d, e] and,
    on every shared link (resource) l of the route, >= A users_l / cap_l when u[q, d, e]."""
    v3 = D.spec >= 3
    M.Xa = pyo.Var(M.B, M.Arcs, domain=pyo.NonNegativeReals)
    M.Xa_solo = pyo.Constraint(M.B, M.Arcs, rule=lambda M, q, a, b: M.Xa[q, a, b] >= solo[(a, b)] * M.u[q, a, b])
    M.Xa_share = pyo.ConstraintList()
    for (d, e), (links, _) in D.routes.items():
        for l in (set(D.res_fwd[(d, e)] + D.res_bwd[(d, e)]) if v3 else links):
            if umax[l] <= 1:
                continue
            for q in range(Q - 1):
                M.Xa_share.add(M.Xa[q, d, e] >= k_of[l] * M.users[l] - k_of[l] * umax[l] * (1 - M.u[q, d, e]))


def _boundary_floor(M, Q, used, solo) -> tuple[float, dict, dict]:
    """(b_min, below, above): every boundary of every replica costs at least b_min (its
    transfer on the fastest arc); below[q] = boundaries below a used slot q (counted twice
    in its round trip), above[q] = boundaries from q on (counted once after its drain), both
    0 when q is unused (expressions in sigma)."""
    b_min = min(solo.values()) if Q > 1 else 0.0
    admissible = list(M.Sset)
    below = {q: q * used[q] for q in range(Q)}
    above = {q: sum((S - 1 - q) * M.sigma[S] for S in admissible if S > q) for q in range(Q)}
    return b_min, below, above


def _compute_period(M, D, Q, m, C, F, G, used, b_min, windows_from) -> None:
    """Compute period tau0 (every replica): the slowest stage, tau0 >= max F + max G
    (gpipe) or max C (1f1b), and Little's law on the 1f1b windows [lo, hi] with every
    boundary at b_min: tau0 (hi - lo + 1) >= compute of lo..hi + 2 b_min (hi - lo) used_hi."""
    M.tau0 = pyo.Var(domain=pyo.NonNegativeReals)
    M.est = pyo.ConstraintList()
    slowest_stage(M, D, Q, C, F, G)
    if D.shape.schedule == "gpipe":
        M.est.add(M.tau0 >= M.Fmax + M.Gmax)
    else:
        M.est.add(M.tau0 >= M.Cmax)
        # Little's law on every window of slots [lo, hi] whose front slot holds fewer than
        # m micro-batches (SPEC 7 v2; hi - lo + 1 in flight), each boundary at b_min: the
        # hi - lo boundaries inside exist when hi is used
        for hi in windows_from:
            for lo in range(hi + 1):
                M.est.add(M.tau0 * (hi - lo + 1) >= M.Cs[hi] - (M.Cs[lo - 1] if lo else 0.0)
                          + 2 * b_min * (hi - lo) * used[hi])


def _boundary_periods(M, D, Q, m, arcs, lat, used, b_min, windows_from) -> dict:
    """One boundary k of one replica: V[k] >= Xa + lat u over the arcs (the largest X + l),
    tl[k] its replica's period (>= tau0, Little's law with V[k] twice), and
    W1[k] / W2[k] >= (m - 1) period + (X + l) once / twice.  Returns one[k, a] = X + l.

    Every term of T_est below is, for a fixed boundary k, non-decreasing in the replica's
    X and X + l there, so the max over replicas splits into a max over arcs (terms in X)
    and a term in V[k] (Little's law)."""
    gpipe = D.shape.schedule == "gpipe"
    one = {(k, a): M.Xa[k, a] + lat[a] * M.u[k, a] for k in range(Q - 1) for a in arcs}
    M.V = pyo.Var(M.B, domain=pyo.NonNegativeReals)
    M.V_def = pyo.Constraint(M.B, M.Arcs, rule=lambda M, k, a, b: M.V[k] >= one[(k, (a, b))])
    # W1[k] / W2[k]: (m - 1) tau_r + (X + l) once / twice, largest over the replicas crossing
    # boundary k; counted once in T_r - D_j when k >= j's slot, twice when k is below it
    M.W1 = pyo.Var(M.B, domain=pyo.NonNegativeReals)
    M.W2 = pyo.Var(M.B, domain=pyo.NonNegativeReals)
    M.tl = pyo.Var(M.B, domain=pyo.NonNegativeReals)  # period of the replica with V[k]
    for k in range(Q - 1):
        M.est.add(M.tl[k] >= M.tau0)
        # Little's law on the windows [lo, hi] around the boundary (lo <= k < hi): its
        # X + l (V[k]) twice, the hi - lo - 1 other boundaries at b_min each
        for hi in windows_from:
            if hi <= k:
                continue
            for lo in range(k + 1):
                M.est.add(M.tl[k] * (hi - lo + 1) >= M.Cs[hi] - (M.Cs[lo - 1] if lo else 0.0) + 2 * M.V[k]
                          + 2 * b_min * (hi - lo - 1) * used[hi])
        M.est.add(M.W1[k] >= (m - 1) * M.tl[k] + M.V[k])
        M.est.add(M.W2[k] >= (m - 1) * M.tl[k] + 2 * M.V[k])
        for a in arcs:
            x, o = M.Xa[k, a], one[(k, a)]
            # the period's transfer terms: 1f1b tau >= X; gpipe max(F, X) + max(G, X)
            periods = [M.Fmax + x, M.Gmax + x, 2 * x] if gpipe else [x]
            for per in periods:
                M.est.add(M.W1[k] >= (m - 1) * per + o)
                M.est.add(M.W2[k] >= (m - 1) * per + 2 * o)
    return one


def _average_replica(M, D, R, Q, m, arcs, solo, lat, c_tot) -> None:
    """The average replica: T >= (m - 1) tau_bar + c_tot + 2 Kbar, Kbar = sum_{q, a}
    (solo_a + lat_a) f[q, a] / R its one-way communication (the most-crossing replica has at
    least this much), tau_bar >= tau0 and (1f1b, S < m) tau_bar S >= c_tot + 2 Kbar."""
    Kbar = sum((solo[a] + lat[a]) * M.f[q, a] for q in range(Q - 1) for a in arcs) / R
    M.tau_bar = pyo.Var(domain=pyo.NonNegativeReals)
    M.est.add(M.tau_bar >= M.tau0)
    if D.shape.schedule != "gpipe":
        k_hi = (Q - 1) * max(solo[a] + lat[a] for a in arcs) if Q > 1 else 0.0
        for S in M.Sset:
            if S >= m:
                continue  # the front stage holds every micro-batch: its windows are dropped (v2)
            big = (c_tot + 2 * k_hi) / S
            M.est.add(M.tau_bar * S >= c_tot + 2 * Kbar - big * S * (1 - M.sigma[S]))
    M.est.add(M.T >= (m - 1) * M.tau_bar + c_tot + 2 * Kbar)


def _sync(M, D, R, Q, P, t, cuts_v2) -> None:
    """Gradient synchronisation per slot, exact on the counts: AR[q] = intra ring + cross
    ring over the domains with n[q, d] > 0 (:func:`~.milp._gradient_sync`); 0 with one replica."""
    M.AR = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
    if R > 1:
        _gradient_sync(M, D, R, Q, P, t, cuts_v2, count=lambda q, d: M.n[q, d], members=None)
    else:
        for q in range(Q):
            M.AR[q].setub(0.0)


def _slot_rows(M, D, Q, m, C, G, arcs, one, b_min, above, below, used, typed) -> None:
    """T >= T_r - D_j + AR_j per slot q with the communication at its floor:
    T >= (m - 1) tau0 + Ff_q + Cs_q + AR_q + b_min (above_q + 2 below_q), and the same with
    one boundary k's communication (W1[k] or W2[k]) and the others at b_min; gpipe under
    v3 by :func:`_gpipe_rows_v3`, GPU types by :func:`_typed_rows`."""
    gpipe = D.shape.schedule == "gpipe"
    # T >= T_r - D_j + AR_j with the communication dropped: (m - 1) tau0 + forward compute
    # before slot q + compute from q on + AR_q
    if D.typed:
        # per_q: slot q's period common to every replica (fastest figures), as in the rows below
        per_q = {q: M.tau0 for q in range(Q)}
    if D.spec >= 3 and gpipe:
        _gpipe_rows_v3(M, D, Q, m, G, arcs, one, b_min, above, below, used)
        if D.typed:
            per_q = {q: M.Fmax + M.Gd[q] for q in range(Q)}
    else:
        for q in range(Q):
            M.est.add(M.T >= (m - 1) * M.tau0 + M.Ff[q] + M.Cs[q] + M.AR[q] + b_min * (above[q] + 2 * below[q]))
        # the same with one boundary's communication (W) and the others at b_min each
        for k in range(Q - 1):
            for q in range(Q):
                rest = above[q] + 2 * below[q] - (2 if k < q else 1) * used[q]
                M.est.add(M.T >= (M.W2[k] if k < q else M.W1[k]) + M.Ff[q] + M.Cs[q] + M.AR[q] + b_min * rest)

    if D.typed:
        _typed_rows(M, D, Q, m, C, typed, per_q, gpipe,
                    {q: b_min * (above[q] + 2 * below[q]) for q in range(Q)})


def _typed_counts(M, D, R, Q) -> dict:
    """GPU types: ``ot[q, k]`` = some replica puts slot q on type k (forced by the counts);
    the slot's compute on each type, ``C_k[q] = sum_u (f^k_u + g^k_u) y[u, q]``; and the
    memory of every type present, ``mem_q <= cap_k`` when ``ot[q, k]`` (exact).  Returns
    {k: (C_k per slot, the largest C_k)}."""
    kinds = sorted(D.ft)
    of = {k: [d for d in D.domains if D.dtype[d] == k] for k in kinds}
    N = len(D.units)
    M.Kt = pyo.Set(initialize=kinds)
    M.ot = pyo.Var(M.Qs, M.Kt, domain=pyo.Binary)
    M.ot_cnt = pyo.Constraint(M.Qs, M.Kt, rule=lambda M, q, k: sum(M.n[q, d] for d in of[k])
                              <= min(R, sum(D.cap[d] for d in of[k])) * M.ot[q, k])
    cap = {k: min(D.mem_cap_d[d] for d in of[k]) for k in kinds}
    top = max(cap.values())
    M.typed_memory = pyo.ConstraintList()
    for k in kinds:
        if cap[k] < top:
            for q in range(Q):
                M.typed_memory.add(sum((D.mem[u] + D.w[q] * D.act[u]) * M.y[u, q] for u in M.U)
                                   <= cap[k] + (top - cap[k]) * (1 - M.ot[q, k]))
    out = {}
    for k in kinds:
        ck = [D.ft[k][u] + D.gt[k][u] for u in range(N)]
        out[k] = ([sum(ck[u] * M.y[u, q] for u in range(N)) for q in range(Q)], sum(ck))
    return out


def _typed_rows(M, D, Q, m, C, typed, per_q, gpipe, comm):
    """GPU types: rows valid for the replica holding type k at slot q (``ot[q, k]``).  Its
    compute from slot q on is at least the fastest figures' with slot q at type k:
    ``T >= (m-1) per_q + Ff[q] + Cs[q] + C_k[q] - C[q] + AR[q] + comm[q]`` (``per_q``
    common to every replica, ``comm[q]`` its fewest transfers).  1f1b: the period of the
    slowest replica is at least every present slot's c, ``tauT >= C_k[q]``, and
    ``T >= (m-1) tauT + Ff[q] + Cs[q] + AR[q] + comm[q]`` (every other term holds for
    every replica, so for the slowest)."""
    M.typed_rows = pyo.ConstraintList()
    if not gpipe:
        M.tauT = pyo.Var(domain=pyo.NonNegativeReals)
        M.typed_rows.add(M.tauT >= M.tau0)
    for k, (Ck, big) in typed.items():
        for q in range(Q):
            M.typed_rows.add(M.T >= (m - 1) * per_q[q] + M.Ff[q] + M.Cs[q] + Ck[q] - C[q] + M.AR[q] + comm[q]
                             - big * (1 - M.ot[q, k]))
            if not gpipe:
                M.typed_rows.add(M.tauT >= Ck[q] - big * (1 - M.ot[q, k]))
    if not gpipe:
        for q in range(Q):
            M.typed_rows.add(M.T >= (m - 1) * M.tauT + M.Ff[q] + M.Cs[q] + M.AR[q] + comm[q])


def _gpipe_rows_v3(M, D, Q, m, G, arcs, one, b_min, above, below, used):
    """The rows T >= T_r - D_j + AR_j for gpipe under SPEC v3 (e): slot q's period is
    max(F, X) over all + max(G, X) over the slots downstream of it (q' <= q) and the
    boundaries between them (k < q), so the backward part is ``Gd[q]`` (the largest G
    downstream) and a boundary's X joins it only when k < q."""
    M.Gd = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
    M.Wq = pyo.Var(M.B, M.Qs, domain=pyo.NonNegativeReals)
    for q in range(Q):
        for q2 in range(q + 1):
            M.est.add(M.Gd[q] >= G[q2])
        tau_q = M.Fmax + M.Gd[q]
        M.est.add(M.T >= (m - 1) * tau_q + M.Ff[q] + M.Cs[q] + M.AR[q] + b_min * (above[q] + 2 * below[q]))
        for k in range(Q - 1):
            twice = k < q  # boundary k is below slot q: in its round trip both ways
            o_mult = 2 if twice else 1
            M.est.add(M.Wq[k, q] >= (m - 1) * tau_q + o_mult * M.V[k])
            for a in arcs:
                x, o = M.Xa[k, a], one[(k, a)]
                # X is in the forward phase always, in slot q's backward phase only when k < q
                periods = [M.Fmax + x, M.Gd[q] + x, 2 * x] if twice else [M.Gd[q] + x]
                for per in periods:
                    M.est.add(M.Wq[k, q] >= (m - 1) * per + o_mult * o)
            rest = above[q] + 2 * below[q] - o_mult * used[q]
            M.est.add(M.T >= M.Wq[k, q] + M.Ff[q] + M.Cs[q] + M.AR[q] + b_min * rest)


def decompose(M) -> tuple[list[tuple[int, int]], list[list[str]]]:
    """(cuts, placement) of the model's current solution, stages front to back.

    The flows are split into R replica paths from the front slot down; at each
    boundary the replicas that have crossed least so far take the crossing
    arcs, so the crossings spread evenly over the replicas (the model bounds
    the most-crossing replica by the average)."""
    D = M.data
    cuts, used = read_partition(M)
    S = len(used)
    top = S - 1
    cnt = lambda v: int(round(pyo.value(v)))
    rows: list[list[str]] = []
    for d in D.domains:
        rows += [[d] for _ in range(cnt(M.n[top, d]))]
    crossed = [0] * len(rows)
    for q in range(top - 1, -1, -1):
        nxt = [None] * len(rows)
        for d in D.domains:
            here = sorted((i for i, row in enumerate(rows) if row[-1] == d), key=lambda i: (crossed[i], i))
            # crossings first go to the replicas that have crossed least; staying is free
            outs = [(e, cnt(M.f[q, d, e])) for e in D.domains if (d, e) in M.Arcs and d != e]
            stay = cnt(M.f[q, d, d])
            k = 0
            for e, c in outs:
                for _ in range(c):
                    nxt[here[k]] = e
                    k += 1
            for _ in range(stay):
                nxt[here[k]] = d
                k += 1
        for i, e in enumerate(nxt):
            if e != rows[i][-1]:
                crossed[i] += 1
            rows[i].append(e)
    return cuts, rows
