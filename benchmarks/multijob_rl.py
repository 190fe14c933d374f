"""The PPO allocator for several jobs (issue 27 item 5) beside the column master and the
greedy baseline, on held-out mixes.

Mixes: ``planner generate-mix`` on gcp-16 and aws-multiregion with 4, 6 and 8 jobs, seeds
``--seeds`` (default 0: one mix per size and cluster, 6 in all), named ``BASE-Jj-sSEED``;
the shipped policy was trained on seeds 1000 and 1001 (``models/rl/multijob.zip.json``), so
none of these mixes was seen in training.  Per mix the references tput*_j are computed once
(greedy on the job alone, ``--ref-limit`` s per job, seed 0) and passed to every method.

Methods, each scored by ``multievaluate`` (reserved sharing) under the mix's objective
(maxmin):

* ``master``: ``planner.multiplan`` (column generation) at ``--limit`` s;
* ``rl``: ``planner.multiplan(..., allocator="rl")``, the shipped policy: its most likely
  episode planning every menu slice it meets (a dynamic menu: slices of what the earlier
  jobs left, less the later jobs' fallbacks; 1 s per single-job plan at most), then 16
  sampled episodes on the columns planned so far, ``--rl-limit`` s (it reports the time
  it took, most of it single-job plans);
* ``greedy``: ``greedy_by_weight`` (jobs by weight, each planned on what is left).

Columns: min rho, the maxmin value (min rho / w), weighted rho (sum w rho / sum w), the
weight share and count of jobs meeting their deadline, feasible (SPEC 10: under maxmin
every job must be admitted), seconds to plan (references excluded: shared by all).

    python benchmarks/multijob_rl.py                 # writes benchmarks/results/multijob_rl.md
    python benchmarks/multijob_rl.py --quick         # one small mix, short limits, not written
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's planner, whatever is installed
sys.path.insert(1, str(Path(__file__).resolve().parent))

from _results import commit, save  # noqa: E402

BASES = ("gcp-16", "aws-multiregion")
SIZES = (4, 6, 8)
METHODS = ("master", "rl", "greedy")


def mixes(seeds, bases=BASES, sizes=SIZES):
    from planner.cli import mix_catalogue
    from planner.problem import io as pio
    from planner.problem.files import find_model, load_model, read_mapping
    from planner.problem.jobs import MultiInstance
    from planner.problem.mixes import DEFAULT_MODELS, generate_mix

    cat = mix_catalogue(DEFAULT_MODELS)
    for base in bases:
        raw = read_mapping(pio.resolve_instance_path(base))
        for n in sizes:
            for s in seeds:
                data = generate_mix(raw, n, s, cat, name=f"{base}-{n}j-s{s}")
                yield MultiInstance.from_dict(data, resolve_model=lambda m: load_model(find_model(m)))


def row(minst, mp, method, seconds):
    from planner.scoring.multievaluate import multievaluate

    ev = multievaluate(minst, mp)
    w = {s.name: s.weight for s in minst.jobs}
    W = sum(w.values())
    return {"mix": minst.name, "method": method, "jobs": len(minst.jobs),
            "min_rho": min(f.rho for f in ev.jobs),
            "maxmin": ev.objective_value if ev.objective == "maxmin" else min(f.rho / w[f.name] for f in ev.jobs),
            "weighted_rho": sum(w[f.name] * f.rho for f in ev.jobs) / W,
            "met_weight": sum(w[f.name] for f in ev.jobs if f.deadline_met) / W,
            "met": sum(f.deadline_met for f in ev.jobs), "admitted": sum(f.admitted for f in ev.jobs),
            "feasible": ev.feasible, "time_s": seconds}


def run(minst, limit, ref_limit, samples, rl_limit):
    import planner
    from planner.solvers.multijob import references
    from planner.solvers.multijob.baselines import greedy_by_weight

    refs = references(minst, time_limit=ref_limit, seed=0)
    out = []
    t = time.perf_counter()
    mp = planner.multiplan(minst, references=refs, time_limit=limit, seed=0)
    out.append(row(minst, mp, "master", time.perf_counter() - t))
    t = time.perf_counter()
    mp = planner.multiplan(minst, references=refs, allocator="rl", samples=samples, seed=0,
                          time_limit=rl_limit)
    r = row(minst, mp, "rl", time.perf_counter() - t)
    r["menu_s"] = mp.solver.model_extra.get("rl_menu_s")
    r["plans"] = mp.solver.model_extra.get("plans_made")
    out.append(r)
    t = time.perf_counter()
    mp = greedy_by_weight(minst, refs)
    out.append(row(minst, mp, "greedy", time.perf_counter() - t))
    return out


def table(rows):
    lines = ["| mix | method | min rho | maxmin (min rho/w) | weighted rho | deadline weight met | met / jobs | "
             "feasible | time (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mix']} | {r['method']} | {r['min_rho']:.4f} | {r['maxmin']:.4f} | "
                     f"{r['weighted_rho']:.4f} | {r['met_weight']:.3f} | {r['met']} / {r['jobs']} | "
                     f"{'yes' if r['feasible'] else 'no'} | {r['time_s']:.1f} |")
    return lines


def summary(rows):
    lines = ["| method | mean min rho | mean weighted rho | mean deadline weight met | feasible | "
             "median time (s) | min rho >= greedy's | min rho >= master's |",
             "|---|---|---|---|---|---|---|---|"]
    by = {m: [r for r in rows if r["method"] == m] for m in METHODS}
    n = len(by["master"])
    for m in METHODS:
        rs = by[m]
        ge_g = sum(a["min_rho"] >= b["min_rho"] - 1e-12 for a, b in zip(rs, by["greedy"]))
        ge_m = sum(a["min_rho"] >= b["min_rho"] - 1e-12 for a, b in zip(rs, by["master"]))
        lines.append(f"| {m} | {statistics.mean(r['min_rho'] for r in rs):.4f} | "
                     f"{statistics.mean(r['weighted_rho'] for r in rs):.4f} | "
                     f"{statistics.mean(r['met_weight'] for r in rs):.3f} | {sum(r['feasible'] for r in rs)} / {n} | "
                     f"{statistics.median(r['time_s'] for r in rs):.1f} | {ge_g} / {n} | {ge_m} / {n} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0", help="comma-separated mix seeds (default 0; training used 1000, 1001)")
    ap.add_argument("--limit", type=float, default=60.0, help="the master's time limit (s)")
    ap.add_argument("--ref-limit", type=float, default=2.0, help="greedy's seconds per job for the references")
    ap.add_argument("--rl-limit", type=float, default=300.0,
                    help="the allocator's time limit (s; its menus' plans stop there)")
    ap.add_argument("--samples", type=int, default=16, help="the allocator's sampled episodes")
    ap.add_argument("--quick", action="store_true", help="one 4-job mix on aws-multiregion, 10 s, not written")
    args = ap.parse_args(argv)
    import json

    from planner.solvers.multijob.rl import shipped_policy

    seeds = [int(s) for s in args.seeds.split(",")]
    bases, sizes, limit = (("aws-multiregion",), (4,), 10.0) if args.quick else (BASES, SIZES, args.limit)
    rows = []
    for minst in mixes(seeds, bases, sizes):
        got = run(minst, limit, args.ref_limit, args.samples, args.rl_limit)
        for r in got:
            print(f"{r['mix']:28s} {r['method']:7s} min rho {r['min_rho']:.4f} weighted {r['weighted_rho']:.4f} "
                  f"met {r['met_weight']:.3f} feasible {r['feasible']} {r['time_s']:.1f} s", flush=True)
        rows += got
    meta = json.loads(Path(str(shipped_policy()) + ".json").read_text())
    lines = [f"Commit: {commit()}", "",
             f"Held-out mixes (planner generate-mix, seeds {args.seeds}; the policy was trained on "
             f"{', '.join(meta['mixes'])}), maxmin, reserved sharing, scored by multievaluate. "
             f"master: planner.multiplan at {limit:g} s; rl: planner.multiplan(allocator=\"rl\") with "
             f"models/rl/multijob.zip ({meta['steps']} steps, trained at {meta['commit']}), one live episode and "
             f"{args.samples} sampled ones; greedy: greedy_by_weight. References: greedy, "
             f"{args.ref_limit:g} s per job, shared by the three. Weighted rho is sum w rho / sum w; "
             "deadline weight met is the weight share of jobs meeting their deadline.", "",
             "## Summary", ""] + summary(rows) + ["", "## Per mix", ""] + table(rows)
    rl_rows = [r for r in rows if r["method"] == "rl"]
    lines += ["", "rl time split: single-job plans of the menu slices and fallbacks "
              + ", ".join(f"{r['mix']} {r['menu_s']:.1f} s ({r['plans']} plans)" for r in rl_rows) + "."]
    if not args.quick:
        print(save("multijob_rl", lines, argv))
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
