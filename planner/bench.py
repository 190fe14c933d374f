"""The benchmark: solvers versus RL versus greedy and two baselines users
know, on a suite of instances, static and under changing networks.

Static: every (instance, method) plans on the base network; we report the
evaluator's iteration time and cost per iteration, T_est, the ratio of the
instance's objective (time, or cost on a cost instance) to its lower bound
(``x_bound``), plan time, status and gap.  Dynamic: every instance gets a generated trace
(seeded with ``TEST_TRACE_SEED + seed``, a trace no method has seen: the RL
policy trains on the week generated with ``seed``); a training job of N
iterations (``"auto"``: as many as the static greedy plan runs in the trace's
length at base speed) runs through it under the static, greedy, resolve
(MILP), rl (the policy trained for the static table), hysteresis, mpc,
controller (the packaged learned controller, trained on seeds below
``TEST_TRACE_SEED``) and oracle policies (``policies`` picks which; every
epoch's greedy plan is computed once per instance and shared); we report
total time, the extra time over the oracle, iterations per hour,
reconfiguration and stalled time, the number of re-planning decisions, the
mean wall time of one and of a keep-or-switch choice.

Methods: ``greedy``, ``milp`` (time limit), ``cpsat`` (when installed),
``rl`` (the shipped MaskablePPO policy of ``models/rl/``, or one trained on
the instance with a stated budget of environment steps, its training time
reported apart; :mod:`planner.solvers.rl`), ``megatron``
(one domain per stage, uniform layer split, 1f1b, the largest tp, as many
replicas as every chosen domain holds) and ``random`` (a random feasible
plan: random shape, balanced split, random placement; seeded).

Tasks run in a local process pool (default), serially, or on a Ray cluster
(``executor="ray"``, ``address=...``); deterministic methods give identical
results everywhere.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .problem.files import atomic_path, write_atomic

STATIC_METHODS = ("greedy", "milp", "cpsat", "rl", "megatron", "random")
# rollout traces use seed TEST_TRACE_SEED + seed; RL trains on seed, the controller on seeds below it
from .problem.traces import TEST_TRACE_SEED  # noqa: E402
DYNAMIC_POLICIES = ("static", "greedy", "resolve", "rl", "hysteresis", "mpc", "controller")
SUITE_MAX_DOMAINS = 40  # the default suite: packaged instances up to this many domains


def suite_instances() -> list[str]:
    """The packaged instances of the default suite: every one of at most
    ``SUITE_MAX_DOMAINS`` domains.  The national-scale ones (edwc-120dc,
    edwc-300dc, azure-zones: 100-300 domains, where the exact planners build
    models of domains^2 x stages) run when named; ``benchmarks/scale.py``
    measures them."""
    from .problem import io as pio

    return [n for n in pio.available("instances") if len(pio.load_instance(n).domains) <= SUITE_MAX_DOMAINS]


@dataclass
class Task:
    instance: str
    method: str
    time_limit: float
    seed: int
    rl_steps: int | None


def megatron_plan(instance):
    """One domain per stage, uniform split, 1f1b, the largest tp that fits; None if impossible."""
    from .problem.plan import Plan
    from .scoring.evaluator import check_plan

    wl = instance.workload
    n = instance.num_units
    doms = sorted(instance.domains, key=lambda d: (-d.gpus, instance.domain_index[d.name]))
    for tp in sorted(wl.tensor_parallel, reverse=True):
        for S in range(1, min(len(doms), n, instance.max_stages) + 1):
            chosen = [d for d in doms if d.gpus_per_node >= tp][:S]
            if len(chosen) < S:
                break
            R_cap = min(d.gpus // tp for d in chosen)
            for b in wl.micro_batch_sizes:
                for R in range(R_cap, 0, -1):
                    if wl.global_batch_size % (R * b):
                        continue
                    cuts = [round(i * n / S) for i in range(S + 1)]
                    p = Plan.build(list(zip(cuts, cuts[1:])), [[d.name for d in chosen]] * R, tp=tp,
                                   micro_batch_size=b, instance=instance, schedule="1f1b")
                    if not check_plan(instance, p):
                        return p
                    break
    return None


def random_plan(instance, seed: int = 0, tries: int = 200):
    """A random feasible plan (seeded), or None."""
    from .scoring.evaluator import check_plan
    from .problem.plan import Plan
    from .problem.space import PlanSpace

    rng = np.random.default_rng(seed)
    space = PlanSpace(instance)
    shapes = list(space.shapes())
    gbs = instance.workload.global_batch_size
    for _ in range(tries):
        if not shapes:
            return None
        sh = shapes[int(rng.integers(len(shapes)))]
        cuts = space.partition(sh.tp, sh.micro_batch, sh.schedule, sh.stages, sh.micro_batches(gbs))
        if cuts is None:
            continue
        free = space.slots(sh.tp)
        names = [d for d in free for _ in range(free[d])]
        if len(names) < sh.stages * sh.replicas:
            continue
        pick = rng.permutation(len(names))[: sh.stages * sh.replicas]
        flat = [names[i] for i in pick]
        placement = [flat[r * sh.stages:(r + 1) * sh.stages] for r in range(sh.replicas)]
        p = Plan.build(cuts, placement, tp=sh.tp, micro_batch_size=sh.micro_batch, instance=instance,
                       schedule=sh.schedule)
        if not check_plan(instance, p):
            return p
    return None


def run_static(task: Task) -> dict:
    """One (instance, method) on the base network; a row of the static table."""
    import logging

    from .scoring.bounds import objective_lower_bound
    from .problem.errors import PlannerError
    from .problem.io import load_instance
    from .solvers.registry import SOLVERS, finish
    from .solvers.registry import plan as make_plan

    logging.getLogger("planner").setLevel(logging.WARNING)
    inst = load_instance(task.instance)
    row = {"instance": task.instance, "method": task.method, "objective": inst.options.objective, "status": "n/a",
           "iteration_s": None, "cost_per_iteration": None, "estimate_s": None, "sim_over_est": None,
           "x_bound": None, "plan_s": None, "gap": None, "train_s": None}
    t0 = time.perf_counter()
    try:
        if task.method in ("greedy", "milp", "cpsat"):
            if task.method not in SOLVERS:
                row["status"] = "not installed"
                return row
            p = make_plan(inst, solver=task.method, time_limit=task.time_limit if task.method != "greedy" else None,
                          seed=task.seed)
        elif task.method == "rl":
            from .solvers.rl import policy_bytes, rl, shipped_policy, train

            if task.rl_steps:  # train with the stated budget
                policy, _ = train(inst, steps=task.rl_steps, seed=task.seed)
                row["train_s"] = time.perf_counter() - t0
                row["_policy"] = policy_bytes(policy)  # for the rl rollout policy; not a table column
            else:  # the shipped policy (models/rl/), trained beforehand
                path = shipped_policy(inst.name)
                if path is None:
                    row["status"] = "no policy"
                    return row
                policy = str(path)
                row["_policy"] = path.read_bytes()
            t0 = time.perf_counter()
            p = finish(inst, rl(inst, policy=policy, seed=task.seed), "rl", 0.0)
        else:
            raw = megatron_plan(inst) if task.method == "megatron" else random_plan(inst, task.seed)
            if raw is None:
                row["status"] = "no plan"
                return row
            p = finish(inst, raw, task.method, 0.0)
    except PlannerError as e:
        row["status"] = f"error: {e}".splitlines()[0][:60]
        return row
    except ImportError:
        row["status"] = "not installed"
        return row
    pr = p.predicted
    value = pr.iteration_time_s if inst.options.objective == "time" else pr.cost_per_iteration
    row.update(status=p.solver.status, iteration_s=pr.iteration_time_s, cost_per_iteration=pr.cost_per_iteration,
               estimate_s=pr.estimate_s, sim_over_est=_flagged_ratio(pr.simulated_over_estimate),
               x_bound=value / objective_lower_bound(inst), plan_s=time.perf_counter() - t0,
               gap=p.solver.gap if task.method in ("milp", "cpsat") else None)
    return row


def _flagged_ratio(r: float | None) -> str | None:
    """T / T_est (the plan's ``predicted.simulated_over_estimate``) as the static table shows
    it: 4 digits, "!" above ESTIMATE_FLAG (1.01)."""
    from .scoring.evaluator import ESTIMATE_FLAG

    return None if r is None else f"{r:.4f}" + ("!" if r > ESTIMATE_FLAG else "")


def auto_iterations(instance, hours: float) -> int:
    """As many iterations as greedy's plan for the base network runs in ``hours``."""
    from .solvers.registry import plan as make_plan

    p = make_plan(instance, solver="greedy")
    return max(1, int(hours * 3600.0 / p.predicted.iteration_time_s))


def run_dynamic(args: tuple) -> list[dict]:
    """Rollouts of one instance through its generated trace under every policy:
    ``args`` = (instance, hours, iterations or "auto", seed, time limit of the
    resolve solver, resolve solver or None, trained RL policy's bytes or None,
    policies (a subset of DYNAMIC_POLICIES), controller file or None for the packaged one).
    Every epoch's greedy plan is computed once and shared by the policies (and the oracle)."""
    import logging

    from .problem.io import load_instance
    from .dynamics.policies import EpochPlans
    from .dynamics.rollout import rollout
    from .problem.traces import generate

    logging.getLogger("planner").setLevel(logging.WARNING)
    name, hours, iterations, seed, time_limit, resolver, policy, wanted, controller = (tuple(args) + (None, None))[:9]
    wanted = DYNAMIC_POLICIES if wanted is None else wanted
    inst = load_instance(name)
    tr = generate(inst, hours=hours, seed=TEST_TRACE_SEED + seed)
    n = auto_iterations(inst, hours) if iterations == "auto" else int(iterations)
    pols = []
    for pol in DYNAMIC_POLICIES:
        if pol not in wanted or (pol == "resolve" and not resolver) or (pol == "rl" and policy is None):
            continue
        pols.append((pol, resolver if pol == "resolve" else "greedy"))
    plans = EpochPlans(inst, tr, seed=seed)
    rows, seen = [], []
    for pol, solver in pols + [("oracle", None)]:
        r = rollout(inst, tr, pol, n, solver=solver or "greedy", time_limit=time_limit,
                    solver_time="measured", candidates=seen, seed=seed, rl_policy=policy,
                    controller=controller, plans=plans)
        seen += r.plans
        label = f"resolve ({solver})" if pol == "resolve" else pol
        rows.append({"instance": name, "policy": label, "trace_seed": TEST_TRACE_SEED + seed,
                     **{k: v for k, v in r.summary().items() if k != "policy"}})
    oracle = rows[-1]["total_s"] if rows[-1]["completed"] else None
    for r in rows:  # extra wall time over the hindsight oracle on the same trace and iterations
        r["over_oracle"] = r["total_s"] / oracle - 1.0 if oracle and r["completed"] else None
    return rows


def _map(fn, items, executor: str, workers: int, address: str | None, progress=None):
    if executor == "serial":
        out = []
        from .solvers import stop

        for it in items:
            if stop.requested():  # Ctrl-C: the rows so far
                break
            out.append(fn(it))
            if progress:
                progress()
        return out
    if executor == "ray":
        import ray

        if not ray.is_initialized():
            ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                     ignore_reinit_error=True, log_to_driver=False)
        remote = ray.remote(fn)
        refs = [remote.remote(it) for it in items]
        out = []
        for ref in refs:
            out.append(ray.get(ref))
            if progress:
                progress()
        return out
    from concurrent.futures import ProcessPoolExecutor, wait

    from .solvers import stop
    from .solvers.executor import from_main, spawn_context

    # fresh interpreters: a forked worker inherits this process's stop.Watch (its signal handlers and
    # wake-up pipe) and OR-Tools' or HiGHS's threads, and its greedy runs saw stop requests that were
    # never made ("greedy: stopped early (interrupted)" hundreds of times in one bench)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=spawn_context(keep_main=from_main(fn)))
    futures = [pool.submit(fn, it) for it in items]
    out = []
    try:
        for fut in futures:  # in order; on Ctrl-C (planner.solvers.stop) keep what finished
            while not fut.done() and not stop.requested():
                wait([fut], timeout=0.2)
            if not fut.done():
                break
            try:
                out.append(fut.result())
            except Exception:
                if stop.requested():  # a worker hit by the same Ctrl-C
                    break
                raise
            if progress:
                progress()
    finally:
        if stop.requested():
            for proc in list(getattr(pool, "_processes", {}).values()):
                if proc.is_alive():
                    proc.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
        else:
            pool.shutdown()
    return out


