"""The cells of ``lesson.ipynb``, chapter by chapter (``build_lesson.py`` writes the notebook).

A code cell computes with the library and shows the app's own figures (``app/figures``) and
sentences (``app/lesson``); a markdown cell holds only text with no number in it. The chapters
follow the app's lesson (``app/lesson/chapters_1_3.py`` … ``chapters_7_10.py``), where each
figure, question and sentence below comes from; the notebook adds the player widget where the
app has a button that opens the Step-through page, and a last chapter that plays the student's
own policy.
"""

from __future__ import annotations

from collections.abc import Callable

from cell_kit import Cell
from cells_chapters_1_3 import chapter1, chapter2, chapter3, setup
from cells_chapters_4_6 import chapter4, chapter5, chapter6
from cells_chapters_7_10 import chapter7, chapter9, chapter10
from cells_needle import chapter8

CHAPTERS = (
    chapter1, chapter2, chapter3, chapter4, chapter5, chapter6, chapter7, chapter8, chapter9,
    chapter10,
)  # fmt: skip


def cells(literal: Callable[..., str], titles: dict[str, tuple[int, str]]) -> list[Cell]:
    """Every cell of the notebook, in order."""
    out = setup()
    for chapter in CHAPTERS:
        out += chapter(literal, titles)
    return out
