"""Score a multi-plan: several jobs sharing the datacenters (SPEC v3 section 10).

``multievaluate(minst, mplan, sharing)`` scores every admitted job's plan and
returns per-job figures, the feasibility of the whole, the objective and the gap
to the multi-plan's bound.

- **reserved** (default, exact): job j's plan is evaluated by
  :func:`planner.scoring.evaluator.evaluate` on its slice
  (:meth:`planner.problem.jobs.MultiInstance.slice_instance`); jobs do not
  interact, so this is J single-job evaluations, bit for bit.
- **shared**: every job sees the whole instance's routes and capacities (its
  slice with g GPUs and every link and uplink at share 1), and for every
  resource q, n(q) is the sum of each job's own n(q) and the gradient-sync users
  of q are those of all jobs together
  (:class:`planner.scoring.figures.Background`).  Outer rings (diloco,
  streaming) share with the other jobs' outer rings, per-step and inner rings
  with the other jobs' per-step and inner rings, as they do within one job.

Per job (SPEC 10, seconds and effective tokens per second): T_in
(``iteration_time_s``), T_eff (``effective_time_s``), ``throughput_tokens_per_s``
= global_batch_size * seq_len * e / T_eff, ``rho`` = tput / max(tput*, tput),
``rho_share`` = tput / equal-share throughput (None without one), completion
``iterations * T_eff``, ``deadline_met``, ``cost`` = iterations * (T_eff / 3600 *
the price of every *allocated* GPU + WAN GB * wan_price_per_gb).

Example
-------
>>> ev = multievaluate(minst, mplan)                       # doctest: +SKIP
>>> ev.objective, round(ev.objective_value, 3), ev.feasible  # doctest: +SKIP
('maxmin', 0.612, True)
>>> ev.to_dict()["jobs"][0]["rho"]                         # doctest: +SKIP
0.71
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..problem.errors import InputError
from ..problem.jobs import OBJECTIVES, MultiInstance, link_key
from ..problem.multiplan import MultiPlan
from ..problem.space import PlanSpace
from ..problem.specversion import check_spec
from .bounds import cost_lower_bound, lower_bound, sync_classes
from .evaluator import Evaluation, Evaluator, evaluate
from .figures import Background

SHARINGS = ("reserved", "shared")
MAXIMISE = {"maxmin": True, "weighted": True, "deadline": True, "cost": False, "makespan": False}
"""Whether each objective is maximised (rho-based ones) or minimised (cost, makespan)."""
TOL = 1e-9  # sums of shares and GPU counts: a capacity is exceeded beyond this relative slack


@dataclass
class JobFigures:
    """One job's figures in a multi-plan (SPEC 10); None where the job is not admitted
    (``rho`` 0, ``deadline_met`` False).  Seconds, effective tokens per second, the
    instance's currency."""

    name: str
    admitted: bool
    iteration_time_s: float | None
    effective_time_s: float | None
    throughput_tokens_per_s: float | None
    rho: float
    rho_share: float | None
    completion_s: float | None
    deadline_met: bool
    cost: float | None
    feasible: bool
    evaluation: Evaluation | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "admitted", "iteration_time_s", "effective_time_s",
                                              "throughput_tokens_per_s", "rho", "rho_share", "completion_s",
                                              "deadline_met", "cost", "feasible")}


@dataclass
class MultiEvaluation:
    """The figures of a multi-plan (SPEC 10): ``objective_value`` is the objective's first
    term, ``tiebreak`` its second (0 where SPEC gives none); ``bound`` the multi-plan's
    solver bound (None when none) and ``gap`` from it; ``violations`` name the job, the
    domain or the link."""

    jobs: list[JobFigures]
    objective: str
    objective_value: float
    tiebreak: float
    bound: float | None
    gap: float | None
    master_lp: float | None
    feasible: bool
    violations: list[str]
    sharing: str

    def to_dict(self) -> dict:
        """SPEC 9's ``multievaluate --json`` document (plus ``feasible``, ``violations``,
        ``sharing`` and ``objective_tiebreak``)."""
        return {"jobs": [j.to_dict() for j in self.jobs], "objective": self.objective,
                "objective_value": self.objective_value, "objective_tiebreak": self.tiebreak,
                "bound": self.bound, "gap": self.gap, "master_lp": self.master_lp,
                "feasible": self.feasible, "violations": list(self.violations), "sharing": self.sharing}


