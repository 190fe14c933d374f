"""How problem objects are shown: a registry the presentation family fills.

``Instance`` and ``Plan`` print as text, render as HTML in Jupyter and draw
themselves, but the problem family sits below :mod:`planner.presentation`
and may not import it.  The presentation modules register their functions
here when they are imported (``import planner`` imports them), and the
objects look them up by name.

>>> from planner.problem.views import view
>>> view("plan_text")            # doctest: +SKIP
<function plan_text at ...>
"""

from __future__ import annotations

from typing import Callable

_VIEWS: dict[str, Callable] = {}


def register(name: str, fn: Callable) -> Callable:
    """Make ``fn`` the view called ``name``; returns ``fn`` (usable as a decorator)."""
    _VIEWS[name] = fn
    return fn


def view(name: str) -> Callable:
    """The view called ``name``; registered by :mod:`planner.presentation` at import."""
    try:
        return _VIEWS[name]
    except KeyError:
        raise RuntimeError(f"no view {name!r}: import planner (planner.presentation registers it)") from None
