"""The ``planner`` command line (click).  Exit codes (SPEC 9): 0 success,
2 malformed or inconsistent input, 3 no feasible plan; a run stopped by a
signal (its best result so far written) exits 128 + the signal's number:
130 after Ctrl-C (SIGINT), 143 after SIGTERM (``timeout``, ``kill``, Slurm)."""

from __future__ import annotations

import math
import os
import sys
import time
from functools import wraps
from pathlib import Path

import click
from rich.console import Console

from .problem import io as pio
from .problem import limits
from .problem.files import atomic_path, code_version, strict_json
from .problem.plan import SolverInfo, claims_check
from .scoring.bounds import lower_bound
from .problem.errors import EXIT_INFEASIBLE, EXIT_INTERRUPTED, InfeasibleError, InputError, PlannerError
from .scoring.evaluator import Evaluator, check_plan
from .presentation.export import FORMATS, MARKER, NAMES, SCHEDULES, export, target_instance
from .presentation.frameworks import DEFAULT_VERSION
from .presentation.multiview import multi_summary
from .presentation.report import claims_json, plan_summary, speed_change, whole
from .problem.schemas import KINDS, schema_text
from .solvers import stop as _stop
from .solvers.registry import (DEFAULT_SOLVER, SOLVERS, check_options, evaluation_of, plan as run_plan,
                               refuse_gpu_types)


class _Out(Console):
    """stdout: every table printed with its numbers and words whole, at any width (issue 28)."""

    def print(self, *objects, **kwargs):
        super().print(*(whole(o, self) for o in objects), **kwargs)


