"""The framework versions ``planner export`` targets: the committed argument tables
(planner/presentation/frameworks.py) and, where the frameworks are installed, their own parsers.

The parser tests are skipped when the framework is absent (``pip install -e '.[frameworks]'``
installs torchtitan and DeepSpeed; Megatron-LM's argument parser is not in any package: set
``MEGATRON_LM_ROOT`` to a checkout of tag core_v0.16.1, with megatron-core 0.16.1 installed).
They parse the arguments the launch scripts pass, as bash expands them, for every plan of
test_export's cases, and compare the committed tables with the parsers.
"""

import argparse
import json
import os
import sys
import types

import pytest
from click.testing import CliRunner

import planner
from planner.cli import main
from planner.presentation.export import export, target_instance
from planner.presentation.frameworks import (DEFAULT_VERSION, MEGATRON_FLAGS, TORCHTITAN_FLAGS, VERSIONS,
                                             check_megatron_args, check_torchtitan_args)
from planner.problem.errors import InputError
from planner.problem.plan import Plan
from test_export import CASES, greedy_plan, script_args, script_argv

# -- the committed tables, always -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_exported_argument_is_in_the_targeted_versions_table(name):
    inst, p = CASES[name]()
    ex = export(inst, p, "megatron")
    assert ex.version == DEFAULT_VERSION["megatron"]
    args = [(k, " ".join(v) if v else None) for k, v in script_args(ex).items()]
    assert check_megatron_args(ex.version, args) == []
    tt = export(inst, p, "torchtitan")
    targs = [(k, v if k.endswith("module_fqns_per_model_part") else (v[0] if v else None))
             for k, v in script_args(tt).items()]
    assert check_torchtitan_args(tt.version, targs) == []
    for ex in (ex, tt, export(inst, p, "deepspeed")):  # the version is said in the README and the scripts
        assert f"Written for **" in ex.files["README.md"] and ex.version in ex.files["README.md"]
        for rel, text in ex.files.items():
            if rel.startswith("launch/"):
                assert f"# Written for " in text and VERSIONS[ex.format][ex.version].pip in text


def test_llama_models_get_llama_arguments():
    """A gated-MLP model is LLaMA-style in Megatron-LM (RoPE, RMSNorm, SwiGLU, no linear biases, untied,
    grouped-query attention); torchtitan's own llama3 8B configuration is named when the sizes match."""
    inst = planner.load_instance("two-dc").with_model("llama3-8b")
    p = planner.plan(inst, solver="greedy").model_copy(update={"predicted": None, "solver": None})
    args = script_args(export(inst, p, "megatron"))
    assert args["--position-embedding-type"] == ["rope"] and args["--normalization"] == ["RMSNorm"]
    for flag in ("--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
                 "--group-query-attention"):
        assert args[flag] == []
    assert args["--num-query-groups"] == ["8"] and args["--ffn-hidden-size"] == ["14336"]
    tt = script_args(export(inst, p, "torchtitan"))
    assert tt["--module"] == ["llama3"] and tt["--config"] == ["llama3_8b"]
    old = export(inst, p, "torchtitan", "0.2.2").files["torchtitan.toml"]
    assert '[model]\nname = "llama3"\nflavor = "8B"' in old
    gpt = script_args(export(*greedy_plan("two-dc"), "megatron"))  # gpt3-6.7b: GPT-style
    assert gpt["--position-embedding-type"] == ["learned_absolute"] and gpt["--normalization"] == ["LayerNorm"]
    assert "--swiglu" not in gpt and "--disable-bias-linear" not in gpt


def test_tables_catch_a_wrong_argument():
    assert check_megatron_args("0.16.1", [("--normalization", "rmsnorm")])  # a choice it does not have
    assert check_megatron_args("0.16.1", [("--swiglu", "1")])
    assert check_megatron_args("0.16.1", [("--micro-batch-size", "two")])
    assert check_torchtitan_args("0.3.0", [("--job.config_file", "x.toml")])  # gone in 0.3.0
    assert check_torchtitan_args("0.3.0", [("activation_checkpoint:sometimes", None)])


