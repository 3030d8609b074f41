"""``h2o.model.layers``: every layer's trace from one forward, region shares, per-layer replays.

Mostly on the tiny random-weight GGUF of ``tiny_model.py`` (no model file needed); one test
(``-m model``) checks the real SmolLM2 against the shipped lighthouse trace of layer 8.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

# The tiny GGUF writer (skips this module, as that one, without gguf/tokenizers).
from tiny_model import NH, NL, token_ids, write_tiny_gguf

import h2o
from h2o import analysis
from h2o.model import SmolLM, capture_attention, layer_attention_shares
from h2o.model.layers import (
    by_layer,
    capture_layers,
    compare_layers,
    layer_shares,
    region_shares,
)

ROOT = Path(__file__).resolve().parents[1]
LINEUP = [("h2o", {"recent_window": 2}), ("streaming-llm", {"sinks": 1})]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> SmolLM:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return SmolLM.load(path)


@pytest.mark.parametrize("head", ["mean", 3])
def test_capture_layers_equals_one_capture_per_layer(model, head) -> None:
    ids = token_ids(40)
    seen = []
    traces = capture_layers(
        model, ids, head, progress=lambda d, n, _w: seen.append((d, n)), source_name="x"
    )
    assert len(traces) == NL and seen == [(i + 1, NL) for i in range(NL)]
    for layer, tr in enumerate(traces):
        dense, meta, tokens, *_ = capture_attention(model, ids, layer, head)
        assert tr.steps == 40 and tr.tokens == tuple(tokens)
        for t in range(1, 40):
            np.testing.assert_array_equal(tr.row(t), dense[t, :t])
        assert tr.meta["layer"] == layer == meta["layer"] and tr.meta["head"] == head
        assert tr.meta["n_tokens"] == 40 and tr.meta["kind"] == "captured"
        assert tr.name == f"x · L{layer} · {'mean' if head == 'mean' else 'head 3'}"


def test_capture_layers_refuses_bad_input(model) -> None:
    with pytest.raises(ValueError, match="head"):
        capture_layers(model, token_ids(10), head=99)
    with pytest.raises(ValueError, match="2 tokens"):
        capture_layers(model, token_ids(1))


def test_layer_shares_equal_the_per_head_statistic(model) -> None:
    # Shares are linear in the row: those of the head-mean trace are the mean of each head's.
    ids = token_ids(90)
    shares = layer_attention_shares(model, ids, n_sinks=2, n_recent=8)
    per_head = [layer_shares(capture_layers(model, ids, h), 2, 8) for h in range(NH)]
    for region in ("sink", "recent", "middle"):
        want = np.mean([getattr(s, region) for s in per_head], axis=0)
        np.testing.assert_allclose(getattr(shares, region), want, atol=1e-6)
    np.testing.assert_allclose(shares.sink + shares.recent + shares.middle, 1.0, atol=1e-6)
    assert shares.n_queries == 90 - 11 and shares.sink.shape == (NL,)


@pytest.mark.parametrize(("n_sinks", "n_recent"), [(0, 8), (2, 0), (0, 0)])
def test_layer_attention_shares_with_an_empty_region(model, n_sinks, n_recent) -> None:
    # n_sinks=0 once made the sink share the whole row (and the middle negative).
    ids = token_ids(60)
    shares = layer_attention_shares(model, ids, n_sinks=n_sinks, n_recent=n_recent)
    traces = capture_layers(model, ids)
    first = n_sinks + n_recent + 1
    for layer, tr in enumerate(traces):
        rows = [tr.row(t).astype(np.float64) for t in range(first, 60)]
        sink = np.mean([r[:n_sinks].sum() for r in rows])
        recent = np.mean([r[len(r) - n_recent :].sum() for r in rows])
        assert shares.sink[layer] == pytest.approx(sink, abs=1e-6)
        assert shares.recent[layer] == pytest.approx(recent, abs=1e-6)
        assert shares.middle[layer] == pytest.approx(1 - sink - recent, abs=1e-6)
    if n_sinks == 0:
        np.testing.assert_array_equal(shares.sink, 0.0)
    if n_recent == 0:
        np.testing.assert_array_equal(shares.recent, 0.0)
    assert (shares.middle > 0).all() and shares.n_queries == 60 - first


def test_layer_attention_shares_refuses_before_the_forward(model, monkeypatch) -> None:
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("forward ran"))
    with pytest.raises(ValueError, match="more than 11"):
        layer_attention_shares(model, token_ids(11), n_sinks=2, n_recent=8)
    with pytest.raises(ValueError, match=">= 0"):
        layer_attention_shares(model, token_ids(40), n_sinks=-1)


def test_region_shares_by_brute_force() -> None:
    tr = h2o.canonical_trace()
    for n_sinks, n_recent in ((4, 64), (0, 16), (1, 0)):
        rows = [tr.row(t).astype(np.float64) for t in range(n_sinks + n_recent + 1, tr.steps)]
        want = np.mean(
            [
                [
                    r[:n_sinks].sum(),
                    r[len(r) - n_recent :].sum(),
                    r[n_sinks : len(r) - n_recent].sum(),
                ]
                for r in rows
            ],
            axis=0,
        )
        np.testing.assert_allclose(region_shares(tr, n_sinks, n_recent), want, atol=1e-9)


def test_region_shares_exact_on_a_small_trace() -> None:
    tr = h2o.toy_trace()
    got = region_shares(tr, 2, 3)
    rows = [tr.row(t).astype(np.float64) for t in range(6, tr.steps)]
    want = np.mean([[r[:2].sum(), r[-3:].sum(), r[2:-3].sum()] for r in rows], axis=0)
    np.testing.assert_allclose(got, want, atol=1e-12)
    with pytest.raises(ValueError, match="more than"):
        region_shares(tr, 20, 30)


def test_compare_layers_is_bench_on_each_layer(model) -> None:
    traces = capture_layers(model, token_ids(48))
    calls = []
    rows = compare_layers(traces, LINEUP, 8, top_k=4, progress=lambda *a: calls.append(a))
    assert [r["layer"] for r in rows] == [0, 0, 1, 1, 2, 2]
    for tr in traces:
        want = analysis.bench(tr, 8, 4, lineup=LINEUP)
        got = [r for r in rows if r["layer"] == tr.meta["layer"]]
        for g, w in zip(got, want, strict=True):
            assert g["retained_mass"] == w["retained_mass"] and g["label"] == w["label"]
    assert calls[0][:2] == (0, NL) and calls[-1][:2] == (NL, NL)
    np.testing.assert_array_equal(
        by_layer(rows, "h2o"), [r["retained_mass"] for r in rows if r["policy"] == "h2o"]
    )
    assert by_layer(rows, "streaming-llm", "oracle_mass").shape == (NL,)


def test_compare_layers_refuses_before_replaying(model) -> None:
    traces = capture_layers(model, token_ids(20))
    with pytest.raises(ValueError, match="recent_window"):
        compare_layers(traces, [("h2o", {"recent_window": 8})], 8)
    with pytest.raises(ValueError, match="not below the trace length"):
        compare_layers(traces, LINEUP, 20)


@pytest.mark.model
def test_real_model_reproduces_the_shipped_layer_8_trace() -> None:
    from h2o.model import ModelNotFoundError

    try:
        real = SmolLM.load()
    except ModelNotFoundError as e:
        pytest.skip(f"SmolLM2 GGUF not available: {e}")
    shipped = h2o.load_trace(ROOT / "traces" / "lighthouse-L8-mean.npz")
    text = (ROOT / "traces" / "texts" / "lighthouse.txt").read_text("utf-8")
    # Causal: the first 192 rows of a 1024-token capture only see the first 192 tokens.
    traces = capture_layers(real, real.encode(text)[:192])
    assert len(traces) == 30 and traces[8].tokens == shipped.tokens[:192]
    for t in range(1, 192):
        np.testing.assert_allclose(traces[8].row(t), shipped.row(t), atol=2e-3)  # float16 file
    shares = layer_shares(traces)
    assert shares.sink[25] > shares.sink[8]  # layer 25 leans on the sinks, layer 8 does not
