"""Why a plan is as fast as it is, in plain words, computed with the evaluator.

:func:`explain` relaxes every resource the plan uses by 10% — each stage's
compute and all of them together, gradient synchronisation, each WAN
link's bandwidth and latency and all links together, each domain's
internal bandwidth — re-simulates the iteration exactly for each (the link
variants in one vectorised call), and names the resource whose relaxation
shortens the iteration most: the bottleneck.  The most helpful *single*
change (one stage, one link, one domain) is then measured at 25%.  It adds what the critical path is made
of, each link's utilisation and each stage's memory headroom, the distance
to the lower bound, and the single change that would help most, with its
effect measured, not guessed.

Example
-------
>>> print(explain(instance, plan))                         # doctest: +SKIP
Bottleneck: bandwidth of link guian-shanghai: +10% shortens the iteration by 6.1%.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import numpy as np

from ..scoring.bounds import lower_bound
from ..problem.errors import InfeasibleError, human_bytes
from ..scoring.estimate import window_period
from ..scoring.evaluator import Evaluator
from ..problem.network import GBPS, NetworkStates
from ..scoring.trace import trace
from .display import replica_list
from .report import claims_json, solver_rows, speed_change, sync_figures, tradeoff_text

RELAX = 0.10  # relax each resource by 10%
SINGLE = ("compute", "link_bandwidth", "link_latency", "intra_bandwidth")  # one concrete resource
BIG_STEP = 0.25  # the "what would help most" step


@dataclass(frozen=True)
class Sensitivity:
    """Iteration time when one resource is relaxed by ``RELAX``."""

    resource: str  # "compute of stage 3", "bandwidth of link a-b" ...
    kind: str  # compute | all_compute | allreduce | link_bandwidth | link_latency | all_bandwidth
    #            | all_latency | intra_bandwidth
    target: str  # stage index, link "a-b" or domain name
    iteration_time_s: float
    gain: float  # relative shortening of the iteration (0.05 = 5%)


@dataclass
class Explanation:
    instance: str
    iteration_time_s: float
    estimate_s: float
    lower_bound_s: float
    bottleneck: Sensitivity | None
    bottleneck_category: str  # compute | WAN bandwidth | WAN latency | gradient synchronisation | intra-domain
    sensitivities: list[Sensitivity] = field(default_factory=list)
    critical_path: dict[str, float] = field(default_factory=dict)  # seconds per kind of segment
    link_utilisation: dict[str, float] = field(default_factory=dict)  # busy fraction of each used link
    memory_headroom_gb: list[float] = field(default_factory=list)  # per stage, per GPU
    suggestion: str = ""
    suggestion_gain: float = 0.0
    tau_term: str = ""  # which term sets the T_est period
    solver: str = ""  # the solver's claims as the plan summary shows them, or why none is shown
    solver_claims: str = "absent"  # shown | stale | edited | absent (planner.problem.plan.claims_check)
    solver_claims_reason: str | None = None  # why no claim is shown
    gpu_type: str = ""  # GPU types: the type of the stage whose c_j sets the period, and a move re-simulated
    type_move: dict | None = None  # that move: stage, from_type, to_type, domains, iteration_time_s, moved_s
    dp_sync: dict | None = None  # SPEC 11: report.sync_figures of the plan (None: every step at 16 bits)


    def lines(self) -> list[str]:
        T = self.iteration_time_s
        out = [f"Plan for {self.instance}: iteration {T:.4g} s (estimate {self.estimate_s:.4g} s), "
               f"{T / self.lower_bound_s:.2f} x the lower bound ({self.lower_bound_s:.4g} s)."]
        if self.dp_sync is not None:  # SPEC 11: the figures above are the inner step's
            d = self.dp_sync
            out.append(f"Data-parallel sync: {d['label']} over {d['groups']} group(s); "
                       + ("" if d["mode"] == "every_step" else
                          f"{d['effective_time_s']:.4g} s per step with the outer syncs "
                          f"(estimate {d['effective_estimate_s']:.4g} s), the figures here being the inner step's; ")
                       + f"{d['throughput_tokens_per_s']:,.0f} tokens/s raw, "
                       f"{d['effective_tokens_per_s']:,.0f} effective tokens/s at quality e = "
                       f"{d['quality_factor']:.3g} ({d['quality_source']}).")
            out.append(f"Per-step sync: {tradeoff_text(d)}.")
        if self.bottleneck is not None and self.bottleneck.gain > 0:
            b = self.bottleneck
            out.append(f"Bottleneck: {b.resource} ({self.bottleneck_category}): {RELAX:.0%} more "
                       f"shortens the iteration by {b.gain:.1%}.")
        else:
            out.append("No single resource shortens the iteration when relaxed by 10%.")
        if self.solver:
            out.append(f"Solver {self.solver}.")
        if self.tau_term:
            out.append(f"Pipeline period (T_est): the period is set by {self.tau_term}.")
        if self.gpu_type:
            out.append(f"GPU type: {self.gpu_type}")
        total = sum(self.critical_path.values()) or 1.0
        parts = ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(self.critical_path.items(),
                                                                      key=lambda kv: -kv[1]) if v > 0)
        out.append(f"Critical path: {parts}.")
        if self.suggestion:
            out.append(f"Most helpful single change: {self.suggestion} shortens the iteration by "
                       f"{self.suggestion_gain:.1%}.")
        if self.link_utilisation:
            worst = sorted(self.link_utilisation.items(), key=lambda kv: -kv[1])[:5]
            out.append("Link utilisation (busy share of the iteration): "
                       + ", ".join(f"{k} {v:.0%}" for k, v in worst) + ".")
        if self.memory_headroom_gb:
            j = int(np.argmin(self.memory_headroom_gb))
            out.append(f"Memory: tightest stage {j} has {self.memory_headroom_gb[j]:.1f} GB per GPU to spare.")
        if self.sensitivities:
            out.append("Relaxing each resource by 10%:")
            for s in self.sensitivities[:8]:
                out.append(f"  {s.resource:<40} -{s.gain:.2%}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        lines = self.lines()
        head, rest = lines[:1], lines[1:]
        items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in rest
                        if not line.startswith("  ") and not line.endswith(":"))
        rows = "".join(f"<tr><td>{html.escape(s.resource)}</td><td style='text-align:right'>"
                       f"{s.gain:.2%}</td></tr>" for s in self.sensitivities[:8])
        return (f"<div><b>{html.escape(head[0])}</b><ul>{items}</ul>"
                f"<table><tr><th>resource relaxed by 10%</th><th>iteration shorter by</th></tr>{rows}</table></div>")

    def to_dict(self) -> dict:
        from dataclasses import asdict

        d = asdict(self)
        if d["dp_sync"] is None:  # a plain plan's explanation stays as it was
            del d["dp_sync"]
        return d


def _link_name(instance, i: int) -> str:
    link = instance.links[i]
    return f"{link.a}-{link.b}"


def _inner_ring_loads(instance, plan, fig, spec):
    """(link, bytes per step) of the inner rings of diloco and streaming (SPEC 11) that
    cross domains: each group's (replicas with stage 0 in one domain) sync of stage j,
    16-bit, every step, over the group's domains in instance order; nothing otherwise."""
    if not fig.dp.outer:
        return []
    routes = instance.routes_for(spec)
    order = instance.domain_index
    groups: dict[str, list] = {}
    for row in plan.placement:
        groups.setdefault(row[0], []).append(row)
    out = []
    for rows in groups.values():
        for j in range(plan.num_stages):
            ring = sorted({row[j] for row in rows}, key=order.__getitem__)
            if len(ring) < 2 or fig.G[j] <= 0:
                continue
            k = len(ring)
            for a, b in zip(ring, ring[1:] + ring[:1]):
                out += [(l, 2 * (k - 1) / k * fig.G[j]) for l in routes[(a, b)].links]
    return out


