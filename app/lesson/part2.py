"""Chapters 4–6: the window is load-bearing, the stale spike, the family."""

from __future__ import annotations

import numpy as np
import streamlit as st

import h2o
from app import data, figures, state
from app.lesson import Chapter, open_in, predict
from h2o import analysis, explain

EXPLORER = "views/window_explorer.py"


# -- 4. the window is load-bearing -----------------------------------------------------------------
def window() -> None:
    ref = data.load("canonical", {})
    trace = ref.trace
    budget, top_k, sinks = 256, 32, 4
    zero = data.recorded_replay(ref, h2o.H2O(budget, recent_window=0), top_k)
    share = explain.frozen_share(zero)
    kept = zero.kept_at(trace.steps - 1)[0]
    st.markdown(
        "> *The recent window is load-bearing, not a refinement. A token generated this step has "
        "accumulated nothing, so without protection it would be the first thing evicted every "
        "time and the cache would never advance.* — the card\n\n"
        f"The library's H2O with **recent_window 0** on the canonical trace, budget {budget}: "
        f"at **{share:.0%}** of the steps that evict, the victim is the position just admitted. "
        f"At the last step the cache still holds positions {int(kept[0])}–{int(kept[-2])} "
        "(and the newcomer): it filled once, then never moved."
    )
    windows = data.sweep_windows_for(budget, analysis.band_width(trace))
    if predict(
        "window",
        f"at budget {budget}, which H2O keeps more attention mass than StreamingLLM?",
        ["recent_window 32", "recent_window 64", "both", "neither"],
        "recent_window 64",
        "The trace puts 0.55 of its attention on the last 64 positions. At 32, positions 33 to "
        "64 steps old must compete on cumulative score with sinks and old heavy hitters — and "
        "lose. From 64 on the band is protected and the gain stops: the knee sits at the band "
        "width. The library keeps 32 as its default, as the card does: *tune it to your model, "
        "not to this table*.",
    ):
        result = data.window_sweep(ref.ident, trace, budget, top_k, tuple(windows), sinks)
        refs = {r["policy"]: r for r in result["refs"]}
        st.plotly_chart(
            figures.window_sweep(
                windows=windows,
                series=[
                    ("h2o", "H2O", [r["retained_mass"] for r in result["h2o"]]),
                    (
                        "scissorhands",
                        "Scissorhands",
                        [r["retained_mass"] for r in result["scissorhands"]],
                    ),
                ],
                refs=[
                    (p, refs[p]["label"], refs[p]["retained_mass"])
                    for p in ("streaming-llm", "sliding-window")
                ]
                + [("oracle", "oracle bound", result["h2o"][0]["oracle_mass"])],
                title=f"Retained attention mass vs recent_window — canonical, budget {budget}",
                ytitle="retained mass (mean over t ≥ budget)",
                band=analysis.band_width(trace),
            ),
            width="stretch",
            key="lesson_sweep",
            config={"displaylogo": False},
        )
    open_in(
        "Open the recentWindow explorer",
        EXPLORER,
        {state.TRACE: "canonical", state.BUDGET: budget, state.WINDOW: 32, state.SINKS: sinks},
        key="lesson_open_4",
    )


