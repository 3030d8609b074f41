"""The README's findings and the findings page's are the shipped files' own: the blocks between
their markers are exactly what ``python -m h2o.needle.findings`` prints from ``traces/results/``."""

from __future__ import annotations

from pathlib import Path

import pytest

from h2o.needle import findings
from h2o.stats import Paired, p_text, paired

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_and_the_findings_page_state_what_the_files_hold():
    results = ROOT / "traces" / "results"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert findings.between_markers(readme) == findings.headline(results)
    page = (ROOT / "docs" / "explanation" / "findings.md").read_text(encoding="utf-8")
    assert findings.between_markers(page) == findings.details(results)
    both = f"{findings.headline(results)}\n\n{findings.details(results)}"
    assert findings.findings(results) == both


def test_the_block_is_written_between_the_markers(tmp_path):
    p = tmp_path / "R.md"
    p.write_text(f"a\n{findings.START}\nold\n{findings.END}\nb\n")
    findings.write_block(p, "new | table")
    assert p.read_text() == f"a\n{findings.START}\nnew | table\n{findings.END}\nb\n"
    assert findings.between_markers(p.read_text()) == "new | table"
    p.write_text("no markers")
    with pytest.raises(ValueError, match="findings:start"):
        findings.write_block(p, "x")
    assert p.read_text() == "no markers"


def test_a_pair_is_said_to_differ_only_at_p_below_005(tmp_path):
    cells = []
    for i in range(6):
        for row, ok in (("kivi4", True), ("kivi2", i == 0)):
            cells.append(
                {
                    "row": row,
                    "length": 512,
                    "depth": 0,
                    "needle": f"n{i}",
                    "correct": ok,
                    "kv_bytes": 1,
                    "prompt_tokens": 1,
                }
            )
    (line,) = findings.comparisons(cells)
    assert "6 against 1 of 6 shared cells (5 right only under the first, 0 only under the" in line
    assert "p = 0.062" in line and line.endswith("not distinguishable with n = 6.")
    cells += [
        {
            "row": r,
            "length": 512,
            "depth": 25,
            "needle": "m",
            "correct": r == "kivi4",
            "kv_bytes": 1,
            "prompt_tokens": 1,
        }
        for r in ("kivi4", "kivi2")
    ]
    (line,) = findings.comparisons(cells)
    assert "p = 0.031" in line and line.endswith("`kivi4` answers more.")


def _cell(row: str, depth: int, needle: str, ok: bool, length: int = 1024) -> dict:
    return {
        "row": row,
        "length": length,
        "depth": depth,
        "needle": needle,
        "correct": ok,
        "kv_bytes": 1,
        "prompt_tokens": 1,
    }


def test_the_window_sweep_counts_each_budget_and_window():
    cells = [_cell("h2o@128:w12%", d, "a", d == 100) for d in (0, 50, 100)]
    cells += [_cell("h2o@128", d, "a", False) for d in (0, 50)]
    cells += [_cell("h2o@128:w45", 100, n, True) for n in "ab"]
    cells += [_cell("h2o@128:w45", 0, "a", True, length=512)]  # another length: not counted
    cells += [_cell("h2o@256:w50%", 0, "a", True)]  # one window alone: no line for 256
    head, rule, line = findings.window_sweep(cells)
    assert head == (
        "| H2O budget (1,024 tokens) | window 12% | 25% | 50% | 75% | 32 (default) | 45 (band) |"
    )
    assert rule == "|---|---|---|---|---|---|---|"
    # 12 % of 128 slots is 15 (rounded down); the class default is 32
    assert line == "| 128 | 1/3 (w 15) | – | – | – | 0/2 (w 32) | 2/2 (w 45) |"
    assert findings.window_sweep(cells[:3]) == []


def test_every_row_and_pair_the_findings_list_is_in_the_shipped_file():
    """A row listed but absent would drop out of the README silently (the table and the pairs
    print only the rows the file holds): each is there, with 3 needles a cell at the lengths
    compared, and the two rows of a pair share every cell compared."""
    cells = findings.read_lines(ROOT / "traces" / "results" / "needle-grid.jsonl")
    by_row: dict[str, set] = {}
    for c in cells:
        if c["length"] <= findings.MAX_LENGTH:
            by_row.setdefault(c["row"], set()).add((c["length"], c["depth"], c["needle"]))
    missing = [r for r in findings.TABLE_ROWS if r not in by_row]
    assert not missing, f"listed in TABLE_ROWS, not in the file: {missing}"
    for a, b, length in findings.PAIRS:
        assert a in by_row and b in by_row, (a, b)
        shared = {x for x in by_row[a] & by_row[b] if length is None or x[0] == length}
        assert len(shared) >= 15, (a, b, length, len(shared))  # 5 depths x 3 needles at least
    for (a, length), partners in findings.EQUAL_MEMORY.items():
        for b in (a, *partners):
            at = {x for x in by_row.get(b, ()) if x[0] == length}
            assert len(at) == 15, (b, length, len(at))  # 5 depths x 3 needles
    for row in findings.sweep_rows():
        if row.endswith(":w45") and row not in ("h2o@128:w45", "h2o@256:w45"):
            continue  # the band's window only where it is well inside the budget
        at = {x for x in by_row.get(row, ()) if x[0] == findings.SWEEP_LENGTH}
        assert len(at) == 15, (row, len(at))