# -- the objectives ----------------------------------------------------------------------
def objective_value(objective: str, figures: list[JobFigures], minst: MultiInstance) -> tuple[float, float]:
    """``(value, tie-break)`` of ``objective`` (SPEC 10) over the jobs' ``figures``:

    - ``maxmin``: ``(min_j rho_j / w_j, sum_j w_j rho_j)``, maximised;
    - ``weighted``: ``(sum_j w_j rho_j, 0)``, maximised;
    - ``deadline``: ``(sum of w_j over jobs meeting their deadline, sum_j w_j rho_j)``, maximised;
    - ``cost``: ``(sum_j cost_j, 0)`` over admitted jobs, minimised; inf when a job misses its
      deadline (the objective asks every job to meet it);
    - ``makespan``: ``(max_j C_j, 0)`` over admitted jobs, minimised.

    Compare two values with :func:`better`.

    >>> objective_value("maxmin", figs, minst)      # doctest: +SKIP
    (0.5, 2.5)
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective is one of {', '.join(OBJECTIVES)}, not {objective!r}")
    w = {job.name: job.weight for job in minst.jobs}
    weighted = float(sum(w[f.name] * f.rho for f in figures))
    if objective == "maxmin":
        return float(min(f.rho / w[f.name] for f in figures)), weighted
    if objective == "weighted":
        return weighted, 0.0
    if objective == "deadline":
        return float(sum(w[f.name] for f in figures if f.deadline_met)), weighted
    admitted = [f for f in figures if f.admitted]
    if objective == "cost":
        if any(not f.deadline_met for f in admitted):
            return math.inf, 0.0
        return float(sum(f.cost for f in admitted)), 0.0
    return float(max((f.completion_s for f in admitted), default=0.0)), 0.0


def better(objective: str, a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether ``a`` is strictly better than ``b`` (values of :func:`objective_value`)."""
    if MAXIMISE[objective]:
        return a > b
    return a < b


def gap_of(value: float | None, bound: float | None) -> float | None:
    """SPEC 10: ``|value - bound| / max(|value|, |bound|)``; 0 when both are 0; None without a
    bound or with a value or bound that is not finite."""
    if value is None or bound is None or not (math.isfinite(value) and math.isfinite(bound)):
        return None
    den = max(abs(value), abs(bound))
    return 0.0 if den == 0 else abs(value - bound) / den