def run(instances, methods=STATIC_METHODS, time_limit: float = 60.0, seed: int = 0, rl_steps: int | None = None,
        dynamic: bool = True, hours: float = 24.0, iterations: int | str = 2000, executor: str = "process",
        workers: int = 2, address: str | None = None, show_progress: bool = True, policies=DYNAMIC_POLICIES,
        controller: str | None = None):
    """(static rows, dynamic rows) for the suite; see the module docstring.  The
    resolve policy uses the MILP (when ``milp`` is among ``methods``) with
    ``min(time_limit, 30)`` s per re-solve; the rl policy uses the policy
    of the static table (when ``rl`` is among ``methods``): trained with
    ``rl_steps`` environment steps, or (None) the shipped one under ``models/rl/``;
    the controller policy the controller file ``controller`` (default: the packaged one).
    ``policies``: the dynamic policies to run (the oracle always runs)."""
    from rich.console import Console
    from rich.progress import Progress

    tasks = [Task(i, m, time_limit, seed, rl_steps) for i in instances for m in methods]
    # progress on stderr: stdout carries only the results (pipes stay clean)
    with Progress(console=Console(stderr=True), disable=not show_progress, transient=False) as prog:
        bar = prog.add_task("static plans", total=len(tasks))
        static = _map(run_static, tasks, executor, workers, address, lambda: prog.advance(bar))
        rl_policies = {r["instance"]: r.pop("_policy") for r in static if "_policy" in r}
        dyn = []
        from .solvers import stop

        if dynamic and not stop.requested():
            bar2 = prog.add_task("rollouts", total=len(instances))
            resolver = "milp" if "milp" in methods else None
            items = [(i, hours, iterations, seed, min(time_limit, 30.0), resolver, rl_policies.get(i),
                      tuple(policies), controller) for i in instances]
            for rows in _map(run_dynamic, items, executor, workers, address, lambda: prog.advance(bar2)):
                dyn += rows
    return static, dyn


