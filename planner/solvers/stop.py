"""Stopping the exact planners early and cleanly, keeping their incumbent.

Three things ask for a stop: Ctrl-C (SIGINT), SIGTERM (what ``timeout``,
``kill`` and Slurm send) and a resident-memory cap (``planner plan
--memory-limit GB``).  :class:`Watch` (used by the command line around a
run) turns each into :func:`request` with the reason (``"interrupted"`` for
both signals, ``"memory_limit"``); the signal is remembered
(:func:`interrupt_exit_code`: 130 after SIGINT, 143 after SIGTERM, 128 + the
signal number, as shells report them).  Greedy and the annealing check
:func:`requested` between plans, the shape search
(:mod:`planner.solvers.shapesearch`) checks :func:`requested` between shapes
and returns its incumbent with that status, and a solve in progress is cut
short through what it registered with :func:`stoppable` (CP-SAT's
``stop_search``) or by polling :func:`requested` (HiGHS's interrupt
callbacks).

Why a watchdog thread: while CP-SAT or HiGHS runs, the main thread is in C++
and Python's signal handler does not run until the solve returns.  Python's
C-level handler still writes the signal number to the wake-up fd
(:func:`signal.set_wakeup_fd`); the watchdog reads it and stops the solver
at once.  The same thread samples the resident memory four times a second.
A second signal (Ctrl-C or SIGTERM) raises ``KeyboardInterrupt``: an abort
without a plan.

Processes that run a search of their own (``auto``'s engines, the
``process`` executor) are started by
:func:`planner.solvers.executor.spawn_context`, whose children do not run
the user's ``__main__`` module again (a plain script without an
``if __name__ == "__main__":`` guard works).

Example
-------
>>> with Watch(memory_limit_bytes=2e9):            # doctest: +SKIP
...     p = plan(instance, solver="milp", time_limit=60)
>>> p.solver.status                                # doctest: +SKIP
'interrupted'
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from contextlib import contextmanager

_reason: str | None = None
_stoppers: list = []
_lock = threading.Lock()
_memory_limit: float | None = None  # bytes, of the Watch in force (None: none)
DEFAULT_SOLVER_MEMORY_MB = 2000  # what CP-SAT may hold without --memory-limit (its own default is 10 GB)
DEFAULT_HEURISTIC_MEMORY_BYTES = 4e9  # what greedy may add to its process without --memory-limit
LIMIT_SHARE = 0.8  # of --memory-limit, what a solver call or one shape's model may take (the rest: Python's side)
DEFAULT_MODEL_MEMORY_BYTES = 4e9  # what one shape's exact model, built and solved, may take without --memory-limit
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_signum: int | None = None  # the signal that stopped the last watched run (kept until the next Watch)


def solver_memory_mb() -> int:
    """The memory (MB) a solver call may hold: 80% of the ``--memory-limit`` in force
    (the rest is the model's Python side), else :data:`DEFAULT_SOLVER_MEMORY_MB`.
    CP-SAT takes it as ``max_memory_in_mb`` and stops its search when it crosses it."""
    if _memory_limit is not None:
        return max(100, int(LIMIT_SHARE * _memory_limit / 1e6))
    return DEFAULT_SOLVER_MEMORY_MB


def model_memory_bytes() -> float:
    """The memory one shape's exact model may take, built and solved (bytes): 80% of
    the ``--memory-limit`` in force, else :data:`DEFAULT_MODEL_MEMORY_BYTES`.  The
    CP-SAT shape search turns it into a largest model size (variables plus
    constraints), so a shape too large to fit is left unsearched before it takes the
    machine's memory -- the same shapes in every run (a size, not a reading)."""
    return LIMIT_SHARE * _memory_limit if _memory_limit is not None else DEFAULT_MODEL_MEMORY_BYTES


def interrupt_exit_code() -> int:
    """The exit status of a run stopped by a signal: 128 + the signal's number
    (130 for Ctrl-C, 143 for SIGTERM), the last signal a :class:`Watch` caught
    (130 when none did, e.g. a ``KeyboardInterrupt`` outside any watch)."""
    return 128 + int(_signum if _signum is not None else signal.SIGINT)  # EXIT_INTERRUPTED, EXIT_TERMINATED


def signal_name() -> str:
    """What stopped the last watched run, in words: ``"interrupted"`` (SIGINT) or
    ``"terminated (SIGTERM)"``."""
    return "terminated (SIGTERM)" if _signum == signal.SIGTERM else "interrupted"


def memory_cap_bytes(baseline: float = 0.0) -> float:
    """The resident-memory cap of a heuristic running in this process (bytes): the
    ``--memory-limit`` of the :class:`Watch` in force (the whole process), else
    ``baseline`` (this process's resident memory when the heuristic started) plus
    :data:`DEFAULT_HEURISTIC_MEMORY_BYTES`: without a limit, what the heuristic
    itself adds is capped, not what the process held before (a notebook, a
    benchmark worker with its traces and models)."""
    return _memory_limit if _memory_limit is not None else baseline + DEFAULT_HEURISTIC_MEMORY_BYTES


def memory_baseline() -> float:
    """This process's resident memory now (bytes) when no ``--memory-limit`` is in
    force (the ``baseline`` of :func:`memory_cap_bytes`), else 0."""
    if _memory_limit is not None:
        return 0.0
    try:
        return float(rss_bytes(children=False))
    except OSError:
        return 0.0


def over_memory(baseline: float = 0.0) -> bool:
    """Whether this process's resident memory passed :func:`memory_cap_bytes` (one
    read of /proc; a heuristic calls it between plans).  Under a :class:`Watch`
    with a limit, its thread already asks for the stop (the whole run, children
    included); this check is the guard of a call without one."""
    try:
        return rss_bytes(children=False) > memory_cap_bytes(baseline)
    except OSError:
        return False


def process_age_s() -> float:
    """Seconds since this process started (Linux /proc; elsewhere since
    :mod:`planner` was imported): the command line counts a time limit from
    process start, start-up included."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()


def requested() -> str | None:
    """The reason a stop was asked for (``"interrupted"``, ``"memory_limit"``,
    ``"time_limit"``), or None."""
    return _reason


def request(reason: str) -> None:
    """Ask every exact planner to stop now and return its incumbent (the first reason wins)."""
    global _reason
    with _lock:
        if _reason is None:
            _reason = reason
        stoppers = list(_stoppers)
    for fn in stoppers:
        try:
            fn()
        except Exception:  # a solver that already finished
            pass


class OutOfTime(Exception):
    """Raised by :func:`checkpoint` inside a model build that ran out of time (or was
    asked to stop): the build is abandoned, the shape left unsearched."""


_build_deadline: float | None = None  # time.perf_counter() by which the build in progress must end


@contextmanager
def build_deadline(deadline: float | None):
    """While a model is built: :func:`checkpoint` raises :class:`OutOfTime` past
    ``deadline`` (``time.perf_counter()``; None: only a stop request ends it)."""
    global _build_deadline
    old, _build_deadline = _build_deadline, deadline
    try:
        yield
    finally:
        _build_deadline = old


def checkpoint() -> None:
    """A place in a long model build where it may stop: raises :class:`OutOfTime`
    when a stop was requested or the :func:`build_deadline` passed (a build of a
    large shape takes seconds and cannot otherwise be interrupted)."""
    if _reason is not None or (_build_deadline is not None and time.perf_counter() > _build_deadline):
        raise OutOfTime


def clear() -> None:
    global _reason
    _reason = None


@contextmanager
def stoppable(stop_fn):
    """Register ``stop_fn`` (e.g. ``solver.stop_search``) while a solve runs."""
    with _lock:
        _stoppers.append(stop_fn)
    try:
        if _reason is not None:
            stop_fn()
        yield
    finally:
        with _lock:
            _stoppers.remove(stop_fn)


def _statm(pid) -> int:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _children(pid) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


_libc = None  # glibc, once loaded (False: not available)


def release_freed_memory() -> None:
    """Hand the heap's freed pages back to the system (glibc's ``malloc_trim``; a no-op
    elsewhere).  The CP-SAT shape search builds one model per shape in OR-Tools' C++
    heap; freed, their pages stayed with the process (a 12 s deterministic CP-SAT budget
    on edwc-full: 4.9 GB resident, 2.2 GB with this after every shape, same plan; issue
    29).  It does not bound one shape's own model: :func:`model_memory_bytes` does."""
    global _libc
    if _libc is None:
        try:
            import ctypes

            _libc = ctypes.CDLL("libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


def rss_bytes(children: bool = True) -> int:
    """Resident memory of this process now, with its child processes (the engines
    of ``auto``) when ``children``; bytes (Linux /proc, else this process's peak)."""
    try:
        total = _statm("self")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    todo = _children(os.getpid()) if children else []
    while todo:
        pid = todo.pop()
        try:
            total += _statm(pid)
        except (OSError, ValueError, IndexError):
            continue
        todo += _children(pid)
    return total


class Watch:
    """Context manager: Ctrl-C, SIGTERM, (optionally) a resident-memory cap and
    (optionally) a wall-clock ``deadline`` become :func:`request`; see the module
    docstring.  The deadline is the backstop of the time limit: every planner
    watches its own clock, and one that overruns it (a solve that cannot be
    interrupted between checks, a slow last step) is stopped there with
    status ``"time_limit"``.  Clears the request on entry and exit
    (the signal, for :func:`interrupt_exit_code`, is kept until the next entry).
    ``sigint=False``: no signal handling (e.g. off the main thread)."""

    def __init__(self, memory_limit_bytes: float | None = None, sigint: bool = True, period_s: float = 0.25,
                 deadline: float | None = None):
        self.limit = memory_limit_bytes
        self.deadline = deadline  # time.perf_counter() past which the run is asked to stop ("time_limit")
        self.sigint = sigint and threading.current_thread() is threading.main_thread()
        self.period = period_s
        self.peak_rss = 0

    def _handler(self, signum, frame):
        self._hits += 1
        if self._hits > 1:
            raise KeyboardInterrupt
        self._caught(signum)

    def _caught(self, signum) -> None:
        global _signum
        if _signum is None:
            _signum = int(signum)
        request("interrupted")

    def _run(self):
        while not self._done.is_set():
            if self._r is not None:
                ready, _, _ = select.select([self._r], [], [], self.period)
                if ready:
                    try:
                        data = os.read(self._r, 512)
                    except BlockingIOError:
                        data = b""
                    for sig in STOP_SIGNALS:
                        if sig in data:
                            self._caught(sig)
            else:
                self._done.wait(self.period)
            if self.deadline is not None and time.perf_counter() >= self.deadline:
                request("time_limit")  # the backstop of a solver's own clock: its incumbent, now
            if self.limit is not None:
                rss = rss_bytes()
                self.peak_rss = max(self.peak_rss, rss)
                if rss > self.limit:
                    request("memory_limit")

    def __enter__(self):
        global _memory_limit, _signum
        clear()
        # an infinite limit watches (peak_rss) without capping: the defaults hold
        _memory_limit = self.limit if self.limit is not None and self.limit < float("inf") else None
        _signum = None
        self._hits = 0
        self._r = self._w = None
        self._old_fd = None
        self._old_handlers = {}
        if self.sigint:
            self._r, self._w = os.pipe()
            os.set_blocking(self._w, False)
            os.set_blocking(self._r, False)
            self._old_fd = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
            for sig in STOP_SIGNALS:
                self._old_handlers[sig] = signal.signal(sig, self._handler)
        self._done = threading.Event()
        self._thread = None
        if self.sigint or self.limit is not None or self.deadline is not None:
            self._thread = threading.Thread(target=self._run, name="planner-stop-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        global _memory_limit
        _memory_limit = None
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self.sigint:
            for sig, old in self._old_handlers.items():
                signal.signal(sig, old)
            signal.set_wakeup_fd(self._old_fd)
            os.close(self._r)
            os.close(self._w)
        clear()  # the run has its status; later runs in this process start afresh
        return False
