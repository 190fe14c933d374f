"""Several jobs by column generation (SPEC 10): ``multiplan``.

1. **References** (:func:`references`): tput*_j, the throughput of one fixed
   method, the plan of ``solver`` on ``minst.job_instance(j)``, computed once per
   mix (cached on the instance) unless given (``references=``; the CLI's
   ``--references FILE``); computed here they count in the time limit (at most
   :data:`REF_SHARE` of it) and their time is logged.
2. **A feasible multi-plan first**: with greedy columns on a clock budget, the
   cheapest baselines (:data:`QUICK_BASELINES`) by the pricing planner (greedy
   without its exact re-ranking), the master after each: an incumbent within
   seconds.  Then every baseline exactly (:mod:`.baselines`, cheapest first; so
   the result is never worse than a baseline when they finish within the
   budget), each job's reference plan on the GPUs it uses, each job on a share
   of every domain in proportion to its weight and alone in each of its two
   largest domains (the pricing planner from here on).  Plans are shared by the
   jobs of one workload; trimming is lazy (the incumbent's columns, each round).
3. **Rounds**: the master MILP (:func:`.master.solve_master`) picks one column
   per job; its LP relaxation (:func:`.master.solve_lp`) gives ``master_lp`` and
   the prices of GPUs (per domain), links and uplinks.  New columns: every job on
   the LP-weighted average of its columns' allocations (they fit together); for the jobs
   whose row binds (maxmin: the least ``rho / w``; makespan: the latest;
   weighted, cost: every job; deadline: the jobs missing their deadline): the
   job's allocation grown by what the incumbent leaves free, the job on the
   domains whose GPUs are cheapest by the duals (per achieved FLOP/s), and the
   other jobs shrunk where the binding job's prices are high; the incumbent's
   binding columns of the pricing planner re-planned exactly.  Rounds stop when a
   round adds no column, or at the time limit (status ``time_limit``, the best
   multi-plan so far).  Under ``deadline`` and ``cost`` every round first prices by
   the deadline (:func:`.deadline.price_deadline`: per job, the least one-domain, near-set
   and least-priced-domains slices meeting its deadline, by bisection), and so does the
   start, before the quick baselines, for at most :data:`DEADLINE_EARLY` of the limit.
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

from ...problem.errors import InfeasibleError, InputError
from ...problem.jobs import OBJECTIVES, equal_slice, full_allocation
from ...problem.plan import SolverInfo
from ...scoring.multievaluate import gap_of, multi_bound, multievaluate
from .. import stop
from .baselines import BASELINES
from .columns import TRIM_EVALUATIONS, ColumnPool, assemble, link_keys, plan_throughput, reference_throughputs, trim
from .deadline import price_deadline
from .master import Capacity, solve_lp, solve_master

log = logging.getLogger("planner")

PLANS_PER_SECOND = 1.0  # deterministic budget: plans per second of the time limit
COLUMN_SHARE = 0.25  # at most this share of the time limit for one plan (and at least MIN_COLUMN_S)
MIN_COLUMN_S = 1.0
FINISH_S = 0.05  # share of the time limit kept for the last master and the evaluation (and _Budget.extra)
REF_SHARE = 0.3  # references computed inside the limit: at most this share of it over all jobs
FIRST_BASELINES = ("one_datacenter", "static_split", "equal_share")  # the cheapest feasible multi-plans first
QUICK_BASELINES = ("one_datacenter", "static_split")  # by the pricing planner before anything else
DEADLINE_EARLY = 0.4  # deadline and cost: the first deadline columns stop when this share of the limit has passed
EXACT_PER_ROUND = 3  # chosen columns of the pricing planner re-planned exactly per round
SHARINGS = ("reserved", "shared")
ALLOCATORS = ("master", "rl")  # multiplan's allocator: the column master, or the PPO allocator (.rl)


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
    J = len(minst.jobs)
    if J == 1:
        mp, extra = _single(minst, objective, time_limit, seed, solver, deterministic, references, t0)
        refs = {j.name: j.reference_throughput_tokens_per_s for j in mp.jobs}
        return _finish(minst, mp, objective, sharing, refs, "heuristic", extra, t0)
    t_ref = time.perf_counter()
    if references:
        refs = dict(references)
        missing = [s.name for s in minst.jobs if not refs.get(s.name)]
        if missing:
            raise InputError(f"no reference throughput (tokens/s > 0) for job {missing[0]!r}"
                             + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""),
                             f"references.{missing[0]}")
    else:
        # one fixed method (solver alone on the whole cluster), its time inside the limit here: at
        # most REF_SHARE of it in all, so that the columns keep the rest
        ref_limit = None if deterministic else max(0.1, min(COLUMN_SHARE * time_limit, REF_SHARE * time_limit / J))
        refs = reference_throughputs(minst, time_limit=ref_limit, seed=seed, solver=solver,
                                     deterministic=deterministic)
        log.info("multiplan: references tput* of %d jobs (%s alone on the whole cluster, %s s each) took %.1f s "
                 "of the time limit; pass references (planner multiplan --references FILE) to compute them once "
                 "per mix", J, solver, "default" if ref_limit is None else f"{ref_limit:.3g}",
                 time.perf_counter() - t_ref)
    ref_s = time.perf_counter() - t_ref
    if allocator == "rl":
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
    pool = ColumnPool(minst, refs, solver=solver, seed=seed, deterministic=deterministic)
    pool.limit_fn = budget.column_limit
    weights = [s.weight for s in minst.jobs]
    cap = capacity(minst)
    equal_tput: dict[str, float] = {}
    state = {"best": None, "master_s": 0.0}

    def reserve() -> float:
        """Seconds kept for the last master and the final evaluation of the incumbent."""
        best = state["best"]
        ev = 0.0 if best is None else sum(pool.columns[k].eval_s for k in best.choice if k is not None)
        return 1.5 * ev + state["master_s"]

    budget.extra = reserve

    def master():
        t = time.perf_counter()
        limit = None if deterministic else max(0.2, budget.left() - FINISH_S * budget.limit)
        res = solve_master(pool.columns, weights, cap, objective, time_limit=limit, seed=seed)
        state["master_s"] = time.perf_counter() - t
        if res.value is not None and (state["best"] is None or _better(objective, res, state["best"])):
            state["best"] = res
        return res

    def make(j, g, links, ups=None, source="", fast=None):
        if budget.out(pool):
            return None
        return pool.make(j, g, links, ups, source=source, fast=fast)

    def run_baseline(name):
        try:
            return BASELINES[name](minst, refs, pool=pool, objective=objective)
        except (InfeasibleError, InputError) as err:
            log.info("multiplan: baseline %s gave no multi-plan: %s", name, err)
            return None

    # -- 1. a feasible multi-plan first: the cheapest baselines (one datacenter per job, whole
    # datacenters, the equal share), the master after each until one choice is feasible; a
    # deterministic budget counts the plans made after the baselines
    pool.stop_check = None if deterministic else (lambda: budget.out(pool))
    if solver == "greedy" and not deterministic:
        # 0. an incumbent within seconds: the cheapest baselines by the pricing planner (a few
        # domains per job, no re-ranking); then every baseline exactly, as it runs alone
        pool.fast = True
        if objective in ("deadline", "cost"):
            # the least slices meeting each deadline (.deadline), by the pricing planner, first,
            # until DEADLINE_EARLY of the time limit has passed: the columns these objectives pack
            def early(*args, **kw):
                return None if budget.left() < (1 - DEADLINE_EARLY) * budget.limit else make(*args, **kw)

            price_deadline(minst, pool, state["best"], objective, early)
            if pool.columns:
                master()
            log.info("multiplan: deadline columns: %d columns from %d plans (%.1f s)%s", len(pool.columns),
                     pool.plans_made, time.perf_counter() - t0, "" if state["best"] is None else
                     f", incumbent {state['best'].value:.6g}")
        for name in QUICK_BASELINES:
            if budget.out(pool):
                break
            if name == "one_datacenter" and objective in ("deadline", "cost"):
                continue  # the deadline columns hold the least one-domain slices already
            run_baseline(name)
            if pool.columns:
                master()
            log.info("multiplan: quick %s: %d columns from %d plans (%.1f s)%s", name, len(pool.columns),
                     pool.plans_made, time.perf_counter() - t0, "" if state["best"] is None else
                     f", incumbent {state['best'].value:.6g}")
        pool.fast = False
    for name in FIRST_BASELINES:
        if not deterministic and budget.out(pool):
            break
        mp0 = run_baseline(name)
        if name == "equal_share" and mp0 is not None:
            equal_tput = {a.name: a.equal_share_throughput_tokens_per_s for a in mp0.jobs
                          if a.equal_share_throughput_tokens_per_s}
        if state["best"] is None and pool.columns:
            master()
        log.info("multiplan: baseline %s: %d columns from %d plans (%.1f s)%s", name, len(pool.columns),
                 pool.plans_made, time.perf_counter() - t0, "" if state["best"] is None else
                 f", incumbent {state['best'].value:.6g}")
    if baselines:
        for name in BASELINES:
            if name in FIRST_BASELINES or (not deterministic and budget.out(pool)):
                continue
            run_baseline(name)
    budget.plans += pool.plans_made
    for j, p in enumerate(_reference_plans_known(minst, solver)):  # each job's reference plan: no new plan
        if p is not None and (deterministic or not budget.out(pool)):  # (one evaluation each)
            used = {d: n for d, n in p.gpus_per_domain().items() if n}
            quota = minst.jobs[j].max_gpus
            if set(used) <= set(minst.allowed(j)) and (quota is None or sum(used.values()) <= quota):
                pool.add(pool.score(j, used, {k: 1.0 for k in cap.links}, {d: 1.0 for d in used},
                                    pool.as_job(p, j), "reference"))
    pool.fast = solver == "greedy"  # the pricing planner from here on; chosen columns re-planned exactly
    W = sum(weights)
    for j in range(J):
        f = weights[j] / W
        make(j, {d.name: int(f * d.gpus) for d in minst.domains if d.name in minst.allowed(j)},
             {k: f for k in cap.links}, None, source="weight_share")
    for j in range(J):  # alone in each of its two largest domains
        big = sorted(minst.allowed(j), key=lambda d: (-minst.domains[minst.domain_names.index(d)].gpus,
                                                        minst.domain_names.index(d)))[:2]
        for d in big:
            make(j, {d: minst.domains[minst.domain_names.index(d)].gpus}, {}, None, source="one_domain")
    log.info("multiplan: %d first columns from %d plans (%.1f s)", len(pool.columns), pool.plans_made,
             time.perf_counter() - t0)

    # -- 2. rounds ---------------------------------------------------------------
    bound = multi_bound(minst, objective, refs)
    master_lp = None
    rounds = 0
    status = "heuristic"
    while True:
        if rounds and budget.out(pool):
            status = budget.reason
            break
        res = master()
        best = state["best"]
        lp = solve_lp(pool.columns, weights, cap, objective)
        master_lp = lp.value
        rounds += 1
        log.info("multiplan round %d: %d columns, master %s, LP %s (%.1f s)", rounds, len(pool.columns),
                 None if res.value is None else f"{res.value:.6g}", None if lp.value is None else f"{lp.value:.6g}",
                 time.perf_counter() - t0)
        if best is not None and gap_of(best.value, bound) is not None and gap_of(best.value, bound) <= 1e-9:
            break  # the bound is reached: no column can do better
        if budget.out(pool):
            status = budget.reason
            break
        before = len(pool.columns)
        if best is not None:
            _polish(minst, pool, best, objective, weights, budget, deterministic)
        if objective in ("deadline", "cost"):  # the least slices meeting each deadline first
            price_deadline(minst, pool, best, objective, make, prices=lp.duals)
        _price(minst, pool, best, lp, objective, weights, cap, make)
        if len(pool.columns) == before:
            break
    best = state["best"]
    if best is None:
        raise InfeasibleError(f"no choice of one column per job is feasible under {objective} "
                              f"({len(pool.columns)} columns from {pool.plans_made} plans)")
    if budget.reason is not None and status == "heuristic":
        status = budget.reason
    cols = [None if k is None else pool.columns[k] for k in best.choice]
    mp = assemble(minst, objective, cols, refs, equal_tput)
    extra = {"master_lp": master_lp, "master_value": best.value, "columns": len(pool.columns), "rounds": rounds,
             "plans_made": pool.plans_made, "column_solver": solver, "references_given": bool(references)}
    if not deterministic:  # a time: not in a deterministic run's document
        extra["references_s"] = round(ref_s, 3)
    return _finish(minst, mp, objective, sharing, refs, status, extra, t0, bound)


def _polish(minst, pool, best, objective, weights, budget, deterministic) -> None:
    """The incumbent's columns made better where it matters, lazily: each chosen column
    trimmed (its link and uplink shares lowered, :func:`trim`; on a clock budget at most
    what a tenth of the time left allows), and the binding jobs' chosen columns planned by
    the pricing planner re-planned exactly (at most :data:`EXACT_PER_ROUND` a round)."""
    chosen = [(j, pool.columns[k]) for j, k in enumerate(best.choice) if k is not None]
    for j, col in chosen:
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
    elif objective == "makespan":
        order = sorted(chosen, key=lambda jc: -jc[1].completion_s)
    else:
        order = sorted(chosen, key=lambda jc: jc[1].rho)
    done = 0
    for j, col in order:
        if done >= EXACT_PER_ROUND or budget.out(pool):
            return
        if col.fast:
            done += 1
            pool.make(j, col.gpus, col.link_share, col.uplink_share, source="exact", fast=False)


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
        for d, n in c.gpus.items():
            free_g[d] -= n
        for k, v in c.link_share.items():
            free_l[k] -= v
        for d, u in c.uplink_share.items():
            free_u[d] -= u
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
    # 0. the LP's mix: each job on the LP-weighted average of its columns' allocations (GPUs
    # floored); these slices fit together, as the LP's sums do
    if lp.x and any(0 < v < 1 - 1e-9 for v in lp.x.values()):
        for j in range(J):
            ks = [k for k in lp.x if cols[k].job == j]
            g, links, ups = {}, {}, {}
            for k in ks:
                v = lp.x[k]
                for d, n in cols[k].gpus.items():
                    g[d] = g.get(d, 0.0) + v * n
                for key, b in cols[k].link_share.items():
                    links[key] = links.get(key, 0.0) + v * b
                for d, u in cols[k].uplink_share.items():
                    ups[d] = ups.get(d, 0.0) + v * u
            g = {d: int(math.floor(n + 1e-9)) for d, n in g.items()}
            g = {d: n for d, n in g.items() if n}
            if g:
                make(j, g, links, {d: ups.get(d, 0.0) for d in g}, source="price:lp_mix")
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
