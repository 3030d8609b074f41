"""The step view's exported HTML file, without a browser (``app.player.stepper``).

It opens at the view's step, or at the first eviction when the view is at step 0 (where nothing
has happened yet), in a range of steps that holds that step: the loaded range when it does (its
bytes reused, not encoded again), else one centred on the step. The browser's side of the same
download is ``tests/test_presenter_browser.py``.
"""

from __future__ import annotations

import base64
import re

import pytest

import h2o
from app.player import stepper
from h2o import explain
from h2o.player import playback


def view(trace: h2o.Trace, budget: int, window: int) -> stepper.Export:
    """A step view of two replays, as the Step through page builds it, at its loaded range for
    step 0."""
    panels = [
        playback.Panel(
            "A · H2O", "#1f77b4", h2o.replay(h2o.H2O(budget, recent_window=window), trace)
        ),
        playback.Panel("B · StreamingLLM", "#ff7f0e", h2o.replay(h2o.StreamingLLM(budget), trace)),
    ]
    panels_n = max(int(s.replay.n_kept.max()) for s in panels if s.replay is not None)
    length = playback.range_length(panels_n, trace.steps)

    def encode(rng: tuple[int, int]) -> bytes:
        return playback.encode(
            view="test",
            trace_id=trace.name,
            trace=trace,
            panels=panels,
            rng=rng,
            range_blocks=[playback.range_block(s.replay, trace, *rng) for s in panels],
            run_blocks=[playback.run_block(s.replay) for s in panels],
            start={"step": 0},
        )

    rng = playback.range_around(0, trace.steps, length)
    return stepper.Export(encode(rng), encode, rng, length, "Step through", trace, panels)


def opened(html: bytes) -> dict:
    """The header of the payload inlined in an exported file (its ``start`` is where it opens)."""
    (data,) = re.findall(rb'atob\("([A-Za-z0-9+/=]+)"\)', html)
    header, _ = playback.decode(base64.b64decode(data))
    return header


SETTINGS = {"colour": "linear", "rows": "all", "width": 64, "speed": 30, "reveal": True}


@pytest.fixture(scope="module")
def toy() -> h2o.Trace:
    return h2o.toy_trace()  # the Step through page's trace=toy


@pytest.mark.parametrize("step", [1, 10, 39])
def test_the_export_opens_at_the_views_step(toy, step):
    ex = view(toy, 8, 2)
    ex = stepper.Export(
        ex.encode(playback.range_around(step, toy.steps, ex.length)),
        ex.encode,
        playback.range_around(step, toy.steps, ex.length),
        ex.length,
        ex.title,
        ex.trace,
        ex.panels,
    )
    name, build = stepper.export_file(ex, step, SETTINGS)
    header = opened(build())
    assert header["start"] == {"step": step, **SETTINGS}
    a, b = header["range"]
    assert a <= step < b
    assert name == f"h2o-{toy.name}-steps-{a}-{b - 1}.html"


def test_at_step_0_the_export_opens_at_the_first_eviction(toy):
    ex = view(toy, 8, 2)
    _, build = stepper.export_file(ex, 0, SETTINGS)
    header = opened(build())
    # The card: a cache of B panels holds positions 0..B-1; position B's arrival is the first
    # step over budget. Both policies of the view evict first there.
    assert header["start"]["step"] == 8
    assert [explain.first_eviction(s.replay) for s in ex.panels] == [8, 8]


def test_a_first_eviction_beyond_the_loaded_range_brings_its_own_range():
    trace = h2o.canonical_trace()
    ex = view(trace, 1024, 32)
    assert not ex.rng[0] <= 1024 < ex.rng[1]  # the loaded range at step 0 stops short of it
    name, build = stepper.export_file(ex, 0, SETTINGS)
    header = opened(build())
    a, b = header["range"]
    assert header["start"]["step"] == 1024 and a <= 1024 < b
    assert name == f"h2o-{trace.name}-steps-{a}-{b - 1}.html"
    # The file's range is the player's own data for those steps, not the step-0 range's.
    _, arrays = playback.decode(base64.b64decode(re.findall(rb'atob\("([^"]+)"\)', build())[0]))
    rep = ex.panels[0].replay
    assert rep is not None
    assert list(arrays["0"]["n_kept"]) == list(rep.n_kept[a:b])


def loaded_at(
    ex: stepper.Export, rng: tuple[int, int], calls: list | None = None
) -> stepper.Export:
    """``ex`` with ``rng`` loaded (its bytes the payload); ``calls`` records every later encode."""

    def encode(r: tuple[int, int]) -> bytes:
        if calls is not None:
            calls.append(r)
        return ex.encode(r)

    return stepper.Export(ex.encode(rng), encode, rng, ex.length, ex.title, ex.trace, ex.panels)


@pytest.fixture(scope="module")
def canonical_view() -> stepper.Export:
    return view(h2o.canonical_trace(), 64, 16)


def test_a_step_inside_the_loaded_range_reuses_it_at_both_ends(canonical_view):
    """A loaded range that is not the one centred on the step (which a fresh export would
    pick) still serves every step from its first to its last, and is not encoded again."""
    L = canonical_view.length
    rng = (L, 2 * L)
    for t in (L, 2 * L - 1):
        assert playback.range_around(t, canonical_view.trace.steps, L) != rng
        calls: list = []
        ex = loaded_at(canonical_view, rng, calls)
        name, build = stepper.export_file(ex, t, SETTINGS)
        header = opened(build())
        assert tuple(header["range"]) == rng and header["start"]["step"] == t
        assert name == f"h2o-{ex.trace.name}-steps-{L}-{2 * L - 1}.html"
        assert calls == []  # the loaded bytes, as they are


def test_the_step_just_past_the_loaded_range_gets_its_own(canonical_view):
    L = canonical_view.length
    steps = canonical_view.trace.steps
    calls: list = []
    ex = loaded_at(canonical_view, (L, 2 * L), calls)
    t = 2 * L
    name, build = stepper.export_file(ex, t, SETTINGS)
    header = opened(build())
    a, b = header["range"]
    assert (a, b) == playback.range_around(t, steps, L) and a <= t < b
    assert calls == [(a, b)]
    assert name == f"h2o-{ex.trace.name}-steps-{a}-{b - 1}.html"


def test_export_step_at_0_without_any_eviction_is_0(toy):
    """No panel evicts (a budget above the trace's length), or no panel has a replay: the file
    opens at step 0."""
    big = [playback.Panel("A · H2O", "#1f77b4", h2o.replay(h2o.H2O(toy.steps + 1), toy))]
    assert len(big[0].replay.victim_step) == 0
    assert stepper.export_step(0, big) == 0
    assert stepper.export_step(0, [playback.Panel("A", "#1f77b4", None)]) == 0
    assert stepper.export_step(0, []) == 0
    assert stepper.export_step(1, big) == 1


def test_export_step_at_0_is_the_earliest_first_eviction_of_the_panels(toy):
    panels = view(toy, 8, 2).panels
    late = view(toy, 12, 2).panels[:1]
    firsts = [explain.first_eviction(s.replay) for s in (*late, *panels)]
    assert stepper.export_step(0, [*late, *panels]) == min(firsts) == 8
    assert stepper.export_step(0, late) == 12