out = _Out(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _guard(fn):
    """One line and the SPEC exit code for every planner error, no traceback."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PlannerError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(_interrupted_exit() if e.exit_code == EXIT_INTERRUPTED else e.exit_code)
        except (click.ClickException, click.exceptions.Exit):
            raise
        except KeyboardInterrupt:  # a second Ctrl-C (or SIGTERM), or one outside the planners' watch
            click.echo(_stop.signal_name(), err=True)
            sys.exit(_interrupted_exit())
        except Exception as e:  # a bug: say so in one line unless debugging
            if os.environ.get("PLANNER_DEBUG"):
                raise
            click.echo(f"internal error: {type(e).__name__}: {e} (set PLANNER_DEBUG=1 for the traceback)",
                       err=True)
            sys.exit(1)

    return wrapper


def _interrupted_exit() -> int:
    """The exit status of a command stopped by a signal: 130 (SIGINT), 143 (SIGTERM)."""
    return _stop.interrupt_exit_code()


def _own_process() -> bool:
    """Whether this process was started to run the command line (``planner ...`` or
    ``python -m planner.cli``), not a caller that invokes it (a test's CliRunner)."""
    return os.path.basename(sys.argv[0]) in ("planner", "cli.py")


def _time_left(time_limit: float | None) -> float | None:
    """``--time-limit`` counted from process start: what is left of it for the
    planner once the interpreter has started and the instance is loaded (at
    least a tenth of it)."""
    if time_limit is None or not _own_process():
        return time_limit
    spent = _stop.process_age_s()
    left = max(0.1 * time_limit, time_limit - spent)
    import logging

    logging.getLogger("planner").info("time limit %g s: %.2f s spent starting up, %.2f s left to plan",
                                      time_limit, spent, left)
    return left


class _Finite(click.FloatRange):
    """A FloatRange that also refuses inf and nan (click's own lets nan through)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv


SECONDS = _Finite(min=0, min_open=True)  # a time limit: > 0 and finite
SEED = click.IntRange(0, limits.MAX_SEED)  # what NumPy and OR-Tools both take (as planner.plan checks)
WORKERS = click.IntRange(1, limits.MAX_WORKERS)


def _writable(ctx, param, value):
    """Callback: an output path whose directory exists and is writable (checked before any work)."""
    if value is None:
        return value
    path = Path(value)
    if param.type.name == "directory":  # a folder the command creates: its nearest existing parent
        if path.exists() and not path.is_dir():
            raise click.BadParameter(f"{value} exists and is not a directory", ctx, param)
        parent = path
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    else:
        if path.is_dir():
            raise click.BadParameter(f"{value} is a directory", ctx, param)
        parent = path.parent
        if not parent.is_dir():
            raise click.BadParameter(f"directory {parent} does not exist", ctx, param)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise click.BadParameter(f"directory {parent} is not writable", ctx, param)
    return value


def _picture(ctx, param, value):
    """Callback: a writable picture path whose extension matplotlib can write (before any work)."""
    value = _writable(ctx, param, value)
    if value is not None:
        from .presentation.plot import picture_problem

        problem = picture_problem(value)
        if problem:
            raise click.BadParameter(problem, ctx, param)
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="planner")
def main():
    """Plan LLM training across datacenters joined by a WAN."""


@main.command("plan")
@click.argument("instance", required=False)
@click.option("--solver", default=DEFAULT_SOLVER, show_default=True,
              help=f"one of: {', '.join(sorted(SOLVERS))}")
@click.option("--time-limit", type=SECONDS, default=None, help="seconds (default: the solver's own; auto: 60, wall clock in all)")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--gap", type=_Finite(min=0), default=None, help="relative optimality tolerance (milp, cpsat)")
@click.option("--threads", type=WORKERS, default=None, help="solver threads (milp: HiGHS, default 1; cpsat: workers, default 2)")
@click.option("--stages", type=click.IntRange(1, limits.MAX_STAGES), default=None, help="pin the number of stages (milp, cpsat)")
@click.option("--replicas", type=click.IntRange(1, limits.MAX_TOTAL_GPUS), default=None, help="pin the number of replicas (milp, cpsat)")
@click.option("--tp", type=click.IntRange(1, limits.MAX_GPUS_PER_NODE), default=None, help="pin the tensor-parallel degree (milp, cpsat)")
@click.option("--micro-batch-size", type=click.IntRange(1, limits.MAX_GLOBAL_BATCH), default=None, help="pin the micro-batch size (milp, cpsat)")
@click.option("--schedule", type=click.Choice(["1f1b", "gpipe"]), default=None, help="pin the schedule (milp, cpsat)")
@click.option("--forbid", multiple=True, metavar="DOMAIN", help="domain that may host nothing (milp, cpsat; repeatable)")
@click.option("--require", multiple=True, metavar="DOMAIN", help="domain that must host a stage (milp, cpsat; repeatable)")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), callback=_writable, help="write the plan JSON here")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document instead of the summary")
@click.option("--gantt", "gantt_path", type=click.Path(dir_okay=False), callback=_picture, help="draw the schedule (PNG/SVG/PDF)")
@click.option("--map", "map_path", type=click.Path(dir_okay=False), callback=_picture, help="draw the network and the plan's flows")
@click.option("--full", is_flag=True, help="the summary's every stage and domain (a large plan's is summarised)")
@click.option("--refine-schedule/--no-refine-schedule", default=None,
              help="then optimise the micro-batch schedule with CP-SAT (default: on for cpsat)")
@click.option("--robust", type=click.IntRange(0, limits.MAX_ROBUST), default=0, help="plan against K sampled network states (greedy, milp, cpsat)")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), help="rl: the trained policy")
@click.option("--robust-stat", type=click.Choice(["mean", "p95"]), default="mean", show_default=True)
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@click.option("--memory-limit", type=_Finite(min=0, min_open=True), default=None, metavar="GB",
              help="stop with the best plan so far once resident memory passes GB (greedy alone: default 4)")
@click.option("--executor", type=click.Choice(["serial", "process", "ray"]), default=None,
              help="milp, cpsat, hier: solve shapes in waves of --jobs at once, here, in local processes or on Ray")
@click.option("--address", default=None, help="Ray cluster address (with --executor ray; default: a local Ray)")
@click.option("--jobs", type=WORKERS, default=None, help="shapes per wave (with --executor; default 2, on Ray its CPUs)")
@click.option("--deterministic", is_flag=True,
              help="milp, cpsat, auto, hier: deterministic budgets (HiGHS work, CP-SAT deterministic time, "
                   "calibrated work units), never cut by the clock: the same plan at any load, and under load "
                   "the run may overrun --time-limit (a seeded auto spends the same units, the clock a backstop)")
@click.option("--target", type=click.Choice(FORMATS), default=None,
              help="plan only micro-batch orders this framework runs (megatron, deepspeed: 1f1b; "
                   "torchtitan: 1f1b, gpipe and explicit op lists)")
@_guard
def plan_cmd(instance, solver, time_limit, seed, gap, threads, stages, replicas, tp, micro_batch_size,
             schedule, forbid, require, out_path, as_json, gantt_path, map_path, full, refine_schedule, robust,
             robust_stat, policy_path, quiet, memory_limit, executor, address, jobs, deterministic, target):
    """Make a plan for INSTANCE (a file or a packaged name; default: the packaged default)."""
    inst = pio.load_instance(instance)
    try:
        refuse_gpu_types(inst, solver)  # a solver that plans one GPU type refuses several (issue 25)
    except InputError as err:
        raise err.with_file(pio.resolve_instance_path(instance)) from None
    if target:
        if schedule and schedule not in SCHEDULES[target]:
            raise InputError(f"{NAMES[target]} does not run {schedule}", "--schedule")
        inst = target_instance(inst, target)
        if not inst.options.explicit_schedules:
            if refine_schedule:
                raise InputError(f"the refined schedule is explicit op lists, which {NAMES[target]} cannot run",
                                 "--refine-schedule")
            refine_schedule = False
    _outputs([pio.resolve_instance_path(instance), policy_path], out=out_path, gantt=gantt_path, map=map_path)
    if solver not in SOLVERS:
        raise click.BadParameter(f"unknown solver {solver!r}; choose from {', '.join(sorted(SOLVERS))}",
                                 param_hint="--solver")
    _progress(quiet)
    options = {k: v for k, v in dict(gap=gap, threads=threads, stages=stages, replicas=replicas, tp=tp,
                                     micro_batch_size=micro_batch_size, schedule=schedule).items()
               if v is not None}
    if forbid:
        options["forbid"] = list(forbid)
    if require:
        options["require"] = list(require)
    if options and solver in ("greedy", "rl", "anneal"):
        raise click.BadParameter(f"{', '.join(options)} apply to --solver milp, cpsat or auto", param_hint="--solver")
    if solver == "auto" and "threads" in options:
        raise click.BadParameter("--threads: auto runs one thread per engine", param_hint="--threads")
    if solver == "cpsat" and "threads" in options:
        options["workers"] = options.pop("threads")
    if executor is None and (address or jobs):
        raise click.BadParameter("--address and --jobs go with --executor", param_hint="--executor")
    if address and executor != "ray":
        raise click.BadParameter("--address is a Ray cluster's (with --executor ray)", param_hint="--address")
    if executor is not None:
        if solver not in ("milp", "cpsat", "hier"):
            raise click.BadParameter(f"--executor applies to --solver milp, cpsat or hier, not {solver}",
                                     param_hint="--executor")
        options.update(executor=executor, address=address, jobs=jobs)
    if deterministic:
        if solver not in ("milp", "cpsat", "auto", "hier"):
            raise click.BadParameter(f"--deterministic applies to --solver milp, cpsat, auto or hier, not {solver}",
                                     param_hint="--deterministic")
        if solver == "milp" and options.get("threads", 1) != 1:
            raise click.BadParameter("--deterministic runs HiGHS on one thread", param_hint="--threads")
        options["deterministic"] = True
    options = check_options(inst, solver, {**options, "time_limit": time_limit, "seed": seed},
                            cli=True)  # the API's one check: pins in range and consistent, the run's (exit 2)
    del options["time_limit"], options["seed"]
    if policy_path:
        if solver != "rl":
            raise click.BadParameter("--policy applies to --solver rl", param_hint="--policy")
        if not os.path.isfile(policy_path):
            raise InputError("no such file (a policy saved by planner rl train)", "--policy", policy_path)
        options["policy"] = policy_path
    if robust:
        if solver in ("rl", "auto", "anneal"):
            raise click.BadParameter("--robust applies to --solver greedy, milp or cpsat", param_hint="--robust")
        options.update(robust=robust, robust_stat=robust_stat)
    from .solvers import stop

    # issue 29: budgets in work units come from the nominal limit, not from what the start-up left
    # (load-dependent): with --deterministic the whole budget (each part of auto gets it alone),
    # for a seeded auto its work units
    left = time_limit if deterministic else _time_left(time_limit)
    if solver == "auto" and time_limit is not None:
        from .solvers.registry import IDLE_STARTUP_S, auto_work_s

        options["work_s"] = auto_work_s(time_limit, IDLE_STARTUP_S)
    # the watch also stops a planner that overruns its limit, as time_limit (its incumbent); not with
    # --deterministic, whose budgets are never cut by the clock (the run may take longer under load)
    with stop.Watch(memory_limit_bytes=memory_limit * 1e9 if memory_limit else None,  # also SIGTERM
                    deadline=None if left is None or deterministic else time.perf_counter() + left):
        p = run_plan(inst, solver=solver, time_limit=left, seed=seed,
                     refine_schedule=refine_schedule, **options)
    if out_path:
        pio.save_plan(p, out_path)
    ev = evaluation_of(p) or Evaluator(inst, p).evaluate(lower_bound_s=lower_bound(inst).value)
    _pictures(inst, p, gantt_path, map_path)
    if as_json:
        click.echo(strict_json({**p.to_dict(), "evaluation": ev.to_dict()}))
    else:
        out.print(plan_summary(inst, p, ev, full=full))
        if solver == "auto":
            extra = p.solver.model_extra
            out.print(f"auto: plan from {extra.get('incumbent')} ({p.solver.status}); "
                      + "; ".join(f"{k}: {v}" for k, v in extra.get("engines", {}).items()))
        for what, path in (("plan", out_path), ("Gantt chart", gantt_path), ("map", map_path)):
            if path:
                out.print(f"{what} written to {path}")
    claims = "" if p.solver.bound is None or p.solver.gap is None else \
        f" (bound {p.solver.bound:.6g}, gap {p.solver.gap:.2%})"
    if p.solver.status == "memory_limit":
        cap = f"{memory_limit:g} GB" if memory_limit else f"{_stop.DEFAULT_HEURISTIC_MEMORY_BYTES / 1e9:g} GB (default)"
        click.echo(f"memory limit {cap} reached: the best plan found so far{claims}", err=True)
    if p.solver.status == "interrupted":
        click.echo(f"{stop.signal_name()}: the best plan found so far{claims}"
                   + (f", written to {out_path}" if out_path else ""), err=True)
        sys.exit(_interrupted_exit())


def _outputs(inputs, **paths) -> None:
    """Refuse, before any work, to overwrite an input file or (``--out`` of a
    plan) an existing file that is not a plan (exit 2, naming the option)."""
    for option, path in paths.items():
        if path:
            pio.check_output(path, f"--{option}", inputs, plan=option == "out")


def _pictures(inst, p, gantt_path, map_path) -> None:
    if not (gantt_path or map_path):
        return
    import matplotlib

    matplotlib.use("Agg")
    from .presentation import plot

    for path, draw in ((gantt_path, plot.gantt), (map_path, plot.draw)):
        if path:
            fig = draw(inst, p)
            try:
                with atomic_path(path) as tmp:
                    fig.savefig(tmp, dpi=120, bbox_inches="tight")
            except (OSError, ValueError) as e:
                raise click.ClickException(f"cannot write {path}: {e}") from None


def _progress(quiet: bool) -> None:
    """Solver progress (logger "planner") as plain lines on stderr."""
    import logging

    logger = logging.getLogger("planner")
    if quiet or logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(relativeCreated)7.0f ms] %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


@main.command("evaluate")
@click.argument("instance")
@click.argument("plan_file", metavar="PLAN")
@click.option("--json", "as_json", is_flag=True, help="print the figures as one JSON document")
@click.option("--gantt", "gantt_path", type=click.Path(dir_okay=False), callback=_picture, help="draw the schedule (PNG/SVG/PDF)")
@click.option("--map", "map_path", type=click.Path(dir_okay=False), callback=_picture, help="draw the network and the plan's flows")
@click.option("--full", is_flag=True, help="the summary's every stage and domain (a large plan's is summarised)")
@_guard
def evaluate_cmd(instance, plan_file, as_json, gantt_path, map_path, full):
    """Score PLAN (JSON) on INSTANCE with the exact simulator; exit 3 if infeasible."""
    inst = pio.load_instance(instance)
    _outputs([pio.resolve_instance_path(instance), plan_file], gantt=gantt_path, map=map_path)
    p = pio.load_plan(plan_file, inst)
    ev = Evaluator(inst, p).evaluate(lower_bound_s=lower_bound(inst).value)
    if ev.feasible:
        try:
            _pictures(inst, p, gantt_path, map_path)
        except InputError as err:  # a plan the picture cannot show (GPU types): name the plan file
            raise (err.with_file(plan_file) if err.file is None else err) from None
    if as_json:  # the figures, and whether the plan's solver claims still hold (SPEC 9)
        click.echo(strict_json({**ev.to_dict(), **claims_json(inst, p)}))
    else:
        out.print(plan_summary(inst, p, ev, full=full))
    if not ev.feasible:
        sys.exit(EXIT_INFEASIBLE)


@main.command("multiplan")
@click.argument("instance")
@click.option("--objective", type=click.Choice(["maxmin", "weighted", "deadline", "cost", "makespan"]),
              default=None, help="SPEC 10's objective (default: the instance's options.multi_objective)")
@click.option("--sharing", type=click.Choice(["reserved", "shared"]), default="reserved", show_default=True,
              help="the evaluation the summary reports beside reserved (the allocation is planned for reserved)")
@click.option("--time-limit", type=SECONDS, default=60.0, show_default=True,
              help="seconds for everything: references, columns, masters (with --deterministic: a count of plans)")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--solver", default="greedy", show_default=True,
              help=f"the single-job planner of the columns and references: {', '.join(sorted(SOLVERS))}")
@click.option("--deterministic", is_flag=True, help="budget by plans made, not the clock: the same result at any load")
@click.option("--references", "refs_path", type=click.Path(dir_okay=False),
              help="JSON of each job's reference throughput tput* (tokens/s): {job: tput}, or a benchmark's "
                   "sidecar keyed by mix name; computed once per mix, outside the time limit (without it they "
                   "are computed inside it)")
@click.option("--allocator", type=click.Choice(["master", "rl"]), default="master", show_default=True,
              help="master: column generation; rl: the PPO allocator (one menu column per job, "
                   "models/rl/multijob.zip or --policy)")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False),
              help="with --allocator rl: a policy of planner rl train-multijob (default: the shipped one)")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), callback=_writable,
              help="write the multi-plan JSON here")
@click.option("--json", "as_json", is_flag=True, help="print the multi-plan's evaluation and solver as one JSON document")
@click.option("--map", "map_path", type=click.Path(dir_okay=False), callback=_picture,
              help="draw the cluster coloured by job: GPUs per domain, link shares")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@_guard
def multiplan_cmd(instance, objective, sharing, time_limit, seed, solver, deterministic, refs_path, allocator,
                  policy_path, out_path, as_json, map_path, quiet):
    """Allocate INSTANCE's datacenters among its [[jobs]] and plan each job (SPEC 10): column
    generation over single-job plans on slices; exit 3 when no allocation is feasible."""
    from .scoring.multievaluate import multievaluate
    from .solvers.multijob import multiplan

    minst = pio.load_multi_instance(instance)
    refs = None if refs_path is None else pio.load_references(refs_path, minst)
    if out_path:
        pio.check_output(out_path, "--out", [pio.resolve_instance_path(instance)]
                         + ([refs_path] if refs_path else []))
    _outputs([pio.resolve_instance_path(instance)], map=map_path)
    if policy_path and allocator != "rl":
        raise click.BadParameter("a policy is for --allocator rl", param_hint="--policy")
    if solver not in SOLVERS:
        raise click.BadParameter(f"unknown solver {solver!r}; choose from {', '.join(sorted(SOLVERS))}",
                                 param_hint="--solver")
    _progress(quiet)
    from .solvers import stop

    left = time_limit if deterministic else _time_left(time_limit)  # deterministic: a count of plans
    with stop.Watch():
        mp = multiplan(minst, objective=objective, time_limit=left, seed=seed, sharing=sharing, solver=solver,
                       deterministic=deterministic, references=refs, allocator=allocator, policy=policy_path)
    if out_path:
        pio.write_atomic(out_path, mp.to_json() + "\n")
    ev = multievaluate(minst, mp, sharing=sharing)
    info = mp.solver.model_dump(mode="json", exclude_none=True)
    _multi_map(minst, mp, ev, map_path)
    if as_json:
        click.echo(strict_json({**ev.to_dict(), "solver": info}))
    else:
        out.print(multi_summary(minst, mp, ev))
        if out_path:
            out.print(f"multi-plan written to {out_path}")
    if not ev.feasible:
        sys.exit(EXIT_INFEASIBLE)
    if stop.requested():
        click.echo(f"{stop.signal_name()}: the best multi-plan found so far"
                   + (f", written to {out_path}" if out_path else ""), err=True)
        sys.exit(_interrupted_exit())


@main.command("multievaluate")
@click.argument("instance")
@click.argument("multiplan_file", metavar="MULTIPLAN")
@click.option("--sharing", type=click.Choice(["reserved", "shared"]), default="reserved", show_default=True,
              help="reserved: each job on its slice (exact); shared: the jobs share every link and uplink")
@click.option("--json", "as_json", is_flag=True, help="print the figures as one JSON document (SPEC 9)")
@click.option("--map", "map_path", type=click.Path(dir_okay=False), callback=_picture,
              help="draw the cluster coloured by job: GPUs per domain, link shares")
@_guard
def multievaluate_cmd(instance, multiplan_file, sharing, as_json, map_path):
    """Score MULTIPLAN (JSON, SPEC 10) on INSTANCE (with [[jobs]]); exit 3 if infeasible."""
    from .scoring.multievaluate import multievaluate

    minst = pio.load_multi_instance(instance)
    _outputs([pio.resolve_instance_path(instance), multiplan_file], map=map_path)
    mp = pio.load_multiplan(multiplan_file, minst)
    ev = multievaluate(minst, mp, sharing)
    _multi_map(minst, mp, ev, map_path)
    if as_json:
        click.echo(strict_json(ev.to_dict()))
    else:
        out.print(multi_summary(minst, mp, ev))
    if not ev.feasible:
        sys.exit(EXIT_INFEASIBLE)


def _multi_map(minst, mp, ev, map_path) -> None:
    """``--map`` of multiplan and multievaluate: the cluster coloured by job."""
    if not map_path:
        return
    import matplotlib

    matplotlib.use("Agg")
    from .presentation.multiview import draw_jobs

    fig = draw_jobs(minst, mp, ev)
    try:
        with atomic_path(map_path) as tmp:
            fig.savefig(tmp, dpi=120, bbox_inches="tight")
    except (OSError, ValueError) as e:
        raise click.ClickException(f"cannot write {map_path}: {e}") from None


@main.command("schedule")
@click.argument("instance")
@click.argument("plan_file", metavar="PLAN")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="write the new plan here")
@click.option("--time-limit", type=SECONDS, default=60.0, show_default=True, help="seconds (deterministic time)")
@click.option("--workers", type=WORKERS, default=2, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--memory", type=click.Choice(["gpu", "peak", "stage"]), default="gpu", show_default=True,
              help="budget: each stage's GPU memory; PLAN's peak memory per GPU; PLAN's in-flight count per stage")
@click.option("--equal-memory", is_flag=True, help="same as --memory stage")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@_guard
def schedule_cmd(instance, plan_file, out_path, time_limit, workers, seed, memory, equal_memory, quiet):
    """Optimise PLAN's micro-batch schedule with CP-SAT (placement and partition unchanged)."""
    from .solvers.registry import refine

    inst = pio.load_instance(instance)
    _outputs([pio.resolve_instance_path(instance), plan_file], out=out_path)
    p = pio.load_plan(plan_file, inst)
    _progress(quiet)
    before = Evaluator(inst, p).evaluate(lower_bound_s=lower_bound(inst).value)
    if not before.feasible:
        raise InfeasibleError(f"{plan_file}: the plan is infeasible; its schedule cannot be refined",
                              [v.message for v in before.violations])
    from .solvers import stop

    why = claims_check(inst, p)
    if p.solver is not None and why is not None:  # not carried into the new plan (SPEC 9)
        out.print(f"note: {plan_file}: solver claims not carried over: {why[1]}")
        p = p.model_copy(update={"solver": SolverInfo(name=p.solver.name, status="heuristic"), "predicted": None})
    with stop.Watch():  # Ctrl-C: the best schedule so far
        new = refine(inst, p, time_limit=time_limit, seed=seed, workers=workers,
                     memory="stage" if equal_memory else memory)
    s = new.solver.model_extra
    if s["schedule_status"] == "too large" and not s.get("inflight"):
        raise InputError(f"the schedule model for {p.num_stages} stages x {p.num_micro_batches} micro-batches "
                         f"is too large to build within the time limit; try a longer --time-limit, --memory "
                         f"stage (fewer micro-batches in flight) or a plan with fewer micro-batches", "schedule",
                         plan_file)
    pio.save_plan(new, out_path)
    if s["schedule_status"] == "too large":
        out.print("schedule: the CP-SAT schedule model is too large to build within the time limit "
                  "(a longer --time-limit, or --memory stage, goes further)")
    if s.get("schedule_makespan_s") is not None:
        out.print(f"schedule: {s['schedule_status']}, CP-SAT makespan {s['schedule_makespan_s']:.6g} s "
                  f"(bound {s['schedule_bound_s']:.6g}, gap {s['schedule_gap']:.2%})"
                  + ("" if s.get("schedule_kept") == "cpsat" else
                     f"; not kept: {s.get('schedule_not_kept') or 'it simulates no faster'}"))
    if s.get("inflight"):
        out.print(f"schedule: 1f1b with in-flight limits {s['inflight']} per stage")
    out.print(f"simulated iteration: {before.iteration_time_s:.6g} s ({p.schedule_kind}) -> "
              f"{new.predicted.iteration_time_s:.6g} s ({new.schedule_kind}), "
              f"{speed_change(before.iteration_time_s, new.predicted.iteration_time_s)}")
    out.print(f"plan written to {out_path}")
    if s["schedule_status"] == "interrupted":
        click.echo("interrupted: the best schedule found so far", err=True)
        sys.exit(_interrupted_exit())


@main.group("trace")
def trace_group():
    """Network traces: how WAN figures drift over a day."""


@trace_group.command("generate")
@click.argument("instance")
@click.option("--hours", type=_Finite(0, limits.MAX_TRACE_HOURS, min_open=True), default=24.0, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--start-hour-utc", type=_Finite(-1e6, 1e6), default=0.0, show_default=True)
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable)
@_guard
def trace_generate_cmd(instance, hours, seed, start_hour_utc, out_path):
    """Write a synthetic 5-minute trace for INSTANCE built from published statistics."""
    from .problem import traces

    for option, value in (("--hours", hours), ("--start-hour-utc", start_hour_utc)):
        if not math.isfinite(value) or value < 0 or (option == "--hours" and value <= 0):
            raise click.BadParameter(f"a finite number of hours{' > 0' if option == '--hours' else ' >= 0'}, "
                                     f"not {value}", param_hint=option)
    inst = pio.load_instance(instance)
    pio.check_output(out_path, "--out", [pio.resolve_instance_path(instance)])
    tr = traces.generate(inst, hours=hours, seed=seed, start_hour_utc=start_hour_utc)
    header = (f"planner trace for instance {inst.name}: {hours:g} h from {start_hour_utc:g}:00 UTC, "
              f"{traces.EPOCH_S:g} s epochs, seed {seed}\n"
              "generated by planner.problem.traces.generate from shared/data: abilene_hour_of_day_profile.csv (diurnal), "
              "wan_tm_variability_stats.csv (5-min steps), skyplane_snapshot_variability.csv (degradations), "
              "wan_variability_facts.csv (outages, 5-min epochs); see docs/dynamics.md")
    traces.save(tr, out_path, header)
    bw = tr.states.bandwidth_gbps
    out.print(f"{tr.epochs} epochs x {len(inst.links)} links written to {out_path}; "
              f"{int((bw == 0).any(axis=1).sum())} epochs with a link down")


@main.command("simulate")
@click.argument("instance")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), required=True)
@click.option("--policy", "policies", multiple=True,
              type=click.Choice(["static", "greedy", "resolve", "rl", "hysteresis", "mpc", "controller", "oracle"]),
              default=("static", "greedy", "oracle"), show_default=True, help="repeatable")
