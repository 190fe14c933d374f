"""The PPO allocator for several jobs (SPEC 10, issue 27 item 5): a MaskablePPO policy
(sb3-contrib, as the single-job RL planner) that gives each job, one at a time, one
column of a small menu (:mod:`.rl_env`), trained on generated mixes for a
multi-objective reward (weighted rho, the least rho, the weight meeting deadlines).

:func:`allocate` is a baseline-like method, ``(minst, references, pool=None,
objective=None, ...) -> MultiPlan``, also reached as ``planner.multiplan(minst,
allocator="rl")`` and ``planner multiplan --allocator rl``: it decodes the policy's most
likely episode, planning every menu slice it meets (single-job plans on slices of what
the earlier jobs left: the only real cost), then ``samples`` sampled ones (seeded) on the
columns planned so far, and keeps the multi-plan best by the objective
(:func:`~planner.scoring.multievaluate.objective_value`, the core's; ties by the reward).
Every column fits what the earlier jobs left less the later jobs' fallbacks (the mask),
lies in its job's allowed domains and quota (the pool clips), and is scored by the core's
``job_time``: the multi-plan is feasible and admits every job whenever every job has a
fallback (a plan on its equal slice, or on a share of what the others' leave); else a
job may be left out, which only the ``deadline`` objective allows.

The shipped policy is ``models/rl/multijob.zip`` with ``multijob.zip.json`` (the
command, steps, seed, commit, the training mixes and the last evaluation) and its
learning curve (``multijob.csv``, ``multijob.png``); ``planner rl train-multijob``
makes one.

Example
-------
>>> refs = references(minst)                                        # doctest: +SKIP
>>> mp = allocate(minst, refs)                                      # the shipped policy
>>> model, curve = train([minst1, minst2], [refs1, refs2], steps=20_000, out="alloc.zip")
"""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from ...problem.errors import InputError
from ...problem.files import atomic_path, models_dir, read_mapping, write_atomic
from ...problem.plan import SolverInfo
from ...scoring.multievaluate import JobFigures, better, objective_value
from ..rl import masked_probs
from .columns import ColumnPool, assemble
from .rl_env import GLOBAL, N_ACTIONS, N_MENU, REWARD_WEIGHTS, SKIP, SLOT, AllocationEnv, MixMenu, reward_of

log = logging.getLogger("planner.rl")

KIND = "multijob"  # the policy file's "kind" (the single-job policies have none)
FORMAT = 2  # 2: dynamic menus with fallbacks (rl_env); 1 was the static menus
SAMPLES = 16
WARM_EPISODES = 2  # live episodes of random valid actions per training mix before training (its library)
COLUMN_TIME_LIMIT = 1.0  # s per single-job plan of a menu column (greedy)
SHIPPED = "multijob.zip"


# -- menus ---------------------------------------------------------------------------

def make_menu(minst, references: dict, pool: ColumnPool | None = None, solver: str = "greedy", seed: int = 0,
              column_time_limit: float | None = COLUMN_TIME_LIMIT, fast: bool = True) -> MixMenu:
    """``minst`` ready for episodes (:class:`.rl_env.MixMenu`) with ``pool`` (default: a new
    :class:`ColumnPool` of ``solver`` with ``column_time_limit`` s per plan); menu slices
    are planned as episodes reach them (``fast``: the pool's fast greedy), each once."""
    if pool is None:
        pool = ColumnPool(minst, references, solver=solver, seed=seed, column_time_limit=column_time_limit)
    return MixMenu.build(minst, pool, fast=fast)


# -- decoding --------------------------------------------------------------------------

def episode(model, env: AllocationEnv, options: dict | None = None, rng: np.random.Generator | None = None,
            safe: bool = False):
    """One episode: the most likely action at every step, or (``rng``) sampled ones;
    ``safe``: among the actions of :meth:`AllocationEnv.safe_masks` (none after which the
    later jobs cannot all be given a column, while another does not).  Returns (reward,
    {mix job index: Column or None})."""
    obs, _ = env.reset(seed=0, options=options)
    while True:
        mask = env.safe_masks() if safe else env.action_masks()
        if rng is None:
            a, _ = model.predict(obs, deterministic=True, action_masks=mask)
        else:
            a = rng.choice(N_ACTIONS, p=masked_probs(model, obs, mask))
        obs, r, done, _, info = env.step(int(a))
        if done:
            return float(r), env.allocation()


