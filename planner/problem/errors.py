"""Errors a user can act on, with the exit codes of SPEC section 9.

``InputError`` (exit 2): a file is malformed or inconsistent; it names the
file and the field.  ``InfeasibleError`` (exit 3): the instance is valid but
no plan satisfies the feasibility rules; it carries the reason.
"""

from __future__ import annotations

from pydantic import ValidationError

from .limits import reason

EXIT_OK = 0
EXIT_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_TIME_LIMIT = 4  # the time limit ran out before any plan was found (not a proof of infeasibility)
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells do
EXIT_TERMINATED = 143  # SIGTERM (timeout, kill, Slurm): 128 + SIGTERM; the best plan so far is written too


class PlannerError(Exception):
    """Base class of the errors the command line turns into one line."""

    exit_code = 1


class InputError(PlannerError, ValueError):
    """Malformed or inconsistent input.

    Parameters
    ----------
    message : what is wrong, in words.
    field : dotted path of the offending field (``links[2].a``), if known.
    file : the file it came from, filled in by the loader at the I/O edge.
    """

    exit_code = EXIT_INPUT

    def __init__(self, message: str, field: str | None = None, file: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.file = file

    def with_file(self, file) -> "InputError":
        self.file = str(file)
        return self

    def __str__(self) -> str:
        where = ": ".join(p for p in (self.file, self.field) if p)
        return f"{where}: {self.message}" if where else self.message


class InfeasibleError(PlannerError):
    """The instance admits no feasible plan; ``reasons`` says why."""

    exit_code = EXIT_INFEASIBLE

    def __init__(self, message: str, reasons: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.reasons = list(reasons or [])

    def __str__(self) -> str:
        if not self.reasons:
            return self.message
        return self.message + "\n" + "\n".join(f"  - {r}" for r in self.reasons)


class TimeLimitError(PlannerError):
    """The time limit ran out before a solver found any plan: nothing is proven
    about feasibility (exit 4)."""

    exit_code = EXIT_TIME_LIMIT


class Stopped(PlannerError):
    """A run was stopped (Ctrl-C or SIGTERM: ``reason="interrupted"``, exit 130, or
    143 after SIGTERM (the command line asks :mod:`planner.solvers.stop` which);
    the memory cap: ``"memory_limit"``) before it had any plan to return."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.exit_code = EXIT_INTERRUPTED if reason == "interrupted" else EXIT_INFEASIBLE


def human_bytes(n: float) -> str:
    """Bytes in the unit a person would use: 512 B, 3.4 MB, 72.0 GB (SI)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or str(part).startswith("function-"):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def input_error_from_pydantic(err: ValidationError) -> InputError:
    """The first pydantic error as one ``InputError`` naming the field."""
    e = err.errors(include_url=False)[0]
    kind, msg = e["type"], e["msg"]
    field = _loc(tuple(p for p in e["loc"] if not (isinstance(p, str) and "[" in p)))
    if kind == "extra_forbidden":
        msg = f"unknown key {e['loc'][-1]!r}" if e["loc"] else "unknown key"
    elif kind == "missing":
        msg = "missing required field"
    elif kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    else:
        value = e.get("input")
        if not isinstance(value, (dict, list)):
            msg = f"{msg} (got {value!r})"
    if kind in ("less_than_equal", "less_than", "too_long"):
        why = reason(field)
        if why:
            msg += f": {why}"
    elif kind == "finite_number":
        msg = f"must be a finite number (got {e.get('input')!r})"
    more = len(err.errors()) - 1
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return InputError(msg, field or None)
