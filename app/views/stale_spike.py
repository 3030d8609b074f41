"""Stale spike: where H2O's sum and Scissorhands' vote count disagree, and what H2O's age bias
costs. Every sentence with a number is built by a function of ``app/lesson/chapters_4_6.py`` or
``h2o/age_bias.py`` from the replays the figures show."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import a11y, charts, controls, data, figures, painted, state, sweeps
from app.lesson import chapters_4_6
from app.player import stepper
from h2o import age_bias, analysis
from h2o.player import playback
from h2o.policies import make_policy

a11y.focus_ring()  # the keyboard's focus, seen on every control

STEP_KEY = state.SPIKE_STEP

title = st.empty()  # drawn once presenter mode is known
presenter = state.presenter_toggle()
stepper.presenter_screen(presenter)
title.title("Stale spike: H2O vs Scissorhands")
state.report_url_problems([STEP_KEY, *state.VIEW_SETTINGS, state.PRESENTER])
state.publish([STEP_KEY, *state.VIEW_SETTINGS, state.PRESENTER])
# Projected, the page's words wait in one expander under the three answers, so the step view is
# on the first screen; in self-study they lead, as before.
words = st.container()
if not presenter:
    with words:
        st.markdown(chapters_4_6.CARD_ON_SCISSORHANDS)
        with st.expander("What this library's Scissorhands and the paper's actually do"):
            st.markdown(chapters_4_6.SCISSORHANDS_SOURCES)

# -- part 1: the distinguishing trace --------------------------------------------------------------
ref = data.load("stale-spike", {})
trace = ref.trace
fit = controls.defaults(trace)
budget, window, top_k = fit[state.BUDGET], fit[state.WINDOW], fit["top_k"]
spike = int(trace.meta.get("spike", 0))
steady = [int(p) for p in trace.meta.get("steady", [])]

reps = {
    name: data.recorded_replay(ref, make_policy(name, budget, recent_window=window), top_k)
    for name in ("h2o", "scissorhands")
}
h_rep, s_rep = reps["h2o"], reps["scissorhands"]
h_holds, s_holds = (age_bias.holds_at_end(r, spike) for r in (h_rep, s_rep))
tie = None if s_holds else age_bias.tie_at(s_rep, spike)
h_tie = None if h_holds else age_bias.tie_at(h_rep, spike)
costly = age_bias.costliest_eviction(h_rep, trace)

the_trace = (
    f"The **stale-spike** trace ({trace.steps} steps, budget {budget}, recent_window {window}). "
    + chapters_4_6.spike_row_sentence(trace, spike)
    + " "
    + age_bias.shares_sentence(age_bias.shares(trace, steady), budget)
)
if not presenter:
    words.markdown(the_trace)


def fate(holds: bool, t: age_bias.Tie | None) -> str:
    return "kept to the end" if holds or t is None else f"evicted at step {t.step}"


last = trace.steps - 1
pos, scores = h_rep.kept_at(last)


def answers() -> None:
    """The three answers: where position 0 ends under each rule, and H2O's costliest eviction."""
    c1, c2, c3 = st.columns(3)
    c1.metric(
        f"H2O: position {spike}",
        fate(h_holds, h_tie),
        f"cumulative attention {float(scores[pos == spike][0]):.3f} at step {last}"
        if h_holds
        else f"cumulative attention {h_tie.score:.3f} when it went",
        delta_color="off",
        delta_arrow="off",
    )
    # Value and delta short enough for a third of a projected 1280-pixel page (Streamlit cuts them).
    c2.metric(
        f"H2O: costliest eviction, step {costly.evicted_at}",
        f"position {costly.position}",
        f"{costly.lost:.1f} steps' worth lost",
        delta_color="off",
        delta_arrow="off",
        help="Attention the trace gives a position after its eviction, summed over the steps: the "
        f"mass a replay loses on it. No other eviction of H2O's loses more than "
        f"{costly.other_max:.2f}. Taken apart below the step view.",
    )
    c3.metric(
        f"Scissorhands: position {spike}",
        fate(s_holds, tie),
        f"{tie.score:g} vote{'s' if tie.score != 1 else ''} when it went"
        if tie is not None
        else "kept to the end",
        delta_color="off",
        delta_arrow="off",
    )


if not presenter:
    answers()
# Open at the moment Scissorhands lets the spike go (a link or a later visit wins).
parting = tie.step if tie is not None else None
st.session_state.setdefault(STEP_KEY, parting if parting is not None else budget)
start = max(0, min(int(st.session_state[STEP_KEY]), last))
said = age_bias.leader_sentence(h_rep, spike)
if tie is not None:
    said += " " + age_bias.tie_sentence(tie, s_rep.score_label)
    # The rule behind the tie's count: a reader counting the spike's two big steps gets 2.
    said += " " + age_bias.vote_rule_sentence(s_rep, trace, spike, chapters_4_6.spike_steps(spike))
story = (
    "> *a position that takes almost the whole of the first two steps and nearly nothing after "
    "has the highest score of any position here and a single vote there, so this policy defends "
    "it and that one evicts it.* — the card, on H2O and Scissorhands\n\n"
    f"On this trace: {said}\n\n" + chapters_4_6.spike_view_opening(start, parting, spike)
)
if not presenter:
    st.markdown(story)


