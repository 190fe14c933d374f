"""SPEC v3 by default, no slowdown: plans and evaluator speed, before and after (issue 24).

The goal: "every solver's plan at 60 s, scored under v3, no worse than today's
plan for the same instance file re-scored under v3 (before any `uplink_gbps`
is added); evaluator plan-states per second on the same plans and states no
worse than today; one benchmark table, before and after, same run."

*Before* is the planner at a git revision (``--rev``, default 71c5e6e: SPEC v2
by default, the planners plan under v2), checked out into a temporary
``git worktree`` that is removed at the end; *after* is this working tree.
Both sides run as fresh processes with their own tree first on the path:

    PYTHONPATH=<tree> python -m planner.cli plan INSTANCE --solver S --time-limit T --seed 0 --out P.json -q

for every instance file of the *before* revision (``instances/*.toml`` there,
so no field added since counts) and every solver, the two sides of one
(instance, solver) back to back (the order alternating), so that the
machine's load hits both alike.  Both plans are then scored by this tree's
evaluator under SPEC v3 (``Evaluator(instance, plan, spec=3)``, base network):
the exact iteration time T, or the cost per iteration with T for
``objective = "cost"`` instances.  A row is flagged when after / before
> 1.001 (worse by more than 0.1%), or when after has no plan (or a plan v3
finds infeasible) where before had one.

Evaluator speed: the before side's plans of a few instances, the same K
network states (random perturbations of the base network, seeded:
bandwidth x lognormal(0, 0.2), latency x uniform(1, 2)), timed as
plan-states/s of ``Evaluator(instance, plan, spec=...).iteration_times(states)``
(compiled once, outside the timing) by one timing server per tree, a
subprocess with one thread (OMP_NUM_THREADS=1): the before tree's default
(today), this tree's ``spec=2`` and ``spec=3``.  Per plan, a few rounds of one
timing per version back to back, the order rotating every round, so that load
hits the three alike; the median.  The servers also return the times, so the
table says whether ``spec=2`` still equals today's evaluator (max relative
difference).

Progress on stderr, one line per run; a failing run is recorded with its exit
code and the benchmark goes on.  Writes a Markdown file (``--out``, default
benchmarks/results/v3_no_slowdown.md) naming the command, both commits, the
load average before and after, the tables and a summary.

    python benchmarks/v3_no_slowdown.py [--time-limit 60] [--instances a,b] [--solvers greedy,milp]
        [--rev 71c5e6e] [--out benchmarks/results/v3_no_slowdown.md]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's planner, whatever the venv has installed
sys.path.insert(1, str(Path(__file__).resolve().parent))
from _results import commit  # noqa: E402

DEFAULT_REV = "71c5e6e"
SOLVERS = ("greedy", "milp", "cpsat", "hier", "anneal", "auto")  # rl: optional, --solvers
TOLERANCE = 1e-3  # a plan is "worse" when after / before > 1 + TOLERANCE
SPEED_PREFERRED = ("two-dc", "cost-edwc", "edwc-full", "gcp-16")
KILL_AFTER = 12  # a run still going after this many times its limit (+ 60 s) is killed and recorded


# -- the two trees ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tree:
    """One side: its name ("before"/"after"), its root (on PYTHONPATH) and its commit."""

    side: str
    root: Path
    commit: str


def git(*args, cwd=ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def add_worktree(rev: str, where: Path) -> Tree:
    """Check ``rev`` out, detached, into a new git worktree at ``where``."""
    git("worktree", "add", "--detach", "--quiet", str(where), rev)
    return Tree("before", where, git("rev-parse", "--short", "HEAD", cwd=where))


def remove_worktree(tree: Tree) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(tree.root)], cwd=ROOT, capture_output=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)


def tree_env(tree: Tree, one_thread: bool = False) -> dict:
    """The environment of a subprocess of ``tree``: its root first on PYTHONPATH; with
    ``one_thread``, OMP_NUM_THREADS=1 (the evaluator's timings; the planners run as a user's would)."""
    env = dict(os.environ, PYTHONPATH=str(tree.root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if one_thread:
        env["OMP_NUM_THREADS"] = "1"
    return env


def planner_file(tree: Tree) -> str:
    """Where ``tree``'s subprocesses import planner from (must be inside ``tree.root``)."""
    return subprocess.run([sys.executable, "-c", "import planner; print(planner.__file__)"],
                          env=tree_env(tree), capture_output=True, text=True, cwd=tempfile.gettempdir()
                          ).stdout.strip()


