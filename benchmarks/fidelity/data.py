"""Read the fidelity benchmark's measured data (issue 24).

Standard library only (csv, tomllib). The files in this directory are:

- ``sources.toml``: one entry per source file (repository, path, commit);
- ``*.csv``: measured numbers, one per row, each row naming its source id
  (``source``) and the table or section inside it (``table``);
- ``runs.toml``: the systems, the runs (a row, or the mean of rows, of a
  CSV), the ratios to predict and the calibration runs.

``load()`` returns everything; ``run_value(name)`` and ``ratio_value(name)``
recompute a run's measured figure and a ratio from the raw rows.
"""

from __future__ import annotations

import csv
import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DIR = Path(__file__).resolve().parent

# The CSV files and, for each, the columns every row must fill.
TABLES: dict[str, tuple[str, ...]] = {
    "dtfm_p2p.csv": ("backend", "size_mb", "network", "time_ms"),
    "tc_simulate_dp.csv": ("algorithm", "size_mb", "nodes", "network", "time_s"),
    "dtfm_gpt3_xl_runs.csv": ("run_id", "num_layers", "stages", "dp", "dp_mode",
                              "batch_per_step", "ga_steps", "micro_batch", "network", "time_s"),
    "dtfm_megatron_runs.csv": ("run_id", "num_layers", "pp", "tp", "dp", "micro_batch",
                               "global_batch", "hardware", "network", "time_s"),
    "dtfm_memory.csv": ("item", "stage", "value", "unit"),
    "dtfm_fluidstack3_network.csv": ("quantity", "from_region", "to_region", "value"),
    "dtfm_fluidstack3_times.csv": ("run_id", "num_layers", "global_batch", "seed", "time_s"),
    "sailor_clariden.csv": ("file", "model", "nodes", "dp", "pp", "tp", "micro_batch",
                            "global_batch", "real_s", "red_grads_s", "max_mem_bytes"),
}
# The measured-number columns of each table (parsed as floats).
MEASURED: dict[str, tuple[str, ...]] = {
    "dtfm_p2p.csv": ("time_ms",),
    "tc_simulate_dp.csv": ("time_s",),
    "dtfm_gpt3_xl_runs.csv": ("time_s",),
    "dtfm_megatron_runs.csv": ("time_s",),
    "dtfm_memory.csv": ("value",),
    "dtfm_fluidstack3_network.csv": ("value",),
    "dtfm_fluidstack3_times.csv": ("time_s",),
    "sailor_clariden.csv": ("real_s", "red_grads_s", "max_mem_bytes"),
}
SOURCE_FIELDS = ("repo", "path", "commit", "what")


@dataclass(frozen=True)
class Data:
    sources: dict[str, dict]
    tables: dict[str, list[dict[str, str]]]
    systems: dict[str, dict]
    runs: dict[str, dict]
    ratios: list[dict]
    calibration: list[dict]


def read_csv(name: str) -> list[dict[str, str]]:
    with open(DIR / name, newline="") as f:
        return list(csv.DictReader(f))


@lru_cache(maxsize=1)
def load() -> Data:
    with open(DIR / "sources.toml", "rb") as f:
        sources = tomllib.load(f)["sources"]
    with open(DIR / "runs.toml", "rb") as f:
        runs = tomllib.load(f)
    tables = {name: read_csv(name) for name in TABLES}
    return Data(sources=sources, tables=tables, systems=runs.get("systems", {}),
                runs=runs.get("runs", {}), ratios=runs.get("ratios", []),
                calibration=runs.get("calibration", []))


def rows_of(run: dict, data: Data | None = None) -> list[dict[str, str]]:
    """The rows a run selects: every row whose columns equal ``where``."""
    data = data or load()
    where = run["where"]
    return [r for r in data.tables[run["file"]]
            if all(r.get(k) == str(v) for k, v in where.items())]


def run_value(name: str, data: Data | None = None) -> float:
    """A run's measured figure from its rows (one row, or the mean with agg = "mean")."""
    data = data or load()
    run = data.runs[name]
    rows = rows_of(run, data)
    values = [float(r[run["value"]]) for r in rows]
    agg = run.get("agg", "one")
    if agg == "one":
        if len(values) != 1:
            raise ValueError(f"run {name}: {len(values)} rows match {run['where']}, want 1")
        return values[0]
    if agg == "mean":
        if not values:
            raise ValueError(f"run {name}: no row matches {run['where']}")
        return math.fsum(values) / len(values)
    raise ValueError(f"run {name}: unknown agg {agg!r}")


def ratio_value(ratio: dict | str, data: Data | None = None) -> float:
    """Numerator run over denominator run, from the raw rows."""
    data = data or load()
    if isinstance(ratio, str):
        ratio = next(r for r in data.ratios if r["name"] == ratio)
    return run_value(ratio["numerator"], data) / run_value(ratio["denominator"], data)


def source_of(row: dict[str, str], data: Data | None = None) -> dict:
    """The source entry (repo, path, commit, ...) a row names."""
    data = data or load()
    return data.sources[row["source"]]


if __name__ == "__main__":  # a summary: python benchmarks/fidelity/data.py
    d = load()
    for name, rows in d.tables.items():
        print(f"{name}: {len(rows)} rows")
    for r in d.ratios:
        print(f"{r['kind']:10s} {r['name']:48s} measured {r['measured']:.4g} "
              f"(from rows {ratio_value(r, d):.6g})")
