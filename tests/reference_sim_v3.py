"""An independent, deliberately simple reference for SPEC v3, sections 2-7.

Written from /work/shared/SPEC.md (v3) alone, without looking at the
package's scoring modules or its routing module, so that agreement tests
compare two independent readings of the SPEC.  Pure Python, stdlib only;
slow and obvious on purpose.  ``tests/reference_sim.py`` (the v2 reference)
is kept unchanged beside it.

Covered: routes (section 2: a linked pair uses its link, else the
least-latency path with the tie rules), units (3), feasibility (4),
per-(replica, stage) figures with GPU types and ``unit_overhead_ms`` (5),
full-duplex direction-aware transfer resources with uplinks, n(q), gradient
synchronisation (ring / reduce_broadcast, processor sharing) (5), the exact
event simulation with deadlock detection (6), the flush-based estimate (7)
and the cost per iteration (6), and communication reduction (11: every_step
with bits and a codec, diloco, streaming, their estimates, memory with outer
state, WAN bytes, the quality lookup; :func:`ref3_effective`).  Not covered:
several jobs (10), plan switches (8).

Interface (duck-typed; every v3 field is read with ``getattr`` and a
default, so today's ``planner.Instance`` / ``planner.Plan`` work as they are)
---------------------------------------------------------------------------
instance
    ``domains``: objects with ``name``, ``gpus``, ``gpus_per_node``,
    ``intra_bandwidth_gbps``, ``price_per_gpu_hour`` (default 0) and, v3,
    ``gpu`` (type name, default None: the ``[gpu]`` type) and ``uplink_gbps``
    (default None: no cap).
    ``links``: objects with ``a``, ``b``, ``bandwidth_gbps``, ``latency_ms``.
    ``gpu``: the ``[gpu]`` type (may be None when ``gpus`` lists every type;
    read from ``gpu_table`` when the object has one, as ``planner.Instance``
    does: its ``gpu`` is the one type every domain has),
    with ``name``, ``peak_tflops``, ``memory_gb``, ``mfu``,
    ``nvlink_bandwidth_gbps`` (default None), ``unit_overhead_ms`` (v3,
    default 0).  ``gpus`` (v3, default empty): further types, same fields.
    ``units``: the model's units (``params``, ``fwd_flops_per_token``,
    ``out_bytes_per_token``, ``stored_bytes_per_token``, ``tp_bytes_per_token``
    default 0), section 3's figures already worked out.
    ``workload``: ``global_batch_size``, ``seq_len``, ``recompute``,
    ``tensor_parallel``, ``micro_batch_sizes`` and, v3, ``gradient_sync``
    (default ``"ring"``).
    ``options``: ``memory_reserve_fraction`` (default 0.10),
    ``wan_price_per_gb`` (default 0), v3 ``dp_sync`` (default
    ``["every_step"]``).
plan
    ``stages`` (``start``, ``end``), ``placement`` (domain names, R rows of S),
    ``tp``, ``micro_batch_size``, ``num_micro_batches``, ``schedule``
    (``"gpipe"``, ``"1f1b"``, an object with ``ops``, or a list of op
    lists), optional ``dp_sync`` (None, a dict or an object with ``mode``,
    ``H``, ``bits``, ``fragments``, ``overlap``, ``outer_state``).
instance, SPEC 11
    optional ``compression`` (``codec_gbps`` default None,
    ``outer_state_bytes_per_param`` default 8) and ``quality`` (rows with
    ``modes``, ``max_groups``, ``max_H``, ``min_bits``, ``e``, ``source``;
    None: no bound), dicts or objects.
network state
    ``bw_gbps``, ``lat_ms``: lists indexed like ``instance.links`` (None: the
    base figures).  Routes always come from the base network.

Readings of the SPEC where it leaves room (a disagreement with the package
is a finding, not a tweak):

* Routes.  A linked pair uses its link (there is at most one per pair; were
  there several, the first in instance order).  Otherwise every simple path
  is ranked by (latency, hops, list of names), the latency summed link by
  link from the source in ms and rounded with ``round(., 9)`` after each
  addition.  The rounding is for ranking only: a transfer's latency is the
  plain sum of its links' latencies under the network state.  Routes use the
  base latencies and stay fixed under every state.
* Resources.  ``("link", i, u, v)`` is link i in the direction u -> v;
  ``("out", d)`` / ``("in", d)`` are the uplink of d in each direction and
  exist only when d has ``uplink_gbps``.  A transfer along (d_0 .. d_n) uses
  its links in its direction, out(d_0) and in(d_n); domains passed through
  are not charged.  Intra-domain transfers (boundaries inside one domain and
  the intra part of a gradient sync) use no resource at all: they count for
  no uplink and their bandwidth is the domain's ``intra_bandwidth_gbps``,
  unshared.
* Boundary channels share resources only with boundary channels, gradient
  ring hops only with ring hops (section 5 gives the two rules apart).
* The backward channel of a boundary runs along route(d_j, d_{j+1})
  reversed (as the text says), not along route(d_{j+1}, d_j); both
  channels of a boundary have the same x (the min over the resources of
  either) and the same l (the latency of the forward route).
* A resource of capacity 0 (a link down under a state) gives its users
  bandwidth 0 and the transfer time infinity, even for 0 bytes (section 8:
  "a plan whose transfers use it has T = infinity"); likewise a ring hop
  over a down link makes AR_j infinite.
* Flushes.  The cut rule is applied to the op lists of every schedule,
  named ones included (gpipe and 1f1b are expanded first).  For each stage
  the positions p >= 1 with nothing in flight are listed with the set of
  micro-batches completed there; a cut is a set listed on every stage, at
  that stage's position.  So 1f1b with S = 1 has m one-micro-batch flushes
  (F(i) B(i)); the numbers are the same as with one flush.  w_{j,s} counts
  in flight from 0 at the flush's start.  "Every flush is gpipe-shaped"
  (for n(q)) is decided once per plan from the same op lists; every
  replica runs the same lists.
* n(q) = max(n_F, n_B) or n_F + n_B is decided for the whole plan (one
  non-gpipe-shaped flush anywhere gives n_F + n_B everywhere).
* Gradient rings.  "Instance order" is the position in
  ``instance.domains``; the ring runs d_1 -> d_2 -> ... -> d_K -> d_1, hop i
  along route(d_i, d_{i+1}) (the last along route(d_K, d_1), which need
  not be route(d_1, d_K) reversed).  K = 2 has two hops, d_1 -> d_2 and
  d_2 -> d_1, on opposite directions of a link.  Each (stage, hop) is a
  separate user of each resource its hop uses, so two hops of one ring on
  one resource count twice.  A hop's latency is the sum of its links'
  latencies under the state; ring latency = the largest hop latency, and
  the ``2(K-1) * ring_latency`` term holds for reduce_broadcast too ("only
  the volume factor differs").  The intra part uses phi(n) of the
  workload's ``gradient_sync`` too (2 for reduce_broadcast), as written.
* A stage with G_j = 0 (no parameters) has AR_j = 0 and is no sync user,
  whatever its K ("0 when G_j = 0", users "over all stages with G > 0");
  v2 charged such a stage 2(K-1) ring latency and counted its hops in the
  equal split (a change SPEC v3's compatibility list does not name).
* Several replicas: E^est_j is the largest over replicas of each replica's
  own flush sum; the first P of each flush uses that replica's figures.
* Cost.  Used GPUs are t per (replica, stage), priced by their domain.  WAN
  bytes per iteration: 2 m A_j per (replica, boundary) across domains
  (forward and backward), plus 2(K-1) G_j per stage with a cross part (K
  hops of 2(K-1)/K G_j), for both ``gradient_sync`` kinds as written.  An
  infinite T gives an infinite cost (never NaN).
* The estimate is infinite when a replica's round trip Q_0 is infinite
  (avoids inf - inf in P - D); tau is then infinite too.
* Feasibility (section 4): m * R * b = global_batch_size with m >= 1; t among
  the workload's candidates and <= gpus_per_node of every domain used; GPUs
  per domain; a route between adjacent stages in different domains; memory
  per (replica, stage) against its type; a valid op list per stage; the
  ``dp_sync`` mode allowed.  b need not be one of ``micro_batch_sizes``
  (section 4 does not ask it).

Readings of SPEC 11 (``dp_sync``):

* Payload G^o_j = P_j q / 8 (at q = 16 it is G_j exactly).  every_step with
  bits: section 5's sync with G^o_j in the intra part, the cross part and the
  users' volumes, plus X_j when R > 1 (also when the replicas of stage j sit
  in one domain: "every_step: R > 1").  every_step at q > 16 is looked up in
  the quality rows like any q != 16 and has X_j = 0.
* Inner sync: each group runs section 5's sync over its own replicas with G_j
  (16 bits), rings over the group's domains of stage j in instance order;
  every (group, stage, hop) of every group is a user of the same processor
  sharing; AR^in_j is the largest intra + cross over groups (a group of one
  replica: 0).  The inner rings share only with inner rings, the outer rings
  only with outer rings (they run at different times under diloco; under
  streaming SPEC says "among the outer users only"), and neither with
  boundary channels (except n_O below).
* O_j is charged when M > 1, K_j > 1 and P_j > 0 (a stage without parameters
  has no sync, as section 5's "0 when G_j = 0"); the outer ring runs over the
  K_j domains of stage j in instance order with phi of the workload's
  ``gradient_sync`` (2 for reduce_broadcast) and volume phi(K_j) G^o_j; users
  are the (stage, hop) pairs of the charged stages.  X_j (diloco,
  streaming) only for charged stages.
* diloco: T_sync = max over all stages of E_j + AR^in_j + X_j + O_j (X, O = 0
  where not charged); T_eff = T_in + (T_sync - T_in) / H.  No stage charged
  (M = 1, or every stage in one domain): T_eff = T_in.
* streaming: the max over j in s_j and in the floor runs over the charged
  stages only; none charged: T_eff = T_in.  n_O(q) = the number of outer
  (stage, hop) pairs over resource q (links in their direction and uplinks,
  as any transfer); n(q) = max(n_F, n_B) + n_O or n_F + n_B + n_O for every
  resource a boundary channel uses, in the simulation AND in the estimate (the
  x_{k,r} of section 7 are section 5's, which streaming changes).  diloco and
  every_step add no channels.
* a_j = the start of stage j's first op (its first op in its list), the
  earliest over replicas, from the same simulation that gives T_in; the
  estimate uses a^est_j as written.  W_j uses E_j (latest over replicas) and
  AR^in_j.
* Infinite T_in (a link down) gives T_eff = infinity; so does an infinite
  O_j (an outer hop over a down link), never NaN.
* Memory: phi_o beta_o P_j / t is added for diloco and streaming whenever
  the mode is set, also when M = 1 or O_j is not charged (SPEC 11 puts no
  condition on it); it enters the feasibility check per (replica, stage).
* WAN bytes: every_step at q < 16 or q > 16: boundaries + 2(K - 1) G^o_j per
  stage with K > 1 (R > 1); diloco / streaming: boundaries + 2(K_{g,j} - 1) G_j
  per (group, stage) with K_{g,j} > 1 + 2(K_j - 1) G^o_j / H per charged stage
  (the same for streaming: all F fragments of a block are sent once per H
  steps).  Cost = section 6's with T_eff.
* Quality: e = 1 and source None for every_step at 16 bits, without lookup.
  Otherwise rows in order (instance rows, then defaults "default row N");
  absent bounds match all; every_step looks up with M = H = 1; diloco and
  streaming with M = the number of groups, also M = 1.  No match: an error
  (:class:`RefNoQuality`).  The score is T_eff / e (or cost at T_eff / e).
"""