def _fmt(v, nd=4):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)


STATIC_COLUMNS = ["instance", "method", "objective", "iteration_s", "cost_per_iteration", "x_bound", "estimate_s",
                  "sim_over_est", "plan_s", "status", "gap", "train_s"]
DYNAMIC_COLUMNS = ["instance", "policy", "total_s", "over_oracle", "iterations_per_hour", "compute_s", "reconfig_s",
                   "stalled_s", "switches", "decisions", "decision_s", "choice_ms", "solver_s", "iterations",
                   "completed", "trace_seed"]


def _table(rows, cols, base: Path, command: str, code: str | None = None) -> dict[str, Path]:
    """``base``.csv and ``base``.md (headed by the command) of ``rows``."""
    csv_path, md_path = base.with_suffix(".csv"), base.with_suffix(".md")
    with atomic_path(csv_path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, cols)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c) for c in cols})
    md = [f"Command: `{command}`", ""] + ([f"Code: `{code}` (git describe)", ""] if code else [])
    md += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    write_atomic(md_path, "\n".join(md) + "\n")
    return {csv_path.name: csv_path, md_path.name: md_path}


# what every run writes: a folder holding it holds an earlier bench's results (--force replaces them)
MARKER = ("static.csv", "static.md")


def new_out_dir(now: float | None = None, under: str | Path = ".") -> Path:
    """The default output folder: ``bench-YYYYMMDD-HHMMSS`` (local time) under ``under``, with
    ``-2``, ``-3`` ... when that exists, so a run never writes over earlier results."""
    base = Path(under) / time.strftime("bench-%Y%m%d-%H%M%S", time.localtime(now))
    out, k = base, 1
    while out.exists() or out.is_symlink():
        k += 1
        out = base.with_name(f"{base.name}-{k}")
    return out


