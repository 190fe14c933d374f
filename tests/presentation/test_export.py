"""``planner export``: launch files for Megatron-LM, torchtitan and DeepSpeed.

Golden files (tests/presentation/golden/export/FORMAT/) pin the whole output for
greedy's plan of tiny-3dc; regenerate them after an intended change with

    PLANNER_REGEN_GOLDEN=1 python -m pytest tests/presentation/test_export.py -k golden

and review the diff.  The other tests check properties that a wrong export would
break: every rank where the framework's own rank order puts it, the layer split
each framework is given equal to the plan's, the launch scripts starting exactly
the rank map's torchrun agents, and the rank map reading back into the plan the
job runs (same simulated iteration time).
"""

import ast
import json
import os
import re
import shlex
import subprocess
import tomllib
from collections import Counter
from itertools import product
from pathlib import Path

import pytest
from click.testing import CliRunner

import planner
from helpers import make_instance, over_capacity_plan_file, tiny_model
from planner.cli import main
from planner.presentation.export import FORMATS, export
from planner.problem.errors import InfeasibleError, InputError
from planner.problem.io import load_rank_map
from planner.problem.plan import ExplicitSchedule, Plan
from planner.problem.rankmap import parse_rank_map, parse_schedule_csv, plan_from_rank_map, rank_map_csv
from planner.scoring.evaluator import Evaluator

GOLDEN = Path(__file__).parent / "golden" / "export"


def script_args(ex) -> dict[str, list[str]]:
    """The framework arguments of an export's first launch script: ``--flag`` -> its values (a bare
    word, like a tyro subcommand, maps to [])."""
    script = ex.files[next(f for f in sorted(ex.files) if f.startswith("launch/"))]
    block = script.split("ARGS=(\n", 1)[1].split("\n)\n", 1)[0]
    if "\nLAST=(\n" in script:
        block += "\n" + script.split("\nLAST=(\n", 1)[1].split("\n)\n", 1)[0]
    out = {}
    for line in block.splitlines():
        words = shlex.split(line)
        if words:
            out[words[0]] = words[1:]
    return out


def script_argv(ex, **env) -> list[str]:
    """The framework arguments as bash expands them in the first launch script (``HERE`` and the other
    variables from ``env``)."""
    script = ex.files[next(f for f in sorted(ex.files) if f.startswith("launch/"))]
    block = "ARGS=(\n" + script.split("ARGS=(\n", 1)[1].split("\n)\n", 1)[0] + "\n)\nLAST=()\n"
    if "\nLAST=(\n" in script:
        block += "LAST=(\n" + script.split("\nLAST=(\n", 1)[1].split("\n)\n", 1)[0] + "\n)\n"
    run = subprocess.run(["bash", "-c", "set -eu\n" + block + 'printf "%s\\0" "${ARGS[@]}" "${LAST[@]}"'],
                         text=True,
                         capture_output=True, check=True, env={**env, "PATH": os.environ["PATH"]})
    return run.stdout.split("\0")[:-1]


def torchtitan_cfg(ex) -> dict:
    """torchtitan's job settings of an export, by section: from ``torchtitan.toml`` (0.2.x) or from the
    scripts' ``--section.key`` arguments (0.3.0), integers as integers and the module lists as lists."""
    if "torchtitan.toml" in ex.files:
        return tomllib.loads(ex.files["torchtitan.toml"])
    cfg = {}
    for flag, values in script_args(ex).items():
        if "." not in flag:
            continue
        section, key = flag[2:].split(".", 1)
        if key == "module_fqns_per_model_part":
            value = [v.split(",") for v in values]
        elif not values:  # a flag
            value = True
        else:
            (text,) = values
            value = int(text) if text.isdigit() else text
        cfg.setdefault(section, {})[key] = value
    return cfg


def greedy_plan(name):
    inst = planner.load_instance(name)
    p = planner.plan(inst, solver="greedy")
    # solver.time_s is wall-clock: drop what a plan file needs not carry
    return inst, p.model_copy(update={"predicted": None, "solver": None})


