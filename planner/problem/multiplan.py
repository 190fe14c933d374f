"""The multi-plan file (SPEC v3 section 10, "Files"): one allocation and plan per job.

A multi-plan is JSON::

    {"instance": "two-jobs", "objective": "maxmin",
     "jobs": [{"name": "small", "admitted": true,
               "gpus": {"alpha": 8}, "link_share": {"alpha|beta": 0.5},
               "uplink_share": {"alpha": 0.5},
               "reference_throughput_tokens_per_s": 150000.0,
               "equal_share_throughput_tokens_per_s": null,
               "plan": {...section 9's plan...}}, ...],
     "solver": {...section 9's solver...}}

``gpus`` defaults, domain by domain, to what the job's plan uses there; a link
not in ``link_share`` has share 0; ``uplink_share`` defaults to ``g_d / gpus_d``
(:meth:`MultiPlan.allocation` fills every default).  A job not admitted holds
nothing: its ``gpus``, shares and ``plan`` are not counted.

Validation (SPEC 9): a malformed file, a share outside [0, 1], a negative or
non-integer GPU count (:meth:`MultiPlan.from_dict`), and, against the instance,
an unknown or missing job, domain or link key, an admitted job without a plan,
or a plan that does not fit its job (:meth:`MultiPlan.check_against`): each an
``InputError`` (exit 2) naming the job and the field.

>>> mp = MultiPlan.from_json(text)          # doctest: +SKIP
>>> MultiPlan.from_json(mp.to_json()) == mp  # doctest: +SKIP
True
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import InputError, input_error_from_pydantic
from .exact import exact_types
from .files import strict_json
from .jobs import MultiInstance, link_key
from .limits import MAX_TOTAL_GPUS
from .names import Name
from .plan import Plan, SolverInfo, json_object
from .views import view

GpuCount = Annotated[int, Field(ge=0, le=MAX_TOTAL_GPUS, strict=True)]
Share = Annotated[float, Field(ge=0, le=1, strict=True, allow_inf_nan=False)]
Rate = Annotated[float, Field(gt=0, le=1e18, strict=True, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    _exact = field_validator("*", mode="before")(exact_types)


class JobAllocation(_Strict):
    """One job of a multi-plan: admitted or not, its allocation and its plan (SPEC 10)."""

    name: Name
    admitted: bool = True
    gpus: dict[str, GpuCount] = Field(
        default={}, description="GPUs allocated per domain; a domain not listed: what the plan uses there")
    link_share: dict[str, Share] = Field(
        default={}, description='share in [0, 1] of each link, keyed "a|b" as the instance gives the link; '
                                'not listed: 0')
    uplink_share: dict[str, Share] | None = Field(
        default=None, description="share in [0, 1] of each domain's uplink; not listed: gpus_d allocated / gpus_d")
    reference_throughput_tokens_per_s: Rate = Field(
        description="tput*: the best effective tokens/s known for the job alone on the whole instance")
    equal_share_throughput_tokens_per_s: Rate | None = Field(
        default=None, description="the best effective tokens/s known for the job on the equal slice")
    plan: Plan | None = Field(default=None, description="SPEC 9's plan; required when admitted")


class MultiPlan(_Strict):
    """A multi-plan (SPEC 10); see the module docstring."""

    instance: str = ""
    objective: Literal["maxmin", "weighted", "deadline", "cost", "makespan"] | None = Field(
        default=None, description="the objective it was made for; absent: the instance's multi_objective")
    jobs: list[JobAllocation] = Field(min_length=1)
    solver: SolverInfo | None = None

    # -- JSON --------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict) -> "MultiPlan":
        """A multi-plan from its JSON object; ``InputError`` naming the job and the field."""
        if not isinstance(data, dict):
            raise InputError("a multi-plan file holds one JSON object")
        data = {k: v for k, v in data.items() if k != "$schema"}
        jobs = data.get("jobs")
        if isinstance(jobs, list):  # each plan's reader-only keys dropped as Plan.from_dict does
            data["jobs"] = [{**j, "plan": Plan.from_dict(j["plan"]).to_dict()}
                            if isinstance(j, dict) and isinstance(j.get("plan"), dict) and _plan_ok(j["plan"])
                            else j for j in jobs]
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise _named(input_error_from_pydantic(err), data) from None

    @classmethod
    def from_json(cls, text: str) -> "MultiPlan":
        return cls.from_dict(json_object(text))

    def to_dict(self) -> dict:
        """The JSON object (``None`` entries of plans left out, as plan files do)."""
        out = {"instance": self.instance, "objective": self.objective, "jobs": []}
        for j in self.jobs:
            d = j.model_dump(mode="json", exclude={"plan"})
            d["plan"] = None if j.plan is None else j.plan.to_dict()
            out["jobs"].append(d)
        out["solver"] = None if self.solver is None else self.solver.model_dump(mode="json", exclude_none=True)
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return strict_json(self.to_dict(), indent=indent)

    # -- shown (views registered by planner.presentation.multiview) -----------------------
    def bind(self, minst: MultiInstance) -> "MultiPlan":
        """Remember ``minst`` for display (``print``, a notebook's HTML, :meth:`draw`) and return
        ``self``.  Not a field: not written to JSON, not compared.  ``planner.multiplan`` and
        ``load_multiplan(path, minst)`` bind what they return.

        >>> mp.bind(minst)._repr_html_()          # doctest: +SKIP
        """
        self.__dict__["_planner_shown_on"] = minst
        return self

    def shown_on(self) -> MultiInstance | None:
        """The instance :meth:`bind` set (None when unbound)."""
        return self.__dict__.get("_planner_shown_on")

    def __str__(self) -> str:
        return view("multiplan_text")(self)

    def _repr_html_(self) -> str:
        return view("multiplan_html")(self)

    def draw(self, minst: MultiInstance | None = None, **kwargs):
        """The map coloured by job (:func:`planner.presentation.multiview.draw_jobs`)."""
        minst = minst if minst is not None else self.shown_on()
        if minst is None:
            raise ValueError("draw needs the instance: mplan.draw(minst) or mplan.bind(minst)")
        return view("draw_jobs")(minst, self, **kwargs)

    # -- against the instance -------------------------------------------------------
    def job(self, name: str) -> JobAllocation:
        for j in self.jobs:
            if j.name == name:
                return j
        raise InputError(f"no job {name!r} in the multi-plan", "jobs")

    def check_against(self, minst: MultiInstance) -> None:
        """``InputError`` (exit 2) when the multi-plan does not fit ``minst``: an unknown,
        repeated or missing job, an unknown domain or link key, an admitted job without a
        plan, a plan that does not fit its job's instance (stages, domains, batch)."""
        names = minst.job_names
        seen: dict[str, int] = {}
        domains = set(minst.domain_names)
        keys = {link_key(l) for l in minst.links}
        for i, j in enumerate(self.jobs):
            where = f"jobs[{i}]"
            if j.name not in names:
                raise InputError(f"unknown job {j.name!r}; the instance's jobs: {', '.join(names)}",
                                 f"{where}.name")
            if j.name in seen:
                raise InputError(f"job {j.name!r} listed twice (also jobs[{seen[j.name]}])", f"{where}.name")
            seen[j.name] = i
            for field, table, known, what in (("gpus", j.gpus, domains, "domain"),
                                              ("uplink_share", j.uplink_share or {}, domains, "domain"),
                                              ("link_share", j.link_share, keys, "link")):
                for k in table:
                    if k not in known:
                        hint = ' (links are keyed "a|b" as the instance gives them)' if what == "link" else ""
                        raise InputError(f"job {j.name!r}: unknown {what} {k!r}; known: "
                                         f"{', '.join(sorted(known))}{hint}", f"{where}.{field}.{k}")
            if j.admitted and j.plan is None:
                raise InputError(f"job {j.name!r} is admitted but has no plan", f"{where}.plan")
            if j.plan is not None:
                try:
                    j.plan.check_against(minst.job_instance(j.name))
                except InputError as err:
                    err.message = f"job {j.name!r}: {err.message}"
                    err.field = f"{where}.plan.{err.field}" if err.field else f"{where}.plan"
                    raise
        missing = [n for n in names if n not in seen]
        if missing:
            raise InputError(f"the multi-plan must list every job of the instance; missing: {', '.join(missing)}",
                             "jobs")

    def allocation(self, minst: MultiInstance, name: str) -> tuple[dict[str, int], dict[str, float], dict[str, float]]:
        """Job ``name``'s allocation with every default filled (SPEC 10): ``(gpus, link_share,
        uplink_share)`` over every domain and link of ``minst``: GPUs as given, else what its
        plan uses in the domain; link shares as given, else 0; uplink shares as given, else
        ``g_d / gpus_d``.  A job not admitted holds nothing (all 0)."""
        j = self.job(name)
        if not j.admitted:
            return ({d: 0 for d in minst.domain_names}, {link_key(l): 0.0 for l in minst.links},
                    {d: 0.0 for d in minst.domain_names})
        used = j.plan.gpus_per_domain() if j.plan is not None else {}
        gpus = {d: int(j.gpus[d]) if d in j.gpus else int(used.get(d, 0)) for d in minst.domain_names}
        links = {link_key(l): float(j.link_share.get(link_key(l), 0.0)) for l in minst.links}
        given = j.uplink_share or {}
        ups = {d.name: float(given[d.name]) if d.name in given else (gpus[d.name] / d.gpus if d.gpus else 0.0)
               for d in minst.domains}
        return gpus, links, ups


def _plan_ok(data: dict) -> bool:
    """Whether ``data`` reads as a plan (else the multi-plan reader reports the field)."""
    try:
        Plan.from_dict(data)
        return True
    except InputError:
        return False


_JOB = re.compile(r"^jobs\[(\d+)\]")


def _named(err: InputError, data: dict) -> InputError:
    """``err`` with the job's name in its message when its field is under ``jobs[i]``."""
    m = _JOB.match(err.field or "")
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if m and isinstance(jobs, list) and int(m.group(1)) < len(jobs):
        job = jobs[int(m.group(1))]
        if isinstance(job, dict) and isinstance(job.get("name"), str):
            err.message = f"job {job['name']!r}: {err.message}"
    return err


def references_from_dict(data, minst: MultiInstance, name: str | None = None) -> dict[str, float]:
    """The reference throughputs tput*_j (effective tokens/s, SPEC 10) of ``minst``'s jobs
    from a references file's contents: ``{job: tput}``, ``{"references": {job: tput}}``
    or a benchmark's sidecar keyed by mix name (``{mix: {"references": {...}}}``, the
    entry of ``name``, default the instance's).  Every job needs a finite number > 0;
    an unknown job is refused.  ``InputError`` names the field.

    >>> references_from_dict({"a": 2.0e5, "b": 4.1e6}, minst)          # doctest: +SKIP
    {'a': 200000.0, 'b': 4100000.0}
    """
    if not isinstance(data, dict):
        raise InputError("a references file holds one JSON object: {job name: tokens/s}")
    prefix = "references"
    key = name or minst.name
    if isinstance(data.get(key), dict) and isinstance(data[key].get("references"), dict):
        data, prefix = data[key]["references"], f"{key}.references"
    elif isinstance(data.get("references"), dict):
        data = data["references"]
    elif data and all(isinstance(v, dict) for v in data.values()):  # a sidecar without this mix
        raise InputError(f"no entry for instance {key!r} (entries: {', '.join(sorted(data)) or 'none'})", key)
    names = [j.name for j in minst.jobs]
    for k in data:
        if k not in names:
            raise InputError(f"unknown job {k!r}; the instance's jobs: {', '.join(names)}", f"{prefix}.{k}")
    out = {}
    for n in names:
        v = data.get(n)
        if v is None:
            raise InputError(f"no reference throughput for job {n!r}", f"{prefix}.{n}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise InputError(f"a reference throughput is a finite number of tokens/s > 0, not {v!r}",
                             f"{prefix}.{n}")
        out[n] = float(v)
    return out
