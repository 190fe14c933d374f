"""Mathematical models of one shape: the per-replica MILP (``milp``), the
aggregated-replica MILP (``milp_agg``), their bounds (``milp_bounds``) and the
joint CP-SAT model (``cpsat``); ``docs/formulations.md`` gives their maths.

They may import :mod:`planner.problem`, :mod:`planner.scoring` and the other
modules of :mod:`planner.solvers.registry`.
"""
