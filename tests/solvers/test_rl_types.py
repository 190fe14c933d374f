"""The RL planner with several GPU types (SPEC v3 (g), issue 25): the typed observation
(policy format 3) prices each candidate at its own type, its features are right on a
hand case, episodes only place a stage where its memory fits, a format-2 policy is
refused on a mixed instance, ``rl`` is never worse than greedy there (it keeps greedy's
plan when the policy's are slower), and single-type instances observe and plan exactly
as on main."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from planner import check_plan, load_instance  # noqa: E402
from planner.problem.errors import InputError  # noqa: E402
from planner.problem.network import NetworkStates  # noqa: E402
from planner.problem.oplists import Flush  # noqa: E402
from planner.scoring.estimate import stage_end_estimates  # noqa: E402
from planner.scoring.evaluator import Evaluator  # noqa: E402
from planner.scoring.figures import PlanFigures  # noqa: E402
from planner.solvers.greedy import greedy  # noqa: E402
from planner.solvers.rl import (FORMAT_TYPED, Replanner, load_policy, policy_format,  # noqa: E402
                                shipped_policy)
from planner.solvers.rl_env import SLOT, SLOT_TYPED, PlacementEnv, one_type  # noqa: E402

from gpu_types_instances import tiny_mixed, two_speeds  # noqa: E402
import rl_fingerprint  # noqa: E402

# recorded with main's code (commit e01602f): python tests/solvers/rl_fingerprint.py
MAIN_OBSERVATIONS = {"tiny-3dc": "27f7f89eb6d1009e", "tiny-line": "ded6ec217b1294e0", "two-dc": "4f622f63aaaa5268"}
MAIN_RL_PLANS = {"tiny-3dc": ("540f4ede9302c701", "deterministic"), "tiny-line": ("59936141499b50f3", "deterministic")}


@pytest.mark.parametrize("name", sorted(MAIN_OBSERVATIONS))
def test_single_type_observations_are_mains(name):
    assert rl_fingerprint.observations(name) == MAIN_OBSERVATIONS[name]


@pytest.mark.parametrize("name", sorted(MAIN_RL_PLANS))
def test_single_type_plans_are_mains_with_the_general_policy(name):
    assert shipped_policy(name).name == "general.zip"
    assert rl_fingerprint.rl_plan(name) == MAIN_RL_PLANS[name]


def test_typed_layout_on_one_type_extends_the_untyped_one():
    """The typed observation of a single-type instance holds the untyped features unchanged,
    the candidate's speed at 0 (its type is the fastest) and its memory headroom."""
    inst = load_instance("tiny-3dc")
    a, b = PlacementEnv(inst, seed=0), PlacementEnv(inst, seed=0, typed=True)
    rng = np.random.default_rng(0)
    oa, _ = a.reset(seed=1)
    ob, _ = b.reset(seed=1)
    while True:
        sa = oa[13:].reshape(-1, SLOT)
        sb = ob[13:].reshape(-1, SLOT_TYPED)
        assert np.array_equal(oa[:13], ob[:13]) and np.array_equal(sa, sb[:, :SLOT])
        if a.phase == 1:
            k = len(a._order)
            assert (sb[:k, 16] == 0).all() and ((sb[:k, 17] >= 0) & (sb[:k, 17] < 1)).all()
        assert np.array_equal(a.action_masks(), b.action_masks())
        act = int(rng.choice(np.nonzero(a.action_masks())[0]))
        oa, _, done, _, _ = a.step(act)
        ob, _, _, _, _ = b.step(act)
        if done:
            break
    assert a.plan() == b.plan()


