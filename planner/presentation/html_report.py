"""A plan as one self-contained HTML page, to share (``planner report``).

The page holds the summary (the figures of ``planner evaluate``, the same
rows as the terminal summary, and the evaluator's JSON figures), the
solver's status, bound and gap when the plan file carries them, the stage
and GPU tables, the instance's domains and links, the Gantt chart and the network map
(:mod:`planner.presentation.plot`, inline SVG) and what
:func:`planner.presentation.explain.explain` finds.

Self-contained: CSS inline, pictures inline SVG, no script, no external
resource at all; a Content-Security-Policy in the page forbids the browser
to load any (``default-src 'none'``), so it opens offline and an injected
tag could not fetch anything either.  Every string that comes from a file
(instance, domain and model names, the description, solver fields) is
escaped by the template (jinja2 with autoescape); the SVG pictures are
written by matplotlib, which escapes their text as XML.

Example
-------
>>> page = render(instance, plan)                                   # doctest: +SKIP
>>> open("report.html", "w", encoding="utf-8").write(page)          # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
from importlib import metadata
import math
import re

from jinja2 import Environment
from markupsafe import Markup

from ..problem.errors import InfeasibleError
from ..scoring.bounds import lower_bound
from ..scoring.evaluator import Evaluator
from ..problem.plan import claims_check
from .report import gpu_table, schedule_used, shown_gap, stage_columns, stage_table, summary_rows
from .display import status_text

# the only rule a page needs: nothing from outside, inline styles (matplotlib's SVG uses style attributes)
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

# the opening of every page (a Jinja template: ``csp``, ``version``), then its <title>, then STYLE
HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="planner {{ version }}">
"""

# the look of every page
STYLE = """<style>
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: #1d1f23; background: #fafafa; margin: 0; }
main { max-width: 1100px; margin: 0 auto; padding: 1.5em 2em 3em; background: #fff; }
h1 { font-size: 1.6em; margin: 0 0 .2em; }
h2 { font-size: 1.25em; margin: 1.8em 0 .5em; padding-bottom: .2em; border-bottom: 2px solid #e3e5e8; }
p.sub { color: #555; margin: 0 0 1em; }
nav { font-size: .9em; margin: .5em 0 1em; }
nav a { margin-right: 1em; color: #1f5fa8; text-decoration: none; }
table { border-collapse: collapse; margin: .4em 0 1em; font-variant-numeric: tabular-nums; }
th, td { padding: .3em .8em; border-bottom: 1px solid #e3e5e8; text-align: left; vertical-align: top; }
th { background: #f2f4f7; font-weight: 600; }
td.num, th.num { text-align: right; }
table.kv th { background: none; width: 9em; }
tr.bad th, tr.bad td { color: #b3261e; font-weight: 600; white-space: pre-line; }
.status { display: inline-block; padding: .05em .6em; border-radius: 1em; background: #e7f0fa; }
.status.optimal { background: #dff3e4; } .status.infeasible { background: #fbe3e1; }
figure { margin: .5em 0 1.5em; }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { color: #555; font-size: .9em; margin-top: .4em; }
ul.findings li { margin: .25em 0; }
details summary { cursor: pointer; color: #1f5fa8; margin: .3em 0; }
code { font-size: .92em; }
footer { color: #777; font-size: .85em; margin-top: 3em; }
</style>
"""

