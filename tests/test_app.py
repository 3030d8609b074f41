"""The classroom app under Streamlit's AppTest: every page, stepping, play, errors, the knee.

AppTest runs the scripts in this process, so the app's caches (traces, replays, sweeps) are
shared between tests: the canonical trace and its sweep are computed once for the whole file.
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

import h2o
from app import controls, data
from h2o.player import playback

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
PAGES = [
    "views/lesson.py",
    "views/step_through.py",
    "views/window_explorer.py",
    "views/stale_spike.py",
    "views/all_policies.py",
    "views/how_it_works.py",
    "views/budget_split.py",
]
MAX_FIGURE_BYTES = 1_500_000


def open_app(page: str = "views/step_through.py", **query: object) -> AppTest:
    """The app at ``page`` (Step through by default), opened from a link with ``query``: the
    first run lands on the lesson (the default page) and reads the link, then the page runs."""
    at = AppTest.from_file(MAIN, default_timeout=120)
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    if page != "views/lesson.py":
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def specs(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def values(arr: list | dict) -> np.ndarray:
    """A figure array as numbers (Plotly sends numpy arrays as base64 typed arrays)."""
    if isinstance(arr, dict):
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]))
    return np.asarray(arr, dtype=float)


def npz_bytes(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def trace_bytes(trace: h2o.Trace) -> bytes:
    buf = io.BytesIO()
    h2o.save_trace(trace, buf)
    return buf.getvalue()


def player(at: AppTest):
    """The step view's player element (a custom component; its data is the payload)."""
    (el,) = [e for e in at.get("bidi_component") if e.proto.component_name == "h2o_player"]
    return el


def view(at: AppTest) -> tuple[dict, dict]:
    """The payload the browser receives: header and arrays (see h2o/player/playback.py)."""
    return playback.decode(player(at).proto.bytes)


def stories(at: AppTest, step: int | None = None) -> list[str]:
    """Each panel's narration at ``step`` (the session's step by default), as the browser shows."""
    header, _ = view(at)
    t = at.session_state["step"] if step is None else step
    a = header["range"][0]
    return [p["stories"][t - a] for p in header["panels"] if "error" not in p]


def report(at: AppTest, **values: object) -> AppTest:
    """What the browser sends when the user pauses or stops interacting: its step and settings."""
    el = player(at)
    states = at._tree.get_widget_states()
    w = states.widgets.add()
    w.id = el.proto.id
    w.json_value = json.dumps({"view": values})
    at._run(states)
    assert not at.exception, [e.value for e in at.exception]
    return at


# -- every page ------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES)
@pytest.mark.slow
def test_every_page_runs(page):
    at = open_app(page)
    assert not at.error, [e.value for e in at.error]
    assert at.title, "every page has a title"
    for spec in specs(at):
        assert spec["layout"]["title"]["text"], "every chart has a title"
        assert spec["layout"]["xaxis"]["title"]["text"], "and axis titles"
        assert spec["layout"]["yaxis"]["title"]["text"]
        # The app builds figures unvalidated, for speed: validate what it sent here.
        go.Figure(spec)


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.slow
def test_no_figure_above_budget(page):
    at = open_app(page)
    sizes = [len(c.proto.spec.encode()) for c in at.get("plotly_chart")]
    sizes += [len(el.proto.bytes) for el in at.get("bidi_component") if el.proto.bytes]
    print(page, "largest figure or player payload:", max(sizes, default=0), "bytes")
    assert max(sizes, default=0) <= MAX_FIGURE_BYTES


@pytest.mark.parametrize(
    "query", [{"step": 3000}, {"budget": 1024}, {"budget": 4095, "step": 4095}]
)
@pytest.mark.slow
def test_one_range_load_stays_under_budget(query):
    """A range carries every step's kept scores: its length shrinks as the budget grows."""
    at = open_app(**query, policy_b="scissorhands")
    header, _ = view(at)
    size = len(player(at).proto.bytes)
    print(query, "range", header["range"], "payload", size, "bytes")
    assert size <= MAX_FIGURE_BYTES
    a, b = header["range"]
    assert a <= at.session_state["step"] < b


