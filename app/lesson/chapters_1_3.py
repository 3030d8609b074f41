"""Chapters 1–3: why evict, sinks and recency, heavy hitters.

Every sentence that states a number or a comparison is built by a small pure function below from
the numbers the chapter's figure shows (``tests/test_claims_chapters_1_3.py`` checks them
against the library at every setting); the chapters only lay them out. Each chapter keeps its
text before the first figure to about three lines, so a projected 1280×720 screen shows the
figure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import pandas as pd
import streamlit as st

import h2o
from app import card, charts, controls, data, figures, model_runs, pages, state
from app.figures import gib
from app.lesson import Chapter, in_view, more, open_in, predict, projected, say
from h2o import explain

STEP_PAGE = pages.STEP_THROUGH
#: Chapter 1's controls: every value a student can pick (the claim tests run them all).
CONTEXTS = (4_096, 8_192, 32_768, 131_072)
BUDGETS = (256, 512, 1024, 2048, 4096)
BATCHES = (1, 8, 32)
#: Chapter 1's table: column → ModelShape attribute (computed columns are added after).
TABLE = {
    "model": "name",
    "layers": "n_layers",
    "query heads": "n_heads",
    "KV heads": "n_kv_heads",
    "head dim": "head_dim",
    "bytes per token (fp16)": "bytes_per_token",
}


def k_tokens(n: int) -> str:
    return f"{n // 1024}K"


def times(a: float, b: float) -> str:
    """``a`` against ``b``: "2.8× its" above it, "7.6 % of its" below (two significant figures,
    so a small share never prints as 0)."""
    r = a / b
    return f"{r:.1f}× its" if r >= 1 else f"{100 * r:.2g} % of its"


# -- 1. why evict: the sentences -------------------------------------------------------------------
def memory_sentence(shape: explain.ModelShape, context: int, budget: int, batch: int) -> str:
    """Does this model's KV cache outweigh its weights at this context, budget and batch?"""
    w = shape.weight_bytes
    assert w is not None, f"{shape.name} has no parameter count"
    full = shape.kv_bytes(context, batch)
    seqs = "one sequence" if batch == 1 else f"a batch of {batch} sequences"
    out = f"**{shape.name}**, {seqs} of {k_tokens(context)} tokens"
    if shape.context is not None and context > shape.context:
        out += f" (past its native {k_tokens(shape.context)} context)"
    out += f": {gib(full)} of KV cache, {times(full, w)} {gib(w)} of weights — "
    out += "**the cache outweighs the weights**" if full > w else "the weights still outweigh it"
    if budget >= context:
        return out + f". A budget of {budget:,} slots is not below the context: nothing to evict."
    cap = shape.kv_bytes(budget, batch)
    return out + f". Capped at {budget:,} slots: {gib(cap)}, {times(cap, w)} weights."


def reads_sentence(shape: explain.ModelShape, context: int, budget: int, batch: int) -> str:
    """What one decode step reads: the weights once for the batch, every sequence's whole cache."""
    w = shape.weight_bytes
    assert w is not None, f"{shape.name} has no parameter count"
    full = shape.kv_bytes(context, batch)
    out = (
        "Decode is bound by memory reads: each step (one new token per sequence) reads all the "
        "weights, once for the whole batch, and every sequence's whole KV cache. For "
        f"{shape.name} here: {gib(w)} + {gib(full)} = **{gib(w + full)} per step**"
    )
    if budget >= context:
        return out + "; at this budget nothing is evicted, so nothing is saved."
    cap = shape.kv_bytes(budget, batch)
    return out + (
        f"; capped at {budget:,} slots, {gib(w)} + {gib(cap)} = {gib(w + cap)}, "
        f"**{(w + full) / (w + cap):.1f}× less to read**. Eviction cuts the time per token as "
        "well as the memory."
    )


def bookkeeping_sentence(per_slot: int, shapes: Sequence[explain.ModelShape], budget: int) -> str:
    """H2O's own bytes per slot, against the K and V bytes a slot holds in each model shown."""
    by_size: dict[int, list[explain.ModelShape]] = {}
    for s in shapes:
        by_size.setdefault(s.bytes_per_slot_head, []).append(s)
    parts = [
        f"{size} B in {' and '.join(s.name for s in group)} (head dim {group[0].head_dim}): "
        f"**{per_slot / size:.1%}** on top"
        for size, group in sorted(by_size.items())
    ]
    return (
        "H2O's own bookkeeping, per slot: a position (4 bytes), a float64 score (8) and one "
        f"scratch byte — **{per_slot} bytes**, {per_slot * budget / 1000:.1f} KB at the budget "
        f"of {budget:,}, per layer and KV head. The slot it manages holds K and V there, head "
        f"dim × 2 × 2 bytes: {'; '.join(parts)}."
    )