TEMPLATE = HEAD + """<title>Plan for {{ inst.name }}{% if plan.solver %} ({{ plan.solver.name }}){% endif %}</title>
""" + STYLE + """</head>
<body>
<main>
<header>
<h1>Plan for {{ inst.name }}</h1>
<p class="sub">{{ inst.description or (inst.domains|length ~ " domains, " ~ inst.total_gpus ~ " GPUs") }}</p>
<nav><a href="#summary">Summary</a><a href="#solver">Solver</a><a href="#stages">Stages</a>
<a href="#gpus">GPUs</a><a href="#instance">Instance</a><a href="#gantt">Schedule</a><a href="#map">Network</a><a href="#explain">What limits it</a></nav>
</header>

<section id="summary">
<h2>Summary</h2>
<table class="kv">
{% for label, text in summary %}<tr{% if label == "INFEASIBLE" %} class="bad"{% endif %}><th>{{ label }}</th><td>{{ text }}</td></tr>
{% endfor %}</table>
<details><summary>Every figure of <code>planner evaluate --json</code></summary>
<table id="figures">
<tr><th>figure</th><th>value</th></tr>
{% for key, value in figures %}<tr data-key="{{ key }}"><th>{{ key }}</th><td data-value="{{ value }}">{{ value }}</td></tr>
{% endfor %}</table>
</details>
</section>

<section id="solver">
<h2>Solver</h2>
{% if solver %}<table class="kv">
{% for key, value in solver %}<tr data-key="{{ key }}"><th>{{ key }}</th><td>{% if key == "status" %}<span class="status {{ value }}">{{ value }}</span>{% else %}{{ value }}{% endif %}</td></tr>
{% endfor %}</table>
{% if solver[1][0] == "status" %}<p class="sub">Bound and gap are on the solver's objective (the estimate <code>T_est</code>, or its cost
counterpart); gap = (objective &minus; bound) / objective.</p>{% endif %}
{% else %}<p>The plan file carries no solver information (status, bound, gap).</p>{% endif %}
</section>

<section id="stages">
<h2>Stages</h2>
<table>
<tr>{% for c in stage_columns %}<th{% if c in numeric %} class="num"{% endif %}>{{ c }}</th>{% endfor %}</tr>
{% for row in stages %}<tr>{% for c in row %}<td{% if stage_columns[loop.index0] in numeric %} class="num"{% endif %}>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table>
</section>

<section id="gpus">
<h2>GPUs per domain</h2>
<table>
<tr><th>domain</th>{% if typed %}<th>GPU type</th>{% endif %}<th class="num">used</th><th class="num">available</th></tr>
{% for name, used, avail in gpus %}<tr><td>{{ name }}</td>{% if typed %}<td>{{ inst.domain_gpu(name).name }}</td>{% endif %}<td class="num">{{ used }}</td><td class="num">{{ avail }}</td></tr>
{% endfor %}</table>
</section>

<section id="instance">
<h2>The instance</h2>
<p>{% if typed %}{{ inst.gpu_counts }} ({% for u in inst.types_used %}{% set g = inst.gpu_types[u] %}{{ g.name }}: {{ "%g"|format(g.peak_tflops) }} TFLOP/s,
{{ "%g"|format(g.memory_gb) }} GB, mfu {{ "%g"|format(g.mfu) }}{% if not loop.last %}; {% endif %}{% endfor %}){% else %}{% set g = inst.gpu_types[inst.types_used[0]] %}{{ inst.total_gpus }} x {{ g.name }} ({{ "%g"|format(g.peak_tflops) }} TFLOP/s,
{{ "%g"|format(g.memory_gb) }} GB, mfu {{ "%g"|format(g.mfu) }}){% endif %} in {{ inst.domains|length }} domains;
model {{ inst.workload.model.name }}, global batch {{ inst.workload.global_batch_size }} x {{ inst.workload.seq_len }}
tokens; objective {{ inst.options.objective }}.</p>
<table id="domains">
<tr><th>domain</th><th class="num">GPUs</th>{% if typed %}<th>GPU type</th>{% endif %}<th class="num">per node</th><th class="num">inside Gbit/s</th><th class="num">price/GPU-h</th><th>region</th></tr>
{% for d in inst.domains %}<tr><td>{{ d.name }}</td><td class="num">{{ d.gpus }}</td>{% if typed %}<td>{{ inst.domain_gpu(d.name).name }}</td>{% endif %}<td class="num">{{ d.gpus_per_node }}</td><td class="num">{{ "%g"|format(d.intra_bandwidth_gbps) }}</td><td class="num">{{ "%g"|format(d.price_per_gpu_hour) }}</td><td>{{ d.region }}</td></tr>
{% endfor %}</table>
{% if inst.links %}<details{% if inst.links|length <= 12 %} open{% endif %}><summary>{{ inst.links|length }} WAN links</summary>
<table id="links">
<tr><th>link</th><th class="num">Gbit/s each way</th><th class="num">latency ms, one way</th></tr>
{% for l in inst.links %}<tr><td>{{ l.a }} &ndash; {{ l.b }}</td><td class="num">{{ "%g"|format(l.bandwidth_gbps) }}</td><td class="num">{{ "%g"|format(l.latency_ms) }}</td></tr>
{% endfor %}</table></details>{% endif %}
</section>

<section id="gantt">
<h2>Schedule of one iteration</h2>
{% if gantt %}<figure>{{ gantt }}
<figcaption>One simulated iteration: blue forward, orange backward micro-batches; transfers between
stages solid while sending, hatched in flight; purple gradient synchronisation; red outlines the
critical path; white space is idle time.{% if classes > 1 %} The replicas run on {{ classes }} rows of GPU types
(classes), each drawn at its own types' speeds as the evaluator simulates it; the title names the row that
binds (the longest simulated iteration, where the critical path runs).{% endif %}</figcaption></figure>
{% else %}<p>{{ gantt_missing }}</p>{% endif %}
</section>

<section id="map">
<h2>Network and the plan's flows</h2>
{% if network_map %}<figure>{{ network_map }}
<figcaption>Domains (area grows with GPUs; dark: used by the plan) and WAN links labelled
bandwidth / one-way latency; orange bands are the links the pipelines cross.</figcaption></figure>
{% endif %}
</section>

<section id="explain">
<h2>What limits the plan</h2>
{% if why %}<p><strong>{{ why.head }}</strong></p>
<ul class="findings">{% for line in why.findings %}<li>{{ line }}</li>{% endfor %}</ul>
{% if why.sensitivities %}<table id="sensitivities">
<tr><th>resource relaxed by 10%</th><th class="num">iteration (s)</th><th class="num">shorter by</th></tr>
{% for s in why.sensitivities %}<tr><td>{{ s.resource }}</td><td class="num">{{ "%.6g"|format(s.iteration_time_s) }}</td><td class="num">{{ "%.2f"|format(100 * s.gain) }}%</td></tr>
{% endfor %}</table>{% endif %}
{% if why.links %}<table id="utilisation">
<tr><th>WAN link</th><th class="num">busy share of the iteration</th></tr>
{% for name, u in why.links %}<tr><td>{{ name }}</td><td class="num">{{ u }}</td></tr>
{% endfor %}</table>{% endif %}
{% else %}<p>{{ why_missing }}</p>{% endif %}
</section>

<footer>Made by planner {{ version }} from {{ instance_file }} and {{ plan_file }}. The figures are
those of the exact simulation of the performance model (docs/model.md); the page needs no network.</footer>
</main>
</body>
</html>
"""

