"""The policies' edges that mutation testing found unguarded (``make mutate``).

Each test pins a documented rule at the value where it changes: the first position, the int32
limit, the defaults a docstring names, SnapKV's refusals word for word, its pooling on 2-D and
negative or integer input, and FixedKeep's bounds.
"""

from __future__ import annotations

import numpy as np
import pytest

from h2o.model.caches.fixed_keep import FixedKeep
from h2o.policies import POLICIES, Policy, RandomEviction, SlidingWindow, StreamingLLM
from h2o.policies.base import check_pos
from h2o.policies.snapkv import pool1d, snapkv_keep, snapkv_scores

INT32_MAX = 2**31 - 1


# -- positions ---------------------------------------------------------------------------------
def test_a_position_must_increase_from_the_first_one_on():
    assert check_pos(0, -1) == 0
    with pytest.raises(ValueError, match=r"^pos must be >= 0, got -1$"):
        check_pos(-1, -1)
    # After position 0 the rule is "increase", also for a repeated 0.
    with pytest.raises(ValueError, match=r"^pos must increase strictly: got 0 after 0$"):
        check_pos(0, 0)
    assert check_pos(1, 0) == 1


def test_the_largest_int32_position_is_accepted_and_the_next_refused():
    assert check_pos(INT32_MAX, 0) == INT32_MAX
    with pytest.raises(ValueError, match="does not fit the int32 position store"):
        check_pos(INT32_MAX + 1, 0)


# -- defaults and parameters -------------------------------------------------------------------
def test_a_policy_without_parameters_of_its_own_reports_its_budget():
    class Minimal(Policy):
        name = "minimal"

    assert Minimal(7).params() == {"budget": 7}
    assert repr(Minimal(7)) == "Minimal(budget=7)"


def test_every_policy_defaults_to_the_readmes_budget_of_512():
    """README: "the default budget of 512"; the card: StreamingLLM pins four slots."""
    assert {name: cls().budget for name, cls in POLICIES.items()} == dict.fromkeys(POLICIES, 512)
    assert StreamingLLM().params() == {"budget": 512, "sinks": 4}


def test_streaming_llm_refusals_name_the_parameter_and_the_fix():
    with pytest.raises(ValueError, match=r"^sinks must be >= 0, got -1$"):
        StreamingLLM(8, sinks=-1)
    with pytest.raises(ValueError) as e:
        StreamingLLM(4, sinks=4)
    assert str(e.value) == (
        "sinks (4) must be smaller than budget (4): the ring of recent positions would have no "
        "room. Lower sinks below 4, or raise the budget above 4"
    )
    for cls in (StreamingLLM, SlidingWindow):
        with pytest.raises(ValueError, match=r"rng must be a numpy\.random\.Generator"):
            cls(8, rng="seed")  # type: ignore[arg-type]


def test_sliding_window_is_streaming_llm_with_no_sinks():
    """The module's definition, defaults included."""
    assert SlidingWindow().params() == {"budget": StreamingLLM(sinks=0).budget}
    g = np.random.default_rng(3)
    assert SlidingWindow(8, rng=g).rng is g


def _victims(policy, steps: int = 40) -> list[int]:
    out = []
    for t in range(steps):
        n = len(policy)
        policy.on_decode_step(t, np.full(n, 1.0 / n) if n else np.zeros(0))
        out += policy.evict()
    return out


def test_random_eviction_without_an_rng_draws_from_seed_0():
    """The module docstring: without an rng it seeds ``numpy.random.default_rng(0)``."""
    plain = _victims(RandomEviction(8, recent_window=2))
    seeded = _victims(RandomEviction(8, recent_window=2, rng=np.random.default_rng(0)))
    other = _victims(RandomEviction(8, recent_window=2, rng=np.random.default_rng(1)))
    assert plain == seeded != other
    assert len(set(plain)) == len(plain)  # never the same position twice


