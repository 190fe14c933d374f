"""Calibration: fit the model's optional figures to measured runs and transfers.

A user who has run a few iterations of real plans, and perhaps timed some
point-to-point transfers, fits the instance to them
(:func:`calibrate`, ``planner calibrate``).  Pure: measurements in
(:class:`~planner.problem.measurements.Run`,
:class:`~planner.problem.measurements.Transfer`), a :class:`Calibration`
out; the CSV files are read in :mod:`planner.problem.io`.

Two fits, by ``scipy.optimize.least_squares`` on relative residuals
(modelled / measured - 1), bounds respected:

1. **The network, from the transfers** (when given).  A transfer of V bytes
   from a to b is modelled as SPEC v3 point-to-point: along route(a, b) (the
   link when one joins them), ``latency + V / bandwidth``, latency the
   route's (ms / 1000), bandwidth the smallest share over the resources it
   uses: each link in its direction and the uplinks out of a and into b
   (section 5).  Transfers of one ``group`` ran together and share each
   resource by processor sharing, as gradient syncs do (share of u =
   ``cap * V_u / sum_v min(V_v, V_u)``).  Figures: each measured direction's
   bandwidth (Gbit/s, > 0), each measured link's latency (ms, >= 0), the
   ``uplink_gbps`` of a domain with transfers measured together out of or into
   it (> 0).  A link's ``bandwidth_gbps`` is then the smaller of its two
   fitted directions, as ``import-network`` does (the instance has one
   bandwidth per link).
2. **Compute, from the runs**, on the network of step 1: ``gpu.mfu`` in
   (0, 1] and ``gpu.unit_overhead_ms`` >= 0, the model being the evaluator's
   simulated iteration time at SPEC v3 (``Evaluator(instance, plan,
   spec=3)``, base network).

**Identifiability.**  In each fit the Jacobian of the residuals is taken at
the start figures: the instance's, except that a link direction measured
alone starts from the line through its (bytes, seconds) points (slope 1 /
bandwidth, intercept the latency) and an uplink from where it would bind
the fastest of n transfers measured together (n times its rate, above every
measured link's start bandwidth), so that which resource binds at the start
is what the measurements show (the model is a minimum over resources: a
start that capped the lone transfers by an uplink would hide their links).
The "before" rows are the instance's own figures.  A figure on which no
measurement depends is left as it was; with fewer measurements than the
figures they depend on the fit is refused (``InputError``); then, in the
order mfu, unit_overhead_ms (runs) and bandwidths, uplinks, latencies
(transfers), a figure whose column is a combination of those kept before it
(relative residual below :data:`RANK_TOL`) is dropped and named with the
figures it cannot be told from (one transfer size per direction cannot
separate bandwidth from latency; runs that scale mfu's and the overhead's
terms alike cannot separate them).  An uplink that limits no transfer at
the fitted figures is put back as it was.

>>> cal = calibrate(instance, runs, transfers)          # doctest: +SKIP
>>> cal.figures()["gpu.mfu"], cal.rms_after             # doctest: +SKIP
(0.42, 1.3e-12)
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from ..problem import limits as L
from ..problem.errors import InputError
from ..problem.measurements import Run, Transfer
from ..problem.network import GBPS, MS
from ..problem.oplists import Deadlock
from .evaluator import Evaluator

SPEC = 3  # calibration fits the SPEC v3 model (unit overhead, uplinks, full duplex)
RANK_TOL = 1e-5  # a column counts as new when this fraction of its norm lies outside the kept ones' span
STEP = 1e-6  # forward-difference step of the Jacobian, in units of each figure's scale


@dataclass(frozen=True)
class Figure:
    """A fitted figure: ``field`` as in the instance file (``gpu.mfu``,
    ``links[0].bandwidth_gbps``), its value before and after (``before`` None:
    absent), its unit, the measurements it came from and a note (a link's two
    directions)."""

    field: str
    label: str
    before: float | None
    after: float
    unit: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class Unchanged:
    """A figure left as it was (``value``, None: absent) and why."""

    field: str
    label: str
    value: float | None
    reason: str


@dataclass(frozen=True)
class Row:
    """One measurement, modelled with the start figures (``before_s``) and the fitted ones (``after_s``)."""

    kind: str  # "run" or "transfer"
    label: str
    measured_s: float
    before_s: float
    after_s: float

    @property
    def residual_before(self) -> float:
        """modelled / measured - 1 with the start figures."""
        return self.before_s / self.measured_s - 1

    @property
    def residual_after(self) -> float:
        """modelled / measured - 1 with the fitted figures."""
        return self.after_s / self.measured_s - 1


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` returns: the fitted instance (validated), the
    fitted figures, the figures left as they were with the reason, every
    measurement before and after, and the root-mean-square relative residual
    before and after."""

    instance: object
    fitted: tuple[Figure, ...]
    unchanged: tuple[Unchanged, ...]
    rows: tuple[Row, ...]
    rms_before: float
    rms_after: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def figures(self) -> dict[str, float]:
        """``{field: fitted value}``, e.g. ``{"gpu.mfu": 0.42, "links[0].latency_ms": 2.0}``."""
        return {f.field: f.after for f in self.fitted}

    def to_dict(self) -> dict:
        """Plain data for ``--json``: fitted, unchanged, rows with residuals, rms."""
        return {
            "fitted": [vars(f).copy() for f in self.fitted],
            "unchanged": [vars(u).copy() for u in self.unchanged],
            "rows": [{**vars(r), "residual_before": r.residual_before, "residual_after": r.residual_after}
                     for r in self.rows],
            "rms_relative_before": self.rms_before, "rms_relative_after": self.rms_after,
            "notes": list(self.notes),
        }


