"""The PPO allocator's environment (SPEC 10, issue 27): one job per step, each given one
slice of what the earlier jobs LEFT, from a dynamic menu, masked to the slices a plan fits.

**Reservations.** At reset, every job of the episode gets a *fallback* column, and the
fallbacks fit together (:func:`fallbacks`): each job's plan on its equal slice (``floor(
gpus_d / n)`` GPUs of every allowed domain, ``1/n`` of every link and uplink, ``n`` the
episode's jobs), cut to the GPUs and links the plan uses.  When some job has no plan
there, the others' fallbacks shrink to ``1/(k n)`` slices when a plan fits one
(:data:`SHRINK`) and each such job gets the smallest of a few slices of what remains that
a plan fits (:data:`RESCUE`, :func:`_rescue`).  While job t is allocated, the later jobs' fallbacks
are reserved: job t may only take from ``A_t = free - sum(later fallbacks)``, which holds
its own fallback.  So the fallback is always a valid action, every step keeps the later
fallbacks free, and every episode admits every job whenever the fallbacks exist (in
particular whenever the equal share is feasible).

**Menu** (:data:`N_MENU` = 12 slots, made anew at every step): slot 0 the fallback; then
slices of ``A_t`` (:data:`SLICES`): a fraction f in {1/4, 1/2, 3/4, 1} of every allowed
domain's GPUs with f of every link and uplink left; every GPU left in one of two groups of
the allowed domains (dealt round robin by GPUs left), with half the links left; the one,
two and four allowed domains with the most GPUs left, alone, with all links and
uplinks left; the two largest at half.  GPU counts are rounded down to
:data:`GPU_GRID`, shares down to multiples of 1/:data:`SHARE_GRID`, so slices repeat
across episodes and the :class:`~planner.solvers.multijob.columns.ColumnPool` (which
caches plans by workload and slice) plans each once.  Each slice is planned by the
single-job planner (the pool's fast greedy by default), then cut to the GPUs its plan
uses and to the links its transfers can use (:func:`lean`): what it does not use stays
for the later jobs.  A slice no plan fits, or a duplicate, is masked.  ``SKIP`` (not
admitted) is valid only when no slot is (no fallback: some job has no plan anywhere).

**Live or library.** Planning every slice of every step costs about half a second a
slice, too much for the tens of thousands of episodes of training.  So a
:class:`MixMenu` keeps a *library*: every lean column planned for each job so far.
``live=True`` (the allocator's first episode, and the warm-up episodes before training)
plans the slices; ``live=False`` (training, the allocator's sampled episodes) gives each
slice the library column of highest rho that fits within it: an exact column, only
perhaps worse than a plan made on that slice.  The fallbacks are always planned.

**Observation** (instance-agnostic, ``GLOBAL + N_ACTIONS * SLOT`` floats in
[-OBS_MAX, OBS_MAX]): what is left (GPUs in all, in the job's allowed domains, five
quantiles of the per-domain fraction left; mean and least link share left; mean uplink
share left), the current job (log10 parameters, log10 tokens per batch, weight over the
largest and over the sum, deadline over its alone duration, allowed domains, quota) and
what earlier jobs got (least rho, weighted rho, weight meeting deadlines, weight to come);
then per action slot: valid, exists, rho, deadline met, GPUs over the cluster's and over
``A_t``, the largest share of the free link and uplink capacity it takes, its completion
over the deadline, the later jobs' mean and least fallback rho, its rho over the fallback's, the share of the spare
GPUs (``A_t`` less this job's fallback) it leaves (the skip slot: 1), slot index.

**Reward** (at the last step; 0 before): ``(a * sum_j w_j rho_j / sum_j w_j + b * min_j
rho_j + c * sum_{j met} w_j / sum_j w_j) / (a + b + c)`` with ``(a, b, c)`` =
:data:`REWARD_WEIGHTS`, in [0, 1]; rho and deadlines are the columns' figures, which are
``multievaluate``'s (reserved sharing) for the multi-plan the episode makes (tested).

``AllocationEnv(menus)`` serves one mix or several (:class:`MixMenu`: a mix and its
pool; each episode picks one, seeded); ``augment=True`` (training) also draws a subset of
the mix's jobs and Gavel's weights anew each episode.

Example
-------
>>> pool = ColumnPool(minst, references(minst))                      # doctest: +SKIP
>>> env = AllocationEnv([MixMenu.build(minst, pool)])
>>> obs, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step(int(env.action_masks().argmax()))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...problem.errors import InputError, TimeLimitError
from ..rl_env import _require, gym

if gym is not None:
    from gymnasium import spaces

SLICES = ("fallback", "all:0.25", "all:0.5", "all:0.75", "all:1", "half:0", "half:1", "top:1", "top:2", "top:4",
          "top2:0.5", "second:1")
N_MENU = len(SLICES)  # menu slots per step (12)
SKIP = N_MENU  # the action "not admitted"
N_ACTIONS = N_MENU + 1
GLOBAL = 24  # global features
SLOT = 14  # features per action slot
OBS_MAX = 10.0
REWARD_WEIGHTS = (1.0, 1.0, 1.0)  # weighted rho, min rho, weight meeting deadlines
REWARD_INVALID = -1.0
EPS = 1e-9  # slack of the capacity checks (multievaluate allows 1e-9 on shares)
GAVEL_HIGH = (0.2, 5.0)  # augmentation: weight 5 with probability 0.2, else 1 (Gavel's rule)
GPU_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
SHARE_GRID = 32  # shares rounded down to multiples of 1/32
RESCUE = ("top:1", "top:2", "all:0.25", "top:4", "all:0.5", "all:1")  # slices of what is left, smallest first,
# tried for a job with no plan on its equal slice
SHRINK = (4, 2)  # the others' fallbacks then: 1/(k n) slices, when a plan fits one


def _clip(v: float) -> float:
    return float(min(OBS_MAX, max(-OBS_MAX, v)))


def grid_gpus(n: float) -> int:
    """``n`` GPUs rounded down to :data:`GPU_GRID` (0 below 1).

    >>> grid_gpus(13.7), grid_gpus(0.9), grid_gpus(100)
    (12, 0, 96)
    """
    n = int(math.floor(n + 1e-9))
    if n < 1:
        return 0
    if n > GPU_GRID[-1]:
        return n
    return max(g for g in GPU_GRID if g <= n)


def grid_share(s: float) -> float:
    """A share rounded down to a multiple of 1/:data:`SHARE_GRID`.

    >>> grid_share(0.5), grid_share(0.49), grid_share(1.0)
    (0.5, 0.46875, 1.0)
    """
    return math.floor(max(0.0, s) * SHARE_GRID + 1e-6) / SHARE_GRID


@dataclass
class MixMenu:
    """One mix ready for episodes: the mix, its column pool and the resource layout.

    ``resources``: GPUs of every domain, then every link's share, then every uplink's
    share; ``capacity`` their amounts (GPUs, 1, 1).  ``fast``: plan menu slices with the
    pool's fast planner (greedy without its exact re-ranking).  Caches: the lean column
    of every column made, the fallbacks of every job subset."""

    minst: object
    pool: object
    capacity: np.ndarray
    alone_s: np.ndarray  # (J,) iterations * T* (s)
    n_domains: int
    n_links: int
    fast: bool = True
    live: bool = True  # plan every slice (else: the best library column within it)
    library: dict = field(default_factory=dict, repr=False)  # job -> {id: (column, use)} planned so far
    _lean: dict = field(default_factory=dict, repr=False)
    _fallbacks: dict = field(default_factory=dict, repr=False)
    _slices: dict = field(default_factory=dict, repr=False)
    _arrays: dict = field(default_factory=dict, repr=False)  # job -> (library columns by rank, their uses)

    @classmethod
    def build(cls, minst, pool, fast: bool = True) -> "MixMenu":
        doms = list(minst.domain_names)
        D, L = len(doms), len(minst.links)
        cap = np.array([d.gpus for d in minst.domains] + [1.0] * L + [1.0] * D, float)
        alone = np.array([s.iterations * s.global_batch_size * s.seq_len
                          / max(pool.references.get(s.name) or 0.0, 1e-300) for s in minst.jobs])
        return cls(minst, pool, cap, alone, D, L, fast)

    # -- columns <-> vectors ----------------------------------------------------------
    @property
    def link_keys(self) -> list[str]:
        return [f"{l.a}|{l.b}" for l in self.minst.links]

    def use(self, col) -> np.ndarray:
        """What column ``col`` takes, as a resource vector."""
        D, L = self.n_domains, self.n_links
        doms, keys = self.minst.domain_names, self.link_keys
        v = np.zeros(D + L + D)
        for d, n in col.gpus.items():
            v[doms.index(d)] = n
        for k, s in col.link_share.items():
            v[D + keys.index(k)] = s
        for d, u in col.uplink_share.items():
            v[D + L + doms.index(d)] = u
        return v

    def fits(self, use: np.ndarray, free: np.ndarray) -> bool:
        return bool(np.all(use <= free + EPS * np.maximum(1.0, free)))

    # -- planning --------------------------------------------------------------------------
    def column(self, j: int, gpus: dict, links: dict, ups: dict | None, source: str):
        """Job j's lean column on this slice (cached by the pool and here), or None."""
        gpus = {d: int(n) for d, n in gpus.items() if n > 0}
        if not gpus:
            return None
        try:
            col = self.pool.make(j, gpus, links, ups, source=source, fast=self.fast)
        except (TimeLimitError, InputError):
            col = None
        if col is None:
            return None
        col = lean(self, col)
        if self.live:  # (library episodes plan only fallbacks: kept out, so training repeats for a seed)
            self.library.setdefault(j, {}).setdefault(id(col), (col, self.use(col)))
        return col

    def vector(self, gpus: dict, links: dict, ups: dict) -> np.ndarray:
        """A slice as a resource vector."""
        D, L = self.n_domains, self.n_links
        doms, keys = self.minst.domain_names, self.link_keys
        v = np.zeros(D + L + D)
        for d, n in gpus.items():
            v[doms.index(d)] = n
        for k, x in links.items():
            v[D + keys.index(k)] = x
        for d, u in ups.items():
            v[D + L + doms.index(d)] = u
        return v

    def best_within(self, j: int, bound: np.ndarray):
        """The library column of job j of highest rho (ties: fewest GPUs, then the first
        made) that fits ``bound`` (a slice as a resource vector), or None."""
        lib = self.library.get(j)
        if not lib:
            return None
        arr = self._arrays.get(j)
        if arr is None or len(arr[0]) != len(lib):
            cols = [c for c, _ in lib.values()]
            use = np.array([u for _, u in lib.values()])
            rank = np.lexsort((np.arange(len(cols)), [c.total_gpus for c in cols], [-c.rho for c in cols]))
            arr = self._arrays[j] = ([cols[i] for i in rank], use[rank])
        cols, use = arr
        ok = np.all(use <= bound + EPS * np.maximum(1.0, bound), axis=1)
        i = int(np.argmax(ok))
        return cols[i] if ok[i] else None

    def slice_of(self, j: int, kind: str, avail: np.ndarray) -> tuple[dict, dict, dict] | None:
        """The slice (GPUs per domain, link shares, uplink shares) of ``avail`` (a
        resource vector) that menu entry ``kind`` (:data:`SLICES`, not ``fallback``)
        asks for job ``j``, on the grids; None when it holds no GPU."""
        D, L = self.n_domains, self.n_links
        doms, keys = self.minst.domain_names, self.link_keys
        allowed = [doms.index(d) for d in self.minst.allowed(j)]
        left = {i: avail[i] for i in allowed if avail[i] >= 1}
        big = sorted(left, key=lambda i: (-left[i], i))
        what, f = kind.split(":")
        if what == "all":
            f = float(f)
            pick, gf, lf = big, f, f
        elif what == "half":
            pick, gf, lf = big[int(f)::2], 1.0, 0.5
        elif what == "top":
            pick, gf, lf = big[:int(f)], 1.0, 1.0
        elif what == "top2":
            pick, gf, lf = big[:2], float(f), float(f)
        else:  # second: the domain with the second most GPUs left, alone
            pick, gf, lf = big[int(f):int(f) + 1], 1.0, 1.0
        gpus = {doms[i]: grid_gpus(gf * avail[i]) for i in pick}
        gpus = {d: n for d, n in gpus.items() if n > 0}
        if not gpus:
            return None
        links = {k: grid_share(lf * avail[D + i]) for i, k in enumerate(keys)}
        ups = {d: grid_share(min(lf, 1.0) * avail[D + L + doms.index(d)]) for d in gpus}
        return gpus, {k: s for k, s in links.items() if s > 0}, ups

    def menu(self, j: int, avail: np.ndarray, fallback) -> list:
        """Job j's menu on ``avail``: the fallback, then one lean column (or None) per
        slice of :data:`SLICES`; duplicates are None."""
        key = (j, tuple(np.round(avail, 9)), id(fallback), self.live,
               -1 if self.live else len(self.library.get(j, ())))
        if key in self._slices:
            return self._slices[key]
        out, seen = [fallback], set()
        if fallback is not None:
            seen.add(self.pool.key(j, fallback.gpus, fallback.link_share, fallback.uplink_share))
        for kind in SLICES[1:]:
            s = self.slice_of(j, kind, avail)
            if s is None:
                col = None
            elif self.live:
                col = self.column(j, *s, source=f"rl:{kind}")
            else:
                col = self.best_within(j, self.vector(*s))
            if col is not None:
                k = self.pool.key(j, col.gpus, col.link_share, col.uplink_share)
                if k in seen or not self.fits(self.use(col), avail):
                    col = None
                else:
                    seen.add(k)
            out.append(col)
        self._slices[key] = out
        return out


