"""National scale (issue 15): the large instances, greedy, the evaluator and auto.

On the national-scale packaged instances (edwc-120dc, azure-zones, edwc-300dc)
and a generated 300-domain / 150,000-GPU one (``planner generate --domains 300
--gpus 150000 --seed 0``), in one run:

* loading (with validation) and the all-pairs routes, seconds;
* greedy (``planner.plan(..., solver="greedy")``: greedy, the exact evaluation and
  the lower bound): wall time, best of two runs, and its plan.  Goal: < 5 s at
  300 domains;
* the evaluator on a 1,024-replica plan (7 stages x tp 8 along greedy's domain
  chain, 1f1b: many replicas straddle two datacenters) at K = 1 network state: exact evaluations per second with replicas
  grouped (the default) and without (``Evaluator(..., group_replicas=False)``), the
  ratio, and that both give the same iteration time to the bit.  Goal: >= 1,000/s;
* ``planner plan INSTANCE --solver auto --time-limit 60`` in a child process
  (``--memory-limit 6`` GB; killed after a timeout): exit status, wall time, peak
  resident memory of the child's process tree (sampled from /proc every 0.2 s) and
  of its largest process (``os.wait4``), the plan's iteration time against
  greedy's, and whether its bound is valid (<= the T_est of every plan seen).

Writes benchmarks/results/scale.md and scale.csv, headed by the command and commit.

    .venv/bin/python benchmarks/scale.py [--skip-auto] [--auto-time-limit 60] [--baseline DIR] [INSTANCE ...]

``--baseline DIR`` also times greedy and the evaluator of another checkout (the code
before this work: ``git archive 7c8be23 | tar -x -C DIR``) on the same files.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core
import numpy as np  # noqa: E402

from _results import RESULTS, commit, save  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from planner import Evaluator, load_instance, plan  # noqa: E402
from planner.problem.network import NetworkStates  # noqa: E402
from planner.problem.plan import Plan  # noqa: E402
from planner.problem.space import PlanSpace  # noqa: E402
from planner.problem.files import toml_text
from planner.problem.synthetic import generate_instance, header  # noqa: E402
from planner.solvers.greedy import _chains, place_fill  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ["edwc-120dc", "azure-zones", "edwc-300dc"]
GENERATED = "generated-300dc"  # planner generate --domains 300 --gpus 150000 --seed 0
EVAL_REPLICAS, EVAL_STAGES, EVAL_TP = 1024, 7, 8
# 7 stages, not 8: the datacenters hold multiples of 64 GPUs, so with 8 stages of tp 8 every replica
# would sit inside one datacenter (one group); with 7 many straddle two, a harder case for grouping




def rate(fn, window: float, repeats: int = 3) -> float:
    """Calls per second: the best of ``repeats`` windows of at least ``window`` seconds."""
    best = 0.0
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= window:
                break
        best = max(best, n / dt)
    return best


def greedy_part(name: str, path) -> dict:
    t0 = time.perf_counter()
    inst = load_instance(path)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    inst.routes
    routes_s = time.perf_counter() - t0
    times, p = [], None
    for _ in range(2):  # best of two, on fresh copies (nothing cached from the first run)
        fresh = load_instance(path)
        fresh.routes
        t0 = time.perf_counter()
        p = plan(fresh, solver="greedy")
        times.append(time.perf_counter() - t0)
    pr = p.predicted
    used = p.gpus_per_domain()
    return {"part": "greedy", "instance": name, "domains": len(inst.domains), "gpus": inst.total_gpus,
            "links": len(inst.links), "load_s": load_s, "routes_s": routes_s, "greedy_s": min(times),
            "shape": f"{p.replicas}x{p.num_stages}x{p.tp}", "micro_batch": p.micro_batch_size,
            "schedule": p.schedule_kind, "gpus_used": p.gpus_used, "domains_used": len(used),
            "T_s": pr.iteration_time_s, "T_est_s": pr.estimate_s, "x_bound": pr.bound_ratio,
            "lower_bound_s": pr.iteration_time_s / pr.bound_ratio}


def eval_plan(inst) -> Plan:
    """A 1,024-replica plan: 7 stages of tp 8 (fewer where 57,344 GPUs do not fit), filled
    along greedy's first domain chain."""
    space = PlanSpace(inst)
    m = inst.workload.global_batch_size // EVAL_REPLICAS
    slots, chains = _chains(inst, space, EVAL_TP)
    for S in range(EVAL_STAGES, 0, -1):
        cuts = space.partition(EVAL_TP, 1, "1f1b", S, m)
        placement = place_fill(chains[0], slots, S, EVAL_REPLICAS) if cuts else None
        if placement is not None:
            return Plan.build(cuts, placement, tp=EVAL_TP, micro_batch_size=1, instance=inst, schedule="1f1b")
    raise ValueError(f"{inst.name}: no {EVAL_REPLICAS}-replica plan fits")


