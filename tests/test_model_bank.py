"""The model's closed loop on banks: the numbers of separate instances, bit for bit.

"Before" is computed here from the per-instance path (``model.forward`` with
``make_policies``: one policy object per layer and KV head, each stepped on its own), "after"
from :func:`perplexity_under_eviction`, which runs each layer's heads as one bank. On the tiny
random GGUF of ``tiny_model.py`` (every policy, several budgets, heads at different fills,
refusals) and, with ``-m model``, on the real SmolLM2.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from tiny_model import NKV, NL, token_ids, write_tiny_gguf

from h2o import H2O
from h2o.bank import PolicyBank
from h2o.model import (
    ModelNotFoundError,
    SmolLM,
    generate,
    make_policies,
    perplexity_under_eviction,
    policy_factory,
    quality_table,
)
from h2o.model import forward as fwd
from h2o.model.quality import make_banks
from h2o.model.stack import cache_for


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> SmolLM:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return SmolLM.load(path)


def per_instance_nll(model: SmolLM, ids: list[int], factory) -> np.ndarray:
    """The closed loop as it ran before banks: one instance per (layer, KV head)."""
    policies = make_policies(model, factory)
    assert not any(isinstance(row, PolicyBank) for row in policies)
    hidden = model.forward(ids[:-1], cache=cache_for(model.config, policies=policies))
    nll = -model.token_logprobs(hidden, ids[1:])
    unbanked = perplexity_under_eviction(model, ids, factory, lock_step=False)
    assert unbanked.nll.tobytes() == nll.tobytes()
    return nll


RUNS = [
    ("h2o", 8, {"recent_window": 2}),
    ("h2o", 12, {"recent_window": 0}),
    ("scissorhands", 10, {"recent_window": 3}),
    ("tova", 9, {}),
    ("streaming-llm", 8, {"sinks": 2}),
    ("sliding-window", 7, {}),
    ("random", 10, {"recent_window": 2}),
]


@pytest.mark.parametrize(("name", "budget", "params"), RUNS)
def test_banked_closed_loop_is_the_per_instance_one_bit_for_bit(model, name, budget, params):
    ids = token_ids(48, seed=3)
    factory = policy_factory(name, budget, seed=5, **params)
    assert all(isinstance(b, PolicyBank) for b in make_banks(model, factory))
    got = perplexity_under_eviction(model, ids, factory)
    want = per_instance_nll(model, ids, factory)
    assert got.nll.tobytes() == want.tobytes()
    assert got.perplexity == float(np.exp(want.mean()))
    # and every head's cache ends the same: positions and float64 scores
    banks, policies = make_banks(model, factory), make_policies(model, factory)
    model.forward(ids[:-1], cache=cache_for(model.config, policies=banks))
    model.forward(ids[:-1], cache=cache_for(model.config, policies=policies))
    for bank, row in zip(banks, policies, strict=True):
        for g, p in enumerate(row):
            assert bank.kept(g).tolist() == p.kept.tolist()
            assert bank.scores(g).tobytes() == p.scores.tobytes()


def test_heads_at_different_fills_share_a_bank(model):
    def factory(layer: int, head: int):
        return policy_factory("h2o", 6 + 3 * head + layer, recent_window=1 + head)(layer, head)

    ids = token_ids(40, seed=4)
    banks = make_banks(model, factory)
    assert [b.budgets.tolist() for b in banks] == [[6 + li, 9 + li] for li in range(NL)]
    got = perplexity_under_eviction(model, ids, factory)
    assert got.nll.tobytes() == per_instance_nll(model, ids, factory).tobytes()


def test_a_step_with_a_bad_signal_moves_no_head_of_a_bank(model):
    def poison(ch: fwd.AttnChunk) -> None:
        if ch.layer == 1:
            ch.probs[2:, 7 - ch.start, :] = np.nan  # the query heads of KV head 1

    banks = make_banks(model, policy_factory("h2o", 5, recent_window=1))
    with pytest.raises(ValueError, match="layer 1, KV head 1: the attention signal of step 7"):
        model.forward(
            token_ids(20), cache=cache_for(model.config, policies=banks), attn_hook=poison
        )
    assert [banks[li].last_pos for li in range(NL)] == [19, 6, -1]
    assert all(banks[1].lane(g).last_pos == 6 for g in range(NKV))


def test_generation_on_banks_is_generation_one_instance_at_a_time(model):
    class Unbanked(H2O):  # a subclass: no bank holds it, so each head steps on its own
        pass

    def plain(layer: int, head: int):
        return Unbanked(8, recent_window=2)

    prompt = token_ids(30, seed=7)
    assert isinstance(make_banks(model, policy_factory("h2o", 8, recent_window=2))[0], PolicyBank)
    assert not isinstance(make_banks(model, plain)[0], PolicyBank)
    banked = generate(
        model, prompt, 8, policy_factory("h2o", 8, recent_window=2), stop_at_eos=False
    )
    assert banked.new_ids == generate(model, prompt, 8, plain, stop_at_eos=False).new_ids


def test_stand_ins_and_mixed_kinds_are_not_banked(model):
    from tiny_model import WindowStandIn

    made = make_banks(model, lambda li, g: WindowStandIn(9))
    assert all(isinstance(p, WindowStandIn) for row in made for p in row)

    def mixed(layer: int, head: int):  # layer 1 mixes H2O and TOVA: its heads run one by one
        name = "tova" if layer == 1 and head == 1 else "h2o"
        return policy_factory(name, 6, recent_window=1)(layer, head)

    banks = make_banks(model, mixed)
    assert [isinstance(b, PolicyBank) for b in banks] == [True, False, True]
    ids = token_ids(30, seed=6)
    got = perplexity_under_eviction(model, ids, mixed)
    assert got.nll.tobytes() == per_instance_nll(model, ids, mixed).tobytes()


# -- the real model --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_model() -> SmolLM:
    try:
        return SmolLM.load()
    except ModelNotFoundError as e:
        pytest.skip(f"SmolLM2 GGUF not available: {e}")


@pytest.mark.model
def test_quality_numbers_are_unchanged_on_the_real_model(real_model):
    from pathlib import Path

    text = (Path(__file__).parents[1] / "traces" / "texts" / "lighthouse.txt").read_text("utf-8")
    # 160 tokens under a budget of 64: every head evicts on 96 steps (the cost grows with the
    # length, the per-instance path stepping 90 policies one by one).
    ids = real_model.encode(text)[:160]
    names = ["h2o", "streaming-llm", "tova", "scissorhands", "sliding-window", "random"]
    rows = quality_table(real_model, ids, names, [64])
    for r in rows[1:]:
        name, budget = r.label.split("@")
        want = per_instance_nll(real_model, ids, policy_factory(name, int(budget)))
        assert r.nll.tobytes() == want.tobytes(), r.label
        assert r.perplexity == float(np.exp(want.mean()))