# -- plans, scored under v3 ------------------------------------------------------------------------

@dataclass
class Run:
    """One ``planner plan`` command: wall seconds, exit code, the plan file (None: no plan),
    and the plan's solver status or the last line of stderr."""

    wall_s: float
    exit_code: int
    plan: Path | None
    what: str


def plan_cmd(instance: Path, solver: str, limit: float, out: Path) -> list[str]:
    return [sys.executable, "-m", "planner.cli", "plan", str(instance), "--solver", solver,
            "--time-limit", f"{limit:g}", "--seed", "0", "--out", str(out), "-q"]


def run_plan(tree: Tree, instance: Path, solver: str, limit: float, out: Path) -> Run:
    """Run ``tree``'s CLI once (a fresh process); never raises for a failing run."""
    out.unlink(missing_ok=True)
    t = time.perf_counter()
    try:
        r = subprocess.run(plan_cmd(instance, solver, limit, out), capture_output=True, text=True,
                           env=tree_env(tree), cwd=out.parent, timeout=KILL_AFTER * limit + 60)
    except subprocess.TimeoutExpired:
        return Run(time.perf_counter() - t, -9, None, f"killed after {KILL_AFTER} x the limit + 60 s")
    wall = time.perf_counter() - t
    if r.returncode == 0 and out.is_file():
        try:
            what = json.loads(out.read_text())["solver"]["status"]
        except (ValueError, KeyError, TypeError):
            what = "?"
        return Run(wall, 0, out, str(what))
    last = (r.stderr.strip().splitlines() or ["no plan written"])[-1][:60]
    return Run(wall, r.returncode, None, last)


@dataclass
class Score:
    """A plan under SPEC v3 on the base network: the objective (T s, or cost per iteration
    for cost instances), T itself, and whether v3 finds it feasible; ``error`` when the
    plan could not be loaded or scored."""

    objective: float = math.nan
    time_s: float = math.nan
    feasible: bool = False
    error: str = ""


def score_v3(instance_path: Path, plan_path: Path | None, cache: dict) -> Score | None:
    """This tree's evaluator under spec=3 (``None`` for no plan).

    >>> score_v3(Path("instances/two-dc.toml"), Path("p.json"), {}).objective  # doctest: +SKIP
    0.98
    """
    if plan_path is None:
        return None
    from planner import Evaluator, load_plan
    from planner.problem.io import load_instance

    try:
        if instance_path not in cache:
            cache[instance_path] = load_instance(instance_path, spec=3)
        inst = cache[instance_path]
        ev = Evaluator(inst, load_plan(plan_path, inst), spec=3)
        t = ev.iteration_times()
        return Score(float(ev.objective(t)[0]), float(t[0]), not ev.violations())
    except Exception as err:  # a benchmark records what went wrong and goes on
        return Score(error=f"{type(err).__name__}: {err}"[:90])


@dataclass
class Pair:
    """One (instance, solver): both runs and both scores under v3."""

    instance: str
    solver: str
    kind: str  # "time" (objective in s) or "cost" (per iteration)
    before: Run
    after: Run
    score_before: Score | None
    score_after: Score | None


def usable(s: Score | None) -> bool:
    return s is not None and not s.error and s.feasible and not math.isnan(s.objective)


def ratio(p: Pair) -> float | None:
    """after / before of the v3 objective, when both sides have a usable plan (equal
    infinities count as 1)."""
    if not (usable(p.score_before) and usable(p.score_after)):
        return None
    a, b = p.score_after.objective, p.score_before.objective
    if a == b:
        return 1.0
    return a / b if b > 0 else math.inf


def verdict(p: Pair, tol: float = TOLERANCE) -> str:
    """"ok", "WORSE" (after / before > 1 + tol, or after lost the plan before had),
    "ok (before: none)" or "n/a (neither)"."""
    r = ratio(p)
    if r is not None:
        return "WORSE" if r > 1 + tol else "ok"
    if usable(p.score_before):
        return "WORSE"
    if usable(p.score_after):
        return "ok (before: none)"
    return "n/a (neither)"