from __future__ import annotations

import math

GBPS = 1e9 / 8  # bytes/s per Gbit/s
MS = 1e-3  # seconds per millisecond
INF = math.inf


class RefDeadlock(Exception):
    """The reference simulation can make no progress."""


# ---------------------------------------------------------------- accessors
def _domains(instance):
    return {d.name: d for d in instance.domains}


def _order(instance):
    return {d.name: i for i, d in enumerate(instance.domains)}


def gpu_table(instance):
    """The ``[gpu]`` table, or None."""
    if hasattr(type(instance), "model_fields") and "gpu_table" in type(instance).model_fields:
        return instance.gpu_table
    return getattr(instance, "gpu", None)


def gpu_types(instance):
    """{name: type} over ``[gpu]`` and ``[[gpus]]``."""
    out = {}
    base = gpu_table(instance)
    if base is not None:
        out[base.name] = base
    for g in getattr(instance, "gpus", None) or ():
        out[g.name] = g
    return out


def domain_type(instance, name):
    """The GPU type of domain ``name`` (its ``gpu``, else ``[gpu]``)."""
    d = _domains(instance)[name]
    tname = getattr(d, "gpu", None)
    if tname is None:
        base = gpu_table(instance)
        if base is None:
            raise ValueError(f"domain {name} names no GPU type and there is no [gpu]")
        return base
    return gpu_types(instance)[tname]


