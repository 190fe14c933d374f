"""The RL planner's environment: choose one of greedy's best shapes, then place
its stages one (replica, stage) at a time, seeing instance-agnostic features.

An episode has ``1 + R * S`` steps.  Step 0 chooses a *shape* (tensor
parallelism, micro-batch size, schedule, stages, replicas and the layer
split) among the ``k`` best distinct shapes of greedy's candidate ranking
(:func:`shape_menu`) and an *order* of placement (``ORDERS``: replica by
replica, or stage by stage across the replicas).  Each later step places
the next (replica, stage) in that order on a domain with a free slot of
``tp`` GPUs.  Only the shape comes from greedy; every placement is the
agent's.

Actions index *slots*: at step 0 slot ``2 i + o`` is shape i of the menu
with order o; afterwards slot i is the i-th candidate domain, candidates
sorted by the partial plan's ``T_est`` if the stage went there (then by
free slots).  Slots beyond the menu or the candidates are masked
(:meth:`PlacementEnv.action_masks`), so every episode ends in a plan that
fits the GPUs; a masked action (an agent that ignores the mask) ends the
episode at once with the worst return.  The observation is
instance-agnostic: ``GLOBAL`` figures of the position, then ``SLOT``
features for each of ``N_SLOTS`` slots (ratios, flags, logs: no domain
names or counts that change with the instance), so one policy can serve
every instance.  Placement features of a candidate domain d: the partial
plan's ``T_est`` (s) with d, relative to the best candidate's and to the
compute-only ``T_est`` (SPEC 7 over the replicas placed so far, links
shared by every flow placed, the unplaced stages assumed to stay in their
replica's last domain; :class:`PartialEstimate`, vectorised over the
candidates), the transfer time, bandwidth and latency from the previous
stage's domain (the route's own figures), d's free slots, whether earlier
replicas put this stage in d, d's size and price.  At step 0 the slots hold
the shapes' figures (rank, ``T_est`` relative to the best, tp, replicas,
stages, GPUs, schedule, micro-batch, order).

GPU types (SPEC v3 (g); ``typed=True``, the default on an instance with
several types; policy format 3): slots have ``SLOT_TYPED`` features, the 16
above plus the log of the candidate's type speed (peak * mfu) over the
fastest type used and stage j's memory headroom there (1 - M_j / usable
memory); the partial ``T_est`` runs each (replica, stage) at its domain's
type (:class:`PartialEstimate` with ``typed``); candidates that cannot hold
stage j, or whose taking leaves the unplaced stages no room on types large
enough (:meth:`PlacementEnv._fits`), are masked.  With one type the
observation, the masks and the plans are the untyped ones (``typed=False``,
format 2) bit for bit.

Reward: ``log(T_ref / T)`` clipped to [-2, 1] at the last step, ``T``
the plan's exact simulated objective (seconds, or cost per iteration for
``objective = "cost"``) under the episode's network state and ``T_ref``
greedy's plan's under the same state; plus potential-based shaping
``Phi(s') - Phi(s)`` with ``Phi = -(T_est(partial) - T_est(compute only)) / T_ref``
and ``Phi = 0`` at the start and the end, so that every episode's return is
exactly the final term.  Episodes draw the base network with probability
``base_prob``, otherwise a state of a generated week of WAN drift.

Example
-------
>>> env = PlacementEnv(instance, seed=0)                       # doctest: +SKIP
>>> obs, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step(0)     # the first shape of the menu
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..problem.network import GBPS, MS, NetworkStates
from ..problem.plan import Plan
from ..problem.specversion import without_v3_fields
from ..problem.oplists import Flush
from ..scoring.estimate import estimate_times, stage_end_estimates
from ..scoring.evaluator import Evaluator
from ..scoring.figures import PlanFigures

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError:  # the optional extra is missing: fail when used, not on import
    gym = None

N_SLOTS = 16  # action slots: (shape, order) pairs at step 0, candidate domains afterwards
SHAPES = 6  # shapes offered at step 0 (greedy's best distinct shapes), at most N_SLOTS // 2
ORDERS = ("replica-major", "stage-major")  # the two orders of placement offered with every shape
GLOBAL = 13  # global features
SLOT = 16  # features per slot (policy format 2: one GPU type)
TYPED = 2  # more features per slot of the typed layout (policy format 3, several GPU types)
SLOT_TYPED = SLOT + TYPED
OBS_MAX = 10.0  # every feature lies in [-OBS_MAX, OBS_MAX]
REWARD_MIN = -2.0  # the final reward log(T_ref / T) is clipped to [REWARD_MIN, 1]


def _require():
    if gym is None:
        raise ImportError("the RL planner needs the optional extra: pip install 'planner[rl]'")


def _clip(v):
    return float(min(OBS_MAX, max(-OBS_MAX, v)))


def _log_ratio(a, b):
    """log(a / b), clipped; +OBS_MAX when a is infinite."""
    if not np.isfinite(a):
        return OBS_MAX
    if b <= 0 or not np.isfinite(b):
        return 0.0
    return _clip(math.log(max(a, 1e-300) / b))


def _log_ratios(a, b) -> np.ndarray:
    """:func:`_log_ratio` elementwise over ``a`` (``b`` a scalar)."""
    a = np.asarray(a, float)
    if b <= 0 or not np.isfinite(b):
        return np.where(np.isfinite(a), 0.0, OBS_MAX)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.clip(np.log(np.maximum(a, 1e-300) / b), -OBS_MAX, OBS_MAX)
    return np.where(np.isfinite(a), v, OBS_MAX)


def one_type(instance, u: int):
    """``instance`` with every domain on GPU type ``u`` (an index into
    ``instance.gpu_types``) and every v3-only field at its v2 default
    (:func:`~planner.problem.specversion.without_v3_fields`): the v2 figures of a
    plan as if it ran on type ``u`` everywhere.  For the typed observation's
    per-type compute and its network (type-independent) figures."""
    if not instance.heterogeneous:
        return without_v3_fields(instance)
    data = instance.to_dict()
    data["workload"]["model"] = instance.workload.model
    name = instance.gpu_types[u].name
    for d in data["domains"]:
        d["gpu"] = name
    return without_v3_fields(type(instance).from_dict(data))


def shape_key(plan: Plan) -> tuple:
    return (plan.tp, plan.micro_batch_size, str(plan.schedule), plan.num_stages, plan.replicas,
            tuple(plan.bounds()))


@dataclass
class MenuShape:
    """One shape of the menu: greedy's best-``T_est`` plan of that shape serves only as a
    template (its placement is never used) and for the shape's ``T_est`` (s)."""

    template: Plan
    estimate: float  # greedy's T_est (or its cost) of the shape, for the features
    exact: float  # the exact simulated objective of that greedy placement, for the ranking