def test_unknown_framework_version_is_an_input_error(tmp_path):
    inst, p = greedy_plan("tiny-3dc")
    with pytest.raises(InputError, match="--framework-version"):
        export(inst, p, "megatron", "0.1")
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(p.to_json())
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(plan_path), "--format", "torchtitan",
                                  "--framework-version", "0.0.1", "--out", str(tmp_path / "d")])
    assert r.exit_code == 2 and "--framework-version" in r.output and "0.3.0" in r.output
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(plan_path), "--format", "torchtitan",
                                  "--framework-version", "0.2.2", "--out", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "d" / "torchtitan.toml").is_file()
    assert "torchtitan 0.2.2" in (tmp_path / "d" / "README.md").read_text()


def test_target_instance_limits_the_schedules():
    inst = planner.load_instance("two-dc")
    for fmt in ("megatron", "deepspeed"):
        t = target_instance(inst, fmt)
        assert t.options.schedules == ["1f1b"] and t.options.explicit_schedules is False
    t = target_instance(inst, "torchtitan")
    assert t.options.schedules == ["1f1b", "gpipe"] and t.options.explicit_schedules is True
    with pytest.raises(InputError, match="--target"):
        target_instance(inst.with_options(schedules=["gpipe"]), "megatron")


# -- the real parsers, where installed ----------------------------------------------------------

def _megatron_parser():
    root = os.environ.get("MEGATRON_LM_ROOT")
    if not root or not os.path.isfile(os.path.join(root, "megatron", "training", "arguments.py")):
        pytest.skip("MEGATRON_LM_ROOT (a Megatron-LM checkout of core_v0.16.1) not set")
    pytest.importorskip("megatron.core")
    # megatron/training/__init__.py imports the whole trainer; the argument parser needs only its module
    pkg = types.ModuleType("megatron.training")
    pkg.__path__ = [os.path.join(root, "megatron", "training")]
    for name in ("get_args", "get_timers", "get_adlr_autoresume", "get_tokenizer", "print_rank_0"):
        setattr(pkg, name, lambda *a, **k: None)
    saved = sys.modules.get("megatron.training")
    sys.modules["megatron.training"] = pkg
    sys.path.insert(0, root)
    try:
        from megatron.training.arguments import add_megatron_arguments
    except ImportError as err:
        pytest.skip(f"Megatron-LM's arguments.py does not import here: {err}")
    finally:
        sys.path.remove(root)
        if saved is not None:
            sys.modules["megatron.training"] = saved
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    return parser


def test_megatron_table_and_arguments_against_megatron_lm():
    parser = _megatron_parser()
    actions = {o: a for a in parser._actions for o in a.option_strings}
    for flag, kind in MEGATRON_FLAGS["0.16.1"].items():
        a = actions[flag]
        if kind is None:
            assert a.nargs == 0, flag
        elif isinstance(kind, tuple):
            assert tuple(a.choices) == kind, flag
        else:
            assert a.nargs is None and (a.type or str) is kind, flag
    for name in sorted(CASES):
        inst, p = CASES[name]()
        argv = script_argv(export(inst, p, "megatron"), HERE="/job")
        args = parser.parse_args(argv)  # exits (SystemExit) on an argument it does not take
        assert args.num_layers == inst.workload.model.num_layers
        assert args.pipeline_model_parallel_size == p.num_stages
    inst = planner.load_instance("two-dc").with_model("llama3-8b")
    p = planner.plan(inst, solver="greedy")
    args = parser.parse_args(script_argv(export(inst, p, "megatron"), HERE="/job"))
    assert (args.position_embedding_type, args.normalization, args.swiglu, args.add_bias_linear,
            args.untie_embeddings_and_output_weights, args.group_query_attention, args.num_query_groups) == \
        ("rope", "RMSNorm", True, False, True, True, 8)