def sim(inst, plan):
    return float(Evaluator(inst, plan).iteration_times()[0])


def hetero_plan():
    """Four replicas placed differently, unequal stages, tp 2, on hosts of 4 GPUs."""
    inst = planner.load_instance("tiny-3dc")
    placement = [["alpha", "beta", "gamma"], ["alpha", "alpha", "gamma"], ["beta", "gamma", "gamma"],
                 ["gamma", "alpha", "beta"]]
    return inst, Plan.build([(0, 2), (2, 7), (7, 10)], placement, tp=2, micro_batch_size=1, instance=inst)


def explicit_plan():
    inst, p = greedy_plan("tiny-3dc")
    ops = [["F0", "F1", "B0", "F2", "B1", "F3", "B2", "F4", "B3", "F5", "B4", "F6", "B5", "F7", "B6", "B7"]] * \
        p.num_stages
    return inst, p.model_copy(update={"schedule": ExplicitSchedule(ops=[list(o) for o in ops])})


def shared_plan():
    """Replicas of a stage side by side on one host (tp 1): agents start several blocks."""
    inst = planner.load_instance("two-dc")
    return inst, Plan.build([(0, 9), (9, 18), (18, 26), (26, 34)], [["us-east-1", "us-east-1", "us-west-2",
                                                                     "us-west-2"]] * 8,
                            tp=2, micro_batch_size=4, instance=inst, schedule="1f1b")


# -- golden files ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_golden_files(fmt):
    inst, p = greedy_plan("tiny-3dc")
    ex = export(inst, p, fmt)
    root = GOLDEN / fmt
    if os.environ.get("PLANNER_REGEN_GOLDEN") == "1":
        for old in root.rglob("*"):
            if old.is_file():
                old.unlink()
        for rel, text in ex.files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    have = sorted(str(f.relative_to(root)) for f in root.rglob("*") if f.is_file())
    assert have == sorted(ex.files), "files differ from the golden set (PLANNER_REGEN_GOLDEN=1 to regenerate)"
    for rel, text in ex.files.items():
        assert (root / rel).read_text() == text, f"{fmt}/{rel} differs from its golden file"


# -- properties -----------------------------------------------------------------------------

CASES = {"tiny-greedy": lambda: greedy_plan("tiny-3dc"), "two-dc-greedy": lambda: greedy_plan("two-dc"),
         "heterogeneous": hetero_plan, "explicit": explicit_plan, "shared-hosts": shared_plan}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    inst, p = CASES[request.param]()
    return inst, p, {fmt: export(inst, p, fmt) for fmt in FORMATS}


