"""The lesson's first chapter on screen before the rest: a report from the browser.

Self-study shows every chapter on one page, and a browser draws a page's charts together: ten
chapters' charts took twice as long to show the first one as a page with one chart
(``benchmarks/first_paint.py``). So the page's first run draws chapter 1 only, with this tiny
component (no iframe) below it. Once the browser has painted chapter 1's chart (or after
:data:`WAIT_MS` if none appears), the component sends one trigger, ``painted``; the page then
draws every chapter, in a second run whose chapter 1 is unchanged on screen.
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