# -- bounds ------------------------------------------------------------------------------
def multi_bound(minst: MultiInstance, objective: str, references: dict[str, float] | None = None,
                spec: int | None = None) -> float | None:
    """A bound on ``objective`` over every feasible multi-plan of ``minst`` (SPEC 10), both
    sharings; an upper bound for maxmin, weighted and deadline, a lower bound for cost
    and makespan.  ``references``: tput*_j per job name (needed by maxmin and weighted;
    None when a job has none).  With lb_j = :func:`~planner.scoring.bounds.lower_bound`
    of job j alone on the whole cluster (a bound on T_in <= T_eff that holds on every
    slice: none of its parts depends on the routes, and a slice has no more GPUs or
    bandwidth) and e*_j the largest quality factor job j may use:

    - per job, ``rho_j <= r_j = min(1, T*_j / lb_j)``, ``T*_j = global_batch_size_j * seq_len_j
      * e*_j / tput*_j``;
    - ``maxmin``: ``min(min_j r_j / w_j, C / sum_j w_j F_j tput*_j)`` (the fluid compute
      bound: C = sum_d gpus_d * peak_d * mfu_d FLOP/s, F_j = (1 + beta) forward FLOPs per
      token / e*_j);
    - ``weighted``: ``sum_j w_j r_j``;
    - ``deadline``: the sum of w_j over the jobs with ``iterations_j * lb_j <= 3600 *
      deadline_hours_j`` (or no deadline);
    - ``cost``: ``sum_j iterations_j *`` :func:`~planner.scoring.bounds.cost_lower_bound` of
      job j alone (every FLOP at the cheapest GPU-second; allocated GPUs cost at least the
      used ones);
    - ``makespan``: ``max(max_j iterations_j * lb_j, sum_j iterations_j * W_j / C)`` (W_j the
      FLOPs of one iteration: every job's work done by the makespan on every GPU).

    >>> multi_bound(minst, "maxmin", {"small": 2.1e5, "wide": 1.9e5})   # doctest: +SKIP
    1.0
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective is one of {', '.join(OBJECTIVES)}, not {objective!r}")
    spec = check_spec(spec)
    parts = []
    for i, job in enumerate(minst.jobs):
        ji = minst.job_instance(i)
        space = PlanSpace(ji)
        lb = lower_bound(ji, spec=spec).value
        e = max(e for _, e in sync_classes(ji))  # the largest e any plan of the job may carry
        flops = (1 + space.bwd) * space.flops_total  # per token, forward and backward
        parts.append((job, ji, lb, e, flops))
    ref = references or {}
    capacity = _flops_capacity(minst)
    if objective in ("maxmin", "weighted"):
        if any(job.name not in ref or not ref[job.name] for job, *_ in parts):
            return None
        r = {job.name: min(1.0, job.global_batch_size * job.seq_len * e / ref[job.name] / lb) if lb > 0 else 1.0
             for job, _, lb, e, _ in parts}
        if objective == "weighted":
            return float(sum(job.weight * r[job.name] for job, *_ in parts))
        per_job = min(r[job.name] / job.weight for job, *_ in parts)
        fluid = capacity / sum(job.weight * flops / e * ref[job.name] for job, _, _, e, flops in parts)
        return float(min(per_job, fluid))
    if objective == "deadline":
        return float(sum(job.weight for job, _, lb, _, _ in parts
                         if job.deadline_hours is None or job.iterations * lb <= 3600.0 * job.deadline_hours))
    if objective == "cost":
        return float(sum(job.iterations * cost_lower_bound(ji, spec) for job, ji, *_ in parts))
    work = sum(job.iterations * job.global_batch_size * job.seq_len * flops for job, _, _, _, flops in parts)
    return float(max(max(job.iterations * lb for job, _, lb, _, _ in parts), work / capacity))


def _flops_capacity(minst: MultiInstance) -> float:
    """sum_d gpus_d * peak_d * mfu_d, FLOP/s, over every domain of the cluster."""
    ji = minst.job_instance(0)
    return float(sum(d.gpus * ji.domain_gpu(d.name).flops_per_s for d in minst.domains))


# -- one job on one slice -------------------------------------------------------------------
def job_time(minst: MultiInstance, j: int | str, gpus: dict[str, int], link_share: dict[str, float],
             uplink_share: dict[str, float] | None, plan, spec: int | None = None) -> tuple[float, Evaluation]:
    """One column's score: ``plan`` of job ``j`` on the slice ``(gpus, link_share,
    uplink_share)`` (reserved sharing): ``(T_eff / e seconds, the Evaluation)``.

    >>> t, ev = job_time(minst, "small", *equal_slice(minst, 0), plan)   # doctest: +SKIP
    """
    inst = minst.slice_instance(j, gpus, link_share, uplink_share)
    ev = evaluate(inst, plan, spec=spec)
    return ev.objective_s, ev


# -- the multi-plan --------------------------------------------------------------------------
def multievaluate(minst: MultiInstance, mplan: MultiPlan, sharing: str = "reserved",
                  spec: int | None = None) -> MultiEvaluation:
    """Score ``mplan`` on ``minst`` (SPEC 10) under ``sharing`` (``"reserved"`` or
    ``"shared"``); see the module docstring.  ``InputError`` when the multi-plan does
    not fit the instance (unknown job, domain, link; an admitted job without a plan)."""
    if sharing not in SHARINGS:
        raise InputError(f"sharing is one of {', '.join(SHARINGS)}, not {sharing!r}", "--sharing")
    spec = check_spec(spec)
    if sharing == "shared" and spec < 3:
        raise InputError("shared sharing is a SPEC v3 model (section 10); spec=2 was asked for", "--sharing")
    mplan.check_against(minst)
    objective = mplan.objective or minst.options.multi_objective
    alloc = {job.name: mplan.allocation(minst, job.name) for job in minst.jobs}
    violations = _allocation_violations(minst, mplan, alloc, objective)
    evals: dict[str, Evaluation] = {}
    admitted = [job.name for job in minst.jobs if mplan.job(job.name).admitted]
    unroutable: dict[str, list[tuple[str, str]]] = {}
    if sharing == "reserved":
        for name in admitted:
            gpus, links, ups = alloc[name]
            inst = minst.slice_instance(name, gpus, links, ups)
            missing = _unroutable(inst, mplan.job(name).plan, spec)
            if missing:  # a link of share 0 on a route the plan needs: the slice cannot score it
                unroutable[name] = missing
                continue
            evals[name] = evaluate(inst, mplan.job(name).plan, spec=spec)
    else:
        evals = _shared(minst, mplan, alloc, admitted, spec)
    figures = []
    for job in minst.jobs:
        a = mplan.job(job.name)
        ev = evals.get(job.name)
        if job.name in unroutable:
            pairs = ", ".join(f"{u}-{v}" for u, v in unroutable[job.name])
            violations.append((job.name, f"job {job.name}: no route between {pairs} on its slice (the links of "
                                         "share 0 are removed; its plan needs these pairs)"))
            figures.append(JobFigures(job.name, True, math.inf, math.inf, 0.0, 0.0,
                                      None if a.equal_share_throughput_tokens_per_s is None else 0.0,
                                      math.inf, False, math.inf, False))
            continue
        fig = _figures(minst, job, a, alloc[job.name][0], ev)
        if ev is not None:
            for v in ev.violations:
                violations.append((job.name, f"job {job.name}: {v.message} (on its slice)"))
            if not math.isfinite(ev.effective_time_s):
                violations.append((job.name, f"job {job.name}: its plan never ends on its "
                                             + ("slice (a route or uplink it uses has share 0)"
                                                if sharing == "reserved" else "share of the instance")))
        if objective == "cost" and a.admitted and not fig.deadline_met:
            violations.append((job.name, f"job {job.name}: completes after {fig.completion_s / 3600:.6g} h, "
                                         f"past its deadline of {job.deadline_hours:g} h (the cost objective "
                                         "asks every job to meet its deadline)"))
        figures.append(fig)
    bad = {name for name, _ in violations}
    for f in figures:
        f.feasible = f.feasible and f.name not in bad
    value, tie = objective_value(objective, figures, minst)
    info = mplan.solver
    bound = None if info is None else info.bound
    master = None if info is None else (info.model_extra or {}).get("master_lp")
    return MultiEvaluation(jobs=figures, objective=objective, objective_value=value, tiebreak=tie, bound=bound,
                           gap=gap_of(value, bound), master_lp=master, feasible=not violations,
                           violations=[m for _, m in violations], sharing=sharing)


def _figures(minst: MultiInstance, job, a, gpus: dict[str, int], ev: Evaluation | None) -> JobFigures:
    """SPEC 10's figures of one job from its evaluation (None: not admitted)."""
    if ev is None:
        return JobFigures(job.name, False, None, None, None, 0.0, None, None, False, None, True)
    T = ev.effective_time_s
    finite = math.isfinite(T) and T > 0
    tput = ev.effective_tokens_per_s if finite else 0.0
    rho = tput / max(a.reference_throughput_tokens_per_s, tput)
    share = a.equal_share_throughput_tokens_per_s
    completion = job.iterations * T
    met = job.deadline_hours is None or completion <= 3600.0 * job.deadline_hours
    price = sum(g * minst.domains[k].price_per_gpu_hour for k, g in enumerate(gpus[d] for d in minst.domain_names))
    per_iter = (T / 3600.0 * price + ev.wan_gb_per_iteration * minst.options.wan_price_per_gb) if finite else math.inf
    return JobFigures(job.name, True, ev.iteration_time_s, T, tput, rho,
                      None if share is None else tput / share, completion, bool(met),
                      job.iterations * per_iter, ev.feasible and finite, ev)


