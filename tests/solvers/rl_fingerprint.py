"""Fingerprints of the RL planner on single-type instances, to show they are what they
were before GPU types (issue 25): runnable against any version of the package (it uses
only the API main had), so the recorded values come from main's code.

    PYTHONPATH=<checkout> python tests/solvers/rl_fingerprint.py    # prints the table

``observations(name)``: sha256 (16 hex digits) of every observation (float32 bytes),
reward (repr) and final placement of 6 episodes of ``PlacementEnv(instance, seed=0)``
with seeded random masked actions; ``rl_plan(name)``: the plan ``rl`` makes with the
shipped policy (``samples=4``), its JSON without ``solver`` and ``predicted``, and how
it was found.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np


def observations(name: str) -> str:
    from planner import load_instance
    from planner.solvers.rl_env import PlacementEnv

    inst = load_instance(name)
    env = PlacementEnv(inst, seed=0, base_prob=0.5)
    h = hashlib.sha256()
    for ep in range(6):
        rng = np.random.default_rng(ep)
        obs, _ = env.reset(seed=ep)
        h.update(np.asarray(obs, np.float32).tobytes())
        done = False
        while not done:
            obs, reward, done, _, _ = env.step(int(rng.choice(np.nonzero(env.action_masks())[0])))
            h.update(np.asarray(obs, np.float32).tobytes())
            h.update(repr(float(reward)).encode())
        h.update(json.dumps(env.plan().placement).encode())
    return h.hexdigest()[:16]


def rl_plan(name: str) -> tuple[str, str]:
    from planner import load_instance
    from planner.solvers.rl import rl

    inst = load_instance(name)
    p = rl(inst, samples=4)
    d = p.to_dict()
    d.pop("solver", None)
    d.pop("predicted", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16], p.solver.model_extra["rl_found_by"]


if __name__ == "__main__":
    for n in ("tiny-3dc", "tiny-line", "two-dc"):
        print(repr(n), repr(observations(n)))
    print("rl tiny-3dc", rl_plan("tiny-3dc"))