def _value(s: Score | None, run: Run) -> str:
    if s is None:
        return f"no plan (exit {run.exit_code})"
    if s.error:
        return f"error: {s.error}"
    return f"{s.objective:.6g}" + ("" if s.feasible else " (infeasible under v3)")


def pair_table(pairs: list[Pair], tol: float = TOLERANCE) -> list[str]:
    """Markdown rows: one per (instance, solver).

    >>> pair_table([])[0].startswith("| instance")
    True
    """
    out = ["| instance | solver | objective (v3) | before | after | after / before | wall s before / after "
           "| status before / after |  |",
           "|---|---|---|---|---|---|---|---|---|"]
    for p in pairs:
        r = ratio(p)
        v = verdict(p, tol)
        unit = "s" if p.kind == "time" else "cost/iter"
        out.append(f"| {p.instance} | {p.solver} | {unit} | {_value(p.score_before, p.before)} | "
                   f"{_value(p.score_after, p.after)} | {'' if r is None else f'{r:.4f}'} | "
                   f"{p.before.wall_s:.1f} / {p.after.wall_s:.1f} | {p.before.what} / {p.after.what} | "
                   f"{'' if v.startswith('ok') else v} |")
    return out


def pair_summary(pairs: list[Pair], tol: float = TOLERANCE) -> str:
    """How many (instance, solver) rows are no worse, and the worst after / before.

    >>> pair_summary([])
    'Plans: 0 of 0 (instance, solver) rows no worse under v3 (after / before <= 1.001).'
    """
    verdicts = [verdict(p, tol) for p in pairs]
    counted = [v for v in verdicts if not v.startswith("n/a")]
    good = sum(v.startswith("ok") for v in counted)
    text = (f"Plans: {good} of {len(counted)} (instance, solver) rows no worse under v3 "
            f"(after / before <= {1 + tol:g}).")
    ratios = [(ratio(p), p) for p in pairs if ratio(p) is not None]
    if ratios:
        r, p = max(ratios, key=lambda x: x[0])
        best, q = min(ratios, key=lambda x: x[0])
        text += f" Worst ratio {r:.4f} ({p.instance}, {p.solver}); best {best:.4f} ({q.instance}, {q.solver})."
    lost = [f"{p.instance} {p.solver}" for p, v in zip(pairs, verdicts) if v == "WORSE" and ratio(p) is None]
    if lost:
        text += f" After without a usable plan where before had one: {', '.join(lost)}."
    neither = len(verdicts) - len(counted)
    if neither:
        text += f" {neither} row(s) with a plan on neither side not counted."
    return text


# -- evaluator speed -------------------------------------------------------------------------------

# A timing server, run with a tree's root first on PYTHONPATH: one JSON request a line on stdin,
# one JSON answer a line on stdout.  {"load": instance, "states": npz, "plan": path, "spec": null|2|3}
# compiles an evaluator and answers its id and the times it gives;
# {"time": id, "window": s} answers plan-states/s of one timing of at least that many seconds;
# a request that fails answers {"error": "..."}.
SERVER = r"""
import json, sys, time
import numpy as np
from planner import Evaluator, NetworkStates, load_instance, load_plan
evs, insts = [], {}
for line in sys.stdin:
    req = json.loads(line)
    try:
        if "load" in req:
            if req["load"] not in insts:
                insts[req["load"]] = load_instance(req["load"])
            inst = insts[req["load"]]
            z = np.load(req["states"])
            states = NetworkStates(z["bandwidth_gbps"], z["latency_ms"])
            plan = load_plan(req["plan"], inst)
            ev = Evaluator(inst, plan) if req["spec"] is None else Evaluator(inst, plan, spec=req["spec"])
            evs.append((ev, states))
            ans = {"id": len(evs) - 1, "times": [float(x) for x in ev.iteration_times(states)]}
        else:
            ev, states = evs[req["time"]]
            n, t0 = 0, time.perf_counter()
            while True:
                ev.iteration_times(states)
                n += 1
                dt = time.perf_counter() - t0
                if dt >= req["window"]:
                    break
            ans = {"rate": states.count * n / dt}
    except Exception as err:  # one plan's failure is answered, the server goes on
        ans = {"error": f"{type(err).__name__}: {err}"[:200]}
    print(json.dumps(ans), flush=True)
"""


