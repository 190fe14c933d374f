"""The RL planner: a standard gymnasium environment whose first action chooses
one of greedy's shapes (masked to the menu), whose incremental T_est is the
evaluator's, whose return is the final reward; a tiny training run beats
random placement; training and inference are reproducible for a seed; every
plan it returns is valid and its own."""

import json

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from planner import check_plan, load_instance, plan as make_plan  # noqa: E402
from planner.problem.network import NetworkStates  # noqa: E402
from planner.problem.specversion import without_v3_fields  # noqa: E402
from planner.scoring.evaluator import Evaluator  # noqa: E402
from planner.solvers.rl import (ORDERS, Replanner, episode, load_policy, policy_bytes, rl,  # noqa: E402
                                shipped_policy, train)
from planner.solvers.rl_env import N_SLOTS, PlacementEnv  # noqa: E402


@pytest.fixture(scope="module")
def inst():
    return load_instance("tiny-3dc")


@pytest.fixture(scope="module")
def env(inst):
    return PlacementEnv(inst, seed=0)


@pytest.fixture(scope="module")
def trained(inst, tmp_path_factory):
    path = tmp_path_factory.mktemp("rl") / "policy.zip"
    model, curve = train(inst, steps=3000, seed=0, out=path, eval_every=1024)
    return model, curve, path


def run_episode(env, pick, seed=0, options=None):
    """(total reward, last info, plan) of one episode; ``pick(mask) -> action``."""
    obs, _ = env.reset(seed=seed, options=options)
    total, done = 0.0, False
    while not done:
        obs, reward, done, _, info = env.step(pick(env.action_masks()))
        assert env.observation_space.contains(obs)
        total += reward
    return total, info, env.plan()


def test_env_passes_the_gymnasium_checker(env):
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs) and env.action_space.n == N_SLOTS


def test_shape_choice_is_masked_to_the_menu(env, inst):
    k = len(env.menu)
    assert 1 <= k <= N_SLOTS // len(ORDERS)
    env.reset(seed=0)
    mask = env.action_masks()
    assert env.phase == 0 and mask.sum() == k * len(ORDERS) and mask[:k * len(ORDERS)].all()
    for bad in np.nonzero(~mask)[0]:  # a masked action ends the episode with the worst return, no plan
        env.reset(seed=0)
        _, reward, done, _, info = env.step(int(bad))
        assert done and reward == -2.0 and info["invalid_action"] == bad and not env.action_masks().any()
        with pytest.raises(ValueError):
            env.plan()
    env.reset(seed=0)  # also while placing
    env.step(int(np.nonzero(env.action_masks())[0][0]))
    total = 0.0
    for _ in range(2):
        if env.phase != 1:
            break
        m = env.action_masks()
        if (~m).any():
            _, reward, done, _, _ = env.step(int(np.nonzero(~m)[0][0]))
            total += reward
            break
        _, reward, done, _, _ = env.step(int(np.nonzero(m)[0][0]))
        total += reward
    assert done and total == pytest.approx(-2.0)
    # a forced shape and order leave exactly one action, and the episode places that shape
    for i in range(k):
        for o in range(len(ORDERS)):
            env.reset(seed=0, options={"shape": i, "order": o})
            assert np.nonzero(env.action_masks())[0].tolist() == [len(ORDERS) * i + o]
    with pytest.raises(ValueError):
        env.reset(seed=0, options={"shape": k})
    # the menu's shapes are distinct and each is a plan greedy could make (valid as a template)
    keys = {(m.template.tp, m.template.micro_batch_size, str(m.template.schedule), m.template.num_stages,
             m.template.replicas, tuple(m.template.bounds())) for m in env.menu}
    assert len(keys) == k
    assert all(not check_plan(inst, m.template) for m in env.menu)


