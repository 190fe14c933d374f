"""Issue 28: the files ``planner export`` and ``planner report`` write are safe whatever the
names they carry, and an export never mixes with, or silently replaces, what a folder holds.

The loader refuses unsafe names (SPEC 9, tests/problem/test_validation.py); these tests make
instances *without* that check, as an API user could, and check the second defence: every
writer quotes what it emits.  Launch scripts are run (no host, a wrong host, the right host
with a fake ``torchrun``) in an empty folder, and must create nothing; file names stay inside
the output folder; TOML, CSV, Python, JSON, Markdown and HTML read back to the same names.
"""

import ast
import csv
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

import planner
from planner.cli import main
from planner.presentation.export import FORMATS, export
from planner.problem.errors import InputError
from planner.problem.instance import Instance
from planner.problem.model import ModelSpec, UnitSpec
from planner.problem.plan import Plan
from planner.problem.rankmap import parse_rank_map
from helpers import names_unchecked

HOSTILE = ["alpha$(touch PWNED)", "../../escaped", "a'b\"c`touch PWNED2`d$HOME", "x\ny\r\n# z = 1",
           "-rf *", "a\\", 'q"""q', "北京 x|y", "a\u2028b\x7fc\u202ed", '<script>alert("x")</script>&amp;']


def hostile_instance(name: str) -> Instance:
    """tiny-3dc with ``name`` as the instance's, the GPU type's, the model's and a unit's name,
    domain alpha renamed ``name`` and beta ``name + "2"``: made with the name check off."""
    base = planner.load_instance("tiny-3dc")
    data = base.to_dict()
    ren = {"alpha": name, "beta": name + "2"}
    data["name"] = name
    data["gpu"]["name"] = name
    for d in data["domains"]:
        d["name"] = ren.get(d["name"], d["name"])
    for link in data["links"]:
        link["a"], link["b"] = ren.get(link["a"], link["a"]), ren.get(link["b"], link["b"])
    units = [UnitSpec(name=u.name if u.name in ("embed", "head") else f"{name}{i}", params=u.params,
                      fwd_flops_per_token=u.fwd_flops_per_token, out_bytes_per_token=u.out_bytes_per_token,
                      stored_bytes_per_token=u.stored_bytes_per_token)
             for i, u in enumerate(base.units)]
    data["workload"]["model"] = ModelSpec(name=name, units=units)
    with names_unchecked():
        inst = Instance.from_dict(data)
    assert inst.domain_names[0] == name and inst.gpu.name == name
    return inst


@pytest.fixture(scope="module", params=HOSTILE, ids=repr)
def hostile(request):
    inst = hostile_instance(request.param)
    p = planner.plan(inst, solver="greedy").model_copy(update={"predicted": None, "solver": None})
    return request.param, inst, p, {fmt: export(inst, p, fmt) for fmt in FORMATS}


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


FAKE_TORCHRUN = """#!/usr/bin/env bash
printf '%s\\0' "$@" >> "$RECORD"
"""


