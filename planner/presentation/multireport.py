"""A multi-plan as one self-contained HTML page (``planner multireport``, SPEC v3 section 10).

The page holds the summary of every job (:func:`planner.presentation.multiview.summary_html`:
multievaluate's figures, the objective, bound, gap, master LP, status and sharing), the
map coloured by job (:func:`~planner.presentation.multiview.draw_jobs`), every figure of
``planner multievaluate --json``, and one section per admitted job: the single-job
report's parts (:func:`planner.presentation.html_report.plan_parts`) for its plan on its
slice (``minst.slice_instance(job, *mplan.allocation(minst, job))``): the summary rows,
the solver, the stages, the GPUs, the Gantt chart, the slice's map and what limits the
plan.  The per-job figures are those of reserved sharing (the slice), whatever
``sharing`` the summary uses.

Self-contained as :mod:`~planner.presentation.html_report`'s page: CSS inline, pictures
inline SVG, no script, the same Content-Security-Policy; every string from a file
escaped by the template.

>>> page = render_multi(minst, mplan)                             # doctest: +SKIP
"""

from __future__ import annotations


from jinja2 import Environment
from markupsafe import Markup

from ..problem.errors import InputError
from .html_report import CSP, HEAD, STYLE, _svg, _value, plan_parts, version
from .multiview import draw_jobs, job_colour, summary_html

MULTI_TEMPLATE = HEAD + """<title>Multi-plan for {{ minst.name }} ({{ minst.jobs|length }} jobs)</title>
""" + STYLE + """</head>
<body>
<main>
<header>
<h1>Multi-plan for {{ minst.name }}</h1>
<p class="sub">{{ minst.description or (minst.domains|length ~ " domains, " ~ minst.total_gpus ~ " GPUs") }};
{{ minst.jobs|length }} jobs, objective {{ ev.objective }}, {{ ev.sharing }} sharing</p>
<nav><a href="#summary">Summary</a><a href="#map">Map</a><a href="#figures-section">Figures</a>
{% for job in jobs %}<a href="#{{ job.id }}">{{ job.name }}</a>{% endfor %}</nav>
</header>

<section id="summary">
<h2>Summary</h2>
{{ summary }}
<p class="sub">Every figure is <code>planner multievaluate</code>'s ({{ ev.sharing }} sharing): iteration s is
T_eff (T_in beside it when a job syncs every H steps), tokens/s effective tokens per second, rho = tokens/s over
the job's reference (alone on the whole cluster), rho_share over its equal-share figure, completion =
iterations &times; T_eff.</p>
</section>

<section id="map">
<h2>The cluster, coloured by job</h2>
<figure>{{ network_map }}
<figcaption>Each domain (area grows with GPUs) is a pie of its GPUs per job, light blue where free; each WAN
link (labelled bandwidth / one-way latency) carries a bar split by the jobs' shares, grey where
unallocated.</figcaption></figure>
</section>

<section id="figures-section">
<h2>Figures</h2>
<details><summary>Every figure of <code>planner multievaluate --json</code></summary>
<table id="figures">
<tr><th>job</th>{% for key in job_keys %}<th>{{ key }}</th>{% endfor %}</tr>
{% for row in job_figures %}<tr data-job="{{ row[0] }}"><th>{{ row[0] }}</th>{% for key, value in row[1] %}<td data-key="{{ key }}" data-value="{{ value }}">{{ value }}</td>{% endfor %}</tr>
{% endfor %}</table>
<table class="kv" id="objective-figures">
{% for key, value in figures %}<tr data-key="{{ key }}"><th>{{ key }}</th><td data-value="{{ value }}">{{ value }}</td></tr>
{% endfor %}</table>
</details>
</section>

{% for job in jobs %}
<section id="{{ job.id }}" class="job">
<h2><span style="display:inline-block;width:.8em;height:.8em;margin-right:.4em;background:{{ job.colour }}"></span>Job {{ job.name }}</h2>
{% if not job.admitted %}<p>Not admitted: it holds nothing and has no plan.</p>
{% else %}{% set p = job.parts %}
<p class="sub">Its plan on its slice: {{ job.slice_text }}; {{ job.spec_text }}.</p>
<table class="kv">
{% for label, text in p.summary %}<tr{% if label == "INFEASIBLE" %} class="bad"{% endif %}><th>{{ label }}</th><td>{{ text }}</td></tr>
{% endfor %}</table>
{% if p.solver %}<details><summary>Solver of the job's plan</summary><table class="kv">
{% for key, value in p.solver %}<tr data-key="{{ key }}"><th>{{ key }}</th><td>{{ value }}</td></tr>
{% endfor %}</table></details>{% endif %}
<h3>Stages</h3>
<table class="stages">
<tr>{% for c in p.stage_columns %}<th{% if c in p.numeric %} class="num"{% endif %}>{{ c }}</th>{% endfor %}</tr>
{% for row in p.stages %}<tr>{% for c in row %}<td{% if p.stage_columns[loop.index0] in p.numeric %} class="num"{% endif %}>{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table>
<h3>GPUs per domain</h3>
<table class="gpus">
<tr><th>domain</th><th class="num">used</th><th class="num">allocated</th></tr>
{% for name, used, avail in p.gpus %}<tr><td>{{ name }}</td><td class="num">{{ used }}</td><td class="num">{{ avail }}</td></tr>
{% endfor %}</table>
<h3>Schedule of one iteration</h3>
{% if p.gantt %}<figure>{{ p.gantt }}<figcaption>One simulated iteration on the slice: blue forward, orange
backward micro-batches; transfers solid while sending, hatched in flight; purple gradient synchronisation; red
the critical path.</figcaption></figure>{% else %}<p>{{ p.gantt_missing }}</p>{% endif %}
<h3>The slice and the plan's flows</h3>
<figure>{{ p.network_map }}<figcaption>The job's slice: its GPUs per domain, each link at its share of the
bandwidth (links of share 0 removed); orange bands are the links its pipelines cross.</figcaption></figure>
<h3>What limits the plan</h3>
{% if p.why %}<p><strong>{{ p.why.head }}</strong></p>
<ul class="findings">{% for line in p.why.findings %}<li>{{ line }}</li>{% endfor %}</ul>
{% else %}<p>{{ p.why_missing }}</p>{% endif %}
{% endif %}
</section>
{% endfor %}

<footer>Made by planner {{ version }} from {{ instance_file }} and {{ plan_file }}. The figures are those of the
exact simulation of the performance model (docs/model.md, SPEC section 10); the page needs no network.</footer>
</main>
</body>
</html>
"""

