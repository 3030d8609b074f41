"""The lesson: the H2O policy card's story in ten chapters — the app's first page.

Self-study: every chapter in order, to scroll through; answers are kept for the session. The
first run draws chapter 1 alone and the rest follows as soon as the browser has painted it.
Presenter mode (the sidebar switch, or ``?presenter=1``): one chapter per screen in large type, the
sidebar collapsed, moved with ← / → or a clicker's PageUp / PageDown; ``?chapter=4`` opens (or
resumes) a chapter.
"""

from __future__ import annotations

import streamlit as st

from app import a11y, lesson, painted, state
from app.lesson.keys import chapter_keys, pressed

a11y.focus_ring()  # the keyboard's focus, seen on every control

#: Presenter mode's screen, for a projector at 1280×720, so a chapter's core (its question, figure
#: and answer) and the navigation after it are in view with "More" shut
#: (tests/test_presenter_browser.py): large type; the header's blank band (made transparent, its
#: buttons still clickable) holds the chapter's heading, the progress bar at its right; little
#: padding; a "predict" box sits in a left column beside the chart right after it (an empty
#: placeholder, such as a cache's spinner, may come between), everything else spans the page;
#: controls (labels, options, buttons, "More") in the body's size, read from the back of a room.
PRESENTER_CSS = """<style>
[data-testid='stMain'] .stMarkdown p, [data-testid='stMain'] .stMarkdown li
  {font-size: 1.25rem; line-height: 1.3;}
[data-testid='stHeader'] {background: transparent; pointer-events: none;}
[data-testid='stHeader'] button, [data-testid='stHeader'] a {pointer-events: auto;}
[data-testid='stMainBlockContainer'] {position: relative; padding-top: 0.9rem;
  padding-bottom: 0.5rem;}
[data-testid='stMainBlockContainer'] .stElementContainer:has(> .stProgress)
  {position: absolute; top: 1.1rem; right: 5rem; width: 13rem;}
[data-testid='stMainBlockContainer'] .stProgress p {font-size: 1.1rem;}
[data-testid='stMain'] [data-testid='stWidgetLabel'] p,
[data-testid='stMain'] [role='radiogroup'] label p,
[data-testid='stMain'] .stButton button p,
[data-testid='stMain'] .stLinkButton a p,
[data-testid='stMain'] [data-testid='stExpander'] summary p {font-size: 1.2rem;}
[data-testid='stMain'] [data-testid='stHeading'] h2 {padding: 0 14rem 0.1rem 0;}
.st-key-lesson_chapter {display: grid; grid-template-columns: minmax(0, 2fr) minmax(0, 3fr);
  gap: 0.5rem 1.5rem; align-items: start;}
.st-key-lesson_chapter > * {grid-column: 1 / -1;}
.st-key-lesson_chapter > :has(> .stEmpty) {display: none;}
.st-key-lesson_chapter > :has(> [class*='st-key-lesson_predict_']):is(
  :has(+ * .stPlotlyChart), :has(+ * > .stEmpty):has(+ * + * .stPlotlyChart)) {grid-column: 1;}
.st-key-lesson_chapter > :has(> [class*='st-key-lesson_predict_']) + :has(.stPlotlyChart),
.st-key-lesson_chapter > :has(> [class*='st-key-lesson_predict_']) + :has(> .stEmpty)
  + :has(.stPlotlyChart) {grid-column: 2;}
</style>"""

ss = st.session_state
lesson.goto_if_asked()
CHAPTERS = lesson.chapters()
LAST = len(CHAPTERS)
WORDS = {8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}

presenter = state.presenter_toggle()
# A projector at 1280×720 needs the sidebar's 300 px: presenter mode opens with it collapsed (its
# chevron, top left, brings it back). Streamlit applies this when it changes, and a browser where
# the user opened or closed the sidebar by hand keeps that choice instead.
st.set_page_config(initial_sidebar_state="collapsed" if presenter else "auto")
if not presenter:  # a projected chapter needs the height more than the page title
    st.title("H2O, step by step")