def test_every_rank_where_the_frameworks_put_it(case):
    inst, p, exports = case
    R, S, t = p.replicas, p.num_stages, p.tp
    # Megatron: order tp-cp-ep-dp-pp, tp fastest; torchtitan: mesh [pp, dp, tp] row-major;
    # DeepSpeed: ProcessTopology axes [pipe, data, model], itertools.product order
    coords = list(product(range(S), range(R), range(t)))
    for fmt, ex in exports.items():
        rows = ex.rank_map.rows
        assert [(r.stage, r.replica, r.tp_rank) for r in rows] == coords, fmt
        per_host = Counter()
        seen_gpu = set()
        for r in rows:
            assert r.domain == p.placement[r.replica][r.stage]
            assert r.host.startswith(r.domain + "-node")
            assert (r.host, r.gpu) not in seen_gpu  # one rank per GPU
            seen_gpu.add((r.host, r.gpu))
            per_host[r.host] += 1
            st = p.stages[r.stage]
            assert (r.unit_start, r.unit_end) == (st.start, st.end)
        for host, n in per_host.items():
            d = inst.domain(host.rsplit("-node", 1)[0])
            k = int(host.rsplit("-node", 1)[1])
            assert k < -(-d.gpus // d.gpus_per_node) and n <= d.gpus_per_node
            assert all(g < d.gpus_per_node for (h, g) in seen_gpu if h == host)
        if not any("span hosts" in w for w in ex.warnings):  # each tensor-parallel group on one host
            groups = {}
            for r in rows:
                groups.setdefault((r.stage, r.replica), set()).add(r.host)
            assert all(len(h) == 1 for h in groups.values())


def test_launch_scripts_start_exactly_the_rank_maps_agents(case):
    inst, p, exports = case
    for fmt, ex in exports.items():
        agents = ex.rank_map.agents
        assert [a.node_rank for a in agents] == list(range(len(agents)))
        assert sum(a.nproc for a in agents) == p.gpus_used
        nxt = 0
        for a in agents:  # torchrun: an agent's ranks follow those of lower node ranks
            assert a.first_rank == nxt
            nxt += a.nproc
        started = []
        for rel, text in ex.files.items():
            if not rel.startswith("launch/"):
                continue
            subprocess.run(["bash", "-n"], input=text, text=True, check=True)
            assert re.search(rf"--nnodes {len(agents)} ", text)
            domain = rel[len("launch/"):-3]
            for host, calls in re.findall(r"^  (\S+)\) (.*?) ;;", text, flags=re.M):
                for devs, node, nproc in re.findall(r"run (\S+) (\d+) (\d+)", calls):
                    started.append((host, domain, tuple(map(int, devs.split(","))), int(node), int(nproc)))
        assert sorted(started, key=lambda s: s[3]) == [(a.host, a.domain, a.gpus, a.node_rank, a.nproc)
                                                       for a in agents], fmt


def megatron_layout(text: str) -> list[list[str]]:
    """Megatron-LM's parse of --pipeline-model-parallel-layout, re-implemented from its docs."""
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text.replace(",", ""))
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return [list(stage) for stage in text.split("|")]


def test_each_framework_gets_the_plans_split(case):
    inst, p, exports = case
    names = [u.name for u in inst.units]
    n_layers = inst.workload.model.num_layers
    want = [names[s.start:s.end] for s in p.stages]
    kind = {"embed": "E", "head": "L"}
    # Megatron: the layout, one chunk per stage
    script = exports["megatron"].files[next(f for f in exports["megatron"].files if f.startswith("launch/"))]
    args = dict(re.findall(r"^  (--[\w-]+) ?(.*)$", script, flags=re.M))
    assert int(args["--pipeline-model-parallel-size"]) == p.num_stages
    assert int(args["--tensor-model-parallel-size"]) == p.tp
    assert int(args["--micro-batch-size"]) == p.micro_batch_size
    assert int(args["--global-batch-size"]) == p.replicas * p.micro_batch_size * p.num_micro_batches
    layout = megatron_layout(args["--pipeline-model-parallel-layout"].strip('"'))
    assert layout == [[kind.get(u, "t") for u in stage] for stage in want]
    assert sum(s.count("t") for s in layout) == int(args["--num-layers"]) == n_layers
    # torchtitan: module names per stage
    cfg = torchtitan_cfg(exports["torchtitan"])
    par, tr = cfg["parallelism"], cfg["training"]
    fqn = {"embed": ["tok_embeddings"], "head": ["norm", "output"]}
    assert par["module_fqns_per_model_part"] == [sum((fqn.get(u, [f"layers.{u[5:]}"]) for u in stage), [])
                                                 for stage in want]
    assert par["pipeline_parallel_degree"] == p.num_stages and par["tensor_parallel_degree"] == p.tp
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    assert dp == p.replicas and dp * p.tp * p.num_stages == p.gpus_used
    assert par["pipeline_parallel_microbatch_size"] == p.micro_batch_size
    assert tr["local_batch_size"] // par["pipeline_parallel_microbatch_size"] == p.num_micro_batches
    assert tr["global_batch_size"] == tr["local_batch_size"] * dp
    from torch.distributed.pipelining.schedules import get_schedule_class
    get_schedule_class(par["pipeline_parallel_schedule"])  # a name torch knows
    # DeepSpeed: PARTS and the batch rule train_batch_size = micro x accumulation x data parallel
    ds = json.loads(exports["deepspeed"].files["ds_config.json"])
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] \
        * p.replicas
    assert ds["train_micro_batch_size_per_gpu"] == p.micro_batch_size
    consts = {t.targets[0].id: ast.literal_eval(t.value)
              for t in ast.parse(exports["deepspeed"].files["deepspeed_pipeline.py"]).body
              if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Name)
              and isinstance(t.value, (ast.Constant, ast.List))}
    assert consts["PARTS"] == [s.start for s in p.stages] + [inst.num_units]
    assert (consts["STAGES"], consts["REPLICAS"], consts["TENSOR_PARALLEL"]) == (p.num_stages, p.replicas, p.tp)


