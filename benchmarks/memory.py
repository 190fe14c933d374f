"""Peak resident memory of planner runs (issues 17 and 29).

One run, one TSV row (instance, solver, domains, GPUs, units, peak RSS MB with child
processes, status, wall s, objective)::

    python benchmarks/memory.py INSTANCE SOLVER SECONDS [--deterministic] [--no-release] [--cap-gb G]

``--table``: one fresh process per (instance, solver), the table in docs/guide.md
("Memory") as benchmarks/results/NAME.md::

    python benchmarks/memory.py --table tiny-3dc,two-dc,aws-multiregion,gcp-16 --solvers milp,cpsat,auto --seconds 20 --name memory

``--sizes``: the largest CP-SAT model (variables plus constraints) of each instance's
shapes, CP-SAT alone with a deterministic budget and no size limit, against the size
the default memory budget allows (``planner.solvers.cpsat.max_model_size``)::

    python benchmarks/memory.py --sizes tiny-3dc,two-dc --seconds 10 --name cpsat_model_sizes

``--release-ratio``: CP-SAT alone on each instance twice, in fresh processes, with and
without giving each shape's freed model pages back to the system
(``planner.solvers.stop.release_freed_memory``), and the ratio of the two peaks measured
in the same run; ``--cap-gb`` stops a run (status ``memory_limit``) before it takes the
machine down, and the ratio is then a lower bound (``>=``)::

    python benchmarks/memory.py --release-ratio edwc-full,gcp-16 --seconds 30 --deterministic --name cpsat_memory
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def one(name: str, solver: str, seconds: float, deterministic: bool, release: bool, cap_gb: float | None) -> str:
    from planner import load_instance
    from planner.solvers import stop
    from planner.solvers.registry import plan

    if not release:
        stop.release_freed_memory = lambda: None  # the shape search keeps its freed pages (before ed3ea9a)
    inst = load_instance(name)
    t = time.perf_counter()
    cap = cap_gb * 1e9 if cap_gb else float("inf")
    with stop.Watch(memory_limit_bytes=cap, sigint=False, period_s=0.05) as w:
        p = plan(inst, solver=solver, time_limit=seconds, seed=0, **({"deterministic": True} if deterministic else {}))
        peak = w.peak_rss
    self_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    obj = "-" if p.solver.objective is None else f"{p.solver.objective:.6g}"
    return (f"{name}\t{solver}\t{len(inst.domains)}\t{inst.total_gpus}\t{inst.num_units}\t"
            f"{max(peak, self_peak) / 1e6:.0f}\t{p.solver.status}\t{time.perf_counter() - t:.0f}\t"
            f"{obj}")


def _save(args, lines: list[str]) -> None:
    """``lines`` and the code they come from as benchmarks/results/NAME.md."""
    import _results

    print(_results.save(args.name, lines + ["", f"Code: {_results.commit()}."]))


def _run(name: str, solver: str, args, *flags) -> list[str]:
    """One run in a fresh process: its TSV row as a list (a failed run: its exit status)."""
    cmd = [sys.executable, __file__, name, solver, str(args.seconds), *flags]
    if args.cap_gb:
        cmd += ["--cap-gb", str(args.cap_gb)]
    if args.deterministic:
        cmd.append("--deterministic")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if not out.stdout.strip():
        print(out.stderr[-2000:], file=sys.stderr)
        return [name, solver, "?", "?", "?", "nan", f"exit {out.returncode}", "?", "-"]
    row = out.stdout.strip().splitlines()[-1].split("\t")
    print("\t".join(row), *flags, flush=True)
    return row


def table(args) -> None:
    solvers = args.solvers.split(",")
    lines = [f"Peak resident memory of one planner run (MB, the process and its engine processes, "
             f"sampled every 50 ms and the kernel's own peak), {'deterministic ' if args.deterministic else ''}"
             f"budget {args.seconds:g} s, seed 0, one fresh process per run; in brackets the run's status, "
             "wall seconds and plan (the evaluator's objective).", "",
             "| instance | domains | GPUs | units | " + " | ".join(solvers) + " |",
             "|---" * (4 + len(solvers)) + "|"]
    for name in args.table.split(","):
        rows = [_run(name, solver, args) for solver in solvers]
        cells = [f"{r[5]} MB ({r[6]}, {r[7]} s, plan {r[8]})" for r in rows]
        ok = next((r for r in rows if r[2] != "?"), rows[0])
        lines.append(f"| {name} | {ok[2]} | {ok[3]} | {ok[4]} | " + " | ".join(cells) + " |")
    _save(args, lines)


def sizes(args) -> None:
    from planner import load_instance
    from planner.solvers import cpsat as cps
    from planner.solvers.formulations import cpsat as formulation
    from planner.solvers.registry import plan

    cap = cps.max_model_size()
    cps.max_model_size = lambda: None  # every shape built whole, to be counted
    built, original = [], formulation.build

    def counting_build(*a, **k):
        cm = original(*a, **k)
        proto = cm.model.Proto()
        built.append(len(proto.variables) + len(proto.constraints))
        return cm

    formulation.build = counting_build
    lines = [f"CP-SAT alone, deterministic budget {args.seconds:g} s, seed 0, no model size limit: the shapes it "
             f"built and their largest model (variables plus constraints), against the {cap:,} the default "
             "memory budget allows (planner.solvers.cpsat.max_model_size).", "",
             "| instance | domains | shapes built | largest model | models over the limit |", "|---|---|---|---|---|"]
    for name in args.sizes.split(","):
        built.clear()
        inst = load_instance(name)
        plan(inst, solver="cpsat", time_limit=args.seconds, deterministic=True, seed=0)
        over = sum(n > cap for n in built)
        print(name, len(built), max(built, default=0), over, flush=True)
        lines.append(f"| {name} | {len(inst.domains)} | {len(built)} | {max(built, default=0):,} | {over} |")
    _save(args, lines)


def release_ratio(args) -> None:
    lines = ["CP-SAT alone, one fresh process per run, "
             f"{'deterministic ' if args.deterministic else ''}budget {args.seconds:g} s, seed 0, "
             f"memory cap {args.cap_gb:g} GB (a capped run stops with status memory_limit: its peak is where it was stopped).",
             "", "| instance | domains | GPUs | peak, pages kept (MB) | status | peak, pages released (MB) | status "
             "| ratio kept / released | plan kept (s) | plan released (s) | wall kept / released (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.release_ratio.split(","):
        rows = {mode: _run(name, "cpsat", args, mode) for mode in ("--no-release", "--release")}
        k, r = rows["--no-release"], rows["--release"]
        ratio = float(k[5]) / float(r[5])
        ge = ">= " if k[6] == "memory_limit" else ""
        lines.append(f"| {name} | {r[2]} | {r[3]} | {k[5]} | {k[6]} | {r[5]} | {r[6]} | {ge}{ratio:.2f} "
                     f"| {k[8]} | {r[8]} | {k[7]} / {r[7]} |")
    _save(args, lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("instance", nargs="?")
    ap.add_argument("solver", nargs="?")
    ap.add_argument("seconds_pos", nargs="?", type=float, metavar="SECONDS")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--deterministic", action="store_true", help="deterministic work budget (load-independent)")
    ap.add_argument("--no-release", dest="release", action="store_false",
                    help="keep freed model pages (stop.release_freed_memory off)")
    ap.add_argument("--release", dest="release", action="store_true")
    ap.add_argument("--cap-gb", type=float, default=None, help="stop a run past this resident memory")
    ap.add_argument("--release-ratio", metavar="INSTANCES", help="comma-separated: CP-SAT with and without release")
    ap.add_argument("--table", metavar="INSTANCES", help="comma-separated: the memory table, one run per solver")
    ap.add_argument("--solvers", default="milp,cpsat,auto")
    ap.add_argument("--sizes", metavar="INSTANCES", help="comma-separated: CP-SAT's largest model per instance")
    ap.add_argument("--name", default="cpsat_memory")
    args = ap.parse_args()
    if args.release_ratio:
        args.cap_gb = args.cap_gb or 12.0
        release_ratio(args)
        return
    if args.table:
        table(args)
        return
    if args.sizes:
        sizes(args)
        return
    if not (args.instance and args.solver):
        ap.error("INSTANCE SOLVER SECONDS, or --release-ratio INSTANCES")
    seconds = args.seconds_pos if args.seconds_pos is not None else args.seconds
    print(one(args.instance, args.solver, seconds, args.deterministic, args.release, args.cap_gb), flush=True)


if __name__ == "__main__":
    main()
