"""Where the exact planners' per-shape solves run: this process, local processes or a Ray cluster.

:func:`make_executor` returns an :class:`Executor` whose :meth:`~Executor.map`
runs ``fn(*item)`` for a list of items and returns the results in order.
The shape search (:func:`planner.solvers.shapesearch.shape_search`) hands it
one *wave* of shapes at a time, ``jobs`` shapes per wave, each with the
incumbent of the waves before it; the next wave starts when the whole wave is
back.  What a shape is solved with depends only on the waves before it, never
on which worker ran what or when: with deterministic budgets (CP-SAT's
deterministic time, one worker per solve, a fixed seed) every executor gives
the same plan and bound for the same ``jobs``.

* ``serial``: in this process, one item after another; each item works on its
  own copy of ``fn`` and of its arguments (a pickle round trip), as a remote
  worker does, so serial and remote runs see the same state;
* ``process``: a local pool of ``jobs`` processes (:func:`spawn_context`);
* ``ray``: Ray tasks of one CPU each, on the cluster at ``address`` (None: a
  local Ray started with ``jobs`` CPUs).  ``planner`` must be importable on
  every node (installed, or on ``PYTHONPATH``).

A stop request (Ctrl-C, the memory cap; :mod:`planner.solvers.stop`) during a
wave cancels what has not finished: its result is ``None``.

Example
-------
>>> with make_executor("ray", jobs=2) as ex:                # doctest: +SKIP
...     ex.map(pow, [(2, 3), (3, 2)])
[8, 9]
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.machinery
import multiprocessing
import multiprocessing.context
import os
import pickle
import signal
import sys
import threading
import time
from contextlib import contextmanager

from . import stop

KINDS = ("serial", "process", "ray")
POLL_S = 0.2  # how often a wave checks for a stop request


_MAIN_LOCK = threading.Lock()


@contextmanager
def _main_left_alone():
    """While a process starts: ``__main__`` looks like a module named ``__main__``
    (its ``__spec__``), which a spawned child does not import again.  Without it
    the child runs the user's script from the top (``multiprocessing.spawn``'s
    ``_fixup_main_from_path``): a script calling ``planner.plan(...,
    solver="auto")`` without an ``if __name__ == "__main__":`` guard planned
    again in every engine and failed with two tracebacks."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    with _MAIN_LOCK:
        had = "__spec__" in vars(main)
        old = vars(main).get("__spec__")
        main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
        try:
            yield
        finally:
            if had:
                main.__spec__ = old
            else:
                del main.__spec__


class _SpawnProcess(multiprocessing.context.SpawnProcess):
    """A spawned process whose child leaves ``__main__`` alone (:func:`_main_left_alone`)."""

    @staticmethod
    def _Popen(process_obj):
        with _main_left_alone():
            return multiprocessing.context.SpawnProcess._Popen(process_obj)


class _SpawnContext(multiprocessing.context.SpawnContext):
    Process = _SpawnProcess


def spawn_context(keep_main: bool = False):
    """The ``spawn`` multiprocessing context of the planner's worker processes.

    A fresh interpreter per worker (not ``fork``: a process holding OR-Tools'
    or HiGHS's threads must not be forked; ``forkserver`` would still import
    ``__main__`` in every child).  Unless ``keep_main`` (the work to run is a
    function of the user's ``__main__`` module, which the child then needs),
    the child does not import ``__main__``: the documented API works from a
    plain script without an ``if __name__ == "__main__":`` guard.

    >>> cf.ProcessPoolExecutor(1, mp_context=spawn_context())     # doctest: +SKIP
    """
    return multiprocessing.get_context("spawn") if keep_main else _SpawnContext()


def from_main(fn) -> bool:
    """Whether ``fn`` (a function, or an object of a class) lives in ``__main__``."""
    mod = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", None)
    return mod in ("__main__", "__mp_main__")


def _call(blob: bytes):
    """Run one pickled ``(fn, item)``: ``fn(*item)`` (in a worker or in this process)."""
    fn, item = pickle.loads(blob)
    return fn(*item)


#: seconds between an engine's checks that the process that started it is alive
PARENT_POLL_S = 1.0


