"""Quest stepped on a trace (h2o/policies/quest.py, h2o/replay_selection.py): each step reads
the pages a literal transcription of mit-han-lab/Quest's ``quest_attention.py`` reads
(``literal_mask`` of test_quest.py) and the model's own ``page_mask``; the replay's "kept" is
what each step reads, its mass the attention on it; it runs on a trace of one query head and is
refused by name on a trace that averages several; the comparisons of what a cache holds leave
it out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_quest import literal_mask

from h2o import analysis, load_trace, replay
from h2o.model.caches.quest_cache import page_mask
from h2o.player import playback
from h2o.policies import POLICIES
from h2o.policies.quest import PAGE, Quest, rotate
from h2o.trace import Trace
from h2o.trace_vectors import HeadVectors

ROOT = Path(__file__).resolve().parents[1]


def head_trace(T: int, seed: int, layer: int = 8) -> Trace:
    rng = np.random.default_rng(seed)
    vec = HeadVectors(
        rng.normal(size=(T, 1, 8)), rng.normal(size=(T, 1, 8)), np.ones((T, 1)), 10000.0
    )
    dense = np.tril(rng.random((T, T)) + 1e-3, -1)
    return Trace.from_dense("head", dense, {"layer": layer}, normalize=True, vectors=vec)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [48, 64, 100, 200])
def test_each_step_reads_what_the_reference_reads(seed, budget) -> None:
    trace = head_trace(90, seed)
    vec = trace.vectors
    run = replay(Quest(budget), trace)
    for t in range(1, 90):
        q = rotate(vec.queries[t, 0].astype(np.float64), t, vec.rope_base)
        keys = vec.keys[:t, 0].astype(np.float64)
        want = np.flatnonzero(literal_mask(q[None], keys[None], budget)[0])
        got, _ = run.kept_at(t)
        assert got.tolist() == want.tolist(), t
        # the model's vectorised rule: a row at t - 1 ranks the pages of keys 0 .. t - 1
        model = page_mask(q[None, None], keys[None], t - 1, budget, 1)[0, 0]
        assert np.flatnonzero(model).tolist() == want.tolist(), t
        assert run.mass[t] == pytest.approx(float(trace.row(t)[want].sum()))


def test_nothing_is_evicted_and_positions_come_back() -> None:
    run = replay(Quest(48), head_trace(200, 5))
    assert run.victim_pos.size == 0 and run.summary()["evictions"] == 0
    read = [set(run.kept_at(t)[0].tolist()) for t in range(200)]
    back = [p for t in range(2, 200) for p in read[t] - read[t - 1] if p < t - PAGE]
    assert back, "an old page read again after a step that skipped it"
    assert "nothing is evicted" in run.narrate(150) and "reads 48 of the 150" in run.narrate(
        150
    )  # 3 pages at least


def test_the_first_two_layers_read_every_key() -> None:
    run = replay(Quest(48), head_trace(60, 1, layer=1))
    assert all(run.kept_at(t)[0].tolist() == list(range(t)) for t in range(60))
    assert np.isfinite(run.kept_score[run.kept_pos >= 0]).all()  # each with its page's bound
    assert np.isfinite(run.pooled_grid(40, 40)[0]).any()  # so the overview is drawn
    assert "every one (the first two layers read them all)" in run.narrate(30)
    # a layer given to the class stands when the trace names none
    bare = Trace.from_packed("bare", head_trace(60, 1).weights, vectors=head_trace(60, 1).vectors)
    assert replay(Quest(48, layer=0), bare).kept_at(59)[0].tolist() == list(range(59))
    assert len(replay(Quest(48), bare).kept_at(59)[0]) <= 48  # 3 of its 4 pages
    np.testing.assert_allclose(run.mass, 1.0, rtol=1e-6)  # every key read: all of each row


def test_on_the_shipped_head_trace_and_refused_on_a_mean_trace() -> None:
    head = load_trace(ROOT / "traces" / "lighthouse-L8-h0.npz")
    run = replay(POLICIES["quest"](128), head)
    s = run.summary()
    assert 0 < s["retained_mass"] <= s["oracle_mass"]  # it reads 8 pages: at most 128 keys
    assert int(run.n_kept.max()) <= 128
    mean = load_trace(ROOT / "traces" / "lighthouse-L8-mean.npz")
    assert Quest.missing_from(mean) == ["vectors of one query head (this trace averages several)"]
    with pytest.raises(ValueError, match="one query head"):
        replay(Quest(128), mean)
    with pytest.raises(ValueError, match="one query head's query"):
        Quest(48).read(3)
    with pytest.raises(ValueError, match=r"at least 3 pages of 16 .48 keys.*Raise the budget"):
        Quest(47)


def test_left_out_of_what_a_cache_holds_and_sent_whole_to_the_player() -> None:
    head = load_trace(ROOT / "traces" / "lighthouse-L8-h0.npz")
    assert "quest" not in [n for n, _ in analysis.standard_lineup(128, (32,), head)]
    run = replay(Quest(128), head)
    block = playback.range_block(run, head, 300, 340)
    assert "kept_all" in block.arrays and playback.selects(run)
    assert block.arrays["kept_all"][1] == int(run.n_kept[300:340].sum())
