"""``h2o.analysis`` on banks: the canonical figures unchanged, to the last digit.

"Before" is computed here the way the analysis computed it before banks — one
``replay(make_policy(...), record=False)`` per row — and compared with the bank-backed rows by
equality, not closeness.
"""

from __future__ import annotations

import pytest

from h2o import analysis, canonical_trace, replay, stale_spike_trace


@pytest.fixture(scope="module")
def canonical():
    return canonical_trace()


def before(trace, name: str, params: dict, budget: int, top_k: int = 32) -> dict:
    """One row as the per-instance analysis built it."""
    p = analysis.make_policy(name, budget, **params)
    s = replay(p, trace, top_k=top_k, record=False).summary()
    return {
        "policy": name,
        "label": analysis.describe(name, p.params()),
        "reads_attention": p.reads_attention,
        "budget": budget,
        **{k: v for k, v in p.params().items() if k != "budget"},
        "retained_mass": s["retained_mass"],
        "top_k_recall": s["top_k_recall"],
        "oracle_mass": s["oracle_mass"],
    }


def test_bench_rows_are_the_per_instance_ones(canonical):
    lineup = analysis.standard_lineup(256)
    assert analysis.bench(canonical, 256) == [before(canonical, n, p, 256) for n, p in lineup]


@pytest.mark.parametrize("name", ["h2o", "scissorhands"])
def test_window_sweeps_are_the_per_instance_ones(canonical, name):
    windows = range(0, 193, 32)
    rows = analysis.sweep_windows(canonical, name, windows, 256)
    assert rows == [before(canonical, name, {"recent_window": w}, 256) for w in windows]


def test_budget_curves_are_the_per_instance_ones_and_skip_refusals(canonical):
    lineup = analysis.standard_lineup(256)
    rows = analysis.budget_curve(canonical, lineup, (32, 256, 5000))
    # budget 32 refuses the windows of 32 and 64; 5000 is past the trace
    want = [
        before(canonical, n, p, b)
        for b in (32, 256)
        for n, p in lineup
        if analysis.refusal(n, b, **p) is None
    ]
    assert rows == want
    assert [(r["policy"], r["budget"]) for r in rows][:2] == [("streaming-llm", 32), ("tova", 32)]


def test_progress_counts_rows_up_to_done():
    seen: list[tuple[int, int, str]] = []
    trace = stale_spike_trace()
    rows = analysis.bench(trace, 8, 4, progress=lambda *a: seen.append(a))
    assert seen[0][:2] == (0, len(rows)) and seen[-1] == (len(rows), len(rows), "done")
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen)
    assert any("×2 at budget 8" in label for _, _, label in seen)  # two H2O lanes, one bank


def test_a_policy_no_bank_holds_gets_its_own_replay(canonical, monkeypatch):
    from h2o import POLICIES
    from h2o.policies.base import ScoredPolicy

    class Decayed(ScoredPolicy):  # a rule of its own, and no bank named
        name, label, score_label = "decayed-here", "Decayed here", "decayed attention"

        @staticmethod
        def rule(score, attn, n):
            for i in range(n):
                score[i] = 0.99 * score[i] + attn[i]

    registry = {**POLICIES, Decayed.name: Decayed}  # leave the registry as it was
    for where in ("h2o.policies.registry", "h2o.analysis", "h2o.custom"):
        monkeypatch.setattr(f"{where}.POLICIES", registry)
    cls = Decayed
    lineup = [(cls.name, {"recent_window": 32}), ("h2o", {"recent_window": 32})]
    rows = analysis.bench(canonical, 256, lineup=lineup)
    assert rows == [before(canonical, n, p, 256) for n, p in lineup]