def column_figures(minst, cols: dict) -> list[JobFigures]:
    """The SPEC 10 figures each job's column says (None: not admitted), file order, for
    :func:`objective_value`; they are ``multievaluate``'s (reserved) for the same multi-plan."""
    out = []
    for j, spec in enumerate(minst.jobs):
        c = cols.get(j)
        if c is None:
            out.append(JobFigures(spec.name, False, None, None, None, 0.0, None, None, False, None, True))
        else:
            out.append(JobFigures(spec.name, True, None, c.completion_s / spec.iterations, c.throughput, c.rho,
                                  None, c.completion_s, bool(c.deadline_met), c.cost, True))
    return out


def allocate(minst, references: dict, pool: ColumnPool | None = None, objective: str | None = None,
             policy=None, samples: int = SAMPLES, seed: int = 0, menu: MixMenu | None = None,
             column_time_limit: float | None = COLUMN_TIME_LIMIT, live_episodes: int = 1,
             polish_rounds: int | None = None):
    """The PPO allocator's multi-plan (see the module docstring).  ``policy``: a path, a
    loaded model or None (the shipped ``models/rl/multijob.zip``); ``samples`` sampled
    episodes besides the most likely one (a NumPy generator seeded with ``seed``); the
    first ``live_episodes`` plan every menu slice they meet, the others take the best
    column planned so far within each slice (:class:`.rl_env.MixMenu`).
    ``solver`` extras: ``rl_reward`` (of the kept episode), ``rl_found_by``,
    ``rl_episodes``, ``rl_menu_s`` (s to make the menus), ``rl_policy``.

    >>> mp = allocate(minst, references(minst), samples=8)         # doctest: +SKIP
    """
    from ..rl import one_thread

    t0 = time.perf_counter()
    objective = objective or minst.options.multi_objective
    path = None
    if policy is None:
        policy = shipped_policy()
        if policy is None:
            raise InputError("the rl allocator needs a trained policy: none shipped as models/rl/multijob.zip; "
                             "planner rl train-multijob --out POLICY, then --policy POLICY", "policy")
    if isinstance(policy, (str, Path)):
        path = str(policy)
        model, _ = load_policy(policy)
    else:
        model = policy
    if menu is None:
        menu = make_menu(minst, references, pool=pool, column_time_limit=column_time_limit)
    plans0, t_plan0 = menu.pool.plans_made, menu.pool.plan_seconds
    env = AllocationEnv([menu])
    safe = False  # the fallbacks keep room for the later jobs (rl_env): every action is safe
    best, best_key, found, n = None, None, None, 0
    rng = np.random.default_rng(seed)
    with one_thread():
        for k in range(1 + max(0, int(samples))):
            menu.live = k < live_episodes
            r, cols = episode(model, env, None, None if k == 0 else rng, safe=safe)
            n += 1
            figs = column_figures(minst, cols)
            key = objective_value(objective, figs, minst)
            if best is None or better(objective, key, best_key) or (key == best_key and r > best[0] + 1e-12):
                best, best_key = (r, cols), key
                found = "deterministic" if k == 0 else f"sample {k}"
    menu.live = True
    r, cols = best
    t_pol = time.perf_counter()
    cols, polished = polish(menu, cols, objective, polish_rounds) if polish_rounds != 0 else (cols, 0)
    if polished:
        figs = column_figures(minst, cols)
        r = reward_of([f.rho for f in figs], [f.deadline_met for f in figs], [s.weight for s in minst.jobs])
    mp = assemble(minst, objective, [cols.get(j) for j in range(len(minst.jobs))], references)
    extra = {"rl_reward": r, "rl_found_by": found, "rl_episodes": n,
             "rl_menu_s": round(menu.pool.plan_seconds - t_plan0, 3), "rl_plans": menu.pool.plans_made - plans0,
             "rl_fallbacks": env.fb is not None, "rl_polished": polished,
             "rl_polish_s": round(time.perf_counter() - t_pol, 3)}
    if path:
        extra["rl_policy"] = path
    info = SolverInfo(name="rl_allocator", status="heuristic", time_s=time.perf_counter() - t0, **extra)
    return mp.model_copy(update={"solver": info})


