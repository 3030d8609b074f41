"""The step-through view: step controls, and per policy a heatmap, the kept slots and the story.

Used by the Step through page (any trace, two chosen policies) and the stale-spike lesson.
Everything that depends on the current step lives in one ``st.fragment``: a step click or a play
tick reruns only that, not the page around it. Replays are cached; per step this module only
slices a window of the recorded arrays and builds figures from it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import streamlit as st

import h2o
from app import data, figures, state

#: label → (steps per tick, seconds between ticks).
SPEEDS: dict[str, tuple[int, float]] = {
    "1 step / 0.8 s": (1, 0.8),
    "1 step / 0.4 s": (1, 0.4),
    "4 steps / 0.4 s": (4, 0.4),
    "16 steps / 0.4 s": (16, 0.4),
    "64 steps / 0.4 s": (64, 0.4),
}
DEFAULT_SPEED = "1 step / 0.4 s"
#: Traces up to this many steps are drawn whole at full resolution; longer ones get a window
#: of steps around the current one plus a max-pooled overview of the whole run.
SMALL_TRACE = 192
DETAIL_STEPS = (64, 128, 256)
#: Rows of the detail heatmap before positions are max-pooled (about one pixel each), and its
#: most cells: scores and their exact values for hovers go out as float32, ~10.7 bytes a cell
#: once base64-encoded, and a figure must stay under 1.5 MB.
DETAIL_MAX_ROWS = 400
DETAIL_MAX_CELLS = 64_000
OVERVIEW_BINS = (192, 96)  # steps, positions
#: Token strings go into per-cell hovers only up to this many cells: they are JSON strings, about
#: 13 bytes a cell. The default detail view of a 1024-token model trace (392 × 128) fits, at
#: ~1.2 MB; bigger views keep tokens in the eviction, bar and story texts only.
TOKEN_HOVER_CELLS = 52_000
LOG, LINEAR = "log", "linear"
ALL_POSITIONS, NEAR = "all positions", "near the current step"


@dataclass(frozen=True)
class Slot:
    """One side-by-side panel: a replay, or the error that prevented it."""

    title: str
    colour: str
    replay: h2o.Replay | None = None
    error: str | None = None


def token_label(trace: h2o.Trace, pos: int) -> str:
    tok = trace.token(pos)
    return f"position {pos}" + (f" {tok!r}" if tok is not None else "")


def _scored(rep: h2o.Replay) -> bool:
    return h2o.POLICIES[rep.policy].reads_attention and data.score_max(rep) > 0


def colour_scales(slots: Sequence[Slot], log: bool) -> list[figures.ColourScale | None]:
    """One scale per kind of score: panels showing the same score share its range."""
    hi: dict[str, float] = {}
    for s in slots:
        if s.replay is not None and _scored(s.replay):
            label = s.replay.score_label
            hi[label] = max(hi.get(label, 0.0), data.score_max(s.replay))
    return [
        figures.ColourScale(hi[s.replay.score_label], log=log)
        if s.replay is not None and s.replay.score_label in hi
        else None
        for s in slots
    ]


# -- per-step data ---------------------------------------------------------------------------------
def window_grid(
    rep: h2o.Replay, a: int, b: int, lo: int, hi: int, max_rows: int = DETAIL_MAX_ROWS
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Scores of steps ``a..b-1`` × positions ``lo..hi-1``, max-pooled to ``max_rows`` rows.

    Returns ``(z, x, y, pos_stride)`` with ``z`` float32, nan where not kept; x/y are cell
    centres. Max-pooling keeps a heavy hitter visible however far the rows are squeezed.
    """
    stride = max(1, math.ceil((hi - lo) / max_rows))
    z = rep.score_grid(a, b, lo, hi, stride).astype(np.float32)  # float32: half the payload
    nrows = z.shape[0]
    x = np.arange(a, b)
    y = lo + stride * np.arange(nrows) + (stride - 1) / 2
    return z, x, y, stride


def band_polygon(
    rep: h2o.Replay, steps: Sequence[int], half: float = 0.5
) -> tuple[np.ndarray, np.ndarray] | None:
    """The protected window over ``steps`` as a staircase polygon (xs, ys), or None."""
    if rep.window == 0:
        return None
    top_x, top_y, bot_x, bot_y = [], [], [], []
    for s in steps:
        prot = rep.protected_at(int(s))
        if prot is None:
            continue
        first, last = prot
        top_x += [s - half, s + half]
        top_y += [last + 0.5, last + 0.5]
        bot_x += [s - half, s + half]
        bot_y += [first - 0.5, first - 0.5]
    if not top_x:
        return None
    return np.array(top_x + bot_x[::-1]), np.array(top_y + bot_y[::-1])