def uplink_bytes(instance, name):
    """Uplink capacity of domain ``name`` in bytes/s, or None (no cap)."""
    up = getattr(_domains(instance)[name], "uplink_gbps", None)
    return None if up is None else up * GBPS


def gradient_sync_kind(instance):
    return getattr(instance.workload, "gradient_sync", None) or "ring"


def phi(K, kind):
    return 2.0 if kind == "reduce_broadcast" else 2.0 * (K - 1) / K


def _state(instance, bw_gbps, lat_ms):
    if bw_gbps is None:
        bw_gbps = [lk.bandwidth_gbps for lk in instance.links]
    if lat_ms is None:
        lat_ms = [lk.latency_ms for lk in instance.links]
    return list(bw_gbps), list(lat_ms)


# ---------------------------------------------------------------- dp_sync (SPEC 11)
def _get(obj, key, default=None):
    """``obj[key]`` or ``obj.key`` (dicts and objects alike), ``default`` when absent or None."""
    if obj is None:
        return default
    val = obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)
    return default if val is None else val


def ref3_sync(plan):
    """The plan's ``dp_sync`` as a plain dict with every default filled:
    ``mode``, ``H`` (1 for every_step), ``bits``, ``fragments``, ``overlap``,
    ``outer_state``; None (absent) is every-step at 16 bits.

    >>> ref3_sync(type("P", (), {"dp_sync": None})())["mode"]
    'every_step'
    """
    ds = getattr(plan, "dp_sync", None)
    mode = _get(ds, "mode", "every_step")
    return {"mode": mode,
            "H": 1 if mode == "every_step" else int(_get(ds, "H")),
            "bits": int(_get(ds, "bits", 16)),
            "fragments": int(_get(ds, "fragments", 1)),
            "overlap": int(_get(ds, "overlap", 1)),
            "outer_state": _get(ds, "outer_state", "gpu")}


def is_outer(sync):
    return sync["mode"] in ("diloco", "streaming")


def is_plain(sync):
    return sync["mode"] == "every_step" and sync["bits"] == 16


def ref3_groups(plan):
    """Groups of SPEC 11: {stage-0 domain: [replica indices]}, in replica order."""
    groups = {}
    for r, row in enumerate(plan.placement):
        groups.setdefault(row[0], []).append(r)
    return groups


# SPEC 11's table: (modes, max_groups, max_H, min_bits, e)
DEFAULT_QUALITY_ROWS = (
    (("every_step",), None, None, 4, 1.00),
    (("diloco", "streaming"), 2, 100, 4, 1.00),
    (("diloco", "streaming"), 4, 30, 4, 0.92),
    (("diloco", "streaming"), 4, 100, 4, 0.76),
    (("diloco", "streaming"), 8, 30, 4, 0.74),
)


class RefNoQuality(Exception):
    """No quality row covers the plan's dp_sync option (an input error)."""


def ref3_quality(instance, plan):
    """(e, source) of SPEC 11: 1 for every-step at 16 bits; else the first
    matching row among the instance's ``quality`` rows, then the 5 defaults
    (source "default row N").  Raises :class:`RefNoQuality` when none matches.

    Reading: the lookup runs for diloco / streaming whatever M (also M = 1,
    where T_eff = T_in); an instance row without ``source`` reports None."""
    sync = ref3_sync(plan)
    if is_plain(sync):
        return 1.0, None
    outer = is_outer(sync)
    M = len(ref3_groups(plan)) if outer else 1
    H = sync["H"] if outer else 1
    rows = [(_get(row, "modes"), _get(row, "max_groups"), _get(row, "max_H"),
             _get(row, "min_bits"), _get(row, "e"), _get(row, "source"))
            for row in (getattr(instance, "quality", None) or ())]
    rows += [(*row, f"default row {i}") for i, row in enumerate(DEFAULT_QUALITY_ROWS, start=1)]
    for modes, max_groups, max_H, min_bits, e, source in rows:
        if (sync["mode"] in modes and (max_groups is None or M <= max_groups)
                and (max_H is None or H <= max_H) and (min_bits is None or sync["bits"] >= min_bits)):
            return float(e), source
    raise RefNoQuality(f"no quality row covers {sync} with M = {M}")


def _compression(instance):
    comp = getattr(instance, "compression", None)
    return _get(comp, "codec_gbps", None), float(_get(comp, "outer_state_bytes_per_param", 8.0))


def outer_state_factor(sync):
    """phi_o of SPEC 11's memory rule."""
    if not is_outer(sync):
        return 0.0
    if sync["outer_state"] == "gpu":
        return 1.0
    return 0.0 if sync["mode"] == "diloco" else 1.0 / sync["fragments"]


# ---------------------------------------------------------------- schedules
def ref3_op_lists(plan):
    """Per stage, a list of (kind, micro-batch) pairs (SPEC 6)."""
    S, m = len(plan.stages), plan.num_micro_batches
    sched = plan.schedule
    if isinstance(sched, str):
        out = []
        for j in range(S):
            if sched == "gpipe":
                ops = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
            elif sched == "1f1b":
                w = min(S - j - 1, m)
                ops = [("F", i) for i in range(w)]
                for q in range(m - w):
                    ops.append(("F", w + q))
                    ops.append(("B", q))
                ops += [("B", i) for i in range(m - w, m)]
            else:
                raise ValueError(sched)
            out.append(ops)
        return out
    lists = getattr(sched, "ops", sched)
    return [[(s[0], int(s[1:])) if isinstance(s, str) else (s[0], int(s[1])) for s in strs]
            for strs in lists]