def test_launch_scripts_quote_every_name(hostile, tmp_path):
    name, inst, p, exports = hostile
    for fmt, ex in exports.items():
        job = tmp_path / fmt / "job"
        ex.write(job)
        scripts = sorted(rel for rel in ex.files if rel.startswith("launch/"))
        assert scripts and all(re.fullmatch(r"launch/[\w.-]+\.sh", s, flags=re.A) for s in scripts)
        assert len(set(scripts)) == len(scripts)
        for rel in scripts:
            text = ex.files[rel]
            path = job / rel
            subprocess.run(["bash", "-n", str(path)], check=True)
            # the header is the shebang and four comment lines (the last names the framework version):
            # no name started a line of its own
            head = text.split("set -euo pipefail\n")[0].splitlines()
            assert len(head) == 5 and all(line.startswith("#") for line in head)
            # the variables read back to the names, byte for byte
            block = text[text.index("SCRIPT="):text.index("HERE=")]
            out = subprocess.run(["bash", "-c", block + 'printf "%s\\0" "$SCRIPT" "$DOMAIN" "$MASTER_HOST" "$HOSTS"'],
                                 capture_output=True, check=True).stdout.decode().split("\0")
            domain = out[1]
            i = inst.domain_names.index(domain)
            assert rel == ("launch/gamma.sh" if domain == "gamma" else f"launch/domain{i}.sh")  # not the name
            hosts = sorted({a.host for a in ex.rank_map.agents_in(domain)}, key=lambda h: int(h.rsplit("node", 1)[1]))
            assert out[:4] == [rel, domain, ex.rank_map.agents[0].host, " ".join(hosts)]
            # run it: no MASTER_ADDR, no host, a wrong host, each host with a fake torchrun
            run_dir = tmp_path / "run"
            run_dir.mkdir(exist_ok=True)
            bin_dir = tmp_path / "bin"
            bin_dir.mkdir(exist_ok=True)
            (bin_dir / "torchrun").write_text(FAKE_TORCHRUN)
            (bin_dir / "torchrun").chmod(0o755)
            record = tmp_path / "record"
            env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path / "home"), "RECORD": str(record),
                   # torchtitan without a registered model config stops first until these are set
                   "TORCHTITAN_MODULE": "m", "TORCHTITAN_CONFIG": "c"}
            before_job, before_tmp = _listing(job), _listing(tmp_path)
            for args, extra, code in [([], {}, 1), ([], {"MASTER_ADDR": "10.0.0.1"}, 1),
                                      (["nohost"], {"MASTER_ADDR": "10.0.0.1"}, 2)]:
                r = subprocess.run(["bash", str(path), *args], cwd=run_dir, env={**env, **extra},
                                   capture_output=True)
                assert r.returncode == code, (rel, args, r.stderr)
                assert list(run_dir.iterdir()) == [] and _listing(job) == before_job
                assert _listing(tmp_path) == before_tmp, r.stderr
            err = r.stderr.decode()
            assert f"{rel}: nohost is not a host of domain {domain} ({' '.join(hosts)})" in err
            for h in hosts:
                r = subprocess.run(["bash", str(path), h, "--data", name], cwd=run_dir,
                                   env={**env, "MASTER_ADDR": "10.0.0.1"}, capture_output=True)
                assert r.returncode == 0, r.stderr
                args = record.read_bytes().decode().split("\0")[:-1]
                record.unlink()
                # the user's arguments passed through unchanged (torchtitan's subcommand, LAST, follows them)
                tail = args[:-1] if "LAST=(" in text else args
                assert tail[-2:] == ["--data", name]
                assert list(run_dir.iterdir()) == [] and _listing(tmp_path) == before_tmp


def test_file_names_stay_in_the_folder(hostile, tmp_path):
    name, inst, p, exports = hostile
    for fmt, ex in exports.items():
        job = tmp_path / fmt
        written = ex.write(job)
        for path in written:
            assert job.resolve() in path.resolve().parents
        assert sorted(str(f.relative_to(job)) for f in job.rglob("*") if f.is_file()) == sorted(ex.files)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FORMATS)
    assert not (tmp_path.parent / "escaped.sh").exists() and not (tmp_path.parent.parent / "escaped.sh").exists()


def test_config_files_read_back_to_the_names(hostile):
    name, inst, p, exports = hostile
    for fmt, ex in exports.items():
        rows = list(csv.DictReader(io.StringIO(ex.files["rank_map.csv"])))
        assert {r["domain"] for r in rows} <= set(inst.domain_names) and name in {r["domain"] for r in rows}
        assert [r.domain for r in parse_rank_map(ex.files["rank_map.csv"])] == [r.domain for r in ex.rank_map.rows]
        assert Plan.from_json(ex.files["plan.json"]).placement == p.placement
    toml = tomllib.loads(export(inst, p, "torchtitan", "0.2.2").files["torchtitan.toml"])  # the last TOML version
    assert set(toml) == {"training", "parallelism", "activation_checkpoint"} | ({"model"} & set(toml))
    assert set(toml["training"]) == {"local_batch_size", "global_batch_size", "seq_len"}
    module = ast.parse(exports["deepspeed"].files["deepspeed_pipeline.py"])
    base = planner.load_instance("tiny-3dc")
    plain = ast.parse(export(base, planner.plan(base, solver="greedy"), "deepspeed").files["deepspeed_pipeline.py"])
    assert [ast.dump(n) for n in module.body[1:]] == [ast.dump(n) for n in plain.body[1:]]  # only the docstring differs
    doc = module.body[0].value.value
    assert f"instance {name})" in doc and all(u.name in doc for u in inst.units)
    json.loads(exports["deepspeed"].files["ds_config.json"])