# -- stepping --------------------------------------------------------------------------------------
def test_the_payload_holds_every_step_of_its_range():
    """Stories, victims and scores per step are the replay's own; kept positions follow from the
    first step's and the victims, as the browser derives them."""
    at = open_app(step=1000, policy_b="tova")
    header, arrays = view(at)
    a, b = header["range"]
    assert a <= 1000 < b and b - a >= 128
    ctx_budget = at.session_state["budget"]
    for i, name in enumerate(("h2o", "tova")):
        panel, arr = header["panels"][i], arrays[str(i)]
        window = 1 if name == "tova" else at.session_state["recent_window"]
        rep = h2o.replay(
            h2o.POLICIES[name](ctx_budget, recent_window=window), h2o.canonical_trace()
        )
        assert panel["stories"] == [rep.narrate(t) for t in range(a, b)]
        offs = np.concatenate([[0], np.cumsum(arr["n_kept"])])
        kept = list(arr["kept0"])
        for t in range(a, b):
            pos, scores = rep.kept_at(t)
            assert kept == pos.tolist(), t
            got = arr["scores"][offs[t - a] : offs[t - a + 1]]
            assert np.array_equal(got, scores.astype(np.float32)), t
            gone = arr["v_pos"][arr["v_step"] == t].tolist()
            assert gone == [p for p, _ in rep.victims_at(t)]
            kept = [p for p in kept if p not in gone] + [t + 1]
        assert np.array_equal(arr["mass"], rep.mass.astype(np.float32))


def test_the_view_opens_at_the_first_eviction():
    # No step chosen: the view opens where the first eviction happens. Both default policies
    # hold ``budget`` positions after steps 0..budget-1 and evict first at step ``budget``.
    at = open_app()
    budget = at.session_state["budget"]
    assert at.session_state["step"] == budget > 0
    assert view(at)[0]["start"]["step"] == budget


def test_a_report_moves_the_step_and_the_link():
    at = open_app(step=0)  # a link's step is kept, even 0
    assert at.session_state["step"] == 0
    first = view(at)[0]["range"]
    report(at, step=40, colour="linear", rows="all", width=64, speed=30, reveal=True)
    ss = at.session_state
    assert (ss["step"], ss["colour"], ss["rows"], ss["width"], ss["speed"], ss["reveal"]) == (
        40,
        "linear",
        "all",
        64,
        30,
        True,
    )
    q = at.query_params
    assert (q["step"], q["colour"], q["rows"], q["width"], q["speed"], q["reveal"]) == (
        "40",
        "linear",
        "all",
        "64",
        "30",
        "1",
    )
    # Still inside the loaded range: the same range (in the browser only the step view's fragment
    # reruns, and its bytes are identical; tests/test_browser.py counts them).
    assert view(at)[0]["range"] == first
    # Near the edge: the next range, around the step.
    report(at, step=300)
    header, _ = view(at)
    a, b = header["range"]
    assert a <= 300 < b and not playback.needs_load((a, b), 300, 4096)
    report(at, step=4095)
    assert view(at)[0]["range"][1] == 4096
    assert stories(at)[0].startswith("step 4095:")


@pytest.mark.parametrize(
    "values",
    [
        {"step": "12"},
        {"step": True},
        {"step": None, "colour": "<b>red</b>"},
        {"step": 10**9},
        {"step": -5, "width": 100, "speed": 1000, "rows": ["kept"], "reveal": "yes"},
    ],
)
def test_a_report_is_browser_input_and_is_checked(values):
    at = open_app(trace="toy", step=9)
    report(at, **values)
    ss = at.session_state
    if isinstance(values["step"], int) and not isinstance(values["step"], bool):
        assert ss["step"] == min(max(values["step"], 0), 39)
    else:
        assert ss["step"] == 9
    assert ss.get("colour", "log") == "log" and ss.get("width", 128) == 128
    assert ss.get("speed", 5) == 5 and ss.get("rows", "kept") == "kept"
    assert ss.get("reveal", False) is False


