"""Where benchmark tables go: benchmarks/results/NAME.md, headed by the command."""

from __future__ import annotations

import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def save(name: str, lines: list[str], argv=None) -> Path:
    script = Path(sys.argv[0]).name if argv is None else f"{name}.py"
    args = " ".join(sys.argv[1:] if argv is None else argv)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}.md"
    out.write_text(f"Command: `python benchmarks/{script} {args}`".rstrip() + "\n\n" + "\n".join(lines) + "\n")
    return out


SUITE_MAX_DOMAINS = 40


def suite_instances() -> list[str]:
    """The packaged instances of the standard suite: all but the national-scale ones
    (more than ``SUITE_MAX_DOMAINS`` domains: edwc-120dc, edwc-300dc, azure-zones),
    which ``benchmarks/scale.py`` measures on its own."""
    from planner import load_instance
    from planner.problem.io import available

    return [n for n in available("instances") if len(load_instance(n).domains) <= SUITE_MAX_DOMAINS]
