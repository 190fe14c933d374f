"""Issue 29's dominance and reproducibility measurements: ``auto`` against each of its parts
alone at the same budget, every figure measured in the same run.

For each instance (the packaged ones up to 16 domains, then ``--generated`` synthetic
ones from ``planner generate``: sizes and seeds below) and each budget B in ``--budgets``:

* greedy, the MILP alone (1 thread), CP-SAT alone (1 worker) and the annealing alone
  (greedy's plan, then annealing for the rest), each with budget B, one after the other
  on an otherwise idle machine (as far as this script controls it);
* ``auto`` with budget B, ``--repeats`` times (default 2), each run alone.

Every plan is scored by the evaluator (the instance's objective: T, T_eff / e, or the
cost). Reported per (instance, B): each part's objective, auto's (every repeat), auto /
the best part (the goal: at most 1.001), whether auto's repeats returned the same plan,
and ``--deterministic`` runs of auto (``--det``: twice, the same plan whatever the load).

``--det-compare`` is the load-independent comparison instead: every part alone and auto all
with a deterministic budget B -- greedy (deterministic anyway), CP-SAT alone with
``deterministic=True`` (B deterministic seconds, refinement included, 1 worker), the MILP
alone with ``deterministic=True`` (1 thread; HiGHS work counted, planner.solvers.workunits),
the annealing alone from greedy's plan for the deterministic seconds :func:`planner.plan`
gives a solver out of B (B - 1, less the sync choice's share with ``[options] dp_sync``;
the wall clock only a backstop), and auto with ``deterministic=True`` (``--repeats`` times).
Each row also names who found auto's
plan.  ``--save-json`` keeps every figure; ``--parts-from`` reuses the parts' figures of such
a file (they are deterministic: re-running them only costs time) so a change to auto is
measured against the same parts.  ``--resume FILE`` reuses whole (instance, B) records (parts
and auto) of a ``--save-json`` file of an earlier run cut short, on the same code: only the
instances it lacks are run (the results file names FILE).

    python benchmarks/dominance.py --det-compare --budgets 30 --generated 10 --repeats 1 --name dominance-det

    python benchmarks/dominance.py --budgets 30,60 --generated 20   # writes benchmarks/results/dominance.md
    python benchmarks/dominance.py --budgets 30 --instances two-dc,gcp-16 --generated 0 --name dominance-quick
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import commit, save, suite_instances  # noqa: E402
from planner import Instance, load_instance, plan  # noqa: E402
from planner.problem.errors import InfeasibleError  # noqa: E402
from planner.problem.synthetic import generate_instance  # noqa: E402
from planner.solvers import portfolio  # noqa: E402
from planner.solvers.registry import solve_seconds  # noqa: E402
from planner.solvers.syncchoice import sync_enabled  # noqa: E402


PARTS = ("greedy", "milp", "cpsat", "anneal")
DET_PARTS = PARTS  # every part has a deterministic budget (the MILP since issue 29)
GOAL = 1.001  # auto / the best part, at most
SIZES = ((4, 256), (6, 480), (8, 768), (12, 1152))  # (domains, GPUs) of the generated instances


def generated(n: int, first: int = 0) -> list[tuple[str, Instance]]:
    """``n`` synthetic instances: the sizes of :data:`SIZES` in turn, seeds ``first``, ``first`` + 1, ..."""
    out = []
    for k in range(first, first + n):
        d, g = SIZES[k % len(SIZES)]
        data = generate_instance(d, g, seed=k, model="llama2-13b", max_stages=16)
        data["name"] = f"gen-{d}dc-s{k}"
        out.append((data["name"], Instance.from_dict(data, resolve_model=_resolve)))
    return out


def _resolve(name: str):
    from planner.problem.files import find_model, load_model

    return load_model(find_model(name))


def key(p) -> str:
    """A plan's decisions (placement, stages, schedule, sync), without figures or solver record."""
    return p.model_copy(update={"predicted": None, "solver": None, "instance": ""}).to_json(indent=None)


