"""All policies: the policy table on one trace, and retained mass against the cache budget."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import h2o
from app import a11y, charts, controls, figures, model_runs, painted, policy_claims, state, sweeps
from h2o import analysis

a11y.focus_ring()  # the keyboard's focus, seen on every control

st.title("All policies")
st.markdown(
    "Every policy replayed on the sidebar's trace — the table of `python -m h2o bench`. "
    "H2O and Scissorhands appear at recent_window 32 and 64 (and at the sidebar's value); "
    "StreamingLLM and the sliding window never read attention; random eviction evicts any "
    "unprotected position with equal chance. **Retained mass** is the share of each step's "
    "attention that falls on positions still in the cache, **top-k recall** the share of the "
    "step's k most-attended positions still kept, both averaged over the steps t ≥ budget; the "
    "**oracle bound** keeps the best `budget` positions of every step in hindsight (it may "
    "re-admit what it dropped, so no policy reaches it). The sentences under the chart are "
    "computed from its bars."
)

ctx = controls.sidebar()
state.publish(state.SHARED)
if ctx.budget < 2:
    fix = "raise the budget" if ctx.trace.steps > 2 else "this trace has 2 steps: pick a longer one"
    st.error(f"Every policy needs a budget of at least 2 to have room to evict: {fix}.")
    st.stop()

lineup = analysis.standard_lineup(
    ctx.budget, windows=sorted({32, 64, ctx.recent_window}), trace=ctx.trace
)
lineup += [  # policies loaded from a file (streamlit run app/main.py -- --policy …)
    (n, controls.policy_settings(n, ctx.recent_window, ctx.sinks))
    for n in h2o.policies.custom_policies()
    if controls.refusal(n, ctx.budget, ctx.recent_window, ctx.sinks) is None
]
names = list(dict.fromkeys(n for n, _ in lineup))
# The policies that take the sidebar's window (a class keeping its own, TOVA, does not).
windowed = [n for n in names if "recent_window" in controls.policy_settings(n, 0, 0)]
if ctx.recent_window >= ctx.budget and windowed:
    shown = {
        h2o.POLICIES[n].label: [p["recent_window"] for m, p in lineup if m == n] for n in windowed
    }
    st.warning(
        f"The sidebar's recent_window ({ctx.recent_window}) is not below the budget "
        f"({ctx.budget}): {policy_claims.refused_window(shown)}. Lower recent_window below "
        f"{ctx.budget} to add yours.",
        icon=":material/warning:",
    )
# The sidebar's sinks go to every policy that pins sinks, unless one of them refuses them.
pinning = [n for n in names if "sinks" in controls.policy_settings(n, 0, 0)]
sinks_problems = [
    p for n in pinning if (p := controls.refusal(n, ctx.budget, ctx.recent_window, ctx.sinks))
]
if not sinks_problems:
    lineup = [(n, {**p, "sinks": ctx.sinks} if n in pinning else p) for n, p in lineup]
else:
    st.error(" ".join(sinks_problems) + " The table uses the standard lineup's sinks instead.")

rows = sweeps.bench(ctx.ref.ident, ctx.trace, ctx.budget, ctx.top_k, sweeps.freeze_lineup(lineup))
oracle = rows[0]["oracle_mass"]

st.subheader(f"{state.md(ctx.trace.name, 60)}, budget {ctx.budget}")
fig = figures.policy_bars(
    policies=[r["policy"] for r in rows],
    labels=[r["label"] for r in rows],
    mass=[r["retained_mass"] for r in rows],
    recall=[r["top_k_recall"] for r in rows],
    oracle=oracle,
    top_k=ctx.top_k,
    title=f"Retained mass and top-{ctx.top_k} recall — {ctx.trace.name}, budget {ctx.budget}",
)
verdict = policy_claims.bench_verdict(
    [{**r, "label": state.md(r["label"], 80)} for r in rows], ctx.top_k
)
charts.show(fig, key="policy_bars", describe=verdict)


def rest() -> None:
    """Below the bars: their verdict, the table, and the same lineup against the budget."""
    st.markdown(" ".join(verdict), help="Computed from the bars above; three decimals tie.")
    table = pd.DataFrame(
        {
            "policy": [r["label"] for r in rows],
            "reads attention": [r["reads_attention"] for r in rows],
            "retained mass": [r["retained_mass"] for r in rows],
            f"top-{ctx.top_k} recall": [r["top_k_recall"] for r in rows],
            "share of the oracle": [r["retained_mass"] / oracle if oracle else None for r in rows],
        }
    )
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        key="policy_table",
        column_config={
            "retained mass": st.column_config.NumberColumn(format="%.4f"),
            f"top-{ctx.top_k} recall": st.column_config.NumberColumn(format="%.4f"),
            "share of the oracle": st.column_config.NumberColumn(format="percent"),
        },
    )
    st.caption(
        f"Means over steps t ≥ {ctx.budget}. Oracle bound: the best {ctx.budget} positions of "
        f"every step, chosen with hindsight — {oracle:.4f}."
        + "".join(f" {note}" for note in analysis.hindsight_notes(r["policy"] for r in rows))
    )

    # -- mass against budget -----------------------------------------------------------------------
    st.subheader("Against the budget")
    budgets = [b for b in (32, 64, 128, 256, 512, 1024) if b < ctx.trace.steps]
    if len(budgets) < 3:  # small traces: the same doubling, lower down
        budgets = [b for b in (4, 6, 8, 12, 16, 24, 32, 48, 64) if b < ctx.trace.steps]
    w, s = ctx.recent_window, ctx.sinks
    curve_lineup = [  # the methods this trace can run (K-norm needs its key norms)
        (name, controls.policy_settings(name, w, s))
        for name, cls in h2o.POLICIES.items()
        if cls.runs_on(ctx.trace) and not cls.selects
    ]
    # H2O also at a window as wide as the trace's recency band, beside the sidebar's (the card's
    # default 32 is narrower than the canonical trace's band of 64: its one configuration
    # mistake that matters, which should not be a student's first impression of H2O).
    band = analysis.band_width(ctx.trace)
    fitted = band is not None and band != w and "h2o" in h2o.POLICIES
    if fitted:
        at = next(i for i, (n, _) in enumerate(curve_lineup) if n == "h2o") + 1
        curve_lineup.insert(at, ("h2o", controls.policy_settings("h2o", band, s)))
    curve_rows, oracle_by_budget = sweeps.budget_curves(
        ctx.ref.ident, ctx.trace, sweeps.freeze_lineup(curve_lineup), tuple(budgets), ctx.top_k
    )
    refused = {
        b: [h2o.POLICIES[n].label for n, p in curve_lineup if controls.library_refusal(n, b, p)]
        for b in budgets
    }
    skipped = "; ".join(f"{', '.join(who)} at budget {b}" for b, who in refused.items() if who)
    own = "; ".join(  # a class that keeps its own window (TOVA) is not given the sidebar's
        f"{h2o.POLICIES[n].label} keeps its own recent_window of {controls.own_window(n)}"
        for n, _ in curve_lineup
        if h2o.POLICIES[n].own_window
    )
    settings = (
        f"recent_window {w} and sinks {s} from the sidebar, at every budget"
        + (f" ({own})" if own else "")
        + (
            f"; H2O also at recent_window {band}, the width of this trace's recency band (dashed)"
            if fitted
            else ""
        )
        + (f". Skipped where a policy refuses its settings: {skipped}." if skipped else ".")
    )
    tabs = st.tabs(["Retained mass", f"Top-{ctx.top_k} recall"])
    for tab, metric, title in (
        (tabs[0], "retained_mass", "Retained attention mass"),
        (tabs[1], "top_k_recall", f"Top-{ctx.top_k} recall"),
    ):
        curves = []
        for name, params in curve_lineup:
            mine = [
                r
                for r in curve_rows
                if r["policy"] == name and all(r.get(k) == v for k, v in params.items())
            ]
            if mine:
                curves.append(
                    (
                        name,
                        model_runs.policy_label(name, params),
                        [r["budget"] for r in mine],
                        [r[metric] for r in mine],
                    )
                )
        charts.show(
            figures.budget_curves(
                curves=curves,
                oracle=oracle_by_budget if metric == "retained_mass" else None,
                title=f"{title} vs cache budget — {ctx.trace.name}",
                ytitle=title.lower() + " (mean over t ≥ budget)",
            ),
            key=f"budget_{metric}",
            describe=settings,
            where=tab,
        )
    st.caption(settings)


painted.first_figure_first("all-policies", rest)