class Server:
    """A :data:`SERVER` process of ``tree``; ``ask`` sends one request and returns the answer."""

    def __init__(self, tree: Tree, cwd: Path):
        self.tree = tree
        self.log = cwd / f"server-{tree.side}.err"  # a file, not a pipe: warnings cannot fill it and block
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True,
                                         env=tree_env(tree, one_thread=True), cwd=cwd)

    def ask(self, req: dict) -> dict:
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.proc.kill()
            self.proc.wait()
            err = self.log.read_text().strip().splitlines()
            raise RuntimeError(f"{self.tree.side} timing server ended: " + " | ".join(err[-3:]))
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def random_states(inst, k: int, seed: int = 0):
    """``k`` network states around the base network (the perturbation of benchmarks/evaluator.py):
    bandwidth x lognormal(0, 0.2), latency x uniform(1, 2); deterministic for a seed."""
    import numpy as np
    from planner import NetworkStates

    rng = np.random.default_rng(seed)
    base = NetworkStates.base(inst)
    bw = base.bandwidth_gbps * rng.lognormal(0.0, 0.2, (k, len(inst.links)))
    lat = base.latency_ms * rng.uniform(1.0, 2.0, (k, len(inst.links)))
    return NetworkStates(bw, lat)


@dataclass
class Speed:
    """plan-states/s of one plan: the median over every repetition of each version."""

    instance: str
    plans: str  # the solvers whose (identical) before-side plan this is
    today: float  # the before tree's default evaluator
    v2: float  # this tree, spec=2
    v3: float  # this tree, spec=3
    v2_vs_today: float  # max relative difference of T, this tree's spec=2 vs the before tree's default


def rel_diff(a: list[float], b: list[float]) -> float:
    """Max relative difference of two lists of times (equal infinities count as equal).

    >>> rel_diff([1.0, float("inf")], [1.0, float("inf")])
    0.0
    >>> round(rel_diff([1.0], [1.1]), 4)
    0.0909
    """
    worst = 0.0
    for x, y in zip(a, b):
        if x == y:
            continue
        worst = max(worst, abs(x - y) / max(abs(x), abs(y)) if math.isfinite(x) and math.isfinite(y) else math.inf)
    return worst


