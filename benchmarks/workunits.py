"""Calibrate the deterministic work units (issue 29, "Reproducible").

``auto`` with a seed budgets its parts in deterministic seconds
(:mod:`planner.solvers.workunits`): counts of work that should track wall time
on an idle machine *per instance*.  The conditions ``auto`` runs in are three
CPU-bound processes on two cores (its own process and its two engines): each
gets :data:`CORE_SHARE` = 2/3 of a core.  This script measures each part's
*CPU time* (``time.process_time``: what the process itself used, whatever else
runs on the shared machine) and converts: one deterministic second is
``CORE_SHARE`` CPU seconds, a wall second of ``auto`` on an otherwise idle
machine.  (``--neighbours N`` adds N busy loops beside it, for a check in the
real conditions; CPU time hardly depends on them.)

1. the exact simulation, as the annealing spends it: :func:`planner.solvers.anneal.anneal`
   by a count of candidates from greedy's plan; CPU time fitted (non-negative
   least squares) as ``evaluations * SIM_CALL_S + sim_ops / SIM_OPS_PER_S +
   candidates * MOVE_S``;
2. HiGHS (:class:`planner.solvers.highs.MatrixHighs` inside the MILP, polish
   off): each model's building (Pyomo) plus its solve, fitted as ``size /
   HIGHS_BUILD_PER_S + size * checks / HIGHS_CHECK_PER_S`` (size = rows + columns
   + nonzeros, checks = the MIP solver's interrupt callbacks; our models are all
   MIPs, so HIGHS_ITER_PER_S, a pure LP's, keeps its value);
3. CP-SAT (:class:`planner.solvers.cpsat.CpsatShape`, calibrated, one worker): each
   shape's building and search, fitted as ``(variables + constraints) / CPSAT_BUILD_PER_S +
   deterministic time / CPSAT_DET_PER_S``.

Then, with the constants in the code (``--check``), each instance's wall time
for a fixed deterministic budget (anneal ``max_work``, MILP ``deterministic``)
against the budget.  Writes benchmarks/results/workunits.md (command, commit,
load average before and after).

    python benchmarks/workunits.py [--instances a,b] [--neighbours 2] [--check]
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _results import commit, save  # noqa: E402

INSTANCES = "tiny-3dc,two-dc,aws-multiregion,diloco-13b,edwc-full,gcp-16,memory-bound,cost-edwc"
CORE_SHARE = 2.0 / 3.0  # of a core, per process: three CPU-bound processes on two cores


def busy(n: int) -> list[subprocess.Popen]:
    """``n`` CPU-bound neighbours (python busy loops), niced as this process is."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def nnls_fit(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    # relative errors: weight each row by 1 / y so small and large runs count alike
    w = 1.0 / np.maximum(y, 1e-3)
    coef, _ = nnls(X * w[:, None], y * w)
    return coef