def evaluator_part(name: str, path, window: float) -> dict:
    inst = load_instance(path)
    p = eval_plan(inst)
    st = NetworkStates.base(inst)
    t0 = time.perf_counter()
    grouped = Evaluator(inst, p)
    build_s = time.perf_counter() - t0
    flat = Evaluator(inst, p, group_replicas=False)
    same = bool(np.array_equal(grouped.iteration_times(st), flat.iteration_times(st)))
    r_grouped = rate(lambda: grouped.iteration_times(st), window)
    r_flat = rate(lambda: flat.iteration_times(st), window, repeats=1)
    r_build = rate(lambda: Evaluator(inst, p).iteration_times(st), window, repeats=1)
    return {"part": "evaluator", "instance": name, "shape": f"{p.replicas}x{p.num_stages}x{p.tp}",
            "micro_batches": p.num_micro_batches, "domains_used": len(p.gpus_per_domain()),
            "groups": grouped.fig.groups, "build_ms": 1e3 * build_s, "evals_per_s": r_grouped,
            "ungrouped_evals_per_s": r_flat, "ratio": r_grouped / r_flat, "with_build_per_s": r_build,
            "bitwise_equal": same, "T_s": float(grouped.iteration_times(st)[0])}


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/statm") as fh:
                rss[int(d)] = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def auto_part(name: str, path, greedy_row: dict, time_limit: float, memory_gb: float) -> dict:
    out = Path(tempfile.mkdtemp()) / "auto.json"
    cmd = [sys.executable, "-m", "planner.cli", "plan", str(path), "--solver", "auto", "--time-limit",
           f"{time_limit:g}", "--memory-limit", f"{memory_gb:g}", "--json", "-q", "--out", str(out)]
    timeout = 2 * time_limit + 120
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
                            start_new_session=True)
    peak, status, usage, killed = 0, None, None, False
    stdout_chunks, stderr_chunks = [], []
    import threading

    def drain(stream, sink):
        for chunk in iter(lambda: stream.read(65536), b""):
            sink.append(chunk)

    readers = [threading.Thread(target=drain, args=(proc.stdout, stdout_chunks), daemon=True),
               threading.Thread(target=drain, args=(proc.stderr, stderr_chunks), daemon=True)]
    for t in readers:
        t.start()
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, _tree_rss(proc.pid))
        if time.perf_counter() - t0 > timeout and not killed:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this benchmark started
            killed = True
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    for t in readers:
        t.join(timeout=5)
    proc.returncode = os.waitstatus_to_exitcode(status)
    row = {"part": "auto", "instance": name, "time_limit_s": time_limit, "memory_limit_gb": memory_gb,
           "exit": "killed after %.0f s" % timeout if killed else proc.returncode, "wall_s": wall,
           "peak_tree_rss_mb": peak / 1e6, "max_rss_mb": usage.ru_maxrss / 1e3,  # ru_maxrss is in KB
           "greedy_T_s": greedy_row["T_s"], "greedy_T_est_s": greedy_row["T_est_s"]}
    err = b"".join(stderr_chunks).decode(errors="replace").strip().splitlines()
    if proc.returncode == 0 and not killed:
        doc = json.loads(b"".join(stdout_chunks))
        pr, info, ev = doc["predicted"], doc["solver"], doc["evaluation"]
        bound = info.get("bound")
        row.update({"status": info["status"], "T_s": pr["iteration_time_s"], "T_est_s": pr["estimate_s"],
                    "vs_greedy": pr["iteration_time_s"] / greedy_row["T_s"], "bound": bound,
                    "bound_valid": bound is None or (bound <= pr["estimate_s"] * (1 + 1e-9)
                                                     and bound <= greedy_row["T_est_s"] * (1 + 1e-9)),
                    "lower_bound_valid": ev["lower_bound_s"] <= pr["iteration_time_s"] * (1 + 1e-9),
                    "shape": f"{doc['replicas']}x{len(doc['stages'])}x{doc['tp']}",
                    "engine": info.get("incumbent", "")})
    else:
        row["status"] = "failed"
        row["error"] = err[-1] if err else ""
    return row


