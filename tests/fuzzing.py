"""Hostile input for the command line: mutations of valid files, and a runner
that executes one CLI call in a child process under a memory and a time limit.

Used by ``tests/test_fuzz.py`` (a few hundred cases per run) and
``benchmarks/fuzz.py`` (as many as you like).  The property checked: every
call ends with exit code 0, 2 or 3 (SPEC 9), never a traceback or an
"internal error", within the limits.

The child is forked from the already-imported parent (a new interpreter
would spend a second importing Pyomo and OR-Tools per case); its address
space is capped at the parent's plus ``memory_gb`` (an allocation beyond it
fails inside the child), and its peak resident memory is measured.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import signal
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]

# values a person or a broken tool really writes
ODD_VALUES = [None, True, False, "", "x", "北京", "🚀" * 3, "1e3", -1, 0, 1, 2 ** 63, 10 ** 12, 10 ** 30,
              1e308, -1e308, 1e-320, float("inf"), float("-inf"), float("nan"), 0.5, -0.0, [], [1], {},
              {"a": 1}, "\x00", "a" * 1000]


@dataclass
class Outcome:
    code: int  # exit code (negative: killed by that signal; 124: time limit)
    stdout: str
    stderr: str
    seconds: float
    max_rss_gb: float  # peak resident memory of the child (includes pages shared with the parent)

    def ok(self) -> bool:
        return (self.code in (0, 2, 3) and "Traceback" not in self.stderr
                and "internal error" not in self.stderr)

    def __str__(self):
        return f"exit {self.code} after {self.seconds:.1f} s, {self.max_rss_gb:.2f} GB: {self.stderr.strip()[:400]}"


def _vm_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


def run_cli(args: list[str], timeout_s: float = 30.0, memory_gb: float = 2.0, cwd: Path | None = None) -> Outcome:
    """``planner ARGS`` in a forked child with at most ``memory_gb`` more address space."""
    import planner.cli  # noqa: F401  (imported before the fork, once)

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child
        code = 99
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (out_r, err_r, out_w, err_w):
                os.close(fd)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            if cwd is not None:
                os.chdir(cwd)
            limit = _vm_bytes() + int(memory_gb * 1e9)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            from planner.cli import main

            try:
                main.main(args=args, prog_name="planner", standalone_mode=True)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # anything that escapes the CLI is a finding
            import traceback

            traceback.print_exc()
            code = 98
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    os.close(out_w)
    os.close(err_w)
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    chunks = {out_r: [], err_r: []}

    def drain():
        for fd in chunks:
            try:
                while data := os.read(fd, 65536):
                    chunks[fd].append(data)
            except BlockingIOError:
                pass

    status, usage, killed = None, None, False
    while True:
        drain()
        wpid, st_, ru = os.wait4(pid, os.WNOHANG)
        if wpid:
            status, usage = st_, ru
            break
        if time.perf_counter() - t0 > timeout_s and not killed:
            os.kill(pid, signal.SIGKILL)
            killed = True
        time.sleep(0.005)
    drain()
    for fd in chunks:
        os.close(fd)
    code = 124 if killed else (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status))
    text = {fd: b"".join(c).decode("utf-8", "replace") for fd, c in chunks.items()}
    return Outcome(code, text[out_r], text[err_r], time.perf_counter() - t0, usage.ru_maxrss / 1e6)


# -- mutations -------------------------------------------------------------------
def paths(doc, prefix=()):
    """Every path (tuple of keys and indices) into a JSON-like document."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


@st.composite
def mutated(draw, doc: dict, max_edits: int = 3):
    """``doc`` with 1..max_edits edits: delete, duplicate, retype, extreme values, unknown keys."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, max_edits))):
        all_paths = [p for p in paths(doc) if p]
        if not all_paths:
            break
        path = draw(st.sampled_from(all_paths))
        parent, key = _get(doc, path[:-1]), path[-1]
        op = draw(st.sampled_from(["delete", "duplicate", "value", "value", "value", "number", "unknown"]))
        if op == "delete":
            del parent[key]
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif op == "unknown" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["bogus", "Name", "gpus ", "ß"]))] = copy.deepcopy(parent[key])
        elif op == "number" and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
            v = parent[key]
            parent[key] = draw(st.sampled_from([v * 10 ** 9, -v, v + 0.5, v * 1e-9, 0]))
        else:
            parent[key] = copy.deepcopy(draw(st.sampled_from(ODD_VALUES)))  # never share the pool's lists
    return doc


@st.composite
def file_bytes(draw, text: str):
    """Raw corruption of a whole file: binary, latin-1, truncated, empty, a flipped byte."""
    kind = draw(st.sampled_from(["random", "latin1", "truncate", "empty", "flip", "bom"]))
    raw = text.encode()
    if kind == "random":
        return draw(st.binary(min_size=1, max_size=200))
    if kind == "latin1":
        return (text + "\n# café\n").encode("latin-1", "replace")
    if kind == "truncate":
        return raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    if kind == "empty":
        return b""
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw
    i = draw(st.integers(0, max(len(raw) - 1, 0)))
    return raw[:i] + bytes([draw(st.integers(0, 255))]) + raw[i + 1:]


def instance_doc(name: str) -> dict:
    """A packaged instance as a dict with its model inlined (so model fields are mutated too)."""
    import planner

    return planner.load_instance(name).to_dict()


def write_json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc, allow_nan=True, ensure_ascii=False))
    return path


def toml_doc(path: Path) -> dict:
    return tomllib.loads(path.read_text())
