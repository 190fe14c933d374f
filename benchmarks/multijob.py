"""Several jobs sharing the datacenters (SPEC v3 section 10, issue 27): the column planner
(``planner.multiplan``) against every baseline, per job mix and objective.

Mixes come from :mod:`planner.problem.mixes` (AcmeTrace Kalos sizes, models by GPU-hours,
ElasticFlow deadlines, Gavel weights), seeded.  Per mix, the reference throughputs tput*_j
are computed once by one fixed method (:func:`planner.solvers.multijob.references`: greedy
on the job alone on the whole cluster, ``--ref-limit`` s per job, seed 0) and stored in the
sidecar ``benchmarks/results/multijob_refs.json`` (keyed by the mix's name, with the hash of
what they depend on: the cluster and each job's workload), so every method compared on a
mix, and every later run, uses the same references.

Every method is scored by ``multievaluate`` (reserved sharing): min rho, weighted rho (sum
w rho), the weight of the jobs meeting their deadline, the cost (USD, admitted jobs), the
wall time to plan.  The goals (issue 27), each printed met or missed:

* **maxmin**: ``--mixes`` (10) seeded ``--jobs`` (20)-job mixes on gcp-16, the planner
  at ``--time-limit`` (60) s: on every mix it plans within the limit, its ``master_lp`` is
  within 1% of its value and its value is never below any baseline's; the median of
  (its min rho / the WAN-blind baseline's min rho) is >= 1.25.
* **deadline**: the same mixes with ``multi_objective = "deadline"``: the weight meeting
  deadlines, summed over the mixes, >= 1.46 x EDF's (earliest deadline first with WAN-blind
  allocations).
* **cost**: ``--cost-jobs`` (8)-job mixes (at most one job per datacenter, so that the static
  split can hold them all) whose deadlines are the static split's completions (rounded up to
  6 significant digits), so the static split meets every deadline: the median saving of the
  planner's cost over the static split's >= 15%, every deadline met.
* **scale**: ``--big-jobs`` (100) jobs on edwc-300dc, maxmin, planned within
  ``--big-limit`` (300) s with a gap (a bound).

The packaged mixes (``instances/mix-*.toml``) are run too, each under its own
``multi_objective`` (a table, no goal); their references go to the same sidecar, under
the mix's name: the stored tput*_j of the packaged mixes.

``--quick`` is a smoke run (small mixes on aws-multiregion, short limits, no scale run); it
writes ``multijob_quick.md`` and its sidecar beside, not the committed results.

    python benchmarks/multijob.py            # full: writes benchmarks/results/multijob.md (+ .png)
    python benchmarks/multijob.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's planner, whatever is installed
sys.path.insert(1, str(Path(__file__).resolve().parent))

from _results import RESULTS, commit  # noqa: E402

GOALS = {"lp_gap": 0.01, "vs_blind": 1.25, "deadline_vs_edf": 1.46, "cost_saving": 0.15}
BASE = "gcp-16"
BIG_BASE = "edwc-300dc"
QUICK_BASE = "aws-multiregion"
QUICK_MODELS = ("gpt3-1.3b", "gpt3-2.7b", "llama2-7b")


@dataclass
class Row:
    """One method's multi-plan on one mix, as multievaluate scores it."""

    mix: str
    objective: str
    method: str
    value: float | None = None
    min_rho: float | None = None
    weighted_rho: float | None = None
    met_weight: float | None = None
    met: int | None = None
    jobs: int = 0
    admitted: int | None = None
    cost: float | None = None
    time_s: float = 0.0
    feasible: bool = False
    master_lp: float | None = None
    bound: float | None = None
    gap: float | None = None
    note: str = ""
    completions: dict = field(default_factory=dict, repr=False)


# -- mixes and references ---------------------------------------------------------------
def resolve(name: str):
    from planner.problem.files import find_model, load_model

    return load_model(find_model(name))


