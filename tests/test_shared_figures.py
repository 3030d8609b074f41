"""Figures are built once per server: the same contents give the same figure, whose dict (what
Streamlit serialises) equals a freshly built figure's; different contents never share one."""

from __future__ import annotations

import copy
import threading

import numpy as np
import plotly.graph_objects as go

from app.figures import base


def _contents(seed: int) -> tuple[list[dict], dict]:
    z = np.random.default_rng(seed).random((4, 9))
    return [{"type": "heatmap", "z": z, "name": "h"}], {"title": {"text": f"t{seed}"}}


def test_same_contents_same_figure_and_the_dict_a_fresh_build_gives():
    data, layout = _contents(1)
    a = base.make_figure(copy.deepcopy(data), copy.deepcopy(layout))
    b = base.make_figure(copy.deepcopy(data), copy.deepcopy(layout))
    assert a is b and isinstance(a, base.SharedFigure)
    fresh_layout = copy.deepcopy(layout)
    fresh_layout["margin"] = a.layout.margin.to_plotly_json()
    fresh = go.Figure({"data": copy.deepcopy(data), "layout": fresh_layout}, _validate=False)
    assert a.to_dict() == fresh.to_dict()
    assert a.to_dict() is a.to_dict()  # computed once


def test_different_contents_different_figures():
    d1, l1 = _contents(2)
    d2, l2 = copy.deepcopy(d1), copy.deepcopy(l1)
    d2[0]["z"] = d2[0]["z"].copy()
    d2[0]["z"][0, 0] += 1e-12  # one value apart
    assert base.make_figure(d1, l1) is not base.make_figure(d2, l2)
    d3, l3 = _contents(3)
    l3b = copy.deepcopy(l3)
    l3b["title"]["text"] += " "
    assert base.make_figure(d3, l3) is not base.make_figure(copy.deepcopy(d3), l3b)


def test_contents_that_cannot_be_pickled_are_built_each_time():
    data = [{"type": "scatter", "x": [1, 2], "y": [3, 4], "meta": lambda: None}]
    a = base.make_figure(data, {"title": {"text": "x"}})
    assert type(a) is go.Figure


def test_the_cache_is_bounded_by_bytes():
    cache = base._FIGURES
    assert cache.max_bytes == base.FIGURE_CACHE_MB * 2**20
    for seed in range(100, 130):
        base.make_figure(*_contents(seed))
    assert cache.total <= cache.max_bytes


def test_a_builder_by_arguments_runs_once_per_arguments(monkeypatch):
    from app.figures import base

    monkeypatch.setattr(base, "_FIGURES", base.ByteCache(2**20, lambda item: 3 * item[1]))
    calls = []

    @base.by_arguments
    def build(z, *, title, tag=None):
        calls.append(title)
        return base.make_figure([{"type": "heatmap", "z": z}], {"title": {"text": title}})

    z = np.arange(6.0).reshape(2, 3)
    a = build(z, title="one")
    assert build(z.copy(), title="one") is a and calls == ["one"]  # equal contents: shared
    b = build(z + 1, title="one")
    c = build(z, title="two")
    assert b is not a and c is not a and calls == ["one", "one", "two"]
    assert a.to_dict()["data"][0]["z"] is not None
    lock = threading.Lock()  # an argument that does not pickle: a fresh figure each time
    build(z, title="three", tag=lock)
    build(z, title="three", tag=lock)
    assert calls[-2:] == ["three", "three"]


def test_a_figure_s_steps_are_an_argument_not_a_change_to_the_shared_figure():
    from app.figures.lesson import attention_received

    received = np.linspace(0.0, 1.0, 40)
    kw = dict(received=received, position=5, evicted_at=12, policy="h2o", title="lost")
    assert list(attention_received(**kw).layout.xaxis.range) == [5, 19]  # kept 7, shown 7 after
    wide = attention_received(**kw, x_range=(5, 39))
    assert list(wide.layout.xaxis.range) == [5, 39]
    assert attention_received(**kw) is not wide  # two views, two figures


def test_no_page_changes_a_figure_it_was_handed():
    """A figure from app/figures may be every session's (one per server): pages pass what they
    want to its builder instead of updating it."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    change = re.compile(r"\.(update_\w+|add_(trace|shape|annotation|vline|hline|vrect|hrect))\(")
    found = [
        f"{p.relative_to(root)}:{i}"
        for folder in ("app", "notebooks")
        for p in sorted((root / folder).rglob("*.py"))
        if "figures" not in p.parts
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if change.search(line)
    ]
    assert found == []
