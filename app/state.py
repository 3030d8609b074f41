"""Session state and the URL (the shared controls themselves: :mod:`app.controls`).

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
from typing import Any

import streamlit as st

from h2o.player import constants as player_constants

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
VIEW_DEFAULTS: dict[str, Any] = {**player_constants.VIEW_DEFAULTS, PRESENTER: False}
#: … and allowed values (a link or a browser report may carry anything else).
CHOICES: dict[str, tuple[Any, ...]] = {**player_constants.VIEW_CHOICES, PRESENTER: (False, True)}
UPLOADS, UPLOAD, TRACE_OK = "_uploads", "w_upload", "_trace_ok"
TRACE_ERROR, URL_READ, URL_PROBLEMS = "_trace_error", "_url_read", "_url_problems"
FROM_URL = "_from_url"
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
