"""The budget allocators' documented parameters, messages and results, rule by rule.

``test_alloc.py`` checks each allocator against a hand computation; this file pins what those
leave open: the defaults the README states (PyramidKV's beta = 20 and window 32, DuoAttention's
4 sinks + 32 and top half, Ada-KV's alpha = 0.2) and the figures it quotes from them at
SmolLM2-135M's shape (30 layers x 3 KV heads), each parameter at its smallest accepted value and
one below it with the message naming it, largest-remainder rounding's edges, and what an
allocation reports about itself (its dict, its layer totals, its repr).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from h2o.alloc import (
    Adaptive,
    Allocation,
    Allocator,
    Duo,
    Pyramid,
    Uniform,
    ada_select,
    make_allocator,
    round_to_total,
)
from h2o.alloc.adaptive import adapts, guaranteed_slots
from h2o.policies import POLICIES, make_policy

L, G = 30, 3  # SmolLM2-135M: 30 layers, 3 KV heads


# -- the defaults, and the README's figures from them ------------------------------------------
def test_defaults_are_the_documented_ones():
    assert Pyramid().params() == {"window": 32, "beta": 20.0}
    assert Duo().params() == {"retrieval": 0.5, "sinks": 4, "window": 32}
    assert Adaptive().params() == {"alpha": 0.2}
    assert Uniform().params() == {}


@pytest.mark.parametrize(("budget", "retrieval_budget"), [(128, 220), (256, 476)])
def test_duo_at_smollm_shape_gives_the_readmes_budgets(budget, retrieval_budget):
    shares = np.arange(L * G, dtype=np.float64).reshape(L, G)
    a = make_allocator("duo").allocate(L, G, budget, shares=shares)
    retrieval = a.kinds == "retrieval"
    assert retrieval.sum() == L * G // 2  # the top half
    assert (a.budgets[retrieval] == retrieval_budget).all()
    assert (a.budgets[~retrieval] == 4 + 32).all()
    assert a.params == {
        "retrieval": 0.5,
        "sinks": 4,
        "window": 32,
        "n_retrieval": L * G // 2,
        "streaming_budget": 36,
    }


def test_pyramid_at_smollm_shape_gives_the_readmes_ends():
    a = make_allocator("pyramid").allocate(L, G, 128)
    assert a.budgets[0, 0] == 219 and a.budgets[-1, 0] == 37  # 219.2 and 36.8, rounded
    assert a.params == {"window": 32, "beta": 20.0}


def test_adaptive_allocation_starts_uniform_and_is_dynamic():
    a = make_allocator("adaptive", alpha=0.5).allocate(2, 3, 7)
    assert a.budgets.tolist() == [[7, 7, 7], [7, 7, 7]] and a.budgets.dtype == np.int64
    assert a.alpha == 0.5 and a.dynamic and a.params == {"alpha": 0.5}
    assert not make_allocator("uniform").allocate(2, 3, 7).dynamic


# -- parameters at their edges -------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: Pyramid(window=0),
        lambda: Pyramid(beta=1),
        lambda: Pyramid(beta=1.5),
        lambda: Duo(sinks=0),
        lambda: Duo(window=1),
        lambda: Duo(retrieval=1.0),
        lambda: Adaptive(alpha=0.0),
        lambda: Adaptive(alpha=1),
    ],
)
def test_smallest_accepted_parameters(make):
    make()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Pyramid(window=-1), "window must be >= 0, got -1"),
        (lambda: Pyramid(window=2.0), "window must be an integer, got 2.0"),
        (lambda: Pyramid(beta=0.99), "beta must be a number >= 1, got 0.99"),
        (lambda: Pyramid(beta=True), "beta must be a number >= 1, got True"),
        (lambda: Pyramid(beta="20"), "beta must be a number >= 1, got '20'"),
        (lambda: Duo(sinks=-1), "sinks must be >= 0, got -1"),
        (lambda: Duo(window=0), "window must be >= 1, got 0"),
        (lambda: Duo(retrieval=0), "retrieval must be in (0, 1], got 0"),
        (lambda: Duo(retrieval=1.01), "retrieval must be in (0, 1], got 1.01"),
        (lambda: Adaptive(alpha=-0.01), "alpha must be in [0, 1], got -0.01"),
        (lambda: Adaptive(alpha=True), "alpha must be a number, got True"),
    ],
)
def test_refused_parameters_are_named(make, message):
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value) == message


def test_duo_accepts_a_budget_of_exactly_sinks_plus_window():
    shares = np.array([[0.3, 0.1], [0.2, 0.4]])
    a = Duo(sinks=2, window=6).allocate(2, 2, 8, shares=shares)
    assert a.budgets.tolist() == [[8, 8], [8, 8]]  # the retrieval heads share what is left: 8
    with pytest.raises(ValueError) as e:
        Duo(sinks=2, window=6).allocate(2, 2, 7, shares=shares)
    assert str(e.value) == (
        "duo needs budget >= sinks + window (2 + 6 = 8): at budget 7 the streaming heads alone "
        "would exceed the total"
    )


def test_duo_without_shares_says_where_they_come_from():
    with pytest.raises(ValueError) as e:
        Duo().allocate(2, 2, 64)
    assert str(e.value) == (
        "duo needs shares: each head's attention share outside sinks + window on a calibration "
        "text (h2o.model.allocation.head_shares)"
    )


def test_pyramid_refuses_a_budget_at_its_window_by_name():
    with pytest.raises(ValueError) as e:
        Pyramid(window=8).allocate(4, 2, 8)
    assert str(e.value) == (
        "pyramid needs budget > window: budget 8, window 8 leaves no room to shrink with depth"
    )
    assert Pyramid(window=8).allocate(4, 2, 9).total == 4 * 2 * 9


# -- largest-remainder rounding -------------------------------------------------------------------
def test_round_to_total_gives_integers():
    out = round_to_total(np.array([2.5, 2.5, 1.0]), 6)
    assert out.dtype == np.int64 and out.tolist() == [3, 2, 1]


def test_round_to_total_ranks_the_fractional_parts_not_the_values():
    # 2.1 and 0.9: the unit goes to the larger fraction (0.9), not to the larger value
    assert round_to_total(np.array([2.1, 0.9]), 3).tolist() == [2, 1]
    assert round_to_total(np.array([5.4, 1.6, 3.0]), 10).tolist() == [5, 2, 3]


def test_round_to_total_keeps_zero_and_whole_shares():
    assert round_to_total(np.array([0.0, 2.0, 1.0]), 3).tolist() == [0, 2, 1]
    assert round_to_total(np.zeros(3), 0).tolist() == [0, 0, 0]


@pytest.mark.parametrize("values", [[-1.0, 2.0], [np.nan, 1.0], [np.inf, 1.0], [1.0, -0.5, 0.5]])
def test_round_to_total_refuses_negative_or_non_finite_shares(values):
    with pytest.raises(ValueError) as e:
        round_to_total(np.array(values), 1)
    assert str(e.value) == "shares must be finite and non-negative"


@pytest.mark.parametrize(("values", "total"), [([1.0, 1.0], 1), ([1.0, 1.0], 5), ([3.0], 2)])
def test_round_to_total_refuses_shares_that_do_not_sum_to_the_total(values, total):
    with pytest.raises(ValueError, match=f"not to the total {total}"):
        round_to_total(np.array(values), total)


# -- what an allocation reports ------------------------------------------------------------------
def test_as_dict_of_an_adaptive_allocation():
    a = make_allocator("adaptive", alpha=0.25).allocate(2, 2, 5, head_dim=32)
    assert a.as_dict() == {
        "allocation": "adaptive",
        "budget_per_head": 5,
        "total_slots": 20,
        "cache_bytes": 20 * 2 * 32 * 2,
        "budgets": [[5, 5], [5, 5]],
        "params": {"alpha": 0.25},
        "alpha": 0.25,
    }


def test_as_dict_with_kinds_and_notes():
    a = Allocation(
        "duo",
        3,
        np.array([[4, 2]]),
        head_dim=8,
        kinds=np.array([["retrieval", "streaming"]]),
        notes=("one note", "two"),
        params={"x": 1},
    )
    d = a.as_dict()
    assert d == {
        "allocation": "duo",
        "budget_per_head": 3,
        "total_slots": 6,
        "cache_bytes": 6 * 2 * 8 * 2,
        "budgets": [[4, 2]],
        "params": {"x": 1},
        "kinds": [["retrieval", "streaming"]],
        "notes": ["one note", "two"],
    }
    assert json.loads(json.dumps(d)) == d
    assert "alpha" not in make_allocator("uniform").allocate(1, 1, 4).as_dict()


def test_repr_names_the_class_and_its_parameters():
    assert repr(Pyramid()) == "Pyramid(window=32, beta=20.0)"
    assert repr(Duo(retrieval=0.25, sinks=1, window=8)) == "Duo(retrieval=0.25, sinks=1, window=8)"
    assert repr(Adaptive(alpha=1)) == "Adaptive(alpha=1.0)"
    assert repr(Uniform()) == "Uniform()"


def test_shares_of_any_numeric_dtype_rank_the_same():
    # unsigned counts negate by wrapping around: the ranking must read them as numbers
    counts = np.array([[3, 1], [0, 2]], dtype=np.uint8)
    a = Duo(retrieval=0.5, sinks=1, window=1).allocate(2, 2, 10, shares=counts)
    b = Duo(retrieval=0.5, sinks=1, window=1).allocate(2, 2, 10, shares=counts.astype(float))
    assert (
        a.kinds.tolist()
        == b.kinds.tolist()
        == [["retrieval", "streaming"], ["streaming", "retrieval"]]
    )
    assert a.budgets.tolist() == b.budgets.tolist() == [[18, 2], [2, 18]]


# -- the allocation's own checks ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0, 2, 8), {}, "n_layers must be >= 1, got 0"),
        ((2, 0, 8), {}, "n_kv_heads must be >= 1, got 0"),
        ((2, 2.0, 8), {}, "n_kv_heads must be an integer, got 2.0"),
        ((2, 2, 0), {}, "budget must be >= 1, got 0"),
        ((2, 2, 8), {"head_dim": 0}, "head_dim must be >= 1, got 0"),
        ((2, 2, 8), {"head_dim": True}, "head_dim must be an integer, got True"),
        ((1, 2, 8), {"shares": np.array([[np.nan, 1.0]])}, "shares must be finite"),
        ((1, 2, 8), {"shares": np.ones(2)}, "shares must have shape (1, 2), got (2,)"),
    ],
)
def test_allocate_refuses_by_name(args, kwargs, message):
    with pytest.raises(ValueError) as e:
        Uniform().allocate(*args, **kwargs)
    assert str(e.value) == message


def test_allocate_accepts_its_smallest_values():
    a = Uniform().allocate(1, 1, 1, head_dim=1)
    assert a.budgets.tolist() == [[1]] and a.cache_bytes == 4  # a key and a value of one float16


class _Broken(Allocator):
    name = "broken"

    def __init__(self, grid: list[list[int]]) -> None:
        self.grid = grid

    def _budgets(self, L, G, B, shares):
        return np.array(self.grid), {}


@pytest.mark.parametrize("grid", [[[4, 3]], [[8, 0]], [[9, -1]], [[5, 4]]])
def test_allocate_holds_a_subclass_to_the_total_and_one_slot_a_head(grid):
    with pytest.raises(AssertionError, match="budgets do not sum to 8"):
        _Broken(grid).allocate(1, 2, 4)
    assert _Broken([[5, 3]]).allocate(1, 2, 4).total == 8


# -- Ada-KV's selection -------------------------------------------------------------------------
def test_guaranteed_slots():
    assert guaranteed_slots(0.2, 12, 3) == 1  # floor(1.8)
    assert guaranteed_slots(0.2, 7, 3) == 0  # floor(0.8): nothing of its own
    assert guaranteed_slots(0.0, 100, 3) == 0
    assert guaranteed_slots(1.0, 12, 3) == 9
    assert guaranteed_slots(0.3, 13, 3) == 3  # 0.3 * 10 = 2.9999999999999996: exact at 3


def test_ada_select_with_no_room_keeps_nothing():
    s, p = np.array([0.5, 0.2]), np.arange(2)
    assert [k.tolist() for k in ada_select([s, s], [p, p], room=0, guaranteed=0)] == [[], []]


@pytest.mark.parametrize(("room", "guaranteed"), [(-1, 0), (3, -1), (-1, -1)])
def test_ada_select_refuses_negative_room_or_share(room, guaranteed):
    with pytest.raises(ValueError) as e:
        ada_select([np.ones(3)], [np.arange(3)], room=room, guaranteed=guaranteed)
    assert str(e.value) == "room and guaranteed must be >= 0"


def test_ada_select_refuses_own_shares_beyond_the_room():
    with pytest.raises(ValueError) as e:
        ada_select([np.ones(3), np.ones(3)], [np.arange(3)] * 2, room=3, guaranteed=2)
    assert str(e.value) == "the heads' own shares (4) exceed the room (3)"


def test_ada_select_refuses_scores_and_positions_of_different_heads():
    with pytest.raises(ValueError):
        ada_select([np.ones(3), np.ones(3)], [np.arange(3)], room=2, guaranteed=0)


@pytest.mark.parametrize("name", list(POLICIES))
def test_adaptive_adapts_exactly_the_policies_with_comparable_scores(name):
    kw = {} if name == "tova" else {"recent_window": 4}
    # scores to compare: H2O's, Scissorhands', TOVA's; not StreamingLLM, the window or random
    assert adapts(make_policy(name, 64, **kw)) == (name in ("h2o", "scissorhands", "tova"))


def test_allocate_accepts_a_head_of_one_slot():
    assert _Broken([[7, 1]]).allocate(1, 2, 4).budgets.tolist() == [[7, 1]]


def test_make_allocator_takes_only_what_the_class_takes():
    assert make_allocator("pyramid", window=8, alpha=0.5, sinks=2).params() == {
        "window": 8,
        "beta": 20.0,
    }
    assert make_allocator("duo", window=None, retrieval=0.25).params() == {
        "retrieval": 0.25,
        "sinks": 4,
        "window": 32,
    }
    with pytest.raises(ValueError) as e:
        make_allocator("Pyramid")
    assert str(e.value) == (
        "unknown allocation 'Pyramid'; choose from uniform, pyramid, adaptive, duo"
    )
