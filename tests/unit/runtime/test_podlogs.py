"""Cleaning and bounding a log's last lines (controller/runtime/podlogs.py), without a
server; the read itself runs on the real node (tests/cluster/test_log_snippet.py)."""

from __future__ import annotations

import pytest

from controller.runtime.podlogs import ELLIPSIS, bound, clean, tail_bytes


def test_clean_drops_colours_cursor_moves_and_titles_keeping_the_text() -> None:
    raw = (b"\x1b[1;31mERROR\x1b[0m: build failed\n"
           b"\x1b]0;window title\x07plain\n"
           b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ text\n"
           b"\x1b[2K\x1b[1Gcleared\n"
           b"\x1bMreverse index\n")
    assert clean(raw) == ["ERROR: build failed", "plain", "link text", "cleared",
                          "reverse index"]


def test_clean_shows_a_redrawn_line_as_its_last_drawing_and_crlf_as_lf() -> None:
    raw = b"progress 10%\rprogress 50%\rprogress 100%\nwindows line\r\nlast"
    assert clean(raw) == ["progress 100%", "windows line", "last"]


def test_clean_removes_controls_and_bidirectional_overrides() -> None:
    raw = ("bell\x07 back\x08space nul\x00 del\x7f tab\tend "
           "c1\u009b31mred \u202egnp.exe\u202c iso\u2066late\u2069\n").encode()
    (line,) = clean(raw)
    assert line == "bell backspace nul del tab end c1red gnp.exe isolate"
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in line)


def test_clean_decodes_bad_utf8_as_replacement_and_drops_trailing_blank_lines() -> None:
    assert clean(b"caf\xc3\xa9 \xff\xfe ok   \n\n  \n") == ["café \ufffd\ufffd ok"]
    assert clean(b"") == []
    assert clean(b"\n\n") == []


def test_clean_keeps_blank_lines_between_text() -> None:
    assert clean(b"a\n\nb\n") == ["a", "", "b"]


def test_bound_keeps_the_last_lines_within_the_line_bound() -> None:
    lines = [f"line {i}" for i in range(1, 31)]
    assert bound(lines, 20, 10_000) == tuple(lines[10:])
    assert bound(lines, 0, 10_000) == ()


def test_bound_keeps_the_last_lines_within_the_byte_bound_newlines_counted() -> None:
    lines = ["aaaa", "bbbb", "cccc"]  # 4 bytes each, 1 for each newline between two
    assert bound(lines, 20, 9) == ("bbbb", "cccc")
    assert bound(lines, 20, 14) == ("aaaa", "bbbb", "cccc")
    assert bound(lines, 20, 13) == ("bbbb", "cccc")


def test_bound_counts_bytes_not_characters() -> None:
    lines = ["é" * 10, "€" * 10]  # 20 and 30 bytes
    assert bound(lines, 20, 51) == tuple(lines)
    assert bound(lines, 20, 50) == ("€" * 10,)


def test_a_last_line_longer_than_the_bound_keeps_its_end_marked() -> None:
    (kept,) = bound(["start " + "x" * 5000 + " the error"], 20, 100)
    assert kept.startswith(ELLIPSIS) and kept.endswith(" the error")
    assert len(kept.encode()) <= 100


@pytest.mark.parametrize("limit", range(0, 12))
def test_tail_bytes_never_breaks_a_character_nor_exceeds_the_limit(limit: int) -> None:
    cut = tail_bytes("añ€𝄞z" * 3, limit)
    assert len(cut.encode()) <= limit
    cut.encode("utf-8")  # a whole string of whole characters
    assert "\ufffd" not in cut
    assert tail_bytes("short", limit + 5) == "short"
