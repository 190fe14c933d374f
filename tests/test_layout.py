"""The package layout (docs/architecture.md): families, one direction, no circles.

Every import in the package is read from the source, deferred ones inside
functions included, and resolved to the module it names.
"""

import ast
from pathlib import Path

import networkx as nx

import planner

PKG = Path(planner.__file__).resolve().parent
# lower families first; a family may import only itself and the ones before it
FAMILIES = ["problem", "scoring", "solvers", "dynamics", "presentation"]
TOP = ["cli", "bench"]


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Modules of the package that ``path`` imports, at any depth of its code."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{a.name}" for a in node.names] + [stem]
        else:
            continue
        for t in targets:
            # the longest prefix that is a module of the package
            parts = t.split(".")
            for k in range(len(parts), 0, -1):
                cand = ".".join(parts[:k])
                if cand in modules:
                    if cand != name:
                        out.add(cand)
                    break
    return out


def graph() -> nx.DiGraph:
    files = [p for p in PKG.rglob("*.py") if "_data" not in p.parts]
    modules = {module_name(p) for p in files}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for p in files:
        for t in imports_of(p, modules):
            g.add_edge(module_name(p), t)
    return g


def family(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_circles_deferred_imports_included():
    cycles = list(nx.simple_cycles(graph()))
    assert cycles == [], f"import circles: {cycles[:5]}"


def test_families_import_only_downwards():
    rank = {f: i for i, f in enumerate(FAMILIES)}
    bad = []
    for a, b in graph().edges:
        fa, fb = family(a), family(b)
        if fa in rank and fb in rank and rank[fb] > rank[fa]:
            bad.append(f"{a} -> {b}")
        if fa in rank and fb not in rank:  # a family module importing cli, bench or the package root
            bad.append(f"{a} -> {b}")
    assert bad == []


def test_top_level_is_small_and_families_say_what_they_hold():
    top = sorted(p.stem for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, top
    assert set(top) == set(TOP)
    for fam in FAMILIES:
        doc = ast.get_docstring(ast.parse((PKG / fam / "__init__.py").read_text()))
        assert doc and "may import" in doc, fam


def test_the_checker_sees_a_deferred_circle(tmp_path):
    # the checker itself: a deferred import back up is an edge, and makes a circle
    (tmp_path / "pkg").mkdir()
    a = tmp_path / "pkg" / "a.py"
    a.write_text("def f():\n    from .b import g\n    return g\n")
    b = tmp_path / "pkg" / "b.py"
    b.write_text("from . import a\n")
    global PKG
    old, PKG = PKG, tmp_path / "pkg"
    try:
        mods = {"pkg.a", "pkg.b"}
        assert imports_of(a, mods) == {"pkg.b"} and imports_of(b, mods) == {"pkg.a"}
    finally:
        PKG = old


def test_public_api_is_listed():
    for name in planner.__all__:
        assert hasattr(planner, name), name
    for name in ("plan", "evaluate", "explain", "load_instance", "Plan", "Instance", "SOLVERS"):
        assert name in planner.__all__