def shape_menu(instance, k: int = SHAPES, time_limit: float | None = None) -> list[MenuShape]:
    """Greedy's best ``k`` distinct shapes: the first ``2k`` distinct shapes of greedy's
    candidates (best ``T_est`` first), ranked by the exact simulation of their best
    candidate (as greedy re-ranks), best first."""
    from .greedy import DEFAULT_TIME_LIMIT, _Budget, _candidates

    limit = DEFAULT_TIME_LIMIT if time_limit is None else float(time_limit)
    seen, menu = set(), []
    budget = _Budget(time.perf_counter() + limit, limit)
    for score, _, _, plan in _candidates(instance, budget, kind=shape_key):
        key = shape_key(plan)
        if key in seen:
            continue
        if menu and budget.why():  # the time limit (or a stop) binds: the shapes scored so far
            break
        seen.add(key)
        ev = Evaluator(instance, plan)
        menu.append(MenuShape(plan, float(score), float(ev.objective(ev.iteration_times())[0])))
        if len(menu) == 2 * k:
            break
    menu.sort(key=lambda s: (s.exact, s.estimate))
    return menu[:k]


class PartialEstimate:
    """T_est (s) of a partial placement of one shape, vectorised over candidate domains.

    The replicas placed so far count, the current one with its remaining stages
    inside the candidate domain and the others' unplaced stages inside the domain of
    their last placed stage; links are shared by every flow placed so far
    (pipeline boundaries and gradient rings), as in :class:`PlanFigures`.  It
    follows SPEC v2's sharing and routes (each link shared equally by both
    directions, relayed routes): an observation feature of the policy, which
    was trained on it, not a score; every plan the policy makes is scored
    exactly under the version in force (uplinks, ``reduce_broadcast`` and unit
    overheads are left out of it: :func:`~planner.problem.specversion.without_v3_fields`).
    With the placement complete it equals ``Evaluator(without_v3_fields(instance),
    plan, spec=2).estimate_times`` (tested).  After a call, ``wan_bytes`` holds each candidate's bytes over the WAN
    per iteration (SPEC 6) for the same partial placement.

    ``typed`` (several GPU types, SPEC v3 (g); policy format 3): each (replica,
    stage) computes at its domain's type's v2 figures (peak * mfu, NVLink for
    the tensor-parallel all-reduces; per type ``tf``, ``tg`` (types, S)), so a
    stage's c depends on the candidate it lands on; the unplaced stages run
    where they are assumed to stay, and T_est is the largest over the replicas'
    own estimates, as the evaluator takes it per class of replicas.
    ``compute_only`` is then the fastest type's (every stage on it, no
    communication), ``c`` that type's per-stage compute.  With one type,
    ``typed=True`` gives the untyped figures bit for bit."""

    def __init__(self, instance, template: Plan, typed: bool = False):
        self.instance = instance
        self.typed = bool(typed) and instance.heterogeneous
        if self.typed:
            used = list(instance.types_used)
            figs = {u: PlanFigures(one_type(instance, u), template, spec=2) for u in used}
            T = len(instance.gpu_types)
            self.tf, self.tg = np.full((T, template.num_stages), np.nan), np.full((T, template.num_stages), np.nan)
            for u, fu in figs.items():
                self.tf[u], self.tg[u] = fu.f, fu.g
            self.dtype = np.asarray(instance.domain_type, dtype=np.int64)
            fig = figs[used[0]]
        else:
            fig = PlanFigures(without_v3_fields(instance), template, spec=2)
        self.f, self.g, self.c = fig.f, fig.g, fig.c
        self.A, self.G, self.w, self.m = fig.A, fig.G, fig.inflight, fig.m
        self.memory = fig.memory  # bytes per GPU of each stage (type-independent; limits are per type)
        self.tp, self.gpipe = template.tp, template.schedule == "gpipe"
        self.S, self.R = template.num_stages, template.replicas
        names = instance.domain_names
        self.D, self.L = len(names), len(instance.links)
        self.intra = np.array([d.intra_bandwidth_gbps * GBPS for d in instance.domains])
        P = max([len(r.links) for r in instance.routes.values()] + [1])
        self.route = np.full((self.D, self.D, P), self.L, dtype=np.int64)  # padded with the dummy link L
        for (u, v), r in instance.routes.items():
            self.route[instance.domain_index[u], instance.domain_index[v], :len(r.links)] = r.links
        z = np.zeros((1, self.R, max(self.S - 1, 0)))
        if self.typed:  # the fastest type's: every stage on it, no communication
            only = {u: float(estimate_times(self.tf[u], self.tg[u], z, z, np.zeros((1, self.S)), self.m, self.w,
                                            self.gpipe)[0]) for u in used}
            u = min(used, key=lambda v: (only[v], v))
            self.f, self.g, self.c = self.tf[u], self.tg[u], self.tf[u] + self.tg[u]
            self.compute_only = only[u]
        else:
            self.compute_only = float(estimate_times(self.f, self.g, z, z, np.zeros((1, self.S)), self.m, self.w,
                                                     self.gpipe)[0])

    def set_state(self, bw_gbps: np.ndarray, lat_ms: np.ndarray) -> None:
        self.bw = np.append(np.asarray(bw_gbps, float) * GBPS, np.inf)  # bytes/s; dummy link: infinite
        lat = np.append(np.asarray(lat_ms, float) * MS, 0.0)
        self.route_lat = lat[self.route].sum(axis=-1)  # (D, D) seconds
        self._rings: dict = {}

    def _ring(self, domains: tuple) -> tuple[np.ndarray, float]:
        """The ring over ``domains`` (sorted indices): its hops' padded routes (h, P) and
        their largest latency (s) under the current state; cached."""
        hit = self._rings.get(domains)
        if hit is None:
            hops = self.ring_hops(domains)
            if hops:
                a, b = (list(x) for x in zip(*hops))
                hit = (self.route[a, b], float(self.route_lat[a, b].max()))
            else:
                hit = (np.zeros((0, self.route.shape[-1]), dtype=np.int64), 0.0)
            self._rings[domains] = hit
        return hit

    @staticmethod
    def ring_hops(domains) -> list[tuple[int, int]]:
        """The gradient ring's hops over ``domains`` (indices, in instance order)."""
        ring = sorted(domains)
        return list(zip(ring, ring[1:] + ring[:1])) if len(ring) > 1 else []

    def __call__(self, placed: np.ndarray, r: int, j: int, cands: np.ndarray) -> np.ndarray:
        """T_est (s) per candidate for (replica r, stage j) of ``placed`` ((R, S) domain
        indices, -1 unplaced; stages 0..j-1 of replica r placed, and in every other
        replica the placed stages a prefix)."""
        cands = np.asarray(cands, dtype=np.int64)
        K, S, D, L = len(cands), self.S, self.D, self.L
        P = self.route.shape[-1]
        started = np.nonzero((placed >= 0).any(axis=1))[0]
        Rp = max(r, int(started.max()) if len(started) else 0) + 1
        real = placed[:Rp]
        # the other replicas' unplaced stages stay in the domain of their last placed stage
        # (no transfer over the WAN, no ring); replica r keeps its own row (handled below)
        idx = np.maximum.accumulate(np.where(real >= 0, np.arange(S)[None, :], 0), axis=1)
        pl = np.take_along_axis(real, idx, axis=1)
        pl[r] = real[r]
        # the placed pipeline boundaries (both ends placed): inside a domain or a flow over the WAN;
        # pipeline flows share links among themselves, ring hops among themselves (as PlanFigures.comm)
        u, v = pl[:, :-1], pl[:, 1:]
        both = (u >= 0) & (v >= 0)
        inside = both & (u == v)
        cross = both & (u != v)
        pipe = self.route[u[cross], v[cross]]  # (F, P)
        counts = np.zeros((S, D), dtype=np.int64)
        rr, ss = np.nonzero(real >= 0)
        np.add.at(counts, (ss, real[rr, ss]), 1)
        present = counts > 0
        # the rings of the other stages (fixed) and of stage j with each candidate
        parts, ring_of, ring_lat, n = [], [], np.zeros(S), 0
        for s in range(S):
            if s == j:
                ring_of.append([])
                continue
            idx, ring_lat[s] = self._ring(tuple(np.flatnonzero(present[s]).tolist()))
            ring_of.append(np.arange(n, n + len(idx)))
            n += len(idx)
            parts.append(idx)
        hop_idx = np.concatenate(parts) if parts else np.zeros((0, P), dtype=np.int64)
        prev = placed[r, j - 1] if j > 0 else -1
        new_pipe = self.route[prev, cands] if j > 0 else np.full((K, P), L, dtype=np.int64)
        if j > 0:
            new_pipe[cands == prev] = L
        base_j = set(np.flatnonzero(present[j]).tolist())
        ring_j = [self._ring(tuple(sorted(base_j | {int(d)}))) for d in cands]
        V = max(1, max(len(h) for h, _ in ring_j))
        var_ring = np.full((K, V, P), L, dtype=np.int64)
        lat_j = np.zeros(K)
        for k, (idx, lat_k) in enumerate(ring_j):
            var_ring[k, :len(idx)] = idx
            lat_j[k] = lat_k

        def shares(fixed, var):
            """Per-candidate flow bandwidths (bytes/s) of the fixed flows (K, F) and of ``var``
            (K, n, P) -> (K, n), all flows sharing every link equally."""
            users = np.bincount(fixed.ravel(), minlength=L + 1)[None, :].repeat(K, axis=0)
            np.add.at(users, (np.repeat(np.arange(K), var.shape[1] * P), var.ravel()), 1)
            share = self.bw[None, :] / np.maximum(users, 1)
            share[:, L] = np.inf
            fixed_bw = share[:, fixed].min(axis=-1) if len(fixed) else np.zeros((K, 0))
            var_bw = np.take_along_axis(share, var.reshape(K, -1), axis=1).reshape(var.shape).min(axis=-1)
            return fixed_bw, var_bw

        pipe_bw, new_bw = shares(pipe, new_pipe[:, None, :])
        hop_bw, ring_bw_j = shares(hop_idx, var_ring)
        # pipeline boundaries: transfer time x and latency l, (K, R', S-1)
        x = np.zeros((K, Rp, max(S - 1, 0)))
        l = np.zeros_like(x)
        if S > 1:
            A = np.broadcast_to(self.A[:-1], u.shape)
            x[:, inside] = A[inside] / self.intra[u[inside]]
            with np.errstate(divide="ignore"):
                x[:, cross] = A[cross][None, :] / pipe_bw
            l[:, cross] = self.route_lat[u[cross], v[cross]][None, :]
        if j > 0:
            same = cands == prev
            with np.errstate(divide="ignore"):
                xt = self.A[j - 1] / new_bw[:, 0]
            x[:, r, j - 1] = np.where(same, self.A[j - 1] / self.intra[cands], xt)
            l[:, r, j - 1] = np.where(same, 0.0, self.route_lat[prev, cands])
        if j < S - 1:  # the rest of replica r inside the candidate
            x[:, r, j:] = self.A[None, j:S - 1] / self.intra[cands][:, None]
        # gradient synchronisation (K, S): the intra part, then the rings over the WAN
        cnt = np.broadcast_to(counts, (K, S, D)).copy()
        cnt[np.arange(K), j, cands] += 1
        with np.errstate(divide="ignore", invalid="ignore"):
            intra = np.where(cnt > 1, 2 * (cnt - 1) / np.maximum(cnt, 1) * (self.G / self.tp)[None, :, None]
                             / self.intra[None, None, :], 0.0)
        ar = intra.max(axis=2)
        kr = (cnt > 0).sum(axis=2)  # (K, S) ring sizes
        ring_bw = np.full((K, S), np.inf)
        lat = np.broadcast_to(ring_lat, (K, S)).copy()
        for s in range(S):
            if s != j and len(ring_of[s]):
                ring_bw[:, s] = hop_bw[:, ring_of[s]].min(axis=1)
        ring_bw[:, j] = np.where(np.arange(V)[None, :] < np.where(kr[:, j] > 1, kr[:, j], 0)[:, None], ring_bw_j,
                                 np.inf).min(axis=1)
        lat[:, j] = lat_j
        with np.errstate(divide="ignore", invalid="ignore"):
            vol = 2 * (kr - 1) / np.maximum(kr, 1) * self.G[None, :] / ring_bw
        ar += np.where(kr > 1, vol + 2 * (kr - 1) * lat, 0.0)
        # bytes over the WAN per iteration (SPEC 6 cost): boundaries both ways, the rings' cross part
        wan = 2 * self.m * float(np.broadcast_to(self.A[:-1], u.shape)[cross].sum()) if S > 1 else 0.0
        self.wan_bytes = wan + np.where(kr > 1, 2 * (kr - 1) * self.G[None, :], 0.0).sum(axis=1)
        if j > 0:
            self.wan_bytes = self.wan_bytes + np.where(cands != prev, 2 * self.A[j - 1] * self.m, 0.0)
        if self.typed:
            return self._typed(pl, r, j, cands, x, l, ar)
        return estimate_times(self.f, self.g, x, l, ar, self.m, self.w, self.gpipe)

    def _typed(self, pl, r, j, cands, x, l, ar) -> np.ndarray:
        """T_est (s) per candidate with GPU types: each replica's E^est at its own
        (replica, stage) types (SPEC v3 (g)), the largest over replicas, plus AR_j."""
        K, S = len(cands), self.S
        flush = [Flush(self.m, tuple(self.w), self.gpipe)]
        cols = np.arange(S)

        def ends(row, xs, ls):
            return stage_end_estimates(self.tf[row, cols], self.tg[row, cols], xs, ls, flush, downstream=False)

        E = np.full((K, S), -np.inf)
        others = [q for q in range(len(pl)) if q != r]
        if others:  # the other replicas: fixed types (unplaced stages where their last one is), by class
            rows = self.dtype[pl[others]]
            classes, inv = np.unique(rows, axis=0, return_inverse=True)
            inv = np.asarray(inv).ravel()
            for k, row in enumerate(classes):
                q = np.asarray(others)[inv == k]
                E = np.maximum(E, ends(row, x[:, q], l[:, q]))
        ctype = self.dtype[cands]
        head = self.dtype[pl[r, :j]]
        for u in np.unique(ctype).tolist():  # replica r: stages j.. on the candidate's type
            ks = np.nonzero(ctype == u)[0]
            row = np.concatenate([head, np.full(S - j, u, dtype=np.int64)])
            E[ks] = np.maximum(E[ks], ends(row, x[ks][:, [r]], l[ks][:, [r]]))
        return (E + ar).max(axis=1)


