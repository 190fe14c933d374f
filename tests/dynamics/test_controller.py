"""The learned re-planning controller: gymnasium's API, held-out trace seeds,
exact accounting of its rollouts, determinism for a seed, a tiny training run
that beats random choices, and clear errors for a missing or corrupt file."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("sb3_contrib")

from planner import load_instance  # noqa: E402
from planner.cli import main  # noqa: E402
from planner.dynamics import controller as ctl  # noqa: E402
from planner.dynamics.policies import epoch_rollout  # noqa: E402
from planner.dynamics.rollout import rollout  # noqa: E402
from planner.problem import traces  # noqa: E402
from planner.problem.errors import InputError  # noqa: E402


@pytest.fixture(scope="module")
def worlds():
    """tiny-line (its greedy plan follows the state; switching pays) through two 4-hour traces."""
    return [ctl.World.make("tiny-line", s, hours=4) for s in (1, 2)]


@pytest.fixture(scope="module")
def trained(worlds, tmp_path_factory):
    out = tmp_path_factory.mktemp("ctl") / "c.zip"
    model, curve = ctl.train(worlds=worlds, seeds=(1, 2), steps=3072, seed=0, out=out, n_envs=2, hours=4)
    return out, model, curve


@pytest.mark.slow
def test_env_follows_gymnasium(worlds):
    from gymnasium.utils.env_checker import check_env

    env = ctl.ControllerEnv(worlds, hours=(0.5, 4))
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert obs.shape == (ctl.N_FEATURES,) and env.observation_space.contains(obs)
    assert env.action_masks()[0]  # keeping is always allowed
    obs2, _ = env.reset(seed=3)
    assert np.array_equal(obs, obs2)  # the same episode for the same seed


def test_reward_is_the_hindsight_saving_of_the_choice(worlds):
    """Keeping earns 0; a switch earns what its plan completes over the next 30 minutes of the
    trace (after the move) minus what keeping completes, at the start plan's base speed, in epochs."""
    from planner.dynamics.job import Job

    env = ctl.ControllerEnv(worlds[:1], hours=(3, 4))
    env.reset(seed=5)
    seen = 0
    while seen < 3:
        sit = env._sit
        mask = env.action_masks()
        if not mask[1:].any():
            _, r, done, _, _ = env.step(0)
            assert r == 0.0
            if done:
                env.reset(seed=6 + seen)
            continue
        k = int(np.flatnonzero(mask[1:])[0]) + 1
        W = min(ctl.HORIZON_S, sit.left_s)
        runs = []
        for plan, start in ((sit.cur, sit.t), (sit.options[k], sit.t + sit.dt[k])):
            job = Job(sit.trace, sit.times, 10**9, plan, start_s=start)
            job.run_until(sit.t + W)  # whole iterations started before the window ends
            runs.append(job.done)
        want = (runs[1] - runs[0]) * sit.T_base / traces.EPOCH_S
        _, r, done, _, _ = env.step(k)
        assert r == pytest.approx(want, abs=2 * sit.T_base / traces.EPOCH_S)  # fractional vs whole iterations
        seen += 1
        if done:
            env.reset(seed=6 + seen)


def test_training_seeds_are_held_out():
    assert traces.TEST_TRACE_SEED == 1000
    for bad in ([1000], [1, 1234], [-1]):
        with pytest.raises(InputError, match="seeds"):
            ctl.check_training_seeds(bad)
    with pytest.raises(InputError):
        ctl.World.make("tiny-3dc", traces.TEST_TRACE_SEED)
    with pytest.raises(InputError):
        ctl.train(["tiny-3dc"], seeds=(3, 1000), steps=10)
    res = CliRunner().invoke(main, ["controller", "train", "--instances", "tiny-3dc", "--seeds", "1001",
                                    "--steps", "10", "--out", "/tmp/never.zip"])
    assert res.exit_code == 2 and "1000" in res.output


