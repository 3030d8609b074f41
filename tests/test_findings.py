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
