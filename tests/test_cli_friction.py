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
