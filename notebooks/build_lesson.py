"""Build ``notebooks/lesson.ipynb``, the app's lesson as a notebook (no outputs).

``python notebooks/build_lesson.py`` rewrites it; ``--check`` exits 1 if the committed notebook
is not what this script builds now (``tests/test_lesson_notebook.py`` runs the check).

The text stays the app's: a sentence that states a number is never written here — a code cell
calls the chapter's own sentence function (``app/lesson/part*.py``) on the numbers it has just
computed, and shows the result. The few paragraphs with no number that the app writes inline in
a chapter are copied at build time from the chapter's source (:func:`literal`: the build fails,
naming the paragraph, if the app no longer says it); the chapter numbers and titles come from the
chapters' own list. Markdown cells hold no number (:func:`check_no_numbers`), so every figure a
student reads was computed by a cell above it.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import nbformat
from lesson_cells import cells  # this directory (the script's own)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LESSON = ROOT / "app" / "lesson"
OUT = HERE / "lesson.ipynb"


def _tree(module: str) -> ast.Module:
    return ast.parse((LESSON / f"{module}.py").read_text(encoding="utf-8"))


def literal(module: str, func: str, key: str, until: str | None = None) -> str:
    """The paragraph of ``app/lesson/<module>.py`` that ``func`` writes containing ``key`` (cut
    after ``until`` if given): a string constant of the function's source, split at blank lines.
    ``SystemExit`` naming it if the chapter no longer says it."""
    fn = next(
        (n for n in ast.walk(_tree(module)) if isinstance(n, ast.FunctionDef) and n.name == func),
        None,
    )
    for node in ast.walk(fn) if fn is not None else ():
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for para in node.value.split("\n\n"):
                para = para.strip()
                if key in para and (until is None or until in para):
                    return para if until is None else para[: para.index(until) + len(until)]
    raise SystemExit(
        f"build_lesson: app/lesson/{module}.py {func}() no longer writes a paragraph with "
        f"{key!r}" + (f" and containing {until!r}" if until else "") + ": update "
        "notebooks/cells_chapters_*.py"
    )


def chapter_titles() -> dict[str, tuple[int, str]]:
    """Each chapter's draw function → (number, title), from the ``Chapter(...)`` lists."""
    out: dict[str, tuple[int, str]] = {}
    for module in ("chapters_1_3", "chapters_4_6", "chapters_7_10"):
        for node in ast.walk(_tree(module)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Chapter":
                number, title, _anchor, draw = node.args
                name = draw.attr if isinstance(draw, ast.Attribute) else draw.id
                out[name] = (number.value, title.value)
    return out


class Titles(dict):
    """The chapters' titles, remembering which the notebook's cells asked for."""

    def __init__(self, titles: dict[str, tuple[int, str]], used: set[str]) -> None:
        super().__init__(titles)
        self.used = used

    def __getitem__(self, draw: str) -> tuple[int, str]:
        self.used.add(draw)
        return super().__getitem__(draw)


def missing_chapters(titles: dict[str, tuple[int, str]], used: set[str]) -> list[str]:
    """The app's chapters the notebook has no section for (said when it is built)."""
    return [
        f"{n} · {t}"
        for draw, (n, t) in sorted(titles.items(), key=lambda kv: kv[1])
        if draw not in used
    ]


#: What may carry a digit in a markdown cell: names (H2O, SmolLM2-135M, float64, ...), the years
#: of citations and the chapter headings' numbers. Anything else is a number, and must be computed.
ALLOWED = re.compile(
    r"^#+ .*$|\b(?:et al\.,|NeurIPS|ICML|ICLR) \d{4}\b|[A-Za-z_][\w.]*\d[\w.-]*", re.M
)
NUMBER = re.compile(r"\d")


def check_no_numbers(source: str) -> None:
    """``ValueError`` if a markdown cell states a number (see :data:`ALLOWED`)."""
    rest = ALLOWED.sub("", source)
    m = NUMBER.search(rest)
    if m:
        near = rest[max(0, m.start() - 40) : m.end() + 40].replace("\n", " ")
        raise ValueError(f"a markdown cell states a number (compute it in a code cell): …{near}…")


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    }
    titles = chapter_titles()
    used: set[str] = set()
    for i, (kind, source) in enumerate(cells(literal, Titles(titles, used))):
        if kind == "markdown":
            check_no_numbers(source)
            cell = nbformat.v4.new_markdown_cell(source)
        else:
            cell = nbformat.v4.new_code_cell(source)
        cell.id = f"lesson-{i:02d}"  # stable ids: a rebuild of the same text is the same file
        nb.cells.append(cell)
    nbformat.validate(nb)
    for chapter in missing_chapters(titles, used):
        print(f"build_lesson: the app's chapter {chapter} has no section here", file=sys.stderr)
    return nb


def text() -> str:
    return nbformat.writes(build()) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if lesson.ipynb is out of date")
    args = ap.parse_args(argv)
    new = text()
    if args.check:
        old = OUT.read_text(encoding="utf-8") if OUT.is_file() else ""
        if old != new:
            print(f"{OUT} is out of date: run python notebooks/build_lesson.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(new, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