def test_the_rank_map_reads_back_into_the_plan_the_job_runs(case, tmp_path):
    inst, p, exports = case
    t_plan = sim(inst, p)
    for fmt, ex in exports.items():
        d = tmp_path / fmt
        planner.problem.io.write_files(d, ex.files)
        back = load_rank_map(d / "rank_map.csv", inst)
        assert back == ex.plan_run.model_copy(update={"instance": inst.name})
        assert sim(inst, back) == sim(inst, ex.plan_run)
        if p.schedule_kind in {"megatron": ("1f1b",), "deepspeed": ("1f1b",)}.get(fmt, ("1f1b", "gpipe",
                                                                                        "explicit")):
            assert ex.plan_run is p and sim(inst, back) == t_plan  # expressed exactly
        else:  # run as 1f1b, said in a warning and the README with both times
            assert back.schedule == "1f1b"
            w = next(w for w in ex.warnings if "runs as" in w)
            assert p.schedule_kind in w and "1F1B" in w
            assert f"{t_plan * 1e3:.3g} ms" in w and f"{sim(inst, back) * 1e3:.3g} ms" in w
        for w in ex.warnings:
            assert w in ex.files["README.md"]
        assert Plan.from_json(ex.files["plan.json"]) == p


def test_explicit_schedule_travels_as_torchs_schedule_csv():
    inst, p = explicit_plan()
    ex = export(inst, p, "torchtitan")
    csv_text = ex.files["schedule.csv"]
    # the absolute path, wherever the job starts (the scripts know their folder as $HERE)
    assert torchtitan_cfg(ex)["parallelism"]["pipeline_parallel_schedule_csv"] == "$HERE/schedule.csv"
    old = export(inst, p, "torchtitan", "0.2.2")  # TOML config: the path is given on the command line
    assert "pipeline_parallel_schedule_csv" not in tomllib.loads(old.files["torchtitan.toml"])["parallelism"]
    assert script_args(old)["--parallelism.pipeline_parallel_schedule_csv"] == ["$HERE/schedule.csv"]
    assert old.files["schedule.csv"] == csv_text
    from torch.distributed.pipelining.schedules import _Action
    for j, line in enumerate(csv_text.splitlines()):
        acts = [_Action.from_str(c) for c in line.split(",")]
        assert {a.stage_index for a in acts} == {j}
        assert [f"{a.computation_type.value}{a.microbatch_index}" for a in acts] == p.schedule.ops[j]
    assert parse_schedule_csv(csv_text) == p.schedule.ops
    assert all("schedule.csv" not in f for f in export(inst, p, "megatron").files)


def test_tensor_parallel_group_spanning_hosts_is_a_warning():
    # 12 GPUs in nodes of 6: two groups of 4 fit, the third must span the two hosts
    inst = make_instance([{"name": "a", "gpus": 12, "gpus_per_node": 6, "intra_bandwidth_gbps": 100.0}],
                         [], model=tiny_model(layers=4), tensor_parallel=[1, 2, 4], global_batch_size=6,
                         micro_batch_sizes=[1, 2])
    p = Plan.build([(0, 6)], [["a"], ["a"], ["a"]], tp=4, micro_batch_size=2, instance=inst)
    ex = export(inst, p, "megatron")
    span = [w for w in ex.warnings if "span hosts" in w]
    assert len(span) == 1 and "a-node0, a-node1" in span[0] and "replica 2" in span[0]
    hosts = [r.host for r in ex.rank_map.rows if r.replica == 2]
    assert set(hosts) == {"a-node0", "a-node1"}
    assert span[0] in ex.files["README.md"]


