"""The planners: every way to make a plan, behind one calling convention.

``registry`` holds the convention (``plan(instance, solver=..., time_limit=...,
seed=...)``, one ``Plan`` with its ``SolverInfo`` as the result) and the
registry ``SOLVERS``.  Greedy (with its per-shape plan), the exact planners'
shared outer shape search (``shapesearch``), the MILP (``milp`` with the
Pyomo models in ``formulations`` and the matrix hand-over to HiGHS in
``highs``), the joint CP-SAT model (``cpsat``), the CP-SAT micro-batch
schedule optimiser (``schedule_opt``), robust planning against sampled
network states (``robust``) and reinforcement learning (``rl``).

It may import :mod:`planner.problem` and :mod:`planner.scoring`.
"""
