"""Session state, the URL, and the shared controls (trace, upload, budget, recent_window, sinks).

The session holds a small *model*: plain ``st.session_state`` entries named like the URL
parameters (``trace``, ``budget``, ``recent_window``, ``sinks``, ``policy_a``, ``policy_b``,
``step``, ``spike_step``). Widgets mirror it under ``w_<name>`` keys, set from it before every
call (Streamlit forgets widgets a page switch leaves unrendered), so nothing is lost moving
between pages. Callbacks change the model and its mirror together.

The URL query string is read once per session (a pasted link opens that view) and rewritten
from the model by every page for the parameters it uses; the page itself is the URL path.
Kept server-side on purpose: Streamlit's widget ``bind="query-params"`` forgets the parameters of
one page when the user switches to another.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import streamlit as st

import h2o
from app import data
from app.player import constants as player_constants
from h2o import analysis

TRACE, BUDGET, WINDOW, SINKS, STEP = "trace", "budget", "recent_window", "sinks", "step"
POLICY_A, POLICY_B, SPIKE_STEP, CHAPTER = "policy_a", "policy_b", "spike_step", "chapter"
SHARED = (TRACE, BUDGET, WINDOW, SINKS)
#: The step view's settings (the player changes them in the browser and reports them back).
COLOUR, ROWS, WIDTH, SPEED, REVEAL, PRESENTER = (
    "colour",
    "rows",
    "width",
    "speed",
    "reveal",
    "presenter",
)
VIEW_SETTINGS = (COLOUR, ROWS, WIDTH, SPEED, REVEAL)
#: URL parameter → (parser, smallest accepted value for integers).
URL_PARAMS: dict[str, tuple[type, int]] = {
    TRACE: (str, 0),
    BUDGET: (int, 1),
    WINDOW: (int, 0),
    SINKS: (int, 0),
    POLICY_A: (str, 0),
    POLICY_B: (str, 0),
    STEP: (int, 0),
    SPIKE_STEP: (int, 0),
    CHAPTER: (int, 1),
}
#: Their defaults (left out of links) …
VIEW_DEFAULTS: dict[str, Any] = {
    COLOUR: "log",
    ROWS: "kept",
    WIDTH: 128,
    SPEED: 5,
    REVEAL: False,
    PRESENTER: False,
}
#: … and allowed values (a link or a browser report may carry anything else).
CHOICES: dict[str, tuple[Any, ...]] = {
    COLOUR: ("log", "linear"),
    ROWS: ("kept", "all"),
    WIDTH: (64, 128, 256),
    SPEED: player_constants.SPEEDS,
    REVEAL: (False, True),
    PRESENTER: (False, True),
}
UPLOADS, UPLOAD, TRACE_OK = "_uploads", "w_upload", "_trace_ok"
TRACE_ERROR, URL_READ, URL_PROBLEMS = "_trace_error", "_url_read", "_url_problems"
FROM_URL = "_from_url"
#: Policies that keep their own recent_window whatever the controls say: TOVA's is 1 (it
#: protects only the newest position, as in the card's lineup), on every page.
OWN_WINDOW = ("tova",)
DEFAULT_TRACE = "canonical"


# -- the model and its widget mirrors --------------------------------------------------------------
def wkey(name: str) -> str:
    return f"w_{name}"


def set_value(name: str, value: Any) -> None:
    """Change a model entry and the widget that shows it (safe in callbacks)."""
    st.session_state[name] = value
    st.session_state[wkey(name)] = value


def mirror(name: str, default: Any, on_change: Callable[[], None] | None = None) -> dict:
    """``key``/``on_change`` kwargs for the widget that edits the model entry ``name``.

    The widget is set from the model before every call (Streamlit forgets the state of widgets a
    page switch left unrendered) and copies its value back on change, before anything else runs.
    """
    ss = st.session_state
    ss.setdefault(name, default)
    ss[wkey(name)] = ss[name]

    def changed() -> None:
        ss[name] = ss[wkey(name)]
        if on_change is not None:
            on_change()

    return {"key": wkey(name), "on_change": changed}


#: What markdown makes something of: links and images need [ ], HTML and autolinks < >, emphasis
#: * _ ~, code `, headings #, tables |, LaTeX $.
_MARKDOWN = re.compile(r"([\\`*_\[\]#!<>|~$])")


def md(value: object, limit: int = 120) -> str:
    """A string from outside (a file, its name, its metadata, an error about it) for markdown:
    cut short, every markdown and HTML character escaped, so it can never become a link, an
    image to fetch, or markup."""
    text = str(value)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return _MARKDOWN.sub(r"\\\1", text).replace("\n", " ")


def shown(raw: object, limit: int = 24) -> str:
    """A value from outside (a link, a file) for a message: quoted, cut short, and never markup."""
    text = str(raw)
    text = text if len(text) <= limit else text[:limit] + "…"
    return "`" + text.replace("`", "'") + "`"


def setting_ok(name: str, value: object) -> bool:
    """Whether ``value`` is one of the allowed values of the view setting ``name``."""
    return type(value) in (str, int, bool) and any(
        value == c and type(value) is type(c) for c in CHOICES.get(name, ())
    )


def _parse_setting(name: str, raw: str) -> object:
    """A setting from its URL text (booleans are 0/1), or None if it is not an allowed value."""
    kind = type(CHOICES[name][0])
    if kind is bool:
        value: object = {"1": True, "0": False}.get(raw)
    elif kind is int:
        value = int(raw) if raw.isdigit() and len(raw) < 6 else None
    else:
        value = raw
    return value if setting_ok(name, value) else None


def url_text(value: object) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def read_url() -> None:
    """Copy the URL's parameters into the model, once per session (called by the router).

    Values that are not whole numbers, or below a parameter's smallest value, are ignored and
    reported at the top of the next page with shared controls. Upper limits depend on the trace:
    the names taken from the link are remembered (:func:`from_link`) and checked against it by
    :func:`sidebar` (budget, recent_window, sinks) and the step view (step, spike_step).
    """
    ss = st.session_state
    if ss.get(URL_READ):
        return
    ss[URL_READ] = True
    problems: dict[str, str] = {}
    taken = set()
    for name, raw in st.query_params.to_dict().items():
        if name in CHOICES:
            value = _parse_setting(name, raw)
            if value is None:
                allowed = ", ".join(url_text(c) for c in CHOICES[name])
                problems[name] = f"{name}={shown(raw)} is not one of {allowed}"
            else:
                ss[name] = value
            continue
        if name not in URL_PARAMS:
            continue
        kind, lowest = URL_PARAMS[name]
        if kind is int:
            try:
                value = int(raw)
            except ValueError:
                problems[name] = f"{name}={shown(raw)} is not a whole number"
                continue
            if value < lowest:
                problems[name] = f"{name}={value} is below {lowest}"
                continue
            ss[name] = value
        else:
            ss[name] = raw
        taken.add(name)
    ss[URL_PROBLEMS] = problems
    ss[FROM_URL] = taken


def from_link(name: str) -> bool:
    """Whether the model entry ``name`` still holds the value the link gave it (and forget it:
    each value from the link is checked against a trace once)."""
    taken = st.session_state.get(FROM_URL, set())
    if name in taken:
        taken.discard(name)
        return True
    return False


def url_problems(names: Iterable[str]) -> list[str]:
    """The link's problems with these parameters, each reported once, by the page that uses it
    (a parameter no page has used yet waits for one that does)."""
    problems: dict[str, str] = st.session_state.get(URL_PROBLEMS, {})
    return [problems.pop(n) for n in names if n in problems]


def report_url_problems(names: Iterable[str]) -> None:
    """Show this page's link problems (see :func:`url_problems`) as errors, at this point."""
    for p in url_problems(names):
        st.error(f"Ignored from the link: {p}.", icon=":material/error:")


