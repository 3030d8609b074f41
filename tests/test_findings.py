"""The README's findings are the shipped files' own: the block between its markers is exactly
what ``python -m h2o.needle.findings`` prints from ``traces/results/``."""

from __future__ import annotations

from pathlib import Path

from h2o.needle import findings

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_states_what_the_files_hold():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert findings.in_readme(readme) == findings.findings(ROOT / "traces" / "results")


def test_the_block_is_written_between_the_markers(tmp_path):
    p = tmp_path / "R.md"
    p.write_text(f"a\n{findings.START}\nold\n{findings.END}\nb\n")
    findings.write_readme(p, "new | table")
    assert p.read_text() == f"a\n{findings.START}\nnew | table\n{findings.END}\nb\n"
    assert findings.in_readme(p.read_text()) == "new | table"


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