def _unroutable(inst, plan, spec: int) -> list[tuple[str, str]]:
    """The pairs of distinct domains ``plan`` needs a route between on ``inst`` (pipeline
    neighbours, and the hops of each stage's gradient ring over its domains in instance
    order) that have none: a slice whose links of share 0 split its WAN."""
    routes = inst.routes_for(spec)
    need: list[tuple[str, str]] = []
    for row in plan.placement:
        need += [(u, v) for u, v in zip(row, row[1:]) if u != v]
    if plan.replicas > 1:
        order = inst.domain_index
        for j in range(plan.num_stages):
            ring = sorted({row[j] for row in plan.placement}, key=order.__getitem__)
            if len(ring) > 1:
                need += list(zip(ring, ring[1:] + ring[:1]))
    out = []
    for pair in need:
        if pair not in routes and pair not in out:
            out.append(pair)
    return out


def _allocation_violations(minst: MultiInstance, mplan: MultiPlan, alloc: dict, objective: str
                           ) -> list[tuple[str | None, str]]:
    """The multi-plan's broken allocation rules (SPEC 10), each ``(job or None, message)``:
    capacities of domains, links and uplinks; allowed domains; max_gpus; admission."""
    out: list[tuple[str | None, str]] = []
    names = [job.name for job in minst.jobs]
    for d in minst.domains:
        per = {n: alloc[n][0][d.name] for n in names if alloc[n][0][d.name]}
        if sum(per.values()) > d.gpus:
            out.append((None, f"domain {d.name}: the jobs are allocated {sum(per.values())} GPUs ("
                              + ", ".join(f"{n} {g}" for n, g in per.items()) + f"), {d.gpus} available"))
        ups = {n: alloc[n][2][d.name] for n in names if alloc[n][2][d.name]}
        if sum(ups.values()) > 1 + TOL:
            out.append((None, f"domain {d.name}: uplink shares sum to {sum(ups.values()):.6g} > 1 ("
                              + ", ".join(f"{n} {u:.6g}" for n, u in ups.items()) + ")"))
    for link in minst.links:
        k = link_key(link)
        per = {n: alloc[n][1][k] for n in names if alloc[n][1][k]}
        if sum(per.values()) > 1 + TOL:
            out.append((None, f"link {k}: shares sum to {sum(per.values()):.6g} > 1 ("
                              + ", ".join(f"{n} {b:.6g}" for n, b in per.items()) + ")"))
    for job in minst.jobs:
        a = mplan.job(job.name)
        if not a.admitted:
            if objective != "deadline":
                out.append((job.name, f"job {job.name}: not admitted; only the deadline objective may leave "
                                      f"jobs out (objective {objective})"))
            continue
        gpus = alloc[job.name][0]
        allowed = set(minst.allowed(job.name))
        for d, g in gpus.items():
            if g and d not in allowed:
                out.append((job.name, f"job {job.name}: {g} GPUs in domain {d}, not among its allowed_domains ("
                                      + ", ".join(minst.allowed(job.name)) + ")"))
        total = sum(gpus.values())
        if job.max_gpus is not None and total > job.max_gpus:
            out.append((job.name, f"job {job.name}: {total} GPUs allocated, max_gpus = {job.max_gpus}"))
        if total < 1:
            out.append((job.name, f"job {job.name}: admitted with no GPU"))
    return out


