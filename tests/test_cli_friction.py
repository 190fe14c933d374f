"""Issue 28, new-user frictions of the command line: picture paths checked before
any work, numbers never cut in tables, plain words for improvements, warnings and
progress where a person would wait or be misled."""

import os

import pytest
from click.testing import CliRunner

from planner.cli import main

MISSING = "no-such-instance.toml"


# -- item 13: --gantt / --map / --curve: a picture format, checked before any work --------

@pytest.mark.parametrize("args, option", [
    (["plan", MISSING, "--gantt", "gantt.xyz"], "--gantt"),
    (["plan", MISSING, "--gantt", "gantt"], "--gantt"),
    (["plan", MISSING, "--map", "map.docx"], "--map"),
    (["plan", MISSING, "--map", "map."], "--map"),
    (["evaluate", MISSING, "p.json", "--gantt", "g.txt"], "--gantt"),
    (["evaluate", MISSING, "p.json", "--map", "noext"], "--map"),
    (["rl", "train", MISSING, "--out", "p.zip", "--curve", "curve.csv"], "--curve"),
])
def test_bad_picture_name_exit_2_naming_the_option_before_any_work(args, option, tmp_path):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = CliRunner().invoke(main, args)
    finally:
        os.chdir(cwd)
    assert r.exit_code == 2, r.output
    assert option in r.output and ("extension" in r.output or "cannot draw" in r.output), r.output
    assert MISSING not in r.output  # the instance was never opened, nothing was solved
    assert not list(tmp_path.iterdir())


def test_supported_picture_formats_are_drawn(tmp_path):
    from planner.presentation.plot import picture_problem

    for name in ("g.png", "g.SVG", "g.pdf", "dir.v2/g.jpeg"):
        assert picture_problem(name) is None, name
    g, m = tmp_path / "g.svg", tmp_path / "m.pdf"
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "greedy", "-q", "--gantt", str(g), "--map", str(m)])
    assert r.exit_code == 0, r.output
    assert g.read_text().lstrip().startswith("<?xml") and m.read_bytes().startswith(b"%PDF")


# -- item 14: no number is ever cut, whatever the width or a pipe ------------------------

def _cli(*args, columns=None):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture(scope="module")
def trace_1h(tmp_path_factory):
    from planner import load_instance
    from planner.problem import traces

    path = tmp_path_factory.mktemp("trace") / "t.csv"
    traces.save(traces.generate(load_instance("tiny-3dc"), hours=1), path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("columns", [None, 50])
def test_simulate_piped_prints_every_number_whole(trace_1h, columns):
    import json

    args = ["simulate", "tiny-3dc", "--trace", str(trace_1h), "--iterations", "50", "--policy", "static",
            "--policy", "oracle", "-q"]
    table = _cli(*args, columns=columns)
    assert table.returncode == 0, table.stderr
    assert "…" not in table.stdout
    rows = json.loads(_cli(*args, "--json").stdout)
    words = set(table.stdout.replace("│", " ").split())
    for r in rows:  # the table's formats, every one found whole (70663.1 was shown as 70663…)
        for shown in (f"{r['total_s'] / 3600:.3f}", f"{r['iterations_per_hour']:.1f}", f"{r['reconfig_s']:.1f}",
                      f"{r['stalled_s']:.1f}", str(r["switches"]), r["policy"]):
            assert shown in words, (shown, table.stdout)


def test_whole_tables_at_any_width():
    import re

    from rich.console import Console
    from rich.table import Table

    from planner.presentation.report import whole

    numbers = ["70409.123", "123456789", "0.000125", "1,234,567"]
    for width in (20, 40, 80):
        t = Table(title="t")
        for h in ("a long header", "another long header", "x", "the last column header"):
            t.add_column(h, justify="right")
        t.add_row(*numbers)
        t.add_row("some long text in a cell", "1", "2", "3")
        console = Console(width=width, record=True, file=open(os.devnull, "w"), soft_wrap=True)
        console.print(whole(t, console))
        text = console.export_text()
        assert "…" not in text
        found = set(re.findall(r"[\d.,]+", text))
        assert set(numbers) <= found, (width, text)


# -- item 16: small frictions -----------------------------------------------------------

def test_memory_column_of_a_toy_instance_is_readable():
    """tiny-3dc's GPUs have 0.08 GB: the column read '0.0/0 GB'."""
    import re

    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "greedy", "-q"])
    assert r.exit_code == 0, r.output
    assert "0.0/0 GB" not in r.output
    mem = re.findall(r"([\d.]+)/([\d.]+) (GB|MB|kB)", r.output)
    assert mem and all(float(used) > 0 and float(limit) > 0 for used, limit, _ in mem), r.output
    from planner.presentation.report import _fmt_mem

    assert _fmt_mem(61.23, 72.0) == "61.2/72 GB" and _fmt_mem(0.04, 72.0) == "0.04/72 GB"
    assert _fmt_mem(0.00852, 0.072) == "8.52/72 MB"


def _schedule(tmp_path, inst, *extra):
    import logging

    from planner import load_instance, plan

    path = tmp_path / "p.json"
    path.write_text(plan(load_instance(inst)).to_json())
    logger = logging.getLogger("planner")
    saved = logger.handlers[:], logger.level
    logger.handlers.clear()  # the command attaches its own, to this run's stderr
    try:
        return CliRunner().invoke(main, ["schedule", inst, str(path), "--out", str(tmp_path / "q.json"), *extra])
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])


