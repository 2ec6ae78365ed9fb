"""The repo's own documents as tests read them: the section titled X of a Markdown file
(README.md or a file of docs/), and the rows of a table in it.

Every test that keeps a document true reads it through `section`, naming the file that
holds the section, so a section moved between files is one path to change and a
missing one fails with the file and title it looked for.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_HEADING = re.compile(r"(#+) (.*)")


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, title) of each heading, skipping fenced code blocks, whose
    `# comment` lines are not headings."""
    found, fenced = [], False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := _HEADING.fullmatch(line)):
            found.append((index, len(match[1]), match[2]))
    return found


def titles(doc: str) -> list[str]:
    """The title of every heading of `doc` (a path relative to the repo), in order."""
    return [text for _, _, text in _headings((REPO / doc).read_text().splitlines())]


def section(doc: str, title: str, *, subsections: bool = True) -> str:
    """The text under the heading `title` (of any level) in `doc`, a path relative to the
    repo (or absolute), up to the next heading of the same or a higher level, so with its
    subsections; without them, up to the next heading of any level."""
    lines = (REPO / doc).read_text().splitlines()
    headings = _headings(lines)
    starts = [(index, level) for index, level, text in headings if text == title]
    assert len(starts) == 1, f"{doc} has {len(starts)} sections titled {title!r}, not one"
    [(start, level)] = starts
    end = next((i for i, lvl, _ in headings
                if i > start and (lvl <= level or not subsections)), len(lines))
    return "\n".join(lines[start + 1:end]) + "\n"


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the Markdown tables in `text`, without header rows and
    separator lines."""
    rows, header = [], True
    for line in text.splitlines():
        if not line.startswith("|"):
            header = True
        elif re.fullmatch(r"\|[-:| ]+\|", line):
            continue
        elif header:
            header = False
        else:
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows
