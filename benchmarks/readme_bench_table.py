"""Regenerate the README's `planner bench` tables from benchmarks/results/bench/{static,dynamic}.csv.

    .venv/bin/python benchmarks/readme_bench_table.py [--check]

The tables sit in README.md between the markers ``<!-- bench:start -->`` and
``<!-- bench:end -->``; nothing else of the README is touched.  The dynamic
table gives every policy's extra wall time over the hindsight oracle on the
same trace and iterations (``over_oracle``), its switches, and the median
over the instances; the static table the simulated iteration time of every
method.  With ``--check`` it only says (exit 1) whether the README is out of
date.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import update_readme  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
POLICIES = ("static", "greedy", "resolve (milp)", "rl", "hysteresis", "mpc", "controller")
METHODS = ("greedy", "milp", "cpsat", "rl", "megatron", "random")


def _num(v: str):
    return None if v in ("", "None") else float(v)


def _header(md: Path) -> tuple[str, str]:
    """(command, code) from a bench Markdown table's head."""
    lines = md.read_text().splitlines()
    cmd = next((line for line in lines if line.startswith("Command: ")), "Command: `?`")
    code = next((line for line in lines if line.startswith("Code: ")), "")
    return cmd[len("Command: "):], code[len("Code: "):].replace(" (git describe)", "")


def _load(csv_path: Path, md_path: Path, column: str, order):
    """(rows, instance names, the entries of ``order`` present in ``column``, rows by
    (instance, entry), command, code, the results file's path relative to the repository)."""
    rows = list(csv.DictReader(csv_path.open()))
    names = sorted({r["instance"] for r in rows})
    present = [p for p in order if any(r[column] == p for r in rows)]
    by = {(r["instance"], r[column]): r for r in rows}
    cmd, code = _header(md_path)
    return rows, names, present, by, cmd, code, md_path.relative_to(ROOT)


def dynamic_table(csv_path: Path, md_path: Path) -> str:
    rows, names, pols, by, cmd, code, rel = _load(csv_path, md_path, "policy", POLICIES)
    hours = {r["instance"]: _num(r["total_s"]) / 3600 for r in rows if r["policy"] == "oracle"}
    out = [f"**Dynamic**: one job per instance through a generated 24-hour WAN trace (seed "
           f"{rows[0]['trace_seed']}, which no method trained or was tuned on), as many iterations as greedy's "
           f"base plan runs in the trace's length; each cell is the policy's extra wall time over the hindsight "
           f"oracle (best plan seen for every iteration, free switches; lower is better) and its switches. "
           f"From [{rel}]({rel}) (command: {cmd}; code {code}).", "",
           "| instance (oracle h) | " + " | ".join(pols) + " |", "|---|" + "---|" * len(pols)]
    cols: dict[str, list] = {p: [] for p in pols}
    for n in names:
        cells = []
        for p in pols:
            r = by.get((n, p))
            v = _num(r["over_oracle"]) if r else None
            if v is None:
                cells.append("-" if r is None else "incomplete")
                continue
            cols[p].append(v)
            cells.append(f"{100 * v:+.1f}% ({int(r['switches'])})")
        out.append(f"| {n} ({hours.get(n, 0):.1f}) | " + " | ".join(cells) + " |")
    out.append("| **median** | " + " | ".join(f"**{100 * statistics.median(cols[p]):+.1f}%**" if cols[p] else "-"
                                            for p in pols) + " |")
    out.append("| worst | " + " | ".join(f"{100 * max(cols[p]):+.1f}%" if cols[p] else "-" for p in pols) + " |")
    lat = []
    for p in pols:
        ds = [_num(r["decision_s"]) for r in rows if r["policy"] == p and _num(r["decision_s"]) is not None]
        cs = [_num(r["choice_ms"]) for r in rows if r["policy"] == p and _num(r.get("choice_ms", "")) is not None]
        lat.append((f"{statistics.median(ds):.3g} s" if ds else "-") + (f" / {max(cs):.2g} ms" if cs else ""))
    out.append("| re-plan s (median) / choice ms (max) | " + " | ".join(lat) + " |")
    if "controller" in pols and cols["controller"]:
        out += ["", goals(rows, by, names)]
    return "\n".join(out)


def goals(rows, by, names) -> str:
    """Issue 14's dynamic goals, measured on these rows: the controller's median over the
    oracle (goal <= 2%), its worst excess over static (goal <= 1%), its median against
    greedy re-planning's, and its slowest keep-or-switch choice (goal <= 10 ms)."""
    def over(n, p):
        r = by.get((n, p))
        return _num(r["over_oracle"]) if r else None

    ctl = [over(n, "controller") for n in names if over(n, "controller") is not None]
    med = statistics.median(ctl)
    worse = [(((1 + over(n, "controller")) / (1 + over(n, "static")) - 1), n) for n in names
             if over(n, "controller") is not None and over(n, "static") is not None]
    w, wn = max(worse) if worse else (None, "")
    gr = [over(n, "greedy") for n in names if over(n, "greedy") is not None]
    cs = [_num(r["choice_ms"]) for r in rows if r["policy"] == "controller" and _num(r.get("choice_ms", "")) is not None]
    verdict = lambda ok: "met" if ok else "missed"
    parts = [f"controller median {100 * med:.2f}% over the oracle (goal <= 2%: {verdict(med <= 0.02)})"]
    if w is not None:
        parts.append(f"at worst {100 * w:+.2f}% against static ({wn}; goal <= +1%: {verdict(w <= 0.01)})")
    if gr:
        gm = statistics.median(gr)
        parts.append(f"median {100 * med:.2f}% vs greedy re-planning's {100 * gm:.2f}% "
                     f"(goal: at least as good: {verdict(med <= gm)})")
    if cs:
        parts.append(f"slowest choice {max(cs):.2g} ms (goal <= 10 ms: {verdict(max(cs) <= 10)})")
    return "Goals of issue 14 on this run: " + "; ".join(parts) + "."


def static_table(csv_path: Path, md_path: Path) -> str:
    rows, names, meths, by, cmd, code, rel = _load(csv_path, md_path, "method", METHODS)
    cost_instances = {r["instance"] for r in rows if r.get("objective") == "cost"}  # shown by cost per iteration
    out = [f"**Static**: simulated iteration time (s) on the base network, or cost per iteration (USD) on a cost "
           f"instance, and its ratio to the instance's lower bound on it. From [{rel}]({rel}) (command: {cmd}; code {code}).", "",
           "| instance | " + " | ".join(meths) + " |", "|---|" + "---|" * len(meths)]
    for n in names:
        cells = []
        for m in meths:
            r = by.get((n, m))
            figure = "cost_per_iteration" if n in cost_instances else "iteration_s"
            t, x = (_num(r[figure]), _num(r["x_bound"])) if r else (None, None)
            cells.append(f"{t:.4g} ({x:.2f}x)" if t is not None else (r["status"] if r else "-"))
        out.append(f"| {n}{' (cost)' if n in cost_instances else ''} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def tables(res: Path) -> str:
    parts = []
    if (res / "dynamic.csv").is_file():
        parts.append(dynamic_table(res / "dynamic.csv", res / "dynamic.md"))
    if (res / "static.csv").is_file():
        parts.append(static_table(res / "static.csv", res / "static.md"))
    return "\n\n".join(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "bench"))
    args = ap.parse_args(argv)
    return update_readme(START, END, tables(Path(args.results).resolve()), args.check,
                         "bench tables are", "readme_bench_table.py")

if __name__ == "__main__":
    sys.exit(main())
