# ruff: noqa: E501  (the cells' code is indented here; lesson.ipynb holds it at 100 columns)
"""The lesson notebook's needle cells (``app/lesson/needle.py``): chapter 7's needle grid and
chapter 8, "Evict or compress?".

Both read the shipped result files through ``app/needle/data.py`` when the cell runs (they are
computed ahead and may be partial, missing or grow between runs): every number, ranking and
verdict is computed from whatever the files hold then, by the app's own functions.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable

from cell_kit import Cell, code, heading, md


def _pieces(text: str, indent: int = 16) -> str:
    """A long paragraph as adjacent string literals of at most ~80 columns, double-quoted as ruff writes them (the notebook's code
    stays within ruff's line length; the pieces join back to the text exactly)."""
    parts = textwrap.wrap(
        text, 76, drop_whitespace=False, replace_whitespace=False, break_on_hyphens=False
    )
    assert "".join(parts) == text
    return ("\n" + " " * indent).join(json.dumps(p, ensure_ascii=False) for p in parts)


def grid_cells(literal: Callable[..., str]) -> list[Cell]:
    """Chapter 7's needle grid (the app's ``grid_section``): its paragraph states the needle's
    code, so a code cell shows it (the text is still the app's, copied at build time)."""
    intro = literal("needle", "grid_section", "Does the model still *answer*")
    modes = literal("needle", "grid_section", "H2O runs here as its authors split")
    return [
        code(
            f"""
            say(
                {_pieces(intro)}
            )
            # The needle grid, computed ahead (traces/results/needle-grid.jsonl) and read as it is
            # now: a run still in progress leaves it partial, and every number below follows it.
            grid_path = needle_data.RESULTS_DIR / needle_data.GRID_FILE
            grid_read = needle_data.read_grid(grid_path)
            cells7 = grid_read.records
            if file_ok(grid_read, grid_path, "needle grid"):
                view7 = part_needle.grid_view(cells7)  # the app's figure and sentences
                display(view7.figure)
                say(
                    view7.full,
                    view7.scores,
                    view7.modes,
                    view7.swept,
                    {_pieces(modes, 20)},
                )
                print(view7.caption)
                # The family since H2O: each newer method at the lesson's budget beside SnapKV
                say(*view7.since)
            """
        ),
    ]


def chapter8(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(
            heading(titles, "evict_or_compress")
            + "\n\n"
            + literal("needle", "evict_or_compress", "Evict tokens, or keep them all")
        ),
        code(
            """
            # The frontier (traces/results/frontier.jsonl): perplexity at every KV memory, read as
            # it is now. The memory asked about is a 4-bit KIVI-style cache's own bytes per token
            # in each measurement (else the middle memory the file has).
            frontier_path = needle_data.RESULTS_DIR / needle_data.FRONTIER_FILE
            frontier_read = needle_data.read_frontier(frontier_path)
            what8 = (
                "frontier (perplexity against KV bytes per token for every eviction policy, "
                "KIVI-style bit width and their combinations)"
            )
            ppl8 = needle_frontier.ppl_points(frontier_read.records)
            acc8 = needle_frontier.accuracy_points(cells7, part_needle.LESSON_LENGTH)
            memory8 = needle_frontier.default_memory(ppl8)
            acc_memory8 = needle_frontier.default_memory(acc8)
            if not file_ok(frontier_read, frontier_path, what8):
                pass
            elif not ppl8:
                print(
                    f"The frontier file has no row measured on {needle_frontier.PPL_TEXT} at "
                    f"{needle_frontier.PPL_TOKENS:,} tokens yet."
                )
            else:
                lines8 = needle_frontier.figure_lines(ppl8, lambda p: f"perplexity {p.y:.2f}")
                display(
                    figures.frontier(
                        lines=lines8,
                        full=next(((p.x, p.y) for p in ppl8 if p.group == "full"), None),
                        limit=memory8,
                        title=f"Perplexity against KV memory — {needle_frontier.PPL_TEXT}, "
                        f"{needle_frontier.PPL_TOKENS:,} tokens",
                        ytitle="perplexity (lower is better)",
                        yformat="%{y:.2f}",
                        height=400,
                    )
                )
                said8 = []
                if memory8 is not None:
                    said8.append(needle_claims.verdict(ppl8, memory8, needle_claims.PERPLEXITY))
                if acc_memory8 is not None:
                    acc_said = needle_claims.verdict(acc8, acc_memory8, needle_claims.ACCURACY)
                    said8.append(
                        f"On the needle grid at {part_needle.LESSON_LENGTH:,} tokens: "
                        f"{acc_said[0].lower()}{acc_said[1:]}"
                    )
                if said8:
                    say(*said8)
            """
        ),
    ]
