"""The guided lesson: the card's story in chapters, for projecting and for self-study.

Each chapter is a function that draws itself (a few sentences, one live figure, at most two
controls, sometimes a "predict, then reveal" question) into the current container; the page
(``app/views/lesson.py``) shows them one per screen (presenter mode, driven by the keyboard or a
clicker) or all in order (self-study). Answers are kept in the session, so a question answered
once stays answered, in either mode.

In presenter mode a chapter shows its **core** on one 1280×720 screen — its question (the
"predict" question where there is one), its figure and the sentence that answers it — and
everything else in one collapsed "More: …" expander after the navigation, so a lecturer can skip
it. The chapters say which is which with :func:`more` (what goes there), :func:`say` (paragraphs
whose first ones are the core) and :func:`projected` (a figure's presenter size); each is a
no-op in self-study, which shows every chapter exactly as it reads top to bottom.

The chapters live in the modules named by their numbers: ``chapters_1_3.py`` (why evict, sinks
and recency, heavy hitters), ``chapters_4_6.py`` (the window, the stale spike, the family) and
``chapters_7_10.py`` (a real model, evict or compress?, when (not) to use H2O, your turn; the
needle grid and chapter 8 live in ``needle.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import streamlit as st

from app import state

T = TypeVar("T")
ANSWERS, REVEALED = "_lesson_answers", "_lesson_revealed"
#: Where :func:`open_in` notes each button's page and settings, when the session holds it (the
#: notebook's host does: it shows a player in place of the page, :mod:`app.lesson.notebook`).
OPENS = "_lesson_opens"
#: The "predict, then reveal" questions (chapters 3, 4 and 5).
QUESTIONS = 3


@dataclass(frozen=True)
class Chapter:
    number: int
    title: str
    anchor: str
    #: Draws the chapter; may return what follows its first figure and can wait for it to be
    #: painted (the lesson's first chapter: its table's code is large for a browser to start).
    #: In presenter mode that goes under "More", as everything the chapter puts in :func:`more`.
    draw: Callable[[], Callable[[], None] | None]
    #: The presenter's "More: …" expander's label: what a lecturer may skip.
    more: str = "More"

    def draw_whole(self) -> None:
        rest = self.draw()
        if rest is not None:
            with more():
                rest()


@dataclass
class _Presenting:
    """Where presenter mode puts what is not a chapter's core (set by ``app/views/lesson.py``)."""

    slot: Any  # an st.empty() after the navigation: the "More" expander, once there is some
    label: str
    opens: Any  # the navigation row's middle: the chapter's "Open …" buttons
    box: list[Any] = field(default_factory=list)  # the expander, once made


# Per script run (each session's script thread has its own context): set around a chapter's draw.
_PRESENTING: ContextVar[_Presenting | None] = ContextVar("lesson_presenting", default=None)


@contextlib.contextmanager
def presenting(slot: Any, label: str, opens: Any) -> Iterator[None]:
    """Draw a chapter in presenter mode: :func:`more` fills a collapsed expander labelled
    ``label`` in ``slot`` (made on first use: a chapter with nothing more shows none), and
    :func:`open_in` buttons go in ``opens``, beside Previous and Next."""
    token = _PRESENTING.set(_Presenting(slot, label, opens))
    try:
        yield
    finally:
        _PRESENTING.reset(token)


def presented() -> bool:
    """Whether the chapter being drawn is projected (presenter mode)."""
    return _PRESENTING.get() is not None


@contextlib.contextmanager
def more() -> Iterator[None]:
    """What is drawn inside goes under the presenter's "More" expander; in self-study, in place."""
    p = _PRESENTING.get()
    if p is None:
        yield
        return
    if not p.box:
        p.box.append(p.slot.expander(p.label, expanded=False))
    with p.box[0]:
        yield


def in_view(paragraphs: Sequence[str], core: int = 1) -> list[str]:
    """The paragraphs :func:`say` shows in place: all of them, or in presenter mode the first
    ``core`` (what a chart beside them is described by: its description must be on the screen)."""
    return list(paragraphs if not presented() else paragraphs[:core])


