"""Regenerate the README's several-jobs row (issue 27) from the committed results files.

    .venv/bin/python benchmarks/readme_multijob.py [--check]

Reads the goal lines that ``benchmarks/multijob.py`` writes ("- met: maxmin: ... -- ...") from
the results files named in :data:`SOURCES` and puts a short table between the markers
``<!-- multijob:start -->`` and ``<!-- multijob:end -->`` of README.md; nothing else is touched.
With ``--check`` it only says (exit 1) whether the README is out of date.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import RESULTS, update_readme  # noqa: E402

START, END = "<!-- multijob:start -->", "<!-- multijob:end -->"
#: (results file, objective) pairs whose goal lines make the table, in this order
SOURCES = (("multijob_maxmin10.md", "maxmin"), ("multijob_deadline_cost.md", "deadline"),
           ("multijob_deadline_cost.md", "cost"), ("multijob_maxmin.md", "scale"))
GOALS = (re.compile(r'^- (met|not met|missed): (\w+): (.*?) -- (.*?)$', re.M),  # the benchmark's bullets
         re.compile(r'"(met|not met|missed): (\w+): (.*?) -- (.*?)"', re.S))  # quoted in a note, wrapped


def goal_lines(path: Path, objective: str) -> list[tuple[str, str, str]]:
    """(met or not, goal, measured) for each goal line of ``objective`` in ``path``: the
    benchmark's bullets, or its line quoted in a results note (which may wrap)."""
    out = []
    for m in (m for rx in GOALS for m in rx.finditer(path.read_text())):
        if m.group(2) == objective:
            goal, measured = (" ".join(m.group(k).split()) for k in (3, 4))
            if (m.group(1), goal, measured) not in out:
                out.append((m.group(1), goal, measured))
    return out


def command_of(path: Path) -> str:
    """The results file's command line (its first line, "Command: `...`")."""
    for line in path.read_text().splitlines():
        if line.startswith("Command:"):
            return line.split("`")[1]
    return "?"


def table() -> str:
    rows, files = [], []
    for name, objective in SOURCES:
        path = RESULTS / name
        if name not in files:
            files.append(name)
        for met, goal, measured in goal_lines(path, objective):
            rows.append(f"| {objective} | {goal} | {measured} | {met} |")
    cites = "; ".join(f"[{f}](benchmarks/results/{f}) (`{command_of(RESULTS / f)}`)" for f in files)
    return "\n".join([
        "Several jobs sharing gcp-16 (20-job mixes drawn from AcmeTrace's sizes) and edwc-300dc: "
        "`planner multiplan` against the baselines of issue 27, each goal as the benchmark scored it. "
        f"From {cites}.", "",
        "| objective | goal | measured | |", "|---|---|---|---|", *rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    return update_readme(START, END, table(), args.check, "several-jobs table is", "readme_multijob.py")


if __name__ == "__main__":
    sys.exit(main())
