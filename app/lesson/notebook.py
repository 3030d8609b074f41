"""The lesson in a notebook: each chapter drawn by the app's own code, shown with IPython display.

``show(4)`` runs chapter 4's draw function — the one the app's lesson page calls — in
Streamlit's headless script runner (:class:`streamlit.testing.v1.AppTest`: no server, no
browser), as self-study draws it, then renders what it drew in the notebook: its markdown,
its plotly figures, its tables and code. So the chapters are written once, and the app and the
notebook are two hosts of the same text, computations and figures.

What is the app's alone becomes the notebook's equivalent:

- a control (a slider, a select box) takes its default, or the value given by keyword:
  ``show(1, context=8_192, budget=256)``, named by the last word of its label, without its
  parenthesis; the cell prints which settings the chapter has and their values;
- a "predict, then reveal" question shows its options, and its answer behind a disclosure;
- a button that opens the Step-through or Stale-spike page shows the notebook player
  (:class:`h2o.notebook.Player`) at the same settings; other pages' buttons, and the app's own
  rows of a control and a button (recomputing on the server), are left out.

It needs IPython, anywidget (``h2o.notebook``) and plotly; the app never imports it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import plotly.io
import streamlit.logger
from IPython.display import HTML, Markdown, display
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1.element_tree import Block, Element, Node

import h2o
from app import controls, pages, state
from app.lesson import OPENS, REVEALED, chapters

# The chapters run in a thread of this kernel, with no server: Streamlit warns of that, in words a
# student need not read (here for what the chapters' modules do on import; see also _run).
streamlit.logger.set_log_level("error")


#: What the script thread reads: the chapter to draw and the controls' values (set by :func:`show`
#: just before the run, in this process: the runner is a thread of the kernel).
_ASKED: dict[str, Any] = {}
#: What it hands back: the pages the chapter's buttons open, with their settings.
_DRAWN: dict[str, Any] = {}

SCRIPT = """
from app.lesson import notebook

