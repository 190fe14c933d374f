"""Launcher files for a plan: Megatron-LM, torchtitan or DeepSpeed (``planner export``).

:func:`export` turns a plan into the files a person needs to start the job
(``Export.files``, relative path -> text; the command line writes them):

* ``launch/DOMAIN.sh`` per domain: run on each of the domain's hosts with
  the host's name; it starts that host's torchrun agents with the
  framework's own arguments for the plan;
* the framework's configuration: Megatron-LM needs only arguments (in the
  scripts); torchtitan ``torchtitan.toml`` (plus ``schedule.csv`` for an
  explicit micro-batch order); DeepSpeed ``ds_config.json`` and
  ``deepspeed_pipeline.py`` (the stage bounds for ``PipelineModule``);
* ``rank_map.csv`` (:mod:`planner.problem.rankmap`): global rank -> domain,
  host, torchrun node rank, CUDA device, replica, stage, tensor-parallel rank;
  it reads back into the plan the job runs (``planner.problem.io.load_rank_map``);
* ``plan.json``, the plan as given, and ``README.md``: what to run where,
  the plan in the framework's terms, and what the framework cannot express.

What a framework cannot express is said, never dropped: the README's
"Warnings" section and ``Export.warnings`` name it with its measured effect
(e.g. Megatron-LM has no GPipe schedule, so a ``gpipe`` plan runs 1F1B, and
the warning gives both simulated iteration times).  ``Export.plan_run`` is
the plan as launched.  The framework argument names, and the source file
each comes from, are tabulated in docs/export.md.

Example
-------
>>> ex = export(inst, plan, "torchtitan")                  # doctest: +SKIP
>>> sorted(ex.files)                                       # doctest: +SKIP
['README.md', 'launch/alpha.sh', 'launch/beta.sh', 'launch/gamma.sh', 'plan.json',
 'rank_map.csv', 'torchtitan.toml']
"""

from __future__ import annotations

import json
import shlex
import unicodedata
from collections import Counter
from dataclasses import dataclass

from ..problem.errors import InfeasibleError, InputError
from ..problem.files import write_folder
from ..problem.names import name_problem
from ..problem.plan import Plan
from ..problem.rankmap import RankMap, build_rank_map, schedule_csv
from ..scoring.evaluator import Evaluator
from .frameworks import Version, check_megatron_args, check_torchtitan_args, torchtitan_model, version_of
from .report import _fmt_s, _unit_range

FORMATS = ("megatron", "torchtitan", "deepspeed")
NAMES = {"megatron": "Megatron-LM", "torchtitan": "torchtitan", "deepspeed": "DeepSpeed"}
# micro-batch orders each framework runs (the rest run as 1f1b, with a warning)
SCHEDULES = {"megatron": ("1f1b",), "torchtitan": ("1f1b", "gpipe", "explicit"), "deepspeed": ("1f1b",)}
# what each launch script runs after torchrun's own arguments (overridable with $TRAIN)
TRAIN = {"megatron": "pretrain_gpt.py", "torchtitan": "-m torchtitan.train", "deepspeed": "train.py"}
MASTER_PORT = 29500
# files every export writes: a folder holding them is an earlier export, which force may replace
MARKER = ("plan.json", "rank_map.csv")


@dataclass(frozen=True)
class Export:
    """Files to write (relative path -> text), warnings, the rank map, and the plan as the
    framework runs it (``plan_run``: the plan's schedule replaced when unsupported)."""

    format: str
    files: dict[str, str]
    warnings: tuple[str, ...]
    rank_map: RankMap
    plan_run: Plan
    version: str = ""  # the framework version the files are written for (--framework-version)

    def write(self, out, force: bool = False, inputs=()) -> list:
        """Write the files as the whole content of folder ``out`` (created if missing) and
        return their paths.  A non-empty ``out`` is refused (``InputError``, exit 2) unless
        ``force``, which replaces an earlier export there (a folder holding ``plan.json`` and
        ``rank_map.csv``) at once: the files go into a new folder beside it that then takes
        its place, so no file of the old export is left (:func:`planner.problem.files.write_folder`).
        ``inputs``: files the command read, which ``out`` must not hold.

        >>> export(inst, plan, "megatron").write("job/", force=True)   # doctest: +SKIP
        """
        return write_folder(out, self.files, "out", force=force, force_flag="force=True", inputs=inputs,
                            marker=MARKER)


@dataclass(frozen=True)
class _Layers:
    """The model's units in framework terms: kinds ``E`` (embedding), ``t`` (a transformer
    block), ``L`` (the output head and loss); ``names[i]``: unit i's name."""

    kinds: tuple[str, ...]
    names: tuple[str, ...]

    @property
    def standard(self) -> bool:
        """embed, blocks..., head: what the frameworks' layer names assume."""
        k = self.kinds
        return len(k) >= 2 and k[0] == "E" and k[-1] == "L" and set(k[1:-1]) <= {"t"}

    def block_index(self, unit: int) -> int:
        return sum(1 for k in self.kinds[:unit] if k == "t")


def _layers(instance) -> _Layers:
    names = tuple(u.name for u in instance.units)
    kinds = tuple("E" if n == "embed" else "L" if n == "head" else "t" for n in names)
    return _Layers(kinds, names)


def target_instance(instance, fmt: str):
    """``instance`` restricted to the micro-batch orders ``fmt`` runs (``planner plan --target``):
    its named schedules among :data:`SCHEDULES` ``[fmt]``, and explicit op lists only where the
    framework runs them (``options.explicit_schedules``).  ``InputError`` (exit 2) when none of
    the instance's schedules is one the framework runs."""
    if fmt not in FORMATS:
        raise InputError(f"unknown target {fmt!r}; choose from {', '.join(FORMATS)}", "--target")
    runs = SCHEDULES[fmt]
    named = [s for s in instance.options.schedules if s in runs]
    if not named:
        raise InputError(f"{NAMES[fmt]} runs only {', '.join(s for s in runs if s != 'explicit')}; the instance "
                         f"allows {instance.options.schedules} (options.schedules)", "--target")
    return instance.with_options(schedules=named,
                                 explicit_schedules=instance.options.explicit_schedules and "explicit" in runs)


