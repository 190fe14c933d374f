"""The planning problem for one *shape* as a CP-SAT model (OR-Tools), exact
for the analytic estimate T_est of SPEC section 7 up to a stated rounding.

A shape fixes tensor parallelism ``t``, micro-batch size ``b``, the
schedule kind and the replica count ``R`` (hence ``m``); the model chooses
the number of stages S, the contiguous partition and the domain of every
(replica, stage).  :mod:`planner.solvers.cpsat` enumerates shapes best-first.  The
formulation is written up in ``docs/formulations.md`` ("The CP-SAT joint
formulation").  It is written independently of the MILP
(:mod:`planner.solvers.formulations.milp`): stages are counted from the front, the
partition is a vector of cut positions read through ``add_element`` tables,
memory is a table of the last unit a stage may end at, link shares are
element tables over integer user counts, the (K-1)/K and 2(n-1)/n factors
come from one-hot counts, and every communication quantity is *defined*
(``add_max_equality``, ceilings of exact integer divisions); only the
period ``tau_r`` and T itself are bounded from below (they only lengthen
T_est, so they sit at their maximum in an optimal solution; as
``add_max_equality`` of long expressions they made CP-SAT 9.15's presolve
take tens of seconds).

Decision variables
------------------
* ``cut[i]`` (i = 0..Q, Q the most stages the shape allows): stage j holds
  units ``[cut[j], cut[j+1])``; ``cut[0] = 0``, ``cut[Q] = N`` (units),
  non-decreasing; stage j is used iff ``cut[j] < N``, so the used stages are
  a prefix 0..S-1 and unused ones are empty at ``N``;
* ``b[r][j][d]`` one-hot over the D hostable domains plus "none" (index D,
  exactly the unused stages); ``dom[r][j] = sum_d d b[r][j][d]``;
* ``is_s[S]``: one-hot over the admissible stage counts (S enters the
  1f1b in-flight limit w_j = min(m, S - j) through enforced constraints).

Units and scaling (CP-SAT is integral)
--------------------------------------
Times are integers in units of ``unit_s`` seconds, a power of ten chosen so
that the shape's lower bound is >= 1e5 units *and* the rounding bound below
is <= ``rounding`` (1e-4) of it, hence of every plan's T_est (iteration
times are then ~1e5-1e8 units; more when m is large, since (m - 1) tau
amplifies the error of a per-micro-batch period).  Every rounded figure is
round-to-nearest:

* compute: prefix sums of f and c = f + g over units (tensor-parallel
  all-reduces included), rounded, read at the
  cuts, so f_j, c_j are within 1 unit, g_j within 2, and the telescoping
  sums sum_{i>=j} c_i, sum_{i<j} g_i within 1;
* transfers: a WAN link used by n pipeline flows gives each
  ``round(n A / bw / unit)`` (a table over n), intra-domain ``round(A / bw)``,
  latencies ``round(lat)``: each within 1/2 unit;
* Little's window terms ``ceil(W_jk / (k - j + 1))`` (tau is an integer): the
  window's compute within 1 and its 2(k - j) transfers and latencies within 1/2
  each, so within (2n - 1)/n for n = k - j + 1 stages, +1 for the ceiling;
* gradient synchronisation ``AR_j = ceil(sum_{u in j} pq_u phi_j / RS) + 2(K-1) lat_ring``:
  ``pq_u`` a unit's parameters in quanta of ``param_quantum`` (the gcd of
  the units' parameters, exact, when that gives <= 1e6 quanta in all; else
  a power of ten giving the smallest unit >= 1e4 quanta or the model ~1e6
  quanta, each unit within 1/2),
  ``phi_j`` the time per quantum (intra ring + 2(K-1)/K x cross ring) in
  units of ``unit / RS``, within 2.5; ``RS`` is chosen so that this costs at
  most a quarter of the other rounding.

Hence, with e_tau = 3 (gpipe) or 1 + (2Q - 1)/Q (1f1b, the widest window),
the CP-SAT value of a plan differs from its T_est by at most
``err_abs + err_rel * value`` where (in units)
``err_abs = (m - 1) e_tau + 2 + 3 (Q - 1) [+ K_max + 2.5 P / RS when R > 1]``
(P the model's parameters in quanta) and ``err_rel = 1 / (2 x quanta of the
smallest unit)`` (0 when the quanta are exact); :meth:`CpsatModel.error`
states it in seconds.  The cost objective is
``T x sum_{(r,j) on d} round(t price_d PS) + round(CC) crossings + round(CR) sum_j (K_j - 1) Pq_j``
in units of ``1/obj_scale`` currency; its error is stated relatively.

SPEC v3 (``spec=3``)
--------------------
The same model with these groups in their v3 form (SPEC "Changes in v3" (a)-(f)):

* compute: the prefix tables add ``o`` per unit with FLOPs forward and
  ``beta o`` backward (exact: linear in the cuts);
* routes: :attr:`Instance.direct_routes` (a linked pair uses its link);
* boundaries (:func:`_pipeline_transfers_v3`): resources are directed links
  and uplinks (:class:`planner.problem.network.Resources` ids); a boundary
  d -> e uses route(d, e)'s resources forward and their reverses backward;
  ``n(q) = max(n_F, n_B)`` for gpipe-shaped schedules (gpipe; 1f1b with
  m = 1), else ``n_F + n_B``; ``x = max(A n(q) / cap(q))`` over both channels;
* syncs (:func:`_gradient_sync_v3`): ``V_j = phi(K_j) G_j`` held exactly as an
  integer (``(K - 1) L_K / K`` quanta-multiples, ``L_K = lcm(2..Kmax)``; phi = 2
  for ``reduce_broadcast``); every (stage, hop) is a user of each resource of
  its hop; stage j's cross part is ``max_q sum_i n_{i,q} min(V_i, V_j) / cap(q)``
  (processor sharing, exact), each coefficient a fraction within rounding / 4
  (added to ``err_rel``), with its own ceiling (+1 unit);
* T_est (SPEC 7 v3): a gpipe flush's period of stage j is
  ``alpha_r + beta_{r,j}`` with beta over the stages and boundaries downstream
  of j; 1f1b with m > 1 is one non-gpipe-shaped flush (v2's period);
* stage-count bounds: :func:`planner.solvers.shapesearch.stage_bounds` at
  ``spec=3`` (the v2 bounds of ``milp_bounds`` count halved rings and equal
  sync shares, and are withheld).

GPU types (SPEC v3 (g))
-----------------------
On a mixed instance (``instance.heterogeneous``) the prefix tables are one
pair per type a hostable domain has, read at the cuts per type; stage j of
replica r takes the differences of its domain's type (``typ[r][j][k]``
enforces them), so its time is linear in the placement; the round trip,
drains and windows sum each replica's own figures, which no longer
telescope: ``err_abs`` gains ``3 Q`` units and ``e_tau = 3`` for 1f1b too.
Memory: one MAXEND table per usable memory of the types, enforced per
(replica, stage) by its type (:func:`_typed_compute`).  One type: the model
of before, proto for proto.

Magnitudes: T is bounded above by the cutoff, or by the T_est of a plan of
the shape built greedily (no better plan is lost), and every table is
clamped there, which keeps linear activities near or below 1e10.  With
activities of 1e14-1e17 (an earlier version), CP-SAT 9.15.6755's presolve
returned INFEASIBLE for feasible models and non-optimal values as OPTIMAL;
see :func:`configure`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

from ortools.sat.python import cp_model

from ...problem.model import BYTES_PER_PARAM_GRAD, BYTES_PER_PARAM_STATE
from ...problem.network import GBPS, MS
from ...problem.space import PlanSpace, Shape, ShapeInfeasible
from ...problem.specversion import check_spec
from .. import stop

INT_SAFE = 2 ** 60  # no linear activity may come near CP-SAT's int64 limit
MAGNITUDE = 1e13  # scales are chosen to keep activities below this where the precision allows


def configure(solver: cp_model.CpSolver, time_limit: float | None = None, workers: int = 2, seed: int = 0,
              gap: float = 0.0, deterministic: bool = False, presolve: str = "noprobe") -> cp_model.CpSolver:
    """Set the CP-SAT parameters these models are solved with and return ``solver``.

    ``time_limit`` seconds (wall clock, or deterministic time with
    ``deterministic``, then on one worker: see the comment below);
    ``gap`` CP-SAT's relative gap limit; ``presolve`` ``"noprobe"``
    (default: CP-SAT's presolve without probing), ``"on"`` (CP-SAT's
    default) or ``"off"``.  Why probing is off by default: while this
    formulation still let linear activities reach 1e14-1e17, OR-Tools
    9.15.6755 (the latest on PyPI) declared feasible models INFEASIBLE and
    reported non-optimal values as OPTIMAL, twice in its probing (cf.
    google/or-tools#5274).  The scales of :func:`build` now keep activities
    near or below 1e10 and every mode agrees with brute force on thousands of
    random instances; leaving probing out is a second line of defence that
    costs little on the packaged instances.
    """
    p = solver.parameters
    if time_limit is not None and math.isfinite(time_limit):
        if deterministic:
            p.max_deterministic_time = time_limit
        else:
            p.max_time_in_seconds = time_limit
    if deterministic:
        # one worker: its search is deterministic.  (Several workers would need interleave_search,
        # in which OR-Tools 9.15.6755 aborts the whole process -- "Check failed:
        # heuristics.fixed_search != nullptr" -- on hinted models, e.g. two-dc's SPEC v3 shapes.)
        workers = 1
    p.num_workers = int(workers)
    p.max_memory_in_mb = stop.solver_memory_mb()  # CP-SAT stops its search there (planner.solvers.stop)
    p.catch_sigint_signal = False  # Ctrl-C reaches planner.solvers.stop, which stops the whole search
    p.random_seed = int(seed)
    p.relative_gap_limit = gap
    p.absolute_gap_limit = 0.0
    if presolve == "off":
        p.cp_model_presolve = False
    elif presolve == "noprobe":
        p.cp_model_probing_level = 0
    elif presolve != "on":
        raise ValueError(f"presolve is 'noprobe', 'on' or 'off', not {presolve!r}")
    return solver


def _heuristic_plan(instance, space, shape, admissible, domains, slots, require, m, spec: int = 2):
    """A feasible plan of ``shape`` or None: the balanced partition of the smallest
    admissible stage count that places, replicas laid out stage by stage over the
    domains with the most free slots (a replica stays in its domain while it can).
    Its T_est bounds T from above without losing the optimum."""
    from ...scoring.evaluator import check_plan
    from ...scoring.figures import PlanFigures
    from ...problem.plan import Plan

    for S in admissible[:3]:
        cuts = space.partition(shape.tp, shape.micro_batch, shape.schedule, S, m)
        if cuts is None:
            continue
        free = {d: slots[d] for d in domains}
        placement = []
        for _ in range(shape.replicas):
            row = []
            for j in range(S):
                prev = row[-1] if row else None
                if prev is not None and free[prev] > 0:
                    d = prev
                else:
                    cands = [d for d in domains if free[d] > 0 and
                             (prev is None or (prev, d) in instance.routes)]
                    if not cands:
                        break
                    d = max(cands, key=lambda d: (free[d], -domains.index(d)))
                row.append(d)
                free[d] -= 1
            if len(row) < S:
                break
            placement.append(row)
        if len(placement) < shape.replicas:
            continue
        if require and not set(require) <= {d for row in placement for d in row}:
            continue
        plan = Plan.build(cuts, sorted(placement), tp=shape.tp, micro_batch_size=shape.micro_batch,
                          instance=instance, schedule=shape.schedule)
        if not (check_plan(instance, plan) if spec < 3 else
                check_plan(instance, plan, PlanFigures(instance, plan, spec=spec))):
            return plan
    return None


def _pow10_floor(x: float) -> float:
    return 10.0 ** math.floor(math.log10(x))


@dataclass
class CpsatModel:
    """A built CP-SAT model of one shape and the handles to read it.

    ``value(solver)`` is the objective in seconds (time) or currency (cost);
    ``error(v)`` the rounding bound (same units) between the CP-SAT value
    ``v`` of a plan and its T_est (cost with T_est) per the evaluator.
    """

    model: cp_model.CpModel
    shape: Shape
    objective: str
    Q: int  # most stages
    N: int  # units
    m: int  # micro-batches per replica
    domains: list[str]  # hostable domains; index D means "no stage"
    unit_s: float  # seconds per time unit
    obj_scale: float  # objective integers per second (time) or per currency (cost)
    err_abs: float  # seconds or currency
    err_rel: float
    admissible: list[int]  # stage counts allowed
    cut: list = field(default_factory=list)
    used: list = field(default_factory=list)
    is_s: dict = field(default_factory=dict)
    b: list = field(default_factory=list)  # [r][j][d], d = 0..D (D: none)
    dom: list = field(default_factory=list)  # [r][j]
    T: cp_model.IntVar | None = None  # T_est in units
    obj_expr: object = None
    extra: dict = field(default_factory=dict)

    # -- reading --------------------------------------------------------------
    def value(self, solver: cp_model.CpSolver) -> float:
        return solver.objective_value / self.obj_scale

    def error(self, value: float) -> float:
        """Rounding bound (s or currency) for a CP-SAT value ``value`` (same units)."""
        return self.err_abs + self.err_rel * abs(value)

    def true_lower(self, model_bound: float) -> float:
        """A valid lower bound on T_est (cost) from a bound on the CP-SAT value."""
        return max(0.0, (model_bound - self.err_abs) / (1 + self.err_rel))

    def cutoff_int(self, value: float) -> int:
        """The largest objective integer a plan whose T_est (cost) is <= ``value`` can have."""
        return int(math.floor((value + self.error(value)) * (1 + self.err_rel) * self.obj_scale)) + 1

    def extract(self, solver: cp_model.CpSolver):
        """(cuts, placement) of the solver's solution, stages front to back."""
        cuts_v = [solver.value(c) for c in self.cut]
        S = sum(1 for j in range(self.Q) if cuts_v[j] < self.N)
        cuts = [(cuts_v[j], cuts_v[j + 1]) for j in range(S)]
        placement = [[self.domains[solver.value(self.dom[r][j])] for j in range(S)]
                     for r in range(self.shape.replicas)]
        return cuts, placement

    def hint(self, plan) -> bool:
        """Hint the decision variables with ``plan`` (same shape); False if it does not fit."""
        S = plan.num_stages
        if S > self.Q or S not in self.admissible or plan.replicas != self.shape.replicas:
            return False
        idx = {d: i for i, d in enumerate(self.domains)}
        if any(d not in idx for row in plan.placement for d in row):
            return False
        rows = sorted(([idx[d] for d in row] for row in plan.placement))  # lexicographic, as constrained
        M = self.model
        ends = [s.end for s in plan.stages]
        for i in range(1, self.Q):
            M.add_hint(self.cut[i], ends[i - 1] if i <= S else self.N)
        for j in range(self.Q):
            M.add_hint(self.used[j], j < S)
        for s, lit in self.is_s.items():
            M.add_hint(lit, s == S)
        D = len(self.domains)
        for r, row in enumerate(rows):
            for j in range(self.Q):
                v = row[j] if j < S else D
                M.add_hint(self.dom[r][j], v)
                for d in range(D + 1):
                    M.add_hint(self.b[r][j][d], d == v)
        return True

class _Formulation(SimpleNamespace):
    """The data and the variables of one shape's model, shared by the groups of :func:`build`:
    each group reads what it needs (``fm.read("N Q R")``) and sets what it defines."""

    def read(self, names: str) -> tuple:
        return tuple(getattr(self, n) for n in names.split())

    def set(self, **values) -> None:
        self.__dict__.update(values)


class ModelTooLarge(ValueError):
    """Raised while a shape's model is built, once it passes ``max_size`` variables and
    constraints: the shape is left unsearched (its memory would pass the budget)."""


def _checkpoint(M, fm) -> None:
    """A place in the build where it may stop: :func:`planner.solvers.stop.checkpoint`
    (out of time, a stop request), and past ``fm.max_size`` variables and constraints
    :class:`ModelTooLarge` (a size, not a clock or a memory reading: deterministic)."""
    stop.checkpoint()
    if fm.max_size is not None:
        proto = M.Proto()
        size = len(proto.variables) + len(proto.constraints)
        if size > fm.max_size:
            raise ModelTooLarge(f"shape {fm.shape}: its CP-SAT model passed {size:,} variables and constraints "
                                f"while being built, above the {fm.max_size:,} the memory budget allows")


def _phi_bound(HT, RT, ring_links, Kmax):
    """(largest intra phi, largest ring share, largest phi) of the sync tables (units x RS per quantum)."""
    hi = max([0] + [max(h) for h in HT])
    ro = max([0] + [RT[l][-1] for l in ring_links])
    return hi, ro, hi + (2 * (Kmax - 1) * ro + Kmax - 1) // max(Kmax, 1) + 1


def _sets(fm) -> None:
    """Sets and data of the shape: t, b, R, m, the hostable domains, the stage slots Q and the admissible stage counts,
    the boundary bytes A."""
    from ..shapesearch import stage_bounds as _stage_bounds

    (forbid, instance, objective, shape, space, stage_bounds) = fm.read(
        "forbid instance objective shape space stage_bounds")
    objective = objective or instance.options.objective
    if space is None:
        from ..shapesearch import search_space

        space = search_space(instance)  # slots and bwd; with GPU types the optimistic partitions
    wl = instance.workload
    units = instance.units
    N = len(units)
    t, bsz, R, sched = shape.tp, shape.micro_batch, shape.replicas, shape.schedule
    m = shape.micro_batches(wl.global_batch_size)
    gpipe = sched == "gpipe"
    forbid = set(forbid)
    slots = {d: n for d, n in space.slots(t).items() if d not in forbid and n > 0}
    domains = [d for d in instance.domain_names if d in slots]
    D = len(domains)
    NONE = D
    Q = min(instance.max_stages, N, sum(slots.values()) // R) if D else 0
    if shape.stages:
        if Q < shape.stages:
            raise ShapeInfeasible("the domains allowed have fewer stage slots per replica than the pinned "
                                  "stage count")
        Q = shape.stages
    if Q < 1:
        raise ShapeInfeasible("fewer stage slots than replicas (the domains allowed cannot hold one stage "
                              "per replica)")
    spec = fm.spec
    if stage_bounds is not None:
        sb = stage_bounds
    else:
        sb = _stage_bounds(space, shape, spec)
    admissible = sorted(S for S in sb if 1 <= S <= Q and (not shape.stages or S == shape.stages))
    if not admissible:
        raise ShapeInfeasible("no stage count that fits the stage slots of the domains allowed holds the "
                              "model in memory")
    Q = max(admissible)  # more slots than the largest admissible S are never used
    outs = {u.out_bytes_per_token for u in units[:-1]}
    if len(outs) > 1:
        raise NotImplementedError("the CP-SAT formulation assumes every unit sends the same bytes per token "
                                  "across a boundary (true for architecture-defined models)")
    tok = bsz * wl.seq_len
    A = (units[0].out_bytes_per_token if units else 0.0) * tok  # bytes per micro-batch per boundary
    # GPU types (SPEC v3 (g)): on a mixed instance each (replica, stage) runs at its domain's
    # type's figures (kinds: the types of the hostable domains; kind_of: each one's)
    typed = instance.heterogeneous
    kind_of = [instance.domain_type[instance.domain_index[d]] for d in domains]
    kinds = sorted(set(kind_of))
    rate = None if typed else t * instance.gpu.flops_per_s
    bwd = space.bwd
    Kmax = min(R, D) if R > 1 else 1
    if spec >= 3 and R > 1 and any(u.params <= 0 for u in units):
        raise NotImplementedError("the CP-SAT formulation under SPEC v3 assumes every unit has parameters "
                                  "(a stage without gradients skips the sync)")
    # SPEC v3: every flush of gpipe, and of 1f1b with one micro-batch, is gpipe-shaped
    fm.set(sync=instance.workload.gradient_sync if spec >= 3 else "ring", gpipe_shaped=gpipe or m == 1)
    fm.set(objective=objective, space=space, units=units, N=N, t=t, R=R, m=m, gpipe=gpipe, slots=slots,
           domains=domains, D=D, NONE=NONE, Q=Q, sb=sb, admissible=admissible, tok=tok, A=A, rate=rate, bwd=bwd,
           Kmax=Kmax, typed=typed, kind_of=kind_of, kinds=kinds)


def _rounding_budget(fm) -> None:
    """The parameter quantum and the rounding budget E_abs (units) of the module docstring."""
    Kmax, Q, R, gpipe, m, units = fm.read("Kmax Q R gpipe m units")
    params = [float(u.params) for u in units]
    pos = [p for p in params if p > 0]
    exact_p = bool(pos) and all(p.is_integer() for p in params)
    quantum = 1.0
    if exact_p:  # the gcd of the units' parameters: exact small integers (identical blocks)
        g = 0
        for p in params:
            g = math.gcd(g, int(p))
        quantum = float(g)
        exact_p = sum(params) / g <= 1e6
    if not exact_p and pos:  # round: the smallest unit >= 1e4 quanta, or all units ~1e6 quanta
        quantum = max(_pow10_floor(min(pos) / 1e4), _pow10_floor(sum(params) / 1e6))
    pq_u = [int(round(p / quantum)) for p in params]  # parameters per unit in quanta
    p_max = sum(pq_u)
    pq_min = min([v for v in pq_u if v > 0] or [1])
    if gpipe or fm.typed:  # (GPU types: a window's n stages' compute within n, so <= 3 too)
        e_tau = 3.0
    else:
        e_tau = 1.0 + (2 * Q - 1) / Q  # the window of n <= Q stages: (2n - 1)/n, +1 (ceiling)
    E_abs = (m - 1) * e_tau + 2 + 3 * (Q - 1)  # units: compute, transfers, latencies, tau
    if fm.typed:  # per-stage figures no longer telescope: the round trip within Q more, the drain 2Q
        E_abs += 3 * Q
    if R > 1:
        E_abs += 1 + (Kmax - 1)  # ceil of AR, ring latencies
        # phi (units x RS per quantum) is within 2.5 of its value: 2.5 p_max / RS units of AR,
        # a quarter of the rest of the budget; a smaller RS keeps CP-SAT's numbers small
        RS = max(1, int(math.ceil(10 * p_max / E_abs)))
        E_abs += 2.5 * p_max / RS
        rel_p = 0.0 if exact_p else 0.5 / (min(pos) / quantum)  # each unit's quanta within 1/2
        if fm.spec >= 3:  # the cross part's own ceiling; its coefficients within rounding / 4
            E_abs += 1
            rel_p += fm.rounding / 4
    else:
        RS, rel_p = 1, 0.0
    fm.set(quantum=quantum, pq_u=pq_u, p_max=p_max, pq_min=pq_min, E_abs=E_abs, RS=RS, rel_p=rel_p)


def _time_unit(fm) -> None:
    """The time unit: a power of ten giving >= 1e5 units and a rounding <= `rounding` of the shape's lower bound."""
    (E_abs, admissible, domains, instance, m, ref_s, require, rounding, sb, shape, slots, space) = fm.read(
        "E_abs admissible domains instance m ref_s require rounding sb shape slots space")
    lb_min = min(sb[S] for S in admissible)
    known = _heuristic_plan(instance, space, shape, admissible, domains, slots, set(require), m, fm.spec)
    known_te = known_cost = None
    if known is not None:
        from ...scoring.evaluator import Evaluator

        ev = Evaluator(instance, known, spec=fm.spec)
        known_te = float(ev.estimate_times()[0])
        known_cost = float(ev.cost(known_te))
    # the reference is the shape's lower bound, so the rounding bound is <= `rounding` x T_est of every plan
    ref = ref_s if ref_s and math.isfinite(ref_s) and ref_s > 0 else (lb_min if lb_min > 0 else (known_te or 1.0))
    unit = min(_pow10_floor(ref / 1e5), _pow10_floor(ref * rounding / E_abs))
    q = lambda seconds: int(round(seconds / unit))
    fm.set(lb_min=lb_min, known=known, known_te=known_te, known_cost=known_cost, unit=unit, q=q)


def _prefix_tables(fm, gpu, rate) -> tuple[list[int], list[int]]:
    """(FPt, CPt): prefix sums over units of f and c = f + g on GPU type ``gpu`` at
    ``rate`` = t * its FLOP/s, rounded to units."""
    bwd, q, t, tok, units = fm.read("bwd q t tok units")
    # compute prefix tables (units)
    # (with the tensor-parallel all-reduces of SPEC 5 v2, y per unit, forward and backward)
    flops, ys = [0.0], [0.0]
    for u in units:
        flops.append(flops[-1] + u.fwd_flops_per_token)
        ys.append(ys[-1] + float(gpu.tp_allreduce_s(u.tp_bytes_per_token * tok, t)))
    FPt = [q(fl * tok / rate + yy) for fl, yy in zip(flops, ys)]
    CPt = [q((1 + bwd) * fl * tok / rate + 2 * yy) for fl, yy in zip(flops, ys)]
    o = gpu.unit_overhead_ms * MS if fm.spec >= 3 else 0.0
    if o:  # SPEC v3 (f): n_j o forward, beta n_j o backward, n_j the units with FLOPs
        n = [0]
        for u in units:
            n.append(n[-1] + (u.fwd_flops_per_token > 0))
        FPt = [q(fl * tok / rate + yy + k * o) for fl, yy, k in zip(flops, ys, n)]
        CPt = [q((1 + bwd) * (fl * tok / rate + k * o) + 2 * yy) for fl, yy, k in zip(flops, ys, n)]
    return FPt, CPt


def _compute_tables(fm) -> None:
    """Prefix sums over units of f and c = f + g (units), read at the cuts.  GPU types: one
    pair of tables per type (``TAB[k]``); FPt, CPt are then their elementwise maxima and
    ``ctot`` bounds any replica's compute from above (variable bounds only)."""
    N, instance, rate, t = fm.read("N instance rate t")
    if not fm.typed:
        FPt, CPt = _prefix_tables(fm, instance.gpu, rate)
        ctot = CPt[N]
        fm.set(FPt=FPt, CPt=CPt, ctot=ctot)
        return
    TAB = {k: _prefix_tables(fm, instance.gpu_types[k], t * instance.gpu_types[k].flops_per_s) for k in fm.kinds}
    FPt = [max(TAB[k][0][i] for k in fm.kinds) for i in range(N + 1)]
    CPt = [max(TAB[k][1][i] for k in fm.kinds) for i in range(N + 1)]
    ctot = CPt[N] + fm.Q + 1  # each stage's rounded c within 1 unit of its exact figure
    fm.set(FPt=FPt, CPt=CPt, ctot=ctot, TAB=TAB)


def _memory_tables(fm) -> None:
    """Memory: the last end a stage starting at a may have, per in-flight count w."""
    N, admissible, gpipe, instance, m, t, tok, units = fm.read("N admissible gpipe instance m t tok units")
    # memory: the last end a stage starting at a may have, per in-flight count w
    fm.set(MEMK=None)
    if fm.typed:  # GPU types: a table per usable memory of the hostable domains' types
        limits = sorted({instance.memory_limit_of(instance.gpu_types[k]) for k in fm.kinds})
        if len(limits) > 1:
            fm.set(MEMK={lim: _memory_tables_at(fm, lim) for lim in limits})
        limit = limits[0]
    else:
        limit = instance.memory_limit_bytes
    w_of, MAXEND = _memory_tables_at(fm, limit)
    fm.set(w_of=w_of, MAXEND=MAXEND)


def _memory_tables_at(fm, limit: float):
    """(w_of, MAXEND) of :func:`_memory_tables` for usable memory ``limit`` (bytes per GPU)."""
    N, admissible, gpipe, instance, m, t, tok, units = fm.read("N admissible gpipe instance m t tok units")

    def maxend_table(w):
        tab = []
        for a in range(N + 1):
            e, P, st = a, 0.0, 0.0
            while e < N:
                P2 = P + units[e].params
                st2 = st + units[e].stored_bytes_per_token
                if (BYTES_PER_PARAM_STATE * P2 + (w * tok) * st2) / t > limit * (1 + 1e-12):
                    break
                e, P, st = e + 1, P2, st2
            tab.append(e)
        return tab

    def w_of(S, j):
        return m if gpipe else min(m, S - j)

    w_values = sorted({w_of(S, j) for S in admissible for j in range(S)})
    MAXEND = {w: maxend_table(w) for w in w_values}
    return w_of, MAXEND


def _route_tables(fm) -> None:
    """Pipeline transfers: tables over the pair index p = d (D + 1) + e of two consecutive stages' domains."""
    A, D, NONE, Q, R, domains, instance, q = fm.read("A D NONE Q R domains instance q")
    # routes between hostable domains (index pairs); tables over pair index p = d*(D+1)+e
    all_routes = instance.routes_for(fm.spec)
    routes = {}
    for i, d in enumerate(domains):
        for k, e in enumerate(domains):
            if i != k and (d, e) in all_routes:
                routes[(i, k)] = all_routes[(d, e)]
    link_bw = [l.bandwidth_gbps * GBPS for l in instance.links]  # bytes/s
    intra_bw = [instance.domain(d).intra_bandwidth_gbps * GBPS for d in domains]
    W = D + 1
    allowed, XIN, LATP, CROSS = [], [0] * (W * W), [0] * (W * W), [0] * (W * W)
    for d in range(W):
        for e in range(W):
            p = d * W + e
            if d < D and e < D:
                if d == e:
                    XIN[p] = q(A / intra_bw[d])
                    allowed.append(p)
                elif (d, e) in routes:
                    LATP[p] = q(routes[(d, e)].latency_ms * MS)
                    CROSS[p] = 1
                    allowed.append(p)
            elif e == NONE:  # a last used stage, or two unused ones
                allowed.append(p)
    if fm.spec < 3:
        pipe_links = sorted({l for r in routes.values() for l in r.links})
        Umax = R * (Q - 1)
        ST = {l: [q(n * A / link_bw[l]) for n in range(Umax + 1)] for l in pipe_links}
    else:  # directed resources; n(q) = max(n_F, n_B) or n_F + n_B users
        res = {(i, k): _transfer_resources(instance, rt, domains[i], domains[k]) for (i, k), rt in routes.items()}
        pipe_links = sorted({x for ids in res.values() for x in ids} | {_reverse(instance, x) for ids in res.values()
                                                                         for x in ids})
        Umax = R * (Q - 1) * (1 if fm.gpipe_shaped else 2)
        ST = {x: [q(n * A / _capacity(instance, x)) for n in range(Umax + 1)] for x in pipe_links}
        fm.set(res=res)
    x_max = max([0] + [max(XIN)] + [ST[l][-1] for l in pipe_links])
    lat_max = max([0] + LATP)
    fm.set(routes=routes, link_bw=link_bw, intra_bw=intra_bw, W=W, allowed=allowed, XIN=XIN, LATP=LATP,
           CROSS=CROSS, pipe_links=pipe_links, Umax=Umax, ST=ST, x_max=x_max, lat_max=lat_max)


def _sync_tables(fm) -> None:
    """Gradient synchronisation tables (phi: units x RS per parameter quantum)."""
    (D, Kmax, Q, R, RS, intra_bw, link_bw, quantum, routes, t, unit) = fm.read(
        "D Kmax Q R RS intra_bw link_bw quantum routes t unit")
    # gradient synchronisation tables (phi: units x RS per parameter quantum)
    G_q = BYTES_PER_PARAM_GRAD * quantum  # gradient bytes per quantum
    HT, RT, ring_links, Umax_ring = [], {}, [], 0
    if R > 1:
        HT = [[int(round(2 * (n - 1) / n * (G_q / t) / intra_bw[d] / unit * RS)) if n > 1 else 0
               for n in range(R + 1)] for d in range(D)]
        ring_links = sorted({l for r in routes.values() for l in r.links})
        Umax_ring = Q * Kmax if Kmax > 1 else 0
        RT = {l: [int(round(U * G_q / link_bw[l] / unit * RS)) for U in range(Umax_ring + 1)] for l in ring_links}
    if fm.spec >= 3:
        _sync_tables_v3(fm, G_q)
        HT, ring_links, RT = fm.HT, [], {}
    fm.set(HT=HT, RT=RT, ring_links=ring_links, Umax_ring=Umax_ring)


def _upper_bound(fm) -> None:
    """An upper bound T_ub on T (units), the stage-count lower bounds, and every table clamped at T_ub + 1."""
    (E_abs, HT, Kmax, LATP, N, Q, R, RS, RT, ST, XIN, admissible, ctot, cutoff, domains, gpipe, instance, known,
     known_cost, known_te, lat_max, m, objective, p_max, pq_min, pq_u, rel_p, ring_links, sb, shape, t, unit,
     x_max) = fm.read(
        "E_abs HT Kmax LATP N Q R RS RT ST XIN admissible ctot cutoff domains gpipe instance known known_cost "
        "known_te lat_max m objective p_max pq_min pq_u rel_p ring_links sb shape t unit x_max")
    # structural, then the cutoff, then a plan of the shape that is known (no better plan
    # is lost: any plan slower than a known one is not optimal)
    _, _, phi_max = _phi_bound(HT, RT, ring_links, Kmax)
    Q0_max = ctot + 2 * (Q - 1) * (x_max + lat_max)
    tau_max = 2 * max(ctot, x_max) if gpipe else max(ctot, x_max, Q0_max)
    AR_max = (int(math.ceil(p_max * phi_max / RS)) + 2 * (Kmax - 1) * lat_max) if R > 1 else 0
    if fm.spec >= 3 and R > 1:
        AR_max += fm.cross_max
    T_ub = (m - 1) * tau_max + Q0_max + AR_max + 1
    kind_cost = objective == "cost"
    prices = [instance.domain(d).price_per_gpu_hour for d in domains]
    wp = instance.options.wan_price_per_gb
    to_units = lambda seconds: int(math.ceil((seconds / unit + E_abs) * (1 + rel_p))) + 2
    pmin = min(prices)
    if kind_cost:
        for c_ in (cutoff, known_cost if known is not None else None):
            if c_ is not None and math.isfinite(c_) and pmin > 0:  # >= R S t GPUs at >= the cheapest price
                T_ub = min(T_ub, to_units(c_ * 3600.0 / (pmin * t * R * admissible[0])))
    else:
        for c_ in (cutoff, known_te):
            if c_ is not None and math.isfinite(c_):
                T_ub = min(T_ub, to_units(c_))
    T_ub = max(T_ub, 1)
    lb_units = {S: max(0, int(math.floor(sb[S] / unit / (1 + rel_p) - E_abs))) for S in admissible}

    # clamp the tables at T_ub + 1: a larger figure makes T > T_ub whatever it is exactly
    big = T_ub + 1
    XIN = [min(v, big) for v in XIN]
    LATP = [min(v, big) for v in LATP]
    ST = {l: [min(v, big) for v in ST[l]] for l in ST}
    x_max, lat_max = min(x_max, big), min(lat_max, big)
    Q0_max = min(Q0_max, big + ctot + 2 * (Q - 1) * (x_max + lat_max))
    tau_max = min(tau_max, 2 * big)
    phi_cap = int(math.ceil(big * RS / pq_min)) + 1  # a stage with parameters and more phi: AR > T_ub
    HT = [[min(v, phi_cap) for v in h] for h in HT]
    RT = {l: [min(v, phi_cap) for v in RT[l]] for l in RT}
    phiI_max, rho_max, phi_max = _phi_bound(HT, RT, ring_links, Kmax)
    AR_dom = min(big, int(math.ceil(p_max * phi_max / RS))) + 2 * (Kmax - 1) * lat_max if R > 1 else 0
    if R > 1 and sum(pq_u[u] * min(phi_max, big * RS / pq_u[u] + 1) for u in range(N) if pq_u[u]) > INT_SAFE:
        raise ValueError(f"shape {shape}: gradient-synchronisation figures overflow 64-bit integers")
    if fm.spec >= 3 and R > 1 and Kmax >= 1:  # _gradient_sync_v3's products num_x x sum of volumes, before any is built
        num, den, Vmax, hop_res = fm.read("num den Vmax hop_res")
        used = {x for (a, e), ids in hop_res.items() if a != e for x in ids}
        if any(num[x] * Q * Kmax * Vmax > INT_SAFE or den[x] * 2 * big > INT_SAFE for x in used):
            raise ValueError(f"shape {shape}: gradient-synchronisation figures overflow 64-bit integers")
    fm.set(phi_max=phi_max, Q0_max=Q0_max, tau_max=tau_max, T_ub=T_ub, kind_cost=kind_cost, prices=prices, wp=wp,
           lb_units=lb_units, big=big, XIN=XIN, LATP=LATP, ST=ST, x_max=x_max, lat_max=lat_max, HT=HT, RT=RT,
           phiI_max=phiI_max, rho_max=rho_max, AR_dom=AR_dom)


def _partition(M, fm) -> None:
    """Partition: the cuts, the used stages and the one-hot stage count; compute f_j, c_j, g_j at the cuts."""
    CPt, FPt, N, Q, admissible, shape = fm.read("CPt FPt N Q admissible shape")
    cut = [M.new_constant(0)] + [M.new_int_var(1, N, f"cut{i}") for i in range(1, Q)] + [M.new_constant(N)]
    used = [M.new_bool_var(f"used{j}") for j in range(Q)]
    M.add(used[0] == 1)
    for j in range(Q):
        M.add(cut[j + 1] >= cut[j] + 1).only_enforce_if(used[j])
        M.add(cut[j] == N).only_enforce_if(~used[j])
        M.add(cut[j] <= cut[j + 1])
        if j + 1 < Q:
            M.add_implication(used[j + 1], used[j])
    is_s = {S: M.new_bool_var(f"S{S}") for S in admissible}
    M.add_exactly_one(is_s.values())
    M.add(sum(S * v for S, v in is_s.items()) == sum(used))
    if shape.stages:
        for j in range(Q):
            M.add(used[j] == 1)
    fm.set(cut=cut, used=used, is_s=is_s)
    if fm.typed:  # GPU types: per replica, from each type's tables (_typed_compute)
        fm.set(ef=None, ec=None, f=None, c=None, g=None)
        return
    # compute at the cuts
    ef = [M.new_int_var(0, FPt[N], f"ef{i}") for i in range(Q + 1)]
    ec = [M.new_int_var(0, CPt[N], f"ec{i}") for i in range(Q + 1)]
    for i in range(Q + 1):
        M.add_element(cut[i], FPt, ef[i])
        M.add_element(cut[i], CPt, ec[i])
    f = [ef[j + 1] - ef[j] for j in range(Q)]
    c = [ec[j + 1] - ec[j] for j in range(Q)]
    g = [c[j] - f[j] for j in range(Q)]
    fm.set(cut=cut, used=used, is_s=is_s, ef=ef, ec=ec, f=f, c=c, g=g)


def _maxends(M, fm, j: int, w_of, MAXEND, tag: str = "") -> dict:
    """Per in-flight count w stage j may have, ``maxend{j}_{w}{tag}``: the last end a stage
    starting at ``cut[j]`` may have with w micro-batches in flight (an element of ``MAXEND[w]``)."""
    N, admissible, cut = fm.read("N admissible cut")
    me = {}
    for w in sorted({w_of(S, j) for S in admissible if S > j}):
        me[w] = M.new_int_var(0, N, f"maxend{j}_{w}{tag}")
        M.add_element(cut[j], MAXEND[w], me[w])
    return me


def _memory(M, fm) -> None:
    """Memory: each stage ends no later than its start's MAXEND for its in-flight count."""
    MAXEND, Q, admissible, cut, is_s, w_of = fm.read("MAXEND Q admissible cut is_s w_of")
    # memory: cut[j+1] <= the last end a stage starting at cut[j] may have with w_j in flight
    for j in range(Q):
        me = _maxends(M, fm, j, w_of, MAXEND)
        for S in admissible:
            if S > j:
                M.add(cut[j + 1] <= me[w_of(S, j)]).only_enforce_if(is_s[S])


def _typed_compute(M, fm) -> None:
    """GPU types (SPEC v3 (g)): stage j of replica r runs at the figures of its domain's type.

    Per type k, ``ef_k``, ``ec_k`` read that type's prefix tables at the cuts, so
    ``f_k[j] = ef_k[j+1] - ef_k[j]`` (likewise c); ``typ[r][j][k]`` (the sum of ``b[r][j][d]``
    over k's domains) selects ``f[r][j] = f_k[j]`` and ``c[r][j] = c_k[j]`` (0 on an unused
    stage), ``g[r][j] = c[r][j] - f[r][j]``: the time of (r, j) is linear in the placement.
    Memory (types with different usable memory): stage j ends no later than its start's
    MAXEND of its in-flight count under the memory of every type hosting it."""
    N, NONE, Q, R, admissible, b, cut, domains, is_s, kind_of, kinds = fm.read(
        "N NONE Q R admissible b cut domains is_s kind_of kinds")
    ef, ec = {}, {}
    for k in kinds:
        FPt, CPt = fm.TAB[k]
        ef[k] = [M.new_int_var(0, FPt[N], f"ef{i}_t{k}") for i in range(Q + 1)]
        ec[k] = [M.new_int_var(0, CPt[N], f"ec{i}_t{k}") for i in range(Q + 1)]
        for i in range(Q + 1):
            M.add_element(cut[i], FPt, ef[k][i])
            M.add_element(cut[i], CPt, ec[k][i])
    typ = [[{} for _ in range(Q)] for _ in range(R)]
    f = [[None] * Q for _ in range(R)]
    c = [[None] * Q for _ in range(R)]
    for r in range(R):
        _checkpoint(M, fm)
        for j in range(Q):
            f[r][j] = M.new_int_var(0, fm.FPt[N], f"f{r}_{j}")
            c[r][j] = M.new_int_var(0, fm.CPt[N], f"c{r}_{j}")
            M.add(f[r][j] == 0).only_enforce_if(b[r][j][NONE])
            M.add(c[r][j] == 0).only_enforce_if(b[r][j][NONE])
            for k in kinds:
                lit = M.new_bool_var(f"typ{r}_{j}_{k}")
                M.add(lit == sum(b[r][j][d] for d in range(len(domains)) if kind_of[d] == k))
                M.add(f[r][j] == ef[k][j + 1] - ef[k][j]).only_enforce_if(lit)
                M.add(c[r][j] == ec[k][j + 1] - ec[k][j]).only_enforce_if(lit)
                typ[r][j][k] = lit
    g = [[c[r][j] - f[r][j] for j in range(Q)] for r in range(R)]
    if fm.MEMK:
        limit_of = {k: fm.instance.memory_limit_of(fm.instance.gpu_types[k]) for k in kinds}
        for j in range(Q):
            for k in kinds:
                w_of, MAXEND = fm.MEMK[limit_of[k]]
                me = _maxends(M, fm, j, w_of, MAXEND, f"_t{k}")
                for S in admissible:
                    if S > j:
                        for r in range(R):
                            M.add(cut[j + 1] <= me[w_of(S, j)]).only_enforce_if([is_s[S], typ[r][j][k]])
    fm.set(tf=f, tc=c, tg=g, typ=typ)


def _placement(M, fm) -> None:
    """Placement and GPU capacity: one domain (or none) per (replica, stage), the slots, the required domains, replica
    symmetry."""
    D, NONE, Q, R, W, domains, require, slots, used = fm.read("D NONE Q R W domains require slots used")
    b = [[[M.new_bool_var(f"b{r}_{j}_{d}") for d in range(W)] for j in range(Q)] for r in range(R)]
    dom = [[M.new_int_var(0, D, f"dom{r}_{j}") for j in range(Q)] for r in range(R)]
    for r in range(R):
        _checkpoint(M, fm)
        for j in range(Q):
            M.add_exactly_one(b[r][j])
            M.add(b[r][j][NONE] + used[j] == 1)
            M.add(dom[r][j] == sum(d * b[r][j][d] for d in range(W)))
    cnt = [sum(b[r][j][d] for r in range(R) for j in range(Q)) for d in range(D)]
    for d in range(D):
        M.add(cnt[d] <= slots[domains[d]])
    for name in require:
        if name not in domains:
            raise ShapeInfeasible(f"required domain {name} cannot host a stage of this tensor-parallel degree")
        M.add(cnt[domains.index(name)] >= 1)
    # replicas are interchangeable: their domain vectors in lexicographic order
    for r in range(R - 1):
        eq_prev = None  # prefix 0..j-1 equal (None: the empty prefix)
        for j in range(Q):
            eq = M.new_bool_var(f"lex{r}_{j}")
            a, bb = dom[r][j], dom[r + 1][j]
            if eq_prev is None:
                M.add(a <= bb)
                M.add(a < bb).only_enforce_if(~eq)
            else:
                M.add_implication(eq, eq_prev)
                M.add(a <= bb).only_enforce_if(eq_prev)
                M.add(a < bb).only_enforce_if([eq_prev, ~eq])
            M.add(a == bb).only_enforce_if(eq)
            eq_prev = eq
    fm.set(b=b, dom=dom)


def _boundary_pair(M, r, k, allowed, W, dom, XIN, LATP, lat_max, CROSS, crossing):
    """Boundary k of replica r: the variable of its (domain, next domain) pair, its
    intra-or-solo transfer time ``xin`` and its latency, each an element of the pair's
    table; with ``CROSS`` (a cost objective with a WAN price) whether it crosses
    domains, appended to ``crossing``.  Returns (pair, xin, latency)."""
    pidx = M.new_int_var_from_domain(cp_model.Domain.from_values(allowed), f"pair{r}_{k}")
    M.add(pidx == W * dom[r][k] + dom[r][k + 1])
    xin = M.new_int_var(0, max(XIN), f"xin{r}_{k}")
    M.add_element(pidx, XIN, xin)
    lat = M.new_int_var(0, lat_max, f"lat{r}_{k}")
    M.add_element(pidx, LATP, lat)
    if CROSS is not None:
        cr = M.new_bool_var(f"cross{r}_{k}")
        M.add_element(pidx, CROSS, cr)
        crossing.append(cr)
    return pidx, xin, lat


def _pipeline_transfers(M, fm) -> None:
    """Communication: boundary transfers x_{r,k} and latencies l_{r,k}, links shared by their user counts."""
    (CROSS, LATP, Q, R, ST, Umax, W, XIN, allowed, dom, kind_cost, lat_max, pipe_links, routes, wp,
     x_max) = fm.read(
        "CROSS LATP Q R ST Umax W XIN allowed dom kind_cost lat_max pipe_links routes wp x_max")
    xs, ls = [[None] * max(Q - 1, 0) for _ in range(R)], [[None] * max(Q - 1, 0) for _ in range(R)]
    crossing = []
    uses = {}
    use_tab = {l: [1 if (p // W, p % W) in routes and l in routes[(p // W, p % W)].links else 0
                   for p in range(W * W)] for l in pipe_links}
    for r in range(R):
        _checkpoint(M, fm)
        for k in range(Q - 1):
            pidx, xin, ls[r][k] = _boundary_pair(M, r, k, allowed, W, dom, XIN, LATP, lat_max,
                                                 CROSS if kind_cost and wp > 0 else None, crossing)
            for l in pipe_links:
                u = M.new_bool_var(f"use{r}_{k}_{l}")
                M.add_element(pidx, use_tab[l], u)
                uses[r, k, l] = u
            xs[r][k] = (xin, pidx)
    share = {}
    for l in pipe_links:
        n_l = M.new_int_var(0, Umax, f"users{l}")
        M.add(n_l == sum(uses[r, k, l] for r in range(R) for k in range(Q - 1)))
        share[l] = M.new_int_var(0, ST[l][-1], f"share{l}")
        M.add_element(n_l, ST[l], share[l])
    for r in range(R):
        for k in range(Q - 1):
            xin, _ = xs[r][k]
            terms = [xin]
            for l in pipe_links:
                z = M.new_int_var(0, ST[l][-1], f"xl{r}_{k}_{l}")
                M.add(z == share[l]).only_enforce_if(uses[r, k, l])
                M.add(z == 0).only_enforce_if(~uses[r, k, l])
                terms.append(z)
            x = M.new_int_var(0, x_max, f"x{r}_{k}")
            M.add_max_equality(x, terms)
            xs[r][k] = x
    fm.set(xs=xs, ls=ls, crossing=crossing)


def _ring_members(M, fm):
    """The members of every stage's gradient sync: y[u][j] (unit u on stage j), Pq_j (its
    parameters in quanta), o_{j,d} (a replica of stage j in domain d), the one-hot K_j and
    h[j, a, e] (the sync of stage j has the hop a -> e: consecutive members in instance order)."""
    D, Kmax, N, Q, R, b, cut, pq_u, routes = fm.read("D Kmax N Q R b cut pq_u routes")
    order = list(range(D))  # hostable domains in instance order
    hops = [(a, e) for a in range(D) for e in range(D) if a != e]

    def between(a, e):
        return [c for c in order[a + 1:e]] if a < e else order[a + 1:] + order[:e]

    # unit u on stage j (exactly one j with cut[j] <= u < cut[j+1]); Pq_j its parameters in quanta
    y = [[M.new_bool_var(f"y{u}_{j}") for j in range(Q)] for u in range(N)]
    for u in range(N):
        M.add_exactly_one(y[u])
        for j in range(Q):
            M.add(cut[j] <= u).only_enforce_if(y[u][j])
            M.add(cut[j + 1] >= u + 1).only_enforce_if(y[u][j])
    Pq = [M.new_int_var(0, sum(pq_u), f"Pq{j}") for j in range(Q)]
    for j in range(Q):
        M.add(Pq[j] == sum(pq_u[u] * y[u][j] for u in range(N) if pq_u[u]))
    h, o, Kis, K = {}, {}, {}, {}
    for j in range(Q):
        for d in range(D):
            o[j, d] = M.new_bool_var(f"o{j}_{d}")
            M.add_max_equality(o[j, d], [b[r][j][d] for r in range(R)])
        K[j] = M.new_int_var(0, Kmax, f"K{j}")
        M.add(K[j] == sum(o[j, d] for d in range(D)))
        for k in range(Kmax + 1):
            Kis[j, k] = M.new_bool_var(f"K{j}is{k}")
        M.add_exactly_one(Kis[j, k] for k in range(Kmax + 1))
        M.add(sum(k * Kis[j, k] for k in range(Kmax + 1)) == K[j])
        for a, e in hops:
            v = M.new_bool_var(f"hop{j}_{a}_{e}")
            h[j, a, e] = v
            btw = between(a, e)
            M.add_implication(v, o[j, a])
            M.add_implication(v, o[j, e])
            for cc in btw:
                M.add_implication(v, ~o[j, cc])
            M.add_bool_or([~o[j, a], ~o[j, e], v] + [o[j, cc] for cc in btw])
            if (a, e) not in routes:
                M.add(v == 0)  # no route: such a ring cannot synchronise
    return y, Pq, h, Kis, hops


def _ring_latency(M, j: int, hops, routes, h, q, lat_max: int):
    """Stage j's ring latency: the largest latency (units) of the hops its ring uses."""
    terms = [0]
    for (a, e) in hops:
        if (a, e) in routes:
            lv = q(routes[(a, e)].latency_ms * MS)
            z = M.new_int_var(0, lv, f"hl{j}_{a}_{e}")
            M.add(z == lv).only_enforce_if(h[j, a, e])
            M.add(z == 0).only_enforce_if(~h[j, a, e])
            terms.append(z)
    rlat = M.new_int_var(0, lat_max, f"ringlat{j}")
    M.add_max_equality(rlat, terms)
    return rlat


def _volume_time(M, j: int, phi, phi_cap: int, pq_u, y, big: int, RS: float, AR_dom: int):
    """ceil(Pq_j * phi / RS): stage j's sync volume time (units), Pq_j * phi written as a linear
    sum over the units of pq_u * (phi if u is on stage j else 0) (add_multiplication_equality
    here made CP-SAT 9.15's presolve declare feasible models infeasible, see the docs)."""
    prod = []
    for u in range(len(pq_u)):
        if pq_u[u]:
            z = M.new_int_var(0, min(phi_cap, int(math.ceil(big * RS / pq_u[u])) + 1), f"phiu{u}_{j}")
            M.add(z == phi).only_enforce_if(y[u][j])
            M.add(z == 0).only_enforce_if(~y[u][j])
            prod.append(pq_u[u] * z)
    prod = sum(prod)
    arv = M.new_int_var(0, AR_dom, f"ARvol{j}")
    M.add(int(RS) * arv >= prod)
    M.add(int(RS) * arv <= prod + int(RS) - 1)
    return arv


def _intra_ring(M, b, j: int, R: int, D: int, HT, phiI_max: int):
    """Stage j's intra-domain part of the gradient sync: the slowest domain holding
    n > 1 of its replicas (``HT[d][n]``: that ring's time in units, by n)."""
    intra = []
    for d in range(D):
        n = M.new_int_var(0, R, f"n{j}_{d}")
        M.add(n == sum(b[r][j][d] for r in range(R)))
        v = M.new_int_var(0, max(HT[d]), f"phiI{j}_{d}")
        M.add_element(n, HT[d], v)
        intra.append(v)
    phiI = M.new_int_var(0, phiI_max, f"phiI{j}")
    M.add_max_equality(phiI, intra)
    return phiI


def _gradient_sync(M, fm) -> None:
    """Gradient synchronisation AR_j: intra ring plus cross ring over the stage's K domains."""
    (AR_dom, D, HT, Kmax, N, Q, R, RS, RT, Umax_ring, b, big, kind_cost, lat_max, phiI_max, phi_max, pq_u, q,
     rho_max, ring_links, routes, wp) = fm.read(
        "AR_dom D HT Kmax N Q R RS RT Umax_ring b big kind_cost lat_max phiI_max phi_max pq_u q rho_max "
        "ring_links routes wp")
    AR = [0] * Q
    ring_bytes = []
    if R > 1:
        y, Pq, h, Kis, hops = _ring_members(M, fm)
        ring_share = {}
        for l in ring_links:
            U = M.new_int_var(0, Umax_ring, f"ringusers{l}")
            M.add(U == sum(h[j, a, e] for j in range(Q) for (a, e) in hops
                           if (a, e) in routes and l in routes[(a, e)].links))
            ring_share[l] = M.new_int_var(0, RT[l][-1], f"ringshare{l}")
            M.add_element(U, RT[l], ring_share[l])
        for j in range(Q):
            _checkpoint(M, fm)
            phiI = _intra_ring(M, b, j, R, D, HT, phiI_max)  # the slowest domain's ring inside it
            # cross ring: slowest share over the links its hops cross (1 / ring bandwidth)
            terms = [0]
            for l in ring_links:
                pairs = [h[j, a, e] for (a, e) in hops if (a, e) in routes and l in routes[(a, e)].links]
                if not pairs:
                    continue
                mu = M.new_bool_var(f"mu{j}_{l}")
                M.add_max_equality(mu, pairs)
                z = M.new_int_var(0, RT[l][-1], f"rho{j}_{l}")
                M.add(z == ring_share[l]).only_enforce_if(mu)
                M.add(z == 0).only_enforce_if(~mu)
                terms.append(z)
            rho = M.new_int_var(0, rho_max, f"rho{j}")
            M.add_max_equality(rho, terms)
            rlat = _ring_latency(M, j, hops, routes, h, q, lat_max)
            # phi = phiI + ceil(2(K-1)/K rho), through the one-hot K
            phi = M.new_int_var(0, phi_max, f"phi{j}")
            ar = M.new_int_var(0, AR_dom, f"AR{j}")
            arv = _volume_time(M, j, phi, phi_max, pq_u, y, big, RS, AR_dom)
            for k in range(Kmax + 1):
                lit = Kis[j, k]
                if k <= 1:
                    M.add(phi == phiI).only_enforce_if(lit)
                    M.add(ar == arv).only_enforce_if(lit)
                else:
                    M.add(k * phi >= k * phiI + 2 * (k - 1) * rho).only_enforce_if(lit)
                    M.add(k * phi <= k * phiI + 2 * (k - 1) * rho + k - 1).only_enforce_if(lit)
                    M.add(ar == arv + 2 * (k - 1) * rlat).only_enforce_if(lit)
            AR[j] = ar
            if kind_cost and wp > 0 and Kmax > 1:
                rb = M.new_int_var(0, (Kmax - 1) * sum(pq_u), f"ringbytes{j}")
                for k in range(Kmax + 1):
                    M.add(rb == max(k - 1, 0) * Pq[j]).only_enforce_if(Kis[j, k])
                ring_bytes.append(rb)
    fm.set(AR=AR, ring_bytes=ring_bytes)


def _estimate(M, fm) -> None:
    """T_est: the period tau_r, the round trip Q_0, the drains, T >= every (replica, stage) term."""
    (AR, FPt, N, Q, Q0_max, R, T_ub, admissible, c, ctot, ec, ef, f, g, gpipe, is_s, lb_units, ls, m, tau_max, x_max,
     xs) = fm.read(
        "AR FPt N Q Q0_max R T_ub admissible c ctot ec ef f g gpipe is_s lb_units ls m tau_max x_max xs")
    T = M.new_int_var(0, T_ub, "T")
    terms = []
    taus = []
    typed = fm.typed
    for r in range(R):
        _checkpoint(M, fm)
        xl = [xs[r][k] + ls[r][k] for k in range(Q - 1)]
        qrt0 = M.new_int_var(0, Q0_max, f"Q{r}_0")  # the round trip from stage 0
        if typed:  # GPU types: replica r's own per-stage figures (_typed_compute)
            f, g, c = fm.tf[r], fm.tg[r], fm.tc[r]
            M.add(qrt0 == sum(c) + 2 * sum(xl))
        else:
            M.add(qrt0 == ctot - ec[0] + 2 * sum(xl))
        if gpipe and fm.spec >= 3:
            # SPEC v3 (e): a gpipe-shaped flush; stage j's backward phase waits only for the
            # stages and boundaries downstream of it: tau_{r,j} = alpha_r + beta_{r,j}
            a = M.new_int_var(0, max(FPt[N], x_max), f"alpha{r}")
            for e in f + [xs[r][k] for k in range(Q - 1)]:
                M.add(a >= e)
            for j in range(Q):
                be = M.new_int_var(-2, max(ctot, x_max), f"beta{r}_{j}")
                for e in g[j:] + [xs[r][k] for k in range(j, Q - 1)]:
                    M.add(be >= e)
                tau = M.new_int_var(-2, tau_max, f"tau{r}_{j}")
                M.add(tau == a + be)
                taus.append(tau)
                drain = (sum(g[:j]) if typed else (ec[j] - ef[j])) + sum(xl[:j])
                terms.append(((m - 1) * tau + qrt0 - drain + AR[j], fm.used[j]))
            continue
        tau = M.new_int_var(-2, tau_max, f"tau{r}")  # a rounded g_j may be -2 for a compute-free stage
        if gpipe:
            a = M.new_int_var(0, max(FPt[N], x_max), f"alpha{r}")
            be = M.new_int_var(-2, max(ctot, x_max), f"beta{r}")
            for e in f + [xs[r][k] for k in range(Q - 1)]:
                M.add(a >= e)
            for e in g + [xs[r][k] for k in range(Q - 1)]:
                M.add(be >= e)
            M.add(tau == a + be)
        else:
            for e in c + [xs[r][k] for k in range(Q - 1)]:
                M.add(tau >= e)
            # Little's law on every window [j, k] whose first stage holds fewer than m
            # micro-batches (SPEC 7 v2): then w_j = S - j, w_k = S - k and the window holds
            # k - j + 1 of them, so (k - j + 1) tau >= W_jk, active when k < S < j + m
            pre = [0]  # one-way communication sum_{b<k} (x_b + l_b), as expressions
            for k in range(Q - 1):
                pre.append(pre[-1] + xl[k])
            for j in range(Q):
                for k in range(j, Q):
                    live = [is_s[S] for S in admissible if k < S < j + m]
                    if not live:
                        continue
                    act = M.new_bool_var(f"win{r}_{j}_{k}")
                    M.add(act == sum(live))  # is_s is one-hot
                    window = sum(c[j:k + 1]) if typed else ec[k + 1] - ec[j]
                    M.add((k - j + 1) * tau >= window + 2 * (pre[k] - pre[j])).only_enforce_if(act)
        taus.append(tau)
        for j in range(Q):
            drain = (sum(g[:j]) if typed else (ec[j] - ef[j])) + sum(xl[:j])
            terms.append((m - 1) * tau + qrt0 - drain + AR[j])
    for e in terms:  # T >= every (replica, stage) term: T = their max at any optimum
        if isinstance(e, tuple):  # (v3 gpipe) the terms of used stages only
            M.add(T >= e[0]).only_enforce_if(e[1])
        else:
            M.add(T >= e)
    for S, v in is_s.items():  # valid lower bounds per stage count (cuts)
        if lb_units[S] > 0:
            M.add(T >= lb_units[S]).only_enforce_if(v)
    fm.set(T=T, taus=taus)


def _objective(M, fm) -> None:
    """Objective: T (time) or T x the price of the GPUs used + WAN bytes (cost), and its rounding bound."""
    (A, D, E_abs, Q, R, T, T_ub, b, crossing, domains, kind_cost, lb_min, m, prices, quantum, rel_p, ring_bytes, shape,
     slots, t, unit, wp) = fm.read(
        "A D E_abs Q R T T_ub b crossing domains kind_cost lb_min m prices quantum rel_p ring_bytes shape "
        "slots t unit wp")
    if kind_cost:
        cap_total = {d: slots[domains[d]] for d in range(D)}
        pmax = max(prices) if prices else 0.0
        # prices per stage (t GPUs) as integers: exact with the smallest power of ten that makes
        # them whole (<= 1e4), else rounded with the dearest stage at ~1e4-1e5
        PS = None
        for k in range(5):
            if all(abs(t * pr * 10 ** k - round(t * pr * 10 ** k)) <= 1e-9 * max(1.0, t * pr * 10 ** k)
                   for pr in prices):
                PS = float(10 ** k)
                break
        if PS is None:
            PS = _pow10_floor(1e5 / (t * pmax)) if pmax > 0 else 1.0
        OS = lambda PS: 3600.0 * PS / unit  # objective integers per currency
        CCf = lambda PS: 2 * A * m * wp / 1e9 * OS(PS)  # per crossing boundary (both ways, m micro-batches)
        CRf = lambda PS: 2 * BYTES_PER_PARAM_GRAD * quantum * wp / 1e9 * OS(PS)  # per (K-1) x quantum
        psum_max = lambda PS: sum(round(t * prices[d] * PS) * cap_total[d] for d in range(D))
        pint = [int(round(t * prices[d] * PS)) for d in range(D)]
        pmx = max(1, psum_max(PS))
        if T_ub * pmx > INT_SAFE:
            raise ValueError(f"shape {shape}: cost figures overflow 64-bit integers")
        # T x (price of the used GPUs) = sum over (replica, stage, domain) of price_d * (T if placed there)
        TP = []
        for d in range(D):
            if pint[d] == 0:
                continue
            for r in range(R):
                for j in range(Q):
                    z = M.new_int_var(0, T_ub, f"Tz{r}_{j}_{d}")
                    M.add(z == T).only_enforce_if(b[r][j][d])
                    M.add(z == 0).only_enforce_if(~b[r][j][d])
                    TP.append(pint[d] * z)
        TP = sum(TP)
        CC, CR = int(round(CCf(PS))), int(round(CRf(PS)))
        obj = TP + (CC * sum(crossing) if crossing else 0) + (CR * sum(ring_bytes) if ring_bytes else 0)
        obj_scale = OS(PS)
        # relative rounding: T (E_abs units over T >= the smallest stage bound), prices, WAN coefficients
        T_lb = max(1e-300, lb_min / unit)
        rel = E_abs / T_lb + rel_p
        pos_p = [d for d in range(D) if pint[d] > 0]
        rel += max([abs(pint[d] - t * prices[d] * PS) / (t * prices[d] * PS) for d in pos_p] or [0.0])
        for exact, rounded in ((CCf(PS), CC), (CRf(PS), CR) if ring_bytes else (0.0, 0)):
            if exact > 0:
                rel += abs(rounded - exact) / exact
        if ring_bytes:
            rel += rel_p
        err_abs, err_rel = 0.0, 1.01 * rel
    else:
        obj = T
        obj_scale = 1.0 / unit
        err_abs, err_rel = E_abs * unit, rel_p
    fm.set(obj=obj, obj_scale=obj_scale, err_abs=err_abs, err_rel=err_rel)


# -- SPEC v3 (a)-(d): directed resources, uplinks, processor-shared syncs ---------------------
def _transfer_resources(instance, route, src: str, dst: str) -> list[int]:
    """The resources (SPEC v3, :class:`planner.problem.network.Resources` ids) a transfer from
    ``src`` to ``dst`` along ``route`` uses: each link in its direction (link i from its a end
    is 2 i, from its b end 2 i + 1), the uplink out of ``src`` (2 L + d) and into ``dst``
    (2 L + D + d) where they have one."""
    L, idx = len(instance.links), instance.domain_index
    out, cur = [], src
    for i in route.links:
        link = instance.links[i]
        out.append(2 * i + (cur != link.a))
        cur = link.b if cur == link.a else link.a
    if instance.domain(src).uplink_gbps is not None:
        out.append(2 * L + idx[src])
    if instance.domain(dst).uplink_gbps is not None:
        out.append(2 * L + len(idx) + idx[dst])
    return out


def _reverse(instance, x: int) -> int:
    """The resource the same transfer reversed uses instead of ``x`` (the other direction of a
    link; the uplink into a domain for the one out of it, and back)."""
    L, D = len(instance.links), len(instance.domains)
    if x < 2 * L:
        return x ^ 1
    return x + D if x < 2 * L + D else x - D


def _capacity(instance, x: int) -> float:
    """Bytes/s of resource ``x``: a link's bandwidth each way, a domain's uplink."""
    L, D = len(instance.links), len(instance.domains)
    if x < 2 * L:
        return instance.links[x // 2].bandwidth_gbps * GBPS
    return instance.domains[(x - 2 * L) % D].uplink_gbps * GBPS


def _sync_tables_v3(fm, G_q: float) -> None:
    """SPEC v3 gradient syncs: the intra part with phi(n) of the sync kind; the stage volumes
    V_j = phi(K_j) G_j as integers Vv_j (``vbytes`` bytes each: exact, through L_K =
    lcm(2..Kmax) for rings); every hop's resources; and per resource q the time per Vv unit
    num_q / den_q (units), within rounding / 4."""
    D, Kmax, Q, R, RS, intra_bw, t, unit, routes, domains, instance, p_max, rounding, sync = fm.read(
        "D Kmax Q R RS intra_bw t unit routes domains instance p_max rounding sync")
    rb = sync == "reduce_broadcast"
    phi = (lambda n: 2.0) if rb else (lambda n: 2 * (n - 1) / n)
    HT = [[int(round(phi(n) * (G_q / t) / intra_bw[d] / unit * RS)) if n > 1 else 0
           for n in range(R + 1)] for d in range(D)]
    LK = 1 if rb else math.lcm(*range(1, Kmax + 1))
    vfac = [0] * (Kmax + 1)  # Vv_j = vfac[K] Pq_j
    for k in range(2, Kmax + 1):
        vfac[k] = 1 if rb else (k - 1) * (LK // k)
    vbytes = 2 * G_q / LK  # bytes of one Vv unit
    Vmax = max(vfac) * p_max
    hop_res = {(a, e): _transfer_resources(instance, rt, domains[a], domains[e]) for (a, e), rt in routes.items()}
    ring_res = sorted({x for ids in hop_res.values() for x in ids})
    num, den = {}, {}
    for x in ring_res:
        kappa = vbytes / _capacity(instance, x) / unit  # units per Vv unit
        d_ = 1
        while kappa * d_ < 2.0 / rounding:
            d_ *= 10
        num[x], den[x] = max(1, int(round(kappa * d_))), d_
    Umax_ring = Q * Kmax if Kmax > 1 else 0
    cross_max = max([0] + [int(math.ceil(num[x] * Umax_ring * Vmax / den[x])) for x in ring_res])
    fm.set(HT=HT, vfac=vfac, Vmax=Vmax, hop_res=hop_res, ring_res=ring_res, num=num, den=den, cross_max=cross_max)


def _pipeline_transfers_v3(M, fm) -> None:
    """Communication (SPEC v3 (a)-(c)): boundary k of replica r between domains d -> e has a
    forward channel on the resources of route(d, e) in its direction (uplinks included) and a
    backward channel on their reverses; n(q) = max(n_F(q), n_B(q)) when the schedule is
    gpipe-shaped, else n_F(q) + n_B(q); x_{r,k} = max(intra time, A n(q) / cap(q) over the
    resources of either channel); l_{r,k} the route's latency."""
    (CROSS, LATP, Q, R, ST, Umax, W, XIN, allowed, dom, kind_cost, lat_max, pipe_links, res, wp, x_max,
     gpipe_shaped, instance) = fm.read(
        "CROSS LATP Q R ST Umax W XIN allowed dom kind_cost lat_max pipe_links res wp x_max gpipe_shaped instance")
    tab_F = {x: [0] * (W * W) for x in pipe_links}
    tab_B = {x: [0] * (W * W) for x in pipe_links}
    for (d, e), ids in res.items():
        for x in ids:
            tab_F[x][d * W + e] = 1
            tab_B[_reverse(instance, x)][d * W + e] = 1
    xs, ls = [[None] * max(Q - 1, 0) for _ in range(R)], [[None] * max(Q - 1, 0) for _ in range(R)]
    crossing, uF, uB, uAny = [], {}, {}, {}
    for r in range(R):
        _checkpoint(M, fm)
        for k in range(Q - 1):
            pidx, xin, ls[r][k] = _boundary_pair(M, r, k, allowed, W, dom, XIN, LATP, lat_max,
                                                 CROSS if kind_cost and wp > 0 else None, crossing)
            for x in pipe_links:
                for tab, u, nm in ((tab_F, uF, "F"), (tab_B, uB, "B")):
                    if any(tab[x]):
                        u[r, k, x] = M.new_bool_var(f"use{nm}{r}_{k}_{x}")
                        M.add_element(pidx, tab[x], u[r, k, x])
                either = [u[r, k, x] for u in (uF, uB) if (r, k, x) in u]
                if either:
                    uAny[r, k, x] = M.new_bool_var(f"use{r}_{k}_{x}")
                    M.add_max_equality(uAny[r, k, x], either)
            xs[r][k] = xin
    share = {}
    for x in pipe_links:
        nF = sum(uF[r, k, x] for r in range(R) for k in range(Q - 1) if (r, k, x) in uF)
        nB = sum(uB[r, k, x] for r in range(R) for k in range(Q - 1) if (r, k, x) in uB)
        n_x = M.new_int_var(0, Umax, f"users{x}")
        if gpipe_shaped:
            a, b_ = M.new_int_var(0, Umax, f"usersF{x}"), M.new_int_var(0, Umax, f"usersB{x}")
            M.add(a == nF)
            M.add(b_ == nB)
            M.add_max_equality(n_x, [a, b_])
        else:
            M.add(n_x == nF + nB)
        share[x] = M.new_int_var(0, ST[x][-1], f"share{x}")
        M.add_element(n_x, ST[x], share[x])
    for r in range(R):
        for k in range(Q - 1):
            terms = [xs[r][k]]
            for x in pipe_links:
                if (r, k, x) not in uAny:
                    continue
                z = M.new_int_var(0, ST[x][-1], f"xl{r}_{k}_{x}")
                M.add(z == share[x]).only_enforce_if(uAny[r, k, x])
                M.add(z == 0).only_enforce_if(~uAny[r, k, x])
                terms.append(z)
            xv = M.new_int_var(0, x_max, f"x{r}_{k}")
            M.add_max_equality(xv, terms)
            xs[r][k] = xv
    fm.set(xs=xs, ls=ls, crossing=crossing)


def _gradient_sync_v3(M, fm) -> None:
    """Gradient synchronisation (SPEC v3 (a), (d)): AR_j = intra part + cross part +
    2 (K_j - 1) x the largest hop latency.  Every (stage, hop) is a user of each resource its
    hop uses, with its stage's volume V_j; processor sharing gives stage j on resource q the
    time sum_i n_{i,q} min(V_i, V_j) / cap(q) (n_{i,q} the hops of stage i on q), and its
    cross part is the largest over the resources it uses (exact: mins of integer volumes,
    coefficients within rounding / 4)."""
    (D, HT, Kmax, N, Q, R, RS, b, big, kind_cost, lat_max, phiI_max, pq_u, q, routes, wp, vfac, Vmax,
     hop_res, ring_res, num, den) = fm.read(
        "D HT Kmax N Q R RS b big kind_cost lat_max phiI_max pq_u q routes wp vfac Vmax hop_res ring_res num den")
    AR = [0] * Q
    ring_bytes = []
    if R > 1:
        y, Pq, h, Kis, hops = _ring_members(M, fm)
        # the stage volumes V_j (Vv units) and their pairwise minima
        V = []
        for j in range(Q):
            v = M.new_int_var(0, Vmax, f"V{j}")
            for k in range(Kmax + 1):
                M.add(v == vfac[k] * Pq[j]).only_enforce_if(Kis[j, k])
            V.append(v)
        mv = {}
        for i in range(Q):
            mv[i, i] = V[i]
            for j in range(i + 1, Q):
                z = M.new_int_var(0, Vmax, f"mv{i}_{j}")
                M.add_min_equality(z, [V[i], V[j]])
                mv[i, j] = mv[j, i] = z
        # ge[i, x][k-1]: stage i's sync has >= k hops on resource x (lower-bounded literals)
        ge = {}
        on = {x: [(a, e) for (a, e) in hops if (a, e) in routes and x in hop_res[a, e]] for x in ring_res}
        for x in ring_res:
            top = min(Kmax, len(on[x]))
            for i in range(Q):
                n = sum(h[i, a, e] for (a, e) in on[x])
                lits = []
                for k in range(1, top + 1):
                    lit = M.new_bool_var(f"ge{i}_{x}_{k}")
                    M.add(n <= k - 1).only_enforce_if(~lit)
                    lits.append(lit)
                ge[i, x] = lits
        cross = []
        for j in range(Q):
            _checkpoint(M, fm)
            cj = M.new_int_var(0, 2 * big, f"cross{j}")
            for x in ring_res:
                if not ge[j, x]:
                    continue
                zs = []
                for i in range(Q):
                    z = M.new_int_var(0, len(ge[i, x]) * Vmax, f"ps{i}_{j}_{x}")
                    for k, lit in enumerate(ge[i, x], 1):
                        M.add(z >= k * mv[i, j]).only_enforce_if(lit)
                    zs.append(z)
                M.add(den[x] * cj >= num[x] * sum(zs)).only_enforce_if(ge[j, x][0])
            cross.append(cj)
        AR_dom = min(big, int(math.ceil(sum(pq_u) * phiI_max / RS))) + 2 * big + 2 * (Kmax - 1) * lat_max
        for j in range(Q):
            _checkpoint(M, fm)
            phiI = _intra_ring(M, b, j, R, D, HT, phiI_max)  # the slowest domain's ring inside it
            rlat = _ring_latency(M, j, hops, routes, h, q, lat_max)
            arv = _volume_time(M, j, phiI, phiI_max, pq_u, y, big, RS, AR_dom)
            ar = M.new_int_var(0, AR_dom, f"AR{j}")
            for k in range(Kmax + 1):
                lit = Kis[j, k]
                if k <= 1:
                    M.add(ar == arv).only_enforce_if(lit)
                else:
                    M.add(ar == arv + cross[j] + 2 * (k - 1) * rlat).only_enforce_if(lit)
            AR[j] = ar
            if kind_cost and wp > 0 and Kmax > 1:
                rbv = M.new_int_var(0, (Kmax - 1) * sum(pq_u), f"ringbytes{j}")
                for k in range(Kmax + 1):
                    M.add(rbv == max(k - 1, 0) * Pq[j]).only_enforce_if(Kis[j, k])
                ring_bytes.append(rbv)
    fm.set(AR=AR, ring_bytes=ring_bytes)


def build(instance, shape: Shape, objective: str | None = None, forbid=(), require=(),
          space: PlanSpace | None = None, ref_s: float | None = None, cutoff: float | None = None,
          stage_bounds: dict[int, float] | None = None, rounding: float = 1e-4, spec: int | None = None,
          max_size: int | None = None) -> CpsatModel:
    """The CP-SAT model of ``instance`` for ``shape`` (``shape.stages`` = 0: free).

    ``objective`` ``"time"`` (T_est, seconds) or ``"cost"`` (currency;
    default: the instance's); ``forbid`` domains host nothing, ``require``
    domains host at least one stage; ``ref_s`` overrides the reference
    iteration time (s) that sets the time unit (default: the shape's
    smallest stage bound, so the rounding bound holds relative to every
    plan); ``cutoff`` (s or currency) keeps only plans whose T_est (cost)
    may be <= it (rounding included); ``stage_bounds`` maps each admissible
    number of stages to a lower bound on T_est in seconds (default:
    :func:`planner.solvers.shapesearch.stage_bounds`; other stage counts are excluded);
    ``rounding`` the largest rounding error allowed relative to the
    reference.  Plans slower than a greedily built plan of the shape are
    excluded (T <= its T_est, which never cuts off the optimum).

    ``spec``: the SPEC version modelled (default
    :data:`~planner.problem.specversion.DEFAULT_SPEC`; see the module docstring).
    ``max_size``: the most variables plus constraints the model may have (None:
    any); a build that passes it stops with :class:`ModelTooLarge`.

    Raises ValueError when the shape has no room (no stage slot, no
    admissible stage count) and NotImplementedError for models whose units
    send unequal boundary bytes (or, under v3 with replicas, have a unit
    without parameters).
    """
    fm = _Formulation(instance=instance, shape=shape, objective=objective, forbid=forbid, require=require,
                      space=space, ref_s=ref_s, cutoff=cutoff, stage_bounds=stage_bounds, rounding=rounding,
                      spec=check_spec(spec), max_size=max_size)
    # the data: sets, the rounding budget and the time unit, the tables every group reads
    _sets(fm)
    _rounding_budget(fm)
    _time_unit(fm)
    _compute_tables(fm)
    _memory_tables(fm)
    _route_tables(fm)
    _sync_tables(fm)
    _upper_bound(fm)
    stop.checkpoint()  # a large shape builds for seconds: each group stops here when out of time
    # the model, one group of variables and constraints at a time
    M = cp_model.CpModel()
    _partition(M, fm)
    if not fm.MEMK:  # (GPU types with unequal memory: per (replica, stage) in _typed_compute)
        _memory(M, fm)
    _placement(M, fm)
    if fm.typed:
        _typed_compute(M, fm)
    if fm.spec < 3:
        _pipeline_transfers(M, fm)
        _gradient_sync(M, fm)
    else:
        _pipeline_transfers_v3(M, fm)
        _gradient_sync_v3(M, fm)
    _estimate(M, fm)
    _objective(M, fm)
    _checkpoint(M, fm)
    (objective, shape, Q, N, m, domains, unit, obj_scale, err_abs, err_rel, admissible, cut, used, is_s, b, dom, T,
     obj, taus, xs, ls, AR, quantum, RS, E_abs, T_ub, ec) = (
        fm.objective, fm.shape, fm.Q, fm.N, fm.m, fm.domains, fm.unit, fm.obj_scale, fm.err_abs, fm.err_rel,
        fm.admissible, fm.cut, fm.used, fm.is_s, fm.b, fm.dom, fm.T, fm.obj, fm.taus, fm.xs, fm.ls, fm.AR,
        fm.quantum, fm.RS, fm.E_abs, fm.T_ub, fm.ec)
    cm = CpsatModel(model=M, shape=shape, objective=objective, Q=Q, N=N, m=m, domains=domains, unit_s=unit,
                    obj_scale=obj_scale, err_abs=err_abs, err_rel=err_rel, admissible=admissible, cut=cut,
                    used=used, is_s=is_s, b=b, dom=dom, T=T, obj_expr=obj,
                    extra=dict(tau=taus, x=xs, l=ls, AR=AR, param_quantum=quantum, RS=RS, E_abs_units=E_abs,
                               T_ub=T_ub, ec=ec))
    if cutoff is not None and math.isfinite(cutoff):
        M.add(obj <= cm.cutoff_int(cutoff))
    M.minimize(obj)
    return cm