@click.option("--iterations", type=click.IntRange(1, limits.MAX_ITERATIONS), default=1000, show_default=True)
@click.option("--solver", default="greedy", show_default=True, help="solver of the resolve policy")
@click.option("--every-min", type=SECONDS, default=30.0, show_default=True, help="resolve: re-plan period")
@click.option("--threshold", type=_Finite(min=0), default=0.10, show_default=True, help="resolve: slowdown that triggers")
@click.option("--solver-time", default="measured", show_default=True,
              help="'measured' or seconds charged per re-plan (reproducible)")
@click.option("--time-limit", type=SECONDS, default=10.0, show_default=True, help="resolve: solver time limit")
@click.option("--rl-policy", "rl_policy", type=click.Path(dir_okay=False, exists=True),
              help="rl: the trained policy (planner rl train ... --out POLICY)")
@click.option("--controller", "controller_path", type=click.Path(dir_okay=False),
              help="controller: a trained controller (planner controller train ... --out FILE); "
                   "default: the packaged one")
@click.option("--margin", type=_Finite(min=0), default=None,
              help="hysteresis: net gain over the switch time (fraction, default 0.5); mpc: over keeping "
                   "(default 0.005)")
@click.option("--json", "as_json", is_flag=True)
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@_guard
def simulate_cmd(instance, trace_path, policies, iterations, solver, every_min, threshold, solver_time,
                 time_limit, rl_policy, controller_path, margin, as_json, quiet):
    """Run a training job through a trace under re-planning policies (SPEC 8)."""
    from rich.table import Table

    from .problem import traces
    from .dynamics.rollout import rollout

    inst = pio.load_instance(instance)
    tr = traces.load(trace_path, inst)
    try:
        st = solver_time if solver_time == "measured" else SECONDS.convert(solver_time, None, None)
    except click.BadParameter:
        raise click.BadParameter("'measured' or seconds > 0", param_hint="--solver-time") from None
    if "resolve" in policies and solver not in SOLVERS:
        raise click.BadParameter(f"unknown solver {solver!r}; choose from {', '.join(sorted(SOLVERS))}",
                                 param_hint="--solver")
    if "rl" in policies and not rl_policy:
        raise click.BadParameter("the rl policy needs --rl-policy POLICY", param_hint="--rl-policy")
    if controller_path and "controller" not in policies:
        raise click.BadParameter("--controller applies to --policy controller", param_hint="--controller")
    controller = None
    if "controller" in policies:  # load (and check) it before any rollout
        from .dynamics.controller import Controller

        controller = Controller.load(controller_path)
    from .dynamics.policies import EpochPlans
    from .solvers import stop

    _progress(quiet)
    log = __import__("logging").getLogger("planner")
    results, seen, interrupted = [], [], False
    plans = EpochPlans(inst, tr)  # every epoch's greedy plan, computed once for all the policies
    with stop.Watch():  # Ctrl-C: the rows so far (the current policy's marked incomplete), exit 130
        for pol in sorted(policies, key=lambda p: p == "oracle"):  # the oracle last: it uses every plan seen
            log.info("simulate: policy %s over %d iterations ...", pol, iterations)
            r = rollout(inst, tr, pol, iterations, solver=solver, every_min=every_min, threshold=threshold,
                        solver_time=st, time_limit=time_limit, candidates=seen, rl_policy=rl_policy,
                        controller=controller, plans=plans, margin=margin)
            seen += r.plans
            results.append(r)
            interrupted = stop.requested() == "interrupted"
            if interrupted:
                break
    _short_trace(tr, results, trace_path)
    if as_json:
        click.echo(strict_json([r.summary() for r in results]))
    if interrupted:
        click.echo("interrupted: the policies so far", err=True)
    if as_json:
        if interrupted:
            sys.exit(_interrupted_exit())
        return
    t = Table(title=f"{iterations} iterations of {inst.name} through {trace_path}", title_justify="left")
    for col in ("policy", "total h", "iter/h", "reconfig s", "stalled s", "switches", "solver s",
                "s per decision", "ms per choice"):  # short words: 80 columns keep them whole
        t.add_column(col, justify="left" if col == "policy" else "right")
    for r in results:
        t.add_row(r.policy + ("" if r.completed else " (incomplete)"), f"{r.total_s / 3600:.3f}",
                  f"{r.iterations_per_hour:.1f}", f"{r.reconfig_s:.1f}", f"{r.stalled_s:.1f}", str(r.switches),
                  f"{r.solver_s:.1f}", "-" if r.decision_s is None else f"{r.decision_s:.3g}",
                  "-" if r.choice_ms is None else f"{r.choice_ms:.3g}")
    out.print(t)
    if interrupted:
        sys.exit(_interrupted_exit())