@pytest.mark.parametrize("name", ["tiny-3dc", "tiny-line", "two-dc"])
def test_every_episode_fits_and_partial_estimate_is_the_evaluators(name):
    inst = load_instance(name)
    env = PlacementEnv(inst, seed=0, base_prob=0.3)
    rng = np.random.default_rng(0)
    for ep in range(12):
        opts = {"shape": ep % len(env.menu), "order": (ep // len(env.menu)) % len(ORDERS)}
        total, info, p = run_episode(env, lambda m: int(rng.choice(np.nonzero(m)[0])), seed=ep, options=opts)
        assert not check_plan(inst, p)  # masking keeps every plan within the GPUs
        assert p.num_stages == env.menu[opts["shape"]].template.num_stages
        st = NetworkStates(env._bw[None, :], env._lat[None, :])
        # the feature follows v2 without v3's fields (rl_env.PartialEstimate); the objective is v3's
        ev, ev2 = Evaluator(inst, p), Evaluator(without_v3_fields(inst), p, spec=2)
        assert env._est_now == pytest.approx(float(ev2.estimate_times(st)[0]), rel=1e-9)
        assert info["objective"] == pytest.approx(float(ev.iteration_times(st)[0]), rel=1e-12)
        # potential-based shaping telescopes: the return is the final reward log(T_ref / T)
        assert total == pytest.approx(info["final"], abs=1e-9)
        assert info["final"] == pytest.approx(np.clip(np.log(info["reference"] / info["objective"]), -2, 1))


def test_cost_objective_partial_estimate_is_the_cost_of_t_est(inst):
    data = inst.to_dict()
    data["options"]["objective"] = "cost"
    data["options"]["wan_price_per_gb"] = 0.02
    for d, price in zip(data["domains"], (4.0, 2.0, 1.5)):
        d["price_per_gpu_hour"] = price
    cost = type(inst).from_dict(data)
    env = PlacementEnv(cost, base_prob=1.0)
    rng = np.random.default_rng(1)
    for ep in range(6):
        _, info, p = run_episode(env, lambda m: int(rng.choice(np.nonzero(m)[0])), seed=ep)
        ev, ev2 = Evaluator(cost, p), Evaluator(without_v3_fields(cost), p, spec=2)
        assert env._est_now == pytest.approx(float(ev2.cost(ev2.estimate_times())[0]), rel=1e-9)
        assert info["objective"] == pytest.approx(float(ev.cost(ev.iteration_times())[0]), rel=1e-12)


def held_out(env, model, seeds, rng=None):
    """Final rewards on held-out states (the env's trace seed differs from training's)."""
    out = []
    for k in seeds:
        if model is None:
            _, info, _ = run_episode(env, lambda m: int(rng.choice(np.nonzero(m)[0])), seed=k)
        else:
            obs, _ = env.reset(seed=k)
            done = False
            while not done:
                a, _ = model.predict(obs, deterministic=True, action_masks=env.action_masks())
                obs, _, done, _, info = env.step(int(a))
        out.append(info["final"])
    return np.array(out)


def test_trained_policy_beats_random_placement(inst, trained):
    model, curve, _ = trained
    env = PlacementEnv(inst, seed=1)  # states from another week of the same generator
    mine = held_out(env, model, range(100))
    rand = held_out(env, None, range(100), np.random.default_rng(0))
    assert mine.mean() > rand.mean() + 0.2
    assert mine.mean() > -0.05  # within about 5% of greedy on average, drifted states included
    # the learning curve: every episode and an evaluation per 1024 steps on the base network
    assert len(curve.episodes) > 100 and [e[0] for e in curve.evals] == [0, 1024, 2048, 3072]
    assert all(e[2] > 0 and e[4] == pytest.approx(e[2] / e[3]) for e in curve.evals)


def test_training_reproducible_for_a_seed(inst):
    a, ca = train(inst, steps=600, seed=7, n_steps=256, eval_every=10**9)
    b, cb = train(inst, steps=600, seed=7, n_steps=256, eval_every=10**9)
    env = PlacementEnv(inst, seed=2)
    assert np.array_equal(held_out(env, a, range(20)), held_out(env, b, range(20)))
    assert ca.episodes == cb.episodes


def test_inference_deterministic_for_a_seed_and_plans_are_the_policys(inst, trained):
    model, _, path = trained
    a, b = rl(inst, policy=str(path), seed=3), rl(inst, policy=str(path), seed=3)
    assert a.placement == b.placement and a.solver.model_extra == b.solver.model_extra
    assert a.solver.model_extra["rl_samples"] == 16 and not check_plan(inst, a)
    # the returned plan is one of the policy's own episodes: re-decode the one it names
    rep = Replanner(inst, model)
    how = a.solver.model_extra["rl_found_by"]
    if how.startswith("deterministic on shape"):
        i = int(how.split()[3].rstrip(","))
        o = ORDERS.index(how.split(", ")[1])
        again, obj, _ = episode(model, rep.env, {"shape": i, "order": o})
    elif how == "deterministic":
        again, obj, _ = episode(model, rep.env)
    else:  # sample k: replay the seeded generator
        rng = np.random.default_rng(3)
        for _ in range(int(how.split()[1])):
            again, obj, _ = episode(model, rep.env, None, rng)
    assert again.placement == a.placement and again.num_stages == a.num_stages
    # no better than any decoded episode's exact simulation, and never worse than the deterministic one
    det, det_obj, _ = episode(model, rep.env)
    assert obj <= det_obj * (1 + 1e-12)
    # a zero time limit: the deterministic episode only
    c = rl(inst, policy=model, seed=3, time_limit=0.0)
    assert c.solver.model_extra["rl_samples"] == 0 and c.placement == det.placement


def test_rl_solver_through_plan_with_given_and_shipped_policy(inst, trained):
    _, _, path = trained
    p = make_plan(inst, solver="rl", policy=str(path))
    assert p.solver.name == "rl" and not check_plan(inst, p)
    assert p.predicted.iteration_time_s > 0 and p.solver.gap is not None
    shipped = shipped_policy(inst.name)
    assert shipped is not None, "no policy under models/rl/"
    meta = json.loads(open(str(shipped) + ".json").read())
    assert {"command", "commit", "steps", "seed"} <= set(meta)
    q = make_plan(inst, solver="rl")  # the shipped policy, no training
    assert q.solver.model_extra["rl_policy"] == str(shipped) and not check_plan(inst, q)


def test_old_policy_format_is_an_input_error(inst, trained, tmp_path):
    from planner.problem.errors import InputError

    _, _, path = trained
    old = tmp_path / "old.zip"
    old.write_bytes(path.read_bytes())
    (tmp_path / "old.zip.json").write_text(json.dumps({"instance": "tiny-3dc"}))
    with pytest.raises(InputError, match="older planner"):
        load_policy(old)


def test_rl_rollout_policy(inst, trained, tmp_path):
    from planner.problem import traces
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
    from click.testing import CliRunner

    from planner.cli import main

    tpath = tmp_path / "t.csv"
    traces.save(tr, tpath)
    res = CliRunner().invoke(main, ["simulate", "tiny-3dc", "--trace", str(tpath), "--iterations", "300",
                                    "--policy", "rl", "--rl-policy", str(path), "--json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)[0]
    assert row["policy"] == "rl" and row["decisions"] >= 1
    res = CliRunner().invoke(main, ["simulate", "tiny-3dc", "--trace", str(tpath), "--policy", "rl"])
    assert res.exit_code == 2 and "--rl-policy" in res.output


def test_cli_train_writes_policy_sidecar_and_learning_curve(tmp_path):
    from click.testing import CliRunner

    from planner.cli import main

    out = tmp_path / "p.zip"
    res = CliRunner().invoke(main, ["rl", "train", "tiny-line", "--steps", "300", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "p.zip.json").read_text())
    assert meta["instances"] == ["tiny-line"] and meta["steps"] == 300 and meta["command"].startswith("planner rl")
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows[0].startswith("kind,step,instance") and any(r.startswith("eval,") for r in rows)
    assert (tmp_path / "p.png").stat().st_size > 5000
    assert "deterministic plan / greedy's" in res.output


def test_a_time_limit_before_the_first_episode_returns_greedys_menu_plan(inst):
    """Issue 28.11: an episode over 160 domains takes seconds, so the first one ran
    past small limits (azure-zones, 5 s: 31 s).  Past the deadline before any
    episode ends, the planner returns the menu's best greedy plan as time_limit."""
    rep = Replanner(inst)  # the shipped policy
    p = rep(time_limit=0.0)
    assert p.solver.status == "time_limit" and p.solver.model_extra["rl_samples"] == 0
    best = min(rep.env.menu, key=lambda s: (s.exact, s.estimate))
    assert p.placement == best.template.placement and p.stages == best.template.stages
    assert not check_plan(inst, p)
    # with time, episodes run and the plan is the policy's
    q = rep(time_limit=None)
    assert q.solver.status == "heuristic" and q.solver.model_extra["rl_found_by"].startswith("deterministic")
