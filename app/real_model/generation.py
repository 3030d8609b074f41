"""Section 4: does it still know? A fact stated once in a story, asked at its end, answered with
the full cache and under each policy."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import model_runs, state
from app.real_model.claims import answer_key, esc, is_right
from app.real_model.common import GEN_TEXT, POLICY_NAMES, Settings, go, ss

GEN_BUDGET, GEN_POLICIES = "rm_gen_budget", "rm_gen_policies"
#: This session's finished runs (run key → small plain data) and the pending button click.
GEN_RESULTS, GEN_GO = "_rm_gen_results", "_rm_gen_go"
GEN_BUDGETS = (256, 512, 768, 1024)
GEN_MAX_NEW = 8
GEN_STOPS = (".", ",", ";", "!", "?", "\n")


def answer_place(story_end: str, gen_ref: tuple, expected: str) -> dict[str, int] | None:
    """Where ``expected`` first appears in the story: its token position, how often it is
    stated, and the prompt's length in tokens; None if the story never says it."""
    where = story_end.lower().find(expected.lower()) if expected else -1
    if where < 0:
        return None
    return {
        "pos": len(model_runs.model().encode(story_end[:where])),
        "count": story_end.lower().count(expected.lower()),
        "n_ids": len(model_runs.text_ids(*gen_ref)),
    }


def draw(texts: list[str], cfg: Settings) -> None:
    """The section."""
    st.subheader("4 · Does it still know? A fact stated once, asked at the end", divider="gray")
    if GEN_TEXT not in texts:
        st.info(f"The generation demo needs traces/texts/{GEN_TEXT}.txt.")
        return
    gen_ref = model_runs.text_ref(GEN_TEXT)
    story_end = (model_runs.TEXT_DIR / f"{GEN_TEXT}.txt").read_text(encoding="utf-8").rstrip()
    st.markdown(
        f"The whole of `{GEN_TEXT}.txt` (a short story, about 2,100 tokens) is the prompt. "
        "Early on "
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
        problem = cfg.refusal(name, gen_budget)
        if problem:
            st.error(problem, icon=":material/error:")
        else:
            gen_runs.append((name, gen_budget, tuple(sorted(cfg.params_for(name).items()))))

    gen_results = ss.setdefault(GEN_RESULTS, {})
    gen_keys = [(*gen_ref, *r, GEN_MAX_NEW, GEN_STOPS) for r in gen_runs]
    missing = [k for k in gen_keys if k not in gen_results]
    if ss.pop(GEN_GO, False) and missing:  # the click: the only place this section runs the model
        for i, k in enumerate(missing, 1):
            gen_results[k] = model_runs.generation_run(*k, _index=i, _total=len(missing))
        full = gen_results[gen_keys[0]]
        # Where the answer sits in the prompt (tokenizing needs the model): worked out now, kept.
        gen_results[("where", gen_keys[0])] = answer_place(
            story_end, gen_ref, answer_key(full["text"])
        )
        missing = []
    if missing:
        st.button(
            f"Ask the model: {len(missing)} run{'s' if len(missing) > 1 else ''}",
            key="rm_gen_go",
            type="primary",
            icon=":material/play_arrow:",
            on_click=go,
            args=(GEN_GO,),
            help=f"Greedy decoding of up to {GEN_MAX_NEW} tokens (to the first punctuation) with "
            "the full cache, then with each policy. Cached.",
        )

    gens = [gen_results[k] for k in gen_keys if k in gen_results]
    if gens and gens[0]["policy"] is None:
        expected = answer_key(gens[0]["text"])
        rows = []
        for g in gens:
            ok = is_right(expected, g["text"])
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
                f"With the full cache the model answers **“{esc(expected)}”** — stated {times} in "
                f"the story, {'first ' if count > 1 else ''}around token {pos:,} of {n_ids:,}: "
                f"{n_ids - pos:,} tokens before the question"
                + (
                    f", more than the largest budget here ({max(GEN_BUDGETS):,})"
                    if n_ids - pos > max(GEN_BUDGETS)
                    else ""
                )
                + ". A policy that evicted it from a head's cache has taken it away from that head."
            )
        else:
            st.markdown(
                f"With the full cache the model answers **“{esc(expected or gens[0]['text'])}”**."
            )
        for r in rows[1:]:
            verdict = "✓ the same answer" if r["_ok"] else "✗ a different answer"
            (st.success if r["_ok"] else st.error)(
                f"{esc(r['cache'])}: “{esc(r['answer'])}” — {verdict}",
                icon=":material/check_circle:" if r["_ok"] else ":material/cancel:",
            )
        st.dataframe(
            pd.DataFrame(rows).drop(columns=["_ok"]),
            hide_index=True,
            width="stretch",
            key="rm_gen_table",
            column_config={"seconds": st.column_config.NumberColumn(format="%.1f")},
        )
