"""A run's label (``python -m h2o generate``): written by ``run_label``, read back by
``label_policy`` — the app learns a run's method from the library, never by splitting the label
itself — and every label of the shipped answer files reads back as the method that ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import h2o
from h2o.model.generate import label_policy, run_label
from h2o.model.quality import FULL_CACHE

RESULTS = Path(__file__).resolve().parents[1] / "traces" / "results"


@pytest.mark.parametrize(
    ("name", "budget", "allocation", "label"),
    [
        ("h2o", 256, None, "h2o@256"),
        ("streaming-llm", 512, None, "streaming-llm@512"),
        ("h2o", 128, "pyramid", "h2o/pyramid@128"),
        ("snapkv", 128, "duo", "snapkv/duo@128"),
    ],
)
def test_a_label_reads_back_as_its_method(name, budget, allocation, label) -> None:
    assert run_label(name, budget, allocation) == label
    assert label_policy(label) == name


@pytest.mark.parametrize("label", [FULL_CACHE, "", "h2o", "h2o@", "@256", "h2o@256 ", "h2o@-1"])
def test_what_run_label_does_not_write_names_no_method(label) -> None:
    assert label_policy(label) is None


@pytest.mark.parametrize("name", sorted(p.name for p in RESULTS.glob("*-generate-*.json")))
def test_every_shipped_run_names_a_method_the_library_runs(name) -> None:
    records = json.loads((RESULTS / name).read_text())
    for r in records:
        method = label_policy(r["label"])
        assert r["label"] == FULL_CACHE or method in {*h2o.POLICIES, "snapkv"}, r["label"]