def test_tensor_parallel_and_fsdp_caveats_are_warnings():
    inst, p = greedy_plan("two-dc")  # 8 replicas, 2 stages, tp 4
    ds = export(inst, p, "deepspeed").warnings
    assert any("tensor parallelism of 4" in w for w in ds)
    tt = export(inst, p, "torchtitan")
    assert any("FSDP" in w for w in tt.warnings)
    assert torchtitan_cfg(tt)["parallelism"]["data_parallel_shard_degree"] == 8
    assert not any("runs as" in w for w in export(inst, p, "megatron").warnings)  # 1f1b: exact


def test_bad_input_to_export():
    inst, p = greedy_plan("tiny-3dc")
    with pytest.raises(InputError, match="--format"):
        export(inst, p, "horovod")
    with pytest.raises(InputError, match="units"):
        export(planner.load_instance("two-dc"), p, "megatron")
    crowded = p.model_copy(update={"placement": [["beta"] * p.num_stages] * p.replicas})
    with pytest.raises(InfeasibleError):
        export(inst, crowded, "megatron")


# -- the rank map file ----------------------------------------------------------------------

def test_rank_map_errors_name_the_line_and_column(tmp_path):
    inst, p = greedy_plan("tiny-3dc")
    text = export(inst, p, "megatron").files["rank_map.csv"]
    lines = text.splitlines()
    bad = {
        "missing column": ("\n".join(l.rsplit(",", 1)[0] for l in lines), "schedule"),
        "bad number": ("\n".join(lines[:3] + [lines[3].replace(",alpha-node0,0,", ",alpha-node0,x,", 1)]
                                 + lines[4:]), "line 4: node_rank"),
        "rank order": ("\n".join([lines[0], lines[2], lines[1]] + lines[3:]).replace("\n1,", "\n9,", 1), "rank"),
        "split group": ("\n".join(lines[:2] + [lines[2].replace("alpha", "beta")] + lines[3:]), "domain"),
        "stage units": ("\n".join(lines[:2] + [lines[2].replace(",0,3,1,8,", ",0,4,1,8,")] + lines[3:]),
                        "unit_start"),
    }
    for what, (body, field) in bad.items():
        path = tmp_path / f"{what.replace(' ', '_')}.csv"
        path.write_text(body + "\n")
        with pytest.raises(InputError) as err:
            load_rank_map(path, inst)
        assert str(path) in str(err.value) and field in str(err.value), (what, str(err.value))


def test_rank_map_round_trip_is_exact_for_every_packaged_instance():
    for name in ("tiny-3dc", "two-dc", "aws-multiregion"):
        inst, p = greedy_plan(name)
        rm = export(inst, p, "torchtitan").rank_map
        back = plan_from_rank_map(parse_rank_map(rank_map_csv(rm.rows)), instance=inst.name)
        assert back == p.model_copy(update={"instance": inst.name})


# -- the command line -----------------------------------------------------------------------

def test_cli_export_writes_the_files_and_warns(tmp_path):
    inst, p = greedy_plan("tiny-3dc")
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(p.to_json())
    out = tmp_path / "job" / "megatron"
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(plan_path), "--format", "megatron", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "warning: Megatron-LM has no GPipe schedule" in r.stderr
    assert (out / "README.md").is_file() and os.access(out / "launch" / "alpha.sh", os.X_OK)
    assert sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file()) == \
        sorted(export(inst, p, "megatron").files)