_env = Environment(autoescape=True, trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=True)
_template = _env.from_string(TEMPLATE)


def _value(v) -> str:
    """A JSON figure as ``planner evaluate --json`` prints it (lists and objects as JSON)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "null"
    return json.dumps(v, allow_nan=False) if not isinstance(v, str) else v


_CPSAT_SCHEDULE = ("schedule_status", "schedule_makespan_s", "schedule_bound_s", "schedule_gap")


def _solver_rows(instance, plan) -> list[tuple[str, str]]:
    """The solver block as (field, text) rows: every field while the claims hold
    (:func:`planner.problem.plan.claims_check`), else the name, the time and
    ``claims``, why none is shown.  CP-SAT's schedule figures only when the plan
    runs that schedule (else ``schedule_not_kept`` says why)."""
    info = plan.solver
    if info is None:
        return []
    why = claims_check(instance, plan)
    if why is not None:
        return [("name", info.name), ("time_s", f"{info.time_s:.3g}"),
                ("claims", f"solver claims not shown: {why[1]}")]
    rows = [("name", info.name), ("status", status_text(info.status, info.requested_gap))]
    shown = {"objective": info.objective, "bound": info.bound,
             "gap": shown_gap(info.objective, info.bound, info.gap)}  # the gap of the two beside it
    for key in ("objective", "bound", "gap"):
        v = shown[key]
        rows.append((key, "-" if v is None else (f"{v:.2%}" if key == "gap" else f"{v:.6g}")))
    rows.append(("time_s", f"{info.time_s:.3g}"))
    for key in ("requested_gap", "estimate_status", "estimate_objective", "estimate_bound", "estimate_gap",
                "estimate_family"):  # a search's claims on T_est, over estimate_family only
        if getattr(info, key) is not None:
            rows.append((key, _short(getattr(info, key))))
    extra = dict(info.model_extra or {})
    if extra.get("schedule_makespan_s") is not None and schedule_used(plan) != "cpsat":
        extra = {k: v for k, v in extra.items() if k not in _CPSAT_SCHEDULE}
        extra["schedule_not_kept"] = (f"CP-SAT's schedule ({info.model_extra.get('schedule_status')}): "
                                      f"{extra.get('schedule_not_kept') or 'it simulates no faster'}")
    for key, v in extra.items():
        if v is not None:
            rows.append((key, _short(v)))
    return rows


def _short(v, in_list: bool = False) -> str:
    """A solver field for people: floats to 4 significant digits, a table as
    ``key: value; ...``, a list as ``a, b`` (a list inside one as ``a b``).

    >>> _short({"milp": "optimal", "simulated_s": [["greedy", 0.073663], ["anneal", 0.0662]]})
    'milp: optimal; simulated_s: greedy 0.07366, anneal 0.0662'
    """
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_short(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return (" " if in_list else ", ").join(_short(x, True) for x in v)
    return str(v)


def _svg(fig) -> Markup:
    """A matplotlib figure as inline SVG: text drawn as glyph paths (``svg.fonttype``
    path: the picture looks the same on a machine without matplotlib's font, whose
    metrics placed the labels), ids stable, the XML prolog, DOCTYPE and RDF metadata
    left out (they name w3.org and purl.org addresses, which an inline SVG does not
    need), and so are the comments repeating each label."""
    import matplotlib
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "planner"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r"[ \t]*<!--.*?-->\n?", "", text, flags=re.S)  # the labels again, as comments: not needed
    return Markup(text)


def version() -> str:
    """The installed planner's version, or "(not installed)" for a checkout on PYTHONPATH."""
    try:
        return metadata.version("planner")
    except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        return "(not installed)"