def test_a_new_view_starts_at_the_session_step():
    at = open_app(trace="toy", step=12)
    assert view(at)[0]["start"]["step"] == 12
    report(at, step=20)
    at.selectbox(key="w_policy_b").set_value("scissorhands").run()
    header, _ = view(at)
    assert header["start"]["step"] == 20
    assert "Scissorhands" in header["panels"][1]["title"]


# -- parameters ------------------------------------------------------------------------------------
def test_changing_recent_window_recomputes():
    at = open_app(step=300)
    assert "positions 269–300 are protected" in stories(at)[0]  # recent_window 32
    at.number_input(key="w_recent_window").set_value(64).run()
    assert not at.exception
    assert "positions 237–300 are protected" in stories(at)[0]
    assert "recent_window=64" in view(at)[0]["panels"][0]["title"]
    assert at.session_state["step"] == 300  # nothing else lost
    assert at.query_params["recent_window"] == "64"


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("w_recent_window", 300, "Lower recent_window below 256"),
        ("w_sinks", 256, "Lower sinks below 256"),
    ],
)
def test_invalid_combination_shows_an_error_and_keeps_the_rest(key, value, words):
    at = open_app(step=500)
    at.number_input(key=key).set_value(value).run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert words in errors
    # The other panel still shows its replay, and the step survived.
    panels = view(at)[0]["panels"]
    assert sum("error" in p for p in panels) == 1 and words in " ".join(
        p.get("error", "") for p in panels
    )
    assert at.session_state["step"] == 500
    at.number_input(key=key).set_value(4 if key == "w_sinks" else 32).run()
    assert not at.error and at.session_state["step"] == 500


def test_link_opens_the_exact_view():
    at = open_app(trace="toy", budget=8, recent_window=2, sinks=1, policy_a="scissorhands", step=12)
    assert at.session_state["trace"] == "toy"
    assert at.selectbox(key="w_policy_a").value == "scissorhands"
    assert at.number_input(key="w_budget").value == 8
    header, _ = view(at)
    assert header["start"]["step"] == 12
    assert stories(at)[0].startswith("step 12:")
    assert "Scissorhands (recent_window=2)" in header["panels"][0]["title"]


def test_bad_link_values_are_reported_not_fatal():
    at = open_app(budget="lots", policy_a="nope", trace="upload:x#1")
    errors = " ".join(e.value for e in at.error)
    assert "budget=`lots`" in errors and "nope" in errors and "upload:x#1" in errors
    assert at.session_state["trace"] == "canonical"


def test_link_values_beyond_the_trace_are_ignored_and_named():
    # The toy trace has 40 steps: a budget, window or sinks above 39, a step above 39, cannot be.
    at = open_app(trace="toy", budget=100_000, recent_window=500, sinks=2, step=999)
    errors = [e.value for e in at.error]
    assert any(e.startswith("Ignored from the link: budget=100000 is above 39") for e in errors)
    assert any(e.startswith("Ignored from the link: recent_window=500 is above 39") for e in errors)
    assert any(
        e.startswith("Ignored from the link: step=999 is past the last step") for e in errors
    )
    ss = at.session_state
    assert (ss["budget"], ss["recent_window"], ss["sinks"], ss["step"]) == (8, 2, 2, 39)
    assert view(at)[0]["start"]["step"] == 39
    assert at.number_input(key="w_budget").proto.max == 39
    assert stories(at)[0].startswith("step 39:")
    # Checked once: the values stay put from here on, and the messages go.
    report(at, step=38)
    assert not at.error and at.session_state["step"] == 38


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"budget": "9" * 5000}, "budget=`99999999999999999999"),  # cut short in the message
        ({"budget": "0"}, "budget=0 is below 1"),
        ({"sinks": "-3"}, "sinks=-3 is below 0"),
        ({"step": "4.5"}, "step=`4.5` is not a whole number"),
        ({"spike_step": "1e9"}, "spike_step=`1e9` is not a whole number"),
        ({"speed": "<b>9</b>"}, "speed=`<b>9</b>` is not one of 1, 2, 5, 10, 20, 30, 60"),
    ],
)
@pytest.mark.slow
def test_link_values_that_are_not_usable_numbers(query, words):
    page = "views/stale_spike.py" if "spike_step" in query else "views/step_through.py"
    at = open_app(page, trace="toy", **query)
    errors = " ".join(e.value for e in at.error)
    assert words in errors and len(errors) < 400
    if page == "views/step_through.py":
        # the link's step ignored: the view opens at the first eviction (step = budget)
        assert at.session_state["budget"] == 8 and at.session_state["step"] == 8


