"""Issue 16.2: an instance from measured RTT and throughput matrices
(planner.problem.measured), and the TOML writer it uses."""

import csv
import math
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.problem import io as pio
from planner.problem.errors import InputError
from planner.problem.files import toml_text
from planner.problem.measured import Sites, build, parse_matrix, parse_sites

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "docs" / "examples" / "measured"
SHARED = ROOT.parent / "shared" / "data"


def rows_of(path: Path) -> list[list[str]]:
    """The CSV's rows, comment lines dropped -- read with the csv module, not the code under test."""
    return list(csv.reader(line for line in path.read_text().splitlines() if line and not line.startswith("#")))


def links_by_pair(inst) -> dict:
    return {frozenset((l["a"], l["b"])): l for l in inst["links"]}


def three_sites(rtt_ac="", tput_ac=""):
    """a - b - c measured; a-c measured only when the cells are given."""
    rtt = parse_matrix(f",a,b,c\na,,10,{rtt_ac}\nb,10,,30\nc,{rtt_ac},30,\n", "rtt.csv")
    tput = parse_matrix(f",a,b,c\na,,5,{tput_ac}\nb,4,,2\nc,{tput_ac},2,\n", "tput.csv")
    return rtt, tput


# -- golden comparison on the shipped example ------------------------------------------
def test_example_links_are_rtt_over_two_and_the_smaller_throughput():
    built = build(pio.read_matrix(EX / "aws-rtt.csv"), pio.read_matrix(EX / "aws-tput.csv"),
                  pio.read_sites(EX / "aws-sites.toml"))
    rtt_rows = rows_of(EX / "aws-rtt.csv")
    cols = rtt_rows[0][1:]
    rtt = {(r[0], c): float(v) for r in rtt_rows[1:] for c, v in zip(cols, r[1:]) if v}
    tput = {(a, b): float(v) for a, b, v in rows_of(EX / "aws-tput.csv")[1:]}
    links = links_by_pair(built.instance)
    sites = [d["name"] for d in built.instance["domains"]]
    assert len(links) == len(sites) * (len(sites) - 1) // 2 == built.measured == 10
    for i, a in enumerate(sites):
        for b in sites[i + 1:]:
            link = links[frozenset((a, b))]
            assert link["latency_ms"] == pytest.approx((rtt[(a, b)] + rtt[(b, a)]) / 4, rel=1e-12, abs=0)
            assert link["bandwidth_gbps"] == min(tput[(a, b)], tput[(b, a)])  # exactly: no arithmetic
    # a few by hand: (89.82 + 89.78) / 4, (22.26 + 22.74) / 4, min(2.87, 2.90)
    assert links[frozenset(("us-east-1", "eu-central-1"))]["latency_ms"] == 44.9
    assert links[frozenset(("eu-west-1", "eu-central-1"))]["latency_ms"] == 11.25
    assert links[frozenset(("eu-central-1", "ap-northeast-1"))]["bandwidth_gbps"] == 2.87
    assert links[frozenset(("us-west-2", "ap-northeast-1"))]["latency_ms"] == 48.7925  # float noise dropped


def test_one_measured_direction_gives_exactly_half_the_rtt():
    rtt = parse_matrix(",a,b\na,,17.37\nb,,\n", "r.csv")
    tput = parse_matrix("src,dst,v\nb,a,3.3\n", "t.csv")
    link = build(rtt, tput, parse_sites({"defaults": {"gpus": 8}})).instance["links"][0]
    assert link["latency_ms"] == 17.37 / 2 and link["bandwidth_gbps"] == 3.3


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared/data not beside the checkout")
def test_example_csvs_copy_the_shared_data_unchanged():
    def matrix(name):
        rows = rows_of(SHARED / name)
        return {(r[0], c): v for r in rows[1:] for c, v in zip(rows[0][1:], r[1:])}

    rtt, tput = matrix("matrix_aws_rtt_ms_skyplane2022.csv"), matrix("matrix_aws_tput_gbps_skyplane2022.csv")
    ex = rows_of(EX / "aws-rtt.csv")
    for r in ex[1:]:
        for c, v in zip(ex[0][1:], r[1:]):
            assert v == rtt[(f"aws:{r[0]}", f"aws:{c}")]
    for a, b, v in rows_of(EX / "aws-tput.csv")[1:]:
        assert v == tput[(f"aws:{a}", f"aws:{b}")]
    for name in ("aws-rtt.csv", "aws-tput.csv"):  # the source line of the shared file is kept
        head = (EX / name).read_text().splitlines()[0]
        assert "Skyplane" in head and head == (SHARED / f"matrix_aws_{'rtt_ms' if 'rtt' in name else 'tput_gbps'}"
                                                           "_skyplane2022.csv").read_text().splitlines()[0]


