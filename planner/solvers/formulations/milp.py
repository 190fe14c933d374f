"""The planning problem for one *shape* as a mixed-integer linear program
(Pyomo), exact for the analytic estimate T_est of SPEC section 7.

A shape fixes tensor parallelism ``t``, micro-batch size ``b``, the
schedule kind and the replica count ``R`` (hence ``m``); the model chooses
the number of stages, the layer partition and the domain of every stage of
every replica.  The driver in :mod:`planner.solvers.milp` enumerates shapes
best-first and proves the gap over all of them.  The formulation is written
up in ``docs/formulations.md``; names below follow it.

Stages are indexed from the END of the pipeline by *slots* q = 0..Q-1 (slot 0
is the last stage).  Then the 1f1b in-flight limit min(m, S - j) is
min(m, q + 1) whatever S is, and the number of stages S is simply the number
of used slots: unused slots (at the front) hold no units, no GPUs and no
transfers, and every sum below is unchanged by them.

Example
-------
>>> from planner.solvers.formulations.milp import build                  # doctest: +SKIP
>>> model = build(instance)          # the greedy plan's shape
>>> model.T.value, len(model.z)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pyomo.environ as pyo

from ...problem.network import GBPS, MS
from ...problem.space import PlanSpace, Shape, ShapeInfeasible
from .. import stop


@dataclass
class Data:
    """Numbers of one (instance, shape) pair, in model units (GB, 1/ts s)."""

    shape: Shape
    m: int
    Q: int  # slots
    units: list[int]
    domains: list[str]  # domains that can host a stage of tp t
    f: list[float]  # forward time per micro-batch, per unit (compute + tensor-parallel all-reduce)
    g: list[float]  # backward time, the same
    p: list[float]  # parameters per unit (billions)
    mem: list[float]  # 16 * params per unit (GB)
    act: list[float]  # stored GB per micro-batch per unit (b*s*stored)
    A: float  # boundary GB per micro-batch
    w: list[int]  # in-flight limit per slot
    mem_cap: float  # GB per stage (t GPUs)
    cap: dict[str, int]  # stage slots per domain (gpus // t)
    routes: dict  # (d, e) -> (links, latency in model time)
    link_bw: list[float]  # GB per model time unit
    intra_bw: dict[str, float]  # GB per model time unit
    price: dict[str, float]
    order: list[str]  # all domains in instance order
    wan_price: float
    ts: float  # model time units per second
    spec: int = 2  # SPEC version modelled (planner.problem.specversion)
    # SPEC v3 only: resources (planner.problem.network.Resources ids) of each route's forward
    # channel / gradient hop (d, e), of a boundary's backward channel (the route reversed),
    # their capacities (GB per model time unit), n(q) = max(n_F, n_B) (gpipe-shaped) or the sum,
    # and phi's kind
    res_fwd: dict = field(default_factory=dict)
    res_bwd: dict = field(default_factory=dict)
    res_cap: dict = field(default_factory=dict)
    gpipe_shaped: bool = False
    reduce_broadcast: bool = False
    v_min: float = 0.0  # the smallest gradient-sync volume any stage can have (GB), v3
    # GPU types (SPEC v3 (g)), on a mixed instance only: per-unit f, g of each type (type index
    # -> list), each hostable domain's type and usable memory per stage (GB, t GPUs); the
    # shared f, g above are then the slowest type's and mem_cap the largest
    typed: bool = False
    ft: dict = field(default_factory=dict)
    gt: dict = field(default_factory=dict)
    dtype: dict = field(default_factory=dict)
    mem_cap_d: dict = field(default_factory=dict)
    stage_lb: dict[int, float] = field(default_factory=dict)  # admissible S -> bound on T (model units)
    cost_lb: dict[int, float] = field(default_factory=dict)  # S -> bound on the cost (currency)
    pruned: bool = False  # no stage count can beat the cutoff


# Scaling (HiGHS tolerances are absolute, ~1e-7): bytes are counted in GB,
# parameters in billions (so 2 bytes/param gives GB), time in units of
# 1/ts seconds with ts chosen so that iteration times are of order 1-10,
# bandwidths in GB per time unit.
GB = 1e9


def time_scale(seconds: float) -> float:
    """A power of ten that brings ``seconds`` to [1, 10)."""
    if not seconds or not math.isfinite(seconds) or seconds <= 0:
        return 1.0
    return 10.0 ** (-math.floor(math.log10(seconds)))


def phi(D: "Data", n: int) -> float:
    """The gradient sync's volume factor for n members (SPEC 5): 2(n-1)/n for a ring,
    2 for ``reduce_broadcast`` (SPEC v3)."""
    return 2.0 if D.reduce_broadcast else 2 * (n - 1) / n


def shape_data(instance, shape: Shape, space: PlanSpace | None = None,
               forbid: frozenset = frozenset(), ts: float = 1.0, spec: int | None = None) -> Data:
    """The shape's figures in model units (GB, billions of parameters, 1/ts s) under
    SPEC version ``spec`` (default :data:`~planner.problem.specversion.DEFAULT_SPEC`)."""
    from ...problem.specversion import check_spec

    spec = check_spec(spec)
    space = space or PlanSpace(instance)
    wl = instance.workload
    t, b = shape.tp, shape.micro_batch
    m = shape.micro_batches(wl.global_batch_size)
    slots = {d: n for d, n in space.slots(t).items() if d not in forbid and n > 0}
    Q = min(instance.max_stages, instance.num_units, sum(slots.values()) // shape.replicas)
    if shape.stages:
        Q = min(Q, shape.stages)
    if Q < 1:
        raise ShapeInfeasible("fewer stage slots than replicas (the domains allowed cannot hold one stage "
                              "per replica)")
    units = instance.units
    outs = {u.out_bytes_per_token for u in units[:-1]}
    if len(outs) > 1:
        raise NotImplementedError("the MILP assumes every unit sends the same bytes per token "
                                  "across a boundary (true for architecture-defined models)")
    tok = b * wl.seq_len
    bwd = space.bwd
    doms = [d for d in instance.domain_names if d in slots]
    typed = {}
    if instance.heterogeneous:
        # GPU types (SPEC v3 (g)): per-unit figures of every type a hostable domain has; the
        # shared f, g are the slowest type's (upper bounds only) and mem_cap the largest
        kinds = sorted({instance.domain_type[instance.domain_index[d]] for d in doms})
        ft, gt = {}, {}
        for k in kinds:
            ft[k], gt[k] = unit_figures(instance.gpu_types[k], units, tok, t, ts, spec, bwd)
        f = [max(ft[k][u] for k in kinds) for u in range(len(units))]
        typed = dict(typed=True, ft=ft, gt=gt,
                     dtype={d: instance.domain_type[instance.domain_index[d]] for d in doms},
                     mem_cap_d={d: instance.memory_limit_of(instance.domain_gpu(d)) * t / GB for d in doms})
        g = [max(gt[k][u] for k in kinds) for u in range(len(units))]
        mem_cap = max(typed["mem_cap_d"].values()) if doms else 0.0
    else:
        f, g = unit_figures(instance.gpu, units, tok, t, ts, spec, bwd)
        mem_cap = instance.memory_limit_bytes * t / GB
    w = [m if shape.schedule == "gpipe" else min(m, q + 1) for q in range(Q)]
    routes = {}
    table = instance.routes_for(spec)
    for d in doms:
        for e in doms:
            if d != e and (d, e) in table:
                r = table[(d, e)]
                routes[(d, e)] = (r.links, r.latency_ms * MS * ts)
    v3 = _v3_resources(instance, routes, table, ts) if spec >= 3 else {}
    if spec >= 3:
        pos = [u.params for u in units]
        rb = instance.workload.gradient_sync == "reduce_broadcast"
        # V = phi(K) G >= phi_min * 2 * the smallest unit's parameters (phi(K) >= 1 for a ring
        # of K >= 2, = 2 for reduce_broadcast), when no unit is free of them (a stage of only
        # such units has no sync at all, SPEC v3)
        v3["v_min"] = (2.0 if rb else 1.0) * 2 * min(pos) / GB if pos and min(pos) > 0 else 0.0
        v3["reduce_broadcast"] = rb
        v3["gpipe_shaped"] = shape.schedule == "gpipe" or m == 1
    return Data(spec=spec, **v3, **typed, shape=shape, m=m, Q=Q, units=list(range(len(units))), domains=doms,
                f=f, g=g, p=[u.params / GB for u in units],
                mem=[16 * u.params / GB for u in units],
                act=[u.stored_bytes_per_token * tok / GB for u in units],
                A=(units[0].out_bytes_per_token if units else 0.0) * tok / GB,
                w=w, mem_cap=mem_cap, cap=slots, routes=routes,
                link_bw=[l.bandwidth_gbps * GBPS / GB / ts for l in instance.links],
                intra_bw={d.name: d.intra_bandwidth_gbps * GBPS / GB / ts for d in instance.domains},
                price={d.name: d.price_per_gpu_hour for d in instance.domains},
                order=list(instance.domain_names), wan_price=instance.options.wan_price_per_gb, ts=ts)


def unit_figures(gpu, units, tok: float, t: int, ts: float, spec: int, bwd: float) -> tuple[list, list]:
    """(f, g): forward and backward time per micro-batch of every unit on GPU type ``gpu``
    (model units of 1/``ts`` s) at ``tok`` tokens per micro-batch and tensor parallelism
    ``t``, SPEC 5: FLOPs at t * peak * mfu, the tensor-parallel all-reduce y (the same
    forward and backward), and under v3 the unit overhead o forward, beta o backward.
    Summed over a stage's units they are its f_j, g_j on that type.

    >>> unit_figures(inst.gpu, inst.units, 512, 1, 1.0, 3, 2.0)[0][1]      # doctest: +SKIP
    0.0021
    """
    rate = t * gpu.flops_per_s
    # tensor-parallel all-reduces per unit (SPEC 5 v2), the same forward and backward:
    # linear in the partition like the FLOPs, so a per-unit figure
    y = [float(gpu.tp_allreduce_s(u.tp_bytes_per_token * tok, t)) * ts for u in units]
    # SPEC v3 (f): o per unit with FLOPs forward, beta * o backward (g below scales f - y)
    o = (gpu.unit_overhead_ms or 0.0) * MS * ts if spec >= 3 else 0.0
    f = [u.fwd_flops_per_token * tok / rate * ts + y_u + (o if u.fwd_flops_per_token > 0 else 0.0)
         for u, y_u in zip(units, y)]
    return f, [bwd * (x - y_u) + y_u for x, y_u in zip(f, y)]


def _v3_resources(instance, routes, table, ts) -> dict:
    """SPEC v3 resources of every route (d, e): the forward channel (or a gradient hop
    d -> e) uses each link in its direction and the uplinks out of d and into e; the
    backward channel of a boundary d -> e runs along the same route reversed."""
    idx = {n: i for i, n in enumerate(instance.domain_names)}
    L, nd = len(instance.links), len(idx)
    cap = {}
    for i, l in enumerate(instance.links):
        cap[2 * i] = cap[2 * i + 1] = l.bandwidth_gbps * GBPS / GB / ts
    up = {d.name: d.uplink_gbps for d in instance.domains}
    for d, u in up.items():
        if u is not None:
            cap[2 * L + idx[d]] = cap[2 * L + nd + idx[d]] = u * GBPS / GB / ts
    fwd, bwd = {}, {}
    for (d, e) in routes:
        nodes, links = table[(d, e)].nodes, table[(d, e)].links
        ids = [2 * l + (0 if nodes[i] == instance.links[l].a else 1) for i, l in enumerate(links)]
        f = ids + ([2 * L + idx[d]] if up[d] is not None else []) + ([2 * L + nd + idx[e]] if up[e] is not None else [])
        b = [i ^ 1 for i in ids] + ([2 * L + idx[e]] if up[e] is not None else []) \
            + ([2 * L + nd + idx[d]] if up[d] is not None else [])
        fwd[(d, e)], bwd[(d, e)] = tuple(f), tuple(b)
    return {"res_fwd": fwd, "res_bwd": bwd, "res_cap": cap}


def pairs_of_link(D: Data) -> dict[int, list]:
    """link -> the ordered domain pairs whose route uses it."""
    out: dict[int, list] = {}
    for de, (links, _) in D.routes.items():
        for l in links:
            out.setdefault(l, []).append(de)
    return out


def arc_figures(D: Data) -> tuple[list, dict, dict]:
    """(arcs, solo, lat): the arcs (d, d) and every route (d, e); each arc's transfer
    time alone (intra bandwidth, or the route's narrowest link) and latency (model units)."""
    arcs = [(d, d) for d in D.domains] + list(D.routes)
    solo = {(d, d): D.A / D.intra_bw[d] for d in D.domains}
    lat = {(d, d): 0.0 for d in D.domains}
    for (d, e), (links, l_de) in D.routes.items():
        if D.spec >= 3:  # the narrowest resource of either channel
            solo[(d, e)] = max((D.A / D.res_cap[q] for q in D.res_fwd[(d, e)] + D.res_bwd[(d, e)]), default=0.0)
        else:
            solo[(d, e)] = max((D.A / D.link_bw[l] for l in links), default=0.0)
        lat[(d, e)] = l_de
    return arcs, solo, lat


def _admissible(instance, shape, D: Data, space, forbid, objective, stage_bounds, cutoff, cuts):
    """Admissible stage counts with their bounds on T (model units), after the cutoff.

    The bound of S is the largest of the caller's (``stage_bounds``) and
    :func:`planner.solvers.formulations.milp_bounds.stage_count_bounds`; a stage count
    whose bound (on T, or on the cost with the cheapest GPUs) exceeds the
    cutoff cannot hold a better plan and is dropped.  Returns (bounds, smallest
    objective bound of a dropped S or None)."""
    from .milp_bounds import cost_stage_bounds, stage_count_bounds

    ts = D.ts
    lb: dict[int, float] = {}
    D.cost_lb = {}
    if cuts and objective == "cost":
        D.cost_lb = cost_stage_bounds(instance, shape, space, forbid, D.Q, spec=D.spec)
    if cuts:
        lb = {S: v * ts for S, v in stage_count_bounds(instance, shape, space, forbid, D.Q, spec=D.spec).items()}
        if stage_bounds is not None:
            lb = {S: max(v, stage_bounds[S]) for S, v in lb.items() if S in stage_bounds}
    elif stage_bounds is not None:
        lb = {S: v for S, v in stage_bounds.items() if S <= D.Q}
    else:
        lb = {S: 0.0 for S in range(1, D.Q + 1)}
    if shape.stages:
        lb = {S: v for S, v in lb.items() if S == shape.stages}
    lb = {S: v for S, v in lb.items() if S <= D.Q}
    if cutoff is None or not lb:
        return lb, None
    t, R = shape.tp, shape.replicas
    pmin = min(D.price[d] for d in D.domains)

    def obj_lb(S, v):  # objective bound in the objective's own unit (s or currency)
        if objective == "cost":
            return max(v / ts * pmin * t * R * S / 3600.0, D.cost_lb.get(S, 0.0))
        return v / ts

    keep = {S: v for S, v in lb.items() if obj_lb(S, v) <= cutoff * (1 + 1e-9)}
    dropped = min((obj_lb(S, v) for S, v in lb.items() if S not in keep), default=None)
    return keep, dropped


def _pruned_model(M, D, objective, lb_obj, cost_scale):
    """A model with no plan better than the cutoff: T (or the cost) is bounded
    below by ``lb_obj`` > cutoff, which the caller's cutoff row contradicts."""
    D.pruned = True
    D.Q = 0
    M.T = pyo.Var(domain=pyo.NonNegativeReals)
    if objective == "cost":
        M.cost_scale = cost_scale if cost_scale is not None else time_scale(lb_obj)
        M.obj = pyo.Objective(expr=M.cost_scale * M.T, sense=pyo.minimize)
        M.pruned = pyo.Constraint(expr=M.T >= lb_obj)
    else:
        M.obj = pyo.Objective(expr=M.T, sense=pyo.minimize)
        M.pruned = pyo.Constraint(expr=M.T >= lb_obj * D.ts)
    return M


def _partition(M, D: Data, lbs: dict[int, float]):
    """Sets, stage count and the staircase partition (shared by both models).

    Adds the sets U, Qs, B, Dm, Pairs, Lk, the stage count ``sigma``, the
    staircase ``a``, the unit-on-slot ``y``, the stage figures ``Cs``, ``Ff``,
    ``Pv`` and the memory rows; returns (used, P, C, F, G): slot q is used
    (1 or an expression in sigma), and each slot's parameters, compute,
    forward and backward time (expressions)."""
    Q, N = D.Q, len(D.units)
    L = len(D.link_bw)
    S_min = min(lbs)
    # ---- sets ---------------------------------------------------------------
    M.U = pyo.RangeSet(0, N - 1)  # units
    M.Qs = pyo.RangeSet(0, Q - 1)  # slots, 0 = last stage
    M.B = pyo.RangeSet(0, Q - 2) if Q > 1 else pyo.Set(initialize=[])  # boundary q: slot q+1 -> q
    M.Dm = pyo.Set(initialize=D.domains, ordered=True)  # domains able to host a stage
    M.Pairs = pyo.Set(initialize=list(D.routes), dimen=2)  # ordered pairs of distinct domains
    M.Lk = pyo.RangeSet(0, L - 1) if L else pyo.Set(initialize=[])

    # ---- stage count and partition (staircase) -----------------------------------
    # sigma[S] = 1 for the chosen number of stages; slot q is used iff S > q
    admissible = sorted(lbs)
    M.Sset = pyo.Set(initialize=admissible)
    M.sigma = pyo.Var(M.Sset, domain=pyo.Binary)
    M.sigma_one = pyo.Constraint(expr=sum(M.sigma[S] for S in M.Sset) == 1)
    used = {q: (1.0 if q < S_min else sum(M.sigma[S] for S in admissible if S > q)) for q in range(Q)}
    # a[u,q] = 1 when unit u sits on slot >= q (q >= 1; a[u,0] = 1): a monotone staircase
    M.Qa = pyo.RangeSet(1, Q - 1) if Q > 1 else pyo.Set(initialize=[])
    M.a = pyo.Var(M.U, M.Qa, domain=pyo.Binary)
    A_ = lambda u, q: 1.0 if q <= 0 else (0.0 if q >= Q else M.a[u, q])
    M.stair = pyo.ConstraintList()
    for q in range(1, Q):
        M.stair.add(M.a[0, q] == used[q])  # the front unit is on the front slot S - 1
        M.a[N - 1, q].setub(0)  # the last unit is on slot 0 (bounds, not fixes: callers fix and unfix)
        for u in range(N - 1):
            M.stair.add(M.a[u, q] >= M.a[u + 1, q])  # earlier units on later-or-equal slots
            if q + 1 < Q:
                M.stair.add(M.a[u, q + 1] <= M.a[u + 1, q])  # consecutive slots
        if q + 1 < Q:
            for u in range(N):
                M.stair.add(M.a[u, q] >= M.a[u, q + 1])
    # y[u,q] = unit u on slot q (continuous, defined by the staircase)
    M.y = pyo.Var(M.U, M.Qs, bounds=(0, 1))
    M.y_def = pyo.Constraint(M.U, M.Qs, rule=lambda M, u, q: M.y[u, q] == A_(u, q) - A_(u, q + 1))
    # stage figures as variables, so that the many rows using them stay sparse:
    # Cs[q] = compute of slots <= q (the last q + 1 stages), Ff[q] = forward compute of
    # the slots before q, both read off the staircase; P[q] = parameters of slot q
    c_u = [D.f[u] + D.g[u] for u in range(N)]
    f_tot, c_tot = sum(D.f), sum(c_u)
    M.Cs = pyo.Var(M.Qs, bounds=(0, c_tot))
    M.Ff = pyo.Var(M.Qs, bounds=(0, f_tot))
    M.Pv = pyo.Var(M.Qs, bounds=(0, sum(D.p)))
    M.Cs_def = pyo.Constraint(M.Qs, rule=lambda M, q: M.Cs[q] == sum(c_u[u] * (1 - A_(u, q + 1)) for u in M.U))
    M.Ff_def = pyo.Constraint(M.Qs, rule=lambda M, q: M.Ff[q] == sum(D.f[u] * A_(u, q + 1) for u in M.U))
    M.Pv_def = pyo.Constraint(M.Qs, rule=lambda M, q: M.Pv[q] == sum(D.p[u] * M.y[u, q] for u in M.U))
    C = {q: M.Cs[q] - (M.Cs[q - 1] if q else 0.0) for q in M.Qs}
    F = {q: (M.Ff[q - 1] if q else f_tot) - M.Ff[q] for q in M.Qs}
    G = {q: C[q] - F[q] for q in M.Qs}
    P = {q: M.Pv[q] for q in M.Qs}
    # memory per stage: 16 P + w_q * b s stored <= usable memory * t
    M.memory = pyo.Constraint(M.Qs, rule=lambda M, q: sum((D.mem[u] + D.w[q] * D.act[u]) * M.y[u, q]
                                                          for u in M.U) <= D.mem_cap)

    return used, P, C, F, G


def build(instance, shape: Shape | None = None, objective: str | None = None,
          forbid=(), require=(), space: PlanSpace | None = None, ts: float | None = None,
          cost_scale: float | None = None, cost_cutoff: float | None = None,
          stage_bounds: dict[int, float] | None = None, cuts: bool = True,
          symmetry: str = "order", spec: int | None = None) -> pyo.ConcreteModel:
    """The MILP of ``instance`` for ``shape`` (default: the greedy plan's shape).

    ``objective`` is ``"time"`` (T_est) or ``"cost"`` (default: the
    instance's); ``forbid`` lists domains that may host nothing, ``require``
    domains that must host at least one stage; ``stage_bounds`` maps a
    number of stages S to a valid lower bound on T (model units) for plans
    with S stages (only the listed S are allowed).  ``cost_cutoff`` is the
    incumbent's objective (T_est in seconds for the time objective, the cost
    for the cost objective): stage counts whose bound exceeds it are left
    out, and when none is left the model is a stub whose objective is bounded
    below by more than the cutoff.  ``cuts=False`` leaves out the valid
    inequalities (bounds per stage count, crossing counts, ring bounds), for
    testing that they cut off no optimum.  ``symmetry``: ``"order"`` orders
    interchangeable replicas, ``"none"`` leaves the symmetry to the solver.
    ``spec``: the SPEC version modelled (default
    :data:`~planner.problem.specversion.DEFAULT_SPEC`).  Under 3: direct routes,
    full-duplex and uplink resources with n(q) = max(n_F, n_B) for gpipe-shaped
    schedules (gpipe, 1f1b with m = 1) else n_F + n_B, gradient hops per direction
    (no halving) with a lower relaxation of processor sharing (a stage's time on a
    resource is at least (its volume + (users - 1) * the smallest volume) /
    capacity: the model's T_est is a lower bound on the evaluator's, exact without
    shared ring resources), phi = 2 for ``reduce_broadcast``, the unit overhead,
    and the flush-based gpipe period (stage j's backward phase from downstream
    only).  The stage-count bounds of :mod:`.milp_bounds` are v2's and left out.
    GPU types (a mixed instance, SPEC v3 (g)): each (replica, slot) at its domain's
    type's figures and usable memory (:func:`_typed_compute`); one type: the model of
    before, row for row.
    """
    if shape is None or ts is None:
        from ...scoring.evaluator import Evaluator
        from ..greedy import greedy

        p = greedy(instance)
        shape = shape or Shape(p.tp, p.micro_batch_size, p.schedule_kind, 0, p.replicas)
        ts = ts or time_scale(float(Evaluator(instance, p).estimate_times()[0]))
    objective = objective or instance.options.objective
    space = space or PlanSpace(instance)
    D = shape_data(instance, shape, space, frozenset(forbid), ts, spec=spec)
    M = pyo.ConcreteModel(name=f"{instance.name}-t{shape.tp}-b{shape.micro_batch}-{shape.schedule}-R{shape.replicas}")
    M.data = D
    lbs, dropped = _admissible(instance, shape, D, space, frozenset(forbid), objective, stage_bounds,
                               cost_cutoff, cuts and D.spec < 3)
    if not lbs:
        if dropped is None:
            raise ShapeInfeasible("no stage count that fits the stage slots of the domains allowed holds the "
                                  "model in memory")
        return _pruned_model(M, D, objective, dropped, cost_scale)
    D.stage_lb = lbs
    Q = max(lbs)
    D.Q, D.w = Q, D.w[:Q]
    R, m, t = shape.replicas, D.m, shape.tp
    T_cap = _t_cap(D, R, Q, objective, cost_cutoff, lbs)

    # the model, one group of variables and constraints at a time (docs/formulations.md)
    used, P, C, F, G = _partition(M, D, lbs)  # sets, stage count, partition, memory
    M.Rr = pyo.RangeSet(0, R - 1)  # replicas
    stop.checkpoint()  # a large shape builds for seconds: stop here when out of time
    _placement(M, D, R, Q, used, require, symmetry)
    stop.checkpoint()
    arcs, solo, lat = _pipeline_transfers(M, D)
    X_cap = T_cap / (m + 1)  # T >= (m-1) tau + Q_0 >= (m+1) X
    if D.spec >= 3:
        _boundary_sharing_v3(M, D, R, Q, X_cap)
    _link_sharing(M, D, R, Q, X_cap)
    if cuts and Q > 1:
        _crossing_cuts(M, D, Q)
    stop.checkpoint()
    _sync(M, D, R, Q, P, t, cuts)
    stop.checkpoint()
    _estimate(M, D, R, Q, m, C, F, G)
    stop.checkpoint()
    _stage_cuts(M, lbs)
    stop.checkpoint()
    _objective(M, D, objective, R, Q, P, t, cost_scale, cost_cutoff, used)
    return M


def _t_cap(D: Data, R: int, Q: int, objective: str, cost_cutoff: float | None, lbs: dict[int, float]) -> float:
    """The largest T (model units) of a plan worth finding; the big-M values derive from it.

    T_cap = min(t_upper_bound, cutoff * ts) for the time objective, and
    min(t_upper_bound, cutoff * 3600 ts / (p_min t R S_min)) for the cost (a plan with T
    above it costs more than the cutoff even on the cheapest GPUs)."""
    t, ts = D.shape.tp, D.ts
    S_min = min(lbs)
    T_cap = t_upper_bound(D, R, Q)
    if cost_cutoff is not None and objective == "time":
        T_cap = min(T_cap, cost_cutoff * ts * (1 + 1e-9))
    pmin = min(D.price[d] for d in D.domains)
    if cost_cutoff is not None and objective == "cost" and pmin > 0:
        T_cap = min(T_cap, cost_cutoff * 3600.0 * ts / (pmin * t * R * S_min) * (1 + 1e-9))
    return T_cap


def _placement(M, D: Data, R: int, Q: int, used: dict, require, symmetry: str) -> None:
    """Placement: z[r, q, d] = 1 when replica r's slot q is in domain d.

    sum_d z[r, q, d] = used_q (every used slot of every replica somewhere) and
    sum_{r, q} z[r, q, d] <= cap_d (stage slots per domain); replicas ordered
    (``symmetry="order"``), each ``require``d domain hosts a stage."""
    doms = D.domains
    M.z = pyo.Var(M.Rr, M.Qs, M.Dm, domain=pyo.Binary)
    M.place = pyo.Constraint(M.Rr, M.Qs, rule=lambda M, r, q: sum(M.z[r, q, d] for d in M.Dm) == used[q])
    M.capacity = pyo.Constraint(M.Dm, rule=lambda M, d: sum(M.z[r, q, d] for r in M.Rr for q in M.Qs)
                                <= D.cap[d])
    idx = {d: i for i, d in enumerate(doms)}
    if symmetry == "order" and R > 1:
        # replicas are interchangeable: order them by the domain of their first stage, then
        # (ties) by the sum of their other stages' domains, so symmetric copies are not
        # explored twice
        code = {r: sum(idx[d] * M.z[r, Q - 1, d] for d in M.Dm) * len(doms) * (Q + 1)
                + sum(sum(idx[d] * M.z[r, q, d] for d in M.Dm) for q in M.Qs) for r in M.Rr}
        M.symmetry = pyo.Constraint(pyo.RangeSet(0, R - 2), rule=lambda M, r: code[r] <= code[r + 1])
    for d in require:
        if d in idx:
            setattr(M, f"require_{idx[d]}", pyo.Constraint(
                expr=sum(M.z[r, q, d] for r in M.Rr for q in M.Qs) >= 1))
    if D.typed:  # GPU types: each (replica, slot) at its domain's type's figures and memory
        _typed_compute(M, D, R, Q)


def _pipeline_transfers(M, D: Data) -> tuple[list, dict, dict]:
    """Pipeline transfers: arc[r, q, d, e] = replica r's boundary q goes from d (slot q+1)
    to e (slot q); X[r, q] >= sum_arcs solo * arc (its transfer alone) and
    Lat[r, q] >= sum_routes lat * arc.  Returns (arcs, solo, lat) of :func:`arc_figures`.

    The arcs form a transportation polytope between the two slots' placements, so every
    cost below is an exact linear function of the arcs when z is integral."""
    doms = D.domains
    arcs, solo, lat = arc_figures(D)
    M.Arcs = pyo.Set(initialize=arcs, dimen=2)
    M.arc = pyo.Var(M.Rr, M.B, M.Arcs, bounds=(0, 1))
    out_of = {d: [(d2, e) for (d2, e) in arcs if d2 == d] for d in doms}
    into = {e: [(d, e2) for (d, e2) in arcs if e2 == e] for e in doms}
    M.arc_out = pyo.Constraint(M.Rr, M.B, M.Dm, rule=lambda M, r, q, d:
                               sum(M.arc[r, q, a, b] for a, b in out_of[d]) == M.z[r, q + 1, d])
    M.arc_in = pyo.Constraint(M.Rr, M.B, M.Dm, rule=lambda M, r, q, e:
                              sum(M.arc[r, q, a, b] for a, b in into[e]) <= M.z[r, q, e])
    M.X = pyo.Var(M.Rr, M.B, domain=pyo.NonNegativeReals)  # transfer time
    M.Lat = pyo.Var(M.Rr, M.B, domain=pyo.NonNegativeReals)  # route latency
    M.lat_def = pyo.Constraint(M.Rr, M.B, rule=lambda M, r, q:
                               M.Lat[r, q] >= sum(lat[de] * M.arc[r, q, de[0], de[1]] for de in D.routes)
                               if D.routes else pyo.Constraint.Skip)
    # a boundary's transfer is at least its intra-domain time or its route's narrowest link alone
    M.x_solo = pyo.Constraint(M.Rr, M.B, rule=lambda M, r, q:
                              M.X[r, q] >= sum(solo[de] * M.arc[r, q, de[0], de[1]] for de in arcs))
    return arcs, solo, lat


def _link_sharing(M, D: Data, R: int, Q: int, X_cap: float) -> None:
    """Link sharing (SPEC v2): users_l = the boundaries whose route crosses link l, and a
    crossing boundary's X[r, q] >= A * users_l / bw_l (big-M on v[r, q, l]).

    Under v3 the sets are declared empty (:func:`_boundary_sharing_v3` shares the
    resources instead); ``X_cap`` bounds X, hence the users a link can have."""
    link_pairs = pairs_of_link(D) if D.spec < 3 else {}
    users_max = {}
    for l in link_pairs:
        users_max[l] = min(R * max(Q - 1, 0), math.floor(X_cap * D.link_bw[l] / D.A * (1 + 1e-9))
                           if D.A > 0 else R * Q)
    M.Lu = pyo.Set(initialize=sorted(link_pairs))
    M.v = pyo.Var(M.Rr, M.B, M.Lu, bounds=(0, 1))  # replica r's boundary q crosses link l
    M.v_def = pyo.Constraint(M.Rr, M.B, M.Lu, rule=lambda M, r, q, l:
                             M.v[r, q, l] == sum(M.arc[r, q, d, e] for d, e in link_pairs[l]))
    M.users = pyo.Var(M.Lu, domain=pyo.NonNegativeReals)
    M.users_def = pyo.Constraint(M.Lu, rule=lambda M, l: M.users[l] == sum(M.v[r, q, l] for r in M.Rr for q in M.B))
    M.share = pyo.ConstraintList()
    for l in sorted(link_pairs):
        if users_max[l] < 1:  # a single flow on l is already too slow to beat the cutoff
            for r in range(R):
                for q in range(Q - 1):
                    M.v[r, q, l].setub(0)
            continue
        M.users[l].setub(users_max[l])
        if users_max[l] == 1:
            continue  # x_solo covers a lone flow
        k = D.A / D.link_bw[l]
        for r in range(R):
            for q in range(Q - 1):
                M.share.add(M.X[r, q] >= k * M.users[l] - k * users_max[l] * (1 - M.v[r, q, l]))


def _crossing_cuts(M, D: Data, Q: int) -> None:
    """Crossing cuts (valid inequalities): each replica crosses at least (domains it uses - 1)
    boundaries, sum_{q, d != e} arc[r, q, d, e] >= sum_d o_r[r, d] - 1 with o_r[r, d] >= z[r, q, d]."""
    M.o_r = pyo.Var(M.Rr, M.Dm, bounds=(0, 1))
    M.o_r_lb = pyo.Constraint(M.Rr, M.Qs, M.Dm, rule=lambda M, r, q, d: M.o_r[r, d] >= M.z[r, q, d])
    M.o_r_cap = pyo.Constraint(M.Rr, M.Dm, rule=lambda M, r, d: sum(M.z[r, q, d] for q in M.Qs)
                               <= min(D.cap[d], Q) * M.o_r[r, d])
    M.crossings = pyo.Constraint(M.Rr, rule=lambda M, r: sum(
        M.arc[r, q, d, e] for q in M.B for (d, e) in D.routes) >= sum(M.o_r[r, d] for d in M.Dm) - 1)


def _sync(M, D: Data, R: int, Q: int, P: dict, t: int, cuts: bool) -> None:
    """Gradient synchronisation per slot: AR[q] = intra ring + cross-domain ring of slot q
    over the replicas' domains (:func:`_gradient_sync`, SPEC 5); AR = 0 with one replica."""
    M.AR = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
    if R > 1:
        _gradient_sync(M, D, R, Q, P, t, cuts and D.spec < 3,
                       count=lambda q, d: sum(M.z[r, q, d] for r in M.Rr),
                       members=lambda q, d: [M.z[r, q, d] for r in M.Rr])
    else:
        for q in range(Q):
            M.AR[q].setub(0.0)


def _estimate(M, D: Data, R: int, Q: int, m: int, C: dict, F: dict, G: dict) -> None:
    """T_est per replica (SPEC 7): for every replica r and slot q,
    T >= (m - 1) tau_r + Ff_q + Kc[r, Q-1] - Kc[r, q] + (Cs_q + 2 Kc[r, q]) + AR_q,
    with tau_r the replica's period (:func:`_gpipe_period`, :func:`_1f1b_period`)."""
    gpipe = D.shape.schedule == "gpipe"
    M.tau = pyo.Var(M.Rr, domain=pyo.NonNegativeReals)
    M.T = pyo.Var(domain=pyo.NonNegativeReals)
    M.est = pyo.ConstraintList()
    # Kc[r,q] = sum over boundaries i < q of (X + Lat): replica r's one-way communication
    # from slot q to the end (Kc[r,0] = 0)
    M.Kc = pyo.Var(M.Rr, M.Qs, domain=pyo.NonNegativeReals)
    for r in range(R):
        M.Kc[r, 0].setub(0.0)
        for q in range(Q - 1):
            M.est.add(M.Kc[r, q + 1] == M.Kc[r, q] + M.X[r, q] + M.Lat[r, q])
    fig = _stage_figures(M, D, Q, C, F, G)
    Cs, Ff = fig["Cs"], fig["Ff"]
    for r in range(R):
        # round trip from slot q: compute of slots <= q, both ways over boundaries < q
        Qrt = {q: Cs(r, q) + 2 * M.Kc[r, q] for q in range(Q)}
        if gpipe:
            _gpipe_period(M, D, r, Q, G, fig)
        else:
            _1f1b_period(M, D, r, Q, m, fig)
        # T >= T_r - D_j + AR_j, written with positive terms only: (m-1) tau + forward
        # compute before slot q + communication from q on (one way) + round trip from q + AR_q
        for q in range(Q):
            tau_q = M.tau[r]
            if D.spec >= 3 and gpipe:
                tau_q = M.component(f"alpha_{r}") + M.component(f"beta_q_{r}")[q]
            M.est.add(M.T >= (m - 1) * tau_q + Ff(r, q) + (M.Kc[r, Q - 1] - M.Kc[r, q]) + Qrt[q] + M.AR[q])


def _stage_figures(M, D: Data, Q: int, C: dict, F: dict, G: dict) -> dict:
    """Each replica's stage figures as functions of (r, q): Cs (compute of slots <= q), Ff
    (forward compute of the slots before q) and, with GPU types, Fq, Gq (slot q's forward and
    backward time at its domain's type, :func:`_typed_compute`).  One type: the shared
    figures of :func:`_partition`, and their maxima Fmax >= F_q, Gmax >= G_q (gpipe) or
    Cmax >= C_q (1f1b)."""
    if D.typed:
        # replica r's own figures (_typed_compute): Fr, Gr per slot, Csr (slots <= q), Ffr (slots > q)
        return {"Fq": lambda r, q: M.Fr[r, q], "Gq": lambda r, q: M.Gr[r, q],
                "Cs": lambda r, q: M.Csr[r, q], "Ff": lambda r, q: M.Ffr[r, q]}
    slowest_stage(M, D, Q, C, F, G)
    return {"Fq": None, "Gq": None, "Cs": lambda r, q: M.Cs[q], "Ff": lambda r, q: M.Ff[q]}


def slowest_stage(M, D: Data, Q: int, C: dict, F: dict, G: dict) -> None:
    """The slowest stage's figures (rows in ``M.est``): Fmax >= F_q and Gmax >= G_q (gpipe),
    or Cmax >= C_q (1f1b), over the Q slots (one GPU type; ``milp_agg`` too)."""
    if D.shape.schedule == "gpipe":
        M.Fmax = pyo.Var(domain=pyo.NonNegativeReals)
        M.Gmax = pyo.Var(domain=pyo.NonNegativeReals)
        for q in range(Q):
            M.est.add(M.Fmax >= F[q])
            M.est.add(M.Gmax >= G[q])
    else:
        M.Cmax = pyo.Var(domain=pyo.NonNegativeReals)
        for q in range(Q):
            M.est.add(M.Cmax >= C[q])


def _gpipe_period(M, D: Data, r: int, Q: int, G: dict, fig: dict) -> None:
    """gpipe period of replica r: tau_r = alpha_r + beta_r with alpha_r >= max(F_q, X_q)
    and beta_r >= max(G_q, X_q); under SPEC v3 (e) slot q's backward phase beta_q_r[q]
    >= G_q', X_q'' over the slots q' <= q downstream and the boundaries q'' < q between."""
    Fq, Gq = fig["Fq"], fig["Gq"]
    alpha = pyo.Var(domain=pyo.NonNegativeReals)
    beta = pyo.Var(domain=pyo.NonNegativeReals)
    M.add_component(f"alpha_{r}", alpha)
    M.add_component(f"beta_{r}", beta)
    if D.typed:
        for q in range(Q):
            M.est.add(alpha >= Fq(r, q))
            M.est.add(beta >= Gq(r, q))
    else:
        M.est.add(alpha >= M.Fmax)
        M.est.add(beta >= M.Gmax)
    for q in range(Q - 1):
        M.est.add(alpha >= M.X[r, q])
        M.est.add(beta >= M.X[r, q])
    M.est.add(M.tau[r] == alpha + beta)
    if D.spec >= 3:
        # SPEC v3 (e): a gpipe flush's backward phase at slot q is set by the slots
        # downstream of it (q' <= q) and the boundaries between them (q' < q)
        bq = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
        M.add_component(f"beta_q_{r}", bq)
        for q in range(Q):
            for q2 in range(q + 1):
                M.est.add(bq[q] >= (Gq(r, q2) if D.typed else G[q2]))
            for q2 in range(q):
                M.est.add(bq[q] >= M.X[r, q2])
            M.est.add(beta >= bq[q])


def _1f1b_period(M, D: Data, r: int, Q: int, m: int, fig: dict) -> None:
    """1f1b period of replica r: tau_r >= c_q (every stage), tau_r >= X_q (every boundary)
    and Little's law on the windows [lo, hi] whose front slot holds fewer than m
    micro-batches: tau_r (w_hi - w_lo + 1) >= compute of lo..hi + 2 (Kc_hi - Kc_lo)."""
    Fq, Gq, Cs = fig["Fq"], fig["Gq"], fig["Cs"]
    if D.typed:
        for q in range(Q):
            M.est.add(M.tau[r] >= Fq(r, q) + Gq(r, q))
    else:
        M.est.add(M.tau[r] >= M.Cmax)
    # Little's law on every window of slots [lo, hi] (stages S-1-hi .. S-1-lo) whose
    # front slot holds fewer than m micro-batches (SPEC 7 v2): it then holds
    # w_hi - w_lo + 1 = hi - lo + 1 of them while one goes from hi to lo and back.
    # Slot indexing makes w_q = min(m, q + 1) independent of S, so each row is linear;
    # a window reaching into unused front slots is the window from the front stage
    # with a larger divisor, hence weaker: the rows are exactly v2's
    for hi in range(Q):
        if D.w[hi] >= m:
            continue  # the front slot holds every micro-batch: never binds (dropped)
        for lo in range(hi + 1):
            compute = Cs(r, hi) - (Cs(r, lo - 1) if lo else 0.0)
            M.est.add(M.tau[r] * (D.w[hi] - D.w[lo] + 1)
                      >= compute + 2 * (M.Kc[r, hi] - M.Kc[r, lo]))
    for q in range(Q - 1):
        M.est.add(M.tau[r] >= M.X[r, q])


def _stage_cuts(M, lbs: dict[int, float]) -> None:
    """Valid lower bounds per number of stages (cuts): T >= sum_S lb_S sigma_S, and
    T >= min_S lb_S as a bound (shared by both models)."""
    if any(v > 0 for v in lbs.values()):
        M.stage_cut = pyo.Constraint(expr=M.T >= sum(lbs[S] * M.sigma[S] for S in M.Sset))
        # also as a bound on T: the solver reports it even when stopped before its root LP
        M.T.setlb(min(lbs.values()))


def _objective(M, D: Data, objective: str, R: int, Q: int, P: dict, t: int,
               cost_scale: float | None, cost_cutoff: float | None, used: dict) -> None:
    """Objective: minimise T (time) or the cost per iteration (:func:`_cost_objective`)."""
    if objective == "cost":
        _cost_objective(M, D, R, Q, P, t, cost_scale, cost_cutoff, used)
    else:
        M.obj = pyo.Objective(expr=M.T, sense=pyo.minimize)


def _typed_compute(M, D, R, Q):
    """GPU types (SPEC v3 (g)): replica r's slot q runs at the figures of its domain's type.

    With ``k(r, q)`` the type of the domain z places it in and ``F_k[q] = sum_u f^k_u y[u, q]``
    (likewise G), ``Fr[r, q] >= F_k[q] - F^k_tot (1 - zt[r, q, k])`` for every type k, zt the
    sum of z over k's domains: exactly ``F_{k(r,q)}[q]`` at an optimum, since T_est only
    grows with every f and g and the model bounds T from below by them.  ``Csr[r, q]`` is
    replica r's compute of slots <= q, ``Ffr[r, q]`` its forward time of the slots > q (in
    front of q).  Memory: slot q of replica r holds its units' weights and activations within
    its domain's type's usable memory, ``sum_u (mem_u + w_q act_u) y[u, q] <= sum_d cap_d
    z[r, q, d]`` (exact: one z is 1 on a used slot, and an unused slot holds nothing)."""
    kinds = sorted(D.ft)
    N = len(D.units)
    of = {k: [d for d in D.domains if D.dtype[d] == k] for k in kinds}
    ftot = {k: sum(D.ft[k]) for k in kinds}
    gtot = {k: sum(D.gt[k]) for k in kinds}
    M.Fr = pyo.Var(M.Rr, M.Qs, bounds=(0, max(ftot.values())))
    M.Gr = pyo.Var(M.Rr, M.Qs, bounds=(0, max(gtot.values())))
    M.typed = pyo.ConstraintList()
    for k in kinds:
        Fk = [sum(D.ft[k][u] * M.y[u, q] for u in range(N)) for q in range(Q)]
        Gk = [sum(D.gt[k][u] * M.y[u, q] for u in range(N)) for q in range(Q)]
        for r in range(R):
            for q in range(Q):
                zt = sum(M.z[r, q, d] for d in of[k])
                M.typed.add(M.Fr[r, q] >= Fk[q] - ftot[k] * (1 - zt))
                M.typed.add(M.Gr[r, q] >= Gk[q] - gtot[k] * (1 - zt))
    M.Csr = pyo.Var(M.Rr, M.Qs, domain=pyo.NonNegativeReals)
    M.Ffr = pyo.Var(M.Rr, M.Qs, domain=pyo.NonNegativeReals)
    for r in range(R):
        for q in range(Q):
            M.typed.add(M.Csr[r, q] == (M.Csr[r, q - 1] if q else 0.0) + M.Fr[r, q] + M.Gr[r, q])
            M.typed.add(M.Ffr[r, q] == (M.Ffr[r, q + 1] + M.Fr[r, q + 1] if q + 1 < Q else 0.0))
    if len({D.mem_cap_d[d] for d in D.domains}) > 1:
        M.typed_memory = pyo.Constraint(M.Rr, M.Qs, rule=lambda M, r, q: sum(
            (D.mem[u] + D.w[q] * D.act[u]) * M.y[u, q] for u in M.U)
            <= sum(D.mem_cap_d[d] * M.z[r, q, d] for d in M.Dm))


def _gradient_sync(M, D, R, Q, P, t, cuts=True, count=None, members=None):
    """AR_q = intra ring + cross-domain ring (SPEC 5), exactly, via one-hot counts.

    ``count(q, d)`` is the number of replicas of slot q in domain d (an
    expression); ``members(q, d)`` the per-replica binaries summing to it, or
    None (aggregated counts: the domain indicator ``o`` is then binary)."""
    from .milp_bounds import ring_lower_figures

    doms = D.domains
    order = D.order
    p_max = min(sum(D.p), D.mem_cap / 16.0)  # parameters of one stage fit its memory
    # o[q,d]: slot q has a replica in d (exact: between the max and the sum of z)
    M.o = pyo.Var(M.Qs, M.Dm, bounds=(0, 1), domain=pyo.Reals if members else pyo.Binary)
    if members is not None:
        M.o_lb = pyo.ConstraintList()
        for q in range(Q):
            for d in doms:
                for zv in members(q, d):
                    M.o_lb.add(M.o[q, d] >= zv)
    M.o_ub = pyo.Constraint(M.Qs, M.Dm, rule=lambda M, q, d: M.o[q, d] <= count(q, d))
    M.o_cnt = pyo.Constraint(M.Qs, M.Dm, rule=lambda M, q, d: count(q, d) <= min(R, D.cap[d]) * M.o[q, d])
    # nu[q,d,n]: exactly n replicas of slot q in d (one-hot)
    nmax = {d: min(R, D.cap[d]) for d in doms}
    M.NuIdx = pyo.Set(initialize=[(q, d, n) for q in range(Q) for d in doms for n in range(nmax[d] + 1)],
                      dimen=3)
    M.nu = pyo.Var(M.NuIdx, domain=pyo.Binary)
    M.nu_one = pyo.Constraint(M.Qs, M.Dm, rule=lambda M, q, d: sum(M.nu[q, d, n] for n in range(nmax[d] + 1)) == 1)
    M.nu_count = pyo.Constraint(M.Qs, M.Dm, rule=lambda M, q, d: sum(n * M.nu[q, d, n] for n in range(nmax[d] + 1))
                                == count(q, d))
    M.intra = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
    M.intra_c = pyo.ConstraintList()
    for q in range(Q):
        for d in doms:
            for n in range(2, nmax[d] + 1):
                k = phi(D, n) * 2 / t / D.intra_bw[d]
                M.intra_c.add(M.intra[q] >= k * P[q] - k * p_max * (1 - M.nu[q, d, n]))
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
        if D.spec >= 3:
            _ring_v3(M, D, Q, P, Kmax, p_max)
            M.ar_def = pyo.Constraint(M.Qs, rule=lambda M, q: M.AR[q] == M.intra[q] + M.cross[q])
            return
        link_pairs = pairs_of_link(D)
        M.Lr = pyo.Set(initialize=sorted(link_pairs))
        M.ring_users = pyo.Var(M.Lr, domain=pyo.NonNegativeReals)
        M.ring_users_def = pyo.Constraint(M.Lr, rule=lambda M, l: M.ring_users[l] == sum(
            M.h[q, a, b] for q in range(Q) for (a, b) in link_pairs[l]))
        M.mu = pyo.Var(M.Qs, M.Lr, bounds=(0, 1))  # slot q's ring crosses link l
        M.psi = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)  # 1 / ring bandwidth
        M.lam = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)  # ring latency
        M.ring = pyo.ConstraintList()
        # a ring has K <= Kmax hops, each a distinct pair: it uses link l at most
        # min(pairs through l, Kmax) times
        umax = {l: Q * min(len(pl), Kmax) for l, pl in link_pairs.items()}
        psi_max = max((umax[l] / D.link_bw[l] for l in link_pairs), default=0.0)
        for l in link_pairs:
            M.ring_users[l].setub(umax[l])
        for q in range(Q):
            for (a, b), (links, lat) in D.routes.items():
                for l in links:
                    M.ring.add(M.mu[q, l] >= M.h[q, a, b])
                M.ring.add(M.lam[q] >= lat * M.h[q, a, b])
            for l in link_pairs:
                M.ring.add(M.psi[q] >= M.ring_users[l] / D.link_bw[l] - umax[l] / D.link_bw[l] * (1 - M.mu[q, l]))
        # pi[u,q] = psi_q * y[u,q] (binary x bounded continuous, from below)
        M.pi = pyo.Var(M.U, M.Qs, domain=pyo.NonNegativeReals)
        for q in range(Q):
            for u in range(len(D.units)):
                M.ring.add(M.pi[u, q] >= M.psi[q] - psi_max * (1 - M.y[u, q]))
        lat_max = max((lat for _, lat in D.routes.values()), default=0.0)
        for q in range(Q):
            vol = 2 * sum(D.p[u] * M.pi[u, q] for u in range(len(D.units)))  # G_q / ring bandwidth
            for k in range(2, Kmax + 1):
                big = 2 * (k - 1) / k * 2 * p_max * psi_max + 2 * (k - 1) * lat_max
                M.ring.add(M.cross[q] >= 2 * (k - 1) / k * vol + 2 * (k - 1) * M.lam[q]
                           - big * (1 - M.kappa[q, k]))
        if cuts:
            # the ring of k domains is no faster than the fastest ring any k domains allow
            # (linear in P_q: visible to the LP as soon as kappa is)
            fig = ring_lower_figures(D)
            M.Pk = pyo.Var(M.Qs, M.Kk, bounds=(0, p_max))  # P_q * kappa[q,k], disaggregated
            M.Pk_sum = pyo.Constraint(M.Qs, rule=lambda M, q: sum(M.Pk[q, k] for k in M.Kk) == P[q])
            M.Pk_ub = pyo.Constraint(M.Qs, M.Kk, rule=lambda M, q, k: M.Pk[q, k] <= p_max * M.kappa[q, k])
            M.cross_lb = pyo.Constraint(M.Qs, rule=lambda M, q: M.cross[q] >= sum(
                2 * (k - 1) / k * 2 * fig[k][0] * M.Pk[q, k] + 2 * (k - 1) * fig[k][1] * M.kappa[q, k]
                for k in range(2, Kmax + 1)))
    M.ar_def = pyo.Constraint(M.Qs, rule=lambda M, q: M.AR[q] == M.intra[q] + M.cross[q])


