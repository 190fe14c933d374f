"""Reinforcement-learning planner: a MaskablePPO policy (sb3-contrib) that
chooses one of greedy's best shapes and places every stage itself, in the
environment of :mod:`planner.solvers.rl_env`, with the per-slot network of
:mod:`planner.solvers.rl_net`.

The observation is instance-agnostic, so one policy can be trained across
several instances (``train([inst1, inst2, ...])``) and used on others.
Trained policies ship under ``models/rl/`` (``<instance>.zip`` for one
instance, ``general.zip`` for all, each with a ``.json`` sidecar naming the
training command, steps, seed and commit); ``planner plan --solver rl``
uses them when no ``--policy`` is given.

Planning (:func:`rl`) decodes the policy deterministically (the most
likely action at every step) once with the shape the policy chooses and once
on each shape of the menu, then samples ``samples`` more episodes from the
policy (a seeded NumPy generator, so the same seed gives the same plan),
simulates every distinct plan exactly and returns the best; the counts, not
the clock, bound the work, and ``time_limit`` stops the search early.
Every plan is the policy's own: greedy contributes the shapes on offer and
the reward's yardstick, never a placement -- except on an instance with
several GPU types, where each of the policy's placements is also tried with
the layer cut balanced for the types it lands on (greedy's typed partition),
and greedy's own plan is kept when every plan of the policy simulates slower
(``rl_found_by`` says which).

GPU types (SPEC v3 (g)): a policy of format 3 (``models/rl/types.zip``,
trained on mixed instances) reads the typed observation (each candidate's
type speed and memory headroom, the partial T_est at the candidate's type;
:class:`~planner.solvers.rl_env.PlacementEnv` with ``typed=True``) and is
the one used when the domains have several types; a single-type instance
keeps ``general.zip`` (format 2) and today's plans.  A format-2 policy on a
mixed instance is refused (``InputError``).

Needs the optional extra ``planner[rl]`` (gymnasium, stable-baselines3,
sb3-contrib, torch).

Example
-------
>>> p = rl(instance)                              # the shipped policy   # doctest: +SKIP
>>> model, curve = train(instance, steps=20_000, seed=0, out="policy.zip")  # doctest: +SKIP
>>> p = rl(instance, policy="policy.zip", samples=32)                     # doctest: +SKIP
"""

from __future__ import annotations

import csv
import json
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..problem.errors import InputError
from ..problem.files import atomic_path, models_dir, read_mapping, write_atomic
from ..problem.network import NetworkStates
from ..problem.plan import Plan, SolverInfo
from ..scoring.evaluator import Evaluator
from . import stop
from .rl_env import (GLOBAL, N_SLOTS, ORDERS, SHAPES, SLOT, SLOT_TYPED, PlacementEnv, _require, gym,  # noqa: F401
                     shape_menu)

SAMPLES = 16  # sampled episodes at inference, besides the deterministic one
FORMAT = 2  # policy files: 2 = shape choice + per-slot network (rl_env, rl_net), one GPU type
FORMAT_TYPED = 3  # the same with the typed slot features (rl_env.SLOT_TYPED): several GPU types
FORMATS = {FORMAT: SLOT, FORMAT_TYPED: SLOT_TYPED}  # format -> features per slot
POLICY_DIR = "rl"  # the shipped policies: models/rl/<instance>.zip, models/rl/general.zip, models/rl/types.zip
log = logging.getLogger("planner.rl")


class MultiEnv(gym.Env if gym else object):
    """Several :class:`PlacementEnv` (one per instance) behind one gymnasium env: each
    episode picks an instance (uniformly, seeded), or ``reset(options={"instance": i})``."""

    metadata = {"render_modes": []}

    def __init__(self, envs: list[PlacementEnv]):
        _require()
        self.envs = list(envs)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.current, self.index = self.envs[0], 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        i = options.pop("instance", None)
        self.index = int(self.np_random.integers(len(self.envs))) if i is None else int(i)
        self.current = self.envs[self.index]
        obs, info = self.current.reset(seed=int(self.np_random.integers(2**31)), options=options)
        return obs, {**info, "instance": self.index}

    def step(self, action):
        obs, r, term, trunc, info = self.current.step(action)
        return obs, r, term, trunc, {**info, "instance": self.index}

    def action_masks(self) -> np.ndarray:
        return self.current.action_masks()


# -- learning curves ------------------------------------------------------------------

