"""Budget allocators, checked against hand computations on tiny shapes.

The rules: totals exact; PyramidKV's formula; Ada-KV's selection (each head its own top share,
the rest by score across heads; alpha = 1 is uniform eviction); DuoAttention's head classes
(every head retrieval with enough memory is the full cache); bad parameters refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest

from h2o.alloc import (
    ALLOCATORS,
    ada_select,
    make_allocator,
    pyramid_layer_values,
    round_to_total,
    slot_bytes,
)
from h2o.bank.adaptive import AdaptiveLayer
from h2o.policies import H2O


@pytest.mark.parametrize("name", list(ALLOCATORS))
@pytest.mark.parametrize(("L", "G", "B"), [(30, 3, 128), (30, 3, 256), (7, 2, 41), (1, 1, 64)])
def test_totals_are_exact_and_bytes_follow(name, L, G, B) -> None:
    shares = np.linspace(0, 1, L * G).reshape(L, G)
    a = make_allocator(name).allocate(L, G, B, head_dim=64, shares=shares)
    assert a.budgets.shape == (L, G) and a.budgets.dtype == np.int64
    assert a.total == L * G * B
    assert a.cache_bytes == L * G * B * 256  # a key and a value of 64 float16 numbers
    assert slot_bytes(64) == 256
    assert (a.budgets >= 1).all()
    assert not a.budgets.flags.writeable


def test_uniform_is_the_same_budget_everywhere() -> None:
    a = make_allocator("uniform").allocate(3, 2, 10)
    assert a.budgets.tolist() == [[10, 10], [10, 10], [10, 10]]


def test_round_to_total_largest_remainder() -> None:
    # 2.5, 2.5, 1.0 -> floors 2, 2, 1 (5), one unit to the first of the tied remainders
    assert round_to_total(np.array([2.5, 2.5, 1.0]), 6).tolist() == [3, 2, 1]
    assert round_to_total(np.array([0.2, 0.3, 0.5]), 1).tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="sum"):
        round_to_total(np.array([1.0, 1.0]), 5)


def test_pyramid_matches_the_formula_by_hand() -> None:
    # cap 60, w 10, beta 20: lo = 50/20 = 2.5, hi = 100 - 2.5 = 97.5; L = 4:
    # layer l gets 97.5 - l * 95/3 + 10 = 107.5, 75.833.., 44.166.., 12.5 (sum 240 = 4 * 60)
    v = pyramid_layer_values(4, 60, 10, 20.0)
    assert np.allclose(v, [107.5, 75.5 + 1 / 3, 44.0 + 1 / 6, 12.5])
    a = make_allocator("pyramid", window=10).allocate(4, 3, 60)
    # largest remainder: floors 107, 75, 44, 12 (238); remainders .5, .83, .17, .5 -> 75 and
    # 107 (the first of the two .5s) get one each
    assert a.budgets[:, 0].tolist() == [108, 76, 44, 12]
    assert (a.budgets == a.budgets[:, :1]).all()  # every head of a layer alike
    assert a.total == 4 * 3 * 60


def test_pyramid_on_smollm_shape_shrinks_with_depth() -> None:
    a = make_allocator("pyramid").allocate(30, 3, 128)
    col = a.budgets[:, 0]
    assert (np.diff(col) <= 0).all()
    assert abs(col[0] - (2 * 96 - 96 / 20 + 32)) < 1  # the top: hi + w = 219.2
    assert abs(col[-1] - ((128 - 32) / 20 + 32)) < 1  # the bottom: lo + w


def test_adaptive_selection_by_hand() -> None:
    # two heads, room for 4 evictable slots, each head its own top 1 first
    s0 = np.array([0.9, 0.1, 0.8, 0.7])
    s1 = np.array([0.05, 0.02, 0.5, 0.03])
    p = np.arange(4)
    keep = ada_select([s0, s1], [p, p], room=4, guaranteed=1)
    # own: head 0 -> slot 0 (0.9), head 1 -> slot 2 (0.5); pooled: 0.8, 0.7 (both head 0)
    assert [k.tolist() for k in keep] == [[0, 2, 3], [2]]
    # without the guarantee the weak head loses everything... almost: 0.9 0.8 0.7 0.5
    keep = ada_select([s0, s1], [p, p], room=4, guaranteed=0)
    assert [k.tolist() for k in keep] == [[0, 2, 3], [2]]
    keep = ada_select([s0, s1], [p, p], room=3, guaranteed=0)
    assert [k.tolist() for k in keep] == [[0, 2, 3], []]
    # ties keep the higher position, then the lower head
    t = np.array([1.0, 1.0])
    keep = ada_select([t, t], [np.array([3, 5]), np.array([3, 5])], room=3, guaranteed=0)
    assert [k.tolist() for k in keep] == [[0, 1], [1]]
    # everything fits: nothing goes
    assert [k.tolist() for k in ada_select([s0], [p], room=9, guaranteed=0)] == [[0, 1, 2, 3]]


def _feed(heads, steps: int, seed: int) -> list[list[list[int]]]:
    """Step policies (or adaptive heads) in lock-step on random softmax rows."""
    rng = np.random.default_rng(seed)
    log = []
    for t in range(steps):
        for h in heads:
            n = len(h.kept)
            a = rng.dirichlet(np.full(n, 0.3)).astype(np.float32) if n else np.zeros(0, np.float32)
            h.on_decode_step(t, a)
            h.evict()
        log.append([h.kept.tolist() for h in heads])
    return log


def test_adaptive_with_alpha_one_is_uniform_eviction() -> None:
    B, w, G = 12, 3, 3
    uniform = [H2O(B, recent_window=w) for _ in range(G)]
    layer = AdaptiveLayer([H2O(G * B, recent_window=w) for _ in range(G)], B, alpha=1.0)
    assert _feed(uniform, 80, seed=4) == _feed(layer.heads, 80, seed=4)


def test_adaptive_keeps_the_layer_total_and_moves_slots_between_heads() -> None:
    B, w, G = 12, 3, 3
    layer = AdaptiveLayer([H2O(G * B, recent_window=w) for _ in range(G)], B, alpha=0.2)
    rng = np.random.default_rng(0)
    fills = set()
    for t in range(120):
        for g, h in enumerate(layer.heads):
            n = len(h.kept)
            conc = 0.05 if g == 0 else 5.0  # head 0 concentrated, the others flat
            a = rng.dirichlet(np.full(n, conc)).astype(np.float32) if n else np.zeros(0)
            h.on_decode_step(t, a.astype(np.float32))
            victims = h.evict()
            assert victims == sorted(victims)
        assert sum(len(h.kept) for h in layer.heads) == min(G * B, G * (t + 1))
        fills.add(tuple(len(h.kept) for h in layer.heads))
        # every head keeps its window and its own floor(0.2 * (B - w)) = 1 slot
        assert all(len(h.kept) >= w + 1 or len(h.kept) == t + 1 for h in layer.heads)
    assert any(len(set(f)) > 1 for f in fills)


def test_duo_head_classes_by_hand() -> None:
    shares = np.array([[0.9, 0.1], [0.2, 0.6]])  # heads ranked (0,0), (1,1), (1,0), (0,1)
    a = make_allocator("duo", retrieval=0.5, sinks=2, window=6).allocate(2, 2, 20, shares=shares)
    # streaming heads get 2 + 6 = 8; the two retrieval heads share 80 - 16 = 64: 32 each
    assert a.budgets.tolist() == [[32, 8], [8, 32]]
    assert a.kinds.tolist() == [["retrieval", "streaming"], ["streaming", "retrieval"]]
    a = make_allocator("duo", retrieval=0.5, sinks=2, window=6).allocate(2, 2, 21, shares=shares)
    assert a.budgets.tolist() == [[34, 8], [8, 34]] and a.total == 84
    a = make_allocator("duo", retrieval=0.25, sinks=2, window=6).allocate(2, 2, 21, shares=shares)
    assert a.budgets.tolist() == [[60, 8], [8, 8]]  # 84 - 24 to the one retrieval head
    a = make_allocator("duo", retrieval=1.0).allocate(2, 2, 500, shares=shares)
    assert (a.budgets == 500).all() and (a.kinds == "retrieval").all()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: make_allocator("nope"), "unknown allocation 'nope'"),
        (lambda: make_allocator("pyramid", window=32).allocate(30, 3, 32), "budget > window"),
        (lambda: make_allocator("pyramid", beta=0.5), "beta"),
        (lambda: make_allocator("adaptive", alpha=1.5), "alpha"),
        (lambda: make_allocator("adaptive", alpha="x"), "alpha"),
        (lambda: make_allocator("duo", retrieval=0.0), "retrieval"),
        (lambda: make_allocator("duo", window=0), "window"),
        (lambda: make_allocator("duo").allocate(2, 2, 20), "needs shares"),
        (
            lambda: make_allocator("duo").allocate(2, 2, 30, shares=np.zeros((2, 2))),
            "sinks \\+ window",
        ),
        (
            lambda: make_allocator("duo").allocate(2, 2, 60, shares=np.zeros((3, 2))),
            "shares must have shape",
        ),
        (lambda: make_allocator("uniform").allocate(2, 2, 0), "budget"),
        (lambda: make_allocator("uniform").allocate(0, 2, 8), "n_layers"),
        (lambda: make_allocator("uniform").allocate(2, 2, 8.5), "budget"),
        (lambda: ada_select([np.ones(3)], [np.arange(3)], room=-1, guaranteed=0), "room"),
    ],
)
def test_bad_parameters_are_refused_by_name(make, match) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_allocation_as_dict_is_json_ready() -> None:
    import json

    a = make_allocator("duo").allocate(2, 2, 40, shares=np.eye(2))
    d = json.loads(json.dumps(a.as_dict()))
    assert d["total_slots"] == 160 and d["cache_bytes"] == 160 * 256
    assert d["kinds"][0][0] == "retrieval" and sum(map(sum, d["budgets"])) == 160