def _short_trace(tr, results, trace_path) -> None:
    """One warning on stderr when the job outlasts the trace (its last state then holds)."""
    from .problem.traces import EPOCH_S

    if not results:
        return
    step = float(tr.times[-1] - tr.times[-2]) if tr.epochs > 1 else EPOCH_S
    end = float(tr.times[-1]) + step
    longest = max(results, key=lambda r: r.total_s)
    if longest.total_s > end:
        click.echo(f"warning: {trace_path} covers {end / 3600:.3g} h, {(longest.total_s - end) / 3600:.3g} h "
                   f"shorter than the job ({longest.total_s / 3600:.3g} h under {longest.policy}): its last "
                   f"state holds for the rest; generate a longer trace (planner trace generate --hours) or "
                   f"fewer --iterations", err=True)


@main.group("rl")
def rl_group():
    """The reinforcement-learning planner (needs the extra planner[rl])."""


@rl_group.command("train")
@click.argument("instances", nargs=-1, required=True)
@click.option("--steps", type=click.IntRange(1, limits.MAX_RL_STEPS), default=20_000, show_default=True, help="environment steps")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="policy file (zip)")
@click.option("--curve", "curve_path", type=click.Path(dir_okay=False), callback=_picture, help="learning curve PNG "
              "(default: OUT with .png; its CSV beside it with .csv)")
@click.option("--init", "init_path", type=click.Path(dir_okay=False, exists=True),
              help="continue training this policy")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@_guard