def live_markup(text: str) -> list[str]:
    """What markdown would turn into a link, an image or HTML, outside code spans and escapes."""
    bare = re.sub(r"\\.", "", re.sub(r"`[^`]*`", "", text))  # code spans and escapes are inert
    return re.findall(r"\]\(|<[a-zA-Z!/]", bare)


EVIL = [
    "[Click here to sign in](https://example.com/login)",
    "![x](http://127.0.0.1:9/track.png)",
    "<img src=x onerror=alert(1)>",
    "x" * 60_000,
]


@pytest.mark.parametrize("evil", EVIL)
@pytest.mark.slow
def test_values_from_a_link_are_never_markup(evil):
    at = open_app(trace=evil, policy_a=evil, policy_b="tova", speed=evil, colour=evil)
    errors = [e.value for e in at.error]
    assert len(errors) >= 3
    for e in errors:
        assert live_markup(e) == [], e
        assert len(e) < 500


@pytest.mark.parametrize("evil", EVIL[:3])
@pytest.mark.slow
def test_an_upload_name_is_never_markup(evil):
    at = open_app(trace="toy")
    upload(at, f"{evil}.npz", b"not a zip file at all")
    (error,) = [e.value for e in at.error]
    assert "not an .npz file" in error
    assert live_markup(error) == [], error


def test_the_budget_cannot_exceed_the_trace():
    at = open_app(trace="toy")
    assert at.number_input(key="w_budget").proto.max == 39
    at.number_input(key="w_budget").set_value(39).run()  # the largest budget still evicts once
    assert not at.exception and not at.error


def test_the_largest_budget_on_the_canonical_trace():
    # 4,096 × 4,096 recorded slots per panel (200 MB each), kept in the big-replay cache.
    at = open_app(budget=4095, step=4095)
    assert not at.error, [e.value for e in at.error]
    assert "evicted" in stories(at)[0]
    assert len(player(at).proto.bytes) <= MAX_FIGURE_BYTES


def test_tova_keeps_its_own_window_everywhere():
    at = open_app(trace="toy", budget=8, recent_window=3, policy_b="tova")
    heads = [p["title"] for p in view(at)[0]["panels"]]
    assert any("H2O (recent_window=3)" in h for h in heads)
    assert any("TOVA (recent_window=1)" in h for h in heads)
    at.number_input(key="w_recent_window").set_value(8).run()  # H2O refuses, TOVA does not
    errors = " ".join(e.value for e in at.error)
    assert "H2O refuses" in errors and "TOVA" not in errors
    at.switch_page("views/all_policies.py").run()
    assert not at.exception
    curve = specs(at)[1]
    assert "TOVA (recent_window=1)" in [tr["name"] for tr in curve["data"]]
    assert "TOVA keeps its own recent_window of 1" in " ".join(c.value for c in at.caption)


