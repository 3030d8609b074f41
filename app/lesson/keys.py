"""Chapter navigation by keyboard or presentation clicker: ← / → and PageUp / PageDown.

A tiny custom component (no iframe): it listens on the page and sends a trigger, ``"next"`` or
``"prev"``; the lesson page moves to that chapter.

A clicker sends those keys to whatever has the focus, and a click on a question's option or a
slider leaves the focus there: the keys would then change the answer or the slider instead of the
chapter. So the listener runs first (on the document, in the capture phase) and, when the focus
came from a pointer, it keeps the key from the control, takes the focus off it and moves the
chapter. A control reached with the keyboard (Tab) keeps its own arrow keys, and a field being
typed in keeps every key; PageUp / PageDown move the chapter from any other control.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

_JS = """
const GO = { ArrowRight: "next", PageDown: "next", ArrowLeft: "prev", PageUp: "prev" };
const ARROWS = new Set(["ArrowRight", "ArrowLeft"]);
// Inputs that are not typed in: every other <input> type takes text, digits or a date.
const NOT_TYPED = new Set(["radio", "checkbox", "range", "button", "submit", "reset", "color",
  "file", "image"]);
// Controls whose arrow keys mean something (and the composites whose items they move between).
const ARROW_ROLES = new Set(["radio", "radiogroup", "slider", "spinbutton", "tab", "tablist",
  "option", "listbox", "menu", "menuitem", "menuitemradio", "menuitemcheckbox", "menubar",
  "tree", "treeitem", "grid", "gridcell", "treegrid", "row", "combobox", "scrollbar"]);
const COMPOSITE = "[role=radiogroup], [role=tablist], [role=listbox], [role=menu], "
  + "[role=menubar], [role=tree], [role=grid], [role=treegrid], table";

// A field being typed in: its keys are the typist's. A select box (a combobox) clicked with the
// mouse whose list is closed is not: the keys would only move its caret.
function typing(t, how) {
  if (t.isContentEditable || t.tagName === "TEXTAREA") return true;
  if (t.tagName !== "INPUT" || NOT_TYPED.has(t.type)) return false;
  const closedBox = t.getAttribute("role") === "combobox"
    && t.getAttribute("aria-expanded") !== "true";
  return !(closedBox && how === "pointer");
}

function ownsArrows(t) {
  return t.tagName === "SELECT" || (t.tagName === "INPUT" && NOT_TYPED.has(t.type)
    && !["button", "submit", "reset", "image", "file"].includes(t.type))
    || ARROW_ROLES.has(t.getAttribute("role")) || t.closest(COMPOSITE) !== null;
}

function install() {
  // How the focus last moved: "pointer" (a press of a mouse, pen or finger) or "key" (Tab).
  // Read when a clicker's key comes, from the events before it: a click on a radio option gives
  // its input :focus-visible in Chromium, so that cannot tell a mouse from a keyboard.
  const keys = { how: "key", send: null };
  keys.onPointer = () => { keys.how = "pointer"; };
  keys.onKey = (e) => {
    if (e.key === "Tab") {
      keys.how = "key";
      return;
    }
    const go = GO[e.key];
    if (!go || e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    const page = !t || t === document.body || t === document.documentElement;
    if (!page) {
      if (typing(t, keys.how)) return;
      if (keys.how !== "pointer" && ARROWS.has(e.key) && ownsArrows(t)) return;
    }
    // The key is the chapter's: the control that has the focus must not act on it too (its own
    // handler comes later, on the target or on React's root, and is never reached).
    e.preventDefault();
    if (!page) e.stopImmediatePropagation();
    if (!page && keys.how === "pointer") t.blur();  // the next press then goes to the page
    if (keys.send) keys.send("go", go);
  };
  document.addEventListener("pointerdown", keys.onPointer, true);
  document.addEventListener("mousedown", keys.onPointer, true);
  document.addEventListener("keydown", keys.onKey, true);
  keys.remove = () => {
    document.removeEventListener("pointerdown", keys.onPointer, true);
    document.removeEventListener("mousedown", keys.onPointer, true);
    document.removeEventListener("keydown", keys.onKey, true);
  };
  return keys;
}

export default function ({ parentElement, setTriggerValue }) {
  // One listener for the page, whatever the reruns and remounts: the latest mount sends.
  const keys = document.__h2oChapterKeys || (document.__h2oChapterKeys = install());
  keys.send = setTriggerValue;
  keys.owner = parentElement;
  // A mark that the keys are bound: the component mounts a moment after the page paints.
  document.documentElement.dataset.h2oChapterKeys = "bound";
  return () => {
    if (document.__h2oChapterKeys !== keys || keys.owner !== parentElement) return;
    keys.remove();
    delete document.__h2oChapterKeys;
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
