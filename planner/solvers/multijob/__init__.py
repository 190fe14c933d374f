"""Several jobs sharing the datacenters (SPEC 10): column generation and baselines.

``columns`` (one job's plan on a slice, cached, trimmed), ``master`` (the column
master: Pyomo + HiGHS with its LP duals, and a CP-SAT twin), ``colgen``
(:func:`multiplan`, :func:`references`) and ``baselines``.  Part of
:mod:`planner.solvers`: it may import :mod:`planner.problem` and
:mod:`planner.scoring`.

>>> mp = multiplan(minst, objective="maxmin", time_limit=30)     # doctest: +SKIP
"""

from .colgen import multiplan
from .columns import references

__all__ = ["multiplan", "references"]
