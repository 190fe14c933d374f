"""The benchmark harness: baselines are feasible, results do not depend on
the executor (serial, process pool, Ray), tables and plots are written."""

import pytest

from planner import check_plan, load_instance
from planner import bench
from helpers import benchmark_module, readme_block

KEYS = ("instance", "method", "iteration_s", "estimate_s", "x_bound", "status")


def stable(rows):
    return [{k: r[k] for k in KEYS} for r in rows]


def test_baselines_feasible():
    for name in ("tiny-3dc", "tiny-line", "two-dc"):
        inst = load_instance(name)
        for p in (bench.megatron_plan(inst), bench.random_plan(inst, seed=1)):
            assert p is not None and not check_plan(inst, p)
    inst = load_instance("tiny-line")
    m = bench.megatron_plan(inst)
    assert all(len(set(row)) == len(row) for row in m.placement)  # one domain per stage
    assert m.schedule == "1f1b"
    assert bench.random_plan(inst, seed=1) == bench.random_plan(inst, seed=1)


def test_cost_instance_rows_report_the_objective():
    """On a cost instance the table's figure and ratio are the cost per iteration (greedy's plan
    for cost-edwc runs 5x slower than the Megatron baseline's yet costs 2.7x less)."""
    g, m = (bench.run_static(bench.Task("cost-edwc", meth, 60.0, 0, None)) for meth in ("greedy", "megatron"))
    for r in (g, m):
        assert r["objective"] == "cost"
        assert r["x_bound"] >= 1 - 1e-9
    # one bound for the instance: the ratios are in the proportion of the costs, not of the times
    assert g["x_bound"] / m["x_bound"] == pytest.approx(g["cost_per_iteration"] / m["cost_per_iteration"])
    assert g["iteration_s"] > m["iteration_s"]
    assert g["cost_per_iteration"] < m["cost_per_iteration"] and g["x_bound"] < m["x_bound"]


@pytest.mark.slow
def test_executors_agree_and_files_written(tmp_path):
    names, methods = ["tiny-3dc", "tiny-line"], ["greedy", "megatron", "random"]
    serial, dyn = bench.run(names, methods, dynamic=True, hours=1, iterations=100, executor="serial",
                            show_progress=False)
    pool, _ = bench.run(names, methods, dynamic=False, executor="process", show_progress=False)
    assert stable(serial) == stable(pool)
    greedy = {r["instance"]: r for r in serial if r["method"] == "greedy"}
    for r in serial:  # greedy is never beaten by the random baseline on T_est... and bounds hold
        assert r["x_bound"] >= 1 - 1e-9
        if r["method"] == "random":
            assert r["estimate_s"] >= greedy[r["instance"]]["estimate_s"] * (1 - 1e-9)
    oracle = {r["instance"]: r["total_s"] for r in dyn if r["policy"] == "oracle"}
    for r in dyn:
        assert oracle[r["instance"]] <= r["total_s"] * (1 + 1e-12)
    files = bench.write(serial, dyn, tmp_path, "test")
    assert files["static.png"].stat().st_size > 5000 and "greedy" in files["static.md"].read_text()
    assert files["dynamic.csv"].read_text().count("\n") == 1 + len(dyn)
    for r in dyn:  # the accounting the table shows is exact
        assert r["total_s"] == pytest.approx(r["compute_s"] + r["reconfig_s"] + r["stalled_s"], rel=1e-12)
    assert "compute_s" in files["dynamic.md"].read_text()
    assert "Code: `abc`" in bench.write(serial, dyn, tmp_path, "test", code="abc")["static.md"].read_text()


@pytest.mark.slow
def test_ray_executor_matches_local():
    ray = pytest.importorskip("ray")
    names, methods = ["tiny-3dc"], ["greedy", "megatron", "random"]
    local, _ = bench.run(names, methods, dynamic=False, executor="serial", show_progress=False)
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        remote, _ = bench.run(names, methods, dynamic=False, executor="ray", show_progress=False)
    finally:
        ray.shutdown()
    assert stable(local) == stable(remote)


