"""The recentWindow explorer's headline against the sweep it describes, at every budget where it
shows (the canonical trace: the only shipped trace with a recency band)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import data, policy_claims, sweeps
from h2o import analysis

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
BUDGETS = (65, 96, 128, 192, 256, 384, 512, 1024, 2048)


def rows_at(w: int, mass: float, recall: float = 0.9) -> dict:
    return {"recent_window": w, "retained_mass": mass, "top_k_recall": recall}


def test_a_gain_past_the_band_is_never_called_saturation():
    rows = [rows_at(32, 0.5), rows_at(64, 0.7), rows_at(96, 0.75)]
    text = policy_claims.window_headline(rows, 64, 0.6, 0.8, "SL", 32)
    assert "still rises, to 0.7500 at 96" in text and "stops" not in text


def test_a_fall_past_the_band_is_said_with_its_cause():
    rows = [rows_at(32, 0.5), rows_at(64, 0.8), rows_at(72, 0.8), rows_at(120, 0.7)]
    text = policy_claims.window_headline(rows, 64, 0.6, 0.95, "SL", 32)
    assert "down to 0.7000 at 120" in text and "above SL on mass only" in text


@pytest.fixture(scope="module")
def canonical():
    return data.load("canonical", {}).trace


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_headline_at_every_budget(canonical, budget):
    band = analysis.band_width(canonical)
    windows = sweeps.sweep_windows_for(budget, band)
    rows = analysis.sweep_windows(canonical, "h2o", windows, budget, 32)
    sl = analysis.bench(canonical, budget, 32, [("streaming-llm", {"sinks": 4})])[0]
    text = policy_claims.window_headline(
        rows, band, sl["retained_mass"], sl["top_k_recall"], "SL", 32
    )
    by_w = {r["recent_window"]: r for r in rows}
    assert ("less than SL" in text) == (by_w[32]["retained_mass"] < sl["retained_mass"])
    beats = (
        by_w[band]["retained_mass"] > sl["retained_mass"],
        by_w[band]["top_k_recall"] > sl["top_k_recall"],
    )
    assert ("on both metrics" in text and "above" in text.split("(the band)")[1]) == all(beats)
    after = [r["retained_mass"] for r in rows if r["recent_window"] > band]
    if not after:  # the sweep ends at the band: nothing is said past it
        assert f"Past {band}" not in text and f"From {band}" not in text
        return
    gains = max(after) - by_w[band]["retained_mass"] >= policy_claims.TIE
    assert ("the gain stops at the band width" in text) == (not gains)
    if budget == 128:  # windows up to 120 eat the budget: the mass falls past the band
        assert "wider ones keep less" in text


def test_the_page_shows_the_computed_headline():
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.query_params["budget"] = "128"
    at.run()
    at.switch_page("views/window_explorer.py").run()
    assert not at.exception, [e.value for e in at.exception]
    page = " ".join(m.value for m in at.markdown)
    assert "wider ones keep less" in page and "saturates at the band width." not in page