def test_tiny_training_beats_random_and_is_deterministic(trained, worlds):
    out, model, curve = trained
    meta = json.loads(open(str(out) + ".json").read())
    assert meta["steps"] == 3072 and meta["trace_seeds"] == [1, 2] and meta["features_version"] == ctl.FEATURES_VERSION
    c = ctl.Controller.load(out)
    env = ctl.ControllerEnv(worlds, hours=(2, 4))

    def mean_return(choose, episodes=12):
        tot = []
        for ep in range(episodes):
            obs, _ = env.reset(seed=100 + ep)
            rng = np.random.default_rng(ep)
            done, ret = False, 0.0
            while not done:
                obs, r, done, _, _ = env.step(choose(obs, env.action_masks(), rng))
                ret += r
            tot.append(ret)
        return float(np.mean(tot))

    def learned(obs, mask, rng):
        return int(c.model.predict(obs, deterministic=True, action_masks=mask)[0])

    def random(obs, mask, rng):
        return int(rng.choice(np.flatnonzero(mask)))

    assert mean_return(learned) > mean_return(random)
    # the same seed trains the same controller
    model2, _ = ctl.train(worlds=worlds, seeds=(1, 2), steps=3072, seed=0, n_envs=2, hours=4)
    for a, b in zip(model.policy.state_dict().values(), model2.policy.state_dict().values()):
        assert np.array_equal(a.numpy(), b.numpy())


@pytest.mark.slow
def test_controller_rollout_exact_accounting(trained, worlds):
    out, _, _ = trained
    inst = load_instance("tiny-line")
    tr = traces.generate(inst, hours=3, seed=traces.TEST_TRACE_SEED)  # a test trace: never trained on
    c = ctl.Controller.load(out)
    r = rollout(inst, tr, "controller", 120000, controller=c, solver_time=1.0)
    assert r.completed and r.iterations == 120000
    assert r.total_s == pytest.approx(r.compute_s + r.reconfig_s + r.stalled_s, rel=1e-12)
    assert r.solver_s == pytest.approx(1.0 * r.decisions, rel=1e-12) and r.choices == r.decisions
    again = epoch_rollout(inst, tr, c, 120000, solver_time=1.0)
    assert again.total_s == r.total_s and again.switches == r.switches  # deterministic
    oracle = rollout(inst, tr, "oracle", 120000, candidates=r.plans)
    assert oracle.total_s <= r.total_s * (1 + 1e-12)


@pytest.mark.slow
def test_packaged_controller_and_bad_files(tmp_path):
    inst = load_instance("tiny-3dc")
    tr = traces.generate(inst, hours=1, seed=3)
    path = tmp_path / "t.csv"
    traces.save(tr, path)
    runner = CliRunner()
    res = runner.invoke(main, ["simulate", "tiny-3dc", "--trace", str(path), "--iterations", "5000", "--policy",
                               "static", "--policy", "controller", "--policy", "hysteresis", "--policy", "mpc",
                               "--policy", "oracle", "--json", "-q"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["policy"] for r in rows] == ["static", "controller", "hysteresis", "mpc", "oracle"]
    for r in rows:
        assert r["total_s"] == pytest.approx(r["compute_s"] + r["reconfig_s"] + r["stalled_s"], rel=1e-12)
        assert rows[-1]["total_s"] <= r["total_s"] * (1 + 1e-12)
    missing = tmp_path / "none.zip"
    res = runner.invoke(main, ["simulate", "tiny-3dc", "--trace", str(path), "--policy", "controller",
                               "--controller", str(missing)])
    assert res.exit_code == 2 and str(missing) in res.output and "Traceback" not in res.output
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    res = runner.invoke(main, ["simulate", "tiny-3dc", "--trace", str(path), "--policy", "controller",
                               "--controller", str(bad)])
    assert res.exit_code == 2 and str(bad) in res.output and "Traceback" not in res.output
    (tmp_path / "bad.zip.json").write_text("{not json")
    res = runner.invoke(main, ["simulate", "tiny-3dc", "--trace", str(path), "--policy", "controller",
                               "--controller", str(bad)])
    assert res.exit_code == 2 and "bad.zip.json" in res.output
    res = runner.invoke(main, ["simulate", "tiny-3dc", "--trace", str(path), "--policy", "static",
                               "--controller", str(bad)])
    assert res.exit_code == 2 and "--controller" in res.output


def test_check_needs_no_torch_and_names_the_file(tmp_path):
    """The benchmark checks the controller file before forking its workers, without torch."""
    import subprocess
    import sys

    code = ("import sys; from planner.dynamics.controller import Controller; Controller.check(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="bad.zip"):
        ctl.Controller.check(bad)
    res = CliRunner().invoke(main, ["bench", "tiny-3dc", "--controller", str(bad), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "bad.zip" in res.output