def test_cli_export_bad_input(tmp_path):
    inst, p = greedy_plan("tiny-3dc")
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(p.to_json())
    a_file = tmp_path / "file"
    a_file.write_text("x")
    bad_path, _ = over_capacity_plan_file(tmp_path)
    cases = [
        (["tiny-3dc", str(plan_path), "--format", "slurm", "--out", str(tmp_path / "d")], 2, "--format"),
        (["two-dc", str(plan_path), "--format", "megatron", "--out", str(tmp_path / "d")], 2, "plan.json"),
        (["tiny-3dc", str(plan_path), "--format", "megatron", "--out", str(a_file)], 2, "--out"),
        (["tiny-3dc", str(plan_path), "--format", "megatron", "--out", str(tmp_path)], 2, "input file"),
        (["tiny-3dc", str(bad_path), "--format", "megatron", "--out", str(tmp_path / "d")], 3, "infeasible"),
    ]
    for args, code, word in cases:
        r = CliRunner().invoke(main, ["export", *args])
        assert r.exit_code == code, (args, r.output)
        assert word in r.output and "Traceback" not in r.output and "internal error" not in r.output
    assert not (tmp_path / "d").exists()


# -- GPU types (issue 25): per-domain launch files keep working; the README says which type -----

@pytest.mark.parametrize("fmt", FORMATS)
def test_export_of_a_mixed_type_plan(fmt, tmp_path):
    """A plan over domains of two GPU types (tiny-mixed: beta is toy-2tf, alpha and gamma
    toy-1tf): one launch script per domain used, the rank map reading back into the plan,
    and a README whose "GPU types" table and per-domain sections name each domain's type."""
    inst = planner.load_instance("tiny-mixed")
    n = inst.num_units
    p = Plan.build([(0, 5), (5, n)], [["alpha", "beta"], ["gamma", "beta"]], tp=2, micro_batch_size=1,
                   instance=inst)
    assert Evaluator(inst, p).evaluate().feasible
    ex = export(inst, p, fmt)
    scripts = sorted(f for f in ex.files if f.startswith("launch/"))
    assert scripts == ["launch/alpha.sh", "launch/beta.sh", "launch/gamma.sh"]
    back = plan_from_rank_map(parse_rank_map(ex.files["rank_map.csv"]), instance=inst.name)
    assert back.placement == p.placement and back.stages == p.stages and ex.plan_run.placement == p.placement
    # the job the launch runs scores as the plan does (the same types where they were planned)
    assert Evaluator(inst, back).evaluate().iteration_time_s == Evaluator(inst, ex.plan_run).evaluate().iteration_time_s
    readme = ex.files["README.md"]
    section = readme.split("## GPU types", 1)[1].split("\n## ", 1)[0]
    rows = {r.split("|")[1].strip(): r for r in section.splitlines() if r.startswith("| toy-")}
    assert set(rows) == {"toy-1tf", "toy-2tf"}
    assert "alpha, gamma" in rows["toy-1tf"] and rows["toy-1tf"].rstrip(" |").endswith("| 0")  # stage 0
    assert "beta" in rows["toy-2tf"] and rows["toy-2tf"].rstrip(" |").endswith("| 1")  # stage 1
    for dom, kind in (("alpha", "toy-1tf"), ("beta", "toy-2tf"), ("gamma", "toy-1tf")):
        head = readme.split(f"### {dom}\n\n", 1)[1].split("\n", 1)[0]
        assert head.startswith(f"{inst.domain(dom).gpus} {kind} GPUs"), head
    stages = readme.split("## Stages", 1)[1].split("\n## ", 1)[0]
    assert "| GPU type |" in stages and "| alpha, gamma | toy-1tf |" in stages and "| beta x2 | toy-2tf |" in stages
    out = tmp_path / "out"
    ex.write(out)
    assert (out / "launch" / "beta.sh").is_file()


def test_export_of_a_one_type_plan_has_no_type_section():
    inst = planner.load_instance("tiny-3dc")
    p = Plan.build([(0, 5), (5, inst.num_units)], [["alpha", "beta"]], tp=2, micro_batch_size=1, instance=inst)
    readme = export(inst, p, "megatron").files["README.md"]
    assert "GPU type" not in readme