def explain(instance, plan, states: NetworkStates | None = None) -> Explanation:
    """Explain ``plan`` on ``instance`` (under one network state; base by default).

    Raises ``InfeasibleError`` (exit 3), with the violated rules, when the plan
    is infeasible (over memory or capacity, a deadlocking schedule): no advice
    is given for a plan that cannot run."""
    ev = Evaluator(instance, plan)
    check = ev.evaluate()
    if not check.feasible:
        raise InfeasibleError(f"the plan is infeasible on {instance.name}; nothing to explain until it is fixed",
                              [v.message for v in check.violations])
    base = ev.one_state(states, "explain")
    fig = ev.fig
    T0 = float(ev.iteration_times(base)[0])
    sens: list[Sensitivity] = []

    def add(resource, kind, target, T):
        sens.append(Sensitivity(resource, kind, target, float(T), float((T0 - T) / T0)))

    # stages' compute: 10% faster f and g of every replica's copy (each at its own GPU
    # type), same network, re-simulated by the evaluator (per class of GPU types)
    comm = fig.comm(base)
    for j in range(plan.num_stages):
        add(f"compute of stage {j}", "compute", str(j), ev.relaxed_times(base, compute=_one_stage(plan, j))[0])
    if plan.num_stages > 1:
        add("compute of every stage (GPU speed)", "all_compute", "*", ev.relaxed_times(base, compute=1 + RELAX)[0])
    if comm.ar.max() > 0:
        add("gradient synchronisation (all stages)", "allreduce", "*",
            ev.relaxed_times(base, allreduce=1 + RELAX)[0])
    # WAN links the plan uses: bandwidth +10% and latency -10%, one by one and all
    # together, in one vectorised batch
    used = sorted({l for r in fig.flow_routes + fig.hop_routes for l in r})
    if used:
        n = len(used)
        bw = np.repeat(base.bandwidth_gbps, 2 * n + 2, axis=0)
        lat = np.repeat(base.latency_ms, 2 * n + 2, axis=0)
        for k, l in enumerate(used):
            bw[k, l] *= 1 + RELAX
            lat[n + k, l] *= 1 - RELAX
            bw[2 * n, l] *= 1 + RELAX
            lat[2 * n + 1, l] *= 1 - RELAX
        Ts = ev.iteration_times(NetworkStates(bw, lat))
        for k, l in enumerate(used):
            add(f"bandwidth of link {_link_name(instance, l)}", "link_bandwidth", _link_name(instance, l), Ts[k])
            if base.latency_ms[0, l] > 0:
                add(f"latency of link {_link_name(instance, l)}", "link_latency", _link_name(instance, l), Ts[n + k])
        if n > 1:
            add("bandwidth of every WAN link", "all_bandwidth", "*", Ts[2 * n])
            add("latency of every WAN link", "all_latency", "*", Ts[2 * n + 1])
    # internal bandwidth of every domain the plan uses
    for d in sorted({d for row in plan.placement for d in row}, key=instance.domain_index.__getitem__):
        inst2 = instance.with_domain(d, intra_bandwidth_gbps=instance.domain(d).intra_bandwidth_gbps * (1 + RELAX))
        add(f"internal bandwidth of {d}", "intra_bandwidth", d,
            Evaluator(inst2, plan).iteration_times(states)[0])
    sens.sort(key=lambda s: (-s.gain, s.resource))
    bottleneck = sens[0] if sens else None

    tr = trace(instance, plan, states)
    cp: dict[str, float] = {}
    names = {"F": "forward compute", "B": "backward compute", "send": "WAN/intra transfers",
             "latency": "latency", "allreduce": "gradient synchronisation"}
    for seg in tr.critical_path:
        cp[names[seg.kind]] = cp.get(names[seg.kind], 0.0) + (seg.end - seg.start)
    category = _category(bottleneck, cp, fig)

    # link utilisation: bytes over each used link / (share-free bandwidth x T)
    util = {}
    bw_bytes = base.bandwidth_gbps[0] * GBPS
    load = np.zeros(len(instance.links))
    for r in range(plan.replicas):
        for k in range(plan.num_stages - 1):
            f_idx = fig.flow_of[r, k]
            if f_idx >= 0:
                for l in fig.flow_routes[f_idx]:
                    load[l] += fig.A[k] * fig.m  # per direction
    for j, hops in enumerate(fig.hops_of):  # the rings over every domain holding stage j
        kr = fig.ring_k[j]
        # SPEC 11: under diloco and streaming these are the outer rings, once every H steps, where
        # the evaluator charges one (M > 1 groups; with M = 1 the inner rings below are the sync)
        if fig.dp.outer:
            per_step = fig.G_outer[j] / fig.dp.H if fig.outer_charged[j] else 0.0
        else:
            per_step = fig.G_sync[j]
        for h in hops:
            for l in fig.hop_routes[h]:
                load[l] += 2 * (kr - 1) / kr * per_step
    for l, volume in _inner_ring_loads(instance, plan, fig, ev.spec):
        load[l] += volume
    for l in used:
        util[_link_name(instance, l)] = float(load[l] / (bw_bytes[l] * T0)) if bw_bytes[l] > 0 else float("inf")

    headroom = [float((lim - m) / 1e9) for lim, m in zip(fig.memory_limit, fig.memory)]  # per type
    suggestion, sgain = "", 0.0
    single = [x for x in sens if x.kind in SINGLE]
    if single and single[0].gain > 0:
        suggestion, sgain = _bigger_step(instance, plan, ev, base, single[0], T0)
        if sgain <= 0:  # re-simulated, it does not help: recommend nothing
            suggestion, sgain = "", 0.0
    Te = float(ev.estimate_times(base)[0])
    claims = claims_json(instance, plan)
    rows = solver_rows(instance, plan)
    type_text, move = _slow_type(instance, plan, ev, base, T0)
    return Explanation(instance.name, T0, Te, lower_bound(instance).value, bottleneck, category, sens, cp,
                       util, headroom, suggestion, sgain, _tau_term(fig, comm, plan),
                       rows[0][1] if rows else "", claims["solver_claims"], claims["solver_claims_reason"],
                       type_text, move, sync_figures(check))


