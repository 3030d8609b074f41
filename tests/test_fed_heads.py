"""The model hands a policy that reads more than attention what it reads, as it writes it
(``h2o/model/fed_heads.py``): K-norm, KVzip and Expected Attention run over a text, one eviction
a token, in every (layer, KV head) of the closed loop."""

from __future__ import annotations

import numpy as np
import pytest

from h2o.model import KVCache
from h2o.model.answer import row_perplexity
from h2o.model.closed_loop import Instances
from h2o.model.fed_heads import FedHeads, Feed, fed_layers
from h2o.model.forward import rms_norm
from h2o.model.rows import Row
from h2o.model.stack import cache_for
from h2o.policies import POLICIES, make_policy
from h2o.policies.expected_attention import ExpectedAttention
from h2o.trace_vectors import HeadVectors


@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


@pytest.fixture(scope="module")
def ids():
    from tiny_model import token_ids

    return token_ids(121, seed=11)


def literal_kept(scores, T: int, budget: int, window: int) -> list[int]:
    """The card's mechanism with a score fixed when a position is written, step by step: admit
    ``pos``; over the budget, evict the lowest score among all but the ``window`` newest
    (equal scores: the lower position)."""
    kept: list[int] = []
    for pos in range(T):
        kept.append(pos)
        if len(kept) > budget:
            evictable = kept[: len(kept) - window]
            kept.remove(min(evictable, key=lambda j: (scores[j], j)))
    return kept


def test_key_norm_over_a_text_keeps_what_the_literal_rule_keeps(model, ids) -> None:
    """Each head's policy read the norm of each key the model wrote (the cache holds them all:
    eviction only masks), and kept what the rule keeps with those norms."""
    cfg, T, budget = model.config, len(ids), 48
    window = POLICIES["key-norm"].default_recent_window
    layers = fed_layers(model, "key-norm", budget, T)
    cache = KVCache(cfg, T)
    model.forward(ids, cache=cache_for(model.config, cache, policies=layers))
    for li in range(cfg.n_layers):
        for g in range(cfg.n_kv_heads):
            k = cache.k[li, g, :T].astype(np.float64)
            score = (-np.sqrt((k * k).sum(axis=1))).tolist()
            got = layers[li].policies[g].kept.tolist()
            assert got == literal_kept(score, T, budget, window), (li, g)


def test_kvzip_over_a_text_reads_the_scores_given_ahead(model, ids) -> None:
    cfg, T, budget = model.config, len(ids), 40
    window = POLICIES["kvzip"].default_recent_window
    given = np.random.default_rng(3).random((cfg.n_layers, cfg.n_kv_heads, T))
    given[0, 0, 10:20] = 0.5  # ties: the lower position leaves first
    layers = fed_layers(model, "kvzip", budget, T, given)
    model.forward(ids, cache=cache_for(model.config, policies=layers))
    for li in range(cfg.n_layers):
        for g in range(cfg.n_kv_heads):
            want = literal_kept(given[li, g].tolist(), T, budget, window)
            assert layers[li].policies[g].kept.tolist() == want, (li, g)
    with pytest.raises(ValueError, match="reads kvzip_scores for every position"):
        fed_layers(model, "kvzip", budget, T)
    with pytest.raises(ValueError, match="reads kvzip_scores for every position"):
        fed_layers(model, "kvzip", budget, T, given[:, :, :-1])


def test_expected_attention_is_fed_each_position_before_it_is_stepped(model, ids) -> None:
    """Decoded one token a forward (a position's vectors cannot exist before its forward), the
    run keeps what a fresh instance keeps given every vector the run wrote: the run never read
    a position not yet written — nor, over the same forwards in one call, a later one."""
    cfg, T, budget = model.config, len(ids), 40
    for chunk in (1, T):
        layers = fed_layers(model, "expected-attention", budget, T)
        cache = KVCache(cfg, T)
        for t in range(0, T, chunk):
            model.forward(ids[t : t + chunk], cache=cache_for(model.config, cache, policies=layers))
        if chunk == 1:
            one_by_one = [[pol.kept.tolist() for pol in layer.policies] for layer in layers]
    assert [[pol.kept.tolist() for pol in layer.policies] for layer in layers] == one_by_one
    for li in range(cfg.n_layers):
        for g in range(cfg.n_kv_heads):
            fresh = ExpectedAttention(budget, vectors=layers[li].feeds[g].vectors)
            for pos in range(T):
                fresh.on_decode_step(pos, None)
                fresh.evict()
            assert layers[li].policies[g].kept.tolist() == fresh.kept.tolist(), (li, g)
            assert len(fresh.kept) == budget


