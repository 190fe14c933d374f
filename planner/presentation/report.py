"""Human-readable summaries (rich tables) of plans and evaluations."""

from __future__ import annotations

from collections import Counter

from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..problem.plan import claims_check
from ..scoring.evaluator import ESTIMATE_FLAG
from .display import estimate_text, status_text


def _fmt_s(v: float) -> str:
    if v == float("inf"):
        return "inf"
    if v < 1e-3:
        return f"{v * 1e6:.3g} us"
    return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.4g} s"


def speed_change(before_s: float, after_s: float) -> str:
    """How much faster an iteration of ``after_s`` seconds is than one of
    ``before_s``, in words: '26.8% faster', '3.1% slower', 'as fast' (not a
    signed '+26.8%' that reads as more time)."""
    change = 1 - after_s / before_s
    if f"{abs(change):.1%}" == "0.0%":
        return "as fast"
    return f"{abs(change):.1%} {'faster' if change > 0 else 'slower'}"


def _fmt_mem(used_gb: float, limit_gb: float) -> str:
    """'61.2/72 GB'; a small memory in MB or kB, with enough digits that a toy
    instance does not read '0.0/0 GB' ('8.52/72 MB')."""
    scale, unit = next((f, u) for f, u in ((1, "GB"), (1e3, "MB"), (1e6, "kB"), (1e9, "B"))
                       if limit_gb * f >= 1 or u == "B")
    used, limit = used_gb * scale, limit_gb * scale

    def num(x, big):
        return "0" if x == 0 else f"{x:{big}}" if x >= 10 else f"{x:.3g}"

    return f"{num(used, '.1f')}/{num(limit, '.0f')} {unit}"


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
             f"{instance.gpu_counts}, model {instance.workload.model.name})")]
    rows += solver_rows(instance, plan)
    if instance.heterogeneous:
        rows.append(("GPU types", type_use_text(instance, plan)))
    rows.append(("shape", f"{plan.replicas} replica(s) x {plan.num_stages} stage(s) x tp {plan.tp} = "
                 f"{plan.gpus_used} GPUs; micro-batch {plan.micro_batch_size} x "
                 f"{plan.num_micro_batches} per replica; schedule {plan.schedule_kind}"))
    ratio = ev.simulated_over_estimate
    flag = "" if ratio is None or ratio <= ESTIMATE_FLAG else \
        f" (simulated {ratio - 1:.1%} above the estimate: T_est is exact for gpipe-shaped flushes only, SPEC 7)"
    sync = sync_figures(ev)
    if sync is None:
        rows.append(("iteration", f"{_fmt_s(ev.iteration_time_s)} simulated, {_fmt_s(ev.estimate_s)} estimated{flag}"))
        rows.append(("throughput", f"{ev.throughput_tokens_per_s:,.0f} tokens/s"))
    else:  # SPEC 11: the inner step, the outer syncs' share, raw and effective tokens, the trade-off
        rows += sync_rows(sync, flag)
    rows.append(("cost", f"{ev.cost_per_iteration:.4g} per iteration, "
                 f"{ev.wan_gb_per_iteration:.2f} GB over the WAN"))
    if ev.lower_bound_s:
        rows.append(("bound", f"{ev.bound_ratio:.2f} x the lower bound ({_fmt_s(ev.lower_bound_s)})"))
    if not ev.feasible:
        rows.append(("INFEASIBLE", "\n".join(v.message for v in ev.violations)))
    return rows