def _shared(minst: MultiInstance, mplan: MultiPlan, alloc: dict, admitted: list[str], spec: int
            ) -> dict[str, Evaluation]:
    """Shared sharing: every admitted job on the whole instance's links and uplinks with its
    g GPUs, the other jobs' channel counts and sync users as background."""
    insts, alone = {}, {}
    for name in admitted:
        gpus = alloc[name][0]
        full_links = {link_key(l): 1.0 for l in minst.links}
        insts[name] = minst.slice_instance(name, gpus, full_links, {d: 1.0 for d in minst.domain_names})
        alone[name] = Evaluator(insts[name], mplan.job(name).plan, spec=spec).fig
    out = {}
    for name in admitted:
        others = [alone[n] for n in admitted if n != name]
        ev = Evaluator(insts[name], mplan.job(name).plan, spec=spec, background=_background(others))
        out[name] = ev.evaluate(lower_bound_s=lower_bound(insts[name], spec=spec).value)
    return out


def _background(figs) -> Background | None:
    """The users of the other jobs' figures ``figs`` (each a PlanFigures on the same links and
    uplinks): their channel counts summed, their sync users listed."""
    if not figs:
        return None
    channels = np.sum([f.channel_users() for f in figs], axis=0)
    rings = [f.sync_users() for f in figs]
    cat = lambda parts: (np.concatenate([p[0] for p in parts]).astype(np.int64),  # noqa: E731
                         np.concatenate([p[1] for p in parts]).astype(float))
    return Background(channels=channels, ring=cat([r[0] for r in rings]), outer=cat([r[1] for r in rings]))