def _url_values(names: Iterable[str]) -> dict[str, str]:
    """The URL text of these model entries; view settings at their default are left out."""
    ss = st.session_state
    return {
        n: url_text(ss[n])
        for n in names
        if n in ss and not (n in VIEW_DEFAULTS and ss[n] == VIEW_DEFAULTS[n])
    }


def publish(names: Iterable[str]) -> None:
    """Make the query string hold exactly these model entries (the page's shareable view)."""
    want = _url_values(names)
    if st.query_params.to_dict() != want:
        st.query_params.from_dict(want)


# -- traces ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Context:
    """What a page needs from the shared controls."""

    ref: data.TraceRef
    budget: int
    recent_window: int
    sinks: int
    top_k: int

    @property
    def trace(self) -> h2o.Trace:
        return self.ref.trace


def uploads() -> dict[str, data.Upload]:
    return st.session_state.setdefault(UPLOADS, {})


def hold_uploads(keep: Iterable[str] | None = None) -> None:
    """Tell the server which uploads this session holds (what the cache keeps for them goes
    when the last session holding them ends). ``keep``: drop the session's other uploads."""
    pool = uploads()
    if keep is not None:
        for key in [k for k in pool if k not in keep]:
            del pool[key]
    data.hold_uploads({up.digest for up in pool.values()})