# -- SnapKV's rule -----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, 3.0, True, "3", None])
def test_snapkv_integer_arguments_are_checked_and_named(bad):
    minimum = 1
    with pytest.raises(ValueError, match=rf"^kernel must be an integer >= {minimum}, got "):
        pool1d(np.zeros(4), bad)
    with pytest.raises(ValueError, match=rf"^window must be an integer >= {minimum}, got "):
        snapkv_scores(np.zeros(4), window=bad)
    with pytest.raises(ValueError, match=rf"^budget must be an integer >= {minimum}, got "):
        snapkv_keep(np.zeros(4), bad, 8, window=4)
    with pytest.raises(ValueError, match=rf"^window must be an integer >= {minimum}, got "):
        snapkv_keep(np.zeros(4), 6, 8, window=bad)


def test_snapkv_smallest_window_and_budget():
    s = snapkv_scores(np.array([0.1, 0.6, 0.3]), window=1, kernel=1)
    assert s.tolist() == [0.1, 0.6]
    assert snapkv_keep(s, 2, 3, window=1).tolist() == [1, 2]
    assert snapkv_keep(np.zeros(0), 1, 1, window=1).tolist() == [0]  # budget 1 holds it all


def test_a_prompt_no_longer_than_the_window_is_kept_whole():
    """``budget >= n_prompt`` keeps everything, even where the budget is not above the window."""
    assert snapkv_keep(np.zeros(0), 3, 3, window=3).tolist() == [0, 1, 2]
    assert snapkv_scores(np.ones(3), window=3).shape == (0,)
    assert snapkv_scores(np.ones((2, 5, 3)), window=3).shape == (2, 5, 0)
    assert snapkv_scores(np.ones((2, 5, 3)), window=4).shape == (2, 5, 0)


def test_snapkv_refusals_word_for_word():
    with pytest.raises(ValueError) as e:
        snapkv_keep(np.zeros(8), 3, 11, window=3)
    assert str(e.value) == (
        "snapkv needs budget > window: budget 3, window 3 leaves no room for the positions the "
        "question points at"
    )
    with pytest.raises(ValueError, match=r"^scores must have length 8, got \(5,\)$"):
        snapkv_keep(np.zeros(5), 5, 11, window=3)


def test_pool1d_pools_the_last_axis_of_every_row():
    x = np.array([[0, 3.0, 0, 0, 1], [2, 0, 0, 0, 0]])
    assert pool1d(x, 3).tolist() == [[3, 3, 3, 1, 1], [2, 2, 0, 0, 0]]
    assert np.allclose(pool1d(x, 3, "avg"), [[1, 1, 1, 1 / 3, 1 / 3], [2 / 3, 2 / 3, 0, 0, 0]])
    batched = snapkv_scores(np.stack([x, x[::-1]]), window=2, kernel=3)
    assert batched.shape == (2, 2, 3)
    assert batched[0].tolist() == [[3, 3, 3], [2, 2, 0]]


def test_max_pooling_padding_never_wins_even_below_zero():
    assert pool1d(np.array([-1.0, -2.0, -3.0]), 3).tolist() == [-1, -1, -2]
    assert pool1d(np.array([-1.0, -2.0, -3.0]), 3, "avg").tolist() == [-1, -2, -5 / 3]


def test_snapkv_reads_integer_and_boolean_input_as_numbers():
    assert pool1d([0, 5, 0, 0], 3).tolist() == [5.0, 5.0, 5.0, 0.0]
    assert snapkv_scores(np.array([1, 0, 0, 2, 9]), window=1, kernel=1).tolist() == [1, 0, 0, 2]
    scores = np.array([True, False, True, False])
    assert snapkv_keep(scores, 4, 6, window=2).tolist() == [0, 2, 4, 5]
    assert snapkv_keep(np.array([1, 0, 1, 0], np.uint8), 4, 6, window=2).tolist() == [0, 2, 4, 5]


def test_snapkv_scores_pass_the_pooling_mode_on():
    attn = np.array([0, 0, 3.0, 0, 0, 0, 1, 1])
    assert snapkv_scores(attn, window=2, kernel=3, mode="avg").tolist() == [0, 1, 1, 1, 0, 0]
    assert snapkv_scores(attn, window=2, kernel=3).tolist() == [0, 3, 3, 3, 0, 0]


