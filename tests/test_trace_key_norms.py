"""A trace's optional ``key_norms`` member (traces/README.md): one finite, non-negative float a
step, stored float32 and read back bit for bit; any other is refused by name and the trace not
made. The shipped captured traces carry it."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from h2o import Trace, canonical_trace, load_trace, save_trace

ROOT = Path(__file__).resolve().parents[1]


def _trace(norms=None) -> Trace:
    base = canonical_trace()
    return Trace.from_packed("t", base.weights[:45], key_norms=norms)  # 10 steps


def test_norms_round_trip_through_a_file_bit_for_bit():
    norms = np.random.default_rng(1).gamma(2.0, 3.0, 10).astype(np.float32)
    t = _trace(norms)
    assert t.steps == 10 and t.key_norms.dtype == np.float32
    assert not t.key_norms.flags.writeable
    buf = io.BytesIO()
    save_trace(t, buf, float16=True)
    back = load_trace(io.BytesIO(buf.getvalue()))
    np.testing.assert_array_equal(back.key_norms, norms)
    assert _trace().key_norms is None


@pytest.mark.parametrize(
    ("norms", "message"),
    [
        (np.ones(9), "9 key norms for a trace of 10 steps"),
        (np.ones((10, 1)), "key_norms must be a 1-D array"),
        (np.r_[np.ones(9), -1.0], "key norm at position 9 is -1.0"),
        (np.r_[np.nan, np.ones(9)], "key norm at position 0 is nan"),
        (np.r_[np.ones(3), np.inf, np.ones(6)], "key norm at position 3 is inf"),
        (np.array(["a"] * 10), "key_norms must be a 1-D array of numbers"),
    ],
)
def test_bad_norms_are_refused_by_name(norms, message):
    with pytest.raises(ValueError, match=message):
        _trace(norms)


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (np.ones(9, np.float32), r"'key_norms' must be a 1-D float array of 10 norms"),
        (np.ones(10, np.int64), "key_norms"),
        (np.array(["x"] * 10), r"'key_norms' must be a 1-D float array"),
        (np.r_[np.ones(9), np.nan].astype(np.float32), "key norm at position 9 is nan"),
    ],
)
def test_a_file_with_bad_norms_is_refused(member, message):
    t = _trace()
    buf = io.BytesIO()
    np.savez(buf, weights=t.weights, key_norms=member)
    with pytest.raises(ValueError, match=message):
        load_trace(io.BytesIO(buf.getvalue()))


@pytest.mark.parametrize("path", sorted((ROOT / "traces").glob("*.npz")), ids=lambda p: p.name)
def test_every_shipped_trace_carries_its_key_norms(path):
    t = load_trace(path)
    assert t.key_norms is not None and t.key_norms.shape == (t.steps,)
    assert (t.key_norms > 0).all()
    assert "key_norms" in t.meta