def gqa_sentence(shapes: Sequence[explain.ModelShape]) -> str:
    """Grouped-query attention, the KV saving built into the model, from the heads shown."""
    grouped = [s for s in shapes if s.gqa_group is not None and s.gqa_group > 1]
    plain = [s.name for s in shapes if s.gqa_group == 1]
    if not grouped:
        return "No model shown shares its KV heads between query heads."
    each = "; ".join(
        f"{s.name} shares each of its {s.n_kv_heads} KV heads between {s.gqa_group} query heads "
        f"({s.n_heads} in all), so its cache is **{s.gqa_group}× smaller** than with one KV "
        "head per query head"
        for s in grouped
    )
    rest = f" {' and '.join(plain)} has one KV head per query head." if plain else ""
    return (
        "The first KV saving is made when the model is designed — grouped-query attention: "
        f"{each}.{rest}"
    )


# -- 1. why evict: the chapter ---------------------------------------------------------------------
# On disk too: gguf reads every tensor's header with the metadata (seconds here), and the first
# student of every server would wait for it.
@st.cache_data(show_spinner="Reading SmolLM2's header…", max_entries=2, persist="disk")
def _smollm_shape(path: str, mtime_ns: int) -> explain.ModelShape:
    return explain.named(explain.gguf_shape(path), "SmolLM2-135M")


def model_shapes() -> tuple[list[explain.ModelShape], str]:
    """The models chapter 1 shows, and where SmolLM2's numbers come from (if it is shown)."""
    shapes = [explain.LLAMA2_7B, explain.LLAMA31_70B]
    try:
        path = model_runs.model_path()
        shapes.insert(0, _smollm_shape(str(path), path.stat().st_mtime_ns))
        where = (
            "SmolLM2-135M's shape, native context and parameter count (its tensors' sizes "
            "summed) are read from its GGUF file's header"
        )
    except (OSError, ValueError) as e:  # ModelNotFoundError is an OSError; a bad file, ValueError
        where = f"SmolLM2-135M is not available here ({type(e).__name__}), so it is left out"
    return shapes, where


# Built once per server for the same models (every student of the lesson), not on every run:
# read-only, as st.dataframe leaves it.
@functools.lru_cache(maxsize=4)
def shapes_table(shapes: tuple[explain.ModelShape, ...]) -> pd.DataFrame:
    """The models' shapes, parameters, weights and native context, a row each."""
    table = {col: [getattr(s, a) for s in shapes] for col, a in TABLE.items()}
    table["parameters"] = [f"{s.n_params or 0:,.0f}" for s in shapes]
    table["weights (fp16)"] = [gib(s.weight_bytes or 0) for s in shapes]
    table["native context"] = [k_tokens(s.context or 0) for s in shapes]
    return pd.DataFrame(table)


def why_evict() -> Callable[[], None]:
    st.markdown(
        "Every token a model reads or writes leaves a **key** and a **value** vector in every "
        "layer, for every KV head — the **KV cache**, kept so later tokens can attend to it. It "
        "grows by one entry per token; an *eviction policy* caps it at a **budget** of slots "
        "and decides which to drop. How big is it next to the weights?"
    )
    shapes, where = model_shapes()
    chart, controls = st.columns([3, 1], vertical_alignment="center")
    with controls:
        context = st.select_slider(
            "Context (tokens)", CONTEXTS, value=32_768, key="lesson_ctx", format_func=k_tokens
        )
        budget = st.select_slider("Cache budget (slots)", BUDGETS, value=1024, key="lesson_budget")
        batch = st.select_slider("Batch (sequences)", BATCHES, value=1, key="lesson_batch")
    memory = "\n".join(f"- {memory_sentence(s, context, budget, batch)}" for s in shapes)
    reads = reads_sentence(explain.LLAMA2_7B, context, budget, batch)
    charts.show(
        figures.kv_memory(
            models=[s.name for s in shapes],
            weights=[s.weight_bytes or 0.0 for s in shapes],
            full=[s.kv_bytes(context, batch) for s in shapes],
            capped=[s.kv_bytes(min(budget, context), batch) for s in shapes],
            context=context,
            budget=budget,
            batch=batch,
            **projected(height=240),
        ),
        key="lesson_kv",
        describe=in_view([memory, reads]),
        where=chart,
    )
    say([memory, reads])  # one element, a paragraph each (projected: what a step reads, under More)
    return lambda: shapes_details(shapes, where, budget)