def test_all_policies_shows_h2o_at_the_traces_band_beside_the_sidebars_window():
    """The card's default window (32) is narrower than the canonical trace's recency band (64):
    the budget chart draws H2O at the band's width too, dashed, and its caption says why; a
    trace that names no band (the toy) shows the sidebar's window alone."""
    at = open_app("views/all_policies.py")
    w, band = at.session_state["recent_window"], h2o.analysis.band_width(h2o.canonical_trace())
    assert band is not None and w != band
    for fig in specs(at)[1:3]:  # the budget chart's two tabs: mass and recall
        h2o_lines = [tr for tr in fig["data"] if tr["name"].startswith("H2O (")]
        assert [tr["name"] for tr in h2o_lines] == [
            f"H2O (recent_window={w})",
            f"H2O (recent_window={band})",
        ]
        assert h2o_lines[0]["line"]["dash"] != h2o_lines[1]["line"]["dash"]
    caption = " ".join(c.value for c in at.caption)
    assert f"H2O also at recent_window {band}, the width of this trace's recency band" in caption
    at = open_app("views/all_policies.py", trace="toy")
    fig = specs(at)[1]
    assert [tr["name"] for tr in fig["data"] if tr["name"].startswith("H2O (")] == [
        f"H2O (recent_window={at.session_state['recent_window']})"
    ]


def test_budget_one_refuses_tova_and_says_why():
    at = open_app(trace="toy", budget=1, recent_window=0, sinks=0, policy_b="tova")
    errors = " ".join(e.value for e in at.error)
    assert "TOVA refuses these settings" in errors
    assert "always keeps its own recent_window of 1, so raise the budget" in errors


def test_all_policies_names_the_skipped_budgets():
    """Every method of the lineup that refuses the window 6 at budget 4 is named there, in the
    registry's order (read from the classes, H2O, Scissorhands and random eviction among them)."""
    from h2o.policies.registry import BUILT_IN, refusal

    at = open_app("views/all_policies.py", trace="toy", recent_window=6, sinks=2)
    caption = " ".join(c.value for c in at.caption)
    refusing = [
        c.label
        for c in BUILT_IN
        if c.runs_on(h2o.toy_trace()) and not c.selects and not c.own_window
        if refusal(c.name, 4, recent_window=6, sinks=2)
    ]
    assert refusing[:3] == ["H2O", "Scissorhands", "Random"]
    said = f"Skipped where a policy refuses its settings: {', '.join(refusing)} at budget 4;"
    assert said in caption
    assert "at budget 6" in caption and "at budget 8" not in caption


def test_state_survives_page_switches():
    at = open_app(trace="toy")
    at.number_input(key="w_recent_window").set_value(3).run()
    at.selectbox(key="w_policy_b").set_value("tova").run()
    report(at, step=17)
    at.switch_page("views/window_explorer.py").run()
    at.switch_page("views/how_it_works.py").run()
    at.switch_page("views/step_through.py").run()
    assert not at.exception
    assert at.session_state["recent_window"] == 3
    assert at.selectbox(key="w_policy_b").value == "tova"
    assert at.session_state["step"] == 17
    assert view(at)[0]["start"]["step"] == 17  # a fresh player starts where the session is


# -- uploads ---------------------------------------------------------------------------------------
def upload(at: AppTest, name: str, payload: bytes) -> AppTest:
    at.file_uploader(key="w_upload").set_value((name, payload, "application/octet-stream")).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_upload_of_a_good_trace_selects_it():
    at = open_app()
    upload(at, "toy-copy.npz", trace_bytes(h2o.toy_trace()))
    assert at.session_state["trace"].startswith("upload:toy-copy.npz#")
    assert at.number_input(key="w_budget").value == 8  # its suggested budget
    assert not at.error


def with_meta(trace: h2o.Trace, **meta: object) -> bytes:
    """An .npz of ``trace``'s weights with exactly this metadata (anything JSON can say)."""
    return npz_bytes(weights=trace.weights, meta=np.array(json.dumps(meta)))