def base_data(name: str) -> dict:
    from planner.problem import io as pio
    from planner.problem.files import read_mapping

    return read_mapping(pio.resolve_instance_path(name))


def load_mix(data: dict):
    from planner.problem.jobs import MultiInstance

    return MultiInstance.from_dict(data, resolve_model=resolve)


def refs_key(data: dict) -> str:
    """SHA-256 of what tput*_j depends on: the cluster and each job's workload (not its
    iterations, weight, deadline or the objective)."""
    keep = {k: v for k, v in data.items() if k not in ("name", "description", "jobs", "options")}
    keep["options"] = {k: v for k, v in (data.get("options") or {}).items() if k != "multi_objective"}
    keep["jobs"] = [{k: v for k, v in j.items() if k not in ("iterations", "weight", "deadline_hours")}
                    for j in data["jobs"]]
    return hashlib.sha256(json.dumps(keep, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cached_references(minst, data: dict, store: dict, limit: float) -> tuple[dict, bool]:
    """(tput*_j by job, computed now?): the stored ones when the key and method match."""
    from planner.solvers.multijob import references

    method = {"solver": "greedy", "time_limit_per_job_s": limit, "seed": 0}
    key = refs_key(data)
    got = store.get(data["name"])
    if got and got.get("key") == key and got.get("method") == method:
        return dict(got["references"]), False
    refs = references(minst, time_limit=limit, seed=0, solver="greedy")
    store[data["name"]] = {"key": key, "method": method, "references": refs}
    return refs, True


# -- scoring ------------------------------------------------------------------------------
def score(minst, mp, mix: str, objective: str, method: str, seconds: float) -> Row:
    from planner.scoring.multievaluate import multievaluate

    ev = multievaluate(minst, mp)
    w = {s.name: s.weight for s in minst.jobs}
    adm = [j for j in ev.jobs if j.admitted]
    return Row(mix, objective, method, value=ev.objective_value, min_rho=min(j.rho for j in ev.jobs),
               weighted_rho=sum(w[j.name] * j.rho for j in ev.jobs),
               met_weight=sum(w[j.name] for j in ev.jobs if j.deadline_met),
               met=sum(j.deadline_met for j in ev.jobs), jobs=len(ev.jobs), admitted=len(adm),
               cost=sum(j.cost for j in adm if j.cost is not None), time_s=seconds, feasible=ev.feasible,
               master_lp=ev.master_lp, bound=ev.bound, gap=ev.gap,
               completions={j.name: j.completion_s for j in ev.jobs})


def run_methods(minst, refs: dict, mix: str, objective: str, limit: float, baselines=None) -> list[Row]:
    """The planner at ``limit`` s, then every baseline, on one mix and objective."""
    from planner.solvers.multijob import multiplan
    from planner.solvers.multijob.baselines import BASELINES

    rows = []
    t0 = time.perf_counter()
    try:
        mp = multiplan(minst, objective=objective, time_limit=limit, seed=0, references=refs)
        rows.append(score(minst, mp, mix, objective, "planner", time.perf_counter() - t0))
    except Exception as err:  # noqa: BLE001 -- a benchmark row, not a crash
        rows.append(Row(mix, objective, "planner", time_s=time.perf_counter() - t0, note=f"{type(err).__name__}: {err}"))
    for name, fn in BASELINES.items():
        if baselines is not None and name not in baselines:
            continue
        t0 = time.perf_counter()
        try:
            bp = fn(minst, refs, objective=objective)
            rows.append(score(minst, bp, mix, objective, name, time.perf_counter() - t0))
        except Exception as err:  # noqa: BLE001
            rows.append(Row(mix, objective, name, time_s=time.perf_counter() - t0,
                            note=f"{type(err).__name__}: {err}"))
    return rows


def with_deadlines(data: dict, completions: dict) -> dict:
    """``data`` with each job's deadline its completion (s) rounded UP to 6 significant
    digits of hours, and the cost objective."""
    jobs = []
    for j in data["jobs"]:
        c = completions[j["name"]] / 3600.0
        e = math.floor(math.log10(c)) - 5
        jobs.append(dict(j, deadline_hours=math.ceil(c / 10 ** e) * 10 ** e))
    return dict(data, jobs=jobs, options=dict(data["options"], multi_objective="cost"))


# -- goals ----------------------------------------------------------------------------------
def _by(rows, method):
    return {r.mix: r for r in rows if r.method == method}


def better_or_equal(objective: str, a: float | None, b: float | None) -> bool:
    """a is no worse than b (None: no multi-plan; maximise maxmin/weighted/deadline)."""
    if b is None:
        return True
    if a is None:
        return False
    tol = 1e-9 * max(1.0, abs(a), abs(b))
    return a >= b - tol if objective in ("maxmin", "weighted", "deadline") else a <= b + tol


def maxmin_goals(rows: list[Row], limit: float) -> list[tuple[str, bool, str]]:
    """(goal, met, figures) of the maxmin section."""
    plan = _by(rows, "planner")
    blind = _by(rows, "wan_blind_maxmin")
    mixes = sorted(plan)
    if not mixes:
        return [("maxmin: planned", False, "no mix")]
    within = [m for m in mixes if plan[m].value is not None and plan[m].time_s <= limit * 1.05]
    lp = [m for m in mixes if plan[m].master_lp is not None and plan[m].value
          and abs(plan[m].master_lp - plan[m].value) <= GOALS["lp_gap"] * abs(plan[m].value)]
    below = [(m, r.method) for r in rows if r.method != "planner" and r.mix in plan
             for m in [r.mix] if r.feasible and not better_or_equal("maxmin", plan[m].value, r.value)]
    ratios = []
    for m in mixes:
        p, b = plan[m].min_rho, blind.get(m).min_rho if m in blind else None
        if p is not None and b is not None:
            ratios.append(p / b if b > 0 else math.inf)
    med = statistics.median(ratios) if ratios else None
    return [
        (f"maxmin: planned within {limit:g} s on every mix", len(within) == len(mixes),
         f"{len(within)} of {len(mixes)}; slowest {max(plan[m].time_s for m in mixes):.1f} s"),
        (f"maxmin: master_lp within {GOALS['lp_gap']:.0%} of the value on every mix", len(lp) == len(mixes),
         f"{len(lp)} of {len(mixes)}"),
        ("maxmin: never below any baseline", not below,
         "never" if not below else "below on " + ", ".join(f"{m} ({b})" for m, b in below)),
        (f"maxmin: median min rho / WAN-blind's >= {GOALS['vs_blind']:g}",
         med is not None and med >= GOALS["vs_blind"],
         "no ratio" if med is None else f"median {med:.3f} over {len(ratios)} mixes"),
    ]


def deadline_goals(rows: list[Row]) -> list[tuple[str, bool, str]]:
    plan, edf = _by(rows, "planner"), _by(rows, "edf")
    mixes = sorted(set(plan) & set(edf))
    p = sum(plan[m].met_weight or 0.0 for m in mixes)
    e = sum(edf[m].met_weight or 0.0 for m in mixes)
    ok = bool(mixes) and p >= GOALS["deadline_vs_edf"] * e and p > 0
    ratio = "inf" if e == 0 and p > 0 else ("-" if e == 0 else f"{p / e:.3f}")
    return [(f"deadline: weight meeting deadlines >= {GOALS['deadline_vs_edf']:g} x EDF's", ok,
             f"planner {p:g}, EDF {e:g} over {len(mixes)} mixes (x {ratio})")]


def cost_goals(rows: list[Row], skipped: list[str]) -> list[tuple[str, bool, str]]:
    plan, static = _by(rows, "planner"), _by(rows, "static_split")
    mixes = sorted(m for m in set(plan) & set(static) if static[m].met == static[m].jobs)
    savings = [1.0 - plan[m].cost / static[m].cost for m in mixes
               if plan[m].cost is not None and static[m].cost and plan[m].met == plan[m].jobs]
    missed = [m for m in mixes if plan[m].met != plan[m].jobs]
    med = statistics.median(savings) if savings else None
    note = f" ({len(skipped)} mixes left out: the static split cannot hold every job)" if skipped else ""
    return [(f"cost: median saving over the static split >= {GOALS['cost_saving']:.0%}, every deadline met",
             med is not None and med >= GOALS["cost_saving"] and not missed,
             ("no cost mix" if med is None else f"median {med:.1%} over {len(savings)} mixes")
             + (f"; deadlines missed on {', '.join(missed)}" if missed else "") + note)]


def scale_goals(rows: list[Row], limit: float) -> list[tuple[str, bool, str]]:
    plan = [r for r in rows if r.method == "planner"]
    if not plan:
        return []
    r = plan[0]
    ok = r.value is not None and r.time_s <= limit * 1.05 and r.gap is not None
    return [(f"scale: {r.jobs} jobs on {BIG_BASE} within {limit:g} s with a gap", ok,
             f"{r.time_s:.0f} s, value {fmt(r.value)}, bound {fmt(r.bound)}, gap {fmt(r.gap)}"
             + (f" ({r.note})" if r.note else ""))]


# -- output ----------------------------------------------------------------------------------
def fmt(x, spec=".4g") -> str:
    return "-" if x is None else format(x, spec)


def table(rows: list[Row]) -> list[str]:
    out = ["| mix | method | value | min rho | sum w rho | deadline weight met | jobs met | cost USD | "
           "time s | master_lp | gap | note |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.mix} | {r.method} | {fmt(r.value)} | {fmt(r.min_rho)} | {fmt(r.weighted_rho)} | "
                   f"{fmt(r.met_weight, 'g')} | {fmt(r.met, 'd')}/{r.jobs} | {fmt(r.cost, ',.0f')} | "
                   f"{r.time_s:.1f} | {fmt(r.master_lp)} | {fmt(r.gap)} | {r.note[:80]} |")
    return out


def picture(rows: list[Row], objective: str, path: Path) -> None:
    """Grouped bars per mix, one bar per method: min rho (maxmin), deadline weight met
    (deadline), cost relative to the static split (cost)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mixes = sorted({r.mix for r in rows})
    methods = list(dict.fromkeys(r.method for r in rows))
    get = {(r.mix, r.method): r for r in rows}

    def val(r):
        if r is None:
            return 0.0
        if objective == "deadline":
            return r.met_weight or 0.0
        if objective == "cost":
            s = get.get((r.mix, "static_split"))
            return (r.cost / s.cost) if (r.cost is not None and s and s.cost) else 0.0
        return r.min_rho or 0.0

    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(mixes) + 3), 3.8))
    width = 0.8 / max(1, len(methods))
    for i, m in enumerate(methods):
        ax.bar([k + i * width for k in range(len(mixes))], [val(get.get((x, m))) for x in mixes], width, label=m)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(mixes))])
    ax.set_xticklabels(mixes, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel({"maxmin": "min rho", "deadline": "weight meeting deadlines",
                   "cost": "cost / static split's"}.get(objective, objective))
    ax.set_title(f"{objective}: planner vs baselines per mix")
    ax.legend(fontsize=7, ncols=4)
    ax.grid(axis="y", linestyle=":")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- main ------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: small mixes, short limits, no scale run")
    ap.add_argument("--mixes", type=int, default=None, help="seeded mixes (default 10; quick 1)")
    ap.add_argument("--jobs", type=int, default=None, help="jobs per mix (default 20; quick 3)")
    ap.add_argument("--cost-jobs", type=int, default=None, help="jobs per cost mix (default 8; quick 2)")
    ap.add_argument("--time-limit", type=float, default=None, help="planner seconds per mix (default 60; quick 5)")
    ap.add_argument("--ref-limit", type=float, default=None, help="reference seconds per job (default 5; quick 1)")
    ap.add_argument("--big-jobs", type=int, default=100)
    ap.add_argument("--big-limit", type=float, default=300.0)
    ap.add_argument("--no-scale", action="store_true", help="skip the edwc-300dc run")
    ap.add_argument("--objectives", default="maxmin,deadline,cost,packaged",
                    help="comma-separated sections to run among maxmin, deadline, cost, packaged (the "
                         "instances/mix-*.toml under their own objective; not with --quick)")
    ap.add_argument("--baselines", default=None,
                    help="comma-separated baselines to run beside the planner (default: every one); the goals need "
                         "wan_blind_maxmin (maxmin), edf (deadline) and static_split (cost)")
    ap.add_argument("--stem", default=None, help="name of the results files (default multijob; quick "
                                                  "multijob_quick): STEM.md, STEM_refs.json, STEM_<part>.png")
    ap.add_argument("--base", default=None, help=f"cluster of the mixes (default {BASE}; quick {QUICK_BASE})")
    ap.add_argument("--results-dir", default=str(RESULTS), help="where the .md, .png and refs go")
    args = ap.parse_args(argv)
    q = args.quick
    n_mix = args.mixes if args.mixes is not None else (1 if q else 10)
    n_jobs = args.jobs if args.jobs is not None else (3 if q else 20)
    n_cost = args.cost_jobs if args.cost_jobs is not None else (2 if q else 8)
    limit = args.time_limit if args.time_limit is not None else (5.0 if q else 60.0)
    ref_limit = args.ref_limit if args.ref_limit is not None else (1.0 if q else 5.0)
    base = args.base or (QUICK_BASE if q else BASE)
    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.stem or ("multijob_quick" if q else "multijob")
    only = None if args.baselines is None else {b.strip() for b in args.baselines.split(",") if b.strip()}
    refs_path = out_dir / f"{stem}_refs.json"
    store = json.loads(refs_path.read_text()) if refs_path.exists() else {}

    from planner.cli import mix_catalogue
    from planner.problem.mixes import DEFAULT_MODELS, generate_mix

    cat = mix_catalogue(QUICK_MODELS if q else DEFAULT_MODELS)
    raw = base_data(base)
    started = time.perf_counter()
    load0 = os.getloadavg()
    sections: dict[str, list[Row]] = {"maxmin": [], "deadline": [], "cost": [], "packaged": [], "scale": []}
    skipped_cost = []
    wanted = {o.strip() for o in args.objectives.split(",") if o.strip()}
    for seed in range(n_mix):
        for objective in [o for o in ("maxmin", "deadline") if o in wanted]:
            data = generate_mix(raw, n_jobs, seed, cat, objective=objective, name=f"{base}-{n_jobs}j-s{seed}")
            minst = load_mix(data)
            refs, new = cached_references(minst, data, store, ref_limit)
            refs_path.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")
            rows = run_methods(minst, refs, data["name"], objective, limit, only)
            sections[objective] += rows
            print(f"{data['name']} {objective}: " + ", ".join(f"{r.method} {fmt(r.value)}" for r in rows), flush=True)
        # cost: deadlines = the static split's completions
        if "cost" not in wanted:
            continue
        data = generate_mix(raw, n_cost, seed, cat, objective="cost", name=f"{base}-{n_cost}j-s{seed}")
        minst = load_mix(data)
        refs, _ = cached_references(minst, data, store, ref_limit)
        refs_path.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")
        from planner.solvers.multijob.baselines import static_split

        st = score(minst, static_split(minst, refs, objective="maxmin"), data["name"], "cost", "static_split", 0.0)
        if st.admitted != st.jobs or any(c is None or not math.isfinite(c) for c in st.completions.values()):
            skipped_cost.append(data["name"])
            print(f"{data['name']} cost: left out (static split admits {st.admitted} of {st.jobs})", flush=True)
            continue
        cdata = with_deadlines(data, st.completions)
        cminst = load_mix(cdata)
        rows = run_methods(cminst, refs, cdata["name"], "cost", limit, only)
        sections["cost"] += rows
        print(f"{cdata['name']} cost: " + ", ".join(f"{r.method} {fmt(r.cost, ',.0f')}" for r in rows), flush=True)
    if not q and "packaged" in wanted:
        # the packaged mixes (instances/mix-*.toml), each under its own multi_objective
        from planner.problem.files import available

        for name in [n for n in available("multi-instances") if n.startswith("mix-")]:
            data = base_data(name)
            minst = load_mix(data)
            refs, _ = cached_references(minst, data, store, ref_limit)
            refs_path.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")
            objective = minst.options.multi_objective
            rows = run_methods(minst, refs, name, objective, limit, only)
            sections["packaged"] += rows
            print(f"{name} {objective}: " + ", ".join(f"{r.method} {fmt(r.value)}" for r in rows), flush=True)
    if not q and not args.no_scale:
        from planner.solvers.multijob import multiplan

        big = base_data(BIG_BASE)
        data = generate_mix(big, args.big_jobs, 0, cat, objective="maxmin", name=f"{BIG_BASE}-{args.big_jobs}j-s0")
        minst = load_mix(data)
        refs, _ = cached_references(minst, data, store, ref_limit)
        refs_path.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")
        t0 = time.perf_counter()
        try:
            mp = multiplan(minst, objective="maxmin", time_limit=args.big_limit, seed=0, references=refs)
            sections["scale"].append(score(minst, mp, data["name"], "maxmin", "planner", time.perf_counter() - t0))
        except Exception as err:  # noqa: BLE001
            sections["scale"].append(Row(data["name"], "maxmin", "planner", jobs=args.big_jobs,
                                         time_s=time.perf_counter() - t0, note=f"{type(err).__name__}: {err}"))
    goals = (maxmin_goals(sections["maxmin"], limit) if "maxmin" in wanted else []) + \
        (deadline_goals(sections["deadline"]) if "deadline" in wanted else []) + \
        (cost_goals(sections["cost"], skipped_cost) if "cost" in wanted else []) + \
        scale_goals(sections["scale"], args.big_limit)
    for name, ok, figs in goals:
        print(f"{'met' if ok else 'MISSED'}: {name} -- {figs}")

    command = "python benchmarks/multijob.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"Command: `{command.rstrip()}`", "", f"Commit: {commit()}", "",
             f"Mixes: {n_mix} seeded on {base} ({n_jobs} jobs; cost mixes {n_cost} jobs), "
             f"planner (`planner.multiplan`, greedy columns) at {limit:g} s; references: greedy alone on the "
             f"whole cluster, {ref_limit:g} s per job, stored in `{refs_path.name}`; baselines: "
             f"{'every one' if only is None else ', '.join(sorted(only))}. Machine: shared, 2 cores. "
             f"Wall time {time.perf_counter() - started:.0f} s; load average (1, 5, 15 min) "
             f"{' '.join(f'{x:.2f}' for x in load0)} at the start, "
             f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end." + (" QUICK smoke run: goals not judged on "
                                                                    "the goal's mixes." if q else ""), "",
             "## Goals", ""] + [f"- {'met' if ok else '**missed**'}: {name} -- {figs}" for name, ok, figs in goals]
    for objective in ("maxmin", "deadline", "cost", "packaged", "scale"):
        rows = sections[objective]
        if not rows:
            continue
        lines += ["", f"## {objective}", ""] + table(rows)
        if objective not in ("scale", "packaged"):
            png = out_dir / f"{stem}_{objective}.png"
            picture(rows, objective, png)
            lines += ["", f"![{objective}]({png.name})"]
    if skipped_cost:
        lines += ["", "Cost mixes left out (the static split cannot hold every job): " + ", ".join(skipped_cost)]
    out = out_dir / f"{stem}.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
