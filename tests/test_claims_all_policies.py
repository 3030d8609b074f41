"""The All policies page's sentences against the bars they describe, at every trace and budget.

The verdict (`app.policy_claims.bench_verdict`) is checked against the rows by definition: the
leader is the largest mass, every policy below random is named as below it and no other, tied
values are said to coincide. The small traces are driven at every budget the sidebar allows; the
long ones at the budgets of the page's own budget chart.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import controls, data, policy_claims, state
from h2o import analysis

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")


def row(label: str, mass: float, recall: float = 0.5, policy: str | None = None) -> dict:
    return {
        "label": label,
        "policy": policy or label.lower(),
        "retained_mass": mass,
        "top_k_recall": recall,
        "oracle_mass": 0.9,
    }


def test_the_leader_its_share_of_the_oracle_and_a_floor_that_holds():
    rows = [row("A", 0.81, 0.9), row("B", 0.7), row("Random", 0.6, policy="random")]
    lead, floor = policy_claims.bench_verdict(rows, 32)
    assert lead == "**A** keeps the most attention mass: 0.810, 90% of the oracle bound (0.900)."
    assert floor == "Random eviction keeps 0.600, the least: every other policy beats it."


def test_close_to_the_oracle_is_not_rounded_up_to_it():
    rows = [row("A", 0.7193), row("Random", 0.468, policy="random")]
    rows[0]["oracle_mass"] = rows[1]["oracle_mass"] = 0.7219
    assert "99.6% of the oracle bound (0.722)" in policy_claims.bench_verdict(rows, 32)[0]


def test_policies_below_random_are_named_with_their_mass():
    rows = [row("A", 0.8), row("B", 0.45), row("C", 0.58), row("Random", 0.61, policy="random")]
    text = policy_claims.bench_verdict(rows, 32)[1]
    assert "B (0.450)" in text and "C (0.580)" in text and "A" not in text.split("and")[0][-3:]
    assert "less" in text and "no floor" in text


def test_ties_to_three_decimals_lead_together_and_coincide():
    rows = [
        row("A", 0.87451, 1.0),
        row("B", 0.87449, 1.0),
        row("C", 0.7681, 0.8),
        row("D", 0.76806, 0.7),
        row("Random", 0.5, policy="random"),
    ]
    text = policy_claims.bench_verdict(rows, 16)
    assert text[0].startswith("**A and B** keep the most") and "tie to three decimals" in text[0]
    assert "C and D coincide at 0.768." in text
    assert not any("recall" in t for t in text)  # the recall leaders are the mass leaders


def test_a_different_recall_leader_is_said():
    rows = [row("A", 0.8, 0.7), row("B", 0.7, 0.95), row("Random", 0.5, 0.1, policy="random")]
    assert policy_claims.bench_verdict(rows, 8)[-1] == "On top-8 recall the lead is B's: 0.950."


def check(rows: list[dict], top_k: int) -> None:
    """The verdict of ``rows`` against the rows themselves."""
    text = policy_claims.bench_verdict(rows, top_k)
    best = max(r["retained_mass"] for r in rows)
    lead = text[0]
    assert f": {best:.3f}" in lead
    for r in rows:
        named = any(
            f"{a}{r['label']}{b}" in lead for a in ("**", ", ", "and ") for b in ("**", ",", " and")
        )
        assert named == (best - r["retained_mass"] < policy_claims.TIE), (r, lead)
    rand = next(r for r in rows if r["policy"] == "random")
    below = {
        r["label"] for r in rows if r["retained_mass"] < rand["retained_mass"] - policy_claims.TIE
    }
    floor = next(t for t in text if t.startswith("Random eviction keeps"))
    assert f"keeps {rand['retained_mass']:.3f}" in floor
    for r in rows:
        if r is not rand:
            said = f"{r['label']} ({r['retained_mass']:.3f})" in floor
            assert said == (r["label"] in below), (r, floor)
    if below:
        assert "no floor" in floor
    else:
        assert "no floor" not in floor and "less" not in floor


def lineup(budget: int, window: int, sinks: int) -> list[tuple[str, dict]]:
    """The page's lineup (app/views/all_policies.py) for these sidebar values."""
    out = analysis.standard_lineup(budget, windows=sorted({32, 64, window}))
    if sinks < budget:
        out = [(n, {"sinks": sinks} if n == "streaming-llm" else p) for n, p in out]
    return out


