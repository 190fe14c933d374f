"""An engine process ends when the process that started it dies, even by SIGKILL
(planner.solvers.executor.exit_with_parent): a deterministic engine has no wall clock
to stop it, and one orphaned by an out-of-memory kill ran on for half an hour."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SLEEPER = '''
import os, time

def solve(instance, time_limit=None, **options):
    open(os.environ["ORPHAN_PID_FILE"], "w").write(str(os.getpid()))
    time.sleep(120)
'''

PARENT = '''
import concurrent.futures as cf, os, signal, sys, time
sys.path.insert(0, {here!r})
import sleeper
from planner.solvers.executor import spawn_context
from planner.solvers.portfolio import _run_engine

ex = cf.ProcessPoolExecutor(max_workers=1, mp_context=spawn_context())
ex.submit(_run_engine, sleeper.solve, None, 0.0, {{"time_limit": None, "det_limit": 1.0}})
pid_file = os.environ["ORPHAN_PID_FILE"]
for _ in range(600):
    if os.path.exists(pid_file) and open(pid_file).read():
        break
    time.sleep(0.1)
os.kill(os.getpid(), signal.SIGKILL)  # no clean-up runs: the engine is orphaned
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its parent's reaping is left


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_an_engine_ends_when_its_parent_is_killed(tmp_path):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(PARENT.format(here=str(tmp_path))))
    pid_file = tmp_path / "engine.pid"
    env = {**os.environ, "ORPHAN_PID_FILE": str(pid_file)}
    proc = subprocess.run([sys.executable, str(script)], env=env, timeout=120)
    assert proc.returncode == -9  # the parent was killed
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert not _alive(pid), "the engine outlived its parent"
    finally:
        if _alive(pid):
            os.kill(pid, 9)
