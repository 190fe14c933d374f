"""An instance from measured networks: ping RTT and iperf3 throughput matrices.

Pure functions: :func:`parse_matrix` reads the *text* of a CSV (the files
are opened in :mod:`planner.problem.io`), :func:`parse_sites` checks the
sites table (GPUs per site and the other instance fields), and
:func:`build` derives the instance's domains and WAN links from them.

The derivation (docs/guide.md, "Measured networks in"):

- **latency_ms** of a link a-b (one way, SPEC 1) = RTT / 2, with RTT the
  mean of the measured directions a->b and b->a (one of them is enough):
  ``(rtt_ab + rtt_ba) / 2 / 2``, or ``rtt_ab / 2`` when only that one was
  measured.
- **bandwidth_gbps** of a-b (each direction, full duplex, SPEC 2) = the
  smaller measured throughput of a->b and b->a (links are undirected in the
  instance format, so the slower direction bounds both), times
  ``bandwidth_scale`` (1 by default: the measured site-to-site figure as
  it is), in Gbit/s (Mbit/s / 1000 with ``unit="mbps"``).  The planner
  shares it equally among the plan's flows that cross the link (SPEC 5).
- both are kept to 12 significant digits (``(97.51 + 97.66) / 4`` is
  written 48.7925, not 48.792500000000004); a single RTT r gives r / 2
  exactly.
- a pair is *measured* when it has at least one RTT and at least one
  throughput value; a pair with only one of the two is left out (and said
  so in the header).
- ``links="measured"``: one link per measured pair; traffic between sites
  without one is relayed along the least-latency route (SPEC 2) and shares
  the measured links' bandwidth.  ``links="mesh"``: every pair of sites
  gets a link; an unmeasured pair's link has the latency of the
  least-latency route over the measured links (SPEC 2's rule) and the
  smallest bandwidth along it; a pair with no such route is refused.

Matrix forms (see :func:`parse_matrix`): square, with a header row and a
first column of site names (rows = source, columns = destination; blank or
``NA`` = not measured), or long, ``src,dst,value`` with one measured pair a
row.  Lines starting with ``#`` are comments (the source of the data).

Example
-------
>>> rtt = parse_matrix("src\\\\dst,a,b\\na,,20\\nb,22,\\n", "rtt.csv")
>>> tput = parse_matrix("src,dst,gbps\\na,b,4.5\\nb,a,4.0\\n", "tput.csv")
>>> sites = parse_sites({"sites": [{"name": "a", "gpus": 8}, {"name": "b", "gpus": 8}]})
>>> built = build(rtt, tput, sites)
>>> built.instance["links"]
[{'a': 'a', 'b': 'b', 'bandwidth_gbps': 4.0, 'latency_ms': 10.5}]
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from typing import Literal

import networkx as nx
from pydantic import ValidationError

from .errors import InputError, input_error_from_pydantic
from .instance import GPU, Domain, Link
from .names import WHY, name_problem
from .network import shortest_routes
from .synthetic import GPU as SYNTHETIC_GPU, INTRA_GBPS

MISSING = {"", "na", "n/a", "nan"}  # cells that mean "not measured" (case-insensitive)
LONG_HEADERS = {("src", "dst"), ("source", "destination"), ("from", "to")}

# Units, as --latency-unit / --throughput-unit take them, in ms and in Gbit/s; and the
# words of a header (the square form's corner cell, the long form's value column)
# that name one (``rtt_ms``, ``Mbit/s``, ``src,dst,gbps``).
LATENCY_UNITS = {"ms": 1.0, "s": 1e3, "us": 1e-3}
THROUGHPUT_UNITS = {"gbps": 1.0, "mbps": 1e-3}
UNIT_NAMES = {"ms": "ms", "s": "s", "us": "us", "gbps": "Gbit/s", "mbps": "Mbit/s"}
UNIT_WORDS = {
    "latency": {"ms": {"ms", "msec", "millisecond", "milliseconds"}, "s": {"s", "sec", "secs", "second", "seconds"},
                "us": {"us", "\u00b5s", "usec", "microsecond", "microseconds"}},
    "throughput": {"gbps": {"gbps", "gbit/s", "gbits/s", "gbit", "gb/s"},
                   "mbps": {"mbps", "mbit/s", "mbits/s", "mbit", "mb/s"}},
}
# Plausible magnitudes (SPEC: WAN links of about 1-400 Gbit/s; RTTs of a fraction of a
# millisecond between zones to a few hundred ms around the world): a matrix whose every
# value lies beyond one of these is most likely in another unit.
IMPLAUSIBLE = {
    "throughput": ((lambda v: v > 1000, "above 1000 Gbit/s", "mbps"),),
    "latency": ((lambda v: v < 1, "below 1 ms", "s"), (lambda v: v > 1000, "above 1000 ms", "us")),
}

# Defaults for what a sites table leaves out; each is written into the instance's
# header as an assumption (docs/guide.md, "Measured networks in").
DEFAULT_GPU = SYNTHETIC_GPU
DEFAULT_GPU_WHY = ("A100-80GB SXM4: 312 TFLOP/s dense bf16, 80 GB, NVLink 600 GB/s bidirectional = "
                   "2400 Gbit/s one way (shared/data gpu_specs.csv); mfu 0.45 as the packaged "
                   "instances (mfu_reported.csv: 41.5-53.3% on A100 runs)")
DEFAULT_SITE = {"gpus_per_node": 8, "intra_bandwidth_gbps": INTRA_GBPS}
DEFAULT_SITE_WHY = ("gpus_per_node 8, intra_bandwidth_gbps 200: one InfiniBand HDR 200 Gbit/s port "
                    "per GPU, as DGX A100 (shared/data interconnect_facts.csv)")
DEFAULT_WORKLOAD = {"model": "llama2-7b", "global_batch_size": 256, "seq_len": 4096,
                    "micro_batch_sizes": [1, 2, 4], "tensor_parallel": [1, 2, 4, 8]}
DEFAULT_WORKLOAD_WHY = "LLaMA-2 7B, 256 x 4096 tokens (1M tokens per iteration)"


@dataclass(frozen=True)
class Matrix:
    """Measured values between sites, in the file's unit.

    ``values[(src, dst)]`` for each measured ordered pair (the diagonal is
    dropped); ``sites`` in the order they first appear; ``notes`` the
    file's ``#`` lines; ``source`` the file it came from (for messages).
    """

    sites: tuple[str, ...]
    values: dict[tuple[str, str], float]
    notes: tuple[str, ...] = ()
    source: str = ""
    form: Literal["square", "long"] = "square"
    label: str = ""  # the corner cell (square) or the value column's header (long): may name the unit

    def get(self, a: str, b: str) -> list[float]:
        """The measured values of a->b and b->a (0, 1 or 2 of them)."""
        return [self.values[p] for p in ((a, b), (b, a)) if p in self.values]


def _cell(text: str, where: str, source: str) -> float | None:
    t = text.strip()
    if t.lower() in MISSING:
        return None
    try:
        v = float(t)
    except ValueError:
        raise InputError(f"not a number: {t!r} (leave the cell blank or write NA when the pair was "
                         "not measured)", where, source or None) from None
    if not math.isfinite(v):
        raise InputError(f"not a finite number: {t!r}", where, source or None)
    if v < 0:
        raise InputError(f"negative value {t} (a measurement is >= 0)", where, source or None)
    return v


def parse_matrix(text: str, source: str = "") -> Matrix:
    """Parse a measurement CSV (square or long form, see the module docstring).

    Errors are ``InputError`` naming ``source`` and the place: the line, and
    the row and column site (``line 4, row 'us-east-1', column 'eu-west-1'``).

    >>> m = parse_matrix("# ping RTT, ms\\n,x,y\\nx,,3\\ny,NA,\\n")
    >>> m.values, m.notes
    ({('x', 'y'): 3.0}, ('ping RTT, ms',))
    """
    notes, rows = [], []
    for n, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        if line.lstrip().startswith("#"):
            notes.append(line.lstrip().lstrip("#").strip())
        elif line.strip():
            rows.append((n, [c.strip() for c in next(csv.reader([line]))]))
    src = source or None
    if not rows:
        raise InputError("no header row and no data (expected a square matrix with site names, "
                         "or src,dst,value rows)", None, src)
    hline, header = rows[0]
    if len(header) == 3 and (header[0].lower(), header[1].lower()) in LONG_HEADERS:
        return _parse_long(rows, tuple(notes), source)
    cols = header[1:]
    if not cols:
        raise InputError("the header row names no sites (a square matrix has a corner cell, then one "
                         "column per site; a long list has the header src,dst,value)", f"line {hline}", src)
    for i, c in enumerate(cols):
        if not c:
            raise InputError(f"column {i + 2} of the header has no site name", f"line {hline}", src)
        if c in cols[:i]:
            raise InputError(f"site {c!r} names two columns", f"line {hline}", src)
        _check_site(c, f"line {hline}, column {i + 2}", src)
    values: dict[tuple[str, str], float] = {}
    seen: dict[str, int] = {}
    for n, cells in rows[1:]:
        site = cells[0]
        if not site:
            raise InputError("the row has no site name in its first cell", f"line {n}", src)
        if len(cells) != len(header):
            raise InputError(f"row {site!r} has {len(cells) - 1} values, the header names {len(cols)} sites "
                             "(a square matrix: one value a column, blank when not measured)", f"line {n}", src)
        if site in seen:
            raise InputError(f"site {site!r} names two rows (also line {seen[site]})", f"line {n}", src)
        if site not in cols:
            raise InputError(f"not square: row site {site!r} is not among the columns "
                             f"({', '.join(cols)})", f"line {n}", src)
        seen[site] = n
        for dst, cell in zip(cols, cells[1:]):
            v = _cell(cell, f"line {n}, row {site!r}, column {dst!r}", source)
            if v is not None and dst != site:  # the diagonal (a site with itself) is ignored
                values[(site, dst)] = v
    missing = [c for c in cols if c not in seen]
    if missing:
        raise InputError(f"not square: {len(seen)} rows for {len(cols)} columns; no row for "
                         f"{', '.join(repr(c) for c in missing)}", f"line {hline}", src)
    return Matrix(tuple(cols), values, tuple(notes), source, "square", header[0])


def _parse_long(rows, notes, source) -> Matrix:
    src = source or None
    values: dict[tuple[str, str], float] = {}
    where_of: dict[tuple[str, str], int] = {}
    sites: dict[str, None] = {}
    for n, cells in rows[1:]:
        if len(cells) != 3:
            raise InputError(f"expected 3 cells (src,dst,value), found {len(cells)}", f"line {n}", src)
        a, b, cell = cells
        if not a or not b:
            raise InputError("a site name is empty", f"line {n}", src)
        _check_site(a, f"line {n}, column src", src)
        _check_site(b, f"line {n}, column dst", src)
        if (a, b) in where_of:
            raise InputError(f"pair {a!r} -> {b!r} given twice (also line {where_of[(a, b)]})", f"line {n}", src)
        where_of[(a, b)] = n
        sites.setdefault(a)
        sites.setdefault(b)
        v = _cell(cell, f"line {n}, row {a!r} -> {b!r}, column value", source)
        if v is not None and a != b:  # a site with itself: ignored, as the square form's diagonal
            values[(a, b)] = v
    if not where_of:
        raise InputError("no pairs below the header src,dst,value", None, src)
    return Matrix(tuple(sites), values, notes, source, "long", rows[0][1][2])


def header_unit(m: Matrix, kind: Literal["latency", "throughput"]) -> str | None:
    """The unit ``m``'s header names (``"ms"``, ``"gbps"`` ...; keys of
    :data:`LATENCY_UNITS` / :data:`THROUGHPUT_UNITS`), or None when it names
    none.  Read from the square form's corner cell or the long form's value
    column (``rtt_ms``, ``Mbit/s``); ``InputError`` when it names two.

    >>> header_unit(parse_matrix("src,dst,rtt_s\\na,b,0.02\\n"), "latency")
    's'
    """
    words = set(re.split(r"[^a-z\u00b5/]+", m.label.lower()))
    found = [u for u, names in UNIT_WORDS[kind].items() if words & names]
    if len(found) > 1:
        raise InputError(f"the header {m.label!r} names two units ({', '.join(UNIT_NAMES[u] for u in found)})",
                         "header", m.source or None)
    return found[0] if found else None


def resolve_unit(m: Matrix, kind: Literal["latency", "throughput"], given: str | None) -> str:
    """The unit of ``m``'s values: ``given`` (a flag) or the header's (they
    must agree), else the default (ms, Gbit/s) when the values are plausible
    in it.  A matrix whose every value is implausible in the default (all
    throughputs above 1000 Gbit/s, all RTTs below 1 ms or above 1000 ms) is
    refused naming the unit it most likely is in: ``InputError`` naming the
    file and the quantity."""
    flag = f"--{kind}-unit"
    said = header_unit(m, kind)
    if given is not None and said is not None and given != said:
        raise InputError(f"the header {m.label!r} says {UNIT_NAMES[said]}, {flag} says {UNIT_NAMES[given]}",
                         "header", m.source or None)
    if given is not None or said is not None:
        return given or said
    default = "ms" if kind == "latency" else "gbps"
    values = [v for v in m.values.values() if v > 0]
    for implausible, what, likely in IMPLAUSIBLE[kind]:
        if values and all(implausible(v) for v in values):
            raise InputError(
                f"every value is {what} (from {min(values):g} to {max(values):g}): these look like "
                f"{UNIT_NAMES[likely]}, not {UNIT_NAMES[default]}; say the unit with {flag} {likely} (or "
                f"{flag} {default} to keep them), or name it in the header (e.g. "
                f"{'src,dst,' if m.form == 'long' else ''}{'rtt_' if kind == 'latency' else ''}{likely})",
                kind, m.source or None)
    return default


def _check_site(name: str, where: str, src: str | None) -> None:
    """A site name becomes a domain name: refuse what SPEC 9 refuses (:mod:`planner.problem.names`)."""
    why = name_problem(name)
    if why is not None:
        raise InputError(f"site {why} ({WHY})", where, src)


# -- the sites table ---------------------------------------------------------------
SITE_FIELDS = set(Domain.model_fields) - {"name", "gpu"}  # one [gpu] type for every site (no [[gpus]] yet)
SITES_KEYS = {"name", "description", "gpu", "defaults", "sites", "workload", "options"}


@dataclass(frozen=True)
class Built:
    """What :func:`build` returns: the instance as a dict shaped like the file
    (model by name), the lines saying where each figure came from (the file's
    header), and how many links were measured or filled from routes."""

    instance: dict
    header: list[str]
    measured: int
    filled: int
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sites:
    """What a sites table gives: domains (name and fields, in order; empty for
    "every site in the matrices"), and the rest of the instance."""

    domains: tuple[dict, ...] = ()
    defaults: dict = field(default_factory=dict)
    name: str | None = None
    description: str = ""
    gpu: dict | None = None
    workload: dict | None = None
    options: dict = field(default_factory=dict)
    source: str = ""


def parse_sites(data: dict, source: str = "") -> Sites:
    """Check a sites table (read from TOML by :mod:`planner.problem.io`).

    Keys: ``name``, ``description``, ``[gpu]``, ``[workload]``, ``[options]``
    as in an instance file; ``[defaults]`` domain fields for every site;
    ``[[sites]]`` with ``name`` (as in the matrices) and domain fields
    (``gpus``, ``price_per_gpu_hour``, ``lat`` ...).  ``InputError`` names
    the field (``sites[2].gpus``).

    >>> parse_sites({"defaults": {"gpus": 16}}).defaults
    {'gpus': 16}
    """
    src = source or None
    for k in data:
        if k not in SITES_KEYS:
            raise InputError(f"unknown key {k!r}; a sites table has {', '.join(sorted(SITES_KEYS))}", k, src)
    for k in ("gpu", "defaults", "workload", "options"):
        if k in data and not isinstance(data[k], dict):
            raise InputError("expected a table", k, src)
    for k in ("name", "description"):
        if k in data and not isinstance(data[k], str):
            raise InputError(f"expected a string (got {data[k]!r})", k, src)
    if "name" in data and name_problem(data["name"]):
        raise InputError(f"{name_problem(data['name'])} ({WHY})", "name", src)
    defaults = dict(data.get("defaults", {}))
    for k in defaults:
        if k not in SITE_FIELDS:
            raise InputError(f"unknown key {k!r}; a site has {', '.join(sorted(SITE_FIELDS))}",
                             f"defaults.{k}", src)
    entries = data.get("sites", [])
    if not isinstance(entries, list):
        raise InputError("expected an array of tables ([[sites]])", "sites", src)
    domains, seen = [], {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise InputError("expected a table", f"sites[{i}]", src)
        if not isinstance(e.get("name"), str) or not e["name"]:
            raise InputError("missing the site's name (as in the matrices)", f"sites[{i}].name", src)
        for k in e:
            if k != "name" and k not in SITE_FIELDS:
                raise InputError(f"unknown key {k!r}; a site has name, {', '.join(sorted(SITE_FIELDS))}",
                                 f"sites[{i}].{k}", src)
        _check_site(e["name"], f"sites[{i}].name", src)
        if e["name"] in seen:
            raise InputError(f"site {e['name']!r} listed twice (also sites[{seen[e['name']]}])",
                             f"sites[{i}].name", src)
        seen[e["name"]] = i
        domains.append(dict(e))
    return Sites(tuple(domains), defaults, data.get("name"), data.get("description", ""),
                 data.get("gpu"), data.get("workload"), dict(data.get("options", {})), source)


# -- building the instance ------------------------------------------------------
class _Net:
    """The minimum :func:`planner.problem.network.shortest_routes` reads."""

    def __init__(self, names, links):
        self.domain_names = tuple(names)
        self.links = links
        self.graph = nx.Graph()
        self.graph.add_nodes_from(names)
        for i, link in enumerate(links):
            self.graph.add_edge(link.a, link.b, index=i, latency_ms=link.latency_ms)


def _domains(latency: Matrix, throughput: Matrix, sites: Sites, gpus: int | None) -> list[dict]:
    known = dict.fromkeys(latency.sites + throughput.sites)
    src = sites.source or None
    entries = list(sites.domains)
    if not entries:
        entries = [{"name": s} for s in known]
    out = []
    for i, e in enumerate(entries):
        if e["name"] not in known:
            raise InputError(f"unknown site {e['name']!r}: not in {latency.source or 'the latency matrix'} nor "
                             f"{throughput.source or 'the throughput matrix'} (sites there: {', '.join(known)})",
                             f"sites[{i}].name", src)
        d = {"name": e["name"], **DEFAULT_SITE, **sites.defaults}
        if gpus is not None:
            d["gpus"] = gpus
        d.update({k: v for k, v in e.items() if k != "name"})
        where = f"sites[{i}]" if sites.domains else "defaults"
        if "gpus" not in d:
            raise InputError(f"no GPU count for site {e['name']!r}: give gpus here, in [defaults], "
                             "or --gpus", f"{where}.gpus", src)
        try:
            Domain.model_validate(d)
        except ValidationError as err:
            bad = input_error_from_pydantic(err)
            key = bad.field or ""
            place = f"sites[{i}].{key}" if sites.domains and key in e else f"defaults.{key}"
            raise InputError(f"site {e['name']!r}: {bad.message}", place, src) from None
        out.append({k: d[k] for k in Domain.model_fields if k in d})  # the file's order of fields
    return out


def _clean(x: float) -> float:
    """``x`` to 12 significant digits: drops float noise (``48.792500000000004``
    from ``(97.51 + 97.66) / 4``) and keeps every digit a measurement has."""
    return float(f"{x:.12g}")


def _fmt(values: list[float]) -> str:
    return "/".join(f"{v:g}" for v in values)


def build(latency: Matrix, throughput: Matrix, sites: Sites, *, links: Literal["measured", "mesh"] = "measured",
          bandwidth_scale: float = 1.0, unit: Literal["gbps", "mbps"] | None = None, gpus: int | None = None,
          name: str | None = None, model: str | None = None,
          latency_unit: Literal["ms", "s", "us"] | None = None) -> Built:
    """The instance (a dict shaped like the instance file, model by name) and the
    lines that say where each figure came from (for the file's header), as :class:`Built`.

    ``latency``: RTT in ``latency_unit``; ``throughput`` in ``unit`` (Gbit/s,
    ``"mbps"``: Mbit/s); None: the unit the matrix's header names, else ms and
    Gbit/s when the values are plausible in them (:func:`resolve_unit`);
    ``gpus`` a GPU count for every site without its own; ``name`` and ``model``
    override the sites table's.  Raises ``InputError`` naming the matrix file
    and the pair, or the sites file and the field.  The result still has to
    pass :meth:`planner.problem.instance.Instance.from_dict` (the loader).
    """
    if links not in ("measured", "mesh"):
        raise InputError(f"links is 'measured' or 'mesh', not {links!r}", "--links")
    if not (math.isfinite(bandwidth_scale) and bandwidth_scale > 0):
        raise InputError(f"a finite factor > 0, not {bandwidth_scale!r}", "--bandwidth-scale")
    if name is not None and name_problem(name):
        raise InputError(f"{name_problem(name)} ({WHY})", "--name")
    unit = resolve_unit(throughput, "throughput", unit)
    latency_unit = resolve_unit(latency, "latency", latency_unit)
    per_gbps, per_ms = THROUGHPUT_UNITS[unit], LATENCY_UNITS[latency_unit]
    domains = _domains(latency, throughput, sites, gpus)
    names = [d["name"] for d in domains]
    measured, checked, notes, half = [], [], [], []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            rtt, tput = latency.get(a, b), throughput.get(a, b)
            if not rtt or not tput:
                if rtt or tput:
                    half.append(f"{a}-{b} (no {'throughput' if rtt else 'RTT'})")
                continue
            if min(tput) <= 0:
                raise InputError(f"throughput {_fmt(tput)} between {a!r} and {b!r}: a link needs > 0 "
                                 "(blank the cell if the pair was not measured)",
                                 f"row {a!r}, column {b!r}", throughput.source or None)
            link = {"a": a, "b": b, "bandwidth_gbps": _clean(min(tput) * per_gbps * bandwidth_scale),
                    "latency_ms": _clean(sum(rtt) / len(rtt) / 2 * per_ms)}
            try:
                checked.append(Link.model_validate(link))
            except ValidationError as err:
                bad = input_error_from_pydantic(err)
                m = {"latency_ms": latency, "bandwidth_gbps": throughput}.get(bad.field)
                if m is None:
                    raise
                raise InputError(f"{a}-{b}: {bad.field} {bad.message}", f"row {a!r}, column {b!r}",
                                 m.source or None) from None
            measured.append(link)
            notes.append(f"  {a} - {b}: RTT {_fmt(rtt)} {latency_unit} -> {link['latency_ms']:.6g} ms one way; "
                         f"throughput {_fmt(tput)} {UNIT_NAMES[unit]} -> "
                         f"{link['bandwidth_gbps']:.6g} Gbit/s")
    net = _Net(names, checked)
    if len(names) > 1 and not nx.is_connected(net.graph):
        parts = sorted(sorted(c, key=names.index) for c in nx.connected_components(net.graph))
        raise InputError("the measured pairs do not connect the sites: "
                         + " | ".join(", ".join(c) for c in parts)
                         + " (measure a pair between the groups, or leave sites out of the sites table)",
                         "links", None)
    out_links = list(measured)
    if links == "mesh":
        routes = shortest_routes(net)
        have = {frozenset((x["a"], x["b"])) for x in measured}
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if frozenset((a, b)) in have:
                    continue
                r = routes[(a, b)]
                bw = min(measured[k]["bandwidth_gbps"] for k in r.links)
                out_links.append({"a": a, "b": b, "bandwidth_gbps": bw, "latency_ms": _clean(r.latency_ms)})
                notes.append(f"  {a} - {b}: not measured; filled from the route {' > '.join(r.nodes)}: "
                             f"{r.latency_ms:.6g} ms, {bw:.6g} Gbit/s (its smallest bandwidth)")
    wl = dict(sites.workload) if sites.workload is not None else dict(DEFAULT_WORKLOAD)
    if model is not None:
        wl["model"] = model
    gpu = dict(sites.gpu) if sites.gpu is not None else dict(DEFAULT_GPU)
    try:
        GPU.model_validate(gpu)
    except ValidationError as err:
        bad = input_error_from_pydantic(err)
        raise InputError(bad.message, f"gpu.{bad.field}" if bad.field else "gpu", sites.source or None) from None
    inst = {"name": name or sites.name or "measured", "description": sites.description, "gpu": gpu,
            "domains": domains, "links": out_links, "workload": wl}
    if sites.options:
        inst["options"] = dict(sites.options)
    if not inst["description"]:
        del inst["description"]
    head = _header(latency, throughput, sites, links, bandwidth_scale, unit, len(measured), half, notes,
                   gpus, latency_unit)
    return Built(inst, head, len(measured), len(out_links) - len(measured), tuple(half))


def _header(latency, throughput, sites, links, scale, unit, n_measured, half, notes, gpus,
            latency_unit="ms") -> list[str]:
    u = "Gbit/s" if unit == "gbps" else "Mbit/s (/ 1000 for Gbit/s)"
    lu = {"ms": "ms", "s": "s (x 1000 for ms)", "us": "us (/ 1000 for ms)"}[latency_unit]
    lines = [
        "Built by `planner import-network` from measured matrices (docs/guide.md, \"Measured networks in\").",
        f"latency: {latency.source or '(text)'} ({latency.form} form), ping RTT in {lu}",
    ] + [f"  | {n}" for n in latency.notes] + [
        f"throughput: {throughput.source or '(text)'} ({throughput.form} form), {u}",
    ] + [f"  | {n}" for n in throughput.notes] + [
        f"sites: {sites.source or '(defaults)'}" + (f"; --gpus {gpus} for sites without a count" if gpus else ""),
        "latency_ms = one way = RTT / 2, RTT the mean of the measured directions a->b, b->a.",
        "bandwidth_gbps = min(throughput a->b, b->a)"
        + (f" x {scale:g}" if scale != 1 else "")
        + " (links are undirected, full duplex; the slower direction bounds both);",
        "  the planner shares it equally among the plan's flows on the link (SPEC 5).",
        f"links = {links}: " + ("one link per measured pair; other pairs use the least-latency route."
                                if links == "measured" else
                                "every pair; unmeasured pairs filled from the least-latency route over "
                                "the measured links (its latency, its smallest bandwidth)."),
        f"{n_measured} measured pair(s)" + (f"; left out, half-measured: {', '.join(half)}" if half else "") + ":",
    ] + notes
    if sites.gpu is None:
        lines.append(f"ASSUMED [gpu] (not in the sites table): {DEFAULT_GPU_WHY}.")
    unset = [k for k in DEFAULT_SITE if k not in sites.defaults
             and not all(k in d for d in sites.domains or [{}])]
    if unset:
        lines.append(f"ASSUMED per site where not given: {DEFAULT_SITE_WHY}.")
    if sites.workload is None:
        lines.append(f"ASSUMED [workload] (not in the sites table): {DEFAULT_WORKLOAD_WHY}.")
    return lines


def blame(field: str | None, sites: Sites, model_flag: bool = False) -> tuple[str | None, str | None] | None:
    """Where a field of the built instance came from, for a message when the
    loader refuses it: ``(file, field)`` in the sites table (``domains[2].gpus``
    -> ``sites[2].gpus``), ``(None, "--model")`` for the flag, or None when the
    field is the matrices' (links)."""
    if not field:
        return None
    if field.startswith("workload.model") and model_flag:
        return None, "--model"
    if field.startswith("domains["):
        i, _, rest = field[len("domains["):].partition("]")
        rest = rest.lstrip(".")
        return sites.source or None, (f"sites[{i}].{rest}" if sites.domains else f"defaults.{rest}").rstrip(".")
    if field.split(".")[0].split("[")[0] in ("workload", "options", "gpu", "name", "description", "domains"):
        return sites.source or None, field
    return None