def shapes_details(shapes: list[explain.ModelShape], where: str, budget: int) -> None:
    """Chapter 1's folded details: the shapes' table and what it says."""
    with st.expander("The shapes, H2O's own bytes, and the other ways to save KV memory"):
        st.dataframe(shapes_table(tuple(shapes)), hide_index=True, key="lesson_kv_table")
        st.markdown(
            "Bytes per token = layers × KV heads × head dim × 2 (K and V) × 2 bytes; weights = "
            f"parameters × 2 bytes (fp16 for every model). {where}; the Llama rows are "
            "published shapes and parameter counts (Llama-3.1-70B has Llama-3-70B's shape, "
            f"trained for {k_tokens(explain.LLAMA31_70B.context or 0)} tokens).\n\n"
            + gqa_sentence(shapes)
            + " Two other ways to fit a cache keep every token: **quantize** it (fewer bits per "
            "value, some precision lost) or **offload** it to CPU memory (every step must "
            "still read it back, over a slower link). Eviction drops tokens; the rest of this "
            "lesson is about which.\n\n"
            + bookkeeping_sentence(h2o.H2O.nbytes_per_slot, shapes, budget)
        )


# -- 2. sinks and recency --------------------------------------------------------------------------
def sinks_intro(f: explain.SinkFacts) -> str:
    return (
        "**StreamingLLM** (Xiao et al., 2023) reads no attention. It pins the first "
        f"**{f.sinks}** positions — *attention sinks*: models dump spare attention on the first "
        "tokens, and dropping them breaks generation — and keeps a ring of the "
        f"{f.budget - f.sinks} most recent. On the synthetic canonical trace, budget {f.budget}:"
    )


def sinks_text(f: explain.SinkFacts) -> list[str]:
    """The paragraphs after chapter 2's figure."""
    lo = f.lost
    nxt = lo.evicted_at + 1
    return [
        "What the ring cannot keep is anything old that matters. A **heavy hitter** (Zhang et "
        "al.'s term) is one of the few positions that receive far more than their share of "
        f"attention, step after step. Position **{lo.position}** is one: while kept it took "
        f"on average {f.kept_share:.3f} of each row, {f.vs_even:.0f}× an even share (1/t at "
        f"step t). The ring pushed it out at step **{lo.evicted_at}**, and the trace went on "
        f"attending to it: **{lo.lost_mass:.2f}** steps' worth of attention (a sum of shares, "
        "one per step).",
        "That attention does not vanish. After an eviction the softmax runs over the kept keys "
        "only, so the weights renormalise: what the model would have put on position "
        f"{lo.position} goes to the tokens still kept, in proportion to what they already had "
        f"(at step {nxt} the kept positions hold {f.kept_next:.3f} of the full row, so each kept "
        f"weight is scaled by {1 / f.kept_next:.2f}). The model reads other tokens' values in "
        f"place of position {lo.position}'s: what it carried is out of reach.",
        f"Over the whole trace StreamingLLM keeps **{f.mass:.3f}** of the attention mass at "
        f"budget {f.budget} — its *retained mass*, the share of each step's attention that lands "
        f"on kept positions — with a top-{f.top_k} recall of {f.recall:.3f} (the share of each "
        f"step's {f.top_k} most-attended positions still kept), against an oracle bound of "
        f"{f.oracle:.3f} (the most any {f.budget} positions could hold). Exact definitions, and "
        "what these measures are not, below.",
        "The canonical trace is **synthetic**, built to the description in *the card* — "
        f"{card.CARD_INTRO} — and calibrated to its numbers. Positions 0–{f.sinks - 1} take "
        f"{f.sink_share:.3f} of a steady-state row, a sink share chosen so that StreamingLLM "
        "keeps the card's 0.7367 at budget 256 "
        f"(measured here: {f.mass:.4f} at budget {f.budget}). A recency band covers the "
        f"{f.band} newest positions and stops dead after the {f.band}th: with what lies under "
        f"it, {f.band_share:.2f} of a steady-state row (steps after {f.band}) falls on the last "
        f"{f.band} positions — so the knee at {f.band} in chapter 4 is there by construction. "
        f"And {f.hitters} heavy hitters per {f.epoch}-step epoch hold their weight until the "
        "epoch ends.",
    ]


