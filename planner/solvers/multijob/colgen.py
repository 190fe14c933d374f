"""Several jobs by column generation (SPEC 10): ``multiplan``.

1. **References** (:func:`references`): tput*_j, the throughput of one fixed
   method, the plan of ``solver`` on ``minst.job_instance(j)``, computed once per
   mix (cached on the instance) unless given (``references=``; the CLI's
   ``--references FILE``); computed here they count in the time limit (at most
   :data:`REF_SHARE` of it) and their time is logged.
2. **A feasible multi-plan first**: with greedy columns on a clock budget, one
   datacenter per job by the pricing planner (greedy without its exact
   re-ranking), the master after it: an incumbent within seconds.  Under maxmin
   every baseline is then *certified* lazily (:func:`_certify`): shown no better
   than the incumbent as it runs alone, by a job left out whatever the plans, by
   the slice's lower bound on T_eff/e (:func:`_rho_upper`, no plan), or by the
   exact columns of its jobs until one is at most the incumbent (those plans
   wait until the rounds converge, stall or :data:`CERTIFY_AT` of the limit is
   left); the plan-dependent ones (greedy by weight, WAN-blind max-min, EDF, a
   static split not certified by bounds) run after the rounds in a scratch pool
   and again exactly when they compete (:data:`CERTIFY_SHARE`).  Other
   objectives (or ``deterministic=True``): the baselines exactly, cheapest
   first.  Then each job's reference plan on the GPUs it uses, each job on a
   share of every domain in proportion to its weight and alone in each of its
   two largest domains (maxmin: the jobs the incumbent holds lowest).  Plans are
   shared by the jobs of one workload (and one-domain plans by domains alike);
   trimming is lazy.
3. **Rounds**: the master MILP (:func:`.master.solve_master`) picks one column
   per job; its LP relaxation (:func:`.master.solve_lp`) gives ``master_lp`` and
   the prices of GPUs (per domain), links and uplinks.  Maxmin: a packing at a
   level between the value and ``master_lp`` (:func:`_pack`), rebalancing
   (:func:`_rebalance`), the LP rounded for the binding jobs (:func:`lp_rounding`);
   the rounds stop when ``master_lp <= (1 + LP_TOL) x`` the value and a probe
   above it found nothing.  Other objectives: every job on the LP-weighted
   average of its columns' allocations (they fit together); for the jobs whose
   row binds (makespan: the latest; weighted, cost: every job; deadline: the
   jobs missing their deadline): the job's allocation grown by what the
   incumbent leaves free, the job on the domains whose GPUs are cheapest by the
   duals (per achieved FLOP/s), and the other jobs shrunk where the binding
   job's prices are high; the incumbent's binding columns of the pricing
   planner re-planned exactly.  Rounds stop when a round adds no column, or at
   the time limit (status ``time_limit``, the best multi-plan so far).  Under
   ``deadline`` and ``cost`` every round first prices by the deadline
   (:func:`.deadline.price_deadline`: per job, the least one-domain, near-set
   and least-priced-domains slices meeting its deadline, by bisection), and so
   does the start, before the quick baselines, for at most
   :data:`DEADLINE_EARLY` of the limit.
4. The result is scored by :func:`planner.scoring.multievaluate.multievaluate`
   (reserved, and ``sharing`` when it is "shared"); ``bound`` is the core's
   :func:`multi_bound` (valid for every multi-plan), never the master's LP.

Deterministic for a seed: with ``deterministic=True`` the budget counts plans
(:data:`PLANS_PER_SECOND` per second of ``time_limit``), not the clock.

Example
-------
>>> mp = multiplan(minst, objective="maxmin", time_limit=60, seed=0)      # doctest: +SKIP
>>> mp.solver.status, mp.solver.objective, mp.solver.bound, mp.solver.model_extra["master_lp"]
('time_limit', 0.634, 1.0, 0.66)
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from ...problem.errors import InfeasibleError, InputError
from ...problem.jobs import OBJECTIVES, equal_slice, full_allocation
from ...problem.plan import SolverInfo
from ...scoring.multievaluate import gap_of, multi_bound, multievaluate
from .. import stop
from .baselines import BASELINES, static_domains
from .columns import SHARE_DIGITS, TRIM_EVALUATIONS, ColumnPool, assemble, clip, link_keys, plan_throughput, reference_throughputs, trim
from .deadline import price_deadline
from .master import Capacity, solve_lp, solve_master

log = logging.getLogger("planner")

PLANS_PER_SECOND = 1.0  # deterministic budget: plans per second of the time limit
COLUMN_SHARE = 0.25  # at most this share of the time limit for one plan (and at least MIN_COLUMN_S)
MIN_COLUMN_S = 1.0
FINISH_S = 0.08  # share of the time limit kept for the last master and the evaluation (and _Budget.extra)
REF_SHARE = 0.3  # references computed inside the limit: at most this share of it over all jobs
FIRST_BASELINES = ("one_datacenter", "static_split", "equal_share")  # the cheapest feasible multi-plans first
BASELINE_ORDER = FIRST_BASELINES + ("greedy_by_weight", "wan_blind_maxmin", "edf")  # cheapest first
CERTIFY_AT = 0.3  # maxmin: the late certificates are made when this share of the limit is left (or earlier)
BOUND_TRIES = 8  # maxmin: jobs whose slice bound is tried when certifying a baseline without plans
CERTIFY_SHARE = 0.5  # maxmin: a plan-dependent baseline below this share of the incumbent (pricing planner) is
# not run again by the exact planner
PLAN_FREE = ("one_datacenter", "equal_share")  # baselines whose allocations do not depend on the plans
QUICK_BASELINES = ("one_datacenter", "static_split")  # other objectives: by the pricing planner before anything else
DEADLINE_EARLY = 0.4  # deadline and cost: the first deadline columns stop when this share of the limit has passed
REBALANCE_STEP = 0.05  # maxmin: each round aims this much above the incumbent (and at least the LP)
REBALANCE_JOBS = 20  # maxmin: jobs shrunk per round
FIRST_LOW = 1.5  # maxmin: first columns (weight share, one domain) for the jobs within this of the incumbent's
LP_TOL = 0.01  # maxmin: the rounds stop when master_lp <= (1 + LP_TOL) x the master's value
EXACT_PER_ROUND = 3  # chosen columns of the pricing planner re-planned exactly per round
TRIM_PER_ROUND = 3  # maxmin: chosen columns trimmed per round (those holding the most link share)
SHARINGS = ("reserved", "shared")
ALLOCATORS = ("master", "rl")  # multiplan's allocator: the column master, or the PPO allocator (.rl)


def _add_use(col, gpus: dict, links: dict, uplinks: dict, factor: float) -> None:
    """Add ``factor`` x the column's use (GPUs per domain, link and uplink shares) to the three
    tallies, in place (a missing key counts 0): ``factor`` -1 takes a column from what is free,
    an LP weight averages columns.

    >>> free = {"a": 8}; _add_use(col, free, {}, {}, -1.0)             # doctest: +SKIP
    """
    for d, n in col.gpus.items():
        gpus[d] = gpus.get(d, 0) + factor * n
    for k, v in col.link_share.items():
        links[k] = links.get(k, 0.0) + factor * v
    for d, u in col.uplink_share.items():
        uplinks[d] = uplinks.get(d, 0.0) + factor * u


def capacity(minst) -> Capacity:
    """The shared resources of the cluster (GPUs per domain, link keys, uplinks)."""
    return Capacity(gpus={d.name: d.gpus for d in minst.domains}, links=link_keys(minst),
                    uplinks=tuple(d.name for d in minst.domains))


class _Budget:
    """The time limit (clock) or, deterministic, a count of plans."""

    def __init__(self, time_limit: float, deterministic: bool):
        self.t0, self.limit, self.det = time.perf_counter(), float(time_limit), deterministic
        self.plans = max(1, int(PLANS_PER_SECOND * time_limit))
        self.reason = None
        self.extra = lambda: 0.0  # seconds kept besides FINISH_S (the incumbent's final evaluation)

    def left(self) -> float:
        return self.limit - (time.perf_counter() - self.t0)

    def out(self, pool) -> bool:
        if stop.requested():
            self.reason = "interrupted"
        elif self.det and pool.plans_made >= self.plans:
            self.reason = "time_limit"
        elif not self.det and self.left() <= FINISH_S * self.limit + self.extra():
            self.reason = "time_limit"
        return self.reason is not None

    def column_limit(self) -> float | None:
        if self.det:  # the planner's own default: a plan cut short by the clock would not repeat
            return None
        return max(0.1, min(max(MIN_COLUMN_S, COLUMN_SHARE * self.limit),
                             self.left() - FINISH_S * self.limit - self.extra()))


def _check(minst, objective, sharing, time_limit, seed):
    if objective not in OBJECTIVES:
        raise InputError(f"one of {', '.join(OBJECTIVES)}, not {objective!r}", "objective")
    if sharing not in SHARINGS:
        raise InputError(f"one of {', '.join(SHARINGS)}, not {sharing!r}", "sharing")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not math.isfinite(time_limit) \
            or time_limit <= 0:
        raise InputError(f"a time limit is a finite number of seconds > 0, not {time_limit!r}", "time_limit")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"a seed is an integer >= 0, not {seed!r}", "seed")


def _single(minst, objective, time_limit, seed, solver, deterministic, refs, t0):
    """J = 1: the plan of ``planner.plan`` on the whole cluster, every GPU, share 1 of
    every link and uplink, nothing trimmed."""
    from ..registry import plan as run_plan

    options = {"deterministic": True} if deterministic and solver in ("cpsat", "auto", "hier") else {}
    p = run_plan(minst.job_instance(0), solver=solver, time_limit=time_limit, seed=seed, **options)
    gpus, links, ups = full_allocation(minst, 0)
    gpus = {d: n for d, n in gpus.items() if n}
    name = minst.jobs[0].name
    ref = (refs or {}).get(name) or plan_throughput(p)
    from ...problem.multiplan import JobAllocation, MultiPlan

    job = JobAllocation(name=name, admitted=True, gpus=gpus, link_share=links, uplink_share=ups,
                        reference_throughput_tokens_per_s=ref, equal_share_throughput_tokens_per_s=plan_throughput(p),
                        plan=p)
    mp = MultiPlan(instance=minst.name, objective=objective, jobs=[job], solver=None)
    return mp, {"single_job_status": p.solver.status, "columns": 1, "rounds": 0}


def multiplan(minst, objective: str | None = None, time_limit: float = 60.0, seed: int = 0,
              sharing: str = "reserved", solver: str = "greedy", deterministic: bool = False,
              references: dict | None = None, baselines: bool = True, allocator: str = "master",
              policy=None, samples: int | None = None):
    """Allocate the cluster among ``minst``'s jobs and plan each (SPEC 10); see the
    module docstring.  ``objective``: None for the instance's ``multi_objective``;
    ``time_limit`` (s) covers everything (references, columns, masters, the final
    evaluation); ``solver``: the single-job planner of the columns and of the
    references; ``references``: tput*_j by job name (default :func:`reference_throughputs`).
    ``sharing``: the evaluation whose figures the solver reports (the master
    always plans for reserved shares).  Returns a
    :class:`planner.problem.multiplan.MultiPlan` whose ``solver`` carries
    ``status`` (optimal only when the gap to the bound is 0; time_limit;
    heuristic when the rounds converged), ``objective`` (multievaluate's),
    ``bound``, ``gap`` and, as extras, ``master_lp``, ``columns``, ``rounds``,
    ``plans_made``.  Raises ``InfeasibleError`` when no column choice is feasible.
    """
    t0 = time.perf_counter()
    objective = objective or minst.options.multi_objective
    _check(minst, objective, sharing, time_limit, seed)
    budget = _Budget(time_limit, deterministic)
    if allocator not in ALLOCATORS:
        raise InputError(f"one of {', '.join(ALLOCATORS)}, not {allocator!r}", "allocator")
    if len(minst.jobs) == 1:
        mp, extra = _single(minst, objective, time_limit, seed, solver, deterministic, references, t0)
        refs = {j.name: j.reference_throughput_tokens_per_s for j in mp.jobs}
        return _finish(minst, mp, objective, sharing, refs, "heuristic", extra, t0)
    t_ref = time.perf_counter()
    refs = _references(minst, references, time_limit, seed, solver, deterministic)
    ref_s = time.perf_counter() - t_ref
    if allocator == "rl":
        return _rl_multiplan(minst, refs, objective, sharing, solver, seed, deterministic, policy, samples,
                             budget, t0)
    cg = _ColumnGeneration(minst, refs, objective, solver, seed, deterministic, baselines, budget, t0)
    cg.first_multiplan()      # 1. the baselines: a feasible multi-plan first
    cg.first_columns()        # the jobs' reference plans, weight shares, one domain each
    status = cg.rounds()      # 2. master, LP, pricing, until nothing new
    return cg.result(status, sharing, references, ref_s)


def _references(minst, references, time_limit, seed, solver, deterministic) -> dict:
    """tput*_j by job name: ``references`` (checked), else :func:`reference_throughputs` within
    at most :data:`REF_SHARE` of the time limit in all."""
    J = len(minst.jobs)
    t_ref = time.perf_counter()
    if references:
        refs = dict(references)
        missing = [s.name for s in minst.jobs if not refs.get(s.name)]
        if missing:
            raise InputError(f"no reference throughput (tokens/s > 0) for job {missing[0]!r}"
                             + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""),
                             f"references.{missing[0]}")
        return refs
    # one fixed method (solver alone on the whole cluster), its time inside the limit here: at
    # most REF_SHARE of it in all, so that the columns keep the rest
    ref_limit = None if deterministic else max(0.1, min(COLUMN_SHARE * time_limit, REF_SHARE * time_limit / J))
    refs = reference_throughputs(minst, time_limit=ref_limit, seed=seed, solver=solver,
                                 deterministic=deterministic)
    log.info("multiplan: references tput* of %d jobs (%s alone on the whole cluster, %s s each) took %.1f s "
             "of the time limit; pass references (planner multiplan --references FILE) to compute them once "
             "per mix", J, solver, "default" if ref_limit is None else f"{ref_limit:.3g}",
             time.perf_counter() - t_ref)
    return refs


def _rl_multiplan(minst, refs, objective, sharing, solver, seed, deterministic, policy, samples, budget, t0):
    """``allocator="rl"``: the PPO allocator (:mod:`.rl`) over menus of columns, cut by the budget."""
    from .rl import COLUMN_TIME_LIMIT, SAMPLES, allocate

    pool = ColumnPool(minst, refs, solver=solver, seed=seed, deterministic=deterministic,
                      column_time_limit=COLUMN_TIME_LIMIT)
    cut = []  # the time limit (or a stop) ended the menus: the columns not planned are left out

    def stop_menus() -> bool:
        if not cut and budget.out(pool):
            cut.append(True)
        return bool(cut)

    if not deterministic:
        pool.stop_check = stop_menus
    mp = allocate(minst, refs, pool=pool, objective=objective, policy=policy,
                  samples=SAMPLES if samples is None else samples, seed=seed)
    extra = {k: v for k, v in (mp.solver.model_extra or {}).items()}
    extra.update({"allocator": "rl", "columns": len(pool.columns), "plans_made": pool.plans_made,
                  "column_solver": solver})
    status = budget.reason if cut else "heuristic"
    return _finish(minst, mp, objective, sharing, refs, status, extra, t0, allow_infeasible=True)


class _ColumnGeneration:
    """:func:`multiplan`'s column generation (module docstring): the pool of columns, the
    incumbent (``state["best"]``, a master result) and the baselines' runs and certificates.
    ``lazy`` (greedy columns, on a clock): baselines by the pricing planner first, certified
    by the exact planner as late as possible."""

    def __init__(self, minst, refs, objective, solver, seed, deterministic, baselines, budget, t0):
        self.minst, self.refs, self.objective, self.solver = minst, refs, objective, solver
        self.seed, self.deterministic, self.baselines, self.budget, self.t0 = seed, deterministic, baselines, budget, t0
        self.pool = pool = ColumnPool(minst, refs, solver=solver, seed=seed, deterministic=deterministic)
        pool.limit_fn = budget.column_limit
        self.weights = [s.weight for s in minst.jobs]
        self.cap = capacity(minst)
        self.equal_tput: dict[str, float] = {}
        self.state = {"best": None, "master_s": 0.0, "lp_s": 0.0}
        budget.extra = self.reserve
        self.lazy = solver == "greedy" and not deterministic
        self.runs: dict = {}  # baseline -> its multi-plan (None: none)
        self.pending: list[str] = []  # maxmin: baselines whose certificate takes exact plans, made late (a
        # better incumbent may certify them by the slice bound alone)
        self.late: list[str] = []  # baselines run after the rounds converge (lazy)
        self.skip: set[str] = set()
        self.master_lp = None
        self.n_rounds = 0
        self.bound = None  # the multi-job bound (multi_bound), set when the rounds start

    def reserve(self) -> float:
        """Seconds kept for the last master and the final evaluation of the incumbent."""
        best = self.state["best"]
        ev = 0.0 if best is None else sum(self.pool.columns[k].eval_s for k in best.choice if k is not None)
        return 2.0 * ev + 1.5 * (self.state["master_s"] + self.state["lp_s"])

    def master(self):
        """The master over the pool's columns; a better result becomes the incumbent."""
        t = time.perf_counter()
        budget = self.budget
        limit = None if self.deterministic else max(0.2, budget.left() - FINISH_S * budget.limit)
        res = solve_master(self.pool.columns, self.weights, self.cap, self.objective, time_limit=limit, seed=self.seed)
        self.state["master_s"] = time.perf_counter() - t
        if res.value is not None and (self.state["best"] is None or _better(self.objective, res, self.state["best"])):
            self.state["best"] = res
        return res

    def make(self, j, g, links, ups=None, source="", fast=None):
        """A column of job j on the slice (GPUs ``g``, link and uplink shares), None past the budget."""
        if self.budget.out(self.pool):
            return None
        return self.pool.make(j, g, links, ups, source=source, fast=fast)

    def run_baseline(self, name):
        """Baseline ``name``'s multi-plan over the pool (its columns join it), None when it has none."""
        try:
            return BASELINES[name](self.minst, self.refs, pool=self.pool, objective=self.objective)
        except (InfeasibleError, InputError) as err:
            log.info("multiplan: baseline %s gave no multi-plan: %s", name, err)
            return None

    def log_progress(self, what: str) -> None:
        """The log line after a step: columns, plans, time, incumbent."""
        best = self.state["best"]
        log.info("multiplan: %s: %d columns from %d plans (%.1f s)%s", what, len(self.pool.columns),
                 self.pool.plans_made, time.perf_counter() - self.t0,
                 "" if best is None else f", incumbent {best.value:.6g}")

    def quick_baseline(self, name) -> None:
        """Baseline ``name`` by the pool's current planner; the master after it (lazy, or no incumbent)."""
        mp0 = self.run_baseline(name)
        self.runs[name] = mp0
        if name == "equal_share" and mp0 is not None:
            self.equal_tput.update({a.name: a.equal_share_throughput_tokens_per_s for a in mp0.jobs
                                    if a.equal_share_throughput_tokens_per_s})
        if self.pool.columns and (self.lazy or self.state["best"] is None):
            self.master()
        self.log_progress(f"{'quick ' if self.pool.fast else ''}baseline {name}")

    def certify(self, name, plans=True) -> None:
        """The incumbent made no worse than baseline ``name`` by the exact planner (:func:`_certify`);
        left in ``pending`` when that takes plans and ``plans`` is False."""
        pool = self.pool
        fast, pool.fast = pool.fast, False
        try:
            how = _certify(self.minst, pool, name, self.runs[name], self.objective, self.weights, self.state,
                           self.master, self.run_baseline, plans=plans)
        finally:
            pool.fast = fast
        if how is None:
            self.pending.append(name)
            log.info("multiplan: baseline %s: certificate by exact plans left for later", name)
            return
        best = self.state["best"]
        log.info("multiplan: baseline %s certified (%s): %d columns from %d plans (%.1f s), incumbent %s",
                 name, how, len(pool.columns), pool.plans_made, time.perf_counter() - self.t0,
                 None if best is None else f"{best.value:.6g}")

    def first_multiplan(self) -> None:
        """1. A feasible multi-plan first: every baseline by the pricing planner (greedy without
        its exact re-ranking; plans shared by the jobs of one workload), cheapest first, the master
        after each; then each baseline certified by the exact planner, lazily (:func:`_certify`):
        the result is never below a baseline that the exact planner would make."""
        minst, pool, budget, objective, lazy = self.minst, self.pool, self.budget, self.objective, self.lazy
        pool.stop_check = None if self.deterministic else (lambda: budget.out(pool))
        pool.fast = lazy
        self.late = [n for n in BASELINE_ORDER if n not in FIRST_BASELINES and self.baselines]  # lazy: after the rounds
        skip = self.skip
        if lazy and objective == "maxmin":
            if any(not clip(minst, j, h) for j, h in enumerate(static_domains(minst))):
                skip.add("static_split")  # a job left out whatever the plans: value 0, nothing to plan
                log.info("multiplan: baseline static_split certified (a job left out whatever the plans)")
            skip.add("equal_share")  # certified by its exact columns alone, below (no pricing plans)
        if lazy and objective != "maxmin":
            self._quick_then_exact()
        for name in (FIRST_BASELINES if lazy else BASELINE_ORDER) if objective == "maxmin" or not lazy else ():
            if (name not in FIRST_BASELINES and not self.baselines) or (not self.deterministic and budget.out(pool)) \
                    or name in skip:
                continue
            if lazy and name == "static_split" and self.state["best"] is not None:
                why = _static_split_bound(minst, pool, self.weights, self.state["best"])
                skip.add(name)
                if why:
                    log.info("multiplan: baseline static_split certified (%s)", why)
                else:  # its plans span datacenters: after the rounds, with the other plan-dependent ones
                    self.late.insert(0, name)
                continue
            self.quick_baseline(name)
        if lazy and objective == "maxmin":
            runs = self.runs
            order = sorted(runs, key=lambda n: -(_baseline_value(pool, runs[n], objective, self.weights) or -math.inf))
            if "equal_share" in skip:
                order.append("equal_share")
                runs["equal_share"] = _equal_share_allocation(minst)
            for name in order:
                if budget.out(pool):
                    break
                self.certify(name, plans=name not in PLAN_FREE)
        elif not lazy:
            self.late = []
        budget.plans += pool.plans_made

    def _quick_then_exact(self) -> None:
        """Lazy, objectives but maxmin: one datacenter and the static split by the pricing planner
        (an incumbent within seconds), then every baseline exactly, as it runs alone."""
        pool, budget, objective = self.pool, self.budget, self.objective
        pool.fast = True
        if objective in ("deadline", "cost"):
            # the least slices meeting each deadline (.deadline), by the pricing planner, first,
            # until DEADLINE_EARLY of the time limit has passed: the columns these objectives pack
            def early(*args, **kw):
                return None if budget.left() < (1 - DEADLINE_EARLY) * budget.limit else self.make(*args, **kw)

            price_deadline(self.minst, pool, self.state["best"], objective, early)
            if pool.columns:
                self.master()
            self.log_progress("deadline columns")
        for name in QUICK_BASELINES:
            if name == "one_datacenter" and objective in ("deadline", "cost"):
                continue  # the deadline columns hold the least one-domain slices already
            if not budget.out(pool):
                self.quick_baseline(name)
        pool.fast = False
        for name in BASELINE_ORDER:
            if (name in FIRST_BASELINES or self.baselines) and not budget.out(pool):
                self.quick_baseline(name)
        self.late = []

    def first_columns(self) -> None:
        """Each job's reference plan (no new plan), then, for the jobs the incumbent holds lowest
        (maxmin, lazy; else every job), its weight's share of everything and each of its two
        largest domains alone."""
        minst, pool, cap, weights = self.minst, self.pool, self.cap, self.weights
        for j, p in enumerate(_reference_plans_known(minst, self.solver)):  # each job's reference plan
            if p is not None and (self.deterministic or not self.budget.out(pool)):  # (one evaluation each)
                used = {d: n for d, n in p.gpus_per_domain().items() if n}
                quota = minst.jobs[j].max_gpus
                if set(used) <= set(minst.allowed(j)) and (quota is None or sum(used.values()) <= quota):
                    pool.add(pool.score(j, used, {k: 1.0 for k in cap.links}, {d: 1.0 for d in used},
                                        pool.as_job(p, j), "reference"))
        pool.fast = self.solver == "greedy"  # the pricing planner from here on; chosen columns re-planned exactly
        W = sum(weights)
        first = range(len(minst.jobs))
        if self.lazy and self.objective == "maxmin" and self.state["best"] is not None:
            inc = self.state["best"]  # the jobs the incumbent holds lowest
            vals = {j: pool.columns[k].rho / weights[j] for j, k in enumerate(inc.choice) if k is not None}
            first = [j for j in range(len(minst.jobs)) if vals.get(j, 0.0) <= FIRST_LOW * inc.value]
        for j in first:
            f = weights[j] / W
            self.make(j, {d.name: int(f * d.gpus) for d in minst.domains if d.name in minst.allowed(j)},
                      {k: f for k in cap.links}, None, source="weight_share")
        for j in first:  # alone in each of its two largest domains
            big = sorted(minst.allowed(j), key=lambda d: (-minst.domains[minst.domain_names.index(d)].gpus,
                                                            minst.domain_names.index(d)))[:2]
            for d in big:
                self.make(j, {d: minst.domains[minst.domain_names.index(d)].gpus}, {}, None, source="one_domain")
        log.info("multiplan: %d first columns from %d plans (%.1f s)", len(pool.columns), pool.plans_made,
                 time.perf_counter() - self.t0)

    def rounds(self) -> str:
        """2. Rounds of master, LP and pricing (polish, deadline columns, the LP's prices; when
        converged, one probe above the incumbent), the late certificates and baselines, until no
        new column comes or the budget ends; the status."""
        minst, pool, budget, objective, weights, cap = (self.minst, self.pool, self.budget, self.objective,
                                                        self.weights, self.cap)
        self.bound = multi_bound(minst, objective, self.refs)
        status = "heuristic"
        seen = -1  # the columns the last master saw
        probed = None  # the incumbent's value when the converged rounds last probed above it
        pending = self.pending
        while True:
            if self.n_rounds and budget.out(pool) and len(pool.columns) == seen:
                return budget.reason
            seen = len(pool.columns)
            res = self.master()
            best = self.state["best"]
            t_lp = time.perf_counter()
            lp = solve_lp(pool.columns, weights, cap, objective)
            self.state["lp_s"] = time.perf_counter() - t_lp
            self.master_lp = lp.value
            self.n_rounds += 1
            log.info("multiplan round %d: %d columns, master %s, LP %s (%.1f s)", self.n_rounds, len(pool.columns),
                     None if res.value is None else f"{res.value:.6g}",
                     None if lp.value is None else f"{lp.value:.6g}", time.perf_counter() - self.t0)
            if best is not None and gap_of(best.value, self.bound) is not None \
                    and gap_of(best.value, self.bound) <= 1e-9:
                return status  # the bound is reached: no column can do better
            converged = objective == "maxmin" and best is not None and lp.value is not None \
                and lp.value <= best.value * (1 + LP_TOL)  # no mix of these columns beats one column per job
            if pending and not budget.out(pool) and (converged or budget.left() <= CERTIFY_AT * budget.limit):
                names, pending[:] = list(pending), []
                for name in names:  # the late certificates (bound first, against the incumbent now)
                    self.certify(name)
                continue
            if budget.out(pool):
                return budget.reason
            before = len(pool.columns)
            if not converged:
                if best is not None:
                    _polish(minst, pool, best, objective, weights, budget, self.deterministic)
                if objective in ("deadline", "cost"):  # the least slices meeting each deadline first
                    price_deadline(minst, pool, best, objective, self.make, prices=lp.duals)
                _price(minst, pool, best, lp, objective, weights, cap, self.make)
            elif probed != best.value:
                # converged: one probe above the incumbent (rebalanced towards REBALANCE_STEP more);
                # the rounds go on if it adds columns, end when the value has not moved since the last probe
                probed = best.value
                cols = pool.columns
                picked = {j: (None if k is None else cols[k]) for j, k in enumerate(best.choice)}
                _pack(minst, pool, picked, weights, best.value * (1 + REBALANCE_STEP), cap, self.make)
                _rebalance(minst, pool, picked, weights, best.value * (1 + REBALANCE_STEP), cap, self.make)
            if len(pool.columns) == before and pending and not budget.out(pool):
                names, pending[:] = list(pending), []
                for name in names:  # stalled: the late certificates first
                    self.certify(name)
            while len(pool.columns) == before and self.late and not budget.out(pool):
                self.late_baseline()
            if len(pool.columns) == before:
                return status

    def late_baseline(self) -> None:
        """Converged, or no new column: the next baseline (pricing planner), certified when it competes."""
        pool, objective, weights = self.pool, self.objective, self.weights
        name = self.late.pop(0)
        if objective == "maxmin":  # scored apart: its columns join only when it competes (certify)
            scratch = pool.scratch()
            try:
                self.runs[name] = BASELINES[name](self.minst, self.refs, pool=scratch, objective=objective)
            except (InfeasibleError, InputError) as err:
                log.info("multiplan: baseline %s gave no multi-plan: %s", name, err)
                self.runs[name] = None
            pool.plans_made += scratch.plans_made
            v, inc = _baseline_value(scratch, self.runs[name], objective, weights), self.state["best"]
            log.info("multiplan: quick baseline %s (apart): %s (%.1f s)", name,
                     None if v is None else f"{v:.6g}", time.perf_counter() - self.t0)
        else:
            self.quick_baseline(name)
            v, inc = _baseline_value(pool, self.runs[name], objective, weights), self.state["best"]
        if not (objective == "maxmin" and v is not None and inc is not None and v < CERTIFY_SHARE * inc.value):
            self.certify(name)
        else:
            log.info("multiplan: baseline %s left uncertified: %.6g by the pricing planner, below %g x the "
                     "incumbent", name, v, CERTIFY_SHARE)

    def result(self, status: str, sharing: str, references, ref_s: float):
        """The incumbent's multi-plan, scored, with its status, bound and the run's figures."""
        for name in self.pending:
            log.info("multiplan: baseline %s left uncertified: the time limit came first", name)
        best, pool, budget = self.state["best"], self.pool, self.budget
        if best is None:
            raise InfeasibleError(f"no choice of one column per job is feasible under {self.objective} "
                                  f"({len(pool.columns)} columns from {pool.plans_made} plans): "
                                  + _no_choice_reason(self.minst, pool.columns, self.objective))
        if budget.reason is not None and status == "heuristic":
            status = budget.reason
        cols = [None if k is None else pool.columns[k] for k in best.choice]
        mp = assemble(self.minst, self.objective, cols, self.refs, self.equal_tput)
        extra = {"master_lp": self.master_lp, "master_value": best.value, "columns": len(pool.columns),
                 "rounds": self.n_rounds, "plans_made": pool.plans_made, "column_solver": self.solver,
                 "references_given": bool(references)}
        if not self.deterministic:  # a time: not in a deterministic run's document
            extra["references_s"] = round(ref_s, 3)
        return _finish(self.minst, mp, self.objective, sharing, self.refs, status, extra, self.t0, self.bound)


def _no_choice_reason(minst, columns, objective: str) -> str:
    """Why no column per job is feasible together: the jobs without a column (under ``cost``:
    without one meeting its deadline, with the fastest one's completion), else the cluster."""
    why = []
    for j, spec in enumerate(minst.jobs):
        own = [c for c in columns if c.job == j]
        if not own:
            why.append(f"job {spec.name!r} has no plan on any slice tried")
        elif objective == "cost" and not any(c.deadline_met for c in own):
            fastest = min(c.completion_s for c in own)
            why.append(f"job {spec.name!r} meets its deadline of {spec.deadline_hours:g} h in none of its {len(own)} "
                       f"columns (the fastest finishes in {fastest / 3600.0:.3g} h)")
    if not why:
        return ("every job has a column" + (" meeting its deadline" if objective == "cost" else "")
                + ", but none of their combinations fits the cluster's GPUs and links at once")
    hint = "; objective deadline admits the jobs that can meet theirs" if objective == "cost" else ""
    return "; ".join(why) + hint


def _polish(minst, pool, best, objective, weights, budget, deterministic) -> None:
    """The incumbent's columns made better where it matters, lazily: each chosen column
    trimmed (its link and uplink shares lowered, :func:`trim`; on a clock budget at most
    what a tenth of the time left allows), and the binding jobs' chosen columns planned by
    the pricing planner re-planned exactly (at most :data:`EXACT_PER_ROUND` a round)."""
    chosen = [(j, pool.columns[k]) for j, k in enumerate(best.choice) if k is not None]
    todo = chosen
    if objective == "maxmin" and not deterministic:
        # only what frees links for others: the columns holding the most link share, a few a round
        todo = sorted((jc for jc in chosen if jc[1].link_share),
                      key=lambda jc: (-sum(jc[1].link_share.values()), jc[0]))[:TRIM_PER_ROUND]
    for j, col in todo:
        if budget.out(pool):
            return
        if col.trimmed or id(col) in pool._trimmed:
            continue
        n = TRIM_EVALUATIONS
        if not deterministic and col.eval_s > 0:
            n = min(n, int(0.1 * max(0.0, budget.left()) / col.eval_s))
        if n >= 4:
            pool._trimmed[id(col)] = (col, pool.add(trim(pool, col, n)))
    if objective == "maxmin":
        order = sorted(chosen, key=lambda jc: jc[1].rho / weights[jc[0]])
        low = order[0][1].rho / weights[order[0][0]] if order else 0.0
        order = [jc for jc in order if jc[1].rho / weights[jc[0]] <= low * (1 + 1e-9)]  # the binding jobs
    elif objective == "makespan":
        order = sorted(chosen, key=lambda jc: -jc[1].completion_s)
    else:
        order = sorted(chosen, key=lambda jc: jc[1].rho)
    if objective == "maxmin" and not deterministic:
        return  # the baselines are certified (_certify); the rounds' time goes to new allocations
    done = 0
    for j, col in order:
        if done >= EXACT_PER_ROUND or budget.out(pool):
            return
        if col.fast:
            done += 1
            pool.make(j, col.gpus, col.link_share, col.uplink_share, source="exact", fast=False)


def _equal_share_allocation(minst):
    """The equal share's allocations without plans (SPEC 10's equal slices; a job whose
    slice has no GPU is left out), shaped as a multi-plan's ``jobs`` for :func:`_certify`."""
    jobs = []
    for j in range(len(minst.jobs)):
        g, links, ups = equal_slice(minst, j)
        g = clip(minst, j, {d: n for d, n in g.items() if n})
        jobs.append(_Alloc(bool(g), g, links if g else {}, ups if g else {}))
    return _Allocs(jobs)


@dataclass
class _Alloc:
    """One job's allocation, as :class:`planner.problem.multiplan.JobAllocation` gives it."""

    admitted: bool
    gpus: dict
    link_share: dict
    uplink_share: dict


@dataclass
class _Allocs:
    jobs: list


def _static_split_bound(minst, pool, weights, inc) -> str | None:
    """Why the static split cannot beat the incumbent ``inc`` under maxmin whatever its plans
    (a job's rho / w on its datacenters with every link and uplink whole, by the slice's
    lower bound, at most the incumbent's value; the :data:`BOUND_TRIES` jobs the incumbent
    holds lowest tried), else None.  No plan is made."""
    value = inc.value
    have = [clip(minst, j, h) for j, h in enumerate(static_domains(minst))]
    for j, g in enumerate(have):
        if not g:
            return f"{minst.jobs[j].name} left out whatever the plans"
    order = sorted(range(len(have)), key=lambda j: (pool.columns[inc.choice[j]].rho / weights[j]
                                                    if inc.choice[j] is not None else 0.0, j))
    for j in order[:BOUND_TRIES]:
        g = have[j]
        whole = _Alloc(True, g, {k: 1.0 for k in link_keys(minst)}, {d: 1.0 for d in g})
        ub = _rho_upper(minst, pool, j, whole)
        if ub is not None and ub / weights[j] <= value * (1 + 1e-12):
            return (f"{minst.jobs[j].name}'s rho/w on its datacenters is at most {ub / weights[j]:.6g} (the "
                    "slice's lower bound on T_eff/e, every link whole) <= the incumbent's")
    return None


def _rho_upper(minst, pool, j: int, a) -> float | None:
    """An upper bound on job j's rho on allocation ``a`` whatever the plan: its tokens per
    iteration over the slice's lower bound on T_eff / e (SPEC 7's bound, valid for every
    plan), over the job's reference.  None when the slice cannot be built."""
    from ...scoring.bounds import lower_bound

    try:
        inst = minst.slice_instance(j, a.gpus, a.link_share, a.uplink_share)
        lb = lower_bound(inst).value
    except (InputError, InfeasibleError, ValueError):
        return None
    ref = pool.references.get(minst.jobs[j].name)
    if not lb or not ref or not math.isfinite(lb):
        return None
    wl = inst.workload
    return wl.global_batch_size * wl.seq_len / lb / ref


def _baseline_value(pool, mp, objective: str, weights) -> float | None:
    """A baseline multi-plan's first objective as the pool's columns give it (maxmin: the
    least ``rho / w``, 0 when a job is left out; otherwise ``sum w rho``); None without
    one.  No plan is made."""
    if mp is None:
        return None
    vals = []
    for j, a in enumerate(mp.jobs):
        col = pool.find(j, a.gpus, a.link_share, a.uplink_share) if a.admitted else None
        vals.append(0.0 if col is None else col.rho)
    if objective == "maxmin":
        return min(v / w for v, w in zip(vals, weights))
    return sum(v * w for v, w in zip(vals, weights))


def _certify(minst, pool, name, mp, objective, weights, state, master, run_baseline, plans: bool = True) -> str | None:
    """Make sure the incumbent is no worse than baseline ``name`` as it runs alone (the exact
    planner), making as few exact plans as that takes; ``mp``: the baseline by the pricing
    planner.  Under maxmin, for a baseline whose allocation does not depend on the plans
    (:data:`PLAN_FREE`), its jobs by increasing ``rho / w`` (pricing planner) get their exact
    columns on the same allocations until one's ``rho / w`` is at most the incumbent's value
    (then the baseline's value is too); a static split leaving a job out scores 0 whatever the
    plans.  Otherwise the baseline runs again by the exact planner (its columns join the
    pool, the master runs).  Returns how it was certified (for the log); with
    ``plans=False`` None when that would take a plan (nothing done)."""
    if objective == "maxmin" and mp is not None:
        if name == "static_split" and any(not a.admitted for a in mp.jobs):
            return "a job left out whatever the plans"
        if name in PLAN_FREE:
            if any(not a.admitted for a in mp.jobs):
                return "a job left out whatever the plans"
            items = []
            inc = state["best"]
            for j, a in enumerate(mp.jobs):
                col = pool.find(j, a.gpus, a.link_share, a.uplink_share)
                if col is None and inc is not None and inc.choice[j] is not None:
                    col = pool.columns[inc.choice[j]]  # no pricing column: the incumbent's order
                items.append(((col.rho if col is not None else 0.0) / weights[j], j, a))
            items.sort(key=lambda t: (t[0], t[1]))
            inc = state["best"]
            for _, j, a in items[:BOUND_TRIES] if inc is not None else ():  # a bound first: no plan at all
                ub = _rho_upper(minst, pool, j, a)
                if ub is not None and ub / weights[j] <= inc.value * (1 + 1e-12):
                    return (f"{minst.jobs[j].name}'s rho/w on its slice is at most {ub / weights[j]:.6g} "
                            "(the slice's lower bound on T_eff/e) <= the incumbent's")
            if not plans:
                return None
            for _, j, a in items:
                col = pool.make(j, a.gpus, a.link_share, a.uplink_share, source=f"baseline:{name}", fast=False)
                if col is None and pool.stop_check is not None and pool.stop_check():
                    return "cut by the time limit"
                if col is None:
                    return f"{minst.jobs[j].name} has no exact plan: left out"
                best = state["best"]
                if best is not None and col.rho / weights[j] <= best.value * (1 + 1e-12):
                    return f"{col.name}'s exact rho/w {col.rho / weights[j]:.6g} <= the incumbent's"
            master()
            return "every job exact"
    if not plans:
        return None
    run_baseline(name)
    master()
    return "run exactly"


def _reference_plans_known(minst, solver: str) -> list:
    """Each job's reference plan by ``solver`` when :func:`references` made one for this
    instance (any seed or limit), else None per job."""
    cache = minst.__dict__.get("_multijob_references", {})
    for key, plans in cache.items():
        if key[0] == solver:
            return [plans.get(s.name) for s in minst.jobs]
    return [None] * len(minst.jobs)


def _better(objective, a, b) -> bool:
    if objective in ("maxmin", "weighted", "deadline"):
        return (a.value, a.tie) > (b.value, b.tie)
    return (-a.value, a.tie) > (-b.value, b.tie)


def _finish(minst, mp, objective, sharing, refs, status, extra, t0, bound=None, allow_infeasible=False):
    """Score ``mp`` (reserved; and ``sharing``), attach the solver's claims.  ``allow_infeasible``
    (the rl allocator): a multi-plan leaving a job out under an objective that admits every
    job is returned as it is, status ``infeasible`` (``multievaluate`` names the job)."""
    ev = multievaluate(minst, mp, sharing="reserved")
    if not ev.feasible and allow_infeasible:
        status = "infeasible"
    elif not ev.feasible:  # a bug: every column is feasible on its slice and the master respects capacities
        raise RuntimeError("multiplan made an infeasible multi-plan: " + "; ".join(ev.violations))
    if bound is None:
        bound = multi_bound(minst, objective, refs)
    value = ev.objective_value
    gap = gap_of(value, bound)
    if gap is not None and gap <= 1e-9 and ev.feasible:
        status = "optimal"
    if sharing == "shared":
        shared = multievaluate(minst, mp, sharing="shared")
        extra = {**extra, "shared_objective": shared.objective_value}
    info = SolverInfo(name="multiplan", status=status, objective=value, bound=bound, gap=gap,
                      time_s=time.perf_counter() - t0, sharing=sharing, **extra)
    return mp.model_copy(update={"solver": info}).bind(minst)


def _price(minst, pool, best, lp, objective, weights, cap: Capacity, make) -> None:
    """New columns from the incumbent and the LP's prices (see the module docstring)."""
    J = len(weights)
    cols = pool.columns
    choice = best.choice if best is not None else [None] * J
    picked = {j: (None if k is None else cols[k]) for j, k in enumerate(choice)}
    free_g = dict(cap.gpus)
    free_l = {k: 1.0 for k in cap.links}
    free_u = {d.name: 1.0 for d in minst.domains}
    for c in picked.values():
        if c is None:
            continue
        _add_use(c, free_g, free_l, free_u, -1)
    # the jobs whose row binds
    if objective == "maxmin":
        vals = {j: (c.rho / weights[j] if c is not None else -1.0) for j, c in picked.items()}
        low = min(vals.values())
        targets = [j for j in range(J) if vals[j] <= low + 1e-9]
    elif objective == "makespan":
        vals = {j: (c.completion_s if c is not None else math.inf) for j, c in picked.items()}
        top = max(vals.values())
        targets = [j for j in range(J) if vals[j] >= top - 1e-9 * max(1.0, top)]
    elif objective == "deadline":
        targets = [j for j, c in picked.items() if c is None or not c.deadline_met] or list(range(J))
    else:
        targets = sorted(range(J), key=lambda j: picked[j].rho if picked[j] is not None else -1.0)
    price = {d: lp.duals.get(("gpu", d), 0.0) for d in cap.gpus}
    speed = {d.name: 1.0 for d in minst.domains}
    try:  # per achieved FLOP/s: a price per GPU over the GPU's speed
        inst = minst.job_instance(0)
        speed = {d.name: inst.domain_gpu(d.name).flops_per_s / 1e15 for d in minst.domains}
    except Exception:  # noqa: BLE001 - speed only orders domains
        pass
    # 0. the LP's mix rounded (:func:`lp_rounding`): each job whose x is fractional on the
    # LP-weighted average of its columns' allocations; with the others' columns they fit together
    if objective == "maxmin" and best is not None:
        level = max(best.value * (1 + REBALANCE_STEP), 0.5 * (best.value + (lp.value or 0.0)))
        if _pack(minst, pool, picked, weights, level, cap, make):
            targets = []  # a packing at the level: its columns decide; no larger slice needed yet
        else:
            _pack(minst, pool, picked, weights, best.value * (1 + REBALANCE_STEP), cap, make)
            _rebalance(minst, pool, picked, weights, level, cap, make)
            targets = targets[:EXACT_PER_ROUND]
    if lp.x:
        alloc = lp_rounding(cols, lp.x, J)
        order = sorted(alloc, key=lambda j: -lp.duals.get(("job", j), 0.0))  # the binding rows first
        if objective == "maxmin":  # the jobs whose row binds in the LP, a few a round
            order = [j for j in order if lp.duals.get(("job", j), 0.0) > 1e-9][:EXACT_PER_ROUND]
        for j in order:
            g, links, ups = alloc[j]
            if g:
                make(j, g, links, ups, source="price:lp_mix")
    for j in targets:
        c = picked[j]
        mine_g = dict(c.gpus) if c is not None else {}
        mine_l = dict(c.link_share) if c is not None else {}
        mine_u = dict(c.uplink_share) if c is not None else {}
        allowed = minst.allowed(j)
        # 1. grow by what is free
        g = {d: mine_g.get(d, 0) + max(0, free_g[d]) for d in allowed}
        links = {k: mine_l.get(k, 0.0) + max(0.0, free_l[k]) for k in cap.links}
        ups = {d: min(1.0, mine_u.get(d, 0.0) + max(0.0, free_u[d])) for d in g if g[d] > 0}
        make(j, g, links, ups, source="price:grow")
        # 2. the domains cheapest by the duals (per FLOP/s), with all their GPUs, n = 1, 2, 4
        order = sorted(allowed, key=lambda d: (price[d] / speed[d], -cap.gpus[d], minst.domain_names.index(d)))
        for n in (1, 2, 4):
            if n > len(order):
                break
            doms = order[:n]
            g = {d: cap.gpus[d] for d in doms}
            links = {k: max(mine_l.get(k, 0.0) + max(0.0, free_l[k]), 1.0 / J) for k in cap.links
                     if set(k.split("|")) <= set(doms) or n > 1}
            make(j, g, links, None, source=f"price:cheapest{n}")
        if objective == "maxmin":
            continue  # the others shrunk by _rebalance
        # 3. the others shrunk where j's prices are high: half their GPUs in the dearest domains
        dear = sorted((d for d in cap.gpus if price[d] > 1e-12), key=lambda d: -price[d] / speed[d])[:4]
        for k, ck in picked.items():
            if k == j or ck is None:
                continue
            if dear and not any(ck.gpus.get(d, 0) for d in dear):
                continue
            g = {d: (n // 2 if (not dear or d in dear) else n) for d, n in ck.gpus.items()}
            g = {d: n for d, n in g.items() if n}
            if g and g != ck.gpus:
                make(k, g, {key: v for key, v in ck.link_share.items()}, None, source="price:shrink")


def lp_rounding(columns, x: dict, J: int) -> dict[int, tuple[dict, dict, dict]]:
    """The master LP's solution ``x`` (column index -> value) rounded into one allocation
    per job whose x is fractional: the x-weighted average of its columns' GPUs per domain
    (floored), link and uplink shares (rounded down to :data:`columns.SHARE_DIGITS`
    decimals); job -> (gpus, link_share, uplink_share).  With the columns of the jobs whose
    x is integral these allocations fit together (each sum of floors is at most the LP's
    sum, which is within the capacity) and each job's stays within its allowed domains and
    quota (an average of columns that do).

    >>> lp_rounding([col_a64, col_a32], {0: 0.5, 1: 0.5}, 1)      # doctest: +SKIP
    {0: ({'a': 48}, {}, {'a': 0.375})}
    """
    frac = {columns[k].job for k, v in x.items() if 1e-9 < v < 1 - 1e-9}
    out = {}
    scale = 10 ** SHARE_DIGITS
    for j in sorted(frac):
        g, links, ups = {}, {}, {}
        for k, v in x.items():
            c = columns[k]
            if c.job != j:
                continue
            _add_use(c, g, links, ups, v)
        gi = {d: int(math.floor(n + 1e-9)) for d, n in g.items()}
        gi = {d: n for d, n in gi.items() if n > 0}
        down = {key: math.floor(v * scale) / scale for key, v in links.items()}
        out[j] = (gi, {key: v for key, v in down.items() if v > 0},
                  {d: math.floor(ups.get(d, 0.0) * scale) / scale for d in gi})
    return out


def _rebalance(minst, pool, picked, weights, level: float, cap: Capacity, make) -> None:
    """Maxmin: towards every job at ``rho / w >= level``, throughput taken as proportional to
    GPUs (with :data:`REBALANCE_STEP` to spare).  The incumbent's jobs well above the level
    shrunk (GPUs and link shares scaled by what the level needs; the most GPUs to give back
    first, at most :data:`REBALANCE_JOBS`); the shrunk columns that still reach the level
    free their GPUs; the jobs below it scaled up in their own domains while the freed GPUs
    allow (the furthest below first); what is left goes to the jobs still below, split
    among them, in every allowed domain (with the links left).  Every allocation made here
    fits with the others' (all of them a feasible multi-plan when each reaches the level)."""
    J = len(weights)
    now = {j: c for j, c in picked.items() if c is not None}
    if len(now) < J:
        return
    val = {j: c.rho / weights[j] for j, c in now.items()}
    if not any(v < level for v in val.values()):
        return
    want = level * (1 + REBALANCE_STEP)
    rich = [j for j in range(J) if val[j] > level * (1 + 2 * REBALANCE_STEP)]
    rich.sort(key=lambda j: -(1 - level / val[j]) * now[j].total_gpus)
    use = dict(now)
    for j in rich[:REBALANCE_JOBS]:
        c = now[j]
        f = min(0.9, max(0.05, want / val[j]))
        g = {d: int(math.floor(n * f)) for d, n in c.gpus.items()}
        g = {d: n for d, n in g.items() if n > 0}
        if not g or g == c.gpus:
            continue
        col = make(j, g, {k: v * f for k, v in c.link_share.items()}, None, source="price:shrink")
        if col is not None and col.rho / weights[j] >= level:
            use[j] = col
    free_g = dict(cap.gpus)
    free_l = {k: 1.0 for k in cap.links}
    free_u = {d: 1.0 for d in cap.uplinks}

    def take(c, sign=-1):
        _add_use(c, free_g, free_l, free_u, sign)

    for c in use.values():
        take(c)
    low = sorted((j for j in range(J) if use[j].rho / weights[j] < level), key=lambda j: (val[j], j))
    still = []
    for j in low:  # scaled up in its own domains while the freed GPUs allow
        c = use[j]
        f = want / max(val[j], 1e-12)
        g = {d: min(n + max(0, free_g[d]), int(math.ceil(n * f))) for d, n in c.gpus.items()}
        links = {k: min(v + max(0.0, free_l[k]), v * f) for k, v in c.link_share.items()}
        if g == c.gpus:
            still.append(j)
            continue
        col = make(j, g, links, None, source="price:scale_up")
        if col is not None and col.rho / weights[j] >= level:
            take(c, +1)
            take(col)
            use[j] = col
        else:
            still.append(j)
    n = len(still)
    for j in still:  # what is left, split among the jobs still below the level
        c = use[j]
        allowed = set(minst.allowed(j))
        g = {d: c.gpus.get(d, 0) + max(0, free_g.get(d, 0)) // n for d in cap.gpus if d in allowed}
        g = {d: v for d, v in g.items() if v > 0}
        links = {k: c.link_share.get(k, 0.0) + max(0.0, free_l[k]) / n for k in cap.links}
        ups = {d: min(1.0, c.uplink_share.get(d, 0.0) + max(0.0, free_u.get(d, 0.0)) / n) for d in g}
        if g != c.gpus:
            make(j, g, links, ups, source="price:rebalance")


def _pack(minst, pool, picked, weights, level: float, cap: Capacity, make) -> bool:
    """Maxmin: one feasible multi-plan aimed at every ``rho / w >= level``, by packing.  The
    incumbent's jobs below the level keep the column of theirs reaching it with the fewest
    GPUs (else their best); every other job goes alone into one allowed domain with the GPUs
    its single-domain columns say the level needs (throughput taken as proportional to
    GPUs, with :data:`REBALANCE_STEP` to spare), the largest needs first, each into the
    domain with the fewest free GPUs that hold it (best fit).  Columns made for the packed
    jobs; they fit together with the low jobs' by construction.  False when some job
    found no domain, or when a low job has no column reaching the level (then it needs a
    larger one)."""
    J = len(weights)
    cols = pool.columns
    now = {j: c for j, c in picked.items() if c is not None}
    if len(now) < J:
        return False
    want = level * (1 + REBALANCE_STEP)
    mine = {j: [c for c in cols if c.job == j] for j in range(J)}
    low = [j for j in range(J) if now[j].rho / weights[j] < level]
    free_g = dict(cap.gpus)
    free_l = {k: 1.0 for k in cap.links}
    free_u = {d: 1.0 for d in cap.uplinks}
    reached = True
    for j in low:
        ok = [c for c in mine[j] if c.rho / weights[j] >= level]
        reached = reached and bool(ok)
        c = min(ok, key=lambda c: (c.total_gpus, -c.rho)) if ok else max(mine[j], key=lambda c: (c.rho, -c.total_gpus))
        _add_use(c, free_g, free_l, free_u, -1)
    if min(free_g.values()) < 0 or min(free_l.values()) < -1e-9 or min(free_u.values()) < -1e-9:
        return False
    need = {}
    for j in range(J):
        if j in low:
            continue
        single = [c for c in mine[j] if len(c.gpus) == 1 and not c.link_share]
        ok = [c for c in single if c.rho / weights[j] >= want]
        if ok:
            need[j] = min(c.total_gpus for c in ok)
        elif single:
            c = max(single, key=lambda c: (c.rho / c.total_gpus, c.rho))
            need[j] = int(math.ceil(c.total_gpus * want / max(c.rho / weights[j], 1e-12)))
        else:
            need[j] = int(math.ceil(now[j].total_gpus * want / max(now[j].rho / weights[j], 1e-12)))
        if minst.jobs[j].max_gpus is not None:
            need[j] = min(need[j], minst.jobs[j].max_gpus)
    place = {}
    for j in sorted(need, key=lambda j: (-need[j], j)):
        fits = [d for d in minst.allowed(j) if free_g[d] >= need[j] and free_u[d] > 1e-9]
        if not fits:
            return False
        d = min(fits, key=lambda d: (free_g[d], minst.domain_names.index(d)))
        place[j] = d
        free_g[d] -= need[j]
        free_u[d] -= need[j] / cap.gpus[d]
    for j, d in sorted(place.items(), key=lambda t: -need[t[0]]):
        make(j, {d: need[j]}, {}, {d: need[j] / cap.gpus[d]}, source="price:pack")
    return reached