def typed_reference(inst, plan, bw, lat) -> float:
    """SPEC v2's T_est with each (replica, stage) at its domain's type, from the evaluator's
    pieces: the network figures (x, l, AR) of the v2 evaluator on the instance with one type
    (they do not depend on the type), each type's f, g from its one-type figures, E^est per
    replica at its own types, the largest over replicas (SPEC 7, "GPU types")."""
    st = NetworkStates(np.asarray(bw, float)[None, :], np.asarray(lat, float)[None, :])
    ev = Evaluator(one_type(inst, inst.types_used[0]), plan, spec=2)
    comm = ev.fig.comm(st)
    figs = {u: PlanFigures(one_type(inst, u), plan, spec=2) for u in inst.types_used}
    flush = [Flush(ev.fig.m, tuple(ev.fig.inflight), plan.schedule == "gpipe")]
    E = None
    for r, row in enumerate(plan.placement):
        types = [inst.domain_type[inst.domain_index[d]] for d in row]
        f = np.array([figs[u].f[j] for j, u in enumerate(types)])
        g = np.array([figs[u].g[j] for j, u in enumerate(types)])
        e = stage_end_estimates(f, g, comm.x[:, [r]], comm.l[:, [r]], flush, downstream=False)
        E = e if E is None else np.maximum(E, e)
    return float((E + comm.ar).max(axis=1)[0])


MIXED = {"tiny-mixed": lambda: load_instance("tiny-mixed"), "tiny-3dc+gamma": tiny_mixed,
         "tiny-line+b": lambda: tiny_mixed("tiny-line", fast=("b",)),
         # beta twice as fast with 27 MB usable: some stages of greedy's shapes fit only the toy GPU
         "tiny-3dc+beta-small": lambda: tiny_mixed(fast=("beta",), gpu={"name": "toy-2tf", "peak_tflops": 2.0,
                                                                         "memory_gb": 0.03, "mfu": 0.5})}


@pytest.mark.parametrize("name", sorted(MIXED))
def test_typed_episodes_fit_and_partial_estimate_is_the_typed_one(name):
    inst = MIXED[name]()
    env = PlacementEnv(inst, seed=0, base_prob=0.3)
    assert env.typed and env.observation_space.shape == (13 + 16 * SLOT_TYPED,)
    check_env(env, skip_render_check=True)
    rng = np.random.default_rng(0)
    excluded = 0
    for ep in range(12):
        opts = {"shape": ep % len(env.menu), "order": ep % 2}
        obs, _ = env.reset(seed=ep, options=opts)
        total, done = 0.0, False
        while not done:
            if env.phase == 1:  # every candidate holds the stage in its type's usable memory
                j = env._rj()[1]
                free = np.nonzero(env._free > 0)[0]
                ok = env.est.memory[j] <= env.mem_limit[env._order] * (1 + 1e-12)
                assert ok.all()
                excluded += len(free) - len(env._order)
            obs, reward, done, _, info = env.step(int(rng.choice(np.nonzero(env.action_masks())[0])))
            assert env.observation_space.contains(obs)
            total += reward
        p = env.plan()
        assert not check_plan(inst, p)  # memory per type included: masking keeps every plan valid
        assert env._est_now == pytest.approx(typed_reference(inst, p, env._bw, env._lat), rel=1e-12)
        st = NetworkStates(env._bw[None, :], env._lat[None, :])
        assert info["objective"] == pytest.approx(float(Evaluator(inst, p).iteration_times(st)[0]), rel=1e-12)
        assert total == pytest.approx(info["final"], abs=1e-9)
    if name == "tiny-3dc+beta-small":  # beta's 27 MB cannot hold every stage: some free domains were masked
        assert excluded > 0


def test_typed_partial_estimate_on_one_type_is_the_evaluators():
    """A placement all on one type of a mixed instance: T_est is the v2 evaluator's of
    the instance with that type everywhere."""
    inst = load_instance("tiny-mixed")
    env = PlacementEnv(inst, seed=0, base_prob=1.0)
    slow = [d for d in range(env.D) if inst.domain_type[d] == inst.domain_type[0]]
    for i in range(len(env.menu)):
        env.reset(seed=0, options={"shape": i, "order": 0})
        env.step(int(np.nonzero(env.action_masks())[0][0]))
        while env.phase == 1:
            choice = [k for k, d in enumerate(env._order) if d in slow]
            if not choice:
                break
            env.step(choice[0])
        if env.phase != 2:
            continue
        p = env.plan()
        u = inst.domain_type[0]
        ref = float(Evaluator(one_type(inst, u), p, spec=2).estimate_times()[0])
        assert env._est_now == pytest.approx(ref, rel=1e-12)