def write(static, dyn, out_dir, command: str, code: str | None = None) -> dict[str, Path]:
    """Markdown + CSV tables and PNG plots under ``out_dir`` (the Markdown headed by
    ``command`` and, when given, the ``code`` version)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = _table(static, STATIC_COLUMNS, out_dir / "static", command, code)
    if dyn:
        files.update(_table(dyn, DYNAMIC_COLUMNS, out_dir / "dynamic", command, code))
    files.update(_plots(static, dyn, out_dir))
    return files


def _grouped_bars(rows, group_key, series_key, series, value_key, ylabel, title, path: Path,
                  log: bool = False) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({r[group_key] for r in rows})
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(groups) * len(series) / 3), 4))
    wdt = 0.8 / max(1, len(series))
    for k, name in enumerate(series):
        ys = [next((r[value_key] for r in rows if r[group_key] == g and r[series_key] == name
                    and r[value_key] is not None), np.nan) for g in groups]
        ax.bar(np.arange(len(groups)) + k * wdt, ys, wdt, label=name)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - wdt / 2)
    ax.set_xticklabels(groups, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


def _plots(static, dyn, out_dir: Path) -> dict[str, Path]:
    meths = [m for m in STATIC_METHODS if any(r["method"] == m for r in static)]
    files = {"static.png": _grouped_bars(
        static, "instance", "method", meths, "x_bound", "objective / lower bound",
        "static: simulated iteration time (cost per iteration on cost instances) over the instance's lower bound",
        out_dir / "static.png", log=True)}
    if dyn:
        # total times differ by orders of magnitude between instances: show each policy's
        # extra time over the hindsight oracle's on the same trace and the same iterations
        best = {r["instance"]: r["total_s"] for r in dyn if r["policy"] == "oracle" and r["completed"]}
        rel = [{**r, "over_oracle": 100.0 * (r["total_s"] / best[r["instance"]] - 1.0)
                if best.get(r["instance"]) and r["completed"] else None} for r in dyn if r["policy"] != "oracle"]
        pols = list(dict.fromkeys(r["policy"] for r in rel))
        files["dynamic.png"] = _grouped_bars(
            rel, "instance", "policy", pols, "over_oracle", "% more wall time than the oracle",
            "dynamic: same iterations through a WAN trace; extra time over the oracle (lower is better)",
            out_dir / "dynamic.png")
    return files
