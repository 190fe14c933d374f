"""The RL planner: a standard gymnasium environment, a trained policy that
beats random feasible placements, reproducible for a seed, usable as a solver."""

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from planner import check_plan, load_instance, plan as make_plan  # noqa: E402
from planner.solvers.rl import PlacementEnv, train  # noqa: E402


@pytest.fixture(scope="module")
def inst():
    return load_instance("tiny-3dc")


@pytest.fixture(scope="module")
def trained(inst, tmp_path_factory):
    path = tmp_path_factory.mktemp("rl") / "policy.zip"
    model, curve = train(inst, steps=4000, seed=0, out=path)
    return model, curve, path


def test_env_passes_the_gymnasium_checker(inst):
    env = PlacementEnv(inst, seed=0)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    # masked actions are refused; a full episode gives a plan that fits
    done, steps = False, 0
    while not done:
        mask = env.action_masks()
        with pytest.raises(ValueError):
            bad = np.nonzero(~mask)[0]
            if len(bad) == 0:
                raise ValueError("nothing masked")
            env.step(int(bad[0]))
        obs, reward, done, truncated, info = env.step(int(np.nonzero(mask)[0][0]))
        steps += 1
    assert steps == env.n and -1.0 <= reward
    assert not any(v.rule == "gpu_capacity" for v in check_plan(inst, env.plan()))


def play(env, model, seeds, rng=None):
    out = []
    for k in seeds:
        obs, _ = env.reset(seed=k)
        done = False
        while not done:
            mask = env.action_masks()
            if model is None:
                a = int(rng.choice(np.nonzero(mask)[0]))
            else:
                a, _ = model.predict(obs, deterministic=True, action_masks=mask)
            obs, reward, done, _, _ = env.step(int(a))
        out.append(reward)
    return np.array(out)


def test_trained_policy_beats_random(inst, trained):
    model, curve, _ = trained
    env = PlacementEnv(inst, seed=1)  # held-out states from another week of the same generator
    seeds = range(200)
    mine = play(env, model, seeds)
    rand = play(env, None, seeds, np.random.default_rng(0))
    assert mine.mean() > rand.mean() + 0.1
    assert np.mean(curve.rewards[-50:]) > np.mean(curve.rewards[:50])  # it learned


def test_reproducible_for_a_seed(inst):
    a, _ = train(inst, steps=600, seed=7)
    b, _ = train(inst, steps=600, seed=7)
    env = PlacementEnv(inst, seed=2)
    assert np.array_equal(play(env, a, range(20)), play(env, b, range(20)))


def test_rl_solver_through_plan(inst, trained):
    _, _, path = trained
    p = make_plan(inst, solver="rl", policy=str(path))
    assert p.solver.name == "rl" and not check_plan(inst, p)
    assert p.predicted.iteration_time_s > 0


def test_rl_rollout_policy(inst, trained, tmp_path):
    from planner.problem import traces
    from planner.solvers.rl import Replanner, policy_bytes
    from planner.dynamics.rollout import rollout

    model, _, path = trained
    # the same policy from a path, from its bytes and as a loaded model gives the same plans
    a, b, c = Replanner(inst, str(path))(), Replanner(inst, policy_bytes(model))(), Replanner(inst, model)()
    assert a.placement == b.placement == c.placement and not check_plan(inst, a)
    tr = traces.generate(inst, hours=1, seed=1005)  # not the training week (seed 0)
    r = rollout(inst, tr, "rl", iterations=3000, rl_policy=model)
    assert r.iterations == 3000 and r.completed
    assert r.total_s == pytest.approx(r.compute_s + r.reconfig_s + r.stalled_s, rel=1e-12)
    epochs = {e.epoch for e in r.series}
    assert r.decisions >= len(epochs) >= 1 and 0 < r.decision_s < 5.0  # one inference per epoch change
    oracle = rollout(inst, tr, "oracle", iterations=3000, candidates=r.plans)
    assert oracle.total_s <= r.total_s * (1 + 1e-12)
    # through the CLI
    from click.testing import CliRunner

    from planner.cli import main

    tpath = tmp_path / "t.csv"
    traces.save(tr, tpath)
    res = CliRunner().invoke(main, ["simulate", "tiny-3dc", "--trace", str(tpath), "--iterations", "300",
                                    "--policy", "rl", "--rl-policy", str(path), "--json"])
    assert res.exit_code == 0, res.output
    import json

    row = json.loads(res.stdout)[0]
    assert row["policy"] == "rl" and row["decisions"] >= 1
    res = CliRunner().invoke(main, ["simulate", "tiny-3dc", "--trace", str(tpath), "--policy", "rl"])
    assert res.exit_code == 2 and "--rl-policy" in res.output