def test_readme_keeps_names_on_their_lines(hostile):
    name, inst, p, exports = hostile
    for fmt, ex in exports.items():
        text = ex.files["README.md"]
        used = [d for d in inst.domain_names if ex.rank_map.agents_in(d)]
        assert len(re.findall(r"^### ", text, flags=re.M)) == len(used)
        block = text.split("```sh\n")[1].split("```")[0].splitlines()
        assert len(block) == len(used)
        scripts = sorted(rel for rel in ex.files if rel.startswith("launch/"))
        for line in block:  # copied to a shell, each line runs bash with its script, no name as code
            words = shlex.split(line, comments=True)
            assert words[words.index("bash") + 1] in scripts and words[-1] == "HOST"
        assert text.startswith("# Launching the plan for `") and text.count("\n# ") == 0


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.where, self.text = [], [], {}

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in ("meta", "link", "br", "img", "hr", "input"):
            self.where.append(tag)

    def handle_endtag(self, tag):
        if self.where and self.where[-1] == tag:
            self.where.pop()

    def handle_data(self, data):
        if self.where:
            self.text.setdefault(self.where[-1], []).append(data)


def test_html_report_escapes_the_names():
    from planner.presentation.html_report import render

    name = '<script>alert("x")</script>&amp;\'$(touch PWNED)'
    inst = hostile_instance(name)
    p = planner.plan(inst, solver="greedy")
    with names_unchecked():  # the report's what-ifs (explain) make instances too
        page = render(inst, p)
    parsed = _Text()
    parsed.feed(page)
    assert "script" not in parsed.tags
    assert "".join(parsed.text["h1"]) == f"Plan for {name}"
    assert "".join(parsed.text["title"]).startswith(f"Plan for {name}")


# -- item 2: an export owns its folder -------------------------------------------------------

def _plan_files(tmp_path):
    inst = planner.load_instance("tiny-3dc")
    three = Plan.build([(0, 2), (2, 7), (7, 10)], [["alpha", "beta", "gamma"]], tp=2, micro_batch_size=1,
                       instance=inst)
    one = Plan.build([(0, 5), (5, 10)], [["alpha", "alpha"]], tp=2, micro_batch_size=1, instance=inst)
    paths = []
    for label, plan in (("three", three), ("one", one)):
        path = tmp_path / f"{label}.json"
        path.write_text(plan.to_json())
        paths.append(path)
    return inst, three, one, paths


def test_export_refuses_a_folder_that_holds_files(tmp_path):
    inst, three, one, (three_path, _) = _plan_files(tmp_path)
    job = tmp_path / "job"
    job.mkdir()
    (job / "README.md").write_text("my notes\n")
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(three_path), "--format", "megatron", "--out", str(job)])
    assert r.exit_code == 2 and f"--out: {job} is not empty" in r.stderr and "--force" in r.stderr
    assert _listing(job) == ["README.md"] and (job / "README.md").read_text() == "my notes\n"
    # --force replaces an earlier export only, not a folder of other files
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(three_path), "--format", "megatron", "--out", str(job),
                                  "--force"])
    assert r.exit_code == 2 and str(job) in r.stderr and "--force" in r.stderr
    assert _listing(job) == ["README.md"]
    with pytest.raises(InputError, match="force=True"):
        export(inst, three, "megatron").write(job)
    assert _listing(job) == ["README.md"]


