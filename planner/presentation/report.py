"""Human-readable summaries (rich tables) of plans and evaluations."""

from __future__ import annotations

from collections import Counter

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .display import estimate_text, status_text


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
    info = plan.solver
    if info is not None:
        gap = "" if info.gap is None else f", gap {info.gap:.1%}"
        bound = "" if info.bound is None else f", bound {info.bound:.4g}"
        rows.append(("solver", f"{info.name}: {status_text(info.status, info.requested_gap)}{bound}{gap}, "
                               f"{info.time_s:.2f} s"))
        extra = info.model_extra or {}
        if extra.get("robust_measure"):
            rows.append(("robust", f"{extra['robust_measure']}; the other figures are for the base network"))
        if estimate_text(info):
            rows.append(("search", f"{estimate_text(info)}; the bound above holds for every plan, "
                                   f"explicit schedules included"))
        if extra.get("inflight"):
            rows.append(("schedule", f"1f1b with in-flight limits {extra['inflight']} per stage, "
                         f"{extra['schedule_time_s']:.2f} s"))
        elif extra.get("schedule_status") == "too large":
            rows.append(("schedule", "not refined: the CP-SAT schedule model would be too large"))
        elif extra.get("schedule_makespan_s") is not None:
            kept = "" if extra.get("schedule_kept", "cpsat") == "cpsat" else "; not kept, no faster"
            rows.append(("schedule", f"CP-SAT {extra['schedule_status']}, makespan "
                         f"{_fmt_s(extra['schedule_makespan_s'])} (bound {_fmt_s(extra['schedule_bound_s'])}, "
                         f"gap {extra['schedule_gap']:.1%}){kept}, {extra['schedule_time_s']:.2f} s"))
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
