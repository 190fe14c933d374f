"""Network traces: how WAN figures drift over a day (SPEC section 8).

A trace is a sequence of (time, network state): every ``epoch_s`` seconds
(5 minutes by default, the SWAN controller period) each link gets a
bandwidth (Gbit/s, 0 = down) and a one-way latency (ms).  No public
time-varying inter-datacenter bandwidth trace exists in ``shared/data``, so
:func:`generate` builds scenarios from published statistics, each figure
driving one part (see docs/dynamics.md for the sources):

* diurnal swing: the Abilene hour-of-day load profile
  (``abilene_hour_of_day_profile.csv``, peak/trough 1.48), evaluated in each
  endpoint's local time (``utc_offset_hours``) and scaled so available
  bandwidth swings by about +-22% around its base value;
* noise: a log-normal AR(1) process whose 5-minute step matches the median
  absolute 5-minute change of backbone load (2.2%, ``wan_tm_variability_stats.csv``);
* degradations: rare events (about one per link per day) dropping bandwidth
  to about 0.7x, the 10th-percentile drift of Azure-involved paths between
  Skyplane campaigns (``skyplane_snapshot_variability.csv``), for tens of
  minutes, with latency inflated 1.05-2x;
* outages: rarer (about one per link per week) bandwidth-0 episodes of
  10-30 minutes ("infrequent excursions (downtimes)", García-Dorado et al.,
  ``wan_variability_facts.csv``).

File format (CSV): ``#`` comment lines, then a header
``time_s,<a>-<b>:bandwidth_gbps,...,<a>-<b>:latency_ms,...`` (links in
instance order) and one row per epoch.

Example
-------
>>> tr = generate(instance, hours=24, seed=1)                  # doctest: +SKIP
>>> tr.states.bandwidth_gbps.shape                             # (288, links)
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InputError
from .files import read_text, write_atomic
from .network import NetworkStates

EPOCH_S = 300.0  # SWAN recomputes allocations every 5 minutes (wan_variability_facts.csv)
# Abilene mean offered load by UTC hour, normalised to the daily mean
# (abilene_hour_of_day_profile.csv; US-centric, UTC-5..-8 local time).
ABILENE_UTC = np.array([1.053, 1.059, 1.034, 1.014, 0.996, 0.960, 0.942, 0.937, 0.924, 0.887, 0.867, 0.821,
                        0.802, 0.836, 0.899, 0.969, 1.043, 1.077, 1.122, 1.170, 1.184, 1.167, 1.149, 1.088])
ABILENE_LOCAL_OFFSET = -6.0  # the profile's local time: US central, the middle of UTC-5..-8
DIURNAL_SWING = 0.22  # +-22% of available bandwidth at the profile's extremes
STEP_MEDIAN = 0.0222  # median |5-minute change| of backbone load (Abilene)
AR_RHO = 0.9
DEGRADE_PER_DAY = 1.0  # per link
DEGRADE_FACTOR = 0.70  # Skyplane Azure-involved p10 drift 0.68-0.74
DEGRADE_MINUTES = (15, 90)
OUTAGE_PER_DAY = 1.0 / 7
OUTAGE_MINUTES = (10, 30)
LATENCY_INFLATION = (1.05, 2.0)
OUTAGE_STAY = 0.75  # forecasts: a link that is down stays down another epoch with this chance (mean 20 min)
# Trace seeds from here on are test traces (the benchmark's rollouts use TEST_TRACE_SEED + seed);
# whatever learns from traces (the re-planning controller) must train on seeds below it.
TEST_TRACE_SEED = 1000


@dataclass(frozen=True)
class Trace:
    """Times (s, start of each epoch) and the network state of each epoch."""

    times: np.ndarray  # (T,)
    states: NetworkStates  # (T, links)
    links: tuple[str, ...]  # "a-b" in instance order
    start_hour_utc: float = 0.0  # hour of day (UTC) at time 0: where the diurnal profile starts

    @property
    def epochs(self) -> int:
        return len(self.times)

    def epoch_at(self, t: float) -> int:
        """Index of the state in force at time t (the last epoch holds forever)."""
        return max(0, int(np.searchsorted(self.times, t, side="right")) - 1)


def local_profile(hours_utc: np.ndarray, utc_offset: float) -> np.ndarray:
    """Load factor (mean 1) at UTC hours for a place ``utc_offset`` hours from UTC:
    the Abilene profile read at the same local time of day, interpolated."""
    local = (hours_utc + utc_offset - ABILENE_LOCAL_OFFSET) % 24.0
    return np.interp(local, np.arange(25), np.append(ABILENE_UTC, ABILENE_UTC[0]))


def diurnal_factors(instance, hours_utc) -> np.ndarray:
    """Available-bandwidth factor (mean about 1) of every link at UTC hours, shape
    (len(hours_utc), links): the Abilene load at each end's local time, averaged
    over the two ends; busier background leaves less bandwidth."""
    hours_utc = np.atleast_1d(np.asarray(hours_utc, dtype=float))
    swing = DIURNAL_SWING / np.max(np.abs(ABILENE_UTC - 1.0))
    out = np.empty((len(hours_utc), len(instance.links)))
    for k, link in enumerate(instance.links):
        offs = [instance.domain(d).utc_offset_hours or 0.0 for d in (link.a, link.b)]
        load = 0.5 * (local_profile(hours_utc, offs[0]) + local_profile(hours_utc, offs[1]))
        out[:, k] = 1.0 - swing * (load - 1.0)
    return out


def generate(instance, hours: float = 24.0, seed: int = 0, epoch_s: float = EPOCH_S,
             start_hour_utc: float = 0.0) -> Trace:
    """A synthetic trace for ``instance`` (see module docstring); deterministic for a seed."""
    rng = np.random.default_rng(seed)
    T = max(1, int(round(hours * 3600 / epoch_s)))
    L = len(instance.links)
    times = np.arange(T) * epoch_s
    hours_utc = start_hour_utc + times / 3600.0
    base_bw = np.array([l.bandwidth_gbps for l in instance.links])
    base_lat = np.array([l.latency_ms for l in instance.links])
    diurnal_all = diurnal_factors(instance, hours_utc)
    bw = np.empty((T, L))
    lat = np.empty((T, L))
    sigma = STEP_MEDIAN / 0.6745  # median |N(0, s)| = 0.6745 s
    per_epoch = epoch_s / 86400.0
    for k, link in enumerate(instance.links):
        diurnal = diurnal_all[:, k]
        noise = np.empty(T)
        z = rng.normal(0.0, sigma / math.sqrt(1 - AR_RHO ** 2))
        for t in range(T):
            z = AR_RHO * z + rng.normal(0.0, sigma)
            noise[t] = z
        factor = diurnal * np.exp(noise - noise.mean())
        inflate = np.ones(T)
        for rate, (lo, hi), kind in ((DEGRADE_PER_DAY, DEGRADE_MINUTES, "degrade"),
                                     (OUTAGE_PER_DAY, OUTAGE_MINUTES, "outage")):
            t = 0
            while t < T:
                if rng.random() < rate * per_epoch:
                    n = max(1, int(round(rng.uniform(lo, hi) * 60 / epoch_s)))
                    if kind == "degrade":
                        factor[t:t + n] *= DEGRADE_FACTOR
                        inflate[t:t + n] = np.maximum(inflate[t:t + n], rng.uniform(*LATENCY_INFLATION))
                    else:
                        factor[t:t + n] = 0.0
                    t += n
                else:
                    t += 1
        bw[:, k] = base_bw[k] * factor
        lat[:, k] = base_lat[k] * inflate * np.exp(rng.normal(0.0, 0.01, T))  # 1% jitter
    names = tuple(f"{l.a}-{l.b}" for l in instance.links)
    return Trace(times, NetworkStates(bw, lat), names, float(start_hour_utc))


def sample_futures(instance, trace: Trace, epoch: int, horizon: int, k: int, rng) -> NetworkStates:
    """``k`` sampled continuations of ``trace`` after ``epoch`` under the generator's
    model, knowing only the states up to ``epoch``: the states of epochs
    ``epoch + 1 .. epoch + horizon``, shape (k * horizon, links), path-major
    (row ``i * horizon + h`` is path i, h + 1 epochs ahead).

    Each link's log-bandwidth deviation from its diurnal mean decays as the
    AR(1) noise does (rho 0.9, plus fresh innovations); a link that is down
    stays down another epoch with probability 0.75 (outages last 10-30 min);
    new degradations and outages start at their daily rates; latency
    deviations decay like bandwidth's.

    Example: ``sample_futures(inst, tr, 10, 6, 8, np.random.default_rng(0))``
    gives 48 states, 8 paths of the next 30 minutes.
    """
    epoch_s = float(trace.times[1] - trace.times[0]) if trace.epochs > 1 else EPOCH_S
    L = len(instance.links)
    base_bw = np.array([l.bandwidth_gbps for l in instance.links])
    base_lat = np.array([l.latency_ms for l in instance.links])
    t_now = float(trace.times[epoch])
    hours = trace.start_hour_utc + (t_now + epoch_s * np.arange(horizon + 1)) / 3600.0
    diurnal = diurnal_factors(instance, hours)  # (H + 1, L)
    bw_now = trace.states.bandwidth_gbps[epoch]
    lat_now = trace.states.latency_ms[epoch]
    up = bw_now > 0
    dev = np.where(up, np.log(np.maximum(bw_now, 1e-300) / (base_bw * diurnal[0])), 0.0)
    lat_dev = lat_now / base_lat - 1.0 if np.all(base_lat > 0) else np.zeros(L)
    sigma = STEP_MEDIAN / 0.6745
    per_epoch = epoch_s / 86400.0
    h = np.arange(1, horizon + 1)
    decay = AR_RHO ** h  # (H,)
    # innovations of the AR(1) process, accumulated: z_h = rho z_{h-1} + eps_h
    eps = rng.normal(0.0, sigma, (k, horizon, L))
    z = np.empty_like(eps)
    acc = np.zeros((k, L))
    for j in range(horizon):
        acc = AR_RHO * acc + eps[:, j]
        z[:, j] = acc
    logf = np.log(diurnal[None, 1:]) + decay[None, :, None] * dev[None, None, :] + z
    # outages in force: each epoch ahead, still down with OUTAGE_STAY (a run from now)
    still = np.cumprod(rng.random((k, horizon, L)) < OUTAGE_STAY, axis=1).astype(bool) & ~up[None, None, :]
    new_down = rng.random((k, horizon, L)) < OUTAGE_PER_DAY * per_epoch * (OUTAGE_MINUTES[0] + OUTAGE_MINUTES[1]) / 2 * 60 / epoch_s
    new_degr = rng.random((k, horizon, L)) < DEGRADE_PER_DAY * per_epoch * (DEGRADE_MINUTES[0] + DEGRADE_MINUTES[1]) / 2 * 60 / epoch_s
    factor = np.exp(logf) * np.where(new_degr, DEGRADE_FACTOR, 1.0)
    factor = np.where(still | new_down, 0.0, factor)
    bw = base_bw[None, None, :] * factor
    lat = base_lat[None, None, :] * (1.0 + decay[None, :, None] * lat_dev[None, None, :])
    lat = np.broadcast_to(np.maximum(lat, 0.0), bw.shape)
    return NetworkStates(bw.reshape(k * horizon, L), np.ascontiguousarray(lat).reshape(k * horizon, L))


def to_csv(trace: Trace, header: str = "") -> str:
    buf = io.StringIO()
    for line in header.splitlines():
        buf.write(f"# {line}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["time_s"] + [f"{n}:bandwidth_gbps" for n in trace.links] + [f"{n}:latency_ms" for n in trace.links])
    for t in range(trace.epochs):
        w.writerow([f"{trace.times[t]:g}"] + [f"{v:.6g}" for v in trace.states.bandwidth_gbps[t]]
                   + [f"{v:.6g}" for v in trace.states.latency_ms[t]])
    return buf.getvalue()


def save(trace: Trace, path, header: str = "") -> None:
    write_atomic(path, to_csv(trace, header))


def load(path, instance) -> Trace:
    """Read a trace CSV for ``instance``; errors name the file, line and column."""
    path = Path(path)
    text = read_text(path)
    rows = [r for r in csv.reader(line for line in text.splitlines() if line and not line.startswith("#"))]
    if not rows:
        raise InputError("empty trace", file=str(path))
    head = rows[0]
    names = [f"{l.a}-{l.b}" for l in instance.links]
    want = ["time_s"] + [f"{n}:bandwidth_gbps" for n in names] + [f"{n}:latency_ms" for n in names]
    if head != want:
        missing = [c for c in want if c not in head]
        extra = [c for c in head if c not in want]
        raise InputError(f"header does not match instance {instance.name}'s links"
                         + (f"; missing {', '.join(missing[:4])}" if missing else "")
                         + (f"; unknown {', '.join(extra[:4])}" if extra else ""), "header", str(path))
    try:
        data = np.array([[float(v) for v in r] for r in rows[1:]])
    except ValueError as err:
        raise InputError(f"not a number: {err}", "rows", str(path)) from None
    if data.ndim != 2 or data.shape[1] != len(want) or len(data) == 0:
        raise InputError(f"every row needs {len(want)} values", "rows", str(path))
    bad = np.argwhere(~np.isfinite(data))
    if len(bad):
        r, c = bad[0]
        raise InputError(f"must be a finite number (got {data[r, c]:g} in data row {r + 1})", want[c], str(path))
    times = data[:, 0]
    if np.any(np.diff(times) <= 0) or times[0] < 0:
        raise InputError("time_s must start at >= 0 and increase", "time_s", str(path))
    L = len(names)
    try:
        states = NetworkStates(data[:, 1:1 + L], data[:, 1 + L:])
    except InputError as err:
        raise err.with_file(path) from None
    # the generator's header names the hour of day at time 0 ("... from 6:00 UTC"); else midnight
    hour = re.search(r"^#.* from (-?[0-9.]+):00 UTC", text, flags=re.M)
    return Trace(times, states, tuple(names), float(hour.group(1)) if hour else 0.0)