def polish(menu: MixMenu, cols: dict, objective: str, rounds: int | None = None) -> tuple[dict, int]:
    """The kept episode improved after the fact: the job of least rho over weight
    (ties: file order) is planned again on its column plus everything no job holds
    (live, lean), and takes the new column when the objective gets better
    (:func:`objective_value`); repeated while it does, at most ``rounds`` times
    (default: the jobs' count).  Every column still fits: the new one lies within the
    old one and what was free.  Returns (columns, how many were replaced)."""
    minst = menu.minst
    cols = dict(cols)
    live, menu.live = menu.live, True
    done = 0
    try:
        for _ in range(len(minst.jobs) if rounds is None else int(rounds)):
            held = [j for j, c in cols.items() if c is not None]
            if not held:
                break
            free = menu.capacity - sum((menu.use(cols[j]) for j in held), np.zeros_like(menu.capacity))
            j = min(held, key=lambda i: (cols[i].rho / minst.jobs[i].weight, i))
            bound = np.maximum(free, 0.0) + menu.use(cols[j])
            D, L = menu.n_domains, menu.n_links
            doms, keys = minst.domain_names, menu.link_keys
            gpus = {doms[i]: int(math.floor(bound[i] + 1e-9)) for i in range(D) if doms[i] in minst.allowed(j)}
            gpus = {d: n for d, n in gpus.items() if n > 0}
            links = {k: math.floor(bound[D + i] * 1e6) / 1e6 for i, k in enumerate(keys)}
            ups = {d: math.floor(bound[D + L + doms.index(d)] * 1e6) / 1e6 for d in gpus}
            new = menu.column(j, gpus, {k: v for k, v in links.items() if v > 0}, ups, "rl:polish")
            if new is None or not menu.fits(menu.use(new), bound):
                break
            trial = {**cols, j: new}
            old_key = objective_value(objective, column_figures(minst, cols), minst)
            new_key = objective_value(objective, column_figures(minst, trial), minst)
            if not better(objective, new_key, old_key):
                break
            cols, done = trial, done + 1
    finally:
        menu.live = live
    return cols, done


# -- training ------------------------------------------------------------------------------

