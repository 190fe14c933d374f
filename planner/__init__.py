"""planner: plan LLM training across datacenters joined by a WAN.

Core objects are plain data (``Instance``, ``Plan``), the evaluator is a set
of functions over them, and every solver answers ``plan(instance, solver=...)``.

>>> import planner
>>> inst = planner.load_instance("tiny-3dc")                 # doctest: +SKIP
>>> p = planner.plan(inst, solver="greedy")                  # doctest: +SKIP
>>> planner.evaluate(inst, p).iteration_time_s               # doctest: +SKIP
"""

from .bounds import lower_bound
from .errors import InfeasibleError, InputError, PlannerError
from .explain import explain
from .evaluator import Evaluation, Evaluator, Violation, check_plan, evaluate, iteration_times
from .greedy import greedy
from .instance import Instance
from .io import load_instance, load_model, load_plan, save_plan
from .model import ModelSpec
from .network import NetworkStates
from .plan import Plan
from .oplists import Deadlock
from .schedule_opt import optimize_schedule as schedule
from .solvers import SOLVERS, plan
from .trace import trace

__all__ = [
    "Deadlock", "Evaluation", "Evaluator", "InfeasibleError", "InputError", "Instance",
    "ModelSpec", "NetworkStates", "Plan", "PlannerError", "SOLVERS", "Violation", "check_plan",
    "evaluate", "explain", "greedy", "iteration_times", "load_instance", "load_model", "load_plan",
    "lower_bound", "plan", "save_plan", "schedule", "trace",
]
__version__ = "0.1.0"
