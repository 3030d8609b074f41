"""H2O's prefill mode (h2o/model/prefill.py) against a literal transcription of the authors'
generation code, the row options (a window in slots or as a share, the mode, SnapKV's
pooling), and SnapKV's pooling defaults pinned by hand."""

from __future__ import annotations

import numpy as np
import pytest

from h2o.model.prefill import keep_heavy_and_recent, prefill_policies
from h2o.model.rows import Row
from h2o.model.stack import cache_for
from h2o.policies.snapkv import snapkv_scores


# -- the authors' rule, transcribed ------------------------------------------------------------
def authors_keep(hh_score: np.ndarray, heavy_budget: int, recent_budget: int) -> np.ndarray:
    """``H2OKVCache_LayerWise.__call__`` for one head, line by line (torch → numpy)::

    seq_len = past_key_values[0].size(self.k_seq_dim)
    if seq_len <= self.cache_size: return past_key_values
    select_hh_scores = self.hh_score[:, :seq_len - self.recent_size]
    _, keep_topk = torch.topk(select_hh_scores, self.hh_size, dim=-1)
    keep_topk = keep_topk.sort().values
    keep_recent = torch.arange(seq_len - self.recent_size, seq_len)
    keep_idx = torch.cat([keep_topk, keep_recent], dim=-1)
    mask = torch.zeros(self.hh_score.shape, dtype=torch.bool)
    mask = mask.scatter(-1, keep_idx, 1)
    """
    seq_len = hh_score.shape[0]
    if seq_len <= heavy_budget + recent_budget:
        return np.arange(seq_len)
    select = hh_score[: seq_len - recent_budget]
    keep_topk = np.argsort(-select, kind="stable")[:heavy_budget]  # distinct scores: any order
    keep_topk = np.sort(keep_topk)
    keep_recent = np.arange(seq_len - recent_budget, seq_len)
    keep_idx = np.concatenate([keep_topk, keep_recent])
    mask = np.zeros(seq_len, dtype=bool)
    mask[keep_idx] = True
    return np.flatnonzero(mask)


def authors_hh_score(attn: np.ndarray) -> np.ndarray:
    """``_update_hh_score`` at prefill: ``attn_score_cache.sum(0).sum(1)`` — over the batch, then
    over the queries: one score per (head, key)."""
    return attn[None].sum(0).sum(1)


def test_the_choice_matches_the_authors_code_on_random_scores():
    rng = np.random.default_rng(5)
    for _ in range(300):
        T = int(rng.integers(1, 90))
        budget = int(rng.integers(1, 100))
        recent = int(rng.integers(0, budget))
        score = rng.random(T)  # continuous: no ties, where torch.topk's order is unspecified
        got = keep_heavy_and_recent(score, budget, recent)
        want = authors_keep(score, budget - recent, recent)
        np.testing.assert_array_equal(got, want)
        assert got.size == min(T, budget)


def test_the_prompt_score_is_the_column_sum_of_the_causal_softmax():
    """Each query's softmax (self included) sums to 1, so the scores of a prompt of T tokens sum
    to T; the last position's score is the last query's weight on itself."""
    rng = np.random.default_rng(1)
    H, T = 3, 12
    logits = rng.normal(size=(H, T, T))
    logits[:, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] = -np.inf
    attn = np.exp(logits - logits.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)
    hh = authors_hh_score(attn)
    assert hh.shape == (H, T)
    np.testing.assert_allclose(hh.sum(-1), T)
    np.testing.assert_allclose(hh[:, -1], attn[:, -1, -1])


def test_ties_keep_the_higher_position_by_hand():
    # positions 0..5, recent 2 (4, 5 kept), budget 4: two heavy among 0..3 scored 1, 3, 3, 3
    got = keep_heavy_and_recent(np.array([1.0, 3.0, 3.0, 3.0, 0.0, 0.0]), 4, 2)
    assert got.tolist() == [2, 3, 4, 5]
    # a prompt no longer than the budget is kept whole
    assert keep_heavy_and_recent(np.array([0.1, 0.2, 0.3]), 3, 1).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="recent"):
        keep_heavy_and_recent(np.zeros(9), 4, 4)