def test_typed_features_on_a_hand_case():
    """Two domains of one GPU each, speeds 2:1, memory for the whole model on both: with one
    stage and one replica, placing it on fast gives T_est = m c_fast, on slow m c_slow
    (c = 12 units x 3 s / speed, m = 8), the speed feature 0 for fast and log(1/2) for slow,
    the headroom 1 - M / usable memory; the faster candidate is ranked first."""
    inst = two_speeds(memory=(0.32, 0.32))
    env = PlacementEnv(inst, seed=0, base_prob=1.0)
    one = [i for i, s in enumerate(env.menu) if s.template.num_stages == 1 and s.template.replicas == 1]
    assert one, [(s.template.num_stages, s.template.replicas) for s in env.menu]
    env.reset(seed=0, options={"shape": one[0], "order": 0})
    obs, _, _, _, _ = env.step(int(np.nonzero(env.action_masks())[0][0]))
    names = [inst.domain_names[d] for d in env._order]
    assert names == ["fast", "slow"]
    m = env.template.num_micro_batches
    assert m == 8
    assert env._cand_est.tolist() == pytest.approx([m * 36.0 / 2, m * 36.0], rel=1e-12)
    slots = obs[13:].reshape(-1, SLOT_TYPED)
    assert slots[0, 16] == pytest.approx(0.0) and slots[1, 16] == pytest.approx(math.log(0.5), rel=1e-6)
    assert slots[0, 16] > slots[1, 16]
    M = 16 * 12e6  # 16 bytes of state per parameter, 12 units of 1e6, nothing stored
    usable = inst.memory_limit_of(inst.gpu_types[0])
    assert slots[:2, 17] == pytest.approx([1 - M / usable] * 2, rel=1e-6)
    # the one-stage plan on fast: the evaluator agrees (v3, no unit overhead here)
    _, _, done, _, info = env.step(0)
    assert done and info["objective"] == pytest.approx(m * 18.0, rel=1e-9)


@pytest.fixture(scope="module")
def untrained():
    """A typed policy that has not learnt anything (its plans are rarely greedy's)."""
    from sb3_contrib import MaskablePPO

    from planner.solvers.rl_net import SlotPolicy, slot_policy_kwargs

    env = PlacementEnv(load_instance("tiny-mixed"), seed=0)
    return MaskablePPO(SlotPolicy, env, policy_kwargs=slot_policy_kwargs(), seed=0, device="cpu")


def test_format_two_policy_is_refused_on_a_mixed_instance(tmp_path, untrained):
    from click.testing import CliRunner

    from planner.cli import main
    from planner.solvers.registry import plan

    inst = load_instance("tiny-mixed")
    general = shipped_policy("tiny-3dc")
    assert general.name == "general.zip" and policy_format(load_policy(general)[0]) == 2
    with pytest.raises(InputError, match="format 2 sees one GPU type") as err:
        Replanner(inst, str(general))
    assert err.value.field == "policy"
    with pytest.raises(InputError, match="format 2"):
        plan(inst, solver="rl", policy=str(general))
    res = CliRunner().invoke(main, ["plan", "tiny-mixed", "--solver", "rl", "--policy", str(general)])
    assert res.exit_code == 2 and "format 2" in res.output and "Traceback" not in res.output
    # a sidecar whose format does not match the network, and a format from a newer planner
    bad = tmp_path / "bad.zip"
    shutil.copy(general, bad)
    meta = json.loads(open(str(general) + ".json").read())
    (tmp_path / "bad.zip.json").write_text(json.dumps({**meta, "format": FORMAT_TYPED}))
    with pytest.raises(InputError, match="does not match the policy's network"):
        load_policy(bad)
    (tmp_path / "bad.zip.json").write_text(json.dumps({**meta, "format": 9}))
    with pytest.raises(InputError, match="newer planner"):
        load_policy(bad)
    assert policy_format(untrained) == FORMAT_TYPED


