"""The PPO allocator for several jobs (planner/solvers/multijob/rl.py, rl_env.py): a standard
gymnasium environment; its reward is multievaluate's figures recombined; no episode breaks
a capacity, a quota or the allowed domains; the shipped policy loads and gives a feasible
multi-plan; training repeats for a seed; bad policy files exit 2."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("sb3_contrib")

from gymnasium.utils.env_checker import check_env  # noqa: E402

import planner  # noqa: E402
from planner.cli import main  # noqa: E402
from planner.problem.io import load_multi_instance  # noqa: E402
from planner.problem.jobs import MultiInstance  # noqa: E402
from planner.scoring.multievaluate import multievaluate  # noqa: E402
from planner.solvers.multijob import references  # noqa: E402
from planner.solvers.multijob.columns import assemble  # noqa: E402
from planner.solvers.multijob.rl import (FORMAT, KIND, allocate, column_figures, load_policy, make_menu,  # noqa: E402
                                         shipped_policy, train)
from planner.solvers.multijob.rl_env import (N_ACTIONS, N_MENU, REWARD_INVALID, SKIP, AllocationEnv,  # noqa: E402
                                             reward_of)
from planner.scoring.multievaluate import better, objective_value  # noqa: E402


def four_jobs(objective="maxmin") -> MultiInstance:
    """two-jobs' cluster (alpha 16, beta 8, gamma 12 GPUs) with four jobs, one confined to
    two domains, two with quotas, one of weight 2 with a tight deadline."""
    base = load_multi_instance("two-jobs")
    data = base.to_dict()
    small, wide = data["jobs"]
    data["jobs"] = [dict(small, allowed_domains=["alpha", "gamma"]), wide,
                    dict(small, name="small2", weight=2.0, deadline_hours=0.5, max_gpus=5),
                    dict(wide, name="wide2", allowed_domains=["beta", "gamma"], max_gpus=6)]
    data["options"] = {**data.get("options", {}), "multi_objective": objective}
    return MultiInstance.from_dict(data)


@pytest.fixture(scope="module")
def mix():
    minst = four_jobs()
    refs = references(minst)
    return minst, refs, make_menu(minst, refs)


def random_episode(env, rng, options=None):
    """(reward, allocation) of one episode of uniformly drawn valid actions."""
    env.reset(seed=0, options=options)
    while True:
        a = int(rng.choice(np.nonzero(env.action_masks())[0]))
        _, r, done, _, info = env.step(a)
        if done:
            return r, env.allocation()


def test_env_passes_the_gymnasium_checker(mix):
    _, _, menu = mix
    for env in (AllocationEnv([menu]), AllocationEnv([menu, menu], augment=True)):
        check_env(env, skip_render_check=True)
        obs, _ = env.reset(seed=1)
        assert env.observation_space.contains(obs) and env.action_space.n == N_ACTIONS


def test_menu_columns_respect_allowed_domains_quotas_and_what_is_left(mix):
    """Every menu column of every step lies in its job's allowed domains, within its quota
    and within what the step leaves it (A_t: free less the later jobs' fallbacks); its plan
    uses only its GPUs; slot 0 is the fallback and always valid."""
    minst, _, menu = mix
    env = AllocationEnv([menu])
    rng = np.random.default_rng(1)
    for e in range(4):
        env.reset(seed=e)
        assert env.fb is not None
        while not env.done:
            j = env.jobs[env.t]
            spec = minst.jobs[j]
            cols, avail, mask = env.current_menu(), env.available(), env.action_masks()
            assert cols[0] is env.fb[j] and mask[0] and not mask[SKIP]
            for k, c in enumerate(cols):
                if c is None:
                    assert not mask[k]
                    continue
                assert set(c.gpus) <= set(minst.allowed(j))
                assert spec.max_gpus is None or c.total_gpus <= spec.max_gpus
                assert set(d for d, n in c.plan.gpus_per_domain().items() if n) <= set(c.gpus)
                assert mask[k] and (menu.use(c) <= avail + 1e-9).all()
            env.step(int(rng.choice(np.nonzero(mask)[0])))


def test_grids_round_down():
    from planner.solvers.multijob.rl_env import GPU_GRID, grid_gpus, grid_share

    for n in range(0, 300):
        g = grid_gpus(n + 0.5)
        assert g <= n + 0.5 and (g == 0) == (n == 0)
        assert not any(g < x <= n for x in GPU_GRID)  # the largest grid point below
    for s in np.linspace(0, 1, 97):
        assert 0 <= s - grid_share(s) < 1 / 32 + 1e-12


def test_reward_is_multievaluates_figures_recombined(mix):
    """Every episode's reward equals the reward recomputed from multievaluate's rho and
    deadlines of the multi-plan the episode makes (reserved sharing); so do the objective's."""
    minst, refs, menu = mix
    env = AllocationEnv([menu])
    rng = np.random.default_rng(0)
    weights = [s.weight for s in minst.jobs]
    seen = set()
    for _ in range(8):
        r, alloc = random_episode(env, rng)
        seen.add(tuple(sorted((j, id(c)) for j, c in alloc.items())))
        mp = assemble(minst, "deadline", [alloc[j] for j in range(len(minst.jobs))], refs)
        ev = multievaluate(minst, mp)
        assert ev.feasible, ev.violations  # deadline: a job may be left out
        want = reward_of([f.rho for f in ev.jobs], [f.deadline_met for f in ev.jobs], weights)
        assert r == pytest.approx(want, rel=1e-9, abs=1e-12)
        # the allocator's objective from its columns is multievaluate's, for every objective
        for obj in ("maxmin", "weighted", "deadline", "cost", "makespan"):
            mine = objective_value(obj, column_figures(minst, alloc), minst)
            theirs = objective_value(obj, ev.jobs, minst)
            assert mine == pytest.approx(theirs, rel=1e-9)
    assert len(seen) > 3  # the episodes differ


def test_reward_closed_form():
    # weighted rho (1*1 + 3*0.5)/4 = 0.625, min rho 0.5, weight met 1/4: mean 0.4583...
    assert reward_of([1.0, 0.5], [True, False], [1.0, 3.0]) == pytest.approx((0.625 + 0.5 + 0.25) / 3)
    assert reward_of([0.0, 1.0], [False, True], [1.0, 1.0]) == pytest.approx((0.5 + 0.0 + 0.5) / 3)


def test_masked_action_ends_the_episode_and_skip_only_without_fallbacks(mix):
    _, _, menu = mix
    env = AllocationEnv([menu])
    env.reset(seed=0)
    m = env.action_masks()
    assert m[0] and not m[SKIP]  # the fallback is always offered, so SKIP never is
    bad = int(np.nonzero(~m)[0][0])
    _, r, done, _, info = env.step(bad)
    assert done and r == REWARD_INVALID and info["invalid_action"] == bad and not env.action_masks().any()
    # greediest choices (most GPUs) still leave every later job its fallback
    env.reset(seed=0)
    while not env.done:
        m = env.action_masks()
        assert m[0] and not m[SKIP]
        cols = env.current_menu()
        a = max(np.nonzero(m[:N_MENU])[0], key=lambda k: (cols[k].total_gpus, k))
        env.step(int(a))
    assert all(c is not None for c in env.allocation().values())


def random_mix(draw_seed: int, n_jobs: int) -> MultiInstance:
    """A small random mix on two-jobs' cluster (alpha 16, beta 8, gamma 12 GPUs): the two
    toy workloads, random allowed domains (from 1 of 3), quotas, weights, deadlines."""
    rng = np.random.default_rng(draw_seed)
    base = load_multi_instance("two-jobs")
    data = base.to_dict()
    kinds = data["jobs"]
    doms = ["alpha", "beta", "gamma"]
    jobs = []
    for i in range(n_jobs):
        job = dict(kinds[int(rng.integers(2))], name=f"j{i}", weight=float(rng.choice([1.0, 2.0, 5.0])))
        job.pop("allowed_domains", None)
        job.pop("deadline_hours", None)
        if rng.random() < 0.5:
            job["allowed_domains"] = sorted(rng.choice(doms, size=int(rng.integers(1, 3)), replace=False).tolist())
        if rng.random() < 0.4:
            job["max_gpus"] = int(rng.integers(2, 12))
        if rng.random() < 0.4:
            job["deadline_hours"] = float(rng.choice([0.2, 1.0, 5.0]))
        jobs.append(job)
    data["jobs"] = jobs
    data["name"] = f"random-{draw_seed}-{n_jobs}"
    return MultiInstance.from_dict(data)


@settings(max_examples=6, deadline=None)
@given(mix_seed=st.integers(0, 2**31 - 1), n_jobs=st.integers(2, 4), seed=st.integers(0, 2**31 - 1))
def test_no_episode_on_random_mixes_breaks_a_capacity_quota_or_allowed_domain(mix_seed, n_jobs, seed):
    """Property, on random small mixes and random valid actions: the multi-plan holds every
    capacity (multievaluate finds no violation), each job's GPUs lie in its allowed domains,
    within its quota; and when every job has a plan on its equal slice, every job is
    admitted (the maxmin multi-plan is feasible)."""
    from planner.problem.jobs import equal_slice

    minst = random_mix(mix_seed, n_jobs)
    refs = references(minst)
    menu = make_menu(minst, refs)
    env = AllocationEnv([menu])
    _, alloc = random_episode(env, np.random.default_rng(seed))
    cols = [alloc.get(j) for j in range(len(minst.jobs))]
    ev = multievaluate(minst, assemble(minst, "deadline", cols, refs))
    assert ev.feasible, ev.violations
    for j, c in alloc.items():
        if c is not None:
            spec = minst.jobs[j]
            assert set(d for d, n in c.gpus.items() if n) <= set(minst.allowed(j))
            assert spec.max_gpus is None or sum(c.gpus.values()) <= spec.max_gpus
    for d in minst.domains:  # an independent sum of the GPUs given
        assert sum(c.gpus.get(d.name, 0) for c in alloc.values() if c is not None) <= d.gpus
    for key in [f"{l.a}|{l.b}" for l in minst.links]:
        assert sum(c.link_share.get(key, 0.0) for c in alloc.values() if c is not None) <= 1 + 1e-9
    if all(menu.pool.make(j, *equal_slice(minst, j)) is not None for j in range(len(minst.jobs))):
        assert env.fb is not None and all(c is not None for c in cols)
        assert multievaluate(minst, assemble(minst, "maxmin", cols, refs)).feasible


def test_fallbacks_fit_together_and_every_episode_admits_every_job(mix):
    """The fallbacks of every subset of the jobs fit the cluster together; episodes drawn
    among valid actions then admit every job, whatever the subset."""
    from itertools import combinations

    from planner.solvers.multijob.rl_env import fallbacks

    minst, _, menu = mix
    J = len(minst.jobs)
    for n in (2, J):
        for sub in combinations(range(J), n):
            fb = fallbacks(menu, list(sub))
            assert fb is not None and sorted(fb) == list(sub)
            assert (sum(menu.use(c) for c in fb.values()) <= menu.capacity + 1e-9).all()
    env = AllocationEnv([menu], augment=True)
    rng = np.random.default_rng(4)
    for e in range(6):
        env.reset(seed=e)
        while not env.done:
            env.step(int(rng.choice(np.nonzero(env.action_masks())[0])))
        assert all(c is not None for c in env.allocation().values())


@pytest.fixture(scope="module")
def shipped():
    path = shipped_policy()
    assert path is not None and path.name == "multijob.zip"
    return path


def test_shipped_policy_metadata(shipped):
    model, meta = load_policy(shipped)
    assert meta["kind"] == KIND and meta["format"] == FORMAT == 2
    for key in ("command", "commit", "steps", "seed", "mixes", "mix_seeds", "train_s", "plan_s", "last_eval_reward"):
        assert key in meta, key
    assert meta["command"].startswith("planner rl train-multijob")
    assert meta["warm_s"] + meta["train_s"] <= 20 * 60  # the shipped one: 949 s on 2 cores shared with others  # trained in 15 minutes (2 shared cores)
    assert min(meta["mix_seeds"]) >= 1000  # apart from the benchmark's held-out seeds (0-99)
    assert len(meta["mixes"]) == len(meta["bases"]) * len(meta["mix_seeds"])


def test_shipped_policy_gives_a_feasible_multiplan(mix, shipped):
    minst, refs, menu = mix
    mp = allocate(minst, refs, menu=menu, samples=4, seed=0)
    ev = multievaluate(minst, mp)
    assert ev.feasible, ev.violations
    assert all(a.admitted for a in mp.jobs)
    extra = mp.solver.model_extra
    want = reward_of([f.rho for f in ev.jobs], [f.deadline_met for f in ev.jobs], [s.weight for s in minst.jobs])
    assert extra["rl_reward"] == pytest.approx(want, rel=1e-9)
    assert extra["rl_episodes"] == 5
    # the same seed, the same multi-plan; and planner.multiplan(allocator="rl") is this allocator
    again = allocate(minst, refs, menu=menu, samples=4, seed=0)
    assert [(a.gpus, a.link_share, a.uplink_share) for a in again.jobs] == \
        [(a.gpus, a.link_share, a.uplink_share) for a in mp.jobs]
    # (on a fresh pool: the fixture's library has grown in other tests, and samples draw from it)
    fresh = allocate(minst, refs, samples=4, seed=0)
    via = planner.multiplan(minst, allocator="rl", references=refs, samples=4, time_limit=30)
    assert via.solver.model_extra["allocator"] == "rl" and via.solver.status == "heuristic"
    assert via.solver.objective == pytest.approx(multievaluate(minst, fresh).objective_value, rel=1e-9)
    assert [(a.gpus, a.link_share) for a in via.jobs] == [(a.gpus, a.link_share) for a in fresh.jobs]


def test_polish_only_improves_and_keeps_the_multiplan_feasible(mix, shipped):
    """The after-the-fact polish (the worst job re-planned on its column plus what no job
    holds) never makes the objective worse, and the multi-plan stays feasible."""
    from planner.solvers.multijob.rl import polish

    minst, refs, menu = mix
    for obj in ("maxmin", "weighted"):
        env = AllocationEnv([menu])
        _, cols = random_episode(env, np.random.default_rng(7))
        new, n = polish(menu, cols, obj)
        before = objective_value(obj, column_figures(minst, cols), minst)
        after = objective_value(obj, column_figures(minst, new), minst)
        assert not better(obj, before, after)
        assert (n == 0) == (after == before) and (n == 0 or better(obj, after, before))
        ev = multievaluate(minst, assemble(minst, obj, [new.get(j) for j in range(len(minst.jobs))], refs))
        assert ev.feasible, ev.violations


def test_kept_episode_is_the_best_sampled_by_the_objective(mix, shipped):
    """The allocator keeps the best of its episodes by the objective: never worse than
    the most likely episode alone (samples=0)."""
    minst, refs, menu = mix
    one = multievaluate(minst, allocate(minst, refs, menu=menu, samples=0))
    many = multievaluate(minst, allocate(minst, refs, menu=menu, samples=8, seed=3))
    assert (many.objective_value, many.tiebreak) >= (one.objective_value, one.tiebreak)


def test_training_repeats_for_a_seed(mix, tmp_path):
    minst, refs, menu = mix
    m1, rows1 = train([minst], [refs], steps=256, seed=5, menus=[menu], n_steps=128, out=tmp_path / "a.zip")
    m2, rows2 = train([minst], [refs], steps=256, seed=5, menus=[menu], n_steps=128)
    assert [r[:4] for r in rows1] == [r[:4] for r in rows2]
    p1, p2 = m1.policy.state_dict(), m2.policy.state_dict()
    assert all(np.array_equal(p1[k].numpy(), p2[k].numpy()) for k in p1)
    model, meta = load_policy(tmp_path / "a.zip")
    assert meta["steps"] == 256 and meta["mixes"] == [minst.name]


def test_cli_refuses_bad_policies(tmp_path):
    bad = tmp_path / "p.zip"
    bad.write_bytes(b"\x00garbage")
    (tmp_path / "p.zip.json").write_text(json.dumps({"kind": KIND, "format": FORMAT}))
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--allocator", "rl", "--policy", str(bad), "-q"])
    assert r.exit_code == 2 and str(bad) + ":" in r.output and "internal error" not in r.output, r.output
    # a policy of the static menus (format 1) reads other observations: exit 2 naming the field
    (tmp_path / "p.zip.json").write_text(json.dumps({"kind": KIND, "format": 1}))
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--allocator", "rl", "--policy", str(bad), "-q"])
    assert r.exit_code == 2 and "p.zip.json" in r.output and "format" in r.output, r.output
    # a single-job policy is not an allocator's: exit 2 naming its metadata and the field
    general = shipped_policy().parent / "general.zip"
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--allocator", "rl", "--policy", str(general), "-q"])
    assert r.exit_code == 2 and "general.zip.json" in r.output and "kind" in r.output, r.output
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--policy", str(general), "-q"])
    assert r.exit_code == 2 and "--policy" in r.output, r.output


def test_cli_multiplan_allocator_rl_json(tmp_path):
    out = tmp_path / "mp.json"
    r = CliRunner().invoke(main, ["multiplan", "two-jobs", "--allocator", "rl", "--json", "--out", str(out), "-q"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["solver"]["allocator"] == "rl" and doc["feasible"]
    r2 = CliRunner().invoke(main, ["multievaluate", "two-jobs", str(out), "--json"])
    assert r2.exit_code == 0 and json.loads(r2.output)["objective_value"] == pytest.approx(doc["objective_value"])
    assert math.isfinite(doc["objective_value"])
