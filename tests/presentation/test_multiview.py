"""What a person sees of a multi-plan (SPEC 10): the summary's numbers are multievaluate's to
the printed precision, the notebook and print views, the map coloured by job (counted
through its artists), and the multi-plan report page (read without a browser)."""

import json
import math
import re
from decimal import Decimal
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import planner  # noqa: E402
from planner.cli import main  # noqa: E402
from planner.presentation.html_report import CSP  # noqa: E402
from planner.presentation.multireport import render_multi  # noqa: E402
from planner.presentation.multiview import (columns, draw_jobs, job_colour, job_rows,  # noqa: E402
                                            multiplan_text, objective_rows)
from planner.presentation.report import summary_rows  # noqa: E402
from planner.problem.multiplan import MultiPlan  # noqa: E402

from test_html_report import Dom, external_references  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "two-jobs.multiplan.json"
NUMERIC = {"T_in s": "iteration_time_s", "iteration s": "effective_time_s", "tokens/s": "throughput_tokens_per_s",
           "rho": "rho", "rho_share": "rho_share", "completion h": "completion_s", "cost": "cost"}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def two():
    minst = planner.load_multi_instance("two-jobs")
    return minst, planner.load_multiplan(EXAMPLE, minst)


def example(**changes) -> dict:
    data = json.loads(EXAMPLE.read_text())
    data.update(changes)
    return data


def half_unit(cell: str) -> float:
    """Half a unit of the last digit printed in ``cell`` ("0.1381" -> 5e-5, "59,315" -> 0.5,
    "1.2e+03" -> 50)."""
    d = Decimal(cell.replace(",", ""))
    return 0.5 * 10.0 ** d.as_tuple().exponent


def check_rows(minst, mp, ev, rows, cols):
    """Every number of ``rows`` is multievaluate's to the printed precision, and the allocation
    cells are the multi-plan's allocation."""
    assert [r[0] for r in rows] == list(minst.job_names)
    for row, f in zip(rows, ev.jobs):
        cells = dict(zip(cols, row))
        assert cells["admitted"] == ("yes" if f.admitted else "no")
        for col, key in NUMERIC.items():
            if col not in cells:
                continue
            want = getattr(f, key)
            if want is None:
                assert cells[col] == "-", col
                continue
            want = want / 3600 if col == "completion h" else want
            got = float(cells[col].replace(",", ""))
            assert abs(got - want) <= half_unit(cells[col]) * (1 + 1e-9), (f.name, col, got, want)
            assert abs(got - want) <= 5e-4 * abs(want) + 0.5, (f.name, col)  # 4 digits at least
        job = minst.job(f.name)
        assert cells["deadline"] == ("none" if job.deadline_hours is None else "met" if f.deadline_met else "missed")
        if not f.admitted:
            assert cells["GPUs"] == cells["link shares"] == "-"
            continue
        gpus, links, _ = mp.allocation(minst, f.name)
        parsed = dict(kv.split("=") for kv in cells["GPUs"].split())
        assert {d: int(g) for d, g in parsed.items()} == {d: g for d, g in gpus.items() if g}
        parsed = dict(kv.split("=") for kv in cells["link shares"].split()) if cells["link shares"] != "-" else {}
        assert set(parsed) == {k for k, v in links.items() if v}
        for k, v in parsed.items():
            assert abs(float(v) - links[k]) <= 5e-3 * links[k]


# -- the summary ----------------------------------------------------------------------------
def test_summary_numbers_are_multievaluates_to_the_printed_precision(two):
    minst, mp = two
    for sharing in ("reserved", "shared"):
        ev = planner.multievaluate(minst, mp, sharing)
        cols = columns(mp)
        assert "T_in s" not in cols  # no outer sync: T_in = T_eff, one column
        check_rows(minst, mp, ev, job_rows(minst, mp, ev), cols)
        lines = dict(objective_rows(mp, ev))
        value = float(lines["objective"].split()[1])
        assert lines["objective"].startswith("maxmin ") and math.isclose(value, ev.objective_value, rel_tol=1e-5)
        w = {j.name: j.weight for j in minst.jobs}  # maxmin, independently: min rho / w
        assert math.isclose(value, min(f.rho / w[f.name] for f in ev.jobs), rel_tol=1e-5)
        assert lines["bound"] == lines["gap"] == lines["master_lp"] == "none"  # the example has no solver block
        assert lines["sharing"].startswith(sharing)