# -- measured pairs vs the full mesh -------------------------------------------------------
def test_measured_links_leave_unmeasured_pairs_to_routes():
    rtt, tput = three_sites()
    built = build(rtt, tput, parse_sites({"defaults": {"gpus": 8}}))
    links = links_by_pair(built.instance)
    assert set(links) == {frozenset("ab"), frozenset("bc")} and built.filled == 0
    assert links[frozenset("ab")] == {"a": "a", "b": "b", "bandwidth_gbps": 4.0, "latency_ms": 5.0}


def test_mesh_fills_a_pair_from_the_least_latency_route():
    rtt, tput = three_sites()
    built = build(rtt, tput, parse_sites({"defaults": {"gpus": 8}}), links="mesh")
    links = links_by_pair(built.instance)
    assert len(links) == 3 and built.measured == 2 and built.filled == 1
    # a > b > c: latency 5 + 15, bandwidth min(4, 2)
    assert links[frozenset("ac")]["latency_ms"] == 20.0 and links[frozenset("ac")]["bandwidth_gbps"] == 2.0
    assert any("a > b > c" in line for line in built.header)


def test_mesh_keeps_measured_pairs_as_measured():
    rtt, tput = three_sites(rtt_ac="100", tput_ac="9")
    for mode in ("measured", "mesh"):
        links = links_by_pair(build(rtt, tput, Sites(defaults={"gpus": 8}), links=mode).instance)
        assert links[frozenset("ac")]["latency_ms"] == 50.0 and links[frozenset("ac")]["bandwidth_gbps"] == 9.0


def test_half_measured_pair_is_left_out_and_said():
    rtt, tput = three_sites(rtt_ac="100")  # RTT but no throughput for a-c
    built = build(rtt, tput, Sites(defaults={"gpus": 8}))
    assert frozenset("ac") not in links_by_pair(built.instance)
    assert built.left_out == ("a-c (no throughput)",)


def test_disconnected_sites_are_refused_naming_the_groups():
    rtt = parse_matrix(",a,b,c\na,,10,\nb,10,,\nc,,,\n", "r.csv")
    tput = parse_matrix(",a,b,c\na,,5,\nb,5,,\nc,,,\n", "t.csv")
    for mode in ("measured", "mesh"):
        with pytest.raises(InputError, match=r"do not connect the sites: a, b \| c"):
            build(rtt, tput, Sites(defaults={"gpus": 8}), links=mode)


def test_units_scale_and_the_sites_subset():
    rtt, tput = three_sites()
    tput_mbps = parse_matrix(",a,b,c\na,,5000,\nb,4000,,2000\nc,,2000,\n", "t.csv")
    sites = parse_sites({"sites": [{"name": "c", "gpus": 4}, {"name": "b", "gpus": 8}]})
    built = build(rtt, tput_mbps, sites, unit="mbps", bandwidth_scale=3)
    assert [d["name"] for d in built.instance["domains"]] == ["c", "b"]  # the table's order, a left out
    assert built.instance["links"] == [{"a": "c", "b": "b", "bandwidth_gbps": 6.0, "latency_ms": 15.0}]


def test_defaults_are_written_and_said():
    rtt, tput = three_sites()
    built = build(rtt, tput, Sites(), gpus=16)
    inst = built.instance
    assert all(d["gpus"] == 16 for d in inst["domains"])
    assert inst["gpu"]["name"] == "A100-80GB" and inst["workload"]["model"] == "llama2-7b"
    assert sum(line.startswith("ASSUMED") for line in built.header) == 3