@pytest.mark.slow
def test_dynamic_rows_held_out_trace_and_rl_policy():
    pytest.importorskip("sb3_contrib")
    inst = load_instance("tiny-3dc")
    static, dyn = bench.run(["tiny-3dc"], ["greedy", "rl"], rl_steps=256, dynamic=True, hours=0.5,
                            iterations="auto", executor="serial", show_progress=False)
    assert all("_policy" not in r for r in static)  # the trained policy travels apart from the table
    assert [r["policy"] for r in dyn] == ["static", "greedy", "rl", "hysteresis", "mpc", "controller",
                                          "oracle"]  # no milp: no resolve
    n = bench.auto_iterations(inst, 0.5)
    for r in dyn:
        assert r["iterations"] == n and r["trace_seed"] == bench.TEST_TRACE_SEED  # not RL's training seed 0
        assert r["total_s"] >= dyn[-1]["total_s"] * (1 - 1e-12)
    for r in dyn:  # the extra time over the oracle is the table's own ratio
        assert r["over_oracle"] == pytest.approx(r["total_s"] / dyn[-1]["total_s"] - 1.0, rel=1e-12, abs=1e-15)
    ctl_row = dyn[5]
    assert ctl_row["decisions"] >= 1 and ctl_row["choice_ms"] is not None
    rl_row = dyn[2]
    assert rl_row["decisions"] >= 1 and rl_row["decision_s"] == pytest.approx(
        rl_row["solver_s"] / rl_row["decisions"])


def test_readme_bench_tables_match_the_committed_results():
    """The README's bench tables are what benchmarks/readme_bench_table.py makes of the committed CSVs."""
    mod = benchmark_module("readme_bench_table")
    assert mod.main(["--check"]) == 0, "run benchmarks/readme_bench_table.py"
    block = readme_block(mod)
    assert "| **median** |" in block and "controller" in block


# -- issue 28.3: a run never writes over earlier results without --force -------------------

BENCH = ["bench", "tiny-3dc", "--methods", "greedy", "--no-dynamic", "--executor", "serial", "-q"]