def defaults(trace: h2o.Trace) -> dict[str, int]:
    """The trace's suggested settings, keyed like the session state.

    :func:`h2o.analysis.suggested` reads any metadata defensively and fits the result to the
    trace (budget and top-k below its length, window and sinks below the budget).
    """
    sug = analysis.suggested(trace)
    return {BUDGET: sug["budget"], WINDOW: sug["recent_window"], SINKS: sug["sinks"], **sug}


def open_trace(key: str, upload: data.Upload | None = None) -> h2o.Trace:
    """Select the trace ``key`` with its suggested settings, at step 0 (a callback's work).

    Everything that can fail comes first: the trace is loaded (so validated) and its defaults
    computed before anything is stored, and ``upload`` is registered under ``key`` only then. A
    ``ValueError`` leaves the session exactly as it was.
    """
    pool = uploads() if upload is None else {**uploads(), key: upload}
    trace = data.load(key, pool).trace
    fit = defaults(trace)
    if upload is not None:
        uploads()[key] = upload
    set_value(TRACE, key)
    st.session_state[TRACE_OK] = key
    for name in (BUDGET, WINDOW, SINKS):
        set_value(name, fit[name])
    st.session_state[STEP] = 0
    return trace


def _on_trace_change() -> None:
    ss = st.session_state
    key = ss[TRACE]
    try:
        open_trace(key)
    except ValueError as e:
        ok = ss.get(TRACE_OK, DEFAULT_TRACE)
        ss[TRACE_ERROR] = (
            f"Could not open the trace {md(repr(key))}: {md(e, 300)}. Pick another one; "
            f"{md(repr(ok))} is still selected."
        )
        set_value(TRACE, ok)


def _on_upload() -> None:
    ss = st.session_state
    f = ss.get(UPLOAD)
    if f is None:  # the file was removed from the uploader: keep only what is selected
        hold_uploads(keep={ss.get(TRACE), ss.get(TRACE_OK)})
        return
    current = ss.get(TRACE_OK, DEFAULT_TRACE)
    try:
        key, up = data.make_upload(f.name, f.getvalue())
        open_trace(key, up)
        hold_uploads(keep={key})  # it replaced the earlier ones (none is selected any more)
    except ValueError as e:
        ss[TRACE_ERROR] = (
            f"Could not use the upload {md(repr(f.name))}: {md(e, 300)}. Upload an .npz in the "
            "format of traces/README.md (h2o.save_trace writes one): rows of finite, non-negative "
            f"weights that each sum to 1, at least 2 and at most {data.MAX_UPLOAD_STEPS:,} steps. "
            f"The trace {md(repr(current))} is still selected."
        )