def rl_train_cmd(instances, steps, seed, out_path, curve_path, init_path, quiet):
    """Train a MaskablePPO policy that chooses one of greedy's best shapes and places its
    stages, on INSTANCES (one or more files or packaged names, or "all"; several: one
    instance-agnostic policy for all) over the base network and generated network states.
    When some instance has several GPU types the policy reads the typed observation
    (format 3, as models/rl/types.zip) and plans mixed instances."""
    import time

    import numpy as np

    from . import bench
    from .solvers.rl import train

    names = pio.available("instances") if list(instances) == ["all"] else list(instances)
    insts = [pio.load_instance(n) for n in names]
    stem = str(out_path).removesuffix(".zip")
    curve_path = curve_path or stem + ".png"
    curve_csv = str(curve_path).rsplit(".", 1)[0] + ".csv"
    for option, path in (("--out", out_path), ("--curve", curve_path), ("--curve", curve_csv)):
        pio.check_output(path, option, [pio.resolve_instance_path(n) for n in names])
    _progress(quiet)
    command = "planner rl train " + " ".join(sys.argv[3:]) if len(sys.argv) > 3 else "planner rl train"
    t0 = time.perf_counter()
    _, curve = train(insts if len(insts) > 1 else insts[0], steps=steps, seed=seed, out=out_path,
                     progress=not quiet, curve_png=curve_path, curve_csv=curve_csv, init=init_path,
                     meta={"command": command, "commit": code_version()})
    r = np.array(curve.rewards)
    tail = r[-max(1, len(r) // 10):]
    out.print(f"trained {steps} steps in {time.perf_counter() - t0:.1f} s; {len(r)} episodes; "
              f"last 10% mean return {tail.mean():+.3f} (log of greedy's objective over the plan's)")
    for name, ratio in curve.last_ratios().items():
        out.print(f"  {name}: deterministic plan / greedy's = {ratio:.4f} (exact, base network)")
    out.print(f"policy written to {out_path}, learning curve to {curve_path} and {curve_csv}")


@rl_group.command("train-multijob")
@click.option("--steps", type=click.IntRange(1, limits.MAX_RL_STEPS), default=60_000, show_default=True,
              help="environment steps (one step allocates one job)")
@click.option("--seed", type=SEED, default=0, show_default=True, help="PPO's seed")
@click.option("--bases", default="aws-multiregion,gcp-16", show_default=True,
              help="comma-separated clusters (one-job instances) the training mixes are drawn on")
@click.option("--mix-seeds", default="1000,1001", show_default=True,
              help="comma-separated seeds of planner generate-mix (keep them apart from the benchmark's 0-99)")
@click.option("--jobs", "n_jobs", type=click.IntRange(2, limits.MAX_DOMAINS), default=6, show_default=True,
              help="jobs per training mix (episodes draw subsets of 2 or more)")
@click.option("--ref-limit", type=SECONDS, default=2.0, show_default=True,
              help="seconds of greedy per job for the references tput*")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="policy file (zip; its metadata beside it as .zip.json)")
@click.option("--curve", "curve_path", type=click.Path(dir_okay=False), callback=_picture,
              help="learning curve PNG (default: OUT with .png; its CSV beside it with .csv)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@_guard
def rl_train_multijob_cmd(steps, seed, bases, mix_seeds, n_jobs, ref_limit, out_path, curve_path, quiet):
    """Train the PPO allocator for several jobs (SPEC 10): MaskablePPO over generated mixes
    (planner generate-mix on each of BASES with each of MIX_SEEDS), each job given one
    column of a menu of slices, for a reward mixing weighted rho, the least rho and the
    weight meeting deadlines (planner/solvers/multijob/rl_env.py)."""
    import time

    from .problem.files import read_mapping
    from .problem.jobs import MultiInstance
    from .problem.files import find_model, load_model
    from .problem.mixes import DEFAULT_MODELS, generate_mix
    from .solvers.multijob import references
    from .solvers.multijob.rl import train

    base_names = [b.strip() for b in bases.split(",") if b.strip()]
    try:
        seeds = [int(x) for x in mix_seeds.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"comma-separated integers, not {mix_seeds!r}", "--mix-seeds") from None
    if not base_names or not seeds or any(x < 0 for x in seeds):
        raise InputError("at least one base and one seed >= 0", "--bases" if not base_names else "--mix-seeds")
    stem = str(out_path).removesuffix(".zip")
    curve_path = curve_path or stem + ".png"
    curve_csv = str(curve_path).rsplit(".", 1)[0] + ".csv"
    for option, path in (("--out", out_path), ("--curve", curve_path), ("--curve", curve_csv)):
        pio.check_output(path, option)
    _progress(quiet)
    cat = mix_catalogue(DEFAULT_MODELS)
    minsts, refs = [], []
    for b in base_names:
        pio.load_instance(b)  # a valid one-job instance: its cluster is the mixes'
        raw = read_mapping(pio.resolve_instance_path(b))
        for sd in seeds:
            data = generate_mix(raw, n_jobs, sd, cat, name=f"{b}-{n_jobs}j-s{sd}")
            m = MultiInstance.from_dict(data, resolve_model=lambda n: load_model(find_model(n)))
            minsts.append(m)
            refs.append(references(m, time_limit=ref_limit, seed=0))
    command = "planner rl train-multijob " + " ".join(sys.argv[3:]) if len(sys.argv) > 3 else \
        "planner rl train-multijob"
    t0 = time.perf_counter()
    _, rows = train(minsts, refs, steps=steps, seed=seed, out=out_path, curve_csv=curve_csv, curve_png=curve_path,
                    meta={"command": command, "commit": code_version(), "bases": base_names, "mix_seeds": seeds,
                          "jobs": n_jobs, "ref_limit_s": ref_limit})
    last = [r for r in rows if r[0] == "eval" and r[1] == max(x[1] for x in rows if x[0] == "eval")]
    out.print(f"trained {steps} steps on {len(minsts)} mixes in {time.perf_counter() - t0:.1f} s (menus included)")
    for r in last:
        out.print(f"  {r[2]}: reward {r[3]:.4f} (best rho first: {r[4]:.4f})")
    out.print(f"policy written to {out_path}, learning curve to {curve_path} and {curve_csv}")


@main.group("controller")
def controller_group():
    """The learned re-planning controller (needs the extra planner[rl])."""


@controller_group.command("train")
@click.option("--instances", default=",".join(("tiny-3dc", "tiny-line", "two-dc", "aws-multiregion",
                                               "azure-multiregion", "gcp-16", "edwc-llama2-13b")),
              show_default=True, help="comma-separated instances (names or files)")
@click.option("--seeds", default="1", show_default=True,
              help="comma-separated trace seeds, each below 1000 (from 1000 on: the benchmark's test traces)")
@click.option("--steps", type=click.IntRange(1, limits.MAX_RL_STEPS), default=60_000, show_default=True,
              help="environment steps (one per epoch decision)")
@click.option("--envs", type=click.IntRange(1, 64), default=4, show_default=True, help="vectorised environments")
@click.option("--hours", type=_Finite(0, limits.MAX_TRACE_HOURS, min_open=True), default=12.0, show_default=True,
              help="length of each training trace (jobs of 1 h to this)")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="controller file (zip; its metadata beside it as FILE.json)")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), default=None,
              help="keep each training trace's greedy plans here and reuse them (the same controller, sooner)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@_guard
