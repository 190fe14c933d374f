"""Scoring: how long a plan takes and how fast any plan could be.

Per-stage figures (SPEC section 5), the micro-batch programs and the exact
vectorised simulator (section 6), the analytic estimate ``T_est`` (section
7), the evaluator that combines them with feasibility checks and cost, the
instance's lower bound, and the op-level trace of one simulated iteration.

It may import :mod:`planner.problem` only.
"""