def _resolve(key: str) -> tuple[data.TraceRef, str | None]:
    """The selected trace, or the last good one and the reason the selected one failed."""
    try:
        return data.load(key, uploads()), None
    except ValueError as e:
        ok = st.session_state.get(TRACE_OK, DEFAULT_TRACE)
        fallback = ok if ok != key else DEFAULT_TRACE
        msg = (
            f"Could not open the trace {md(repr(key))}: {md(e, 300)}. Pick another trace; showing "
            f"{md(repr(fallback))}."
        )
        return data.load(fallback, uploads()), msg


def sidebar() -> Context:
    """Draw the shared controls in the sidebar; errors go at the top of the page."""
    ss = st.session_state
    hold_uploads()  # again on every run: a session that reconnects holds its uploads anew
    options = data.trace_options(uploads())
    errors = [f"Ignored from the link: {p}." for p in url_problems(SHARED)]
    if ss.get(TRACE, DEFAULT_TRACE) not in options:
        errors.append(
            f"The trace {shown(ss[TRACE], 60)} from the link is not available here (uploads are "
            f"not shared between sessions): showing {DEFAULT_TRACE!r}. Upload the file to use it."
        )
        set_value(TRACE, DEFAULT_TRACE)
    with st.sidebar:
        st.header("Trace")
        key = st.selectbox(
            "Attention trace",
            options,
            **mirror(TRACE, DEFAULT_TRACE, _on_trace_change),
            help="canonical: the benchmark trace of the policy card (sinks, a 64-wide recency "
            "band, heavy hitters per 512-step epoch). stale-spike: the card's H2O-vs-"
            "Scissorhands lesson. toy: small enough to follow cell by cell. Files in traces/ "
            "and your upload follow (one at a time: a new upload replaces the last).",
        )
        st.file_uploader(
            "Upload a trace (.npz)",
            type=["npz"],
            key=UPLOAD,
            on_change=_on_upload,
            max_upload_size=data.MAX_UPLOAD_MB,
            help="An .npz written by h2o.save_trace (packed 'weights'), or with a square "
            "'attention' matrix; optional 'tokens' show up in hovers.",
        )
        if ss.get(TRACE_ERROR):
            errors.append(ss.pop(TRACE_ERROR))
        ref, problem = _resolve(key)
        if problem:
            errors.append(problem)
        else:
            ss[TRACE] = key
            ss.setdefault(TRACE_OK, key)
        st.caption(f"**{md(ref.trace.name, 60)}** — {md(data.describe_trace(ref.trace), 300)}")

        st.header("Cache")
        fit = defaults(ref.trace)
        most = ref.trace.steps - 1
        for name in (BUDGET, WINDOW, SINKS):
            if (problem := _fit_to_trace(name, most, fit, ref.trace)) is not None:
                errors.append(problem)
        budget = st.number_input(
            "budget — slots in the cache",
            min_value=1,
            max_value=most,
            step=1,
            **mirror(BUDGET, fit[BUDGET]),
            help="How many positions the cache may hold after each step's eviction: at most "
            f"{most:,} here, one less than the trace's steps (a bigger cache never evicts).",
        )
        window = st.number_input(
            "recent_window — newest slots never evicted",
            min_value=0,
            max_value=most,
            step=1,
            **mirror(WINDOW, fit[WINDOW]),
            help="H2O, Scissorhands and Random protect this many of the newest kept positions; "
            f"TOVA keeps its own window of {own_window('tova')} on every page (it protects only "
            "the newest position). Must be smaller than the budget. The card: set it at least as "
            "wide as the model's local attention band (64 on the canonical trace).",
        )
        sinks = st.number_input(
            "sinks — StreamingLLM's pinned first positions",
            min_value=0,
            max_value=most,
            step=1,
            **mirror(SINKS, fit[SINKS]),
            help="StreamingLLM keeps the first `sinks` positions forever and a ring buffer of "
            "the most recent ones. Must be smaller than the budget.",
        )
        ss[BUDGET], ss[WINDOW], ss[SINKS] = int(budget), int(window), int(sinks)
        top_k = fit["top_k"]
        st.caption(f"Recall is top-{top_k} recall (the trace's suggestion).")
    for msg in errors:
        st.error(msg, icon=":material/error:")
    return Context(ref, int(budget), int(window), int(sinks), int(top_k))


