"""Section 2: the layer story — where each layer's attention goes, and where H2O beats
StreamingLLM, from one full-cache pass over a text (all 30 layers captured at once)."""

from __future__ import annotations

import io

import numpy as np
import streamlit as st

import h2o
from app import charts, data, figures, model_runs, state, sweeps
from app.real_model import claims
from app.real_model.common import TOP_K, Settings, go, open_in_step_through, ss
from h2o import analysis
from h2o.model.layers import by_layer

STORY_TEXT, STORY_TOKENS, STORY_BUDGET, STORY_LAYER = (
    "rm_story_text",
    "rm_story_tokens",
    "rm_story_budget",
    "rm_story_layer",
)
#: This session's finished results (run key → small plain data), so coming back shows them
#: without computing anything; and the pending button click.
STORY_RESULTS, STORY_GO = "_rm_story_results", "_rm_story_go"
STORY_TOKEN_CHOICES = (512, 1024)
STORY_BUDGETS = (32, 64, 128, 256, 512)


def _open_layer(name: str, n_tokens: int) -> None:
    """Callback: a layer captured on this page, as a session upload, in the Step-through page."""
    mtime = model_runs.text_ref(name)[1]
    layer = int(ss[STORY_LAYER])
    trace = model_runs.captured_layers(name, mtime, n_tokens)[layer]
    buf = io.BytesIO()
    h2o.save_trace(trace, buf, float16=True)
    key, up = data.make_upload(f"{name}-L{layer}-mean.npz", buf.getvalue())
    open_in_step_through(key, up)


def shares_sentence(story: dict) -> str:
    """What the shares chart shows, for its accessible description (``app.charts``): the mean
    shares over the layers, and the layer that puts the most on the middle."""
    sink, recent, middle = (np.asarray(story[k], dtype=np.float64) for k in STORY_PARTS)
    top = int(np.argmax(middle))
    return (
        f"Over the {middle.size} layers, on average {sink.mean():.2f} of the attention goes to "
        f"the sinks (positions 0–{story['n_sinks'] - 1}), {recent.mean():.2f} to the recent "
        f"{story['n_recent']} tokens and {middle.mean():.2f} to the middle; layer {top} puts the "
        f"most on the middle, {middle[top]:.2f}."
    )


#: The shares chart's three parts, in its order.
STORY_PARTS = ("sink", "recent", "middle")


