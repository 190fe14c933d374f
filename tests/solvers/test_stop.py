"""Issue 17 (c, d): Ctrl-C and --memory-limit stop the exact planners cleanly with
their incumbent (status interrupted / memory_limit, with its bound); Ctrl-C exits 130."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner import load_instance, load_plan
from planner.cli import main
from planner.problem.errors import Stopped
from planner.solvers import stop
from planner.solvers.registry import plan as make_plan

ROOT = Path(__file__).resolve().parents[2]


def _interrupt(tmp_path, solver, after_s=1.0):
    """Ctrl-C ``after_s`` seconds after the planner's first progress line (the
    search is under way then, whatever the machine's load)."""
    out = tmp_path / "plan.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "plan", "gcp-16", "--solver", solver,
                             "--time-limit", "300", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    first = proc.stderr.readline()  # blocks until the first progress line
    time.sleep(after_s)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, first + stderr, out


@pytest.mark.parametrize("solver", ["milp", "cpsat", "auto"])
def test_sigint_writes_the_incumbent_and_exits_130(tmp_path, solver):
    rc, stdout, stderr, out = _interrupt(tmp_path, solver)
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr
    p = load_plan(out, load_instance("gcp-16"))
    assert p.solver.status == "interrupted"
    assert p.solver.bound is not None and p.solver.bound <= p.solver.objective
    assert "plan written to" in stdout and "interrupted" in stderr


def test_memory_limit_stops_with_the_incumbent(tmp_path):
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "milp", "--time-limit", "30", "-q",
                                  "--memory-limit", "0.01", "--out", str(out)])  # 10 MB: passed at once
    assert r.exit_code == 0, r.output
    p = json.loads(out.read_text())
    assert p["solver"]["status"] == "memory_limit" and p["solver"]["bound"] is not None


def test_memory_limit_option_checked():
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--memory-limit", "0"])
    assert r.exit_code == 2 and "--memory-limit" in r.output


def test_stop_request_before_search_keeps_greedy_incumbent_or_says_why():
    inst = load_instance("tiny-3dc")
    stop.request("interrupted")
    try:
        p = make_plan(inst, solver="cpsat", time_limit=30)
    except Stopped as err:  # only when not even greedy had a plan
        assert err.exit_code == 130
    else:
        assert (p.solver.estimate_status or p.solver.status) in ("interrupted", "optimal")
    finally:
        stop.clear()
    assert stop.requested() is None


def test_rss_is_measured():
    assert stop.rss_bytes() > 1e6


def test_an_infinite_memory_limit_watches_without_capping():
    """benchmarks/memory.py watches a run's peak with ``memory_limit_bytes=inf``: the
    solvers' default caps hold then (CP-SAT's configure once crashed converting inf)."""
    with stop.Watch(memory_limit_bytes=float("inf"), sigint=False, period_s=0.01) as w:
        assert stop.solver_memory_mb() == stop.DEFAULT_SOLVER_MEMORY_MB
        assert stop.memory_cap_bytes(1e9) == 1e9 + stop.DEFAULT_HEURISTIC_MEMORY_BYTES
        p = make_plan(load_instance("tiny-3dc"), solver="cpsat", time_limit=5, deterministic=True)
        time.sleep(0.05)
    assert p.solver.objective is not None and w.peak_rss > 1e6
    with stop.Watch(memory_limit_bytes=5e9, sigint=False):
        assert stop.solver_memory_mb() == 4000


def test_a_stopped_run_leaves_later_runs_unaffected():
    inst = load_instance("tiny-3dc")
    with stop.Watch(memory_limit_bytes=1e6, period_s=0.01):
        for _ in range(500):  # the watchdog samples every 10 ms
            if stop.requested():
                break
            time.sleep(0.01)
        assert stop.requested() == "memory_limit"
    assert stop.requested() is None
    assert make_plan(inst, solver="milp", time_limit=20).solver.estimate_status == "optimal"


def _sigint(args, cwd, after_s=4.0):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    time.sleep(after_s)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, stderr


def test_sigint_during_schedule_writes_the_best_schedule(tmp_path):
    src, dst = tmp_path / "p.json", tmp_path / "s.json"
    assert CliRunner().invoke(main, ["plan", "gcp-16", "-q", "--out", str(src)]).exit_code == 0
    rc, stdout, stderr = _sigint(["schedule", "gcp-16", str(src), "--out", str(dst), "--time-limit", "300"],
                                 tmp_path)
    assert rc == 130, stderr
    assert "Traceback" not in stderr
    p = load_plan(dst, load_instance("gcp-16"))
    assert p.solver.model_extra["schedule_status"] == "interrupted"