def test_the_policies_resume_with_their_scores_and_decode_by_the_card():
    acc = np.array([[[5.0, 0.1, 4.0, 0.2, 0.3, 0.4, 0.5, 1.0]]])  # one layer, one head, T = 8
    ((pol,),) = prefill_policies(acc, budget=4, recent=2)
    assert pol.kept.tolist() == [0, 2, 6, 7]
    assert pol.scores.tolist() == [5.0, 4.0, 0.5, 1.0]
    assert (pol.budget, pol.recent_window, pol.last_pos) == (4, 2, 7)
    # the next step, by the card: add the weights, admit 8 at 0, evict the argmin outside the
    # last two (7, 8): 2 at 4.0 + 0.1 against 0 at 5.0 + 0.1 and 6 at 0.5 + 0.1 -> 6 goes
    pol.on_decode_step(8, np.array([0.1, 0.1, 0.1, 0.7], dtype=np.float32))
    assert pol.evict() == [6]
    assert pol.kept.tolist() == [0, 2, 7, 8]


# -- on the tiny model -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


def test_prefill_mode_on_the_model(model):
    from tiny_model import token_ids

    from h2o.model.answer import score_answer
    from h2o.model.kv_cache import KVCache
    from h2o.model.prefill import prompt_attention

    ids = token_ids(90, seed=3)
    prompt, answer = ids[:80], ids[80:84]
    cfg = model.config
    cache = KVCache(cfg, 80)
    hidden, acc = prompt_attention(model, prompt, cache)
    assert acc.shape == (cfg.n_layers, cfg.n_kv_heads, 80)
    # every query's softmax sums to 1 in each query head, so each KV head's mean sums to T
    np.testing.assert_allclose(acc.sum(-1), 80, rtol=1e-5)
    np.testing.assert_array_equal(hidden, model.forward(prompt))  # full attention: the prefill

    # a budget that holds the prompt and the answer evicts nothing: the full cache's numbers
    full = score_answer(model, prompt, answer, Row.parse("full"), max_new=0)
    big = score_answer(model, prompt, answer, Row.parse("h2o@100:w50%:prefill"), max_new=0)
    assert big.logprob == full.logprob

    row = Row.parse("h2o@32:w50%:prefill")
    s = score_answer(model, prompt, answer, row, needle_span=(2, 5), max_new=3)
    slot = 2 * 2 * cfg.head_dim  # fp16 key and value
    assert s.kv_bytes == cfg.n_layers * cfg.n_kv_heads * 32 * (slot + 13)
    # what each head holds after the prompt is the authors' choice from the prompt's scores
    pols = prefill_policies(acc, 32, 16)
    for li in range(cfg.n_layers):
        for g in range(cfg.n_kv_heads):
            want = authors_keep(acc[li, g], 16, 16)
            np.testing.assert_array_equal(pols[li][g].kept, want)
    held = [np.mean([np.isin([2, 3, 4], p.kept).all() for p in layer]) for layer in pols]
    assert s.held == pytest.approx(held)
    assert s.logprob != full.logprob


def test_prefill_mode_has_no_closed_loop_perplexity(model):
    from tiny_model import token_ids

    from h2o.model.answer import row_perplexity

    with pytest.raises(ValueError, match="no closed-loop perplexity"):
        row_perplexity(model, token_ids(40, seed=1), Row.parse("h2o@16:w50%:prefill"))