# -- FixedKeep ---------------------------------------------------------------------------------
def test_fixed_keep_takes_strictly_increasing_positions_in_the_past():
    assert FixedKeep(np.array([0, 1, 2]), last_pos=2).kept.tolist() == [0, 1, 2]  # adjacent
    assert FixedKeep(np.array([], np.int64), last_pos=-1).kept.tolist() == []
    for kept, last in (([1, 1], 3), ([2, 1], 3)):
        with pytest.raises(ValueError, match=r"^kept must be strictly increasing positions$"):
            FixedKeep(np.array(kept), last_pos=last)
    for kept in ([-2, 3], [0, 2, 9], [6]):
        with pytest.raises(ValueError, match=r"^kept positions must lie in 0\.\.5$"):
            FixedKeep(np.array(kept), last_pos=5)


def test_fixed_keep_positions_index_the_cache_whatever_they_came_as():
    """The kept positions gather the model's cache rows: integers even from float input."""
    cache = np.arange(10) * 10
    k = FixedKeep(np.array([0.0, 2.0, 5.0]), last_pos=5)
    k.on_decode_step(6, None)
    assert cache[k.kept].tolist() == [0, 20, 50, 60]


@pytest.mark.parametrize("cls", [StreamingLLM, RandomEviction])
def test_a_budget_refusal_names_the_budget_and_why(cls):
    with pytest.raises(ValueError, match=r"^budget must be >= 1, got 0$"):
        cls(0)
    with pytest.raises(ValueError) as e:
        cls(2**24 + 1)
    assert str(e.value) == (
        f"budget must be <= {2**24} (2**24), got {2**24 + 1}: the cache is preallocated at the "
        "budget, so a larger one would not fit in memory"
    )


# -- drop: the engines' eviction of exactly k ----------------------------------------------------
def stepped(name: str, steps: int = 12) -> Policy:
    """A policy of budget 8 (protecting 3: window or sinks) after ``steps`` steps, unevicted."""
    kw = {"sinks": 3} if name == "streaming-llm" else {}
    kw |= {"recent_window": 3} if name not in ("streaming-llm", "sliding-window") else {}
    p = POLICIES[name](8, **kw)
    rng = np.random.default_rng(1)
    for t in range(steps):
        w = rng.random(len(p)).astype(np.float32)
        p.on_decode_step(t, w / w.sum() if len(p) else None)
    return p


@pytest.mark.parametrize("name", ["h2o", "tova", "scissorhands", "random", "streaming-llm"])
@pytest.mark.parametrize("bad", [0, -1, 10, True, 2.0, "1"])
def test_drop_refuses_what_the_rule_may_not_evict_and_changes_nothing(name, bad):
    """``drop(k)`` takes 1 to ``droppable`` positions: all but the protected 3 (window or
    sinks) of the 12 kept. More, none, or a k that is not an integer is refused — and the
    policy steps on exactly like a twin that was never asked."""
    p, twin = stepped(name), stepped(name)
    assert (len(p), p.droppable) == (12, 9)
    with pytest.raises(ValueError, match=r"cannot drop 10|k must be"):
        p.drop(bad)
    assert p.kept.tolist() == twin.kept.tolist() and p.scores.tobytes() == twin.scores.tobytes()
    assert p.drop(9) == twin.drop(9) and len(p) == 3 and p.droppable == 0
    with pytest.raises(ValueError, match=r"holds 3 position\(s\), of which its rule may evict 0"):
        p.drop(1)


@pytest.mark.parametrize("name", ["h2o", "tova", "scissorhands", "random", "streaming-llm"])
def test_drop_returns_its_victims_ascending_and_keeps_the_protected(name):
    p = stepped(name)
    protected = p.kept[-3:].tolist() if name != "streaming-llm" else [0, 1, 2]
    victims = p.drop(p.droppable)
    assert victims == sorted(victims) and len(victims) == 9
    assert p.kept.tolist() == protected


def test_a_sliding_window_may_drop_everything_it_keeps():
    p = stepped("sliding-window")
    assert p.droppable == len(p) == 12
    assert p.drop(12) == list(range(12)) and len(p) == 0
