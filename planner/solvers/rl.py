"""Reinforcement-learning planner: a gymnasium environment in which an agent
places the stages of a plan one (replica, stage) at a time, and a
MaskablePPO (sb3-contrib) policy trained on it that re-plans in
milliseconds for whatever network state it is shown.

The shape (tensor parallelism, micro-batch, schedule, replicas, stages and
partition) is the greedy plan's on the base network; the agent decides the
domain assignment, which is what changing networks change.  Each episode
draws a network state from a generated week of WAN drift
(``planner.problem.traces``); the observation holds that state (every link's
bandwidth and latency relative to base), the placement so far, the free
stage slots per domain and the position being placed; actions that would
overfill a domain are masked.  The reward, given at the last step, is
(T_ref - T) / T_ref with T the plan's T_est under the episode's state and
T_ref the greedy plan's (0: as good as greedy; -1 when the plan cannot run).

Needs the optional extra ``planner[rl]`` (gymnasium, stable-baselines3,
sb3-contrib, torch).

Example
-------
>>> env = PlacementEnv(instance, seed=0)                       # doctest: +SKIP
>>> obs, info = env.reset(seed=0)
>>> obs, reward, terminated, truncated, info = env.step(int(env.action_masks().argmax()))
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ..scoring.evaluator import Evaluator
from ..problem.errors import InputError
from ..problem.files import atomic_path, read_text, write_atomic
from ..problem.network import NetworkStates
from ..problem.plan import Plan, SolverInfo

OBS_MAX = 10.0

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError:  # the optional extra is missing: fail when used, not on import
    gym = None


def _require():
    if gym is None:
        raise ImportError("the RL planner needs the optional extra: pip install 'planner[rl]'")


class PlacementEnv(gym.Env if gym else object):
    """Place (replica, stage) pairs on domains; see the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, instance, template: Plan | None = None, hours: float = 24 * 7, seed: int = 0):
        _require()
        from .greedy import greedy
        from ..problem.traces import generate

        self.instance = instance
        self.template = template or greedy(instance)
        t = self.template
        self.R, self.S, self.tp = t.replicas, t.num_stages, t.tp
        self.domains = list(instance.domain_names)
        self.D = len(self.domains)
        self.slots0 = np.array([(d.gpus // self.tp) if d.gpus_per_node >= self.tp else 0
                                for d in instance.domains], dtype=np.int64)
        self.trace = generate(instance, hours=hours, seed=seed)
        self.base_bw = np.array([l.bandwidth_gbps for l in instance.links])
        self.base_lat = np.maximum(np.array([l.latency_ms for l in instance.links]), 1e-9)
        self.L = len(instance.links)
        self.n = self.R * self.S
        size = 2 * self.L + self.n * self.D + self.D + self.n
        # link figures relative to base are clipped at OBS_MAX; the rest lies in [0, 1]
        self.observation_space = spaces.Box(low=0.0, high=OBS_MAX, shape=(size,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.D)
        self._state = None
        self._pos = 0

    # -- gymnasium API ----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options and "state" in options:
            bw, lat = options["state"]
        else:
            k = int(self.np_random.integers(self.trace.epochs))
            bw, lat = self.trace.states.bandwidth_gbps[k], self.trace.states.latency_ms[k]
        self._state = NetworkStates(np.asarray(bw, float)[None, :], np.asarray(lat, float)[None, :])
        self._ref = float(Evaluator(self.instance, self.template).estimate_times(self._state)[0])
        self._placed = np.full(self.n, -1, dtype=np.int64)
        self._free = self.slots0.copy()
        self._pos = 0
        return self._obs(), {}

    def step(self, action: int):
        action = int(action)
        if not self.action_masks()[action]:
            raise ValueError(f"action {action} (domain {self.domains[action]}) is masked")
        self._placed[self._pos] = action
        self._free[action] -= 1
        self._pos += 1
        if self._pos < self.n:
            return self._obs(), 0.0, False, False, {}
        plan = self.plan()
        T = float(Evaluator(self.instance, plan).estimate_times(self._state)[0])
        if not np.isfinite(T):
            reward = -1.0
        elif not np.isfinite(self._ref):
            reward = 1.0
        else:
            reward = float(max(-1.0, (self._ref - T) / self._ref))
        return self._obs(), reward, True, False, {"estimate_s": T, "reference_s": self._ref}

    def action_masks(self) -> np.ndarray:
        return self._free > 0

    # -- helpers ------------------------------------------------------------------------
    def _obs(self) -> np.ndarray:
        bw = np.minimum(self._state.bandwidth_gbps[0] / np.maximum(self.base_bw, 1e-9), OBS_MAX)
        lat = np.minimum(self._state.latency_ms[0] / self.base_lat, OBS_MAX)
        onehot = np.zeros((self.n, self.D), dtype=np.float32)
        done = self._placed >= 0
        onehot[np.nonzero(done)[0], self._placed[done]] = 1.0
        free = self._free / np.maximum(self.slots0, 1)
        posv = np.zeros(self.n, dtype=np.float32)
        if self._pos < self.n:
            posv[self._pos] = 1.0
        return np.concatenate([bw, lat, onehot.ravel(), free, posv]).astype(np.float32)

    def plan(self) -> Plan:
        rows = self._placed.reshape(self.R, self.S)
        placement = [[self.domains[d] for d in row] for row in rows]
        return self.template.model_copy(update={"placement": placement, "predicted": None, "solver": None})


class _Curve:
    """Episode rewards as they happen (for the learning curve)."""

    def __init__(self):
        self.steps, self.rewards = [], []


def train(instance, steps: int = 20_000, seed: int = 0, out: str | Path | None = None, progress: bool = False,
          curve_png: str | Path | None = None):
    """Train MaskablePPO on :class:`PlacementEnv`; returns (model, curve).

    Reproducible for a seed (single CPU thread).  With ``out`` the policy is
    saved as ``out`` (zip) plus ``out.json`` (instance and shape)."""
    _require()
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    env = PlacementEnv(instance, seed=seed)
    curve = _Curve()

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            for info, done, r in zip(self.locals["infos"], self.locals["dones"], self.locals["rewards"]):
                if done:
                    curve.steps.append(self.num_timesteps)
                    curve.rewards.append(float(r))
            return True

    n_steps = max(64, min(2048, 16 * env.n))
    model = MaskablePPO("MlpPolicy", env, seed=seed, n_steps=n_steps, batch_size=min(64, n_steps),
                        learning_rate=3e-4, gamma=1.0, verbose=0, device="cpu")
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<date> folder in the temp directory
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Record(), progress_bar=progress)
    train_s = time.perf_counter() - t0
    if out is not None:
        out = Path(out)
        out = out if out.suffix == ".zip" else out.with_name(out.name + ".zip")  # where stable-baselines3 writes
        with atomic_path(out) as tmp:
            model.save(tmp)
        meta = {"instance": instance.name, "template": env.template.to_dict(), "steps": steps, "seed": seed,
                "train_s": train_s}
        write_atomic(str(out) + ".json", json.dumps(meta, indent=2))
    if curve_png is not None:
        _plot_curve(curve, curve_png, instance.name, steps)
    return model, curve


def _plot_curve(curve: _Curve, path, name: str, steps: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    r = np.array(curve.rewards)
    ax.plot(curve.steps, r, ".", alpha=0.25, label="episode")
    if len(r) >= 10:
        w = max(10, len(r) // 20)
        ma = np.convolve(r, np.ones(w) / w, mode="valid")
        ax.plot(curve.steps[w - 1:], ma, "-", label=f"moving mean ({w})")
    ax.axhline(0.0, color="k", lw=0.8, ls="--", label="greedy")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("(T_greedy - T) / T_greedy")
    ax.set_title(f"MaskablePPO on {name}: {steps} steps")
    ax.legend(loc="lower right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def load_policy(path):
    """(model, meta) from a saved policy: a path (with its ``.json`` metadata) or the
    zip's bytes (meta None: the template is then greedy's plan on the base network)."""
    _require()
    import io

    from sb3_contrib import MaskablePPO

    if isinstance(path, (bytes, bytearray)):
        return MaskablePPO.load(io.BytesIO(bytes(path)), device="cpu"), None
    path = Path(path)
    meta_path = Path(str(path) + ".json")
    try:
        meta = json.loads(read_text(meta_path))
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON: {err.msg} at line {err.lineno}", file=str(meta_path)) from None
    if not isinstance(meta, dict):
        raise InputError("expected a JSON object (the policy's metadata)", file=str(meta_path))
    if not path.is_file():
        raise InputError("no such file (a policy saved by planner rl train)", file=str(path))
    try:
        return MaskablePPO.load(path, device="cpu"), meta
    except Exception as err:  # a corrupt or foreign zip: the loader's errors vary (zipfile, pickle, torch)
        raise InputError(f"not a saved policy: {type(err).__name__}: {err}", file=str(path)) from None


def policy_bytes(model) -> bytes:
    """A trained model as the bytes of its zip (to ship between processes)."""
    import io

    buf = io.BytesIO()
    model.save(buf)
    return buf.getvalue()


class Replanner:
    """A trained policy ready to place the template's stages for any network
    state: the environment is built once, each call is one episode of
    deterministic actions (a few milliseconds).  ``policy``: a path, the zip's
    bytes, or a loaded model."""

    def __init__(self, instance, policy, seed: int = 0):
        _require()
        from ..problem.errors import InputError

        if policy is None:
            raise InputError("the rl solver needs a trained policy: planner rl train ... --out POLICY; "
                             "then --policy POLICY", "policy")
        if isinstance(policy, (str, Path, bytes, bytearray)):
            self.model, meta = load_policy(policy)
        else:
            self.model, meta = policy, None
        template = Plan.from_dict(meta["template"]) if meta else None
        self.env = PlacementEnv(instance, template=template, hours=1.0, seed=seed)
        self.seed = seed

    def __call__(self, states: NetworkStates | None = None) -> Plan:
        """The policy's plan for the first state of ``states`` (default: the base network)."""
        env = self.env
        st = states or NetworkStates.base(env.instance)
        t0 = time.perf_counter()
        obs, _ = env.reset(seed=self.seed, options={"state": (st.bandwidth_gbps[0], st.latency_ms[0])})
        done = False
        while not done:
            action, _ = self.model.predict(obs, deterministic=True, action_masks=env.action_masks())
            obs, _, done, _, _ = env.step(int(action))
        plan = env.plan()
        return plan.model_copy(update={"solver": SolverInfo(name="rl", status="heuristic",
                                                            time_s=time.perf_counter() - t0)})


def rl(instance, policy=None, states: NetworkStates | None = None, seed: int = 0, **_) -> Plan:
    """Plan with a trained policy (``policy``: a path, the zip's bytes or a loaded
    model) for the base network or one given state; deterministic actions, a few
    milliseconds."""
    return Replanner(instance, policy, seed=seed)(states)