def export(instance, plan: Plan, fmt: str, version: str | None = None) -> Export:
    """Launcher files of ``plan`` on ``instance`` for ``fmt`` (one of :data:`FORMATS`), written for
    the framework's ``version`` (None: :data:`planner.presentation.frameworks.DEFAULT_VERSION`).

    Raises ``InputError`` (exit 2) for an unknown format or version or a plan that does not fit the
    instance's shape, ``InfeasibleError`` (exit 3) for a plan the evaluator finds infeasible.
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}", "--format")
    ver = version_of(fmt, version)
    plan.check_against(instance)
    ev = Evaluator(instance, plan).evaluate()
    if not ev.feasible:
        raise InfeasibleError(f"the plan is infeasible on {instance.name}; there is no job to launch",
                              [v.message for v in ev.violations])
    warnings: list[str] = []
    name = NAMES[fmt]
    run_kind = plan.schedule_kind if plan.schedule_kind in SCHEDULES[fmt] else "1f1b"
    plan_run = plan if run_kind == plan.schedule_kind else plan.model_copy(
        update={"schedule": run_kind, "predicted": None, "solver": None})
    ev_run = ev if plan_run is plan else Evaluator(instance, plan_run).evaluate()
    if plan_run is not plan:
        what = {"gpipe": "GPipe schedule", "explicit": "schedule given op by op"}[plan.schedule_kind]
        order = ("its 1F1B order (forward_backward_pipelining_without_interleaving)" if fmt == "megatron"
                 else "its TrainSchedule, a 1F1B order (deepspeed/runtime/pipe/schedule.py)")
        fits = "" if ev_run.feasible else (" and does not fit in memory: "
                                           + "; ".join(v.message for v in ev_run.violations))
        warnings.append(f"{name} has no {what}: the plan's {plan.schedule_kind} micro-batch order runs as "
                        f"{order}, simulated iteration {_fmt_s(ev_run.iteration_time_s)} instead of "
                        f"{_fmt_s(ev.iteration_time_s)}{fits}")
    rm = build_rank_map(instance, plan_run)
    warnings += rm.warnings
    layers = _layers(instance)
    if not layers.standard:
        warnings.append(f"the model {instance.workload.model.name!r} lists its own units "
                        f"({', '.join(layers.names[:4])}{' ...' if len(layers.names) > 4 else ''}), not embed, "
                        f"blocks and head: the layer names below treat 'embed' as the embedding, 'head' as the "
                        "output layer and every other unit as a transformer layer; check them against your model")
    spec = instance.workload.model
    if spec.num_heads and plan.tp > 1:
        kv = spec.num_kv_heads or spec.num_heads
        if spec.num_heads % plan.tp or kv % plan.tp:
            warnings.append(f"tensor parallelism splits attention heads across its ranks: {spec.num_heads} heads "
                            f"({kv} key/value heads) do not divide among {plan.tp} ranks")
    builder = {"megatron": _megatron, "torchtitan": _torchtitan, "deepspeed": _deepspeed}[fmt]
    files, args, mapping, notes = builder(instance, plan_run, layers, warnings, ver=ver)
    _dp_sync(fmt, instance, plan_run, ev_run, ver, files, warnings, mapping)
    args, last = args if isinstance(args, tuple) else (args, "")  # last: after the user's arguments
    files["rank_map.csv"] = rm.to_csv()
    files["plan.json"] = plan.to_json() + "\n"
    for domain in instance.domain_names:
        if rm.agents_in(domain):
            files[_script_path(domain, instance.domain_names)] = _script(fmt, instance, rm, domain, args, ver=ver,
                                                                         last=last)
    files["README.md"] = _readme(fmt, instance, plan, plan_run, ev, ev_run, rm, layers, warnings, mapping,
                                 notes, sorted(files), ver=ver)
    return Export(fmt, dict(sorted(files.items())), tuple(warnings), rm, plan_run, ver.version)


# -- SPEC 11: the data-parallel sync option --------------------------------------------------
# DiLoCo's outer optimizer (arXiv 2311.08105, section 3): SGD with Nesterov momentum, lr 0.7,
# momentum 0.9.  torchtitan's TorchFT integration (pytorch/torchtitan @000204a4,
# torchtitan/config/job_config.py, class FaultTolerance, TOML section [fault_tolerance]): enable,
# semi_sync_method ("local_sgd" or "diloco", torchft/local_sgd.py), sync_steps (H), should_quantize
# (quantise the outer all-reduce), fragment_sync_delay (Streaming DiLoCo's tau: inner steps before
# blocking on a fragment), fragment_update_alpha.  Later versions move it to torchtitan/experiments/ft
# and add num_fragments / module_fqns_per_model_fragment (the Streaming DiLoCo fragments).
OUTER_LR, OUTER_MOMENTUM = 0.7, 0.9
TORCHTITAN_FT_SRC = "pytorch/torchtitan @000204a4 torchtitan/config/job_config.py (FaultTolerance)"


def _outer_what(sync, groups: int) -> str:
    """What a DiLoCo outer loop needs, in words (the warning's list)."""
    what = (f"an outer loop across the {groups} group(s) (replicas whose first stage shares a domain): every "
            f"H = {sync.H} inner steps, all-reduce the pseudo-gradient (weights minus the last synced ones) in "
            f"{sync.bits} bits per parameter and apply an outer optimizer, SGD with Nesterov momentum "
            f"(lr {OUTER_LR}, momentum {OUTER_MOMENTUM}, DiLoCo arXiv 2311.08105), its state "
            f"({'on the GPU' if sync.outer_state == 'gpu' else 'in host memory'}) as planned")
    if sync.mode == "streaming":
        what += (f"; Streaming DiLoCo (arXiv 2501.18512): the outer sync in F = {sync.fragments} fragments, "
                 f"each overlapped with {sync.overlap} inner step(s)")
    return what


def _dp_sync(fmt, instance, plan: Plan, ev, ver, files: dict, warnings: list, mapping: list) -> None:
    """The plan's data-parallel sync option (SPEC 11) in the framework's terms: written where
    the framework has a setting for it, else a warning naming what to add and what the job
    costs as launched (every step at 16 bits: ``ev.per_step_time_s``).  A plain plan: nothing."""
    sync = plan.dp_sync
    if sync is None or sync.plain:
        return
    name = NAMES[fmt]
    per = "" if ev.per_step_time_s is None else (
        f"; launched as written, the replicas sync every step at 16 bits: simulated "
        f"{_fmt_s(ev.per_step_time_s)} per iteration instead of {_fmt_s(ev.effective_time_s)}")
    if sync.mode == "every_step":
        if fmt == "deepspeed":
            warnings.append(f"the plan sends its gradients in {sync.bits} bits per parameter ({sync.label()}); "
                            "DeepSpeed's compressed-communication optimizers (optimizer type OneBitAdam, "
                            "ZeroOneAdam, OneBitLamb: deepspeed/runtime/fp16/onebit/) send 1 bit with error "
                            "feedback and replace Adam, so none is written: add one if 1 bit suits you, or a "
                            f"{sync.bits}-bit gradient compression hook" + per)
        else:
            warnings.append(f"the plan sends its gradients in {sync.bits} bits per parameter ({sync.label()}); "
                            f"{name} has no gradient-compression setting: add a {sync.bits}-bit compression "
                            "communication hook (e.g. PowerSGD or a quantising DDP comm hook)" + per)
        mapping.append(("dp sync", sync.label(), "(none: see the warnings)", "SPEC 11"))
        return
    if fmt == "torchtitan" and ver.cli == "toml" and "torchtitan.toml" in files:
        ft = [("enable", True), ("semi_sync_method", "diloco"), ("sync_steps", sync.H),
              ("should_quantize", sync.bits < 16)]
        if sync.mode == "streaming":
            ft.append(("fragment_sync_delay", sync.overlap))
        body = [f"# SPEC 11 {sync.label()}: TorchFT's DiLoCo ({TORCHTITAN_FT_SRC}); needs torchft,",
                "# its lighthouse, and one job per replica group with its own replica_id (README warnings).",
                "[fault_tolerance]"] + [f"{k} = {json.dumps(v)}" for k, v in ft]  # TOML: true, 30, "diloco"
        files["torchtitan.toml"] = files["torchtitan.toml"].rstrip("\n") + "\n\n" + "\n".join(body) + "\n"
        mapping.append(("dp sync", sync.label(), "[fault_tolerance] " + ", ".join(f"{k} = {v}" for k, v in ft),
                        TORCHTITAN_FT_SRC))
        missing = [f"torchft's lighthouse and one torchrun job per group ([fault_tolerance] replica_id 0..{ev.sync_groups - 1}, "
                   f"group_size {ev.sync_groups}), which the launch scripts do not start",
                   f"the outer optimizer SGD with Nesterov momentum, lr {OUTER_LR}, momentum {OUTER_MOMENTUM} "
                   "(DiLoCo, arXiv 2311.08105), not a [fault_tolerance] key in this version"]
        if sync.bits < 16:
            missing.append(f"should_quantize uses torchft's own quantisation, not necessarily {sync.bits} bits")
        if sync.mode == "streaming":
            missing.append(f"F = {sync.fragments} fragments: later torchtitan's num_fragments "
                           "(torchtitan/experiments/ft), not a key here")
        warnings.append(f"torchtitan runs the plan's {sync.label()} through TorchFT ([fault_tolerance] written); "
                        "add " + "; ".join(missing) + per)
        return
    how = ("torchtitan's TorchFT integration ([fault_tolerance] semi_sync_method = \"diloco\", sync_steps, "
           f"should_quantize, fragment_sync_delay: {TORCHTITAN_FT_SRC}; torchtitan {ver.version} has it under "
           "torchtitan/experiments/ft) or torchft's DiLoCo (torchft/local_sgd.py, sync_every = H)"
           if fmt == "torchtitan" else
           "e.g. torchft's DiLoCo (torchft/local_sgd.py: DiLoCo(manager, model, inner_optimizer, "
           "outer_optimizer, sync_every = H)) around the training loop")
    warnings.append(f"{name} has no setting for the plan's {sync.label()}: add {_outer_what(sync, ev.sync_groups)}; "
                    f"for instance {how}" + per)
    mapping.append(("dp sync", sync.label(), "(none: see the warnings)", "SPEC 11"))


# -- per framework: files, the mapping table, notes ------------------------------------------

def _megatron(instance, plan: Plan, layers: _Layers, warnings: list, ver: Version) -> tuple[dict, str, list, list]:
    wl, spec = instance.workload, instance.workload.model
    S = plan.num_stages
    layout = "|".join(_megatron_stage(layers.kinds[st.start:st.end]) for st in plan.stages)
    args = [("--tensor-model-parallel-size", plan.tp), ("--pipeline-model-parallel-size", S)]
    if S > 1:
        args.append(("--pipeline-model-parallel-layout", f'"{layout}"'))
    args += [("--micro-batch-size", plan.micro_batch_size), ("--global-batch-size", wl.global_batch_size),
             ("--seq-length", wl.seq_len), ("--max-position-embeddings", wl.seq_len)]
    if spec.num_layers:
        args += [("--num-layers", spec.num_layers), ("--hidden-size", spec.hidden_size),
                 ("--ffn-hidden-size", spec.ffn_hidden_size), ("--num-attention-heads", spec.num_heads)]
        kv = spec.num_kv_heads or spec.num_heads
        if kv != spec.num_heads:
            args += [("--group-query-attention", None), ("--num-query-groups", kv)]
        args += _megatron_architecture(spec)
        if not spec.tied_embeddings:
            args.append(("--untie-embeddings-and-output-weights", None))
    else:
        warnings.append("the model is a list of units, not an architecture: set --num-layers, --hidden-size and "
                        "the other model arguments of Megatron-LM yourself")
    if wl.recompute:
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                 ("--recompute-num-layers", 1)]
    args += [("--bf16", None), ("--grad-reduce-in-bf16", None)]
    problems = check_megatron_args(ver.version, args)
    if problems:  # a flag this version does not parse: a bug of the export, not of the input
        raise RuntimeError(f"Megatron-LM {ver.version} would refuse the exported arguments: " + "; ".join(problems))
    lines = "\n".join(f"  {k}" + ("" if v is None else f" {v}") for k, v in args)
    mapping = [
        ("stages", S, "--pipeline-model-parallel-size", "megatron/training/arguments.py"),
        ("stage bounds (units per stage)", _bounds(plan),
         f"--pipeline-model-parallel-layout {layout}" if S > 1 else "(one stage: none)",
         "megatron/core/transformer/pipeline_parallel_layer_layout.py"),
        ("tp", plan.tp, "--tensor-model-parallel-size", "megatron/training/arguments.py"),
        ("replicas", plan.replicas, "data-parallel size = world size / (tp x pp), no argument",
         "megatron/training/arguments.py (validate_args)"),
        ("micro_batch_size", plan.micro_batch_size, "--micro-batch-size", "megatron/training/arguments.py"),
        ("global batch (replicas x micro-batch x micro-batches)", wl.global_batch_size, "--global-batch-size",
         "megatron/training/arguments.py"),
        ("schedule", plan.schedule_kind, "1F1B, the only non-interleaved order",
         "megatron/core/pipeline_parallel/schedules.py"),
        ("recompute", wl.recompute, "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
         if wl.recompute else "(none)", "megatron/training/arguments.py"),
        ("gradient precision (bf16: 2 bytes per parameter)", "bf16", "--bf16 --grad-reduce-in-bf16",
         "megatron/training/arguments.py (validate_args)"),
        ("placement", "per (replica, stage)", "rank placement only (rank_map.csv, launch/*.sh)",
         "megatron/core/parallel_state.py (order tp-cp-ep-dp-pp)"),
    ]
    if spec.num_layers:
        arch = " ".join(k + ("" if v is None else f" {v}") for k, v in _megatron_architecture(spec))
        mapping.append(("architecture (gated_mlp " + ("yes" if spec.gated_mlp else "no") + ")",
                        "LLaMA-style" if spec.gated_mlp else "GPT-style", arch, "megatron/training/arguments.py"))
    notes = []
    if spec.num_layers:
        notes.append("The model file gives sizes, not the architecture's kind: a model with a gated MLP is "
                     "exported as LLaMA-style (RoPE, RMSNorm, SwiGLU, no biases in linear layers), one without as "
                     "GPT-style (learned absolute positions, LayerNorm, GeLU, biases). Add `--rotary-base` (e.g. "
                     "500000 for Llama 3) and your tokenizer's vocabulary (the plan counts "
                     f"{spec.vocab_size} tokens) after the host name.")
    if S > 1:
        notes.append("The layout string gives each stage's layers: `E` the embedding, `t` a transformer layer, `L` "
                     "the output layer and loss, `|` between stages (Megatron-LM's "
                     "`--pipeline-model-parallel-layout`, megatron/core/transformer/pipeline_parallel_layer_layout.py)."
                     + _megatron_older(plan, layers))
    if spec.num_layers and spec.tied_embeddings and S > 1:
        notes.append("The model ties its embedding and output weights: Megatron-LM keeps a copy on the first and "
                     "the last stage and all-reduces its gradient between them every iteration, which the plan "
                     "does not price.")
    notes.append("`--grad-reduce-in-bf16` keeps gradients in bf16, as the plan counts them (2 bytes per parameter "
                 "synchronised, SPEC 3); versions without it accumulate and all-reduce the gradients of bf16 "
                 "training in fp32 (`validate_args`), twice the plan's gradient bytes.")
    notes.append("Add your data, tokenizer and optimizer arguments after the host name; they are passed to "
                 "`pretrain_gpt.py` (set `TRAIN` to run another script).")
    return {}, lines, mapping, notes