@dataclass
class _Param:
    """One figure the fit may move: its field, bounds, start value and scale."""

    field: str
    label: str
    start: float
    lo: float
    hi: float
    scale: float
    kind: str  # mfu, overhead, bandwidth, latency, uplink
    source: str
    key: object = None  # (link, direction), link or domain index
    orig: float | None = None  # the instance's value, held while the figure is not fitted (None: start)


# -- the network model of the transfers ---------------------------------------------
class _Network:
    """The transfers' model over directed link bandwidths (L, 2) (direction 0:
    from the link's ``a`` end), link latencies (L,) and uplinks (D,) (inf: none)."""

    def __init__(self, instance, transfers: list[Transfer]):
        self.L, self.D = len(instance.links), len(instance.domains)
        idx = instance.domain_index
        routes = instance.routes_for(SPEC)
        self.uses, self.links = [], []  # per transfer: resource ids; (link, direction) pairs
        for t in transfers:
            route = routes[(t.a, t.b)]
            hops = []
            for k, li in enumerate(route.links):
                link = instance.links[li]
                hops.append((li, 0 if link.a == route.nodes[k] else 1))
            self.links.append(hops)
            ids = [2 * li + d for li, d in hops] + [2 * self.L + idx[t.a], 2 * self.L + self.D + idx[t.b]]
            self.uses.append(np.array(ids, dtype=np.int64))
        self.volume = np.array([t.bytes for t in transfers], dtype=float)
        groups = defaultdict(list)
        for i, t in enumerate(transfers):
            groups[t.group if t.group is not None else ("alone", i)].append(i)
        self.groups = list(groups.values())

    def times(self, bw_dir: np.ndarray, lat: np.ndarray, uplink: np.ndarray) -> np.ndarray:
        """Seconds of every transfer: route latency + bytes / smallest processor-sharing share."""
        cap = np.concatenate([bw_dir.reshape(-1), uplink, uplink]) * GBPS  # bytes/s per resource id
        out = np.empty(len(self.uses))
        for members in self.groups:
            for u in members:
                share = math.inf
                for q in self.uses[u]:
                    if not math.isfinite(cap[q]):
                        continue
                    load = sum(min(self.volume[v], self.volume[u]) for v in members if q in self.uses[v])
                    share = min(share, cap[q] * self.volume[u] / load)
                latency = sum(lat[li] for li, _ in self.links[u]) * MS
                out[u] = latency + self.volume[u] / share
        return out


