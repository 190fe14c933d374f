"""The column master (planner/solvers/multijob/master.py) against brute force over
every choice of columns, and its CP-SAT twin against the Pyomo + HiGHS master."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest

from planner.solvers.multijob.master import (OBJECTIVES, Capacity, fits, master_value, solve_lp, solve_master,
                                             solve_master_cpsat)


@dataclass(frozen=True)
class Col:
    job: int
    gpus: dict = field(default_factory=dict)
    link_share: dict = field(default_factory=dict)
    uplink_share: dict = field(default_factory=dict)
    rho: float = 0.0
    completion_s: float = 0.0
    cost: float = 0.0
    deadline_met: bool = True


def random_columns(seed: int, J: int = 3, per_job: int = 4):
    """Columns on domains a (8 GPUs), b (8 GPUs), link a|b, uplinks a and b: shares
    in hundredths (so CP-SAT's scaling is exact), rho in thousandths."""
    rng = random.Random(seed)
    cols = []
    for j in range(J):
        for _ in range(per_job):
            g = {"a": rng.randint(0, 6), "b": rng.randint(0, 6)}
            g = {d: n for d, n in g.items() if n} or {"a": 1}
            cols.append(Col(job=j, gpus=g, link_share={"a|b": rng.randint(0, 60) / 100},
                            uplink_share={d: rng.randint(0, 50) / 100 for d in g},
                            rho=rng.randint(1, 1000) / 1000, completion_s=rng.randint(1, 1000) * 10.0,
                            cost=rng.randint(1, 1000) * 1.0, deadline_met=rng.random() < 0.7))
    return cols


CAP = Capacity(gpus={"a": 8, "b": 8}, links=("a|b",), uplinks=("a", "b"))


def brute(cols, weights, objective):
    """(first objective, tie-break) of the best choice by enumeration."""
    J = len(weights)
    options = [[k for k, c in enumerate(cols) if c.job == j] + ([None] if objective == "deadline" else [])
               for j in range(J)]
    best = None
    for choice in itertools.product(*options):
        if not fits(cols, choice, CAP):
            continue
        v = master_value(cols, weights, list(choice), objective)
        if v is None:
            continue
        tie = sum(weights[j] * cols[k].rho for j, k in enumerate(choice) if k is not None)
        key = (v if objective in ("maxmin", "weighted", "deadline") else -v, tie)
        if best is None or key > best[0]:
            best = (key, v, tie)
    return None if best is None else best[1:]


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("seed", range(6))
def test_master_is_the_brute_force_optimum_and_cpsat_agrees(objective, seed):
    cols = random_columns(seed)
    weights = [1.0, 2.0, 0.5]
    want = brute(cols, weights, objective)
    got = solve_master(cols, weights, CAP, objective, seed=0)
    twin = solve_master_cpsat(cols, weights, CAP, objective, seed=0)
    if want is None:
        assert got.value is None and twin.value is None
        return
    assert got.status == "optimal" and twin.status == "optimal"
    for res in (got, twin):
        assert fits(cols, res.choice, CAP)
        assert master_value(cols, weights, res.choice, objective) == pytest.approx(want[0], rel=1e-6, abs=1e-9)
        tie = sum(weights[j] * cols[k].rho for j, k in enumerate(res.choice) if k is not None)
        if objective != "weighted":
            assert tie == pytest.approx(want[1], rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("objective", ["maxmin", "weighted", "makespan"])
def test_lp_relaxation_is_at_least_as_good_and_prices_bind(objective):
    cols = random_columns(3)
    weights = [1.0, 1.0, 1.0]
    lp = solve_lp(cols, weights, CAP, objective)
    mip = solve_master(cols, weights, CAP, objective)
    if mip.value is None:
        pytest.skip("no integral choice")
    if objective == "makespan":
        assert lp.value <= mip.value + 1e-9
    else:
        assert lp.value >= mip.value - 1e-9
    assert all(v >= 0 for v in lp.duals.values())


def test_prices_of_a_scarce_domain():
    """Two jobs wanting domain a's 8 GPUs: a's GPU row binds, b's does not."""
    cols = [Col(0, {"a": 8}, rho=1.0), Col(0, {"b": 2}, rho=0.2),
            Col(1, {"a": 8}, rho=1.0), Col(1, {"b": 2}, rho=0.2)]
    lp = solve_lp(cols, [1.0, 1.0], CAP, "maxmin")
    assert lp.value == pytest.approx(0.6)  # half of each big column
    assert lp.duals[("gpu", "a")] > 1e-6
    assert lp.duals.get(("gpu", "b"), 0.0) == pytest.approx(0.0, abs=1e-12)
    mip = solve_master(cols, [1.0, 1.0], CAP, "maxmin")
    assert mip.value == pytest.approx(0.2) and sorted(mip.choice) in ([0, 3], [1, 2])
