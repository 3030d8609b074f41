"""What every page adds for the keyboard: the focus ring (``app/static/focus.css``).

Streamlit draws its own focus ring too faint to see on some controls and none on others; the
stylesheet draws one ring, in the theme's text colour, on every control of every page. It goes in
with ``st.html`` (a stylesheet alone takes no room on the page). Every view calls
:func:`focus_ring` first; the charts' names and descriptions are :mod:`app.charts`.
"""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

FOCUS_CSS = Path(__file__).parent / "static" / "focus.css"


def focus_ring() -> None:
    """The app's focus ring on this page."""
    st.html(_focus_style())


@functools.lru_cache(maxsize=1)
def _focus_style() -> str:
    # What st.html(FOCUS_CSS) sends, read once per server rather than once per run.
    return f"<style>{FOCUS_CSS.read_text(encoding='utf-8')}</style>"
