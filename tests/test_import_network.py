"""Issue 16.2: `planner import-network` end to end: matrices -> instance ->
validate -> plan (greedy) -> evaluate, the shipped example rebuilt byte for
byte, and bad input refused with exit 2 naming the file and the field."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from planner.cli import main

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "docs" / "examples" / "measured"


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    return r


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def importing(tmp_path, rtt, tput, sites=None, *extra):
    out = tmp_path / "out.toml"
    args = ["import-network", "--latency", rtt, "--throughput", tput, "--out", out, *extra]
    if sites is not None:
        args += ["--sites", sites]
    return run(*args), out


def test_shipped_example_is_what_the_command_builds(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the header names the inputs as given, relative to the checkout
    out = tmp_path / "aws-5.toml"
    r = run("import-network", "--latency", "docs/examples/measured/aws-rtt.csv",
            "--throughput", "docs/examples/measured/aws-tput.csv",
            "--sites", "docs/examples/measured/aws-sites.toml", "--out", out)
    assert r.exit_code == 0, r.output
    assert "5 domains, 96 GPUs, 10 links (10 measured)" in r.output
    assert out.read_text() == (EX / "aws-5.toml").read_text()


def test_round_trip_matrices_instance_validate_plan_evaluate(tmp_path):
    r, inst = importing(tmp_path, EX / "aws-rtt.csv", EX / "aws-tput.csv", EX / "aws-sites.toml", "--links", "mesh")
    assert r.exit_code == 0, r.output
    v = run("validate", inst)
    assert v.exit_code == 0 and "5 domains, 10 links, 96 GPUs" in v.output
    plan = tmp_path / "plan.json"
    p = run("plan", inst, "--solver", "greedy", "-q", "--out", plan)
    assert p.exit_code == 0, p.output
    e = run("evaluate", inst, plan, "--json")
    assert e.exit_code == 0, e.output
    ev = json.loads(e.output)
    predicted = json.loads(plan.read_text())["predicted"]
    assert ev["feasible"] and ev["iteration_time_s"] > 0
    assert ev["iteration_time_s"] == pytest.approx(predicted["iteration_time_s"], rel=1e-12)
    assert sum(ev["gpus_used"].values()) <= 96


def test_defaults_and_gpus_flag_without_a_sites_table(tmp_path):
    rtt = write(tmp_path, "r.csv", ",x,y\nx,,20\ny,20,\n")
    tput = write(tmp_path, "t.csv", "src,dst,mbps\nx,y,800\n")
    r, out = importing(tmp_path, rtt, tput, None, "--gpus", "8", "--throughput-unit", "mbps", "--name", "pair")
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert 'name = "pair"' in text and "bandwidth_gbps = 0.8" in text and "latency_ms = 10.0" in text
    assert "# ASSUMED [gpu]" in text and run("validate", out).exit_code == 0


@pytest.mark.parametrize("rtt, tput, where", [
    (",a,b\na,,1\nb,1,\nc,1,1\n", "src,dst,v\na,b,1\n", "r.csv: line 4: not square"),
    (",a,b\na,,-1\nb,1,\n", "src,dst,v\na,b,1\n", "r.csv: line 2, row 'a', column 'b': negative value -1"),
    (",a,b\na,,1\nb,1,\n", ",a,b\na,,x1\nb,1,\n", "t.csv: line 2, row 'a', column 'b': not a number: 'x1'"),
    (",a,b\na,,1\nb,1,\n", ",a,b\na,,0\nb,0,\n", "t.csv: row 'a', column 'b': throughput 0"),
    (",a,b,c\na,,1,\nb,1,,\nc,,,\n", "src,dst,v\na,b,1\n", "links: the measured pairs do not connect the sites"),
])
def test_bad_matrices_exit_2_naming_file_and_cell(tmp_path, rtt, tput, where):
    r, out = importing(tmp_path, write(tmp_path, "r.csv", rtt), write(tmp_path, "t.csv", tput), None, "--gpus", "8")
    assert r.exit_code == 2, r.output
    assert where in r.output
    assert not out.exists()


@pytest.mark.parametrize("sites, where", [
    ('[[sites]]\nname = "a"\ngpus = 8\n[[sites]]\nname = "gama"\ngpus = 8\n',
     "s.toml: sites[1].name: unknown site 'gama'"),
    ('[[sites]]\nname = "a"\ngpus = 0\n', "s.toml: sites[0].gpus"),
    ('[defaults]\ngpus = 8\ngpus_per_nod = 8\n', "s.toml: defaults.gpus_per_nod: unknown key"),
    ('[defaults]\ngpus = 8\n[workload]\nmodel = "llama2-7b"\nglobal_batch_size = 8\nseq_len = 128\n'
     'micro_batch_sizes = [1]\ntensor_parallel = [16]\n', "s.toml: workload.tensor_parallel[0]"),
    ('[defaults]\ngpus = 8\n[workload]\nmodel = "no-such-model"\nglobal_batch_size = 8\nseq_len = 128\n'
     'micro_batch_sizes = [1]\n', "s.toml: workload.model: no model named 'no-such-model'"),
    ('name = "x"\n[defaults\n', "s.toml: not valid TOML"),
])
def test_bad_sites_table_exit_2_naming_file_and_field(tmp_path, sites, where):
    rtt = write(tmp_path, "r.csv", ",a,b\na,,1\nb,1,\n")
    tput = write(tmp_path, "t.csv", ",a,b\na,,1\nb,1,\n")
    r, out = importing(tmp_path, rtt, tput, write(tmp_path, "s.toml", sites))
    assert r.exit_code == 2, r.output
    assert where in r.output
    assert not out.exists()


def test_missing_file_and_overwriting_an_input(tmp_path):
    rtt = write(tmp_path, "r.csv", ",a,b\na,,1\nb,1,\n")
    r, _ = importing(tmp_path, rtt, tmp_path / "none.csv", None, "--gpus", "1")
    assert r.exit_code == 2 and "none.csv: no such file" in r.output
    r = run("import-network", "--latency", rtt, "--throughput", rtt, "--gpus", "1", "--out", rtt)
    assert r.exit_code == 2 and "--out" in r.output and "input file" in r.output
    assert rtt.read_text() == ",a,b\na,,1\nb,1,\n"


def test_model_flag_and_unknown_model(tmp_path):
    rtt = write(tmp_path, "r.csv", ",a,b\na,,1\nb,1,\n")
    r, out = importing(tmp_path, rtt, rtt, None, "--gpus", "8", "--model", "tiny")
    assert r.exit_code == 0, r.output
    assert 'model = "tiny"' in out.read_text()
    r, _ = importing(tmp_path, rtt, rtt, None, "--gpus", "8", "--model", "nope")
    assert r.exit_code == 2 and "--model: no model named 'nope'" in r.output


@pytest.mark.parametrize("args, option", [
    (["import-network", "--latency", "none.csv", "--throughput", "none.csv", "--out", "x.toml", "--gpus", "0"],
     "--gpus"),
    (["import-network", "--latency", "none.csv", "--throughput", "none.csv", "--out", "x.toml",
      "--bandwidth-scale", "0"], "--bandwidth-scale"),
    (["import-network", "--latency", "none.csv", "--throughput", "none.csv", "--out", "x.toml",
      "--bandwidth-scale", "nan"], "--bandwidth-scale"),
    (["import-network", "--latency", "none.csv", "--throughput", "none.csv", "--out", "x.toml", "--links", "all"],
     "--links"),
    (["import-network", "--latency", "none.csv", "--throughput", "none.csv", "--out", "/missing/dir/x.toml"],
     "--out"),
    (["report", "none.toml", "none.json", "--out", "/missing/dir/r.html"], "--out"),
])
def test_bad_options_exit_2_naming_them_before_reading_anything(args, option, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert option in r.output and "none." not in r.output  # no input was opened


# -- names (SPEC 9): a site name becomes a domain name, file name and shell word ------------

HOSTILE_SITES = ["../../p", "alpha$(touch PWNED)", "a b", 'x"y', "a|b", "a;b", "a/b", ".p", "x" * 65, "a\x00b"]


def _csv_line(cells) -> str:
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue()


@pytest.mark.parametrize("bad", HOSTILE_SITES, ids=repr)
def test_hostile_site_names_refused_in_every_input(tmp_path, monkeypatch, bad):
    from planner.problem.files import toml_text

    monkeypatch.chdir(tmp_path)
    good = write(tmp_path, "good.csv", ",a,b\na,,1\nb,1,\n")
    square = write(tmp_path, "sq.csv", _csv_line(["", "a", bad]) + _csv_line(["a", "", "1"])
                   + _csv_line([bad, "1", ""]))
    long = write(tmp_path, "long.csv", "src,dst,gbps\n" + _csv_line(["a", bad, "4"]))
    sites = write(tmp_path, "s.toml", toml_text({"sites": [{"name": bad, "gpus": 8}, {"name": "a", "gpus": 8}]}))
    named = write(tmp_path, "n.toml", toml_text({"name": bad, "defaults": {"gpus": 8}}))
    gpu = write(tmp_path, "g.toml", toml_text({"defaults": {"gpus": 8}, "gpu": {
        "name": bad, "peak_tflops": 312.0, "memory_gb": 80.0, "mfu": 0.45}}))
    cases = [
        ((square, good, None, "--gpus", "8"), "sq.csv: line 1, column 3: site "),
        ((good, long, None, "--gpus", "8"), "long.csv: line 2, column dst: site "),
        ((good, good, sites), "s.toml: sites[0].name: site "),
        ((good, good, named), "n.toml: name: "),
        ((good, good, gpu), "g.toml: gpu.name: "),
        ((good, good, None, "--gpus", "8", "--name", bad), "--name: "),
    ]
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, where in cases:
        r, out = importing(tmp_path, *args)
        assert r.exit_code == 2, (where, r.output)
        assert r.output.startswith("error: ") and where in r.output and "is not a valid name" in r.output, r.output
        assert r.output.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, in here or above
    assert not (tmp_path.parent.parent / "p").exists()


def test_unicode_site_names_pass(tmp_path):
    rtt = write(tmp_path, "r.csv", ",北京,贵州\n北京,,20\n贵州,22,\n")
    tput = write(tmp_path, "t.csv", "src,dst,gbps\n北京,贵州,4\n")
    sites = write(tmp_path, "s.toml", 'name = "东数西算"\n[[sites]]\nname = "北京"\ngpus = 8\n'
                                      '[[sites]]\nname = "贵州"\ngpus = 8\n')
    r, out = importing(tmp_path, rtt, tput, sites)
    assert r.exit_code == 0, r.output
    import planner

    inst = planner.load_instance(out)
    assert inst.name == "东数西算" and inst.domain_names == ("北京", "贵州")


def test_notes_with_control_characters_stay_comments(tmp_path):
    import tomllib

    rtt = write(tmp_path, "r.csv", "# ping \x01 \x7f \x1b[31m red\n,a,b\na,,1\nb,1,\n")
    r, out = importing(tmp_path, rtt, rtt, None, "--gpus", "8")
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "#   | ping \\x01 \\x7f \\x1b[31m red\n" in text
    assert tomllib.loads(text)["name"] == "measured"


def test_mbits_and_seconds_are_not_taken_for_gbits_and_ms(tmp_path):
    """Issue 28 item 15: Mbit/s values read as Gbit/s, or RTTs in seconds read as ms,
    were accepted silently; refused now naming the file, the field and the likely unit,
    and accepted once the unit is said by a flag."""
    rtt = write(tmp_path, "r.csv", ",x,y\nx,,20\ny,20,\n")
    rtt_s = write(tmp_path, "rs.csv", ",x,y\nx,,0.02\ny,0.021,\n")
    tput = write(tmp_path, "t.csv", ",x,y\nx,,5\ny,5,\n")
    tput_mbps = write(tmp_path, "tm.csv", "src,dst,value\nx,y,4350\ny,x,4200\n")
    r, out = importing(tmp_path, rtt, tput_mbps, None, "--gpus", "8")
    assert r.exit_code == 2 and "tm.csv: throughput:" in r.output and "--throughput-unit mbps" in r.output
    r, out = importing(tmp_path, rtt_s, tput, None, "--gpus", "8")
    assert r.exit_code == 2 and "rs.csv: latency:" in r.output and "--latency-unit s" in r.output
    assert not out.exists()
    r, out = importing(tmp_path, rtt_s, tput_mbps, None, "--gpus", "8", "--latency-unit", "s",
                       "--throughput-unit", "mbps")
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "bandwidth_gbps = 4.2" in text and "latency_ms = 10.25" in text