def controller_train_cmd(instances, seeds, steps, envs, hours, seed, out_path, cache_dir, quiet):
    """Train the re-planning controller (MaskablePPO) on generated traces of INSTANCES."""
    import time

    import numpy as np

    from .dynamics.controller import check_training_seeds, train

    names = [n.strip() for n in instances.split(",") if n.strip()]
    for n in names:
        pio.load_instance(n)  # fail early, with the file and field
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter("comma-separated integers", param_hint="--seeds") from None
    if not names or not seed_list:
        raise click.BadParameter("at least one instance and one seed", param_hint="--instances/--seeds")
    check_training_seeds(seed_list)
    pio.check_output(out_path, "--out", [pio.resolve_instance_path(n) for n in names])
    _progress(quiet)
    command = "planner controller train " + " ".join(sys.argv[3:]) if len(sys.argv) > 3 else \
        "planner controller train"
    t0 = time.perf_counter()
    _, curve = train(names, seed_list, steps=steps, seed=seed, out=out_path, n_envs=envs, progress=False,
                     command=command, hours=hours, cache_dir=cache_dir)
    r = np.array(curve.returns)
    tail = r[-max(1, len(r) // 10):] if len(r) else np.array([np.nan])
    out.print(f"trained {steps} steps in {time.perf_counter() - t0:.1f} s; {len(r)} episodes; last 10% mean "
              f"return {tail.mean():+.3f} (epochs of 300 s its switches saved over keeping, in hindsight)")
    out.print(f"controller written to {out_path} (metadata {out_path}.json)")


@main.command("bench")
@click.argument("instances", nargs=-1)
@click.option("--methods", default="greedy,milp,cpsat,rl,megatron,random", show_default=True)
@click.option("--time-limit", type=SECONDS, default=60.0, show_default=True, help="per solver run")
@click.option("--rl-steps", type=click.IntRange(1, limits.MAX_RL_STEPS), default=None,
              help="train RL per instance with this budget (default: the shipped policies under models/rl/)")
@click.option("--dynamic/--no-dynamic", default=True, show_default=True, help="also run rollouts over traces")
@click.option("--hours", type=_Finite(0, limits.MAX_TRACE_HOURS, min_open=True), default=24.0, show_default=True,
              help="trace length")
@click.option("--iterations", default="2000", show_default=True,
              help="rollout length, or 'auto': what greedy's base plan runs in --hours")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--executor", type=click.Choice(["process", "serial", "ray"]), default="process", show_default=True)
@click.option("--address", default=None, help="Ray cluster address (with --executor ray)")
@click.option("--workers", type=WORKERS, default=2, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, callback=_writable,
              help="folder for the tables and plots (default: a new bench-YYYYMMDD-HHMMSS here); "
                   "refused when it holds files, unless --force")
@click.option("--force", is_flag=True, help="replace the results of an earlier bench in --out, all at once")
@click.option("--policies", default="static,greedy,resolve,rl,hysteresis,mpc,controller", show_default=True,
              help="dynamic policies (resolve needs milp among --methods, rl needs rl; the oracle always runs)")
@click.option("--controller", "controller_path", type=click.Path(dir_okay=False),
              help="the controller policy's file (default: the packaged one)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@_guard
def bench_cmd(instances, methods, time_limit, rl_steps, dynamic, hours, iterations, seed, executor, address,
              workers, out_dir, force, policies, controller_path, quiet):
    """Compare solvers, RL, greedy and baselines on INSTANCES (default: the packaged ones of
    at most 40 domains; name the national-scale ones to include them)."""
    from . import bench

    out_dir = bench.new_out_dir() if out_dir is None else out_dir
    pio.check_folder(out_dir, "--out", force=force, marker=bench.MARKER)  # before hours of benchmark
    names = list(instances) or bench.suite_instances()
    for n in names:
        pio.load_instance(n)  # fail early, with the file and field
    meths = [m.strip() for m in methods.split(",") if m.strip()]
    bad = [m for m in meths if m not in bench.STATIC_METHODS]
    if bad:
        raise click.BadParameter(f"unknown method(s) {', '.join(bad)}", param_hint="--methods")
    if iterations != "auto":
        try:
            iterations = click.IntRange(1, limits.MAX_ITERATIONS).convert(iterations, None, None)
        except click.BadParameter:
            raise click.BadParameter("an integer or 'auto'", param_hint="--iterations") from None
    pols = [q.strip() for q in policies.split(",") if q.strip()]
    bad = [q for q in pols if q not in bench.DYNAMIC_POLICIES]
    if bad:
        raise click.BadParameter(f"unknown policy(ies) {', '.join(bad)}; choose from "
                                 f"{', '.join(bench.DYNAMIC_POLICIES)}", param_hint="--policies")
    if dynamic and "controller" in pols:  # check the file before hours of benchmark, without torch:
        import importlib.util  # workers fork from this process, and torch's threads do not survive a fork

        from .dynamics.controller import Controller

        Controller.check(controller_path)
        if importlib.util.find_spec("sb3_contrib") is None:
            if controller_path:
                raise click.BadParameter("the controller needs the extra planner[rl]", param_hint="--controller")
            click.echo("note: no controller policy (it needs the extra planner[rl])", err=True)
            pols.remove("controller")
    from .solvers import stop

    with stop.Watch():  # Ctrl-C: write the rows that finished, exit 130
        static, dyn = bench.run(names, meths, time_limit=time_limit, seed=seed, rl_steps=rl_steps, dynamic=dynamic,
                                hours=hours, iterations=iterations, executor=executor, workers=workers,
                                address=address, show_progress=not quiet, policies=pols,
                                controller=controller_path)
        interrupted = stop.requested() == "interrupted"
    command = "planner bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "planner bench"
    with pio.new_folder(out_dir, "--out", force=force, marker=bench.MARKER) as tmp:
        files = {k: Path(out_dir) / p.name for k, p in bench.write(static, dyn, tmp, command,
                                                                  code=code_version()).items()}
    out.print(files["static.md"].read_text())
    if "dynamic.md" in files:
        out.print(files["dynamic.md"].read_text())
    out.print("written: " + ", ".join(str(f) for f in files.values()))
    if interrupted:
        click.echo(f"interrupted: {len(static)} static and {len(dyn)} dynamic rows finished and written", err=True)
        sys.exit(_interrupted_exit())


@main.command("explain")
@click.argument("instance")
@click.argument("plan_file", metavar="PLAN")
@click.option("--json", "as_json", is_flag=True, help="print the explanation as JSON")
@_guard
def explain_cmd(instance, plan_file, as_json):
    """Say what limits PLAN on INSTANCE: the bottleneck, headroom, and the change that helps most."""
    from .presentation.explain import explain

    inst = pio.load_instance(instance)
    p = pio.load_plan(plan_file, inst)
    try:
        e = explain(inst, p)
    except InputError as err:  # a plan it cannot explain yet (GPU types): name the plan file
        raise (err.with_file(plan_file) if err.file is None else err) from None
    click.echo(strict_json(e.to_dict()) if as_json else str(e))


@main.command("export")
@click.argument("instance")
@click.argument("plan_file", metavar="PLAN")
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True,
              help="the training framework to launch with")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, callback=_writable,
              help="directory for the launch files (created if missing; refused when not empty)")
@click.option("--framework-version", "version", default=None, metavar="VERSION",
              help="the framework version to write for (default: "
                   + ", ".join(f"{f} {v}" for f, v in DEFAULT_VERSION.items()) + "; docs/export.md)")
@click.option("--force", is_flag=True, help="replace an earlier export in --out, all of it at once")
@_guard
def export_cmd(instance, plan_file, fmt, out_dir, version, force):
    """Write launch scripts, framework configs, a rank map and a README for PLAN (exit 3 if infeasible)."""
    inputs = [pio.resolve_instance_path(instance), plan_file]
    pio.check_folder(out_dir, "--out", force=force, inputs=inputs, marker=MARKER)
    inst = pio.load_instance(instance)
    p = pio.load_plan(plan_file, inst)
    ex = export(inst, p, fmt, version)
    written = pio.write_folder(out_dir, ex.files, "--out", force=force, inputs=inputs, marker=MARKER)
    for w in ex.warnings:
        click.echo(f"warning: {w}", err=True)
    out.print(f"{NAMES[fmt]} {ex.version}: {len(written)} files written to {out_dir} ({ex.rank_map.world_size} ranks, "
              f"{len(ex.rank_map.agents)} torchrun agents); start with {Path(out_dir) / 'README.md'}")


@main.command("schema")
@click.argument("kind", metavar="KIND", type=click.Choice(KINDS))
@click.option("--out", "out_path", type=click.Path(dir_okay=False), callback=_writable,
              help="write the schema here instead of printing it")
@_guard
def schema_cmd(kind, out_path):
    """Print the JSON Schema of KIND: instance, model, plan, multi-instance or multiplan (from the readers' models)."""
    text = schema_text(kind)
    if out_path:
        pio.write_atomic(out_path, text)
        out.print(f"{kind} schema written to {out_path}")
    else:
        click.echo(text, nl=False)


@main.command("validate")
@click.argument("instance")
@_guard
def validate_cmd(instance):
    """Check INSTANCE; print a one-line description or the first problem (exit 2)."""
    inst = pio.load_instance(instance)
    wl = inst.workload
    click.echo(f"ok: {inst.name}: {len(inst.domains)} domains, {len(inst.links)} links, "
               f"{inst.total_gpus} GPUs, model {wl.model.name} ({wl.model.total_params() / 1e9:.2f}B "
               f"parameters, {inst.num_units} units), global batch {wl.global_batch_size} x {wl.seq_len} tokens")


@main.command("generate")
@click.option("--domains", type=click.IntRange(1, limits.MAX_DOMAINS), required=True, help="datacenters")
@click.option("--gpus", type=click.IntRange(1, limits.MAX_TOTAL_GPUS), required=True, help="GPUs in all (>= 8 per datacenter)")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--clusters", type=click.IntRange(1, limits.MAX_DOMAINS), default=None,
              help="clusters the datacenters are grouped in (default: about 30 datacenters each)")
@click.option("--model", default="llama2-70b", show_default=True, help="a model under models/")
@click.option("--global-batch-size", type=click.IntRange(1, limits.MAX_GLOBAL_BATCH), default=None,
              help="sequences per iteration (default: 1024, doubled until it can feed every GPU)")
