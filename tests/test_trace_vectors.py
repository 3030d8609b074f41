"""A trace's head vectors (queries, keys, value norms, RoPE base): checked on construction,
through a file and back, and refused from hostile files before their data is read."""

from __future__ import annotations

import io

import numpy as np
import pytest

from h2o.trace import Trace, save_trace
from h2o.trace_npz import load_trace
from h2o.trace_vectors import MAX_WIDTH, HeadVectors

T = 12


def vectors(**change) -> dict:
    rng = np.random.default_rng(0)
    parts = {
        "queries": rng.normal(size=(T, 4, 8)),
        "keys": rng.normal(size=(T, 2, 8)),
        "value_norms": rng.gamma(2, 1, (T, 2)),
        "rope_base": 10000.0,
    }
    return {**parts, **change}


def trace_with(vec: HeadVectors | None) -> Trace:
    dense = np.tril(np.random.default_rng(1).random((T, T)) + 0.01, -1)
    return Trace.from_dense("t", dense, normalize=True, vectors=vec)


def npz(**members) -> io.BytesIO:
    """A trace file with ``members`` beside valid weights."""
    buf = io.BytesIO()
    t = trace_with(None)
    np.savez(buf, weights=t.weights, **members)
    buf.seek(0)
    return buf


def test_round_trip_keeps_them_within_float16_and_the_norms_exactly() -> None:
    vec = HeadVectors(**vectors())
    buf = io.BytesIO()
    save_trace(trace_with(vec), buf)
    buf.seek(0)
    back = load_trace(buf).vectors
    assert back is not None and back.group_size == 2 and back.rope_base == 10000.0
    np.testing.assert_allclose(back.queries, vec.queries, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(back.keys, vec.keys, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(back.value_norms, vec.value_norms)
    assert not back.queries.flags.writeable


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"queries": np.zeros((T, 4))}, "3-D"),
        ({"queries": np.zeros((T, 4, 7))}, "even size"),
        ({"queries": np.zeros((T, 65, 64))}, "at most"),
        ({"queries": np.zeros((T, 1, 512)), "keys": np.zeros((T, 1, 512))}, "heads of 512"),
        ({"keys": np.zeros((T, 3, 8))}, "KV heads dividing"),
        ({"keys": np.zeros((T - 1, 2, 8))}, "positions"),
        ({"value_norms": np.zeros((T, 1))}, "one a position and KV head"),
        ({"value_norms": -np.ones((T, 2))}, "non-negative"),
        ({"queries": np.full((T, 4, 8), np.nan)}, "non-finite"),
        ({"rope_base": 1.0}, "above 1"),
        ({"rope_base": True}, "number"),
        ({"rope_base": float("inf")}, "finite"),
    ],
)
def test_bad_vectors_are_refused_by_name(change, message) -> None:
    with pytest.raises(ValueError, match=message):
        HeadVectors(**vectors(**change))


def test_a_trace_refuses_vectors_of_another_length() -> None:
    rng = np.random.default_rng(0)
    short = HeadVectors(
        rng.normal(size=(T - 2, 1, 4)), rng.normal(size=(T - 2, 1, 4)), np.ones((T - 2, 1)), 1e4
    )
    with pytest.raises(ValueError, match="10 positions for a trace of 12 steps"):
        trace_with(short)


def test_files_missing_a_member_or_out_of_shape_are_refused() -> None:
    full = {k: np.asarray(v) for k, v in vectors().items()}
    partial = {k: v for k, v in full.items() if k != "keys"}
    with pytest.raises(ValueError, match="'keys' missing"):
        load_trace(npz(**partial))
    with pytest.raises(ValueError, match="positions for a trace"):
        load_trace(npz(**{**full, "queries": full["queries"][:-1]}))
    with pytest.raises(ValueError, match="float array"):
        load_trace(npz(**{**full, "rope_base": np.array("10000")}))
    with pytest.raises(ValueError, match=f"at most {MAX_WIDTH}"):
        load_trace(npz(**{**full, "keys": np.zeros((T, 2, MAX_WIDTH), np.float16)}))
    assert load_trace(npz(**full)).vectors.positions == T


def test_saved_in_float32_when_asked_and_counted_in_what_a_trace_holds() -> None:
    from app.data import trace_bytes

    vec = HeadVectors(**vectors())
    buf = io.BytesIO()
    save_trace(trace_with(vec), buf, float16=False)
    buf.seek(0)
    back = load_trace(buf)
    np.testing.assert_array_equal(back.vectors.queries, vec.queries)  # float32: bit for bit
    assert trace_bytes(back) == back.weights.nbytes + vec.nbytes
