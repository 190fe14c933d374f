"""Deterministic work units, calibrated to seconds: the one place their constants live.

``auto`` with a seed (and every part with ``deterministic=True``) budgets its parts
in *deterministic seconds*: counts of work that track wall time on this kind of
machine, so that the same command gives the same plan whatever the load.  Each
constant is "units per second" of one process on an idle 2-core machine running
three CPU-bound processes, as ``auto`` does (its own process and two engines);
measured by ``benchmarks/workunits.py`` (in CPU time, so the other users of a
shared machine do not bias them), results in ``benchmarks/results/workunits.md``
(command, commit and the fit's errors there: median 24% per annealing run, 35%
per HiGHS solve, 23% per CP-SAT shape; what matters is that a seed's work is
fixed, and that the budget tracks the clock to within these errors).

* the exact simulation (:func:`sim_seconds`): a fixed cost per call plus a cost
  per stage x micro-batch (the evaluator's event loop; replicas are vectorised);
* HiGHS (:func:`planner.solvers.highs.highs_work`): the model's building and
  hand-over, and the MIP solver's limit checks (its interrupt callbacks, the one
  count highspy 1.14 reports during a MIP), each in proportion to the matrix's
  size (rows + columns + nonzeros);
* CP-SAT: its own deterministic time, :data:`CPSAT_DET_PER_S` of it per second,
  and each model's building by its variables and constraints (:data:`CPSAT_BUILD_PER_S`).

Example
-------
>>> round(sim_seconds(plan), 4)                                   # doctest: +SKIP
0.0093
"""

from __future__ import annotations

#: Provenance: the constants below are from runs of ``benchmarks/workunits.py`` at 80b954e on a
#: loaded machine (that run's file named uncommitted code).  The committed re-run at 7068479
#: (``benchmarks/results/workunits.md``, quiet machine) fits SIM_CALL_S 0.00169, SIM_OPS_PER_S
#: 1.57e5, HIGHS_BUILD_PER_S 8.02e4, HIGHS_CHECK_PER_S 1.56e6, CPSAT_BUILD_PER_S 3.7e4,
#: CPSAT_DET_PER_S 0.179.  They are not adopted: the simulation and CP-SAT figures are within
#: 30% of these, and the refit's HiGHS check rate (4x these) would let HiGHS run 4x longer per
#: deterministic second, while that run's "Check" shows a deterministic ``milp`` already takes
#: 1.0-3.7x its budget in wall time (its shape search's uncounted work).
#: the exact simulation: seconds per call, and stage x micro-batch products per second
SIM_CALL_S = 0.00235
SIM_OPS_PER_S = 154_000.0
#: a local search's candidate move (drawn, checked against the memo), seconds (the fit gives 0: kept
#: small and positive, so that a walk of rejected moves still ends)
MOVE_S = 0.00002
#: HiGHS: matrix size (rows + columns + nonzeros) built and handed over per second; size x simplex
#: iterations of a pure LP per second; size x the MIP solver's limit checks per second.  Not from
#: workunits.md's fit (under a load of 16-20 the wall-clock MILP runs it times made too few solves
#: to fit): the first two from an earlier fit of the same script (77 solves, median error 35%), the
#: third from one probe (402 checks in 7.0 CPU s on aws-multiregion's 10,493-size shape); the file's
#: "Check" table measures the result, and MILP_SEARCH_OVERHEAD below what they leave out
HIGHS_BUILD_PER_S = 90_600.0
HIGHS_ITER_PER_S = 3.91e7
HIGHS_CHECK_PER_S = 4.0e5
#: a deterministic ``milp``'s wall time over its HiGHS work: the shape search's own work (greedy,
#: the shapes' bounds, warm starts, scoring) is not counted; workunits.md's "Check" (7068479): 1.0-2.3
#: on seven instances (3.1 on cost-edwc).  ``auto`` gives the MILP engine its window over this.
MILP_SEARCH_OVERHEAD = 2.5
#: CP-SAT deterministic time per second; its models' building, variables + constraints per second
CPSAT_DET_PER_S = 0.161
CPSAT_BUILD_PER_S = 32_400.0
#: the share of a seeded ``auto``'s time limit its deterministic budgets are sized to
#: on an idle machine; the rest is room for load (the wall limit is the backstop)
DET_SHARE = 0.75


def sim_seconds(plan) -> float:
    """Deterministic seconds of one exact simulation of ``plan`` (base network).

    >>> sim_seconds(plan) > SIM_CALL_S                            # doctest: +SKIP
    True
    """
    return SIM_CALL_S + plan.num_stages * plan.num_micro_batches / SIM_OPS_PER_S


def sim_count(plan, seconds: float, least: int = 1) -> int:
    """How many simulations of plans like ``plan`` fit in ``seconds`` deterministic
    seconds (at least ``least``).

    >>> sim_count(plan, 1.0)                                      # doctest: +SKIP
    107
    """
    return max(least, int(seconds / sim_seconds(plan)))
