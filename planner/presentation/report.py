"""Human-readable summaries (rich tables) of plans and evaluations."""

from __future__ import annotations

from collections import Counter

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..problem.plan import claims_check


def _fmt_s(v: float) -> str:
    if v == float("inf"):
        return "inf"
    if v < 1e-3:
        return f"{v * 1e6:.3g} us"
    return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.4g} s"


def _unit_range(first: str, last: str) -> str:
    """'block0..block9' as 'block 0-9'; mixed ranges as 'embed .. block3' (spaces: a
    narrow column wraps between the names, not inside one)."""
    if first == last:
        return first
    a, b = first.rstrip("0123456789"), last.rstrip("0123456789")
    if a == b == "block":
        return f"blocks {first[5:]}-{last[5:]}"
    return f"{first} .. {last}"


def summary_rows(instance, plan, ev) -> list[tuple[str, str]]:
    """The head of the plan summary as (label, text) rows: instance, solver (and
    robust / schedule refinement), shape, iteration, throughput, cost, bound and,
    for an infeasible plan, ``("INFEASIBLE", the violations one a line)``.  The
    terminal summary (:func:`plan_summary`) and the HTML report print these."""
    rows = [("instance", f"{instance.name}  ({len(instance.domains)} domains, "
             f"{instance.total_gpus} x {instance.gpu.name}, model {instance.workload.model.name})")]
    rows += solver_rows(instance, plan)
    rows.append(("shape", f"{plan.replicas} replica(s) x {plan.num_stages} stage(s) x tp {plan.tp} = "
                 f"{plan.gpus_used} GPUs; micro-batch {plan.micro_batch_size} x "
                 f"{plan.num_micro_batches} per replica; schedule {plan.schedule_kind}"))
    rows.append(("iteration", f"{_fmt_s(ev.iteration_time_s)} simulated, {_fmt_s(ev.estimate_s)} estimated"))
    rows.append(("throughput", f"{ev.throughput_tokens_per_s:,.0f} tokens/s"))
    rows.append(("cost", f"{ev.cost_per_iteration:.4g} per iteration, "
                 f"{ev.wan_gb_per_iteration:.2f} GB over the WAN"))
    if ev.lower_bound_s:
        rows.append(("bound", f"{ev.bound_ratio:.2f} x the lower bound ({_fmt_s(ev.lower_bound_s)})"))
    if not ev.feasible:
        rows.append(("INFEASIBLE", "\n".join(v.message for v in ev.violations)))
    return rows


def shown_gap(objective, bound, gap):
    """The gap to print beside ``objective`` and ``bound``: ``(objective - bound) /
    objective`` when both are known (so the three printed figures agree, SPEC 7),
    else the recorded ``gap``."""
    if objective is not None and bound is not None and objective > 0:
        return (objective - bound) / objective
    return gap


def _claim(status: str, objective, bound, gap) -> str:
    """``status, objective X, bound Y, gap Z``: the gap is the one of the objective
    and bound beside it (all three of one network and statistic)."""
    parts = [status]
    for word, v in (("objective", objective), ("bound", bound)):
        if v is not None:
            parts.append(f"{word} {v:.4g}")
    gap = shown_gap(objective, bound, gap)
    if gap is not None:
        parts.append(f"gap {gap:.1%}")
    return ", ".join(parts)


def schedule_used(plan) -> str | None:
    """Which refinement step's schedule ``plan`` runs: ``"cpsat"``, ``"inflight"``
    or None (its own named schedule, or an explicit one from elsewhere)."""
    extra = (plan.solver.model_extra or {}) if plan.solver is not None else {}
    if plan.schedule_kind != "explicit":
        return None
    kept = extra.get("schedule_kept")
    return kept if kept in ("cpsat", "inflight") else None