def _megatron_architecture(spec) -> list[tuple[str, object]]:
    """Megatron-LM's arguments for the model's kind: LLaMA-style when its MLP is gated, else GPT-style
    (Megatron-LM's defaults, written out)."""
    if spec.gated_mlp:
        return [("--position-embedding-type", "rope"), ("--normalization", "RMSNorm"), ("--swiglu", None),
                ("--disable-bias-linear", None)]
    return [("--position-embedding-type", "learned_absolute"), ("--normalization", "LayerNorm")]


def _bounds(plan: Plan) -> str:
    return ", ".join(f"[{s.start}, {s.end})" for s in plan.stages)


def _megatron_stage(kinds) -> str:
    n = sum(1 for k in kinds if k == "t")
    body = "" if n == 0 else "t" if n == 1 else f"t*{n}"
    return ("E" if "E" in kinds else "") + body + ("L" if "L" in kinds else "")


def _megatron_older(plan: Plan, layers: _Layers) -> str:
    """How Megatron-LM versions without the layout argument can (or cannot) take the split."""
    counts = [sum(1 for k in layers.kinds[s.start:s.end] if k == "t") for s in plan.stages]
    S = len(counts)
    ends = layers.kinds[plan.stages[0].start] == "E" and layers.kinds[plan.stages[-1].end - 1] == "L"
    if S == 1 or not layers.standard:
        return ""
    if ends and len(set(counts)) == 1:
        return " Older versions without it split the layers evenly by default, which is this split."
    middle = counts[1:-1]
    if ends and len(set(middle)) <= 1 and counts[0] > 0 and counts[-1] > 0:
        return (f" Older versions take this split as `--decoder-first-pipeline-num-layers {counts[0]} "
                f"--decoder-last-pipeline-num-layers {counts[-1]}` (the middle stages even).")
    return (" Versions without it cannot express this split (their `--decoder-first-pipeline-num-layers` / "
            "`--decoder-last-pipeline-num-layers` make only the first and last stage uneven).")


