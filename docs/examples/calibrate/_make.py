#!/usr/bin/env python3
"""Write a SYNTHETIC calibration example: four plans on the packaged tiny-3dc
instance, their "measured" iteration times and a few "measured" transfers, all
made from known figures (TRUTH below) with the project's evaluator (SPEC v3) and
the point-to-point closed form (latency + bytes / bandwidth; transfers of one
group share the uplink out of their domain equally).  No figure is measured: the
example shows ``planner calibrate`` finding TRUTH again from the instance's own
figures, and what it leaves alone (alpha-gamma's latency: one transfer size).
Then it runs the command and writes ``result.md`` (command, code version, output).

    python docs/examples/calibrate/_make.py
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from planner.problem.files import code_version  # noqa: E402
from planner.problem.io import load_instance, save_plan  # noqa: E402
from planner.problem.plan import Plan, Stage  # noqa: E402
from planner.scoring.calibrate import _with_figures  # noqa: E402
from planner.scoring.evaluator import Evaluator  # noqa: E402

TRUTH = {"gpu.mfu": 0.42, "gpu.unit_overhead_ms": 0.3,
         "links[0].bandwidth_gbps": 7.0, "links[0].latency_ms": 2.5,   # alpha-beta
         "links[1].bandwidth_gbps": 4.0, "links[1].latency_ms": 3.3,   # beta-gamma
         "links[2].bandwidth_gbps": 1.5, "links[2].latency_ms": 6.0,   # alpha-gamma
         "domains[0].uplink_gbps": 9.0}                                 # alpha
GBPS = 1e9 / 8


def main() -> None:
    code = code_version()  # before this script rewrites its tracked outputs (which would read as -dirty)
    # the packaged tiny-3dc with its former alpha-gamma link (1 Gbit/s, 8 ms) back: since SPEC v3
    # the packaged one relays alpha-gamma through beta, and three links make a better example
    from planner.problem.io import write_instance

    base = load_instance("tiny-3dc", spec=3)
    data = base.to_dict()
    data["workload"]["model"] = "tiny"
    data["name"] = "tiny-3dc-triangle"
    data["links"] = data["links"][:2] + [{"a": "alpha", "b": "gamma", "bandwidth_gbps": 1.0, "latency_ms": 8.0}]
    inst = write_instance(data, ["SYNTHETIC: the packaged tiny-3dc with an alpha-gamma link (1 Gbit/s, 8 ms);",
                                 "written by docs/examples/calibrate/_make.py"], HERE / "tiny-3dc-triangle.toml")
    truth = _with_figures(inst, TRUTH)
    gbs = inst.workload.global_batch_size

    def plan(R, t, b, stages, placement, schedule="1f1b"):
        return Plan(instance="tiny-3dc-triangle", replicas=R, tp=t, micro_batch_size=b, num_micro_batches=gbs // (R * b),
                    stages=[Stage(start=s, end=e) for s, e in stages], placement=placement, schedule=schedule)

    plans = [plan(1, 4, 1, [(0, 10)], [["alpha"]]),
             plan(1, 2, 2, [(0, 5), (5, 10)], [["alpha", "beta"]]),
             plan(2, 2, 4, [(0, 4), (4, 10)], [["alpha", "gamma"], ["beta", "gamma"]], "gpipe"),
             plan(1, 4, 4, [(0, 3), (3, 6), (6, 10)], [["alpha", "beta", "gamma"]])]
    runs = ["# SYNTHETIC: iteration times simulated at the figures of _make.py's TRUTH (SPEC v3)", "plan,seconds"]
    for i, p in enumerate(plans):
        save_plan(p, HERE / f"plan{i}.json")
        runs.append(f"plan{i}.json,{float(Evaluator(truth, p, spec=3).iteration_times()[0]):.12g}")
    (HERE / "runs.csv").write_text("\n".join(runs) + "\n")

    up = TRUTH["domains[0].uplink_gbps"]
    link = {("alpha", "beta"): (7.0, 2.5), ("beta", "gamma"): (4.0, 3.3), ("alpha", "gamma"): (1.5, 6.0)}

    def seconds(a, b, size, n=1):
        bw, lat = link.get((a, b)) or link[(b, a)]
        if "alpha" in (a, b):
            bw = min(bw, up / n)
        return lat / 1e3 + size / (bw * GBPS)

    rows = ["# SYNTHETIC: latency + bytes / bandwidth at _make.py's TRUTH; one group ran together",
            "a,b,bytes,seconds,group"]
    for size in (1e6, 1e8):
        for a, b in (("alpha", "beta"), ("beta", "alpha"), ("beta", "gamma")):
            rows.append(f"{a},{b},{size:.0f},{seconds(a, b, size):.12g},")
    for b in ("beta", "gamma"):
        rows.append(f"alpha,{b},100000000,{seconds('alpha', b, 1e8, n=2):.12g},together")
    (HERE / "transfers.csv").write_text("\n".join(rows) + "\n")

    cmd = ["planner", "calibrate", "docs/examples/calibrate/tiny-3dc-triangle.toml", "docs/examples/calibrate/runs.csv",
           "--transfers", "docs/examples/calibrate/transfers.csv", "--out", "docs/examples/calibrate/fitted.toml"]
    env = {"COLUMNS": "160", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "planner.cli", *cmd[1:]], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout
    (HERE / "result.md").write_text(
        f"# planner calibrate on the synthetic example\n\ncommand (from the repository root): `{' '.join(cmd)}`\n"
        f"code: `{code}`; inputs written by `python docs/examples/calibrate/_make.py`\n\n"
        f"```\n{out}```\n")


if __name__ == "__main__":
    main()
