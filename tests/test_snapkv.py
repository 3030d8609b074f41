"""SnapKV: the scoring rule by hand, and the decode-time kept set."""

from __future__ import annotations

import numpy as np
import pytest

from h2o.model.caches.fixed_keep import FixedKeep
from h2o.policies.snapkv import pool1d, snapkv_keep, snapkv_scores


def test_pool1d_by_hand() -> None:
    x = np.array([0, 0, 1.0, 0, 0, 0, 0, 2])
    assert pool1d(x, 5).tolist() == [1, 1, 1, 1, 1, 2, 2, 2]
    assert pool1d(x, 3).tolist() == [0, 1, 1, 1, 0, 0, 2, 2]
    assert np.allclose(pool1d(x, 3, "avg"), [0, 1 / 3, 1 / 3, 1 / 3, 0, 0, 2 / 3, 2 / 3])
    assert pool1d(x, 1).tolist() == x.tolist()


def test_snapkv_on_a_tiny_hand_case() -> None:
    # 12 prompt positions, window 3 (positions 9, 10, 11 are the question), kernel 3.
    # The window's queries attend to position 4 (the "answer") and a little to 0 (a sink).
    attn = np.zeros(12)
    attn[0], attn[4], attn[7], attn[10] = 0.5, 1.2, 0.1, 0.9
    s = snapkv_scores(attn, window=3, kernel=3)
    # pooled over positions 0..8: max of each neighbourhood of 3
    assert s.tolist() == [0.5, 0.5, 0, 1.2, 1.2, 1.2, 0.1, 0.1, 0.1]
    # budget 6 = 3 selected + the window: 4 (1.2) and its neighbours 3, 5 (1.2, ties: higher
    # positions first: 5, 4, 3), then the window 9..11
    assert snapkv_keep(s, 6, 12, window=3).tolist() == [3, 4, 5, 9, 10, 11]
    # budget 7: the next best is 0.5 at 0 and 1 -> the higher position, 1
    assert snapkv_keep(s, 7, 12, window=3).tolist() == [1, 3, 4, 5, 9, 10, 11]
    # a budget that holds the prompt keeps everything
    assert snapkv_keep(s, 12, 12, window=3).tolist() == list(range(12))


def test_snapkv_refusals_name_the_problem() -> None:
    with pytest.raises(ValueError, match="budget > window"):
        snapkv_keep(np.zeros(8), 3, 11, window=3)
    with pytest.raises(ValueError, match="length"):
        snapkv_keep(np.zeros(5), 5, 11, window=3)
    with pytest.raises(ValueError, match="odd"):
        pool1d(np.zeros(4), 4)
    with pytest.raises(ValueError, match="mode"):
        pool1d(np.zeros(4), 3, "median")
    with pytest.raises(ValueError, match="window"):
        snapkv_scores(np.zeros(4), window=0)


def test_fixed_keep_admits_and_never_evicts() -> None:
    k = FixedKeep(np.array([0, 4, 9]), last_pos=9)
    assert k.last_pos == 9 and not k.reads_attention
    k.on_decode_step(10, None)
    assert k.kept.tolist() == [0, 4, 9, 10] and k.evict() == []
    with pytest.raises(ValueError, match="increase"):
        k.on_decode_step(10, None)
    with pytest.raises(ValueError, match="increasing"):
        FixedKeep(np.array([3, 1]), last_pos=5)
    with pytest.raises(ValueError, match=r"0\.\.5"):
        FixedKeep(np.array([1, 6]), last_pos=5)
