"""What a page says under AppTest, as a reader meets it."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def said(at: AppTest) -> list[str]:
    """Every markdown element's text, and each paragraph of one that holds several (a page
    writes a run of sentences as one element, a paragraph each)."""
    out = []
    for m in at.markdown:
        parts = m.value.split("\n\n")
        out += [m.value, *parts] if len(parts) > 1 else [m.value]
    return out
