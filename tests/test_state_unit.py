"""The app's session model and its URL (app/state.py), function by function, without a page.

``st.session_state``, ``st.query_params`` and the few elements the module draws are replaced by
small stand-ins, so each rule of the module docstring is checked directly: the model and its
``w_<name>`` widget mirrors, the escaping of strings from outside, the link read once per
session (each parameter at its smallest accepted value and one below it, each view setting at
every allowed value and refused otherwise), each link problem reported once, and the query
string rewritten from the model (view settings at their default left out).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import pytest
import streamlit as st

from app import state

PLAYER_JS = Path(__file__).resolve().parents[1] / "h2o" / "player" / "js" / "player.js"
INT_PARAMS = [n for n, (kind, _) in state.URL_PARAMS.items() if kind is int]
STR_PARAMS = [n for n, (kind, _) in state.URL_PARAMS.items() if kind is str]


class QueryParams:
    """``st.query_params``'s two methods the module uses, counting the rewrites."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.values = dict(values or {})
        self.writes = 0

    def to_dict(self) -> dict[str, str]:
        return dict(self.values)

    def from_dict(self, values: dict[str, str]) -> None:
        self.values = dict(values)
        self.writes += 1


@pytest.fixture
def ss(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    session: dict[str, Any] = {}
    monkeypatch.setattr(st, "session_state", session)
    return session


def link(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> QueryParams:
    qp = QueryParams(values)
    monkeypatch.setattr(st, "query_params", qp)
    return qp


# -- the model and its widget mirrors -----------------------------------------------------------
def test_wkey_names_the_widget_mirror():
    assert state.wkey("budget") == "w_budget"
    assert state.wkey(state.PRESENTER) == "w_presenter"


def test_set_value_changes_the_model_and_its_mirror(ss):
    ss.update(budget=10, w_budget=10)
    state.set_value("budget", 32)
    assert ss == {"budget": 32, "w_budget": 32}


def test_mirror_sets_the_widget_from_the_model_and_copies_changes_back(ss):
    calls: list[int] = []
    kwargs = state.mirror("budget", 64, on_change=lambda: calls.append(ss["budget"]))
    assert ss == {"budget": 64, "w_budget": 64}  # the default, for a new session
    assert kwargs["key"] == "w_budget"
    ss["w_budget"] = 12  # the user moves the widget
    kwargs["on_change"]()
    assert ss["budget"] == 12 and calls == [12]  # copied back before the page's callback runs


def test_mirror_keeps_the_models_value_over_the_default_and_a_stale_widget(ss):
    ss.update(budget=20, w_budget=99)  # the widget's state from before a page switch
    kwargs = state.mirror("budget", 64)
    assert ss == {"budget": 20, "w_budget": 20}
    ss["w_budget"] = 30
    kwargs["on_change"]()  # no page callback: only the copy
    assert ss["budget"] == 30


# -- strings from outside -----------------------------------------------------------------------
@pytest.mark.parametrize("char", list("\\`*_[]#!<>|~$"))
def test_md_escapes_every_markdown_character(char):
    assert state.md(f"a{char}b") == f"a\\{char}b"


def test_md_leaves_plain_text_and_turns_newlines_into_spaces():
    assert state.md("plain text, 1.5 (ok) - yes") == "plain text, 1.5 (ok) - yes"
    assert state.md("two\nlines") == "two lines"
    assert state.md(12) == "12"


def test_md_of_a_hostile_name_has_no_live_markup():
    out = state.md("<img src=x onerror=alert(1)> [sign in](evil.example)")
    assert out == "\\<img src=x onerror=alert(1)\\> \\[sign in\\](evil.example)"


@pytest.mark.parametrize("limit", [1, 5, 120])
def test_md_cuts_at_the_limit(limit):
    assert state.md("x" * limit, limit) == "x" * limit  # at the limit: whole
    cut = state.md("x" * (limit + 1), limit)
    assert cut == "x" * (limit - 1) + "…" and len(cut) == limit


def test_md_limit_defaults_to_120():
    assert state.md("y" * 120) == "y" * 120
    assert state.md("y" * 121) == "y" * 119 + "…"


def test_md_cuts_before_escaping():
    # The cut counts the user's characters, never splits an escape from its character.
    assert state.md("<" * 10, 4) == "\\<\\<\\<…"


def test_shown_quotes_and_cuts():
    assert state.shown("abc") == "`abc`"
    assert state.shown("a`b") == "`a'b`"  # a backtick cannot close the code span
    assert state.shown("z" * 24) == "`" + "z" * 24 + "`"
    assert state.shown("z" * 25) == "`" + "z" * 24 + "…`"
    assert state.shown("q" * 6, 5) == "`qqqqq…`"
    assert state.shown(7) == "`7`"


# -- view settings ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(state.CHOICES))
def test_setting_ok_accepts_exactly_the_choices(name):
    for choice in state.CHOICES[name]:
        assert state.setting_ok(name, choice)
    assert not state.setting_ok(name, "nope")
    assert not state.setting_ok(name, None)
    assert not state.setting_ok("no such setting", state.CHOICES[name][0])


def test_setting_ok_checks_the_type_not_only_the_value():
    assert state.setting_ok(state.SPEED, 1)
    assert not state.setting_ok(state.SPEED, True)  # True == 1, but not a speed
    assert not state.setting_ok(state.SPEED, 1.0)
    assert not state.setting_ok(state.WIDTH, 128.0)
    assert state.setting_ok(state.REVEAL, False)
    assert not state.setting_ok(state.REVEAL, 0)  # 0 == False, but not a switch
    assert not state.setting_ok(state.WIDTH, [128])


@pytest.mark.parametrize(
    ("value", "text"), [(True, "1"), (False, "0"), (128, "128"), ("log", "log"), (0, "0")]
)
def test_url_text(value, text):
    assert state.url_text(value) == text


# -- reading the link ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", INT_PARAMS)
def test_read_url_takes_each_whole_number_from_its_smallest_value(ss, monkeypatch, name):
    lowest = state.URL_PARAMS[name][1]
    link(monkeypatch, {name: str(lowest)})
    state.read_url()
    assert ss[name] == lowest and type(ss[name]) is int
    assert ss[state.URL_PROBLEMS] == {}
    assert ss[state.FROM_URL] == {name}


@pytest.mark.parametrize("name", INT_PARAMS)
def test_read_url_refuses_a_number_below_the_smallest(ss, monkeypatch, name):
    lowest = state.URL_PARAMS[name][1]
    link(monkeypatch, {name: str(lowest - 1)})
    state.read_url()
    assert name not in ss
    assert ss[state.URL_PROBLEMS] == {name: f"{name}={lowest - 1} is below {lowest}"}
    assert ss[state.FROM_URL] == set()


def test_the_smallest_values():
    assert state.URL_PARAMS[state.BUDGET][1] == 1 and state.URL_PARAMS[state.CHAPTER][1] == 1
    for name in (state.WINDOW, state.SINKS, state.STEP, state.SPIKE_STEP):
        assert state.URL_PARAMS[name][1] == 0


@pytest.mark.parametrize("name", INT_PARAMS)
@pytest.mark.parametrize("raw", ["ten", "1.5", "", "0x10"])
def test_read_url_refuses_what_is_not_a_whole_number(ss, monkeypatch, name, raw):
    link(monkeypatch, {name: raw})
    state.read_url()
    assert name not in ss
    assert ss[state.URL_PROBLEMS] == {name: f"{name}={state.shown(raw)} is not a whole number"}


@pytest.mark.parametrize("name", STR_PARAMS)
def test_read_url_takes_text_parameters_as_they_are(ss, monkeypatch, name):
    link(monkeypatch, {name: "my trace [1]"})
    state.read_url()
    assert ss[name] == "my trace [1]"
    assert ss[state.FROM_URL] == {name}


def test_read_url_takes_a_whole_view(ss, monkeypatch):
    link(
        monkeypatch,
        {"junk": "x", "budget": "32", "recent_window": "4", "trace": "canonical", "step": "7"},
    )
    state.read_url()
    assert {k: ss[k] for k in ("budget", "recent_window", "trace", "step")} == {
        "budget": 32,
        "recent_window": 4,
        "trace": "canonical",
        "step": 7,
    }
    assert "junk" not in ss  # not a parameter: ignored, not a problem
    assert ss[state.URL_PROBLEMS] == {}
    assert ss[state.FROM_URL] == {"budget", "recent_window", "trace", "step"}


def test_read_url_reads_the_link_once_per_session(ss, monkeypatch):
    link(monkeypatch, {"budget": "32"})
    state.read_url()
    assert ss[state.URL_READ] is True
    ss["budget"] = 5  # the user changes it
    link(monkeypatch, {"budget": "40", "sinks": "-1"})
    state.read_url()
    assert ss["budget"] == 5 and "sinks" not in ss
    assert ss[state.URL_PROBLEMS] == {}


@pytest.mark.parametrize("name", list(state.CHOICES))
def test_read_url_takes_every_allowed_view_setting(ss, monkeypatch, name):
    for choice in state.CHOICES[name]:
        ss.clear()
        link(monkeypatch, {name: state.url_text(choice)})
        state.read_url()
        assert ss[name] == choice and type(ss[name]) is type(choice)
        assert ss[state.URL_PROBLEMS] == {}
        assert ss[state.FROM_URL] == set()  # settings have no trace to be checked against


SETTING_REFUSED = [
    (state.REVEAL, "true"),
    (state.REVEAL, "2"),
    (state.REVEAL, ""),
    (state.PRESENTER, "yes"),
    (state.WIDTH, "100"),
    (state.WIDTH, "000128"),  # six digits: too long, whatever it reads as
    (state.WIDTH, "-64"),
    (state.WIDTH, "64.0"),
    (state.SPEED, "0"),
    (state.SPEED, "fast"),
    (state.COLOUR, "LOG"),
    (state.ROWS, "some"),
]


@pytest.mark.parametrize(("name", "raw"), SETTING_REFUSED)
def test_read_url_refuses_other_view_settings_naming_the_allowed_ones(ss, monkeypatch, name, raw):
    link(monkeypatch, {name: raw})
    state.read_url()
    assert name not in ss
    allowed = ", ".join(state.url_text(c) for c in state.CHOICES[name])
    assert ss[state.URL_PROBLEMS] == {name: f"{name}={state.shown(raw)} is not one of {allowed}"}


def test_read_url_reads_five_digits_of_a_number_setting(ss, monkeypatch):
    link(monkeypatch, {state.WIDTH: "00128"})  # five digits: read as 128
    state.read_url()
    assert ss[state.WIDTH] == 128


def test_read_url_reads_on_after_a_view_setting(ss, monkeypatch):
    link(monkeypatch, {"reveal": "1", "width": "9", "budget": "32", "trace": "t"})
    state.read_url()
    assert ss["reveal"] is True and ss["budget"] == 32 and ss["trace"] == "t"
    assert set(ss[state.URL_PROBLEMS]) == {"width"}
    assert ss[state.FROM_URL] == {"budget", "trace"}


def test_the_messages_name_the_allowed_values(ss, monkeypatch):
    link(monkeypatch, {"reveal": "yes", "width": "7"})
    state.read_url()
    assert ss[state.URL_PROBLEMS] == {
        "reveal": "reveal=`yes` is not one of 0, 1",
        "width": "width=`7` is not one of 64, 128, 256",
    }


# -- values from the link, and its problems ------------------------------------------------------
def test_from_link_answers_once_per_name(ss, monkeypatch):
    link(monkeypatch, {"budget": "32", "sinks": "2"})
    state.read_url()
    assert state.from_link("budget") is True
    assert state.from_link("budget") is False  # checked once
    assert state.from_link("step") is False
    assert state.from_link("sinks") is True


def test_from_link_before_any_link(ss):
    assert state.from_link("budget") is False


def test_url_problems_are_reported_once_by_the_page_that_uses_them(ss, monkeypatch):
    link(monkeypatch, {"budget": "0", "step": "x", "sinks": "-2"})
    state.read_url()
    assert state.url_problems(["trace"]) == []
    assert state.url_problems(["sinks", "budget"]) == [
        "sinks=-2 is below 0",
        "budget=0 is below 1",
    ]
    assert state.url_problems(["budget", "sinks"]) == []  # reported once
    assert state.url_problems(["step"]) == ["step=`x` is not a whole number"]


def test_url_problems_before_any_link(ss):
    assert state.url_problems(["budget"]) == []


def test_report_url_problems_shows_each_as_an_error(ss, monkeypatch):
    errors: list[tuple[str, dict]] = []
    monkeypatch.setattr(st, "error", lambda text, **kw: errors.append((text, kw)))
    link(monkeypatch, {"budget": "0", "sinks": "-1"})
    state.read_url()
    state.report_url_problems(["budget", "sinks", "step"])
    assert errors == [
        ("Ignored from the link: budget=0 is below 1.", {"icon": ":material/error:"}),
        ("Ignored from the link: sinks=-1 is below 0.", {"icon": ":material/error:"}),
    ]
    state.report_url_problems(["budget"])
    assert len(errors) == 2


# -- writing the link ---------------------------------------------------------------------------
def test_publish_writes_exactly_the_pages_entries(ss, monkeypatch):
    qp = link(monkeypatch, {"old": "1"})
    ss.update(trace="canonical", budget=32, sinks=2, step=0)
    state.publish(["trace", "budget", "recent_window", "step"])  # recent_window: not in the model
    assert qp.values == {"trace": "canonical", "budget": "32", "step": "0"}
    assert qp.writes == 1
    state.publish(["trace", "budget", "recent_window", "step"])
    assert qp.writes == 1  # already so: not rewritten


@pytest.mark.parametrize("name", list(state.VIEW_DEFAULTS))
def test_publish_leaves_out_view_settings_at_their_default(ss, monkeypatch, name):
    qp = link(monkeypatch, {})
    ss[name] = state.VIEW_DEFAULTS[name]
    state.publish([name])
    assert qp.values == {} and qp.writes == 0
    other = next(c for c in state.CHOICES[name] if c != state.VIEW_DEFAULTS[name])
    ss[name] = other
    state.publish([name])
    assert qp.values == {name: state.url_text(other)}


def test_published_view_reads_back_as_the_same_model(ss, monkeypatch):
    qp = link(monkeypatch, {})
    view = {"trace": "x", "budget": 9, "sinks": 0, "reveal": True, "width": 256, "colour": "log"}
    ss.update(view)
    state.publish(list(view))
    ss.clear()
    link(monkeypatch, qp.values)
    state.read_url()
    assert {k: ss[k] for k in view if k in ss} == {k: v for k, v in view.items() if k != "colour"}


def test_presenter_default_is_off():
    assert state.VIEW_DEFAULTS[state.PRESENTER] is False
    assert state.CHOICES[state.PRESENTER] == (False, True)


# -- the presenter switch -----------------------------------------------------------------------
@pytest.mark.parametrize("on", [True, False])
def test_presenter_toggle(ss, monkeypatch, on):
    drawn: list[tuple] = []
    monkeypatch.setattr(st, "sidebar", contextlib.nullcontext())
    monkeypatch.setattr(st, "header", lambda text: drawn.append(("header", text)))

    def toggle(label: str, **kw: Any) -> int:
        drawn.append(("toggle", label, kw["key"]))
        assert ss[kw["key"]] is False  # set from the model's default
        assert "help" in kw and "Space plays" in kw["help"]
        return int(on)  # a truthy value: stored as a bool

    monkeypatch.setattr(st, "toggle", toggle)
    assert state.presenter_toggle() is on
    assert ss[state.PRESENTER] is on
    assert drawn == [("header", "View"), ("toggle", "Presenter mode", "w_presenter")]


def test_presenter_help_names_the_keys_the_player_binds(ss, monkeypatch):
    helps: list[str] = []
    monkeypatch.setattr(st, "sidebar", contextlib.nullcontext())
    monkeypatch.setattr(st, "header", lambda text: None)
    monkeypatch.setattr(st, "toggle", lambda label, **kw: helps.append(kw["help"]) or False)
    state.presenter_toggle()
    (text,) = helps
    js = PLAYER_JS.read_text()
    binds = set(re.findall(r'k === "([^"]+)"', js))
    assert {"ArrowLeft", "ArrowRight", "PageUp", "PageDown", " "} <= binds
    assert "e.shiftKey ? 10 : 1" in js
    # The help, as the reader sees it: one sentence on the view, one on those keys.
    assert text.startswith("For a projector: larger type, and per policy only the heatmap, ")
    assert "the story and the kept slots. In the browser: ←/→ (or a clicker's " in text
    assert "PageUp/PageDown) step, Shift steps by 10, Space plays and pauses." in text
    assert text.endswith("pauses.")
