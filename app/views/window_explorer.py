"""recentWindow explorer: mass and recall against recent_window, against the simple baselines."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import a11y, charts, controls, figures, painted, policy_claims, state, sweeps
from h2o import analysis

a11y.focus_ring()  # the keyboard's focus, seen on every control

st.title("recentWindow explorer")
st.markdown(
    "> *Set it at least as wide as your model's local attention band. [...] the failure is quiet "
    "and [...] our own benchmark trace exhibits it. The policy still works, it just gives away "
    "mass.* — the H2O policy card\n\n"
    "H2O and Scissorhands replayed at every recent_window, at the sidebar's budget. "
    "StreamingLLM and the sliding window have no recent_window: they are the flat dashed "
    "references. The dotted line marks the trace's recency band, where the card says the gain "
    "saturates."
)

ctx = controls.sidebar()
state.publish(state.SHARED)
band = analysis.band_width(ctx.trace)
windows = sweeps.sweep_windows_for(ctx.budget, band)
_, sinks_error = controls.policy_or_error(ctx, "streaming-llm")
if sinks_error:
    st.error(sinks_error + " The StreamingLLM reference below uses min(sinks, budget − 1).")
sinks = min(ctx.sinks, ctx.budget - 1)

if ctx.budget < 2:
    fix = "raise the budget" if ctx.trace.steps > 2 else "this trace has 2 steps: pick a longer one"
    st.error(f"A recent_window sweep needs a budget of at least 2: {fix}.")
    st.stop()

if ctx.recent_window >= ctx.budget:
    st.warning(
        f"The sidebar's recent_window ({ctx.recent_window}) is not below the budget "
        f"({ctx.budget}), so no policy can use it: the sweep below runs every window that fits "
        f"(up to {max(windows)}) and marks none as yours. Lower recent_window below "
        f"{ctx.budget} to mark it.",
        icon=":material/warning:",
    )
result = sweeps.window_sweep(ctx.ref.ident, ctx.trace, ctx.budget, ctx.top_k, tuple(windows), sinks)
h2o_rows, sc_rows, refs = result["h2o"], result["scissorhands"], result["refs"]
oracle = h2o_rows[0]["oracle_mass"]
ref_mass = {r["policy"]: r["retained_mass"] for r in refs}
ref_recall = {r["policy"]: r["top_k_recall"] for r in refs}
ref_label = {r["policy"]: r["label"] for r in refs}

# -- the headline, computed: below the reference at 32, above it on both metrics at the band -------
by_w = {r["recent_window"]: r for r in h2o_rows}
sl_mass, sl_recall = ref_mass["streaming-llm"], ref_recall["streaming-llm"]
cols = st.columns(4)
for col, w in zip(cols[:2], [32, band], strict=True):
    if w is None or w not in by_w:
        continue
    r = by_w[w]
    col.metric(
        f"H2O mass at recent_window {w}",
        f"{r['retained_mass']:.4f}",
        f"{r['retained_mass'] - sl_mass:+.4f} vs StreamingLLM",
    )
cols[2].metric(f"{ref_label['streaming-llm']} mass", f"{sl_mass:.4f}")
cols[3].metric(f"Oracle bound (best {ctx.budget})", f"{oracle:.4f}")
# What the two charts below are described by: the headline, and the references they draw.
described: list[str] = []
if band is not None and band in by_w and 32 in by_w:
    share = sweeps.band_share(ctx.ref.ident, ctx.trace, band)
    described.append(
        f"This trace puts **{share:.2f}** of its attention on the most recent {band} positions. "
        + policy_claims.window_headline(
            h2o_rows, band, sl_mass, sl_recall, state.md(ref_label["streaming-llm"]), ctx.top_k
        )
    )
    st.markdown(described[0])
references = (
    f"References at budget {ctx.budget}: "
    + "; ".join(
        f"{ref_label[p]} mass {ref_mass[p]:.4f}, recall {ref_recall[p]:.4f}"
        for p in ("streaming-llm", "sliding-window")
    )
    + f"; oracle bound {oracle:.4f}. Means over steps t ≥ budget; computed once per budget and "
    "cached, so returning to a budget is instant."
)
described.append(references)

left, right = st.columns(2, gap="medium")
for col, metric, title, refs_of, with_oracle in (
    (left, "retained_mass", "Retained attention mass", ref_mass, True),
    (right, "top_k_recall", f"Top-{ctx.top_k} recall", ref_recall, False),
):
    ref_lines = [(p, ref_label[p], refs_of[p]) for p in ("streaming-llm", "sliding-window")]
    if with_oracle:
        ref_lines.append(("oracle", "oracle bound", oracle))
    fig = figures.window_sweep(
        windows=windows,
        series=[
            ("h2o", "H2O", [r[metric] for r in h2o_rows]),
            ("scissorhands", "Scissorhands", [r[metric] for r in sc_rows]),
        ],
        refs=ref_lines,
        title=f"{title} vs recent_window",
        subtitle=f"{ctx.trace.name}, budget {ctx.budget}",
        height=500,
        ytitle=title.lower() + " (mean over t ≥ budget)",
        band=band,
        current=ctx.recent_window if ctx.recent_window < ctx.budget else None,
    )
    charts.show(fig, key=f"sweep_{metric}", describe=described, where=col)


def rest() -> None:
    """Below the two sweeps: the numbers behind them."""
    st.subheader("The numbers")
    table = pd.DataFrame(
        {
            "recent_window": windows,
            "H2O mass": [r["retained_mass"] for r in h2o_rows],
            f"H2O top-{ctx.top_k} recall": [r["top_k_recall"] for r in h2o_rows],
            "Scissorhands mass": [r["retained_mass"] for r in sc_rows],
            f"Scissorhands top-{ctx.top_k} recall": [r["top_k_recall"] for r in sc_rows],
            "H2O mass − StreamingLLM": [r["retained_mass"] - sl_mass for r in h2o_rows],
        }
    )
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={c: st.column_config.NumberColumn(format="%.4f") for c in table.columns[1:]},
        key="sweep_table",
    )
    st.caption(references)


painted.first_figure_first("window-explorer", rest)
