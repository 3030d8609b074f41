"""The step view's report path (app/player/stepper.py): a browser report is checked where it is
stored.

In the app, a report from the player reruns only the step view's fragment, not the page, so
``render()``'s own clamp never sees it: what ``apply_report`` stores is what the fragment's
range and the HTML export read. The fragment-only rerun is reproduced here under AppTest
(which runs whole pages) by queueing the fragment the way Streamlit's runtime does.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.runtime.scriptrunner_utils import script_requests
from streamlit.testing.v1 import AppTest
from streamlit.testing.v1 import local_script_runner as runner

from app import state
from app.player import stepper
from h2o.player import playback

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
TOY_STEPS = 40  # h2o.toy_trace()


# -- apply_report, on its own ------------------------------------------------------------------
@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    ss: dict[str, Any] = {}
    monkeypatch.setattr(st, "session_state", ss)
    return ss


@pytest.mark.parametrize(
    ("step", "stored"),
    [
        (0, 0),
        (17, 17),
        (TOY_STEPS - 1, TOY_STEPS - 1),
        (TOY_STEPS, TOY_STEPS - 1),  # one past the end: the last step
        (10**9, TOY_STEPS - 1),
        (-1, 0),
        (-(10**9), 0),
        (12.9, 12),  # the browser's number, whole
        (float(TOY_STEPS) + 0.5, TOY_STEPS - 1),
    ],
)
def test_apply_report_stores_the_step_clamped_to_the_trace(session, step, stored):
    session["step"] = 5
    stepper.apply_report("step", {"step": step}, TOY_STEPS)
    assert session["step"] == stored and type(session["step"]) is int


@pytest.mark.parametrize("step", [None, "12", True, False, float("nan"), [3], {"t": 3}])
def test_apply_report_ignores_a_step_that_is_not_a_number(session, step):
    session["step"] = 5
    stepper.apply_report("step", {"step": step}, TOY_STEPS)
    assert session["step"] == 5


@pytest.mark.parametrize("step", [float("inf"), float("-inf")])
def test_apply_report_survives_an_infinite_step(session, step):
    session["step"] = 5
    stepper.apply_report("step", {"step": step}, TOY_STEPS)
    assert session["step"] in (5, 0, TOY_STEPS - 1)  # ignored, or clamped


@pytest.mark.parametrize("view", [None, [], "step=3", 3])
def test_apply_report_ignores_a_report_that_is_not_an_object(session, view):
    stepper.apply_report("step", view, TOY_STEPS)
    assert session == {}


def test_apply_report_stores_only_allowed_settings(session):
    good = {"colour": "linear", "rows": "all", "width": 64, "speed": 60, "reveal": True}
    stepper.apply_report("spike_step", {"step": 3, **good}, TOY_STEPS)
    assert session == {"spike_step": 3, **good}
    bad = {
        "colour": "<b>red</b>",
        "rows": ["kept"],
        "width": 100,
        "speed": 5.0,  # right value, wrong type
        "reveal": 1,
        "presenter": True,  # not a player setting: the sidebar's
        "budget": 3,  # not a view setting at all
    }
    stepper.apply_report("spike_step", bad, TOY_STEPS)
    assert session == {"spike_step": 3, **good}
    assert stepper.settings() == good


def test_settings_are_the_session_values_or_the_defaults(session):
    assert stepper.settings() == {n: state.VIEW_DEFAULTS[n] for n in state.VIEW_SETTINGS}
    session["width"] = 256
    assert stepper.settings()["width"] == 256


# -- a fragment-only rerun, as the app does after a report --------------------------------------
@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The download buttons' deferred files of each run, by file name (built on demand)."""
    made: dict[str, Any] = {}
    add = MediaFileManager.add_deferred

    def record(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        made[file_name] = data_callable
        made[f"{file_name} mimetype"] = mimetype
        return add(self, data_callable, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    return made


def open_step_view(**query: object) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    at.switch_page("views/step_through.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def player_element(at: AppTest):
    (el,) = [e for e in at.get("bidi_component") if e.proto.component_name == "h2o_player"]
    return el


def fragment_report(at: AppTest, monkeypatch: pytest.MonkeyPatch, **values: object) -> AppTest:
    """What the browser sends when the user pauses, delivered as the app delivers it: the widget
    state of the player, with a rerun of its fragment only (as Streamlit's runtime queues it)."""
    el = player_element(at)
    states = at._tree.get_widget_states()
    w = states.widgets.add()
    w.id = el.proto.id
    w.json_value = json.dumps({"view": values})
    (fragment,) = at._fragment_storage._fragments  # the step view's one fragment
    rerun = script_requests.RerunData

    def fragment_only(**kw: Any) -> script_requests.RerunData:
        return rerun(**kw, fragment_id_queue=[fragment])

    with monkeypatch.context() as m:
        m.setattr(runner, "RerunData", fragment_only)
        at._run(states)
    assert not at.exception, [e.value for e in at.exception]
    return at


def export_start(exports: dict[str, Any]) -> dict[str, Any]:
    """Where the exported HTML file opens: the ``start`` of the payload inside it."""
    (name,) = [n for n in exports if n.startswith("h2o-") and n.endswith(".html")]
    page = exports[name]().decode("utf-8")
    (data,) = re.findall(r'atob\("([A-Za-z0-9+/=]*)"\)', page)
    header, _ = playback.decode(base64.b64decode(data))
    return header["start"]


@pytest.mark.parametrize(("step", "shown"), [(10**9, TOY_STEPS - 1), (-7, 0), (23, 23)])
def test_a_reported_step_reaches_the_export_clamped_in_a_fragment_only_rerun(
    monkeypatch, exports, step, shown
):
    at = open_step_view(trace="toy", step=9)
    assert export_start(exports)["step"] == 9
    exports.clear()
    fragment_report(at, monkeypatch, step=step, colour="linear")
    assert not at.title, "the page ran again: this was not a fragment-only rerun"
    assert at.session_state["step"] == shown
    start = export_start(exports)
    assert 0 <= start["step"] < TOY_STEPS and start["colour"] == "linear"
    if shown > 0:  # (at step 0 the file may open at the first eviction instead)
        assert start["step"] == shown
    header, _ = playback.decode(player_element(at).proto.bytes)
    a, b = header["range"]
    assert a <= shown < b <= TOY_STEPS


# -- render(), on a page of its own ------------------------------------------------------------
def _page(refused: bool = False, b: str = "tova", titles: bool = True) -> None:
    """A page with the step view alone: the toy trace, H2O and ``b`` (or two refused panels),
    a highlighted position, under the stale-spike page's step key. ``titles=False``: the panels
    are titled "A" and "B" only."""
    import numpy as np

    from app import data, state
    from app.player import stepper
    from h2o import analysis
    from h2o.player import playback

    state.read_url()
    ref = data.load("toy", {})
    slots = []
    for i, name in enumerate(("h2o", b)):
        if refused:
            slots.append(playback.Panel(f"{name} refused", "#123456", None, "no room"))
            continue
        policy = analysis.make_policy(name, 8, recent_window=2)
        title = name if titles else "AB"[i]
        slots.append(playback.Panel(title, "#123456", data.recorded_replay(ref, policy, 5)))
    stepper.render(ref, slots, key="spike_step", highlights=[(np.int64(3), 7)], title="T")


def open_page(refused: bool = False, b: str = "tova", titles: bool = True, **query) -> AppTest:
    kwargs = {"refused": refused, "b": b, "titles": titles}
    at = AppTest.from_function(_page, kwargs=kwargs, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def payload_header(at: AppTest) -> dict[str, Any]:
    return playback.decode(player_element(at).proto.bytes)[0]


def test_the_payload_carries_the_views_settings_and_a_stable_view_id():
    at = open_page()
    header = payload_header(at)
    # Not in the session yet: the view opens at the first step either panel evicts at (the toy
    # trace's budget-8 caches are full after 8 steps: their first victim goes at step 8).
    first = _first_eviction(("h2o", "tova"))
    assert first > 0
    assert at.session_state["spike_step"] == first
    assert header["start"] == {"step": first, **stepper.SETTINGS}
    assert header["highlights"] == [[3, "7"]]  # JSON types, whatever the page passed
    assert header["presenter"] is False
    assert header["url"] == {"step": "spike_step", "defaults": stepper.SETTINGS}
    assert header["plotly"] == "/app/static/plotly.min.js"
    assert [p["title"] for p in header["panels"]] == ["h2o", "tova"]
    view = header["view"]
    at.run()
    assert payload_header(at)["view"] == view  # a rerun of the same view is the same view
    at.session_state["presenter"] = True
    at.session_state["width"] = 64
    at.run()
    header = payload_header(at)
    assert header["presenter"] is True and header["view"] != view
    assert header["start"] == {"step": first, **stepper.SETTINGS, "width": 64}


def _first_eviction(names) -> int:
    """The first step at which any of the page's policies evicts, read off their replays."""
    from app import data
    from h2o import analysis, replay

    ref = data.load("toy", {})
    steps = []
    for name in names:
        r = replay(analysis.make_policy(name, 8, recent_window=2), ref.trace, 5)
        steps.append(int(r.victim_step.min()))
    return min(steps)


def test_a_step_chosen_by_the_link_is_kept_even_at_zero():
    at = open_page(spike_step=0)
    assert at.session_state["spike_step"] == 0
    assert payload_header(at)["start"]["step"] == 0


def test_a_view_of_refused_panels_only_still_plays():
    header = payload_header(open_page(refused=True))
    assert [p["error"] for p in header["panels"]] == ["no room", "no room"]
    a, b = header["range"]
    assert 0 == a < b <= TOY_STEPS


@pytest.mark.parametrize("step", [0, TOY_STEPS - 1, TOY_STEPS, 999])
@pytest.mark.slow
def test_a_link_step_past_the_trace_is_named_and_shown_at_the_last_step(step):
    at = open_page(spike_step=step)
    shown = min(step, TOY_STEPS - 1)
    errors = [e.value for e in at.error]
    if step > TOY_STEPS - 1:
        assert errors == [
            f"Ignored from the link: spike_step={step} is past the last step of the trace "
            f"`toy` ({TOY_STEPS - 1}). Showing step {TOY_STEPS - 1}."
        ]
        assert at.error[0].icon == ":material/error:"
    else:
        assert errors == []
    assert at.session_state["spike_step"] == shown
    assert payload_header(at)["start"]["step"] == shown


def test_the_view_id_names_the_replays_even_under_the_same_titles():
    """A new view (so the browser starts it afresh) whenever a panel's replay differs, whatever
    the page titles its panels."""
    views = {b: payload_header(open_page(b=b, titles=False))["view"] for b in ("tova", "random")}
    assert views["tova"] != views["random"]


def test_the_download_is_one_html_file_of_the_size_its_help_says(exports):
    at = open_page()
    (button,) = at.get("download_button")
    assert button.proto.label == "Download these steps as HTML"
    assert button.proto.icon == ":material/download:" and button.proto.ignore_rerun
    assert "spike_step__export" in button.proto.id
    (name,) = [n for n in exports if n.endswith(".html")]
    assert exports[f"{name} mimetype"] == "text/html"
    size = len(exports[name]()) / 1e6
    assert button.proto.help == (
        f"One self-contained file (plotly.js and the data inside, about {round(size)} MB) that "
        "steps and plays in any browser, offline, with no server: for slides."
    )