def op_list_problems(ops, S, m):
    """Why the op lists are not a valid schedule (empty list: valid)."""
    bad = []
    if len(ops) != S:
        bad.append(f"{len(ops)} op lists for {S} stages")
    for j, lst in enumerate(ops):
        seen_f, seen_b = set(), set()
        for kind, i in lst:
            if not 0 <= i < m or kind not in ("F", "B"):
                bad.append(f"stage {j}: bad op {kind}{i}")
            elif kind == "F":
                if i in seen_f:
                    bad.append(f"stage {j}: F{i} twice")
                seen_f.add(i)
            else:
                if i in seen_b:
                    bad.append(f"stage {j}: B{i} twice")
                if i not in seen_f:
                    bad.append(f"stage {j}: B{i} before F{i}")
                seen_b.add(i)
        if seen_f != set(range(m)) or seen_b != set(range(m)):
            bad.append(f"stage {j}: not every F(i) and B(i) once")
    return bad


def ref3_inflight(ops):
    """Per stage, the largest number of micro-batches with F done and B not."""
    res = []
    for lst in ops:
        cur = best = 0
        for kind, _ in lst:
            cur += 1 if kind == "F" else -1
            best = max(best, cur)
        res.append(best)
    return res


def ref3_flushes(ops):
    """Flushes of SPEC 7 from the op lists: a list of dicts with ``lo``/``hi``
    (per-stage positions), ``mbs`` (frozenset), ``m`` (m_s), ``w`` (w_{j,s})
    and ``gpipe_shaped``."""
    S = len(ops)
    per_stage = []  # per stage: {completed set: position}
    for lst in ops:
        done = {}
        inflight = set()
        completed = set()
        for p, (kind, i) in enumerate(lst, start=1):
            if kind == "F":
                inflight.add(i)
            else:
                inflight.discard(i)
                completed.add(i)
            if not inflight:
                done[frozenset(completed)] = p
        per_stage.append(done)
    common = set(per_stage[0])
    for d in per_stage[1:]:
        common &= set(d)
    cuts = sorted(common, key=len)
    flushes = []
    prev_pos = [0] * S
    prev_set = frozenset()
    for X in cuts:
        hi = [per_stage[j][X] for j in range(S)]
        w, shaped = [], True
        for j in range(S):
            cur = best = 0
            seen_b = False
            for kind, _ in ops[j][prev_pos[j]:hi[j]]:
                if kind == "F":
                    cur += 1
                    if seen_b:
                        shaped = False
                else:
                    cur -= 1
                    seen_b = True
                best = max(best, cur)
            w.append(best)
        flushes.append({"lo": prev_pos, "hi": hi, "mbs": X - prev_set, "m": len(X - prev_set),
                        "w": w, "gpipe_shaped": shaped})
        prev_pos, prev_set = hi, X
    return flushes


# ---------------------------------------------------------------- routing
def ref3_routes(instance):
    """{(src, dst): (names tuple, link-index tuple)} on the base network (SPEC 2)."""
    names = [d.name for d in instance.domains]
    adj = {n: [] for n in names}
    direct = {}
    for idx, lk in enumerate(instance.links):
        adj[lk.a].append((lk.b, idx))
        adj[lk.b].append((lk.a, idx))
        direct.setdefault((lk.a, lk.b), idx)
        direct.setdefault((lk.b, lk.a), idx)
    routes = {}
    for src in names:
        best = {}

        def dfs(node, path, links, lat):
            if node != src:
                key = (lat, len(links), list(path))
                if node not in best or key < best[node][0]:
                    best[node] = (key, path, links)
            for nxt, idx in adj[node]:
                if nxt not in path:
                    dfs(nxt, path + (nxt,), links + (idx,),
                        round(lat + instance.links[idx].latency_ms, 9))

        dfs(src, (src,), (), 0.0)
        for dst, (_, path, links) in best.items():
            routes[(src, dst)] = (path, links)
        for dst in names:
            if (src, dst) in direct:
                routes[(src, dst)] = ((src, dst), (direct[(src, dst)],))
    return routes


def path_resources(instance, nodes, links):
    """The resources a transfer along ``nodes`` (via ``links``) uses."""
    res = [("link", idx, nodes[i], nodes[i + 1]) for i, idx in enumerate(links)]
    if uplink_bytes(instance, nodes[0]) is not None:
        res.append(("out", nodes[0]))
    if uplink_bytes(instance, nodes[-1]) is not None:
        res.append(("in", nodes[-1]))
    return res


def capacity(instance, q, bw_gbps):
    """Capacity of resource ``q`` in bytes/s under the state."""
    if q[0] == "link":
        return bw_gbps[q[1]] * GBPS
    return uplink_bytes(instance, q[1])


def path_latency(links, lat_ms):
    return sum(lat_ms[i] * MS for i in links)


def _time(nbytes, bw):
    return INF if bw == 0 else nbytes / bw