def say(paragraphs: Sequence[str], core: int = 1, sep: str = "\n\n") -> None:
    """One markdown element of ``paragraphs`` joined by ``sep``; in presenter mode the first
    ``core`` in place and the rest, joined the same way, under "More"."""
    st.markdown(sep.join(in_view(paragraphs, core)))
    rest = [] if not presented() else list(paragraphs[core:])
    if rest:
        with more():
            st.markdown(sep.join(rest))


def on_screen(own: T, projected: T) -> T:
    """``projected`` in presenter mode, else ``own`` (a figure's height, where the chapter sets
    one)."""
    return projected if presented() else own


def projected(**settings: Any) -> dict[str, Any]:
    """A figure's settings for the projected screen (``height=…``): ``settings`` in presenter
    mode, none in self-study (the figure's own)."""
    return settings if presented() else {}


def predict(qid: str, question: str, options: Sequence[str], answer: str, why: str) -> bool:
    """Predict, then reveal. Returns whether to show what settles it (the student picked an
    answer, or asked to see it without answering: reading never blocks on a question)."""
    ss = st.session_state
    answers: dict[str, str] = ss.setdefault(ANSWERS, {})
    revealed: set[str] = ss.setdefault(REVEALED, set())
    key = f"lesson_q_{qid}"
    ss[key] = answers.get(qid)  # widgets forget what a page switch left unrendered

    def picked() -> None:
        if ss.get(key) is not None:
            answers[qid] = ss[key]

    # The key lets presenter mode set the box beside the figure it reveals (app/views/lesson.py);
    # the options and "Just show me" share a row, so the question takes little of a projector.
    with st.container(border=True, key=f"lesson_predict_{qid}"):
        st.markdown(f"**Predict:** {question}")
        with st.container(horizontal=True, vertical_alignment="center", gap="medium"):
            choice = st.radio(
                question,
                list(options),
                key=key,
                on_change=picked,
                horizontal=True,
                label_visibility="collapsed",
            )
            waiting = choice is None and qid not in revealed
            if waiting:
                st.button(
                    "Just show me",
                    key=f"lesson_reveal_{qid}",
                    on_click=revealed.add,
                    args=(qid,),
                    help="See the answer without predicting.",
                )
        if waiting:
            return False
        if choice is None:
            st.info(f"The answer: **{answer}**. {why}", icon=":material/lightbulb:")
        elif choice == answer:
            st.success(f"Right: **{answer}**. {why}", icon=":material/check_circle:")
        else:
            st.warning(f"Not quite: it is **{answer}**. {why}", icon=":material/lightbulb:")
    return True


def open_in(label: str, page: str, values: dict[str, Any], key: str) -> None:
    """A button that opens ``page`` (a ``views/`` file) with exactly these settings."""

    def go() -> None:
        ss = st.session_state
        for name, value in values.items():
            if name in (state.STEP, state.SPIKE_STEP, *state.VIEW_SETTINGS):
                ss[name] = value
            else:
                state.set_value(name, value)
        ss["_lesson_goto"] = page

    opens = st.session_state.get(OPENS)
    if opens is not None:
        opens[key] = (page, dict(values))
    p = _PRESENTING.get()
    where = st if p is None else p.opens  # presenter mode: beside Previous and Next
    where.button(label, key=key, on_click=go, icon=":material/open_in_new:")


def goto_if_asked() -> None:
    """Switch page after an :func:`open_in` click (a callback cannot switch pages itself)."""
    page = st.session_state.pop("_lesson_goto", None)
    if page is not None:
        st.switch_page(page)


def chapters() -> list[Chapter]:
    from app.lesson import chapters_1_3, chapters_4_6, chapters_7_10

    return [*chapters_1_3.CHAPTERS, *chapters_4_6.CHAPTERS, *chapters_7_10.CHAPTERS]