def test_the_vectors_fed_are_the_models_queries_keys_and_value_norms(model, ids) -> None:
    """At a budget the text fits in, nothing is evicted, so the run is the plain forward: what
    each head was fed equals an independent computation from the weights."""
    cfg, T = model.config, len(ids)
    layers = fed_layers(model, "expected-attention", T + 8, T)
    cache = KVCache(cfg, T)
    model.forward(ids, cache=cache_for(model.config, cache, policies=layers))
    gs = cfg.group_size
    for li in range(cfg.n_layers):
        x = (
            model.tok_embd[np.asarray(ids)].astype(np.float32)
            if li == 0
            else model.forward(ids, stop_after_layer=li - 1)
        )
        lw = model.layers[li]
        raw = (rms_norm(x, lw.attn_norm, cfg.rms_eps) @ lw.wq.T).reshape(T, cfg.n_heads, -1)
        for g in range(cfg.n_kv_heads):
            vec = layers[li].feeds[g].vectors
            want_q = raw[:, g * gs : (g + 1) * gs]
            np.testing.assert_allclose(vec.queries, want_q, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(vec.keys[:, 0], cache.k[li, g, :T])
            want = np.linalg.norm(cache.v[li, g, :T].astype(np.float64), axis=-1)
            np.testing.assert_allclose(vec.value_norms[:, 0], want, rtol=1e-6)


@pytest.mark.parametrize("label", ["knorm@200", "expected-attention@200"])
def test_a_budget_the_text_fits_is_the_full_cache(model, ids, label) -> None:
    full, _ = row_perplexity(model, ids, Row.parse("full"))
    ppl, _ = row_perplexity(model, ids, Row.parse(label))
    assert ppl == full


def test_over_a_text_the_bytes_count_what_the_stepped_policy_holds(model, ids) -> None:
    """A slot's key and value, the policy's position and score a slot (as H2O's rows count
    them) and, for Expected Attention, its query statistics a head."""
    cfg, T = model.config, len(ids)
    heads = cfg.n_layers * cfg.n_kv_heads
    h2o_ppl, h2o_bytes = row_perplexity(model, ids, Row.parse("h2o@48"))
    knorm_ppl, knorm_bytes = row_perplexity(model, ids, Row.parse("knorm@48"))
    assert knorm_bytes == h2o_bytes == Row.parse("h2o@48").kv_bytes(cfg, T)
    assert knorm_ppl != h2o_ppl  # a different rule, a different run
    _, ea_bytes = row_perplexity(model, ids, Row.parse("expected-attention@48"))
    d, gs = cfg.head_dim, cfg.group_size
    assert ea_bytes == knorm_bytes + heads * (gs * (d + d * d) * 8 + 8)
    # the needle's one-shot rows hold no bookkeeping: the stepped bytes are the closed loop's
    assert Row.parse("knorm@48").kv_bytes(cfg, T) < knorm_bytes
    with pytest.raises(ValueError, match="compresses a prompt once"):
        row_perplexity(model, ids, Row.parse("snapkv@48"))


def test_a_feed_refuses_what_the_model_cannot_hand() -> None:
    class Cfg:
        head_dim, rope_base = 4, 10000.0

    with pytest.raises(ValueError, match="cannot hand a policy attention_sum"):
        Feed(("attention_sum",), 5, 1, Cfg)
    feed = Feed(("key_norms",), 5, 1, Cfg)
    with pytest.raises(ValueError, match="not given ahead"):
        feed.given("kvzip_scores", np.zeros(5))


def test_blank_vectors_are_written_checked_or_not_at_all() -> None:
    vec = HeadVectors.blank(6, 2, 1, 4, 500.0)
    q, k, v = np.ones((2, 2, 4)), np.ones((2, 1, 4)), np.ones((2, 1))
    vec.write(1, q, k, v)
    assert vec.queries[1:3].sum() == 16 and vec.queries[0].sum() == 0
    assert not vec.queries.flags.writeable
    for bad, match in [
        ((5, q, k, v), "outside 0..5"),
        ((0, q, k, -v), "non-negative"),
        ((0, q, np.ones((2, 2, 4)), v), "keys of shape"),
        ((0, q * np.nan, k, v), "non-finite"),
    ]:
        with pytest.raises(ValueError, match=match):
            vec.write(*bad)
    assert vec.queries[3:].sum() == 0 and vec.keys.sum() == 8 and vec.value_norms.sum() == 2


def test_read_vectors_are_not_written_and_a_feed_checks_what_it_is_given() -> None:
    read = HeadVectors(np.ones((3, 1, 4)), np.ones((3, 1, 4)), np.ones((3, 1)), 500.0)
    with pytest.raises(ValueError, match="cannot be written"):
        read.write(0, np.zeros((1, 1, 4)), np.zeros((1, 1, 4)), np.zeros((1, 1)))
    assert read.queries.sum() == 12

    class Cfg:
        head_dim, rope_base = 4, 10000.0

    feed = Feed(("kvzip_scores",), 5, 1, Cfg)
    bads = [(np.zeros(4), "5"), (-np.ones(5), "negative"), (np.full(5, np.nan), "finite")]
    for bad, match in bads:
        with pytest.raises(ValueError, match=match):
            feed.given("kvzip_scores", bad)
    assert feed.kvzip_scores is None
    norms = Feed(("key_norms",), 5, 1, Cfg)
    with pytest.raises(ValueError, match=r"outside the feed's 0\.\.4"):
        norms.write(4, np.zeros((1, 2, 4)), np.ones((2, 4)), np.ones((2, 4)))
    assert not norms.key_norms.any()


class _Cfg:
    head_dim, rope_base = 8, 10000.0


def _layer_run(policy: str, together: bool, vectors: tuple, chunks: list[int], **kw) -> tuple:
    """A layer of 3 KV heads over ``vectors`` (queries, keys, values of every position, as
    :meth:`FedHeads.write` takes them) fed chunk by chunk: as the model's layer steps them
    (``together``), or as :class:`Instances`, one policy after the other. Returns each head's
    kept positions and scores, each chunk's mask and first evicted row."""
    queries, keys, values = vectors
    G, T, gs = keys.shape[0], keys.shape[1], queries.shape[0] // keys.shape[0]
    feeds = [Feed(POLICIES[policy].reads_trace, T, gs, _Cfg) for _ in range(G)]
    for g, feed in enumerate(feeds):
        if "given" in kw:
            feed.given("kvzip_scores", kw["given"][g])
    pols = [make_policy(policy, kw["budget"]) for _ in range(G)]
    if together:
        layer = FedHeads(pols, feeds, gs)
    else:
        for pol, feed in zip(pols, feeds, strict=True):
            pol.observe(feed)
        layer = Instances(pols)
    masks, firsts, t0 = [], [], 0
    for c in chunks:
        for g, feed in enumerate(feeds):
            sl = slice(t0, t0 + c)
            feed.write(t0, queries[g * gs : (g + 1) * gs, sl], keys[g, sl], values[g, sl])
        mask = np.zeros((G, c, T), dtype=bool)
        firsts.append(layer.step_rows(np.zeros((G, gs, c, T), np.float32), t0, mask))
        masks.append(mask)
        t0 += c
    return [(p.kept.tolist(), p.scores.tolist()) for p in pols], masks, firsts


@pytest.mark.parametrize("policy", ["key-norm", "kvzip", "expected-attention"])
def test_a_layers_heads_stepped_together_keep_what_each_alone_keeps(policy) -> None:
    """The layer's heads admit by their own code and evict in one call: the same kept positions,
    scores (bit for bit), masks and first evicted rows as each instance stepped on its own —
    on keys of equal norms too (ties: the lower position leaves first)."""
    rng = np.random.default_rng(5)
    G, gs, T, d = 3, 2, 90, _Cfg.head_dim
    queries = rng.standard_normal((G * gs, T, d)).astype(np.float32)
    # entries ±1 or ±2: many keys of exactly equal norms
    keys = (rng.choice([-1, 1], (G, T, d)) * rng.choice([1, 1, 2], (G, T, 1))).astype(np.float32)
    values = rng.standard_normal((G, T, d)).astype(np.float32)
    given = rng.choice([0.25, 0.5, 1.0], (G, T))  # KVzip's scores, tied
    chunks = [1, 40, 7, 1, 41]
    kw = {"budget": 40, "given": given} if policy == "kvzip" else {"budget": 40}
    want = _layer_run(policy, False, (queries, keys, values), chunks, **kw)
    got = _layer_run(policy, True, (queries, keys, values), chunks, **kw)
    assert got[0] == want[0]
    for a, b in zip(got[1], want[1], strict=True):
        np.testing.assert_array_equal(a, b)
    assert got[2] == want[2] == [1, 40, 0, 0, 0]  # from position 41 on, evicted
    norms = np.sqrt((keys.astype(np.float64) ** 2).sum(axis=2))
    assert len(np.unique(norms[0])) < T // 4  # the ties are there to break
    if policy != "expected-attention":  # a score fixed when written: the card's rule, literally
        window = POLICIES[policy].default_recent_window
        for g, (kept, _) in enumerate(got[0]):
            score = -norms[g] if policy == "key-norm" else given[g]
            assert kept == literal_kept(score.tolist(), T, 40, window), g


def test_a_layer_steps_its_heads_together(model, ids) -> None:
    """Over a text, no head's own ``evict`` runs: the layer evicts for them all at once."""
    layers = fed_layers(model, "key-norm", 48, len(ids))
    calls = []
    for layer in layers:
        for pol in layer.policies:
            own = pol.evict
            pol.evict = lambda *a, own=own: calls.append(1) or own(*a)
    model.forward(ids, cache=cache_for(model.config, policies=layers))
    assert not calls
    assert all(len(pol) == 48 for layer in layers for pol in layer.policies)