class PlacementEnv(gym.Env if gym else object):
    """Choose a shape, then place (replica, stage) pairs on domains; see the module docstring.

    ``menu``: the shapes (default :func:`shape_menu`); ``reference``: the plan
    whose exact objective scales the reward (default greedy's plan); ``hours``
    and ``seed``: the generated week of drift episodes draw states from;
    ``base_prob``: the chance of the base network; ``rewards=False`` (planning):
    reward 0, no reference plan needed; ``force_shape``: the chance that an
    episode's shape is drawn uniformly from the menu instead of chosen (so the
    placement is trained on every shape).  ``reset(options=...)``
    takes ``{"state": (bandwidth, latency)}`` (one state, per link) and
    ``{"shape": i}`` (only menu shape i allowed at step 0)."""

    metadata = {"render_modes": []}

    def __init__(self, instance, menu: list[MenuShape] | None = None, reference: Plan | None = None,
                 hours: float = 24 * 7, seed: int = 0, base_prob: float = 0.5, shapes: int = SHAPES,
                 shaping: bool = True, rewards: bool = True, force_shape: float = 0.0, typed: bool | None = None):
        _require()
        from ..problem.traces import generate

        self.instance = instance
        self.typed = instance.heterogeneous if typed is None else bool(typed)
        if instance.heterogeneous and not self.typed:
            raise ValueError("the domains have several GPU types: only the typed observation (typed=True, "
                             "policy format 3) describes them")
        self.slot = SLOT_TYPED if self.typed else SLOT
        self.menu = list(menu) if menu is not None else shape_menu(instance, shapes)
        if not self.menu:
            raise ValueError("no shape to place")
        self.menu = self.menu[:N_SLOTS // len(ORDERS)]
        self._reference = reference
        self.domains = list(instance.domain_names)
        self.D = len(self.domains)
        self.trace = generate(instance, hours=hours, seed=seed) if base_prob < 1 else None
        self.base_prob = base_prob
        self.rewards = rewards
        self.force_shape = force_shape
        self.shaping = shaping and rewards
        self.base_bw = np.array([l.bandwidth_gbps for l in instance.links], float)
        self.base_lat = np.array([l.latency_ms for l in instance.links], float)
        self.cost = instance.options.objective == "cost"
        price = np.array([d.price_per_gpu_hour for d in instance.domains], float)
        self.price_raw = price
        self.price = price / price.max() if price.max() > 0 else price
        self._partial = [None] * len(self.menu)
        self._exact_cache: dict = {}
        self._ref_cache: dict = {}
        self.observation_space = spaces.Box(low=-OBS_MAX, high=OBS_MAX, shape=(GLOBAL + N_SLOTS * self.slot,),
                                            dtype=np.float32)
        self.action_space = spaces.Discrete(N_SLOTS)
        best = min(s.estimate for s in self.menu)
        self._shape_feats = np.zeros((N_SLOTS, self.slot), dtype=np.float32)
        gpus = sum(d.gpus for d in instance.domains)
        top_slots = {}
        for i, s in enumerate(self.menu):
            t = s.template
            if t.tp not in top_slots:
                top_slots[t.tp] = max(d.gpus // t.tp if d.gpus_per_node >= t.tp else 0 for d in instance.domains)
            need = t.num_stages * t.replicas
            for o in range(len(ORDERS)):
                self._shape_feats[len(ORDERS) * i + o] = [
                    1.0, i / max(1, len(self.menu) - 1), _log_ratio(s.estimate, best),
                    math.log2(t.tp) / 3, math.log2(t.replicas) / 7, math.log2(t.num_stages) / 6,
                    t.tp * need / gpus, float(t.schedule == "gpipe"),
                    math.log2(t.micro_batch_size) / 3, math.log2(t.num_micro_batches) / 9,
                    min(1.0, math.ceil(need / max(1, top_slots[t.tp])) / self.D), float(o), 0, 0, 0, 0
                ] + [0] * (self.slot - SLOT)
        if self.typed:  # each domain's type: usable memory (bytes per GPU) and log speed over the fastest used
            types = instance.gpu_types
            self.mem_limit = np.array([instance.memory_limit_of(types[u]) for u in instance.domain_type])
            rate = np.array([types[u].flops_per_s for u in instance.domain_type])
            self.speed = np.log(rate / rate.max())
        self._phase = 0
        self._state_key = None

    # -- the episode's shape ----------------------------------------------------------
    def _setup_shape(self, i: int, order: int) -> None:
        self.shape, self.order = i, order
        t = self.menu[i].template
        self.template = t
        self.R, self.S, self.tp = t.replicas, t.num_stages, t.tp
        self.n = self.R * self.S
        if self._partial[i] is None:
            self._partial[i] = PartialEstimate(self.instance, t, typed=self.typed)
        self.est = self._partial[i]
        self.est.set_state(self._bw, self._lat)
        self.slots0 = np.array([(d.gpus // self.tp) if d.gpus_per_node >= self.tp else 0
                                for d in self.instance.domains], dtype=np.int64)
        self._placed = np.full((self.R, self.S), -1, dtype=np.int64)
        self._free = self.slots0.copy()
        self._pos = 0
        self._last = -1
        self._est_now = self._est0 = self.est.compute_only * (
            self.tp * self.n * self.price_raw.min() / 3600.0 if self.cost else 1.0)
        self._cands()

    @property
    def reference(self) -> Plan:
        if self._reference is None:
            from .greedy import greedy

            self._reference = greedy(self.instance)
        return self._reference

    def reference_objective(self) -> float:
        """The reference plan's exact objective under the episode's state."""
        key = self._state_key
        if key not in self._ref_cache:
            self._ref_cache[key] = self._exact(self.reference)
        return self._ref_cache[key]

    def _exact(self, plan: Plan) -> float:
        ev = Evaluator(self.instance, plan)
        st = NetworkStates(self._bw[None, :], self._lat[None, :])
        return float(ev.objective(ev.iteration_times(st))[0])

    # -- gymnasium API ----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "state" in options:
            bw, lat = options["state"]
            self._bw, self._lat = np.asarray(bw, float).copy(), np.asarray(lat, float).copy()
            self._state_key = ("given", self._bw.tobytes(), self._lat.tobytes())
        elif self.trace is None or self.np_random.random() < self.base_prob:
            self._bw, self._lat = self.base_bw.copy(), self.base_lat.copy()
            self._state_key = ("base",)
        else:
            k = int(self.np_random.integers(self.trace.epochs))
            self._bw = np.asarray(self.trace.states.bandwidth_gbps[k], float)
            self._lat = np.asarray(self.trace.states.latency_ms[k], float)
            self._state_key = ("trace", k)
        shape, order = options.get("shape"), options.get("order")
        if shape is None and order is None and self.np_random.random() < self.force_shape:
            # train the placement on every shape and order, not only the ones the policy picks
            shape = int(self.np_random.integers(len(self.menu)))
            order = int(self.np_random.integers(len(ORDERS)))
        if shape is not None and not 0 <= int(shape) < len(self.menu):
            raise ValueError(f"shape {shape} is not in the menu of {len(self.menu)}")
        if order is not None and not 0 <= int(order) < len(ORDERS):
            raise ValueError(f"order {order} is not one of {len(ORDERS)}")
        mask = np.zeros((N_SLOTS // len(ORDERS), len(ORDERS)), dtype=bool)
        mask[:len(self.menu)] = True
        if shape is not None:
            mask[np.arange(len(mask)) != int(shape)] = False
        if order is not None:
            mask[:, np.arange(len(ORDERS)) != int(order)] = False
        self._shape_mask = mask.ravel()
        self._bw_pad = np.append(self._bw, np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(self.base_bw > 0, self._bw / np.maximum(self.base_bw, 1e-12), 1.0)
        self._drift = _clip(float(np.mean(np.log(np.maximum(ratio, 1e-4)))))  # mean log bandwidth / base
        self._phase = 0
        self._phi = 0.0
        self._scale = None
        self._incomplete = False
        return self._obs(), {}

    def step(self, action: int):
        action = int(action)
        if not self.action_masks()[action]:  # only agents that ignore the mask get here: the worst return
            reward = REWARD_MIN - self._phi if self._phase == 1 else REWARD_MIN
            self._phase = 2
            self._incomplete = True
            return self._obs(), float(reward), True, False, {"invalid_action": action, "final": REWARD_MIN}
        if self._phase == 0:
            self._setup_shape(*divmod(action, len(ORDERS)))
            self._phase = 1
            return self._obs(), self._shaping(), False, False, {"shape": self.shape, "order": self.order}
        d = int(self._order[action])
        r, j = self._rj()
        self._est_now = float(self._cand_est[action])
        self._placed[r, j] = d
        self._free[d] -= 1
        self._last = d
        self._pos += 1
        if self._pos < self.n:
            self._cands()
            return self._obs(), self._shaping(), False, False, {}
        plan = self.plan()
        key = (self.shape, self._placed.tobytes(), self._state_key)
        if key not in self._exact_cache:
            self._exact_cache[key] = self._exact(plan)
        T = self._exact_cache[key]
        self._phase = 2
        if not self.rewards:  # planning, not training: no reference needed
            return self._obs(), 0.0, True, False, {"objective": T, "shape": self.shape, "order": self.order}
        ref = self.reference_objective()
        if not np.isfinite(T):
            final = REWARD_MIN
        elif not np.isfinite(ref):
            final = 1.0
        else:
            final = float(np.clip(math.log(ref / T), REWARD_MIN, 1.0))
        reward = final - self._phi  # Phi = 0 at the end: the return is the final term
        self._phase = 2
        return self._obs(), reward, True, False, {"objective": T, "reference": ref, "final": final,
                                                  "shape": self.shape, "order": self.order}

    def _shaping(self) -> float:
        """Phi(s') - Phi(s), Phi = -(objective estimate - its value before any placement) / reference."""
        if not self.shaping or self._phase != 1:
            return 0.0
        if self._scale is None:
            ref = self.reference_objective()
            self._scale = ref if np.isfinite(ref) and ref > 0 else self._est0
        phi = -min(1.0, (self._est_now - self._est0) / self._scale) if np.isfinite(self._est_now) else -1.0
        r, self._phi = phi - self._phi, phi
        return float(r)

    def action_masks(self) -> np.ndarray:
        if self._phase == 0:
            return self._shape_mask.copy()
        mask = np.zeros(N_SLOTS, dtype=bool)
        if self._phase == 1:
            mask[:len(self._order)] = True
        return mask

    # -- candidates and features --------------------------------------------------------
    def _rj(self) -> tuple[int, int]:
        """The (replica, stage) placed at this step."""
        if self.order == 0:
            return divmod(self._pos, self.S)
        j, r = divmod(self._pos, self.R)
        return r, j

    def _cands(self) -> None:
        r, j = self._rj()
        free = np.nonzero(self._free > 0)[0]
        if self.typed:
            free = free[self._fits(j, free)]
        est = self.est(self._placed, r, j, free)
        if self.cost:  # the cost of the partial plan, its remaining positions at the candidate's price
            opt = self.instance.options
            placed = self._placed[self._placed >= 0]
            hourly = self.tp * (self.price_raw[placed].sum() + self.price_raw[free] * (self.n - self._pos))
            with np.errstate(invalid="ignore"):
                est = np.where(np.isinf(est), np.inf,
                               est / 3600.0 * hourly + self.est.wan_bytes / 1e9 * opt.wan_price_per_gb)
        prev = self._placed[r, j - 1] if j > 0 else self._last
        key = np.lexsort((free, -self._free[free], free != prev, np.round(est, 12)))
        order = free[key][:N_SLOTS]
        self._order, self._cand_est = order, est[key][:N_SLOTS]

    def _fits(self, j: int, free: np.ndarray) -> np.ndarray:
        """Which of the domains ``free`` can take stage j (typed): within its type's usable
        memory, and leaving GPUs where the unplaced stages fit (Hall's condition on the
        nested sets of domains whose memory holds a stage; greedy's template shows that
        the empty placement completes, so some candidate always passes)."""
        need = self.est.memory  # (S,) bytes per GPU
        rem = self.R - (self._placed >= 0).sum(axis=0)  # unplaced positions per stage
        rem[j] -= 1
        hold = need[None, :] <= self.mem_limit[:, None] * (1 + 1e-12)  # (D, S), the evaluator's test
        demand = np.array([rem[need >= need[s]].sum() for s in range(self.S)])  # (S,)
        supply = (self._free[:, None] * hold).sum(axis=0)  # (S,)
        after = supply[None, :] - hold[free]  # one slot of the candidate taken: (K, S)
        return hold[free, j] & (demand[None, :] <= after).all(axis=1)

    def _obs(self) -> np.ndarray:
        g = np.zeros(GLOBAL, dtype=np.float32)
        slots = np.zeros((N_SLOTS, self.slot), dtype=np.float32)
        g[6] = float(self.cost)
        g[11] = 1.0
        g[10] = self._drift
        if self._phase == 0:
            g[0] = 1.0
            slots[:] = self._shape_feats
            slots[:, 0] = self._shape_mask
        elif self._phase == 1:
            r, j = self._rj()
            S, R = self.S, self.R
            g[12] = float(self.order)
            g[1], g[2], g[3] = j / S, r / R, self._pos / self.n
            g[4], g[5] = math.log2(S) / 6, math.log2(R) / 7
            base = self._est0
            g[7] = _log_ratio(self._est_now, base)
            g[8] = _clip(math.log(max(1, int(self._free.sum())) / max(1, self.n - self._pos)))
            g[9] = len(self._order) / N_SLOTS
            prev = self._placed[r, j - 1] if j > 0 else -1
            est, order = self._cand_est, self._order
            K = len(order)
            cm = max(float(self.est.c.max()), 1e-12)
            f = np.zeros((K, self.slot))
            f[:, 0] = 1.0
            if j > 0:
                cross = order != prev
                link_bw = self._bw_pad[self.est.route[prev, order]].min(axis=1) * GBPS  # unshared, bytes/s
                lat = self.est.route_lat[prev, order]
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a link down: inf
                    comm = np.where(link_bw > 0, 2 * (self.est.A[j - 1] / np.maximum(link_bw, 1e-300) + lat), np.inf)
                    f[:, 7] = np.where(cross, np.where(np.isfinite(comm), np.clip(np.log1p(comm / cm), -OBS_MAX, OBS_MAX),
                                                       OBS_MAX), 0.0)
                f[:, 8] = np.where(cross, _log_ratios(link_bw, self.est.intra[prev]) / 5, 0.0)
                f[:, 9] = np.where(cross, np.clip(np.log1p(lat / cm), -OBS_MAX, OBS_MAX), 0.0)
                f[:, 1] = ~cross
            f[:, 2] = order == self._last
            if r > 0:
                f[:, 3] = (self._placed[:r, j][None, :] == order[:, None]).mean(axis=1)
                f[:, 4] = self._placed[0, j] == order
            f[:, 5] = np.clip(10 * _log_ratios(est, float(np.min(est))), -OBS_MAX, OBS_MAX)
            f[:, 6] = _log_ratios(est, base)
            free = self._free[order]
            f[:, 10] = np.minimum(1.0, free / (self.n - self._pos))
            f[:, 11] = free >= S - j
            f[:, 12] = np.minimum(4.0, free / S) / 4
            f[:, 13] = self.slots0[order] / max(1, self.slots0.max())
            used = np.zeros(self.D, dtype=bool)
            used[self._placed[self._placed >= 0]] = True
            f[:, 14] = ~used[order]
            f[:, 15] = self.price[order]
            if self.typed:  # the candidate's type: log speed over the fastest used, memory headroom of stage j
                f[:, 16] = np.clip(self.speed[order], -OBS_MAX, OBS_MAX)
                f[:, 17] = np.clip(1.0 - self.est.memory[j] / self.mem_limit[order], -OBS_MAX, OBS_MAX)
            slots[:K] = f
        return np.concatenate([g, slots.ravel()]).astype(np.float32)

    # -- the plan ---------------------------------------------------------------------
    def plan(self) -> Plan:
        """The plan of the finished episode (``ValueError`` if it is not complete)."""
        if self._phase == 0 or self._incomplete or (self._placed < 0).any():
            raise ValueError("no complete placement: the episode has not placed every stage")
        placement = [[self.domains[d] for d in row] for row in self._placed]
        return self.template.model_copy(update={"placement": placement, "predicted": None, "solver": None})

    @property
    def phase(self) -> int:
        """0: choosing the shape; 1: placing; 2: done."""
        return self._phase