@pytest.mark.parametrize(
    ("meta", "budget", "top_k"),
    [
        ({"suggested_budget": "many"}, 10, 5),  # not a number: the library's defaults
        ({"suggested_budget": 0}, 10, 5),
        ({"suggested_budget": 8, "suggested_recent_window": 8}, 8, 4),
        ({"suggested_top_k": 0}, 10, 5),
        ({"suggested_budget": 1000}, 39, 19),  # more than the trace holds: capped
        ({"suggested_top_k": 10**12}, 10, 39),  # would allocate terabytes for recall
        ({"band": float("nan"), "source": "x" * 10_000}, 10, 5),
    ],
)
@pytest.mark.slow
def test_untrusted_metadata_gives_usable_settings(meta, budget, top_k):
    at = open_app(trace="toy", step=9)
    upload(at, "meta.npz", with_meta(h2o.toy_trace(), **meta))
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["trace"].startswith("upload:meta.npz#")
    assert at.number_input(key="w_budget").value == budget
    assert f"Recall is top-{top_k} recall" in " ".join(c.value for c in at.caption)
    assert at.session_state["recent_window"] < budget and at.session_state["sinks"] < budget
    assert all(len(c.value) < 400 for c in at.caption)  # long metadata is cut short
    for page in PAGES[:4]:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])


def test_a_two_step_trace_works_everywhere():
    at = open_app(trace="toy")
    upload(at, "two.npz", npz_bytes(weights=np.array([1.0], np.float32)))  # the shortest trace
    assert at.number_input(key="w_budget").value == 1
    assert at.number_input(key="w_budget").proto.max == 1
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
    at.switch_page("views/window_explorer.py").run()
    assert "this trace has 2 steps: pick a longer one" in at.error[0].value


def test_an_upload_that_fails_late_leaves_the_session_as_it_was(monkeypatch):
    """Everything that can raise runs before the upload is stored (here: the defaults)."""
    at = open_app(trace="toy", step=9, budget=12, recent_window=3)
    real = controls.defaults

    def defaults(trace):
        if trace.name == "late":
            raise ValueError("its defaults cannot be worked out")
        return real(trace)

    monkeypatch.setattr(controls, "defaults", defaults)
    before = {k: at.session_state[k] for k in ("trace", "budget", "recent_window", "sinks")}
    upload(at, "late.npz", trace_bytes(h2o.toy_trace()))
    errors = " ".join(e.value for e in at.error)
    assert "its defaults cannot be worked out" in errors and "'toy' is still selected" in errors
    assert {k: at.session_state[k] for k in before} == before
    assert at.session_state["step"] == 9
    assert not at.session_state["_uploads"]
    assert "late.npz" not in at.selectbox(key="w_trace").options  # uploads show by file name
    at.run()  # and the next rerun is clean
    assert not at.exception and not at.error


def test_token_strings_show_in_hovers_and_the_story():
    toy = h2o.toy_trace()
    tokens = [f" w{i}" for i in range(toy.steps)]
    tokens[5] = " License"
    named = h2o.Trace(toy.name, toy.weights, dict(toy.meta), tuple(tokens))
    at = open_app()
    upload(at, "toy-tokens.npz", trace_bytes(named))
    report(at, step=5)
    assert "position 5 ' License' admitted" in stories(at)[0]
    assert view(at)[0]["tokens"][5] == " License"  # the browser labels rows and slots with it


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"not a zip file at all", "not an .npz file"),
        (npz_bytes(weights=np.array([1.0, 0.5, np.nan], np.float32)), "NaN"),
        (npz_bytes(weights=np.array([1.0, -0.5, 1.5], np.float32)), "negative"),
        (npz_bytes(weights=np.ones(4, np.float32)), "T(T-1)/2"),
        (npz_bytes(other=np.ones(3)), "expected 'weights' or 'attention'"),
        (npz_bytes(weights=np.zeros(0, np.float32)), "at least 2 steps"),
        (
            npz_bytes(weights=h2o.toy_trace().weights, tokens=np.array("abc")),
            "'tokens' must be a 1-D array",
        ),
        (trace_bytes(h2o.toy_trace())[:300], "not a readable .npz file"),
    ],
)
@pytest.mark.slow
def test_bad_upload_shows_an_error_and_keeps_the_trace(payload, words):
    at = open_app(trace="toy", step=9)
    upload(at, "bad.npz", payload)
    errors = " ".join(e.value for e in at.error)
    assert words in errors and "'toy' is still selected" in errors
    assert at.session_state["trace"] == "toy" and at.session_state["step"] == 9
    assert player(at) is not None  # the page still works


