"""Hand a Pyomo MILP to HiGHS as a matrix.

Pyomo's APPSI interface passes a model to HiGHS row by row through Python;
on the planner's large models (gcp-16: ~66k rows) that hand-over took 3.7-7 s
per shape, longer than the solve.  :class:`MatrixHighs` compiles the model
with Pyomo's standard-form compiler (sparse matrices, ~1.3 s there) and
passes them to highspy in one call.  The Pyomo model stays the source of
truth: users inspect and extend it as before; this only changes how it
reaches the solver.

Example
-------
>>> res = MatrixHighs(time_limit=10, seed=0).solve(model)        # doctest: +SKIP
>>> res.status, res.objective, res.bound
('optimal', 3.2, 3.2)
>>> res.load()           # set the Pyomo variables to the solution
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from . import stop

#: HiGHS options for every solve.  ``presolve_rule_off = 8192`` switches off presolve rule 13,
#: "parallel rows and columns": in highspy 1.14 it returned a sub-optimal plan as optimal (and
#: so an invalid bound) on a tiny two-replica instance whose replicas give parallel columns
#: (tests/test_milp.py::test_valid_inequalities_and_cutoff_keep_the_optimum found it; HiGHS
#: issue #1634 and kin).  highspy >= 1.15 cannot be used next to ortools (see pyproject.toml).
HIGHS_OPTIONS = {"output_flag": False, "presolve_rule_off": 1 << 13}


@dataclass
class MatrixResult:
    """Outcome of one solve: ``status`` is ``"optimal"``, ``"infeasible"``,
    ``"time_limit"`` or ``"other"``; ``objective`` the best feasible value (None:
    none found), ``bound`` the proven lower bound (minimisation; None: none); ``started``
    whether the partial start was completed into a MIP start."""
    status: str
    objective: float | None
    bound: float | None
    started: bool = False  # the partial start was completed into a MIP start
    checks: int = 0  # the MIP solver's limit checks (interrupt callbacks): its deterministic work count
    size: int = 0  # the matrix's rows + columns + nonzeros
    work: float = 0.0  # deterministic seconds spent (:func:`highs_work`), the model's hand-over included
    cut: bool = False  # stopped by the work limit
    _columns: list = field(default_factory=list, repr=False)
    _values: np.ndarray | None = field(default=None, repr=False)

    def load(self) -> None:
        """Set the model's (free) variables to the solution."""
        if self._values is None:
            raise RuntimeError("no solution to load")
        for v, x in zip(self._columns, self._values):
            v.set_value(float(round(x)) if v.is_integer() else float(x), skip_validation=True)


def standard_form_lp(sf):
    """A ``highspy.HighsLp`` of Pyomo's standard form ``sf`` (``LinearStandardFormCompiler().write(M,
    mixed_form=True)``): costs and offset, column bounds, row bounds, the matrix by columns; no
    integrality (the caller sets it).

    >>> lp = standard_form_lp(LinearStandardFormCompiler().write(M, mixed_form=True))   # doctest: +SKIP
    """
    import highspy

    cols, A = sf.columns, sf.A.tocsc()
    n = len(cols)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, A.shape[0]
    lp.col_cost_ = np.asarray(sf.c.toarray()).ravel() if n else np.zeros(0)
    lp.offset_ = float(sf.c_offset[0]) if len(sf.c_offset) else 0.0
    inf = highspy.kHighsInf
    lp.col_lower_ = np.array([-inf if v.lb is None else v.lb for v in cols], dtype=float)
    lp.col_upper_ = np.array([inf if v.ub is None else v.ub for v in cols], dtype=float)
    kinds = np.array([row.bound_type for row in sf.rows], dtype=int)
    rhs = np.asarray(sf.rhs, dtype=float)
    lp.row_lower_ = np.where(kinds == 1, -inf, rhs)
    lp.row_upper_ = np.where(kinds == -1, inf, rhs)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(float)
    return lp


def highs_work(size: int, iterations: int = 0, checks: int = 0) -> float:
    """Deterministic seconds of HiGHS work on a matrix of ``size`` (rows + columns +
    nonzeros): the hand-over (Pyomo's building and compiler, ``passModel``: linear in
    the size), then each simplex iteration of a pure LP and each of the MIP solver's
    limit checks (its interrupt callback: at every cut round, heuristic and node, the
    only count highspy 1.14 reports during a MIP, whose simplex iterations it reports
    only at the end), in proportion to the size.  The constants
    (:mod:`planner.solvers.workunits`) make one deterministic second about one second
    of an idle machine's core shared as in ``auto``.

    >>> round(highs_work(100_000, iterations=0), 2)              # doctest: +SKIP
    1.1
    """
    from .workunits import HIGHS_BUILD_PER_S, HIGHS_CHECK_PER_S, HIGHS_ITER_PER_S

    return size / HIGHS_BUILD_PER_S + size * (iterations / HIGHS_ITER_PER_S + checks / HIGHS_CHECK_PER_S)