def _instance_network(instance):
    bw = np.array([[l.bandwidth_gbps, l.bandwidth_gbps] for l in instance.links], dtype=float).reshape(-1, 2)
    lat = np.array([l.latency_ms for l in instance.links], dtype=float)
    up = np.array([math.inf if d.uplink_gbps is None else d.uplink_gbps for d in instance.domains], dtype=float)
    return bw, lat, up


def _with_figures(instance, values: dict[str, float | None]):
    """A validated copy of ``instance`` with fields set (``gpu.mfu``, ``links[2].latency_ms``,
    ``domains[0].uplink_gbps``); routes recomputed only by the loader's rules."""
    from ..problem.instance import Instance

    data = instance.to_dict()
    data["workload"]["model"] = instance.workload.model
    for path, v in values.items():
        head, _, key = path.rpartition(".")
        if head == "gpu":
            target = data["gpu"]
        else:
            name, _, i = head.partition("[")
            target = data[name][int(i.rstrip("]"))]
        if v is None:
            target.pop(key, None)
        else:
            target[key] = float(v)
    return Instance.from_dict(data)


# -- identifiability and the fit ------------------------------------------------------
def _jacobian(fun, z: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Forward differences in scaled coordinates, stepping inward at a bound."""
    r0 = fun(z)
    J = np.empty((len(r0), len(z)))
    for k in range(len(z)):
        h = STEP if z[k] + STEP <= hi[k] else -STEP
        zk = z.copy()
        zk[k] += h
        J[:, k] = (fun(zk) - r0) / h
    return J


def _select(J: np.ndarray, params: list[_Param], order: list[int]):
    """Indices of the figures kept (in ``order``), and for each dropped one the
    kept figures whose columns it is a combination of (empty: no measurement depends on it)."""
    norms = np.linalg.norm(J, axis=0)
    kept: list[int] = []
    dropped: dict[int, list[int]] = {}
    for k in order:
        if not norms[k] > 0 or not np.isfinite(norms[k]):
            dropped[k] = []
            continue
        c = J[:, k] / norms[k]
        if kept:
            B = J[:, kept] / norms[kept]
            coef, *_ = np.linalg.lstsq(B, c, rcond=None)
            rest = c - B @ coef
            if np.linalg.norm(rest) < RANK_TOL:
                dropped[k] = [kept[i] for i in np.nonzero(np.abs(coef) > 1e-3)[0]]
                continue
        kept.append(k)
    return kept, dropped


def _fit(residuals, params: list[_Param], order: list[int], what: str, n_rows: int):
    """Least squares over the identifiable figures; returns (values, kept, dropped)."""
    scale = np.array([p.scale for p in params])
    z0 = np.array([p.start for p in params]) / scale
    lo = np.array([p.lo for p in params]) / scale
    hi = np.array([p.hi for p in params]) / scale

    def full(zs):
        return residuals(zs * scale)

    J = _jacobian(full, z0, lo, hi)
    touched = [k for k in range(len(params)) if np.linalg.norm(J[:, k]) > 0]
    if n_rows < len(touched):
        names = ", ".join(params[k].label for k in touched)
        raise InputError(f"{n_rows} measured {what[:-1] if n_rows == 1 else what} for {len(touched)} figures "
                         f"they depend on ({names}): "
                         f"a fit needs at least as many measurements as figures"
                         + (" (measure each link at two transfer sizes, a small and a large one)"
                            if what == "transfers" else
                            " (measure more plans, with different micro-batch sizes)"), what)
    kept, dropped = _select(J, params, order)
    # a figure left out is held at the instance's value: what the fitted instance will have
    values = np.array([p.start if k in kept or p.orig is None else p.orig for k, p in enumerate(params)])
    zfix = values / scale
    if kept:
        idx = np.array(kept)

        def sub(zk):
            z = zfix.copy()
            z[idx] = zk
            return full(z)

        x0 = np.clip(z0[idx], lo[idx], hi[idx])
        res = least_squares(sub, x0, bounds=(lo[idx], hi[idx]), method="trf", x_scale="jac",
                            xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=200 * (len(idx) + 1))
        values[idx] = np.clip([_clean(v) for v in res.x * scale[idx]], [params[k].lo for k in kept],
                              [params[k].hi for k in kept])
    return values, kept, dropped


def _clean(x: float) -> float:
    """``x`` to 12 significant digits (what the instance file is written with: a fit
    is not more precise, and the file then reads back to the very figures modelled)."""
    return float(f"{x:.12g}")


def _link_starts(transfers: list[Transfer], net: _Network, bw0: np.ndarray, lat0: np.ndarray):
    """Start figures of the links from the transfers measured alone over one link: per
    direction, the line through (bytes, seconds) (slope 1 / bandwidth, intercept the
    latency) when it has two sizes or more; one size: its bytes over its time less the
    latency.  Figures the line cannot give (a slope <= 0) start from the instance's.
    A start near the measurements keeps the fit's kinks (which resource binds) where
    they are measured; ``({(link, direction): Gbit/s}, {link: ms})``."""
    solo = defaultdict(list)
    for t, hops in zip(transfers, net.links):
        if t.group is None and len(hops) == 1:
            solo[hops[0]].append((t.bytes, t.seconds))
    bw, lat = {}, defaultdict(list)
    for hop, pts in solo.items():
        x, y = np.array(pts).T
        if len(set(x)) >= 2:
            slope, icpt = np.polyfit(x, y, 1)
            if slope > 0:
                bw[hop] = _clean(1 / slope / GBPS)
                lat[hop[0]].append(max(icpt, 0.0) / MS)
    lat = {li: _clean(float(np.mean(v))) for li, v in lat.items()}
    for hop, pts in solo.items():
        if hop not in bw:
            l0 = lat.get(hop[0], lat0[hop[0]]) * MS
            rate = max(b / max(s - l0, 1e-3 * s) for b, s in pts) / GBPS
            bw[hop] = _clean(min(max(rate, 1e-6), L.MAX_BANDWIDTH_GBPS))
    lat = {li: min(v, L.MAX_LATENCY_MS) for li, v in lat.items()}
    return bw, lat


def _check(instance, runs: list[Run], transfers: list[Transfer]) -> None:
    for i, r in enumerate(runs):
        where = r.where or f"runs[{i}]"
        if not (isinstance(r.seconds, (int, float)) and math.isfinite(r.seconds) and r.seconds > 0):
            raise InputError(f"measured seconds must be finite and > 0 (got {r.seconds!r})", f"{where}.seconds",
                             r.source or None)
        try:
            r.plan.check_against(instance)
        except InputError as err:
            raise InputError(f"plan {r.label or i}: {err.field + ': ' if err.field else ''}{err.message}",
                             where, r.source or None) from None
    for i, t in enumerate(transfers):
        where = t.where or f"transfers[{i}]"
        for key in ("bytes", "seconds"):
            v = getattr(t, key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(f"{key} must be finite and > 0 (got {v!r})", f"{where}.{key}", t.source or None)
        for end in ("a", "b"):
            if getattr(t, end) not in instance.domain_index:
                raise InputError(f"unknown domain {getattr(t, end)!r}", f"{where}.{end}", t.source or None)
        if t.a == t.b or (t.a, t.b) not in instance.routes_for(SPEC):
            raise InputError(f"no WAN route from {t.a!r} to {t.b!r}", where, t.source or None)


def _run_times(instance, runs: list[Run]) -> np.ndarray:
    return np.array([float(Evaluator(instance, r.plan, spec=SPEC).iteration_times()[0]) for r in runs])


def _link_label(instance, i: int) -> str:
    link = instance.links[i]
    return f"{link.a}-{link.b}"


def _why(p: _Param, others: list[_Param]) -> str:
    if not others:
        return {"uplink": "it limits no measured transfer at the start figures (the links do)",
                "mfu": "no measured run depends on it", "overhead": "no measured run depends on it"}.get(
            p.kind, "no measurement depends on it")
    names = ", ".join(o.label for o in others)
    hint = {"latency": "one transfer size per direction cannot separate latency from bandwidth: measure a "
                       "small and a large transfer",
            "overhead": "the runs scale its term and mfu's alike (e.g. one plan measured several times): "
                        "measure plans with other micro-batch sizes or tensor-parallel degrees",
            "uplink": "the transfers measured together do not separate it from the links"}.get(p.kind, "")
    return f"the measurements cannot tell it from {names} (Jacobian rank at the start figures)" + \
        (f"; {hint}" if hint else "")


def calibrate(instance, runs, transfers=None) -> Calibration:
    """Fit ``instance``'s optional figures to measured ``runs`` (a list of
    :class:`~planner.problem.measurements.Run`, or ``(plan, seconds)`` pairs: a
    plan and its measured iteration time, s) and optionally ``transfers``
    (:class:`~planner.problem.measurements.Transfer`, or ``(a, b, bytes,
    seconds[, group])`` tuples), as the module docstring says.  Raises ``InputError`` for a run
    whose plan does not fit the instance, non-positive or non-finite figures,
    or fewer measurements than the figures they depend on.

    >>> cal = calibrate(inst, [Run(plan_a, 0.061), Run(plan_b, 0.094)])   # doctest: +SKIP
    >>> cal.figures()                                                     # doctest: +SKIP
    {'gpu.mfu': 0.43, 'gpu.unit_overhead_ms': 0.21}
    """
    runs = [r if isinstance(r, Run) else Run(r[0], r[1], f"runs[{i}]") for i, r in enumerate(runs)]
    transfers = [t if isinstance(t, Transfer) else Transfer(*t) for t in (transfers or [])]
    if not runs and not transfers:
        raise InputError("no measurements: give measured runs (plan, seconds) and/or transfers", "runs")
    _check(instance, runs, transfers)
    net_values, fitted, unchanged, notes = _fit_network(instance, transfers)  # 1. the network
    start = _with_figures(instance, net_values) if net_values else instance
    final_values = dict(net_values)
    if runs:  # 2. compute from the runs, on that network
        values, more_fitted, more_unchanged = _fit_compute(instance, start, runs)
        final_values.update(values)
        fitted += more_fitted
        unchanged += more_unchanged
    else:
        for fld in ("gpu.mfu", "gpu.unit_overhead_ms"):
            unchanged.append(Unchanged(fld, fld, getattr(instance.gpu, fld.split(".")[1]), "no runs given"))

    result = _with_figures(instance, final_values) if final_values else instance
    before_r = _start_times(instance, runs) if runs else np.array([])
    after_r = _start_times(result, runs) if runs else np.array([])
    rows: list[Row] = []  # measured against modelled, before and after
    for r, b, a in zip(runs, before_r, after_r):
        rows.append(Row("run", r.label or r.where, r.seconds, float(b), float(a)))
    if transfers:
        nb = _Network(instance, transfers).times(*_instance_network(instance))
        na = _Network(result, transfers).times(*_instance_network(result))
        for t, b, a in zip(transfers, nb, na):
            rows.append(Row("transfer", t.label, t.seconds, float(b), float(a)))

    def rms(vals):
        vals = np.array(vals, dtype=float)
        return float(np.sqrt(np.mean(vals ** 2))) if len(vals) else 0.0

    order = {f: i for i, f in enumerate(_field_order(instance))}
    fitted.sort(key=lambda f: order.get(f.field, len(order)))
    unchanged.sort(key=lambda u: order.get(u.field, len(order)))
    return Calibration(result, tuple(fitted), tuple(unchanged), tuple(rows),
                       rms([r.residual_before for r in rows]), rms([r.residual_after for r in rows]), tuple(notes))


def _fit_network(instance, transfers: list[Transfer]):
    """Step 1 of :func:`calibrate`: link bandwidths (per direction; the smaller kept), uplinks
    and latencies fitted to ``transfers``; returns (the fitted values by field, the
    :class:`Figure` rows, the :class:`Unchanged` rows with their reasons, notes)."""
    fitted: list[Figure] = []
    unchanged: list[Unchanged] = []
    notes: list[str] = []
    net_values: dict[str, float | None] = {}
    measured_links: set[int] = set()
    if transfers:
        net = _Network(instance, transfers)
        bw0, lat0, up0 = _instance_network(instance)
        measured = np.array([t.seconds for t in transfers])
        params: list[_Param] = []
        dirs = sorted({hop for hops in net.links for hop in hops})
        measured_links = {li for li, _ in dirs}
        bw_start, lat_start = _link_starts(transfers, net, bw0, lat0)
        for li, d in dirs:
            link = instance.links[li]
            arrow = f"{link.a}->{link.b}" if d == 0 else f"{link.b}->{link.a}"
            b0 = bw_start.get((li, d), link.bandwidth_gbps)
            params.append(_Param(f"links[{li}].bandwidth_gbps", f"links[{li}] {arrow} bandwidth_gbps",
                                 b0, 1e-9, L.MAX_BANDWIDTH_GBPS, b0, "bandwidth", "transfers", (li, d),
                                 link.bandwidth_gbps))
        together = defaultdict(lambda: defaultdict(list))  # domain -> group -> transfer indices (out or in)
        for i, t in enumerate(transfers):
            if t.group is not None:
                together[("out", t.a)][t.group].append(i)
                together[("in", t.b)][t.group].append(i)
        # an uplink starts where it would bind the fastest of n transfers measured together
        # (each gets cap / n of it), above every transfer's own rate: a start that capped the
        # transfers measured alone would hide their links from the fit
        rates = [t.bytes / max(t.seconds - sum(lat_start.get(li, lat0[li]) for li, _ in hops) * MS,
                               1e-3 * t.seconds) / GBPS for t, hops in zip(transfers, net.links)]
        up_domains: dict[str, float] = {}
        for (way, dom), groups in together.items():
            for members in groups.values():
                if len(members) >= 2:  # several transfers out of (into) one domain at once
                    guess = len(members) * max(rates[i] for i in members)
                    up_domains[dom] = max(up_domains.get(dom, 0.0), guess)
        for i, (t, hops) in enumerate(zip(transfers, net.links)):
            slowest = min(bw_start.get((li, d), bw0[li, d]) for li, d in hops)
            for dom in (t.a, t.b):
                if dom in up_domains:
                    up_domains[dom] = max(up_domains[dom], slowest * (1 + 1e-3))
        for di, dom in enumerate(instance.domains):
            if dom.name in up_domains:  # the start is the guess, whatever the instance gives (it may hide the links)
                s = min(up_domains[dom.name], L.MAX_BANDWIDTH_GBPS)
                params.append(_Param(f"domains[{di}].uplink_gbps", f"domains[{di}] {dom.name} uplink_gbps", s,
                                     1e-9, L.MAX_BANDWIDTH_GBPS, s, "uplink", "transfers", di,
                                     L.MAX_BANDWIDTH_GBPS if dom.uplink_gbps is None else dom.uplink_gbps))
        for li in sorted(measured_links):
            l0 = lat_start.get(li, instance.links[li].latency_ms)
            params.append(_Param(f"links[{li}].latency_ms", f"links[{li}] {_link_label(instance, li)} latency_ms",
                                 l0, 0.0, L.MAX_LATENCY_MS, max(l0, 1.0), "latency", "transfers", li,
                                 instance.links[li].latency_ms))

        def figures_of(values):
            bw, lat, up = bw0.copy(), lat0.copy(), up0.copy()
            for p, v in zip(params, values):
                if p.kind == "bandwidth":
                    bw[p.key] = v
                elif p.kind == "latency":
                    lat[p.key] = v
                else:
                    up[p.key] = v
            return bw, lat, up

        def residuals(values):
            return net.times(*figures_of(values)) / measured - 1

        order = [k for kind in ("bandwidth", "uplink", "latency") for k, p in enumerate(params) if p.kind == kind]
        values, kept, dropped = _fit(residuals, params, order, "transfers", len(transfers))
        # an uplink that limits no transfer at the fitted figures: as it was
        z = values / np.array([p.scale for p in params])
        Jend = _jacobian(lambda zs: residuals(zs * np.array([p.scale for p in params])), z,
                         np.array([p.lo / p.scale for p in params]), np.array([p.hi / p.scale for p in params]))
        for k in list(kept):
            p = params[k]
            if p.kind == "uplink" and not np.linalg.norm(Jend[:, k]) > 0:
                kept.remove(k)
                unchanged.append(Unchanged(p.field, p.label, instance.domains[p.key].uplink_gbps,
                                           f"limits no measured transfer at the fitted figures (the links do); "
                                           f"any value above {values[k]:.6g} Gbit/s fits as well"))
                values[k] = p.orig
        for k, others in dropped.items():
            p = params[k]
            if p.kind == "bandwidth":
                continue  # said per link below
            value = instance.domains[p.key].uplink_gbps if p.kind == "uplink" else p.orig
            unchanged.append(Unchanged(p.field, p.label, value, _why(p, [params[o] for o in others])))
        per_link = defaultdict(list)
        for k, p in enumerate(params):
            if p.kind == "bandwidth":
                per_link[p.key[0]].append(k)
        for li, ks in sorted(per_link.items()):
            good = [k for k in ks if k in kept]
            link = instance.links[li]
            fld = f"links[{li}].bandwidth_gbps"
            if not good:
                why = "; ".join(dict.fromkeys(_why(params[k], [params[o] for o in dropped[k]]) for k in ks))
                unchanged.append(Unchanged(fld, f"links[{li}] {_link_label(instance, li)} bandwidth_gbps",
                                           link.bandwidth_gbps, why))
                continue
            each = ", ".join(f"{params[k].label.split()[1]} {values[k]:.6g}" for k in good)
            bw = float(min(values[k] for k in good))
            note = f"directions {each} Gbit/s: the smaller" if len(good) > 1 else \
                f"only {params[good[0]].label.split()[1]} measured"
            for k in ks:
                if k not in good:
                    note += f"; {params[k].label.split()[1]} not fitted: {_why(params[k], [params[o] for o in dropped[k]])}"
            net_values[fld] = bw
            fitted.append(Figure(fld, f"links[{li}] {_link_label(instance, li)} bandwidth_gbps", link.bandwidth_gbps,
                                 bw, "Gbit/s", "transfers", note))
        for k in kept:
            p = params[k]
            if p.kind == "latency":
                net_values[p.field] = values[k]
                fitted.append(Figure(p.field, p.label, instance.links[p.key].latency_ms, float(values[k]), "ms",
                                     "transfers"))
            elif p.kind == "uplink":
                net_values[p.field] = values[k]
                fitted.append(Figure(p.field, p.label, instance.domains[p.key].uplink_gbps, float(values[k]),
                                     "Gbit/s", "transfers"))
        if not any(t.group for t in transfers):
            notes.append("no transfer has a group: uplinks need transfers measured together (the group column)")
    for li, link in enumerate(instance.links):
        if li not in measured_links:
            reason = "no measured transfer crosses this link" if transfers else "no transfers given"
            for key, unit in (("bandwidth_gbps", "Gbit/s"), ("latency_ms", "ms")):
                unchanged.append(Unchanged(f"links[{li}].{key}", f"links[{li}] {_link_label(instance, li)} {key}",
                                           getattr(link, key), reason))
    done = {u.field for u in unchanged} | {f.field for f in fitted}
    for di, dom in enumerate(instance.domains):
        fld = f"domains[{di}].uplink_gbps"
        if fld not in done:
            unchanged.append(Unchanged(fld, f"domains[{di}] {dom.name} uplink_gbps", dom.uplink_gbps,
                                       "no transfers out of or into it measured together (a group of 2 or more: "
                                       "an uplink caps a domain's total, so only concurrent transfers show it)"
                                       if transfers else "no transfers given"))
    return net_values, fitted, unchanged, notes


def _fit_compute(instance, start, runs: list[Run]):
    """Step 2 of :func:`calibrate`: ``mfu`` and ``unit_overhead_ms`` fitted to ``runs`` on
    ``start`` (``instance`` with step 1's network); returns (the fitted values by field, the
    :class:`Figure` rows, the :class:`Unchanged` rows with their reasons)."""
    final_values: dict[str, float] = {}
    fitted: list[Figure] = []
    unchanged: list[Unchanged] = []
    if start.gpus is not None:
        raise InputError("fitting mfu and unit_overhead_ms of an instance with [[gpus]] types is not "
                         "supported yet (SPEC v3 (g)); calibrate the network alone, without runs", "gpus")
    gpu = start.gpu
    measured_r = np.array([r.seconds for r in runs])
    for r, t in zip(runs, _start_times(start, runs)):
        if not math.isfinite(t):
            raise InputError(f"plan {r.label}: its simulated iteration time is not finite (a link it uses "
                             "is down, or its schedule deadlocks)", r.where or "runs", r.source or None)
    params = [_Param("gpu.mfu", "gpu.mfu", gpu.mfu, 1e-9, 1.0, gpu.mfu, "mfu", "runs"),
              _Param("gpu.unit_overhead_ms", "gpu.unit_overhead_ms", gpu.unit_overhead_ms, 0.0,
                     L.MAX_UNIT_OVERHEAD_MS, max(gpu.unit_overhead_ms, 0.1), "overhead", "runs")]

    def at(values):
        new_gpu = gpu.model_copy(update={"mfu": float(values[0]), "unit_overhead_ms": float(values[1])})
        new = start.model_copy(update={"gpu_table": new_gpu})  # the network (and its routes) as in ``start``
        new.__dict__.pop("gpu_types", None)  # derived from the GPU tables: recomputed
        return new

    def residuals_r(values):
        return _run_times(at(values), runs) / measured_r - 1

    values, kept, dropped = _fit(residuals_r, params, [0, 1], "runs", len(runs))
    for k in kept:
        p = params[k]
        final_values[p.field] = float(values[k])
        fitted.append(Figure(p.field, p.label, getattr(instance.gpu, p.field.split(".")[1]), float(values[k]),
                             "" if p.kind == "mfu" else "ms", "runs"))
    for k, others in dropped.items():
        p = params[k]
        unchanged.append(Unchanged(p.field, p.label, p.start, _why(p, [params[o] for o in others])))
    return final_values, fitted, unchanged


def _start_times(instance, runs: list[Run]) -> np.ndarray:
    out = []
    for r in runs:
        try:
            out.append(float(Evaluator(instance, r.plan, spec=SPEC).iteration_times()[0]))
        except Deadlock:
            out.append(math.inf)
    return np.array(out)


def _field_order(instance) -> list[str]:
    out = ["gpu.mfu", "gpu.unit_overhead_ms"]
    out += [f"domains[{i}].uplink_gbps" for i in range(len(instance.domains))]
    for i in range(len(instance.links)):
        out += [f"links[{i}].bandwidth_gbps", f"links[{i}].latency_ms"]
    return out
