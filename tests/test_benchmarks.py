"""BENCHMARKS.md stays one page of current figures, and every citation of it or of its
journal leads to a section that is there.

BENCHMARKS.md gives the current figure of each thing and links each to the section of
BENCHMARKS-journal.md, the dated history, it comes from. Code, comments and docs cite a
section in quotes after the file's name, by its title or the start of it
(`BENCHMARKS.md "Setup"`, `BENCHMARKS-journal.md, "Issue 34"`), so a section renamed,
moved to the journal or dropped fails here, naming the file that cites it.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from tests.doctext import REPO, titles
from tests.test_codemap import repo_files

PAGE = "BENCHMARKS.md"
JOURNAL = "BENCHMARKS-journal.md"
# One page: a figure measured again replaces its row, and the session goes to the journal.
PAGE_LINES = 200

_CITATION = re.compile(
    r"(BENCHMARKS(?:-journal)?\.md)(?:'s)?,? \(?((?:\"[^\"]+\"(?:,? and |, )?)+)")


def anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, only word characters, spaces (as
    hyphens) and hyphens kept."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(doc: str) -> set[str]:
    """Every heading's anchor in `doc`; a repeated one gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    for title in titles(doc):
        base = anchor(title)
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def citations(text: str) -> list[tuple[str, str]]:
    """(file, title) for each section of the page or the journal that `text` cites,
    read across line breaks and the comment markers (`#`) that start wrapped lines."""
    flat = " ".join(line.strip().lstrip("#").strip() for line in text.splitlines())
    return [(match[1], title) for match in _CITATION.finditer(flat)
            for title in re.findall(r"\"([^\"]+)\"", match[2])]


def names_a_section(doc: str, title: str) -> bool:
    return any(t == title or t.startswith(title) for t in titles(doc))


def test_the_page_is_one_page() -> None:
    lines = (REPO / PAGE).read_text().splitlines()
    assert len(lines) < PAGE_LINES, (
        f"{PAGE} has {len(lines)} lines: keep the current figures there, the sessions in "
        f"{JOURNAL}")


def test_the_pages_links_lead_to_sections_of_the_journal() -> None:
    links = re.findall(rf"\]\({re.escape(JOURNAL)}#([^)]+)\)", (REPO / PAGE).read_text())
    assert links, f"{PAGE} links to no section of {JOURNAL}"
    missing = sorted(set(links) - anchors(JOURNAL))
    assert not missing, f"{PAGE} links to sections {JOURNAL} does not have: {missing}"


def test_every_citation_names_a_section_that_is_there() -> None:
    this = PurePosixPath(__file__).relative_to(REPO)  # its examples are no citations
    files = [f for f in repo_files() if f != this and f.suffix in {"", ".md", ".py", ".txt"}]
    found, broken = 0, []
    for path in files:
        try:
            text = (REPO / path).read_text()
        except UnicodeDecodeError:
            continue
        for doc, title in citations(text):
            found += 1
            if not names_a_section(doc, title):
                broken.append(f"{path}: {doc} \"{title}\"")
    assert found, "no citation found: the reader of citations is broken"
    assert not broken, "citations of sections that are not there:\n" + "\n".join(broken)


def test_citations_are_read_across_wrapped_comment_lines() -> None:
    text = ('# downloads measured here (BENCHMARKS.md "Sharing\n'
            '# the cold builds"); its figures are in BENCHMARKS-journal.md ("The switch-over\n'
            'test"), and BENCHMARKS-journal.md, "The real node" and "Issue 34". Figures:\n'
            "BENCHMARKS.md, with no section.")
    assert citations(text) == [
        ("BENCHMARKS.md", "Sharing the cold builds"),
        ("BENCHMARKS-journal.md", "The switch-over test"),
        ("BENCHMARKS-journal.md", "The real node"),
        ("BENCHMARKS-journal.md", "Issue 34"),
    ]


def test_a_section_is_named_by_its_title_or_the_start_of_it() -> None:
    assert names_a_section(PAGE, "Setup")
    assert names_a_section(JOURNAL, "Issue 34")
    assert not names_a_section(PAGE, "Issue 34")
    assert anchor("Results: N = 5,000, 16 workers, at idle") == (
        "results-n--5000-16-workers-at-idle")