def _fqns(layers: _Layers, start: int, end: int) -> list[str]:
    out = []
    for u in range(start, end):
        k = layers.kinds[u]
        out += ["tok_embeddings"] if k == "E" else ["norm", "output"] if k == "L" else \
            [f"layers.{layers.block_index(u)}"]
    return out


def _torchtitan(instance, plan: Plan, layers: _Layers, warnings: list, ver: Version) -> tuple[dict, str, list, list]:
    wl, spec = instance.workload, instance.workload.model
    R, S, t, b, m = plan.replicas, plan.num_stages, plan.tp, plan.micro_batch_size, plan.num_micro_batches
    fsdp = R > 1 and (S > 1 or t > 1)
    if fsdp:
        warnings.append(f"torchtitan applies plain data parallelism (DDP) only when nothing else is parallel "
                        f"(torchtitan/models/llama3/infra/parallelize.py), so the {R} replicas are FSDP shards "
                        f"(data_parallel_shard_degree = {R}, fsdp_reshard_after_forward = \"never\"): weights, "
                        "gradients and optimizer state are sharded over the replicas (less memory than the plan "
                        "counts), and each iteration reduce-scatters the gradients in float32 (mixed_precision_reduce, "
                        "torchtitan's only choice) and all-gathers the bf16 weights: 1.5 times the bytes of the "
                        "plan's bf16 all-reduce")
    elif R > 1:
        warnings.append("torchtitan keeps float32 weights, so DDP all-reduces float32 gradients: twice the bytes of "
                        "the plan's bf16 all-reduce (2 bytes per parameter, SPEC 3)")
    sched = {"1f1b": "1F1B", "gpipe": "GPipe", "explicit": "1F1B"}[plan.schedule_kind]
    parts = [_fqns(layers, s.start, s.end) for s in plan.stages]
    model = torchtitan_model(spec)
    if model is None:
        warnings.append(f"torchtitan has no model configuration for {spec.name!r} (its llama3 flavors are 8B, 70B "
                        "and 405B): register one"
                        + (" (a config_registry function; set TORCHTITAN_MODULE and TORCHTITAN_CONFIG to it)"
                           if ver.cli == "args" else " and set [model] name and flavor in torchtitan.toml")
                        + " before launching")
    files = {}
    if plan.schedule_kind == "explicit":
        files["schedule.csv"] = schedule_csv(plan.schedule.ops)
    values = [  # (section, key, value), in torchtitan's names
        ("training", "local_batch_size", m * b),
        ("training", "global_batch_size", wl.global_batch_size),
        ("training", "seq_len", wl.seq_len),
        ("parallelism", "data_parallel_replicate_degree", 1 if fsdp else R),
        ("parallelism", "data_parallel_shard_degree", R if fsdp else 1)]
    if fsdp:
        values.append(("parallelism", "fsdp_reshard_after_forward", "never"))
    values += [("parallelism", "tensor_parallel_degree", t),
               ("parallelism", "context_parallel_degree", 1),
               ("parallelism", "pipeline_parallel_degree", S),
               ("parallelism", "pipeline_parallel_schedule", sched),
               ("parallelism", "pipeline_parallel_microbatch_size", b)]
    if ver.cli == "toml":
        args = _torchtitan_toml(instance, plan, layers, ver, files, values, parts, model)
        ac = f'[activation_checkpoint] mode = "{"full" if wl.recompute else "none"}"'
        key = lambda section, name: f"[{section}] {name}"  # noqa: E731
        where = "torchtitan/config/job_config.py"
    else:
        args = _torchtitan_args(instance, plan, ver, values, parts, model)
        ac = f"activation_checkpoint:{'full' if wl.recompute else 'none'}"
        key = lambda section, name: f"--{section}.{name}"  # noqa: E731
        where = "torchtitan/config/configs.py"
    csv_key = key("parallelism", "pipeline_parallel_schedule_csv")
    mapping = [
        ("model", spec.name, ('[model] name = "llama3", flavor = "%s"' % model[0] if ver.cli == "toml"
                              else f"--module llama3 --config {model[1]}") if model else "(none: register one)",
         where if ver.cli == "toml" else "torchtitan/config/manager.py, torchtitan/models/llama3/config_registry.py"),
        ("stages", S, key("parallelism", "pipeline_parallel_degree"), where),
        ("stage bounds (units per stage)", _bounds(plan),
         key("parallelism", "module_fqns_per_model_part"), where + ", torchtitan/distributed/pipeline_parallel.py"),
        ("tp", t, key("parallelism", "tensor_parallel_degree"), where),
        ("replicas", R, key("parallelism", f"data_parallel_{'shard' if fsdp else 'replicate'}_degree"), where),
        ("micro_batch_size", b, key("parallelism", "pipeline_parallel_microbatch_size"), where),
        ("micro-batches per replica", m, f"{key('training', 'local_batch_size')} = {m} x {b}", where),
        ("global batch", wl.global_batch_size, key("training", "global_batch_size"), where),
        ("schedule", plan.schedule_kind, f'{key("parallelism", "pipeline_parallel_schedule")} {sched}'
         + (f" and {csv_key}" if plan.schedule_kind == "explicit" else ""),
         where + ", torch/distributed/pipelining/schedules.py"),
        ("recompute", wl.recompute, ac, where if ver.cli == "toml" else
         "torchtitan/distributed/activation_checkpoint.py"),
        ("placement", "per (replica, stage)", "rank placement only (rank_map.csv, launch/*.sh)",
         "torchtitan/distributed/parallel_dims.py (mesh pp, dp_replicate, dp_shard, cp, tp)"),
    ]
    notes = ["`module_fqns_per_model_part` lists each stage's modules by torchtitan's names for llama-style "
             "models: `tok_embeddings`, `layers.i`, `norm` and `output` (the plan's `head`)."]
    if ver.cli == "args":
        notes.append(f"torchtitan {ver.version} takes its configuration on the command line: `--module` and "
                     "`--config` pick a config_registry function, the other arguments override its fields "
                     "(torchtitan/config/manager.py); there is no TOML job file. Your own `--section.key` "
                     "arguments after the host name go before the activation-checkpoint subcommand (`LAST` in "
                     "the scripts), which must come after every option.")
    if plan.schedule_kind == "explicit":
        notes.append("`schedule.csv` holds the plan's op lists in torch.distributed.pipelining's compute-only "
                     "format (row j: stage j's actions `jF<i>`, `jB<i>`); the scripts pass its absolute path "
                     f"(`{csv_key}`), and torchtitan runs it with `_PipelineScheduleRuntime` "
                     "(torchtitan/distributed/pipeline_parallel.py, build_pipeline_schedule).")
    return files, args, mapping, notes


