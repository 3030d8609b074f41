"""The ``Trace`` class and ``save_trace``, method by method, against brute force.

``test_trace.py`` checks the format and the loader; this file pins what a replay reads from a
trace — ``top_k`` (int32, -1 padded), its inverse ``top_k_rows``, ``oracle_mass`` and
``recent_mass`` (float64 sums), ``dense``, ``token`` — each against a direct computation on a
random trace, and the constructors' arguments: defaults (no normalising, the caller's array
copied and left writeable), messages, and that name, meta and tokens are passed through. The
row a bad weight is reported in (``row_of``) is checked at every packed index of 300 steps.
"""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from h2o import Trace, save_trace
from h2o.trace import check_values, offset, row_of


def random_rows(T: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = [np.zeros(0)]
    for t in range(1, T):
        r = rng.random(t) ** 4  # uneven, like attention
        rows.append(r / r.sum())
    return rows


@pytest.fixture(scope="module")
def trace() -> Trace:
    return Trace.from_rows("r", random_rows(120, seed=3), normalize=True)


# -- where a bad weight is -------------------------------------------------------------------------
def test_row_of_every_packed_index():
    T = 300
    expected = np.repeat(np.arange(T), np.arange(T))  # row t holds t weights
    assert [row_of(i) for i in range(offset(T))] == expected.tolist()


@pytest.mark.parametrize("t", [8191, 8192, 100_000])
def test_row_of_far_rows(t):
    assert row_of(offset(t)) == t and row_of(offset(t) - 1) == t - 1
    assert row_of(offset(t) + t - 1) == t


@pytest.mark.parametrize(("index", "row"), [(0, 1), (1, 2), (2, 2), (3, 3), (9, 4), (10, 5)])
def test_a_bad_weight_is_reported_in_its_row(index, row):
    a = np.full(offset(6), 0.1, dtype=np.float32)
    a[index] = np.nan
    with pytest.raises(ValueError, match=f"non-finite weight \\(NaN or inf\\) in row {row}$"):
        check_values(a, row_of)
    a[index] = -0.5
    with pytest.raises(ValueError, match=f"negative weight in row {row}$"):
        check_values(a, row_of)


# -- construction ----------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", [[0.0, 1.0, 0.0], np.ones((1, 1), dtype=np.float32)])
def test_weights_must_be_a_1d_array(weights):
    with pytest.raises(ValueError) as e:
        Trace("x", weights)
    assert str(e.value) == "weights must be a 1-D array of packed rows"


def test_weights_must_be_float32():
    with pytest.raises(ValueError) as e:
        Trace("x", np.array([1.0]))
    assert str(e.value) == "weights must be float32, got float64"


def test_tokens_must_match_the_steps():
    with pytest.raises(ValueError) as e:
        Trace("x", np.array([1.0], dtype=np.float32), tokens=("a", "b", "c"))
    assert str(e.value) == "3 tokens for a trace of 2 steps"


@pytest.mark.parametrize("shape", [(2, 3), (4,), (2, 2, 2)])
def test_from_dense_needs_a_square_matrix(shape):
    with pytest.raises(ValueError) as e:
        Trace.from_dense("x", np.ones(shape))
    assert str(e.value) == f"attention must be a square (T, T) matrix, got shape {shape}"


def test_from_dense_passes_everything_through_and_does_not_normalise_by_default():
    dense = np.zeros((3, 3))
    dense[1, 0], dense[2, :2] = 1.0, [0.25, 0.75]
    tr = Trace.from_dense("d", dense, {"k": 1}, ["a", "b", "c"])
    assert (tr.name, tr.meta, tr.tokens) == ("d", {"k": 1}, ("a", "b", "c"))
    assert tr.row(2).tolist() == [0.25, 0.75]
    with pytest.raises(ValueError, match=re.escape("row 2 of the trace sums to 2.000000, not 1")):
        Trace.from_dense("d", dense * [[1], [1], [2]])
    assert Trace.from_dense("d", dense * [[1], [1], [2]], normalize=True).row(2).tolist() == [
        0.25,
        0.75,
    ]


def test_from_dense_of_float64_normalises_at_float64():
    # packed at the precision given: the same trace as from its float64 rows
    rows = [r * 3.1 for r in random_rows(60, seed=5)]
    dense = np.zeros((60, 60))
    for t, r in enumerate(rows):
        dense[t, :t] = r
    a = Trace.from_dense("a", dense, normalize=True).weights
    b = Trace.from_rows("b", rows, normalize=True).weights
    assert a.dtype == np.float32 and a.tobytes() == b.tobytes()


def test_from_rows_passes_tokens_and_checks_each_row():
    tr = Trace.from_rows("r", [[], [1.0], [0.5, 0.5]], {"m": 2}, ("x", "y", "z"))
    assert tr.tokens == ("x", "y", "z") and tr.meta == {"m": 2} and tr.token(1) == "y"
    with pytest.raises(ValueError) as e:
        Trace.from_rows("r", [[], [1.0], [0.2, 0.3, 0.5]])
    assert str(e.value) == "row 2 must have length 2, got shape (3,)"
    with pytest.raises(ValueError) as e:
        Trace.from_rows("r", [])
    assert str(e.value) == "a trace needs at least 2 steps (one row of attention), got 1"


def test_token_without_tokens_is_none():
    tr = Trace.from_rows("r", [[], [1.0]])
    assert tr.token(0) is None and tr.token(1) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_from_packed_copies_the_callers_array_by_default(dtype):
    packed = np.array([2.0, 1.0, 3.0], dtype=dtype)  # rows [2], [1, 3]: normalised in place
    tr = Trace.from_packed("p", packed, normalize=True)
    assert packed.tolist() == [2.0, 1.0, 3.0] and packed.flags.writeable
    assert tr.weights.tolist() == [1.0, 0.25, 0.75] and not tr.weights.flags.writeable


def test_from_packed_does_not_normalise_by_default():
    with pytest.raises(ValueError, match=re.escape("row 1 of the trace sums to 2.000000, not 1")):
        Trace.from_packed("p", np.array([2.0, 0.5, 0.5]))


def test_normalising_names_the_first_empty_row_and_rescales_small_ones():
    with pytest.raises(ValueError) as e:
        Trace.from_packed("p", np.array([0.5, 0.2, 0.3, 0.0, 0.0, 0.0]), normalize=True)
    assert str(e.value) == "row 3 sums to 0.0, cannot normalise it"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division by row 0's empty sum
        tr = Trace.from_packed("p", np.array([0.5, 0.1, 0.3]), normalize=True)
    assert tr.row(1).tolist() == [1.0] and tr.row(2).tolist() == [0.25, 0.75]


def test_row_out_of_range_names_the_step():
    tr = Trace.from_rows("r", [[], [1.0]])
    with pytest.raises(IndexError) as e:
        tr.row(2)
    assert str(e.value) == "step 2 out of range for a trace of 2 steps"


# -- what replays read -----------------------------------------------------------------------------
@pytest.mark.parametrize(("start", "stop"), [(0, None), (5, 9), (3, 3), (0, 1), (7, None)])
def test_dense_holds_the_rows_zero_padded(trace, start, stop):
    out = trace.dense(start, stop)
    end = trace.steps if stop is None else stop
    assert out.dtype == np.float32 and out.shape == (end - start, max(end - 1, 0))
    for i, t in enumerate(range(start, end)):
        assert out[i, :t].tolist() == trace.row(t).tolist() and not out[i, t:].any()


@pytest.mark.parametrize("k", [0, 1, 2, 7, 119, 500])
def test_top_k_against_a_full_sort(trace, k):
    out = trace.top_k(k)
    kk = max(1, min(k, trace.steps - 1))
    assert out.dtype == np.int32 and out.shape == (trace.steps, kk)
    assert not out.flags.writeable
    assert (out[0] == -1).all()
    for t in range(1, trace.steps):
        r = trace.row(t)
        best = sorted(np.lexsort((np.arange(t), -r))[:kk].tolist())  # lowest position on ties
        assert out[t, : len(best)].tolist() == best and (out[t, len(best) :] == -1).all()


@pytest.mark.parametrize("k", [1, 4, 30])
def test_top_k_rows_inverts_top_k(trace, k):
    indptr, rows = trace.top_k_rows(k)
    topk = trace.top_k(k)
    assert indptr.dtype == np.int64 and indptr.shape == (trace.steps + 1,) and indptr[0] == 0
    assert rows.dtype == np.int32  # step numbers, as top_k's positions
    assert not indptr.flags.writeable and not rows.flags.writeable
    for p in range(trace.steps):
        want = [t for t in range(trace.steps) if p in topk[t].tolist()]
        assert rows[indptr[p] : indptr[p + 1]].tolist() == want
    assert trace.top_k_rows(k)[1] is rows  # computed once


@pytest.mark.parametrize("budget", [1, 2, 5, 64, 200])
def test_oracle_mass_against_a_full_sort(trace, budget):
    out = trace.oracle_mass(budget)
    assert out.dtype == np.float64 and out[0] == 1.0 and not out.flags.writeable
    for t in range(1, trace.steps):
        r = np.sort(trace.row(t))[::-1][:budget].astype(np.float64)
        assert abs(out[t] - r.sum()) <= 1e-12
    assert trace.oracle_mass(budget) is out


def test_oracle_mass_of_a_row_not_quite_one():
    tr = Trace.from_rows("r", [[], [0.999], [0.5, 0.5]])  # within the tolerance, not rescaled
    assert tr.oracle_mass(4)[1] == np.float32(0.999)
    assert tr.oracle_mass(1).tolist() == [1.0, float(np.float32(0.999)), 0.5]


def test_masses_sum_in_float64():
    # a long row: float32 accumulation would differ from float64 in the last bits
    rng = np.random.default_rng(1)
    big = [np.zeros(0)] + [rng.random(t) for t in range(1, 2200)]
    tr = Trace.from_rows("big", big, normalize=True)
    t = tr.steps - 1
    r = tr.row(t)
    assert tr.oracle_mass(t + 5)[t] == r.sum(dtype=np.float64)
    assert tr.oracle_mass(t)[t] == r.sum(dtype=np.float64)  # every position: the row's sum
    assert tr.oracle_mass(t - 3)[t] == np.partition(r, 3)[3:].sum(dtype=np.float64)
    assert tr.recent_mass(10**6)[t] == r.sum(dtype=np.float64)


@pytest.mark.parametrize("width", [0, 1, 3, 50, 1000])
def test_recent_mass_against_a_direct_sum(trace, width):
    out = trace.recent_mass(width)
    assert out.shape == (trace.steps,) and out.dtype == np.float64
    for t in range(trace.steps):
        assert out[t] == trace.row(t)[max(0, t - width) :].sum(dtype=np.float64)
    assert out[0] == 0.0 and (trace.recent_mass(0) == 0).all()


# -- writing ---------------------------------------------------------------------------------------
def test_save_trace_writes_float32_sorted_meta_and_tokens(tmp_path):
    tr = Trace.from_rows("s", [[], [1.0], [0.5, 0.5]], {"z": 1, "a": 2}, ("p", "q", "r"))
    save_trace(tr, tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz") as f:
        assert f["weights"].dtype == np.float32
        assert str(f["meta"]) == json.dumps({"a": 2, "z": 1})  # sorted: the same file each time
        assert f["tokens"].tolist() == ["p", "q", "r"] and f["tokens"].dtype.kind == "U"
        assert str(f["format"]) == "h2o-trace/1" and str(f["name"]) == "s"
    save_trace(tr, tmp_path / "h.npz", float16=True)
    with np.load(tmp_path / "h.npz") as f:
        assert f["weights"].dtype == np.float16 and "tokens" in f