@pytest.mark.parametrize("name", ["tiny-mixed", "tiny-line+b"])
def test_rl_never_worse_than_greedy_on_mixed_and_keeps_greedys_plan(name, untrained):
    inst = MIXED[name]()
    rep = Replanner(inst, untrained, per_shape=False, samples=0)
    g = rep.greedy
    assert g.placement == greedy(inst).placement
    p = rep()
    ev = Evaluator(inst, p)
    obj = float(ev.iteration_times()[0])
    assert ev.evaluate().feasible
    gobj = float(Evaluator(inst, g).iteration_times()[0])
    rep.greedy = None  # the policy's own plan alone
    own = rep()
    own_obj = float(Evaluator(inst, own).iteration_times()[0])
    assert obj == pytest.approx(min(own_obj, gobj), rel=1e-12)
    if own_obj > gobj * (1 + 1e-9):  # the policy's plan is slower: greedy's is kept, and said so
        assert p.placement == g.placement and p.stages == g.stages
        assert p.solver.model_extra["rl_found_by"].startswith("greedy's plan")
    else:
        assert p.placement == own.placement
    if name == "tiny-mixed":
        assert own_obj > gobj  # the untrained policy is slower here: the branch above is exercised


def test_shipped_typed_policy_plans_mixed_instances():
    from planner.solvers.registry import GPU_TYPE_SOLVERS, plan

    assert "rl" in GPU_TYPE_SOLVERS
    path = shipped_policy("tiny-mixed", typed=True)
    assert path is not None and path.name == "types.zip"
    model, meta = load_policy(path)
    assert meta["format"] == FORMAT_TYPED and policy_format(model) == FORMAT_TYPED
    assert {"command", "commit", "steps", "seed", "train_s"} <= set(meta)
    inst = load_instance("tiny-mixed")
    p = plan(inst, solver="rl")
    assert p.solver.model_extra["rl_policy"] == str(path) and not check_plan(inst, p)
    assert p.predicted.iteration_time_s <= plan(inst, solver="greedy").predicted.iteration_time_s * (1 + 1e-12)


@pytest.mark.parametrize("name", ["tiny-mixed", "tiny-3dc+beta-small"])
def test_typed_cut_of_the_policys_placement(name, untrained):
    """On a mixed instance each decoded plan is also tried with the layer cut balanced for
    the types its placement lands on: the placement stays the policy's, the faster is kept."""
    from planner.problem.space import PlanSpace
    from planner.solvers.greedy import stage_types
    from planner.solvers.rl import episode

    inst = MIXED[name]()
    rep = Replanner(inst, untrained)
    space = PlanSpace(inst)
    changed = 0
    for i in range(min(3, len(rep.env.menu))):
        opts = {"shape": i, "order": 0}
        plain, plain_obj, _ = episode(untrained, rep.env, opts)
        p, obj, _, note = rep._episode(opts, None, None)
        assert p.placement == plain.placement and obj <= plain_obj
        assert obj == pytest.approx(float(Evaluator(inst, p).iteration_times()[0]), rel=1e-12)
        assert not check_plan(inst, p)
        if note:
            changed += 1
            cuts = space.typed_partition(p.tp, p.micro_batch_size, p.schedule, p.num_stages, p.num_micro_batches,
                                         stage_types(inst, p.placement))
            assert [tuple(c) for c in p.bounds()] == [tuple(c) for c in cuts] and obj < plain_obj
        else:
            assert p == plain
    assert changed > 0
