"""Dynamics: a training job through a changing network.

Rollouts of a job through a network trace (SPEC section 8) under re-planning
policies, with the cost of switching plans: ``job`` (the job's clock, exact
accounting, switch cost), ``policies`` (the per-epoch candidate plans, the
decision loop, the hysteresis and look-ahead rules), ``controller`` (the
learned keep-or-switch controller: its gymnasium environment, training and
rule) and ``rollout`` (every policy by name: static, greedy, MILP re-solve,
RL, hysteresis, mpc, controller, and the hindsight oracle).  The traces
themselves are network states over time and live with the network in
:mod:`planner.problem.traces`.

It may import :mod:`planner.problem`, :mod:`planner.scoring` and
:mod:`planner.solvers`.
"""
