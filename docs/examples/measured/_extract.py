#!/usr/bin/env python3
"""Write the example measurement CSVs of this folder from the shared data.

Five AWS regions out of Skyplane's 2022 grids (../../../../shared/data):
``aws-rtt.csv`` keeps the square form of matrix_aws_rtt_ms_skyplane2022.csv
(blank diagonal), ``aws-tput.csv`` rewrites matrix_aws_tput_gbps_skyplane2022.csv
in the long form ``src,dst,value`` (one measured ordered pair a row), so the
example exercises both forms ``planner import-network`` reads.  Values are
copied unchanged; each file's first lines name the source and its attribution.

    python docs/examples/measured/_extract.py        # rewrite the CSVs
    planner import-network --latency docs/examples/measured/aws-rtt.csv \\
        --throughput docs/examples/measured/aws-tput.csv \\
        --sites docs/examples/measured/aws-sites.toml --out docs/examples/measured/aws-5.toml
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1"]


def data_dir() -> Path:
    env = os.environ.get("PLANNER_SHARED_DATA")
    return Path(env) if env else HERE.parents[3] / "shared" / "data"


def read(name: str) -> tuple[str, dict[tuple[str, str], str]]:
    lines = (data_dir() / name).read_text(encoding="utf-8").splitlines()
    rows = list(csv.reader(ln for ln in lines[1:] if ln))
    cols = rows[0][1:]
    cells = {(r[0], c): v.strip() for r in rows[1:] for c, v in zip(cols, r[1:])}
    return lines[0].lstrip("#").strip(), cells


def main() -> None:
    keys = [f"aws:{r}" for r in REGIONS]
    src, rtt = read("matrix_aws_rtt_ms_skyplane2022.csv")
    out = io.StringIO()
    out.write(f"# {src}\n")
    out.write("# from shared/data/matrix_aws_rtt_ms_skyplane2022.csv (Skyplane project, skyplane-project/skyplane; "
              "region prefix aws: dropped), 5 regions, values unchanged; ping RTT in ms, rows = source, columns = destination\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["src\\dst"] + REGIONS)
    for a, ka in zip(REGIONS, keys):
        w.writerow([a] + ["" if ka == kb else rtt[(ka, kb)] for kb in keys])
    (HERE / "aws-rtt.csv").write_text(out.getvalue(), encoding="utf-8")

    src, tput = read("matrix_aws_tput_gbps_skyplane2022.csv")
    out = io.StringIO()
    out.write(f"# {src}\n")
    out.write("# from shared/data/matrix_aws_tput_gbps_skyplane2022.csv (Skyplane project, skyplane-project/skyplane; "
              "region prefix aws: dropped), 5 regions, values unchanged, as src,dst,value rows; Gbit/s received\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["src", "dst", "gbps"])
    for a, ka in zip(REGIONS, keys):
        for b, kb in zip(REGIONS, keys):
            if a != b:
                w.writerow([a, b, tput[(ka, kb)]])
    (HERE / "aws-tput.csv").write_text(out.getvalue(), encoding="utf-8")


if __name__ == "__main__":
    main()
