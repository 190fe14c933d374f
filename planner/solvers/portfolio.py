"""``--solver auto``: every planner within one wall-clock budget (a portfolio).

:func:`auto` spends one ``time_limit`` (seconds, wall clock) like this:

1. the MILP (:func:`planner.solvers.milp.milp`, HiGHS, 1 thread) and CP-SAT
   (:func:`planner.solvers.cpsat.cpsat`, 1 worker) start at once, then greedy
   runs here (well under a second) while they start: the first incumbent; each engine in its
   own *process* (``ProcessPoolExecutor`` with
   :func:`planner.solvers.executor.spawn_context`, which does not run the
   user's ``__main__`` again: the machine's cores are shared, so one thread each), with the user's pins and a
   deadline at 60% of the budget (their time limit is what is left of it when
   the process has started).  When the flat models would be too big to build
   (:func:`flat_too_big`: beyond about 40 domains), the one engine is the
   hierarchical planner (:func:`planner.solvers.hierarchy.hier`, without its
   own annealing) instead;
2. while they run, this process anneals (:func:`planner.solvers.anneal.anneal`)
   greedy's plan and the best plans of greedy's next best shapes
   (:func:`planner.solvers.greedy.shape_starts`, ``STARTS`` in all) and one of
   them placed as a pipeline across datacenters
   (:func:`planner.solvers.greedy.spread_starts`), and, with several GPU types,
   the best of greedy's plans of each type's domains alone
   (:func:`planner.problem.subfleet.type_subfleets`: a plan of a sub-fleet is a
   plan of the fleet), an equal share of the engines' window each, the first quarter of it spent on the
   per-stage in-flight limits, :func:`planner.solvers.inflight.tune_inflight`):
   on many domains the engines rarely leave greedy's plan within a minute,
   while a search scored by the exact simulation does, and a shape greedy
   ranks second often anneals further;
3. each engine's plan, status and bound is
   collected as it finishes (and offered again with tuned in-flight limits); one that raised or crashed, or still runs at
   80% of the budget (an overrun under load), is terminated and
   left out (the log and ``solver.engines`` say so); the incumbent is the
   plan that simulates fastest (exact simulation, base network; the
   simulated cost per iteration for a cost instance);
4. :func:`planner.solvers.anneal.anneal` from the incumbent until 92%;
5. the schedule refinement (``refine``, :func:`planner.solvers.registry.refine`:
   in-flight limits, then CP-SAT) with what is left (skipped below one second).

Figures of the search (``auto`` itself; ``plan(solver="auto")`` keeps them
as ``estimate_status``, ``estimate_bound`` ... and claims the instance's
bound on the simulated objective, :func:`planner.scoring.bounds.settle_claims`):
``bound`` is the largest valid
lower bound on T_est (or its cost counterpart) among the engines (and the
instance's analytic bound for a time instance): every engine's bound is at
most the optimum of the same problem (same objective, same pins), so their
maximum is at most the optimum too, hence valid, and the tightest we have.
``gap`` = (objective - bound) / objective with the returned plan's T_est
(before any schedule refinement).  ``status`` is ``optimal`` only if an
engine proved optimality (within its gap) *and* the returned plan's T_est
equals that engine's optimum, or that gap is within the default tolerance
(``within_gap`` within a looser ``gap``); otherwise ``time_limit`` when an engine ran
out of time, failed or was cut off, else ``feasible`` (the simulation
preferred a plan whose T_est is above the proven optimum).  ``incumbent``
names who found the plan (``"cpsat+anneal"`` ...), ``engines`` holds one
line per engine, ``simulated_s`` the incumbent's simulated figure at each
stage.  A returned plan whose schedule is explicit (tuned in-flight limits,
a CP-SAT order, or a lean plan: :func:`planner.solvers.greedy.lean_plans`,
offered after greedy's, fits memory only with fewer micro-batches in flight
than 1f1b) lies outside the space the engines searched (named schedules)
and may beat their optimum.

Reproducible budgets (issue 29).  With a ``seed`` (the default, 0; the CLI
always passes one) every part is budgeted in *deterministic seconds*
(:mod:`planner.solvers.workunits`: counts of work calibrated to wall seconds of
this process on an idle 2-core machine running auto's three processes,
``benchmarks/results/workunits.md``), ``DET_SHARE`` = 75% of ``time_limit`` in
all, the shares above taken of that: the MILP by HiGHS work (model size x
simplex iterations and nodes, :func:`planner.solvers.highs.highs_work`), CP-SAT
by its deterministic time and its models' size (``calibrated``), the
annealing and the in-flight limits by simulated work (stages x micro-batches
per simulation), the refinement likewise; greedy, its shape starts, lean plans
and the sync choice run to completion (fixed work, well under a second up to
16 domains).  So the same command gives the same plan on an idle machine.
``time_limit`` stays a wall-clock limit: the clock is a backstop that cuts a
part still running when its wall deadline comes (an engine is asked for its
incumbent at 80% of the budget; the annealing, tunings and refinement stop
at theirs; greedy's sync choice, the starts and lean plans when the engines
are collected, at 80%, and a part not started by then is skipped), and then
the plan may differ (be weaker); the log says so and
``solver.cut_by_clock`` lists the parts cut (empty: the run was the
deterministic one; ``solver.budget`` is ``"work units"``,
``solver.deterministic_s`` the deterministic seconds).

``deterministic=True``: the same work units, never cut by the clock (an
engine is stopped only past :data:`DETERMINISTIC_BACKSTOP` budgets), so a
seed gives the same plan whatever the load, and the run may take longer than
``time_limit`` (each part also runs its own budget: "Dominance" below).  ``seed=None``: every part by the clock alone, as before
issue 29 (the plan depends on the machine's speed and load).

Dominance (issue 29), with ``deterministic=True``: auto keeps the best plan it
is offered, so it is never worse than a part alone whose very run it
contains.  Greedy's plan is offered first; the CP-SAT engine is CP-SAT
exactly as ``plan(solver="cpsat", deterministic=True)`` runs it alone with the
same budget (:func:`cpsat_alone`: three quarters of the budget in its own
process, then the sync choice and the schedule refinement); the MILP engine
gets the deterministic budget the MILP alone gets; and the annealing alone
(:func:`anneal_alone`: greedy's plan annealed for the whole budget in
deterministic seconds) runs as one more engine (:func:`alone_engines`).
Each engine thus gets a full slice of deterministic work rather than a
share: auto's deterministic work is the sum of its parts', not one budget,
so on 2 cores a deterministic run takes about twice ``time_limit`` or more.
The seeded default keeps one shared budget (above) and does not contain the
parts' runs.

Example
-------
>>> p = plan(instance, solver="auto", time_limit=60)          # doctest: +SKIP
>>> p.solver.incumbent, p.solver.status, p.predicted.iteration_time_s  # doctest: +SKIP
('cpsat+anneal', 'time_limit', 19.6)
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import math
import os
import signal
import threading
import time
from typing import Callable

from . import stop
from ..problem.errors import InfeasibleError, Stopped, TimeLimitError
from ..problem.plan import Plan, SolverInfo
from ..scoring.bounds import estimate_family, gap_claim, lower_bound, objective_lower_bound
from ..scoring.evaluator import Evaluator, check_plan
from .anneal import anneal, anneal_solver, simulated_score
from .cpsat import cpsat
from .executor import exit_with_parent, from_main, spawn_context
from ..problem.subfleet import type_subfleets
from .greedy import greedy, lean_plans, shape_starts, spread_starts
from .hierarchy import hier
from .inflight import tune_inflight
from .milp import milp
from .shapesearch import FLAT_ARCS_MAX, plan_matches
from .syncchoice import choose_sync, choose_sync_scored, sync_enabled, with_best_sync
from .workunits import DET_SHARE, MILP_SEARCH_OVERHEAD, sim_count

log = logging.getLogger("planner.auto")

ENGINES: dict[str, Callable[..., Plan]] = {"milp": milp, "cpsat": cpsat}
ENGINE_SHARE = 0.60  # engines' deadline, fraction of the budget
COLLECT_BY = 0.80  # engines still running then are stopped (their overrun allowance)
ANNEAL_END = 0.92  # the annealing's deadline when a refinement follows
TIE = 1e-9  # relative: scores this close are equal
PROVEN_SHARE = 0.05  # the last annealing's share of the budget once an engine proved optimality
STARTS = 4  # plans (distinct shapes) annealed while the engines run
TUNE_SHARE = 0.25  # of each start's annealing share: in-flight limits first (cheap, systematic)
TUNE_ENGINE = 0.03  # of the budget: in-flight limits of each engine's plan
SYNC_SHARE = 0.10  # with [options] dp_sync (SPEC 11): of the budget, the sync choice on greedy's and the whole-replica plans
# deterministic mode: an engine is stopped only past this many budgets of wall clock, and then
# ``cut_by_clock`` names it (aws-multiregion at 20 s: 3.9 budgets idle, 9.3 beside two busy loops)
DETERMINISTIC_BACKSTOP = 30.0
STOP_GRACE_S = 15.0  # on Ctrl-C or the memory cap, how long an engine may take to hand over its plan
ALONE_CPSAT_SHARE = 0.75  # plan(solver="cpsat")'s share of its budget before the schedule refinement (registry)
HEURISTIC_ENGINES = ("anneal",)  # engines that prove nothing: no bound, no status taken from them


def hier_engine(instance, **options) -> Plan:
    """The hierarchical planner as an engine: no annealing of its own (the portfolio
    anneals), so its top level gets its whole time."""
    return hier(instance, polish=False, **options)


def flat_too_big(instance) -> bool:
    """Whether one shape's flat exact model would be too big to build within a
    minute: its pairs of domains times its stage slots (the arcs of
    :mod:`planner.solvers.formulations.milp`, per replica or aggregated) above
    :data:`FLAT_ARCS_MAX`, about 40 domains at 32 stages.  The packaged instances
    stay below (gcp-16: 16^2 x 32 = 8,192); a 100-domain instance is far above.

    >>> flat_too_big(load_instance("gcp-16"))                     # doctest: +SKIP
    False
    """
    return len(instance.domains) ** 2 * instance.max_stages > FLAT_ARCS_MAX


def cpsat_alone(instance, time_limit: float, seed: int = 0, refine: Callable[..., Plan] | None = None,
                **options) -> list[Plan]:
    """CP-SAT as ``plan(instance, solver="cpsat", time_limit=...)`` runs it alone, as one engine
    of auto: :func:`planner.solvers.cpsat.cpsat` with :data:`ALONE_CPSAT_SHARE` of ``time_limit``
    (seconds; CP-SAT deterministic seconds with ``deterministic=True``), then ``refine`` (the
    registry's schedule refinement; None: none) of its plan with the rest.  Returns [CP-SAT's
    plan, the refined plan]: with the same seed and deterministic budget these are the plans
    CP-SAT alone computes, so auto, which keeps the best plan it is offered, is never worse
    than CP-SAT alone (issue 29, "Dominance").

    >>> cpsat_alone(inst, 29.0, deterministic=True, workers=1, refine=refine)   # doctest: +SKIP
    [Plan(...), Plan(...)]
    """
    p = cpsat(instance, time_limit=ALONE_CPSAT_SHARE * time_limit, seed=seed, **options)
    if sync_enabled(instance):  # as plan() does for a solver that does not choose the sync (SPEC 11)
        p = choose_sync(instance, p, time_limit=None if options.get("deterministic") else SYNC_SHARE * time_limit,
                        pins={k: options.get(k) for k in ("stages", "replicas", "tp", "micro_batch_size", "schedule")},
                        forbid=options.get("forbid") or (), require=options.get("require") or ())
    rest = (1 - ALONE_CPSAT_SHARE) * time_limit
    if refine is None or rest < 0.5 or stop.requested():  # plan() refines with at least REFINE_MIN_S
        return [p]
    return [p, refine(instance, p, time_limit=rest, seed=seed, deterministic=bool(options.get("deterministic")))]


def anneal_alone(instance, time_limit: float, seed: int = 0, max_work: float | None = None, **options) -> Plan:
    """The annealing as ``plan(instance, solver="anneal", ...)`` runs it alone, as one engine of
    auto: :func:`planner.solvers.anneal.anneal_solver` (greedy's plan annealed for ``max_work``
    deterministic seconds, or ``time_limit`` seconds), then, with ``[options] dp_sync`` (SPEC 11), the
    sync choice plan() makes for it (:func:`planner.solvers.syncchoice.choose_sync`; by the
    clock only when ``max_work`` is None).  With the same seed and count this is the plan the
    annealing alone returns.

    >>> anneal_alone(inst, 290.0, max_work=29.0).solver.name                # doctest: +SKIP
    'anneal'
    """
    p = anneal_solver(instance, time_limit=time_limit, seed=seed, max_work=max_work, **options)
    if sync_enabled(instance):
        p = choose_sync(instance, p, time_limit=None if max_work is not None else SYNC_SHARE * time_limit)
    return p


def alone_engines(pinned: bool) -> dict[str, Callable[..., Plan]]:
    """The heuristic parts a deterministic auto also runs *alone*, each as one more engine in its
    own process, so that auto returns a plan no worse than theirs (issue 29): the annealing alone
    (:func:`anneal_alone`, greedy's plan annealed with the whole budget in deterministic seconds).
    None when the user pins the plan (the annealing alone takes no pins).  (The seeded default
    and the clock-budgeted auto share one budget and run none: on 2 cores it would take time from
    the exact engines.)

    >>> sorted(alone_engines(False)), alone_engines(True)
    (['anneal'], {})
    """
    return {} if pinned else {"anneal": anneal_alone}


def _run_engine(solve: Callable[..., Plan], instance, deadline: float, options: dict) -> Plan:
    """In the engine's process: ``solve`` with the time left until ``deadline`` (``time.time()``);
    the process ends if its parent dies (:func:`planner.solvers.executor.exit_with_parent`)."""
    exit_with_parent()
    if options.get("time_limit", 0) is None:  # deterministic: a fixed budget, given by the parent
        options = {k: v for k, v in options.items() if k != "time_limit"}
        limit = options.pop("det_limit")
    else:
        limit = max(0.2, deadline - time.time())
        limit -= min(2.0, 0.1 * limit)  # room for the engine's own overrun (model building, polish)
    with stop.Watch():  # the parent's stop (Ctrl-C, memory cap) arrives as SIGINT: return the incumbent
        return solve(instance, time_limit=limit, **options)


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored in this process while engine processes are spawned: an
    ignored signal stays ignored across exec, so a Ctrl-C forwarded while the
    child is still importing (a loaded machine) is not a traceback; the child's
    :class:`planner.solvers.stop.Watch` listens from then on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _workers(executor: cf.ProcessPoolExecutor) -> list:
    """The executor's worker processes still alive (the engine's process)."""
    return [p for p in dict(getattr(executor, "_processes", None) or {}).values() if p.is_alive()]


def _result(executor: cf.ProcessPoolExecutor, future: cf.Future, wait: float) -> Plan:
    """The engine's plan within ``wait`` seconds; on a stop request (planner.solvers.stop)
    the engine gets SIGINT and a few seconds to hand over its incumbent."""
    deadline = time.time() + wait
    while not stop.requested():
        try:
            return future.result(timeout=max(0.0, min(0.2, deadline - time.time())))
        except cf.TimeoutError:
            if time.time() >= deadline:
                raise
    for proc in _workers(executor):  # once: a second SIGINT is a hard stop for its stop.Watch
        os.kill(proc.pid, signal.SIGINT)
    return future.result(timeout=STOP_GRACE_S)


def _incumbent(candidates):
    """The first candidate within ``TIE`` of the best simulated score (earlier planners win
    ties that are only floating-point noise)."""
    low = min(c[2] for c in candidates)
    return next(c for c in candidates if c[2] <= low * (1 + TIE))


def _same_plan(a: Plan, b: Plan) -> bool:
    return (a.replicas, a.tp, a.micro_batch_size, a.bounds(), a.placement, a.schedule) == \
        (b.replicas, b.tp, b.micro_batch_size, b.bounds(), b.placement, b.schedule)


def _kill(executor: cf.ProcessPoolExecutor, future: cf.Future) -> None:
    """Shut the engine's executor down, its worker process terminated: a straggler's
    work is dropped; a finished one has nothing left to lose, and its own exit (freeing
    a solver's models) took seconds of a loaded machine past the time limit."""
    for proc in _workers(executor):
        proc.terminate()
    if future.done():
        executor.shutdown(wait=True)
        return
    executor.shutdown(wait=False, cancel_futures=True)


class _Run:
    """One run of :func:`auto`: the instance, the user's options, the budgets and what its
    phases share; each phase is a method, called in order by :func:`auto`.

    The budgets: ``t0`` (``time.perf_counter()``) and ``wall0`` (``time.time()``) at the start,
    ``budget`` seconds of wall clock in all, ``end`` = ``t0 + budget``, ``engine_deadline`` the
    engines' wall-clock window (``wall0 + ENGINE_SHARE * budget``); ``counted`` (a seed, or
    ``deterministic``): the parts are budgeted in deterministic seconds, ``work`` of them in all
    (:mod:`planner.solvers.workunits`), the clock a backstop unless ``deterministic``.  What the
    phases share: ``candidates`` (who, plan, simulated score) in the order offered, ``history``
    (each new incumbent and its score: ``solver.simulated_s``), ``lines`` (one per part:
    ``solver.engines``), ``clock["cut"]`` (the parts the clock cut short: ``solver.cut_by_clock``)
    and ``errors`` (what the parts raised).

    >>> run = _Run(inst, 4.0, 0, True, 1e-3, dict(stages=None, replicas=None, tp=None,
    ...            micro_batch_size=None, schedule=None), (), (), None, True)   # doctest: +SKIP
    >>> run.counted, run.work, run.candidates                               # doctest: +SKIP
    (True, 3.0, [])
    """

    def __init__(self, instance, time_limit: float | None, seed: int | None, deterministic: bool, gap: float,
                 pins: dict, forbid, require, refine: Callable[..., Plan] | None, refine_schedule: bool,
                 work_s: float | None = None):
        self.t0 = time.perf_counter()
        self.wall0 = time.time()
        self.budget = 60.0 if time_limit is None else float(time_limit)
        self.end = self.t0 + self.budget
        self.counted = deterministic or seed is not None  # budgets in work units (planner.solvers.workunits)
        self.deterministic = deterministic
        self.seed = 0 if seed is None else int(seed)
        self.work = DET_SHARE * self.budget if work_s is None else float(work_s)  # deterministic seconds in all
        self.engine_deadline = self.wall0 + ENGINE_SHARE * self.budget
        self.clock = {"cut": []}  # the parts the wall clock cut short (seeded mode: the backstop)
        self.instance = instance
        self.kind = instance.options.objective
        self.gap = gap
        self.pins, self.schedule, self.forbid, self.require = pins, pins["schedule"], forbid, require
        pin_opts = {k: v for k, v in pins.items() if v is not None}
        if forbid:
            pin_opts["forbid"] = list(forbid)
        if require:
            pin_opts["require"] = list(require)
        self.pin_opts = pin_opts
        # R, tp, b: kept
        self.anneal_pins = {k: v for k, v in pin_opts.items() if k in ("stages", "schedule", "forbid", "require")}
        self.refine, self.refine_schedule = refine, refine_schedule
        self.do_refine = refine is not None and refine_schedule  # 5. follows the last annealing
        self.lines: dict[str, str] = {}
        self.syncing = sync_enabled(instance)  # SPEC 11: the sync option is chosen with the plan
        self.engines: dict[str, Callable[..., Plan]] = {}
        self.default_engines = True
        self.type_aware = frozenset()
        self.errors: list[BaseException] = []
        self.candidates: list[tuple[str, Plan, float]] = []  # (who, plan, simulated score)
        self.history: list[tuple[str, float]] = []

    # what the phases share: the clock cuts, the candidates, the in-flight tuning and the annealing

    def cut(self, what: str) -> None:
        """Record that the wall clock cut ``what`` short (once; logged when counted)."""
        if what not in self.clock["cut"]:
            self.clock["cut"].append(what)
            if self.counted:
                log.warning("auto: %s cut by the clock (a loaded machine): the plan may differ from an idle "
                            "machine's", what)

    def wall_left(self) -> float:
        """Seconds of wall clock left of the budget."""
        return self.end - time.perf_counter()

    def collect_left(self) -> float:
        """Seconds of wall clock left until ``COLLECT_BY`` of the budget, when the engines are
        collected: what this process does before that must end by then."""
        return self.t0 + COLLECT_BY * self.budget - time.perf_counter()

    def run_part(self, who: str, wall_s: float, run: Callable, skipped=None):
        """``run(limit)`` for a part that runs to completion in counted work, ``limit`` its time
        limit (s): ``wall_s`` by the clock when not counted; none when deterministic; seeded, the
        wall clock left until the engines are collected (:meth:`collect_left`, at least 0.05 s), a
        backstop that binds on a loaded machine only, and then names ``who`` in ``cut_by_clock``.
        Returns ``skipped`` without running it when the collection has come (:meth:`over`)."""
        if self.over(who):
            return skipped
        limit = wall_s if not self.counted else None if self.deterministic else max(0.05, self.collect_left())
        t1 = time.perf_counter()
        try:
            return run(limit)
        finally:
            if self.counted and limit is not None and time.perf_counter() - t1 >= limit:
                self.cut(who)

    def over(self, who: str) -> bool:
        """Seeded: whether the wall clock has reached the engines' collection
        (:meth:`collect_left`), so that the part ``who`` is skipped (named in ``cut_by_clock``);
        never when deterministic or not counted (their own rules)."""
        if self.counted and not self.deterministic and self.collect_left() <= 0:
            self.cut(who)
            return True
        return False

    def offer(self, who: str, p: Plan, score: float | None = None) -> float | None:
        """Add ``p`` to the candidates; its simulated score (None: not simulated or rejected).
        ``score``: its simulated score, known already (none is run again, even past the budget)."""
        candidates = self.candidates
        if score is None and candidates and not self.deterministic and time.perf_counter() > self.end:
            # past the budget a simulation (tenths of a second on a deep pipeline) would overrun it
            self.lines.setdefault(who, "not simulated: past the time limit")
            self.cut(who)
            return None
        val = simulated_score(self.instance, p) if score is None else score
        if val is None or not plan_matches(p, self.pins, self.forbid, self.require):
            self.lines.setdefault(who, "plan rejected (infeasible or off the pins)")
            return None
        better = not candidates or val < _incumbent(candidates)[2] * (1 - TIE)
        candidates.append((who, p, val))
        if better:
            self.history.append((who, val))
            log.info("auto: incumbent from %s, simulated %.6g %s", who, val,
                     "s" if self.kind == "time" else "per iteration")
        return val

    def tune(self, p: Plan, seconds: float, who: str = "in-flight limits", left: float | None = None) -> Plan:
        """``p`` with tuned in-flight limits: ``seconds`` of wall clock, or (counted) deterministic
        seconds, a count of simulations of ``p``'s size, the clock a backstop unless deterministic:
        ``left`` seconds (None: the budget's rest)."""
        if not self.counted:
            return tune_inflight(self.instance, p, time_limit=seconds)
        backstop = None if self.deterministic else max(0.05, self.wall_left() if left is None else left)
        t1 = time.perf_counter()
        out = tune_inflight(self.instance, p, time_limit=backstop, max_evals=sim_count(p, seconds, least=10))
        if backstop is not None and time.perf_counter() - t1 >= backstop:
            self.cut(who)
        return out

    def anneal_by(self, p: Plan, seconds: float, s: int, who: str, wall: float) -> Plan:
        """:func:`anneal` from ``p``: ``wall`` seconds, or (counted) ``seconds`` deterministic seconds,
        the clock (``wall``) a backstop unless deterministic."""
        if not self.counted:
            return anneal(self.instance, p, time_limit=max(0.1, wall), seed=s, **self.anneal_pins)
        out = anneal(self.instance, p, time_limit=None if self.deterministic else max(0.05, wall), seed=s,
                     max_work=seconds, **self.anneal_pins)
        if out.solver.model_extra.get("cut_by_clock"):
            self.cut(who)
        return out

    # the phases, in order

    def choose_engines(self, engines: dict[str, Callable[..., Plan]] | None, type_aware) -> None:
        """Set-up: the engines (``engines``, None: :data:`ENGINES`; the hierarchical planner when
        the flat models are too big; with several GPU types only the ``type_aware`` ones; with
        ``deterministic`` CP-SAT and the annealing as they run alone).  Spends nothing."""
        instance = self.instance
        self.type_aware = type_aware
        self.default_engines = default_engines = engines is None
        if engines is None and flat_too_big(instance):
            engines = {"hier": hier_engine}
            log.info("auto: %d domains, flat models too big (%d > %d arcs per shape): the hierarchical planner",
                     len(instance.domains), len(instance.domains) ** 2 * instance.max_stages, FLAT_ARCS_MAX)
        engines = dict(ENGINES if engines is None else engines)
        if default_engines and instance.heterogeneous:  # SPEC v3 (g): only engines that plan with the types
            for name in [n for n in engines if n not in type_aware]:
                del engines[name]
                self.lines[name] = "left out: it plans one GPU type for every domain so far"
                log.info("auto: %s left out (the domains have several GPU types; it plans one)", name)
        if default_engines and self.deterministic:  # each part's own run (issue 29, "Dominance")
            if engines.get("cpsat") is cpsat:
                engines["cpsat"] = cpsat_alone  # CP-SAT's alone budget and refinement, in its own process
            engines.update(alone_engines(bool(self.pin_opts)))
        self.engines = engines

    def start_engines(self) -> dict[str, tuple[cf.ProcessPoolExecutor, cf.Future]]:
        """1. Each engine started in its own process (one thread or worker each) with the user's
        pins; returns name -> (executor, future).  Spends no time here; each engine gets
        ``ENGINE_SHARE * work - 1`` deterministic seconds, at least 0.5 (counted; the MILP's divided by
        ``MILP_SEARCH_OVERHEAD``; deterministic: the budget each gets alone), else the wall clock
        up to ``engine_deadline`` (60% of the budget)."""
        instance, budget = self.instance, self.budget
        det_limit = max(0.5, ENGINE_SHARE * self.work - 1.0)  # deterministic seconds (their start-up is not counted)
        running: dict[str, tuple[cf.ProcessPoolExecutor, cf.Future]] = {}
        ctx = spawn_context(keep_main=any(from_main(f) for f in self.engines.values()))
        for name, solve in self.engines.items():
            opts = dict(seed=self.seed, gap=self.gap, **self.pin_opts)
            opts.update(threads=1) if solve is milp else opts.update(workers=1)
            if solve is hier_engine and instance.heterogeneous:
                opts["type_aware"] = frozenset(self.type_aware)
            if self.counted:  # the engine's own deterministic budget (the wall clock: collected below)
                opts.update(deterministic=True, time_limit=None,
                            det_limit=det_limit / MILP_SEARCH_OVERHEAD if solve is milp else det_limit)
                if solve is cpsat:
                    opts.update(calibrated=True)
            if self.deterministic and self.default_engines:  # each engine's alone budget (issue 29, "Dominance")
                if solve is cpsat_alone:
                    opts.update(deterministic=True, time_limit=None, det_limit=budget,
                                refine=self.refine if self.refine_schedule else None)
                elif solve is milp:  # plan(solver="milp") refines none
                    opts.update(det_limit=budget)
                elif solve is anneal_alone:  # the annealing alone's deterministic seconds; the clock a backstop
                    opts.update(det_limit=0.9 * DETERMINISTIC_BACKSTOP * budget, max_work=budget)
            ex = cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx)
            with _sigint_ignored():  # the engine starts deaf to Ctrl-C until its own stop.Watch listens
                running[name] = (ex, ex.submit(_run_engine, solve, instance, self.engine_deadline, opts))
        return running

    def greedy_first(self) -> None:
        """1. Greedy while the engines start (their interpreters import for a second or more): the
        first incumbent, and with ``[options] dp_sync`` its plan with its best sync.  Greedy is fixed
        work, well under a second, capped at half the budget of wall clock (deterministic: greedy's
        own cap, a minute); the sync choice runs to completion (counted; seeded, the engines'
        collection a backstop: :meth:`run_part`), by the clock ``SYNC_SHARE * budget`` seconds."""
        instance, budget, counted = self.instance, self.budget, self.counted
        try:
            # well under a second; capped at half the budget only for huge instances (a cap that binds
            # would make the result load-dependent)
            # (deterministic: greedy's own cap, a minute, not a share of a small budget that a loaded machine reaches)
            g = greedy(instance, time_limit=None if self.deterministic else 0.5 * budget, seed=self.seed)
            self.lines["greedy"] = g.solver.status if g.solver is not None else "heuristic"
            if self.lines["greedy"] == "time_limit":
                self.cut("greedy")
            self.offer("greedy", g)
            if self.syncing:  # SPEC 11: greedy's plan with its best sync, and the whole-replica and grouped plans
                gs, score = self.run_part("greedy+sync", SYNC_SHARE * budget, lambda limit: choose_sync_scored(
                    instance, g, time_limit=limit, pins=self.pins, forbid=self.forbid, require=self.require),
                    skipped=(g, None))
                if gs is not g:  # simulated already: kept even when the choice ran past the budget
                    self.offer("greedy+sync", gs.model_copy(update={"solver": None}), score=score)
        except (InfeasibleError, TimeLimitError, Stopped) as err:  # the engines run on: collected below
            self.errors.append(err)
            self.lines["greedy"] = f"failed: {err}"

    def typed_greedy(self) -> list[tuple[float, int, Plan]]:
        """1. With several GPU types: greedy on each type's domains alone (a plan of a sub-fleet is a
        plan of the fleet), so that the mixed fleet's plan is never slower than greedy's on one type;
        each plan offered; returns them as (simulated score, order, plan), the annealing's typed
        start.  Each greedy runs to completion (counted; seeded, the engines' collection a
        backstop), by the clock ``max(0.2, 0.05 * budget)`` seconds; none past the engines' window
        by the clock."""
        typed_starts: list[tuple[float, int, Plan]] = []  # (simulated score, order, plan)
        if self.instance.heterogeneous and (self.counted or time.time() < self.engine_deadline):
            for gpu, sub in type_subfleets(self.instance):
                try:
                    q = self.run_part(f"greedy[{gpu}]", max(0.2, 0.05 * self.budget),
                                      lambda limit: greedy(sub, time_limit=limit, seed=self.seed))
                except (InfeasibleError, TimeLimitError, Stopped):
                    continue
                if q is None:  # skipped: the engines' collection has come
                    break
                q = q.model_copy(update={"solver": None, "predicted": None})
                val = self.offer(f"greedy[{gpu}]", q) if plan_matches(q, self.pins, self.forbid, self.require) \
                    else None
                if val is not None:
                    typed_starts.append((val, len(typed_starts), q))
        return typed_starts

    def lean_starts(self) -> None:
        """1. Shapes that fit memory only with fewer micro-batches in flight than 1f1b (no engine
        returns them), unless a schedule is pinned: two lean plans, each offered with tuned
        in-flight limits.  ``lean_plans`` runs to completion (counted; seeded, the engines'
        collection a backstop), by the clock ``max(0.2, 0.03 * budget)`` seconds; each tuning
        ``0.01 * work`` deterministic seconds (by the clock ``0.01 * budget``); none past the
        engines' window by the clock."""
        counted = self.counted
        if self.schedule is None and (counted or time.time() < self.engine_deadline):
            lean = [q for q in self.run_part("lean plans", max(0.2, 0.03 * self.budget), lambda limit: lean_plans(
                self.instance, k=2, time_limit=limit, at_least_one=False), skipped=[])
                    if plan_matches(q, self.pins, self.forbid, self.require)]
            for i, p in enumerate(lean):
                if self.over(f"lean{i}"):
                    break
                self.offer(f"lean{i}", self.tune(p, 0.01 * (self.work if counted else self.budget),
                                                 left=self.collect_left()))

    def anneal_starts(self, running: dict, typed_starts: list[tuple[float, int, Plan]]) -> None:
        """2. Meanwhile, in this process: the annealing from the best plans of greedy's best shapes
        (``STARTS`` in all, the incumbent first), one spread across datacenters (second) and the
        best typed start; each result offered.  (The engines rarely leave greedy's plan on many
        domains within a minute; this search does.)  Each start gets an equal share of the
        engines' window, ``ENGINE_SHARE * work / len(starts)`` deterministic seconds (counted), by
        the clock an equal share of what is left until ``engine_deadline``; ``TUNE_SHARE`` of it on
        the in-flight limits first (unless a schedule is pinned).  ``shape_starts`` and
        ``spread_starts`` run to completion (counted; seeded, the engines' collection a backstop),
        by the clock ``max(0.5, 0.05 * budget)`` seconds and the engines' window."""
        instance, counted, candidates = self.instance, self.counted, self.candidates
        pins, forbid, require = self.pins, self.forbid, self.require
        engine_deadline = self.engine_deadline
        try:
            starts = [s for s in self.run_part("shape starts", max(0.5, 0.05 * self.budget), lambda limit: shape_starts(
                instance, k=STARTS, time_limit=limit), skipped=[]) if plan_matches(s, pins, forbid, require)]
        except (InfeasibleError, TimeLimitError, Stopped):
            starts = []
        if candidates:
            first = _incumbent(candidates)[1] if self.syncing else candidates[0][1]  # with a sync: the best so far
            starts = [first] + [s for s in starts if not _same_plan(s, first)]
        starts = starts[:STARTS]
        # and one pipeline across datacenters (greedy's ranking by T_est under 1f1b rarely keeps one)
        if starts and (counted or time.time() < engine_deadline):  # by the clock: the engines' window
            spread = [s for s in self.run_part("spread start", math.inf, lambda limit: spread_starts(
                instance, starts, deadline=time.perf_counter() + (limit or math.inf)), skipped=[])
                      if plan_matches(s, pins, forbid, require)][:1]
            starts = starts[:1] + spread + starts[1:]  # second: annealed before any cut-off
        # and the best plan of one GPU type's domains alone (several types), unless it is the incumbent
        starts += [q for _, _, q in sorted(typed_starts)[:1] if not any(_same_plan(q, s) for s in starts)]
        share_w = ENGINE_SHARE * self.work / max(1, len(starts))  # counted: each start's deterministic seconds
        for i, s in enumerate(starts):
            if stop.requested() or (not counted and i and running and all(fut.done() for _, fut in running.values())):
                break  # a stop was asked for, or (by the clock) the engines are back: collect them now
            left = (engine_deadline - time.time()) / (len(starts) - i)
            if counted and not self.deterministic and time.time() >= engine_deadline:
                self.cut(f"start {i}")  # the backstop: the engines' window is over
                break
            if left < 0.2 and not counted:
                break
            if self.schedule is None:  # 1f1b with deeper warm-ups first, then the annealing (which moves them too)
                t1 = time.perf_counter()
                s = self.tune(s, TUNE_SHARE * (share_w if counted else left), f"start {i}",
                              left=engine_deadline - time.time())
                left -= time.perf_counter() - t1
            try:
                out = self.anneal_by(s, (1 - TUNE_SHARE) * share_w, self.seed + i, f"start {i}",
                                     engine_deadline - time.time() if counted else left)
            except ValueError as err:  # a start the pins rule out
                log.info("auto: start %d skipped (%s)", i, err)
                continue
            self.offer(f"shape{i}+anneal" if i else f"{candidates[0][0]}+anneal", out)

    def collect(self, running: dict) -> None:
        """3. Each engine's plan, status and bound collected in turn and offered (with CP-SAT alone's
        refined plan, with ``[options] dp_sync`` the placement with its best sync, and with tuned
        in-flight limits); an engine that raised, or still runs at ``COLLECT_BY`` of the budget, is
        left out (``lines`` says so; counted: asked for its incumbent and named in ``cut_by_clock``);
        every engine process is shut down.  Waits for the engines until ``COLLECT_BY * budget`` seconds
        of wall clock (deterministic: ``DETERMINISTIC_BACKSTOP`` budgets); each tuning spends
        ``TUNE_ENGINE * work`` deterministic seconds (by the clock ``TUNE_ENGINE * budget``, at most
        half the wall budget left).  Raises ``InfeasibleError`` when there is no candidate at all."""
        instance, budget, counted, deterministic = self.instance, self.budget, self.counted, self.deterministic
        wall0, end, lines = self.wall0, self.end, self.lines
        try:
            for name, (ex, fut) in running.items():
                wait = max(0.0, min(wall0 + COLLECT_BY * budget - time.time(), end - time.perf_counter() - 1.0))
                if deterministic:  # work units decide, not the clock: wait for the engine (a backstop only)
                    wait = max(wait, DETERMINISTIC_BACKSTOP * budget - (time.time() - wall0))
                try:
                    res = _result(ex, fut, wait)
                except cf.TimeoutError:
                    res = None
                    if counted and not stop.requested():  # the backstop: no longer the reproducible run
                        if not deterministic:  # the engine is asked for its incumbent (SIGINT, as on Ctrl-C)
                            for proc in _workers(ex):
                                os.kill(proc.pid, signal.SIGINT)
                            try:
                                res = fut.result(timeout=max(0.5, min(STOP_GRACE_S, end - time.perf_counter() - 1.0)))
                            except Exception:  # noqa: BLE001 - no plan from it then
                                res = None
                        self.cut(name)
                    if res is None:
                        lines[name] = "cut off at the deadline"
                        log.warning("auto: %s overran its deadline and was stopped", name)
                        continue
                except Exception as err:  # noqa: BLE001 - an engine's failure must not stop the portfolio
                    self.errors.append(err)
                    lines[name] = f"failed: {type(err).__name__}: {err}"
                    log.warning("auto: %s failed (%s: %s); continuing without it", name, type(err).__name__, err)
                    continue
                res, more = (res[0], res[1:]) if isinstance(res, list) else (res, [])  # cpsat_alone: + refined
                info = res.solver
                if counted and info is not None and (info.model_extra or {}).get("cut_by_clock"):
                    self.cut(name)  # the engine's own wall-clock backstop (anneal_alone's) stopped it
                among = f" among {info.estimate_family}" if info and info.estimate_family else ""  # its space, named
                lines[name] = (f"{info.status}{among}, objective "
                               f"{'-' if info.objective is None else format(info.objective, '.6g')}, bound "
                               f"{'-' if info.bound is None else format(info.bound, '.6g')}") if info else "plan"
                if name in self.clock["cut"]:
                    lines[name] = "cut by the clock: " + lines[name]
                log.info("auto: %s %s", name, lines[name])
                self.offer(name, res)
                for q in more:
                    self.offer(f"{name}+schedule", q)
                if self.syncing and not stop.requested():  # the engine's placement with its best sync (SPEC 11)
                    got = with_best_sync(instance, res.model_copy(update={"solver": None, "predicted": None}))
                    if got is not None and got[0].dp_sync is not None:
                        self.offer(f"{name}+sync", got[0])
                rest = wall0 + budget - time.time()  # the wall budget left: a tuning never starts past it
                if counted and not deterministic and rest <= 0.5:
                    self.cut(f"{name}'s in-flight limits")
                if self.schedule is None and not stop.requested() and (deterministic or rest > 0.5):
                    tuned = self.tune(res, TUNE_ENGINE * self.work if counted
                                      else min(TUNE_ENGINE * budget, 0.5 * rest), f"{name}'s in-flight limits")
                    if tuned is not res:
                        self.offer(f"{name}+inflight", tuned)
        finally:
            for ex, fut in running.values():
                _kill(ex, fut)
        if not self.candidates:
            for err in self.errors:
                if isinstance(err, InfeasibleError):
                    raise err
            raise InfeasibleError(f"instance {instance.name}: no planner of the portfolio found a plan "
                                  f"({'; '.join(f'{k}: {v}' for k, v in lines.items())})")

    def proofs(self) -> tuple[list[float], list[float]]:
        """3. The engines' figures: (the valid lower bounds: each exact engine's and, for a time
        instance, the instance's analytic bound; the optima the engines proved).  With ``[options]
        dp_sync`` only the instance's bound holds (the engines' are about the plain sync).  Spends
        nothing (no search)."""
        proofs = [p.solver for who, p, _ in self.candidates
                  if who in self.engines and who not in HEURISTIC_ENGINES and p.solver is not None]
        bounds = [i.bound for i in proofs if i.bound is not None and math.isfinite(i.bound)]
        if self.kind == "time":
            bounds.append(lower_bound(self.instance).value)
        proven = [i.objective for i in proofs if i.status == "optimal" and i.objective is not None]
        if self.syncing:  # the engines' bounds and proofs are about the plain sync: only the instance's bound holds
            bounds, proven = [objective_lower_bound(self.instance)], []
        return bounds, proven

    def last_annealing(self, proven: list[float]) -> tuple[str, Plan, float]:
        """4. The annealing from the incumbent; returns (who, plan, simulated score) of the best plan.
        Spends ``(ANNEAL_END - ENGINE_SHARE - TUNE_ENGINE * engines) * work`` deterministic seconds
        (``1.0`` for ``ANNEAL_END`` without a refinement; ``PROVEN_SHARE * work`` at most once an engine
        proved optimality; ``0.05 * work`` at least), by the clock until ``ANNEAL_END`` of the budget
        (without a refinement: 0.3 s before its end; ``PROVEN_SHARE * budget`` at most once proven)."""
        who, best, best_val = _incumbent(self.candidates)
        budget, work, counted = self.budget, self.work, self.counted
        do_refine = self.do_refine
        anneal_end = self.t0 + (ANNEAL_END * budget if do_refine else budget - 0.3)
        left = anneal_end - time.perf_counter()
        if proven:  # an engine proved its T_est optimal: a short search for a plan that simulates faster
            left = min(left, PROVEN_SHARE * budget)
        share = ((ANNEAL_END if do_refine else 1.0) - ENGINE_SHARE - TUNE_ENGINE * len(self.engines)) * work
        if proven:
            share = min(share, PROVEN_SHARE * work)
        if counted and not self.deterministic and left <= 0.2:
            self.cut("the last annealing")
        if (left > 0.2 or self.deterministic) and not stop.requested():
            out = self.anneal_by(best, max(0.05 * work, share), self.seed, "the last annealing", left)
            if out.solver.end_s < best_val:
                who, best, best_val = f"{who}+anneal", out, out.solver.end_s
                self.history.append((who, best_val))
                log.info("auto: incumbent from %s, simulated %.6g", who, best_val)
        return who, best, best_val

    def figures(self, who: str, best: Plan, best_val: float, bounds: list[float], proven: list[float]) -> Plan:
        """4. The returned plan's figures (before any schedule refinement): ``best`` with its
        :class:`SolverInfo` (status, objective, bound, gap, incumbent, engines, simulated_s; counted:
        budget, deterministic_s, cut_by_clock).  Spends one exact evaluation of ``best``."""
        instance, lines, schedule = self.instance, self.lines, self.schedule
        ev = Evaluator(instance, best)
        assert not check_plan(instance, best, ev.fig)
        objective = float(ev.estimate_scores()[0])  # T^est_eff / e, or the cost over e (SPEC 11)
        bound = max(bounds) if bounds else None
        if bound is not None and isinstance(best.schedule, str):  # an explicit schedule is outside the engines' space
            bound = min(bound, objective)
        gap_now = None if bound is None or objective <= 0 else max(0.0, (objective - bound) / objective)
        if not isinstance(best.schedule, str) and bound is not None and objective < bound:
            gap_now = None  # a plan outside the engines' space, faster than its optimum: no gap to report
        claim = gap_claim(gap_now, self.gap) if isinstance(best.schedule, str) else None
        if proven and objective <= min(proven) * (1 + 1e-9):
            status = "optimal"
        elif claim is not None:
            status = claim
        elif stop.requested():
            status = stop.requested()
        elif any(not line.startswith(("optimal", "within_gap", "infeasible"))
                 for n, line in lines.items() if n in self.engines and n not in HEURISTIC_ENGINES):
            status = "time_limit"
        else:
            status = "feasible"
        extra = {}
        if stop.requested() == "time_limit":  # the caller's wall-clock backstop (the CLI's) stopped the run
            self.cut("the time limit")
        if self.counted:  # what the plan's reproducibility rests on (the module docstring)
            extra = {"budget": "deterministic" if self.deterministic else "work units", "deterministic_s": self.work,
                     "cut_by_clock": list(self.clock["cut"])}
        info = SolverInfo(name="auto", status=status, objective=objective, bound=bound, gap=gap_now,
                          time_s=time.perf_counter() - self.t0, incumbent=who, engines=lines,
                          simulated_s=[[w, v] for w, v in self.history], requested_gap=self.gap,
                          estimate_family=estimate_family(instance, schedule, pinned=bool(self.pin_opts)), **extra)
        # claims on T_est over plans with a named schedule: finish() keeps them as estimate_* and
        # claims the instance's bound on the simulated objective, valid for any schedule
        best = best.model_copy(update={"solver": info, "predicted": None})
        log.info("auto: %s from %s, simulated %.6g, T_est %.6g, bound %s, gap %s", status, who, best_val,
                 objective, "-" if bound is None else f"{bound:.6g}",
                 "-" if gap_now is None else f"{100 * gap_now:.2f}%")
        return best

    def schedule_refinement(self, who: str, best: Plan) -> Plan:
        """5. The schedule refinement (``refine``: in-flight limits, then CP-SAT) of ``best`` with what
        is left, unless there is none or a stop was asked for; returns the refined plan, named
        ``auto`` with incumbent ``who+schedule``, or ``best``.  Spends ``(1 - ANNEAL_END) * work``
        deterministic seconds (at least 1; counted, not deterministic: the clock a backstop at the
        budget's end, less 0.5 s), by the clock its share ``(1 - ANNEAL_END) * budget`` at most
        (skipped below one second)."""
        if self.do_refine and not stop.requested():
            end, counted = self.end, self.counted
            # its share, not all that is left
            left = min(end - time.perf_counter() - 0.5, (1 - ANNEAL_END) * self.budget)
            backstop = None
            if counted:
                backstop = None if self.deterministic else end - time.perf_counter() - 0.5
                left = max(1.0, (1 - ANNEAL_END) * self.work)
                if backstop is not None and backstop < 1.0:
                    self.cut("the schedule refinement")
                    left = 0.0
            if left >= 1.0:
                t1 = time.perf_counter()
                best = self.refine(self.instance, best, time_limit=left, seed=self.seed, workers=1,
                                   deterministic=counted,
                                   **({"calibrated": True, "wall_limit": backstop} if counted else {}))
                if backstop is not None and time.perf_counter() - t1 >= 0.95 * backstop:
                    self.cut("the schedule refinement")
                if best.solver.name != "auto":
                    log.info("auto: schedule refined, simulated %.6g", best.predicted.iteration_time_s)
                    best = best.model_copy(update={"solver": best.solver.model_copy(
                        update={"name": "auto", "incumbent": f"{who}+schedule"})})
        return best


