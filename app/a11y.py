"""What every page adds for the keyboard and for contrast: the focus ring and code colours a
projector can show (``app/static/a11y.css``), and code blocks the keyboard can scroll.

Streamlit draws its own focus ring too faint to see on some controls and none on others; the
stylesheet draws one ring, in the theme's text colour, on every control of every page. It goes in
with ``st.html`` (a stylesheet alone takes no room on the page). Every view calls
:func:`focus_ring` first; the charts' names and descriptions are :mod:`app.charts`.

The main area scrolls, so it takes the focus, from Tab and from a click on its background alike.
Chromium shows ``:focus-visible`` on whatever has the focus once a key is pressed, so a click on
the page and then the player's arrow keys framed the whole main area. A small script
(:data:`POINTER_FOCUS_JS`) marks the main area focused by a pointer, and the stylesheet draws its
ring only when the keyboard brought the focus there.
"""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

A11Y_CSS = Path(__file__).parent / "static" / "a11y.css"

#: Marks the main area ``data-h2o-pointer-focus`` while it holds a focus a pointer gave it (a
#: press focuses in the same task as its pointerdown; the mark goes when the focus leaves).
#: Installed once per document: a page switch mounts the element again. Streamlit passes st.html
#: through DOMPurify, which silently drops a script whose text holds "<" before a letter, "/" or
#: "!" (an HTML tag named in a comment is enough): the script must name none.
POINTER_FOCUS_JS = """<script data-h2o-pointer-focus-script>(() => {
  if (window.__h2oPointerFocus) return;
  window.__h2oPointerFocus = true;
  const MAIN = '[data-testid="stMain"]';
  let pointer = false;
  document.addEventListener("pointerdown", () => {
    pointer = true;
    setTimeout(() => { pointer = false; }, 0);
  }, true);
  document.addEventListener("focusin", (e) => {
    const t = e.target;
    if (t instanceof Element && t.matches(MAIN)) {
      t.toggleAttribute("data-h2o-pointer-focus", pointer);
    }
  }, true);
  document.addEventListener("focusout", (e) => {
    const t = e.target;
    if (t instanceof Element && t.matches(MAIN)) t.removeAttribute("data-h2o-pointer-focus");
  }, true);
  // A code block of fixed height scrolls inside its pre element, which Streamlit leaves out of
  // the Tab order: the keyboard could not scroll it. A scrolling one becomes a focusable region.
  const CODE = '[data-testid="stCode"] pre:not([tabindex])';
  const reachable = () => {
    for (const pre of document.querySelectorAll(CODE)) {
      if (pre.scrollHeight > pre.clientHeight + 1 || pre.scrollWidth > pre.clientWidth + 1) {
        pre.tabIndex = 0;
        pre.setAttribute("role", "region");
        pre.setAttribute("aria-label", "code (scrolls)");
      }
    }
  };
  let queued = false;
  new MutationObserver(() => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; reachable(); });
  }).observe(document.body, {childList: true, subtree: true});
  reachable();
})();</script>"""


def focus_ring() -> None:
    """The app's focus ring on this page."""
    st.html(_focus_style())
    # Our own constant script (no input from anyone); its element is hidden by a11y.css.
    st.html(POINTER_FOCUS_JS, unsafe_allow_javascript=True)


@functools.lru_cache(maxsize=1)
def _focus_style() -> str:
    # What st.html(A11Y_CSS) sends, read once per server rather than once per run.
    return f"<style>{A11Y_CSS.read_text(encoding='utf-8')}</style>"