def test_followup_rows_with_the_same_counts_share_a_line():
    def cell(row, i, a, b):
        return {"row": row, "length": 1024, "correct_first": a, "correct_second": b, "i": i}

    lines = [cell("full", i, True, i != 0) for i in range(6)]
    lines += [cell("kivi4", i, True, i != 5) for i in range(6)]  # other cells, same counts
    lines += [cell("snapkv@256", i, i < 2, i < 1) for i in range(6)]
    out = findings.followup(lines)
    assert len(out) == 2
    assert out[0].startswith("- `full`, `kivi4` (1,024 tokens): the first question 6 of 6")
    assert "the second 5 of 6" in out[0] and "(1 cell lost only the second, 0 only" in out[0]
    assert out[1].startswith("- `snapkv@256` (1,024 tokens): the first question 2 of 6")


def test_the_band_note_says_what_the_band_columns_window_is():
    """45 is the wider of the shipped band file's two middle values, not its median (42.5); the
    note reads both from the file and counts the layers a window that wide covers."""
    assert findings.band_window() == 45
    band = findings.read_band(ROOT / "traces" / "results" / findings.BAND_FILE)
    assert band is not None
    b = sorted(band)
    mid = (b[len(b) // 2 - 1], b[len(b) // 2])
    note = findings.band_note(band, findings.band_window())
    assert f"two middle values ({mid[0]} and {mid[1]})" in note and "wider" in note
    assert f"whose median is {(mid[0] + mid[1]) / 2:g}" in note
    assert f"in {sum(x <= 45 for x in b)} of the {len(b)} layers" in note
    assert note in findings.findings(ROOT / "traces" / "results")
    assert findings.band_note([10, 20, 30], 20).startswith(
        "The band column's window, 20 slots, is the median of the 3 per-layer"
    )
    assert "narrower of the two middle values (20 and 30)" in findings.band_note(
        [10, 20, 30, 40], 20
    )
    assert "is not the median of" in findings.band_note([10, 20, 30, 40], 21)
    assert findings.read_band(ROOT / "no-such-file.json") is None


def _docs() -> str:
    """docs/explanation/findings.md with its line breaks as spaces (a sentence may wrap)."""
    return " ".join((ROOT / "docs" / "explanation" / "findings.md").read_text().split())


def _bullet(text: str, start: str) -> str:
    return text[text.index(start) :].split(" - **", 1)[0]


def test_the_docs_band_numbers_are_the_band_files():
    band = sorted(findings.read_band(ROOT / "traces" / "results" / findings.BAND_FILE) or [])
    lo, hi = band[len(band) // 2 - 1], band[len(band) // 2]
    docs = _docs()
    said = _bullet(docs, "- **The window is the configuration that matters")
    assert "median attention band (45" not in docs  # the old claim: 45 is not the median
    assert (
        f"over the {len(band)} layers of `attention-band.json` the median is {(lo + hi) / 2:g}"
        in said
    )
    assert f"45 is the wider of the two middle values, {lo} and {hi}" in said and hi == 45
    assert f"the median over the {len(band)} layers is {(lo + hi) / 2:g}" in docs


def test_the_docs_second_question_paragraph_is_the_files():
    """The docs' paragraph on SnapKV and the second question, recounted from followup.jsonl with
    the library's exact paired test: no row's second question is said to differ from its first
    (none does at p < 0.05), and every count it gives is the file's."""
    lines = findings.read_lines(ROOT / "traces" / "results" / "followup.jsonl")

    def test_of(row: str) -> Paired:
        cs = [x for x in lines if x["row"] == row]
        assert {x["length"] for x in cs} == {1024}, row
        return paired(
            {i: bool(x["correct_first"]) for i, x in enumerate(cs)},
            {i: bool(x["correct_second"]) for i, x in enumerate(cs)},
        )

    said = _bullet(_docs(), "- **SnapKV answers more than StreamingLLM and H2O")
    snap = test_of("snapkv@256")
    assert not snap.differs  # otherwise the paragraph must say which answers more
    cells_ = "cell" if snap.only_a == 1 else "cells"
    assert (
        f"SnapKV at 256 slots answers the first question in {snap.right_a} of {snap.n} cells and "
        f"the second in {snap.right_b} ({snap.only_a} {cells_} lost only the second, {snap.only_b} "
        f"only the first; exact paired test {p_text(snap.p)}): not distinguishable with "
        f"n = {snap.n}." in said
    )
    assert "answers fewer" not in said and "where that ends" not in said
    rows = list(dict.fromkeys(x["row"] for x in lines))
    assert all(not test_of(r).differs for r in rows)  # "no row's first and second differ"
    assert {test_of(r).n for r in rows} == {6} and "6 cells a row at 1,024 tokens" in said
    for r in ("full", "kivi4"):  # "the first in every cell and the second in all but one"
        t = test_of(r)
        assert (t.right_a, t.right_b) == (t.n, t.n - 1), r
    for r in ("h2o@256:w50%", "h2o@256:w50%:prefill", "streaming-llm@256"):  # "answer neither"
        t = test_of(r)
        assert (t.right_a, t.right_b) == (0, 0), r
    assert "H2O with its authors' split and StreamingLLM at 256 answer neither" in said


def test_equal_memory_compares_only_rows_within_two_percent():
    """Made-up cells: kivi4 holds 1,000 bytes a token; snapkv@100 1,019 (within 2 %) and
    h2o@100:w50% 1,021 (not). Six cells each: kivi4 answers all, snapkv one, h2o none."""

    def cell(row, i, ok, kv):
        return {
            "row": row,
            "length": 512,
            "depth": 0,
            "needle": f"n{i}",
            "correct": ok,
            "kv_bytes": kv,
            "prompt_tokens": 1,
        }

    cells = [cell("kivi4", i, True, 1000) for i in range(6)]
    cells += [cell("snapkv@100", i, i == 0, 1019) for i in range(6)]
    cells += [cell("h2o@100:w50%", i, False, 1021) for i in range(6)]
    old = dict(findings.EQUAL_MEMORY)
    try:
        findings.EQUAL_MEMORY.clear()
        findings.EQUAL_MEMORY[("kivi4", 512)] = ("snapkv@100", "h2o@100:w50%")
        (line,) = findings.equal_memory(cells)
    finally:
        findings.EQUAL_MEMORY.clear()
        findings.EQUAL_MEMORY.update(old)
    assert line.startswith("- `kivi4` at 512 tokens, 1,000 KV bytes per token, 6/6; at its memory:")
    # 5 right only under kivi4, 0 only under snapkv: exact McNemar 2 / 2**5 = 0.0625
    assert (
        "`snapkv@100` 1/6 (1,019 B; 5 right only under `kivi4`, 0 only under `snapkv@100`" in line
    )
    assert "p = 0.062: not distinguishable with n = 6)" in line
    assert "`h2o@100:w50%` 1,021 B: not within 2%, not compared" in line
    assert "answers more" not in line


def test_the_docs_equal_memory_bullets_are_the_files():
    """docs/explanation/findings.md's two equal-memory bullets, recounted from the grid with an
    exact paired test on each pair's shared cells (h2o.stats, scipy)."""
    cells = findings.read_lines(ROOT / "traces" / "results" / "needle-grid.jsonl")

    def test_of(a: str, b: str, length: int) -> Paired:
        def oc(r):
            return {
                (c["depth"], c["needle"]): bool(c["correct"])
                for c in cells
                if c["row"] == r and c["length"] == length
            }

        return paired(oc(a), oc(b))

    def more(t: Paired) -> bool:
        return t.differs and t.only_a > t.only_b

    docs = _docs()
    assert "answer more than H2O**, in either mode, at 512, 1,024 and 2,048 tokens" in docs
    for (a, length), partners in findings.EQUAL_MEMORY.items():
        for b in partners:
            t = test_of(a, b, length)
            assert t.n == 15, (a, b, length)
            if a in ("kivi4", "kivi2") and b.startswith("h2o@"):
                assert more(t), (a, b, length, t.p)
            elif a in ("kivi4", "kivi2") and b.startswith("streaming-llm@"):
                # "more than StreamingLLM there, but for the 2-bit cache at 512 tokens"
                assert more(t) == ((a, length) != ("kivi2", 512)), (a, b, length, t.p)
            else:  # SnapKV beside a quantized cache, a combination beside its own method
                assert not t.differs, (a, b, length, t.p)
    assert "cache at 512 tokens, where the two are not distinguishable with n = 15" in docs
    assert "**Neither is distinguishable from SnapKV** at any of the three lengths" in docs

    def budgets(row: str) -> list[str]:
        return [
            findings.EQUAL_MEMORY[(row, n)][0].split("@")[1].split(":")[0]
            for n in (512, 1024, 2048)
        ]

    snap, h2o = budgets("snapkv@256+kivi4"), budgets("h2o@256:w50%+kivi4")
    assert f"SnapKV at {snap[0]}, {snap[1]} and {snap[2]} slots at 512, 1,024 and 2,048" in docs
    assert f"H2O at {h2o[0]}, {h2o[1]} and {h2o[2]}: within 2 %" in docs
