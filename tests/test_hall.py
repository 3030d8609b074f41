"""The lecture hall: the protocol-level student (``benchmarks/hall.py``) against a live server, and
what the server shares between students — one garbage collection every few seconds instead of one
per run (``app/collector.py``), each replay's derived data computed once however many sessions ask
at the same moment (``app/data.py``)."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit import config

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "benchmarks"))  # last: benchmarks/app.py must not hide app/

import hall  # noqa: E402

from app import collector, data, sources, sweeps  # noqa: E402


# -- the collector -----------------------------------------------------------------------------
def test_gc_period_from_the_environment():
    assert collector.period(None) == collector.DEFAULT_SECONDS
    assert collector.period("  ") == collector.DEFAULT_SECONDS
    assert collector.period("0") == 0
    assert collector.period("2.5") == 2.5
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="H2O_GC_SECONDS"):
            collector.period(bad)


def test_collects_only_when_scripts_ran():
    c = collector.Collector()
    assert not c.collect_if_ran()
    c.script_ran()
    c.script_ran()
    assert c.collect_if_ran()
    assert c.collections == 1
    assert not c.collect_if_ran()  # nothing ran since


class _Cycle:
    def __init__(self) -> None:
        self.me = self  # garbage only a collection finds


def test_a_freezing_collector_collects_new_cycles_and_sweeps_frozen_ones():
    now = [0.0]
    c = collector.Collector(freeze=True, full_seconds=600, clock=lambda: now[0])
    try:
        old = _Cycle()
        old_ref = weakref.ref(old)
        c.script_ran()
        assert c.collect_if_ran()
        assert gc.get_freeze_count() > 0  # the survivors, old among them
        del old
        young = _Cycle()
        young_ref = weakref.ref(young)
        del young
        c.script_ran()
        c.collect_if_ran()
        assert young_ref() is None  # made since the freeze: collected at once
        assert old_ref() is not None and c.full_sweeps == 0  # frozen: waits for the sweep
        now[0] = 599.0
        c.script_ran()
        c.collect_if_ran()
        assert old_ref() is not None and c.full_sweeps == 0
        now[0] = 600.0
        c.script_ran()
        c.collect_if_ran()
        assert old_ref() is None and c.full_sweeps == 1  # the sweep walks frozen objects too
    finally:
        c.stop()
    assert gc.get_freeze_count() == 0


def test_a_collector_without_freeze_freezes_nothing():
    c = collector.Collector()
    c.script_ran()
    c.collect_if_ran()
    assert gc.get_freeze_count() == 0


def test_the_server_collector_turns_off_streamlits_collection_per_run(monkeypatch):
    before = config.get_option("runner.postScriptGC")
    try:
        monkeypatch.setenv("H2O_GC_SECONDS", "0")
        collector.collector.clear()
        config.set_option("runner.postScriptGC", True)
        collector.collector()
        assert config.get_option("runner.postScriptGC") is True  # 0: Streamlit's, per run
        monkeypatch.setenv("H2O_GC_SECONDS", "60")
        collector.collector.clear()
        running = collector.collector()
        running.stop()  # its thread would freeze this test process's objects
        assert config.get_option("runner.postScriptGC") is False
        monkeypatch.setenv("H2O_GC_SECONDS", "never")
        collector.collector.clear()
        config.set_option("runner.postScriptGC", True)
        with pytest.raises(ValueError, match="H2O_GC_SECONDS"):
            collector.collector()
        assert config.get_option("runner.postScriptGC") is True  # a refusal changes nothing
    finally:
        collector.collector.clear()
        config.set_option("runner.postScriptGC", before)


# -- computed once, whoever asks -----------------------------------------------------------------
def _at_once(fn, n: int = 8) -> list:
    out: list = [None] * n
    go = threading.Barrier(n)

    def worker(i: int) -> None:
        go.wait()
        out[i] = fn()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_memo_computes_once_for_sessions_asking_at_once():
    rep = SimpleNamespace(extra={})
    calls = []

    def slow() -> object:
        calls.append(1)
        time.sleep(0.05)
        return object()

    got = _at_once(lambda: data.memo(rep, "run_block", slow))
    assert len(calls) == 1
    assert all(g is got[0] for g in got)
    assert data.memo(rep, "other", lambda: 7) == 7  # another key: its own value


def test_a_range_is_computed_once_for_sessions_asking_at_once(monkeypatch):
    rep = SimpleNamespace(extra={})
    calls = []

    def slow(rep_, trace, a, b):
        calls.append((a, b))
        time.sleep(0.05)
        return SimpleNamespace(range=(a, b))

    monkeypatch.setattr(data.playback, "range_block", slow)
    got = _at_once(lambda: data.range_block(rep, None, 0, 384))
    assert calls == [(0, 384)]
    assert all(g is got[0] for g in got)
    assert data.range_block(rep, None, 384, 768).range == (384, 768)
    assert calls == [(0, 384), (384, 768)]


def test_region_shares_are_the_librarys_computed_once_per_trace(monkeypatch):
    import h2o
    from h2o.model import layers

    tr = h2o.builtin_trace("canonical")
    want = layers.region_shares(tr)
    calls = []
    monkeypatch.setattr(layers, "region_shares", lambda t: calls.append(t) or want)
    sweeps.RESULTS.clear()
    assert sweeps.region_shares("canonical-ident", tr) == want
    assert sweeps.region_shares("canonical-ident", tr) == want
    assert len(calls) == 1


def test_the_librarys_source_is_read_once_per_version_of_its_file(monkeypatch, tmp_path):
    import inspect

    import h2o
    from h2o.policies.base import ScoredPolicy

    assert sources.source(h2o.H2O) == inspect.getsource(h2o.H2O)
    calls = []
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda obj: calls.append(obj) or real(obj))
    # Many sessions, two classes, at once: each parsed at most once (and never two at a time).
    got = _at_once(lambda: (sources.source(h2o.H2O), sources.source(ScoredPolicy)))
    assert all(g == got[0] for g in got)
    assert calls.count(h2o.H2O) == 0 and calls.count(ScoredPolicy) <= 1
    # An edited file is read again.
    mod = tmp_path / "edited_mod.py"
    mod.write_text("class Edited:\n    x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    m = importlib.import_module("edited_mod")
    assert "x = 1" in sources.source(m.Edited)
    mod.write_text("class Edited:\n    x = 2\n")
    os_time = mod.stat().st_mtime_ns + 10**9
    import os

    os.utime(mod, ns=(os_time, os_time))
    import linecache

    linecache.checkcache(str(mod))
    assert "x = 2" in sources.source(m.Edited)


# -- the protocol-level student ----------------------------------------------------------------
@pytest.mark.browser  # a live server, like the browser tests
def test_protocol_students_see_their_own_views(server):
    out, _ = asyncio.run(hall.drive(server, 2, 0.5, 0.0, True, 0))
    assert out["failures"] == []
    assert out["done"] == 2
    assert len(out["open"]) == len(out["budget"]) == len(out["range"]) == 2
    pages = set(out["by_page"])
    assert {"Lesson", "Step through", "How it works"} <= pages
    assert len(out["page"]) == 2 * len(pages)
    assert all(b > 100_000 for b in out["bytes"]["range"])  # a new range is a payload


@pytest.mark.browser
def test_a_student_who_sees_another_view_is_reported(server, monkeypatch):
    # The check must be able to fail: the budget the server gets is not the one the student set.
    real = hall.Session.set_widget

    async def off_by_one(self, el, **value):
        if "int_value" in value:
            value["int_value"] += 1
        return await real(self, el, **value)

    monkeypatch.setattr(hall.Session, "set_widget", off_by_one)
    out, _ = asyncio.run(hall.drive(server, 1, 0.0, 0.0, False, 0))
    assert any("budget: expected budget" in f for f in out["failures"]), out["failures"]


@pytest.mark.browser  # a live server, like the browser tests
def test_a_computed_sweep_sends_no_bar_to_a_later_student(server):
    """Every policy replayed once per server: a later student's runs of All policies carry no
    progress bar and no bar update (a cache of Streamlit's replayed all 46 of them each run)."""

    async def visit() -> list[str]:
        s = hall.Session(server)
        try:
            await s.open("/")
            run = await s.page("All policies")
            rest = await s.painted(run)
            return [t for t, _ in run.elements + (rest.elements if rest else [])]
        finally:
            await s.close()

    asyncio.run(visit())  # the server computes (or has computed) the sweeps
    kinds = asyncio.run(visit())
    assert "plotly_chart" in kinds
    assert "progress" not in kinds, kinds.count("progress")


def test_computed_runs_once_and_empties_its_bar(monkeypatch):
    calls = []
    bars = []

    class Bar:
        def __init__(self):
            self.updates, self.emptied = [], False
            bars.append(self)

        def progress(self, frac, text=""):
            self.updates.append(frac)

        def empty(self):
            self.emptied = True

    monkeypatch.setattr(sweeps.st, "progress", lambda *a, **k: Bar())
    sweeps.RESULTS.clear()

    def run(at):
        calls.append(1)
        at(0)(1, 2, "x")
        at(1)(1, 2, "y")
        return {"rows": [1, 2]}

    got = sweeps.computed(("k", 1), 2, "doing", run)
    assert got == {"rows": [1, 2]} and calls == [1]
    assert len(bars) == 1 and bars[0].updates == [0.5, 1.0] and bars[0].emptied
    assert sweeps.computed(("k", 1), 2, "doing", run) is got
    assert calls == [1] and len(bars) == 1  # a lookup: no bar
    with pytest.raises(ZeroDivisionError):
        sweeps.computed(("k", 2), 1, "failing", lambda at: 1 / 0)
    assert bars[-1].emptied  # a failed run leaves no bar behind
