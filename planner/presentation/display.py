"""Text and HTML views of instances and plans (for terminals and notebooks),
and tabular views (pandas DataFrames when pandas is installed, else lists
of dicts)."""

from __future__ import annotations

import html

from ..problem.plan import claims_check
from ..problem.views import register


def replica_list(rs, most: int = 6) -> str:
    """Replica indices as text, the first ``most`` then how many in all.

    >>> replica_list([0, 2, 5]), replica_list(range(4, 32))
    ('0, 2, 5', '4, 5, 6, 7, 8, 9, ... (28 in all)')
    """
    rs = [int(r) for r in rs]
    text = ", ".join(map(str, rs[:most]))
    return text + (f", ... ({len(rs)} in all)" if len(rs) > most else "")


def _table(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r[c]))}</td>" for c in cols) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


def frame(rows: list[dict]):
    """A pandas DataFrame of ``rows`` if pandas is importable, else the rows."""
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows)


# -- instances ---------------------------------------------------------------
def instance_text(inst) -> str:
    wl = inst.workload
    types = "; ".join(f"{inst.gpu_types[u].name}: {inst.gpu_types[u].peak_tflops:g} TFLOP/s, "
                      f"{inst.gpu_types[u].memory_gb:g} GB, mfu {inst.gpu_types[u].mfu:g}" for u in inst.types_used)
    lines = [f"Instance {inst.name}: {len(inst.domains)} domains, {inst.gpu_counts} ({types}), "
             f"{len(inst.links)} WAN links",
             f"  model {wl.model.name} ({wl.model.total_params() / 1e9:.2f}B parameters, {inst.num_units} units), "
             f"batch {wl.global_batch_size} x {wl.seq_len} tokens, objective {inst.options.objective}"]
    typed = inst.heterogeneous  # GPU types: each domain's type (one type: as before)
    for d in inst.domains:
        lines.append(f"  {d.name:<16} {d.gpus:>6} " + (f"x {inst.domain_gpu(d.name).name}" if typed else "GPUs")
                     + f"  {d.intra_bandwidth_gbps:g} Gbit/s inside  {d.price_per_gpu_hour:g}/GPU-h")
    return "\n".join(lines)


def instance_html(inst) -> str:
    head = html.escape(instance_text(inst).splitlines()[0])
    sub = html.escape(instance_text(inst).splitlines()[1].strip())
    doms = [{"domain": d.name, "GPUs": d.gpus,
             **({"GPU type": inst.domain_gpu(d.name).name} if inst.heterogeneous else {}),
             "per node": d.gpus_per_node,
             "inside Gbit/s": d.intra_bandwidth_gbps, "price/GPU-h": d.price_per_gpu_hour,
             "region": d.region} for d in inst.domains]
    links = [{"link": f"{l.a} - {l.b}", "Gbit/s": l.bandwidth_gbps, "latency ms": l.latency_ms}
             for l in inst.links]
    more = ""
    if len(links) > 12:
        more = f"<p>... and {len(links) - 12} more links</p>"
    return (f"<div><b>{head}</b><br>{sub}{_table(doms)}"
            f"<details><summary>WAN links</summary>{_table(links[:12])}{more}</details></div>")


# -- plans -----------------------------------------------------------------------
def status_text(status: str | None, requested_gap: float | None = None) -> str:
    """A status as shown: ``within_gap`` names the tolerance asked for.

    >>> status_text("within_gap", 0.9), status_text("optimal")
    ('within gap 0.9', 'optimal')
    """
    if status == "within_gap":
        return "within gap" + ("" if requested_gap is None else f" {requested_gap:g}")
    return str(status)


def estimate_text(info) -> str | None:
    """The search's own claim, naming the plans it covers: "optimal among
    1f1b/gpipe plans, by T_est, bound 0.0513" (None without one)."""
    if info is None or info.estimate_status is None:
        return None
    bound = "" if info.estimate_bound is None else f", bound {info.estimate_bound:.4g}"
    gap = "" if info.estimate_gap is None else f", gap {info.estimate_gap:.1%}"
    return (f"{status_text(info.estimate_status, info.requested_gap)} among "
            f"{info.estimate_family or 'plans with a named schedule'}{bound}{gap}")


