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
GOALS = (re.compile(r'^- \**(met|not met|missed)\**: (\w+): (.*?) -- (.*?)$', re.M),  # the benchmark's bullets
         re.compile(r'"\**(met|not met|missed)\**: (\w+): (.*?) -- (.*?)"', re.S))  # quoted in a note, wrapped
COMMAND = re.compile(r"^Command: `([^`]*)`", re.M)


def goal_lines(path: Path, objective: str) -> list[tuple[str, str, str, str]]:
    """(met or missed, goal, measured, command) for each goal line of ``objective`` in ``path``:
    the benchmark's bullets, or its line quoted in a results note (which may wrap); the command
    is the last ``Command:`` line before it (a results file may hold several runs)."""
    text = path.read_text()
    out = []
    for m in (m for rx in GOALS for m in rx.finditer(text)):
        if m.group(2) == objective:
            goal, measured = (" ".join(m.group(k).split()) for k in (3, 4))
            cmds = [c.group(1) for c in COMMAND.finditer(text, 0, m.start())]
            row = (m.group(1), goal, measured, cmds[-1] if cmds else "?")
            if row not in out:
                out.append(row)
    return out


def table() -> str:
    rows, cites = [], []
    for name, objective in SOURCES:
        for met, goal, measured, command in goal_lines(RESULTS / name, objective):
            rows.append(f"| {objective} | {goal} | {measured} | {met} |")
            cite = f"[{name}](benchmarks/results/{name}) (`{command}`)"
            if cite not in cites:
                cites.append(cite)
    return "\n".join([
        "Several jobs sharing gcp-16 (20-job mixes drawn from AcmeTrace's sizes) and edwc-300dc: "
        "`planner multiplan` against the baselines of issue 27, each goal as the benchmark scored it. "
        f"From {'; '.join(cites)}.", "",
        "| objective | goal | measured | |", "|---|---|---|---|", *rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    return update_readme(START, END, table(), args.check, "several-jobs table is", "readme_multijob.py")


if __name__ == "__main__":
    sys.exit(main())