def test_force_replaces_the_whole_earlier_export(tmp_path):
    inst, three, one, (three_path, one_path) = _plan_files(tmp_path)
    job = tmp_path / "job"
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(three_path), "--format", "torchtitan", "--framework-version",
                                  "0.2.2", "--out", str(job)])
    assert r.exit_code == 0, r.output
    assert {"launch/alpha.sh", "launch/beta.sh", "launch/gamma.sh", "torchtitan.toml"} <= set(_listing(job))
    (job / "launch" / "mine.txt").write_text("x")
    args = ["export", "tiny-3dc", str(one_path), "--format", "megatron", "--out", str(job)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "--force" in r.stderr and "launch/gamma.sh" in _listing(job)
    r = CliRunner().invoke(main, [*args, "--force"])
    assert r.exit_code == 0, r.output
    new = export(inst, one, "megatron")
    assert sorted(str(f.relative_to(job)) for f in job.rglob("*") if f.is_file()) == sorted(new.files)
    assert all((job / rel).read_text() == text for rel, text in new.files.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "one.json", "three.json"]  # no folder left beside
    # the API: force=True, the same
    export(inst, three, "deepspeed").write(job, force=True)
    assert sorted(str(f.relative_to(job)) for f in job.rglob("*") if f.is_file()) == \
        sorted(export(inst, three, "deepspeed").files)


def test_force_never_replaces_an_input_or_the_current_folder(tmp_path, monkeypatch):
    inst, three, one, (three_path, _) = _plan_files(tmp_path)
    job = tmp_path / "job"
    export(inst, three, "megatron").write(job)
    plan_in = job / "plan.json"
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(plan_in), "--format", "megatron", "--out", str(job),
                                  "--force"])
    assert r.exit_code == 2 and "input file" in r.stderr and plan_in.is_file()
    monkeypatch.chdir(job / "launch")
    r = CliRunner().invoke(main, ["export", "tiny-3dc", str(three_path), "--format", "megatron", "--out", str(job),
                                  "--force"])
    assert r.exit_code == 2 and "current directory" in r.stderr and (job / "launch" / "alpha.sh").is_file()


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_a_failed_export_leaves_the_old_one_whole(tmp_path, monkeypatch, platform):
    from planner.problem import files

    monkeypatch.setattr(files.sys, "platform", platform)  # darwin: the two-rename exchange
    inst, three, one, _ = _plan_files(tmp_path)
    job = tmp_path / "job"
    old = export(inst, three, "torchtitan")
    old.write(job)
    before = {p: p.read_bytes() for p in job.rglob("*") if p.is_file()}
    real = files.write_atomic
    calls = []

    def failing(path, data):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(path, data)

    monkeypatch.setattr(files, "write_atomic", failing)
    with pytest.raises(KeyboardInterrupt):
        export(inst, one, "megatron").write(job, force=True)
    assert {p: p.read_bytes() for p in job.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "one.json", "three.json"]  # no temp folder left
    monkeypatch.setattr(files, "write_atomic", real)
    export(inst, one, "megatron").write(job, force=True)
    assert sorted(str(f.relative_to(job)) for f in job.rglob("*") if f.is_file()) == \
        sorted(export(inst, one, "megatron").files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "one.json", "three.json"]


def test_write_files_refuses_paths_that_leave_the_folder(tmp_path):
    from planner.problem.files import write_files, write_folder

    for rel in ["../x.sh", "/tmp/x.sh", "a/../../x", "./a", "a//b", "", "a\nb", "launch/"]:
        with pytest.raises(InputError, match="not a plain path"):
            write_files(tmp_path / "w", {rel: "x"})
        with pytest.raises(InputError, match="not a plain path"):
            write_folder(tmp_path / "f", {"ok.txt": "x", rel: "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_folder_that_cannot_be_made_is_refused_before_any_work(tmp_path):
    from planner.problem.files import check_folder

    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a writable folder"):
        check_folder(tmp_path / "file" / "job")
    with pytest.raises(InputError, match="not a folder"):
        check_folder(tmp_path / "file")
