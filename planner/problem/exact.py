"""Exact JSON/TOML types for the file readers: what the JSON Schemas say.

pydantic's lax mode turns ``true`` into 1 and ``"16"`` into 16, so an
instance with ``gpus = "16"`` or a plan with ``"tp": true`` used to load
although ``docs/schemas/`` refuse them.  :func:`exact_types` is a "before"
validator for every field of the readers' models (``_Strict`` bases of
:mod:`~planner.problem.instance`, :mod:`~planner.problem.model`,
:mod:`~planner.problem.plan`): a number field (``int``, ``float``, optional,
or a list of them) takes no boolean and no string, a ``bool`` field only
``true``/``false``.  Numbers made by the program (NumPy scalars) pass.

>>> from pydantic import BaseModel, ValidationError, field_validator
>>> class M(BaseModel):
...     n: int
...     _exact = field_validator("*", mode="before")(exact_types)
>>> M(n=3).n
3
>>> try:
...     M(n="3")
... except ValidationError as e:
...     print(e.errors()[0]["msg"])
Value error, expected a number, not the string '3' (write it without quotes)
"""

from __future__ import annotations

import types
import typing
from functools import lru_cache

_NUMBERS = (int, float)


@lru_cache(maxsize=None)
def _expects(model, name: str) -> tuple[str, str] | None:
    """(``"scalar"`` or ``"list"``, ``"number"`` or ``"bool"``) for a field of
    plain numbers or booleans (optionally None), else None (left to pydantic)."""
    tp = model.model_fields[name].annotation
    parts = [tp]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        parts = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(parts) == 1 and typing.get_origin(parts[0]) in (list, tuple):
        args = [a for a in typing.get_args(parts[0]) if a is not Ellipsis]
        kinds = _kind(args)
        return ("list", kinds) if kinds else None
    kinds = _kind(parts)
    return ("scalar", kinds) if kinds else None


def _kind(parts) -> str | None:
    if parts and all(p is bool for p in parts):
        return "bool"
    if parts and all(p in _NUMBERS for p in parts):
        return "number"
    return None


def _check(value, kind: str, where: str = ""):
    if kind == "number" and isinstance(value, bool):
        raise ValueError(f"expected a number{where}, not the boolean {str(value).lower()}")
    if kind == "number" and isinstance(value, str):
        raise ValueError(f"expected a number{where}, not the string {value!r} (write it without quotes)")
    if kind == "bool" and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        raise ValueError(f"expected true or false{where}, not {value!r}")


def exact_types(cls, value, info):
    """A ``field_validator("*", mode="before")``: refuse a boolean or a string
    where the field holds numbers, anything but a boolean where it holds one
    (``ValueError`` naming the item of a list)."""
    expects = _expects(cls, info.field_name) if info.field_name in cls.model_fields else None
    if expects is None or value is None:
        return value
    shape, kind = expects
    if shape == "list" and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check(v, kind, f" at item {i}")
    elif shape == "scalar":
        _check(value, kind)
    return value