def test_oversized_upload_is_refused(monkeypatch):
    monkeypatch.setattr(data, "MAX_UPLOAD_STEPS", 50)
    at = open_app(trace="toy")
    upload(at, "big.npz", trace_bytes(h2o.stale_spike_trace()))  # 96 steps
    errors = " ".join(e.value for e in at.error)
    assert "96 steps; at most 50" in errors
    assert at.session_state["trace"] == "toy"


def test_edge_budgets_do_not_break_the_page():
    at = open_app(trace="toy", budget=39, recent_window=2, sinks=1)  # evicts at the last step only
    assert not at.error
    assert player(at) is not None
    at.number_input(key="w_budget").set_value(1).run()  # H2O needs recent_window < 1
    assert not at.exception
    assert "Lower recent_window below 1" in " ".join(e.value for e in at.error)
    for page in PAGES[1:]:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])


def test_damaged_archives_are_refused_with_a_value_error():
    """Truncated or corrupted uploads fail inside zipfile/zlib: the app says ValueError."""
    good = trace_bytes(h2o.toy_trace())
    rng = np.random.default_rng(0)
    kinds = set()
    for i in range(60):
        bad = bytearray(good)
        if i % 2:
            bad = bad[: int(rng.integers(4, len(bad)))]
        else:
            for j in rng.integers(0, len(bad), size=3):
                bad[j] = int(rng.integers(0, 256))
        key, up = data.make_upload(f"bad{i}.npz", bytes(bad))
        try:
            data.load(key, {key: up})
        except ValueError as e:
            kinds.add(str(e).split(" (")[0].split(":")[0])
    assert kinds  # and nothing but ValueError escaped


# -- the recentWindow explorer shows the card's knee -----------------------------------------------
def test_window_explorer_shows_the_knee_at_64():
    at = open_app("views/window_explorer.py")
    table = at.dataframe[0].value.set_index("recent_window")
    mass_fig, recall_fig = specs(at)[:2]
    mass = {tr["name"].split(":")[0]: values(tr["y"]) for tr in mass_fig["data"]}
    recall = {tr["name"].split(":")[0]: values(tr["y"]) for tr in recall_fig["data"]}
    sl_mass, sl_recall = mass["StreamingLLM (sinks=4)"][0], recall["StreamingLLM (sinks=4)"][0]
    # The figure plots what the table lists.
    assert np.allclose(mass["H2O"], table["H2O mass"].to_numpy())
    assert table.loc[32, "H2O mass"] < sl_mass
    assert table.loc[64, "H2O mass"] > sl_mass
    assert table.loc[64, "H2O top-32 recall"] > sl_recall
    flat = table.loc[table.index >= 72, "H2O mass"]
    assert len(flat) > 5
    assert (flat - table.loc[64, "H2O mass"]).abs().max() < 0.005
    # The band is marked on the figure.
    assert any("recency band (64)" in (s.get("name") or "") for s in mass_fig["layout"]["shapes"])


def test_window_explorer_returns_to_a_budget_from_the_cache():
    at = open_app("views/window_explorer.py")
    at.number_input(key="w_budget").set_value(128).run()
    assert not at.exception and not at.error
    assert at.dataframe[0].value["recent_window"].max() == 96
    at.number_input(key="w_budget").set_value(256).run()
    assert at.dataframe[0].value["recent_window"].max() == 192