# -- 5. the stale spike ----------------------------------------------------------------------------
def stale_spike() -> None:
    ref = data.load("stale-spike", {})
    trace = ref.trace
    fit = state.defaults(trace)
    budget, window, top_k = fit[state.BUDGET], fit[state.WINDOW], fit["top_k"]
    spike = int(trace.meta.get("spike", 0))
    reps = {
        name: data.recorded_replay(
            ref, analysis.make_policy(name, budget, recent_window=window), top_k
        )
        for name in ("h2o", "scissorhands")
    }
    st.markdown(
        "> *A cumulative sum never forgets: a position that mattered enormously once defends its "
        "slot forever. scissorhands counts how often a position mattered instead, which decays "
        "that advantage.* — the card\n\n"
        f"**Scissorhands** (Liu et al., 2023) gives a position a *vote* each step it receives "
        "more than its fair share of attention, and evicts the fewest votes. The stale-spike "
        f"trace: position {spike} takes almost the whole of the first two steps, then nearly "
        "nothing; three other positions matter a little at every step."
    )
    if predict(
        "spike",
        f"budget {budget}, recent_window {window}: which policy still holds position {spike} at "
        "the end?",
        ["H2O", "Scissorhands", "both", "neither"],
        "H2O",
        "Its sum (about 2) is the highest of any position, so H2O's argmin never reaches it; "
        "Scissorhands sees a single vote and lets it go as soon as the cache is full.",
    ):
        series = []
        for name, rep in reps.items():
            steps = np.arange(rep.steps)
            scores = np.full(rep.steps, np.nan)
            for t in steps:
                pos, sc = rep.kept_at(int(t))
                i = np.searchsorted(pos, spike)
                if i < len(pos) and pos[i] == spike:
                    scores[t] = sc[i]
            series.append((name, f"{rep.label} — {rep.score_label}", steps, scores))
        st.plotly_chart(
            figures.kept_score_lines(
                curves=series,
                title=f"Position {spike}'s score while each policy keeps it (the line ends at "
                "its eviction)",
            ),
            width="stretch",
            key="lesson_spike",
            config={"displaylogo": False},
        )
        mass = {n: r.summary()["retained_mass"] for n, r in reps.items()}
        st.markdown(
            f"The price: H2O holds a slot for a position nobody attends to, and retains "
            f"{mass['h2o']:.3f} of the attention mass over the run against Scissorhands' "
            f"{mass['scissorhands']:.3f}. On the canonical trace the two tie — its heavy "
            "hitters stay heavy for a whole epoch, which both rules reward."
        )
    open_in(
        "Open the stale-spike lesson",
        "views/stale_spike.py",
        {state.SPIKE_STEP: budget},
        key="lesson_open_5",
    )


# -- 6. the family ---------------------------------------------------------------------------------
FAMILY = [
    (
        "tova",
        "**TOVA** (Oren et al., 2024): the score is only the *last* step's attention — "
        "evict whatever the newest query cares least about. No memory, no stale spikes.",
    ),
    (
        "sliding-window",
        "**Sliding window**: keep the newest `budget` positions. No sinks, no "
        "scores: the floor for recency.",
    ),
    (
        "random",
        "**Random**: evict a uniformly random position outside the protected window. "
        "Any policy that reads attention must beat it.",
    ),
]


def family() -> None:
    for _, text in FAMILY:
        st.markdown(f"- {text}")
    ref = data.load("canonical", {})
    budget = st.select_slider(
        "Budget", [64, 128, 256, 512, 1024], value=256, key="lesson_family_budget"
    )
    lineup = analysis.standard_lineup(budget, windows=(32, 64))
    rows = data.bench(ref.ident, ref.trace, budget, 32, data.freeze_lineup(lineup))
    st.plotly_chart(
        figures.policy_bars(
            policies=[r["policy"] for r in rows],
            labels=[r["label"] for r in rows],
            mass=[r["retained_mass"] for r in rows],
            recall=[r["top_k_recall"] for r in rows],
            oracle=rows[0]["oracle_mass"],
            top_k=32,
            title=f"Every policy on the canonical trace, budget {budget}",
        ),
        width="stretch",
        key="lesson_family",
        config={"displaylogo": False},
    )
    st.markdown(
        "At a wide enough window, H2O, Scissorhands and TOVA all find the canonical heavy "
        "hitters. StreamingLLM's sinks are worth most of the gap between the sliding window and "
        "the rest; random eviction is the floor."
    )
    open_in(
        "Open All policies",
        "views/all_policies.py",
        {state.TRACE: "canonical", state.BUDGET: budget, state.WINDOW: 64, state.SINKS: 4},
        key="lesson_open_6",
    )


CHAPTERS = [
    Chapter(4, "The window is load-bearing", "the-window-is-load-bearing", window),
    Chapter(5, "The stale spike", "the-stale-spike", stale_spike),
    Chapter(6, "The family", "the-family", family),
]
