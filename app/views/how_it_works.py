"""How it works: the card's pseudocode next to the library's own code, cost, and when to use it."""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

import h2o
from app import a11y, sources, state
from app.card import (
    CARD_CAPTION,
    CARD_NOTES,
    CARD_PSEUDOCODE,
    CARD_SUMMARY,
    WHEN,
    WHEN_NOT,
    cost_sentence,
)
from app.lesson import chapters_7_10
from app.needle import shipped
from h2o.policies.base import ScoredPolicy

a11y.focus_ring()  # the keyboard's focus, seen on every control

#: Streamlit's code blocks: 0.875rem Source Code Pro (0.6 em a character), 1rem of padding a side,
#: and a line-number gutter of 1.25 em + 1 em. The font may shrink to 0.75rem to fit a line.
CODE_REM, MIN_CODE_REM, CHAR_EM, GUTTER_EM, PAD_REM = 0.875, 0.75, 0.6, 2.25, 2.0


def code_ems(text: str, line_numbers: bool) -> float:
    """The widest line of ``text`` in ems of the code font, with the line-number gutter."""
    chars = max((len(line.expandtabs()) for line in text.splitlines()), default=0)
    return chars * CHAR_EM + (GUTTER_EM if line_numbers else 0.0)


def fit_css(key: str, ems: float) -> str:
    """CSS for the code block in ``st.container(key=key)``: never wrapped mid-line, its font
    shrinks (down to ``MIN_CODE_REM``) until the widest line fits, and past that it scrolls
    sideways. In a side-by-side column, the column is at least as wide as that line at full size,
    so the two columns stack when the page cannot hold both."""
    full = f"calc({ems * CODE_REM:.3f}rem + {PAD_REM}rem + 2px)"
    fit = f"calc((100cqw - {PAD_REM}rem - 4px) / {ems:.3f})"  # 4px: the glyphs' rounding
    return (
        f".st-key-{key} [data-testid='stCode'] {{container-type: inline-size;}}\n"
        f".st-key-{key} pre, .st-key-{key} pre code "
        f"{{font-size: clamp({MIN_CODE_REM}rem, {fit}, {CODE_REM}rem);}}\n"
        f"[data-testid='stColumn']:has(.st-key-{key}) "
        f"{{flex: 1 1 {full}; min-width: min(100%, {full});}}\n"
    )


def fitted_code(text: str, key: str, *, line_numbers: bool = False, **kwargs: Any) -> None:
    """``st.code`` of ``text`` in python, fitted by :func:`fit_css`."""
    st.html(f"<style>{fit_css(key, code_ems(text, line_numbers))}</style>")
    with st.container(key=key):
        st.code(text, language="python", line_numbers=line_numbers, wrap_lines=False, **kwargs)


st.title("How it works")
state.publish([])
st.markdown(f"> *{CARD_SUMMARY}* — the H2O policy card")

left, right = st.columns(2, gap="medium")
with left:
    st.subheader("The card's pseudocode")
    fitted_code(CARD_PSEUDOCODE, "hiw_card")
    st.markdown("\n".join(f"- *{note}*" for note in CARD_NOTES))  # one list, one element
with right:
    st.subheader("The library: `h2o.policies.h2o.H2O`")
    source = Path(inspect.getsourcefile(h2o.H2O) or "h2o/policies/h2o.py")
    st.caption(
        f"`h2o/policies/{source.name}`, read with `inspect.getsource` (again whenever the file "
        "changes)."
    )
    fitted_code(sources.source(h2o.H2O), "hiw_h2o", line_numbers=True)
    st.markdown(
        "H2O itself is one line: `np.add(score, attn, out=score)` — the card's loop over "
        "`enumerate(attn)`, all at once. The storage, the protected window and the eviction "
        "are shared with Scissorhands, TOVA and random eviction, in `ScoredPolicy`:"
    )

st.subheader("The shared mechanics: `h2o.policies.base.ScoredPolicy`")
st.caption(
    "`_step` is `on_decode_step` (accumulate, then admit with score 0), `_select` is the "
    "repeated argmin (first minimum = lower position on ties), `_evict` drops the victims and "
    "closes the gaps in kept order."
)
fitted_code(sources.source(ScoredPolicy), "hiw_scored", line_numbers=True, height=520)