def test_bench_default_output_is_a_new_folder(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from planner.cli import main

    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "benchmarks" / "results" / "bench"  # run from a checkout's root
    committed.mkdir(parents=True)
    (committed / "static.csv").write_text("committed\n")
    (committed / "static.md").write_text("committed\n")
    made = []
    for _ in range(2):
        r = CliRunner().invoke(main, BENCH)
        assert r.exit_code == 0, r.output
        new = sorted(p for p in tmp_path.iterdir() if p.name.startswith("bench-") and p not in made)
        assert len(new) == 1 and sorted(f.name for f in new[0].iterdir()) == ["static.csv", "static.md",
                                                                               "static.png"]
        made += new
    assert made[0] != made[1]
    assert (committed / "static.csv").read_text() == "committed\n"
    assert sorted(p.name for p in committed.iterdir()) == ["static.csv", "static.md"]


def test_bench_refuses_a_folder_with_results_unless_force(tmp_path):
    from click.testing import CliRunner

    from planner.cli import main

    out = tmp_path / "res"
    out.mkdir()
    for name in ("static.csv", "static.md", "dynamic.csv", "dynamic.md"):
        (out / name).write_text("old\n")
    r = CliRunner().invoke(main, [*BENCH, "--out", str(out)])
    assert r.exit_code == 2 and f"--out: {out} is not empty" in r.stderr and "--force" in r.stderr
    assert "| instance |" not in r.stdout  # refused before the benchmark ran
    assert all(p.read_text() == "old\n" for p in out.iterdir())
    r = CliRunner().invoke(main, [*BENCH, "--out", str(out), "--force"])
    assert r.exit_code == 0, r.output
    # the whole folder replaced: no dynamic table of the old run left beside the new static one
    assert sorted(p.name for p in out.iterdir()) == ["static.csv", "static.md", "static.png"]
    assert "greedy" in (out / "static.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("x")
    r = CliRunner().invoke(main, [*BENCH, "--out", str(other), "--force"])
    assert r.exit_code == 2 and "static.csv" in r.stderr and (other / "todo.txt").is_file()


def test_new_out_dir_never_names_an_existing_folder(tmp_path):
    import time

    now = time.time()
    first = bench.new_out_dir(now, tmp_path)
    assert first.parent == tmp_path and first.name == time.strftime("bench-%Y%m%d-%H%M%S", time.localtime(now))
    first.mkdir()
    second = bench.new_out_dir(now, tmp_path)
    assert second.name == first.name + "-2"
    second.mkdir()
    assert bench.new_out_dir(now, tmp_path).name == first.name + "-3"


def _worker_state(_):
    import multiprocessing

    from planner.solvers import stop

    return multiprocessing.get_start_method(), stop.requested()


def test_process_workers_are_fresh_interpreters_under_a_watch():
    """The bench's workers are spawned, not forked from a process inside stop.Watch (which a
    forked worker inherits: its signal handlers and wake-up pipe), and they see no stop request."""
    import signal

    from planner.solvers import stop

    with stop.Watch(sigint=True):
        handler = signal.getsignal(signal.SIGINT)
        out = bench._map(_worker_state, [0, 1], "process", 2, None)
    assert handler is not signal.default_int_handler  # the watch was in force in this process
    for method, requested in out:
        assert method == "spawn" and requested is None


def test_readme_headline_and_dominance_tables_match_the_committed_runs():
    """The README's headline table is what benchmarks/readme_table.py makes of the committed
    convergence runs (SPEC v3: greedy, auto at each budget, bound and gap), and docs/benchmarks.md's dominance table what it makes of the det-compare
    runs, with every solver alone and auto on each row."""
    mod = benchmark_module("readme_table")
    assert mod.main(["--check"]) == 0, "run benchmarks/readme_table.py"
    head = readme_block(mod)
    assert "SPEC v3" in head and "| instance | greedy | auto 15 s | auto 60 s | auto 600 s | bound | gap |" in head
    from pathlib import Path

    rows = mod.conv_rows(list(mod.CONVERGENCE), Path(mod.ROOT) / "benchmarks" / "results")
    assert all(f"| {r['instance']} |" in head for r in rows)  # every instance the runs measured
    assert {r["solver"] for r in rows} == {"greedy", "auto"}
    dom = readme_block(mod, mod.DOM_START, mod.DOM_END, mod.DOM_DOC)
    assert "SPEC v3" in dom and "| instance | B s | greedy | milp | cpsat | anneal | auto |" in dom


def test_dominance_goal_counts_worst_repeats_against_the_best_part():
    """The dominance table's goal line counts an (instance, B) pair as met only when auto's worst
    repeat is within 0.1% of the best part, packaged and generated instances apart."""
    mod = benchmark_module("readme_table")
    rows = {
        "two-dc@30": {"parts": {"greedy": [12.0], "milp": [11.0], "cpsat": [10.0]}, "auto": [[10.0], [10.009]]},
        "tiny-3dc@30": {"parts": {"greedy": [1.0], "anneal": [0.5]}, "auto": [[0.5], [0.5006]]},
        "gen-4dc-s0@30": {"parts": {"greedy": [3.0], "milp": [2.0]}, "auto": [[1.9]]},
        "gen-4dc-s0@60": {"parts": {"greedy": [3.0], "milp": [2.0]}, "auto": [[None]]},
    }
    lines = mod._det_goal(rows, [30.0, 60.0])
    assert "- B = 30 s: packaged 1 of 2, generated 1 of 1; worse on tiny-3dc" in lines  # 0.5006 > 0.5 x 1.001
    assert "- B = 60 s: generated 0 of 1; worse on gen-4dc-s0" in lines  # no plan from auto is no pass
