"""The framework versions ``planner export`` targets, and the arguments each accepts.

An export is written for one version of its framework (``--framework-version``,
default :data:`DEFAULT_VERSION`): the README and every file say which.  The
tables below list, per version, the arguments the export writes and what each
accepts, read from that version's own argument parser (the source of each table
is in :data:`VERSIONS`); :func:`check_megatron_args` and
:func:`check_torchtitan_args` check a generated argument list against them, and
the tests check the tables against the real parsers when those are installed
(docs/export.md, "Versions").

Example
-------
>>> check_megatron_args("0.16.1", [("--num-layers", 8), ("--normalization", "RMSNorm")])
[]
>>> check_megatron_args("0.16.1", [("--normalisation", "RMSNorm")])
['--normalisation: Megatron-LM 0.16.1 has no such argument']
"""

from __future__ import annotations

from dataclasses import dataclass

from ..problem.errors import InputError


@dataclass(frozen=True)
class Version:
    """One framework version: ``pip`` installs it, ``source`` is where its argument parser was read,
    ``cli``: ``"args"`` (command-line arguments only), ``"toml"`` (a TOML job config) or
    ``"json"`` (a JSON config and a Python module)."""

    version: str
    pip: str
    source: str
    cli: str


VERSIONS: dict[str, dict[str, Version]] = {
    "megatron": {
        "0.16.1": Version("0.16.1", "megatron-core==0.16.1 (with a Megatron-LM checkout of tag core_v0.16.1)",
                          "NVIDIA/Megatron-LM tag core_v0.16.1 (commit 55ac7082517c3878ae653c07c09c534b8aed49f6), "
                          "megatron/training/arguments.py", "args"),
    },
    "torchtitan": {
        "0.3.0": Version("0.3.0", "torchtitan==0.3.0",
                         "torchtitan 0.3.0 (PyPI wheel): torchtitan/config/manager.py (ConfigManager: --module, "
                         "--config, then tyro --section.key arguments), torchtitan/config/configs.py, "
                         "torchtitan/trainer.py (Trainer.Config), "
                         "torchtitan/distributed/activation_checkpoint.py", "args"),
        "0.2.2": Version("0.2.2", "torchtitan==0.2.2",
                         "torchtitan 0.2.2 (PyPI wheel): torchtitan/config/job_config.py (TOML --job.config_file)",
                         "toml"),
    },
    "deepspeed": {
        "0.19.8": Version("0.19.8", "deepspeed==0.19.8",
                          "deepspeed 0.19.8 (PyPI sdist): deepspeed/runtime/config.py (DeepSpeedConfig), "
                          "deepspeed/runtime/pipe/module.py, deepspeed/runtime/pipe/topology.py", "json"),
    },
}
DEFAULT_VERSION = {"megatron": "0.16.1", "torchtitan": "0.3.0", "deepspeed": "0.19.8"}


def version_of(fmt: str, version: str | None) -> Version:
    """The :class:`Version` of ``fmt`` named ``version`` (None: the default); ``InputError`` naming
    ``--framework-version`` (exit 2) for a version the export does not know."""
    known = VERSIONS[fmt]
    v = DEFAULT_VERSION[fmt] if version is None else str(version).strip()
    if v not in known:
        raise InputError(f"{v!r} is not a version the {fmt} export targets; choose from "
                         f"{', '.join(known)} (default {DEFAULT_VERSION[fmt]})", "--framework-version")
    return known[v]


# -- Megatron-LM -----------------------------------------------------------------------------
# The arguments the export writes, as megatron/training/arguments.py of core_v0.16.1 defines them
# (read with argparse from add_megatron_arguments): None = a flag without value, int = an integer,
# str = any string, a tuple = its choices.
MEGATRON_FLAGS: dict[str, dict[str, object]] = {
    "0.16.1": {
        "--tensor-model-parallel-size": int,
        "--pipeline-model-parallel-size": int,
        "--pipeline-model-parallel-layout": str,
        "--decoder-first-pipeline-num-layers": int,
        "--decoder-last-pipeline-num-layers": int,
        "--micro-batch-size": int,
        "--global-batch-size": int,
        "--seq-length": int,
        "--max-position-embeddings": int,
        "--num-layers": int,
        "--hidden-size": int,
        "--ffn-hidden-size": int,
        "--num-attention-heads": int,
        "--group-query-attention": None,
        "--num-query-groups": int,
        "--swiglu": None,
        "--untie-embeddings-and-output-weights": None,
        "--position-embedding-type": ("learned_absolute", "rope", "mrope", "relative", "none"),
        "--normalization": ("LayerNorm", "RMSNorm"),
        "--disable-bias-linear": None,
        "--recompute-granularity": ("full", "selective"),
        "--recompute-method": ("uniform", "block"),
        "--recompute-num-layers": int,
        "--bf16": None,
        "--grad-reduce-in-bf16": None,
    },
}


