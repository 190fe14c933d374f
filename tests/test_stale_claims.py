"""Issue 28 items 6-8: a plan's solver claims are shown only while they hold.

6. A plan evaluated on an instance that changed since it was made (here every
   WAN link at a tenth of its bandwidth), or a plan edited by hand, or one
   without the hashes, shows no status, bound or gap -- in ``evaluate`` (text
   and JSON), ``report`` and ``explain`` -- and says why.
7. With ``--robust`` every printed (objective, bound, gap) triple is of one
   network: the gap follows from the objective and the bound beside it.
8. A CP-SAT schedule the plan does not use is not credited to it.
"""

import json
import re
import shutil

import pytest

import planner
from click.testing import CliRunner

from planner.cli import main
from planner.problem.io import instances_dir
from planner.problem.plan import CLAIM_REASONS
from planner.scoring.bounds import objective_lower_bound


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """tiny-3dc (a copy), a MILP plan made for it, and the copy then edited: bandwidth / 10."""
    d = tmp_path_factory.mktemp("claims")
    inst = d / "tiny.toml"
    shutil.copy(instances_dir() / "tiny-3dc.toml", inst)
    plan = d / "plan.json"
    res = run("plan", inst, "--solver", "milp", "--time-limit", "5", "--out", plan, "-q")
    assert res.exit_code == 0, res.output
    changed = d / "tiny-slow.toml"
    changed.write_text(re.sub(r"^bandwidth_gbps = ([0-9.]+)",
                              lambda m: f"bandwidth_gbps = {float(m.group(1)) / 10}", inst.read_text(), flags=re.M))
    assert changed.read_text() != inst.read_text()
    return inst, plan, changed


def _solver_line(text):
    return next(line for line in text.splitlines() if line.startswith("solver"))


def _claims(inst, plan):
    """What evaluate (text, JSON), explain (text, JSON) and report show of the claims."""
    text = run("evaluate", inst, plan)
    js = run("evaluate", inst, plan, "--json")
    ex = run("explain", inst, plan)
    exj = run("explain", inst, plan, "--json")
    html = plan.parent / "report.html"
    rep = run("report", inst, plan, "--out", html)
    for res in (text, js, ex, exj, rep):
        assert res.exit_code == 0, res.output
    return text.output, json.loads(js.output), ex.output, json.loads(exj.output), html.read_text()


def test_claims_shown_on_the_instance_the_plan_was_made_for(made):
    inst, plan, _ = made
    text, js, ex, exj, html = _claims(inst, plan)
    status = json.loads(plan.read_text())["solver"]["status"]
    assert js["solver_claims"] == "shown" and js["solver"]["status"] == status
    assert f"milp: {status}" in _solver_line(text) and "bound" in _solver_line(text)
    assert f"Solver milp: {status}" in ex and exj["solver_claims"] == "shown"
    assert 'data-key="bound"' in html and "not shown" not in html


@pytest.mark.parametrize("case", ["stale", "edited", "edited claim", "absent"])
def test_no_claims_and_the_reason(made, case, tmp_path):
    inst, plan, changed = made
    data = json.loads(plan.read_text())
    if case == "stale":
        inst = changed
    elif case == "edited":  # placement changed by hand: replica 0's stages 2 and 3 swap domains
        row = data["placement"][0]
        assert row[-2] != row[-1]
        row[-2], row[-1] = row[-1], row[-2]
    elif case == "edited claim":
        data["solver"]["gap"] = 0.0
        data["solver"]["bound"] = data["solver"]["objective"] * 1.5
    else:
        del data["solver"]["instance_sha256"]
    p = tmp_path / "p.json"
    p.write_text(json.dumps(data))
    kind = case.split()[0]
    reason = CLAIM_REASONS[kind]
    text, js, ex, exj, html = _claims(inst, p)
    line = " ".join(text.split())  # the summary wraps long rows
    assert f"solver claims not shown: {reason}" in line
    solver = line[line.index("solver milp"):line.index("shape")]
    for word in ("optimal", "bound", "gap", "objective"):
        assert word not in solver, (case, solver)
    assert js["solver_claims"] == kind and js["solver_claims_reason"] == reason and "solver" not in js
    assert f"Solver milp, " in ex and f"solver claims not shown: {reason}" in ex and "optimal" not in ex
    assert exj["solver_claims"] == kind and exj["solver_claims_reason"] == reason
    assert f"solver claims not shown: {reason}" in html
    assert 'data-key="status"' not in html and 'data-key="bound"' not in html and 'data-key="gap"' not in html


# -- item 7: robust --------------------------------------------------------------

