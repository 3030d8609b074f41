"""Section 1: the shipped traces (one layer of SmolLM2 each), replayed at their suggested settings.

The only section that runs on page load: cached replays, milliseconds, no model.
"""

from __future__ import annotations

import streamlit as st

from app import charts, controls, data, figures, model_runs, state, sweeps
from app.real_model.common import GEN_TEXT, MARGIN, open_in_step_through


def draw() -> list[data.TraceRef]:
    """The section; returns the shipped captured traces (section 2 marks their layers)."""
    st.subheader("1 · Its attention, in the step-through view", divider="gray")
    captured = []
    for key in data.trace_files():
        try:
            ref = data.load(key, {})
        except ValueError as e:  # a broken file dropped into traces/: say so, show the others
            st.warning(f"Skipped {state.md(key)}: {state.md(e, 300)}", icon=":material/warning:")
            continue
        if isinstance(ref.trace.meta.get("layer"), int):
            captured.append(ref)
    # The generation demo's story first, then by layer: lighthouse L8, L25, then the others.
    captured.sort(
        key=lambda r: (GEN_TEXT not in str(r.trace.meta.get("text")), r.trace.meta["layer"])
    )
    if not captured:
        st.info("No captured traces in traces/ (make them with `python -m h2o capture`).")
    else:
        st.markdown(
            "Each shipped trace is one layer's attention (mean over its query heads) while the "
            "model "
            "read the first 1,024 tokens of a text. The numbers are replays at each trace's "
            "suggested settings (H2O with recent_window 32, StreamingLLM with 4 sinks), "
            "computed now."
        )
        names, h2o_mass, sl_mass, oracle, said = [], [], [], [], []
        for ref in captured:
            tr, meta = ref.trace, ref.trace.meta
            fit = controls.defaults(tr)
            budget = fit[state.BUDGET]
            lineup = [
                ("h2o", {"recent_window": fit[state.WINDOW]}),
                ("streaming-llm", {"sinks": 4}),
            ]
            rows = sweeps.bench(ref.ident, tr, budget, fit["top_k"], sweeps.freeze_lineup(lineup))
            hm, sm = rows[0]["retained_mass"], rows[1]["retained_mass"]
            sink, recent, middle = sweeps.region_shares(ref.ident, tr)
            names.append(f"{tr.name} (budget {budget})")
            h2o_mass.append(hm)
            sl_mass.append(sm)
            oracle.append(rows[0]["oracle_mass"])
            gap = hm - sm
            if gap > MARGIN:
                look = (
                    "**Look for heavy hitters**: rows far from the diagonal that stay coloured in "
                    "H2O's panel all the way along, and are evicted (✕) by StreamingLLM's ring "
                    "buffer."
                )
            elif gap < -MARGIN:
                look = (
                    "**Look for sinks and recency**: StreamingLLM keeps *more* here — the "
                    "attention "
                    "is on positions 0–3 and the newest tokens, which its ring buffer holds anyway."
                )
            else:
                look = (
                    "**Look for sinks and recency**: the attention sits on positions 0–3 and the "
                    "newest tokens, which StreamingLLM's ring buffer holds anyway — it is as good "
                    "as H2O here, with no arithmetic at all."
                )
            text, layer = str(meta.get("text", "")).split(" (")[0], meta["layer"]
            left, right = st.columns([2.6, 1.4], vertical_alignment="center")
            said.append(
                f"**{tr.name}** — {model_runs.trace_origin(tr)}. Attention on the sinks "
                f"**{sink:.2f}**, "
                f"the recent 64 **{recent:.2f}**, the middle **{middle:.2f}**. At budget {budget}, "
                f"H2O keeps **{hm:.2f}** of the attention mass, StreamingLLM **{sm:.2f}** "
                f"(oracle {rows[0]['oracle_mass']:.2f}). {look}"
            )
            left.markdown(said[-1])
            stem = ref.key.rsplit("/", 1)[-1].removesuffix(".npz")
            right.button(
                f"Open layer {layer} ({text.rsplit('/', 1)[-1].removesuffix('.txt')}) in Step "
                "through",
                key=f"rm_open_{stem}",
                icon=":material/play_circle:",
                on_click=open_in_step_through,
                args=(ref.key,),
                width="stretch",
                help=f"Selects this trace with budget {budget}, H2O vs StreamingLLM, at step "
                f"{min(tr.steps - 1, 4 * budget)}; hover a heatmap cell to see its token.",
            )
        charts.show(
            figures.grouped_bars(
                categories=names,
                series=[
                    ("H2O (recent_window=32)", figures.policy_colour("h2o"), h2o_mass),
                    ("StreamingLLM (sinks=4)", figures.policy_colour("streaming-llm"), sl_mass),
                ],
                marks=("oracle bound", oracle),
                title="Retained attention mass on the shipped traces",
                xtitle="trace (layer of SmolLM2-135M, mean over heads)",
                ytitle="retained mass (mean over t ≥ budget)",
                height=380,
            ),
            key="rm_traces",
            describe=said,
        )

    return captured