def test_torchtitan_arguments_against_torchtitan(tmp_path, monkeypatch):
    tt = pytest.importorskip("torchtitan")
    from importlib.metadata import version

    if version("torchtitan") != DEFAULT_VERSION["torchtitan"]:
        pytest.skip(f"torchtitan {version('torchtitan')} installed, the export targets "
                    f"{DEFAULT_VERSION['torchtitan']}")
    try:
        from torchtitan.config import ConfigManager
    except ImportError as err:
        pytest.skip(f"torchtitan does not import here: {err}")
    monkeypatch.chdir(tmp_path)
    assert set(TORCHTITAN_FLAGS["0.3.0"]) >= {"--module", "--config"}
    for name in sorted(CASES):
        inst, p = CASES[name]()
        ex = export(inst, p, "torchtitan")
        argv = script_argv(ex, HERE=str(tmp_path), TORCHTITAN_MODULE="llama3", TORCHTITAN_CONFIG="llama3_debugmodel")
        cfg = ConfigManager().parse_args(argv)
        par, tr = cfg.parallelism, cfg.training
        assert par.pipeline_parallel_degree == p.num_stages and par.tensor_parallel_degree == p.tp
        assert par.data_parallel_replicate_degree * par.data_parallel_shard_degree == p.replicas
        assert tr.local_batch_size == p.num_micro_batches * p.micro_batch_size
        assert par.pipeline_parallel_microbatch_size == p.micro_batch_size
        assert len(par.module_fqns_per_model_part) == p.num_stages
        assert (cfg.activation_checkpoint is None) == (not inst.workload.recompute)
        if p.schedule_kind == "explicit":
            assert par.pipeline_parallel_schedule_csv == str(tmp_path / "schedule.csv")


def test_deepspeed_config_against_deepspeed(monkeypatch):
    pytest.importorskip("deepspeed")
    from importlib.metadata import version

    if version("deepspeed") != DEFAULT_VERSION["deepspeed"]:
        pytest.skip(f"deepspeed {version('deepspeed')} installed, the export targets {DEFAULT_VERSION['deepspeed']}")
    import deepspeed.runtime.config as dsc

    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)  # no process group: rank 0, the plan's replicas
    for name in sorted(CASES):
        inst, p = CASES[name]()
        cfg = json.loads(export(inst, p, "deepspeed").files["ds_config.json"])

        class MPU:  # the data-parallel world: the plan's replicas
            @staticmethod
            def get_data_parallel_world_size():
                return p.replicas

        c = dsc.DeepSpeedConfig(cfg, mpu=MPU())
        assert (c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps) == \
            (inst.workload.global_batch_size, p.micro_batch_size, p.num_micro_batches)
        assert c.pipeline["stages"] == p.num_stages and c.zero_optimization_stage == 0 and c.bfloat16_config.enabled


def test_plan_for_a_target_exports_as_planned(tmp_path):
    """``planner plan --target megatron`` plans only what Megatron-LM runs (1f1b, no explicit op
    lists): its export runs the plan as simulated, without a schedule warning."""
    path = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "anneal", "--time-limit", "2", "-q",
                                  "--target", "megatron", "--out", str(path)])
    assert r.exit_code == 0, r.output
    p = Plan.from_json(path.read_text())
    assert p.schedule == "1f1b"
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(path), "--format", "megatron", "--out",
                                  str(tmp_path / "job")])
    assert r.exit_code == 0, r.output
    assert "runs as" not in r.stderr and "warning: Megatron-LM has no" not in r.stderr
    for args, word in ((["--schedule", "gpipe"], "--schedule"), (["--refine-schedule"], "--refine-schedule")):
        r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "cpsat", "--time-limit", "1", "-q",
                                      "--target", "deepspeed", *args])
        assert r.exit_code == 2 and word in r.output and "Traceback" not in r.output, r.output
