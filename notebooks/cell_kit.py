"""What every cell module of the lesson notebook uses: markdown and code cells, headings."""

from __future__ import annotations

from textwrap import dedent

Cell = tuple[str, str]


def md(text: str) -> Cell:
    return ("markdown", dedent(text).strip())


def code(src: str) -> Cell:
    return ("code", dedent(src).strip())


def heading(titles: dict[str, tuple[int, str]], draw: str) -> str:
    number, title = titles[draw]
    return f"## {number} · {title}"


PLAYER_HOWTO = (
    "The player: the same one as the app's Step-through page. Click it to give it the keys "
    "(← / → step, Shift+← / → ten steps, Space plays); until then they are the notebook's. "
    "Stepping and playing run in your browser; the kernel hears from it only when you near the "
    "edge of the steps it has loaded, and sends the next ones."
)