def exit_with_parent(period_s: float = PARENT_POLL_S) -> None:
    """In a worker process (an engine of ``auto``, a shape of a wave): a daemon thread
    that ends the process when its parent is gone (killed, even by SIGKILL, so it never
    ran its clean-up): the process is then re-parented and ``os.getppid()`` changes,
    checked every ``period_s`` seconds.  Without it a deterministic engine, which no wall
    clock stops, ran on alone (for half an hour, 12 GB, when an out-of-memory kill took
    its ``auto``).

    >>> exit_with_parent()  # first thing in the worker         # doctest: +SKIP
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period_s)
        os._exit(70)  # EX_SOFTWARE: nobody is left to read the result

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _ignore_sigint() -> None:
    """The workers' initializer: Ctrl-C ignored (the parent decides what it stops), and the
    worker ends with its parent (:func:`exit_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()


class Executor:
    """Runs ``fn(*item)`` for each item of a wave; see the module docstring.
    ``kind`` is one of :data:`KINDS`, ``width`` the number of items run at once."""

    def __init__(self, kind: str, width: int):
        self.kind, self.width = kind, max(1, int(width))
        self._pool = None
        self._remote = None
        self._keep_main = False

    # -- context manager -------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # -- running a wave --------------------------------------------------------
    def map(self, fn, items) -> list:
        """``[fn(*item) for item in items]``, run where the executor runs things
        (None for an item cancelled by a stop request)."""
        blobs = [pickle.dumps((fn, tuple(item))) for item in items]
        self._keep_main = self._keep_main or from_main(fn)
        if self.kind == "serial":
            out = []
            for blob in blobs:
                out.append(None if stop.requested() else _call(blob))
            return out
        if self.kind == "process":
            return self._map_process(blobs)
        return self._map_ray(blobs)

    def _map_process(self, blobs) -> list:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=self.width, mp_context=spawn_context(self._keep_main),
                                                initializer=_ignore_sigint)
        futures = [self._pool.submit(_call, b) for b in blobs]
        while not all(f.done() for f in futures):
            if stop.requested():
                for f in futures:
                    f.cancel()
                for proc in list(getattr(self._pool, "_processes", {}).values()):
                    proc.terminate()  # a solve in progress: its shape keeps its cheap bound
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
                return [f.result() if f.done() and not f.cancelled() and f.exception() is None else None
                        for f in futures]
            cf.wait(futures, timeout=POLL_S, return_when=cf.ALL_COMPLETED)
        return [f.result() for f in futures]

    def _map_ray(self, blobs) -> list:
        import ray

        if self._remote is None:
            self._remote = ray.remote(num_cpus=1)(_call)
        refs = [self._remote.remote(b) for b in blobs]
        done: dict = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            for r in ready:
                done[r] = ray.get(r)
            if pending and stop.requested():
                for r in pending:
                    ray.cancel(r, force=True)
                break
        return [done.get(r) for r in refs]


def make_executor(kind: str, address: str | None = None, jobs: int | None = None) -> Executor:
    """An :class:`Executor` of ``kind`` (``serial``, ``process``, ``ray``) running ``jobs``
    items at once (default: 2 locally; on a Ray cluster, its CPUs).  Ray starts here
    (``ray.init(address=...)``, or a local Ray with ``jobs`` CPUs) unless already started."""
    if kind not in KINDS:
        raise ValueError(f"executor {kind!r}: choose one of {', '.join(KINDS)}")
    if kind == "ray":
        import ray

        if not ray.is_initialized():
            t0 = time.perf_counter()
            ray.init(address=address, num_cpus=None if address else (jobs or 2), include_dashboard=False,
                     ignore_reinit_error=True, log_to_driver=False)
            import logging

            logging.getLogger("planner").info("ray: started in %.1f s (%s)", time.perf_counter() - t0,
                                              address or "local")
        if jobs is None:
            jobs = max(1, int(ray.cluster_resources().get("CPU", 1)))
    return Executor(kind, jobs or 2)


def executor_context(kind: str | None, address: str | None = None, jobs: int | None = None):
    """A context manager giving :func:`make_executor`'s executor (closed on exit), or None
    when ``kind`` is None (the shape search then solves one shape at a time, here).

    >>> with executor_context("serial", jobs=2) as ex:         # doctest: +SKIP
    ...     shape_search(instance, solve_shape, name="mine", executor=ex)
    """
    from contextlib import nullcontext

    if kind is None:
        return nullcontext(None)
    return make_executor(kind, address, jobs)
