"""The fidelity benchmark's measured data (benchmarks/fidelity/, issue 24):
the files parse, every number names a source with repository, path and
commit, runs select their rows, and each ratio's published value recomputes
from the raw numbers."""

import csv
import math
import re
import tomllib

import pytest

from benchmarks.fidelity import data as fd

D = fd.load()
HEX40 = re.compile(r"[0-9a-f]{40}")


def test_every_csv_file_is_loaded():
    on_disk = {p.name for p in fd.DIR.glob("*.csv")}
    assert on_disk == set(fd.TABLES)


def test_sources_are_complete():
    assert D.sources
    for sid, src in D.sources.items():
        for field in fd.SOURCE_FIELDS:
            assert src.get(field), (sid, field)
        if src["repo"] != "planner (this project)":
            assert "/" in src["repo"], sid
            assert HEX40.fullmatch(src["commit"]), (sid, src["commit"])
        if "blob" in src:
            assert HEX40.fullmatch(src["blob"]), sid


@pytest.mark.parametrize("name", sorted(fd.TABLES))
def test_rows_have_values_and_sources(name):
    rows = D.tables[name]
    assert rows, name
    with open(fd.DIR / name, newline="") as f:
        header = next(csv.reader(f))
    assert len(header) == len(set(header)), name
    for col in fd.TABLES[name] + ("source", "table"):
        assert col in header, (name, col)
    for i, row in enumerate(rows):
        assert None not in row and all(v is not None for v in row.values()), (name, i)
        for col in fd.TABLES[name]:
            assert row[col] != "", (name, i, col)
        assert row["source"] in D.sources, (name, i, row["source"])
        assert row["table"], (name, i)
        for col in fd.MEASURED[name]:
            v = float(row[col])
            assert math.isfinite(v) and v > 0, (name, i, col)


def test_row_ids_are_unique():
    for name in ("dtfm_gpt3_xl_runs.csv", "dtfm_megatron_runs.csv", "dtfm_fluidstack3_times.csv"):
        ids = [r["run_id"] for r in D.tables[name]]
        assert len(ids) == len(set(ids)), name
    files = [r["file"] for r in D.tables["sailor_clariden.csv"]]
    assert len(files) == len(set(files))


def test_tc_settings_match_their_labels():
    for name in ("dtfm_p2p.csv", "tc_simulate_dp.csv", "dtfm_gpt3_xl_runs.csv"):
        for row in D.tables[name]:
            label = ("d" + row["delay_ms"] if row["delay_ms"] else "") + \
                    ("b" + row["bandwidth_gbps"] if row["bandwidth_gbps"] else "")
            assert row["network"] == (label or "default"), (name, row)


def test_gpt3_xl_shapes_are_consistent():
    for r in D.tables["dtfm_gpt3_xl_runs.csv"]:
        stages, dp = int(r["stages"]), int(r["dp"])
        assert int(r["num_layers"]) == stages * int(r["layers_per_stage"])
        assert int(r["nodes"]) == stages * dp
        assert int(r["global_batch"]) == int(r["batch_per_step"]) * int(r["ga_steps"]) * dp
        assert (dp == 1) == (r["dp_mode"] == "none")


def test_sailor_shapes_are_consistent():
    for r in D.tables["sailor_clariden.csv"]:
        assert int(r["pp"]) * int(r["dp"]) == int(r["nodes"]), r["file"]
        assert int(r["tp"]) == int(r["gpus_per_node"]), r["file"]
        assert (int(r["micro_batches_per_replica"]) * int(r["micro_batch"]) * int(r["dp"])
                == int(r["global_batch"])), r["file"]
        units = sum(int(x) for x in r["units_per_stage"].split(";"))
        assert units == {"OPT-350": 26, "GPT-NEO": 34}[r["model"]] or "suspect" in r["note"]


def test_runs_select_rows_and_name_a_system():
    assert D.runs
    for name, run in D.runs.items():
        assert run["system"] in D.systems, name
        assert run["file"] in fd.TABLES, name
        assert run["value"] in fd.MEASURED[run["file"]], name
        rows = fd.rows_of(run)
        assert rows, name
        if run.get("agg", "one") == "one":
            assert len(rows) == 1, name
        for row in rows:
            assert "suspect" not in row.get("note", ""), name
        assert fd.run_value(name) > 0


def test_ratios_recompute_from_raw_numbers():
    names = [r["name"] for r in D.ratios]
    assert len(names) == len(set(names))
    kinds = {r["kind"] for r in D.ratios}
    assert {"network", "plan", "batch", "depth"} <= kinds
    for r in D.ratios:
        assert r["numerator"] in D.runs and r["denominator"] in D.runs, r["name"]
        assert r["numerator"] != r["denominator"], r["name"]
        got = fd.ratio_value(r)
        # published to 4 significant digits
        assert math.isclose(got, r["measured"], rel_tol=6e-4), (r["name"], got, r["measured"])


def test_calibration_names_runs():
    assert D.calibration
    for c in D.calibration:
        assert c["run"] in D.runs, c
        if "also" in c:
            assert c["also"] in D.runs, c
        assert c["fixes"] and c["why"], c


def test_runs_toml_is_plain_toml():
    with open(fd.DIR / "runs.toml", "rb") as f:
        tomllib.load(f)
