"""Human-readable summaries (rich tables) of plans and evaluations."""

from __future__ import annotations

from collections import Counter

from rich.console import Group
from rich.table import Table
from rich.text import Text


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


def plan_summary(instance, plan, ev) -> Group:
    """Stages with their layers and domains, replicas, tp, micro-batch,
    iteration time, throughput, cost, distance to the bound."""
    units = instance.units
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    info = plan.solver
    head.add_row("instance", f"{instance.name}  ({len(instance.domains)} domains, "
                 f"{instance.total_gpus} x {instance.gpu.name}, model {instance.workload.model.name})")
    if info is not None:
        gap = "" if info.gap is None else f", gap {info.gap:.1%}"
        bound = "" if info.bound is None else f", bound {info.bound:.4g}"
        head.add_row("solver", f"{info.name}: {info.status}{bound}{gap}, {info.time_s:.2f} s")
        extra = info.model_extra or {}
        if extra.get("robust_measure"):
            head.add_row("robust", f"{extra['robust_measure']}; the other figures are for the base network")
        if "named_status" in extra:
            named = "" if extra.get("named_bound") is None else f", bound {extra['named_bound']:.4g}"
            head.add_row("search", f"{extra['named_status']}{named} over plans with a named schedule "
                         f"({', '.join(instance.options.schedules)}); the refined schedule is outside that "
                         f"space, so the bound above is the instance's")
        if extra.get("inflight"):
            head.add_row("schedule", f"1f1b with in-flight limits {extra['inflight']} per stage, "
                         f"{extra['schedule_time_s']:.2f} s")
        elif extra.get("schedule_status") == "too large":
            head.add_row("schedule", "not refined: the CP-SAT schedule model would be too large")
        elif extra.get("schedule_makespan_s") is not None:
            head.add_row("schedule", f"CP-SAT {extra['schedule_status']}, makespan "
                         f"{_fmt_s(extra['schedule_makespan_s'])} (bound {_fmt_s(extra['schedule_bound_s'])}, "
                         f"gap {extra['schedule_gap']:.1%}), {extra['schedule_time_s']:.2f} s")
    head.add_row("shape", f"{plan.replicas} replica(s) x {plan.num_stages} stage(s) x tp {plan.tp} = "
                 f"{plan.gpus_used} GPUs; micro-batch {plan.micro_batch_size} x "
                 f"{plan.num_micro_batches} per replica; schedule {plan.schedule_kind}")
    head.add_row("iteration", f"{_fmt_s(ev.iteration_time_s)} simulated, {_fmt_s(ev.estimate_s)} estimated")
    head.add_row("throughput", f"{ev.throughput_tokens_per_s:,.0f} tokens/s")
    head.add_row("cost", f"{ev.cost_per_iteration:.4g} per iteration, "
                 f"{ev.wan_gb_per_iteration:.2f} GB over the WAN")
    if ev.lower_bound_s:
        head.add_row("bound", f"{ev.bound_ratio:.2f} x the lower bound ({_fmt_s(ev.lower_bound_s)})")
    if not ev.feasible:
        head.add_row(Text("INFEASIBLE", style="bold red"),
                     "\n".join(v.message for v in ev.violations))

    stages = Table(title="stages", title_justify="left")
    # short headers, and names wrapped, never cut: the table fits 80 columns (documented in docs/guide.md)
    longest = max(len(d) for d in instance.domain_names)
    for col in ("stage", "units", "layers", "compute/mb", "mem/GPU", "grad sync", "domains"):
        stages.add_column(col, justify="right" if col in ("stage", "compute/mb", "mem/GPU", "grad sync") else "left",
                          overflow="fold", min_width=longest if col == "domains" else None)
    for j, st in enumerate(plan.stages):
        names = _unit_range(units[st.start].name, units[st.end - 1].name)
        doms = Counter(row[j] for row in plan.placement)
        shown = ", ".join(f"{d} x{n}" if n > 1 else d for d, n in doms.items())
        stages.add_row(str(j), f"{st.start}-{st.end - 1}", names, _fmt_s(ev.compute_s[j]),
                       f"{ev.memory_gb_per_gpu[j]:.1f}/{ev.memory_limit_gb:.0f} GB",
                       _fmt_s(ev.allreduce_s[j]), shown)
    use = Table(title="GPUs per domain", title_justify="left")
    use.add_column("domain", overflow="fold")
    use.add_column("used", justify="right")
    use.add_column("available", justify="right")
    for d in instance.domains:
        if d.name in ev.gpus_used:
            use.add_row(d.name, str(ev.gpus_used[d.name]), str(d.gpus))
    return Group(head, stages, use)
