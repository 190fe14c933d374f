"""Several jobs (SPEC 10): the [[jobs]] instance, its jobs' instances and slices, relay domains,
and the multi-plan file (validation as SPEC 9 lists it, JSON round trip)."""

import copy
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

import planner
from planner.problem.errors import InputError
from planner.problem.instance import Instance
from planner.problem.io import load_instance, load_multi_instance, load_multiplan
from planner.problem.jobs import MultiInstance, equal_slice, full_allocation, link_key
from planner.problem.multiplan import MultiPlan
from planner.problem.plan import Plan, Stage
from planner.scoring.evaluator import evaluate

ROOT = Path(__file__).resolve().parents[2]
TWO_JOBS = ROOT / "instances" / "two-jobs.toml"


def two_jobs_data() -> dict:
    return tomllib.loads(TWO_JOBS.read_text())


def write(tmp_path, data, name="m.toml"):
    """``data`` as a TOML file beside a copy of the tiny model (models resolve near the file)."""
    from planner.problem.files import toml_text

    path = tmp_path / name
    path.write_text(toml_text(data))
    return path


# -- loading ------------------------------------------------------------------------------
def test_two_jobs_loads_with_its_jobs_and_defaults():
    minst = load_multi_instance("two-jobs")
    assert minst.job_names == ("small", "wide")
    small, wide = minst.jobs
    assert (small.iterations, small.weight, small.deadline_hours, small.allowed_domains) == (1000, 1.0, 2.0, None)
    assert (wide.iterations, wide.weight, wide.allowed_domains, wide.max_gpus) == (500, 2.0, ["alpha", "beta"], None)
    assert minst.options.multi_objective == "maxmin"
    assert small.model.name == "tiny" and wide.seq_len == 256
    assert "two-jobs" in planner.problem.files.available("multi-instances")
    assert "two-jobs" not in planner.problem.files.available("instances")


def test_load_instance_refuses_a_jobs_file_pointing_to_multiplan():
    with pytest.raises(InputError) as err:
        load_instance("two-jobs")
    assert err.value.field == "jobs" and "planner multiplan" in err.value.message
    assert err.value.file.endswith("two-jobs.toml")


def test_load_multi_instance_refuses_a_one_job_file():
    with pytest.raises(InputError) as err:
        load_multi_instance("tiny-3dc")
    assert err.value.field == "jobs" and err.value.file.endswith("tiny-3dc.toml")


def _job(i, **kv):
    def f(d):
        d["jobs"][i].update(kv)
    return f


def _drop(i, key):
    def f(d):
        del d["jobs"][i][key]
    return f


BAD = [  # (what, mutation, field): SPEC 9's list for [[jobs]]
    ("workload and jobs", lambda d: d.update(workload={"model": "tiny", "global_batch_size": 16, "seq_len": 8,
                                                        "micro_batch_sizes": [1]}), "workload"),
    ("name empty", _job(1, name=""), "jobs[1].name"),
    ("name repeated", _job(1, name="small"), "jobs[1].name"),
    ("name with a space", _job(0, name="my job"), "jobs[0].name"),
    ("iterations missing", _drop(0, "iterations"), "jobs[0].iterations"),
    ("iterations zero", _job(0, iterations=0), "jobs[0].iterations"),
    ("iterations fractional", _job(0, iterations=1.5), "jobs[0].iterations"),
    ("iterations a string", _job(0, iterations="10"), "jobs[0].iterations"),
    ("max_gpus zero", _job(1, max_gpus=0), "jobs[1].max_gpus"),
    ("max_gpus fractional", _job(1, max_gpus=2.5), "jobs[1].max_gpus"),
    ("weight zero", _job(1, weight=0.0), "jobs[1].weight"),
    ("weight infinite", _job(1, weight=float("inf")), "jobs[1].weight"),
    ("weight boolean", _job(1, weight=True), "jobs[1].weight"),
    ("deadline negative", _job(0, deadline_hours=-1.0), "jobs[0].deadline_hours"),
    ("deadline nan", _job(0, deadline_hours=float("nan")), "jobs[0].deadline_hours"),
    ("allowed empty", _job(1, allowed_domains=[]), "jobs[1].allowed_domains"),
    ("allowed unknown", _job(1, allowed_domains=["alpha", "delta"]), "jobs[1].allowed_domains[1]"),
    ("allowed twice", _job(1, allowed_domains=["alpha", "alpha"]), "jobs[1].allowed_domains[1]"),
    ("multi_objective unknown", lambda d: d["options"].update(multi_objective="fastest"),
     "options.multi_objective"),
    ("gradient_sync unknown", _job(0, gradient_sync="allreduce"), "jobs[0].gradient_sync"),
    ("micro-batch never divides", _job(0, micro_batch_sizes=[1, 3]), "jobs[0].micro_batch_sizes[1]"),
    ("unknown model", _job(1, model="gpt-9"), "jobs[1].model"),
    ("unknown key", _job(0, colour="red"), "jobs[0].colour"),
    ("no jobs", lambda d: d.update(jobs=[]), "jobs"),
]