def measures_text(f: explain.SinkFacts) -> str:
    """What retained mass, top-k recall and the oracle bound are (as ``h2o.replay`` computes
    them), and what they are not."""
    return (
        f"- **Retained mass**: at step t, the share of row t (the attention the full cache "
        "would give) that falls on the positions the policy still keeps, before t is admitted: "
        "how much of the attention the model wanted it still gets to see.\n"
        f"- **Top-k recall**: the fraction of row t's {f.top_k} most-attended positions that "
        "are still kept.\n"
        "- **Oracle bound**: the largest mass any "
        f"{f.budget} positions could hold at step t — the best {f.budget} per step in "
        "hindsight, free to re-admit positions dropped earlier. No policy can reach it; it "
        "bounds them all.\n\n"
        f"Each number is the mean over the steps t ≥ budget ({f.budget}), where eviction is in "
        "force. They are **open-loop proxies**: the trace's attention was recorded once, with "
        "the full cache, and is not recomputed after an eviction (a real model would attend "
        "differently to what is left). Chapter 7 runs a real model in a closed loop."
    )


def sinks_and_recency() -> None:
    ref = data.load("canonical", {})
    trace = ref.trace
    budget, sinks = 256, 4
    rep = data.recorded_replay(ref, h2o.StreamingLLM(budget, sinks=sinks), 32)
    # Past the first budget's worth of positions: early rows are short, and their shares large.
    lost = data.memo(rep, "lesson_lost", lambda: explain.lost_heavy_hitter(rep, trace, budget))
    f = data.memo(rep, "lesson_sink_facts", lambda: explain.sink_facts(trace, rep, lost))
    st.markdown(sinks_intro(f))
    said = sinks_text(f)
    charts.show(
        figures.attention_received(
            received=lost.received,
            position=lost.position,
            evicted_at=lost.evicted_at,
            policy="streaming-llm",
            title=f"Attention position {lost.position} receives, step by step",
            **projected(height=300),
        ),
        key="lesson_lost",
        describe=in_view(said),
    )
    say(said)  # projected: the lost heavy hitter in place, the rest under More
    with (
        more(),
        st.expander("What the measures mean: retained mass, top-k recall, the oracle bound"),
    ):
        st.markdown(measures_text(f))
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
def heavy_intro(f: explain.HeavyFacts) -> str:
    return (
        "**H2O** (Zhang et al., NeurIPS 2023) reads the attention: each step, every kept "
        "position's **score** grows by the attention it just received. Over budget, it evicts "
        f"the lowest score outside a **protected window** of the newest {f.window}. The toy "
        f"trace, budget {f.budget}: at step **{f.t}**, {f.n} positions for {f.budget} slots."
    )


def heavy_why(f: explain.HeavyFacts) -> str:
    """The answer's explanation (short: it sits between the question and the figure)."""
    return (
        f"Positions {f.protected[0]}–{f.protected[1]} are protected; of the rest, position "
        f"{f.victim} has the lowest cumulative attention ({f.victim_score:.4f})."
    )


def heavy_age_text(f: explain.HeavyFacts) -> str:
    """After chapter 3's reveal (it names the victim): its age, and the age bias."""
    youngest = max(f.evictable)
    age = f.t - f.victim  # steps at which the victim has been scored: victim + 1 .. t
    oldest = min(f.evictable)
    if f.victim == youngest:
        who = f"Position {f.victim} is also the **youngest** position that may go"
    else:
        who = f"Position {f.victim} is not the youngest position that may go ({youngest} is)"
    return (
        f"{who}: it has been scored at {age} step{'s' if age != 1 else ''}, position {oldest} "
        f"at {f.t - oldest}. A cumulative sum favours the old — the **age bias** that chapters "
        "4 and 5 follow — and the protected window exists to give newcomers time to earn a "
        "score before they must compete."
    )