def run(inst, solver: str, budget: float, seed: int, **kw):
    """(objective, plan key, wall seconds) of ``solver`` at ``budget``; objective None: no plan."""
    opts = dict(kw)
    if solver != "greedy":
        opts["time_limit"] = budget
    if solver == "milp":
        opts["threads"] = 1
    if solver == "cpsat":
        opts["workers"] = 1
    t0 = time.perf_counter()
    try:
        p = plan(inst, solver=solver, seed=seed, **opts)
    except InfeasibleError:
        return None, None, time.perf_counter() - t0
    return p.solver.objective, key(p), time.perf_counter() - t0


def run_det(inst, solver: str, budget: float, seed: int):
    """(objective, plan key, wall seconds, who found it) of ``solver`` with the deterministic budget
    ``budget`` (see the module docstring); objective None: no plan."""
    opts: dict = {}
    if solver in ("cpsat", "milp", "auto"):
        opts.update(time_limit=budget, deterministic=True)
    if solver == "cpsat":
        opts["workers"] = 1
    if solver == "milp":
        opts["threads"] = 1
    if solver == "anneal":  # deterministic seconds of the time plan() gives a solver; the clock a backstop
        opts.update(time_limit=portfolio.DETERMINISTIC_BACKSTOP * budget,
                    max_work=solve_seconds(budget, sync_enabled(inst))[0])
    t0 = time.perf_counter()
    try:
        p = plan(inst, solver=solver, seed=seed, **opts)
    except InfeasibleError:
        return None, None, time.perf_counter() - t0, None
    return p.solver.objective, key(p), time.perf_counter() - t0, getattr(p.solver, "incumbent", None)