def _torchtitan_args(instance, plan: Plan, ver: Version, values, parts, model) -> tuple[str, str]:
    """The command-line arguments of torchtitan ``ver`` (0.3.0 and later) for the plan: those before
    the user's own, and the activation-checkpoint subcommand, which comes after them."""
    if model:
        args = [("--module", "llama3"), ("--config", model[1])]
    else:
        need = "a torchtitan config_registry for this model (README.md)"  # no name: this text is inside a shell word
        args = [("--module", f'"${{TORCHTITAN_MODULE:?set TORCHTITAN_MODULE and TORCHTITAN_CONFIG to {need}}}"'),
                ("--config", f'"${{TORCHTITAN_CONFIG:?set TORCHTITAN_MODULE and TORCHTITAN_CONFIG to {need}}}"')]
    for section, name, value in values:
        args.append((f"--{section}.{name}", value))
        if name == "pipeline_parallel_degree":  # several values: followed by a --flag, which ends them
            args.append(("--parallelism.module_fqns_per_model_part", [",".join(p) for p in parts]))
    if plan.num_stages > 1:  # Trainer.Config refuses pipeline parallelism with CUDA graphs (torchtitan/trainer.py)
        args.insert(5, ("--training.disable_cuda_graphs", None))
    if plan.schedule_kind == "explicit":
        args.append(("--parallelism.pipeline_parallel_schedule_csv", '"$HERE/schedule.csv"'))
    # a tyro subcommand: after every other argument, the user's too (tyro refuses options after it)
    last = (f"activation_checkpoint:{'full' if instance.workload.recompute else 'none'}", None)
    problems = check_torchtitan_args(ver.version, args + [last])
    if problems:  # an argument this version does not parse: a bug of the export, not of the input
        raise RuntimeError(f"torchtitan {ver.version} would refuse the exported arguments: " + "; ".join(problems))
    lines = []
    for k, v in args:
        shown = "" if v is None else " " + (" ".join(v) if isinstance(v, list) else str(v))
        lines.append(f"  {k}{shown}")
    return "\n".join(lines), f"  {last[0]}"


def _torchtitan_toml(instance, plan: Plan, layers: _Layers, ver: Version, files: dict, values, parts,
                     model) -> str:
    """``torchtitan.toml`` (into ``files``) for torchtitan ``ver`` (0.2.x, TOML job configs); returns the
    scripts' arguments."""
    wl, spec = instance.workload, instance.workload.model
    R, S, t = plan.replicas, plan.num_stages, plan.tp
    lines = [f"# planner export --format torchtitan: instance {_text(instance.name)}, {R} replica(s) x {S} stage(s) "
             f"x tp {t} = {plan.gpus_used} GPUs",
             f"# For torchtitan {ver.version} ({ver.pip}); names from torchtitan/config/job_config.py; launch "
             "with launch/DOMAIN.sh (see README.md).", ""]
    if model:
        lines += ["[model]", 'name = "llama3"', f'flavor = "{model[0]}"  # {_text(spec.name)}', ""]
    else:
        lines += ["# [model]  set name and flavor to torchtitan's model matching "
                  f"{_text(spec.name)}" + (f" ({spec.num_layers} layers, hidden {spec.hidden_size})" if spec.num_layers
                                    else ""),
                  "# name = \"llama3\"",
                  "# flavor = \"...\"",
                  ""]
    section = None
    for sec, name, value in values:
        if sec != section:
            if section is not None:
                lines.append("")
            lines.append(f"[{sec}]")
            section = sec
        text = f'"{value}"' if isinstance(value, str) else str(value)
        comment = (f"  # sequences per data-parallel rank per iteration: {plan.num_micro_batches} micro-batches "
                   f"x {plan.micro_batch_size}") if name == "local_batch_size" else ""
        lines.append(f"{name} = {text}{comment}")
    if plan.schedule_kind == "explicit":
        lines.append('# pipeline_parallel_schedule_csv: given by the launch scripts with its absolute path')
    lines.append("module_fqns_per_model_part = [")
    lines += [f"  {json.dumps(p)}," for p in parts]
    lines.append("]")
    if all(layers.kinds[s.start] == "t" for s in plan.stages[1:]) and layers.standard:
        points = [f"layers.{layers.block_index(s.start)}" for s in plan.stages[1:]]
        lines.append(f"# torchtitan before module_fqns_per_model_part: pipeline_parallel_split_points = "
                     f"{json.dumps(points)}")
    lines += ["", "[activation_checkpoint]", f'mode = "{"full" if wl.recompute else "none"}"', ""]
    files["torchtitan.toml"] = "\n".join(lines)
    args = '  --job.config_file "$HERE/torchtitan.toml"'
    if plan.schedule_kind == "explicit":
        args += '\n  --parallelism.pipeline_parallel_schedule_csv "$HERE/schedule.csv"'
    return args