def solver_rows(instance, plan) -> list[tuple[str, str]]:
    """The solver's claims as (label, text) rows: status, objective, bound, gap;
    robust planning's figures; the schedule refinement's.  Only while they hold
    (:func:`planner.problem.plan.claims_check`): otherwise one row with the
    solver's name and time and why no claim is shown."""
    info = plan.solver
    if info is None:
        return []
    why = claims_check(instance, plan)
    if why is not None:
        return [("solver", f"{info.name}, {info.time_s:.2f} s; solver claims not shown: {why[1]}")]
    rows = [("solver", f"{info.name}: {_claim(info.status, info.objective, info.bound, info.gap)}, "
             f"{info.time_s:.2f} s")]
    extra = info.model_extra or {}
    if extra.get("robust_objective") is not None:
        rows.append(("robust", f"on {extra.get('robust_network', 'the statistic network')}: "
                     + _claim(extra.get("robust_status", "feasible"), extra["robust_objective"],
                              extra.get("robust_bound"), extra.get("robust_gap"))))
    if extra.get("robust_measure"):
        rows.append(("robust", f"{extra['robust_measure']}; the other figures are for the base network"))
    if "named_status" in extra:
        named = "" if extra.get("named_bound") is None else f", bound {extra['named_bound']:.4g}"
        rows.append(("search", f"{extra['named_status']}{named} over plans with a named schedule "
                     f"({', '.join(instance.options.schedules)}); the refined schedule is outside that "
                     f"space, so the bound above is the instance's"))
    used = schedule_used(plan)
    cpsat = extra.get("schedule_makespan_s") is not None
    not_kept = (f"CP-SAT's schedule ({extra.get('schedule_status')}) not kept: "
                f"{extra.get('schedule_not_kept') or 'it simulates no faster'}")
    if used == "inflight":
        rows.append(("schedule", f"1f1b with in-flight limits {extra.get('inflight')} per stage"
                     + (f"; {not_kept}" if cpsat else "") + f", {extra.get('schedule_time_s', 0.0):.2f} s"))
    elif extra.get("schedule_status") == "too large":
        rows.append(("schedule", "not refined: the CP-SAT schedule model would be too large"))
    elif used == "cpsat" and cpsat:
        span, low = extra["schedule_makespan_s"], extra.get("schedule_bound_s")
        gap = shown_gap(span, low, extra.get("schedule_gap"))
        rows.append(("schedule", f"CP-SAT {extra['schedule_status']}, makespan {_fmt_s(span)}"
                     + ("" if low is None else f" (bound {_fmt_s(low)}")
                     + ("" if gap is None else f", gap {gap:.1%}") + ("" if low is None else ")")
                     + f", {extra['schedule_time_s']:.2f} s"))
    elif cpsat:
        rows.append(("schedule", f"{not_kept}; the plan keeps its {plan.schedule_kind} schedule, "
                     f"{extra.get('schedule_time_s', 0.0):.2f} s"))
    return rows


def claims_json(instance, plan) -> dict:
    """The solver claims for ``planner evaluate --json``: ``solver_claims`` is
    ``"shown"`` (and ``solver`` holds name, status, objective, bound, gap and
    time), or ``"stale"`` (the instance changed since the plan was made),
    ``"edited"`` (the plan's fields are not as the solver wrote them) or
    ``"absent"`` (no solver block, or no instance hash), with
    ``solver_claims_reason`` saying why none is shown."""
    why = claims_check(instance, plan)
    if why is not None:
        return {"solver_claims": why[0], "solver_claims_reason": why[1]}
    info = plan.solver
    return {"solver_claims": "shown", "solver_claims_reason": None,
            "solver": {"name": info.name, "status": info.status, "objective": info.objective,
                       "bound": info.bound, "gap": info.gap, "time_s": info.time_s}}


STAGE_COLUMNS = ("stage", "units", "layers", "compute/mb", "mem/GPU", "grad sync", "domains")


def stage_table(instance, plan, ev) -> list[tuple[str, ...]]:
    """One row per stage, the columns of :data:`STAGE_COLUMNS` as text."""
    units = instance.units
    rows = []
    for j, st in enumerate(plan.stages):
        names = _unit_range(units[st.start].name, units[st.end - 1].name)
        doms = Counter(row[j] for row in plan.placement)
        shown = ", ".join(f"{d} x{n}" if n > 1 else d for d, n in doms.items())
        rows.append((str(j), f"{st.start}-{st.end - 1}", names, _fmt_s(ev.compute_s[j]),
                     f"{ev.memory_gb_per_gpu[j]:.1f}/{ev.memory_limit_gb:.0f} GB",
                     _fmt_s(ev.allreduce_s[j]), shown))
    return rows


def gpu_table(instance, ev) -> list[tuple[str, int, int]]:
    """(domain, GPUs the plan uses there, GPUs available) for every domain it uses."""
    return [(d.name, ev.gpus_used[d.name], d.gpus) for d in instance.domains if d.name in ev.gpus_used]


def plan_summary(instance, plan, ev) -> Group:
    """Stages with their layers and domains, replicas, tp, micro-batch,
    iteration time, throughput, cost, distance to the bound."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for label, text in summary_rows(instance, plan, ev):
        head.add_row(Text(label, style="bold red") if label == "INFEASIBLE" else label, text)

    stages = Table(title="stages", title_justify="left")
    # short headers, and names wrapped, never cut: the table fits 80 columns (documented in docs/guide.md)
    longest = max(len(d) for d in instance.domain_names)
    for col in STAGE_COLUMNS:
        stages.add_column(col, justify="right" if col in ("stage", "compute/mb", "mem/GPU", "grad sync") else "left",
                          overflow="fold", min_width=longest if col == "domains" else None)
    for row in stage_table(instance, plan, ev):
        stages.add_row(*row)
    use = Table(title="GPUs per domain", title_justify="left")
    use.add_column("domain", overflow="fold")
    use.add_column("used", justify="right")
    use.add_column("available", justify="right")
    for name, used, avail in gpu_table(instance, ev):
        use.add_row(name, str(used), str(avail))
    return Group(head, stages, use)