def auto(instance, time_limit: float | None = 60.0, seed: int | None = 0, deterministic: bool = False,
         gap: float = 1e-3, stages: int | None = None, replicas: int | None = None, tp: int | None = None,
         micro_batch_size: int | None = None, schedule: str | None = None, forbid=(), require=(),
         engines: dict[str, Callable[..., Plan]] | None = None, refine: Callable[..., Plan] | None = None,
         refine_schedule: bool = True, type_aware=frozenset(), work_s: float | None = None, **_) -> Plan:
    """Plan with the portfolio; see the module docstring.

    ``time_limit`` seconds of wall clock in all (None: 60), ``seed`` for every
    randomised part (None: no seed, the parts budgeted by the clock alone; with
    one, by calibrated work units, the clock a backstop: see the module
    docstring), ``deterministic`` never cut by the clock, ``gap`` the engines'
    optimality tolerance, pins as for
    the MILP (``stages``, ``replicas``, ``tp``, ``micro_batch_size``,
    ``schedule``, ``forbid``, ``require``).  ``engines`` maps names to
    solver functions run in their own processes (default :data:`ENGINES`;
    they must be importable top-level functions).  ``refine`` is the
    schedule refinement (the registry passes :func:`planner.solvers.registry.refine`;
    None or ``refine_schedule=False``: none, the annealing takes that time).
    ``type_aware``: the names of the solvers that plan with several GPU types (the
    registry passes :data:`planner.solvers.registry.GPU_TYPE_SOLVERS`); on an
    instance whose domains have several types (SPEC v3 (g)) the default engines not
    among them are left out (``solver.engines`` says so), greedy, the annealing and
    the refinement plan with the types.  ``work_s``: the deterministic seconds of the
    counted budgets (None: ``DET_SHARE * time_limit``); the CLI passes one computed
    from the nominal ``--time-limit`` (:func:`planner.solvers.registry.auto_work_s`),
    not from what its start-up left, so that the work does not depend on the load.
    Raises ``InfeasibleError`` when no planner finds a plan.
    """
    run = _Run(instance, time_limit, seed, deterministic, gap,
               dict(stages=stages, replicas=replicas, tp=tp, micro_batch_size=micro_batch_size, schedule=schedule),
               forbid, require, refine, refine_schedule, work_s)
    run.choose_engines(engines, type_aware)
    # 1. the engines, each in its own process; greedy, its typed starts and the lean plans meanwhile here
    running = run.start_engines()
    run.greedy_first()
    typed_starts = run.typed_greedy()
    run.lean_starts()
    # 2. the annealing from greedy's best shapes, in this process while the engines run
    run.anneal_starts(running, typed_starts)
    # 3. the engines collected; the bounds and proofs
    run.collect(running)
    bounds, proven = run.proofs()
    # 4. the last annealing; the returned plan's figures
    who, best, best_val = run.last_annealing(proven)
    best = run.figures(who, best, best_val, bounds, proven)
    # 5. the schedule refinement with what is left
    return run.schedule_refinement(who, best)