def _deepspeed(instance, plan: Plan, layers: _Layers, warnings: list, ver: Version) -> tuple[dict, str, list, list]:
    wl = instance.workload
    R, S, t, b, m = plan.replicas, plan.num_stages, plan.tp, plan.micro_batch_size, plan.num_micro_batches
    if t > 1:
        warnings.append(f"DeepSpeed's PipelineModule does not split a layer over GPUs itself: tensor parallelism "
                        f"of {t} needs tensor-parallel layers (e.g. Megatron-DeepSpeed's); the topology gives "
                        f"the 'model' axis {t} ranks")
    config = {
        "train_batch_size": wl.global_batch_size,
        "train_micro_batch_size_per_gpu": b,
        "gradient_accumulation_steps": m,
        "pipeline": {"stages": S, "activation_checkpoint_interval": 1 if wl.recompute else 0},
        "zero_optimization": {"stage": 0},
        "bf16": {"enabled": True},
    }
    parts = [s.start for s in plan.stages] + [plan.stages[-1].end]
    names = "\n".join(f"    {i:>4}  {_py_doc(n)}" for i, n in enumerate(layers.names))
    iname = _py_doc(instance.name)
    py = f'''"""The plan's pipeline for DeepSpeed (planner export --format deepspeed, instance {iname}),
written for DeepSpeed {ver.version} ({ver.pip}).

DeepSpeed's PipelineModule partitions by "parameters", "uniform" or "type:REGEX"
(deepspeed/runtime/pipe/module.py, _partition_layers); none gives a chosen split,
so PlannedPipelineModule takes the plan's stage bounds PARTS instead.  Give it one
layer per planner unit, in order:
{names}
"""

from deepspeed.pipe import PipelineModule
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

STAGES = {S}
REPLICAS = {R}
TENSOR_PARALLEL = {t}
# stage j holds layers PARTS[j] .. PARTS[j + 1] - 1
PARTS = {parts}
ACTIVATION_CHECKPOINT_INTERVAL = {1 if wl.recompute else 0}


def topology():
    """Ranks in the plan's order: axes pipe, data, model (model fastest)."""
    return PipeModelDataParallelTopology(num_pp=STAGES, num_mp=TENSOR_PARALLEL, num_dp=REPLICAS)


class PlannedPipelineModule(PipelineModule):
    """PipelineModule(layers, topology=topology(), loss_fn=..., activation_checkpoint_interval=...)
    with the plan's stages."""

    def _partition_layers(self, method="uniform"):
        if len(self._layer_specs) != PARTS[-1]:
            raise ValueError(f"{{len(self._layer_specs)}} layers given; the plan has {{PARTS[-1]}} units")
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self.parts = list(PARTS)
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])
'''
    files = {"ds_config.json": json.dumps(config, indent=2) + "\n", "deepspeed_pipeline.py": py}
    mapping = [
        ("stages", S, "PipeModelDataParallelTopology(num_pp=...); config pipeline.stages",
         "deepspeed/runtime/pipe/topology.py, deepspeed/runtime/config.py"),
        ("stage bounds (units per stage)", _bounds(plan),
         f"PlannedPipelineModule PARTS = {parts} (deepspeed_pipeline.py)", "deepspeed/runtime/pipe/module.py"),
        ("tp", t, "PipeModelDataParallelTopology(num_mp=...)", "deepspeed/runtime/pipe/topology.py"),
        ("replicas", R, "PipeModelDataParallelTopology(num_dp=...)", "deepspeed/runtime/pipe/topology.py"),
        ("micro_batch_size", b, "train_micro_batch_size_per_gpu", "deepspeed/runtime/config.py"),
        ("micro-batches per replica", m, "gradient_accumulation_steps", "deepspeed/runtime/config.py"),
        ("global batch", wl.global_batch_size, "train_batch_size", "deepspeed/runtime/config.py"),
        ("schedule", plan.schedule_kind, "TrainSchedule (1F1B), fixed", "deepspeed/runtime/pipe/schedule.py"),
        ("recompute", wl.recompute, f"activation_checkpoint_interval = {1 if wl.recompute else 0}",
         "deepspeed/runtime/pipe/module.py"),
        ("placement", "per (replica, stage)", "rank placement only (rank_map.csv, launch/*.sh)",
         "deepspeed/runtime/pipe/topology.py (axes pipe, data, model)"),
    ]
    notes = ["Build your model as `PlannedPipelineModule(layers, topology=topology(), loss_fn=...)` from "
             "`deepspeed_pipeline.py`, one layer per planner unit, and pass `--deepspeed --deepspeed_config "
             "ds_config.json` (added by the scripts) to `deepspeed.initialize` through your script's "
             "arguments (`deepspeed.add_config_arguments`). ZeRO stays at stage 0: the plan counts full "
             "weights, gradients and Adam state on every replica, and DeepSpeed's pipeline engine accepts "
             "ZeRO 0 or 1 only.",
             "The plan counts bf16 gradients (2 bytes per parameter synchronised, SPEC 3); DeepSpeed accumulates and "
             "all-reduces them in the type `data_types.grad_accum_dtype` selects (deepspeed/runtime/config.py), "
             "which this config leaves at DeepSpeed's default: check it against the plan."]
    return files, '  --deepspeed\n  --deepspeed_config "$HERE/ds_config.json"', mapping, notes


# -- launch scripts and README ---------------------------------------------------------------

