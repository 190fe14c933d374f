"""Issue 17: a corrupt, missing or undecodable policy file gives exit 2 naming the file."""

import pytest
from click.testing import CliRunner

from planner.cli import main

pytest.importorskip("sb3_contrib")


@pytest.mark.parametrize("zip_bytes, meta_bytes, named", [
    (b"\x00garbage", b"{}", "policy.zip"),          # not a zip
    (None, b"{}", "policy.zip"),                     # the zip is missing
    (b"\x00garbage", None, "policy.zip.json"),       # the metadata is missing
    (b"\x00garbage", b"\xff\xfe", "policy.zip.json"),  # undecodable metadata
    (b"\x00garbage", b"[1, 2", "policy.zip.json"),   # malformed JSON
    (b"\x00garbage", b"[1, 2]", "policy.zip.json"),  # not an object
])
def test_bad_policy_files_exit_2(tmp_path, zip_bytes, meta_bytes, named):
    z = tmp_path / "policy.zip"
    if zip_bytes is not None:
        z.write_bytes(zip_bytes)
    if meta_bytes is not None:
        (tmp_path / "policy.zip.json").write_bytes(meta_bytes)
    r = CliRunner().invoke(main, ["plan", "tiny-3dc", "--solver", "rl", "--policy", str(z), "-q"])
    assert r.exit_code == 2, r.output
    assert str(tmp_path / named) + ":" in r.output and "internal error" not in r.output