notebook._draw()
"""
CONTROLS = ("select_slider", "selectbox", "slider", "radio")
#: Seconds a chapter may take (a cold start computes every sweep it shows).
TIMEOUT = 600


class _Every(set):
    """Every question "revealed" (what :func:`app.lesson.predict` asks of its set)."""

    def __contains__(self, qid: object) -> bool:
        return True


def _draw() -> None:
    """The script the runner executes: the asked chapter, every question revealed."""
    import streamlit as st

    number, overrides = _ASKED["number"], _ASKED["settings"]
    ss = st.session_state
    ss[REVEALED] = _Every()  # a notebook shows each answer (behind a disclosure)
    ss[OPENS] = {}
    for key, value in overrides.items():
        ss[key] = value
    chapter = next(c for c in chapters() if c.number == number)
    try:
        chapter.draw_whole()
    finally:
        _DRAWN["opens"] = dict(ss[OPENS])


def setting_name(label: str) -> str:
    """A control's keyword: the last word of its label, lower case, parentheses dropped
    ("Cache budget (slots)" → ``budget``)."""
    words = re.sub(r"\(.*?\)", "", label).split()
    return words[-1].lower() if words else label


def _run(number: int, keys: dict[str, Any]) -> AppTest:
    _ASKED.update(number=number, settings=keys)
    _DRAWN.clear()
    streamlit.logger.set_log_level("error")  # each run sets it from Streamlit's config anew
    at = AppTest.from_string(SCRIPT, default_timeout=TIMEOUT)
    # Streamlit's runner installs the page's script as ``__main__`` and leaves it there: the
    # kernel's own is put back, or pickling what a cell defined (and any process spawned later)
    # would look in the wrong module.
    main = sys.modules.get("__main__")
    try:
        at.run()
    finally:
        if main is not None:
            sys.modules["__main__"] = main
    streamlit.logger.set_log_level("error")
    for problem in at.exception:
        raise RuntimeError(f"chapter {number} failed: {problem.message}")
    return at


def controls_of(at: AppTest) -> dict[str, Element]:
    """The chapter's settings: keyword → its control (not the questions' radios, nor a control
    that acts through a button the notebook leaves out)."""
    out: dict[str, Element] = {}

    def walk(node: Node) -> None:
        if isinstance(node, Block):
            if _app_only(node):
                return
            for child in node.children.values():
                walk(child)
        elif node.type in CONTROLS and not str(node.key or "").startswith("lesson_q_"):
            out[setting_name(node.label)] = node

    walk(at.main)
    return out


def show(number: int, **settings: Any) -> None:
    """Draw chapter ``number`` of the app's lesson in this notebook, its controls at their
    defaults or at ``settings`` (``show(1, context=8_192)``); ``ValueError`` for a setting the
    chapter has not, or a value its control does not offer."""
    titles = {c.number: c.title for c in chapters()}
    if number not in titles:
        raise ValueError(f"the lesson has no chapter {number!r} (it has {sorted(titles)})")
    at = _run(number, {})
    found = controls_of(at)
    unknown = sorted(set(settings) - set(found))
    if unknown:
        have = ", ".join(found) or "none"
        raise ValueError(f"chapter {number} has no setting {unknown[0]!r} (its settings: {have})")
    if settings:
        at = _run(number, {found[name].key: value for name, value in settings.items()})
        found = controls_of(at)
        for name, value in settings.items():
            if found[name].value != value:
                offered = ", ".join(map(str, found[name].options))
                raise ValueError(
                    f"{name}={value!r} is not a value of chapter {number}'s "
                    f"{found[name].label!r} (it offers {offered})"
                )
    _render(at.main, _DRAWN.get("opens", {}))
    if found:
        said = ", ".join(f"{name}={c.value!r}" for name, c in found.items())
        offers = "; ".join(f"{name}: {', '.join(map(str, c.options))}" for name, c in found.items())
        print(
            f"Settings: {said} — change one with show({number}, {next(iter(found))}=…) ({offers})"
        )


def _app_only(block: Block) -> bool:
    """A row holding a button that opens no page: the app's own action (recomputing on its
    server), with the controls beside it."""
    return block.type == "flex_container" and any(
        n.type == "button" and not str(n.key or "").startswith("lesson_open_")
        for n in _leaves(block)
    )


def _leaves(node: Node) -> list[Node]:
    if isinstance(node, Block):
        return [leaf for child in node.children.values() for leaf in _leaves(child)]
    return [node]


#: A link to a chapter of the app's page ("[chapter 4, …](#the-window-is-load-bearing)"): the
#: notebook's headings have other anchors, in each front end its own, so it shows the words.
CHAPTER_LINK = re.compile(r"\[([^\]]+)\]\(#[\w-]+\)")


def _md(text: str) -> None:
    display(Markdown(CHAPTER_LINK.sub(r"\1", text)))


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" for line in text.splitlines())


def _render(node: Node, opens: dict[str, tuple[str, dict]]) -> None:
    if isinstance(node, Block):
        if _app_only(node):
            return
        if str(node.key or "").startswith("lesson_predict_"):
            _question(node)
            return
        if node.type == "expander":
            _md(f"**{node.label}**")
        for child in node.children.values():
            _render(child, opens)
        return
    render = _RENDER.get(node.type)
    if render is not None:
        render(node)
    elif node.type == "button" and node.key in opens:
        player = open_in_notebook(*opens[node.key])
        if player is not None:
            display(player)
    elif node.type not in (*CONTROLS, "button", "empty"):
        raise TypeError(f"the notebook cannot show a chapter's {node.type!r} element")


def _question(box: Block) -> None:
    """A "predict, then reveal" box: the question and its options, the answer folded."""
    nodes = _leaves(box)
    question = next(n.value for n in nodes if n.type == "markdown")
    options = next(n.options for n in nodes if n.type == "radio")
    answer = next(n.value for n in nodes if n.type in ("info", "success", "warning"))
    _md(
        f"{question}\n\n" + " · ".join(f"`{o}`" for o in options) + "\n\n"
        "<details><summary>The answer</summary>\n\n" + answer + "\n\n</details>"
    )


def _html(node: Element) -> None:
    body = node.proto.body
    if " hidden>" not in body:  # a chart's description is for screen readers, in the app
        display(HTML(body))


_RENDER: dict[str, Callable[[Any], None]] = {
    "markdown": lambda n: _md(n.value),
    "caption": lambda n: _md(n.value),
    "subheader": lambda n: _md(f"### {n.value}"),
    "info": lambda n: _md(_quote(n.value)),
    "success": lambda n: _md(_quote(n.value)),
    "warning": lambda n: _md(_quote(f"**Warning:** {n.value}")),
    "error": lambda n: _md(_quote(f"**Error:** {n.value}")),
    "html": _html,
    "code": lambda n: _md(f"```{n.language or ''}\n{n.value}\n```"),
    "dataframe": lambda n: display(n.value),
    "plotly_chart": lambda n: display(plotly.io.from_json(n.proto.spec)),
}


def open_in_notebook(page: str, values: dict[str, Any]) -> Any:
    """The notebook's player for a page a chapter's button opens (None: a page it has none of).
    The Step-through page plays the button's two policies at its settings; the Stale-spike page,
    H2O against Scissorhands on the stale-spike trace at its suggested settings."""
    from h2o.notebook import Player

    if page == pages.STEP_THROUGH:
        return Player(
            h2o.builtin_trace(values[state.TRACE]),
            values[state.POLICY_A],
            values[state.POLICY_B],
            budget=values[state.BUDGET],
            recent_window=values[state.WINDOW],
            sinks=values[state.SINKS],
            step=values[state.STEP],
        )
    if page == pages.STALE_SPIKE:
        trace = h2o.builtin_trace("stale-spike")
        fit = controls.defaults(trace)
        return Player(
            trace,
            "h2o",
            "scissorhands",
            budget=fit[state.BUDGET],
            recent_window=fit[state.WINDOW],
            top_k=fit["top_k"],
            step=values[state.SPIKE_STEP],
        )
    return None