def _script(fmt: str, instance, rm: RankMap, domain: str, args: str, ver: Version | None = None,
            last: str = "") -> str:
    """The launch script of ``domain``'s hosts.  Names are data, never code: every name the
    script uses is a shell-quoted variable (SCRIPT, DOMAIN, MASTER_HOST, HOSTS) or case
    pattern, and comments carry them with control characters escaped (:func:`_text`)."""
    agents = rm.agents_in(domain)
    hosts = sorted({a.host for a in agents}, key=lambda h: int(h.rsplit("node", 1)[1]))
    master = rm.agents[0].host
    path = _script_path(domain, instance.domain_names)
    n = len(rm.agents)
    cases = []
    for h in hosts:
        runs = [a for a in agents if a.host == h]
        calls = "; ".join(f"run {','.join(map(str, a.gpus))} {a.node_rank} {a.nproc}" for a in runs)
        ranks = ", ".join(_rank_span(a) for a in runs)
        cases.append(f"  {_sh(h)}) {calls} ;;  # ranks {ranks}")
    return f"""#!/usr/bin/env bash
# planner export --format {fmt}: the hosts of domain {_text(domain)} (instance {_text(instance.name)}).{_targets(fmt, ver)}
# On each host below run:  MASTER_ADDR=<address of {_text(master)}> bash {_text(_sh(path))} HOST [more arguments]
# Every host of every domain uses the same MASTER_ADDR and MASTER_PORT: torchrun node rank 0 runs on {_text(master)}.
set -euo pipefail
SCRIPT={_sh(path)}
DOMAIN={_sh(domain)}
MASTER_HOST={_sh(master)}
HOSTS={_sh(' '.join(hosts))}
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")/.." && pwd)"
: "${{MASTER_ADDR:?set MASTER_ADDR to the address of $MASTER_HOST, where torchrun node rank 0 runs}}"
MASTER_PORT="${{MASTER_PORT:-{MASTER_PORT}}}"
read -r -a TRAIN <<< "${{TRAIN:-{TRAIN[fmt]}}}"
ARGS=(
{args}
){_last(last)}
HOST="${{1:?usage: $SCRIPT HOST [more arguments]; HOST is one of $HOSTS}}"
shift
EXTRA=("$@")
run() {{  # CUDA devices, torchrun node rank, processes
  CUDA_VISIBLE_DEVICES="$1" torchrun --nnodes {n} --node-rank "$2" --nproc-per-node "$3" \\
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "${{TRAIN[@]}}" "${{ARGS[@]}}" "${{EXTRA[@]}}"{' "${LAST[@]}"' if last else ''} &
}}
case "$HOST" in
{chr(10).join(cases)}
  *) echo "$SCRIPT: $HOST is not a host of domain $DOMAIN ($HOSTS)" >&2; exit 2 ;;
esac
wait
"""


def _last(last: str) -> str:
    """The arguments that follow the user's (a tyro subcommand), as a bash array ``LAST``."""
    return f"\n# after your arguments: torchtitan takes no option after this subcommand\nLAST=(\n{last}\n)" if last else ""


def _targets(fmt: str, ver: Version | None) -> str:
    """The script's line naming the framework version it is written for."""
    return "" if ver is None else f"\n# Written for {NAMES[fmt]} {ver.version}: {ver.pip}."


# -- names in the files: quoted for where they go (the loader refuses unsafe names, SPEC 9;
#    these keep the files safe when an instance was built without it) ----------------------

_CONTROL = {"Cc", "Cf", "Cs", "Zl", "Zp"}  # control, format (bidi overrides), surrogates, line breaks


def _sh(value) -> str:
    """``value`` as one shell word (``shlex.quote``: unchanged when it is made of safe characters)."""
    return shlex.quote(str(value))


def _text(value) -> str:
    """``value`` on one line of a comment or of Markdown: control characters and line breaks
    as Python escapes (``alpha\\n`` for a newline), so a name cannot end the line it is on."""
    return "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in _CONTROL else c
                   for c in str(value))


def _py_doc(value) -> str:
    """``value`` inside a Python ``\"\"\"`` docstring: backslashes and quotes escaped, so it cannot
    end the string, and control characters as escapes."""
    return _text(str(value).replace("\\", "\\\\").replace('"', '\\"'))


def _script_path(domain: str, domains) -> str:
    """``launch/DOMAIN.sh``; a domain whose name is not a valid name (SPEC 9: only when an
    instance was made without the loader) gets ``launch/domainI.sh``, I its position, so a
    file name never leaves the launch folder."""
    if name_problem(domain) is None:
        return f"launch/{domain}.sh"
    stem = f"domain{list(domains).index(domain)}"
    while stem in domains:
        stem += "_"
    return f"launch/{stem}.sh"


def _rank_span(agent) -> str:
    a, b = agent.first_rank, agent.first_rank + agent.nproc - 1
    return str(a) if a == b else f"{a}-{b}"


def _blocks(rm: RankMap, agent) -> str:
    """'stage 0: replicas 0-1' for the ranks of an agent."""
    rows = rm.rows[agent.first_rank:agent.first_rank + agent.nproc]
    by_stage: dict[int, list[int]] = {}
    for row in rows:
        reps = by_stage.setdefault(row.stage, [])
        if row.replica not in reps:
            reps.append(row.replica)
    out = []
    for j, reps in by_stage.items():
        span = str(reps[0]) if len(reps) == 1 else f"{reps[0]}-{reps[-1]}"
        out.append(f"stage {j}, replica{'s' if len(reps) > 1 else ''} {span}")
    return "; ".join(out)