def plan_parts(instance, plan) -> dict:
    """The parts of the page of ``plan`` on ``instance`` (the template's names): ``summary``
    (the terminal summary's rows), ``figures`` (``planner evaluate --json``), ``solver``,
    ``stage_columns``, ``stages``, ``gpus``, ``gantt`` and ``network_map`` (inline SVG, or
    None with ``gantt_missing``), ``why`` (what :func:`~planner.presentation.explain.explain`
    finds, or None with ``why_missing``), ``classes``, ``typed`` and ``feasible``.
    :func:`render` and the multi-plan page (one job on its slice) show them."""
    from . import plot
    from .explain import explain

    plot._pyplot()  # chooses "Agg" without a display
    scored = Evaluator(instance, plan)
    ev = scored.evaluate(lower_bound_s=lower_bound(instance).value)
    figures = [(k, _value(v)) for k, v in ev.to_dict().items()]
    gantt = network_map = why = None
    gantt_missing = why_missing = ""
    if ev.feasible:
        gantt = _svg(plot.gantt(instance, plan))
        try:
            e = explain(instance, plan)
        except InfeasibleError as err:  # not expected: evaluate said feasible
            why_missing = str(err)
        else:
            lines = e.lines()
            why = {"head": lines[0],  # the solver's line is in the summary and the solver section already
                   "findings": [l.strip() for l in lines[1:] if not l.startswith(("  ", "Solver "))
                                and not l.endswith(":")],
                   "sensitivities": e.sensitivities[:12],
                   "links": [(k, f"{v:.0%}") for k, v in sorted(e.link_utilisation.items(), key=lambda kv: -kv[1])]}
    else:
        gantt_missing = "The plan is infeasible (see the summary): there is no schedule to draw."
        why_missing = "The plan is infeasible (see the summary): nothing to explain until it is fixed."
    network_map = _svg(plot.draw(instance, plan))
    return dict(summary=summary_rows(instance, plan, ev), figures=figures, solver=_solver_rows(instance, plan),
                stage_columns=stage_columns(instance), typed=instance.heterogeneous,
                numeric={"stage", "compute/mb", "mem/GPU", "grad sync"}, stages=stage_table(instance, plan, ev),
                gpus=gpu_table(instance, ev), gantt=gantt, gantt_missing=gantt_missing, network_map=network_map,
                why=why, why_missing=why_missing, classes=scored.fig.classes, feasible=ev.feasible)


def render(instance, plan, instance_file: str = "", plan_file: str = "") -> str:
    """The report of ``plan`` on ``instance`` as one HTML document (text).

    An infeasible plan still gets a page: its violations in the summary, the
    map, and no schedule or explanation (there is none to give)."""
    parts = plan_parts(instance, plan)
    parts.pop("feasible")
    return _template.render(csp=CSP, version=version(), inst=instance, plan=plan, **parts,
                            instance_file=instance_file or instance.name, plan_file=plan_file or "the plan")
