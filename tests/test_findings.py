"""The README's findings and the findings page's are the shipped files' own: the blocks between
their markers are exactly what ``python -m h2o.needle.findings`` prints from ``traces/results/``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from h2o.model.rows import Row
from h2o.needle import findings
from h2o.needle.results import (
    Cell,
    FollowUpCell,
    FrontierRow,
    attention_band,
    read_followup,
    read_frontier,
    read_grid,
    read_json,
)
from h2o.stats import Paired, p_text, paired, sign_test

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_readme_and_the_findings_page_state_what_the_files_hold():
    results = ROOT / "traces" / "results"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert findings.between_markers(readme) == findings.headline(results)
    page = (ROOT / "docs" / "explanation" / "findings.md").read_text(encoding="utf-8")
    assert findings.between_markers(page) == findings.details(results)
    ppl = findings.between_markers(page, findings.PPL_START, findings.PPL_END)
    assert ppl == findings.perplexity(results) != ""
    every = f"{findings.headline(results)}\n\n{findings.details(results)}\n\n{ppl}"
    assert findings.findings(results) == every


def test_the_findings_read_the_files_with_the_apps_checks(tmp_path):
    """A line the app would skip (a field of the wrong type, not an object) is not counted in
    the findings either: the README says what the pages show."""
    shipped = (ROOT / "traces" / "results" / "needle-grid.jsonl").read_text(encoding="utf-8")
    kivi2 = [s for s in shipped.splitlines() if '"row": "kivi2"' in s]
    missed = next(s for s in kivi2 if '"correct": false' in s)
    clean, damaged = tmp_path / "clean", tmp_path / "damaged"
    for folder, extra in ((clean, []), (damaged, [missed.replace("false", '"true"'), "[1, 2]"])):
        folder.mkdir()
        (folder / "needle-grid.jsonl").write_text("\n".join([*kivi2, *extra]) + "\n")
    assert "`kivi2`" in findings.headline(clean)
    assert findings.headline(damaged) == findings.headline(clean)


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
    # the page's second block, beside the first: each is written between its own markers
    both = f"{findings.START}\na\n{findings.END}\n{findings.PPL_START}\nold\n{findings.PPL_END}\n"
    p.write_text(both)
    findings.write_block(p, "new", findings.PPL_START, findings.PPL_END)
    assert findings.between_markers(p.read_text(), findings.PPL_START, findings.PPL_END) == "new"
    assert findings.between_markers(p.read_text()) == "a"
    p.write_text(f"{findings.START}\na\n{findings.END}\n")
    with pytest.raises(ValueError, match="perplexity:start"):
        findings.write_block(p, "x", findings.PPL_START, findings.PPL_END)


def _line(row: str, length: int, depth: int, needle: str, ok: bool, kv_bytes: int = 1) -> Cell:
    """A cell of ``row``, answered right or not (the fields the findings do not read fixed)."""
    return Cell(
        row, row, "policy", None, None, None, None, 0, length, depth, needle, "q", "1", "1", ok,
        -1.0, None, kv_bytes, 1.0, prompt_tokens=1,
    )  # fmt: skip


def test_a_pair_is_said_to_differ_only_at_p_below_005():
    """The unit is the position: three needles at a position are one observation. Five positions,
    each with three needles kivi4 answers and kivi2 does not: 15 discordant cells (exact McNemar
    2 / 2**15) but 5 positions won of 5 — p = 2 / 2**5 = 0.0625, the smallest a sign test on 5
    positions can give: the two rows are not compared (fewer than 10 positions)."""
    five = [(512, d) for d in (0, 25, 50, 75, 100)]
    cells = [
        _line(r, n, d, x, r == "kivi4") for n, d in five for x in "abc" for r in ("kivi4", "kivi2")
    ]
    (line,) = findings.comparisons(cells)
    assert "3 against 0" not in line and "15 against 0 of 15 shared needles at 5 positions" in line
    assert "(positions 5 won by the first, 0 by the second, 0 tied of 5)" in line
    assert "sign test" not in line and "answers more" not in line
    assert line.endswith("not compared (5 positions, fewer than 10).")
    # five more positions (another length), each won: 10 of 10, p = 2 / 2**10 < 0.05
    more = [(1024, d) for d in (0, 25, 50, 75, 100)]
    cells += [_line(r, n, d, "a", r == "kivi4") for n, d in more for r in ("kivi4", "kivi2")]
    (line,) = findings.comparisons(cells)
    assert "at 10 positions" in line and f"exact sign test {p_text(2 / 2**10)}" in line
    assert line.endswith("`kivi4` answers more.")
    # kivi2 answers too at six of the ten: 4 won, 6 tied, p = 2 / 2**4: not distinguishable
    ties = {(1024, d) for d in (0, 25, 50, 75, 100)} | {(512, 0)}
    cells = [c for c in cells if c.row == "kivi4" or (c.length, c.depth) not in ties]
    cells += [
        _line("kivi2", n, d, x, True)
        for n, d in five + more
        if (n, d) in ties
        for x in ("abc" if n == 512 else "a")
    ]
    (line,) = findings.comparisons(cells)
    assert "4 won by the first, 0 by the second, 6 tied of 10" in line
    assert line.endswith("not distinguishable with n = 10 positions.")


def _cell(row: str, depth: int, needle: str, ok: bool, length: int = 1024) -> Cell:
    return _line(row, length, depth, needle, ok)


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
    cells = read_grid(ROOT / "traces" / "results" / "needle-grid.jsonl").records
    by_row: dict[str, set] = {}
    for c in cells:
        if c.length <= findings.MAX_LENGTH:
            by_row.setdefault(c.row, set()).add((c.length, c.depth, c.needle))
    missing = [r for r in findings.TABLE_ROWS if r not in by_row]
    assert not missing, f"listed in TABLE_ROWS, not in the file: {missing}"
    for a, b, length in findings.PAIRS:
        assert a in by_row and b in by_row, (a, b)
        shared = {x for x in by_row[a] & by_row[b] if length is None or x[0] == length}
        assert len(shared) >= 15, (a, b, length, len(shared))  # 5 depths x 3 needles at least
    for (a, length), partners in findings.EQUAL_MEMORY.items():
        for b in (a, *partners):
            at = {x for x in by_row.get(b, ()) if x[0] == length}
            first = {x for x in at if x[1] in findings.GRID_DEPTHS}
            assert len(first) == 15, (b, length, len(first))  # 5 depths x 3 needles
            assert len(at - first) <= 8, (b, length)  # one needle at each depth between
    for row in findings.sweep_rows():
        if row.endswith(":w45") and row not in ("h2o@128:w45", "h2o@256:w45"):
            continue  # the band's window only where it is well inside the budget
        at = {
            x
            for x in by_row.get(row, ())
            if x[0] == findings.SWEEP_LENGTH and x[1] in findings.GRID_DEPTHS
        }
        assert len(at) == 15, (row, len(at))  # the sweep's positions: its first five depths


def test_followup_rows_with_the_same_counts_share_a_line():
    """Six cells a row at two positions (the facts at 25 and 75 %, or 75 and 25 %), three pairs
    of facts at each: counted by position, and rows whose counts are the same share a line."""

    def cell(row, i, a, b):
        d = (25, 75) if i < 3 else (75, 25)
        return FollowUpCell(
            row, row, "policy", None, None, None, None, 0, 1024, *d, f"f{i}", f"s{i}", a, b,
            -1.0, -1.0, 1, 1,
        )  # fmt: skip

    lines = [cell("full", i, True, i != 0) for i in range(6)]
    lines += [cell("kivi4", i, True, i != 5) for i in range(6)]  # the other position: same counts
    lines += [cell("snapkv@256", i, i < 2, i < 1) for i in range(6)]
    out = findings.followup(lines)
    assert len(out) == 2
    assert out[0].startswith(
        "- `full`, `kivi4` (1,024 tokens): the first question 6 of 6 needles, at 2 of 2 positions"
    )
    assert "the second 5 of 6 needles, at 2 of 2 positions" in out[0]
    # two positions: fewer than 10, so no test and no verdict
    assert out[0].endswith(
        "(positions 1 won by the first, 0 by the second, 1 tied of 2; "
        "not compared (2 positions, fewer than 10))."
    )
    assert out[1].startswith("- `snapkv@256` (1,024 tokens): the first question 2 of 6 needles")
    assert "at 1 of 2 positions" in out[1]  # both first answers at the first position


def test_the_band_note_says_what_the_band_columns_window_is():
    """45 is the wider of the shipped band file's two middle values, not its median (42.5); the
    note reads both from the file and counts the layers a window that wide covers."""
    assert findings.band_window() == 45
    shipped = attention_band(read_json(ROOT / "traces" / "results" / findings.BAND_FILE))
    assert shipped is not None
    band = shipped["band"]
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
    assert read_json(ROOT / "no-such-file.json") is None and attention_band(None) is None


def _docs() -> str:
    """docs/explanation/findings.md with its line breaks as spaces (a sentence may wrap)."""
    return " ".join((ROOT / "docs" / "explanation" / "findings.md").read_text().split())


def _bullet(text: str, start: str) -> str:
    return text[text.index(start) :].split(" - **", 1)[0]


def test_the_docs_band_numbers_are_the_band_files():
    band = sorted(
        attention_band(read_json(ROOT / "traces" / "results" / findings.BAND_FILE))["band"]
    )
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


def _grid_test(
    a: str, b: str, length: int | None = None, depths: tuple[int, ...] | None = None
) -> Paired:
    """The sign test over positions of two rows of the shipped grid (at ``length``, or at every
    length up to the findings' longest; at ``depths`` only, or at every depth)."""
    cells = read_grid(ROOT / "traces" / "results" / "needle-grid.jsonl").records

    def oc(r: str) -> dict:
        return {
            (c.length, c.depth, c.needle): c.correct
            for c in cells
            if c.row == r
            and c.length <= findings.MAX_LENGTH
            and (length is None or c.length == length)
            and (depths is None or c.depth in depths)
        }

    return paired(oc(a), oc(b))


def test_the_docs_snapkv_paragraph_is_the_files():
    """The docs' paragraph on SnapKV, recounted by position from the grid and followup.jsonl:
    SnapKV over H2O's prefill mode as the test says, over StreamingLLM only if it does, and the
    second question said to differ from the first for no row (no test on its positions can)."""
    said = _bullet(_docs(), "- **SnapKV answers more than H2O's prefill mode at the same budget**")
    pre = _grid_test("snapkv@256", "h2o@256:w50%:prefill")
    assert pre.differs and pre.more_a > pre.more_b
    assert f"positions {pre.more_a} won and {pre.more_b} lost of {pre.n}" in said
    assert f"exact sign test {p_text(pre.p)}" in said
    sl = _grid_test("snapkv@256", "streaming-llm@256")
    assert sl.differs and sl.more_a > sl.more_b  # "It answers more than StreamingLLM too"
    assert f"**It answers more than StreamingLLM too** ({sl.more_a} won, {sl.more_b} lost, " in said
    assert f"{p_text(sl.p)}): with 15 positions" in said
    first = _grid_test("snapkv@256", "streaming-llm@256", depths=findings.GRID_DEPTHS)
    assert first.n == 15 and not first.differs  # "the test could not decide it"
    assert f"could not decide it ({first.more_a} won, {first.more_b} lost, {p_text(first.p)})" in (
        " ".join(said.split())
    )
    assert "more than StreamingLLM and H2O" not in _docs()  # the old cell-unit verdict
    lines = read_followup(ROOT / "traces" / "results" / "followup.jsonl").records

    def test_of(row: str) -> Paired:
        cs = [x for x in lines if x.row == row]
        assert {x.length for x in cs} == {1024}, row
        return paired(
            {x.key: x.correct_first for x in cs},
            {x.key: x.correct_second for x in cs},
            findings.followup_position,
        )

    snap = test_of("snapkv@256")
    assert not snap.decidable  # otherwise the paragraph must give the test and its verdict
    needles = snap.needles
    assert (
        f"SnapKV at 256 slots answers the first question in {snap.right_a} of {needles} cells and "
        f"the second in {snap.right_b} ({snap.counts()}): not compared, with {snap.n} positions."
        in " ".join(said.split())
    )
    assert "answers fewer" not in said and "where that ends" not in said
    rows = list(dict.fromkeys(x.row for x in lines))
    assert all(not test_of(r).decidable for r in rows)  # "too few to compare"
    assert {test_of(r).needles for r in rows} == {6} and {test_of(r).n for r in rows} == {2}
    assert "6 cells a row at 1,024 tokens, 2 positions: too few to compare" in " ".join(
        said.split()
    )
    for r in ("full", "kivi4"):  # "the first in every cell and the second in all but one"
        t = test_of(r)
        assert (t.right_a, t.right_b) == (t.needles, t.needles - 1), r
    for r in ("h2o@256:w50%", "h2o@256:w50%:prefill", "streaming-llm@256"):  # "answer neither"
        t = test_of(r)
        assert (t.right_a, t.right_b) == (0, 0), r
    assert "H2O with its authors' split and StreamingLLM at 256 answer neither" in said


def test_equal_memory_compares_only_rows_within_two_percent():
    """Made-up cells: kivi4 holds 1,000 bytes a token; snapkv@100 1,019 (within 2 %) and
    h2o@100:w50% 1,021 (not). Six cells each: kivi4 answers all, snapkv one, h2o none."""

    def cell(row, i, ok, kv):  # six positions, one needle each
        return _line(row, 512, i * 10, f"n{i}", ok, kv)

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
    # six positions: fewer than the 10 a comparison needs, so no test and no verdict
    assert "`snapkv@100` 1/6 (1,019 B; not compared (6 positions, fewer than 10))" in line
    assert "sign test" not in line
    assert "no verdict" not in line
    assert "`h2o@100:w50%` 1,021 B: not within 2%, not compared" in line
    assert "answers more" not in line


@pytest.mark.slow
def test_the_docs_equal_memory_bullets_are_the_files():
    """docs/explanation/findings.md's equal-memory bullets, recounted from the grid by position:
    over the three lengths (each beside its own equal-memory budget) the verdicts the bullet
    states are the sign test's, on all the positions and on the grid's first 15; a length alone
    has the positions the bullet says."""
    cells = read_grid(ROOT / "traces" / "results" / "needle-grid.jsonl").records

    def pooled(a: str, method: str, depths: tuple[int, ...] | None = None) -> Paired:
        oa: dict = {}
        ob: dict = {}
        for (row, length), partners in findings.EQUAL_MEMORY.items():
            if row != a:
                continue
            (b,) = [p for p in partners if findings._budgetless(p) == method]
            for r, o in ((a, oa), (b, ob)):
                o.update(
                    {
                        (c.length, c.depth, c.needle): c.correct
                        for c in cells
                        if c.row == r
                        and c.length == length
                        and (depths is None or c.depth in depths)
                    }
                )
        return paired(oa, ob)

    def more(t: Paired) -> bool:
        return t.differs and t.more_a > t.more_b

    docs = " ".join(_docs().split())
    for a in ("kivi4", "kivi2"):
        for m in ("h2o@B:w50%", "h2o@B:w50%:prefill", "streaming-llm@B", "snapkv@B"):
            assert more(pooled(a, m)), (a, m)  # "answer more than H2O ... and than SnapKV"
    assert "**At equal memory the paper's 4-bit and 2-bit caches answer more than H2O**" in docs
    n = pooled("kivi4", "h2o@B:w50%").n
    assert all(
        pooled(a, m).n == n
        for a in ("kivi4", "kivi2")
        for m in ("h2o@B:w50%", "h2o@B:w50%:prefill", "streaming-llm@B", "snapkv@B")
    )
    assert f"over the {n} positions of 512, 1,024 and 2,048 tokens" in docs
    first, two = pooled("kivi2", "snapkv@B", findings.GRID_DEPTHS), pooled("kivi2", "snapkv@B")
    assert first.n == 15 and not first.differs  # "was not distinguishable" on the first 15
    assert (
        f"not distinguishable from SnapKV (positions {first.more_a} won, {first.more_b} lost, "
        f"{p_text(first.p)})" in docs
    )
    assert f"({two.more_a} won, {two.more_b} lost of {two.n}, {p_text(two.p)})" in docs
    per_length = {
        _grid_test(a, b, length).n
        for (a, length), partners in findings.EQUAL_MEMORY.items()
        if a in ("kivi4", "kivi2")
        for b in partners
        if abs(
            findings._bytes_per_token(cells, b, length)
            - findings._bytes_per_token(cells, a, length)
        )
        <= findings.EQUAL_TOLERANCE * findings._bytes_per_token(cells, a, length)
    }
    assert per_length == {n // 3}, per_length
    assert f"A length alone has {n // 3} positions" in docs
    snap, h2o_ = pooled("snapkv@256+kivi4", "snapkv@B"), pooled("h2o@256:w50%+kivi4", "h2o@B:w50%")
    assert more(snap) and h2o_.more_a == h2o_.more_b == 0
    assert (
        f"SnapKV at its memory (positions {snap.more_a} won, {snap.more_b} lost, "
        f"{p_text(snap.p)}), H2O with 4 bits exactly what H2O" in docs
    )
    assert f"over the {snap.n} positions SnapKV with 4 bits answers more" in docs

    def budgets(row: str) -> list[str]:
        return [
            findings.EQUAL_MEMORY[(row, n)][0].split("@")[1].split(":")[0]
            for n in (512, 1024, 2048)
        ]

    snap, h2o = budgets("snapkv@256+kivi4"), budgets("h2o@256:w50%+kivi4")
    assert f"SnapKV at {snap[0]}, {snap[1]} and {snap[2]} slots at 512, 1,024 and 2,048" in docs
    assert f"H2O at {h2o[0]}, {h2o[1]} and {h2o[2]}: within 2 %" in docs


def test_the_docs_say_no_more_than_the_evidence():
    """The family paragraphs, recounted by position: KVzip over SnapKV and SnapKV over Expected
    Attention as the sign test says; Quest compared at about the bytes a step of it reads (not
    at SnapKV's budget); no claim about a method that one small model at short prompts cannot
    carry, and no reason stated that was not measured."""
    docs = _docs()
    assert "does not find a fact stated once" not in docs  # said of the method, from one model
    cells = read_grid(ROOT / "traces" / "results" / "needle-grid.jsonl").records
    ea = {c.length for c in cells if c.row.startswith("expected-attention@")}
    assert f"**On SmolLM2-135M at up to {max(ea):,} tokens, Expected Attention found no" in docs
    assert "bound is loose" not in docs  # no measurement behind it
    for b in (128, 256):
        kv = _grid_test(f"kvzip@{b}", f"snapkv@{b}")
        assert kv.differs and kv.more_a > kv.more_b
        assert f"{kv.more_a} won and {kv.more_b} lost" in docs and p_text(kv.p) in docs
        e = _grid_test(f"snapkv@{b}", f"expected-attention@{b}")
        assert e.differs and e.more_a > e.more_b and p_text(e.p) in docs
    q = _grid_test("quest@128", "snapkv@256")
    assert not q.differs
    assert (
        f"positions {q.more_a} won and {q.more_b} lost of {q.n} (exact sign test {p_text(q.p)}), "
        f"not distinguishable with n = {q.n}" in docs
    )

    quest = {(c.length, c.depth, c.needle) for c in cells if c.row == "quest@128"}

    def per_token(row: str, key: str) -> float:  # mean over Quest's cells
        xs = [
            getattr(c, key) / c.prompt_tokens
            for c in cells
            if c.row == row and (c.length, c.depth, c.needle) in quest
        ]
        assert len(xs) == len(quest), row
        return sum(xs) / len(xs)

    read, held = per_token("quest@128", "read_bytes"), per_token("snapkv@256", "kv_bytes")
    assert abs(read - held) <= 0.02 * held  # "about what SnapKV at 256 holds"
    assert f"a step reads {read:,.0f} bytes a token, about what SnapKV at 256 holds" in docs
    assert f"({held:,.0f})" in docs
    w = _grid_test("h2o@256:w50%", "h2o@256")
    assert not w.differs and "half the budget as window answers more cells" not in docs
    flat = " ".join(docs.split())
    assert f"{w.more_a} won and {w.more_b} lost of {w.n} (exact sign test {p_text(w.p)})" in flat


# -- perplexity over a text (frontier.jsonl) -------------------------------------------------------
FRONTIER = ROOT / "traces" / "results" / "frontier.jsonl"


def _ppl(records, row: str) -> dict[str, FrontierRow]:
    """A row's lines at the findings' 2,048 tokens, by text."""
    return {r.text: r for r in records if r.row == row and r.tokens == 2048}


def _fr(row: str, text: str, ppl: float, per_token: float = 1000.0, share=None) -> FrontierRow:
    """A frontier line of ``row`` on ``text`` (the fields the findings do not read fixed)."""
    return FrontierRow(
        row, row, "policy", None, None, None, None, 0, text, 2048, ppl, int(per_token * 2048),
        per_token, 1.0, read_share=share,
    )  # fmt: skip


def test_the_perplexity_lines_change_when_the_file_changes(tmp_path):
    """The block's values are the file's: the shipped lines on lighthouse.txt, then the same
    with kivi2 read lower than the rows at its memory, then with a second text on which one row
    has no line."""
    shipped = [
        s
        for s in FRONTIER.read_text(encoding="utf-8").splitlines()
        if json.loads(s)["text"] == "lighthouse.txt"
    ]
    by_row = {json.loads(s)["row"]: json.loads(s) for s in shipped}
    kivi2, h2o = by_row["kivi2"], by_row["h2o@415:w50%"]
    head = f"`kivi2` ({kivi2['kv_bytes_per_token']:,.0f} KV bytes per token)"
    beside = f"`h2o@415:w50%` ({h2o['kv_bytes_per_token']:,.0f} B) "
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "frontier.jsonl").write_text("\n".join(shipped) + "\n")
    before = findings.perplexity(folder)
    side = "lower" if h2o["perplexity"] < kivi2["perplexity"] else "higher"
    assert f"{head} {kivi2['perplexity']:.2f};" in before
    assert f"{beside}{h2o['perplexity']:.2f}, {side} than `kivi2` on 1 of 1 text;" in before

    edited = []
    for s in shipped:
        d = json.loads(s)
        if d["row"] == "kivi2":
            d["perplexity"] = 1.5  # lower than any row at its memory
        edited.append(json.dumps(d))
    (folder / "frontier.jsonl").write_text("\n".join(edited) + "\n")
    after = findings.perplexity(folder)
    assert f"{head} 1.50;" in after and f"{head} {kivi2['perplexity']:.2f};" not in after
    assert f"{beside}{h2o['perplexity']:.2f}, higher than `kivi2` on 1 of 1 text;" in after
    assert ", lower than `kivi2`" not in after

    # a second text: every line again but the first H2O row at kivi2's memory, 1.0 higher
    other = []
    for s in edited:
        d = json.loads(s)
        if d["row"] != "h2o@415:w50%":
            other.append(
                json.dumps({**d, "text": "another.txt", "perplexity": d["perplexity"] + 1})
            )
    (folder / "frontier.jsonl").write_text("\n".join(edited + other) + "\n")
    two = findings.perplexity(folder)
    assert "the first 2,048 tokens of another.txt and lighthouse.txt (each row's values" in two
    assert f"{head} 2.50 and 1.50;" in two
    line = next(x for x in two.splitlines() if x.startswith("- `kivi2`"))
    assert f"{beside}{h2o['perplexity']:.2f} on lighthouse.txt (no line on another.txt)" in line
    assert "higher than `kivi2` on 1 of 1 text;" in line  # compared on the text both have
    assert "higher than `kivi2` on 2 of 2 texts." in line  # streaming-llm@436 on both
    assert "No sign test on 2 texts or fewer can reach p < 0.05 (the smallest p on 2 is 0.50)" in (
        two
    )


def test_perplexity_counts_texts_and_says_a_sign_test_only_where_one_could_decide():
    """Made-up lines on six texts: kivi2 at 10 on each; an eviction row lower on five and equal
    on one (a sign test over 5 discordant texts cannot reach p < 0.05), another lower on all six
    (2 / 2**6 < 0.05: its p is said, still no "beats"), a third outside 2 % of kivi2's bytes on
    one text and missing on another."""
    texts = [f"t{i}.txt" for i in range(6)]
    recs = [_fr("kivi2", t, 10.0) for t in texts]
    recs += [_fr("h2o@415:w50%", t, 10.0 if t == "t0.txt" else 9.0) for t in texts]
    recs += [_fr("streaming-llm@436", t, 8.0, 1010.0) for t in texts]
    old = findings.PPL_AT_MEMORY
    try:
        findings.PPL_AT_MEMORY = (("kivi2", ("h2o@415:w50%", "streaming-llm@436", "snapkv@9")),)
        recs += [_fr("snapkv@9", t, 11.0, 1030.0 if t == "t1.txt" else 1000.0) for t in texts[1:]]
        (line,) = findings.ppl_at_memory(recs)
    finally:
        findings.PPL_AT_MEMORY = old
    assert line.startswith("- `kivi2` (1,000 KV bytes per token) 10.00 on each text; at its")
    assert "`h2o@415:w50%` (1,000 B) 10.00, 9.00, 9.00, 9.00, 9.00 and 9.00, lower than " in line
    p5, p6 = sign_test(5, 0), sign_test(6, 0)
    assert p5 >= 0.05 > p6
    assert f"lower than `kivi2` on 5 of 6 texts (equal on 1), exact sign test p = {p5:.3f};" in line
    assert (
        "`streaming-llm@436` (1,010 B) 8.00 on each text, lower than `kivi2` on 6 of 6 texts, "
        in (line)
    )
    assert f"exact sign test p = {p6:.3f};" in line
    assert "`snapkv@9` (1,000–1,030 B) 11.00 on t1.txt, " in line and "(no line on t0.txt)" in line
    assert "not within 2% of its bytes on t1.txt, higher than `kivi2` on 4 of 4 texts." in line
    # four texts compared, where six could decide: that line says a test on 4 cannot
    assert line.endswith(
        "No sign test on 4 texts or fewer can reach p < 0.05 (the smallest p on "
        f"4 is {2 / 2**4:.2f}): values text by text, and no verdict."
    )
    assert "beats" not in line
    full = findings.ppl_full([_fr("full", t, 5.0) for t in texts])
    assert "No sign test" not in full and "5.00 on each text" in full


def test_every_perplexity_row_the_findings_list_is_in_the_shipped_file():
    """A row listed but absent would drop out of the page silently: each is in the frontier
    file at 2,048 tokens, every row beside another holds its bytes within 2 % on the shipped
    text, and the rows at the same slots have the same budget."""
    recs = read_frontier(FRONTIER).records
    listed = [
        *(r for a, bs in findings.PPL_AT_MEMORY for r in (a, *bs)),
        *(r for g in findings.PPL_SAME_SLOTS for r in g),
        *findings.PPL_READ,
        "full",
    ]
    missing = [r for r in listed if not _ppl(recs, r)]
    assert not missing, f"listed, not in the frontier file: {missing}"
    for a, partners in findings.PPL_AT_MEMORY:
        for b in partners:
            for t, x in _ppl(recs, b).items():
                ref = _ppl(recs, a)[t].kv_bytes_per_token
                assert abs(x.kv_bytes_per_token - ref) <= findings.EQUAL_TOLERANCE * ref, (a, b, t)
    for g in findings.PPL_SAME_SLOTS:
        assert len({Row.parse(r).budget for r in g}) == 1, g
    assert all(_ppl(recs, r)[t].read_share is not None for r in findings.PPL_READ for t in
               _ppl(recs, r))  # fmt: skip


def _mostly(b: dict[str, FrontierRow], a: dict[str, FrontierRow], lower: bool) -> bool:
    """``b`` reads more of the texts both have lower (or higher) than ``a`` than the other way."""
    shared = [t for t in b if t in a]
    lo = sum(b[t].perplexity < a[t].perplexity for t in shared)
    hi = sum(b[t].perplexity > a[t].perplexity for t in shared)
    return lo > hi if lower else hi > lo


def test_the_docs_perplexity_prose_is_the_files():
    """The findings page's prose about perplexity, recounted from the frontier file: the
    directions it states hold on more of the texts than not, and it types no perplexity of the
    file outside the generated block (a typed number goes stale when a text is added)."""
    recs = read_frontier(FRONTIER).records
    docs = _docs()
    ppl = dict(findings.PPL_AT_MEMORY)
    # "At the 2-bit cache's memory, H2O ... and StreamingLLM read the frontier's texts with a
    # lower perplexity than the 2-bit cache"; "at the 4-bit cache's memory the 4-bit cache's
    # perplexity is the lower"
    assert "**Perplexity can say the opposite.** At the 2-bit cache's memory, H2O" in docs
    assert [Row.parse(b).policy for b in ppl["kivi2"]] == ["h2o", "streaming-llm"]
    assert all(_mostly(_ppl(recs, b), _ppl(recs, "kivi2"), lower=True) for b in ppl["kivi2"])
    assert all(_mostly(_ppl(recs, b), _ppl(recs, "kivi4"), lower=False) for b in ppl["kivi4"])
    # "On perplexity the combination is lower than eviction at its own memory ... at each budget"
    stacked = [a for a in ppl if a.endswith("+kivi4")]
    assert len(stacked) >= 2 and "On perplexity the combination is lower than eviction" in docs
    assert all(_mostly(_ppl(recs, b), _ppl(recs, a), lower=False) for a in stacked for b in ppl[a])
    # "Quest's perplexity is higher than the full cache's"
    assert "Quest's perplexity is higher than the full cache's" in docs
    assert all(_mostly(_ppl(recs, q), _ppl(recs, "full"), lower=False) for q in findings.PPL_READ)
    # "Expected Attention is the lowest of them" at 128 slots; "H2O at its memory is the lower
    # at every budget"
    (group,) = findings.PPL_SAME_SLOTS
    ea = "expected-attention@128"
    # "At 128 slots a head K-norm, KVzip and H2O hold the same bytes a token"
    assert "At 128 slots a head K-norm, KVzip and H2O hold the same bytes a token" in docs
    assert {Row.parse(r).budget for r in group} == {128}
    held = {r.kv_bytes_per_token for g in group if g != ea for r in _ppl(recs, g).values()}
    assert len(held) == 1, held
    assert all(_mostly(_ppl(recs, ea), _ppl(recs, r), lower=True) for r in group if r != ea)
    assert "and Expected Attention is the lowest of them" in docs
    eas = [a for a in ppl if a.startswith("expected-attention@")]
    assert len(eas) == 4 and "H2O at its memory is the lower at every budget" in docs
    assert all(_mostly(_ppl(recs, b), _ppl(recs, a), lower=True) for a in eas for b in ppl[a])
    page = (ROOT / "docs" / "explanation" / "findings.md").read_text(encoding="utf-8")
    block = findings.between_markers(page, findings.PPL_START, findings.PPL_END)
    prose = page.replace(block, "")
    typed = sorted(
        {f"{r.perplexity:.2f}" for r in recs} & set(re.findall(r"(?<![\d.])\d+\.\d\d(?!\d)", prose))
    )
    assert not typed, f"perplexities typed in the page's prose: {typed}"