BASELINE_SCRIPT = r"""
import json, sys, time
from planner import Evaluator, load_instance, plan
from planner.problem.io import load_plan
from planner.problem.network import NetworkStates
inst = load_instance(sys.argv[1])
t0 = time.perf_counter(); inst.routes; routes_s = time.perf_counter() - t0
t0 = time.perf_counter(); p = plan(inst, solver="greedy"); greedy_s = time.perf_counter() - t0
big = load_plan(sys.argv[2], inst)
st = NetworkStates.base(inst)
ev = Evaluator(inst, big)
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < float(sys.argv[3]):
    T = float(ev.iteration_times(st)[0]); n += 1
print(json.dumps({"routes_s": routes_s, "greedy_s": greedy_s, "shape": f"{p.replicas}x{p.num_stages}x{p.tp}",
                  "T_s": p.predicted.iteration_time_s, "evals_per_s": n / (time.perf_counter() - t0), "eval_T_s": T}))
"""


def baseline_part(name: str, path, checkout: Path, window: float) -> dict:
    """Greedy and the evaluator of another checkout (the code before this work), in a
    child process on the same instance file and the same 1,024-replica plan."""
    inst_path = Path(path) if Path(str(path)).is_file() else ROOT / "instances" / f"{name}.toml"
    plan_file = Path(tempfile.mkdtemp()) / "plan.json"
    plan_file.write_text(eval_plan(load_instance(path)).to_json())
    env = dict(os.environ, PYTHONPATH=str(checkout))
    res = subprocess.run([sys.executable, "-c", BASELINE_SCRIPT, str(inst_path), str(plan_file), f"{window:g}"],
                         capture_output=True, text=True, env=env, cwd=checkout, timeout=1800)
    row = {"part": "baseline", "instance": name, "checkout": str(checkout)}
    if res.returncode:
        row["error"] = (res.stderr.strip().splitlines() or ["?"])[-1]
    else:
        row.update(json.loads(res.stdout.strip().splitlines()[-1]))
    return row