def draw(texts: list[str], default_text: str, cfg: Settings, captured: list[data.TraceRef]) -> None:
    """The section (``captured``: the shipped traces, whose layers the mass chart marks)."""
    st.subheader("2 · The layer story: where does H2O beat StreamingLLM?", divider="gray")
    st.markdown(
        "One full-cache pass over a text captures the attention of **all 30 layers**. Top: where "
        "each layer's attention goes — the sinks StreamingLLM pins, the recent band every policy "
        "keeps, or the middle, where only an attention-reading policy can find what matters. "
        "Bottom: H2O and StreamingLLM replayed on every layer's trace at one budget."
    )
    c1, c2, c3 = st.columns([1.2, 1, 2], vertical_alignment="bottom")
    story_text = c1.selectbox("Text", texts, **state.mirror(STORY_TEXT, default_text))
    story_tokens = c2.segmented_control(
        "Tokens", STORY_TOKEN_CHOICES, required=True, **state.mirror(STORY_TOKENS, 1024)
    )
    story_budget = c3.segmented_control(
        "Budget (slots)", STORY_BUDGETS, required=True, **state.mirror(STORY_BUDGET, 128)
    )
    ss[STORY_TEXT], ss[STORY_TOKENS], ss[STORY_BUDGET] = story_text, story_tokens, story_budget
    story_key = (*model_runs.text_ref(story_text), int(story_tokens))
    story_results = ss.setdefault(STORY_RESULTS, {})
    if ss.pop(STORY_GO, False):  # the click: the only place this section runs the model
        model_runs.captured_layers(*story_key)
        story_results[story_key] = model_runs.layer_shares(*story_key)

    def story_button(why: str = "") -> None:
        st.button(
            f"Run the model on {story_tokens:,} tokens of {story_text}, every layer{why}",
            key="rm_story_go",
            type="primary",
            icon=":material/play_arrow:",
            on_click=go,
            args=(STORY_GO,),
            help="The first computation also loads the model (once per server). The model runs one "
            "job at a time for the whole class; a progress bar shows your place, then the time "
            "left.",
        )

    story = story_results.get(story_key)
    if story is None:
        story_button()
    else:
        lineup = [
            ("h2o", cfg.params_for("h2o")),
            ("streaming-llm", cfg.params_for("streaming-llm")),
        ]
        problems = [p for p in (cfg.refusal(n, story_budget) for n, _ in lineup) if p]
        if story_budget >= story_tokens:
            problems.append(
                f"Budget {story_budget} is not below the {story_tokens} tokens: nothing would ever "
                "be evicted. To fix: choose a smaller budget, or more tokens."
            )
        layers = list(range(len(story["sink"])))
        charts.show(
            figures.attention_shares(
                layers=layers,
                sink=story["sink"],
                recent=story["recent"],
                middle=story["middle"],
                n_sinks=story["n_sinks"],
                n_recent=story["n_recent"],
                title=f"Where each layer's attention goes — {story_text}, "
                f"{story['n_tokens']:,} tokens",
            ),
            key="rm_story_shares",
            describe=shares_sentence(story),
        )
        for p in problems:
            st.error(p, icon=":material/error:")
        rows = None
        if not problems:
            # Replays of the kept capture (no model run); this session remembers what it saw.
            compare_key = (*story_key, story_budget, sweeps.freeze_lineup(lineup))
            rows = story_results.get(compare_key)
            if rows is None and model_runs.capture_ready(*story_key):
                rows = model_runs.layer_comparison(*compare_key, TOP_K)
                story_results[compare_key] = rows
            if rows is None:
                st.info(
                    "The server has since dropped this capture to make room for others: run the "
                    f"model again to replay the layers at budget {story_budget} with these "
                    "settings.",
                    icon=":material/info:",
                )
                story_button(" again")
        if rows is not None:
            h2o_by, sl_by = by_layer(rows, "h2o"), by_layer(rows, "streaming-llm")
            oracle_by = by_layer(rows, "h2o", "oracle_mass")
            shipped = sorted({int(r.trace.meta["layer"]) for r in captured})
            h2o_label = analysis.describe("h2o", lineup[0][1])
            sl_label = analysis.describe("streaming-llm", lineup[1][1])
            text = claims.layer_story_sentence(story_budget, h2o_by, sl_by, story["middle"])
            charts.show(
                figures.layer_mass(
                    layers=layers,
                    series=[
                        (h2o_label, figures.policy_colour("h2o"), h2o_by),
                        (sl_label, figures.policy_colour("streaming-llm"), sl_by),
                    ],
                    oracle=oracle_by,
                    title=f"Retained attention mass per layer at budget {story_budget} — "
                    f"{story_text}, {story['n_tokens']:,} tokens",
                    ytitle="retained mass (mean over t ≥ budget)",
                    marked=shipped,
                    marked_label="layers of the shipped traces",
                ),
                key="rm_story_mass",
                describe=text,
            )
            st.markdown(text)

        c1, c2 = st.columns([1, 3], vertical_alignment="bottom")
        ss.setdefault(STORY_LAYER, 8 if len(layers) > 8 else 0)
        c1.selectbox("Layer", layers, **state.mirror(STORY_LAYER, ss[STORY_LAYER]))
        c2.button(
            f"Open this layer of {story_text} in Step through",
            key="rm_story_open",
            icon=":material/play_circle:",
            on_click=_open_layer,
            args=(story_text, int(story_tokens)),
            help="Adds the layer's trace to your browser session's trace list (like an upload) and "
            "opens it "
            "with H2O vs StreamingLLM (running the model again if the server has since dropped the "
            "capture).",
        )