def speed_table(rows: list[Speed], tol: float) -> list[str]:
    """Markdown rows: one per distinct plan, with the ratios v3 / today, v2 / today, v3 / v2.

    >>> speed_table([Speed("a", "greedy", 100.0, 100.0, 90.0, 0.0)], 0.05)[-1]
    '| a | greedy | 100 | 100 | 90 | 0.90 | 1.00 | 0.90 | 0.0e+00 | SLOWER |'
    """
    out = ["| instance | plan of (before side) | today (before, default) | spec=2 | spec=3 | v3 / today "
           "| v2 / today | v3 / v2 | T: spec=2 vs today, max rel. diff. |  |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        flag = "SLOWER" if s.v3 / s.today < 1 - tol else ""
        out.append(f"| {s.instance} | {s.plans} | {s.today:,.0f} | {s.v2:,.0f} | {s.v3:,.0f} | "
                   f"{s.v3 / s.today:.2f} | {s.v2 / s.today:.2f} | {s.v3 / s.v2:.2f} | {s.v2_vs_today:.1e} | {flag} |")
    return out


def speed_summary(rows: list[Speed], tol: float) -> str:
    """The geometric mean and the worst of v3 / today over the plans.

    >>> speed_summary([Speed("a", "g", 100.0, 100.0, 81.0, 0.0), Speed("b", "g", 100.0, 100.0, 100.0, 0.0)], 0.05)
    'Evaluator: spec=3 / today, geometric mean 0.90, worst 0.81 (a, g); 1 of 2 plans slower than today by more than 5%.'
    """
    if not rows:
        return "Evaluator: no plan measured."
    r = [s.v3 / s.today for s in rows]
    gm = math.exp(sum(math.log(x) for x in r) / len(r))
    worst = min(rows, key=lambda s: s.v3 / s.today)
    slow = sum(x < 1 - tol for x in r)
    return (f"Evaluator: spec=3 / today, geometric mean {gm:.2f}, worst {worst.v3 / worst.today:.2f} "
            f"({worst.instance}, {worst.plans}); {slow} of {len(r)} plans slower than today by more than "
            f"{tol:.0%}.")


VERSIONS = (("before", None, "today"), ("after", 2, "v2"), ("after", 3, "v3"))


def plan_key(path: Path) -> str:
    """A plan file's content without what its solver says about it (``solver``, ``predicted``):
    two solvers' equal plans have one key."""
    doc = json.loads(path.read_text())
    return hashlib.sha256(json.dumps({k: v for k, v in doc.items() if k not in ("solver", "predicted")},
                                     sort_keys=True).encode()).hexdigest()


def speed_plans(pairs: list[Pair], wanted: list[str]) -> list[tuple[str, str, Path]]:
    """(instance, "solver+solver", plan file) for every distinct before-side plan of ``wanted``."""
    out = []
    for name in wanted:
        groups: dict[str, list] = {}
        for p in pairs:
            if p.instance == name and p.before.plan is not None:
                groups.setdefault(plan_key(p.before.plan), []).append(p)
        out += [(name, "+".join(q.solver for q in g), g[0].before.plan) for g in groups.values()]
    return out


def measure_speed(before: Tree, after: Tree, plans: list[tuple[str, str, Path]], k: int, reps: int,
                  window: float, tmp: Path) -> tuple[list[Speed], list[str]]:
    """plan-states/s of every plan under today's evaluator (a server in the before tree) and
    this tree's spec=2 and spec=3 (a server in this tree): for each plan, ``reps`` rounds of
    one timing per version back to back, the order rotating every round; the medians.  Also
    a line for each plan a version could not load or time (that plan is left out)."""
    import numpy as np
    from planner.problem.io import load_instance

    servers = {t.side: Server(t, tmp) for t in (before, after)}
    rows, skipped = [], []
    try:
        for name, solvers, plan in plans:
            npz = tmp / f"states-{name}.npz"
            if not npz.exists():
                st = random_states(load_instance(INSTANCE_PATHS[name], spec=3), k, seed=0)
                np.savez(npz, bandwidth_gbps=st.bandwidth_gbps, latency_ms=st.latency_ms)
            ids, times, errors = {}, {}, []
            for side, spec, label in VERSIONS:
                ans = servers[side].ask({"load": str(INSTANCE_PATHS[name]), "states": str(npz),
                                         "plan": str(plan), "spec": spec})
                if "error" in ans:
                    errors.append(f"{label}: {ans['error']}")
                else:
                    ids[label], times[label] = ans["id"], ans["times"]
            rates = {label: [] for _, _, label in VERSIONS}
            t = time.perf_counter()
            for rep in range(reps if not errors else 0):
                for i in range(len(VERSIONS)):
                    side, _, label = VERSIONS[(i + rep) % len(VERSIONS)]
                    ans = servers[side].ask({"time": ids[label], "window": window})
                    if "error" in ans:
                        errors.append(f"{label}: {ans['error']}")
                        break
                    rates[label].append(ans["rate"])
                if errors:
                    break
            if errors:
                skipped.append(f"Not timed: {name} ({solvers}): {'; '.join(errors)}")
                print(skipped[-1], file=sys.stderr, flush=True)
                continue
            med = {label: statistics.median(v) for label, v in rates.items()}
            rows.append(Speed(name, solvers, med["today"], med["v2"], med["v3"], rel_diff(times["v2"], times["today"])))
            print(f"speed {name} ({solvers}): today {med['today']:,.0f}, spec=2 {med['v2']:,.0f}, "
                  f"spec=3 {med['v3']:,.0f} plan-states/s ({time.perf_counter() - t:.1f} s)",
                  file=sys.stderr, flush=True)
    finally:
        for s in servers.values():
            s.close()
    return rows, skipped


INSTANCE_PATHS: dict[str, Path] = {}  # instance name -> the before revision's file


# -- the run ---------------------------------------------------------------------------------------

def load_line(label: str, a, b) -> str:
    cpus = os.cpu_count()
    text = (f"Load average (1, 5, 15 min) {label} before: {a[0]:.2f} {a[1]:.2f} {a[2]:.2f}, after: "
            f"{b[0]:.2f} {b[1]:.2f} {b[2]:.2f}, on {cpus} CPUs.")
    if max(a[0], b[0]) > (cpus or 1):
        text += (" **The machine was loaded (load above its CPUs): every process here had less CPU than on a "
                 "quiet machine.**")
    return text


def write(out: Path, argv: list[str], lines: list[str]) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"Command: `python benchmarks/v3_no_slowdown.py {' '.join(argv)}`".rstrip() + "\n\n"
                   + "\n".join(lines) + "\n")
    return out