def test_schedule_says_faster_or_slower_in_words(tmp_path):
    import re

    r = _schedule(tmp_path, "tiny-3dc", "--time-limit", "2", "-q")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("simulated iteration:"))
    assert re.search(r"\d+\.\d% (faster|slower)$|as fast$", line), line
    assert not re.search(r"[+-]\d+\.\d+%", line), line



@pytest.mark.slow
def test_simulate_warns_once_when_the_trace_is_shorter_than_the_job(trace_1h):
    long = _cli("simulate", "tiny-3dc", "--trace", str(trace_1h), "--iterations", "100000", "--policy", "static",
                "--policy", "oracle", "-q")
    assert long.returncode == 0, long.stderr
    warnings = [x for x in long.stderr.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 1 and "shorter than the job" in warnings[0], long.stderr
    assert "covers 1 h" in warnings[0] and "0.4" in warnings[0]  # ~1.42 h of job on a 1 h trace
    short = _cli("simulate", "tiny-3dc", "--trace", str(trace_1h), "--iterations", "100", "--policy", "static", "-q")
    assert short.returncode == 0 and "warning" not in short.stderr, short.stderr


def test_oracle_shows_progress_while_it_times_the_epochs(trace_1h, monkeypatch, caplog):
    """The oracle ran 75 s on a large instance without a line: it now logs progress
    (stderr in the CLI) as the other long work does."""
    import logging

    from planner import load_instance
    from planner.dynamics import rollout as ro
    from planner.problem import traces

    inst = load_instance("tiny-3dc")
    tr = traces.load(trace_1h, inst)
    monkeypatch.setattr(ro, "PROGRESS_EVERY_S", -1.0)  # every step: the test need not take minutes
    with caplog.at_level(logging.INFO, logger="planner"):
        r = ro.rollout(inst, tr, "oracle", 50)
    assert r.completed
    lines = [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("oracle:")]
    assert any(f"epoch {tr.epochs} of {tr.epochs}" in x for x in lines), lines


@pytest.mark.parametrize("kwargs, cli", [
    ({"time_limit": -5}, ["--time-limit", "-5"]),
    ({"time_limit": float("nan")}, ["--time-limit", "nan"]),
    ({"time_limit": float("inf")}, ["--time-limit", "inf"]),
    ({"seed": -1}, ["--seed", "-1"]),
    ({"seed": 2**40}, ["--seed", str(2**40)]),
    ({"seed": 1.5}, ["--seed", "1.5"]),
    ({"seed": True}, None),
    ({"solver": "milp", "threads": 0}, ["--solver", "milp", "--threads", "0"]),
    ({"solver": "milp", "robust": 100_000}, ["--solver", "milp", "--robust", "100000"]),
    ({"robust": 2, "robust_stat": "median"}, ["--robust", "2", "--robust-stat", "median"]),
])
def test_the_api_refuses_what_the_command_line_refuses(kwargs, cli):
    """planner.plan(time_limit=-5) returned a 'time_limit' plan (milp) or claimed the instance
    infeasible (greedy, nan); seeds -1, 2**40, 1.5 and True were taken: the API now makes
    the command line's checks (one check, registry.check_options), naming the argument."""
    from planner import InputError, load_instance, plan

    inst = load_instance("tiny-3dc")
    with pytest.raises(InputError) as e:
        plan(inst, **kwargs)
    field = [k for k in kwargs if k != "solver" and not (k == "robust" and "robust_stat" in kwargs)][0]
    assert e.value.field == field, e.value
    if cli is not None:
        r = CliRunner().invoke(main, ["plan", "tiny-3dc", "-q", *cli])
        assert r.exit_code == 2 and "--" + field.replace("_", "-") in r.output, r.output


def test_a_plan_over_hundreds_of_domains_is_summarised_unless_full(tmp_path):
    """hier on edwc-300dc printed a 614-line summary: now the stages name their main
    domains and count the others, "GPUs per domain" shows the busiest and one row for
    the rest, and --full prints every row."""
    from planner import load_instance
    from planner.problem.plan import Plan

    inst = load_instance("edwc-300dc")
    n, S, R = inst.num_units, 5, 128
    names = inst.domain_names
    p = Plan.build([(n * j // S, n * (j + 1) // S) for j in range(S)],
                   [[names[(r * S + j) % len(names)] for j in range(S)] for r in range(R)],
                   tp=8, micro_batch_size=1, instance=inst)  # 640 (replica, stage) slots over all 300 domains
    path = tmp_path / "wide.json"
    path.write_text(p.to_json())
    short = CliRunner().invoke(main, ["evaluate", "edwc-300dc", str(path)])
    assert short.exit_code == 0, short.output
    assert len(short.output.splitlines()) < 120
    assert "summarised" in short.output and "--full" in short.output
    assert "more domains" in short.output and "289 more domains" in short.output
    full = CliRunner().invoke(main, ["evaluate", "edwc-300dc", str(path), "--full"])
    assert full.exit_code == 0 and "summarised" not in full.output
    words = set(full.output.replace(",", " ").split())
    assert set(names) <= words  # every domain named
    small = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "greedy", "-q"])
    assert "summarised" not in small.output  # a small plan is shown whole
