"""A plan: replicas, stages, tensor parallelism, placement, micro-batching,
schedule (SPEC section 4), and its JSON form (SPEC section 9).

``Plan`` is a frozen pydantic model; ``plan.to_json()`` and
``Plan.from_json(text)`` round-trip the plan file exactly.  A solver fills
``solver`` (status, objective, bound, gap, time) and ``predicted`` (the
evaluator's figures), and :meth:`Plan.stamped` records in ``solver`` the
hashes that tell whether those claims still hold (SPEC section 9):
``instance_sha256`` (:func:`instance_sha256`, the instance it was made for)
and ``plan_sha256`` (:meth:`Plan.decision_sha256`, the plan as the solver
wrote it).  :func:`claims_check` compares them with an instance and says why
claims must not be shown.

Example
-------
>>> p = Plan(replicas=1, tp=1, micro_batch_size=1, num_micro_batches=4,
...          stages=[Stage(start=0, end=3), Stage(start=3, end=6)],
...          placement=[["a", "b"]], schedule="1f1b")
>>> Plan.from_json(p.to_json()) == p
True
>>> p.num_stages, p.gpus_used
(2, 2)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import InputError, input_error_from_pydantic
from .exact import exact_types
from .files import strict_json
from .dpsync import Compression, DpSync
from .instance import Instance, Options
from .limits import MAX_GLOBAL_BATCH, MAX_GPUS_PER_NODE, MAX_STAGE_MICRO_BATCHES, MAX_TOTAL_GPUS
from .oplists import check_op_lists, op_lists
from .views import view


READER_ONLY_KEYS = ("evaluation", "null_reasons", "$schema")
"""Keys a plan file may hold that :meth:`Plan.from_dict` accepts and drops."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    _exact = field_validator("*", mode="before")(exact_types)  # no true for 1, no "16" for 16 (issue 28)


class Stage(_Strict):
    """Units ``[start, end)`` of the model."""

    start: int = Field(ge=0)
    end: int = Field(ge=1)


class ExplicitSchedule(_Strict):
    """One op list per stage (``"F0"``, ``"B0"`` ...), used by every replica."""

    kind: Literal["explicit"] = "explicit"
    ops: list[list[str]]


class Predicted(BaseModel):
    """The evaluator's figures for the plan (seconds, tokens/s, currency)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    iteration_time_s: float
    estimate_s: float
    throughput_tokens_per_s: float
    cost_per_iteration: float


class SolverInfo(BaseModel):
    """How the plan was found, and what is claimed (SPEC 7, "Bounds and claims";
    docs/guide.md, "Statuses"): ``status`` is optimal, within_gap, feasible,
    time_limit, heuristic ...; ``objective``, ``bound`` and ``gap`` are the
    evaluator's, the bound valid for every plan, explicit schedules included;
    ``estimate_*`` are a search's figures on T_est over ``estimate_family``."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str
    status: str
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    time_s: float = 0.0
    requested_gap: float | None = Field(None, description="the optimality tolerance asked for")
    estimate_status: str | None = Field(None, description="the search's status over estimate_family")
    estimate_objective: float | None = Field(None, description="the search's objective: T_est or its cost")
    estimate_bound: float | None = Field(None, description="lower bound on T_est over estimate_family only")
    estimate_gap: float | None = Field(None, description="the search's gap against estimate_bound")
    estimate_family: str | None = Field(None, description="the plans the estimate_* figures cover")
    instance_sha256: str | None = Field(
        default=None, description="SHA-256 of the instance the plan was made for, as canonical JSON (keys "
                                  "sorted, defaults filled, no whitespace): its claims hold for that instance only")
    plan_sha256: str | None = Field(
        default=None, description="SHA-256 of the plan as the solver wrote it (every field but `instance`, "
                                  "`predicted` and the two hashes, as canonical JSON): an edited plan "
                                  "no longer carries the solver's claims")


CLAIM_REASONS = {"stale": "the instance changed since the plan was made",
                 "edited": "the plan was edited",
                 "absent": "the plan records no instance hash"}
"""Why a plan's solver claims (status, bound, gap) are not shown, by kind (see :func:`claims_check`)."""