# ---------------------------------------------------------------- figures
def ref3_stage_figures(instance, plan):
    """Per-stage figures of SPEC 5.  Per (replica, stage) lists ``f``, ``g``,
    ``c``, ``y``, ``o`` (seconds) and ``mem_limit`` (bytes); per stage ``A``,
    ``P``, ``G``, ``F``, ``n_units``, ``stored``, ``inflight``,
    ``memory_bytes``."""
    units = list(instance.units)
    wl = instance.workload
    b, s, t = plan.micro_batch_size, wl.seq_len, plan.tp
    m = plan.num_micro_batches
    beta = 3.0 if getattr(wl, "recompute", False) else 2.0
    reserve = getattr(instance.options, "memory_reserve_fraction", 0.10)
    ops = ref3_op_lists(plan)
    inflight = ref3_inflight(ops)
    # SPEC 11: outer state phi_o * beta_o * P_j / t (0 for every_step)
    phi_o = outer_state_factor(ref3_sync(plan))
    beta_o = _compression(instance)[1]
    fig = {"A": [], "P": [], "G": [], "F": [], "n_units": [], "stored": [], "TP": [],
           "inflight": inflight, "memory_bytes": [], "m": m}
    for j, st in enumerate(plan.stages):
        us = units[st.start:st.end]
        fig["F"].append(sum(u.fwd_flops_per_token for u in us))
        fig["n_units"].append(sum(1 for u in us if u.fwd_flops_per_token > 0))
        fig["P"].append(sum(u.params for u in us))
        fig["G"].append(2.0 * fig["P"][-1])
        fig["stored"].append(sum(u.stored_bytes_per_token for u in us))
        fig["TP"].append(sum(getattr(u, "tp_bytes_per_token", 0.0) or 0.0 for u in us))
        fig["A"].append(us[-1].out_bytes_per_token * b * s)
        fig["memory_bytes"].append(
            (16 * fig["P"][-1] + inflight[j] * b * s * fig["stored"][-1]) / t
            + phi_o * beta_o * fig["P"][-1] / t)
    for key in ("f", "g", "c", "y", "o", "mem_limit", "type"):
        fig[key] = []
    for row in plan.placement:
        rows = {key: [] for key in ("f", "g", "c", "y", "o", "mem_limit", "type")}
        for j, dname in enumerate(row):
            typ = domain_type(instance, dname)
            speed = t * typ.peak_tflops * 1e12 * typ.mfu
            o = (getattr(typ, "unit_overhead_ms", None) or 0.0) * MS
            nv = getattr(typ, "nvlink_bandwidth_gbps", None)
            if t > 1 and nv is not None:
                y = 2 * (t - 1) / t * b * s * fig["TP"][j] / (nv * GBPS)
            else:
                y = 0.0
            comp = fig["F"][j] * b * s / speed
            f = comp + y + fig["n_units"][j] * o
            g = beta * comp + y + beta * fig["n_units"][j] * o
            rows["f"].append(f)
            rows["g"].append(g)
            rows["c"].append(f + g)
            rows["y"].append(y)
            rows["o"].append(o)
            rows["mem_limit"].append(typ.memory_gb * 1e9 * (1 - reserve))
            rows["type"].append(typ.name)
        for key, val in rows.items():
            fig[key].append(val)
    return fig


# ---------------------------------------------------------------- communication
def every_flush_gpipe_shaped(plan):
    return all(fl["gpipe_shaped"] for fl in ref3_flushes(ref3_op_lists(plan)))


def _ring_shares(instance, rings, bw_gbps, lat_ms):
    """Processor sharing among the hops of ``rings`` alone (SPEC 5's cross part).

    ``rings``: (key, domains in instance order, volume V per hop).  Every
    (ring, hop) is a user of each resource its hop uses, with its ring's V;
    returns ({key: (ring bandwidth B/s, ring latency s)}, users, hops) with
    users = {resource: [volumes]} and hops = [(key, resources, links, V)]."""
    routes = ref3_routes(instance)
    hops = []
    for key, ds, V in rings:
        K = len(ds)
        for i in range(K):
            nodes, links = routes[(ds[i], ds[(i + 1) % K])]
            hops.append((key, path_resources(instance, nodes, links), links, V))
    users = {}
    for _, res, _, V in hops:
        for q in res:
            users.setdefault(q, []).append(V)
    out = {}
    for key, res, links, V in hops:
        hop_bw = min(capacity(instance, q, bw_gbps) * V / sum(min(u, V) for u in users[q])
                     for q in res)
        ring_bw, ring_lat = out.get(key, (INF, 0.0))
        out[key] = (min(ring_bw, hop_bw), max(ring_lat, path_latency(links, lat_ms)))
    return out, users, hops


