"""Measured runs and transfers, what ``planner calibrate`` fits the model to.

Plain data (:class:`Run`, :class:`Transfer`) and pure parsers of the *text*
of the two CSV files (the files are opened in :mod:`planner.problem.io`):

- runs: header ``plan,seconds``; one row per measured plan: the plan file
  (a path relative to the CSV's folder) and the measured iteration time in
  seconds (for example the mean of a few steady iterations).
- transfers (optional): header ``a,b,bytes,seconds`` and an optional fifth
  column ``group``; one row per measured point-to-point transfer of
  ``bytes`` bytes from domain ``a`` to domain ``b`` that took ``seconds``
  (first byte sent to last byte received).  Rows with the same ``group``
  label ran at the same time, started together (what identifies a domain's
  ``uplink_gbps``); an empty group means the transfer ran alone.

Lines starting with ``#`` are comments.  Every problem is an ``InputError``
naming the file and the place (``line 4, column seconds``): a missing or
wrong header, a non-numeric, non-finite or non-positive time or size, a
domain name breaking SPEC 9's rule or unknown to the instance, a transfer
from a domain to itself.

>>> rows = parse_runs("plan,seconds\\np1.json,12.5\\n", "runs.csv")
>>> rows[0].plan, rows[0].seconds, rows[0].where
('p1.json', 12.5, 'line 2')
>>> t = parse_transfers("a,b,bytes,seconds\\nx,y,1e9,0.9\\n", "t.csv", ("x", "y"))
>>> t[0].a, t[0].b, t[0].bytes, t[0].group
('x', 'y', 1000000000.0, None)
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

from .errors import InputError
from .names import WHY, name_problem

MAX_ROWS = 100_000  # measurements in one file: each run is simulated at every step of the fit
MAX_SECONDS = 1e7  # a measured time (about 116 days): beyond, a mistyped unit
MAX_BYTES = 1e18  # one transfer (an exabyte)
RUN_HEADER = ("plan", "seconds")
TRANSFER_HEADER = ("a", "b", "bytes", "seconds")


@dataclass(frozen=True)
class RunRow:
    """One row of a runs CSV before its plan file is read: the plan's path as
    written, the measured iteration time (s) and where the row is (``line 3``)."""

    plan: str
    seconds: float
    where: str = ""


@dataclass(frozen=True)
class Run:
    """A measured run: a plan (:class:`planner.problem.plan.Plan`) and its
    measured iteration time in seconds; ``label`` names it in tables (the plan
    file), ``where`` and ``source`` in messages (``line 3`` of ``runs.csv``)."""

    plan: object
    seconds: float
    label: str = ""
    where: str = ""
    source: str = ""  # the CSV it came from (messages name it)


@dataclass(frozen=True)
class Transfer:
    """A measured point-to-point transfer of ``bytes`` bytes from domain ``a``
    to domain ``b`` taking ``seconds``; transfers with the same ``group`` ran
    together (None: alone).  ``where`` names it in messages."""

    a: str
    b: str
    bytes: float
    seconds: float
    group: str | None = None
    where: str = ""
    source: str = ""  # the CSV it came from (messages name it)

    @property
    def label(self) -> str:
        """``a->b 1.0e+09 B`` (with ``[group]`` when it ran with others)."""
        return f"{self.a}->{self.b} {self.bytes:.3g} B" + (f" [{self.group}]" if self.group else "")


def _rows(text: str, source: str, header: tuple[str, ...], optional: tuple[str, ...] = ()):
    """The data rows of a CSV text as ``(line, cells)``, after checking its header;
    returns the header as found too."""
    src = source or None
    rows = []
    for n, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        if "\x00" in line:
            raise InputError("a NUL byte: not a CSV text file", f"line {n}", src)
        if line.lstrip().startswith("#") or not line.strip():
            continue
        try:
            cells = [c.strip() for c in next(csv.reader([line]))]
        except csv.Error as err:
            raise InputError(f"not CSV: {err}", f"line {n}", src) from None
        rows.append((n, cells))
        if len(rows) > MAX_ROWS + 1:
            raise InputError(f"more than {MAX_ROWS} rows (each is modelled at every step of the fit)",
                             f"line {n}", src)
    want = ",".join(header)
    if not rows:
        raise InputError(f"empty: expected the header {want} and one row per measurement", None, src)
    hline, found = rows[0]
    names = tuple(c.lower() for c in found)
    if names[: len(header)] != header or len(names) > len(header) + len(optional) \
            or names[len(header):] != optional[: len(names) - len(header)]:
        shown = ",".join(found)[:80]
        raise InputError(f"the header is {shown!r}; expected {want}"
                         + (f" (then optionally {','.join(optional)})" if optional else ""),
                         f"line {hline}", src)
    if len(rows) == 1:
        raise InputError(f"no measurements below the header {want}", None, src)
    return names, rows[1:]


def _number(cell: str, what: str, where: str, src: str | None, top: float) -> float:
    try:
        v = float(cell)
    except ValueError:
        raise InputError(f"{what} is not a number: {cell[:40]!r}", where, src) from None
    if not math.isfinite(v):
        raise InputError(f"{what} is not a finite number: {cell[:40]!r}", where, src)
    if v <= 0:
        raise InputError(f"{what} must be > 0 (got {cell[:40]})", where, src)
    if v > top:
        raise InputError(f"{what} {v:g} is above {top:g}: a unit mistyped?", where, src)
    return v


def parse_runs(text: str, source: str = "") -> list[RunRow]:
    """Rows of a runs CSV (``plan,seconds``; see the module docstring).

    >>> [r.seconds for r in parse_runs("# measured\\nplan,seconds\\na.json,3\\nb.json,4.5\\n")]
    [3.0, 4.5]
    """
    src = source or None
    _, rows = _rows(text, source, RUN_HEADER)
    out = []
    for n, cells in rows:
        where = f"line {n}"
        if len(cells) != 2:
            raise InputError(f"expected 2 cells (plan,seconds), found {len(cells)}", where, src)
        if not cells[0]:
            raise InputError("the plan file is empty", f"{where}, column plan", src)
        out.append(RunRow(cells[0], _number(cells[1], "seconds", f"{where}, column seconds", src, MAX_SECONDS),
                          where))
    return out


def parse_transfers(text: str, source: str = "", domains=None) -> list[Transfer]:
    """Transfers of a CSV (``a,b,bytes,seconds[,group]``); ``domains``, when
    given, the instance's domain names every ``a`` and ``b`` must be among.

    >>> parse_transfers("a,b,bytes,seconds,group\\nx,y,8e6,0.02,g1\\n")[0].group
    'g1'
    """
    src = source or None
    header, rows = _rows(text, source, TRANSFER_HEADER, ("group",))
    known = None if domains is None else set(domains)
    out = []
    for n, cells in rows:
        where = f"line {n}"
        if len(cells) != len(header):
            raise InputError(f"expected {len(header)} cells ({','.join(header)}), found {len(cells)}", where, src)
        ends = []
        for col, name in zip(("a", "b"), cells[:2]):
            why = name_problem(name)
            if why is not None:
                raise InputError(f"domain {why} ({WHY})", f"{where}, column {col}", src)
            if known is not None and name not in known:
                raise InputError(f"unknown domain {name!r}; the instance has {', '.join(sorted(known))[:200]}",
                                 f"{where}, column {col}", src)
            ends.append(name)
        if ends[0] == ends[1]:
            raise InputError(f"a transfer from {ends[0]!r} to itself crosses no WAN link", f"{where}, column b", src)
        size = _number(cells[2], "bytes", f"{where}, column bytes", src, MAX_BYTES)
        secs = _number(cells[3], "seconds", f"{where}, column seconds", src, MAX_SECONDS)
        group = cells[4] if len(cells) > 4 and cells[4] else None
        if group is not None and name_problem(group):
            raise InputError(f"group {name_problem(group)} ({WHY})", f"{where}, column group", src)
        out.append(Transfer(ends[0], ends[1], size, secs, group, where, source))
    return out
