"""Stale spike: the one workload where H2O's sum and Scissorhands' vote count disagree."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import data, figures, playback, player, state, stepper
from h2o import analysis

STEP_KEY = state.SPIKE_STEP

player.preload()  # plotly.js loads while the server computes the page
st.title("Stale spike: H2O vs Scissorhands")
st.markdown(
    "> *A cumulative sum never forgets: a position that mattered enormously once defends its "
    "slot forever. scissorhands counts how often a position mattered instead, which decays that "
    "advantage.* — the H2O policy card"
)

presenter = state.presenter_toggle()
state.report_url_problems([STEP_KEY, *state.VIEW_SETTINGS, state.PRESENTER])
state.publish([STEP_KEY, *state.VIEW_SETTINGS, state.PRESENTER])

# -- part 1: the distinguishing trace --------------------------------------------------------------
ref = data.load("stale-spike", {})
trace = ref.trace
fit = state.defaults(trace)
budget, window, top_k = fit[state.BUDGET], fit[state.WINDOW], fit["top_k"]
spike = int(trace.meta.get("spike", 0))
steady = [int(p) for p in trace.meta.get("steady", [])]

reps = {
    name: data.recorded_replay(ref, analysis.make_policy(name, budget, recent_window=window), top_k)
    for name in ("h2o", "scissorhands")
}


def spike_fate(rep) -> tuple[int | None, float]:
    """The step the spike is evicted at (None: never), and its score then (or at the end)."""
    hits = np.flatnonzero(rep.victim_pos == spike)
    if hits.size:
        return int(rep.victim_step[hits[0]]), float(rep.victim_score[hits[0]])
    pos, scores = rep.kept_at(rep.steps - 1)
    return None, float(scores[np.searchsorted(pos, spike)])


h_step, h_score = spike_fate(reps["h2o"])
s_step, s_score = spike_fate(reps["scissorhands"])
h2o_rep = reps["h2o"]
background = ~np.isin(h2o_rep.kept_pos, [spike, *steady]) & (h2o_rep.kept_pos >= 0)
best_background = float(np.nanmax(np.where(background, h2o_rep.kept_score, np.nan)))

st.markdown(
    f"The **stale-spike** trace ({trace.steps} steps, budget {budget}, recent_window {window}): "
    f"position {spike} takes almost the whole of the first two steps and nearly nothing after; "
    f"positions {', '.join(map(str, steady))} matter steadily from birth to the end."
)
c1, c2, c3 = st.columns(3)
c1.metric(
    f"H2O: position {spike}",
    "kept to the end" if h_step is None else f"evicted at step {h_step}",
    f"cumulative attention {h_score:.3f}",
    delta_color="off",
    delta_arrow="off",
)
c2.metric(
    "H2O: best score of any background position",
    f"{best_background:.3f}",
    f"{'below' if best_background < h_score else 'not below'} the spike's {h_score:.3f}: "
    f"position {spike} is never the minimum",
    delta_color="off",
    delta_arrow="off",
    help="Background: every position but the spike and the steady ones. The steady positions "
    "H2O still holds score higher still — they matter at every step — but only the lowest "
    "score is evicted.",
)
c3.metric(
    f"Scissorhands: position {spike}",
    "kept to the end" if s_step is None else f"evicted at step {s_step}",
    f"{s_score:.0f} vote{'s' if s_score != 1 else ''} when it went",
    delta_color="off",
    delta_arrow="off",
)
st.markdown(
    "> *a position that takes almost the whole of the first two steps and nearly nothing after "
    "has the highest score of any position here and a single vote there, so this policy defends "
    "it and that one evicts it.* — the card, on H2O and Scissorhands\n\n"
    f"The view opens at step **{s_step if s_step is not None else budget}**, where it happens: "
    f"the dotted row is position {spike}. Step back and forth around it."
)

# Open the lesson at the moment Scissorhands lets the spike go (a link or a later visit wins).
st.session_state.setdefault(STEP_KEY, s_step if s_step is not None else budget)
slots = [
    stepper.Slot(
        f"{'AB'[i]} · {analysis.describe(name, rep.params)}", figures.policy_colour(name), rep
    )
    for i, (name, rep) in enumerate(reps.items())
]
stepper.render(
    ref,
    slots,
    key=STEP_KEY,
    highlights=[(spike, f"stale spike (position {spike})")]
    + [(p, f"steady positions ({', '.join(map(str, steady))})") for p in steady],
    title="Stale spike",
)

# -- part 2: the canonical trace does not separate them --------------------------------------------
st.header("On the canonical trace they tie")
canon = data.load("canonical", {})
c_budget, c_window, c_top_k = 256, 64, 32
lineup = [(n, {"recent_window": c_window}) for n in ("h2o", "scissorhands")]
rows = data.bench(canon.ident, canon.trace, c_budget, c_top_k, data.freeze_lineup(lineup))
h_row, s_row = rows
c_reps = [
    data.recorded_replay(canon, analysis.make_policy(n, c_budget, **p), c_top_k) for n, p in lineup
]
agree = data.shared_slots(*c_reps, canon.trace)
diff = abs(h_row["retained_mass"] - s_row["retained_mass"])
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
    f"holding {agree['both']:.3f} of the mass; the rest ≈ {agree['only_a']:.3f} each",
    delta_color="off",
    delta_arrow="off",
    help="Means over steps t ≥ 256. The positions only one of them keeps are background "
    "positions worth almost nothing; the sinks, the band and the live heavy hitters are in both.",
)
epoch = int(canon.trace.meta.get("epoch", 512))
st.markdown(
    f"Budget {c_budget}, recent_window {c_window}, top-{c_top_k} recall "
    f"{h_row['top_k_recall']:.4f} vs {s_row['top_k_recall']:.4f}: the two land "
    f"{'within a hundredth' if diff < 0.01 else f'{diff:.4f} apart'} of each other.\n\n"
    "> *that workload's heavy hitters hold their weight for a whole 512-step epoch and so score "
    "well under either rule. The difference is real but that trace does not exercise it, which "
    "is worth knowing before reading much into the table.* — the card\n\n"
    f"A canonical heavy hitter takes a steady share of every row for {epoch} steps, far above "
    f"the fair share 1/{c_budget}: its sum climbs (H2O) *and* it earns a vote every step "
    "(Scissorhands), so both rules rank it on top while it matters. Nothing in this trace "
    "matters hugely once and then stops — the only shape that separates a sum from a count. "
    f"They disagree on {1 - agree['share']:.0%} of the slots, but only about background positions "
    f"(≈ {agree['only_a']:.3f} of the mass either way). Below, the two whole runs side by side "
    "(the dotted lines are epoch boundaries): the same rows stay lit."
)
his = playback.colour_his([playback.Panel("", "", r) for r in c_reps])
cols = st.columns(2, gap="medium")
for col, rep, hi, row in zip(cols, c_reps, his, rows, strict=True):
    scale = figures.ColourScale(hi, log=True) if hi is not None else None
    grid, sx, sy = data.pooled(rep, *playback.OVERVIEW_BINS)
    col.plotly_chart(
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
        width="stretch",
        key=f"canonical_{rep.policy}",
        config={"displaylogo": False},
    )