class MatrixHighs:
    """HiGHS on a Pyomo model's matrix; ``time_limit`` seconds (None: none),
    ``seed``, ``threads``, relative ``gap`` (None: HiGHS's default).  Fixed
    variables are constants.  ``work_limit``: deterministic seconds
    (:func:`highs_work`: a pure LP's simplex iterations and the MIP's limit checks, weighted by
    the matrix's size),
    checked in HiGHS's interrupt callbacks, so that with one thread a seed gives the
    same result whatever the load (when ``time_limit`` is not reached first)."""

    def __init__(self, time_limit: float | None = None, seed: int = 0, threads: int = 1, gap: float | None = None,
                 work_limit: float | None = None):
        self.work_limit = work_limit
        self.options = {**HIGHS_OPTIONS, "random_seed": int(seed), "threads": int(threads), "mip_abs_gap": 0.0}
        if time_limit is not None:
            self.options["time_limit"] = max(0.01, float(time_limit))
        if gap is not None:
            self.options["mip_rel_gap"] = float(gap)

    def solve(self, M, start: dict | None = None) -> MatrixResult:
        """Solve ``M``.  ``start`` maps some of its variables to values (a partial plan):
        HiGHS completes it with those variables fixed and keeps the completion as the
        MIP start (``started`` in the result says whether that worked)."""
        import highspy
        from pyomo.common.errors import InfeasibleConstraintException
        from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

        t0 = time.perf_counter()
        try:
            sf = LinearStandardFormCompiler().write(M, mixed_form=True)
        except InfeasibleConstraintException:  # a row without free variables is violated
            return MatrixResult("infeasible", None, None)
        cols = sf.columns
        lp = standard_form_lp(sf)
        lower, upper = np.asarray(lp.col_lower_), np.asarray(lp.col_upper_)
        integer = [v.is_integer() for v in cols]
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in integer]
        h = highspy.Highs()
        for k, val in self.options.items():
            h.setOptionValue(k, val)
        h.passModel(lp)
        size = int(lp.num_col_ + lp.num_row_ + len(lp.a_matrix_.value_))
        count = {"lp": 0, "checks": 0, "cut": False}
        limit = self.work_limit
        mip_cb = highspy.cb.HighsCallbackType.kCallbackMipInterrupt

        def interrupt(e):  # Ctrl-C or the memory cap (planner.solvers.stop): stop with the incumbent
            if e.callback_type == mip_cb:
                count["checks"] += 1
            else:  # a pure LP's simplex: its iterations (-1 inside a MIP, not counted)
                count["lp"] = max(count["lp"], int(e.data_out.simplex_iteration_count))
            if limit is not None:
                if highs_work(size, count["lp"], count["checks"]) >= limit:
                    count["cut"] = True
                    e.interrupt()
                    return
            if stop.requested():
                e.interrupt()

        h.cbMipInterrupt += interrupt
        h.cbSimplexInterrupt += interrupt
        h.cbIpmInterrupt += interrupt

        def time_left():  # the compilation and the start count against the limit
            if "time_limit" in self.options:
                h.setOptionValue("time_limit", max(0.01, self.options["time_limit"] - (time.perf_counter() - t0)))

        time_left()
        started = False
        if start:
            pos = {id(v): i for i, v in enumerate(cols)}
            given = [(pos[id(v)], float(x)) for v, x in start.items() if id(v) in pos]
            if given:
                idx = np.array([i for i, _ in given], dtype=np.int32)
                val = np.array([x for _, x in given], dtype=float)
                h.changeColsBounds(len(idx), idx, val, val)
                h.run()
                if h.getInfo().primal_solution_status == 2:
                    sol = h.getSolution()
                    started = True
                h.changeColsBounds(len(idx), idx, lower[idx], upper[idx])
                if started:
                    h.setSolution(sol)
                time_left()
        if limit is not None and highs_work(size, count["lp"], count["checks"]) >= limit:
            count["cut"] = True  # nothing left for the solve itself
        else:
            h.run()
        ms = h.getModelStatus()
        info = h.getInfo()
        S = highspy.HighsModelStatus
        status = {S.kOptimal: "optimal", S.kInfeasible: "infeasible", S.kTimeLimit: "time_limit"}.get(ms, "other")
        if count["cut"] and status == "other":
            status = "time_limit"  # out of deterministic time
        has_sol = info.primal_solution_status == 2  # feasible
        objective = float(info.objective_function_value) if has_sol else None
        mip = any(integer)
        if status == "optimal" and objective is not None:
            bound = float(info.mip_dual_bound) if mip else objective
        elif mip:
            bound = float(info.mip_dual_bound)
        else:
            bound = None
        if bound is not None and not math.isfinite(bound):
            bound = None
        values = np.asarray(h.getSolution().col_value, dtype=float) if has_sol else None
        work = highs_work(size, count["lp"], count["checks"])
        return MatrixResult(status, objective, bound, started, count["checks"], size, work,
                            count["cut"], list(cols), values)
