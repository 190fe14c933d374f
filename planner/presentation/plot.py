"""Figures (matplotlib): a Gantt chart of one iteration, a map of the
domains and the WAN, and a bar chart comparing plans.

Every function returns the matplotlib ``Figure`` and draws into ``ax`` when
one is given.  matplotlib is imported only when a function runs; without a
display (and with no backend chosen by the user) the "Agg" backend is used.

Example
-------
>>> import planner, planner.plot                              # doctest: +SKIP
>>> inst = planner.load_instance("tiny-3dc")                  # doctest: +SKIP
>>> p = planner.plan(inst)                                    # doctest: +SKIP
>>> planner.presentation.plot.gantt(inst, p).savefig("gantt.png")          # doctest: +SKIP
>>> planner.presentation.plot.draw(inst, p).savefig("map.png")             # doctest: +SKIP
>>> planner.presentation.plot.compare({"greedy": p, "milp": planner.plan(inst, solver="milp")})  # doctest: +SKIP

Artists carry a ``gid`` so that figures can be inspected (tests do):
``compute:F`` / ``compute:B`` (one rectangle per op), ``transfer:send`` (one
per transfer), ``transfer:latency``, ``allreduce``, ``critical`` (one
outline per segment of the critical path); ``domain`` (the node scatter),
``link`` / ``link-label`` (one per WAN link), ``flow`` (one per link a
plan's pipeline crosses), ``domain-label``, ``region-label`` (maps of more
than ``MAP_DOMAIN_LABELS`` domains); ``plan`` (one bar per plan),
``value-label``, ``estimate``, ``lower-bound``.
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter
from itertools import groupby
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..problem.specversion import check_spec
from ..problem.views import register
from .display import replica_list

# picture files matplotlib writes without anything beyond its own dependencies
# (by the file name's extension; "pgf" needs LaTeX, "raw"/"rgba" are not pictures)
PICTURE_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg", "tif", "tiff", "webp", "eps", "ps", "svgz")


def picture_problem(path) -> str | None:
    """Why a picture cannot be saved at ``path`` judging by its name (no or an
    unsupported extension), or None when its format is one of
    :data:`PICTURE_FORMATS`.  Checked before any work, so that a typo is not
    found only after a long solve."""
    name = os.path.basename(str(path))
    ext = name.rsplit(".", 1)[1].lower() if "." in name.lstrip(".") else ""
    if not ext:
        return f"{name!r} has no extension; name the picture's format, one of: .{', .'.join(PICTURE_FORMATS)}"
    if ext not in PICTURE_FORMATS:
        return f"cannot draw a .{ext} picture; use one of: .{', .'.join(PICTURE_FORMATS)}"
    return None


# colours (colour-blind safe, from the "tab10"/"colorblind" families)
FORWARD = "#4C72B0"
BACKWARD = "#DD8452"
ALLREDUCE = "#8172B3"
CRITICAL = "#C44E52"
LINK = "#8C8C8C"
FLOW = "#E69F00"
NODE = "#A6CEE3"
NODE_USED = "#1F78B4"

_TIME_METRICS = {"iteration_time_s", "estimate_s", "lower_bound_s"}
_METRIC_NAMES = {
    "iteration_time_s": "iteration time (s)",
    "estimate_s": "estimate T_est (s)",
    "throughput_tokens_per_s": "throughput (tokens/s)",
    "cost_per_iteration": "cost per iteration",
    "bound_ratio": "x the lower bound",
    "gap": "solver gap",
    "time_s": "solver time (s)",
}


# -- helpers -----------------------------------------------------------------
def _pyplot():
    """Import pyplot, choosing "Agg" when there is no display and no backend was chosen."""
    import matplotlib

    if ("matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND")
            and sys.platform.startswith("linux")
            and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def printable(text: str) -> str:
    """``text`` as matplotlib's default font can draw it: unchanged when the font has
    every glyph, else transliterated to ASCII (``unidecode``), so that a domain
    named in Chinese reads "Bei Jing" rather than as boxes with a "Glyph missing"
    warning.  A ``$`` is escaped, so that matplotlib never reads a name as math (two of
    them would start mathtext, and an unbalanced one fail to draw).

    >>> printable("us-east-1")
    'us-east-1'
    """
    if not (text.isascii() or all(_has_glyph(c) for c in set(text) if not c.isspace())):
        from unidecode import unidecode

        text = " ".join(unidecode(text).split())
    return text.replace("$", r"\$")



def _map_axes(ax, geo: bool, lat0: float, spines: bool) -> None:
    """A map's axes: longitude/latitude at the local aspect (mean latitude ``lat0``, degrees)
    when the domains have coordinates, else a bare equal-aspect frame."""
    if geo:
        ax.set_aspect(1 / max(math.cos(math.radians(lat0)), 0.1))
        ax.set_xlabel("longitude (°)")
        ax.set_ylabel("latitude (°)")
        ax.grid(color="#eeeeee", linewidth=0.5)
        return
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    if not spines:
        for spine in ax.spines.values():
            spine.set_visible(False)

def _has_glyph(char: str) -> bool:
    return ord(char) in _default_font_chars()


_FONT_CHARS: set[int] | None = None


def _default_font_chars() -> set[int]:
    """Code points the default font (``rcParams['font.family']``) has glyphs for."""
    global _FONT_CHARS
    if _FONT_CHARS is None:
        from matplotlib import font_manager
        from matplotlib.ft2font import FT2Font

        path = font_manager.findfont(font_manager.FontProperties())
        _FONT_CHARS = set(FT2Font(path).get_charmap())
    return _FONT_CHARS


def _figure_ax(ax, size):
    if ax is not None:
        return ax.figure, ax
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=size, layout="constrained")
    return fig, ax


def _fmt_time(v: float) -> str:
    if v is None or math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf"
    if v < 1e-3:
        return f"{v * 1e6:.3g} us"
    return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.4g} s"


def _fmt_value(v: float, metric: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if math.isinf(v):
        return "inf"
    if metric in _TIME_METRICS or metric == "time_s":
        return _fmt_time(v)
    if metric == "throughput_tokens_per_s":
        return f"{v:,.0f}"
    if metric == "bound_ratio":
        return f"{v:.2f}x"
    if metric == "gap":
        return f"{v:.1%}"
    return f"{v:.4g}"


# -- Gantt ---------------------------------------------------------------------
def _replicas_to_draw(replicas, R: int, bottleneck: int, firsts=()) -> list[int]:
    """The replicas a Gantt chart draws; by default all when R <= 4, else replica 0, the
    bottleneck replica and ``firsts`` (the first replica of each class of GPU types)."""
    if replicas is None:
        return list(range(R)) if R <= 4 else sorted({0, bottleneck, *firsts})
    if isinstance(replicas, int):
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        return list(range(min(replicas, R)))
    chosen = sorted({int(r) for r in replicas})
    bad = [r for r in chosen if not 0 <= r < R]
    if bad or not chosen:
        raise ValueError(f"replicas {bad or chosen} out of range 0..{R - 1}")
    return chosen


def gantt(instance, plan, states=None, ax=None, replicas=None, critical: bool = True):
    """One simulated iteration of ``plan`` as a Gantt chart; returns the Figure.

    Rows, top to bottom, per drawn replica: each stage's compute (forward
    and backward micro-batches, labelled with the micro-batch number when
    the bar is wide enough; gradient synchronisation after the stage's last
    op), and between two stages a thinner row with that boundary's channel
    transfers (forward activations in the upper half, backward gradients in
    the lower half; the send interval solid, the latency lighter and
    hatched).  Idle time is white space.  The critical path (the chain of
    ops, sends, latencies and the all-reduce that sets the iteration time)
    is outlined in red.

    ``states``: one network state (default: the instance's base network).
    ``replicas``: an int (the first n replicas) or a list of indices;
    default all when R <= 4, else replica 0 and the bottleneck replica (and, with up
    to 4 rows of GPU types over the replicas, the first replica of each).

    GPU types (SPEC v3 (g)): each replica is drawn at the figures of its own row of
    types (its class), as the evaluator simulates it, so every bar is exact; the
    title says how many rows there are and which binds (the bottleneck replica's,
    where the critical path runs).
    """
    from matplotlib.patches import Patch

    from ..scoring.trace import trace as make_trace

    with np.errstate(invalid="ignore"):  # inf - inf when a link is down (refused below)
        tr = make_trace(instance, plan, states)
    R, S, m = plan.replicas, plan.num_stages, plan.num_micro_batches
    T = tr.iteration_time_s
    if not math.isfinite(T):
        raise ValueError("the iteration never ends under this network state "
                         "(a link the plan uses is down): nothing to draw")
    # GPU types: by default one replica of each row of types too (up to 4 rows)
    firsts = np.unique(tr.replica_class, return_index=True)[1].tolist() if 1 < tr.classes <= 4 else ()
    drawn = _replicas_to_draw(replicas, R, tr.bottleneck_replica, firsts)
    scale, unit = (1e3, "ms") if T < 1 else (1.0, "s")

    # row layout: y grows downwards (the axis is inverted at the end)
    COMPUTE_H, XFER_H = 0.8, 0.5
    compute_y: dict[tuple[int, int], float] = {}
    xfer_y: dict[tuple[int, int], float] = {}
    ticks, tick_labels, tick_small = [], [], []
    typed = instance.heterogeneous  # GPU types: each stage's row names its domain's type
    y = 0.0
    for r in drawn:
        row = plan.placement[r]
        for j in range(S):
            compute_y[(r, j)] = y
            ticks.append(y)
            tick_labels.append(f"r{r} stage {j} · {printable(row[j])}"
                               + (f" · {printable(instance.domain_gpu(row[j]).name)}" if typed else ""))
            tick_small.append(False)
            y += 1.0
            if j < S - 1:
                y_x = y - 0.5 + XFER_H / 2 + 0.05
                xfer_y[(r, j)] = y_x
                ticks.append(y_x)
                where = printable(row[j] if row[j] == row[j + 1] else f"{row[j]}→{row[j + 1]}")
                tick_labels.append(f"s{j}↔s{j + 1} · {where}")
                tick_small.append(True)
                y = y_x + XFER_H / 2 + 0.55
        y += 0.5  # gap between replicas
    height_units = max(y, 2.0)

    fig, ax = _figure_ax(ax, (12, min(2.0 + 0.42 * height_units, 40)))
    k = scale

    # compute bars, one barh call per kind
    for kind, colour in (("F", FORWARD), ("B", BACKWARD)):
        ops = [o for o in tr.ops if o.kind == kind and (o.replica, o.stage) in compute_y]
        if not ops:
            continue
        bars = ax.barh([compute_y[(o.replica, o.stage)] for o in ops],
                       [(o.end - o.start) * k for o in ops], left=[o.start * k for o in ops],
                       height=COMPUTE_H, color=colour, edgecolor="white", linewidth=0.4, zorder=2)
        for patch, op in zip(bars.patches, ops):
            patch.set_gid(f"compute:{kind}")
            patch.op = op  # for inspection

    # transfers: forward channel in the upper half of the row, backward in the lower
    lane = {"fwd": -XFER_H / 4, "bwd": XFER_H / 4}
    lane_colour = {"fwd": FORWARD, "bwd": BACKWARD}
    xfers = [t for t in tr.transfers if (t.replica, t.boundary) in xfer_y]
    lat = [t for t in xfers if t.arrive > t.end]
    if lat:
        bars = ax.barh([xfer_y[(t.replica, t.boundary)] + lane[t.direction] for t in lat],
                       [(t.arrive - t.end) * k for t in lat], left=[t.end * k for t in lat],
                       height=XFER_H / 2 * 0.8, color=[lane_colour[t.direction] for t in lat],
                       alpha=0.35, hatch="////", edgecolor=[lane_colour[t.direction] for t in lat],
                       linewidth=0, zorder=1.5)
        for patch, t in zip(bars.patches, lat):
            patch.set_gid("transfer:latency")
            patch.transfer = t
    if xfers:
        bars = ax.barh([xfer_y[(t.replica, t.boundary)] + lane[t.direction] for t in xfers],
                       [(t.end - t.start) * k for t in xfers], left=[t.start * k for t in xfers],
                       height=XFER_H / 2 * 0.8, color=[lane_colour[t.direction] for t in xfers],
                       edgecolor="none", linewidth=0, zorder=2)
        for patch, t in zip(bars.patches, xfers):
            patch.set_gid("transfer:send")
            patch.transfer = t

    # gradient synchronisation: starts when the stage's last replica is done
    E_all = tr.stage_end.max(axis=0)
    ar_rows = [(r, j) for (r, j) in compute_y if tr.allreduce[j] > 0]
    if ar_rows:
        bars = ax.barh([compute_y[rj] for rj in ar_rows], [tr.allreduce[j] * k for _, j in ar_rows],
                       left=[E_all[j] * k for _, j in ar_rows], height=COMPUTE_H * 0.6,
                       color=ALLREDUCE, edgecolor="none", zorder=2)
        for patch in bars.patches:
            patch.set_gid("allreduce")

    # critical path
    hidden_critical = False
    if critical:
        for seg in tr.critical_path:
            box = _segment_box(seg, tr, compute_y, xfer_y, lane, COMPUTE_H, XFER_H)
            if box is None:
                hidden_critical = True
                continue
            yc, h = box
            rects = ax.barh([yc], [(seg.end - seg.start) * k], left=[seg.start * k], height=h,
                            facecolor=(0.77, 0.31, 0.32, 0.12), edgecolor=CRITICAL, linewidth=1.6,
                            zorder=3)
            rects.patches[0].set_gid("critical")
            rects.patches[0].segment = seg

    ax.axvline(T * k, color="black", linestyle=":", linewidth=1, zorder=1, gid="iteration-end")
    ax.set_xlim(0, T * k * 1.01 if T > 0 else 1)

    # micro-batch numbers on bars wide enough to hold them
    ax_width_pt = ax.get_position().width * fig.get_figwidth() * 72
    x0, x1 = ax.get_xlim()
    pt_per_unit = ax_width_pt / (x1 - x0) if x1 > x0 else 0
    for patch in ax.patches:
        if patch.get_gid() in ("compute:F", "compute:B"):
            label = str(patch.op.micro_batch)
            if patch.get_width() * pt_per_unit >= 6.5 * len(label) + 3:
                ax.text(patch.get_x() + patch.get_width() / 2, patch.get_y() + patch.get_height() / 2,
                        label, ha="center", va="center", fontsize=7, color="white", zorder=4,
                        gid="mb-label", clip_on=True)

    ax.set_yticks(ticks, tick_labels)
    for lab, small in zip(ax.get_yticklabels(), tick_small):
        if small:
            lab.set_fontsize(7)
            lab.set_color("#555555")
    ax.set_ylim(height_units - 0.3, -0.7)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(axis="x", color="#dddddd", linewidth=0.5, zorder=0)
    ax.set_axisbelow(True)

    shown = "" if len(drawn) == R else (
        f"; replica{'s' if len(drawn) > 1 else ''} {', '.join(map(str, drawn))} of {R} shown")
    if hidden_critical:
        shown += f" (critical path on replica {tr.bottleneck_replica}, not shown)"
    if tr.classes > 1:  # GPU types: the replicas run on several rows of types, each at its own
        names = [printable(instance.domain_gpu(d).name) for d in plan.placement[tr.bottleneck_replica]]
        runs = [(n, sum(1 for _ in grp)) for n, grp in groupby(names)]  # stage by stage, runs merged
        types = " / ".join(n if c == 1 else f"{n} x{c}" for n, c in runs)
        shown += (f"\n{tr.classes} rows of GPU types over the replicas, each drawn at its own; binding "
                  f"(critical path): {types}, replica{'s' if (tr.replica_class == tr.binding_class).sum() > 1 else ''} "
                  f"{replica_list(np.nonzero(tr.replica_class == tr.binding_class)[0])}")
    ax.set_title(f"{printable(instance.name)}: {plan.schedule_kind}, R={R} S={S} m={m} b={plan.micro_batch_size} "
                 f"tp={plan.tp} — iteration {_fmt_time(T)}{shown}", fontsize=10)

    handles = [Patch(color=FORWARD, label="forward"), Patch(color=BACKWARD, label="backward")]
    if xfers:
        handles += [Patch(color="#777777", label="send: activations (upper),\ngradients (lower)"),
                    Patch(facecolor="#777777", edgecolor="#777777", alpha=0.35, hatch="////",
                          linewidth=0, label="latency")]
    if ar_rows:
        handles.append(Patch(color=ALLREDUCE, label="gradient sync"))
    if critical:
        handles.append(Patch(facecolor=(0.77, 0.31, 0.32, 0.12), edgecolor=CRITICAL, linewidth=1.6,
                             label="critical path"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    return fig


def _segment_box(seg, tr, compute_y, xfer_y, lane, compute_h, xfer_h):
    """(y centre, height) of a critical-path segment's row, or None if not drawn."""
    if seg.kind in ("F", "B", "allreduce"):
        y = compute_y.get((seg.replica, seg.stage))
        return None if y is None else (y, compute_h)
    y = xfer_y.get((seg.replica, seg.stage))
    if y is None:
        return None
    # which channel: the transfer whose send (or latency) interval this is
    tol = 1e-9 * max(1.0, abs(seg.end))
    direction = "fwd"
    for t in tr.transfers:
        if (t.replica, t.boundary, t.micro_batch) != (seg.replica, seg.stage, seg.micro_batch):
            continue
        a, b = (t.start, t.end) if seg.kind == "send" else (t.end, t.arrive)
        if abs(a - seg.start) <= tol and abs(b - seg.end) <= tol:
            direction = t.direction
            break
    return y + lane[direction], xfer_h / 2 * 0.8


# -- map -----------------------------------------------------------------------
def _positions(instance):
    doms = instance.domains
    if all(d.lat is not None and d.lon is not None for d in doms):
        return {d.name: (d.lon, d.lat) for d in doms}, True
    import networkx as nx

    pos = nx.spring_layout(instance.graph, seed=7)
    return {n: (float(x), float(y)) for n, (x, y) in pos.items()}, False


def pipeline_flows(instance, plan) -> Counter:
    """Pipeline flows per WAN link (index): one per (replica, boundary) whose
    route crosses the link."""
    flows: Counter = Counter()
    for row in plan.placement:
        for u, v in zip(row, row[1:]):
            if u != v:
                for li in instance.routes_for(check_spec(None))[(u, v)].links:
                    flows[li] += 1
    return flows


def draw(instance, plan=None, ax=None):
    """The domains and the WAN; returns the Figure.

    Domains sit at their (lon, lat) when every domain has coordinates (an
    equirectangular map, no basemap), otherwise at a spring layout with a
    fixed seed.  Above ``MAP_DOMAIN_LABELS`` domains the map is drawn by region
    (:func:`_draw_large`): one label per region, no per-link labels.  Node area grows with the domain's GPUs; each WAN link is
    labelled "bandwidth Gbit/s / latency ms" (above 20 links, only the links
    the plan's pipelines cross: more labels would stack into an unreadable
    block) and drawn wider for more bandwidth; domain labels are pushed apart
    until no two overlap.  With a ``plan``: the links its pipelines cross are
    overlaid in orange, wider for more flows (one flow per replica and
    stage boundary whose route uses the link), and every domain says how
    many of its GPUs the plan uses.
    """
    from matplotlib.lines import Line2D

    if len(instance.domains) > MAP_DOMAIN_LABELS:
        return _draw_large(instance, plan, ax)
    pos, geo = _positions(instance)
    fig, ax = _figure_ax(ax, (9, 7))
    names = instance.domain_names
    max_bw = max((l.bandwidth_gbps for l in instance.links), default=1.0)
    small = len(instance.links) > 20
    crossed = set(pipeline_flows(instance, plan)) if plan is not None else set()

    for i, link in enumerate(instance.links):
        (x1, y1), (x2, y2) = pos[link.a], pos[link.b]
        ax.plot([x1, x2], [y1, y2], color=LINK, linewidth=0.8 + 2.7 * link.bandwidth_gbps / max_bw,
                solid_capstyle="round", zorder=1, gid="link")
        if small and i not in crossed:
            continue
        ax.annotate(f"{link.bandwidth_gbps:g} Gbit/s / {link.latency_ms:g} ms", ((x1 + x2) / 2, (y1 + y2) / 2),
                    xytext=(0, 0), textcoords="offset points",  # an offset, so the labels can be moved apart
                    fontsize=6 if small else 7, color="#333333", ha="center", va="center", zorder=5,
                    gid="link-label", bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.75))

    used: Counter = Counter()
    flows: Counter = Counter()
    if plan is not None:
        used = plan.gpus_per_domain()
        flows = pipeline_flows(instance, plan)
        top = max(flows.values(), default=1)
        for li, n in sorted(flows.items()):
            link = instance.links[li]
            (x1, y1), (x2, y2) = pos[link.a], pos[link.b]
            ax.plot([x1, x2], [y1, y2], color=FLOW, alpha=0.75, linewidth=2.5 + 7.5 * n / top,
                    solid_capstyle="round", zorder=2, gid="flow")
            # flow count a little off the middle, so it does not hide the link label
            ax.annotate(f"{n} flow{'s' if n > 1 else ''}", ((x1 + x2) / 2, (y1 + y2) / 2),
                        xytext=(0, -9), textcoords="offset points", fontsize=7, color="#9A6200",
                        ha="center", va="center", zorder=5, gid="flow-label")

    gpus = [instance.domain(n).gpus for n in names]
    top_g = max(gpus)
    xs, ys = [pos[n][0] for n in names], [pos[n][1] for n in names]
    colours = [NODE_USED if used.get(n) else NODE for n in names]
    ax.scatter(xs, ys, s=[150 + 1350 * g / top_g for g in gpus], c=colours, edgecolors="white",
               linewidths=1.5, zorder=3, gid="domain")
    labels = []
    for n, x, y_, g in zip(names, xs, ys, gpus):
        # GPU types: 'n x type' instead of 'n GPUs'
        text = f"{printable(n)}\n{g} " + (f"x {printable(instance.domain_gpu(n).name)}" if instance.heterogeneous
                                           else "GPUs")
        if plan is not None:
            text += f"\n{used.get(n, 0)} used"
        labels.append(ax.annotate(text, (x, y_), xytext=(0, 14 + 14 * g / top_g), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8, fontweight="bold" if used.get(n) else "normal",
                    zorder=6, gid="domain-label"))

    _map_axes(ax, geo, sum(ys) / len(ys), spines=False)
    ax.margins(0.18)

    gpus_text = printable(instance.gpu_counts) if instance.heterogeneous else f"{instance.total_gpus} GPUs"
    title = f"{printable(instance.name)}: {len(names)} domains, {gpus_text}, {len(instance.links)} WAN links"
    if plan is not None:
        title += (f"\nplan: R={plan.replicas} S={plan.num_stages} tp={plan.tp}, "
                  f"{plan.gpus_used} GPUs in {len(used)} domain{'s' if len(used) > 1 else ''}")
    ax.set_title(title, fontsize=10)
    handles = [Line2D([], [], color=LINK, linewidth=2, label="WAN link (width ~ bandwidth)")]
    if plan is not None:
        handles.append(Line2D([], [], color=FLOW, linewidth=5, alpha=0.75,
                              label="pipeline flows (width ~ count)"))
        handles.append(Line2D([], [], marker="o", color="none", markerfacecolor=NODE_USED,
                              markersize=9, label="domain used by the plan"))
    ax.legend(handles=handles, loc="lower left", fontsize=8, framealpha=0.85)
    _separate_labels(fig, labels + [t for t in ax.texts if t.get_gid() in ("flow-label", "link-label")])
    _lift_title(fig, ax, labels, title)
    return fig


