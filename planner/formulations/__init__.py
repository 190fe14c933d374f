"""Mathematical formulations of the planning problem (MILP, CP-SAT)."""
