"""Issue 28 (9, 10, 12): the API from a plain script, SIGINT/SIGTERM for every planner,
greedy's budget and memory guard."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner import load_instance, load_plan
from planner.cli import main
from planner.problem.errors import TimeLimitError
from planner.solvers import greedy as greedy_mod
from planner.solvers import stop
from planner.solvers.greedy import greedy
from planner.solvers.registry import plan as make_plan

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def test_plain_script_without_main_guard_runs_the_engines(tmp_path):
    # spawned engine processes used to run the script again (multiprocessing's
    # _fixup_main_from_path): two tracebacks, MILP and CP-SAT dropped from auto
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent("""
        import json
        import planner
        inst = planner.load_instance("tiny-3dc")
        p = planner.plan(inst, solver="auto", time_limit=20)
        q = planner.plan(inst, solver="milp", time_limit=20, executor="process", jobs=2)
        print(json.dumps({"engines": p.solver.model_extra["engines"], "milp": q.solver.estimate_status}))
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "bootstrapping phase" not in r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for engine in ("milp", "cpsat"):
        assert "objective" in out["engines"][engine], out["engines"]  # it ran and reported its plan
    assert out["milp"] == "optimal"  # the search over 1f1b/gpipe plans finished (SPEC 7: estimate_status)


@pytest.fixture(scope="module")
def many_domains(tmp_path_factory):
    """A generated instance on which greedy runs for many seconds, scoring plans all along."""
    path = tmp_path_factory.mktemp("big") / "big.toml"
    r = CliRunner().invoke(main, ["generate", "--domains", "1000", "--gpus", "1000000", "--out", str(path)])
    assert r.exit_code == 0, r.output
    return path


def _signal_plan(tmp_path, instance, solver, sig, ready):
    """``planner plan INSTANCE --solver SOLVER --out p.json`` sent ``sig`` once a progress
    line on stderr contains ``ready`` (the search holds a plan then, whatever the load)."""
    out = tmp_path / "p.json"
    proc = subprocess.Popen([sys.executable, "-m", "planner.cli", "plan", str(instance), "--solver", solver,
                             "--time-limit", "600", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, cwd=tmp_path)
    seen = []
    while True:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if ready in line:
            break
    time.sleep(0.5)
    t = time.perf_counter()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, stdout, "".join(seen) + stderr, out, time.perf_counter() - t


@pytest.mark.parametrize("solver,sig,where", [
    ("greedy", signal.SIGINT, "many"), ("greedy", signal.SIGTERM, "many"),
    ("anneal", signal.SIGINT, "gcp-16"), ("anneal", signal.SIGTERM, "gcp-16"),
    pytest.param("milp", signal.SIGTERM, "gcp-16", marks=pytest.mark.slow),
    pytest.param("auto", signal.SIGTERM, "gcp-16", marks=pytest.mark.slow)])
def test_a_signal_writes_the_best_plan_and_exits_128_plus_its_number(tmp_path, many_domains, solver, sig, where):
    instance = many_domains if where == "many" else where
    ready = {"greedy": "plans scored", "anneal": "anneal:", "milp": "shape", "auto": "incumbent from"}[solver]
    rc, stdout, stderr, out, after = _signal_plan(tmp_path, instance, solver, sig, ready)
    assert rc == 128 + sig, stderr  # 130 for SIGINT, 143 for SIGTERM
    assert "Traceback" not in stderr
    p = load_plan(out, load_instance(instance))
    assert p.solver.status == "interrupted"
    assert p.solver.bound is not None and p.solver.bound <= p.solver.objective * (1 + 1e-9)
    assert ("terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted") in stderr


def test_greedy_has_a_default_time_limit(monkeypatch):
    monkeypatch.setattr(greedy_mod, "DEFAULT_TIME_LIMIT", 1e-9)
    with pytest.raises(TimeLimitError):
        greedy(load_instance("gcp-16"))  # before: no limit at all (an hour)


def _memory_passes_after(monkeypatch, checks: int):
    calls = []

    def over(baseline=0.0):
        calls.append(1)
        return len(calls) > checks

    monkeypatch.setattr(stop, "over_memory", over)
    monkeypatch.setattr(greedy_mod, "MEMORY_CHECK_S", 0.0)  # every check reads the memory


def test_greedy_stops_at_the_memory_cap_with_the_best_plan_so_far(monkeypatch):
    inst = load_instance("gcp-16")
    _memory_passes_after(monkeypatch, 60)  # past the shape enumeration, within the placements
    p = make_plan(inst, solver="greedy")
    assert p.solver.status == "memory_limit"
    assert p.solver.bound is not None and p.solver.bound <= p.solver.objective
    _memory_passes_after(monkeypatch, 0)  # passed from the start: the first plan is still made and kept
    assert greedy(inst).solver.status == "memory_limit"


def test_greedy_memory_cap_on_the_command_line(monkeypatch, tmp_path):
    _memory_passes_after(monkeypatch, 60)
    out = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["plan", "gcp-16", "--solver", "greedy", "-q", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "memory limit 4 GB (default) reached" in r.output
    assert json.loads(out.read_text())["solver"]["status"] == "memory_limit"


def test_a_stop_request_stops_greedy_and_the_annealing():
    inst = load_instance("gcp-16")
    stop.request("interrupted")
    try:
        first = greedy(inst)  # asked to stop before it started: its first plan, to keep
    finally:
        stop.clear()
    assert first.solver.status == "interrupted"
    from planner.solvers.anneal import anneal

    g = greedy(inst)
    stop.request("interrupted")
    try:
        a = anneal(inst, g, time_limit=30)
    finally:
        stop.clear()
    assert a.solver.status == "interrupted"  # before: "heuristic", and the command line exited 0


def test_without_a_limit_the_cap_is_on_what_greedy_adds(monkeypatch):
    """Without --memory-limit greedy may add 4 GB to what its process held when it started
    (a benchmark worker or a notebook holding 5 GB of traces is not "over" before greedy
    does anything); with a limit, the limit is on the whole process."""
    held = {"rss": 5e9}
    monkeypatch.setattr(stop, "rss_bytes", lambda children=True: held["rss"])
    base = stop.memory_baseline()
    assert base == 5e9 and stop.memory_cap_bytes(base) == 5e9 + stop.DEFAULT_HEURISTIC_MEMORY_BYTES
    assert not stop.over_memory(base)
    held["rss"] = 5e9 + stop.DEFAULT_HEURISTIC_MEMORY_BYTES + 1
    assert stop.over_memory(base)
    held["rss"] = 5e9
    p = greedy(load_instance("two-dc"))
    assert p.solver is None or p.solver.status != "memory_limit"  # (a finished greedy has no record)
    with stop.Watch(memory_limit_bytes=4e9, sigint=False, period_s=10.0):
        assert stop.memory_baseline() == 0.0 and stop.memory_cap_bytes(5e9) == 4e9
        assert stop.over_memory(stop.memory_baseline())

