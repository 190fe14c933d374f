"""Scoring: how long a plan takes and how fast any plan could be.

Per-stage figures (SPEC section 5), the micro-batch programs and the exact
vectorised simulator (section 6), the analytic estimate ``T_est`` (section
7), the evaluator that combines them with feasibility checks and cost, the
instance's lower bound, and the op-level trace of one simulated iteration.

It may import :mod:`planner.problem` only.

``DEFAULT_SPEC`` is the version of the model (SPEC v2 or v3) that scoring
uses when a call does not say (``Evaluator(instance, plan, spec=3)``); it is
defined once, in :mod:`planner.problem.specversion`, because loading an
instance consults it too.
"""

from ..problem.specversion import DEFAULT_SPEC, SPECS  # noqa: F401
