"""The learned re-planning controller: a gymnasium environment in which an
agent decides, once per epoch of a training job, to keep its plan or switch
to a candidate, and the MaskablePPO policy (sb3-contrib) trained in it.

The decisions are those of :func:`planner.dynamics.policies.rounds` (the
loop the hysteresis and look-ahead rules use): every epoch the agent sees

* per option (keep, and the slots greedy-for-now, start plan, robust plan,
  previous plan): whether it may be chosen, log of its iteration time over
  the current plan's under this epoch's state and under the previous one's,
  its switch time (in epochs of 300 s), the net saving (time saved
  minus switch time) over the next 30 minutes and over the rest of the job,
  and whether the hysteresis rule would pick it;
* the current plan's time relative to the start plan's base time and its
  trend; the time left in the job and since the last switch;
* the network relative to base: the fraction of links down, the smallest
  and the mean bandwidth ratio and its change since the previous epoch,
  the mean latency ratio.

No feature names an instance, a link or a domain, so one controller serves
every instance.  Action 0 keeps the plan (always allowed); action k switches
to slot k (masked when the slot is missing, is the current plan, cannot run
or cannot be moved to).  The reward of a choice is its hindsight saving
(:func:`hindsight_saving`): from the trace's true next states, the work the
chosen plan completes over the next 30 minutes (or the rest of the job),
its switch time paid first, minus what keeping completes, in epochs of
300 s at the start plan's base speed; keeping earns 0.  Each decision is
thus scored exactly by the evaluator's times of the trace (a contextual
bandit, discount 0): the controller learns from its features (today's
times, their trend, the network) which switches keep paying once the
network moves on, which the rules can only guess.

Training draws an instance and a generated 24-hour trace per episode (trace
seeds below :data:`planner.problem.traces.TEST_TRACE_SEED`, enforced: the
benchmark's test traces are never seen), a start epoch and a job length of
1-24 hours; the candidate plans of every (instance, trace) are computed once
(:class:`planner.dynamics.policies.EpochPlans`) and their iteration times
over the whole trace in one evaluator call per plan, so a step costs about
a millisecond.  Several environments run in a vectorised env.

Example
-------
>>> ctl = Controller.load()                 # the packaged controller      # doctest: +SKIP
>>> res = epoch_rollout(instance, trace, ctl, 1000)
>>> env = ControllerEnv([World.make("tiny-3dc", 1)]); obs, info = env.reset(seed=0)
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..problem.errors import InputError
from ..problem.files import atomic_path, code_version, models_dir, read_mapping, write_atomic
from ..problem.traces import EPOCH_S, TEST_TRACE_SEED, generate
from .policies import SLOTS, EpochPlans, Hysteresis, Situation, rounds

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError:  # the optional extra is missing: fail when used, not on import
    gym = None

OPTIONS = 1 + len(SLOTS)
PER_OPTION = ("valid", "log_T_ratio", "log_T_ratio_prev", "switch_epochs", "net_saving_30min", "net_saving_rest",
              "hysteresis_pick")
GLOBAL = ("cannot_run", "log_T_over_base", "log_T_trend", "left", "since_switch", "links_down", "bw_min",
          "bw_mean", "bw_mean_change", "latency_mean")
N_FEATURES = OPTIONS * len(PER_OPTION) + len(GLOBAL)
FEATURES_VERSION = 3
HORIZON_S = 1800.0
_HYSTERESIS = Hysteresis()
TRAIN_INSTANCES = ("tiny-3dc", "tiny-line", "two-dc", "aws-multiregion", "azure-multiregion", "gcp-16",
                   "edwc-llama2-13b")
TRAIN_SEEDS = (1,)


def default_path() -> Path:
    """The packaged controller: ``models/controller/controller.zip``."""
    return models_dir() / "controller" / "controller.zip"


def _logratio(a: float, b: float, lim: float) -> float:
    if not math.isfinite(b):
        return -lim if math.isfinite(a) else 0.0
    if not math.isfinite(a):
        return lim
    return float(np.clip(math.log(a / b), -lim, lim))


def features(sit: Situation) -> np.ndarray:
    """The observation of one decision (module docstring), float32, shape (N_FEATURES,)."""
    out = np.zeros(N_FEATURES, dtype=np.float32)
    T0 = float(sit.T[0])
    left = sit.left_s
    ok = sit.valid()
    rule = _HYSTERESIS(sit) or 0  # what the hand-written rule would do: the controller learns when to differ
    i = 0
    for k in range(OPTIONS):
        Tk, dtk = float(sit.T[k]), float(sit.dt[k])
        if math.isfinite(T0):
            frac = 1.0 - Tk / T0 if math.isfinite(Tk) else -1.0
            s30 = (min(HORIZON_S, left) * frac - dtk) / EPOCH_S if math.isfinite(dtk) else -5.0
            srest = (left * frac - dtk) / max(left, EPOCH_S) if math.isfinite(dtk) else -2.0
        else:  # the plan cannot run: any slot that can saves the whole horizon
            s30 = 5.0 if (k and math.isfinite(Tk)) else 0.0
            srest = 2.0 if (k and math.isfinite(Tk)) else 0.0
        out[i:i + len(PER_OPTION)] = (float(ok[k]), _logratio(Tk, T0, 2.0), _logratio(float(sit.T_prev[k]), float(sit.T_prev[0]), 2.0),
                        min(dtk / EPOCH_S, 5.0) if math.isfinite(dtk) else 5.0, np.clip(s30, -5, 5),
                        np.clip(srest, -2, 2), float(rule == k))
        i += len(PER_OPTION)
    inst, st, e = sit.instance, sit.trace.states, sit.epoch
    base_bw = np.array([l.bandwidth_gbps for l in inst.links])
    base_lat = np.array([l.latency_ms for l in inst.links])
    r = st.bandwidth_gbps[e] / base_bw
    r_prev = st.bandwidth_gbps[max(e - 1, 0)] / base_bw
    up, up_prev = r > 0, r_prev > 0
    mean = float(r[up].mean()) if up.any() else 0.0
    mean_prev = float(r_prev[up_prev].mean()) if up_prev.any() else 0.0
    lat = st.latency_ms[e] / np.where(base_lat > 0, base_lat, 1.0)
    out[i:] = (float(not math.isfinite(T0)), _logratio(T0, sit.T_base, 2.0),
               _logratio(T0, float(sit.T_prev[0]), 1.0), math.log1p(left / EPOCH_S) / 6.0,
               min(sit.since_switch_s / 3600.0, 3.0) / 3.0, float((~up).mean()), float(np.clip(r.min(), 0, 2)),
               float(np.clip(mean, 0, 2)), float(np.clip(mean - mean_prev, -1, 1)),
               float(np.clip(lat.mean() - 1.0, -1, 2)))
    return out


def progress(T: np.ndarray, trace, t0: float, t1: float) -> float:
    """Iterations (fractional) a plan with per-epoch times ``T`` (s) completes in [t0, t1) of ``trace``."""
    done, t = 0.0, t0
    while t < t1:
        e = trace.epoch_at(t)
        end = min(t1, float(trace.times[e + 1]) if e + 1 < trace.epochs else math.inf)
        if math.isfinite(T[e]):
            done += (end - t) / T[e]
        t = end
    return done


def hindsight_saving(sit: Situation, action: int, horizon_s: float = HORIZON_S) -> float:
    """The training reward of ``action`` (0: keep, k: switch to slot k): with
    hindsight (the trace's next states), the work the choice gains over keeping
    within the next ``horizon_s`` seconds (or the rest of the job), the switch
    time paid first, in epochs (300 s) at the start plan's base speed.  0 for
    keeping; e.g. a plan 10% faster for 30 minutes after a 60 s switch earns
    about (0.1 * 1740 - 60) / 300 = 0.38."""
    if not action:
        return 0.0
    W = min(horizon_s, sit.left_s)
    T = sit.times.T
    keep = progress(T[sit.cur], sit.trace, sit.t, sit.t + W)
    dt = float(sit.dt[action])
    alt = progress(T[sit.options[action]], sit.trace, sit.t + dt, sit.t + W) if dt < W else 0.0
    return float((alt - keep) * sit.T_base / EPOCH_S)


@dataclass
class World:
    """One (instance, trace) to train on, with its candidate plans computed once."""

    instance: object
    trace: object
    plans: EpochPlans
    seed: int

    @classmethod
    def make(cls, name: str, seed: int, hours: float = 24.0) -> "World":
        """The instance ``name`` (a packaged name or a file) through the trace generated with ``seed``,
        which must be a training seed (below TEST_TRACE_SEED)."""
        from ..problem.io import load_instance

        check_training_seeds([seed])
        inst = load_instance(name)
        tr = generate(inst, hours=hours, seed=seed)
        return cls(inst, tr, EpochPlans(inst, tr, seed=0), seed)


def check_training_seeds(seeds) -> None:
    """Refuse trace seeds from TEST_TRACE_SEED on: those are the benchmark's test traces."""
    bad = [s for s in seeds if not 0 <= int(s) < TEST_TRACE_SEED]
    if bad:
        raise InputError(f"training trace seeds must be in 0..{TEST_TRACE_SEED - 1} (from {TEST_TRACE_SEED} on "
                         f"they are the benchmark's test traces); got {bad}", "seeds")


def _require():
    if gym is None:
        raise ImportError("the learned controller needs the optional extra: pip install 'planner[rl]'")


class ControllerEnv(gym.Env if gym else object):
    """Keep or switch, once per epoch, through a job on a random world; see the module docstring.
    ``hours``: the range of job lengths (h) drawn per episode."""

    metadata = {"render_modes": []}

    def __init__(self, worlds, hours: tuple = (1.0, 24.0), horizon_s: float = HORIZON_S):
        _require()
        self.worlds = list(worlds)
        self.hours = hours
        self.horizon_s = horizon_s
        self.observation_space = spaces.Box(-10.0, 10.0, (N_FEATURES,), np.float32)
        self.action_space = spaces.Discrete(OPTIONS)
        self._gen = None
        self._sit = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        w = self.worlds[int(rng.integers(len(self.worlds)))]
        epochs = w.trace.epochs
        lo, hi = self.hours
        start = int(rng.integers(0, max(1, epochs - int(lo * 3600 / EPOCH_S))))
        room = (epochs - start) * EPOCH_S / 3600.0
        hours = float(rng.uniform(lo, max(lo, min(hi, room))))
        T_base = w.plans.start().predicted.iteration_time_s
        n = max(1, int(hours * 3600.0 / T_base))
        self.world, self.T_base = w, T_base
        self._gen = rounds(w.instance, w.trace, n, w.plans, solver_time=0.0, start_epoch=start)
        self._sit = next(self._gen)
        self._mark = (self._sit.t, self._sit.remaining)
        return features(self._sit), {"instance": w.instance.name, "iterations": n, "start_epoch": start}

    def step(self, action: int):
        action = int(action)
        if not self.action_masks()[action]:
            action = 0  # a masked action keeps the plan
        reward = hindsight_saving(self._sit, action, self.horizon_s)
        try:
            self._sit = self._gen.send(action)
            t1, rem1 = self._sit.t, self._sit.remaining
            terminated, stuck = False, False
        except StopIteration as stop:
            job = stop.value[0]
            t1, rem1 = job.t, job.iterations - job.done
            terminated, stuck = True, job.stuck
        if stuck:  # the plan cannot run in the last epoch: the job would never end
            reward -= 10.0
        self._mark = (t1, rem1)
        obs = features(self._sit) if not terminated else np.zeros(N_FEATURES, dtype=np.float32)
        return obs, float(reward), terminated, False, {"switched": bool(action)}

    def action_masks(self) -> np.ndarray:
        return self._sit.valid() if self._sit is not None else np.eye(OPTIONS, dtype=bool)[0]


class Controller:
    """A trained controller as a re-planning rule (``rule(situation) -> None or slot``)."""

    name = "controller"

    def __init__(self, model, meta: dict | None = None):
        self.model, self.meta = model, meta or {}

    @staticmethod
    def check(path=None) -> Path:
        """The controller file's path after the checks that need no torch (the file exists
        and is a zip; its metadata, when present, is a JSON object of these features):
        for a parent process about to fork workers, which must not import torch first."""
        import zipfile

        path = Path(path) if path is not None else default_path()
        if not path.is_file():
            raise InputError("no such file (a controller saved by planner controller train)", "--controller",
                             str(path))
        if not zipfile.is_zipfile(path):
            raise InputError("not a saved controller (not a zip file)", file=str(path))
        Controller._meta(path)
        return path

    @staticmethod
    def _meta(path: Path) -> dict:
        meta_path = Path(str(path) + ".json")
        meta = {}
        if meta_path.is_file():
            meta = read_mapping(meta_path)
            if meta.get("features_version", FEATURES_VERSION) != FEATURES_VERSION:
                raise InputError(f"features_version {meta.get('features_version')} is not this planner's "
                                 f"{FEATURES_VERSION}: retrain the controller", "features_version", str(meta_path))
        return meta

    @classmethod
    def load(cls, path=None) -> "Controller":
        """A saved controller (default: the packaged one); errors name the file and field."""
        _require()
        from sb3_contrib import MaskablePPO

        path = Path(path) if path is not None else default_path()
        if not path.is_file():
            raise InputError("no such file (a controller saved by planner controller train)", "--controller",
                             str(path))
        meta = cls._meta(path)
        try:
            model = MaskablePPO.load(path, device="cpu")
        except Exception as err:  # a corrupt or foreign zip: zipfile, pickle and torch errors vary
            raise InputError(f"not a saved controller: {type(err).__name__}: {err}", file=str(path)) from None
        shape = getattr(model.observation_space, "shape", None)
        if shape != (N_FEATURES,) or getattr(model.action_space, "n", None) != OPTIONS:
            raise InputError(f"observation {shape} / actions {getattr(model.action_space, 'n', None)} do not match "
                             f"the controller's ({N_FEATURES},) / {OPTIONS}: not a controller", "policy", str(path))
        return cls(model, meta)

    def __call__(self, sit: Situation):
        import torch

        mask = sit.valid()
        if not mask[1:].any():
            return None
        obs = features(sit)
        with torch.no_grad():
            action, _ = self.model.predict(obs, deterministic=True, action_masks=mask)
        return int(action) or None


class _Curve:
    """Episode returns as they happen."""

    def __init__(self):
        self.steps, self.returns = [], []


def train(instances=TRAIN_INSTANCES, seeds=TRAIN_SEEDS, steps: int = 60_000, seed: int = 0, out=None,
          n_envs: int = 4, progress: bool = False, command: str | None = None, worlds=None, hours: float = 24.0,
          cache_dir=None, horizon_s: float = HORIZON_S, n_steps: int = 256, learning_rate: float = 3e-4):
    """Train MaskablePPO on :class:`ControllerEnv` over every (instance, trace seed);
    returns (model, curve).  Reproducible for a seed (one CPU thread).  With ``out``
    the controller is saved as ``out`` (zip) plus ``out.json`` (training command,
    code version, steps, seeds, instances, time).  ``cache_dir``: keep every
    world's greedy plans there (JSON) and reuse them on the next run."""
    _require()
    import logging

    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv

    check_training_seeds(seeds)
    torch.set_num_threads(1)
    log = logging.getLogger("planner.controller")
    t0 = time.perf_counter()
    if worlds is None:
        worlds = []
        for name in instances:
            for s in seeds:
                w = World.make(name, s, hours=hours)
                t1 = time.perf_counter()
                cached = None
                if cache_dir is not None:  # greedy is deterministic: its plans for a (instance, trace) are reusable
                    import hashlib

                    digest = hashlib.sha256(json.dumps(w.instance.to_dict(), sort_keys=True, default=str)
                                            .encode()).hexdigest()[:12]
                    cached = Path(cache_dir) / f"{w.instance.name}-{digest}-seed{s}-{hours:g}h.json"
                    if cached.is_file():
                        w.plans.load(cached)
                w.plans.all_greedy()  # every epoch's candidate, once
                if cached is not None:
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    w.plans.save(cached)
                log.info("controller: candidates of %s, trace seed %d: %d epochs in %.1f s", name, s,
                         w.trace.epochs, time.perf_counter() - t1)
                worlds.append(w)
    for w in worlds:  # given worlds too: filled lazily during training, the fills changed what a seed trains
        w.plans.fill()
    prep_s = time.perf_counter() - t0
    envs = DummyVecEnv([lambda: ControllerEnv(worlds, hours=(1.0, max(1.0, hours)), horizon_s=horizon_s)
                        for _ in range(n_envs)])
    envs.seed(seed)
    curve = _Curve()

    class Record(BaseCallback):
        def __init__(self):
            super().__init__()
            self.acc = np.zeros(n_envs)
            self.last = time.perf_counter()

        def _on_step(self) -> bool:
            self.acc += self.locals["rewards"]
            for k, done in enumerate(self.locals["dones"]):
                if done:
                    curve.steps.append(self.num_timesteps)
                    curve.returns.append(float(self.acc[k]))
                    self.acc[k] = 0.0
            if time.perf_counter() - self.last > 10.0:
                self.last = time.perf_counter()
                tail = curve.returns[-50:]
                log.info("controller: %d of %d steps; mean return of the last %d episodes %+.2f",
                         self.num_timesteps, steps, len(tail), float(np.mean(tail)) if tail else float("nan"))
            return True

    model = MaskablePPO("MlpPolicy", envs, seed=seed, n_steps=n_steps, batch_size=n_steps, n_epochs=10, gamma=0.0,
                        gae_lambda=0.95, learning_rate=learning_rate, ent_coef=0.01,
                        policy_kwargs={"net_arch": [64, 64]}, verbose=0, device="cpu")
    model.set_logger(Logger(folder=None, output_formats=[]))
    t1 = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Record(), progress_bar=progress)
    train_s = time.perf_counter() - t1
    if out is not None:
        out = Path(out)
        out = out if out.suffix == ".zip" else out.with_name(out.name + ".zip")
        with atomic_path(out) as tmp:
            model.save(tmp)
        meta = {"command": command, "code": code_version(), "steps": steps, "seed": seed, "trace_hours": hours,
                "reward_horizon_s": horizon_s, "n_steps": n_steps, "learning_rate": learning_rate,
                "trace_seeds": list(seeds), "instances": [w.instance.name for w in worlds[::max(1, len(seeds))]],
                "worlds": [[w.instance.name, w.seed] for w in worlds], "n_envs": n_envs,
                "features_version": FEATURES_VERSION, "features": _feature_names(),
                "candidates_s": round(prep_s, 1), "train_s": round(train_s, 1),
                "episodes": len(curve.returns),
                "mean_return_last_10pct": float(np.mean(curve.returns[-max(1, len(curve.returns) // 10):]))
                if curve.returns else None}
        write_atomic(str(out) + ".json", json.dumps(meta, indent=2) + "\n")
    return model, curve


def _feature_names() -> list[str]:
    names = ["keep"] + list(SLOTS)
    return [f"{o}.{f}" for o in names for f in PER_OPTION] + list(GLOBAL)