def _boundary_sharing_v3(M, D, R, Q, X_cap):
    """SPEC v3 boundary sharing: n_F(q) and n_B(q) count the forward and backward
    channels using resource q; n(q) = max of them for a gpipe-shaped schedule, else
    their sum; every channel of a boundary using q takes at least A * n(q) / cap(q)."""
    use: dict = {}  # resource -> arcs whose forward (F) / backward (B) channel uses it
    for de in D.routes:
        for q in D.res_fwd[de]:
            use.setdefault(q, ([], []))[0].append(de)
        for q in D.res_bwd[de]:
            use.setdefault(q, ([], []))[1].append(de)
    M.Rv3 = pyo.Set(initialize=sorted(use))
    M.nF = pyo.Var(M.Rv3, domain=pyo.NonNegativeReals)
    M.nB = pyo.Var(M.Rv3, domain=pyo.NonNegativeReals)
    M.nq = pyo.Var(M.Rv3, domain=pyo.NonNegativeReals)
    M.share3 = pyo.ConstraintList()
    for q, (fw, bw) in sorted(use.items()):
        M.share3.add(M.nF[q] == sum(M.arc[r, b, d, e] for r in M.Rr for b in M.B for d, e in fw))
        M.share3.add(M.nB[q] == sum(M.arc[r, b, d, e] for r in M.Rr for b in M.B for d, e in bw))
        if D.gpipe_shaped:
            M.share3.add(M.nq[q] >= M.nF[q])
            M.share3.add(M.nq[q] >= M.nB[q])
        else:
            M.share3.add(M.nq[q] == M.nF[q] + M.nB[q])
        cap = D.res_cap[q]
        # a boundary adds at most 1 to n(q) (its channels use q in one direction only)
        nmax = min(R * max(Q - 1, 0), math.floor(X_cap * cap / D.A * (1 + 1e-9)) if D.A > 0 else R * Q)
        arcs = fw + bw
        for r in range(R):
            for b in range(Q - 1):
                on = sum(M.arc[r, b, d, e] for d, e in arcs)
                if nmax < 1:  # one channel on q alone is too slow to beat the cutoff
                    M.share3.add(on <= 0)
                elif nmax > 1:
                    k = D.A / cap
                    M.share3.add(M.X[r, b] >= k * M.nq[q] - k * nmax * (1 - on))
        M.nq[q].setub(max(nmax, 0))


