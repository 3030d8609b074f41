"""A successful upload's file name is text wherever the app shows it, never markup.

The name of an uploaded file (and so of its trace) comes from the user's disk. It is shown in the
sidebar's caption, the step view's caption, the all-policies heading, plot titles, the player's
data and the exported HTML file. Markdown and Plotly both render some of it (links, images,
tags), so each place must escape it; this test uploads a *valid* trace under a hostile name and
reads every place back.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

import h2o
from h2o.player import playback

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
STEM = "<img src=x onerror=alert(1)> [sign in](evil.example)"
FILE = f"{STEM}.npz"
MODEL = "![m](http://127.0.0.1:9/track.png)"  # the metadata is the user's too
TEXT_KINDS = ("title", "header", "subheader", "markdown", "caption", "error", "warning", "info")


def live_markup(text: str) -> list[str]:
    """What markdown would turn into a link, an image or HTML, outside code spans and escapes."""
    bare = re.sub(r"\\.", "", re.sub(r"`[^`]*`", "", text))  # code spans and escapes are inert
    return re.findall(r"\]\(|<[a-zA-Z!/]", bare)


def as_read(text: str) -> str:
    """Markdown text as a reader sees it: escapes and code-span quotes dropped."""
    return re.sub(r"\\(.)", r"\1", text).replace("`", "")


def upload_bytes() -> bytes:
    tr = h2o.toy_trace()
    buf = io.BytesIO()
    meta = {"layer": 3, "head": "mean", "model": MODEL, "text": "a text"}
    np.savez_compressed(buf, weights=tr.weights, meta=np.array(json.dumps(meta)))
    return buf.getvalue()


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    made: dict[str, Any] = {}
    add = MediaFileManager.add_deferred

    def record(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        made[file_name] = data_callable
        return add(self, data_callable, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    return made


def shown_texts(at: AppTest) -> list[str]:
    """Every markdown string on the page (sidebar included), and every widget's label and help."""
    out = [el.value for kind in TEXT_KINDS for el in at.get(kind)]
    for kind in ("selectbox", "number_input", "toggle", "file_uploader", "radio", "slider"):
        for el in at.get(kind):
            out += [el.proto.label, el.proto.help]
    return [t for t in out if t]


def plot_strings(at: AppTest) -> list[str]:
    """Every string a Plotly figure renders as (a little) HTML: titles, axis titles, annotations."""
    out = []
    for chart in at.get("plotly_chart"):
        layout = json.loads(chart.proto.spec).get("layout", {})
        out.append(json.dumps(layout.get("title", "")))
        out += [json.dumps(v.get("title", "")) for k, v in layout.items() if "axis" in k]
        out += [json.dumps(a) for a in layout.get("annotations", [])]
    return out


def check_page(at: AppTest) -> int:
    """Assert the name is text on this page; return how many places show it."""
    assert not at.exception, [e.value for e in at.exception]
    seen = 0
    for text in shown_texts(at):
        assert live_markup(text) == [], text
        seen += STEM[:40] in as_read(text)
        assert MODEL not in text, text  # the metadata's image, if shown, is escaped too
    for text in plot_strings(at):
        assert "<img" not in text and "<a" not in text, text
        seen += html.escape(STEM[:40], quote=False) in text
    return seen


def test_a_hostile_name_of_a_successful_upload_is_text_everywhere(exports):
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.query_params["trace"] = "toy"
    at.run()
    at.switch_page("views/step_through.py").run()
    at.file_uploader(key="w_upload").set_value((FILE, upload_bytes(), "application/zip")).run()
    assert at.session_state["trace"].startswith(f"upload:{FILE}#"), "the upload was refused"
    assert not at.error, [e.value for e in at.error]

    # The sidebar caption and the step view's caption.
    assert check_page(at) >= 2
    (sidebar,) = [c.value for c in at.sidebar.caption if "steps" in c.value]
    assert as_read(sidebar).startswith(f"**{STEM}** — 40 steps")

    # The player's data: the name as plain data (the player shows it only through textContent
    # and Plotly-escaped strings, h2o/player/js).
    (player,) = [e for e in at.get("bidi_component") if e.proto.component_name == "h2o_player"]
    header, _ = playback.decode(player.proto.bytes)
    assert header["trace"] == STEM

    # The exported HTML file: the name escaped in its title and heading, nowhere else as text.
    (name,) = [n for n in exports if "sign_in" in n]
    assert name.startswith("h2o-") and name.endswith("-steps-0-39.html")
    page = exports[name]().decode("utf-8")
    (data,) = re.findall(r'atob\("([A-Za-z0-9+/=]*)"\)', page)
    assert playback.decode(base64.b64decode(data))[0]["trace"] == STEM
    assert STEM not in page and "<img src=x" not in page
    assert page.count(html.escape(STEM)) == 2  # <title> and <h1>
    assert f"<title>Step through: {html.escape(STEM)}, steps 0–39 of 40</title>" in page

    # The pages that title figures with the trace's name.
    at.switch_page("views/all_policies.py").run()
    assert check_page(at) >= 3  # sidebar, heading, figure title
    at.switch_page("views/window_explorer.py").run()
    assert check_page(at) >= 2  # sidebar, figure subtitle