@click.option("--gpu-types", type=click.IntRange(1), default=None,
              help="N GPU types drawn from a sourced table (A100, H100, H200, V100), each domain naming "
                   "one (SPEC v3 [[gpus]]); default: one A100-80GB [gpu]")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="the instance file to write (TOML)")
@_guard
def generate_cmd(domains, gpus, seed, clusters, model, global_batch_size, gpu_types, out_path):
    """Write a SYNTHETIC clustered instance: datacenters in clusters joined by metro links,
    clusters by a backbone between gateways (planner/problem/synthetic.py).  The same
    options and seed give the same file; the file is checked by the loader before it is
    written."""
    from .problem.synthetic import generate_instance, header

    if pio.find_model(model) is None:
        raise InputError(f"no model named {model!r} (available: {', '.join(pio.available('models'))})", "--model")
    try:
        data = generate_instance(domains, gpus, seed, clusters=clusters, model=model,
                                 global_batch_size=global_batch_size, gpu_types=gpu_types)
    except InputError as e:  # name the option
        e.field = f"--{e.field.replace('_', '-')}" if e.field else None
        raise
    command = " ".join(["planner generate", f"--domains {domains}", f"--gpus {gpus}", f"--seed {seed}"]
                       + ([f"--clusters {clusters}"] if clusters is not None else [])
                       + [f"--model {model}"]
                       + ([f"--global-batch-size {global_batch_size}"] if global_batch_size else [])
                       + ([f"--gpu-types {gpu_types}"] if gpu_types is not None else []))
    pio.check_output(out_path, "--out")
    inst = pio.write_instance(data, header(data, command), out_path)  # validated before it replaces anything
    out.print(f"{inst.name}: {len(inst.domains)} domains in "
              f"{len({d.region for d in inst.domains})} clusters, {inst.total_gpus:,} GPUs"
              + (f" ({inst.gpu_counts})" if inst.heterogeneous else "") + ", "
              f"{len(inst.links):,} links, model {inst.workload.model.name}, global batch "
              f"{inst.workload.global_batch_size} -> {out_path}")


def mix_catalogue(names):
    """The :func:`planner.problem.mixes.catalogue` of the models ``names`` (packaged or on
    ``PLANNER_MODEL_PATH``); an unknown name is an input error naming ``--models``."""
    from .problem.files import find_model, load_model
    from .problem.mixes import catalogue

    specs = []
    for n in names:
        path = find_model(n)
        if path is None:
            raise InputError(f"no model named {n!r} (available: {', '.join(pio.available('models'))})", "--models")
        specs.append(load_model(path))
    return catalogue(specs)


def write_mix(data: dict, header: list[str], path) -> object:
    """Write the mix ``data`` as TOML to ``path`` atomically, after loading it back with
    :func:`planner.problem.io.load_multi_instance` (nothing is replaced when it is refused)."""
    from .problem.files import toml_text

    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(toml_text(data, header))
        try:
            minst = pio.load_multi_instance(tmp)
        except InputError as err:
            err.file = str(path)
            raise err from None
    return minst


@main.command("generate-mix")
@click.argument("base")
@click.option("--jobs", "n_jobs", type=click.IntRange(1, limits.MAX_DOMAINS), required=True, help="jobs in the mix")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--load", type=click.FloatRange(0, 1e3, min_open=True), default=1.0, show_default=True,
              help="the jobs' requested GPUs in all, as a multiple of the cluster's")
@click.option("--deadlines", type=click.Choice(["elasticflow", "gavel", "none"]), default="elasticflow",
              show_default=True, help="deadline multiples of the alone duration: ElasticFlow's uniform "
                                      "0.5-1.5, Gavel's 1.2/2/10, or none")
@click.option("--weights", type=click.Choice(["gavel", "equal"]), default="gavel", show_default=True,
              help="Gavel's (5 with probability 0.2, else 1) or all 1")
@click.option("--objective", type=click.Choice(["maxmin", "weighted", "deadline", "cost", "makespan"]),
              default="maxmin", show_default=True, help="[options] multi_objective")
@click.option("--models", default=None, help="comma-separated models to draw from (default: the packaged "
                                             "1.3B-70B models of planner/problem/mixes.py)")
@click.option("--name", default=None, help="the mix's name (default mix-BASE-JOBS-sSEED)")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="the instance file to write (TOML, [[jobs]])")
@_guard
def generate_mix_cmd(base, n_jobs, seed, load, deadlines, weights, objective, models, name, out_path):
    """Write a JOB MIX on BASE's cluster: jobs whose GPU counts and durations are drawn from
    the AcmeTrace Kalos statistics, mapped to packaged models by GPU-hours, with deadlines
    as multiples of their alone duration (planner/problem/mixes.py).  The same options and
    seed give the same file; the file is checked by the loader before it is written."""
    from .problem.files import read_mapping
    from .problem.mixes import DEFAULT_MODELS, draw_jobs, header, mix_instance

    inst = pio.load_instance(base)  # a valid one-job instance: its cluster is the mix's
    raw = read_mapping(pio.resolve_instance_path(base))
    names = DEFAULT_MODELS if models is None else tuple(m.strip() for m in models.split(",") if m.strip())
    cat = mix_catalogue(names)
    ddl = None if deadlines == "none" else deadlines
    try:
        draws = draw_jobs(raw, n_jobs, seed, cat, load=load, deadlines=ddl, weights=weights)
        name = name or f"mix-{inst.name}-{n_jobs}-s{seed}"
        data = mix_instance(raw, draws, name=name, objective=objective,
                            description=f"{n_jobs} jobs drawn from the AcmeTrace Kalos sizes (seed {seed}) "
                                        f"on {inst.name}'s cluster")
    except InputError as e:  # name the option
        e.field = f"--{e.field.replace('_', '-')}" if e.field else None
        raise
    command = " ".join([f"planner generate-mix {base}", f"--jobs {n_jobs}", f"--seed {seed}"]
                       + ([f"--load {load:g}"] if load != 1.0 else [])
                       + ([f"--deadlines {deadlines}"] if deadlines != "elasticflow" else [])
                       + ([f"--weights {weights}"] if weights != "gavel" else [])
                       + ([f"--objective {objective}"] if objective != "maxmin" else [])
                       + ([f"--models {','.join(names)}"] if models is not None else [])
                       + ([f"--name {name}"] if name != f"mix-{inst.name}-{n_jobs}-s{seed}" else []))
    pio.check_output(out_path, "--out")
    write_mix(data, header(data, draws, command, inst.name), out_path)
    models_used = sorted({d.model for d in draws})
    out.print(f"{name}: {n_jobs} jobs on {inst.name}'s {inst.total_gpus:,} GPUs, models "
              f"{', '.join(models_used)}, objective {objective} -> {out_path}")


@main.command("list")
@_guard
def list_cmd():
    """List the packaged instances and models."""
    from rich.table import Table

    t = Table(title=f"instances ({pio.instances_dir()})", title_justify="left")
    for col in ("name", "domains", "GPUs", "model", "objective"):
        t.add_column(col)
    for name in pio.available("instances"):
        try:
            inst = pio.load_instance(name)
            t.add_row(name + (" (default)" if name == pio.DEFAULT_INSTANCE else ""), str(len(inst.domains)),
                      str(inst.total_gpus), inst.workload.model.name, inst.options.objective)
        except PlannerError as e:
            t.add_row(name, "-", "-", f"[red]invalid: {e}[/red]", "-")
    out.print(t)
    m = Table(title=f"models ({pio.models_dir()})", title_justify="left")
    for col in ("name", "parameters", "layers", "hidden", "description"):
        m.add_column(col)
    for name in pio.available("models"):
        spec = pio.load_model(pio.models_dir() / f"{name}.toml")
        m.add_row(name, f"{spec.total_params() / 1e9:.2f}B", str(spec.num_layers or "-"),
                  str(spec.hidden_size or "-"), spec.description)
    out.print(m)


# -- measured networks in, a shareable report out (issue 16) ---------------------------
@main.command("import-network")
@click.option("--latency", "latency_path", type=click.Path(dir_okay=False), required=True,
              help="ping RTT matrix CSV, ms (square with site names, or src,dst,value rows; see --latency-unit)")
@click.option("--throughput", "throughput_path", type=click.Path(dir_okay=False), required=True,
              help="throughput matrix CSV, e.g. iperf3 (Gbit/s; see --throughput-unit)")
@click.option("--latency-unit", type=click.Choice(["ms", "s", "us"]), default=None,
              help="the latency matrix's unit (default: its header's, else ms; all values below 1 are refused "
                   "unless a unit is said)")
@click.option("--sites", "sites_path", type=click.Path(dir_okay=False), default=None,
              help="sites TOML: GPUs per site and the other instance fields ([gpu], [workload], [options])")
@click.option("--gpus", type=click.IntRange(1, limits.MAX_TOTAL_GPUS), default=None,
              help="GPUs at every site the sites table gives no count for")