MAP_DOMAIN_LABELS = 40  # above this many domains the map labels regions, not domains
MAP_REGION_LABELS = 15  # ... and at most this many regions: those the plan uses, then the largest


def _draw_large(instance, plan=None, ax=None):
    """:func:`draw` for many domains (hundreds: a national network of datacenters):
    small dots for the domains, thin links without labels, one label per region
    (its domains, GPUs and, with a plan, GPUs used; gid ``region-label``) at the
    mean position of its domains; with a plan, the links its pipelines cross in
    orange (labelled with their flow counts when at most 20) and the domains it
    uses in dark blue (labelled when at most 12).  At most ``MAP_REGION_LABELS``
    regions are labelled (those the plan uses, then those with the most GPUs);
    domains without a region get no label."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    pos, geo = _positions(instance)
    fig, ax = _figure_ax(ax, (10, 8))
    names = instance.domain_names
    max_bw = max((l.bandwidth_gbps for l in instance.links), default=1.0)
    segs = [(pos[l.a], pos[l.b]) for l in instance.links]
    widths = [0.3 + 1.5 * l.bandwidth_gbps / max_bw for l in instance.links]
    alpha = 0.5 if len(segs) <= 500 else 0.15  # thousands of links: a haze, not a grey block
    ax.add_collection(LineCollection(segs, linewidths=widths, colors=LINK, alpha=alpha, zorder=1, gid="link"))
    used: Counter = Counter()
    if plan is not None:
        used = plan.gpus_per_domain()
        flows = pipeline_flows(instance, plan)
        if flows:
            top = max(flows.values())
            items = sorted(flows.items())
            ax.add_collection(LineCollection(
                [segs[li] for li, _ in items], linewidths=[2.0 + 6.0 * n / top for _, n in items],
                colors=FLOW, alpha=0.75, zorder=2, gid="flow"))
            if len(items) <= 20:
                for li, n in items:
                    (x1, y1), (x2, y2) = segs[li]
                    ax.annotate(f"{n} flow{'s' if n > 1 else ''}", ((x1 + x2) / 2, (y1 + y2) / 2),
                                xytext=(0, -9), textcoords="offset points", fontsize=7, color="#9A6200",
                                ha="center", va="center", zorder=5, gid="flow-label")
    gpus = np.array([d.gpus for d in instance.domains], float)
    xs, ys = np.array([pos[n][0] for n in names]), np.array([pos[n][1] for n in names])
    on = np.array([bool(used.get(n)) for n in names])
    ax.scatter(xs, ys, s=8 + 80 * gpus / gpus.max(), c=np.where(on, NODE_USED, NODE), edgecolors="white",
               linewidths=0.4, zorder=3, gid="domain")
    labels = []
    regions: dict[str, list[int]] = {}
    for i, d in enumerate(instance.domains):
        if d.region:
            regions.setdefault(d.region, []).append(i)
    # the regions the plan uses, then the largest, up to MAP_REGION_LABELS labels
    shown = sorted(regions, key=lambda r: (-sum(used.get(names[i], 0) for i in regions[r]),
                                           -gpus[regions[r]].sum(), r))[:MAP_REGION_LABELS]
    for region in sorted(shown, key=list(regions).index):
        idx = regions[region]
        text = f"{printable(region)}\n{len(idx)} domains, {int(gpus[idx].sum()):,} GPUs"
        if instance.heterogeneous:  # GPU types: the region's types
            text += "\n" + ", ".join(dict.fromkeys(printable(instance.domain_gpu(names[i]).name) for i in idx))
        u = sum(used.get(names[i], 0) for i in idx)
        if plan is not None and u:
            text += f"\n{u:,} used"
        labels.append(ax.annotate(text, (float(xs[idx].mean()), float(ys[idx].mean())), xytext=(0, 10),
                                  textcoords="offset points", ha="center", va="bottom", fontsize=7,
                                  fontweight="bold" if u else "normal", zorder=6, gid="region-label",
                                  bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.7)))
    if plan is not None and len(used) <= 12:
        for n in sorted(used, key=instance.domain_index.__getitem__):
            x, y_ = pos[n]
            kind = f" {printable(instance.domain_gpu(n).name)}" if instance.heterogeneous else ""
            labels.append(ax.annotate(f"{printable(n)}: {used[n]}{kind} GPUs", (x, y_), xytext=(0, -12),
                                      textcoords="offset points", ha="center", va="top", fontsize=6,
                                      color=NODE_USED, zorder=6, gid="domain-label"))
    _map_axes(ax, geo, float(ys.mean()), spines=True)
    ax.autoscale_view()
    ax.margins(0.08)
    title = (f"{printable(instance.name)}: {len(names)} domains in {len(regions)} regions, "
             f"{instance.total_gpus:,} GPUs, {len(instance.links):,} WAN links")
    if len(shown) < len(regions):
        title += f" ({len(shown)} largest or used regions labelled)"
    if plan is not None:
        title += (f"\nplan: R={plan.replicas} S={plan.num_stages} tp={plan.tp}, "
                  f"{plan.gpus_used:,} GPUs in {len(used)} domain{'s' if len(used) > 1 else ''}")
    ax.set_title(title, fontsize=10)
    handles = [Line2D([], [], color=LINK, linewidth=1.5, label="link (width ~ bandwidth)")]
    if plan is not None:
        handles += [Line2D([], [], color=FLOW, linewidth=4, alpha=0.75, label="pipeline flows (width ~ count)"),
                    Line2D([], [], marker="o", color="none", markerfacecolor=NODE_USED, markersize=7,
                           label="domain used by the plan")]
    ax.legend(handles=handles, loc="lower left", fontsize=8, framealpha=0.85)
    _separate_labels(fig, labels + [t for t in ax.texts if t.get_gid() == "flow-label"])
    _lift_title(fig, ax, labels, title)
    return fig


def _lift_title(fig, ax, labels, title: str) -> None:
    """Labels pushed above the axes would run into the title: lift it over them."""
    if not labels:
        return
    renderer = fig.canvas.get_renderer()
    top = max(t.get_window_extent(renderer).y1 for t in labels)
    over = top - ax.get_window_extent(renderer).y1
    if over > 0:
        ax.set_title(title, fontsize=10, pad=6 + over * 72.0 / fig.dpi)


def _separate_labels(fig, labels, passes: int = 300) -> None:
    """Move overlapping annotations apart (their text offsets, in points) until no
    two text boxes overlap: the lower of two overlapping labels moves down, the
    other up, each by half the overlap plus a margin, along the axis of the
    smaller overlap."""
    if len(labels) < 2:
        return
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    to_pt = 72.0 / fig.dpi
    for _ in range(passes):
        boxes = [t.get_window_extent(renderer) for t in labels]
        moved = False
        for i in range(len(labels)):
            for j in range(i + 1, len(labels)):
                a, b = boxes[i], boxes[j]
                dx = min(a.x1, b.x1) - max(a.x0, b.x0)
                dy = min(a.y1, b.y1) - max(a.y0, b.y0)
                if dx <= 0 or dy <= 0:
                    continue
                moved = True
                lo, hi = (i, j) if (a.y0 + a.y1) <= (b.y0 + b.y1) else (j, i)
                if dy <= dx:
                    step = (dy / 2 + 1.5) * to_pt
                    for k, sign in ((lo, -1), (hi, +1)):
                        x0, y0 = labels[k].xyann
                        labels[k].xyann = (x0, y0 + sign * step)
                else:
                    left, right = (i, j) if (a.x0 + a.x1) <= (b.x0 + b.x1) else (j, i)
                    step = (dx / 2 + 1.5) * to_pt
                    for k, sign in ((left, -1), (right, +1)):
                        x0, y0 = labels[k].xyann
                        labels[k].xyann = (x0 + sign * step, y0)
                for k in (i, j):  # only these two moved
                    boxes[k] = labels[k].get_window_extent(renderer)
        if not moved:
            return


# -- compare ---------------------------------------------------------------------
def _value(obj, metric: str):
    """``metric`` of a Plan (from ``predicted``, else ``solver``) or an Evaluation."""
    src = getattr(obj, "predicted", obj)
    if src is None:
        raise ValueError("plan has no predicted figures: pass plans returned by planner.plan(...)")
    v = getattr(src, metric, None)
    if v is None and getattr(obj, "solver", None) is not None:
        v = getattr(obj.solver, metric, None)
    if v is None and metric == "bound_ratio":
        lb, t = getattr(src, "lower_bound_s", None), getattr(src, "iteration_time_s", None)
        v = t / lb if lb and t is not None else None
    return None if v is None else float(v)


def compare(results, metric: str = "iteration_time_s", ax=None, labels: Sequence[str] | None = None,
            estimate: bool = True):
    """Bar chart of several plans' ``metric``; returns the Figure.

    ``results``: a dict name -> Plan, or a list of plans (as returned by
    ``planner.plan``, i.e. with ``predicted`` set; ``planner.evaluate``
    results are accepted too).  ``metric``: a field of ``plan.predicted``
    (``iteration_time_s``, ``estimate_s``, ``throughput_tokens_per_s``,
    ``cost_per_iteration``, ``bound_ratio``) or of ``plan.solver``
    (``gap``, ``time_s``).  Each bar is labelled with its value; for the
    iteration time a diamond marks the estimate ``T_est`` (``estimate``),
    and for a time metric a dashed line marks the lower bound.
    """
    if isinstance(results, Mapping):
        names, items = list(results.keys()), list(results.values())
    else:
        items = list(results)
        names = None
    if labels is not None:
        names = list(labels)
        if len(names) != len(items):
            raise ValueError(f"{len(names)} labels for {len(items)} results")
    if names is None:
        names = []
        for i, p in enumerate(items):
            info = getattr(p, "solver", None)
            names.append(info.name if info is not None else f"plan {i}")
        counts = Counter(names)
        if any(c > 1 for c in counts.values()):
            names = [f"{n} #{i}" if counts[n] > 1 else n for i, n in enumerate(names)]
    if not items:
        raise ValueError("nothing to compare")
    values = [_value(p, metric) for p in items]
    if all(v is None for v in values):
        raise ValueError(f"no result has a value for {metric!r}")

    fig, ax = _figure_ax(ax, (max(4.5, 1.3 * len(items) + 2), 4.5))
    x = list(range(len(items)))
    heights = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
    bars = ax.bar(x, heights, width=0.6, color=[f"C{i % 10}" for i in x], zorder=2)
    for patch, name in zip(bars.patches, names):
        patch.set_gid("plan")
        patch.set_label(str(name))
    shown_est = estimate and metric == "iteration_time_s"
    est_of = [_value(p, "estimate_s") if shown_est else None for p in items]
    for xi, v, h, e in zip(x, values, heights, est_of):
        # above the bar and above the estimate's diamond (7 pt tall), never under it
        top, lift = (max(h, e), 3 + 4.5) if e is not None and math.isfinite(e) else (h, 3)
        ax.annotate(_fmt_value(v, metric), (xi, top), xytext=(0, lift), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8, gid="value-label")

    handles, legend_labels = [], []
    if estimate and metric == "iteration_time_s":
        est = [_value(p, "estimate_s") for p in items]
        pts = [(xi, e) for xi, e in zip(x, est) if e is not None and math.isfinite(e)]
        if pts:
            (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="none", marker="D",
                              markersize=7, markerfacecolor="white", markeredgecolor="black",
                              zorder=4, gid="estimate")
            handles.append(line)
            legend_labels.append("estimate T_est")
    if metric in _TIME_METRICS:
        lbs = [getattr(getattr(p, "predicted", p), "lower_bound_s", None) for p in items]
        distinct = sorted({round(lb, 12) for lb in lbs if lb})
        if len(distinct) == 1:
            line = ax.axhline(distinct[0], color="black", linestyle="--", linewidth=1, zorder=3,
                              gid="lower-bound")
            handles.append(line)
            legend_labels.append(f"lower bound {_fmt_time(distinct[0])}")
        else:  # plans of different instances: one bound per bar
            first = True
            for xi, lb in zip(x, lbs):
                if lb:
                    (line,) = ax.plot([xi - 0.4, xi + 0.4], [lb, lb], color="black", linestyle="--",
                                      linewidth=1, zorder=3, gid="lower-bound")
                    if first:
                        handles.append(line)
                        legend_labels.append("lower bound")
                        first = False
    ax.set_xticks(x, [printable(str(n)) for n in names])
    ax.set_ylabel(_METRIC_NAMES.get(metric, metric))
    ax.set_title(f"plans compared: {_METRIC_NAMES.get(metric, metric).split(' (')[0]}", fontsize=10)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.5, zorder=0)
    ax.margins(y=0.15)
    ax.set_ylim(bottom=0)
    if handles:
        ax.legend(handles, legend_labels, fontsize=8, loc="lower right", framealpha=0.9)
    return fig


def _iter_gid(ax, gid: str) -> Iterable:
    """Artists of ``ax`` whose gid is ``gid`` (patches, lines, texts, collections)."""
    for artist in (*ax.patches, *ax.lines, *ax.texts, *ax.collections):
        if artist.get_gid() == gid:
            yield artist


__all__ = ["compare", "draw", "gantt", "pipeline_flows"]


register("gantt", gantt)
register("draw", draw)
