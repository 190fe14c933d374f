"""The compiled-program memo of the evaluator is bounded by instructions, not by a count of
programs (a count let 256 programs of 16 x 768 micro-batches, 24 MB each, grow a
benchmark's process past 12 GB), and what it returns is what a fresh compile gives."""

from __future__ import annotations

import numpy as np

from planner.scoring import evaluator as E
from planner.scoring.simulator import compile_program


def test_the_memo_stays_within_its_instruction_budget(monkeypatch):
    monkeypatch.setattr(E, "PROGRAM_CACHE_INSTRUCTIONS", 20_000)
    monkeypatch.setattr(E, "_programs", type(E._programs)())
    monkeypatch.setattr(E, "_programs_size", [0])
    for m in range(8, 200, 8):
        E._program("1f1b", 6, m)
        assert E._programs_size[0] == sum(len(p.code) for p in E._programs.values())
        assert E._programs_size[0] <= 20_000 or len(E._programs) == 1
    assert len(E._programs) < len(range(8, 200, 8))  # some were evicted
    assert ("1f1b", 6, 8, False, False) not in E._programs  # the least recently used first


def test_a_memoised_program_simulates_as_a_fresh_one(monkeypatch):
    monkeypatch.setattr(E, "PROGRAM_CACHE_INSTRUCTIONS", 5_000)
    monkeypatch.setattr(E, "_programs", type(E._programs)())
    monkeypatch.setattr(E, "_programs_size", [0])
    rng = np.random.default_rng(0)
    f, g = rng.uniform(1, 2, 4), rng.uniform(2, 4, 4)
    x, lat = rng.uniform(0, 1, (3, 5)), rng.uniform(0, 0.1, (3, 5))
    for _ in range(2):  # the second round recompiles what the small budget evicted
        for sched, m in (("1f1b", 12), ("gpipe", 9), ("1f1b", 30)):
            got = E._program(sched, 4, m).run(f, g, x, lat)
            want = compile_program(sched, 4, m).run(f, g, x, lat)
            np.testing.assert_array_equal(got, want)