@pytest.mark.parametrize("key", ["toy", "stale-spike"])
@pytest.mark.slow
def test_small_traces_at_every_budget(key):
    trace = data.load(key, {}).trace
    fit = controls.defaults(trace)
    for budget in range(2, trace.steps):
        for window in sorted({fit[state.WINDOW], 0, budget - 1}):
            if window >= budget:
                continue
            rows = analysis.bench(trace, budget, fit["top_k"], lineup(budget, window, 1))
            check(rows, fit["top_k"])


@pytest.mark.parametrize("key", ["canonical", *data.trace_files()])
@pytest.mark.slow
def test_long_traces_at_the_budget_charts_budgets(key):
    trace = data.load(key, {}).trace
    fit = controls.defaults(trace)
    budgets = [b for b in (32, 64, 128, 256, 512, 1024) if b < trace.steps]
    for budget in sorted({*budgets, fit[state.BUDGET]}):
        rows = analysis.bench(trace, budget, fit["top_k"], lineup(budget, 32, fit[state.SINKS]))
        check(rows, fit["top_k"])


def test_the_page_says_what_its_bars_show():
    """Canonical at 256: H2O(32) and Scissorhands(32) fall below random; at 1024 four coincide."""
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.query_params["budget"] = "256"
    at.run()
    at.switch_page("views/all_policies.py").run()
    assert not at.exception, [e.value for e in at.exception]
    page = " ".join(m.value for m in at.markdown)
    assert "floor any attention-aware" not in page
    trace = data.load("canonical", {}).trace
    rows = analysis.bench(trace, 256, 32, lineup(256, 32, 4))
    want = " ".join(
        policy_claims.bench_verdict([{**r, "label": state.md(r["label"])} for r in rows], 32)
    )
    assert want in page
    assert "no floor" in want and "H2O (recent\\_window=32) (0.578)" in want


def test_a_refused_window_names_who_refuses_and_where_each_is_shown():
    """Every policy that takes the sidebar's window and refuses it is named, each with the windows
    the table shows it at (read from the lineup, not from a list of names)."""
    same = policy_claims.refused_window({"H2O": [32, 64], "Scissorhands": [64, 32]})
    assert same == (
        "H2O and Scissorhands refuse it, so the table shows them at recent_window 32, 64 only"
    )
    one = policy_claims.refused_window({"H2O": [16]})
    assert one == "H2O refuses it, so the table shows it at recent_window 16 only"
    shown = {"H2O": [32, 64], "Scissorhands": [32, 64], "Random": [32]}
    mixed = policy_claims.refused_window(shown)
    assert mixed == (
        "H2O, Scissorhands and Random refuse it, so the table shows H2O and Scissorhands at "
        "recent_window 32, 64; Random at recent_window 32 only"
    )


@pytest.mark.slow
def test_the_page_names_every_policy_that_refuses_the_sidebars_window():
    """At recent_window 300 over budget 256 on the canonical trace, every method of the lineup
    that takes the sidebar's window refuses it, each named with the windows its class is shown at
    (read from the classes: H2O, Scissorhands and random eviction among them); TOVA keeps its own
    and is not named."""
    import inspect

    from test_app import open_app

    from h2o import canonical_trace
    from h2o.policies.registry import BUILT_IN

    shown = {
        c.label: [s["recent_window"] for s in c.bench_settings(256, [32, 64])]
        for c in BUILT_IN
        if c.runs_on(canonical_trace()) and not c.selects and not c.own_window
        if "recent_window" in inspect.signature(c.__init__).parameters
    }
    assert {"H2O", "Scissorhands", "Random"} <= set(shown) and "TOVA" not in shown
    assert shown["H2O"] == [32, 64] and shown["Random"] == [32]
    at = open_app("views/all_policies.py", budget=256, recent_window=300)
    warned = " ".join(w.value for w in at.warning)
    assert policy_claims.refused_window(shown) in warned
    assert "H2O, Scissorhands" in warned and "TOVA" not in warned