# -- the stale-spike lesson ------------------------------------------------------------------------
def test_stale_spike_page_computes_its_story():
    at = open_app("views/stale_spike.py")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["H2O: position 0"] == "kept to the end"
    assert metrics["Scissorhands: position 0"].startswith("evicted at step")
    canonical = [v for k, v in metrics.items() if k.endswith("(recent_window=64) mass")]
    assert len(canonical) == 2 and abs(float(canonical[0]) - float(canonical[1])) < 0.01
    # The costliest eviction as the page opens (budget 8, recent_window 2, top-k 4).
    from h2o import age_bias

    spike = h2o.stale_spike_trace()
    c = age_bias.costliest_eviction(h2o.replay(h2o.H2O(8, recent_window=2), spike, 4), spike)
    (m,) = [m for m in at.metric if m.label.startswith("H2O: costliest eviction")]
    assert m.label == f"H2O: costliest eviction, step {c.evicted_at}"
    assert m.value == f"position {c.position}" and m.delta == f"{c.lost:.1f} steps' worth lost"
    assert f"more than {c.other_max:.2f}" in m.help


@pytest.mark.parametrize(
    ("page", "words"),
    [
        ("views/window_explorer.py", "marks none as yours"),
        ("views/all_policies.py", "the table shows H2O and Scissorhands at recent_window 32, 64"),
    ],
)
def test_a_window_the_budget_refuses_is_named_not_dropped(page, words):
    at = open_app(page, budget=256, recent_window=300)
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert "recent_window (300) is not below the budget (256)" in warnings and words in warnings


def test_plot_titles_show_file_names_as_text_never_as_markup():
    """A trace's name comes from a file: in a Plotly title (which renders links and tags) it is
    escaped, in the title and in the second line alike; only the app's own line break is markup."""
    from app import figures

    name = "<a href='https://example.com'>sign in</a><img src=x>"
    fig = figures.window_sweep(
        windows=[0, 8],
        series=[("h2o", "H2O", [0.1, 0.2])],
        refs=[],
        title=f"Mass — {name}",
        subtitle=f"{name}, budget 64",
        ytitle="mass",
    )
    text = fig.layout.title.text
    assert "<a" not in text and "<img" not in text
    assert text.count("&lt;a href") == 2 and "<br>" in text


# -- the family since H2O in Step through ---------------------------------------------------------
@pytest.mark.slow
def test_the_familys_methods_step_on_the_traces_that_carry_what_they_read():
    """Expected Attention and KVzip step on a mean trace (KVzip with the sentence on what it knows
    ahead), Quest on the head trace, reading pages; Quest on a mean trace says which trace it
    needs, and nothing crashes."""
    import h2o

    mean = "traces/lighthouse-L8-mean.npz"
    at = open_app(trace=mean, policy_a="expected-attention", policy_b="kvzip", budget=128)
    assert not at.error, [e.value for e in at.error]
    header, _ = view(at)
    assert [p["policy"] for p in header["panels"]] == ["expected-attention", "kvzip"]
    captions = " ".join(c.value for c in at.caption)
    assert h2o.POLICIES["kvzip"].hindsight in captions
    every = h2o.POLICIES["expected-attention"](128).rescore_every  # the page's: its defaults
    assert f"Expected Attention scores its kept positions anew every {every} steps" in captions
    assert "anew every" not in h2o.POLICIES["kvzip"](128).score_note()
    at = open_app(trace="traces/lighthouse-L8-h0.npz", policy_b="quest", budget=128)
    assert not at.error, [e.value for e in at.error]
    header, arrays = view(at)
    quest = header["panels"][1]
    assert (
        quest["selects"]
        and "kept_all" in arrays["1"]
        and "nothing is evicted" in (quest["stories"][0])
    )
    at = open_app(trace=mean, policy_b="quest", budget=128)
    said = " ".join(e.value for e in at.error)
    assert "one query head" in said and "traces/lighthouse-L8-h0.npz" in said
