"""What a person sees of a multi-plan (SPEC v3 section 10): several jobs sharing the datacenters.

- :func:`job_rows` / :func:`multi_summary`: one row per job (admitted, GPUs per domain,
  link shares, iteration time, effective tokens/s, rho, rho_share, completion, deadline,
  cost), then the objective, its value, the bound, the gap, the master LP, the status
  and the sharing; every figure is :func:`planner.scoring.multievaluate.multievaluate`'s,
  printed at the precision the columns name (``planner multiplan``, ``planner
  multievaluate``).
- :func:`multiplan_text` / :func:`multiplan_html`: the same for ``print(mplan)`` and a
  notebook (registered as the views ``multiplan_text`` and ``multiplan_html``, which
  :class:`~planner.problem.multiplan.MultiPlan` looks up).
- :func:`draw_jobs`: the map coloured by job (``--map``): the single-job map of the
  whole cluster (:func:`planner.presentation.plot.draw`), each domain a pie of its GPUs
  per job (the light blue rest: free), each link a bar of its shares in the jobs'
  colours (the grey rest: unallocated), one legend entry per admitted job.

Example
-------
>>> ev = multievaluate(minst, mplan)                               # doctest: +SKIP
>>> print(multiplan_text(mplan, minst))                            # doctest: +SKIP
job    admitted  GPUs             link shares       iteration s  tokens/s  rho ...
>>> draw_jobs(minst, mplan).savefig("map.png")                     # doctest: +SKIP
"""

from __future__ import annotations

import html
import math

from ..problem.jobs import link_key
from ..problem.views import register

# one colour per job, by its position in the instance (colour-blind safe first: Okabe-Ito
# without the sky blue of the map's domains, then Tol's muted); more jobs: tab20, cycled
JOB_COLOURS = ("#D55E00", "#009E73", "#CC79A7", "#E69F00", "#0072B2", "#F0E442", "#882255",
               "#44AA99", "#999933", "#332288", "#AA4499", "#117733")

# the columns of the summary (the "T_in s" column only when a job's plan has an outer sync)
COLUMNS = ("job", "admitted", "GPUs", "link shares", "T_in s", "iteration s", "tokens/s", "rho",
           "rho_share", "completion h", "deadline", "cost")


def job_colour(i: int) -> str:
    """The colour of the job at position ``i`` of the instance (the map's, the page's).

    >>> job_colour(0), job_colour(1)
    ('#D55E00', '#009E73')
    """
    if i < len(JOB_COLOURS):
        return JOB_COLOURS[i]
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    return to_hex(colormaps["tab20"]((i - len(JOB_COLOURS)) % 20))


def gpus_text(gpus: dict[str, int]) -> str:
    """GPUs per domain, compact, the domains without any left out.

    >>> gpus_text({"alpha": 8, "beta": 0, "gamma": 12})
    'alpha=8 gamma=12'
    """
    return " ".join(f"{d}={g}" for d, g in gpus.items() if g) or "-"


def shares_text(shares: dict[str, float]) -> str:
    """Link shares, compact (3 significant digits), the links of share 0 left out.

    >>> shares_text({"alpha|beta": 0.5, "beta|gamma": 1.0, "alpha|gamma": 0.0})
    'alpha|beta=0.5 beta|gamma=1'
    """
    return " ".join(f"{k}={v:.3g}" for k, v in shares.items() if v) or "-"