state.report_url_problems([state.CHAPTER, state.PRESENTER])
if state.from_link(state.CHAPTER) and not 1 <= ss.get(state.CHAPTER, 1) <= LAST:
    st.error(
        f"Ignored from the link: chapter={ss[state.CHAPTER]} — there are chapters 1 to {LAST}.",
        icon=":material/error:",
    )
    ss[state.CHAPTER] = 1
ss[state.CHAPTER] = min(max(int(ss.get(state.CHAPTER, 1)), 1), LAST)
state.publish([state.CHAPTER, state.PRESENTER])


def move(delta: int) -> None:
    ss[state.CHAPTER] = min(max(ss[state.CHAPTER] + delta, 1), LAST)


def key_pressed() -> None:
    go = pressed("lesson_keys")
    if go is not None:
        move(1 if go == "next" else -1)


answered = len(ss.get(lesson.ANSWERS, {}))
with st.sidebar:
    st.header("Chapters")
    if presenter:
        for ch in CHAPTERS:
            st.button(
                f"{ch.number}. {ch.title}",
                key=f"lesson_nav_{ch.number}",
                on_click=lambda n=ch.number: ss.__setitem__(state.CHAPTER, n),
                type="primary" if ch.number == ss[state.CHAPTER] else "tertiary",
            )
    else:  # one list of links, one element
        st.markdown("\n".join(f"{ch.number}. [{ch.title}](#{ch.anchor})" for ch in CHAPTERS))
    st.caption(f"Questions answered: {answered} of {lesson.QUESTIONS}.")

if presenter:
    ch = CHAPTERS[ss[state.CHAPTER] - 1]
    st.html(PRESENTER_CSS)
    st.progress(ch.number / LAST, text=f"Chapter {ch.number} of {LAST}")
    st.header(f"{ch.number}. {ch.title}", anchor=ch.anchor)
    # The chapter's core, then the navigation (its "Open …" buttons between Previous and Next),
    # then "More: …" (app/lesson/__init__.py): the core and the navigation fill one screen.
    body = st.container(key="lesson_chapter")
    left, middle, right = st.columns([1, 3, 1], vertical_alignment="center")
    opens = middle.container(
        horizontal=True, horizontal_alignment="center", gap="small", key="lesson_opens"
    )
    slot = st.empty()
    with body, lesson.presenting(slot, ch.more, opens):
        ch.draw_whole()
    left.button(
        "← Previous",
        key="lesson_prev",
        on_click=move,
        args=(-1,),
        disabled=ch.number == 1,
        width="stretch",
    )
    right.button(
        "Next →",
        key="lesson_next",
        on_click=move,
        args=(1,),
        disabled=ch.number == LAST,
        type="primary",
        width="stretch",
    )
    chapter_keys("lesson_keys", key_pressed)
else:
    st.markdown(
        f"{WORDS.get(LAST, str(LAST)).capitalize()} short chapters, each with one live figure "
        "computed by the library (or computed ahead on the real model) as you read. "
        "Where it helps, a question asks you to **predict** first; answer it or not, the figure "
        "that settles it is one click away. Where a chapter has a page of its own in the app, a "
        "button opens it. Presenting? Switch on **Presenter mode** in the sidebar: one chapter per "
        "screen, ← / → or a clicker to move."
    )
    st.progress(answered / lesson.QUESTIONS, text=f"{answered} of {lesson.QUESTIONS} answered")

    # Chapter 1 down to its figure first: the rest follows once the browser has painted it
    # (app/painted.py).
    def heading(ch: lesson.Chapter) -> None:
        st.header(f"{ch.number}. {ch.title}", anchor=ch.anchor, divider="gray")

    heading(CHAPTERS[0])
    more = CHAPTERS[0].draw()

    def rest() -> None:
        """The rest of chapter 1, then chapters 2 to the last."""
        if more is not None:
            more()
        for ch in CHAPTERS[1:]:
            heading(ch)
            ch.draw_whole()

    painted.first_figure_first("lesson", rest, waiting=f"Chapters 2 to {LAST} are on their way…")
