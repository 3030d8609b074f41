"""The lesson under AppTest as a browser shows it in self-study: its first run draws chapter 1,
and the browser's report that chapter 1 is painted (``app/painted.py``) draws the rest."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

KEY = "lesson_painted"


def report_painted(at: AppTest, key: str = KEY) -> None:
    """Send the first-paint component's trigger (``key``: the lesson's, or a page's
    ``f"{url_path}_painted"``) as the browser does, under its event id (see streamlit's
    bidi_component), and rerun."""
    (reporter,) = [c for c in at.get("bidi_component") if c.proto.id.endswith(f"-{key}")]
    states = at._tree.get_widget_states()
    w = states.widgets.add()
    w.id = f"$$STREAMLIT_INTERNAL_KEY_{reporter.proto.id}__events"
    w.json_trigger_value = json.dumps([{"event": "painted", "value": True}])
    at._run(states)
