"""The player in a notebook: h2o.notebook.Player, an anywidget with the app's own front end.

The kernel side is checked directly (the payload, policies given as names, classes or
instances, a policy that fails, the browser's range requests); the front end runs in real
Chromium through the widget's own ES module, rendered by a stand-in for the notebook's widget
model (``get``, ``on``, ``send``): both panels draw, → moves the step with no message to the
kernel (not even once the user pauses), a jump past the loaded range sends the one message that
asks for the next, and nothing is fetched from a network. The lesson notebook in a live
JupyterLab is ``tests/test_notebook_browser.py``.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import h2o
from h2o import player as front
from h2o.player import constants, playback
from h2o.policies import ScoredPolicy

notebook = pytest.importorskip("h2o.notebook")


class Halved(ScoredPolicy):
    """A policy a student might write in a cell: H2O with each step's weight halved."""

    name = "halved-in-a-cell"
    label = "Halved"
    score_label = "half the attention"

    def _accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        score += attn / 2


class Broken(ScoredPolicy):
    name = "broken-in-a-cell"
    label = "Broken"

    def _accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        raise RuntimeError("my rule has a bug")


@pytest.fixture(scope="module")
def canonical():
    return h2o.canonical_trace()


def test_the_whole_call_plays_two_policies_on_the_trace(canonical):
    w = notebook.Player(canonical, "h2o", "scissorhands", budget=256)
    header, arrays = playback.decode(w.payload)
    assert [p["label"] for p in header["panels"]] == ["H2O", "Scissorhands"]
    assert header["steps"] == canonical.steps and header["range"][0] == 0
    assert set(arrays) == {"0", "1", "oracle"}
    assert "url" not in header  # the notebook's own address bar is left alone


def test_the_front_end_is_the_apps_and_plotly_comes_from_the_package():
    assert notebook.Player._esm.default_value.startswith(front.bundle())
    for cdn in ("cdn.", "unpkg", "jsdelivr", "https://"):
        assert cdn not in notebook.Player._esm.default_value
    js = notebook.plotly_js()
    assert len(js) > 1_000_000 and "Plotly" in js[:4000]


def test_plotly_js_is_sent_only_when_the_page_asks(canonical):
    w = notebook.Player(canonical, "h2o", "scissorhands", budget=256)
    assert w.plotly_js == ""  # not in every widget's state: the page asks once
    w._on_report(w, {"need": "plotly", "and": "more"}, [])
    assert w.plotly_js == ""
    w._on_report(w, {"need": "plotly"}, [])
    assert w.plotly_js == notebook.plotly_js()


def test_a_class_from_a_cell_and_an_instance_play(canonical):
    w = notebook.Player(canonical, Halved, h2o.H2O(256, recent_window=64), budget=256)
    header, _ = playback.decode(w.payload)
    assert [p["label"] for p in header["panels"]] == ["Halved", "H2O"]
    assert header["panels"][1]["window"] == 64


def test_a_broken_policy_is_a_clear_error_not_a_blank_widget(canonical):
    with pytest.raises(ValueError, match=r"policy A \(Broken.*\) failed on canonical: my rule"):
        notebook.Player(canonical, Broken, "h2o", budget=256)
    with pytest.raises(ValueError, match="already taken steps"):
        used = h2o.H2O(8, recent_window=2)
        used.on_decode_step(0, None)
        notebook.Player(h2o.toy_trace(), used, "h2o", budget=8)


def test_the_browser_asks_for_the_range_it_nears_and_nothing_else(canonical):
    w = notebook.Player(canonical, "h2o", "streaming-llm", budget=256)
    first = w.payload
    for junk in (
        None,
        {},
        {"view": None},
        {"view": {"step": "3"}},
        {"view": {"step": float("nan")}},
    ):
        w._on_report(w, junk, [])
        assert w.payload is first
    w._on_report(w, {"view": {"step": 10}}, [])
    assert w.payload is first  # still inside the loaded range: nothing sent
    w._on_report(w, {"view": {"step": 3000}}, [])
    a, b = playback.decode(w.payload)[0]["range"]
    assert a <= 3000 < b


@pytest.mark.browser
def test_the_widget_renders_and_steps_in_chromium_with_no_kernel_message(canonical):
    sync_api = pytest.importorskip("playwright.sync_api")
    from streamlit_server import CHROMIUM, PLAYER, launch, shown_step, wait_player

    if not CHROMIUM.exists():
        pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM}")
    w = notebook.Player(canonical, "h2o", "scissorhands", budget=256)
    state = {
        "payload": base64.b64encode(w.payload).decode(),
        "css": w.css,
        "plotly_js": notebook.plotly_js(),  # what the kernel sends when the page asks
    }
    page_html = (
        "<!doctype html><html><head></head><body><div id='out'></div><script type='module'>\n"
        f"const S = {json.dumps(state)};\n"
        "const bytes = Uint8Array.from(atob(S.payload), (c) => c.charCodeAt(0));\n"
        "const values = { payload: new DataView(bytes.buffer), css: S.css, plotly_js: '' };\n"
        "const on = {};\n"
        "window.__sent = [];\n"
        "const model = { get: (k) => values[k], on: (e, f) => { on[e] = f; },\n"
        "  send: (m) => {\n"
        "    window.__sent.push(m);\n"
        "    if (m.need === 'plotly') setTimeout(() => {\n"
        "      values.plotly_js = S.plotly_js; on['change:plotly_js']();\n"
        "    }, 50);\n"
        "  } };\n"
        f"const url = URL.createObjectURL(new Blob([{json.dumps(w._esm)}],"
        " { type: 'text/javascript' }));\n"
        "const mod = await import(url);\n"
        "mod.default.render({ model, el: document.getElementById('out') });\n"
        "</script></body></html>"
    )
    with sync_api.sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            requests = []
            page.on("request", lambda r: requests.append(r.url))
            page.set_content(page_html)
            wait_player(page, plots=2)
            assert page.locator(f"{PLAYER} .js-plotly-plot").count() >= 2
            assert page.evaluate("window.__sent.splice(0)") == [{"need": "plotly"}]  # once
            assert "NaN" not in page.inner_text(PLAYER)  # every header field the player reads
            before = shown_step(page)
            page.keyboard.press("ArrowRight")  # the notebook's key, not the player's: no step
            page.wait_for_timeout(300)
            assert shown_step(page) == before
            page.focus(".h2o-root")  # a click on the widget gives it the keys
            page.keyboard.press("ArrowRight")
            page.wait_for_function(
                f"Number(document.querySelector('{PLAYER}').dataset.rendered) === {before + 1}"
            )
            page.wait_for_timeout(constants.IDLE_REPORT_MS + 500)  # the app would report by now
            assert page.evaluate("window.__sent") == []  # a step inside the range: no message
            page.keyboard.press("End")  # past the loaded range: the one message the kernel gets
            page.wait_for_function("window.__sent.length > 0")
            page.wait_for_timeout(300)
            assert page.evaluate("window.__sent") == [
                {"view": {**constants.VIEW_DEFAULTS, "step": canonical.steps - 1}}
            ]
            assert [u for u in requests if u.startswith("http")] == []
        finally:
            browser.close()