st.header("Cost")
default = h2o.H2O
per_slot = default.nbytes_per_slot
score_bytes = ScoredPolicy.SCORE_DTYPE.itemsize
default_budget = inspect.signature(default).parameters["budget"].default
c1, c2, c3 = st.columns(3)
c1.metric(
    "State per slot",
    f"{per_slot} bytes",
    f"{ScoredPolicy.POS_DTYPE.itemsize} position + {score_bytes} score + "
    f"{ScoredPolicy.SCRATCH_DTYPE.itemsize} scratch",
    "off",
    delta_arrow="off",
)
c2.metric(
    f"At the default budget ({default_budget})",
    f"{per_slot * default_budget:,} bytes",
    f"≈ {per_slot * default_budget / 1000:.1f} KB",
    "off",
    delta_arrow="off",
)
c3.metric(
    "Per decode step",
    "O(kept)",
    "kept additions + one argmin",
    "off",
    delta_arrow="off",
)
st.markdown(cost_sentence(score_bytes, per_slot))
budgets = [64, 256, 1024, 4096]
st.dataframe(
    pd.DataFrame(
        {
            "budget": budgets,
            "H2O state (bytes)": [per_slot * b for b in budgets],
            "of which scores (bytes)": [score_bytes * b for b in budgets],
        }
    ),
    hide_index=True,
    key="bytes_table",
)


def measure(budgets: list[int], steps: int = 300) -> pd.DataFrame:
    """Microseconds per decode step (update + evict) in steady state, on random attention."""
    rng = np.random.default_rng(0)
    rows = []
    for b in budgets:
        for name in ("h2o", "streaming-llm"):
            policy = h2o.policies.make_policy(name, b)
            for pos in range(b + 1):  # fill the cache without timing it
                n = len(policy)
                policy.on_decode_step(pos, np.full(n, 1 / n, np.float32) if n else None)
                policy.evict()
            attn = rng.random(b).astype(np.float32)
            attn /= attn.sum()
            t0 = time.perf_counter()
            for pos in range(b + 1, b + 1 + steps):
                policy.on_decode_step(pos, attn)
                policy.evict()
            us = (time.perf_counter() - t0) / steps * 1e6
            rows.append({"budget": b, "policy": policy.label, "µs per step": us})
    return pd.DataFrame(rows).pivot(index="budget", columns="policy", values="µs per step")


if st.button("Measure the per-step cost on this machine", key="measure"):
    with st.spinner("Timing 300 steady-state steps per budget…"):
        st.session_state["_timings"] = measure([64, 256, 1024, 4096])
if "_timings" in st.session_state:
    st.dataframe(
        st.session_state["_timings"],
        key="timings",
        column_config={
            c: st.column_config.NumberColumn(format="%.1f µs")
            for c in st.session_state["_timings"].columns
        },
    )
    st.caption(
        "Both include numpy's fixed per-call overhead; H2O's time grows with the budget "
        "(the addition and the argmin scan every kept slot), StreamingLLM's does not."
    )

st.header("When to use it — and when not")
a, b = st.columns(2, gap="medium")
with a:
    st.subheader("Use it")
    st.markdown("\n".join(f"- *{item}*" for item in WHEN))
with b:
    st.subheader("Don't")
    st.markdown("\n".join(f"- *{item}*" for item in WHEN_NOT))
# The card's first "use it" point beside what the real model measured of it (chapter 9's sentence,
# from the shipped needle grid): the card's claim and the evidence on one screen.
if measured := chapters_7_10.shipped_grid_fact(shipped.grid()[0].records):
    st.markdown(f"**The first point, measured on the real model (SmolLM2-135M):** {measured}.")
# Not a caption: Streamlit draws a caption at 60 % opacity, links too, and the link's blue at 60 %
# is 3.0:1 on white (WCAG AA asks 4.5:1; tests/test_a11y_browser.py).
st.markdown(CARD_CAPTION)