def measure_anneal(names, evals: int) -> list[tuple]:
    import planner
    from planner.solvers.anneal import anneal
    from planner.solvers.greedy import greedy

    rows = []
    for name in names:
        inst = planner.load_instance(name)
        g = greedy(inst, seed=0)
        for n in (evals // 4, evals):
            t = time.process_time()
            out = anneal(inst, g, time_limit=None, max_evals=n, seed=0)
            wall = (time.process_time() - t) / CORE_SHARE
            si = out.solver
            rows.append((name, si.evaluations, si.model_extra["sim_ops"], si.candidates, wall))
            print(f"anneal {name}: {n} candidates, {si.evaluations} simulations, {si.model_extra['sim_ops']} ops, "
                  f"{wall:.2f} s", flush=True)
    return rows


def measure_highs(names, limit: float) -> list[tuple]:
    import planner
    import planner.solvers.highs as H
    import planner.solvers.milp as milp_mod

    rows, pending = [], []
    solve0, build0 = H.MatrixHighs.solve, milp_mod.build_model

    def build(make, deadline=None):
        t = time.process_time()
        out = build0(make, deadline)
        pending.append(time.process_time() - t)
        return out

    def solve(self, M, start=None):
        t = time.process_time()
        r = solve0(self, M, start)
        b = pending.pop() if pending else 0.0
        pending.clear()
        rows.append((name, r.size, r.checks, (b + time.process_time() - t) / CORE_SHARE))
        return r

    milp_mod.build_model, H.MatrixHighs.solve = build, solve
    try:
        for name in names:
            inst = planner.load_instance(name)
            if inst.heterogeneous:
                continue
            t = time.perf_counter()
            n0 = len(rows)
            milp_mod.milp(inst, time_limit=limit, seed=0, polish=False)
            print(f"milp {name}: {len(rows) - n0} solves, {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        milp_mod.build_model, H.MatrixHighs.solve = build0, solve0
    return rows


def measure_cpsat(names, det: float) -> list[tuple]:
    """Per shape: (instance, variables + constraints, CP-SAT deterministic time, seconds)."""
    import planner
    import planner.solvers.cpsat as C
    from planner.solvers.workunits import CPSAT_BUILD_PER_S, CPSAT_DET_PER_S

    rows = []
    call0 = C.CpsatShape.__call__

    def call(self, shape, share, ctx):
        t = time.process_time()
        out = call0(self, shape, share, ctx)
        if out.size:
            search = (out.spent - out.size / CPSAT_BUILD_PER_S) * CPSAT_DET_PER_S  # CP-SAT's own
            rows.append((name, out.size, search, (time.process_time() - t) / CORE_SHARE))
        return out

    C.CpsatShape.__call__ = call
    try:
        for name in names:
            inst = planner.load_instance(name)
            t = time.perf_counter()
            n0 = len(rows)
            C.cpsat(inst, time_limit=det, seed=0, workers=1, deterministic=True, calibrated=True)
            print(f"cpsat {name}: {len(rows) - n0} shapes, {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        C.CpsatShape.__call__ = call0
    return rows


def check(names, budget: float) -> list[str]:
    """Wall time of a fixed deterministic budget with the constants in the code."""
    import planner
    from planner.solvers.anneal import anneal
    from planner.solvers.greedy import greedy
    from planner.solvers.milp import milp

    out = ["Seconds: CPU time / CORE_SHARE, as above (wall of auto's parts on an otherwise idle machine).", "",
           "| instance | anneal max_work (s) | seconds | milp deterministic (s) | seconds | spent (s) |",
           "|---|---|---|---|---|---|"]
    for name in names:
        inst = planner.load_instance(name)
        g = greedy(inst, seed=0)
        t = time.process_time()
        anneal(inst, g, time_limit=None, max_work=budget, seed=0)
        wa = (time.process_time() - t) / CORE_SHARE
        mcell = "- | - | -"
        if not inst.heterogeneous:
            t = time.process_time()
            p = milp(inst, time_limit=budget, seed=0, deterministic=True)
            mcell = (f"{budget:g} | {(time.process_time() - t) / CORE_SHARE:.2f} | "
                     f"{p.solver.model_extra['deterministic_time']:.2f}")
        out.append(f"| {name} | {budget:g} | {wa:.2f} | {mcell} |")
        print(out[-1], flush=True)
    return out


def per_instance(title: str, what: str, rows: list, fitted) -> list[str]:
    """A results section: per instance (``rows[i][0]``), the count of ``rows``, their measured
    seconds (``rows[i][3]``) and the fit's seconds (``fitted[i]``)."""
    per: dict = {}
    for r, f in zip(rows, fitted):
        d = per.setdefault(r[0], [0, 0.0, 0.0])
        d[0] += 1
        d[1] += r[3]
        d[2] += float(f)
    return ["", f"## {title}, per instance", "", f"| instance | {what} | seconds | fitted (s) |", "|---|---|---|---|",
            *(f"| {k} | {v[0]} | {v[1]:.2f} | {v[2]:.2f} |" for k, v in per.items())]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default=INSTANCES)
    ap.add_argument("--neighbours", type=int, default=0, help="CPU-bound processes beside this one")
    ap.add_argument("--evals", type=int, default=2000, help="annealing candidates per run (and a quarter)")
    ap.add_argument("--milp-limit", type=float, default=8.0, help="seconds per MILP run (wall clock)")
    ap.add_argument("--cpsat-det", type=float, default=4.0, help="CP-SAT deterministic seconds per run")
    ap.add_argument("--cpsat-instances", default="", help="CP-SAT on these only (default: --instances)")
    ap.add_argument("--check", type=float, default=0.0, help="then time this deterministic budget (s) per instance")
    ap.add_argument("--name", default="workunits")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    names = [n for n in args.instances.split(",") if n]
    load0 = os.getloadavg()
    hood = busy(args.neighbours)
    try:
        an = measure_anneal(names, args.evals)
        hi = measure_highs(names, args.milp_limit)
        cp = measure_cpsat([n for n in args.cpsat_instances.split(",") if n] or names, args.cpsat_det)
        chk = check(names, args.check) if args.check else []
    finally:
        for p in hood:
            p.kill()
            p.wait()
    load1 = os.getloadavg()

    A = np.array([[r[1], r[2], r[3]] for r in an], dtype=float)
    ya = np.array([r[4] for r in an])
    ca = nnls_fit(A, ya)
    sim_call, sim_ops_per_s, move_s = ca[0], (1.0 / ca[1] if ca[1] > 0 else float("inf")), ca[2]
    H = np.array([[r[1], r[1] * r[2]] for r in hi], dtype=float)
    yh = np.array([r[3] for r in hi])
    ch = nnls_fit(H, yh)
    inv = [1.0 / c if c > 0 else float("inf") for c in ch]
    Cm = np.array([[r[1], r[2]] for r in cp], dtype=float)
    yc = np.array([r[3] for r in cp])
    cc = nnls_fit(Cm, yc)
    cinv = [1.0 / c if c > 0 else float("inf") for c in cc]

    def err(X, y, c):
        pred = X @ c
        return np.median(np.abs(pred - y) / y), np.max(np.abs(pred - y) / y)

    ea, eh, ec = err(A, ya, ca), err(H, yh, ch), err(Cm, yc, cc)
    lines = [f"Commit: {commit()}", "",
             f"Machine: {os.cpu_count()} cores, shared with other agents (load average before {load0[0]:.2f} "
             f"{load0[1]:.2f} {load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}); "
             f"{args.neighbours} busy loops beside this process.  Times are this process's CPU time "
             f"divided by {CORE_SHARE:.3f} (three CPU-bound processes on two cores, as auto runs: its own and "
             "two engines), so they do not depend on the other agents' load; a deterministic second is a wall "
             "second of auto on an otherwise idle machine.", "",
             "## Constants (copy into planner/solvers/workunits.py)", "",
             "| constant | value | fit over | median / max relative error |", "|---|---|---|---|",
             f"| SIM_CALL_S | {sim_call:.3g} | {len(an)} anneal runs | {ea[0]:.2f} / {ea[1]:.2f} |",
             f"| SIM_OPS_PER_S | {sim_ops_per_s:.3g} | | |",
             f"| MOVE_S | {move_s:.3g} | | |",
             f"| HIGHS_BUILD_PER_S | {inv[0]:.3g} | {len(hi)} HiGHS solves (build + solve) | {eh[0]:.2f} / {eh[1]:.2f} |",
             f"| HIGHS_CHECK_PER_S | {inv[1]:.3g} | | |",
             f"| CPSAT_BUILD_PER_S | {cinv[0]:.3g} | {len(cp)} CP-SAT shape solves (build + search) | "
             f"{ec[0]:.2f} / {ec[1]:.2f} |",
             f"| CPSAT_DET_PER_S | {cinv[1]:.3g} | | |", "",
             "## Annealing runs", "", "| instance | simulations | sim ops | candidates | wall (s) | fitted (s) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.2f} | {float(A[i] @ ca):.2f} |" for i, r in enumerate(an)]
    lines += per_instance("CP-SAT shape solves", "shapes", cp, Cm @ cc)
    lines += per_instance("HiGHS solves", "solves", hi, H @ ch)
    if chk:
        lines += ["", f"## Check: a deterministic budget of {args.check:g} s with the constants in the code", ""] + chk
    path = save(args.name, lines)
    print("\n".join(lines[:16]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
