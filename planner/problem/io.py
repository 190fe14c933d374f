"""Files: instances, models and plans (the I/O edge; the core stays pure).

Model names in an instance are looked up as :mod:`planner.problem.files`
says; a value ending in ``.toml`` is a path relative to the instance
file.  Errors name the file and the field (``InputError``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError
from .files import (DEFAULT_INSTANCE, available, check_folder, find_model, instances_dir,  # noqa: F401
                    load_model, models_dir, new_folder, read_mapping, read_text, write_atomic, write_files,
                    write_folder)
from .instance import Instance
from .model import ModelSpec
from .plan import Plan
from .rankmap import parse_rank_map, parse_schedule_csv, plan_from_rank_map
from .specversion import refuse_v3_fields

def resolve_instance_path(ref: str | Path | None) -> Path:
    """A path, or the name of a packaged instance, or None for the default."""
    if ref is None:
        ref = DEFAULT_INSTANCE
    p = Path(ref)
    if p.is_file():
        return p
    for ext in (".toml", ".json"):
        cand = instances_dir() / f"{ref}{ext}"
        if cand.is_file():
            return cand
    return p  # reported as missing by the loader


def load_instance(ref: str | Path | None = None, spec: int | None = None) -> Instance:
    """Load and validate an instance file (TOML or JSON) or packaged name.

    Raises ``InputError`` naming the file and the field, e.g.
    ``instances/x.toml: links[2].bandwidth_gbps: Input should be greater than 0 (got -5)``.
    ``spec`` is the performance model the instance is meant for (default
    :data:`~planner.problem.specversion.DEFAULT_SPEC`); under 2 a field only SPEC v3
    models (``uplink_gbps``, ``gradient_sync = "reduce_broadcast"``,
    ``unit_overhead_ms > 0``) is refused, since the planners would ignore it.
    """
    path = resolve_instance_path(ref)
    data = read_mapping(path)

    def resolve(name: str) -> ModelSpec:
        return _resolve_model(path, name, "workload.model")

    wl = data.get("workload")
    if isinstance(wl, dict) and isinstance(wl.get("model"), str):
        data = {**data, "workload": {**wl, "model": resolve(wl["model"])}}
    try:
        inst = Instance.from_dict(data)
        refuse_v3_fields(inst, spec)
        return inst
    except InputError as err:
        if err.file is None:
            err.file = str(path)
        raise


def load_multi_instance(ref: str | Path):
    """Load and validate an instance file with ``[[jobs]]`` (SPEC 10), a path or the name
    of a packaged one (TOML or JSON), as :func:`load_instance` does: each job's model
    name looked up near the file.  ``InputError`` names the file, the job and the field
    (``jobs[1].iterations``); a one-job file (``[workload]``) is refused.

    >>> minst = load_multi_instance("two-jobs")      # doctest: +SKIP
    """
    from .jobs import MultiInstance

    path = resolve_instance_path(ref)
    data = read_mapping(path)
    jobs = data.get("jobs")
    if isinstance(jobs, list):
        resolved = []
        for i, job in enumerate(jobs):
            if isinstance(job, dict) and isinstance(job.get("model"), str):
                job = {**job, "model": _resolve_model(path, job["model"], f"jobs[{i}].model")}
            resolved.append(job)
        data = {**data, "jobs": resolved}
    try:
        return MultiInstance.from_dict(data)
    except InputError as err:
        if err.file is None:
            err.file = str(path)
        raise


def _resolve_model(path: Path, name: str, field: str) -> ModelSpec:
    """The model ``name`` of the instance file ``path``: a path ending in ``.toml`` relative to
    it, else a model file looked up near it and in models/ (``InputError`` naming ``field``)."""
    if name.endswith(".toml"):
        mpath = path.parent / name
    else:
        mpath = find_model(name, path.parent)
        if mpath is None:
            raise InputError(f"no model named {name!r} (looked for {name}.toml in models/; "
                             f"available: {', '.join(available('models'))})", field, str(path))
    return load_model(mpath)


def _load_checked(path: str | Path, parse, check) -> object:
    """``parse(text)`` of the file at ``path``, then ``check(result)`` when given; an
    ``InputError`` from either names the file."""
    path = Path(path)
    text = read_text(path)
    try:
        out = parse(text)
        if check is not None:
            check(out)
    except InputError as err:
        raise err.with_file(path) from None
    return out


def load_plan(path: str | Path, instance: Instance | None = None) -> Plan:
    """Read a plan JSON; with ``instance``, also check it fits its shape."""
    return _load_checked(path, Plan.from_json, None if instance is None else lambda p: p.check_against(instance))


def load_multiplan(path: str | Path, minst=None):
    """Read a multi-plan JSON (SPEC 10); with ``minst`` (a
    :class:`~planner.problem.jobs.MultiInstance`), also check it fits: every job listed
    once, known domains and links, a plan for every admitted job.  ``InputError`` names
    the file, the job and the field."""
    from .multiplan import MultiPlan

    mp = _load_checked(path, MultiPlan.from_json, None if minst is None else lambda mp: mp.check_against(minst))
    return mp if minst is None else mp.bind(minst)


def load_references(path: str | Path, minst) -> dict[str, float]:
    """Reference throughputs tput*_j (tokens/s) of ``minst``'s jobs from a JSON file
    (:func:`planner.problem.multiplan.references_from_dict`: ``{job: tput}``, or a
    benchmark's sidecar keyed by mix name).  ``InputError`` names the file and field.

    >>> load_references("refs.json", minst)            # doctest: +SKIP
    {'a': 200000.0, 'b': 4100000.0}
    """
    import json

    from .multiplan import references_from_dict

    def parse(text):
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InputError(f"not JSON: {err}") from None
        return references_from_dict(data, minst)

    return _load_checked(path, parse, None)


def load_rank_map(path: str | Path, instance: Instance | None = None) -> Plan:
    """The plan a launched job runs, from the ``rank_map.csv`` that ``planner export`` wrote
    (:mod:`planner.problem.rankmap`); an ``explicit`` schedule's op lists come from
    ``schedule.csv`` beside it.  With ``instance``, the plan is checked against it and carries
    its name.  ``InputError`` names the file and the line or column.

    >>> plan = load_rank_map("job/rank_map.csv", inst)     # doctest: +SKIP
    """
    path = Path(path)
    rows = _with_file(path, lambda: parse_rank_map(read_text(path)))
    ops = None
    if rows[0].schedule == "explicit":
        sched = path.parent / "schedule.csv"
        ops = _with_file(sched, lambda: parse_schedule_csv(read_text(sched)))
    plan = _with_file(path, lambda: plan_from_rank_map(rows, ops, instance.name if instance else ""))
    if instance is not None:
        _with_file(path, lambda: plan.check_against(instance))
    return plan


def _with_file(path: Path, fn):
    try:
        return fn()
    except InputError as err:
        if err.file is None:
            err.file = str(path)
        raise


def save_plan(plan: Plan, path: str | Path) -> None:
    write_atomic(path, plan.to_json() + "\n")


def check_output(path: str | Path, option: str, inputs=(), plan: bool = False) -> None:
    """Refuse (``InputError``, exit 2) before any work a write to ``path`` that
    would replace one of the ``inputs`` files or, when ``plan`` is true, an
    existing file that is not a plan."""
    path = Path(path)
    if not path.exists():
        return
    for src in inputs:
        try:
            same = src is not None and Path(src).exists() and path.samefile(src)
        except OSError:
            same = False
        if same:
            raise InputError(f"{path} is an input file of this command; refusing to overwrite it "
                             "(write to another file)", option)
    if plan:
        if not path.is_file():
            raise InputError(f"{path} is not a regular file", option)
        try:
            Plan.from_json(read_text(path))
        except InputError:
            raise InputError(f"{path} exists and is not a plan file; refusing to overwrite it "
                             "(remove it or write to another file)", option) from None


# -- measured networks (planner import-network) ---------------------------------------
def read_matrix(path: str | Path):
    """A measurement CSV (:func:`planner.problem.measured.parse_matrix`); errors name the file."""
    from .measured import parse_matrix

    return parse_matrix(read_text(path), str(path))


def read_sites(path: str | Path | None):
    """A sites table TOML (:func:`planner.problem.measured.parse_sites`); None: all defaults."""
    from .measured import Sites, parse_sites

    if path is None:
        return Sites()
    return parse_sites(read_mapping(Path(path)), str(path))


def write_instance(data: dict, header: list[str], path: str | Path, blame=None, spec: int | None = None) -> Instance:
    """Write ``data`` (an instance dict) as TOML to ``path`` atomically, after
    loading it back with :func:`load_instance` (the model looked up from
    ``path``'s folder); when the loader refuses it, ``path`` is left untouched
    and the ``InputError`` names ``path`` and the field, or the file and field
    that ``blame(field)`` returns as ``(file, field)`` (None: keep ``path``).  ``spec``: the
    model version it is loaded back for (3 lets SPEC v3 fields through, see :func:`load_instance`)."""
    from .files import atomic_path, toml_text

    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(toml_text(data, header))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            inst = load_instance(tmp, spec=spec)
        except InputError as err:
            where = blame(err.field) if blame else None
            if where is not None:
                err.file, err.field = where
            else:
                err.file = str(path)
            raise err from None
    return inst


# -- measured runs and transfers (planner calibrate) ------------------------------------
def read_runs(path: str | Path, instance: Instance):
    """The measured runs of a CSV (``plan,seconds``; :mod:`planner.problem.measurements`),
    each plan file read relative to the CSV's folder and checked against ``instance``.
    ``InputError`` names the CSV and the line (and the plan file and its field).

    >>> runs = read_runs("runs.csv", inst)          # doctest: +SKIP
    >>> runs[0].plan.replicas, runs[0].seconds      # doctest: +SKIP
    (2, 12.5)
    """
    from .measurements import Run, parse_runs

    path = Path(path)
    rows = parse_runs(read_text(path), str(path))
    out = []
    for row in rows:
        where = f"{row.where}, column plan"
        plan_path = path.parent / row.plan
        if not plan_path.is_file():
            raise InputError(f"no such plan file {row.plan!r} (looked for {plan_path}; a path relative to "
                             "the CSV's folder)", where, str(path))
        try:
            plan = load_plan(plan_path)
            plan.check_against(instance)
        except InputError as err:
            inner = ": ".join(p for p in (err.field, err.message) if p)
            raise InputError(f"plan {row.plan}: {inner} (instance {instance.name})", where, str(path)) from None
        out.append(Run(plan, row.seconds, row.plan, row.where, str(path)))
    return out


def read_transfers(path: str | Path, instance: Instance):
    """The measured transfers of a CSV (``a,b,bytes,seconds[,group]``), their domains
    checked against ``instance``; ``InputError`` names the CSV, line and column."""
    from .measurements import parse_transfers

    path = Path(path)
    return parse_transfers(read_text(path), str(path), instance.domain_names)


def write_calibrated(source: str | Path, figures: dict, header: list[str], path: str | Path) -> Instance:
    """Write the instance file ``source`` (TOML or JSON) as TOML to ``path``, atomically,
    with the fields ``figures`` names set (``{"gpu.mfu": 0.42, "links[0].latency_ms": 2.5}``)
    and everything else as the file gives it; a model named by a path (``model =
    "m.toml"``) or found beside ``source`` is written as a path relative to ``path``'s
    folder.  The result is loaded back at SPEC v3 (its ``unit_overhead_ms`` and
    ``uplink_gbps`` are v3 fields) before it replaces anything."""
    source = resolve_instance_path(source)
    data = read_mapping(source)
    out_dir = Path(path).resolve().parent
    wl = data.get("workload")
    if isinstance(wl, dict) and isinstance(wl.get("model"), str):
        name = wl["model"]
        here = (source.parent / name) if name.endswith(".toml") else find_model(name, source.parent)
        there = None if name.endswith(".toml") else find_model(name, out_dir)
        if here is not None and (there is None or Path(there).resolve() != Path(here).resolve()):
            wl["model"] = os.path.relpath(Path(here).resolve(), out_dir)
    for dotted, value in figures.items():
        head, _, key = dotted.rpartition(".")
        table, _, index = head.partition("[")
        target = data[table] if not index else data[table][int(index.rstrip("]"))]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = float(value)
    return write_instance(data, header, path, spec=3)
