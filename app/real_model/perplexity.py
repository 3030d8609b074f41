"""Section 3: what eviction costs — closed-loop perplexity against the budget."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import charts, figures, model_runs, state
from app.real_model.common import POLICY_NAMES, Settings, go, ss

PPL_TEXT, PPL_TOKENS, PPL_BUDGETS, PPL_POLICIES = (
    "rm_ppl_text",
    "rm_ppl_tokens",
    "rm_ppl_budgets",
    "rm_ppl_policies",
)
#: This session's finished runs (run key → small plain data) and the pending button click.
PPL_RESULTS, PPL_GO = "_rm_ppl_results", "_rm_ppl_go"
PPL_TOKEN_CHOICES = (128, 256, 512, 1024, 2048)
PPL_BUDGET_CHOICES = (16, 32, 64, 128, 256, 512, 1024)


def draw(texts: list[str], default_text: str, cfg: Settings) -> None:
    """The section."""
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
        "Budgets (slots per head)",
        PPL_BUDGET_CHOICES,
        **state.mirror(PPL_BUDGETS, [64, 128, 256, 512]),
    )
    ppl_policies = c2.multiselect(
        "Policies",
        POLICY_NAMES,
        **state.mirror(PPL_POLICIES, ["h2o", "streaming-llm", "tova", "sliding-window"]),
    )
    ss[PPL_TEXT], ss[PPL_TOKENS] = ppl_text, ppl_tokens
    ss[PPL_BUDGETS], ss[PPL_POLICIES] = list(ppl_budgets), list(ppl_policies)
    ppl_ref = model_runs.text_ref(ppl_text)
    budgets = sorted(b for b in ppl_budgets if b < ppl_tokens)
    skipped = sorted(b for b in ppl_budgets if b >= ppl_tokens)
    runs: list[tuple[str | None, int | None, tuple]] = [(None, None, ())]
    for name in ppl_policies:
        for b in budgets:
            problem = cfg.refusal(name, b)
            if problem:
                st.error(problem, icon=":material/error:")
            else:
                runs.append((name, b, tuple(sorted(cfg.params_for(name).items()))))
    if skipped:
        st.caption(
            f"Budget{'s' if len(skipped) > 1 else ''} {', '.join(map(str, skipped))} "
            f"{'are' if len(skipped) > 1 else 'is'} not below the {ppl_tokens} tokens: never "
            "evicts, "
            "the same as the full cache — skipped."
        )
    ppl_results = ss.setdefault(PPL_RESULTS, {})
    run_keys = [(*ppl_ref, int(ppl_tokens), *r) for r in runs]
    missing = [k for k in run_keys if k not in ppl_results]
    if ss.pop(PPL_GO, False) and missing:  # the click: the only place this section runs the model
        for i, k in enumerate(missing, 1):
            ppl_results[k] = model_runs.perplexity_run(*k, _index=i, _total=len(missing))
        missing = []
    if missing:
        st.button(
            f"Compute perplexity: {len(missing)} run{'s' if len(missing) > 1 else ''} on "
            f"{ppl_tokens:,} tokens",
            key="rm_ppl_go",
            type="primary",
            icon=":material/play_arrow:",
            on_click=go,
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
                        model_runs.policy_label(name, cfg.params_for(name)),
                        [r["budget"] for r in mine],
                        [r["perplexity"] for r in mine],
                    )
                )
        n_tok = results[0]["n_tokens"]
        secs = sum(r["seconds"] for r in results)
        measured = (
            f"Perplexity of the model on the first {n_tok:,} tokens of {ppl_text} (the full cache "
            f"row repeats its one value). {len(results)} runs took {secs:.0f} s of compute "
            "when they "
            "were first made; they are cached."
        )
        charts.show(
            figures.perplexity_curves(
                curves=curves,
                full=full,
                title=f"Perplexity vs cache budget — {ppl_text}, {n_tok:,} tokens",
            ),
            key="rm_ppl_curves",
            describe=measured,
        )
        table = {"policy": ["full cache"] + [label for _, label, _, _ in curves]}
        shown = sorted({r["budget"] for r in results if r["budget"] is not None})
        for b in shown:
            col = [full]
            for name in ppl_policies:
                if any(r["policy"] == name for r in results):
                    hit = [
                        r["perplexity"] for r in results if r["policy"] == name and r["budget"] == b
                    ]
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
        st.caption(measured)
