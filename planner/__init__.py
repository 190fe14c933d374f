"""planner: plan LLM training across datacenters joined by a WAN.

Core objects are plain data (``Instance``, ``Plan``), the evaluator is a set
of functions over them, and every solver answers ``plan(instance, solver=...)``.

>>> import planner
>>> inst = planner.load_instance("tiny-3dc")                 # doctest: +SKIP
>>> p = planner.plan(inst, solver="greedy")                  # doctest: +SKIP
>>> planner.evaluate(inst, p).iteration_time_s               # doctest: +SKIP
"""

from .scoring.bounds import lower_bound
from .scoring.calibrate import Calibration, calibrate
from .problem.measurements import Run, Transfer
from .problem.errors import InfeasibleError, InputError, PlannerError
from .presentation.explain import explain
from .scoring.evaluator import Evaluation, Evaluator, Violation, check_plan, evaluate, iteration_times
from .solvers.greedy import greedy
from .problem.instance import Instance
from .problem.io import load_instance, load_model, load_multi_instance, load_multiplan, load_plan, save_plan
from .problem.model import ModelSpec
from .problem.network import NetworkStates
from .problem.plan import Plan
from .problem.oplists import Deadlock
from .solvers.schedule_opt import optimize_schedule as schedule
from .solvers.registry import SOLVERS, plan
from .solvers.multijob import multiplan
from .scoring.multievaluate import multievaluate
from .scoring.trace import trace
from .presentation import display as _display, multiview as _multiview, plot as _plot  # noqa: F401  (register the views)

__all__ = [
    "Calibration", "Deadlock", "Evaluation", "Evaluator", "InfeasibleError", "InputError", "Instance",
    "ModelSpec", "NetworkStates", "Plan", "PlannerError", "Run", "SOLVERS", "Transfer", "Violation", "calibrate",
    "check_plan",
    "evaluate", "explain", "greedy", "iteration_times", "load_instance", "load_model", "load_plan",
    "load_multi_instance", "load_multiplan", "lower_bound", "multievaluate", "multiplan", "plan", "save_plan", "schedule", "trace",
]
__version__ = "0.1.0"