def eviction_marks(
    rep: h2o.Replay, trace: h2o.Trace, a: int, b: int, lo: int, hi: int
) -> figures.Marks:
    """Every eviction in steps ``a..b-1`` at positions ``lo..hi-1``, with the step's story."""
    i, j = np.searchsorted(rep.victim_step, [a, b])
    steps, positions = rep.victim_step[i:j], rep.victim_pos[i:j]
    keep = (positions >= lo) & (positions < hi)
    steps, positions = steps[keep], positions[keep]
    stories: dict[int, str] = {}
    text = []
    for s, p in zip(steps.tolist(), positions.tolist(), strict=True):
        if s not in stories:
            stories[s] = rep.narrate(s).replace(" — ", "<br>— ").replace("; ", "<br>")
        who = f"<b>{token_label(trace, p)}</b> evicted<br>" if trace.tokens is not None else ""
        text.append(who + stories[s])
    return figures.Marks(steps, positions, text)


def detail_range(t: int, steps: int, width: int) -> tuple[int, int]:
    """``[a, b)``: ``width`` steps around ``t``, shifted to stay inside the run."""
    if steps <= SMALL_TRACE:
        return 0, steps
    a = max(0, min(t - width // 2, steps - width))
    return a, min(steps, a + width)


# -- the view --------------------------------------------------------------------------------------
def _clamp(v: int, steps: int) -> int:
    return max(0, min(int(v), steps - 1))


def render(
    trace: h2o.Trace,
    slots: Sequence[Slot],
    *,
    key: str,
    budget: int,
    highlights: Sequence[tuple[int, str]] = (),
) -> None:
    """View options, then the step fragment. ``key`` is the URL-bound session key of the step."""
    last = trace.steps - 1
    if state.from_link(key) and st.session_state.get(key, 0) > last:
        st.error(
            f"Ignored from the link: {key}={st.session_state[key]} is past the last step of the "
            f"trace {trace.name!r} ({last:,}). Showing step {last:,}.",
            icon=":material/error:",
        )
        state.set_step(key, last)
    big = trace.steps > SMALL_TRACE
    with st.container(horizontal=True, vertical_alignment="bottom"):
        colour = st.segmented_control(
            "Colour scale",
            [LOG, LINEAR],
            **state.mirror(f"{key}__colour", LOG),
            required=True,
            help="Log keeps young positions and heavy hitters visible at once; a cumulative "
            "sum spans four decades.",
        )
        if big:
            rows = st.segmented_control(
                "Positions in the detail view",
                [ALL_POSITIONS, NEAR],
                **state.mirror(f"{key}__rows", NEAR),
                required=True,
                help="Near the current step: the positions a full cache can hold around now, one "
                "row each. All positions: the whole context, max-pooled into about 400 rows "
                "(sinks and old heavy hitters included).",
            )
            width = st.segmented_control(
                "Steps in the detail view",
                DETAIL_STEPS,
                **state.mirror(f"{key}__width", 128),
                required=True,
            )
        else:
            rows, width = NEAR, trace.steps
    st.session_state[f"{key}__colour"] = colour
    if big:
        st.session_state[f"{key}__rows"], st.session_state[f"{key}__width"] = rows, width
    scales = colour_scales(slots, log=colour == LOG)
    labels = {s.replay.score_label for s in slots if s.replay is not None and _scored(s.replay)}
    if len(labels) > 1:
        st.caption(
            "The two panels score different things ("
            + " vs ".join(sorted(labels))
            + "), so each has its own colour bar; panels with the same kind of score share one."
        )

    playing = bool(st.session_state.get(f"{key}__playing"))
    speed = st.session_state.get(f"{key}__speed", DEFAULT_SPEED)
    interval = SPEEDS.get(speed, next(iter(SPEEDS.values())))[1]

    @st.fragment(run_every=interval if playing else None)
    def step_view() -> None:
        _step_view(trace, slots, scales, key, budget, highlights, rows, int(width))

    step_view()


def _step_view(
    trace: h2o.Trace,
    slots: Sequence[Slot],
    scales: Sequence[figures.ColourScale | None],
    key: str,
    budget: int,
    highlights: Sequence[tuple[int, str]],
    rows_mode: str,
    width: int,
) -> None:
    t0 = time.perf_counter()
    ss = st.session_state
    steps = trace.steps
    play_key, speed_key = f"{key}__playing", f"{key}__speed"
    flag_key, clicked_key = f"{key}__app_rerun", f"{key}__clicked"
    if ss.pop(flag_key, False):
        st.rerun()  # play state changed: the fragment's run_every must change with it
    clicked = ss.pop(clicked_key, False)
    ss.setdefault(key, 0)
    if ss[key] != _clamp(ss[key], steps):  # a link or an earlier trace went past this one's end
        state.set_step(key, _clamp(ss[key], steps))
    if ss.get(play_key) and not clicked:  # a play tick
        state.set_step(key, _clamp(ss[key] + SPEEDS.get(ss.get(speed_key), (1, 0))[0], steps))
        if ss[key] >= steps - 1:
            ss[play_key] = False
            ss[flag_key] = True

    def move(delta: int | None = None, to: int | None = None) -> None:
        cur = ss.get(key, 0)
        state.set_step(key, _clamp(to if to is not None else cur + (delta or 0), steps))
        ss[clicked_key] = True
        if ss.get(play_key):
            ss[play_key] = False
            ss[flag_key] = True

    def toggle_play() -> None:
        if not ss.get(play_key) and ss.get(key, 0) >= steps - 1:
            state.set_step(key, 0)  # play from the start again
        ss[play_key] = not ss.get(play_key)
        ss[flag_key] = True
        ss[clicked_key] = True

    def speed_changed() -> None:
        ss[clicked_key] = True
        if ss.get(play_key):
            ss[flag_key] = True

    buttons = [
        ("first", ":material/first_page:", "First step", {"to": 0}, None),
        ("back100", "−100", "Back 100 steps", {"delta": -100}, None),
        ("back10", "−10", "Back 10 steps", {"delta": -10}, None),
        ("back", "−1", "Back one step (←)", {"delta": -1}, "Left"),
        ("play", None, None, None, None),
        ("next", "+1", "Forward one step (→)", {"delta": 1}, "Right"),
        ("next10", "+10", "Forward 10 steps", {"delta": 10}, None),
        ("next100", "+100", "Forward 100 steps", {"delta": 100}, None),
        ("last", ":material/last_page:", "Last step", {"to": steps - 1}, None),
    ]
    widths = [1.6 if name == "play" else 1 for name, *_ in buttons]
    cols = st.columns([*widths, 3], vertical_alignment="bottom")
    for col, (name, label, tip, kwargs, shortcut) in zip(cols, buttons, strict=False):
        if name == "play":
            now_playing = bool(ss.get(play_key))
            col.button(
                "Pause" if now_playing else "Play",
                icon=":material/pause:" if now_playing else ":material/play_arrow:",
                key=f"{key}__play",
                on_click=toggle_play,
                type="primary",
                width="stretch",
                help="Play to the end at the chosen speed",
            )
            continue
        col.button(
            label,
            key=f"{key}__{name}",
            on_click=move,
            kwargs=kwargs,
            help=tip,
            width="stretch",
            shortcut=shortcut,
        )
    ss[speed_key] = cols[-1].selectbox(
        "Play speed",
        list(SPEEDS),
        **state.mirror(speed_key, DEFAULT_SPEED, speed_changed),
    )
    slider_key = state.step_slider_key(key)

    def dragged() -> None:
        ss[key] = int(ss[slider_key])
        ss[clicked_key] = True

    t = st.slider(
        f"Decode step (0–{steps - 1})",
        min_value=0,
        max_value=steps - 1,
        value=ss[key],
        key=slider_key,
        on_change=dragged,
    )
    t = _clamp(t, steps)
    ss[key] = t
    state.publish_one(key, t)

    a, b = detail_range(t, steps, width)
    panels = st.columns(len(slots), gap="medium")
    for i, (slot, scale, col) in enumerate(zip(slots, scales, panels, strict=True)):
        with col:
            _panel(trace, slot, i, scale, t, a, b, key, budget, highlights, rows_mode)
    reps = [s for s in slots if s.replay is not None]
    if reps:
        _metrics(reps, t, key)
    ms = (time.perf_counter() - t0) * 1000
    hist = ss.setdefault(f"{key}__ms", [])
    hist.append(ms)
    del hist[:-50]
    st.caption(
        f"Server time for this step: {ms:.0f} ms (median of the last {len(hist)}: "
        f"{float(np.median(hist)):.0f} ms)."
    )


def _panel(
    trace: h2o.Trace,
    slot: Slot,
    index: int,
    scale: figures.ColourScale | None,
    t: int,
    a: int,
    b: int,
    key: str,
    budget: int,
    highlights: Sequence[tuple[int, str]],
    rows_mode: str,
) -> None:
    st.subheader(slot.title, divider="gray")
    if slot.error is not None or slot.replay is None:
        st.error(slot.error or "no replay")
        return
    rep = slot.replay
    story = rep.narrate(t)
    if trace.tokens is not None:
        who = [f"{token_label(trace, t)} admitted"]
        who += [f"{token_label(trace, p)} evicted" for p, _ in rep.victims_at(t)]
        story += "  \n" + "; ".join(who)
    st.info(story)

    lo = 0 if rows_mode == ALL_POSITIONS else max(0, a - budget - 8)
    hi = b
    z, x, y, stride = window_grid(
        rep, a, b, lo, hi, min(DETAIL_MAX_ROWS, DETAIL_MAX_CELLS // (b - a))
    )
    cell_text = None
    if trace.tokens is not None and stride == 1 and z.size <= TOKEN_HOVER_CELLS:
        toks = np.array([repr(trace.tokens[int(p)]) for p in y], dtype=object)
        cell_text = np.broadcast_to(toks[:, None], z.shape).tolist()
    whole = b - a == trace.steps
    fig = figures.score_heatmap(
        z=z,
        x=x,
        y=y,
        title=(f"{rep.score_label} while kept" if scale is not None else "kept (no score)")
        + (" — whole run" if whole else f" — steps {a}–{b - 1}"),
        score_label=rep.score_label,
        scale=scale,
        t=t,
        pos_stride=stride,
        evictions=eviction_marks(rep, trace, a, b, lo, hi),
        band=band_polygon(rep, range(a, b)),
        band_label=f"protected recent window ({rep.window})",
        sinks=rep.sinks,
        highlights=[h for h in highlights if lo <= h[0] < hi],
        cell_text=cell_text,
        height=560 if whole else 440,
    )
    chart_key = f"{key}__detail_{index}"

    def picked() -> None:
        picked_state = st.session_state.get(chart_key)
        points = picked_state.selection.points if picked_state is not None else []
        if points and points[0].get("x") is not None:
            state.set_step(key, _clamp(round(float(points[0]["x"])), trace.steps))
            st.session_state[f"{key}__clicked"] = True

    st.plotly_chart(
        fig,
        width="stretch",
        key=chart_key,
        on_select=picked,
        selection_mode="points",
        config={"displaylogo": False},
    )

    pos, scores = rep.kept_at(t)
    victims = np.searchsorted(pos, [p for p, _ in rep.victims_at(t)])
    st.plotly_chart(
        figures.kept_bars(
            positions=pos,
            scores=scores,
            scored=scale is not None,
            victims=victims,
            window=rep.window,
            sinks=rep.sinks,
            labels=[token_label(trace, int(p)) for p in pos],
            score_label=rep.score_label,
            title=f"Kept slots at step {t} ({pos.size} of {rep.budget} + 1)",
            colour=slot.colour,
            log=scale is not None and scale.log,
        ),
        width="stretch",
        config={"displaylogo": False},
    )
    if not whole:
        grid, sx, sy = data.pooled(rep, *OVERVIEW_BINS)
        gx = np.arange(grid.shape[1]) * sx + (sx - 1) / 2
        gy = np.arange(grid.shape[0]) * sy + (sy - 1) / 2
        st.plotly_chart(
            figures.score_heatmap(
                z=grid,
                x=gx,
                y=gy,
                title="Whole run, max-pooled",
                score_label=rep.score_label,
                scale=scale,
                t=t,
                step_stride=sx,
                pos_stride=sy,
                band=band_polygon(rep, range(0, trace.steps, sx), half=sx / 2),
                band_label=f"protected recent window ({rep.window})",
                sinks=rep.sinks,
                highlights=highlights,
                window=(a, b),
                height=330,
            ),
            width="stretch",
            config={"displaylogo": False},
        )


def _metrics(slots: Sequence[Slot], t: int, key: str) -> None:
    reps = [s.replay for s in slots]
    top_k = reps[0].top_k
    budget = reps[0].budget
    cols = st.columns(2, gap="medium")
    for col, name, title in (
        (cols[0], "mass", "Retained attention mass"),
        (cols[1], "recall", f"Top-{top_k} recall"),
    ):
        series = [
            figures.Series(
                s.title,
                s.colour,
                getattr(s.replay, name),
                data.memo(
                    s.replay, ("running", name), lambda r=s.replay, n=name: r.running_mean(n)
                ),
            )
            for s in slots
        ]
        fig = figures.metric_over_time(
            series=series,
            title=f"{title} per step, and running mean from step {budget}",
            ytitle=title.lower(),
            t=t,
            budget=budget,
            oracle=reps[0].oracle if name == "mass" else None,
        )
        col.plotly_chart(fig, width="stretch", config={"displaylogo": False})
