"""Dynamics: a training job through a changing network.

Rollouts of a job through a network trace (SPEC section 8) under re-planning
policies (static, greedy, MILP re-solve, RL, the hindsight oracle), with the
cost of switching plans.  The traces themselves are network states over
time and live with the network in :mod:`planner.problem.traces`.

It may import :mod:`planner.problem`, :mod:`planner.scoring` and
:mod:`planner.solvers.registry`.
"""