def sync_figures(ev) -> dict | None:
    """The data-parallel sync of an evaluated plan (SPEC v3 section 11) as the views show
    it, every figure the evaluator's own; None for a plain plan (every step at 16 bits),
    whose views stay as they were.  Keys: ``mode``, ``label`` ("diloco H=30 4-bit"),
    ``H``, ``bits``, ``fragments``, ``overlap`` (streaming; else None), ``groups`` (M),
    ``inner_time_s`` / ``inner_estimate_s`` (T_in, T^est_in), ``effective_time_s`` /
    ``effective_estimate_s`` (T_eff, T^est_eff), ``throughput_tokens_per_s`` (raw:
    gbs x seq / T_eff), ``effective_tokens_per_s`` (x e), ``quality_factor`` e,
    ``quality_source``, ``per_step_time_s`` (the same placement with a per-step 16-bit
    sync) and ``per_step_ratio``: that plan's time per token over this one's time per
    effective token, per_step_time_s x e / T_eff (> 1: the per-step sync is slower).

    >>> sync_figures(evaluate(inst, plan))["label"]        # doctest: +SKIP
    'diloco H=30 4-bit'
    """
    d = getattr(ev, "dp_sync", None)
    if d is None or (d.get("mode", "every_step") == "every_step" and d.get("bits", 16) == 16):
        return None
    from ..problem.dpsync import DpSync

    sync = DpSync(**d)
    per = ev.per_step_time_s
    T_eff, e = ev.effective_time_s, ev.quality_factor
    return {"mode": sync.mode, "label": sync.label(), "H": sync.H, "bits": sync.bits,
            "fragments": sync.fragments if sync.mode == "streaming" else None,
            "overlap": sync.overlap if sync.mode == "streaming" else None,
            "outer_state": sync.outer_state if sync.outer else None, "groups": ev.sync_groups,
            "inner_time_s": ev.iteration_time_s, "inner_estimate_s": ev.estimate_s,
            "effective_time_s": T_eff, "effective_estimate_s": ev.effective_estimate_s,
            "throughput_tokens_per_s": ev.throughput_tokens_per_s,
            "effective_tokens_per_s": ev.effective_tokens_per_s,
            "quality_factor": e, "quality_source": ev.quality_source, "per_step_time_s": per,
            "per_step_ratio": (per * e / T_eff) if per is not None and T_eff > 0 else None}


def tradeoff_text(sync: dict) -> str:
    """'the same placement with a per-step 16-bit sync would take 31.2 s: 5.71 x slower per
    effective token' (or 'faster'), from :func:`sync_figures`."""
    per, ratio = sync["per_step_time_s"], sync["per_step_ratio"]
    if per is None or ratio is None:
        return "no per-step figure"
    if ratio == float("inf") or f"{ratio:.3g}" == "1":
        how = "as fast per effective token" if ratio != float("inf") else "infinitely slower"
    else:
        how = (f"{ratio:.3g} x slower per effective token" if ratio > 1
               else f"{1 / ratio:.3g} x faster per effective token")
    return f"the same placement with a per-step 16-bit sync would take {_fmt_s(per)}: {how}"