def ref3_comm(instance, plan, bw_gbps=None, lat_ms=None):
    """x[r][k], l[r][k] per (replica, boundary), AR[j] per stage, and the counts:
    ``nF``, ``nB``, ``nO``, ``n`` per resource, ``sync_users``, ``outer_users``.

    With ``dp_sync`` (SPEC 11): every_step with bits -> AR_j = intra + cross + X_j
    over G^o_j; diloco / streaming -> AR[j] is AR^in_j (per group, the largest),
    and ``O``, ``Obw``, ``Olat``, ``X``, ``charged`` (O_j charged) per stage;
    under streaming the outer hops count in n(q) (``nO``)."""
    bw_gbps, lat_ms = _state(instance, bw_gbps, lat_ms)
    fig = ref3_stage_figures(instance, plan)
    routes = ref3_routes(instance)
    dom = _domains(instance)
    order = _order(instance)
    R, S, t = len(plan.placement), len(plan.stages), plan.tp
    shaped = every_flush_gpipe_shaped(plan)
    kind = gradient_sync_kind(instance)
    sync = ref3_sync(plan)
    outer = is_outer(sync)
    q_bits = sync["bits"]
    codec, _ = _compression(instance)
    groups = ref3_groups(plan)
    M = len(groups)
    ring_domains = [sorted({plan.placement[r][j] for r in range(R)}, key=order.__getitem__)
                    for j in range(S)]
    K = [len(ds) for ds in ring_domains]
    Go = [P * q_bits / 8 for P in fig["P"]]  # G^o_j = P_j q / 8 (= G_j at 16 bits)

    # outer sync (SPEC 11): charged when M > 1, K_j > 1 and P_j > 0 (a stage without
    # parameters has no sync, as in section 5); its rings share among themselves only
    charged = [outer and M > 1 and K[j] > 1 and fig["P"][j] > 0 for j in range(S)]
    outer_rings = [(j, ring_domains[j], phi(K[j], kind) * Go[j]) for j in range(S) if charged[j]]
    outer_share, outer_users, outer_hops = _ring_shares(instance, outer_rings, bw_gbps, lat_ms)
    Obw, Olat, O = [0.0] * S, [0.0] * S, [0.0] * S
    for j in range(S):
        if charged[j]:
            ring_bw, ring_lat = outer_share[j]
            Obw[j] = _time(phi(K[j], kind) * Go[j], ring_bw)
            Olat[j] = 2 * (K[j] - 1) * ring_lat
            O[j] = Obw[j] + Olat[j]
    # codec time X_j: q < 16, codec_gbps given, P_j > 0 and a compressed sync
    # (every_step: R > 1; diloco / streaming: O_j charged)
    X = [0.0] * S
    for j in range(S):
        compressed = charged[j] if outer else R > 1
        if q_bits < 16 and codec is not None and fig["P"][j] > 0 and compressed:
            X[j] = (2 * fig["P"][j] / t) / (codec * GBPS)

    # boundary channels; streaming adds one channel per (stage, hop) of the outer rings
    chans = []  # (r, k, forward resources, backward resources, forward links)
    nF, nB, nO = {}, {}, {}
    if sync["mode"] == "streaming":
        for _, res, _, _ in outer_hops:
            for q in res:
                nO[q] = nO.get(q, 0) + 1
    for r, row in enumerate(plan.placement):
        for k in range(S - 1):
            if row[k] == row[k + 1]:
                continue
            nodes, links = routes[(row[k], row[k + 1])]
            fwd = path_resources(instance, nodes, links)
            bwd = path_resources(instance, tuple(reversed(nodes)), tuple(reversed(links)))
            for q in fwd:
                nF[q] = nF.get(q, 0) + 1
            for q in bwd:
                nB[q] = nB.get(q, 0) + 1
            chans.append((r, k, fwd, bwd, links))
    n = {}
    for q in set(nF) | set(nB):
        a, bb = nF.get(q, 0), nB.get(q, 0)
        n[q] = (max(a, bb) if shaped else a + bb) + nO.get(q, 0)
    x = [[None] * (S - 1) for _ in range(R)]
    l = [[None] * (S - 1) for _ in range(R)]
    for r, row in enumerate(plan.placement):
        for k in range(S - 1):
            if row[k] == row[k + 1]:
                x[r][k] = fig["A"][k] / (dom[row[k]].intra_bandwidth_gbps * GBPS)
                l[r][k] = 0.0
    for r, k, fwd, bwd, links in chans:
        bw = min(capacity(instance, q, bw_gbps) / n[q] for q in fwd + bwd)
        x[r][k] = _time(fig["A"][k], bw)
        l[r][k] = path_latency(links, lat_ms)

    # per-step gradient sync (every_step, over G^o_j) or inner sync (per group, G_j)
    if outer:
        sets = list(groups.items())
        vol = fig["G"]
    else:
        sets = [(None, list(range(R)))]
        vol = Go
    set_domains = {}  # (group, j) -> domains of the group's replicas of stage j
    rings = []
    for g, members in sets:
        for j in range(S):
            ds = sorted({plan.placement[r][j] for r in members}, key=order.__getitem__)
            set_domains[(g, j)] = ds
            if len(members) > 1 and len(ds) > 1 and vol[j] > 0:
                rings.append(((g, j), ds, phi(len(ds), kind) * vol[j]))
    share, users, _ = _ring_shares(instance, rings, bw_gbps, lat_ms)
    AR, intra_part, cross_part = [0.0] * S, [0.0] * S, [0.0] * S
    for j in range(S):
        if vol[j] == 0:
            continue
        best = None
        for g, members in sets:
            if len(members) < 2:
                continue
            ds = set_domains[(g, j)]
            intra = 0.0
            for d in ds:
                cnt = sum(1 for r in members if plan.placement[r][j] == d)
                if cnt > 1:
                    intra = max(intra, phi(cnt, kind) * (vol[j] / t)
                                / (dom[d].intra_bandwidth_gbps * GBPS))
            cross = 0.0
            if len(ds) > 1:
                ring_bw, ring_lat = share[(g, j)]
                cross = _time(phi(len(ds), kind) * vol[j], ring_bw) + 2 * (len(ds) - 1) * ring_lat
            if best is None or intra + cross > best[0] + best[1]:
                best = (intra, cross)
        if best is not None:
            intra_part[j], cross_part[j] = best
            AR[j] = best[0] + best[1] + (0.0 if outer else X[j])
    return {"x": x, "l": l, "AR": AR, "intra": intra_part, "cross": cross_part, "fig": fig,
            "nF": nF, "nB": nB, "nO": nO, "n": n, "gpipe_shaped": shaped, "sync_users": users,
            "ring_domains": ring_domains, "sync": sync, "M": M, "K": K, "Go": Go,
            "charged": charged, "O": O, "Obw": Obw, "Olat": Olat, "X": X,
            "outer_users": outer_users, "set_domains": set_domains}


# ---------------------------------------------------------------- simulation
def _simulate_replica(ops, f, g, x, l, first_start=None):
    """End time of each stage's last op for one replica (SPEC 6); when
    ``first_start`` is a list, it receives the start of each stage's first op."""
    S = len(ops)
    ptr = [0] * S
    prev_end = [0.0] * S
    fend = [dict() for _ in range(S)]
    f_arrive = [dict() for _ in range(S)]  # F(i) input at stage j
    b_arrive = [dict() for _ in range(S)]  # B(i) input at stage j
    f_chan = [0.0] * S  # last send end on forward channel j -> j+1
    b_chan = [0.0] * S  # last send end on backward channel j -> j-1
    E = [0.0] * S
    remaining = sum(len(o) for o in ops)
    while remaining:
        progress = False
        for j in range(S):
            while ptr[j] < len(ops[j]):
                kind, i = ops[j][ptr[j]]
                if kind == "F":
                    if j == 0:
                        ready = 0.0
                    elif i in f_arrive[j]:
                        ready = f_arrive[j][i]
                    else:
                        break
                    start = max(ready, prev_end[j])
                    end = start + f[j]
                    fend[j][i] = end
                    if j < S - 1:
                        send_end = max(end, f_chan[j]) + x[j]
                        f_chan[j] = send_end
                        f_arrive[j + 1][i] = send_end + l[j]
                else:
                    if i not in fend[j]:
                        raise AssertionError("B before F in an op list")
                    if j == S - 1:
                        ready = fend[j][i]
                    elif i in b_arrive[j]:
                        ready = max(b_arrive[j][i], fend[j][i])
                    else:
                        break
                    start = max(ready, prev_end[j])
                    end = start + g[j]
                    if j > 0:
                        send_end = max(end, b_chan[j]) + x[j - 1]
                        b_chan[j] = send_end
                        b_arrive[j - 1][i] = send_end + l[j - 1]
                if ptr[j] == 0 and first_start is not None:
                    first_start[j] = start
                prev_end[j] = end
                E[j] = max(E[j], end)
                ptr[j] += 1
                remaining -= 1
                progress = True
        if not progress:
            raise RefDeadlock(f"no stage can proceed; positions {ptr}")
    return E