def _one_stage(plan, j: int, step: float = RELAX) -> np.ndarray:
    """(S,) compute divisors: stage ``j`` ``1 + step`` times faster, the others as they are."""
    div = np.ones(plan.num_stages)
    div[j] = 1 + step
    return div


def _achieved(gpu) -> str:
    return f"{gpu.flops_per_s / 1e12:.3g} TFLOP/s achieved"


def type_moves(instance, plan, j: int, to: int, replicas=None) -> list[tuple[str, ...]]:
    """The ways to put stage ``j`` of the replicas ``replicas`` (default every one) on GPU
    type ``to`` (an index into ``instance.gpu_types``) within the domains' free GPUs: each
    domain of that type that can take all those copies (``tp`` GPUs each) alone, and, when
    none can, one greedy fill of its domains, most free GPUs first.  Each way is the tuple
    of domains, one per moved replica in order; [] when the type has too few free GPUs.

    >>> type_moves(inst, plan, 1, 1)                   # doctest: +SKIP
    [('beta',)]
    """
    used = plan.gpus_per_domain()
    t = plan.tp
    R = plan.replicas if replicas is None else len(replicas)
    free = {d.name: d.gpus - used.get(d.name, 0) for d, u in zip(instance.domains, instance.domain_type)
            if u == to and d.gpus_per_node >= t}
    whole = [(d,) * R for d, n in free.items() if n >= R * t]
    if whole:
        return whole
    out, left = [], dict(free)
    for _ in range(R):
        d = max(left, key=lambda k: (left[k], -instance.domain_index[k]), default=None)
        if d is None or left[d] < t:
            return []
        out.append(d)
        left[d] -= t
    return [tuple(out)]