# -- parsing: what is refused, and how it is named ------------------------------------------
@pytest.mark.parametrize("text, where, what", [
    (",a,b\na,,1\nb,2,\nc,3,4\n", "line 4", "not square: row site 'c'"),
    (",a,b,c\na,,1,2\nb,2,,3\n", "line 1", "not square: 2 rows for 3 columns; no row for 'c'"),
    (",a,b\na,,1\nb,2\n", "line 3", "row 'b' has 1 values, the header names 2"),
    (",a,b\na,,-4\nb,2,\n", "line 2, row 'a', column 'b'", "negative value -4"),
    (",a,b\na,,fast\nb,2,\n", "line 2, row 'a', column 'b'", "not a number: 'fast'"),
    (",a,b\na,,inf\nb,2,\n", "line 2, row 'a', column 'b'", "not a finite number"),
    (",a,a\na,,1\n", "line 1", "site 'a' names two columns"),
    (",a,b\na,,1\na,,1\nb,1,\n", "line 3", "site 'a' names two rows"),
    ("# only a comment\n", None, "no header row"),
    ("src,dst,v\na,b,1\na,b,2\n", "line 3", "pair 'a' -> 'b' given twice"),
    ("src,dst,v\na,b\n", "line 2", "expected 3 cells"),
    ("src,dst,v\na,b,x\n", "line 2, row 'a' -> 'b', column value", "not a number"),
])
def test_bad_matrices_name_the_file_and_the_cell(text, where, what):
    with pytest.raises(InputError) as e:
        parse_matrix(text, "m.csv")
    assert e.value.file == "m.csv" and e.value.field == where
    assert what in e.value.message


def test_blank_na_and_comment_lines():
    m = parse_matrix("\ufeff# source: ping\n,a,b,c\n# a note\na,,NA,n/a\nb,1,,nan\nc,2,3,\n", "m.csv")
    assert m.values == {("b", "a"): 1.0, ("c", "a"): 2.0, ("c", "b"): 3.0}
    assert m.notes == ("source: ping", "a note") and m.form == "square"


def test_zero_throughput_is_refused_naming_the_pair():
    rtt = parse_matrix(",a,b\na,,1\nb,1,\n", "r.csv")
    tput = parse_matrix(",a,b\na,,0\nb,1,\n", "t.csv")
    with pytest.raises(InputError) as e:
        build(rtt, tput, Sites(defaults={"gpus": 1}))
    assert e.value.file == "t.csv" and "'a'" in e.value.field and "'b'" in e.value.field


def test_sites_table_errors_name_the_field():
    rtt, tput = three_sites()
    with pytest.raises(InputError) as e:
        build(rtt, tput, parse_sites({"sites": [{"name": "a", "gpus": 1}, {"name": "zz", "gpus": 1}]}, "s.toml"))
    assert (e.value.file, e.value.field) == ("s.toml", "sites[1].name") and "unknown site 'zz'" in e.value.message
    with pytest.raises(InputError) as e:
        build(rtt, tput, parse_sites({"sites": [{"name": "a", "gpus": -3}]}, "s.toml"))
    assert (e.value.file, e.value.field) == ("s.toml", "sites[0].gpus")
    with pytest.raises(InputError) as e:
        build(rtt, tput, parse_sites({"sites": [{"name": "a"}]}, "s.toml"))
    assert e.value.field == "sites[0].gpus" and "no GPU count" in e.value.message
    with pytest.raises(InputError) as e:
        parse_sites({"sites": [{"name": "a", "gpu": 8}]}, "s.toml")
    assert e.value.field == "sites[0].gpu" and "unknown key" in e.value.message
    with pytest.raises(InputError) as e:
        parse_sites({"domains": []}, "s.toml")
    assert e.value.field == "domains"
    with pytest.raises(InputError) as e:
        build(rtt, tput, parse_sites({"gpu": {"peak_tflops": 1, "memory_gb": 1, "mfu": 2}, "defaults": {"gpus": 1}},
                                     "s.toml"))
    assert (e.value.file, e.value.field) == ("s.toml", "gpu.mfu")