panels = [
    playback.Panel(
        f"{'AB'[i]} · {analysis.describe(name, rep.params)}", figures.policy_colour(name), rep
    )
    for i, (name, rep) in enumerate(reps.items())
]
stepper.render(
    ref,
    panels,
    key=STEP_KEY,
    highlights=[(spike, f"stale spike (position {spike})")]
    + [(p, f"steady positions ({', '.join(map(str, steady))})") for p in steady],
    title="Stale spike",
)
if presenter:  # the step view first, on the first screen; the answers and the words under it
    answers()
    with st.expander("The card, the trace and the vote rule, in words"):
        st.markdown(chapters_4_6.CARD_ON_SCISSORHANDS)
        st.markdown("**What this library's Scissorhands and the paper's actually do.**")
        st.markdown(chapters_4_6.SCISSORHANDS_SOURCES)
        st.markdown(the_trace)
        st.markdown(story)


def rest() -> None:
    """Below the first figure: the rest of the story."""
    st.header("What H2O pays: the age bias")
    chapters_4_6.chain_section(ref, reps, window, top_k, key="spike_page")

    # -- part 2: the canonical trace ---------------------------------------------------------------
    canon = data.load("canonical", {})
    windows, sweep = chapters_4_6.canonical_sweep(canon)
    sweep_h2o = [r["retained_mass"] for r in sweep["h2o"]]
    sweep_sc = [r["retained_mass"] for r in sweep["scissorhands"]]
    c_budget, c_window, c_top_k = (
        chapters_4_6.CANON_BUDGET,
        analysis.band_width(canon.trace) or 64,
        32,
    )
    lineup = [(n, {"recent_window": c_window}) for n in ("h2o", "scissorhands")]
    rows = sweeps.bench(canon.ident, canon.trace, c_budget, c_top_k, sweeps.freeze_lineup(lineup))
    h_row, s_row = rows
    diff = abs(h_row["retained_mass"] - s_row["retained_mass"])
    st.header(
        f"On the canonical trace, at recent_window {c_window}: "
        + ("they tie" if diff < chapters_4_6.TIE else "they part")
    )
    c_reps = [
        data.recorded_replay(canon, make_policy(n, c_budget, **p), c_top_k) for n, p in lineup
    ]
    agree = sweeps.shared_slots(*c_reps, canon.trace)
    m1, m2, m3 = st.columns(3)
    m1.metric(f"{h_row['label']} mass", f"{h_row['retained_mass']:.4f}")
    m2.metric(
        f"{s_row['label']} mass",
        f"{s_row['retained_mass']:.4f}",
        f"{diff:.1e} from H2O",
        delta_color="off",
        delta_arrow="off",
    )
    m3.metric(
        "Slots the two caches share",
        f"{agree['share']:.0%}",
        f"holding {agree['both']:.3f} of the mass",
        delta_color="off",
        delta_arrow="off",
        help=f"Means over steps t ≥ {c_budget}. The positions only one of them keeps are the ones "
        f"the two rules rank differently: those only {h_row['label']} keeps hold "
        f"{agree['only_a']:.3f} of the mass, those only {s_row['label']} keeps "
        f"{agree['only_b']:.3f}.",
    )
    epoch = int(canon.trace.meta.get("epoch", 512))
    at_32 = abs(sweep_h2o[windows.index(32)] - sweep_sc[windows.index(32)]) < chapters_4_6.TIE
    holds = (
        "That holds at this window, not at every one: "
        if diff < chapters_4_6.TIE and not at_32
        else "Across the sweep of chapter 4: "
    )
    # The sentences the two heatmaps below are described by: how close the runs land, and how much
    # of their caches they share.
    land = (
        f"Budget {c_budget}, recent_window {c_window}, top-{c_top_k} recall "
        f"{h_row['top_k_recall']:.4f} vs {s_row['top_k_recall']:.4f}: the two land "
        f"{'within a hundredth' if diff < chapters_4_6.TIE else f'{diff:.4f} apart'} of each other."
    )
    disagree = age_bias.slots_sentence(
        agree["share"], agree["only_a"], agree["only_b"], h_row["label"], s_row["label"]
    )
    st.markdown(
        land + "\n\n"
        "> *that workload's heavy hitters hold their weight for a whole 512-step epoch and so "
        "score well under either rule. The difference is real but that trace does not exercise it, "
        "which is worth knowing before reading much into the table.* — the card\n\n"
        + holds
        + age_bias.window_tie_sentence(windows, sweep_h2o, sweep_sc, 32)
        + f" At recent_window {c_window}, a canonical heavy hitter takes a steady share of every "
        f"row for {epoch} steps: its sum climbs (H2O) *and* it earns a vote every step "
        f"(Scissorhands), so both rules rank it on top while it matters. "
        + disagree
        + " Below, the two whole runs side by side (the dotted lines are epoch boundaries)."
    )
    his = playback.colour_his([playback.Panel("", "", r) for r in c_reps])
    cols = st.columns(2, gap="medium")
    for col, rep, hi, row in zip(cols, c_reps, his, rows, strict=True):
        # Votes are counts, as the class says: their colour bar is ticked in whole numbers.
        scale = figures.ColourScale(hi, counts=playback.counts(rep)) if hi is not None else None
        grid, sx, sy = data.pooled(rep, *playback.OVERVIEW_BINS)
        charts.show(
            figures.score_heatmap(
                z=grid,
                x=np.arange(grid.shape[1]) * sx + (sx - 1) / 2,
                y=np.arange(grid.shape[0]) * sy + (sy - 1) / 2,
                title=f"{row['label']} on canonical — whole run, max-pooled",
                score_label=rep.score_label,
                scale=scale,
                step_stride=sx,
                pos_stride=sy,
                vlines=list(range(epoch, canon.trace.steps, epoch)),
                vlines_label=f"epoch boundaries (every {epoch} steps)",
                height=420,
            ),
            key=f"canonical_{rep.policy}",
            describe=[land, disagree],
            where=col,
        )


painted.first_figure_first("stale-spike", rest)