def sync_rows(sync: dict, flag: str = "") -> list[tuple[str, str]]:
    """The summary rows of a plan with a data-parallel sync option (:func:`sync_figures`):
    dp sync, inner step, effective step, throughput (raw and effective), quality,
    per-step trade-off."""
    what = f"{sync['label']}, {sync['groups']} group(s)"
    if sync["mode"] == "every_step":
        what += ": the per-step gradient sync sent in " + f"{sync['bits']} bits per parameter"
    elif sync["mode"] == "diloco":
        what += f": outer sync across groups every H = {sync['H']} steps, blocking"
    else:
        what += (f": outer sync every H = {sync['H']} steps in {sync['fragments']} fragment(s), "
                 f"each overlapped with {sync['overlap']} inner step(s)")
    rows = [("dp sync", what)]
    step = "iteration" if sync["mode"] == "every_step" else "inner step"
    rows.append((step, f"{_fmt_s(sync['inner_time_s'])} simulated, {_fmt_s(sync['inner_estimate_s'])} "
                       f"estimated{flag}"))
    if sync["mode"] != "every_step":
        rows.append(("effective", f"{_fmt_s(sync['effective_time_s'])} per step with the outer syncs "
                                  f"({_fmt_s(sync['effective_estimate_s'])} estimated)"))
    rows.append(("throughput", f"{sync['throughput_tokens_per_s']:,.0f} tokens/s raw, "
                               f"{sync['effective_tokens_per_s']:,.0f} effective tokens/s"))
    rows.append(("quality", f"e = {sync['quality_factor']:.3g} ({sync['quality_source']})"))
    rows.append(("per-step sync", tradeoff_text(sync)))
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
    rows = [("solver", f"{info.name}: "
             f"{_claim(status_text(info.status, info.requested_gap), info.objective, info.bound, info.gap)}, "
             f"{info.time_s:.2f} s")]
    extra = info.model_extra or {}
    if extra.get("robust_objective") is not None:
        rows.append(("robust", f"on {extra.get('robust_network', 'the statistic network')}, by T_est over "
                               f"plans with a named schedule (the search's own claim): "
                     + _claim(extra.get("robust_status", "feasible"), extra["robust_objective"],
                              extra.get("robust_bound"), extra.get("robust_gap"))))
    if extra.get("robust_measure"):
        rows.append(("robust", f"{extra['robust_measure']}; the other figures are for the base network"))
    if estimate_text(info):
        rows.append(("search", f"{estimate_text(info)}; the bound above holds for every plan, "
                               f"explicit schedules included"))
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
TYPE_COLUMN = "GPU type"  # between "grad sync" and "domains" when the instance has several GPU types


def stage_columns(instance) -> tuple[str, ...]:
    """The columns of :func:`stage_table`: :data:`STAGE_COLUMNS`, with :data:`TYPE_COLUMN`
    before "domains" when the domains have more than one GPU type (SPEC v3 (g))."""
    if not instance.heterogeneous:
        return STAGE_COLUMNS
    return STAGE_COLUMNS[:-1] + (TYPE_COLUMN, STAGE_COLUMNS[-1])


def _speed(gpu) -> str:
    """'415 TFLOP/s': achieved FLOP/s per GPU, peak x mfu."""
    return f"{gpu.flops_per_s / 1e12:.3g} TFLOP/s"


def type_use_text(instance, plan) -> str:
    """Which GPU type the plan uses where, one clause per type of the instance:
    'H100-SXM-80GB (415 TFLOP/s achieved, 80 GB): stages 0-1 on zhangjiakou, 64 of 128
    GPUs; A100-40GB (...): stage 2 on horinger, 32 of 576 GPUs'; a type the plan
    leaves unused says so."""
    used = plan.gpus_per_domain()
    out = []
    for u in instance.types_used:
        g = instance.gpu_types[u]
        doms = [d.name for d, t in zip(instance.domains, instance.domain_type) if t == u]
        stages = sorted({j for row in plan.placement for j, d in enumerate(row) if d in doms})
        on = [d for d in doms if used.get(d)]
        head = f"{g.name} ({_speed(g)} achieved, {g.memory_gb:g} GB)"
        if not stages:
            out.append(f"{head}: unused ({sum(instance.domain(d).gpus for d in doms)} GPUs)")
            continue
        st = _stage_list(stages)
        out.append(f"{head}: {st} on {', '.join(on)}, {sum(used[d] for d in on)} of "
                   f"{sum(instance.domain(d).gpus for d in doms)} GPUs")
    return "; ".join(out)