def lean(menu: MixMenu, col):
    """``col`` cut to the GPUs its plan uses, the links its transfers may use and the
    uplinks of its domains, when that keeps its time (within 1e-9 relative); else ``col``.
    Cached per column.  Its figures are the core's (``pool.score``)."""
    from .columns import traffic_links

    if id(col) in menu._lean:
        return menu._lean[id(col)][1]
    used = {d: n for d, n in col.plan.gpus_per_domain().items() if n}
    ups = {d: u for d, u in col.uplink_share.items() if d in used}
    out = col
    try:
        inst = menu.minst.slice_instance(col.job, used, col.link_share, ups)
        wanted = traffic_links(inst, col.plan)
    except (InputError, KeyError):
        wanted = set(col.link_share)
    links = {k: v for k, v in col.link_share.items() if k in wanted}
    c = menu.pool.score(col.job, used, links, ups, col.plan, col.source, slice_throughput=col.slice_throughput)
    if c is not None and c.time_s <= col.time_s * (1 + 1e-9):
        out = c
    elif (used, ups) != (col.gpus, col.uplink_share):
        c = menu.pool.score(col.job, used, col.link_share, ups, col.plan, col.source,
                            slice_throughput=col.slice_throughput)
        if c is not None and c.time_s <= col.time_s * (1 + 1e-9):
            out = c
    menu._lean[id(col)] = (col, out)
    return out