def plan_text(plan) -> str:
    lines = [f"Plan for {plan.instance or '?'}: {plan.replicas} replica(s) x {plan.num_stages} stage(s) "
             f"x tp {plan.tp} = {plan.gpus_used} GPUs, micro-batch {plan.micro_batch_size} x "
             f"{plan.num_micro_batches}, {plan.schedule_kind}"]
    if plan.predicted is not None:
        p = plan.predicted
        lines.append(f"  iteration {p.iteration_time_s:.4g} s (estimate {p.estimate_s:.4g} s), "
                     f"{p.throughput_tokens_per_s:,.0f} tokens/s, cost {p.cost_per_iteration:.4g}")
    sync = plan.dp_sync
    if sync is not None and not sync.plain:  # SPEC 11 (a plain sync: as before)
        lines.append(f"  dp sync: {sync.label()}")
    if plan.solver is not None:  # no instance here: the claims are shown unless the plan was edited
        s = plan.solver
        why = claims_check(None, plan)
        if why is not None:
            lines.append(f"  solver {s.name}, {s.time_s:.2f} s; solver claims not shown: {why[1]}")
        else:
            obj = "" if s.objective is None else f", objective {s.objective:.4g}"
            bound = "" if s.bound is None else f", bound {s.bound:.4g}"
            g = (s.objective - s.bound) / s.objective if s.objective and s.bound is not None else s.gap
            gap = "" if g is None else f", gap {g:.2%}"  # the gap of the objective and bound shown
            lines.append(f"  solver {s.name}: {status_text(s.status, s.requested_gap)}{obj}{bound}{gap}, "
                         f"{s.time_s:.2f} s (for instance sha256 {s.instance_sha256[:12]})")
            if estimate_text(s):
                lines.append(f"  search: {estimate_text(s)}")
    for j, st in enumerate(plan.stages):
        doms = sorted({row[j] for row in plan.placement})
        lines.append(f"  stage {j}: units {st.start}-{st.end - 1} on {', '.join(doms)}")
    return "\n".join(lines)


def plan_html(plan) -> str:
    text = plan_text(plan).splitlines()
    head = "".join(f"{html.escape(t.strip())}<br>" for t in text[1:] if not t.strip().startswith("stage"))
    rows = [{"stage": j, "units": f"{st.start}-{st.end - 1}",
             "domains (replicas)": ", ".join(f"{d} x{n}" if n > 1 else d for d, n in
                                            _count(row[j] for row in plan.placement).items())}
            for j, st in enumerate(plan.stages)]
    return f"<div><b>{html.escape(text[0])}</b><br>{head}{_table(rows)}</div>"


def _count(items):
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def stage_rows(instance, plan) -> list[dict]:
    """One row per stage: units, layers, compute, memory, gradient sync, domains; with
    several GPU types (SPEC v3 (g)) also ``gpu_types``, the type of each replica's copy
    of the stage, and ``memory_limit_gb`` the stage's own (its tightest type's)."""
    from ..scoring.evaluator import Evaluator

    e = Evaluator(instance, plan).evaluate()
    units = instance.units
    rows = []
    for j, st in enumerate(plan.stages):
        doms = [row[j] for row in plan.placement]
        row = {"stage": j, "first_unit": units[st.start].name, "last_unit": units[st.end - 1].name,
               "units": st.end - st.start, "compute_s": e.compute_s[j],
               "memory_gb_per_gpu": e.memory_gb_per_gpu[j], "memory_limit_gb": e.memory_limit_gb,
               "allreduce_s": e.allreduce_s[j], "domains": doms}
        if instance.heterogeneous:
            gpus = [instance.domain_gpu(d) for d in doms]
            row["memory_limit_gb"] = min(instance.memory_limit_of(g) for g in gpus) / 1e9
            row["gpu_types"] = [g.name for g in gpus]
        rows.append(row)
    return rows


def transfer_rows(instance, plan) -> list[dict]:
    """One row per (replica, boundary): domains, route, bandwidth share, time, latency."""
    from ..scoring.evaluator import Evaluator
    from ..problem.network import NetworkStates

    ev = Evaluator(instance, plan)
    comm = ev.fig.comm(NetworkStates.base(instance))
    rows = []
    for r, row in enumerate(plan.placement):
        for k in range(plan.num_stages - 1):
            a, b = row[k], row[k + 1]
            route = ev.fig.routes[(a, b)].nodes if a != b else (a,)  # the version scored
            rows.append({"replica": r, "boundary": k, "from": a, "to": b, "route": list(route),
                         "bytes": float(ev.fig.A[k]), "transfer_s": float(comm.x[0, r, k]),
                         "latency_s": float(comm.l[0, r, k])})
    return rows


def plan_frame(instance, plan, kind: str = "stages"):
    """``Plan.to_dataframe``: the stage or the transfer rows as a frame."""
    return frame(stage_rows(instance, plan) if kind == "stages" else transfer_rows(instance, plan))


for _fn in (instance_text, instance_html, plan_text, plan_html, plan_frame):
    register(_fn.__name__, _fn)
