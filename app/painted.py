"""A page's first figure on screen before the rest of the page: a report from the browser.

A browser draws the charts of one run together: the lesson's ten chapters took twice as long to
show their first chart as a page with one chart, and the stale-spike page 2.1 times
(``benchmarks/first_paint.py``). So a page's first run in a session draws the page down to its
first figure, with this tiny component (no iframe) below it. Once the browser has painted a
chart (or after :data:`WAIT_MS` if none appears), the component sends one trigger,
``painted``; the rest of the page is then drawn below it, in a partial run (a fragment) that
leaves the top as it is: the server draws each part once. Every later run of that page in the
session draws it whole.

:func:`first_figure_first` is a page's call, right below its first figure, with a function that
draws the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

#: How long the browser waits for a chart before reporting anyway (a slow machine, no chart).
WAIT_MS = 4000

_JS = """
export default function ({ setTriggerValue }) {
  let sent = false;
  const send = () => {
    if (sent) return;
    sent = true;
    // One frame after the chart is in the page: it has been painted.
    requestAnimationFrame(() => setTriggerValue("painted", true));
  };
  const drawn = () => document.querySelector(".js-plotly-plot .main-svg") !== null;
  if (drawn()) {
    send();
    return () => {};
  }
  const seen = new MutationObserver(() => {
    if (drawn()) {
      seen.disconnect();
      send();
    }
  });
  seen.observe(document.body, { subtree: true, childList: true });
  const timer = setTimeout(() => {
    seen.disconnect();
    send();
  }, WAIT_MS);
  return () => {
    seen.disconnect();
    clearTimeout(timer);
  };
}
""".replace("WAIT_MS", str(WAIT_MS))


@st.cache_resource(show_spinner=False)
def _component() -> Callable[..., Any]:
    return st.components.v2.component("h2o_first_paint", js=_JS, isolate_styles=False)


def _reporter(key: str, on_painted: Callable[[], None]) -> None:
    """Mount the reporter; ``on_painted`` runs when the browser says the first chart is on
    screen (the trigger reruns the fragment it is in)."""
    _component()(key=key, on_painted_change=on_painted, width="content", height="content")


#: Off: every run draws the whole page (AppTest has no browser to report a paint; the tests of
#: the first run itself turn it back on).
SHORT_FIRST_RUN = True

#: What the first run shows where the rest of a page will be.
WAITING = "The rest of this page is on its way…"
#: The flag's value between the browser's report and the partial run that draws the rest.
_REPORTED = "reported"


def first_figure_first(page: str, rest: Callable[[], None], *, waiting: str = WAITING) -> None:
    """Below ``page``'s first figure: ``rest`` draws the rest of the page, in a container.

    In the session's first run of the page, the container holds ``waiting`` and the reporter
    (key ``f"{page}_painted"``) instead, in a fragment: the browser's report reruns that
    fragment alone, which draws ``rest`` there. The top of the page is drawn once and stays on
    screen, and the server does not draw it a second time. Every later run draws ``rest`` in
    the same container at once.
    """
    if st.session_state.get(_flag(page)) or not SHORT_FIRST_RUN:
        with st.container():
            rest()
        return
    _rest_once_painted(page, rest, waiting)


def _flag(page: str) -> str:
    return f"_painted_{page}"


@st.fragment
def _rest_once_painted(page: str, rest: Callable[[], None], waiting: str) -> None:
    ss, flag = st.session_state, _flag(page)
    seen = ss.get(flag)
    if not seen:
        st.caption(waiting)
        _reporter(f"{page}_painted", lambda: ss.__setitem__(flag, _REPORTED))
        return
    ss[flag] = True
    if seen == _REPORTED:  # the browser's report: the rest, in this partial run
        rest()
        return
    # A control of the rest, changed before any full run of the page: its rerun is this
    # fragment's, but the page's top and its link may depend on it. Run the whole page.
    st.rerun()