def _table(header, rows) -> list[str]:
    """A Markdown table; a ``|`` inside a cell is escaped (GitHub needs it even in code)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_text(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def _readme(fmt, instance, plan, plan_run, ev, ev_run, rm, layers, warnings, mapping, notes, files,
            ver: Version | None = None) -> str:
    name = NAMES[fmt]
    R, S, t = plan.replicas, plan.num_stages, plan.tp
    master = rm.agents[0].host
    lines = [f"# Launching the plan for `{_text(instance.name)}` with {name}", "",
             f"Written by `planner export --format {fmt}`. The plan: {R} replica(s) x {S} stage(s) x tensor "
             f"parallelism {t} = {plan.gpus_used} GPUs on {len({d for row in plan.placement for d in row})} "
             f"domain(s) of {_text(instance.name)}; micro-batches of {plan.micro_batch_size} sequence(s), "
             f"{plan.num_micro_batches} per replica, {instance.workload.seq_len} tokens each; schedule "
             f"{plan.schedule_kind}" + ("" if plan_run is plan else f" (runs as {plan_run.schedule_kind})")
             + f". Simulated iteration: {_fmt_s(ev.iteration_time_s)}"
             + ("" if plan_run is plan else f" as planned, {_fmt_s(ev_run.iteration_time_s)} as launched")
             + " (`planner evaluate`).", ""]
    if ver is not None:
        lines += [f"Written for **{name} {ver.version}** (`planner export --framework-version {ver.version}`; "
                  f"install: {ver.pip}). The arguments were checked against that version's own parser: "
                  f"{ver.source}. Other versions may name them differently (docs/export.md).", ""]
    if warnings:
        lines += ["## Warnings: what the launch does not do as planned", ""]
        lines += [f"- {_text(w)}" for w in warnings] + [""]
    typed = instance.heterogeneous  # GPU types (SPEC v3 (g)): which domains run which type
    if typed:
        used_doms = {d for row in plan_run.placement for d in row}
        rows = []
        for u in instance.types_used:
            g = instance.gpu_types[u]
            doms = [d.name for d, k in zip(instance.domains, instance.domain_type) if k == u and d.name in used_doms]
            stages = sorted({j for row in plan_run.placement for j, d in enumerate(row) if d in doms})
            if doms:
                rows.append((_text(g.name), f"{g.peak_tflops:g} x {g.mfu:g}", f"{g.memory_gb:g}",
                             ", ".join(_text(d) for d in doms), ", ".join(map(str, stages))))
        lines += ["## GPU types", "",
                  "The domains run different GPU types; each stage runs at its domain's type's speed and memory "
                  "(SPEC v3). The launch files are the same for every type: check that each host's software "
                  "(CUDA, NCCL, the framework) supports its GPUs, and that NCCL can join the types.", ""]
        lines += _table(("GPU type", "peak TFLOP/s x mfu", "memory GB", "domains", "stages"), rows) + [""]
    lines += ["## What to run where", "",
              f"The job has {rm.world_size} ranks started by {len(rm.agents)} torchrun agent(s). Hosts are "
              "named `DOMAIN-nodeK`: map them to your machines. On every host set `MASTER_ADDR` to the address "
              f"of **{_text(master)}** (torchrun node rank 0 runs there) and the same `MASTER_PORT` (default "
              f"{MASTER_PORT}), then run its domain's script with the host's name:", "",
              "```sh"]
    used = [d for d in instance.domain_names if rm.agents_in(d)]
    lines += [f"MASTER_ADDR=<address of {_text(_sh(master))}> "
              f"bash {_text(_sh(_script_path(d, instance.domain_names)))} HOST   # HOST: "
              + _text(" ".join(sorted({a.host for a in rm.agents_in(d)}, key=lambda h: int(h.rsplit('node', 1)[1]))))
              for d in used]
    lines += ["```", ""]
    for d in used:
        dom = instance.domain(d)
        agents = rm.agents_in(d)
        kind = f" {_text(instance.domain_gpu(d).name)}" if typed else ""
        lines += [f"### {_text(d)}", "",
                  f"{dom.gpus}{kind} GPUs, {dom.gpus_per_node} per host; the plan uses {sum(a.nproc for a in agents)}.",
                  ""]
        lines += _table(("host", "torchrun --node-rank", "CUDA_VISIBLE_DEVICES", "--nproc-per-node", "ranks",
                         "runs"),
                        [(a.host, a.node_rank, ",".join(map(str, a.gpus)), a.nproc, _rank_span(a), _blocks(rm, a))
                         for a in agents])
        lines.append("")
    lines += [f"## The plan in {name}'s terms", ""]
    shown = []
    for p, v, a, s in mapping:
        if p == "schedule":
            v = plan.schedule_kind + ("" if plan_run is plan else f", runs as {plan_run.schedule_kind}")
        elif isinstance(v, bool):
            v = "yes" if v else "no"
        shown.append((p, v, f"`{a}`", s))
    lines += _table(("plan", "value", name, "source"), shown)
    lines += ["", "## Stages", ""]
    rows = []
    for j, st in enumerate(plan.stages):
        doms = Counter(row[j] for row in plan.placement)
        rows.append((j, f"[{st.start}, {st.end})", _unit_range(layers.names[st.start], layers.names[st.end - 1]),
                     ", ".join(f"{d} x{n}" if n > 1 else d for d, n in doms.items()))
                    + ((", ".join(dict.fromkeys(instance.domain_gpu(d).name for d in doms)),) if typed else ()))
    lines += _table(("stage", "units", "layers", "domains (replicas)") + (("GPU type",) if typed else ()), rows)
    lines += ["", "## Rank order", "",
              f"rank = stage x {R * t} + replica x {t} + tensor-parallel rank: tensor parallelism fastest, then "
              "the data-parallel rank (the plan's replica), then the stage. " + _ORDER[fmt]
              + " `rank_map.csv` gives every rank's domain, host, torchrun node rank, local rank, CUDA device, "
              "replica, stage, tensor-parallel rank, units, micro-batching and schedule; "
              "`planner.problem.io.load_rank_map` reads it back into the plan the job runs.", "",
              "## Notes", ""]
    notes = notes + [
        "The frameworks know nothing of domains: the plan's placement exists only as *which host starts which "
        "ranks* (the scripts and `rank_map.csv`).",
        "Gradients of a stage are averaged over its replicas by the framework's collective (NCCL picks its own "
        "ring or tree over the ranks); the plan's model prices a ring over the domains in the instance's order "
        "(SPEC 5), so the measured synchronisation time may differ.",
        "torchrun agents may start different numbers of processes: torchrun numbers each agent's ranks after "
        "those of the agents with lower node ranks (torch/distributed/elastic/agent/server/api.py, "
        "`_assign_worker_ranks`); do not set `TORCH_ELASTIC_WORKER_IDENTICAL=1`. Several agents may share a "
        "host, each with its own `CUDA_VISIBLE_DEVICES`.",
    ]
    lines += [f"- {n}" for n in notes]
    lines += ["", "## Files", ""]
    what = {"README.md": "this file", "rank_map.csv": "one row per rank (see Rank order)",
            "plan.json": "the plan as exported (`planner evaluate INSTANCE plan.json`)",
            "torchtitan.toml": "torchtitan's job config (`--job.config_file`)",
            "schedule.csv": "the plan's micro-batch order for torch.distributed.pipelining",
            "ds_config.json": "DeepSpeed's config (`--deepspeed_config`)",
            "deepspeed_pipeline.py": "the stage bounds and topology for DeepSpeed's PipelineModule"}
    scripts = {_script_path(d, instance.domain_names): d for d in instance.domain_names}
    lines += [f"- `{_text(f)}`: " + (what.get(f) or f"the launch script of domain {_text(scripts.get(f, f))}")
              for f in sorted(files + ["README.md"])]
    return "\n".join(lines) + "\n"


_ORDER = {
    "megatron": "Megatron-LM's default order `tp-cp-ep-dp-pp` (megatron/core/parallel_state.py, "
                "`initialize_model_parallel`), with context and expert parallelism 1.",
    "torchtitan": "torchtitan's device mesh `[pp, dp_replicate, dp_shard, cp, tp]` "
                  "(torchtitan/distributed/parallel_dims.py), row-major, with the replicas on one data-parallel "
                  "axis and context parallelism 1.",
    "deepspeed": "DeepSpeed's `PipeModelDataParallelTopology` axes `['pipe', 'data', 'model']` "
                 "(deepspeed/runtime/pipe/topology.py), the last axis fastest.",
}