def _fit_to_trace(name: str, most: int, fit: dict[str, int], trace: h2o.Trace) -> str | None:
    """Replace a model value above ``most`` (from the link, or left by another trace) with the
    trace's suggestion, and say so; None if it fits."""
    ss = st.session_state
    linked = from_link(name)
    value = ss.get(name)
    if value is None or value <= most:
        return None
    set_value(name, fit[name])
    return (
        ("Ignored from the link: " if linked else "")
        + f"{name}={value} is above {most:,}, the most the trace {md(trace.name, 60)} "
        f"({trace.steps:,} steps) allows. Using its suggested {name} of {fit[name]}."
    )


# -- policies --------------------------------------------------------------------------------------
def own_window(name: str) -> int:
    """The recent_window a policy of :data:`OWN_WINDOW` keeps (its default: TOVA's 1)."""
    return int(h2o.policies.make_policy(name, 1024).params()["recent_window"])


def policy_settings(name: str, recent_window: int, sinks: int) -> dict[str, int]:
    """The shared controls' values that policy ``name`` takes (per ``h2o.policies.policy_params``).

    recent_window goes to every policy that has one except those of :data:`OWN_WINDOW`.
    """
    taken = h2o.policies.policy_params(name)
    out = {}
    if "recent_window" in taken and name not in OWN_WINDOW:
        out["recent_window"] = recent_window
    if "sinks" in taken:
        out["sinks"] = sinks
    return out


def refusal(name: str, budget: int, recent_window: int, sinks: int) -> str | None:
    """``analysis.refusal`` for the controls' values (its message names the fix), or None."""
    problem = h2o.policies.refusal(name, budget, **policy_settings(name, recent_window, sinks))
    if problem is not None and name in OWN_WINDOW:
        problem += (
            f" In this app {h2o.POLICIES[name].label} always keeps its own recent_window of "
            f"{own_window(name)}, so raise the budget."
        )
    return problem


def policy_or_error(ctx: Context, name: str) -> tuple[h2o.Policy | None, str | None]:
    """A fresh policy from the shared controls, or the refusal that says what to change."""
    problem = refusal(name, ctx.budget, ctx.recent_window, ctx.sinks)
    if problem is not None:
        return None, problem
    params = policy_settings(name, ctx.recent_window, ctx.sinks)
    return h2o.policies.make_policy(name, ctx.budget, **params), None


def policy_choice(name: str, label: str, default: str, container: Any = st) -> str:
    """A policy picker bound to the model entry ``name`` (``policy_a``/``policy_b``)."""
    names = list(h2o.POLICIES)
    ss = st.session_state
    if ss.get(name, default) not in names:
        st.error(f"Ignored {name}={shown(ss[name])} from the link: choose from {', '.join(names)}.")
        set_value(name, default)
    chosen = container.selectbox(
        label,
        names,
        **mirror(name, default),
        help="h2o: cumulative attention · streaming-llm: sinks + ring buffer · scissorhands: "
        "votes · tova: last step's attention (with its own recent_window of 1) · "
        "sliding-window: newest only · random: any unprotected position, with equal chance (a "
        "baseline, not a floor: a policy with too narrow a window can fall below it).",
    )
    ss[name] = chosen
    return chosen


def presenter_toggle() -> bool:
    """The sidebar's presenter switch (larger type, fewer figures), kept in the URL."""
    with st.sidebar:
        st.header("View")
        on = st.toggle(
            "Presenter mode",
            **mirror(PRESENTER, VIEW_DEFAULTS[PRESENTER]),
            help="For a projector: larger type, and per policy only the heatmap, the story and "
            "the kept slots. In the browser: ←/→ (or a clicker's PageUp/PageDown) step, Shift "
            "steps by 10, Space plays and pauses.",
        )
    st.session_state[PRESENTER] = bool(on)
    return bool(on)