def test_a_window_share_reaches_the_policies(model):
    from h2o.model.answer import kept_sets

    row = Row.parse("h2o@20:w50%")
    assert row.recent_window == 10 and row.policy_params() == {"recent_window": 10}
    assert Row.parse("h2o@100:w33%").recent_window == 33  # floor(100 * 33 / 100)
    assert Row.parse("h2o@7:w50%").recent_window == 3  # floor(3.5)
    assert Row.parse("h2o@128").recent_window == 32 and Row.parse("h2o@128").policy_params() == {}
    from tiny_model import token_ids

    pols = row.cache.decode_policies(model)
    model.forward(token_ids(60, seed=2), cache=cache_for(model.config, policies=pols))
    # window 10 reached every policy (the default 32 would be refused at budget 20): the newest
    # ten positions are always kept
    for heads in kept_sets(pols):
        for kept in heads:
            assert kept.size == 20 and set(range(50, 60)) <= set(kept.tolist())


# -- the row grammar's options -------------------------------------------------------------------
@pytest.mark.parametrize(
    "label",
    [
        "h2o@128:w64",
        "h2o@128:w50%",
        "h2o@128:w50%:prefill",
        "snapkv@256:avg5",
        "snapkv@64:max7",
        "scissorhands@64:w16",
        "tova@128:w0",
    ],
)
def test_options_round_trip(label):
    assert Row.parse(label).label == label
    assert Row.parse(Row.parse(label).label) == Row.parse(label)


def test_the_default_pooling_is_one_row():
    assert Row.parse("snapkv@256:max5") == Row.parse("snapkv@256")
    assert Row.parse("snapkv@256:max5").label == "snapkv@256"
    assert Row.parse("snapkv@256").cache.pooling == ("max", 5)
    assert Row.parse("snapkv@256:avg5").cache.pooling == ("avg", 5)


def test_families_name_the_window_and_the_mode():
    assert Row.parse("h2o@128:w50%:prefill").family == (
        "H2O (prefill mode), window 50% of the budget"
    )
    assert Row.parse("h2o@256:w50%").family == Row.parse("h2o@512:w50%").family  # one line
    assert Row.parse("h2o@128:w64").family == "H2O, window 64"
    assert Row.parse("snapkv@128:avg5").family == "SnapKV (avg5)"


@pytest.mark.parametrize(
    ("label", "why"),
    [
        ("streaming-llm@128:w4", "no recent window"),
        ("sliding-window@128:w4", "no recent window"),
        ("h2o@128:w128", "smaller than the budget"),
        ("h2o@128:w100%", "0% to 99%"),
        ("h2o@128:w64:w32", "cannot read option"),
        ("h2o@128/pyramid:w50%", "with an allocation"),
        ("scissorhands@128:prefill", "no prefill mode"),
        ("h2o@128:w50%:prefill+kivi4", "full precision"),
        ("h2o@128/duo:prefill", "uniform budget"),
        ("snapkv@128:avg4", "odd kernel"),
        ("h2o@128:avg5", "cannot read option .:avg5."),
        ("h2o@128:fast", "cannot read option"),
        ("kivi4:w3", "cannot read"),
    ],
)
def test_bad_options_are_refused_by_name(label, why):
    with pytest.raises(ValueError, match=why):
        Row.parse(label)


# -- SnapKV's pooling, pinned by hand --------------------------------------------------------
def test_snapkv_default_pooling_spreads_a_spike_two_each_way():
    """Plain ``snapkv_scores``: max pooling, kernel 5 — a spike at j reaches j - 2 .. j + 2."""
    a = np.zeros(40)
    a[10] = 1.0
    s = snapkv_scores(a, window=8)
    assert np.flatnonzero(s).tolist() == [8, 9, 10, 11, 12]
    assert set(s[[8, 9, 10, 11, 12]].tolist()) == {1.0}


def test_snapkv_released_and_longbench_pooling_by_hand():
    a = np.zeros(40)
    a[10] = 1.0
    avg = snapkv_scores(a, window=8, kernel=5, mode="avg")  # init_snapkv: avgpool, kernel 5
    np.testing.assert_allclose(avg[8:13], 0.2)
    assert np.flatnonzero(avg).tolist() == [8, 9, 10, 11, 12]
    mx7 = snapkv_scores(a, window=8, kernel=7, mode="max")  # LongBench configs: maxpool, 7
    assert np.flatnonzero(mx7).tolist() == [7, 8, 9, 10, 11, 12, 13]