def ref3_stage_ends(instance, plan, bw_gbps=None, lat_ms=None):
    """(E_j per stage, comm) for one network state; ``comm["a"]`` holds a_j,
    the start of stage j's first op, the earliest over replicas (SPEC 11)."""
    comm = ref3_comm(instance, plan, bw_gbps, lat_ms)
    fig = comm["fig"]
    ops = ref3_op_lists(plan)
    S = len(plan.stages)
    E, a = [0.0] * S, [INF] * S
    for r in range(len(plan.placement)):
        starts = [INF] * S
        Er = _simulate_replica(ops, fig["f"][r], fig["g"][r], comm["x"][r], comm["l"][r], starts)
        E = [max(u, v) for u, v in zip(E, Er)]
        a = [min(u, v) for u, v in zip(a, starts)]
    comm["a"] = a
    return E, comm


def ref3_simulate(instance, plan, bw_gbps=None, lat_ms=None):
    """Iteration time T = max_j (E_j + AR_j) for one network state (SPEC 6);
    with diloco / streaming, the inner iteration T_in (SPEC 11)."""
    E, comm = ref3_stage_ends(instance, plan, bw_gbps, lat_ms)
    return max(E[j] + comm["AR"][j] for j in range(len(E)))


# ---------------------------------------------------------------- estimate
def ref3_estimate(instance, plan, bw_gbps=None, lat_ms=None):
    """T_est of SPEC 7 for one network state."""
    E_est, comm = ref3_estimate_ends(instance, plan, bw_gbps, lat_ms)
    return max(E_est[j] + comm["AR"][j] for j in range(len(E_est)))


def ref3_estimate_ends(instance, plan, bw_gbps=None, lat_ms=None):
    """(E^est_j per stage, comm) of SPEC 7 for one network state (all inf when a
    replica's Q_0 is)."""
    comm = ref3_comm(instance, plan, bw_gbps, lat_ms)
    fig = comm["fig"]
    S = len(plan.stages)
    flushes = ref3_flushes(ref3_op_lists(plan))
    E_est = [-INF] * S
    a_est = [INF] * S  # SPEC 11: a^est_j = min_r sum_{i<j} (f_{i,r} + x_{i,r} + l_{i,r})
    for r in range(len(plan.placement)):
        f, g, c = fig["f"][r], fig["g"][r], fig["c"][r]
        x, l = comm["x"][r], comm["l"][r]
        Q0 = sum(c) + sum(2 * (x[k] + l[k]) for k in range(S - 1))
        if math.isinf(Q0):
            comm["a_est"] = [INF] * S
            return [INF] * S, comm
        xmax = max(x, default=0.0)

        def period(fl, j):
            ms, w = fl["m"], fl["w"]
            if fl["gpipe_shaped"]:
                fwd = max(max(f), xmax)
                bwd = max(max(g[i] for i in range(j, S)),
                          max((x[k] for k in range(j, S - 1)), default=0.0))
                return fwd + bwd
            tau = max(max(c), xmax)
            for a in range(S):
                if w[a] >= ms:
                    continue
                for bb in range(a, S):
                    held = w[a] - w[bb] + 1
                    if held <= 0:
                        continue
                    W = (sum(c[i] for i in range(a, bb + 1))
                         + 2 * sum(x[k] + l[k] for k in range(a, bb)))
                    tau = max(tau, W / held)
            return tau

        def P(fl, j):
            return (fl["m"] - 1) * period(fl, j) + Q0 if fl["m"] > 1 else Q0

        before = sum(P(fl, 0) for fl in flushes[:-1])
        for j in range(S):
            D = sum(g[i] + x[i] + l[i] for i in range(j))
            E_est[j] = max(E_est[j], before + P(flushes[-1], j) - D)
            a_est[j] = min(a_est[j], sum(f[i] + x[i] + l[i] for i in range(j)))
    comm["a_est"] = a_est
    return E_est, comm


# ---------------------------------------------------------------- cost
def ref3_wan_bytes(instance, plan):
    """Bytes crossing domains per iteration (SPEC 6's cost)."""
    fig = ref3_stage_figures(instance, plan)
    R, S, m = len(plan.placement), len(plan.stages), plan.num_micro_batches
    total = 0.0
    for row in plan.placement:
        for k in range(S - 1):
            if row[k] != row[k + 1]:
                total += 2 * m * fig["A"][k]
    sync = ref3_sync(plan)
    if R > 1 and is_plain(sync):
        for j in range(S):
            K = len({plan.placement[r][j] for r in range(R)})
            if K > 1:
                total += K * (2 * (K - 1) / K) * fig["G"][j]
    elif R > 1 and sync["mode"] == "every_step":
        # SPEC 11: 2(K - 1) G^o_j per stage with a cross part
        for j in range(S):
            K = len({plan.placement[r][j] for r in range(R)})
            if K > 1:
                total += 2 * (K - 1) * fig["P"][j] * sync["bits"] / 8
    elif R > 1:
        # inner: 2(K_{g,j} - 1) G_j per (group, stage) with a cross part;
        # outer: 2(K_j - 1) G^o_j / H per stage with O_j charged
        groups = ref3_groups(plan)
        for members in groups.values():
            for j in range(S):
                Kg = len({plan.placement[r][j] for r in members})
                if Kg > 1:
                    total += 2 * (Kg - 1) * fig["G"][j]
        for j in range(S):
            K = len({plan.placement[r][j] for r in range(R)})
            if len(groups) > 1 and K > 1 and fig["P"][j] > 0:
                total += 2 * (K - 1) * (fig["P"][j] * sync["bits"] / 8) / sync["H"]
    return total


def ref3_cost(instance, plan, T):
    """Cost per iteration for iteration time T."""
    if math.isinf(T):
        return INF
    dom = _domains(instance)
    price = sum(plan.tp * (getattr(dom[d], "price_per_gpu_hour", 0.0) or 0.0)
                for row in plan.placement for d in row)
    wan = getattr(instance.options, "wan_price_per_gb", 0.0) or 0.0
    return T / 3600 * price + ref3_wan_bytes(instance, plan) / 1e9 * wan


