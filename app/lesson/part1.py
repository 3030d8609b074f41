"""Chapters 1–3: why evict, sinks and recency, heavy hitters."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import h2o
from app import data, figures, state
from app.lesson import Chapter, open_in, predict
from h2o import explain

STEP_PAGE = "views/step_through.py"


# -- 1. why evict ----------------------------------------------------------------------------------
# On disk too: gguf reads every tensor's header with the metadata (seconds here), and the first
# student of every server would wait for it.
@st.cache_data(show_spinner="Reading SmolLM2's header…", max_entries=2, persist="disk")
def _smollm_shape(path: str, mtime_ns: int) -> explain.ModelShape:
    shape = explain.gguf_shape(path)
    return explain.ModelShape("SmolLM2-135M", shape.n_layers, shape.n_kv_heads, shape.head_dim)


def why_evict() -> None:
    st.markdown(
        "Every token a model reads or writes leaves a **key** and a **value** vector in every "
        "layer, for every KV head. They are kept so the next tokens can attend back to it: the "
        "**KV cache**. It grows by one entry per token, and at long contexts it, not the "
        "weights, is what fills the GPU. An *eviction policy* caps it at a **budget** of slots "
        "and decides which entries to drop."
    )
    shapes = [explain.LLAMA2_7B, explain.LLAMA3_70B]
    try:
        path = data.model_path()
        shapes.insert(0, _smollm_shape(str(path), path.stat().st_mtime_ns))
        where = "SmolLM2-135M's shape is read from its GGUF file's header"
    except (OSError, ValueError) as e:  # ModelNotFoundError is an OSError; a bad file, ValueError
        where = f"SmolLM2-135M is not available here ({type(e).__name__}), so it is left out"
    c1, c2 = st.columns(2)
    context = c1.select_slider(
        "Context length (tokens)",
        [4_096, 8_192, 32_768, 131_072],
        value=32_768,
        key="lesson_ctx",
        format_func=lambda n: f"{n // 1024}K",
    )
    budget = c2.select_slider(
        "Cache budget (slots)", [256, 512, 1024, 2048, 4096], value=1024, key="lesson_budget"
    )
    st.plotly_chart(
        figures.kv_memory(
            models=[s.name for s in shapes],
            per_token=[s.bytes_per_token for s in shapes],
            context=context,
            budget=budget,
        ),
        width="stretch",
        key="lesson_kv",
        config={"displaylogo": False},
    )
    st.dataframe(
        pd.DataFrame(
            {
                "model": [s.name for s in shapes],
                "layers": [s.n_layers for s in shapes],
                "KV heads": [s.n_kv_heads for s in shapes],
                "head dim": [s.head_dim for s in shapes],
                "bytes per token (fp16)": [s.bytes_per_token for s in shapes],
            }
        ),
        hide_index=True,
        key="lesson_kv_table",
    )
    per_slot = h2o.H2O.nbytes_per_slot
    st.markdown(
        f"Bytes per token = layers × KV heads × head dim × 2 (K and V) × 2 bytes. {where}; the "
        "7B and 70B rows are published shapes (the 70B one shares each KV head between 8 query "
        "heads). Eviction has its own bookkeeping: H2O keeps, per slot, a position (4 bytes), a "
        f"float64 score (8) and one scratch byte — **{per_slot} bytes**, "
        f"{per_slot * 512 / 1000:.1f} KB at a budget of 512, per layer and KV head. Next to "
        "the cache it evicts from, that is nothing."
    )


# -- 2. sinks and recency --------------------------------------------------------------------------
def sinks_and_recency() -> None:
    ref = data.load("canonical", {})
    trace = ref.trace
    budget, sinks = 256, 4
    rep = data.recorded_replay(ref, h2o.StreamingLLM(budget, sinks=sinks), 32)
    # Past the first budget's worth of positions: early rows are short, and their shares large.
    lost = data.memo(rep, "lesson_lost", lambda: explain.lost_heavy_hitter(rep, trace, budget))
    mass = rep.summary()["retained_mass"]
    st.markdown(
        "**StreamingLLM** (Xiao et al., 2023) needs no attention weights at all. It pins the "
        f"first **{sinks}** positions — *attention sinks*: models dump spare attention on the "
        "first tokens, and dropping them breaks generation — and keeps a ring buffer of the most "
        f"recent {budget - sinks}. On the canonical trace, where 0.55 of the attention falls on "
        f"the last 64 positions, that already keeps **{mass:.3f}** of the attention mass at "
        f"budget {budget}."
    )
    st.markdown(
        "What it cannot keep is anything old that matters. Position "
        f"**{lost.position}** is a heavy hitter: StreamingLLM's ring pushed "
        f"it out at step **{lost.evicted_at}**, and the trace went on attending to it — "
        f"**{lost.lost_mass:.2f}** steps' worth of attention (a sum of shares, one per step) "
        "that now lands on nothing."
    )
    st.plotly_chart(
        figures.attention_received(
            received=lost.received,
            position=lost.position,
            evicted_at=lost.evicted_at,
            policy="streaming-llm",
            title=f"Attention position {lost.position} receives, step by step",
        ),
        width="stretch",
        key="lesson_lost",
        config={"displaylogo": False},
    )
    open_in(
        "Open this in Step through",
        STEP_PAGE,
        {
            state.TRACE: "canonical",
            state.BUDGET: budget,
            state.WINDOW: 32,
            state.SINKS: sinks,
            state.POLICY_A: "streaming-llm",
            state.POLICY_B: "h2o",
            state.STEP: lost.evicted_at,
            state.ROWS: "all",
        },
        key="lesson_open_2",
    )


# -- 3. heavy hitters ------------------------------------------------------------------------------
def heavy_hitters() -> None:
    ref = data.load("toy", {})
    fit = state.defaults(ref.trace)
    budget, window = fit[state.BUDGET], fit[state.WINDOW]
    rep = data.recorded_replay(ref, h2o.H2O(budget, recent_window=window), fit["top_k"])
    t = explain.first_eviction(rep)
    d = explain.decision(rep, t)
    st.markdown(
        "**H2O** (Zhang et al., NeurIPS 2023) reads the attention: every step, each kept "
        "position's **score** grows by the attention it just received (summed in float64). When "
        "the cache is over budget it evicts the lowest score — except in the **protected "
        f"window** of the newest {window} positions, which have had no time to earn any."
    )
    n = len(d.positions)
    ev = d.evictable
    options = [str(int(p)) for p in d.positions[ev]]
    victim = str(d.victims[0][0])
    st.markdown(
        f"The toy trace ({ref.trace.steps} steps), budget {budget}, recent_window {window}. At "
        f"step **{t}** position {t} has just been admitted: {n} positions for {budget} slots."
    )
    if predict(
        "heavy",
        f"which position does H2O evict at step {t}?",
        options,
        victim,
        f"Positions {int(d.positions[-window])}–{int(d.positions[-1])} are protected; of the "
        f"rest, position {victim} has the lowest cumulative attention "
        f"({d.victims[0][1]:.4f}). Position 0, the sink, is safe on its score alone.",
    ):
        st.plotly_chart(
            figures.decision_bars(
                positions=d.positions,
                scores=d.scores,
                window=d.window,
                victims=[p for p, _ in d.victims],
                score_label=rep.score_label,
                title=f"H2O at step {t}: cumulative attention of each kept position",
            ),
            width="stretch",
            key="lesson_decision",
            config={"displaylogo": False},
        )
    demo = explain.tie_demo()
    tied = demo["tied"]
    st.markdown(
        "Two rules the card fixes, shown on five hand-made steps of the library's own H2O "
        "(budget 3, window 1; `h2o.explain.tie_demo`):\n\n"
        "- **Ties evict the lower position.** After step 3 the scores are "
        + ", ".join(f"{p}: {s:g}" for p, s in tied.items())
        + f" — positions 1 and 2 tie, and `evict()` returns **{demo['tie_victims']}**.\n"
        f"- **Victims come back in ascending order.** After step 4, `evict(budget=2)` must "
        "drop two: the argmin picks 3 (0.7) first, then 2 (0.85), and returns "
        f"**{demo['down_to_2']}**."
    )
    open_in(
        "Open this in Step through",
        STEP_PAGE,
        {
            state.TRACE: "toy",
            state.BUDGET: budget,
            state.WINDOW: window,
            state.SINKS: fit[state.SINKS],
            state.POLICY_A: "h2o",
            state.POLICY_B: "streaming-llm",
            state.STEP: t,
        },
        key="lesson_open_3",
    )


CHAPTERS = [
    Chapter(1, "Why evict", "why-evict", why_evict),
    Chapter(2, "Sinks and recency", "sinks-and-recency", sinks_and_recency),
    Chapter(3, "Heavy hitters", "heavy-hitters", heavy_hitters),
]
