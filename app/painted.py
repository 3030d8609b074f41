"""A page's first figure on screen before the rest of the page: a report from the browser.

A browser draws the charts of one run together: the lesson's ten chapters took twice as long to
show their first chart as a page with one chart, and the stale-spike page 2.1 times
(``benchmarks/first_paint.py``). So a page's first run in a session draws the page down to its
first figure, with this tiny component (no iframe) below it. Once the browser has painted a
chart (or after :data:`WAIT_MS` if none appears), the component sends one trigger,
``painted``; the page then draws everything, in a second run whose top is unchanged on screen.
Every later run of that page in the session draws it whole.

* :func:`first_figure_first` — a page's call, right below its first figure;
* :func:`after_first_chart` — the reporter alone (the lesson draws chapter 1 first with it).
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


def after_first_chart(key: str, on_painted: Callable[[], None]) -> None:
    """Mount the reporter; ``on_painted`` runs when the browser says the first chart is on
    screen (the trigger reruns the page)."""
    _component()(key=key, on_painted_change=on_painted, width="content", height="content")


#: Off: every run draws the whole page (AppTest has no browser to report a paint; the tests of
#: the first run itself turn it back on).
SHORT_FIRST_RUN = True


def first_figure_first(page: str) -> None:
    """Below ``page``'s first figure: in the session's first run of the page, end the run here
    (the figure above is sent, the rest waits) until the browser reports it painted; from then
    on, return at once. The reporter's key is ``f"{page}_painted"``."""
    flag = f"_painted_{page}"
    ss = st.session_state
    if ss.get(flag) or not SHORT_FIRST_RUN:
        return
    st.caption("The rest of this page is on its way…")
    after_first_chart(f"{page}_painted", lambda: ss.__setitem__(flag, True))
    st.stop()
