"""Files: instances, models and plans (the I/O edge; the core stays pure).

Model names in an instance (``model = "llama2-7b"``) are looked up as
``NAME.toml`` in: the directories of ``$PLANNER_MODEL_PATH``, a ``models/``
folder next to the instance file or one level up, and the packaged
``models/``.  A value ending in ``.toml`` is a path relative to the
instance file.  Errors name the file and the field (``InputError``).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

from pydantic import ValidationError

from .errors import InputError
from .instance import Instance, input_error_from_pydantic
from .model import ModelSpec
from .plan import Plan

DEFAULT_INSTANCE = "edwc-llama2-13b"


def _root(kind: str) -> Path:
    here = Path(__file__).resolve().parent
    packaged = here / "_data" / kind
    return packaged if packaged.is_dir() else here.parent / kind


def models_dir() -> Path:
    """The packaged model profiles."""
    return _root("models")


def instances_dir() -> Path:
    """The packaged instances."""
    return _root("instances")


def _read_mapping(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=str(path)) from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"not valid TOML: {err}", file=str(path)) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON: {err.msg} at line {err.lineno} column {err.colno}",
                         file=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("expected a table/object at the top level", file=str(path))
    return data


def load_model(path: str | Path) -> ModelSpec:
    """Read a model profile TOML; raise ``InputError`` naming file and field."""
    path = Path(path)
    data = _read_mapping(path)
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as err:
        raise input_error_from_pydantic(err).with_file(path) from None


def find_model(name: str, near: Path | None = None) -> Path | None:
    """Path of model ``name`` (see module docstring), or None."""
    dirs = [Path(p) for p in os.environ.get("PLANNER_MODEL_PATH", "").split(os.pathsep) if p]
    if near is not None:
        dirs += [near / "models", near.parent / "models"]
    dirs.append(models_dir())
    for d in dirs:
        cand = d / f"{name}.toml"
        if cand.is_file():
            return cand
    return None


def available(kind: str) -> list[str]:
    """Names of the packaged instances or models."""
    root = instances_dir() if kind == "instances" else models_dir()
    return sorted(p.stem for p in root.glob("*.toml") if not p.name.startswith("_")) + \
        sorted(p.stem for p in root.glob("*.json") if not p.name.startswith("_"))


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


def load_instance(ref: str | Path | None = None) -> Instance:
    """Load and validate an instance file (TOML or JSON) or packaged name.

    Raises ``InputError`` naming the file and the field, e.g.
    ``instances/x.toml: links[2].bandwidth_gbps: Input should be greater than 0 (got -5)``.
    """
    path = resolve_instance_path(ref)
    data = _read_mapping(path)

    def resolve(name: str) -> ModelSpec:
        if name.endswith(".toml"):
            mpath = (path.parent / name)
        else:
            mpath = find_model(name, path.parent)
            if mpath is None:
                raise InputError(f"no model named {name!r} (looked for {name}.toml in models/; "
                                 f"available: {', '.join(available('models'))})",
                                 "workload.model", str(path))
        return load_model(mpath)

    wl = data.get("workload")
    if isinstance(wl, dict) and isinstance(wl.get("model"), str):
        data = {**data, "workload": {**wl, "model": resolve(wl["model"])}}
    try:
        return Instance.from_dict(data)
    except InputError as err:
        if err.file is None:
            err.file = str(path)
        raise


def load_plan(path: str | Path, instance: Instance | None = None) -> Plan:
    """Read a plan JSON; with ``instance``, also check it fits its shape."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError:
        raise InputError("no such file", file=str(path)) from None
    try:
        plan = Plan.from_json(text)
        if instance is not None:
            plan.check_against(instance)
    except InputError as err:
        raise err.with_file(path) from None
    return plan


def save_plan(plan: Plan, path: str | Path) -> None:
    Path(path).write_text(plan.to_json() + "\n")