# -- the TOML writer --------------------------------------------------------------------
scalars = st.one_of(st.booleans(), st.integers(-2**62, 2**62), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=12))
keys = st.text(min_size=1, max_size=8)
tables = st.recursive(st.dictionaries(keys, st.one_of(scalars, st.lists(scalars, max_size=3)), max_size=4),
                      lambda inner: st.dictionaries(keys, st.one_of(inner, st.lists(inner, min_size=1, max_size=2)),
                                                    max_size=3), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(tables)
def test_toml_text_reads_back_the_same(data):
    def same(a, b):
        if isinstance(a, float):
            return isinstance(b, float) and (a == b and math.copysign(1, a) == math.copysign(1, b))
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return type(a) is type(b) and a == b

    assert same(tomllib.loads(toml_text(data, ["a header", "two\nlines"])), data)


# -- issue 28 item 15: units said, or plausible; a self pair alike in both forms ---------------
def test_a_site_with_itself_is_ignored_in_both_forms():
    square = parse_matrix(",a,b\na,0,10\nb,10,0\n", "r.csv")
    long = parse_matrix("src,dst,ms\na,a,0\na,b,10\nb,a,10\nb,b,0.01\n", "r.csv")
    assert square.values == long.values == {("a", "b"): 10.0, ("b", "a"): 10.0}
    tput_sq = parse_matrix(",a,b\na,40,5\nb,5,40\n", "t.csv")
    tput_long = parse_matrix("src,dst,gbps\na,a,40\na,b,5\nb,a,5\n", "t.csv")
    assert tput_sq.values == tput_long.values
    sites = Sites(defaults={"gpus": 8})
    assert build(square, tput_sq, sites).instance == build(long, tput_long, sites).instance


@pytest.mark.parametrize("rtt, tput, file, field, likely", [
    (",a,b\na,,0.02\nb,0.021,\n", ",a,b\na,,5\nb,5,\n", "r.csv", "latency", "--latency-unit s"),
    (",a,b\na,,20000\nb,21000,\n", ",a,b\na,,5\nb,5,\n", "r.csv", "latency", "--latency-unit us"),
    (",a,b\na,,20\nb,21,\n", "src,dst,value\na,b,4350\nb,a,4200\n", "t.csv", "throughput", "--throughput-unit mbps"),
])
def test_implausible_units_are_refused_naming_file_field_and_likely_unit(rtt, tput, file, field, likely):
    with pytest.raises(InputError) as e:
        build(parse_matrix(rtt, "r.csv"), parse_matrix(tput, "t.csv"), Sites(defaults={"gpus": 8}))
    assert (e.value.file, e.value.field) == (file, field)
    assert likely in e.value.message


def test_units_from_headers_and_flags():
    sites = Sites(defaults={"gpus": 8})
    rtt_s = parse_matrix("src,dst,rtt_s\na,b,0.02\nb,a,0.022\n", "r.csv")
    tput_mbps = parse_matrix("src\\dst (Mbit/s),a,b\na,,4350\nb,4200,\n", "t.csv")
    link = build(rtt_s, tput_mbps, sites).instance["links"][0]
    assert link["latency_ms"] == pytest.approx(10.5) and link["bandwidth_gbps"] == pytest.approx(4.2)
    # no unit in the headers: the flags say it, and then any magnitude is taken as said
    rtt = parse_matrix(",a,b\na,,0.02\nb,0.022,\n", "r.csv")
    tput = parse_matrix(",a,b\na,,4350\nb,4200,\n", "t.csv")
    link = build(rtt, tput, sites, latency_unit="s", unit="mbps").instance["links"][0]
    assert link["latency_ms"] == pytest.approx(10.5) and link["bandwidth_gbps"] == pytest.approx(4.2)
    assert build(rtt, parse_matrix(",a,b\na,,5\nb,5,\n"), sites, latency_unit="ms").instance["links"][0][
        "latency_ms"] == pytest.approx(0.0105)  # sub-millisecond, said so: kept
    with pytest.raises(InputError) as e:  # a header and a flag that disagree
        build(rtt_s, tput_mbps, sites, unit="gbps")
    assert e.value.file == "t.csv" and "Mbit/s" in e.value.message and "--throughput-unit" in e.value.message
