"""Every packaged model profile against its published parameter count."""

import csv

import pytest

from planner.problem.io import available, load_model, models_dir

# model file -> row of shared/data/llm_configs.csv
PUBLISHED = {
    "gpt3-1.3b": "GPT-3 XL", "gpt3-2.7b": "GPT-3 2.7B", "gpt3-6.7b": "GPT-3 6.7B",
    "gpt3-13b": "GPT-3 13B", "gpt3-175b": "GPT-3 175B", "llama2-7b": "LLaMA-2 7B",
    "llama2-13b": "LLaMA-2 13B", "llama2-70b": "LLaMA-2 70B", "llama3-8b": "Llama-3 8B",
    "llama3-70b": "Llama-3 70B",
}


def _published(shared_data):
    with open(shared_data / "llm_configs.csv") as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        return {r["model"]: r for r in rows}


def test_all_profiles_present():
    assert set(PUBLISHED) | {"tiny"} <= set(available("models"))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_total_within_3_percent(name, shared_data):
    row = _published(shared_data)[PUBLISHED[name]]
    spec = load_model(models_dir() / f"{name}.toml")
    published = float(row["params_b"]) * 1e9
    assert abs(spec.published_params() - published) / published < 0.03
    # the architecture in the file is the one in the table
    assert spec.num_layers == int(row["layers"])
    assert spec.ffn_hidden_size == int(row["d_ff"])
    assert spec.vocab_size == int(row["vocab"])
    assert spec.num_heads == int(row["heads"]) and spec.num_kv_heads == int(row["kv_heads"])


def test_llama2_7b_units_closed_form():
    spec = load_model(models_dir() / "llama2-7b.toml")
    h, f, V, s = 4096, 11008, 32000, 4096
    units = spec.units(seq_len=s)
    P = 4 * h * h + 3 * h * f  # kv = heads: 2h^2 + 2h^2
    assert len(units) == 34 and units[0].name == "embed" and units[-1].name == "head"
    assert units[1].params == P
    assert units[1].fwd_flops_per_token == 2 * P + 4 * s * h
    assert units[1].stored_bytes_per_token == 34 * h
    assert units[-1].fwd_flops_per_token == 2 * V * h and units[-1].stored_bytes_per_token == 4 * V
    assert spec.units(seq_len=s, recompute=True)[1].stored_bytes_per_token == 2 * h


def test_grouped_query_attention_params():
    spec = load_model(models_dir() / "llama2-70b.toml")
    h = 8192
    assert spec.block_params == 2 * h * h + 2 * h * h * 8 / 64 + 3 * h * 28672
