"""The PPO allocator's environment (SPEC 10, issue 27): one job per step, each given one
slice of a small menu of columns, masked to what still fits.

**Menu.** For every job, :func:`menu_columns` makes :data:`N_MENU` (12) columns with the mix's
:class:`~planner.solvers.multijob.columns.ColumnPool` (the single-job planner's plan on
the slice, cut to the GPUs it uses and its shares trimmed, so its figures are the core's
``job_time``): a fraction f in :data:`FRACTIONS` of every allowed domain's GPUs with share
f of every link and uplink; every GPU of one of two or one of four disjoint groups of the
allowed domains (dealt round robin by size, so the groups hold about equal GPUs; half of
every link); the largest and the second largest allowed domain alone (:data:`SLICES`).
Disjoint groups let jobs take apart what the cluster holds; trimming leaves what a plan
does not use to the others.  A slice no plan fits is
``None`` (always masked).  The menu does not depend on what earlier jobs took, so it is
made once per mix and an episode costs no plan.

**Episode.** Jobs in a fixed order, by decreasing weight, ties in file order (as
``greedy_by_weight``).  Action k < N_MENU gives the current job menu column k; it is
valid when the column fits what is left (GPUs per domain, link and uplink shares; the
allowed domains and ``max_gpus`` hold by construction).  Action :data:`SKIP` leaves the
job out (not admitted); it is valid only when no column fits, so a mask never leaves
no action.  A masked action (an agent that ignores the mask) ends the episode at once
with reward :data:`REWARD_INVALID`.

**Observation** (instance-agnostic, ``GLOBAL + N_ACTIONS * SLOT`` floats in
[-OBS_MAX, OBS_MAX]): what is left (GPUs in all, in the job's allowed domains, five
quantiles of the per-domain fraction left; mean and least link share left; mean uplink
share left), the current job (log10 parameters, log10 tokens per batch, weight over the
largest and over the sum, deadline over its alone duration ``iterations * T*``, allowed
domains, quota) and what earlier jobs got (least rho, weighted rho, weight meeting
deadlines, weight and jobs still to come); then per action slot: valid, exists, rho,
deadline met, GPUs over the cluster's and over what is left, the largest share of a
link or uplink left it takes, its completion over the deadline and a look-ahead: the
share of later jobs with a column that still fits after it, their mean and least best
rho among those (each alone).

**Reward** (at the last step; 0 before): ``(a * sum_j w_j rho_j / sum_j w_j + b * min_j
rho_j + c * sum_{j met} w_j / sum_j w_j) / (a + b + c)`` with ``(a, b, c)`` =
:data:`REWARD_WEIGHTS`, in [0, 1]; rho and deadlines are the columns' figures, which are
``multievaluate``'s (reserved sharing) for the multi-plan the episode makes (tested).

``AllocationEnv(menus)`` serves one mix or several (each episode picks one, seeded);
``augment=True`` (training) also draws a subset of the mix's jobs and Gavel's weights
anew each episode, so a few planned mixes give many episodes.

Example
-------
>>> pool = ColumnPool(minst, references(minst))                      # doctest: +SKIP
>>> env = AllocationEnv([MixMenu.build(minst, pool)])
>>> obs, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step(int(env.action_masks().argmax()))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...problem.errors import TimeLimitError
from ..rl_env import _require, gym

if gym is not None:
    from gymnasium import spaces

FRACTIONS = (0.125, 0.25, 0.5, 1.0)  # share of every allowed domain (menu slots 0-3)
SLICES = (tuple(f"all:{f:g}" for f in FRACTIONS) + ("half:0", "half:1") + tuple(f"quarter:{i}" for i in range(4))
          + ("largest:1", "largest:2"))
N_MENU = len(SLICES)  # menu columns per job (12)
SKIP = N_MENU  # the action "not admitted"
N_ACTIONS = N_MENU + 1
GLOBAL = 24  # global features
SLOT = 14  # features per action slot
OBS_MAX = 10.0
REWARD_WEIGHTS = (1.0, 1.0, 1.0)  # weighted rho, min rho, weight meeting deadlines
REWARD_INVALID = -1.0
EPS = 1e-10  # slack of the capacity checks (multievaluate allows 1e-9 on shares)
GAVEL_HIGH = (0.2, 5.0)  # augmentation: weight 5 with probability 0.2, else 1 (Gavel's rule)


def _clip(v: float) -> float:
    return float(min(OBS_MAX, max(-OBS_MAX, v)))


def slice_of(minst, j: int, kind: str) -> tuple[dict, dict, dict | None]:
    """The slice (GPUs per domain, link shares, uplink shares or None for the default) that
    menu entry ``kind`` (one of :data:`SLICES`) asks for job ``j``, before the pool clips
    it to the allowed domains and the quota.

    >>> slice_of(minst, 0, "all:0.5")                  # doctest: +SKIP
    ({'a': 32, 'b': 32}, {'a|b': 0.5}, None)
    >>> slice_of(minst, 0, "half:1")                   # doctest: +SKIP
    ({'b': 64}, {'a|b': 0.5}, None)
    """
    caps = {d.name: d.gpus for d in minst.domains}
    allowed = list(minst.allowed(j))
    big = sorted(allowed, key=lambda d: (-caps[d], allowed.index(d)))
    keys = [f"{l.a}|{l.b}" for l in minst.links]
    what, f = kind.split(":")
    if what == "all":
        f = float(f)
        return ({d: int(math.floor(f * caps[d] + 1e-9)) for d in allowed}, {k: f for k in keys}, None)
    i = int(f)
    if what == "largest":  # the i-th largest allowed domain alone
        return ({big[i - 1]: caps[big[i - 1]]} if i <= len(big) else {}), {}, None
    n = 2 if what == "half" else 4
    doms = big[i::n]  # round robin by size: groups of about equal GPUs, disjoint
    return {d: caps[d] for d in doms}, {k: 0.5 for k in keys}, None


def menu_columns(pool, j: int) -> list:
    """Job ``j``'s menu: one column (or None) per entry of :data:`SLICES`, made (and
    cached) by ``pool``; a duplicate of an earlier entry is None, and so is a slice on
    which the planner found no plan within its time limit."""
    out, seen = [], set()
    for kind in SLICES:
        g, links, ups = slice_of(pool.minst, j, kind)
        g = {d: n for d, n in g.items() if n > 0}
        try:
            col = pool.make(j, g, links, ups, source=f"rl:{kind}", trim_it=True) if g else None
        except TimeLimitError:  # the planner found no plan within the column's time limit: not offered
            col = None
        if col is not None:
            key = pool.key(j, col.gpus, col.link_share, col.uplink_share)
            if key in seen:
                col = None
            else:
                seen.add(key)
        out.append(col)
    return out


@dataclass
class MixMenu:
    """One mix ready for episodes: its menus as resource vectors.

    ``resources``: GPUs of every domain, then every link's share, then every uplink's
    share; ``capacity`` their amounts (GPUs, 1, 1); ``use[j, k]`` what menu column k of
    job j takes (NaN rows: no column); ``rho``, ``met``, ``completion`` its figures."""

    minst: object
    columns: list  # [job][slot] -> Column | None
    capacity: np.ndarray
    use: np.ndarray  # (J, N_MENU, R)
    exists: np.ndarray  # (J, N_MENU) bool
    rho: np.ndarray
    met: np.ndarray
    completion: np.ndarray
    alone_s: np.ndarray  # (J,) iterations * T* (s)
    n_domains: int
    n_links: int

    @classmethod
    def build(cls, minst, pool, columns: list | None = None) -> "MixMenu":
        """The menus of every job of ``minst`` (``columns``: given, else :func:`menu_columns`)."""
        J = len(minst.jobs)
        cols = columns if columns is not None else [menu_columns(pool, j) for j in range(J)]
        doms = list(minst.domain_names)
        keys = [f"{l.a}|{l.b}" for l in minst.links]
        D, L = len(doms), len(keys)
        cap = np.array([d.gpus for d in minst.domains] + [1.0] * L + [1.0] * D, float)
        use = np.zeros((J, N_MENU, D + L + D))
        exists = np.zeros((J, N_MENU), bool)
        rho, met, comp = np.zeros((J, N_MENU)), np.zeros((J, N_MENU), bool), np.zeros((J, N_MENU))
        di, li = {d: i for i, d in enumerate(doms)}, {k: i for i, k in enumerate(keys)}
        for j in range(J):
            for k, c in enumerate(cols[j]):
                if c is None:
                    continue
                exists[j, k] = True
                for d, n in c.gpus.items():
                    use[j, k, di[d]] = n
                for key, v in c.link_share.items():
                    use[j, k, D + li[key]] = v
                for d, u in c.uplink_share.items():
                    use[j, k, D + L + di[d]] = u
                rho[j, k], met[j, k], comp[j, k] = c.rho, c.deadline_met, c.completion_s
        alone = np.array([s.iterations * s.global_batch_size * s.seq_len
                          / max(pool.references.get(s.name) or 0.0, 1e-300) for s in minst.jobs])
        return cls(minst, cols, cap, use, exists, rho, met, comp, alone, D, L)


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
        self.choice: list[int] = []  # menu slot per allocated job (SKIP: not admitted)
        self.done = False
        self._mask = None

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

    def _fits(self, use: np.ndarray, free: np.ndarray) -> np.ndarray:
        """Whether each row of ``use`` (..., R) fits ``free`` (..., R)."""
        return np.all(use <= free + EPS * np.maximum(1.0, free), axis=-1)

    def action_masks(self) -> np.ndarray:
        if self.done:
            return np.zeros(N_ACTIONS, bool)
        if self._mask is None:
            j = self.jobs[self.t]
            mask = np.zeros(N_ACTIONS, bool)
            mask[:N_MENU] = self.mix.exists[j] & self._fits(self.mix.use[j], self.free[None, :])
            mask[SKIP] = not mask[:N_MENU].any()
            self._mask = mask
        return self._mask.copy()

    def step(self, action):
        if self.done:
            raise RuntimeError("step() after the episode ended: call reset()")
        a = int(action)
        if not (0 <= a < N_ACTIONS) or not self.action_masks()[a]:
            self.done = True
            return self._terminal_obs(), REWARD_INVALID, True, False, {"invalid_action": a}
        j = self.jobs[self.t]
        if a != SKIP:
            self.free = np.maximum(0.0, self.free - self.mix.use[j, a])
        self.choice.append(a)
        self.t += 1
        self._mask = None
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
        rho = np.array([0.0 if a == SKIP else self.mix.rho[j, a] for j, a in zip(self.jobs, self.choice)])
        met = np.array([False if a == SKIP else bool(self.mix.met[j, a]) for j, a in zip(self.jobs, self.choice)])
        return rho, met

    def allocation(self) -> dict[int, object]:
        """Mix job index -> its column (None: not admitted), for the jobs allocated so far."""
        return {j: (None if a == SKIP else self.mix.columns[j][a]) for j, a in zip(self.jobs, self.choice)}

    def _lookahead(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per action: the share of later jobs with a menu column that fits what the action
        leaves, and the mean and least over later jobs of their best such column's rho
        (0 for a job with none); ones when no job comes later."""
        mix, j, later = self.mix, self.jobs[self.t], self.jobs[self.t + 1:]
        if not later:
            one = np.ones(N_ACTIONS)
            return one, one, one
        after = np.vstack([self.free[None, :] - mix.use[j], self.free[None, :]])  # left after each action
        lu = mix.use[later]  # (K, N_MENU, R)
        ok = self._fits(lu[None, :, :, :], after[:, None, None, :]) & mix.exists[later][None]  # (A, K, N)
        best = np.where(ok, mix.rho[later][None], -1.0).max(-1)  # (A, K)
        fit_any = ok.any(-1)
        return fit_any.mean(-1), np.where(fit_any, best, 0.0).mean(-1), np.where(fit_any, best, 0.0).min(-1)

    def _completes(self, free: np.ndarray) -> bool:
        """Whether the later jobs, in order, each find a menu column within ``free`` when
        each takes its fitting column of fewest GPUs (then least shares)."""
        mix = self.mix
        for j in self.jobs[self.t + 1:]:
            ok = mix.exists[j] & self._fits(mix.use[j], free[None, :])
            if not ok.any():
                return False
            D = mix.n_domains
            cost = mix.use[j, :, :D].sum(-1) * 1e6 + mix.use[j, :, D:].sum(-1)
            k = int(np.argmin(np.where(ok, cost, np.inf)))
            free = free - mix.use[j, k]
        return True

    def safe_masks(self) -> np.ndarray:
        """:meth:`action_masks` less the columns after which the later jobs cannot all be
        given a column, each in turn taking its fitting column of fewest GPUs
        (:meth:`_completes`); the plain mask when that leaves nothing.  The allocator
        decodes with it when every job must be admitted."""
        mask = self.action_masks()
        if self.done or mask[SKIP]:
            return mask
        safe = np.zeros_like(mask)
        j = self.jobs[self.t]
        for a in np.nonzero(mask[:N_MENU])[0]:
            safe[a] = self._completes(self.free - self.mix.use[j, a])
        return safe if safe.any() else mask

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
        s = np.zeros((N_ACTIONS, SLOT))
        use = mix.use[j]  # (N_MENU, R)
        look_fit, look_mean, look_min = self._lookahead()
        s[:, 0] = mask
        s[:N_MENU, 1] = mix.exists[j]
        s[:N_MENU, 2] = mix.rho[j]
        s[:N_MENU, 3] = mix.met[j]
        s[:N_MENU, 4] = use[:, :D].sum(-1) / total
        s[:N_MENU, 5] = use[:, :D].sum(-1) / max(free[:D].sum(), 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(use[:, D:] > 0, use[:, D:] / np.maximum(free[D:], 1e-12), 0.0)
        s[:N_MENU, 6] = np.minimum(ratio[:, :L].max(-1) if L else 0.0, OBS_MAX)
        s[:N_MENU, 7] = np.minimum(ratio[:, L:].max(-1), OBS_MAX)
        if spec.deadline_hours is not None:
            s[:N_MENU, 8] = [_clip(math.log(max(c, 1e-9) / (3600.0 * spec.deadline_hours))) if e else 0.0
                             for c, e in zip(mix.completion[j], mix.exists[j])]
        s[:, 9] = look_fit
        s[:, 10] = look_mean
        s[:, 11] = look_min
        s[SKIP, 12] = 1.0
        s[:N_MENU, 13] = np.arange(N_MENU) / N_MENU
        s[~np.r_[mix.exists[j], True], 2:] = 0.0
        obs = np.concatenate([g, s.ravel()])
        return np.clip(obs, -OBS_MAX, OBS_MAX).astype(np.float32)