def _check_value(kind, value) -> str | None:
    """Why ``value`` does not fit ``kind`` (see :data:`MEGATRON_FLAGS`), or None."""
    if kind is None:
        return None if value is None else f"is a flag without a value, given {value!r}"
    if value is None:
        return "needs a value"
    text = str(value).strip('"')
    if kind is int:
        return None if text.lstrip("-").isdigit() else f"takes an integer, given {value!r}"
    if isinstance(kind, tuple):
        return None if text in kind else f"takes one of {', '.join(kind)}, given {value!r}"
    return None


def check_megatron_args(version: str, args) -> list[str]:
    """Problems of ``args`` (``(flag, value or None)`` pairs) against Megatron-LM ``version``'s parser
    (:data:`MEGATRON_FLAGS`); empty when every flag exists and takes its value."""
    table = MEGATRON_FLAGS[version]
    out = []
    for flag, value in args:
        if flag not in table:
            out.append(f"{flag}: Megatron-LM {version} has no such argument")
            continue
        why = _check_value(table[flag], value)
        if why:
            out.append(f"{flag} {why}")
    return out


# -- torchtitan ------------------------------------------------------------------------------
# torchtitan 0.3.0's command line: ``--module M --config F`` choose a config_registry function
# (torchtitan/config/manager.py), then tyro overrides ``--section.key value`` of Trainer.Config
# (torchtitan/trainer.py); ``activation_checkpoint`` is a tyro subcommand
# (ActivationCheckpointingConfig, torchtitan/distributed/activation_checkpoint.py).  The fields
# the export sets, from torchtitan/config/configs.py (TrainingConfig, ParallelismConfig):
TORCHTITAN_FLAGS: dict[str, dict[str, object]] = {
    "0.3.0": {
        "--module": str,
        "--config": str,
        "--training.local_batch_size": int,
        "--training.global_batch_size": int,
        "--training.seq_len": int,
        "--training.disable_cuda_graphs": None,
        "--parallelism.data_parallel_replicate_degree": int,
        "--parallelism.data_parallel_shard_degree": int,
        "--parallelism.fsdp_reshard_after_forward": ("default", "always", "never"),
        "--parallelism.tensor_parallel_degree": int,
        "--parallelism.context_parallel_degree": int,
        "--parallelism.pipeline_parallel_degree": int,
        "--parallelism.pipeline_parallel_schedule": str,
        "--parallelism.pipeline_parallel_schedule_csv": str,
        "--parallelism.pipeline_parallel_microbatch_size": int,
        "--parallelism.module_fqns_per_model_part": "list[list[str]]",
    },
}
# the activation-checkpoint subcommands of 0.3.0 (ActivationCheckpointingConfig)
TORCHTITAN_AC = {"0.3.0": ("activation_checkpoint:selective", "activation_checkpoint:full",
                           "activation_checkpoint:memory-budget", "activation_checkpoint:none")}
# torchtitan's llama3 model flavors (torchtitan/models/llama3/__init__.py, 0.2.2 and 0.3.0) and their
# config_registry functions (0.3.0, torchtitan/models/llama3/config_registry.py):
# (layers, hidden, heads, kv heads, vocab) -> (flavor, config function)
TORCHTITAN_LLAMA3 = {
    (32, 4096, 32, 8, 128256): ("8B", "llama3_8b"),
    (80, 8192, 64, 8, 128256): ("70B", "llama3_70b"),
    (126, 16384, 128, 8, 128256): ("405B", "llama3_405b"),
}


def torchtitan_model(spec) -> tuple[str, str] | None:
    """torchtitan's llama3 (flavor, config function) for a model spec with that architecture, else None."""
    if not spec.num_layers or not spec.gated_mlp or spec.tied_embeddings:
        return None
    key = (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads or spec.num_heads, spec.vocab_size)
    return TORCHTITAN_LLAMA3.get(key)


def check_torchtitan_args(version: str, args) -> list[str]:
    """Problems of ``args`` (``(flag, value)`` pairs; ``value`` a list for several values; a bare
    subcommand as ``(name, None)``) against torchtitan ``version``'s command line."""
    table = TORCHTITAN_FLAGS[version]
    out = []
    for flag, value in args:
        if not flag.startswith("--"):
            if flag not in TORCHTITAN_AC[version]:
                out.append(f"{flag}: torchtitan {version} has no such subcommand")
            continue
        if flag not in table:
            out.append(f"{flag}: torchtitan {version} has no such argument")
            continue
        kind = table[flag]
        if kind == "list[list[str]]":
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                out.append(f"{flag} takes comma-separated module lists, given {value!r}")
            continue
        why = _check_value(kind, value)
        if why:
            out.append(f"{flag} {why}")
    return out
