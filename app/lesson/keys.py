"""Chapter navigation by keyboard or presentation clicker: ← / → and PageUp / PageDown.

A tiny custom component (no iframe): it listens on the page and sends a trigger, ``"next"`` or
``"prev"``; the lesson page moves to that chapter. Keys typed into a widget are left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

_JS = """
export default function ({ parentElement, setTriggerValue }) {
  const box = parentElement.__h2oKeys || (parentElement.__h2oKeys = {});
  box.send = setTriggerValue;
  if (!box.listener) {
    box.listener = (e) => {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      const t = e.target;
      const tag = t && t.tagName;
      if (["INPUT", "TEXTAREA", "SELECT"].includes(tag) || (t && t.isContentEditable)) return;
      const go = { ArrowRight: "next", PageDown: "next", ArrowLeft: "prev", PageUp: "prev" }[e.key];
      if (!go) return;
      e.preventDefault();
      box.send("go", go);
    };
    document.addEventListener("keydown", box.listener);
  }
  // A mark that the keys are bound: the component mounts a moment after the page paints.
  document.documentElement.dataset.h2oChapterKeys = "bound";
  return () => {
    document.removeEventListener("keydown", box.listener);
    box.listener = null;
    delete document.documentElement.dataset.h2oChapterKeys;
  };
}
"""


@st.cache_resource(show_spinner=False)
def _component() -> Callable[..., Any]:
    return st.components.v2.component("h2o_chapter_keys", js=_JS, isolate_styles=False)


def chapter_keys(key: str, on_go: Callable[[], None]) -> None:
    """Bind the keys; ``on_go`` runs with ``st.session_state[key].go`` set to next/prev."""
    _component()(key=key, on_go_change=on_go, width="content", height="content")


def pressed(key: str) -> str | None:
    state = st.session_state.get(key)
    go = getattr(state, "go", None) if state is not None else None
    if go is None and isinstance(state, dict):
        go = state.get("go")
    return go if go in ("next", "prev") else None