_TRIPLE = re.compile(r"objective ([0-9.e+-]+), bound ([0-9.e+-]+), gap ([0-9.]+)%")


@pytest.mark.parametrize("stat", ["p95", "mean"])
def test_robust_gaps_follow_from_the_objective_and_bound_shown(tmp_path, stat):
    out = tmp_path / "r.json"
    res = run("plan", "tiny-3dc", "--solver", "milp", "--time-limit", "5", "--robust", "8", "--robust-stat", stat,
              "--out", out, "-q")
    assert res.exit_code == 0, res.output
    info = json.loads(out.read_text())["solver"]
    for o, b, g in (("objective", "bound", "gap"), ("robust_objective", "robust_bound", "robust_gap")):
        assert info[b] <= info[o]
        assert info[g] == pytest.approx((info[o] - info[b]) / info[o], rel=1e-9, abs=1e-12), (o, info)
    assert not info["status"].startswith("optimal")  # no search on the base network
    text = " ".join(run("evaluate", "tiny-3dc", out).output.split())
    triples = _TRIPLE.findall(text)
    assert len(triples) == 2, text  # the base network's and the statistic network's
    for o, b, g in triples:
        o, b, g = float(o), float(b), float(g) / 100
        assert abs(g - (o - b) / o) <= 0.0005 + 1e-3 * (o - b) / o + 5e-4 * b / o, (o, b, g)
    assert f"on the {stat} network" in text


# -- item 8: a CP-SAT schedule the plan does not use ------------------------------

def test_a_cpsat_schedule_not_kept_is_not_credited(tmp_path):
    out = tmp_path / "c.json"
    res = run("plan", "tiny-3dc", "--solver", "cpsat", "--time-limit", "8", "--deterministic", "--out", out, "-q")
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["solver"]["schedule_makespan_s"] is not None
    if data["schedule"] not in ("1f1b", "gpipe"):
        # the schedule was kept here (SPEC v3: it beats 1f1b on tiny-3dc); the case of a schedule
        # found and not kept (the plan keeps 1f1b, the solver record keeps the schedule's claims) is
        # the same file with 1f1b, as registry.plan writes it when the schedule loses
        from planner.problem.io import load_plan, save_plan

        inst = planner.load_instance("tiny-3dc")
        kept = load_plan(out)
        name = kept.solver.name.removesuffix("+schedule")
        save_plan(kept.model_copy(update={"schedule": "1f1b", "solver": kept.solver.model_copy(
            update={"name": name})}).stamped(inst), out)
    text = " ".join(run("evaluate", "tiny-3dc", out).output.split())
    assert "not kept" in text and "makespan" not in text
    html = tmp_path / "c.html"
    assert run("report", "tiny-3dc", out, "--out", html).exit_code == 0
    page = html.read_text()
    assert "not kept" in page and "makespan" not in page and "schedule_bound_s" not in page


def test_schedule_does_not_carry_stale_claims_into_a_new_plan(made, tmp_path):
    """``planner schedule`` stamps the plan it writes: claims made for the old
    instance must not come out of it looking current."""
    inst, plan, changed = made
    new = tmp_path / "s.json"
    res = run("schedule", changed, plan, "--out", new, "--time-limit", "3", "-q")
    assert res.exit_code == 0, res.output
    assert f"solver claims not carried over: {CLAIM_REASONS['stale']}" in " ".join(res.output.split())
    info = json.loads(new.read_text())["solver"]
    js = json.loads(run("evaluate", changed, new, "--json").output)
    assert js["solver_claims"] == "shown"  # made now, for this instance
    old = json.loads(plan.read_text())["solver"]
    assert info["status"] in ("heuristic", "feasible")
    # the old search's claims (its estimate_* figures over 1f1b/gpipe plans) are not carried over,
    # and the bound is the changed instance's own
    assert old.get("estimate_status") is not None and info.get("estimate_status") is None
    assert info["bound"] == pytest.approx(objective_lower_bound(planner.load_instance(changed)), rel=1e-12)
    assert info["bound"] <= js["iteration_time_s"] * (1 + 1e-9)
    assert info["gap"] == pytest.approx((info["objective"] - info["bound"]) / info["objective"], rel=1e-9)


def test_print_plan_hides_claims_of_an_edited_plan(made):
    from planner.problem.plan import Plan

    _, plan, _ = made
    p = Plan.from_json(plan.read_text())
    assert "objective" in str(p) and "sha256" in str(p)
    row = p.placement[0]
    edited = p.model_copy(update={"placement": [row[:-2] + [row[-1], row[-2]]] + p.placement[1:]})
    text = str(edited) + edited._repr_html_()
    assert "solver claims not shown: the plan was edited" in text and "bound" not in text
