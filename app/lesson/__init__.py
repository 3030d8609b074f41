"""The guided lesson: the card's story in chapters, for projecting and for self-study.

Each chapter is a function that draws itself (a few sentences, one live figure, at most two
controls, sometimes a "predict, then reveal" question) into the current container; the page
(``app/views/lesson.py``) shows them one per screen (presenter mode, driven by the keyboard or a
clicker) or all in order (self-study). Answers are kept in the session, so a question answered
once stays answered, in either mode.

The chapters live in the modules named by their numbers: ``chapters_1_3.py`` (why evict, sinks
and recency, heavy hitters), ``chapters_4_6.py`` (the window, the stale spike, the family) and
``chapters_7_10.py`` (a real model, evict or compress?, when (not) to use H2O, your turn; the
needle grid and chapter 8 live in ``needle.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

from app import state

ANSWERS, REVEALED = "_lesson_answers", "_lesson_revealed"
#: The "predict, then reveal" questions (chapters 3, 4 and 5).
QUESTIONS = 3


@dataclass(frozen=True)
class Chapter:
    number: int
    title: str
    anchor: str
    #: Draws the chapter; may return what follows its first figure and can wait for it to be
    #: painted (the lesson's first chapter: its table's code is large for a browser to start).
    draw: Callable[[], Callable[[], None] | None]

    def draw_whole(self) -> None:
        more = self.draw()
        if more is not None:
            more()


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

    st.button(label, key=key, on_click=go, icon=":material/open_in_new:")


def goto_if_asked() -> None:
    """Switch page after an :func:`open_in` click (a callback cannot switch pages itself)."""
    page = st.session_state.pop("_lesson_goto", None)
    if page is not None:
        st.switch_page(page)


def chapters() -> list[Chapter]:
    from app.lesson import chapters_1_3, chapters_4_6, chapters_7_10

    return [*chapters_1_3.CHAPTERS, *chapters_4_6.CHAPTERS, *chapters_7_10.CHAPTERS]
