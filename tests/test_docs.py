"""Every internal link and section reference in README.md and docs/ resolves.

Links: ``[text](target)`` whose target is a path in the repository (and, with
``#anchor``, a heading of that file).  Section references: "section 4",
"§2.1", "§9 item 13" point at a numbered heading (``## 4. ...``,
``### 2.1 ...``, ``## 2a. ...``) of the document they name: SPEC when
"SPEC" stands just before them, a document linked or named just before them
(``[model.md](model.md) section 3``, ``docs/model.md §9``), else the document
they are in.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT.parent / "shared" / "SPEC.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
SECTION = re.compile(r"(?:\b[Ss]ections? |§ ?)(\d+[a-z]?(?:\.\d+)*)")
DOC_NAME = re.compile(r"([\w./-]+\.md)\)?`?\s*$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def headings(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return [m.group(1) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.M)]


def numbers(path: Path) -> set[str]:
    """Section numbers of a document's headings: '4', '2.1', '2a'."""
    out = set()
    for h in headings(path):
        m = re.match(r"(\d+[a-z]?(?:\.\d+)*)\.?\s", h)
        if m:
            out.add(m.group(1))
    return out


def target_of(path: Path, before: str) -> Path:
    tail = before[-40:]
    if re.search(r"SPEC(?:\.md)?`?\]?(?:\([^)]*\))?'?s?\s*$", tail):
        return SPEC
    m = DOC_NAME.search(tail)
    if m:
        name = Path(m.group(1)).name
        for cand in (path.parent / m.group(1), ROOT / m.group(1), ROOT / "docs" / name):
            if cand.is_file():
                return cand
    return path


def references():
    for path in DOCS:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for m in LINK.finditer(text):
            yield "link", path, m.group(1) or m.group(2), None
        for m in SECTION.finditer(text):
            yield "section", path, m.group(1), text[: m.start()]


@pytest.mark.parametrize("kind,path,ref,before", list(references()),
                         ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "")
def test_reference_resolves(kind, path, ref, before):
    if kind == "link":
        if re.match(r"[a-z]+:", ref):  # http:, https:, mailto:
            return
        file, _, anchor = ref.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{path.name}: link to missing {ref}"
        if anchor and dest.suffix == ".md":
            assert anchor in {slug(h) for h in headings(dest)}, f"{path.name}: no heading #{anchor} in {dest.name}"
        return
    dest = target_of(path, before)
    if dest == SPEC and not SPEC.is_file():
        pytest.skip("shared/SPEC.md not beside the checkout")
    if dest == SPEC:
        have = {m.group(1) for m in re.finditer(r"^## (\d+)\.", SPEC.read_text(), flags=re.M)}
    else:
        have = numbers(dest)
    top = ref.split(".")[0] if dest == SPEC else ref
    assert top in have or ref in have, f"{path.name}: section {ref} of {dest.name} does not exist ({sorted(have)})"


def test_the_checker_catches_a_dangling_reference(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("# T\n\n## 1. One\n\nSee section 2 and [x](missing.md).\n")
    refs = [(m.group(1)) for m in SECTION.finditer(doc.read_text())]
    assert refs == ["2"] and "2" not in numbers(doc)
    assert [m.group(1) for m in LINK.finditer(doc.read_text())] == ["missing.md"]