def train(minsts: list, references: list[dict], steps: int = 30_000, seed: int = 0, out=None,
          menus: list[MixMenu] | None = None, hidden: int = 64, n_steps: int = 512, learning_rate: float = 3e-4,
          ent_coef: float = 0.01, min_jobs: int = 2, eval_every: int | None = None, meta: dict | None = None,
          curve_csv=None, curve_png=None, column_time_limit: float | None = COLUMN_TIME_LIMIT,
          warm_episodes: int = WARM_EPISODES):
    """Train MaskablePPO (an MLP policy, ``hidden`` x 2) on the mixes ``minsts`` (each with
    its ``references``; ``menus``: made already) with the augmented environment (a subset
    of each mix's jobs and Gavel's weights drawn per episode).  Reproducible for a seed
    (one torch thread).  Every ``eval_every`` steps the deterministic policy allocates
    each whole mix; its reward and a yardstick (each job, in the environment's order, its
    menu column of highest rho: :func:`greedy_reward`) go to the curve.  Menu slices
    are planned as episodes reach them (cached): ``plan_s`` in the record is their time,
    within ``train_s``.
    With ``out``: the policy and ``out.json`` (:func:`save_policy`).  Returns (model,
    curve rows: (kind, step, mix, reward, yardstick))."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger

    torch.set_num_threads(1)
    t_setup = time.perf_counter()
    if menus is None:
        menus = [make_menu(m, r, column_time_limit=column_time_limit) for m, r in zip(minsts, references)]
    warm_rng = np.random.default_rng(seed)
    for m in menus:  # the libraries: live episodes (best rho first, then random valid actions)
        m.live = True
        greedy_reward(m)
        wenv = AllocationEnv([m])
        for e in range(warm_episodes):
            wenv.reset(seed=e)
            while not wenv.done:
                wenv.step(int(warm_rng.choice(np.nonzero(wenv.action_masks())[0])))
        m.live = False
        log.info("rl allocator: %s: %d columns in the library after %d live episodes", m.minst.name,
                 sum(len(v) for v in m.library.values()), warm_episodes + 1)
    warm_s = time.perf_counter() - t_setup
    log.info("rl allocator: %d mixes ready in %.1f s", len(menus), warm_s)
    env = AllocationEnv(menus, augment=True, min_jobs=min_jobs)
    env.reset(seed=seed)
    ev_env = AllocationEnv(menus)
    names = [m.minst.name for m in menus]
    rows: list[tuple] = []
    eval_every = eval_every or max(n_steps, steps // 20)
    model = MaskablePPO("MlpPolicy", env, policy_kwargs={"net_arch": [hidden, hidden]}, seed=seed,
                        n_steps=n_steps, batch_size=min(128, n_steps), n_epochs=6, learning_rate=learning_rate,
                        gamma=1.0, gae_lambda=0.95, ent_coef=ent_coef, verbose=0, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))
    yard = [greedy_reward(m) for m in menus]

    def evaluate(step):
        got = []
        for i, name in enumerate(names):
            r, _ = episode(model, ev_env, {"mix": i})
            rows.append(("eval", step, name, r, yard[i]))
            got.append(r)
        log.info("rl allocator: %d of %d steps; deterministic reward %.4f (greedy order %.4f) over %d mixes",
                 step, steps, float(np.mean(got)), float(np.mean(yard)), len(names))

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"]):
                if done and "final" in info:
                    rows.append(("episode", self.num_timesteps, "", info["final"], float("nan")))
            if self.num_timesteps % eval_every == 0:
                evaluate(self.num_timesteps)
            return True

    t0 = time.perf_counter()
    evaluate(0)
    model.learn(total_timesteps=steps, callback=Record())
    if not rows or rows[-1][1] != model.num_timesteps:
        evaluate(model.num_timesteps)
    train_s = time.perf_counter() - t0
    last = {r[2]: round(r[3], 6) for r in rows if r[0] == "eval" and r[1] == model.num_timesteps}
    if out is not None:
        save_policy(model, out, {"kind": KIND, "format": FORMAT, "mixes": names, "steps": steps, "seed": seed,
                                 "hidden": hidden, "n_steps": n_steps, "learning_rate": learning_rate,
                                 "ent_coef": ent_coef, "min_jobs": min_jobs, "reward_weights": list(REWARD_WEIGHTS),
                                 "train_s": round(train_s, 1), "warm_s": round(warm_s, 1),
                                 "warm_episodes": warm_episodes,
                                 "library": {m.minst.name: sum(len(v) for v in m.library.values()) for m in menus},
                                 "plan_s": round(sum(m.pool.plan_seconds for m in menus), 1),
                                 "plans": sum(m.pool.plans_made for m in menus),
                                 "last_eval_reward": last,
                                 "greedy_order_reward": {n: round(y, 6) for n, y in zip(names, yard)},
                                 **(meta or {})})
    if curve_csv is not None:
        with atomic_path(curve_csv) as tmp, open(tmp, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["kind", "step", "mix", "reward", "greedy_order_reward"])
            for kind, step, name, r, y in rows:
                w.writerow([kind, step, name, f"{r:.6g}", "" if math.isnan(y) else f"{y:.6g}"])
    if curve_png is not None:
        _plot(rows, curve_png, f"MaskablePPO allocator, {steps} steps, seed {seed}, {len(names)} mixes")
    return model, rows


def greedy_reward(menu: MixMenu) -> float:
    """A yardstick for the curve: jobs in the environment's order, each its valid menu
    column of highest rho (ties: fewer GPUs); the reward of that episode."""
    env = AllocationEnv([menu])
    env.reset(seed=0)
    r = 0.0
    while not env.done:
        mask = env.action_masks()
        if mask[SKIP]:
            a = SKIP
        else:
            cols = env.current_menu()
            cand = [k for k in range(N_MENU) if mask[k]]
            a = max(cand, key=lambda k: (cols[k].rho, -cols[k].total_gpus, -k))
        _, r, _, _, _ = env.step(a)
    return float(r)


def _plot(rows, path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    ep = [r for r in rows if r[0] == "episode"]
    if ep:
        x = np.array([r[1] for r in ep])
        y = np.array([r[3] for r in ep])
        w = max(1, min(200, len(y) // 10))
        a1.plot(x[w - 1:], np.convolve(y, np.ones(w) / w, mode="valid"), lw=1.2)
    a1.set_xlabel("environment steps")
    a1.set_ylabel("episode reward (moving mean)")
    a1.set_title("training episodes (subsets of the mixes, redrawn weights)", fontsize=9)
    ev = [r for r in rows if r[0] == "eval"]
    steps = sorted({r[1] for r in ev})
    a2.plot(steps, [np.mean([r[3] for r in ev if r[1] == s]) for s in steps], ".-", label="policy (deterministic)")
    a2.plot(steps, [np.mean([r[4] for r in ev if r[1] == s]) for s in steps], "--", label="best rho first")
    a2.set_xlabel("environment steps")
    a2.set_ylabel("mean reward over the training mixes")
    a2.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)


# -- policy files ----------------------------------------------------------------------------

def save_policy(model, out, meta: dict) -> Path:
    """``out`` (zip; ``.zip`` added when missing) and ``out.json`` (``meta``)."""
    out = Path(out)
    out = out if out.suffix == ".zip" else out.with_name(out.name + ".zip")
    with atomic_path(out) as tmp:
        model.save(tmp)
    write_atomic(str(out) + ".json", json.dumps(meta, indent=2) + "\n")
    return out


def shipped_policy() -> Path | None:
    """``models/rl/multijob.zip`` when it and its ``.json`` are there, else None."""
    from ..rl import POLICY_DIR

    p = models_dir() / POLICY_DIR / SHIPPED
    return p if p.is_file() and Path(str(p) + ".json").is_file() else None


def load_policy(path):
    """(model, meta) of an allocator policy file and its ``.json``; ``InputError`` naming the
    file when either is missing, unreadable or of another kind (a single-job policy)."""
    from ..rl_env import _require

    _require()
    from sb3_contrib import MaskablePPO

    path = Path(path)
    meta = read_mapping(Path(str(path) + ".json"))
    if not path.is_file():
        raise InputError("no such file (a policy saved by planner rl train-multijob)", file=str(path))
    if meta.get("kind") != KIND:
        raise InputError(f"not an allocator policy (kind {meta.get('kind')!r}, expected {KIND!r}: made by "
                         "planner rl train-multijob)", "kind", file=str(path) + ".json")
    if meta.get("format") != FORMAT:
        raise InputError(f"an allocator policy of format {meta.get('format')!r}; this planner reads {FORMAT}",
                         "format", file=str(path) + ".json")
    try:
        model = MaskablePPO.load(path, device="cpu")
    except Exception as err:  # a corrupt or foreign zip: the loader's errors vary (zipfile, pickle, torch)
        raise InputError(f"not a saved policy: {type(err).__name__}: {err}", file=str(path)) from None
    want = GLOBAL + N_ACTIONS * SLOT
    if tuple(model.observation_space.shape) != (want,) or model.action_space.n != N_ACTIONS:
        raise InputError(f"the policy reads {model.observation_space.shape[0]} features and {model.action_space.n} "
                         f"actions; the allocator's environment has {want} and {N_ACTIONS}", file=str(path))
    return model, meta
