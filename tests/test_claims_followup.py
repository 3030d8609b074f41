"""The second question's reader and sentences (h2o/needle/results.py, app/needle/claims.py):
every sentence checked against counts and tests computed here by hand — on a fixture of the
file's schema and, when it is there, on the shipped file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_claims_needle import positions_text, sign_by_hand

from app.needle import claims
from h2o.needle import results

SHIPPED = Path(__file__).resolve().parents[1] / "traces" / "results" / results.FOLLOWUP_FILE


def line(row: str, n: int, first: bool, second: bool, **kw) -> dict:
    return {
        "row": row,
        "family": row,
        "kind": "snapkv" if row.startswith("snapkv") else "full",
        "policy": None,
        "budget": None,
        "allocation": None,
        "bits": None,
        "sinks": 0,
        "length": 1024,
        # every cell at a position of its own (the unit of the tests), unless a test says not
        "depth_first": 5 * n,
        "depth_second": 100 - 5 * n,
        "first": f"a{n}",
        "second": f"b{n}",
        "produced_first": "1",
        "produced_second": "2",
        "correct_first": first,
        "correct_second": second,
        "logprob_first": -0.5,
        "logprob_second": -1.5,
        "held_second": None,
        "kv_bytes": 100,
        "prompt_tokens": 1000,
        "seconds": 1.0,
    } | kw


def write(path: Path, lines: list[dict], extra: str = "") -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + extra)
    return path


def fixture() -> list[dict]:
    out = [line("full", n, True, True) for n in range(6)]
    out += [line("snapkv@256", n, True, n == 0) for n in range(6)]  # 5 lost: p = 0.0625
    out += [line("snapkv@64", n, n < 6, False) for n in range(8)]  # 6 of 8 lost: p = 0.03125
    # ten positions and more: the rows a sign test may compare
    out += [line("h2o@64", n, n < 9, n < 2) for n in range(10)]  # 7 of 10 lost: p = 0.0156
    out += [line("h2o@128", n, n < 4, n < 2) for n in range(12)]  # 2 of 12 lost: p = 0.5
    out += [line("kivi4", n, True, True) for n in range(10)]  # none lost
    return out


#: A comparison rests on at least 10 positions (the unit); on fewer the rows are not compared.
MIN_POSITIONS = 10


def position(key: tuple) -> tuple:
    """A follow-up cell's position: its prompt's length and the two facts' depths (the cell key
    is (length, depth of the first, depth of the second, first fact, second fact))."""
    length, depth_first, depth_second, _first, _second = key
    return (length, depth_first, depth_second)


def check(cells: list, rows: list[str]) -> None:
    said = claims.followup_sentences(cells, rows)
    assert len(said) == len([r for r in rows if any(c.row == r for c in cells)])
    for r, text in zip([r for r in rows if any(c.row == r for c in cells)], said, strict=True):
        cs = [c for c in cells if c.row == r]
        first = {c.key: c.correct_first for c in cs}
        second = {c.key: c.correct_second for c in cs}
        assert f"the first question {positions_text(first, position)}" in text
        assert f"the second {positions_text(second, position)}" in text
        n, more_first, more_second, p = sign_by_hand(first, second, position)
        assert f"positions {more_first} won by the first, {more_second} by the second" in text
        assert f"{n - more_first - more_second} tied of {n}" in text
        a, b = sum(first.values()), sum(second.values())
        if n < MIN_POSITIONS:
            unit = "position" if n == 1 else "positions"
            assert f"not compared ({n} {unit}, fewer than {MIN_POSITIONS})" in text
            assert "answered fewer" not in text and "answered more" not in text
            assert "same count" not in text and "p = " not in text
        elif p < 0.05:
            assert f"the second answered {'fewer' if more_first > more_second else 'more'}" in text
        elif a == b:
            assert "the same count" in text
        else:
            where = "position" if n == 1 else "positions"
            assert f"with n = {n} {where}" in text and "answered fewer" not in text
    summary = claims.followup_summary(cells, rows)
    for r in rows:
        cs = [c for c in cells if c.row == r]
        lost = sum(c.correct_first and not c.correct_second for c in cs)
        if cs and lost:
            assert f"{claims.esc(r)} in {lost} of {len(cs)}" in summary


def test_the_sentences_by_hand_on_the_fixture(tmp_path):
    loaded = results.read_followup(write(tmp_path / "f.jsonl", fixture()))
    cells = loaded.records
    rows = ["full", "snapkv@256", "snapkv@64", "h2o@64", "h2o@128", "kivi4"]
    check(cells, rows)
    said = claims.followup_sentences(cells, rows)
    # fewer than 10 positions: not compared, whatever the counts (6 of 8 lost is p = 0.031)
    assert "not compared (6 positions, fewer than 10)" in said[0]
    assert "not compared (6 positions, fewer than 10)" in said[1]
    assert "not compared (8 positions, fewer than 10)" in said[2] and "fewer (" not in said[2]
    assert "the second answered fewer" in said[3] and "p = 0.016" in said[3]
    assert "not distinguishable with n = 12 positions" in said[4] and "p = 0.500" in said[4]
    assert "the same count" in said[5]
    assert claims.followup_summary(cells, rows) == (
        "Answered the first question and missed the second: snapkv@256 in 5 of 6, "
        "snapkv@64 in 6 of 8, h2o@64 in 7 of 10 and h2o@128 in 2 of 12; full and kivi4 in none."
    )
    assert claims.followup_summary([], rows) == "The file has no follow-up cell for these rows yet."


def test_facts_asked_at_one_position_are_one_observation(tmp_path):
    """The same six cells, their facts all asked at one position: the second question lost in
    5 cells is one position, not five observations — not compared (fewer than 10 positions)."""
    lines = [line("snapkv@256", n, True, n == 0, depth_first=25, depth_second=75) for n in range(6)]
    said = claims.followup_sentences(
        results.read_followup(write(tmp_path / "f.jsonl", lines)).records, ["snapkv@256"]
    )[0]
    assert "positions 1 won by the first, 0 by the second, 0 tied of 1" in said
    assert "not compared (1 position, fewer than 10)" in said


def test_the_shipped_file(tmp_path):
    if not SHIPPED.is_file():
        pytest.skip("no shipped followup.jsonl in this copy")
    loaded = results.read_followup(SHIPPED)
    assert loaded.n_problems == 0 and loaded.records
    rows = list(dict.fromkeys(c.row for c in loaded.records))
    check(loaded.records, rows)
    # a step reads a part of what it holds only where the row selects what it reads (Quest)
    for c in loaded.records:
        partial = c.kind == "quest"
        assert (c.read_bytes is not None and 0 < c.read_bytes < c.kv_bytes) == partial, c


def test_bad_lines_are_skipped_and_named(tmp_path):
    bad = [line("full", 0, True, True, correct_second="yes"), line("full", 1, True, True)]
    bad.append(line("full", 2, True, True, read_bytes=-1))
    loaded = results.read_followup(write(tmp_path / "f.jsonl", bad, "{not json\n"))
    assert len(loaded.records) == 1
    assert loaded.n_problems == 3
    assert "'correct_second' must be true or false" in loaded.problems[0]
    assert "read_bytes" in loaded.problems[1]
    # a repeated cell keeps the later line
    again = [line("full", 1, True, True), line("full", 1, False, False)]
    loaded = results.read_followup(write(tmp_path / "g.jsonl", again))
    assert loaded.repeated == 1 and loaded.records[0].correct_first is False
    # a label that would be markup is escaped in the sentences
    evil = [line("<b>x</b>*", 0, True, False)]
    cells = results.read_followup(write(tmp_path / "h.jsonl", evil)).records
    assert "<b>" not in claims.followup_sentences(cells, ["<b>x</b>*"])[0]