def _slow_type(instance, plan, ev, base, T0: float) -> tuple[str, dict | None]:
    """With several GPU types (SPEC v3 (g)): in the binding class (the replicas with one
    row of GPU types whose own simulated iteration is the longest, the evaluator's T;
    every replica with one class), the stage whose c_j is the largest (it sets the compute
    period), its type, and, when a faster type of the instance fits that stage's memory,
    the plan with that stage moved there (the copy of every replica whose copy runs on a
    slower type), RE-SIMULATED by the evaluator on the whole plan: the best of
    :func:`type_moves`.  ("", None) for a one-type instance."""
    if not instance.heterogeneous:
        return "", None
    fig = ev.fig
    k = int(np.argmax(ev.class_times(base)[0]))  # the binding class (0 with one class)
    c = fig.class_f[k] + fig.class_g[k]
    j = int(np.argmax(c))
    mine = np.nonzero(fig.replica_class == k)[0]
    u = int(fig.type_of[mine[0], j])  # every replica of the class has this type on stage j
    g = instance.gpu_types[u]
    where_class = "" if fig.classes == 1 else (
        f" in replica{'s' if len(mine) > 1 else ''} {replica_list(mine)} (the binding class: "
        f"{fig.classes} rows of GPU types over the replicas, this one's simulated iteration is the longest)")
    head = (f"stage {j}, the slowest (c_{j} = {c[j]:.4g} s per micro-batch, the largest c_j: it sets the "
            f"compute part of the pipeline period){where_class}, runs on {g.name} ({_achieved(g)}).")
    faster = [v for v in instance.types_used if instance.gpu_types[v].flops_per_s > g.flops_per_s
              and instance.memory_limit_of(instance.gpu_types[v]) >= fig.memory[j]]
    if not faster:
        slower = any(instance.gpu_types[v].flops_per_s > g.flops_per_s for v in instance.types_used)
        return head + (" No faster type has the memory for it." if slower else " It is the fastest type."), None
    to = max(faster, key=lambda v: (instance.gpu_types[v].flops_per_s, -v))
    h = instance.gpu_types[to]
    # the copies of stage j on a slower type than h (those already on h stay)
    movers = [r for r in range(plan.replicas) if instance.gpu_types[int(fig.type_of[r, j])].flops_per_s
              < h.flops_per_s]
    best = None
    for doms in type_moves(instance, plan, j, to, movers):
        rows = [list(row) for row in plan.placement]
        for r, d in zip(movers, doms):
            rows[r][j] = d
        cand = plan.model_copy(update={"placement": rows, "predicted": None, "solver": None})
        moved = Evaluator(instance, cand)
        if not moved.evaluate().feasible:
            continue
        T = float(moved.iteration_times(base)[0])
        if best is None or T < best[1]:
            best = (doms, T)
    if best is None:
        return head + f" The fastest type that fits it, {h.name}, has too few free GPUs to take it.", None
    doms, T = best
    where = ", ".join(dict.fromkeys(doms))
    move = {"stage": j, "from_type": g.name, "to_type": h.name, "replicas": movers, "domains": list(doms),
            "iteration_time_s": T0, "moved_s": T}
    return (head + f" Moving it to {h.name} ({_achieved(h)}, the fastest type that fits it) in {where}, "
            f"re-simulated: {T:.4g} s instead of {T0:.4g} s ({speed_change(T0, T)})."), move


