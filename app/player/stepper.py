"""The step-through view, server side: two panels in one browser player, and a shareable link.

Used by the Step through page (any trace, two chosen policies) and the stale-spike lesson. The
server computes, the browser animates (:mod:`app.player`): per *view* — the trace, the two
replays, presenter mode — and per *range* of steps the page sends one payload
(:mod:`h2o.player.playback`); every
step, play tick, slider drag and eviction click inside the range happens in the browser. The
browser reports its step and view settings when the user pauses or stops interacting (and asks
for the next range near an edge): that runs only the fragment below, which stores them, rewrites
the URL and, if the range moved, sends the next one.

A payload stays byte-identical while its view and range do, so a report that needs no new range
costs the browser a reference to a message it already has, not the data again. That is why the
step and settings the browser starts from are taken at whole-page runs only, never in the
fragment a report reruns.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import streamlit as st

import h2o
from app import data, player, state
from h2o.player import playback

#: View settings the browser changes (and reports), with their defaults; each rides in the URL.
SETTINGS: dict[str, Any] = {name: state.VIEW_DEFAULTS[name] for name in state.VIEW_SETTINGS}


#: One side-by-side panel: a replay (or the error that prevented it), its title and colour.


#: Presenter mode's screen for a page that opens on the player, for a projector at 1280×720, so
#: the first policy's heatmap is whole under the title and the step controls
#: (tests/test_player_legibility_browser.py): the page starts right under Streamlit's header, with
#: a smaller title.
PRESENTER_CSS = """<style>
[data-testid='stMainBlockContainer'] {padding-top: 4.25rem; padding-bottom: 1rem;}
[data-testid='stMain'] h1 {font-size: 2rem; padding: 0 0 0.25rem;}
</style>"""


def presenter_screen(presenter: bool) -> None:
    """A player page in presenter mode: the sidebar collapsed, as the lesson opens (a projector at
    1280×720 needs its 300 px; its chevron, top left, brings it back), and the compact top; out
    of it, the sidebar as Streamlit opens it."""
    st.set_page_config(initial_sidebar_state="collapsed" if presenter else "auto")
    if presenter:
        st.html(PRESENTER_CSS)


def _view_id(ref: data.TraceRef, panels: Sequence[playback.Panel], extra: dict[str, Any]) -> str:
    parts: list[Any] = [ref.ident, extra]
    for s in panels:
        rep = s.replay
        parts.append(
            [s.title, s.colour, s.dash, s.error]
            if rep is None
            else [s.title, s.colour, s.dash, rep.policy, sorted(rep.params.items()), rep.top_k]
        )
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def settings() -> dict[str, Any]:
    """The view settings in the session (from a link, a report, or the defaults)."""
    ss = st.session_state
    return {name: ss.get(name, default) for name, default in SETTINGS.items()}


def apply_report(key: str, view: dict[str, Any] | None, steps: int) -> None:
    """Store what the browser reported: its step (clamped to the trace) and the settings it may
    hold. A report is browser input like any other: values outside the allowed sets are ignored."""
    if not isinstance(view, dict):
        return
    ss = st.session_state
    step = view.get("step")
    if isinstance(step, int | float) and not isinstance(step, bool) and math.isfinite(step):
        ss[key] = max(0, min(int(step), steps - 1))
    for name, value in view.items():
        if name in SETTINGS and state.setting_ok(name, value):
            ss[name] = value


def render(
    ref: data.TraceRef,
    panels: Sequence[playback.Panel],
    *,
    key: str,
    highlights: Sequence[tuple[int, str]] = (),
    title: str = "Step through",
) -> None:
    """The player for ``panels`` on ``ref``'s trace; ``key`` is the URL-bound session key of the
    step (``step`` or ``spike_step``)."""
    trace = ref.trace
    ss = st.session_state
    last = trace.steps - 1
    if state.from_link(key) and ss.get(key, 0) > last:
        st.error(
            f"Ignored from the link: {key}={ss[key]} is past the last step of the trace "
            f"{state.shown(trace.name)} ({last:,}). Showing step {last:,}.",
            icon=":material/error:",
        )
        ss[key] = last
    if key not in ss:  # no link, chapter or earlier visit chose a step: where things happen
        ss[key] = first_eviction(panels)
    ss[key] = max(0, min(int(ss[key]), last))
    presenter = bool(ss.get(state.PRESENTER, False))
    extra = {
        "highlights": [[int(p), str(label)] for p, label in highlights],
        "presenter": presenter,
        "plotly": player.plotly_url(),
        # The browser keeps the address bar current itself (Streamlit applies a fragment's
        # query-string change one run late): the step's parameter and the settings' defaults.
        "url": {"step": key, "defaults": SETTINGS},
    }
    view = _view_id(ref, panels, extra)
    # Where the browser starts: the session's step and settings as of this (whole-page) run. A
    # browser that still shows this view keeps its own step (it is ahead of any report while
    # playing); one that mounts the player afresh — a page switch, a reload — starts here.
    start = {"step": ss[key], **settings()}
    panels_n = max((s.replay.n_kept.max() for s in panels if s.replay is not None), default=1)
    length = playback.range_length(int(panels_n), trace.steps)
    comp_key = f"{key}_player"

    def reported() -> None:
        apply_report(key, player.reported(comp_key), trace.steps)

    @st.fragment
    def view_fragment() -> None:
        rng_key = f"{key}__range"
        held = ss.get(rng_key)
        current = tuple(held[1]) if held is not None and held[0] == view else None
        rng = playback.range_around(ss[key], trace.steps, length, current)
        ss[rng_key] = (view, rng)
        ident = (view, rng, json.dumps(start, sort_keys=True))

        def encode(r: tuple[int, int]) -> bytes:
            return playback.encode(
                view=view,
                trace_id=ref.ident,
                trace=trace,
                panels=panels,
                rng=r,
                range_blocks=[
                    data.range_block(s.replay, trace, *r) if s.replay is not None else None
                    for s in panels
                ],
                run_blocks=[
                    data.run_block(s.replay) if s.replay is not None else None for s in panels
                ],
                start=start,
                extra=extra,
            )

        cached = ss.get(f"{key}__payload")
        if cached is not None and cached[0] == ident:
            payload = cached[1]
        else:
            payload = encode(rng)
            ss[f"{key}__payload"] = (ident, payload)
        player.mount(payload, key=comp_key, on_change=reported)
        _export(
            Export(payload, encode, rng, length, title, trace, panels),
            ss.get(key, rng[0]),
            key,
        )

    view_fragment()


def first_eviction(panels: Sequence[playback.Panel]) -> int:
    """The first step at which any panel evicts (0 if none does): where a view opens when
    nothing chose its step, so a class does not watch the cache fill first."""
    firsts = [
        int(s.replay.victim_step[0])
        for s in panels
        if s.replay is not None and len(s.replay.victim_step)
    ]
    return min(firsts, default=0)


def export_step(step: int, panels: Sequence[playback.Panel]) -> int:
    """Where an exported file opens: the view's step; at step 0, where nothing has happened yet,
    the first eviction of any panel (0 if none evicts)."""
    return step if step > 0 else first_eviction(panels)


@dataclass(frozen=True)
class Export:
    """What a download of the view needs: the loaded range's payload, and how to encode another
    range (for a file that opens outside it)."""

    payload: bytes
    encode: Callable[[tuple[int, int]], bytes]
    rng: tuple[int, int]
    length: int
    title: str
    trace: h2o.Trace
    panels: Sequence[playback.Panel]


def export_file(
    ex: Export, step: int, view_settings: dict[str, Any]
) -> tuple[str, Callable[[], bytes]]:
    """The exported file's name and its builder (run on click): it opens at
    :func:`export_step`, in the range that holds that step (the loaded one if it does), with
    ``view_settings``."""
    t = export_step(step, ex.panels)
    a, b = ex.rng
    if not a <= t < b:
        a, b = playback.range_around(t, ex.trace.steps, ex.length)
    name = f"h2o-{ex.trace.name}-steps-{a}-{b - 1}.html".replace(" ", "_")
    start = {"step": t, **view_settings}

    def build() -> bytes:
        base = ex.payload if (a, b) == ex.rng else ex.encode((a, b))
        return player.export_html(
            playback.restart(base, start),
            f"{ex.title}: {ex.trace.name}, steps {a:,}–{b - 1:,} of {ex.trace.steps:,}",
        )

    return name, build


def _export(ex: Export, step: int, key: str) -> None:
    """A download of the loaded steps as one HTML file that plays offline (for slides). This
    fragment reruns on every report, so the file opens at the step the browser shows now."""
    name, build = export_file(ex, step, settings())
    st.download_button(
        "Download these steps as HTML",
        data=build,
        file_name=name,
        mime="text/html",
        on_click="ignore",
        icon=":material/download:",
        help="One self-contained file (plotly.js and the data inside, about 5 MB) that steps and "
        "plays in any browser, offline, with no server: for slides.",
        key=f"{key}__export",
    )