def json_object(text: str):
    """``json.loads(text)``; ``InputError`` with the line and column where it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}") from None


def _sha256(data) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _as_written(value):
    """``value`` as it reads back from a plan file: non-finite numbers become
    null (:func:`planner.problem.files.strict_json`) and null object entries are
    left out (``Plan.to_dict``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        out = {k: _as_written(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_as_written(v) for v in value]
    return value


_SYNC_DEFAULTS = {k: Options.model_fields[k].default for k in
                  ("dp_sync_H", "dp_sync_bits", "dp_sync_fragments", "dp_sync_overlap")}
_COMPRESSION_DEFAULT = Compression().model_dump(mode="json")


def instance_sha256(instance: Instance) -> str:
    """SHA-256 (hex) of ``instance`` as canonical JSON: every field with its
    default filled in (the model inlined), keys sorted, no whitespace.  The
    same instance gives the same hash whether read from TOML or JSON and
    whatever the order of its keys; any changed figure gives another.  The GPU-type
    fields of SPEC v3 (``[[gpus]]``, a domain's ``gpu``) enter only when given, and the
    section 11 fields (``[options] dp_sync*``, ``[compression]``, ``[[quality]]``) only
    when not at their defaults, so an instance without them keeps the hash it had
    before they existed."""
    data = instance.model_dump(mode="json", by_alias=True)
    if data["options"].get("dp_sync") is None:
        data["options"].pop("dp_sync", None)
    for key, default in _SYNC_DEFAULTS.items():
        if data["options"].get(key) == default:
            data["options"].pop(key)
    if data.get("compression") == _COMPRESSION_DEFAULT:
        data.pop("compression")
    if not data.get("quality"):
        data.pop("quality", None)
    if data.get("gpus") is None:
        data.pop("gpus", None)
    if data.get("gpu") is None:
        data.pop("gpu", None)
    if data.get("slice_of") is None:
        data.pop("slice_of", None)
    for d in data["domains"]:
        if d.get("gpu") is None:
            d.pop("gpu", None)
    return _sha256(data)


def claims_check(instance: Instance | None, plan: "Plan") -> tuple[str, str] | None:
    """None when ``plan``'s solver claims (status, bound, gap and the solver's
    other figures) hold for ``instance``: the plan records the hash of this
    very instance and its fields are as the solver wrote them.  Otherwise
    ``(kind, reason)``, kind ``"stale"``, ``"edited"`` or ``"absent"`` and the
    reason of :data:`CLAIM_REASONS`; ``("absent", ...)`` too for a plan
    without a solver block.  ``instance`` None (a plan shown alone): the
    plan's own fields only."""
    info = plan.solver
    if info is None:
        return "absent", "the plan records no solver"
    if not info.instance_sha256:
        return "absent", CLAIM_REASONS["absent"]
    if instance is not None and info.instance_sha256 != instance_sha256(instance):
        return "stale", CLAIM_REASONS["stale"]
    if info.plan_sha256 != plan.decision_sha256():
        return "edited", CLAIM_REASONS["edited"]
    return None


class Plan(_Strict):
    """A training plan; see the module docstring and SPEC section 4."""

    instance: str = ""
    replicas: int = Field(ge=1, le=MAX_TOTAL_GPUS)
    tp: int = Field(ge=1, le=MAX_GPUS_PER_NODE)
    micro_batch_size: int = Field(ge=1, le=MAX_GLOBAL_BATCH)
    num_micro_batches: int = Field(ge=1, le=MAX_GLOBAL_BATCH)
    stages: list[Stage] = Field(min_length=1)
    placement: list[list[str]] = Field(min_length=1)
    schedule: Literal["1f1b", "gpipe"] | ExplicitSchedule = "1f1b"
    dp_sync: DpSync | None = Field(default=None, description="SPEC v3 section 11; absent: every step, 16 bits")
    predicted: Predicted | None = None
    solver: SolverInfo | None = None

    @model_validator(mode="after")
    def _shape(self):
        if len(self.placement) != self.replicas:
            raise ValueError(f"placement has {len(self.placement)} rows for {self.replicas} replicas")
        for r, row in enumerate(self.placement):
            if len(row) != len(self.stages):
                raise ValueError(f"placement[{r}] has {len(row)} domains for {len(self.stages)} stages")
        pos = 0
        for j, st in enumerate(self.stages):
            if st.start != pos or st.end <= st.start:
                raise ValueError(f"stages[{j}] = [{st.start}, {st.end}) does not continue at unit {pos} "
                                 "(stages must be contiguous, non-empty and in order)")
            pos = st.end
        if isinstance(self.schedule, ExplicitSchedule):
            if len(self.stages) * self.num_micro_batches > MAX_STAGE_MICRO_BATCHES:
                raise ValueError(f"{len(self.stages)} stages x {self.num_micro_batches} micro-batches is more "
                                 f"than {MAX_STAGE_MICRO_BATCHES}")
            try:
                lists = op_lists(self.schedule.ops, len(self.stages), self.num_micro_batches)
            except ValueError as err:
                raise ValueError(str(err)) from None
            check_op_lists(lists, len(self.stages), self.num_micro_batches)
        return self

    # -- derived -------------------------------------------------------------
    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def gpus_used(self) -> int:
        return self.replicas * self.num_stages * self.tp

    @property
    def schedule_kind(self) -> str:
        return self.schedule if isinstance(self.schedule, str) else "explicit"

    @property
    def schedule_spec(self):
        """``"1f1b"``/``"gpipe"`` or the explicit op lists (strings)."""
        return self.schedule if isinstance(self.schedule, str) else self.schedule.ops

    def gpus_per_domain(self) -> Counter:
        """GPUs the plan uses in each domain."""
        c: Counter = Counter()
        for row in self.placement:
            for d in row:
                c[d] += self.tp
        return c

    def bounds(self) -> list[tuple[int, int]]:
        return [(s.start, s.end) for s in self.stages]

    def check_against(self, instance: Instance) -> None:
        """Raise ``InputError`` if the plan does not fit the instance's shape."""
        n = instance.num_units
        if self.stages[-1].end != n:
            raise InputError(f"stages end at unit {self.stages[-1].end} but the model has {n} units",
                             f"stages[{len(self.stages) - 1}].end")
        for r, row in enumerate(self.placement):
            for j, d in enumerate(row):
                if d not in instance.domain_index:
                    raise InputError(f"unknown domain {d!r}", f"placement[{r}][{j}]")
        if self.num_stages * self.num_micro_batches > MAX_STAGE_MICRO_BATCHES:
            raise InputError(f"{self.num_stages} stages x {self.num_micro_batches} micro-batches is more than "
                             f"{MAX_STAGE_MICRO_BATCHES} (the simulated schedule would grow with it); use "
                             "more replicas or larger micro-batches", "num_micro_batches")
        gbs = instance.workload.global_batch_size
        if self.replicas * self.micro_batch_size * self.num_micro_batches != gbs:
            raise InputError(f"replicas x micro_batch_size x num_micro_batches = "
                             f"{self.replicas}x{self.micro_batch_size}x{self.num_micro_batches} "
                             f"!= global_batch_size {gbs}", "num_micro_batches")

    # -- claims ----------------------------------------------------------------
    def decision_sha256(self) -> str:
        """SHA-256 (hex) of the plan as its file holds it, without ``instance``,
        ``predicted`` (the evaluator's figures, recomputed whenever the plan is
        scored) and the two hashes in ``solver``; canonical JSON as for
        :func:`instance_sha256`."""
        data = self.model_dump(mode="json", exclude={"instance", "predicted"}, exclude_none=True)
        if "solver" in data:
            data["solver"] = {k: v for k, v in data["solver"].items()
                              if k not in ("instance_sha256", "plan_sha256")}
        return _sha256(_as_written(data))

    def stamped(self, instance: Instance) -> "Plan":
        """The plan with ``solver.instance_sha256`` and ``solver.plan_sha256`` set:
        what a solver returns (``planner.solvers.registry``), so that the claims
        it makes are shown only while they hold (:func:`claims_check`)."""
        if self.solver is None:
            return self
        info = self.solver.model_copy(update={"instance_sha256": instance_sha256(instance),
                                              "plan_sha256": self.decision_sha256()})
        return self.model_copy(update={"solver": info})

    # -- display and tables ---------------------------------------------------
    def __str__(self) -> str:
        return view("plan_text")(self)

    def _repr_html_(self) -> str:
        return view("plan_html")(self)

    def gantt(self, instance: Instance, **kwargs):
        """Gantt chart of one simulated iteration (see :func:`planner.presentation.plot.gantt`)."""
        return view("gantt")(instance, self, **kwargs)

    def to_dataframe(self, instance: Instance, kind: str = "stages"):
        """Stages (``kind="stages"``) or boundary transfers (``"transfers"``) as a
        pandas DataFrame (or a list of dicts without pandas)."""
        if kind not in ("stages", "transfers"):
            raise ValueError("kind is 'stages' or 'transfers'")
        return view("plan_frame")(instance, self, kind)

    # -- construction and JSON -----------------------------------------------
    @classmethod
    def build(cls, bounds, placement, *, tp: int, micro_batch_size: int, instance: Instance,
              schedule="1f1b", **extra) -> "Plan":
        """Convenience constructor: ``bounds`` = [(start, end), ...]; m from the batch."""
        R = len(placement)
        gbs = instance.workload.global_batch_size
        if gbs % (R * micro_batch_size):
            raise InputError(f"global_batch_size {gbs} is not a multiple of replicas x micro_batch_size "
                             f"= {R}x{micro_batch_size}", "micro_batch_size")
        if not isinstance(schedule, (str, ExplicitSchedule)):  # op lists, one per stage
            schedule = ExplicitSchedule(ops=[list(o) for o in schedule])
        return cls(instance=instance.name, replicas=R, tp=tp, micro_batch_size=micro_batch_size,
                   num_micro_batches=gbs // (R * micro_batch_size),
                   stages=[Stage(start=a, end=b) for a, b in bounds],
                   placement=[list(row) for row in placement], schedule=schedule, **extra)

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        """A plan from its JSON object.  The keys ``evaluation`` and
        ``null_reasons`` that ``planner plan --json`` adds (the evaluator's
        figures, recomputed whenever a plan is scored) are accepted and dropped,
        so whatever the planner writes, every command reads; so is ``$schema``
        (an editor's pointer to docs/schemas/plan.schema.json)."""
        data = {k: v for k, v in data.items() if k not in READER_ONLY_KEYS}
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise input_error_from_pydantic(err) from None

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        data = json_object(text)
        if not isinstance(data, dict):
            raise InputError("a plan file holds one JSON object")
        return cls.from_dict(data)

    def to_dict(self) -> dict:
        return self.model_dump(mode="json", exclude_none=True)

    def to_json(self, indent: int | None = 2) -> str:
        return strict_json(self.to_dict(), indent=indent)