def _category(b: Sensitivity | None, cp: dict, fig) -> str:
    if b is None:
        return "none"
    if b.kind == "compute":
        return "stage compute"
    if b.kind == "all_compute":
        return "compute"
    if b.kind == "allreduce":
        return "gradient synchronisation"
    if b.kind in ("link_latency", "all_latency"):
        return "WAN round-trip latency with the in-flight limit"
    if b.kind == "intra_bandwidth":
        return "intra-domain bandwidth"
    # bandwidth: is it the pipeline transfers or the gradient rings that need it?
    if cp.get("gradient synchronisation", 0.0) > cp.get("WAN/intra transfers", 0.0):
        return "gradient synchronisation over the WAN"
    return "WAN bandwidth of pipeline transfers"


def _tau_term(fig, comm, plan) -> str:
    """Which term sets the T_est period (SPEC 7), for the replica with the largest
    period: a stage's compute, a boundary's transfer, or (1f1b and explicit) the window
    of stages whose round trip over its micro-batches is longest -- the window comes
    from :func:`planner.scoring.estimate.window_period`, the estimate's own code."""
    if plan.schedule == "gpipe":
        return "compute and transfers with forward and backward phases apart (gpipe)"
    S, w = plan.num_stages, fig.inflight
    best = (float(fig.c.max()), f"the compute of stage {int(np.argmax(fig.c))}")  # the largest over replicas
    x, l = comm.x[0], comm.l[0]
    class_c = fig.class_f + fig.class_g  # GPU types: each replica's c is its class's
    for r in range(plan.replicas):
        if S > 1 and x[r].max() > best[0]:
            best = (float(x[r].max()), f"the transfer over boundary {int(np.argmax(x[r]))} (replica {r})")
        v, j, k = window_period(class_c[fig.replica_class[r]], x[r], l[r], w, fig.m)
        if v > best[0]:
            held = int(w[j] - w[k] + 1)
            best = (v, f"the window between stages {j} and {k} (replica {r}): a {v * held:.3g} s round "
                       f"trip with {held} micro-batches per round trip, a {v:.3g} s period")
    return best[1]