def _stage_list(stages: list[int]) -> str:
    """[0, 1, 2, 5] -> 'stages 0-2, 5'; [3] -> 'stage 3'."""
    runs, start = [], stages[0]
    for a, b in zip(stages, stages[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ("stage " if len(stages) == 1 else "stages ") + ", ".join(runs)
# The terminal summary of a large plan (hier on hundreds of domains printed 600+ lines)
# shows this much unless asked for everything (plan_summary(full=True), planner plan --full).
DOMAINS_SHOWN = 4  # domains named per stage (those with the most replicas)
GPU_ROWS = 12  # rows of "GPUs per domain" (the domains with the most GPUs used)
STAGE_ROWS = 32  # rows of "stages"


def _domains_cell(doms: Counter, shown: int | None) -> str:
    items = list(doms.items())
    if shown is None or len(items) <= shown:
        return ", ".join(f"{d} x{n}" if n > 1 else d for d, n in items)
    top = sorted(items, key=lambda kv: -kv[1])[:shown]  # stable: ties in the placement's order
    rest = len(items) - shown
    return (", ".join(f"{d} x{n}" if n > 1 else d for d, n in top)
            + f", and {rest} more domains ({sum(doms.values()) - sum(n for _, n in top)} replicas)")


def stage_table(instance, plan, ev, domains_shown: int | None = None) -> list[tuple[str, ...]]:
    """One row per stage, the columns of :data:`STAGE_COLUMNS` as text;
    ``domains_shown``: name at most this many domains a stage (the others
    counted), None: all."""
    units = instance.units
    typed = instance.heterogeneous
    rows = []
    for j, st in enumerate(plan.stages):
        names = _unit_range(units[st.start].name, units[st.end - 1].name)
        shown = _domains_cell(Counter(row[j] for row in plan.placement), domains_shown)
        if not typed:
            rows.append((str(j), f"{st.start}-{st.end - 1}", names, _fmt_s(ev.compute_s[j]),
                         _fmt_mem(ev.memory_gb_per_gpu[j], ev.memory_limit_gb),
                         _fmt_s(ev.allreduce_s[j]), shown))
            continue
        # GPU types: the stage's own memory limit (its tightest type) and its types
        gpus = [instance.domain_gpu(row[j]) for row in plan.placement]
        limit = min(instance.memory_limit_of(g) for g in gpus) / 1e9
        kinds = _domains_cell(Counter(g.name for g in gpus), None)
        rows.append((str(j), f"{st.start}-{st.end - 1}", names, _fmt_s(ev.compute_s[j]),
                     _fmt_mem(ev.memory_gb_per_gpu[j], limit), _fmt_s(ev.allreduce_s[j]), kinds, shown))
    return rows


def gpu_table(instance, ev) -> list[tuple[str, int, int]]:
    """(domain, GPUs the plan uses there, GPUs available) for every domain it uses."""
    return [(d.name, ev.gpus_used[d.name], d.gpus) for d in instance.domains if d.name in ev.gpus_used]


def plan_summary(instance, plan, ev, full: bool = False) -> Group:
    """Stages with their layers and domains, replicas, tp, micro-batch,
    iteration time, throughput, cost, distance to the bound.  A large plan
    is summarised unless ``full``: at most :data:`DOMAINS_SHOWN` domains named
    per stage, :data:`STAGE_ROWS` stages and :data:`GPU_ROWS` domains in
    "GPUs per domain" (the rest counted in one row), and a line saying so."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for label, text in summary_rows(instance, plan, ev):
        head.add_row(Text(label, style="bold red") if label == "INFEASIBLE" else label, text)

    stages = Table(title="stages", title_justify="left")
    # short headers, and names wrapped, never cut: the table fits 80 columns (documented in docs/guide.md)
    longest = max(len(d) for d in instance.domain_names)
    columns = stage_columns(instance)
    for col in columns:
        stages.add_column(col, justify="right" if col in ("stage", "compute/mb", "mem/GPU", "grad sync") else "left",
                          overflow="fold", min_width=longest if col == "domains" else None)
    rows = stage_table(instance, plan, ev, domains_shown=None if full else DOMAINS_SHOWN)
    cut = [] if full or len(rows) <= STAGE_ROWS else rows[STAGE_ROWS - 1:]
    for row in rows[:len(rows) - len(cut)]:
        stages.add_row(*row)
    if cut:
        stages.add_row("", f"{cut[0][1].split('-')[0]}-{cut[-1][1].split('-')[-1]}", f"{len(cut)} more stages",
                       *[""] * (len(columns) - 3))
    use = Table(title="GPUs per domain", title_justify="left")
    use.add_column("domain", overflow="fold")
    typed = instance.heterogeneous
    if typed:
        use.add_column(TYPE_COLUMN, overflow="fold")
    use.add_column("used", justify="right")
    use.add_column("available", justify="right")
    gpus = gpu_table(instance, ev)
    shown = gpus if full or len(gpus) <= GPU_ROWS else sorted(gpus, key=lambda g: -g[1])[:GPU_ROWS - 1]
    for name, used, avail in shown:
        use.add_row(name, *([instance.domain_gpu(name).name] if typed else []), str(used), str(avail))
    if len(shown) < len(gpus):
        left = [g for g in gpus if g not in shown]
        use.add_row(f"{len(left)} more domains", *([""] if typed else []), str(sum(g[1] for g in left)),
                    str(sum(g[2] for g in left)))
    parts = [head, stages, use]
    summarised = bool(cut) or len(shown) < len(gpus) or any(", and " in r[-1] for r in rows)
    if summarised:
        parts.append(Text(f"summarised: {len(plan.stages)} stages over {len(gpus)} domains; --full (API: "
                          f"plan_summary(..., full=True)) shows every row"))
    return Group(*parts)


def _text(cell) -> Text | None:
    if isinstance(cell, str):
        try:
            return Text.from_markup(cell)
        except Exception:  # not markup: printed as it is
            return Text(cell)
    return cell if isinstance(cell, Text) else None


def _longest_word(cell) -> int:
    text = _text(cell)
    return max((cell_len(w) for w in text.plain.split()), default=0) if text is not None else 0


def whole(renderable, console: Console):
    """``renderable`` with every table in it (a Table, or Tables in a Group)
    set so that no word, and so no number, is ever cut: each column is at
    least as wide as its longest word, and a longer text wraps between words
    (folds if it must).  Headers are kept whole too, as many as fit in
    ``console``'s width (the others fold).  A table whose words alone do not
    fit is printed wider than the console (a terminal wraps its lines, a
    pipe gets them whole) rather than with "…".  Returns ``renderable``."""
    if isinstance(renderable, Group):
        for r in renderable.renderables:
            whole(r, console)
        return renderable
    if not isinstance(renderable, Table):
        return renderable
    cols = renderable.columns
    own = [col.min_width or 0 for col in cols]
    cells = [max([o] + [_longest_word(c) for c in col._cells]) for o, col in zip(own, cols)]
    heads = [max(w, _longest_word(col.header)) for w, col in zip(cells, cols)]
    def frame():  # the borders and padding (rich's own minimum would count the headers' words)
        return renderable._extra_width + sum(renderable._get_padding_width(i) for i in range(len(cols)))

    if sum(heads) + frame() > console.width:  # one space between columns, not two
        renderable.collapse_padding, renderable.pad_edge = True, False
    frame = frame()
    spare = console.width - frame - sum(cells)
    for col, h, c in zip(cols, heads, cells):
        col.overflow = "fold"
        col.min_width = h if spare >= 0 else c
    if sum(heads) + frame <= console.width or spare < 0:
        return renderable  # every word fits (rich lays it out); or only wider than the console
    # the cells' words fit, not every header's: laid out here (rich's collapse would cut
    # words), as many headers whole as fit, the rest of the width to those that are not
    widths = list(cells)
    for i in sorted(range(len(cols)), key=lambda i: heads[i] - cells[i]):
        if heads[i] - widths[i] <= spare:
            spare -= heads[i] - widths[i]
            widths[i] = heads[i]
    while spare > 0:
        i = min((i for i in range(len(cols)) if heads[i] > widths[i]), key=lambda i: heads[i] - widths[i])
        widths[i] += 1
        spare -= 1
    for col, w in zip(cols, widths):
        col.width, col.min_width = w, None
    return renderable