_env = Environment(autoescape=True, keep_trailing_newline=True)
_template = _env.from_string(MULTI_TEMPLATE)


def render_multi(minst, mplan, sharing: str = "reserved", instance_file: str = "", plan_file: str = "") -> str:
    """The report of ``mplan`` on ``minst`` as one HTML document (text); see the module
    docstring.  An infeasible multi-plan still gets a page (its violations in the summary);
    a job whose plan does not fit its slice shows its violations in its own section."""
    from ..scoring.multievaluate import multievaluate
    from . import plot

    plot._pyplot()
    ev = multievaluate(minst, mplan, sharing)
    figs = {f.name: f for f in ev.jobs}
    keys = [k for k in ev.jobs[0].to_dict() if k != "name"]
    jobs = []
    for i, job in enumerate(minst.jobs):
        a = mplan.job(job.name)
        entry = {"id": f"job{i}", "name": job.name, "colour": job_colour(i), "admitted": a.admitted}
        if a.admitted:
            gpus, links, ups = mplan.allocation(minst, job.name)
            if figs[job.name].evaluation is None:  # a slice its plan cannot run on (no route): say why
                said = [v for v in ev.violations if v.startswith(f"job {job.name}:")]
                entry["parts"] = _broken("; ".join(said) or "its plan cannot be scored on its slice")
            else:
                try:
                    entry["parts"] = plan_parts(minst.slice_instance(job.name, gpus, links, ups), a.plan)
                except InputError as err:
                    entry["parts"] = _broken(str(err))
            shares = ", ".join(f"{k} {v:.3g}" for k, v in links.items() if v) or "no WAN link"
            entry["slice_text"] = (", ".join(f"{d} {g} GPUs" for d, g in gpus.items() if g) + "; " + shares)
            entry["spec_text"] = (f"model {job.model.name}, batch {job.global_batch_size} x {job.seq_len}, "
                                  f"{job.iterations:,} iterations, weight {job.weight:g}"
                                  + ("" if job.deadline_hours is None else f", deadline {job.deadline_hours:g} h"))
        jobs.append(entry)
    figures = [(k, _value(v)) for k, v in ev.to_dict().items() if k != "jobs"]
    job_figures = [(f.name, [(k, _value(v)) for k, v in f.to_dict().items() if k != "name"]) for f in ev.jobs]
    return _template.render(
        csp=CSP, version=version(), minst=minst, ev=ev,
        summary=Markup(summary_html(minst, mplan, ev)), network_map=_svg(draw_jobs(minst, mplan, ev)),
        figures=figures, job_keys=keys, job_figures=job_figures, jobs=jobs,
        instance_file=instance_file or minst.name, plan_file=plan_file or "the multi-plan")


def _broken(message: str) -> dict:
    """The parts of a job whose plan cannot be shown on its slice: the reason, nothing drawn."""
    return dict(summary=[("INFEASIBLE", message)], solver=[], stage_columns=(), numeric=set(), stages=[], gpus=[],
                gantt=None, gantt_missing="Nothing to draw: " + message, network_map="", why=None,
                why_missing=message)


__all__ = ["MULTI_TEMPLATE", "render_multi"]
