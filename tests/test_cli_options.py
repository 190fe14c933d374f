"""Issue 17 (b): command-line options are checked before any work: exit 2 naming the
option (the instance given does not even exist, so nothing was loaded or solved)."""

import os

import pytest
from click.testing import CliRunner

from planner.cli import main

MISSING = "no-such-instance.toml"


@pytest.mark.parametrize("args, option", [
    (["plan", MISSING, "--time-limit", "-5"], "--time-limit"),
    (["plan", MISSING, "--time-limit", "0"], "--time-limit"),
    (["plan", MISSING, "--time-limit", "nan"], "--time-limit"),
    (["plan", MISSING, "--time-limit", "inf"], "--time-limit"),
    (["plan", MISSING, "--threads", "0"], "--threads"),
    (["plan", MISSING, "--seed", "-1"], "--seed"),
    (["plan", MISSING, "--gap", "-0.1"], "--gap"),
    (["plan", MISSING, "--stages", "0"], "--stages"),
    (["plan", MISSING, "--replicas", "0"], "--replicas"),
    (["plan", MISSING, "--tp", "0"], "--tp"),
    (["plan", MISSING, "--micro-batch-size", "0"], "--micro-batch-size"),
    (["plan", MISSING, "--robust", "100000000"], "--robust"),
    (["plan", MISSING, "--out", "/missing/dir/plan.json"], "--out"),
    (["plan", MISSING, "--gantt", "/missing/dir/g.png"], "--gantt"),
    (["plan", MISSING, "--map", "/missing/dir/m.png"], "--map"),
    (["schedule", MISSING, "p.json", "--out", "/missing/dir/p.json"], "--out"),
    (["schedule", MISSING, "p.json", "--out", "x.json", "--workers", "0"], "--workers"),
    (["schedule", MISSING, "p.json", "--out", "x.json", "--time-limit", "0"], "--time-limit"),
    (["trace", "generate", MISSING, "--out", "t.csv", "--hours", "0"], "--hours"),
    (["trace", "generate", MISSING, "--out", "t.csv", "--hours", "1e9"], "--hours"),
    (["trace", "generate", MISSING, "--out", "/missing/dir/t.csv"], "--out"),
    (["simulate", MISSING, "--trace", "t.csv", "--iterations", "0"], "--iterations"),
    (["simulate", MISSING, "--trace", "t.csv", "--iterations", "10000000000000"], "--iterations"),
    (["simulate", MISSING, "--trace", "t.csv", "--every-min", "-1"], "--every-min"),
    (["simulate", MISSING, "--trace", "t.csv", "--time-limit", "0"], "--time-limit"),
    (["rl", "train", MISSING, "--out", "p.zip", "--steps", "0"], "--steps"),
    (["rl", "train", MISSING, "--out", "/missing/dir/p.zip"], "--out"),
    (["simulate", MISSING, "--trace", "t.csv", "--margin", "-1"], "--margin"),
    (["controller", "train", "--instances", MISSING, "--out", "c.zip", "--steps", "0"], "--steps"),
    (["controller", "train", "--instances", MISSING, "--out", "c.zip", "--envs", "0"], "--envs"),
    (["controller", "train", "--instances", MISSING, "--out", "c.zip", "--hours", "0"], "--hours"),
    (["controller", "train", "--instances", MISSING, "--out", "/missing/dir/c.zip"], "--out"),
    (["bench", MISSING, "--time-limit", "-1"], "--time-limit"),
    (["bench", MISSING, "--rl-steps", "0"], "--rl-steps"),
    (["bench", MISSING, "--hours", "-1"], "--hours"),
    (["bench", MISSING, "--workers", "0"], "--workers"),
    (["export", MISSING, "p.json", "--format", "slurm", "--out", "job"], "--format"),
    (["export", MISSING, "p.json", "--out", "job"], "--format"),
    (["schema", "plan", "--out", "/missing/dir/s.json"], "--out"),
])
def test_bad_option_exit_2_naming_it_before_any_work(args, option, tmp_path):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = CliRunner().invoke(main, args)
    finally:
        os.chdir(cwd)
    assert r.exit_code == 2, r.output
    assert option in r.output
    assert MISSING not in r.output  # the instance was never opened
    assert "Traceback" not in r.output and "internal error" not in r.output


def test_out_path_that_is_a_file_where_a_directory_is_needed(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = CliRunner().invoke(main, ["bench", MISSING, "--out", str(f)])
    assert r.exit_code == 2 and "--out" in r.output
    r = CliRunner().invoke(main, ["plan", MISSING, "--out", str(f / "plan.json")])
    assert r.exit_code == 2 and "--out" in r.output
    r = CliRunner().invoke(main, ["export", MISSING, "p.json", "--format", "megatron", "--out", str(f)])
    assert r.exit_code == 2 and "--out" in r.output and MISSING not in r.output


def test_simulate_solver_time_and_iterations_checked(tmp_path):
    from planner import load_instance
    from planner.problem import traces

    trace = tmp_path / "t.csv"
    traces.save(traces.generate(load_instance("tiny-3dc"), hours=1), trace)
    for extra, option in ((["--solver-time", "abc"], "--solver-time"), (["--solver-time", "-3"], "--solver-time"),
                          (["--policy", "resolve", "--solver", "nope"], "--solver")):
        r = CliRunner().invoke(main, ["simulate", "tiny-3dc", "--trace", str(trace), *extra])
        assert r.exit_code == 2, r.output
        assert option in r.output and "internal error" not in r.output


def test_bench_iterations_checked():
    r = CliRunner().invoke(main, ["bench", "tiny-3dc", "--iterations", "0"])
    assert r.exit_code == 2 and "--iterations" in r.output


def test_valid_options_still_plan(tmp_path):
    out = tmp_path / "sub" / "plan.json"
    out.parent.mkdir()
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "greedy", "-q", "--out", str(out),
                                  "--time-limit", "5", "--seed", "3"])
    assert r.exit_code == 0, r.output
    assert out.is_file()