# ---------------------------------------------------------------- effective time (SPEC 11)
def _effective(comm, E, a, T_in):
    """T_eff from the inner iteration ``T_in``, stage ends ``E``, first starts
    ``a`` and the sync figures of ``comm`` (simulated or estimated alike)."""
    sync = comm["sync"]
    if not is_outer(sync):
        return T_in  # every_step: T_eff = T
    if math.isinf(T_in) or math.isnan(T_in):
        return INF
    S = len(E)
    AR, X, O, charged = comm["AR"], comm["X"], comm["O"], comm["charged"]
    J = [j for j in range(S) if charged[j]]
    if not J:
        return T_in  # M = 1, or every stage in one domain: no outer sync
    H = sync["H"]
    if sync["mode"] == "diloco":
        T_sync = max(E[j] + AR[j] + X[j] + O[j] for j in range(S))
        if math.isinf(T_sync):
            return INF
        return T_in + (T_sync - T_in) / H
    F, nu = sync["fragments"], sync["overlap"]
    o = {j: comm["Obw"][j] / F + comm["Olat"][j] for j in J}
    if any(math.isinf(v) for v in o.values()):
        return INF
    stall = 0.0
    for j in J:
        W = nu * T_in + (T_in - E[j] - AR[j]) + a[j]
        stall = max(stall, max(0.0, o[j] + X[j] / F - W))
    floor = max((F * o[j] + X[j]) / H for j in J)
    return max(T_in + (F / H) * stall, floor)


def ref3_effective_estimate(instance, plan, bw_gbps=None, lat_ms=None):
    """(T^est_in, T^est_eff) of SPEC 11 for one network state."""
    E_est, comm = ref3_estimate_ends(instance, plan, bw_gbps, lat_ms)
    Test_in = max(E_est[j] + comm["AR"][j] for j in range(len(E_est)))
    return Test_in, _effective(comm, E_est, comm["a_est"], Test_in)


def ref3_effective(instance, plan, bw_gbps=None, lat_ms=None):
    """Every figure SPEC 11 adds, for one network state: a dict with ``T_in``,
    ``T_eff``, ``Test_in``, ``Test_eff`` (seconds), ``e`` and ``source``
    (quality factor), ``memory`` (bytes per GPU per stage, outer state
    included), ``wan_bytes`` (per iteration), ``cost`` (per iteration, at
    T_eff), ``score`` (T_eff / e, or cost / e for a ``cost`` instance) and
    ``comm``.  Raises :class:`RefDeadlock` when the simulation cannot finish
    and :class:`RefNoQuality` when no quality row covers the option.

    Example: a plain plan gives T_in == T_eff == ref3_simulate(...), e = 1.
    """
    e, source = ref3_quality(instance, plan)
    E_est, comm_est = ref3_estimate_ends(instance, plan, bw_gbps, lat_ms)
    Test_in = max(E_est[j] + comm_est["AR"][j] for j in range(len(E_est)))
    Test_eff = _effective(comm_est, E_est, comm_est["a_est"], Test_in)
    E, comm = ref3_stage_ends(instance, plan, bw_gbps, lat_ms)
    T_in = max(E[j] + comm["AR"][j] for j in range(len(E)))
    T_eff = _effective(comm, E, comm["a"], T_in)
    cost = ref3_cost(instance, plan, T_eff)
    objective = getattr(instance.options, "objective", "time") or "time"
    return {"T_in": T_in, "T_eff": T_eff, "Test_in": Test_in, "Test_eff": Test_eff,
            "e": e, "source": source, "memory": list(comm["fig"]["memory_bytes"]),
            "wan_bytes": ref3_wan_bytes(instance, plan), "cost": cost,
            "score": (cost if objective == "cost" else T_eff) / e, "E": E, "E_est": E_est,
            "a": comm["a"], "a_est": comm_est["a_est"], "comm": comm}


# ---------------------------------------------------------------- feasibility
def ref3_violations(instance, plan):
    """Reasons the plan is infeasible under SPEC 4 (empty: feasible)."""
    bad = []
    wl = instance.workload
    dom = _domains(instance)
    R, S, t, b = len(plan.placement), len(plan.stages), plan.tp, plan.micro_batch_size
    m = plan.num_micro_batches
    if m < 1 or m * R * b != wl.global_batch_size:
        bad.append(f"m = {m} with R = {R}, b = {b}: not global_batch_size / (R b)")
    if t not in list(wl.tensor_parallel):
        bad.append(f"tp {t} is not a candidate")
    pos = 0
    for j, st in enumerate(plan.stages):
        if st.start != pos or st.end <= st.start:
            bad.append(f"stage {j} is not contiguous and non-empty")
        pos = st.end
    if pos != len(instance.units):
        bad.append("stages do not cover every unit")
    for r, row in enumerate(plan.placement):
        if len(row) != S:
            bad.append(f"replica {r} places {len(row)} stages")
        for d in row:
            if d not in dom:
                bad.append(f"unknown domain {d}")
    if bad:
        return bad
    used = {}
    for row in plan.placement:
        for d in row:
            used[d] = used.get(d, 0) + t
    for d, cnt in used.items():
        if cnt > dom[d].gpus:
            bad.append(f"domain {d}: {cnt} GPUs used, {dom[d].gpus} available")
        if t > getattr(dom[d], "gpus_per_node", 8):
            bad.append(f"domain {d}: tp {t} exceeds gpus_per_node")
    routes = ref3_routes(instance)
    for r, row in enumerate(plan.placement):
        for k in range(S - 1):
            if row[k] != row[k + 1] and (row[k], row[k + 1]) not in routes:
                bad.append(f"replica {r}: no route {row[k]} -> {row[k + 1]}")
    ops = ref3_op_lists(plan)
    problems = op_list_problems(ops, S, m)
    bad += problems
    if not problems:
        fig = ref3_stage_figures(instance, plan)
        for r in range(R):
            for j in range(S):
                if fig["memory_bytes"][j] > fig["mem_limit"][r][j]:
                    bad.append(f"replica {r} stage {j}: memory {fig['memory_bytes'][j]:.4g} B "
                               f"over {fig['mem_limit'][r][j]:.4g} B")
    allowed = getattr(instance.options, "dp_sync", None) or ["every_step"]
    ds = getattr(plan, "dp_sync", None)
    if ds is not None:
        mode = ds.get("mode") if isinstance(ds, dict) else getattr(ds, "mode", None)
        if mode not in allowed:
            bad.append(f"dp_sync mode {mode} not allowed")
    return bad