def _ring_v3(M, D, Q, P, Kmax, p_max):
    """SPEC v3 cross part: hop a -> b (when ``h[q, a, b]``) uses the resources of
    route(a, b) in its direction; every (slot, hop) is a user.  Stage q's time on a
    resource it uses is at least (V_q + (users - 1) * v_min) / cap, a lower bound on
    processor sharing's sum_u min(V_u, V_q) / cap (exact when the users' volumes
    are equal to v_min, or alone); V_q = phi(K) G_q, linear through P_q * kappa[q, k]."""
    users: dict = {}
    for (a, b) in D.routes:
        for res in D.res_fwd[(a, b)]:
            users.setdefault(res, []).append((a, b))
    M.Rr3 = pyo.Set(initialize=sorted(users))
    M.ring_users = pyo.Var(M.Rr3, domain=pyo.NonNegativeReals)
    M.ring_users_def = pyo.Constraint(M.Rr3, rule=lambda M, res: M.ring_users[res] == sum(
        M.h[q, a, b] for q in range(Q) for (a, b) in users[res]))
    umax = {res: Q * min(len(pl), Kmax) for res, pl in users.items()}
    for res in users:
        M.ring_users[res].setub(umax[res])
    M.mu = pyo.Var(M.Qs, M.Rr3, bounds=(0, 1))  # slot q's ring uses resource res
    M.lam = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)  # ring latency
    M.bwt = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)  # phi G / ring bandwidth (bytes part)
    M.Pk = pyo.Var(M.Qs, M.Kk, bounds=(0, p_max))  # P_q * kappa[q, k], disaggregated
    M.Pk_sum = pyo.Constraint(M.Qs, rule=lambda M, q: sum(M.Pk[q, k] for k in M.Kk) == P[q])
    M.Pk_ub = pyo.Constraint(M.Qs, M.Kk, rule=lambda M, q, k: M.Pk[q, k] <= p_max * M.kappa[q, k])
    M.ring = pyo.ConstraintList()
    v_max = 2.0 * 2 * p_max
    for q in range(Q):
        vol = sum(phi(D, k) * 2 * M.Pk[q, k] for k in range(2, Kmax + 1))  # V_q (GB), 0 unless K >= 2
        for (a, b), (links, lat) in D.routes.items():
            for res in D.res_fwd[(a, b)]:
                M.ring.add(M.mu[q, res] >= M.h[q, a, b])
            M.ring.add(M.lam[q] >= lat * M.h[q, a, b])
        for res in users:
            cap = D.res_cap[res]
            big = (v_max + umax[res] * D.v_min) / cap
            M.ring.add(M.bwt[q] >= (vol + (M.ring_users[res] - 1) * D.v_min) / cap - big * (1 - M.mu[q, res]))
    lat_max = max((lat for _, lat in D.routes.values()), default=0.0)
    # a stage without gradients pays no sync at all (SPEC v3): where a unit has no
    # parameters the latency term is left out (a relaxation: the bound stays valid)
    with_lat = 1.0 if D.v_min > 0 else 0.0
    for q in range(Q):
        for k in range(2, Kmax + 1):
            big = 2 * (k - 1) * lat_max * with_lat
            M.ring.add(M.cross[q] >= M.bwt[q] + with_lat * 2 * (k - 1) * M.lam[q] - big * (1 - M.kappa[q, k]))