def test_sigint_during_simulate_prints_the_rows_so_far(tmp_path):
    from planner.problem import traces

    trace = tmp_path / "t.csv"
    traces.save(traces.generate(load_instance("gcp-16"), hours=24), trace)
    rc, stdout, stderr = _sigint(["simulate", "gcp-16", "--trace", str(trace), "--iterations", "100000000",
                                  "--policy", "static", "--policy", "greedy", "--json"], tmp_path)
    assert rc == 130, stderr
    assert "Traceback" not in stderr
    rows = json.loads(stdout)
    assert rows and not rows[-1]["completed"]


def test_sigint_during_bench_keeps_the_finished_rows(tmp_path):
    out = tmp_path / "bench"
    rc, stdout, stderr = _sigint(["bench", "tiny-3dc", "gcp-16", "--methods", "greedy,milp", "--time-limit", "300",
                                  "--no-dynamic", "--workers", "1", "--out", str(out)], tmp_path, after_s=12.0)
    assert rc == 130, stderr
    assert "Traceback" not in stderr
    rows = (out / "static.csv").read_text().splitlines()
    assert any(r.startswith("tiny-3dc,greedy") for r in rows)
    assert not any(r.startswith("gcp-16,milp") for r in rows)  # cut off: 300 s were asked


def test_watch_deadline_asks_for_a_time_limit_stop():
    """The wall-clock backstop: past its deadline the watch asks every planner to stop
    with reason time_limit (and the request is cleared after the run)."""
    with stop.Watch(sigint=False, deadline=time.perf_counter() + 0.1, period_s=0.02):
        assert stop.requested() is None
        t0 = time.perf_counter()
        while stop.requested() is None and time.perf_counter() - t0 < 5:
            time.sleep(0.01)
        assert stop.requested() == "time_limit"
        assert time.perf_counter() - t0 < 1.0
    assert stop.requested() is None


def test_a_model_build_stops_at_its_deadline():
    """A build that passes its deadline is abandoned at the next checkpoint: the shape
    is left 'unknown' (no proof), not built to the end."""
    from planner.solvers.shapesearch import build_model

    calls = []

    def make():
        for i in range(100):
            calls.append(i)
            time.sleep(0.01)
            stop.checkpoint()
        return "model"

    model, outcome = build_model(make, deadline=time.perf_counter() + 0.05)
    assert model is None and outcome.status == "unknown" and "no time" in outcome.detail
    assert 3 <= len(calls) < 50 and outcome.build_s >= 0.05
    model, outcome = build_model(make, deadline=None)  # no deadline: built to the end
    assert model == "model" and outcome is None and len(calls) >= 100


def test_cpsat_build_of_a_large_shape_stops_at_its_deadline():
    """CP-SAT's build of gcp-16 with t = 4 and 32 replicas takes seconds (21 s, 880k variables and
    constraints); given 0.2 s it stops."""
    from planner.problem.space import Shape
    from planner.solvers.formulations.cpsat import build
    from planner.solvers.shapesearch import build_model

    inst = load_instance("gcp-16")
    t0 = time.perf_counter()
    model, outcome = build_model(lambda: build(inst, Shape(4, 1, "1f1b", 0, 32)), deadline=t0 + 0.2)
    assert model is None and outcome.status == "unknown"
    assert time.perf_counter() - t0 < 1.5


def test_release_freed_memory_hands_a_cp_sat_models_pages_back():
    """A CP-SAT model built, solved and dropped leaves its pages with the process
    (glibc keeps them: ~165 MB here); ``release_freed_memory`` returns most of them
    (Linux; elsewhere it is a no-op and the check is skipped)."""
    import gc
    import sys

    from ortools.sat.python import cp_model

    from planner.solvers.stop import release_freed_memory, rss_bytes

    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's malloc_trim")

    def build_and_solve():
        m = cp_model.CpModel()
        xs = [m.new_int_var(0, 100, f"x{i}") for i in range(100_000)]
        for a, b in zip(xs, xs[1:]):
            m.add(a + 2 * b <= 150)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = 0.5
        solver.parameters.num_workers = 1
        solver.solve(m)

    release_freed_memory()
    before = rss_bytes(children=False)
    build_and_solve()
    gc.collect()
    held = rss_bytes(children=False) - before
    release_freed_memory()
    kept = rss_bytes(children=False) - before
    assert held > 50e6  # the freed model stayed resident
    assert kept < 0.5 * held
