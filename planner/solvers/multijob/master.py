"""The column master of several jobs (SPEC 10): pick at most one column per job.

A *column* is one job's allocation with its plan and figures (see
:class:`planner.solvers.multijob.columns.Column`): ``job`` (index), ``gpus``
(domain -> GPUs), ``link_share`` (link key "a|b" -> share in [0, 1]),
``uplink_share`` (domain -> share), ``rho`` (throughput over the job's
reference, in [0, 1]), ``completion_s`` (seconds), ``cost`` (currency, the
whole job) and ``deadline_met``.  The master chooses binary ``x_k`` under

* one column per job: ``sum_{k of j} x_k = 1`` (``<= 1`` under ``deadline``:
  a job may be left out),
* GPUs: ``sum_k g_{k,d} x_k <= gpus_d``; links: ``sum_k beta_{k,l} x_k <= 1``;
  uplinks: ``sum_k u_{k,d} x_k <= 1``,

and the objective of SPEC 10 (``maxmin``: max t with ``t <= sum_k rho_k / w_j
x_k`` for every job; ``weighted``: max ``sum w_j rho_k x_k``; ``deadline``: max
the weight of the admitted columns meeting their deadline (a column missing its
deadline may still be admitted; it counts 0); ``cost``: min ``sum cost_k x_k``
over columns meeting their deadline; ``makespan``: min m with ``m >= sum_k C_k
x_k`` for every job), then, the first value held, the tie-break ``max sum_j w_j
rho_j`` (every objective but ``weighted``).  Quotas and allowed domains are the
columns' business: the caller never makes a column breaking them.

Two formulations, cross-checked in the tests: Pyomo + HiGHS
(:func:`solve_master`, with the LP relaxation's duals) and CP-SAT on the same
columns scaled to integers (:func:`solve_master_cpsat`).

Example
-------
>>> res = solve_master(columns, weights=[1, 1], capacity=cap, objective="maxmin")   # doctest: +SKIP
>>> res.choice            # column index per job (None: not admitted)
[3, 0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pyomo.environ as pyo

from ..highs import HIGHS_OPTIONS, MatrixHighs, standard_form_lp

OBJECTIVES = ("maxmin", "weighted", "deadline", "cost", "makespan")
MAXIMISE = {"maxmin": True, "weighted": True, "deadline": True, "cost": False, "makespan": False}
TIE_TOL = 1e-9  # relative slack kept on the first objective while breaking ties
CPSAT_SCALE = 10 ** 6  # rho, shares and the other figures are integers in units of 1/CPSAT_SCALE


@dataclass(frozen=True)
class Capacity:
    """What the jobs share: GPUs per domain (``gpus``), the link keys (``links``, each
    capacity 1) and the domains with an uplink (``uplinks``, capacity 1 each)."""

    gpus: dict[str, int]
    links: tuple[str, ...]
    uplinks: tuple[str, ...]


@dataclass
class MasterResult:
    """``choice[j]``: the index (into the columns given) of job j's column, None when
    the job is not admitted; ``value``: the first objective; ``tie``: ``sum_j w_j
    rho_j``; ``status``: optimal, time_limit, infeasible or other;
    ``duals`` (LP relaxation only): prices >= 0 of the rows, keyed
    ``("gpu", d)`` (per GPU), ``("link", key)``, ``("uplink", d)``, ``("job", j)``
    (the job's row of the maxmin/makespan objective)."""

    choice: list[int | None]
    value: float | None
    tie: float | None
    status: str
    duals: dict = field(default_factory=dict)
    x: dict = field(default_factory=dict)  # LP relaxation only: column index -> value in [0, 1]


def _column_ok(c, objective: str) -> bool:
    return objective != "cost" or c.deadline_met


def build(columns, weights, capacity: Capacity, objective: str, fix: float | None = None,
          relax: bool = False) -> pyo.ConcreteModel:
    """The Pyomo master over ``columns``.  ``fix``: the first objective held at this
    value (within :data:`TIE_TOL`) while the tie-break ``sum w rho`` is maximised;
    ``relax``: ``x`` continuous in [0, 1] (the LP relaxation)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r} is not one of {OBJECTIVES}")
    J = len(weights)
    K = [k for k, c in enumerate(columns) if _column_ok(c, objective)]
    M = pyo.ConcreteModel("multijob_master")
    M.K = pyo.Set(initialize=K)
    M.x = pyo.Var(M.K, domain=pyo.UnitInterval if relax else pyo.Binary)
    of = {j: [k for k in K if columns[k].job == j] for j in range(J)}

    def one(M, j):
        s = sum(M.x[k] for k in of[j])
        if objective == "deadline":
            return s <= 1 if of[j] else pyo.Constraint.Skip
        return s == 1 if of[j] else pyo.Constraint.Infeasible
    M.one = pyo.Constraint(range(J), rule=one)

    def gpu(M, d):
        terms = [columns[k].gpus.get(d, 0) * M.x[k] for k in K if columns[k].gpus.get(d, 0)]
        return sum(terms) <= capacity.gpus[d] if terms else pyo.Constraint.Skip
    M.gpu = pyo.Constraint(list(capacity.gpus), rule=gpu)

    def share(attr):
        def rule(M, key):
            terms = [getattr(columns[k], attr).get(key, 0.0) * M.x[k] for k in K
                     if getattr(columns[k], attr).get(key, 0.0) > 0]
            return sum(terms) <= 1 if terms else pyo.Constraint.Skip
        return rule
    M.link = pyo.Constraint(list(capacity.links), rule=share("link_share"))
    M.uplink = pyo.Constraint(list(capacity.uplinks), rule=share("uplink_share"))
    tie = sum(weights[columns[k].job] * columns[k].rho * M.x[k] for k in K)
    if objective == "maxmin":
        top = max([c.rho / weights[c.job] for c in columns] + [0.0])
        M.t = pyo.Var(bounds=(0, top))
        M.job = pyo.Constraint(range(J), rule=lambda M, j: M.t <= sum(columns[k].rho / weights[j] * M.x[k]
                                                                      for k in of[j]))
        first = M.t
    elif objective == "weighted":
        first = tie
    elif objective == "deadline":
        first = sum(weights[columns[k].job] * M.x[k] for k in K if columns[k].deadline_met)
    elif objective == "cost":
        first = sum(columns[k].cost * M.x[k] for k in K)
    else:
        top = max([c.completion_s for c in columns] + [0.0])
        M.m = pyo.Var(bounds=(0, top))
        M.job = pyo.Constraint(range(J), rule=lambda M, j: M.m >= sum(columns[k].completion_s * M.x[k]
                                                                      for k in of[j]))
        first = M.m
    if fix is None:
        M.obj = pyo.Objective(expr=first, sense=pyo.maximize if MAXIMISE[objective] else pyo.minimize)
    else:
        slack = TIE_TOL * max(1.0, abs(fix))
        M.hold = pyo.Constraint(expr=first >= fix - slack if MAXIMISE[objective] else first <= fix + slack)
        M.obj = pyo.Objective(expr=tie, sense=pyo.maximize)
    M.first = pyo.Expression(expr=first)
    M._of = of
    return M


def _read(M, J) -> list[int | None]:
    choice: list[int | None] = [None] * J
    for j, ks in M._of.items():
        for k in ks:
            if k in M.K and (M.x[k].value or 0) > 0.5:
                choice[j] = k
    return choice


def solve_master(columns, weights, capacity: Capacity, objective: str, time_limit: float | None = None,
                 seed: int = 0, tie_break: bool = True) -> MasterResult:
    """The master MILP by HiGHS: the first objective, then (``tie_break``) the
    tie-break with the first held.  ``time_limit`` in seconds for each solve."""
    J = len(weights)
    if not columns:
        return MasterResult([None] * J, None, None, "infeasible")
    M = build(columns, weights, capacity, objective)
    res = MatrixHighs(time_limit=time_limit, seed=seed).solve(M)
    if res.objective is None:
        return MasterResult([None] * J, None, None, "infeasible" if res.status == "infeasible" else res.status)
    res.load()
    status = res.status
    choice = _read(M, J)
    value = float(pyo.value(M.first))
    if tie_break and objective != "weighted":
        M2 = build(columns, weights, capacity, objective, fix=value)
        res2 = MatrixHighs(time_limit=time_limit, seed=seed).solve(M2)
        if res2.objective is not None:
            res2.load()
            choice = _read(M2, J)
            value = float(pyo.value(M2.first))
            if res2.status != "optimal":
                status = res2.status
    tie = sum(weights[j] * columns[k].rho for j, k in enumerate(choice) if k is not None)
    return MasterResult(choice, value, tie, status)


def solve_lp(columns, weights, capacity: Capacity, objective: str) -> MasterResult:
    """The LP relaxation of the master's first objective, with the rows' prices:
    ``duals[("gpu", d)]`` what one more GPU of d is worth to the objective (>= 0),
    likewise a link's or an uplink's whole capacity and a job's objective row.
    Its value holds over these columns only (SPEC 10: ``master_lp``, never a bound)."""
    import highspy
    from pyomo.common.errors import InfeasibleConstraintException
    from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

    J = len(weights)
    if not columns:
        return MasterResult([None] * J, None, None, "infeasible")
    M = build(columns, weights, capacity, objective, relax=True)
    try:
        sf = LinearStandardFormCompiler().write(M, mixed_form=True)
    except InfeasibleConstraintException:
        return MasterResult([None] * J, None, None, "infeasible")
    cols = sf.columns
    h = highspy.Highs()
    for k, v in HIGHS_OPTIONS.items():
        h.setOptionValue(k, v)
    h.passModel(standard_form_lp(sf))
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return MasterResult([None] * J, None, None, "infeasible")
    sol = h.getSolution()
    # the compiler minimises (a maximisation's costs negated): a binding row's dual is
    # what one more unit of its right-hand side is worth, up to the sign
    duals = {}
    for row, y in zip(sf.rows, sol.row_dual):
        con = row.constraint
        kind = con.parent_component().local_name
        if kind in ("gpu", "link", "uplink", "job"):
            duals[(kind, con.index())] = abs(float(y))
    value = float(h.getInfo().objective_function_value)
    value = -value if MAXIMISE[objective] else value
    x = dict(zip((id(v) for v in cols), sol.col_value))
    frac = [None] * J
    for j, ks in M._of.items():
        best = max(ks, key=lambda k: x.get(id(M.x[k]), 0.0), default=None) if ks else None
        frac[j] = best
    xs = {k: float(x.get(id(M.x[k]), 0.0)) for k in M.K}
    return MasterResult(frac, value, None, "optimal", duals, {k: v for k, v in xs.items() if v > 1e-9})


def solve_master_cpsat(columns, weights, capacity: Capacity, objective: str, time_limit: float | None = 10.0,
                       seed: int = 0, tie_break: bool = True) -> MasterResult:
    """The same master in CP-SAT, every figure an integer in units of
    1/:data:`CPSAT_SCALE` (rho_k / w_j and completions rounded to the nearest,
    shares rounded up, so a CP-SAT choice is feasible for the Pyomo master too).
    One worker, fixed ``seed``: deterministic."""
    from ortools.sat.python import cp_model

    J, S = len(weights), CPSAT_SCALE
    K = [k for k, c in enumerate(columns) if _column_ok(c, objective)]

    def model(fix=None):
        m = cp_model.CpModel()
        x = {k: m.NewBoolVar(f"x{k}") for k in K}
        of = {j: [k for k in K if columns[k].job == j] for j in range(J)}
        for j in range(J):
            s = sum(x[k] for k in of[j])
            if objective == "deadline":
                m.Add(s <= 1)
            else:
                m.Add(s == 1)
        for d, cap in capacity.gpus.items():
            terms = [(columns[k].gpus.get(d, 0), x[k]) for k in K if columns[k].gpus.get(d, 0)]
            if terms:
                m.Add(sum(a * v for a, v in terms) <= cap)
        for attr, keys in (("link_share", capacity.links), ("uplink_share", capacity.uplinks)):
            for key in keys:
                terms = [(math.ceil(getattr(columns[k], attr).get(key, 0.0) * S - 1e-6), x[k]) for k in K
                         if getattr(columns[k], attr).get(key, 0.0) > 0]
                if terms:
                    m.Add(sum(a * v for a, v in terms) <= S)
        tie = sum(round(weights[columns[k].job] * columns[k].rho * S) * x[k] for k in K)
        if objective == "maxmin":
            t = m.NewIntVar(0, S * 10 ** 3, "t")
            for j in range(J):
                m.Add(t <= sum(round(columns[k].rho / weights[j] * S) * x[k] for k in of[j]))
            first = t
        elif objective == "weighted":
            first = tie
        elif objective == "deadline":
            first = sum(round(weights[columns[k].job] * S) * x[k] for k in K if columns[k].deadline_met)
        elif objective == "cost":
            first = sum(round(columns[k].cost * S / _scale(columns, "cost")) * x[k] for k in K)
        else:
            mk = m.NewIntVar(0, S, "m")
            top = _scale(columns, "completion_s")
            for j in range(J):
                m.Add(mk >= sum(round(columns[k].completion_s * S / top) * x[k] for k in of[j]))
            first = mk
        if fix is None:
            (m.Maximize if MAXIMISE[objective] else m.Minimize)(first)
        else:
            m.Add(first >= fix) if MAXIMISE[objective] else m.Add(first <= fix)
            m.Maximize(tie)
        return m, x, first

    def run(m):
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = int(seed)
        if time_limit is not None:
            solver.parameters.max_time_in_seconds = float(time_limit)
        return solver, solver.Solve(m)

    m, x, first = model()
    solver, st = run(m)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return MasterResult([None] * J, None, None, "infeasible" if st == cp_model.INFEASIBLE else "other")
    status = "optimal" if st == cp_model.OPTIMAL else "time_limit"
    chosen = {k for k in K if solver.Value(x[k])}
    if tie_break and objective != "weighted":
        fixed = int(solver.Value(first))
        m2, x2, _ = model(fixed)
        solver2, st2 = run(m2)
        if st2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            chosen = {k for k in K if solver2.Value(x2[k])}
            if st2 != cp_model.OPTIMAL:
                status = "time_limit"
    choice: list[int | None] = [None] * J
    for k in chosen:
        choice[columns[k].job] = k
    return MasterResult(choice, master_value(columns, weights, choice, objective),
                        sum(weights[j] * columns[k].rho for j, k in enumerate(choice) if k is not None), status)


def _scale(columns, attr) -> float:
    """The largest ``attr`` over the columns (at least 1e-12): CP-SAT's unit for it."""
    return max([getattr(c, attr) for c in columns] + [1e-12])


def master_value(columns, weights, choice, objective: str) -> float | None:
    """The first objective of a choice (one column index or None per job), as the
    Pyomo master counts it; None when a job the objective needs is missing."""
    J = len(weights)
    picked = [None if k is None else columns[k] for k in choice]
    if objective != "deadline" and any(c is None for c in picked):
        return None
    if objective == "maxmin":
        return min(c.rho / weights[j] for j, c in enumerate(picked))
    if objective == "weighted":
        return sum(weights[j] * c.rho for j, c in enumerate(picked))
    if objective == "deadline":
        return sum(weights[j] for j, c in enumerate(picked) if c is not None and c.deadline_met)
    if objective == "cost":
        return sum(c.cost for c in picked) if all(c.deadline_met for c in picked) else None
    return max(c.completion_s for c in picked) if J else 0.0


def fits(columns, choice, capacity: Capacity, tol: float = 1e-9) -> bool:
    """Whether the chosen columns respect every capacity (GPUs, link and uplink shares)."""
    picked = [columns[k] for k in choice if k is not None]
    for d, cap in capacity.gpus.items():
        if sum(c.gpus.get(d, 0) for c in picked) > cap:
            return False
    for attr, keys in (("link_share", capacity.links), ("uplink_share", capacity.uplinks)):
        for key in keys:
            if sum(getattr(c, attr).get(key, 0.0) for c in picked) > 1 + tol:
                return False
    return True