def heavy_text(f: explain.HeavyFacts) -> list[str]:
    """The paragraphs after chapter 3's question: persistence, and where it fails."""
    top = " and ".join(str(p) for p in f.top)
    return [
        "Why should past attention predict future use? The card: attention is *persistently "
        "sparse* — a small set of positions collects most of the attention across a whole "
        "generation, and which positions those are is fairly stable. Here the two highest "
        f"scores at step {f.t}, positions {top}, go on taking on average {f.top_later:.2f} of "
        f"each later row (steps {f.t + 1}–{f.steps - 1}), {f.top_vs_even:.1f}× an even share "
        "for two positions.",
        "Where it fails: a fact read once and asked for later. Its sum stays small until the "
        "question comes, and by then it may be gone — chapter 7's *brass owl*, on a real "
        "model. SnapKV (Li et al., 2024) is built for that case: it compresses once, after "
        "reading the whole prompt, question included (see *Where should the budget go?*).",
    ]


def tie_text(demo: dict) -> str:
    """The card's tie and order rules, from ``explain.tie_demo``'s own run."""
    tied: dict[int, float] = demo["tied"]
    before: dict[int, float] = demo["before"]
    window = demo["window"]
    candidates = list(tied.items())[: len(tied) - window]
    low = min(s for _, s in candidates)
    ties = [p for p, s in candidates if s == low]
    drop = len(before) - 2
    chosen = ", then ".join(f"{p} ({before[p]:g})" for p in demo["chosen"])
    return (
        f"Two rules the card fixes, shown on {demo['steps']} hand-made steps of the library's "
        f"own H2O (budget {demo['budget']}, window {window}; `h2o.explain.tie_demo`):\n\n"
        f"- **Ties evict the lower position.** After step {demo['tie_step']} the scores are "
        + ", ".join(f"{p}: {s:g}" for p, s in tied.items())
        + f" — positions {' and '.join(map(str, ties))} tie, and `evict()` returns "
        f"**{demo['tie_victims']}**.\n"
        f"- **Victims come back in ascending order.** After step {demo['tie_step'] + 1}, "
        f"`evict(budget=2)` must drop {drop} positions: the argmin picks {chosen}, and returns "
        f"**{demo['down_to_2']}**."
    )


def heavy_hitters() -> None:
    ref = data.load("toy", {})
    fit = controls.defaults(ref.trace)
    budget, window = fit[state.BUDGET], fit[state.WINDOW]
    rep = data.recorded_replay(ref, h2o.H2O(budget, recent_window=window), fit["top_k"])
    f = data.memo(rep, "lesson_heavy_facts", lambda: explain.heavy_facts(ref.trace, rep))
    d = explain.decision(rep, f.t)
    st.markdown(heavy_intro(f))
    options = [str(p) for p in f.evictable]
    if predict(
        "heavy",
        f"which position does H2O evict at step {f.t}?",
        options,
        str(f.victim),
        heavy_why(f),
    ):
        age = heavy_age_text(f)  # it names the victim: only once revealed
        charts.show(
            figures.decision_bars(
                positions=d.positions,
                scores=d.scores,
                window=d.window,
                victims=[p for p, _ in d.victims],
                score_label=rep.score_label,
                title=f"H2O at step {f.t}: cumulative attention of each kept position",
            ),
            key="lesson_decision",
            describe=age,
        )
        st.markdown(age)
    with more():
        st.markdown("\n\n".join(heavy_text(f)))
        with st.expander("The contract: ties, and the order victims come back in"):
            st.markdown(tie_text(explain.tie_demo()))
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
            state.STEP: f.t,
        },
        key="lesson_open_3",
    )


CHAPTERS = [
    Chapter(
        1,
        "Why evict",
        "why-evict",
        why_evict,
        more="More: what a decode step reads, the models' shapes, H2O's own bytes",
    ),
    Chapter(
        2,
        "Sinks and recency",
        "sinks-and-recency",
        sinks_and_recency,
        more="More: where the lost attention goes, the measures, how the trace is built",
    ),
    Chapter(
        3,
        "Heavy hitters",
        "heavy-hitters",
        heavy_hitters,
        more="More: why past attention predicts future use, where it fails, the tie rules",
    ),
]