def t_upper_bound(D, R, Q) -> float:
    """A valid upper bound on T_est (model units) of every plan of the shape."""
    m = D.m
    ctot = sum(D.f) + sum(D.g)
    bw_min = min(D.link_bw) if D.link_bw else math.inf
    if D.spec >= 3 and D.res_cap:
        bw_min = min(bw_min, min(D.res_cap.values()))
    x_max = max(D.A * R * max(Q - 1, 1) / bw_min, D.A / min(D.intra_bw.values()))
    lat_max = max((lat for _, lat in D.routes.values()), default=0.0)
    q_max = ctot + 2 * max(Q - 1, 0) * (x_max + lat_max)
    tau = 2 * max(ctot, x_max) if D.shape.schedule == "gpipe" else max(ctot, x_max, q_max)
    G = 2 * sum(D.p)
    ar = 2 * G / D.shape.tp / min(D.intra_bw.values()) + 2 * G * Q * len(D.domains) / bw_min \
        + 2 * len(D.domains) * lat_max if R > 1 else 0.0
    return (m - 1) * tau + 2 * q_max + ar


def _cost_objective(M, D, R, Q, P, t, cost_scale=None, cost_cutoff=None, used=None):
    """Cost per iteration with T_est for T: T/3600 * price of used GPUs + WAN GB * price.

    T x z is linearised from below with big-M = an upper bound on T: the
    structural bound of :func:`t_upper_bound`, tightened when a cutoff
    (incumbent cost) and positive prices cap T for any better plan."""
    Tmax = t_upper_bound(D, R, Q)
    pmin = min(D.price[d] for d in D.domains)
    S_min = min(D.stage_lb) if D.stage_lb else 1
    if cost_cutoff is not None and pmin > 0:
        Tmax = min(Tmax, cost_cutoff * 3600.0 * D.ts / (pmin * t * R * S_min))
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
        wan = 2 * D.A * D.m * sum(M.arc[r, q, d, e] for r in M.Rr for q in M.B for (d, e) in D.routes)
        if R > 1 and hasattr(M, "kappa"):
            M.ringbytes = pyo.Var(M.Qs, domain=pyo.NonNegativeReals)
            M.ringbytes_c = pyo.ConstraintList()
            p_max = min(sum(D.p), D.mem_cap / 16.0)
            for q in range(Q):
                for k in range(2, len(M.Kk)):
                    M.ringbytes_c.add(M.ringbytes[q] >= 2 * (k - 1) * 2 * P[q]
                                      - 2 * (k - 1) * 2 * p_max * (1 - M.kappa[q, k]))
            wan = wan + sum(M.ringbytes[q] for q in M.Qs)
        wan = wan * D.wan_price
    M.obj = pyo.Objective(expr=cost_scale * (gpu_cost + wan), sense=pyo.minimize)
    if D.cost_lb and hasattr(M, "sigma"):  # the cost bound of the chosen stage count
        M.cost_cut = pyo.Constraint(expr=gpu_cost + wan >= sum(
            D.cost_lb.get(S, 0.0) * M.sigma[S] for S in M.Sset))


def read_partition(M) -> tuple[list[tuple[int, int]], list[int]]:
    """(cuts, used slots) of the model's current solution, stages front to back."""
    D = M.data
    slot_of = [max(range(D.Q), key=lambda q: pyo.value(M.y[u, q])) for u in D.units]
    used = sorted(set(slot_of), reverse=True)  # front (highest slot) first
    cuts, start = [], 0
    for q in used:
        n = sum(1 for s in slot_of if s == q)
        cuts.append((start, start + n))
        start += n
    return cuts, used


def extract(M):
    """(cuts, placement) of the model's current solution, stages front to back."""
    D = M.data
    cuts, used = read_partition(M)
    placement = [[max(D.domains, key=lambda d: pyo.value(M.z[r, q, d])) for q in used]
                 for r in range(D.shape.replicas)]
    return cuts, placement
