"""The trace container and its .npz format (traces/README.md)."""

from __future__ import annotations

import contextlib
import io
import json
import tracemalloc

import numpy as np
import pytest

from h2o import Trace, load_trace, save_trace, toy_trace


def small_rows(T=6, seed=0):
    rng = np.random.default_rng(seed)
    return [np.zeros(0)] + [rng.dirichlet(np.ones(t)) for t in range(1, T)]


def test_rows_have_length_t_and_sum_to_one():
    tr = Trace.from_rows("x", small_rows(), meta={"a": 1})
    assert tr.steps == 6
    for t in range(6):
        r = tr.row(t)
        assert r.shape == (t,) and r.dtype == np.float32
        if t:
            assert abs(r.sum(dtype=np.float64) - 1) < 1e-6
    with pytest.raises(IndexError):
        tr.row(6)


def test_rows_are_read_only_views():
    tr = toy_trace()
    with pytest.raises(ValueError):
        tr.row(5)[0] = 1.0


def test_from_dense_ignores_the_upper_triangle():
    rows = small_rows(5)
    dense = np.full((5, 5), 7.0)
    for t, r in enumerate(rows):
        dense[t, :t] = r
    tr = Trace.from_dense("d", dense)
    for t in range(5):
        np.testing.assert_allclose(tr.row(t), rows[t], rtol=1e-6)
    np.testing.assert_allclose(tr.dense()[:, :4], np.tril(dense, -1)[:, :4], rtol=1e-6)


def test_top_k_breaks_ties_towards_the_lower_position():
    rows = [np.zeros(0), np.ones(1), np.array([0.5, 0.5]), np.array([0.25, 0.25, 0.5])]
    tr = Trace.from_rows("ties", rows)
    top = tr.top_k(2)
    assert top[3].tolist() == [0, 2]
    assert top[1].tolist() == [0, -1]


def test_oracle_mass_is_the_best_budget_positions():
    rows = [np.zeros(0), np.ones(1), np.array([0.3, 0.7]), np.array([0.2, 0.5, 0.3])]
    tr = Trace.from_rows("o", rows)
    np.testing.assert_allclose(tr.oracle_mass(1), [1.0, 1.0, 0.7, 0.5], rtol=1e-6)


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([np.zeros(0), np.array([np.nan])], "NaN"),
        ([np.zeros(0), np.array([1.0]), np.array([1.5, -0.5])], "negative"),
        ([np.zeros(0), np.array([0.5])], "sums to"),
        ([np.zeros(0), np.array([0.5, 0.5])], "length"),
    ],
)
def test_malformed_rows_are_refused(rows, match):
    with pytest.raises(ValueError, match=match):
        Trace.from_rows("bad", rows)


def test_normalize_rescales_rows_and_refuses_empty_ones():
    tr = Trace.from_rows("n", [np.zeros(0), np.array([3.0]), np.array([1.0, 3.0])], normalize=True)
    np.testing.assert_allclose(tr.row(2), [0.25, 0.75])
    with pytest.raises(ValueError, match="normalise"):
        Trace.from_rows("n", [np.zeros(0), np.array([0.0])], normalize=True)


@pytest.mark.parametrize("float16", [False, True])
def test_save_and_load_round_trip(tmp_path, float16):
    tr = Trace.from_rows(
        "rt",
        small_rows(40),
        meta={"layer": 8, "head": "mean"},
        tokens=[f"tok{i}" for i in range(40)],
    )
    path = tmp_path / "rt.npz"
    save_trace(tr, path, float16=float16)
    back = load_trace(path)
    assert back.name == "rt" and back.meta == {"layer": 8, "head": "mean"}
    assert back.tokens == tr.tokens
    if float16:
        np.testing.assert_allclose(back.weights, tr.weights, atol=2e-3)
    else:
        np.testing.assert_array_equal(back.weights, tr.weights)
    for t in range(1, 40):
        assert abs(back.row(t).sum(dtype=np.float64) - 1) < 1e-5


def test_load_accepts_a_dense_attention_matrix_and_file_objects():
    rows = small_rows(8)
    dense = np.zeros((8, 8), np.float32)
    for t, r in enumerate(rows):
        dense[t, :t] = r
    buf = io.BytesIO()
    np.savez(buf, attention=dense)
    buf.seek(0)
    tr = load_trace(buf, name="upload")
    assert tr.steps == 8 and tr.name == "upload"