def test_cli_multievaluate_prints_the_table(two):
    minst, mp = two
    ev = planner.multievaluate(minst, mp)
    r = CliRunner().invoke(main, ["multievaluate", "two-jobs", str(EXAMPLE)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lines = [l for l in r.output.splitlines() if l.startswith("│")]
    rows = [tuple(c.strip() for c in l.strip("│").split("│")) for l in lines]
    check_rows(minst, mp, ev, rows, columns(mp))
    assert re.search(r"objective\s+maxmin 0\.16", r.output) and "status" in r.output


def test_outer_sync_adds_T_in_and_the_figures_still_match(tmp_path):
    text = (ROOT / "instances" / "two-jobs.toml").read_text().replace(
        'multi_objective = "maxmin"', 'multi_objective = "maxmin"\ndp_sync = ["every_step", "diloco"]\ndp_sync_H = [10]')
    path = tmp_path / "two-sync.toml"
    path.write_text(text)
    minst = planner.load_multi_instance(path)
    data = example()
    data["jobs"][0]["plan"]["dp_sync"] = {"mode": "diloco", "H": 10}  # small: 2 replicas, 2 groups
    mp = MultiPlan.from_dict(data).bind(minst)
    ev = planner.multievaluate(minst, mp)
    assert ev.feasible, ev.violations
    small = ev.jobs[0]
    assert small.effective_time_s > small.iteration_time_s  # the outer sync costs T_eff > T_in
    cols = columns(mp)
    assert cols.index("T_in s") == cols.index("iteration s") - 1
    check_rows(minst, mp, ev, job_rows(minst, mp, ev), cols)


def test_a_job_left_out_shows_dashes_and_no_figures(two):
    minst, _ = two
    data = example(objective="deadline")
    data["jobs"][1]["admitted"] = False
    mp = MultiPlan.from_dict(data)
    ev = planner.multievaluate(minst, mp)
    assert ev.feasible
    rows = job_rows(minst, mp, ev)
    check_rows(minst, mp, ev, rows, columns(mp))
    assert rows[1][1:4] == ("no", "-", "-") and rows[1][-1] == "-"
    assert dict(objective_rows(mp, ev))["objective"].startswith("deadline 1 ")  # small meets its 2 h: w = 1


# -- the views --------------------------------------------------------------------------------
def test_print_and_notebook_views(two):
    minst, mp = two
    ev = planner.multievaluate(minst, mp)
    text = str(mp)  # bound by load_multiplan
    assert text == multiplan_text(mp, minst)
    for row in job_rows(minst, mp, ev):
        assert all(c in text for c in row)
    page = mp._repr_html_()
    for i, row in enumerate(job_rows(minst, mp, ev)):
        assert f'data-job="{row[0]}"' in page and job_colour(i) in page
        assert all(c.replace("&", "&amp;") in page for c in row[4:])
    # unbound (read without the instance): the allocation, and how to get the figures
    bare = MultiPlan.from_json(EXAMPLE.read_text())
    assert bare == mp and bare.shown_on() is None  # binding is no field: equal, and not written
    assert json.loads(mp.to_json()) == json.loads(bare.to_json())
    assert "small: GPUs alpha=8 gamma=12" in str(bare) and "bind(minst)" in str(bare)
    assert "<li>wide: GPUs alpha=8 beta=8" in bare._repr_html_()
    with pytest.raises(ValueError, match="instance"):
        bare.draw()


# -- the map ------------------------------------------------------------------------------------
def gid(ax, name):
    return [a for a in (*ax.patches, *ax.lines, *ax.texts, *ax.collections) if a.get_gid() == name]


def test_map_colours_gpus_and_link_shares_by_job(two, tmp_path):
    minst, mp = two
    ev = planner.multievaluate(minst, mp)
    fig = mp.draw()
    ax = fig.axes[0]
    colour = {j.name: job_colour(i) for i, j in enumerate(minst.jobs)}
    assert len(set(colour.values())) == len(colour)
    pies = gid(ax, "job-gpus")
    per = {}
    for sc in pies:
        assert matplotlib.colors.to_hex(sc.get_facecolor()[0]) == colour[sc.job].lower()
        per[(sc.job, sc.domain)] = sc.gpus
    want = {(n, d): g for n in minst.job_names for d, g in mp.allocation(minst, n)[0].items() if g}
    assert per == want  # one wedge per job and domain holding its GPUs
    bars = gid(ax, "link-share")
    assert {(l.job, l.link): l.share for l in bars} == {
        (n, k): v for n in minst.job_names for k, v in mp.allocation(minst, n)[1].items() if v}
    for line in bars:
        assert matplotlib.colors.to_hex(line.get_color()) == colour[line.job].lower()
        (x0, x1), (y0, y1) = line.get_data()
        link = next(l for l in minst.links if f"{l.a}|{l.b}" == line.link)
        from planner.presentation.plot import _positions

        pos, _ = _positions(minst.job_instance(0))
        full = math.dist(pos[link.a], pos[link.b])
        assert math.isclose(math.dist((x0, y0), (x1, y1)), 0.7 * line.share * full, rel_tol=1e-9)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    jobs = [t for t in legend if t.split(":")[0] in minst.job_names]
    assert len(jobs) == 2 and all(f"rho {f.rho:.3f}" in t for t, f in zip(jobs, ev.jobs))
    fig.savefig(tmp_path / "map.png", dpi=60)
    assert (tmp_path / "map.png").stat().st_size > 5000


def test_map_leaves_out_a_job_not_admitted_and_the_cli_writes_it(two, tmp_path):
    minst, _ = two
    data = example(objective="deadline")
    data["jobs"][1]["admitted"] = False
    path = tmp_path / "mp.json"
    path.write_text(json.dumps(data))
    mp = planner.load_multiplan(path, minst)
    ax = draw_jobs(minst, mp).axes[0]
    assert {sc.job for sc in gid(ax, "job-gpus")} == {l.job for l in gid(ax, "link-share")} == {"small"}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum(t.split(":")[0] in minst.job_names for t in legend) == 1
    out = tmp_path / "map.png"
    r = CliRunner().invoke(main, ["multievaluate", "two-jobs", str(path), "--map", str(out)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 5000 and out.read_bytes()[:4] == b"\x89PNG"
    r = CliRunner().invoke(main, ["multievaluate", "two-jobs", str(path), "--map", str(tmp_path / "map.xyz")])
    assert r.exit_code == 2 and "--map" in r.output


# -- the report page ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def page(two):
    return render_multi(*two)


def test_report_has_the_summary_the_map_and_a_section_per_job(two, page):
    minst, mp = two
    dom = Dom(page)
    assert {"summary", "map", "figures-section", "job0", "job1"} <= dom.ids()
    ev = planner.multievaluate(minst, mp)
    text = dom.all_text()
    for row in job_rows(minst, mp, ev):
        assert all(c in text for c in row)
    # the figures table: every digit of multievaluate --json
    cells = re.findall(r'<tr data-job="([^"]+)">(.*?)</tr>', page, re.S)
    got = {name: dict(re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', row)) for name, row in cells}
    for f in ev.jobs:
        assert float(got[f.name]["rho"]) == f.rho and float(got[f.name]["cost"]) == f.cost
        assert float(got[f.name]["throughput_tokens_per_s"]) == f.throughput_tokens_per_s
    # each job's section: the single-job summary of its plan on its slice, word for word
    for name in minst.job_names:
        inst = minst.slice_instance(name, *mp.allocation(minst, name))
        for label, row in summary_rows(inst, mp.job(name).plan, planner.evaluate(inst, mp.job(name).plan)):
            if label != "bound":
                assert " ".join(row.split()) in text, (name, label)
    assert sum(1 for t, _ in dom.elements if t == "svg") == 1 + 2 * 2  # the map; per job Gantt and slice


def test_report_needs_nothing_from_outside(page):
    assert external_references(page) == []
    dom = Dom(page)
    assert not {"script", "link", "iframe", "object", "embed", "img"} & dom.tags()
    metas = [a for t, a in dom.elements if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert [m["content"] for m in metas] == [CSP]


def test_cli_multireport_writes_the_page_refuses_inputs_and_exits_3_when_infeasible(tmp_path):
    out = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["multireport", "two-jobs", str(EXAMPLE), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert {"summary", "map", "job0", "job1"} <= Dom(out.read_text(encoding="utf-8")).ids()
    copy = tmp_path / "mp.json"
    copy.write_text(EXAMPLE.read_text())
    r = CliRunner().invoke(main, ["multireport", "two-jobs", str(copy), "--out", str(copy)])
    assert r.exit_code == 2 and "--out" in r.output and json.loads(copy.read_text()) == json.loads(EXAMPLE.read_text())
    data = example()
    data["jobs"][1]["gpus"]["alpha"] = 12  # 8 + 12 > 16 GPUs in alpha
    copy.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["multireport", "two-jobs", str(copy), "--out", str(out)])
    assert r.exit_code == 3 and "domain alpha" in r.output
    assert "INFEASIBLE" in Dom(out.read_text(encoding="utf-8")).all_text()


def test_cli_multiplan_prints_the_table_with_the_solvers_claims_and_draws_the_map(tmp_path):
    out, picture = tmp_path / "mp.json", tmp_path / "map.png"
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--time-limit", "3", "--deterministic", "-q",
                                  "--out", str(out), "--map", str(picture)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    minst = planner.load_multi_instance("two-jobs")
    mp = planner.load_multiplan(out, minst)
    ev = planner.multievaluate(minst, mp)
    rows = [tuple(c.strip() for c in l.strip("│").split("│")) for l in r.output.splitlines() if l.startswith("│")]
    check_rows(minst, mp, ev, rows, columns(mp))
    said = dict(re.findall(r"^(objective|bound|gap|master_lp|status|sharing)\s+(.*?)\s*$", r.output, re.M))
    s = mp.solver
    assert math.isclose(float(said["bound"]), s.bound, rel_tol=1e-5)
    assert said["gap"] == f"{ev.gap:.2%}" and ev.gap == pytest.approx(abs(ev.objective_value - s.bound)
                                                                     / max(ev.objective_value, s.bound))
    lp = (s.model_extra or {}).get("master_lp")
    assert said["master_lp"] == ("none" if lp is None else f"{lp:.6g}")
    assert said["status"].startswith(s.status) and said["sharing"].startswith("reserved")
    assert picture.read_bytes()[:4] == b"\x89PNG"