def fallbacks(menu: MixMenu, jobs: list[int]) -> dict[int, object] | None:
    """Job -> fallback column for the episode's ``jobs`` (mix indices), fitting together
    in the cluster (module docstring), or None when some job gets none.  Cached."""
    key = tuple(sorted(jobs))
    if key in menu._fallbacks:
        return menu._fallbacks[key]
    minst, n = menu.minst, len(key)
    doms, keys = minst.domain_names, menu.link_keys
    got: dict[int, object] = {}
    for j in key:
        allowed = set(minst.allowed(j))
        gpus = {d.name: d.gpus // n for d in minst.domains if d.name in allowed and d.gpus // n > 0}
        got[j] = menu.column(j, gpus, {k: 1.0 / n for k in keys}, {d: 1.0 / n for d in gpus}, "rl:equal")
    missing = [j for j in key if got[j] is None]
    out = got if not missing else _rescue(menu, key, missing, got)
    menu._fallbacks[key] = out
    return out


def _rescue(menu: MixMenu, key: tuple, missing: list[int], equal: dict) -> dict | None:
    """Fallbacks when the jobs ``missing`` have no plan on their equal slice: the others
    take the smallest of their slices ``1 / (k n)`` (k in :data:`SHRINK`, then their equal
    column), then each missing job in turn the smallest slice of what remains
    (:data:`RESCUE`) a plan fits; None when one finds none."""
    minst, n = menu.minst, len(key)
    keys = menu.link_keys
    got = {}
    for j in key:
        if j in missing:
            continue
        got[j] = equal[j]
        allowed = set(minst.allowed(j))
        for k in SHRINK:
            m = k * n
            gpus = {d.name: d.gpus // m for d in minst.domains if d.name in allowed and d.gpus // m > 0}
            c = menu.column(j, gpus, {x: 1.0 / m for x in keys}, {d: 1.0 / m for d in gpus}, "rl:shrunk") \
                if gpus else None
            if c is not None:
                got[j] = c
                break
    left = menu.capacity - sum((menu.use(c) for c in got.values()), np.zeros_like(menu.capacity))
    for i, j in enumerate(missing):
        rest = len(missing) - i
        col = None
        for kind in RESCUE:
            what, f = kind.split(":")
            if what == "all" and float(f) < 1.0 / rest - 1e-12:
                continue
            s = menu.slice_of(j, kind, np.maximum(left, 0.0))
            if s is not None and what == "top" and rest > 1:  # leave link shares for the others
                s = (s[0], {x: grid_share(v / rest) for x, v in s[1].items() if grid_share(v / rest) > 0}, s[2])
            col = None if s is None else menu.column(j, *s, source="rl:rescue")
            if col is not None and menu.fits(menu.use(col), left):
                break
            col = None
        if col is None:
            return None
        got[j] = col
        left = left - menu.use(col)
    return got


def reward_of(rho, met, weights, reward_weights=REWARD_WEIGHTS) -> float:
    """The episode's reward (module docstring) from each job's ``rho`` (0 when not
    admitted), ``met`` (deadline met, False when not admitted) and ``weights``.

    >>> reward_of([1.0, 0.5], [True, False], [1.0, 1.0])
    0.6666666666666666
    """
    rho, met, w = np.asarray(rho, float), np.asarray(met, bool), np.asarray(weights, float)
    a, b, c = reward_weights
    W = float(w.sum())
    return float((a * float((w * rho).sum()) / W + b * float(rho.min()) + c * float(w[met].sum()) / W)
                 / (a + b + c))


class AllocationEnv(gym.Env if gym else object):
    """The allocator's gymnasium environment (module docstring) over one or more
    :class:`MixMenu`.  ``reset(options={"mix": i})`` picks mix i (default: drawn);
    with ``augment``, ``options={"jobs": [...], "weights": [...]}`` fix the subset
    (indices into the mix's jobs) and weights, else they are drawn.  After the last
    step, :meth:`allocation` gives each job's column (None: not admitted)."""

    metadata = {"render_modes": []}

    def __init__(self, menus: list[MixMenu], augment: bool = False, min_jobs: int = 2,
                 reward_weights=REWARD_WEIGHTS):
        _require()
        self.menus = list(menus)
        self.augment, self.min_jobs = augment, int(min_jobs)
        self.reward_weights = tuple(reward_weights)
        self.observation_space = spaces.Box(-OBS_MAX, OBS_MAX, (GLOBAL + N_ACTIONS * SLOT,), np.float32)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self.mix = self.menus[0]
        self._begin(0, None, None)

    # -- episode state -------------------------------------------------------------
    def _begin(self, m: int, jobs, weights) -> None:
        self.m = m
        self.mix = mix = self.menus[m]
        J = len(mix.minst.jobs)
        jobs = list(range(J)) if jobs is None else [int(j) for j in jobs]
        w = np.array([mix.minst.jobs[j].weight for j in jobs] if weights is None else weights, float)
        order = sorted(range(len(jobs)), key=lambda i: (-w[i], jobs[i]))
        self.jobs = [jobs[i] for i in order]  # mix indices, in allocation order
        self.weights = w[order]
        self.t = 0
        self.free = mix.capacity.copy()
        self.cols: list = []  # the column given to each allocated job (None: not admitted)
        self.choice: list[int] = []
        self.done = False
        self.fb = fallbacks(mix, self.jobs)
        self.fb_use = None if self.fb is None else {j: mix.use(c) for j, c in self.fb.items()}
        self._menu = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        m = options.get("mix")
        m = int(self.np_random.integers(len(self.menus))) if m is None else int(m)
        if not 0 <= m < len(self.menus):
            raise ValueError(f"no mix {m} (there are {len(self.menus)})")
        J = len(self.menus[m].minst.jobs)
        jobs, weights = options.get("jobs"), options.get("weights")
        if self.augment:
            if jobs is None:
                n = int(self.np_random.integers(min(self.min_jobs, J), J + 1))
                jobs = sorted(self.np_random.choice(J, size=n, replace=False).tolist())
            if weights is None:
                weights = [GAVEL_HIGH[1] if self.np_random.random() < GAVEL_HIGH[0] else 1.0 for _ in jobs]
        self._begin(m, jobs, weights)
        return self._obs(), {"mix": m}

    def available(self) -> np.ndarray:
        """``A_t``: what is free less the later jobs' fallbacks (all that is free without
        fallbacks)."""
        a = self.free.copy()
        if self.fb_use is not None:
            for j in self.jobs[self.t + 1:]:
                a -= self.fb_use[j]
        return np.maximum(a, 0.0)

    def current_menu(self) -> list:
        """The current job's menu (:meth:`MixMenu.menu`; None entries: no column)."""
        if self._menu is None:
            j = self.jobs[self.t]
            fb = None if self.fb is None else self.fb[j]
            avail = self.available()
            self._menu = self.mix.menu(j, avail, fb)
            self._avail = avail
        return self._menu

    def action_masks(self) -> np.ndarray:
        if self.done:
            return np.zeros(N_ACTIONS, bool)
        menu = self.current_menu()
        mask = np.zeros(N_ACTIONS, bool)
        for k, c in enumerate(menu):
            mask[k] = c is not None and self.mix.fits(self.mix.use(c), self._avail if k else self.free)
        mask[SKIP] = not mask[:N_MENU].any()
        return mask

    def safe_masks(self) -> np.ndarray:
        """The plain mask: every valid action keeps the later fallbacks free."""
        return self.action_masks()

    def step(self, action):
        if self.done:
            raise RuntimeError("step() after the episode ended: call reset()")
        a = int(action)
        if not (0 <= a < N_ACTIONS) or not self.action_masks()[a]:
            self.done = True
            return self._terminal_obs(), REWARD_INVALID, True, False, {"invalid_action": a}
        col = None if a == SKIP else self.current_menu()[a]
        if col is not None:
            self.free = np.maximum(0.0, self.free - self.mix.use(col))
        self.cols.append(col)
        self.choice.append(a)
        self.t += 1
        self._menu = None
        if self.t < len(self.jobs):
            return self._obs(), 0.0, False, False, {}
        self.done = True
        rho, met = self.figures()
        r = reward_of(rho, met, self.weights, self.reward_weights)
        return self._terminal_obs(), r, True, False, {"final": r, "min_rho": float(rho.min()),
                                                      "weighted_rho": float((self.weights * rho).sum()
                                                                            / self.weights.sum())}

    def figures(self) -> tuple[np.ndarray, np.ndarray]:
        """(rho, deadline met) of the jobs allocated so far, in allocation order."""
        rho = np.array([0.0 if c is None else c.rho for c in self.cols])
        met = np.array([False if c is None else bool(c.deadline_met) for c in self.cols])
        return rho, met

    def allocation(self) -> dict[int, object]:
        """Mix job index -> its column (None: not admitted), for the jobs allocated so far."""
        return dict(zip(self.jobs, self.cols))

    # -- observation ----------------------------------------------------------------
    def _terminal_obs(self) -> np.ndarray:
        return np.zeros(self.observation_space.shape, np.float32)

    def _obs(self) -> np.ndarray:
        mix, minst = self.mix, self.mix.minst
        D, L = mix.n_domains, mix.n_links
        cap, free = mix.capacity, self.free
        j = self.jobs[self.t]
        spec = minst.jobs[j]
        n = len(self.jobs)
        W = float(self.weights.sum())
        g = np.zeros(GLOBAL)
        total = cap[:D].sum()
        g[0], g[1] = self.t / n, 1.0 / n
        g[2] = free[:D].sum() / total
        allowed = [minst.domain_names.index(d) for d in minst.allowed(j)]
        g[3] = free[allowed].sum() / max(cap[allowed].sum(), 1.0)
        frac = free[:D] / np.maximum(cap[:D], 1.0)
        g[4:9] = np.quantile(frac, [0.0, 0.25, 0.5, 0.75, 1.0])
        links = free[D:D + L]
        g[9] = links.mean() if L else 1.0
        g[10] = links.min() if L else 1.0
        g[11] = free[D + L:].mean()
        g[12] = math.log10(max(spec.model.total_params(), 1.0)) - 10.0
        g[13] = math.log10(max(spec.global_batch_size * spec.seq_len, 1)) - 6.0
        g[14] = self.weights[self.t] / self.weights.max()
        g[15] = self.weights[self.t] / W
        if spec.deadline_hours is not None:
            g[16] = 1.0
            g[17] = _clip(math.log(3600.0 * spec.deadline_hours / max(mix.alone_s[j], 1e-9)))
        g[18] = len(allowed) / D
        g[19] = 1.0 if spec.max_gpus is None else min(1.0, spec.max_gpus / total)
        rho, met = self.figures()
        w_so_far = self.weights[:self.t]
        g[20] = rho.min() if self.t else 1.0
        g[21] = float((w_so_far * rho).sum()) / W if self.t else 0.0
        g[22] = float(w_so_far[met].sum()) / W if self.t else 0.0
        g[23] = float(self.weights[self.t + 1:].sum()) / W
        # slots
        mask = self.action_masks()
        menu, avail = self.current_menu(), self._avail
        s = np.zeros((N_ACTIONS, SLOT))
        later = self.jobs[self.t + 1:]
        fb_rho = [self.fb[k].rho for k in later] if (self.fb is not None and later) else [1.0]
        fb = menu[0]
        spare = avail[:D].sum() - (0.0 if fb is None else sum(fb.gpus.values()))
        s[:, 0] = mask
        s[:, 9] = float(np.mean(fb_rho))
        s[:, 10] = float(np.min(fb_rho))
        s[SKIP, 12] = 1.0
        s[:N_MENU, 13] = np.arange(N_MENU) / N_MENU
        for k, c in enumerate(menu):
            if c is None:
                continue
            u = mix.use(c)
            s[k, 1] = 1.0
            s[k, 2] = c.rho
            s[k, 3] = c.deadline_met
            s[k, 4] = u[:D].sum() / total
            s[k, 5] = u[:D].sum() / max(avail[:D].sum(), 1.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(u[D:] > 0, u[D:] / np.maximum(free[D:], 1e-12), 0.0)
            s[k, 6] = min(ratio[:L].max() if L else 0.0, OBS_MAX)
            s[k, 7] = min(ratio[L:].max(), OBS_MAX)
            if spec.deadline_hours is not None:
                s[k, 8] = _clip(math.log(max(c.completion_s, 1e-9) / (3600.0 * spec.deadline_hours)))
            fb_g = 0.0 if fb is None else sum(fb.gpus.values())
            s[k, 11] = _clip(c.rho / fb.rho) if (fb is not None and fb.rho > 0) else 1.0
            s[k, 12] = max(0.0, (spare - (u[:D].sum() - fb_g)) / spare) if spare > 0 else 1.0
        obs = np.concatenate([g, s.ravel()])
        return np.clip(obs, -OBS_MAX, OBS_MAX).astype(np.float32)