def _move_unit(instance, plan, j: int, T0: float):
    """(what, iteration time) of the best feasible plan that moves one unit off stage
    ``j`` to a neighbouring stage, when it simulates faster than ``T0``; else None."""
    from ..scoring.evaluator import check_plan

    units, bounds, best = instance.units, plan.bounds(), None
    a, e = bounds[j]
    moves = []
    if j > 0 and e - a > 1:
        moves.append((j - 1, j, f"unit {units[a].name} from stage {j} to stage {j - 1}", +1))
    if j < plan.num_stages - 1 and e - a > 1:
        moves.append((j, j + 1, f"unit {units[e - 1].name} from stage {j} to stage {j + 1}", -1))
    for left, _, what, shift in moves:
        cuts = list(bounds)
        la, le = cuts[left]
        ra, re_ = cuts[left + 1]
        cuts[left], cuts[left + 1] = (la, le + shift), (ra + shift, re_)
        cand = plan.model_copy(update={"stages": [type(plan.stages[0])(start=x, end=y) for x, y in cuts],
                                       "predicted": None, "solver": None})
        if plan.schedule_kind == "explicit" or check_plan(instance, cand):
            continue
        T = float(Evaluator(instance, cand).iteration_times()[0])
        if T < T0 * (1 - 1e-9) and (best is None or T < best[1]):
            best = (what, T)
    return best


def _bigger_step(instance, plan, ev, base, b: Sensitivity, T0) -> tuple[str, float]:
    """Measure a +25% (or -25% latency, +25% compute speed) change of the bottleneck."""
    step = BIG_STEP
    if b.kind in ("all_compute", "allreduce"):
        if b.kind == "all_compute":
            T = float(ev.relaxed_times(base, compute=1 + step)[0])
            return f"{step:.0%} faster GPUs (or mfu)", (T0 - T) / T0
        T = float(ev.relaxed_times(base, allreduce=1 + step)[0])
        return f"{step:.0%} faster gradient synchronisation (bandwidth of its rings)", (T0 - T) / T0
    if b.kind in ("all_bandwidth", "all_latency"):
        bw, lat = base.bandwidth_gbps.copy(), base.latency_ms.copy()
        if b.kind == "all_bandwidth":
            bw *= 1 + step
        else:
            lat *= 1 - step
        T = float(ev.iteration_times(NetworkStates(bw, lat))[0])
        return (f"{'+' if b.kind == 'all_bandwidth' else '-'}{step:.0%} "
                f"{'bandwidth' if b.kind == 'all_bandwidth' else 'latency'} on every WAN link"), (T0 - T) / T0
    if b.kind in ("link_bandwidth", "link_latency"):
        l = next(i for i in range(len(instance.links)) if _link_name(instance, i) == b.target)
        bw, lat = base.bandwidth_gbps.copy(), base.latency_ms.copy()
        if b.kind == "link_bandwidth":
            bw[0, l] *= 1 + step
            text = f"+{step:.0%} bandwidth on {b.target}"
        else:
            lat[0, l] *= 1 - step
            text = f"-{step:.0%} latency on {b.target}"
        T = float(ev.iteration_times(NetworkStates(bw, lat))[0])
    elif b.kind == "intra_bandwidth":
        d = b.target
        inst2 = instance.with_domain(d, intra_bandwidth_gbps=instance.domain(d).intra_bandwidth_gbps * (1 + step))
        T = float(Evaluator(inst2, plan).iteration_times()[0])
        text = f"+{step:.0%} internal bandwidth in {d}"
    else:
        j = int(b.target)
        T = float(ev.relaxed_times(base, compute=_one_stage(plan, j, step))[0])
        text = f"{step:.0%} faster compute on stage {j}"
        moved = _move_unit(instance, plan, j, T0)
        if moved is not None:  # a change a person can make, re-simulated
            text += f" (moving {moved[0]}, re-simulated: {moved[1]:.4g} s, {speed_change(T0, moved[1])})"
    return text, (T0 - T) / T0