def _npz(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    return buf


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (lambda: io.BytesIO(b"not a zip at all"), r"npz|trace"),
        (lambda: _npz(other=np.ones(3)), "expected 'weights' or 'attention'"),
        (lambda: _npz(weights=np.ones(4)), "T\\(T-1\\)/2"),
        (lambda: _npz(weights=np.array([1.0, np.nan, 0.5])), "NaN"),
        (lambda: _npz(weights=np.array([1.0, 1.5, -0.5])), "negative"),
        (lambda: _npz(weights=np.array([1.0, 0.2, 0.2])), "sums to"),
        (lambda: _npz(attention=np.ones((3, 4))), "square"),
        (lambda: _npz(weights=np.ones(3), format=np.array("other/9")), "unsupported"),
        (lambda: _npz(weights=np.ones(1), meta=np.array("{not json")), "malformed"),
        (lambda: _npz(weights=np.ones(1), meta=np.array("[1, 2]")), "JSON object"),
        (lambda: _npz(weights=np.ones(1), tokens=np.array(["a"])), "tokens"),
    ],
)
def test_bad_files_are_refused_with_a_clear_message(payload, match):
    with pytest.raises(ValueError, match=match):
        load_trace(payload())


def test_pickled_object_arrays_are_refused():
    buf = io.BytesIO()
    np.savez(buf, weights=np.array([{"evil": 1}], dtype=object))
    buf.seek(0)
    with pytest.raises(ValueError, match=r"pickle|not a trace"):
        load_trace(buf)


def test_oversized_traces_are_refused():
    buf = _npz(weights=np.full(10 * 9 // 2, 0.0))
    with pytest.raises(ValueError, match="at most 8"):
        load_trace(buf, max_steps=8)


def test_file_format_is_plain_npz(tmp_path):
    tr = toy_trace()
    save_trace(tr, tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz", allow_pickle=False) as z:
        assert str(z["format"]) == "h2o-trace/1"
        assert json.loads(str(z["meta"]))["generator"] == "h2o.synthetic.toy_trace"
        assert z["weights"].shape == (tr.steps * (tr.steps - 1) // 2,)


def test_non_zip_bytes_are_called_not_an_npz_and_never_suggest_unpickling():
    with pytest.raises(ValueError, match=r"not an \.npz file") as e:
        load_trace(io.BytesIO(b"\x80\x04garbage that numpy would call pickled"))
    assert "allow_pickle=True" not in str(e.value)


def test_a_single_npy_array_is_refused():
    buf = io.BytesIO()
    np.save(buf, np.ones(3))
    buf.seek(0)
    with pytest.raises(ValueError, match=r"single \.npy array"):
        load_trace(buf)


def test_a_missing_path_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        load_trace(tmp_path / "nope.npz")


def test_loading_leaves_a_file_object_position_usable():
    buf = io.BytesIO()
    save_trace(toy_trace(), buf)
    buf.seek(0)
    assert load_trace(buf).steps == 40


def test_tokens_must_be_a_list_of_strings():
    with pytest.raises(ValueError, match="1-D array of strings"):
        load_trace(_npz(weights=np.ones(1), tokens=np.array("ab")))


def test_a_trace_needs_two_steps():
    with pytest.raises(ValueError, match="at least 2 steps"):
        Trace.from_rows("one", [np.zeros(0)])
    with pytest.raises(ValueError, match="at least 2 steps"):
        load_trace(_npz(weights=np.zeros(0)))


def test_the_size_limit_is_checked_before_decompressing():
    # 2000 x 2000 zeros: 16 MB of float32 that compress to a few kB.
    buf = io.BytesIO()
    np.savez_compressed(buf, attention=np.zeros((2000, 2000), np.float32))
    buf.seek(0)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="at most 100"):
            load_trace(buf, max_steps=100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000  # the 16 MB array was never materialised


def test_loading_a_trace_costs_a_few_times_its_size_not_more():
    big = Trace.from_rows("big", [np.zeros(0)] + [np.full(t, 1 / t) for t in range(1, 1500)])
    buf = io.BytesIO()
    save_trace(big, buf)
    buf.seek(0)
    tracemalloc.start()
    try:
        back = load_trace(buf)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert back.steps == 1500
    assert peak < 4.5 * big.weights.nbytes


def test_damaged_archives_are_value_errors():
    buf = io.BytesIO()
    save_trace(toy_trace(), buf)
    good = buf.getvalue()
    rng = np.random.default_rng(0)
    for i in range(300):
        bad = bytearray(good)
        if i % 3 == 0:
            bad = bad[: int(rng.integers(8, len(good)))]  # truncated
        else:
            for j in rng.integers(8, len(good), size=int(rng.integers(1, 20))):
                bad[j] = int(rng.integers(256))  # corrupted bytes
        with contextlib.suppress(ValueError):  # the only exception a damaged file may raise
            load_trace(io.BytesIO(bytes(bad)))


def test_suggestions_fit_the_trace():
    tr = Trace.from_rows(
        "s",
        [np.zeros(0)] + [np.full(t, 1 / t) for t in range(1, 10)],
        meta={"suggested_budget": 1000, "suggested_top_k": 10**12, "sinks": "four"},
    )
    from h2o.analysis import suggested

    sug = suggested(tr)
    assert sug["budget"] == 9 and sug["top_k"] == 9 and sug["sinks"] == 4
    assert tr.top_k(10**12).shape == (10, 9)