def _num(v, fmt: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return "inf"
    return format(v, fmt)


def outer_sync(mplan) -> bool:
    """Whether some admitted job's plan has an outer sync (SPEC 11: T_in differs from T_eff)."""
    return any(j.admitted and j.plan is not None and j.plan.dp_sync is not None
               and j.plan.dp_sync.mode != "every_step" for j in mplan.jobs)


def columns(mplan) -> tuple[str, ...]:
    """The summary's columns for ``mplan``: :data:`COLUMNS`, without "T_in s" unless some job
    has an outer sync (then "iteration s" is T_eff)."""
    return COLUMNS if outer_sync(mplan) else tuple(c for c in COLUMNS if c != "T_in s")


def job_rows(minst, mplan, ev) -> list[tuple[str, ...]]:
    """One row per job of ``ev`` (a :class:`~planner.scoring.multievaluate.MultiEvaluation` of
    ``mplan`` on ``minst``), the cells of :func:`columns` as text: seconds to 4 significant
    digits (``iteration s`` is T_eff = T with no outer sync), effective tokens/s to the
    unit, rho and rho_share to 4 decimals, completion in hours to 4 significant digits,
    deadline ``met`` / ``missed`` / ``none`` (no deadline), cost to 4 significant digits;
    "-" where the job is not admitted (SPEC 10's nulls)."""
    show_in = outer_sync(mplan)
    rows = []
    for f in ev.jobs:
        job = minst.job(f.name)
        gpus, links, _ = mplan.allocation(minst, f.name)
        deadline = "none" if job.deadline_hours is None else ("met" if f.deadline_met else "missed")
        row = [f.name, "yes" if f.admitted else "no", gpus_text(gpus) if f.admitted else "-",
               shares_text(links) if f.admitted else "-"]
        if show_in:
            row.append(_num(f.iteration_time_s, ".4g"))
        row += [_num(f.effective_time_s, ".4g"), _num(f.throughput_tokens_per_s, ",.0f"), f"{f.rho:.4f}",
                _num(f.rho_share, ".4f"), _num(None if f.completion_s is None else f.completion_s / 3600, ".4g"),
                deadline, _num(f.cost, ".4g")]
        rows.append(tuple(row))
    return rows


def objective_rows(mplan, ev) -> list[tuple[str, str]]:
    """The lines under the table as ``(label, text)``: objective (its value and tie-break,
    6 significant digits), bound, gap, master LP, status, sharing, and ``INFEASIBLE`` with
    the violations one a line when the multi-plan breaks a rule."""
    info = mplan.solver
    fmt = lambda v: "none" if v is None else ("inf" if not math.isfinite(v) else f"{v:.6g}")  # noqa: E731
    rows = [("objective", f"{ev.objective} {fmt(ev.objective_value)}"
             + (f" (tie-break {ev.tiebreak:.6g})" if ev.objective in ("maxmin", "deadline") else "")),
            ("bound", fmt(ev.bound)),
            ("gap", "none" if ev.gap is None else f"{ev.gap:.2%}"),
            ("master_lp", fmt(ev.master_lp)),
            ("status", "none (no solver block)" if info is None else
             f"{info.status} ({info.name}, {info.time_s:.1f} s)"),
            ("sharing", ev.sharing + (" (each job on its slice: exact)" if ev.sharing == "reserved"
                                      else " (every link and uplink shared: pessimistic)"))]
    if not ev.feasible:
        rows.append(("INFEASIBLE", "\n".join(ev.violations)))
    return rows


def multi_summary(minst, mplan, ev):
    """The terminal summary (a rich Group): the job table and :func:`objective_rows`."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{minst.name}: {len(minst.jobs)} jobs", title_justify="left")
    numeric = {"T_in s", "iteration s", "tokens/s", "rho", "rho_share", "completion h", "cost"}
    for c in columns(mplan):
        table.add_column(c, justify="right" if c in numeric else "left", overflow="fold")
    for row in job_rows(minst, mplan, ev):
        table.add_row(*row)
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for label, text in objective_rows(mplan, ev):
        head.add_row(Text(label, style="bold red") if label == "INFEASIBLE" else label, text)
    return Group(table, head)


def summary_html(minst, mplan, ev) -> str:
    """The summary as an HTML fragment (a notebook, the report page): the job table, each
    job's name on its map colour, and the objective rows.  Every string escaped."""
    cols = columns(mplan)
    colour = {j.name: job_colour(i) for i, j in enumerate(minst.jobs)}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for row in job_rows(minst, mplan, ev):
        cells = [f'<td><span style="display:inline-block;width:.8em;height:.8em;margin-right:.3em;'
                 f'background:{colour[row[0]]}"></span>{html.escape(row[0])}</td>']
        cells += [f'<td style="text-align:{"left" if c in ("admitted", "GPUs", "link shares", "deadline") else "right"}">'
                  f"{html.escape(v)}</td>" for c, v in zip(cols[1:], row[1:])]
        body.append(f'<tr data-job="{html.escape(row[0])}">' + "".join(cells) + "</tr>")
    bad = ' class="bad"'
    lines = "".join(f'<tr{bad if k == "INFEASIBLE" else ""}><th>{html.escape(k)}</th>'
                    f'<td style="white-space:pre-line">{html.escape(v)}</td></tr>'
                    for k, v in objective_rows(mplan, ev))
    return (f'<table class="jobs"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f'<table class="kv objective">{lines}</table>')


# -- the views of MultiPlan ------------------------------------------------------------------
def _evaluated(mplan, minst, sharing: str = "reserved"):
    from ..scoring.multievaluate import multievaluate

    return multievaluate(minst, mplan, sharing)


def allocation_text(mplan) -> str:
    """A multi-plan shown without its instance: one line per job, its allocation and shape."""
    lines = [f"Multi-plan for {mplan.instance or '?'}: {len(mplan.jobs)} jobs, objective "
             f"{mplan.objective or 'the instance default'} (figures need the instance: "
             "mplan.bind(minst), or planner.multievaluate(minst, mplan))"]
    for j in mplan.jobs:
        if not j.admitted:
            lines.append(f"  {j.name}: not admitted")
            continue
        p = j.plan
        shape = "" if p is None else f"; {p.replicas} x {p.num_stages} x tp {p.tp} = {p.gpus_used} GPUs"
        lines.append(f"  {j.name}: GPUs {gpus_text(j.gpus) if j.gpus else 'as its plan uses'}; "
                     f"links {shares_text(j.link_share)}{shape}")
    return "\n".join(lines)


def multiplan_text(mplan, minst=None, sharing: str = "reserved") -> str:
    """``print(mplan)``: the summary (:func:`multi_summary`) as plain text when the instance is
    known (``minst``, or the one :meth:`~planner.problem.multiplan.MultiPlan.bind` set),
    else :func:`allocation_text`."""
    minst = minst if minst is not None else mplan.shown_on()
    if minst is None:
        return allocation_text(mplan)
    from rich.console import Console

    from .report import whole

    console = Console(width=200, record=True, file=_Null(), color_system=None, soft_wrap=True)
    console.print(whole(multi_summary(minst, mplan, _evaluated(mplan, minst, sharing)), console))
    return console.export_text().rstrip()


def multiplan_html(mplan, minst=None, sharing: str = "reserved") -> str:
    """A notebook's view of ``mplan``: :func:`summary_html`, or the allocation alone without
    the instance."""
    minst = minst if minst is not None else mplan.shown_on()
    if minst is None:
        text = allocation_text(mplan).splitlines()
        return (f"<div><b>{html.escape(text[0])}</b><ul>"
                + "".join(f"<li>{html.escape(t.strip())}</li>" for t in text[1:]) + "</ul></div>")
    return f"<div>{summary_html(minst, mplan, _evaluated(mplan, minst, sharing))}</div>"


class _Null:
    def write(self, _):
        return 0

    def flush(self):
        pass


# -- the map coloured by job ----------------------------------------------------------------
def cluster_instance(minst):
    """The whole cluster as a one-job instance (every GPU, every link and uplink in full), named
    after ``minst``: the base of :func:`draw_jobs`."""
    full = {d.name: d.gpus for d in minst.domains}
    inst = minst.slice_instance(0, full, {link_key(l): 1.0 for l in minst.links},
                                {d.name: 1.0 for d in minst.domains})
    return inst.model_copy(update={"name": minst.name})


def _wedge(a0: float, a1: float):
    """A pie wedge from angle ``a0`` to ``a1`` (fractions of a turn) as scatter-marker vertices,
    and the factor its size must be scaled by (matplotlib rescales a marker's vertices to its
    largest coordinate; scatter_piecharts in matplotlib's gallery)."""
    import numpy as np

    t = np.linspace(2 * np.pi * a0, 2 * np.pi * a1, max(3, int(64 * (a1 - a0)) + 2))
    xy = np.vstack([[0.0, 0.0], np.column_stack([np.sin(t), np.cos(t)]), [0.0, 0.0]])
    return xy, float(np.abs(xy).max())


def draw_jobs(minst, mplan, ev=None, ax=None):
    """The map of ``mplan`` on ``minst`` coloured by job; returns the Figure.

    The whole cluster drawn by :func:`planner.presentation.plot.draw` (domains sized by
    GPUs, links by bandwidth, labelled), then: each domain a pie of its GPUs per admitted
    job (clockwise from the top, in instance order; the light blue rest is free; gid
    ``job-gpus``, one scatter per job and domain, ``.job`` and ``.gpus`` set); each link a
    bar along its middle 70 % split by the jobs' shares (gid ``link-share``, ``.job``,
    ``.share``; the grey rest is unallocated); each domain's label lists the jobs' GPUs
    there; one legend entry per admitted job (its GPUs and rho, from ``ev`` =
    :func:`~planner.scoring.multievaluate.multievaluate` when not given).
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from . import plot

    if ev is None:
        ev = _evaluated(mplan, minst)
    inst = cluster_instance(minst)
    fig = plot.draw(inst, ax=ax)
    ax = fig.axes[0] if ax is None else ax
    pos, _ = plot._positions(inst)
    names = inst.domain_names
    large = len(names) > plot.MAP_DOMAIN_LABELS
    top_g = max(d.gpus for d in inst.domains)
    admitted = [(i, job.name) for i, job in enumerate(minst.jobs) if mplan.job(job.name).admitted]
    alloc = {name: mplan.allocation(minst, name) for _, name in admitted}
    figs = {f.name: f for f in ev.jobs}

    # pies: the GPUs of each domain per job
    for d in inst.domains:
        if not d.gpus:
            continue
        size = (8 + 80 * d.gpus / top_g) if large else (150 + 1350 * d.gpus / top_g)  # draw's node area
        start = 0.0
        for i, name in admitted:
            g = alloc[name][0].get(d.name, 0)
            if not g:
                continue
            frac = min(g / d.gpus, 1.0 - start)
            verts, scale = _wedge(start, start + frac)
            sc = ax.scatter([pos[d.name][0]], [pos[d.name][1]], marker=verts, s=size * scale ** 2,
                            c=job_colour(i), edgecolors="none", zorder=3.5, gid="job-gpus")
            sc.job, sc.gpus, sc.domain = name, g, d.name
            start += frac

    # links: each job's share along the middle 70 % of the link
    max_bw = max((l.bandwidth_gbps for l in inst.links), default=1.0)
    for link in minst.links:
        k = link_key(link)
        (x1, y1), (x2, y2) = pos[link.a], pos[link.b]
        width = (0.6 + 2.0 * link.bandwidth_gbps / max_bw) if large else (2.5 + 4.0 * link.bandwidth_gbps / max_bw)
        t = 0.0
        for i, name in admitted:
            share = alloc[name][1].get(k, 0.0)
            if share <= 0:
                continue
            a, b = 0.15 + 0.7 * t, 0.15 + 0.7 * min(1.0, t + share)
            (line,) = ax.plot([x1 + a * (x2 - x1), x1 + b * (x2 - x1)], [y1 + a * (y2 - y1), y1 + b * (y2 - y1)],
                              color=job_colour(i), linewidth=width, solid_capstyle="butt", zorder=2,
                              gid="link-share")
            line.job, line.share, line.link = name, share, k
            t += share

    # labels: the jobs' GPUs in each domain (the single-job map's labels, one line more)
    if not large:
        labels = [t for t in ax.texts if t.get_gid() == "domain-label"]
        for t in labels:
            name = t.get_text().split("\n")[0]
            d = next((n for n in names if plot.printable(n) == name), None)
            parts = [f"{plot.printable(j)} {alloc[j][0].get(d, 0)}" for _, j in admitted if alloc[j][0].get(d, 0)]
            if parts:
                t.set_text(t.get_text() + "\n" + ", ".join(parts))
        plot._separate_labels(fig, labels + [t for t in ax.texts if t.get_gid() == "link-label"])

    n_adm = len(admitted)
    title = (f"{plot.printable(minst.name)}: {len(names)} domains, {minst.total_gpus:,} GPUs, "
             f"{len(minst.links)} WAN links\n{len(minst.jobs)} jobs, {n_adm} admitted; "
             f"{ev.objective} {ev.objective_value:.4g} ({ev.sharing})")
    ax.set_title(title, fontsize=10)
    plot._lift_title(fig, ax, [t for t in ax.texts if t.get_gid() in ("domain-label", "region-label")], title)
    handles = []
    for i, name in admitted:
        f = figs[name]
        handles.append(Patch(color=job_colour(i), label=f"{plot.printable(name)}: {sum(alloc[name][0].values())} "
                                                        f"GPUs, rho {f.rho:.3f}"))
    handles += [Line2D([], [], color=plot.LINK, linewidth=2, label="WAN link (grey: unallocated share)"),
                Line2D([], [], marker="o", color="none", markerfacecolor=plot.NODE, markersize=9,
                       label="free GPUs")]
    leg = ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    leg.set_gid("job-legend")
    return fig


register("multiplan_text", multiplan_text)
register("multiplan_html", multiplan_html)
register("draw_jobs", draw_jobs)

__all__ = ["JOB_COLOURS", "allocation_text", "cluster_instance", "columns", "draw_jobs", "gpus_text", "job_colour",
           "job_rows", "multi_summary", "multiplan_html", "multiplan_text", "objective_rows", "shares_text",
           "summary_html"]