def fmt(v, spec=".3g"):
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*", help=f"default: {', '.join(PACKAGED)} and {GENERATED}")
    ap.add_argument("--skip-auto", action="store_true", help="greedy and evaluator parts only")
    ap.add_argument("--auto-time-limit", type=float, default=60.0)
    ap.add_argument("--memory-limit", type=float, default=6.0, help="GB, passed to auto's --memory-limit")
    ap.add_argument("--window", type=float, default=1.0, help="seconds per timing window")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a checkout of the planner before this work (e.g. git archive 7c8be23): its greedy "
                         "and evaluator timed on the same instances and plans, in a child process")
    args = ap.parse_args(argv)
    names = args.instances or PACKAGED + [GENERATED]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name in names:
            if name == GENERATED:
                data = generate_instance(300, 150_000, 0)
                path = Path(tmp) / "generated-300dc.toml"
                path.write_text(toml_text(data, header(data, "planner generate --domains 300 --gpus 150000 --seed 0")))
                paths[name] = path
            else:
                paths[name] = name
        greedy_rows = {}
        for name in names:
            r = greedy_part(name, paths[name])
            greedy_rows[name] = r
            rows.append(r)
            print(f"greedy {name}: {r['greedy_s']:.2f} s, {r['shape']}, T {r['T_s']:.3f} s", flush=True)
        for name in names:
            r = evaluator_part(name, paths[name], args.window)
            rows.append(r)
            print(f"evaluator {name}: {r['evals_per_s']:,.0f}/s grouped, {r['ungrouped_evals_per_s']:,.0f}/s "
                  f"ungrouped ({r['groups']} groups)", flush=True)
        self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
        if args.baseline:
            for name in names:
                r = baseline_part(name, paths[name], args.baseline.resolve(), args.window)
                rows.append(r)
                print(f"baseline {name}: {r}", flush=True)
        if not args.skip_auto:
            for name in names:
                r = auto_part(name, paths[name], greedy_rows[name], args.auto_time_limit, args.memory_limit)
                rows.append(r)
                print(f"auto {name}: {r['exit']}, {r['wall_s']:.1f} s, peak {r['peak_tree_rss_mb']:.0f} MB, "
                      f"{r.get('status')}", flush=True)
    lines = [f"Commit {commit()}; {os.cpu_count()} cores shared with other work (timings are wall clock, "
             "one core: OMP_NUM_THREADS=1).", ""]
    lines += ["## Greedy (planner.plan, solver greedy: greedy + exact evaluation + lower bound; best of 2)", "",
              "| instance | domains | GPUs | links | load s | routes s | greedy s | R x S x tp | b | sched | "
              "GPUs used | domains used | T s | T_est s | x bound |", "|" + "---|" * 15]
    for r in rows:
        if r["part"] == "greedy":
            lines.append(f"| {r['instance']} | {r['domains']} | {r['gpus']:,} | {r['links']:,} | {r['load_s']:.2f} | "
                         f"{r['routes_s']:.2f} | {r['greedy_s']:.2f} | {r['shape']} | {r['micro_batch']} | "
                         f"{r['schedule']} | {r['gpus_used']:,} | {r['domains_used']} | {r['T_s']:.3f} | "
                         f"{r['T_est_s']:.3f} | {r['x_bound']:.2f} |")
    g300 = [r for r in rows if r["part"] == "greedy" and r["domains"] >= 300]
    if g300:
        worst = max(r["greedy_s"] for r in g300)
        lines += ["", f"Goal: greedy under 5 s at 300 domains: {'met' if worst < 5 else 'NOT met'} "
                      f"(slowest {worst:.2f} s)."]
    lines += ["", f"## Evaluator: a {EVAL_REPLICAS}-replica plan (up to {EVAL_STAGES} stages x tp {EVAL_TP}, 1f1b, "
                  "filled along greedy's domain chain), K = 1 network state", "",
              "| instance | R x S x tp | m | domains used | groups | build ms | evals/s grouped | "
              "evals/s ungrouped | ratio | build + eval /s | same T (bitwise) |", "|" + "---|" * 11]
    for r in rows:
        if r["part"] == "evaluator":
            lines.append(f"| {r['instance']} | {r['shape']} | {r['micro_batches']} | {r['domains_used']} | "
                         f"{r['groups']} | {r['build_ms']:.1f} | {r['evals_per_s']:,.0f} | "
                         f"{r['ungrouped_evals_per_s']:,.0f} | {r['ratio']:.1f} | {r['with_build_per_s']:,.0f} | "
                         f"{fmt(r['bitwise_equal'])} |")
    ev = [r for r in rows if r["part"] == "evaluator"]
    if ev:
        low = min(r["evals_per_s"] for r in ev)
        lines += ["", f"Goal: >= 1,000 evaluations/s of a ~1,000-replica plan at K = 1: "
                      f"{'met' if low >= 1000 else 'NOT met'} (lowest {low:,.0f}/s; a compiled evaluator scoring "
                      "the plan again, as under a new network state; 'build + eval' includes compiling it)."]
    lines += ["", f"Peak resident memory of this process (loading, routes, greedy, evaluators): {self_rss:,.0f} MB."]
    base = {r["instance"]: r for r in rows if r["part"] == "baseline"}
    if base:
        now = {(r["part"], r["instance"]): r for r in rows}
        lines += ["", f"## Before: the same runs on {args.baseline} (a checkout of the code before this work), "
                      "in a child process", "",
                  "| instance | routes s before / now | greedy s before / now | same greedy plan | "
                  "evals/s before / now (same 1,024-replica plan) | speed-up | same T |", "|" + "---|" * 7]
        for name, b in base.items():
            g, e = now[("greedy", name)], now[("evaluator", name)]
            if "error" in b:
                lines.append(f"| {name} | failed: {b['error']} | | | | | |")
                continue
            lines.append(f"| {name} | {b['routes_s']:.2f} / {g['routes_s']:.2f} | {b['greedy_s']:.2f} / "
                         f"{g['greedy_s']:.2f} | {fmt(b['shape'] == g['shape'] and b['T_s'] == g['T_s'])} | "
                         f"{b['evals_per_s']:,.0f} / {e['evals_per_s']:,.0f} | "
                         f"{e['evals_per_s'] / b['evals_per_s']:.1f}x | {fmt(b['eval_T_s'] == e['T_s'])} |")
        lines += ["", "Before: greedy timed once (not best of two), after loading and routes; its time includes "
                      "the exact evaluation and the lower bound, as now."]
    autos = [r for r in rows if r["part"] == "auto"]
    if autos:
        lines += ["", f"## auto (--time-limit {args.auto_time_limit:g}, --memory-limit {args.memory_limit:g} GB) in a "
                      "child process", "",
                  "| instance | exit | status | wall s | peak RSS MB (tree) | max RSS MB (one process) | R x S x tp | "
                  "T s | greedy T s | T / greedy | T_est s | bound | bound valid | incumbent from |",
                  "|" + "---|" * 14]
        for r in autos:
            lines.append(f"| {r['instance']} | {r['exit']} | {r.get('status')} | {r['wall_s']:.1f} | "
                         f"{r['peak_tree_rss_mb']:,.0f} | {r['max_rss_mb']:,.0f} | {fmt(r.get('shape'))} | "
                         f"{fmt(r.get('T_s'), '.4g')} | {r['greedy_T_s']:.4g} | {fmt(r.get('vs_greedy'), '.3f')} | "
                         f"{fmt(r.get('T_est_s'), '.4g')} | {fmt(r.get('bound'), '.4g')} | "
                         f"{fmt(r.get('bound_valid'))} | {fmt(r.get('engine'))} |")
        errs = [f"{r['instance']}: {r['error']}" for r in autos if r.get("error")]
        if errs:
            lines += ["", "Failures (last line of stderr): " + "; ".join(errs)]
    else:
        lines += ["", "auto: not run (--skip-auto)."]
    out = save("scale", lines)
    keys = sorted({k for r in rows for k in r})
    with open(RESULTS / "scale.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["part", "instance"] + [k for k in keys if k not in ("part", "instance")])
        w.writeheader()
        w.writerows(rows)
    print("\n".join(lines))
    print(f"written: {out} and {RESULTS / 'scale.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