@dataclass
class Curve:
    """What training saw: every episode (``episodes``: step, instance, shape, final
    reward, objective, reference's objective) and, every ``eval_every`` steps, the
    deterministic policy's plan on each instance's base network (``evals``: step,
    instance, objective, greedy's objective, their ratio)."""

    instances: list[str]
    episodes: list[tuple] = field(default_factory=list)
    evals: list[tuple] = field(default_factory=list)

    @property
    def steps(self) -> list[int]:
        return [e[0] for e in self.episodes]

    @property
    def rewards(self) -> list[float]:
        """Each episode's return (the final reward: shaping sums to 0)."""
        return [e[3] for e in self.episodes]

    def last_ratios(self) -> dict[str, float]:
        """Each instance's last evaluated ratio (policy / greedy, exact objective)."""
        out = {}
        for step, name, obj, ref, ratio in self.evals:
            out[name] = ratio
        return out

    def write_csv(self, path) -> None:
        with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["kind", "step", "instance", "shape", "reward", "objective", "greedy_objective", "ratio"])
            for step, name, shape, reward, obj, ref in self.episodes:
                w.writerow(["episode", step, name, shape, f"{reward:.6g}", f"{obj:.8g}", f"{ref:.8g}",
                            f"{obj / ref:.6g}" if ref > 0 and np.isfinite(ref) else ""])
            for step, name, obj, ref, ratio in self.evals:
                w.writerow(["eval", step, name, "", "", f"{obj:.8g}", f"{ref:.8g}", f"{ratio:.6g}"])

    def plot(self, path, title: str) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.2))
        names = self.instances
        for name in names:
            eps = [e for e in self.episodes if e[1] == name]
            if not eps:
                continue
            x = np.array([e[0] for e in eps])
            r = np.array([e[3] for e in eps])
            w = max(1, min(200, len(r) // 10))
            ma = np.convolve(r, np.ones(w) / w, mode="valid")
            a1.plot(x[w - 1:], ma, "-", lw=1.2, label=name)
        a1.axhline(0.0, color="k", lw=0.8, ls="--")
        a1.set_ylim(-2.05, 0.3)
        a1.set_xlabel("environment steps")
        a1.set_ylabel("episode return log(T_greedy / T)\n(moving mean)")
        a1.set_title("training episodes (base network and drifted states)", fontsize=9)
        a1.legend(fontsize=7, ncol=2, loc="lower right")
        for name in names:
            ev = [e for e in self.evals if e[1] == name]
            if ev:
                a2.plot([e[0] for e in ev], [e[4] for e in ev], ".-", lw=1.2, label=name)
        a2.axhline(1.0, color="k", lw=0.8, ls="--", label="greedy")
        a2.axhline(1.05, color="r", lw=0.8, ls=":", label="greedy + 5%")
        a2.set_yscale("log")
        a2.set_xlabel("environment steps")
        a2.set_ylabel("deterministic plan / greedy's (exact, base network)")
        a2.set_title("evaluation on the base network", fontsize=9)
        a2.legend(fontsize=7, ncol=2)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100)
        plt.close(fig)


# -- decoding ------------------------------------------------------------------------

@contextmanager
def one_thread():
    """torch on one thread meanwhile (tiny networks: more threads only contend)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def masked_probs(model, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The policy's action probabilities at ``obs``, zero where ``mask`` is false, renormalised."""
    import torch as th

    with th.no_grad():
        t, _ = model.policy.obs_to_tensor(obs)
        dist = model.policy.get_distribution(t, action_masks=mask[None, :])
        p = dist.distribution.probs[0].cpu().numpy().astype(float)
    p = np.where(mask, p, 0.0)
    return p / p.sum()


class EpisodeTimeout(Exception):
    """An episode passed its deadline before it placed every stage."""


def episode(model, env: PlacementEnv, options: dict | None = None, rng: np.random.Generator | None = None,
            deadline: float | None = None):
    """One episode of ``model`` in ``env``: the most likely action at every step, or
    (with ``rng``) actions sampled from the policy.  Returns (plan, exact objective
    under the episode's state, (menu index of the shape, order of placement)).
    ``deadline`` (``time.perf_counter()``): raise :class:`EpisodeTimeout` past it
    (an episode over 160 domains takes seconds)."""
    obs, _ = env.reset(seed=0, options=options)
    while True:
        if (deadline is not None and time.perf_counter() > deadline) or stop.requested():
            raise EpisodeTimeout
        mask = env.action_masks()
        if rng is None:
            a, _ = model.predict(obs, deterministic=True, action_masks=mask)
        else:
            p = masked_probs(model, obs, mask)
            a = rng.choice(len(p), p=p)
        obs, _, done, _, info = env.step(int(a))
        if done:
            return env.plan(), float(info["objective"]), (int(info["shape"]), ORDERS[info["order"]])


class Replanner:
    """A trained policy ready to plan ``instance`` for any network state: the
    environment (greedy's shape menu) is built once; each call decodes one
    deterministic episode (the policy chooses the shape), with ``per_shape``
    (the default) one more on each shape and order of the menu, and
    ``samples`` sampled ones (seeded; none by default), and returns the plan
    with the best exact objective under that state.  ``policy``: a path,
    the zip's bytes, a loaded model, or None for the shipped policy.
    ``time_limit`` (s): the budget the construction shares with the first call
    (greedy's menu gets 40% of what is left once the policy is loaded)."""

    def __init__(self, instance, policy=None, seed: int = 0, samples: int = 0, per_shape: bool = True, menu=None,
                 time_limit: float | None = None):
        _require()
        t0 = time.perf_counter()
        self.policy_path = None
        mixed = instance.heterogeneous
        if policy is None:
            policy = shipped_policy(instance.name, typed=mixed)
            if policy is None:
                raise InputError("the rl solver needs a trained policy: no shipped policy under models/rl/"
                                 + (" for several GPU types (types.zip)" if mixed else "")
                                 + "; planner rl train INSTANCE --out POLICY, then --policy POLICY", "policy")
        if isinstance(policy, (str, Path)):
            self.policy_path = str(policy)
        if isinstance(policy, (str, Path, bytes, bytearray)):
            self.model, self.meta = load_policy(policy)
        else:
            self.model, self.meta = policy, None
        fmt = policy_format(self.model)
        if fmt is None:
            raise InputError("the policy's network does not read this planner's observation "
                             f"({self.model.observation_space.shape[0]} features)", "policy",
                             file=self.policy_path)
        if mixed and fmt != FORMAT_TYPED:
            names = ", ".join(instance.gpu_types[u].name for u in instance.types_used)
            raise InputError(f"a policy of format {fmt} sees one GPU type; the domains have several ({names}): "
                             f"use a typed policy (format {FORMAT_TYPED}, models/rl/types.zip, or planner rl "
                             "train on mixed instances)", "policy", file=self.policy_path)
        self.greedy = None  # several GPU types: greedy's plan, kept when the policy's all simulate slower
        self.typed_cut = mixed  # several GPU types: each placement also with the layer cut balanced for its types
        self._space = None
        if mixed:
            from .greedy import greedy

            left = None if time_limit is None else max(0.05, 0.3 * (time_limit - (time.perf_counter() - t0)))
            self.greedy = greedy(instance, time_limit=left)
        if menu is None and time_limit is not None:  # 40% of what the policy's loading left
            menu = shape_menu(instance, time_limit=max(0.05, 0.4 * (time_limit - (time.perf_counter() - t0))))
        self.env = PlacementEnv(instance, menu=menu, reference=self.greedy, base_prob=1.0, rewards=False,
                                typed=fmt == FORMAT_TYPED)
        self.seed, self.samples, self.per_shape = seed, samples, per_shape

    def __call__(self, states: NetworkStates | None = None, time_limit: float | None = None,
                 samples: int | None = None) -> Plan:
        """The best plan for the first state of ``states`` (default: the base network)."""
        with one_thread():
            return self._search(states, time_limit, samples)

    def _episode(self, opts, rng, deadline):
        """:func:`episode` (plan, objective, shape) and a note; on an instance with several GPU
        types the plan is also tried with the layer cut balanced for the types its placement
        lands on (greedy's typed partition, :meth:`~planner.problem.space.PlanSpace.typed_partition`),
        and the faster of the two kept (the note then says so)."""
        plan, obj, sh = episode(self.model, self.env, opts, rng, deadline=deadline)
        if not self.typed_cut or not isinstance(plan.schedule, str):
            return plan, obj, sh, ""
        from .greedy import stage_types

        if self._space is None:
            from ..problem.space import PlanSpace

            self._space = PlanSpace(self.env.instance)
        inst = self.env.instance
        cuts = self._space.typed_partition(plan.tp, plan.micro_batch_size, plan.schedule, plan.num_stages,
                                           plan.num_micro_batches, stage_types(inst, plan.placement))
        if cuts is None or [tuple(c) for c in cuts] == [tuple(b) for b in plan.bounds()]:
            return plan, obj, sh, ""
        typed = Plan.build(cuts, plan.placement, tp=plan.tp, micro_batch_size=plan.micro_batch_size, instance=inst,
                           schedule=plan.schedule)
        t = self.env._exact(typed)  # under the episode's state
        if t < obj * (1 - 1e-12):
            return typed, t, sh, " (the layer cut balanced for its types)"
        return plan, obj, sh, ""

    def _search(self, states, time_limit, samples) -> Plan:
        env = self.env
        t0 = time.perf_counter()
        opts = None
        if states is not None:
            opts = {"state": (states.bandwidth_gbps[0], states.latency_ms[0])}
        deadline = None if time_limit is None else t0 + time_limit
        try:
            best_plan, best, shape, cut = self._episode(opts, None, deadline)
            found = "deterministic" + cut
        except EpisodeTimeout:  # no episode within the limit: the menu's best greedy plan, as time_limit
            m = min(range(len(env.menu)), key=lambda i: (env.menu[i].exact, env.menu[i].estimate))
            info = SolverInfo(name="rl", status="time_limit", time_s=time.perf_counter() - t0)
            if self.greedy is not None:  # several GPU types: greedy's own plan
                return self.greedy.model_copy(update={"predicted": None, "solver": info.model_copy(update={
                    "rl_samples": 0, "rl_found_by": "time limit before the first episode: greedy's plan"})})
            return env.menu[m].template.model_copy(update={"solver": info.model_copy(update={
                "rl_samples": 0, "rl_found_by": "time limit before the first episode: greedy's plan of the "
                                               "menu's best shape"})})
        n = 0
        seen = {best_plan.model_dump_json()}

        def consider(plan, obj, sh, cut, how):
            nonlocal best_plan, best, shape, found
            how += cut
            key = plan.model_dump_json()
            if key not in seen:
                seen.add(key)
                if obj < best * (1 - 1e-12):
                    best_plan, best, shape, found = plan, obj, sh, how

        def late():
            return time_limit is not None and time.perf_counter() - t0 > time_limit

        try:
            if self.per_shape:
                for i in range(len(env.menu)):
                    for o, order in enumerate(ORDERS):
                        if not late():
                            consider(*self._episode({**(opts or {}), "shape": i, "order": o}, None, deadline),
                                     f"deterministic on shape {i}, {order}")
            rng = np.random.default_rng(self.seed)
            for k in range(self.samples if samples is None else samples):
                if late():
                    break
                n += 1
                consider(*self._episode(opts, rng, deadline), f"sample {k + 1}")
        except EpisodeTimeout:  # the time limit ended an episode: the best so far
            pass
        if self.greedy is not None:  # several GPU types: greedy's plan if the policy's are all slower
            ev = Evaluator(env.instance, self.greedy)
            st = NetworkStates(env._bw[None, :], env._lat[None, :])  # the episodes' state
            obj = float(ev.objective(ev.iteration_times(st))[0])
            if obj < best * (1 - 1e-12):
                best_plan, best, shape = self.greedy.model_copy(update={"solver": None, "predicted": None}), obj, \
                    (-1, "greedy")
                found = "greedy's plan (every plan of the policy simulates slower)"
        info = SolverInfo(name="rl", status="heuristic", time_s=time.perf_counter() - t0)
        extra = {"rl_samples": n, "rl_distinct_plans": len(seen), "rl_found_by": found, "rl_shape": shape[0],
                 "rl_order": shape[1]}
        if self.policy_path:
            extra["rl_policy"] = self.policy_path
        return best_plan.model_copy(update={"solver": info.model_copy(update=extra)})


def rl(instance, policy=None, states: NetworkStates | None = None, seed: int = 0, time_limit: float | None = None,
       samples: int = SAMPLES, **_) -> Plan:
    """Plan with a trained policy (``policy``: a path, the zip's bytes, a loaded model,
    or None for the shipped one): the deterministic episode, one deterministic episode
    on each shape of the menu and ``samples`` sampled episodes (seeded); the best by
    exact simulation under ``states``' first state (default: the base network).
    ``time_limit`` (s) stops the search early (the best plan so far)."""
    t0 = time.perf_counter()
    with one_thread():
        # the time limit counts loading the policy (torch starts: 1-2 s) and the menu (greedy's shapes,
        # scored exactly), which gets 40% of what is left once the policy is loaded
        rep = Replanner(instance, policy, seed=seed, samples=samples, per_shape=True, time_limit=time_limit)
        left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
        return rep(states, time_limit=left)


# -- training ------------------------------------------------------------------------

def train(instances, steps: int = 20_000, seed: int = 0, out: str | Path | None = None, progress: bool = False,
          curve_png: str | Path | None = None, curve_csv: str | Path | None = None, eval_every: int | None = None,
          hidden: int = 64, base_prob: float = 0.5, meta: dict | None = None, n_steps: int = 1024,
          learning_rate: float = 3e-4, ent_coef: float = 0.01, force_shape: float = 0.5, init=None,
          typed: bool | None = None):
    """Train MaskablePPO on one instance or across several (a list: each episode picks
    one); returns (model, :class:`Curve`).

    Reproducible for a seed (single CPU thread).  Every ``eval_every`` steps
    (default: 20 evaluations over the run) the deterministic policy plans
    each instance's base network and its exact objective over greedy's is
    logged (``planner.rl``, INFO) and kept in the curve.  With ``out`` the
    policy is saved as ``out`` (zip) plus ``out.json`` (instances, steps,
    seed, the last evaluation and ``meta``); ``curve_png``/``curve_csv``
    write the learning curve.  ``init``: a model (or path) to continue from.
    ``typed``: the typed observation (policy format 3); default when some instance has
    several GPU types (then every instance is seen typed).
    """
    _require()
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger

    from .rl_net import SlotPolicy, slot_policy_kwargs

    torch.set_num_threads(1)
    insts = list(instances) if isinstance(instances, (list, tuple)) else [instances]
    names = [i.name for i in insts]
    t_setup = time.perf_counter()
    typed = any(i.heterogeneous for i in insts) if typed is None else bool(typed)
    envs = [PlacementEnv(inst, seed=seed, base_prob=base_prob, force_shape=force_shape, typed=typed)
            for inst in insts]
    evals = [PlacementEnv(inst, menu=e.menu, reference=e.reference, base_prob=1.0, typed=typed)
             for inst, e in zip(insts, envs)]
    log.info("rl: environments of %d instance(s) ready in %.1f s", len(insts), time.perf_counter() - t_setup)
    env = envs[0] if len(envs) == 1 else MultiEnv(envs)
    curve = Curve(names)
    eval_every = eval_every or max(n_steps, steps // 20)
    batch = min(256, n_steps)
    if init is not None:
        model = init if not isinstance(init, (str, Path)) else load_policy(init)[0]
        if policy_format(model) != (FORMAT_TYPED if typed else FORMAT):
            raise InputError(f"the policy to continue is of format {policy_format(model)}; these instances need "
                             f"format {FORMAT_TYPED if typed else FORMAT} ({'several GPU types' if typed else 'one GPU type'})",
                             "--init")
        model.set_env(env)
    else:
        model = MaskablePPO(SlotPolicy, env, policy_kwargs=slot_policy_kwargs(hidden), seed=seed, n_steps=n_steps,
                            batch_size=batch, n_epochs=6, learning_rate=learning_rate, gamma=1.0, gae_lambda=0.95,
                            ent_coef=ent_coef, verbose=0, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<date> folder in the temp directory

    def evaluate(step):
        for name, ev in zip(names, evals):
            _, obj, _ = episode(model, ev)
            ref = ev.reference_objective()
            curve.evals.append((step, name, obj, ref, obj / ref if ref > 0 else float("nan")))
        last = curve.last_ratios()
        recent = curve.rewards[-200:]
        log.info("rl: %d of %d steps, %d episodes, mean return (last 200) %+.3f; plan / greedy: %s", step, steps,
                 len(curve.episodes), float(np.mean(recent)) if recent else float("nan"),
                 ", ".join(f"{k} {v:.3f}" for k, v in last.items()))

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"]):
                if done and "objective" in info:  # (an unmasked agent's invalid action has none)
                    name = names[info.get("instance", 0)]
                    curve.episodes.append((self.num_timesteps, name, f"{info['shape']}{'rs'[info['order']]}",
                                           info["final"],
                                           info["objective"], info["reference"]))
            if self.num_timesteps % eval_every == 0:
                evaluate(self.num_timesteps)
            return True

    t0 = time.perf_counter()
    evaluate(0)
    model.learn(total_timesteps=steps, callback=Record(), progress_bar=progress, reset_num_timesteps=init is None)
    if not curve.evals or curve.evals[-1][0] != model.num_timesteps:
        evaluate(model.num_timesteps)
    train_s = time.perf_counter() - t0
    if out is not None:
        save_policy(model, out, {"format": FORMAT_TYPED if typed else FORMAT, "instances": names, "steps": steps, "seed": seed,
                                 "hidden": hidden, "base_prob": base_prob, "force_shape": force_shape,
                                 "learning_rate": learning_rate, "ent_coef": ent_coef, "train_s": round(train_s, 1),
                                 "last_eval_ratio": curve.last_ratios(), **(meta or {})})
    if curve_csv is not None:
        curve.write_csv(curve_csv)
    if curve_png is not None:
        curve.plot(curve_png, f"MaskablePPO, {steps} steps, seed {seed}: {', '.join(names)}")
    return model, curve


# -- policy files ----------------------------------------------------------------------

def save_policy(model, out, meta: dict) -> Path:
    """``out`` (zip; ``.zip`` added when missing) and ``out.json`` (``meta``)."""
    out = Path(out)
    out = out if out.suffix == ".zip" else out.with_name(out.name + ".zip")  # where stable-baselines3 writes
    with atomic_path(out) as tmp:
        model.save(tmp)
    write_atomic(str(out) + ".json", json.dumps(meta, indent=2) + "\n")
    return out


def shipped_policy(name: str, typed: bool = False) -> Path | None:
    """The shipped policy for instance ``name``: ``models/rl/<name>.zip``, else
    ``models/rl/general.zip`` (``typed``: ``models/rl/types.zip``, the policy of
    format 3 for instances with several GPU types), else None."""
    root = models_dir() / POLICY_DIR
    for cand in (root / f"{name}.zip", root / ("types.zip" if typed else "general.zip")):
        if cand.is_file() and Path(str(cand) + ".json").is_file():
            return cand
    return None


def load_policy(path):
    """(model, meta) from a saved policy: a path (with its ``.json`` metadata) or the
    zip's bytes (meta None)."""
    _require()
    import io

    from sb3_contrib import MaskablePPO

    if isinstance(path, (bytes, bytearray)):
        return MaskablePPO.load(io.BytesIO(bytes(path)), device="cpu"), None
    path = Path(path)
    meta_path = Path(str(path) + ".json")
    meta = read_mapping(meta_path)
    if not path.is_file():
        raise InputError("no such file (a policy saved by planner rl train)", file=str(path))
    try:
        model = MaskablePPO.load(path, device="cpu")
    except Exception as err:  # a corrupt or foreign zip: the loader's errors vary (zipfile, pickle, torch)
        raise InputError(f"not a saved policy: {type(err).__name__}: {err}", file=str(path)) from None
    fmt = meta.get("format")
    if fmt not in FORMATS or model.action_space.n != N_SLOTS:
        if isinstance(fmt, int) and fmt > max(FORMATS):
            raise InputError(f"a policy of a newer planner (format {fmt}, this one reads "
                             f"{' and '.join(map(str, FORMATS))})", "format", file=str(path) + ".json")
        raise InputError(f"a policy of an older planner (format {fmt if fmt is not None else 1}, this one reads "
                         f"{' and '.join(map(str, FORMATS))}): retrain it with planner rl train", file=str(path))
    if policy_format(model) != fmt:
        raise InputError(f"format {fmt} ({'typed' if fmt == FORMAT_TYPED else 'one GPU type'}: "
                         f"{GLOBAL + N_SLOTS * FORMATS[fmt]} features) does not match the policy's network "
                         f"({model.observation_space.shape[0]} features, format {policy_format(model)})",
                         "format", file=str(path) + ".json")
    return model, meta


def policy_format(model) -> int | None:
    """The format a loaded policy reads, from its observation's size: :data:`FORMAT`
    (one GPU type), :data:`FORMAT_TYPED` (several), or None (neither)."""
    n = int(model.observation_space.shape[0])
    return next((f for f, w in FORMATS.items() if n == GLOBAL + N_SLOTS * w), None)


def policy_bytes(model) -> bytes:
    """A trained model as the bytes of its zip (to ship between processes)."""
    import io

    buf = io.BytesIO()
    model.save(buf)
    return buf.getvalue()