@click.option("--links", type=click.Choice(["measured", "mesh"]), default="measured", show_default=True,
              help="measured: a link per measured pair; mesh: every pair, unmeasured ones filled from "
                   "the least-latency route")
@click.option("--throughput-unit", type=click.Choice(["gbps", "mbps"]), default=None,
              help="the throughput matrix's unit (default: its header's, else gbps; all values above 1000 are "
                   "refused unless a unit is said)")
@click.option("--bandwidth-scale", type=_Finite(min=0, min_open=True), default=1.0, show_default=True,
              help="multiply the measured throughput (e.g. by the number of parallel gateway pairs)")
@click.option("--name", default=None, help="instance name (default: the sites table's, else 'measured')")
@click.option("--model", default=None, help="model name (overrides the sites table's [workload] model)")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="the instance TOML to write")
@_guard
def import_network_cmd(latency_path, throughput_path, latency_unit, sites_path, gpus, links, throughput_unit,
                       bandwidth_scale, name, model, out_path):
    """Build an instance TOML from measured latency and throughput matrices.

    One-way latency = RTT / 2 (the mean of both directions when both were
    measured); bandwidth = the smaller measured throughput of the two
    directions.  The instance is loaded back (validated) before it is written.
    """
    from .problem.measured import blame, build

    pio.check_output(out_path, "--out", [latency_path, throughput_path, sites_path])
    lat = pio.read_matrix(latency_path)
    tput = pio.read_matrix(throughput_path)
    sites = pio.read_sites(sites_path)
    built = build(lat, tput, sites, links=links, bandwidth_scale=bandwidth_scale, unit=throughput_unit,
                  gpus=gpus, name=name, model=model, latency_unit=latency_unit)
    inst = pio.write_instance(built.instance, built.header, out_path,
                              blame=lambda f: blame(f, sites, model is not None))
    out.print(f"{out_path}: {inst.name}: {len(inst.domains)} domains, {inst.total_gpus} GPUs, "
              f"{len(inst.links)} links ({built.measured} measured"
              + (f", {built.filled} filled from routes" if links == "mesh" else "") + ")"
              + (f"; left out, half-measured: {', '.join(built.left_out)}" if built.left_out else ""))


@main.command("calibrate")
@click.argument("instance")
@click.argument("runs_path", metavar="RUNS")
@click.option("--transfers", "transfers_path", type=click.Path(dir_okay=False), default=None,
              help="measured transfers CSV: a,b,bytes,seconds[,group] (rows of one group ran together)")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), callback=_writable, default=None,
              help="write the fitted instance (TOML) here; without it, only the tables")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document instead of the tables")
@_guard
def calibrate_cmd(instance, runs_path, transfers_path, out_path, as_json):
    """Fit INSTANCE's optional figures to measured runs (and transfers).

    RUNS is a CSV with the header plan,seconds: a plan file (relative to the
    CSV's folder) and its measured iteration time in seconds, one row per
    run.  --transfers adds measured point-to-point transfers, header
    a,b,bytes,seconds and optionally group (rows with the same group ran at
    the same time, started together).

    Least squares (bounds respected) on modelled / measured - 1, the model
    being SPEC v3: the transfers fit each measured link's bandwidth (the
    smaller of its two directions) and latency, and the uplink_gbps of a
    domain with transfers measured together; then the runs, simulated by the
    evaluator on that network, fit gpu.mfu and gpu.unit_overhead_ms.  A
    figure the measurements cannot separate from others (Jacobian rank at
    the start figures) is left as it was and named with the reason.  Prints
    measured vs modelled before and after with the residuals; exit 2 for a
    bad CSV or fewer measurements than the figures they depend on.
    """
    from .presentation.calibration import calibration_tables
    from .scoring.calibrate import SPEC, calibrate

    inst = pio.load_instance(instance, spec=SPEC)
    src = pio.resolve_instance_path(instance)
    if out_path:
        pio.check_output(out_path, "--out", [src, runs_path, transfers_path])
    runs = pio.read_runs(runs_path, inst)
    transfers = pio.read_transfers(transfers_path, inst) if transfers_path else None
    try:
        cal = calibrate(inst, runs, transfers)
    except InputError as e:  # too few measurements: name the file they came from
        if e.file is None:
            e.file = str(transfers_path if (e.field or "").startswith("transfers") else runs_path)
        raise
    if out_path:
        header = [f"Calibrated by `planner calibrate` (SPEC v{SPEC}) from {instance}: runs {runs_path}"
                  + (f", transfers {transfers_path}" if transfers_path else "") + f"; code {code_version()}.",
                  f"rms relative residual {cal.rms_before:.4g} before, {cal.rms_after:.4g} after, over "
                  f"{len(cal.rows)} measurements."]
        header += [f"fitted {f.field}: {'absent' if f.before is None else f'{f.before:.12g}'} -> {f.after:.12g}" + (f" ({f.note})" if f.note else "")
                   for f in cal.fitted]
        header += [f"left as it was: {u.field} ({u.reason})" for u in cal.unchanged
                   if not u.reason.startswith(("no measured transfer crosses", "no transfers given",
                                                "no transfers out of or into"))]
        pio.write_calibrated(src, cal.figures(), header, out_path)
    if as_json:
        click.echo(strict_json({"instance": instance, "out": out_path, "spec": SPEC, **cal.to_dict()}))
        return
    for table in calibration_tables(cal):
        out.print(table)
    for note in cal.notes:
        out.print(f"note: {note}")
    if out_path:
        out.print(f"fitted instance written to {out_path}")


@main.command("report")
@click.argument("instance")
@click.argument("plan_file", metavar="PLAN")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="the HTML page to write")
@_guard
def report_cmd(instance, plan_file, out_path):
    """Write PLAN on INSTANCE as one self-contained HTML page (summary, stages, Gantt chart,
    map, what limits it); exit 3, after writing it, when the plan is infeasible."""
    from .presentation.html_report import render

    inst = pio.load_instance(instance)
    pio.check_output(out_path, "--out", [pio.resolve_instance_path(instance), plan_file])
    p = pio.load_plan(plan_file, inst)
    pio.write_atomic(out_path, render(inst, p, instance_file=str(instance), plan_file=str(plan_file)))
    violations = check_plan(inst, p)  # the rules only: render has simulated the plan already
    out.print(f"report written to {out_path}")
    if violations:
        click.echo(f"error: {plan_file}: the plan is infeasible on {inst.name}; the report says why:\n"
                   + "\n".join(f"  - {v.message}" for v in violations), err=True)
        sys.exit(EXIT_INFEASIBLE)


@main.command("multireport")
@click.argument("instance")
@click.argument("multiplan_file", metavar="MULTIPLAN")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, callback=_writable,
              help="the HTML page to write")
@click.option("--sharing", type=click.Choice(["reserved", "shared"]), default="reserved", show_default=True,
              help="the summary's evaluation (each job's own section is its plan on its slice: reserved)")
@_guard
def multireport_cmd(instance, multiplan_file, out_path, sharing):
    """Write MULTIPLAN on INSTANCE (with [[jobs]]) as one self-contained HTML page (the jobs'
    summary, the map coloured by job, one section per job on its slice); exit 3, after
    writing it, when the multi-plan is infeasible."""
    from .presentation.multireport import render_multi
    from .scoring.multievaluate import multievaluate

    minst = pio.load_multi_instance(instance)
    pio.check_output(out_path, "--out", [pio.resolve_instance_path(instance), multiplan_file])
    mp = pio.load_multiplan(multiplan_file, minst)
    pio.write_atomic(out_path, render_multi(minst, mp, sharing, instance_file=str(instance),
                                            plan_file=str(multiplan_file)))
    out.print(f"report written to {out_path}")
    ev = multievaluate(minst, mp, sharing)
    if not ev.feasible:
        click.echo(f"error: {multiplan_file}: the multi-plan is infeasible on {minst.name}; the report says why:\n"
                   + "\n".join(f"  - {v}" for v in ev.violations), err=True)
        sys.exit(EXIT_INFEASIBLE)


def run() -> None:
    """The ``planner`` console script: :func:`main`, then a quick exit.  The
    interpreter's teardown (unloading torch, OR-Tools and HiGHS: 0.5-1 s) would
    count against ``--time-limit``, which is wall clock from process start; the
    exit handlers still run (logging, multiprocessing), only the module
    teardown is skipped."""
    import atexit

    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    if code is not None and not isinstance(code, int):
        click.echo(code, err=True)
        code = 1
    try:
        import threading

        # what the interpreter's exit does first: join non-daemon threads and run their exit hooks
        # (concurrent.futures tells idle pool workers to end there; without it the atexit join
        # of multiprocessing waits for them forever)
        getattr(threading, "_shutdown", lambda: None)()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code or 0)


if __name__ == "__main__":
    run()