def det_compare(cases, budgets, args, argv) -> int:
    """The ``--det-compare`` table (see the module docstring)."""
    old = json.loads(Path(args.parts_from).read_text()) if args.parts_from else {}
    resumed = json.loads(Path(args.resume).read_text()) if args.resume else {}
    head = ("| instance | B | " + " | ".join(DET_PARTS) + " | auto (each repeat) | auto / best part | "
            "best part | auto's plan from | repeats same plan | auto wall s |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    record, met, total, same = {}, 0, 0, 0
    losses = []
    for name, inst in cases:
        for B in budgets:
            tag = f"{name}@{B:g}"
            parts = {}
            if tag in resumed:  # a whole record of the run cut short
                parts = {s: tuple(v) for s, v in resumed[tag]["parts"].items()}
                print(f"{tag}: resumed from {args.resume}", flush=True)
            for s in (s for s in DET_PARTS if s not in parts):
                got = old.get(tag, {}).get("parts", {}).get(s)
                if got is None and args.auto_only:
                    got = (None, None, 0.0, None)  # the parts' figures come from another file (--merge)
                parts[s] = tuple(got) if got is not None else run_det(inst, s, B, args.seed)
                print(f"{tag} {s}: {fmt(parts[s][0])} ({parts[s][2]:.1f} s{', reused' if got else ''})", flush=True)
            autos = ([tuple(a) for a in resumed[tag]["auto"]] if tag in resumed
                     else [run_det(inst, "auto", B, args.seed) for _ in range(args.repeats)])
            print(f"{tag} auto: {', '.join(fmt(a[0]) for a in autos)} ({autos[0][3]})", flush=True)
            record[tag] = {"parts": parts, "auto": autos}
            done = {s: v[0] for s, v in parts.items() if v[0] is not None}
            best_part = min(done, key=done.get, default=None)
            worst_auto = max((a[0] for a in autos if a[0] is not None), default=None)
            ratio = None if best_part is None or worst_auto is None else worst_auto / done[best_part]
            total += 1
            met += ratio is not None and ratio <= GOAL
            losses += [f"{tag}: auto {fmt(worst_auto)} > {s} {fmt(v)} ({worst_auto / v:.5f}x)"
                       for s, v in done.items() if worst_auto is not None and worst_auto > v * GOAL]
            rep = len({a[1] for a in autos}) == 1
            same += rep
            rows.append(f"| {name} | {B:g} | " + " | ".join(fmt(parts[s][0]) for s in DET_PARTS)
                        + f" | {', '.join(fmt(a[0]) for a in autos)} | {fmt(ratio)} | {best_part} | "
                        f"{autos[0][3]} | {'yes' if rep else 'no'} | {max(a[2] for a in autos):.1f} |")
            print(rows[-1], flush=True)
            if args.save_json:
                Path(args.save_json).write_text(json.dumps(record, indent=1))
    lines = [f"Code: {commit()}; seed {args.seed}; deterministic budgets (B: CP-SAT deterministic seconds, "
             f"the annealing (B - 1, less the sync share) deterministic seconds, the MILP (1 thread) B deterministic seconds, auto deterministic=True; "
             f"the wall-clock backstop {portfolio.DETERMINISTIC_BACKSTOP:g} x B); "
             "every figure the evaluator's objective (time: T or T_eff / e, seconds; cost instances: cost per "
             "iteration)" + (f"; the parts' figures from {args.parts_from}" if args.parts_from else "")
             + (f"; the records of {', '.join(t for t in record if t in resumed)} resumed from {args.resume} "
                "(a run cut short)" if any(t in resumed for t in record) else "") + ".",
             "", *rows, "",
             f"- auto no worse than every part (within {GOAL - 1:.1%}) on {met} of {total} (instance, B) pairs, "
             "in every repeat.",
             f"- auto's repeats returned the same plan on {same} of {total}.",
             "- where auto is worse than a part:" + ("" if losses else " nowhere"), *[f"  - {x}" for x in losses]]
    out = save(args.name, lines, argv)
    print(f"wrote {out}")
    return 0


def merge(files: list[str], args, argv) -> int:
    """The ``--merge`` table: per (instance, B) of the first file, the parts' figures, auto's before
    (the first file) and after (the others, merged: a later file wins), auto / the best part each,
    and who found auto's plan after."""
    before = json.loads(Path(files[0]).read_text())
    after: dict = {}
    for f in files[1:]:
        after.update(json.loads(Path(f).read_text()))
    head = ("| instance | B | " + " | ".join(DET_PARTS) + " | best part | auto before | before / best part | "
            "auto after (each repeat) | after / best part | auto's plan from (after) | after wall s |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    n = met_b = met_a = 0
    losses_b, losses_a = [], []
    for tag, rec in before.items():
        parts = {s: v[0] for s, v in rec["parts"].items() if v[0] is not None}
        if not parts:
            continue
        best_part = min(parts, key=parts.get)
        b = max((a[0] for a in rec["auto"] if a[0] is not None), default=None)
        aft = after.get(tag, {}).get("auto", [])
        a = max((x[0] for x in aft if x[0] is not None), default=None)
        rb = None if b is None else b / parts[best_part]
        ra = None if a is None else a / parts[best_part]
        n += 1
        met_b += rb is not None and rb <= GOAL
        met_a += ra is not None and ra <= GOAL
        losses_b += [f"{tag}: {s} {fmt(v)}, auto {fmt(b)} ({b / v:.5f}x)" for s, v in parts.items()
                     if b is not None and b > v * GOAL]
        losses_a += [f"{tag}: {s} {fmt(v)}, auto {fmt(a)} ({a / v:.5f}x)" for s, v in parts.items()
                     if a is not None and a > v * GOAL]
        name, B = tag.rsplit("@", 1)
        rows.append(f"| {name} | {B} | " + " | ".join(fmt(parts.get(s)) for s in DET_PARTS)
                    + f" | {best_part} | {fmt(b)} | {fmt(rb)} | {', '.join(fmt(x[0]) for x in aft) or '-'} | "
                    f"{fmt(ra)} | {aft[0][3] if aft else '-'} | {max((x[2] for x in aft), default=0):.1f} |")
    lines = [f"Merged by {commit()} from {', '.join(files)}: deterministic budgets (see benchmarks/dominance.py "
             "--det-compare); every figure the evaluator's objective (time: T or T_eff / e, seconds; cost "
             "instances: cost per iteration).", "", *rows, "",
             f"- before: auto no worse than every part (within {GOAL - 1:.1%}) on {met_b} of {n}; after: "
             f"on {met_a} of {n}.",
             "- where auto was worse than a part before:" + ("" if losses_b else " nowhere"),
             *[f"  - {x}" for x in losses_b],
             "- where auto is worse than a part after:" + ("" if losses_a else " nowhere"),
             *[f"  - {x}" for x in losses_a]]
    out = save(args.name, lines, argv)
    print(f"wrote {out}")
    return 0


def fmt(x) -> str:
    return "-" if x is None else f"{x:.6g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budgets", default="30,60", help="comma-separated seconds")
    ap.add_argument("--instances", default=None,
                    help="comma-separated names (default: the suite; 'none': the generated ones only)")
    ap.add_argument("--generated", type=int, default=20, help="synthetic instances to add")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--det", action="store_true", help="also auto --deterministic, twice")
    ap.add_argument("--det-compare", action="store_true",
                    help="the parts alone and auto all with deterministic budgets (load-independent)")
    ap.add_argument("--backstop", type=float, default=None,
                    help="--det-compare: stop a deterministic run only past this many budgets of wall clock "
                         "(default portfolio.DETERMINISTIC_BACKSTOP; raise it on a loaded machine)")
    ap.add_argument("--save-json", default=None, help="--det-compare: keep every figure in this file")
    ap.add_argument("--parts-from", default=None, help="--det-compare: the parts' figures from this file")
    ap.add_argument("--resume", default=None,
                    help="--det-compare: whole records (parts and auto) from this --save-json file of a run cut "
                         "short on the same code; only the missing ones are run")
    ap.add_argument("--gen-first", type=int, default=0, help="the first generated instance's seed")
    ap.add_argument("--auto-only", action="store_true",
                    help="--det-compare: run auto only (the parts from --parts-from where given)")
    ap.add_argument("--merge", default=None,
                    help="BEFORE.json,AFTER.json[,...]: the table of auto before and after a change against the "
                         "parts of the first file (each file a --save-json of --det-compare), no run")
    ap.add_argument("--skip", default="", help="comma-separated instance names to leave out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="dominance")
    args = ap.parse_args(argv)
    budgets = [float(b) for b in args.budgets.split(",")]
    names = args.instances.split(",") if args.instances else suite_instances()
    names = [] if names == ["none"] else names
    skip = set(filter(None, args.skip.split(",")))
    cases = [(n, load_instance(n)) for n in names if n not in skip] + generated(args.generated, args.gen_first)
    if args.merge:
        return merge(args.merge.split(","), args, argv)
    if args.det_compare:
        if args.backstop is not None:
            portfolio.DETERMINISTIC_BACKSTOP = args.backstop
        return det_compare(cases, budgets, args, argv)
    head = ("| instance | B s | " + " | ".join(PARTS) + " | auto (each repeat) | auto / best part | "
            "repeats same plan | " + ("deterministic same plan | " if args.det else "") + "auto wall s |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    met = total = same = 0
    for name, inst in cases:
        for B in budgets:
            parts = {}
            for s in PARTS:
                parts[s] = run(inst, s, B, args.seed)
                print(f"{name} B={B:g} {s}: {fmt(parts[s][0])} ({parts[s][2]:.1f} s)", flush=True)
            autos = [run(inst, "auto", B, args.seed) for _ in range(args.repeats)]
            print(f"{name} B={B:g} auto: {', '.join(fmt(a[0]) for a in autos)}", flush=True)
            best = min((v[0] for v in parts.values() if v[0] is not None), default=None)
            worst_auto = max((a[0] for a in autos if a[0] is not None), default=None)
            ratio = None if best is None or worst_auto is None else worst_auto / best
            total += 1
            met += ratio is not None and ratio <= GOAL
            rep = len({a[1] for a in autos}) == 1
            same += rep
            det = ""
            if args.det:
                d = [run(inst, "auto", B, args.seed, deterministic=True) for _ in range(2)]
                det = f"{'yes' if d[0][1] == d[1][1] else 'no'} ({fmt(d[0][0])}) | "
            rows.append(f"| {name} | {B:g} | " + " | ".join(fmt(parts[s][0]) for s in PARTS)
                        + f" | {', '.join(fmt(a[0]) for a in autos)} | {fmt(ratio)} | {'yes' if rep else 'no'} | "
                        + det + f"{max(a[2] for a in autos):.1f} |")
            print(rows[-1], flush=True)
    lines = [f"Code: {commit()}; seed {args.seed}; every figure the evaluator's objective (time: T or T_eff / e, "
             "seconds; cost instances: cost per iteration); each run alone on the machine.", "", *rows, "",
             f"- auto no worse than every part (within {GOAL - 1:.1%}) on {met} of {total} (instance, B) pairs, "
             "in every repeat.",
             f"- auto's repeats returned the same plan on {same} of {total}."]
    out = save(args.name, lines, argv)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