@pytest.mark.parametrize("what, mutate, field", BAD, ids=[b[0] for b in BAD])
def test_each_input_error_names_the_file_the_job_and_the_field(tmp_path, what, mutate, field):
    data = two_jobs_data()
    mutate(data)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data, allow_nan=True))
    with pytest.raises(InputError) as err:
        load_multi_instance(path)
    assert err.value.field == field, (what, err.value)
    assert err.value.file == str(path)


def test_neither_workload_nor_jobs_is_refused_by_both_loaders(tmp_path):
    data = two_jobs_data()
    del data["jobs"]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    for load in (load_instance, load_multi_instance):
        with pytest.raises(InputError) as err:
            load(path)
        assert err.value.file == str(path) and err.value.field in ("workload", "jobs")


def test_cli_plan_and_evaluate_refuse_a_jobs_instance(tmp_path):
    from click.testing import CliRunner

    from planner.cli import main

    p = planner.plan(load_instance("tiny-3dc"), solver="greedy")
    path = tmp_path / "p.json"
    path.write_text(p.to_json())
    for args in (["plan", "two-jobs", "--solver", "greedy"], ["evaluate", "two-jobs", str(path)],
                 ["validate", "two-jobs"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output)
        assert "multiplan" in r.output and "two-jobs.toml" in r.output


# -- job instances, slices, relay domains ---------------------------------------------------
def test_job_instance_is_the_job_alone_on_the_whole_cluster():
    minst = load_multi_instance("two-jobs")
    small = minst.job_instance("small")
    tiny = load_instance("tiny-3dc")
    assert small is minst.job_instance(0)  # cached
    assert small.slice_of == "two-jobs" and small.name == "small"
    # tiny-3dc's own workload: every figure as tiny-3dc's
    p = planner.plan(tiny, solver="greedy")
    a, b = evaluate(tiny, p), evaluate(small, p.model_copy(update={"instance": "small"}))
    assert (a.iteration_time_s, a.estimate_s, a.cost_per_iteration) == (b.iteration_time_s, b.estimate_s,
                                                                        b.cost_per_iteration)
    wide = minst.job_instance("wide")
    assert [(d.name, d.gpus) for d in wide.domains] == [("alpha", 16), ("beta", 8), ("gamma", 0)]
    assert wide.workload.global_batch_size == 32 and wide.workload.seq_len == 256


@pytest.mark.parametrize("solver", ["greedy", "milp", "cpsat"])
def test_planners_never_place_a_stage_on_a_relay_domain(solver):
    """gamma is outside wide's allowed domains: 0 GPUs, traffic only."""
    wide = load_multi_instance("two-jobs").job_instance("wide")
    p = planner.plan(wide, solver=solver, time_limit=5)
    assert "gamma" not in p.gpus_per_domain()
    assert evaluate(wide, p).feasible


def test_a_plan_on_a_relay_domain_is_infeasible_naming_it():
    wide = load_multi_instance("two-jobs").job_instance("wide")
    n = wide.num_units
    p = Plan(instance="wide", replicas=1, tp=4, micro_batch_size=4, num_micro_batches=8,
             stages=[Stage(start=0, end=n // 2), Stage(start=n // 2, end=n)], placement=[["alpha", "gamma"]])
    ev = evaluate(wide, p)
    assert not ev.feasible
    assert any(v.rule == "gpu_capacity" and "gamma" in v.message and "0 available" in v.message
               for v in ev.violations)


def test_one_job_instances_still_refuse_zero_gpus_zero_uplinks_and_a_broken_wan():
    data = load_instance("tiny-3dc").to_dict()
    for mutate, field in ((lambda d: d["domains"][0].update(gpus=0), "domains[0].gpus"),
                          (lambda d: d["domains"][1].update(uplink_gbps=0.0), "domains[1].uplink_gbps"),
                          (lambda d: d.update(links=d["links"][:1]), "links")):
        d = copy.deepcopy(data)
        mutate(d)
        with pytest.raises(InputError) as err:
            Instance.from_dict(d)
        assert err.value.field == field
        d["slice_of"] = "x"  # a slice accepts each
        Instance.from_dict(d)


def _uplinked(minst: MultiInstance) -> MultiInstance:
    data = minst.to_dict()
    for d, up in zip(data["domains"], (40.0, 20.0, 10.0)):
        d["uplink_gbps"] = up
    return MultiInstance.from_dict(data)


def test_slice_scales_links_and_uplinks_and_removes_share_zero_links():
    minst = _uplinked(load_multi_instance("two-jobs"))
    s = minst.slice_instance("small", {"alpha": 4, "beta": 8}, {"alpha|beta": 0.25},
                             {"beta": 0.5})
    assert [(d.name, d.gpus) for d in s.domains] == [("alpha", 4), ("beta", 8), ("gamma", 0)]
    assert [(l.a, l.b, l.bandwidth_gbps, l.latency_ms) for l in s.links] == [("alpha", "beta", 2.5, 2.0)]
    # uplinks: given share, else g_d / gpus_d
    assert [d.uplink_gbps for d in s.domains] == [40.0 * 4 / 16, 20.0 * 0.5, 0.0]
    # beta-gamma removed: no route to gamma any more
    assert ("alpha", "gamma") not in s.direct_routes and ("alpha", "beta") in s.direct_routes


def test_removing_a_link_recomputes_routes_through_what_remains():
    """A triangle a-b-c: with a-c at share 0, a-c traffic relays via b (SPEC 10: routes on what remains)."""
    data = two_jobs_data()
    data["links"].append({"a": "alpha", "b": "gamma", "bandwidth_gbps": 1.0, "latency_ms": 50.0})
    for job in data["jobs"]:
        job["model"] = planner.problem.files.load_model(planner.problem.files.find_model("tiny"))
        job.pop("allowed_domains", None)
    minst = MultiInstance.from_dict(data)
    full = minst.slice_instance(0, *full_allocation(minst, 0))
    assert full.direct_routes[("alpha", "gamma")].nodes == ("alpha", "gamma")
    cut = minst.slice_instance(0, full_allocation(minst, 0)[0], {"alpha|beta": 1.0, "beta|gamma": 1.0})
    assert cut.direct_routes[("alpha", "gamma")].nodes == ("alpha", "beta", "gamma")


def test_the_full_slice_scores_as_the_job_instance():
    minst = _uplinked(load_multi_instance("two-jobs"))
    for j in range(2):
        ji = minst.job_instance(j)
        full = minst.slice_instance(j, *full_allocation(minst, j))
        p = planner.plan(ji, solver="greedy")
        a, b = evaluate(ji, p), evaluate(full, p)
        assert a.to_dict() == b.to_dict()


def test_equal_slice_is_floor_gpus_over_j_and_one_over_j():
    minst = load_multi_instance("two-jobs")
    g, beta, u = equal_slice(minst, "small")
    assert g == {"alpha": 8, "beta": 4, "gamma": 6}
    assert beta == {"alpha|beta": 0.5, "beta|gamma": 0.5} and u == {"alpha": 0.5, "beta": 0.5, "gamma": 0.5}
    g, _, _ = equal_slice(minst, "wide")  # gamma is not among wide's allowed domains
    assert g == {"alpha": 8, "beta": 4, "gamma": 0}
    assert [link_key(l) for l in minst.links] == ["alpha|beta", "beta|gamma"]


# -- the multi-plan file -------------------------------------------------------------------
EXAMPLE = ROOT / "docs" / "examples" / "two-jobs.multiplan.json"


def example() -> dict:
    return json.loads(EXAMPLE.read_text())


def test_multiplan_json_round_trip():
    mp = MultiPlan.from_json(EXAMPLE.read_text())
    assert MultiPlan.from_json(mp.to_json()) == mp
    assert json.loads(mp.to_json())["jobs"][0]["name"] == "small"
    mp.check_against(load_multi_instance("two-jobs"))


def _set(path, value):
    def f(d):
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return f


MP_BAD = [  # SPEC 9's multi-plan list, and what check_against adds
    ("unknown job", _set(("jobs", 1, "name"), "huge"), "jobs[1].name"),
    ("unknown domain", _set(("jobs", 0, "gpus", "delta"), 2), "jobs[0].gpus.delta"),
    ("unknown uplink domain", _set(("jobs", 0, "uplink_share"), {"delta": 0.5}), "jobs[0].uplink_share.delta"),
    ("unknown link", _set(("jobs", 0, "link_share", "beta|alpha"), 0.5), "jobs[0].link_share.beta|alpha"),
    ("share above 1", _set(("jobs", 1, "link_share", "alpha|beta"), 1.5), "jobs[1].link_share.alpha|beta"),
    ("share negative", _set(("jobs", 1, "uplink_share"), {"alpha": -0.1}), "jobs[1].uplink_share.alpha"),
    ("gpus negative", _set(("jobs", 0, "gpus", "alpha"), -4), "jobs[0].gpus.alpha"),
    ("gpus fractional", _set(("jobs", 0, "gpus", "alpha"), 2.5), "jobs[0].gpus.alpha"),
    ("gpus a float", _set(("jobs", 0, "gpus", "alpha"), 4.0), "jobs[0].gpus.alpha"),
    ("gpus boolean", _set(("jobs", 0, "gpus", "alpha"), True), "jobs[0].gpus.alpha"),
    ("missing job", lambda d: d["jobs"].pop(), "jobs"),
    ("job twice", lambda d: d["jobs"].append(copy.deepcopy(d["jobs"][0])), "jobs[2].name"),
    ("admitted without plan", _set(("jobs", 0, "plan"), None), "jobs[0].plan"),
    ("no reference", lambda d: d["jobs"][0].pop("reference_throughput_tokens_per_s"),
     "jobs[0].reference_throughput_tokens_per_s"),
    ("plan of another model", _set(("jobs", 0, "plan", "stages", -1, "end"), 3), "jobs[0].plan.stages[0].end"),
    ("plan on an unknown domain", _set(("jobs", 1, "plan", "placement", 0, 0), "delta"),
     "jobs[1].plan.placement[0][0]"),
    ("unknown objective", _set(("objective",), "fastest"), "objective"),
]


@pytest.mark.parametrize("what, mutate, field", MP_BAD, ids=[b[0] for b in MP_BAD])
def test_multiplan_input_errors_name_the_file_the_job_and_the_field(tmp_path, what, mutate, field):
    data = example()
    mutate(data)
    path = tmp_path / "mp.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_multiplan(path, load_multi_instance("two-jobs"))
    assert err.value.field == field, (what, str(err.value))
    assert err.value.file == str(path)
    if field.startswith("jobs["):
        i = int(field[5])
        name = data["jobs"][i]["name"]
        assert repr(name) in err.value.message, str(err.value)


def test_allocation_defaults_follow_spec_10():
    minst = load_multi_instance("two-jobs")
    data = example()
    small = data["jobs"][0]
    small["gpus"] = {}
    small.pop("uplink_share", None)
    small["link_share"] = {"alpha|beta": 0.5}
    mp = MultiPlan.from_dict(data)
    gpus, links, ups = mp.allocation(minst, "small")
    used = mp.job("small").plan.gpus_per_domain()
    assert gpus == {d: used.get(d, 0) for d in minst.domain_names}  # what the plan uses
    assert links == {"alpha|beta": 0.5, "beta|gamma": 0.0}  # not listed: 0
    assert ups == {d.name: gpus[d.name] / d.gpus for d in minst.domains}  # g_d / gpus_d
    data["jobs"][1]["admitted"] = False
    gpus, links, ups = MultiPlan.from_dict(data).allocation(minst, "wide")
    assert set(gpus.values()) == {0} and set(links.values()) == {0.0} and set(ups.values()) == {0.0}
    assert np.isclose(sum(ups.values()), 0.0)
