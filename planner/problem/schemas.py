"""JSON Schemas of the file formats: instance, model profile, plan (SPEC section 9), and the
multi-job instance and multi-plan (SPEC section 10).

Each schema is generated from the pydantic model that reads the file
(:class:`~planner.problem.instance.Instance`,
:class:`~planner.problem.model.ModelSpec`, :class:`~planner.problem.plan.Plan`,
:class:`~planner.problem.jobs.MultiInstance`, :class:`~planner.problem.multiplan.MultiPlan`),
so a key, a type or a range changes in one place.  Two additions say what the
readers accept beyond the models: ``$schema`` (an editor's pointer to the
schema, dropped on reading) in every file, and the keys ``planner plan --json``
adds to a plan (:data:`~planner.problem.plan.READER_ONLY_KEYS`).  Instance and
model files are TOML: validate the table ``tomllib`` reads.

A schema checks keys, types, ranges and required fields.  Rules across fields
-- unique domain names, links between known domains, a connected WAN,
micro-batch sizes dividing the batch, contiguous stages that cover the
model -- are checked by the planner (``planner validate``, ``planner
evaluate``), not by the schema.

The generated files are committed as ``docs/schemas/KIND.schema.json``
(``planner schema KIND --out FILE``; a test keeps them up to date).

Example
-------
>>> sorted(schema("plan")["required"])
['micro_batch_size', 'num_micro_batches', 'placement', 'replicas', 'stages', 'tp']
>>> schema("instance")["properties"]["$schema"]["type"]
'string'
"""

from __future__ import annotations

import json

from .instance import Instance
from .jobs import MultiInstance
from .model import ModelSpec
from .multiplan import MultiPlan
from .plan import READER_ONLY_KEYS, Plan

KINDS = ("instance", "model", "plan", "multi-instance", "multiplan")
_MODELS = {"instance": Instance, "model": ModelSpec, "plan": Plan, "multi-instance": MultiInstance,
           "multiplan": MultiPlan}
_TITLES = {
    "instance": "planner instance: GPUs, domains, WAN links, workload and options (TOML or JSON)",
    "model": "planner model profile: an architecture or a list of units (TOML)",
    "plan": "planner plan: replicas, stages, tensor parallelism, placement, micro-batching, schedule (JSON)",
    "multi-instance": "planner instance with several jobs ([[jobs]], SPEC 10): GPUs, domains, WAN links, jobs "
                      "and options (TOML or JSON)",
    "multiplan": "planner multi-plan (SPEC 10): per job, admitted or not, its GPUs and shares of links and "
                 "uplinks, its reference throughputs and its plan (JSON)",
}
_EXTRA = {
    "$schema": {"type": "string", "description": "the file's JSON Schema, for editors; ignored by the planner"},
    "evaluation": {"type": "object", "description": "the evaluator's figures that `planner plan --json` adds; "
                                                    "recomputed whenever the plan is scored, ignored on reading"},
    "null_reasons": {"type": "object", "additionalProperties": {"type": "string"},
                     "description": "why a figure is null (`infinite`, `not a number`); ignored on reading"},
}


def schema(kind: str) -> dict:
    """The JSON Schema (draft 2020-12) of file kind ``instance``, ``model``, ``plan``,
    ``multi-instance`` or ``multiplan``."""
    if kind not in KINDS:
        raise ValueError(f"kind is one of {', '.join(KINDS)}, not {kind!r}")
    s = _MODELS[kind].model_json_schema(mode="validation")
    s["title"] = _TITLES[kind]
    keys = READER_ONLY_KEYS if kind == "plan" else ("$schema",)
    s["properties"].update({k: _EXTRA[k] for k in keys})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **s}


def schema_text(kind: str) -> str:
    """:func:`schema` as the text of ``docs/schemas/KIND.schema.json`` (2-space indents, final newline)."""
    return json.dumps(schema(kind), indent=2, ensure_ascii=False) + "\n"
