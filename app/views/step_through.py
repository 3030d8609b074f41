"""Step through: two policies side by side on one trace, one decode step at a time."""

from __future__ import annotations

import streamlit as st

import h2o
from app import a11y, controls, data, figures, model_runs, state
from app.player import stepper
from h2o import analysis
from h2o.player import playback

a11y.focus_ring()  # the keyboard's focus, seen on every control

title = st.empty()  # above the errors and captions that follow, drawn once presenter is known
ctx = controls.sidebar()
presenter = state.presenter_toggle()
stepper.presenter_screen(presenter)  # projected: the sidebar (with the policies) collapsed
title.title("Step through a replay")
state.report_url_problems([state.POLICY_A, state.POLICY_B, state.STEP, *state.VIEW_SETTINGS])
state.report_url_problems([state.PRESENTER])
if not presenter:
    st.markdown(
        "Each heatmap cell is a **position** (row) at a **decode step** (column), coloured by the "
        "score the policy keeps for it — blank once it is evicted. ✕ marks an eviction (hover for "
        "who, with what score, and why; click one to jump to its step), the green band is the "
        "protected recent window, the dashed line is the current step, and steps not reached yet "
        "are veiled. Below each heatmap: the kept panels right now, before this step's eviction. "
        "Quest evicts nothing: its cells are what each step reads, a position read at one step "
        "and skipped at the next. Keys: ←/→ one step, Shift+←/→ ten, Space play/pause, Home/End."
    )
if (origin := model_runs.trace_origin(ctx.trace)) is not None:
    st.caption(
        f"**{state.shown(ctx.trace.name, 60)}**: the attention of {state.md(origin, 300)}. Hover "
        "a cell for its "
        "token; the Real model page says what to look for."
    )
if presenter:  # the panels' titles name the policies: the pickers wait in the sidebar
    with st.sidebar:
        st.header("Policies")
        cols = [st.container(), st.container()]
else:
    cols = st.columns(2)
chosen = [
    controls.policy_choice(state.POLICY_A, "Policy A", "h2o", cols[0]),
    controls.policy_choice(state.POLICY_B, "Policy B", "streaming-llm", cols[1]),
]
state.publish(
    [
        *state.SHARED,
        state.POLICY_A,
        state.POLICY_B,
        state.STEP,
        *state.VIEW_SETTINGS,
        state.PRESENTER,
    ]
)

panels = []
for i, name in enumerate(chosen):
    policy, error = controls.policy_or_error(ctx, name)
    if error is not None:
        cols[i].error(error, icon=":material/error:")
    elif hindsight := h2o.POLICIES[name].hindsight:  # what it knows that a decoder would not
        cols[i].caption(f"{hindsight}.")
    if policy is not None and (note := policy.score_note()):  # a score set at an interval
        cols[i].caption(note)
    label = (
        analysis.describe(name, policy.params()) if policy is not None else h2o.POLICIES[name].label
    )
    replay = data.recorded_replay(ctx.ref, policy, ctx.top_k) if policy is not None else None
    dash = "dash" if i == 1 and chosen[0] == chosen[1] else "solid"
    colour = figures.policy_colour(name)
    panels.append(playback.Panel(f"{'AB'[i]} · {label}", colour, replay, error, dash))

stepper.render(ctx.ref, panels, key=state.STEP)