@dataclass
class Setting:
    """What a run was asked for, as the results file states it."""

    rev: str
    before: str  # commits
    after: str
    instances: list[str]
    solvers: list[str]
    time_limit: float
    states: int
    reps: int
    window: float
    tolerance: float  # of the speed flag
    speed_instances: list[str]


def report(st: Setting, pairs: list[Pair], speed_lines: list[str] | None, loads: dict, elapsed: float) -> list[str]:
    """The results file's lines (after the command line).  ``speed_lines`` None: the plans are
    not all made yet (a partial file, rewritten after every pair)."""
    total = len(st.instances) * len(st.solvers)
    head = [
        f"Before: `{st.rev}` = {st.before} (a clean checkout in a temporary git worktree); "
        f"after: {st.after} (this tree{'; uncommitted changes' if st.after.endswith('-dirty') else ''}). "
        f"{len(st.instances)} instance files of {st.before} x {len(st.solvers)} solvers, time limit "
        f"{st.time_limit:g} s, seed 0, both sides back to back per (instance, solver), the order "
        f"alternating; {elapsed:.0f} s in all.",
    ]
    if speed_lines is None:
        head += ["", f"**Partial: {len(pairs)} of {total} (instance, solver) pairs so far; the run goes on "
                 "(or was stopped).**"]
    lines = head + [
        "",
        "## Plans, scored under SPEC v3",
        "",
        "Both plans scored by the after tree's `Evaluator(instance, plan, spec=3)` on the base network: "
        "exact iteration time T (s), or the cost per iteration with T for `objective = \"cost\"` instances. "
        f"Flagged: after / before > {1 + TOLERANCE:g}, or no usable plan after where before had one.",
        "",
        load_line("during the plans", *loads["plans"]),
        "",
        *pair_table(pairs),
        "",
        pair_summary(pairs),
    ]
    if speed_lines is None:
        return lines
    return lines + [
        "",
        "## Evaluator speed, plan-states/s",
        "",
        f"`Evaluator(instance, plan, spec=...).iteration_times(states)` on the same K = {st.states} "
        "states per instance (base network, bandwidth x lognormal(0, 0.2), latency x uniform(1, 2), seed 0), "
        f"the before side's distinct plans of {', '.join(st.speed_instances) or 'no instance'}; compiled once, "
        f"outside the timing; one thread; one timing server per tree; per plan {st.reps} rounds of one timing "
        f"(>= {st.window:g} s) per version back to back, the order rotating; the median. today = the before "
        f"tree's default evaluator ({st.before}); spec=2 and spec=3 = the after tree. Flagged: spec=3 below "
        f"today by more than {st.tolerance:.0%}. The last column checks that the before tree's default and "
        "the after tree's spec=2 give the same times; where they run the same code, v2 / today measures the "
        "noise of the timing.",
        "",
        load_line("during the timings", *loads["speed"]),
        "",
        *speed_lines,
        "",
        "## Summary",
        "",
        pair_summary(pairs),
        speed_lines[-1],
    ]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per plan (default 60)")
    ap.add_argument("--instances", default=None,
                    help="comma-separated names (default: every instances/*.toml of --rev)")
    ap.add_argument("--solvers", default=",".join(SOLVERS), help=f"default {','.join(SOLVERS)} (rl optional)")
    ap.add_argument("--rev", default=DEFAULT_REV, help=f"the 'before' revision (default {DEFAULT_REV})")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "v3_no_slowdown.md"))
    ap.add_argument("--keep-plans", default=None, metavar="DIR", help="copy every plan file made here")
    ap.add_argument("--speed-instances", default=None,
                    help=f"instances whose before-side plans time the evaluator (default: those of "
                         f"{','.join(SPEED_PREFERRED)} in the run, else its first 3)")
    ap.add_argument("--states", type=int, default=1000, help="K network states per instance (default 1000)")
    ap.add_argument("--speed-reps", type=int, default=7, help="timings per plan and version (default 7)")
    ap.add_argument("--speed-window", type=float, default=0.3, help="seconds per timing (default 0.3)")
    ap.add_argument("--speed-tolerance", type=float, default=0.05,
                    help="flag a plan whose spec=3 rate is below today's by more than this (default 0.05)")
    args = ap.parse_args(argv)
    solvers = args.solvers.split(",")
    after = Tree("after", ROOT, commit())
    out = Path(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="v3-no-slowdown-"))
    before = None
    t_all = time.perf_counter()
    try:
        before = add_worktree(args.rev, tmp / "before")
        for tree in (before, after):
            where = planner_file(tree)
            if not where.startswith(str(tree.root)):
                print(f"{tree.side}: planner imports from {where!r}, not from {tree.root}", file=sys.stderr)
                return 2
        files = {p.stem: p for p in sorted((before.root / "instances").glob("*.toml"))}
        names = args.instances.split(",") if args.instances else list(files)
        missing = [n for n in names if n not in files]
        if missing:
            print(f"--instances: not an instance file of {args.rev}: {', '.join(missing)} "
                  f"(there: {', '.join(files)})", file=sys.stderr)
            return 2
        INSTANCE_PATHS.update({n: files[n] for n in names})
        wanted = (args.speed_instances.split(",") if args.speed_instances
                  else [n for n in SPEED_PREFERRED if n in names] or names[:3])
        st = Setting(args.rev, before.commit, after.commit, names, solvers, args.time_limit, args.states,
                     args.speed_reps, args.speed_window, args.speed_tolerance, [n for n in wanted if n in names])
        print(f"before: {args.rev} = {before.commit} ({before.root}); after: {after.commit} ({after.root}); "
              f"{2 * len(names) * len(solvers)} runs of up to {args.time_limit:g} s", file=sys.stderr, flush=True)
        plans = Path(args.keep_plans) if args.keep_plans else tmp / "plans"
        plans.mkdir(parents=True, exist_ok=True)
        loads = {"plans": (os.getloadavg(), os.getloadavg())}
        pairs, cache = [], {}
        from planner.problem.io import load_instance

        for i, name in enumerate(names):
            kind = load_instance(files[name], spec=3).options.objective
            for j, solver in enumerate(solvers):
                runs = {}
                order = (before, after) if (i + j) % 2 == 0 else (after, before)
                for tree in order:
                    run = run_plan(tree, files[name], solver, args.time_limit,
                                   plans / f"{name}-{solver}-{tree.side}.json")
                    runs[tree.side] = run
                    print(f"{name} {solver} {tree.side}: {run.wall_s:.1f} s, exit {run.exit_code}, {run.what}",
                          file=sys.stderr, flush=True)
                p = Pair(name, solver, kind, runs["before"], runs["after"],
                         score_v3(files[name], runs["before"].plan, cache),
                         score_v3(files[name], runs["after"].plan, cache))
                r = ratio(p)
                print(f"{name} {solver}: v3 objective after / before = "
                      f"{'-' if r is None else f'{r:.4f}'} {verdict(p)}", file=sys.stderr, flush=True)
                pairs.append(p)
                loads["plans"] = (loads["plans"][0], os.getloadavg())
                write(out, argv, report(st, pairs, None, loads, time.perf_counter() - t_all))

        load2 = os.getloadavg()
        try:
            rows, skipped = measure_speed(before, after, speed_plans(pairs, st.speed_instances),
                                          args.states, args.speed_reps, args.speed_window, tmp)
            speed_lines = (speed_table(rows, args.speed_tolerance) + [""] + [f"{x}  " for x in skipped]
                           + [speed_summary(rows, args.speed_tolerance)])
        except (RuntimeError, OSError, ValueError, KeyError) as err:
            speed_lines = [f"Evaluator speed not measured: {err}"]
        loads["speed"] = (load2, os.getloadavg())
        for line in speed_lines:
            print(line, file=sys.stderr)
        path = write(out, argv, report(st, pairs, speed_lines, loads, time.perf_counter() - t_all))
        print(f"written: {path}", file=sys.stderr)
        return 0
    finally:
        if before is not None:
            remove_worktree(before)
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the worktree is gone (main's finally); a partial results file stays
        print("interrupted", file=sys.stderr)
        sys.exit(130)
