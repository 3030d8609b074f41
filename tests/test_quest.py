"""Quest (h2o/model/caches/quest_cache.py) against a literal transcription of mit-han-lab/Quest's
``evaluation/quest_attention.py`` — the sign trick on the keys, the padded chunks' ``amax``,
``local_heavy_hitter_mask`` (``topk`` of ``min(max(3, token_budget // 16), n_chunks)`` pages at
``token_budget = min(kv_seq_len, budget)``), the dense prefill and first two layers — on random
inputs and as a row on the tiny model; and its bytes, held and read, counted by hand."""

from __future__ import annotations

import numpy as np
import pytest

from h2o.model.caches.quest_cache import DENSE_LAYERS, PAGE, QuestCache, n_pages_read, page_mask
from h2o.model.rows import Row
from h2o.model.stack import cache_for


def literal_mask(q: np.ndarray, keys: np.ndarray, budget: int, chunk: int = 16) -> np.ndarray:
    """quest_attention.forward at one decoding step (``q_len == 1``), float64: ``q`` (H, d) the
    step's queries, ``keys`` (H, kv, d) the cache repeated per query head (``repeat_kv``), the
    current token last. Returns the (H, kv) ``mask_bottom``."""
    H, kv, d = keys.shape
    q = q[:, None, :]  # (H, 1, d)
    sign = (q > 0) + (~(q > 0)) * -1
    max_key = keys * sign
    postive_query = q * sign
    padding_length = chunk - ((kv - 1) % chunk + 1)
    fmin = np.finfo(np.float64).min
    max_key = np.concatenate([max_key, np.full((H, padding_length, d), fmin)], axis=1)
    chunk_max_key = max_key.reshape(H, max_key.shape[1] // chunk, chunk, d).max(axis=2)
    chunk_max_key = np.repeat(chunk_max_key, chunk, axis=1)[:, :kv]
    quantized_weight = np.einsum("hqd,hkd->hqk", postive_query, chunk_max_key)
    token_budget = min(kv, budget)
    # local_heavy_hitter_mask
    w = np.concatenate([quantized_weight, np.full((H, 1, padding_length), fmin)], axis=-1)
    chunk_w = w.reshape(H, 1, w.shape[-1] // chunk, chunk).max(axis=-1)
    k = min(max(3, token_budget // chunk), chunk_w.shape[-1])
    topk = np.argsort(-chunk_w, axis=-1, kind="stable")[..., :k]  # no ties on random inputs
    idx = (topk[..., None] * chunk + np.arange(chunk)).reshape(H, 1, -1)
    mask = np.zeros(w.shape, dtype=bool)
    np.put_along_axis(mask, idx, True, axis=-1)
    return mask[:, 0, :kv]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("budget", [16, 48, 64, 200])
def test_each_row_reads_what_the_literal_rule_reads(seed, budget) -> None:
    rng = np.random.default_rng(seed)
    G, gs, d, start, rows = 2, 3, 8, int(rng.integers(1, 90)), 7
    keys = rng.normal(size=(G, start + rows, d))
    q = rng.normal(size=(G * gs, rows, d))
    got = page_mask(q, keys, start, budget, gs)
    assert got.shape == (G * gs, rows, start + rows)
    for r in range(rows):  # a teacher-forced row is one decoding step over the keys so far
        t = start + r
        want = literal_mask(q[:, r], np.repeat(keys[:, : t + 1], gs, axis=0), budget)
        assert (got[:, r, : t + 1] == want).all()
        assert not got[:, r, t + 1 :].any()  # no key after the row's own


def test_the_page_count() -> None:
    # min(max(3, min(n, budget) // 16), pages): at least three pages, at most what there is
    assert n_pages_read(128, 5) == 1 and n_pages_read(128, 40) == 3 and n_pages_read(128, 47) == 3
    assert n_pages_read(128, 100) == 6 and n_pages_read(128, 128) == 8
    assert n_pages_read(128, 1000) == 8 and n_pages_read(16, 1000) == 3
    assert n_pages_read(256, 1000) == 16


def test_a_page_is_read_by_its_upper_bound() -> None:
    # d = 2, one head, q = (1, -1): the bound of a page is max k0 - min k1. Page 1 holds the key
    # the query scores highest; page 0 a key whose channel-wise extremes score higher still
    # (its bound is loose); page 2 the current token.
    keys = np.zeros((1, 40, 2))
    keys[0, 3] = (3.0, 0.0)
    keys[0, 5] = (0.0, -3.0)  # page 0: no key scores above 3, yet its bound is 6
    keys[0, 20] = (2.0, -2.0)  # page 1: bound 4, its key scores 4
    keys[0, 30] = (1.0, -1.0)  # page 1 again: no change
    q = np.array([[[1.0, -1.0]]])
    m = page_mask(q, keys, 39, 16, 1)[0, 0]
    # 16 // 16 = 1 page but at least 3: every page is read
    assert m.all()
    keys2 = np.zeros((1, 80, 2))
    keys2[0, 3], keys2[0, 5], keys2[0, 20] = (3.0, 0.0), (0.0, -3.0), (2.0, -2.0)
    keys2[0, 40] = (1.0, -0.5)  # page 2: bound 1.5
    m = page_mask(q, keys2, 79, 16, 1)[0, 0]
    pages = [int(m[p * PAGE : (p + 1) * PAGE].all()) for p in range(5)]
    # pages 3 and 4 (bound 0) lose to 0 (6), 1 (4) and 2 (1.5)
    assert pages == [1, 1, 1, 0, 0]


def test_equal_bounds_read_the_later_page() -> None:
    keys = np.zeros((1, 64, 2))  # every bound 0
    m = page_mask(np.array([[[1.0, 1.0]]]), keys, 63, 16, 1)[0, 0]
    assert [int(m[p * PAGE]) for p in range(4)] == [0, 1, 1, 1]


@pytest.mark.parametrize(
    "label,match",
    [
        ("quest@0", "positive"),
        ("quest@128/pyramid", "no allocation"),
        ("quest@128:w32", "no options"),
        ("quest@128+kivi4", "quest"),
    ],
)
def test_refusals(label, match) -> None:
    with pytest.raises(ValueError, match=match):
        Row.parse(label)


def test_a_selection_takes_no_policies_and_no_quantization(tiny_smollm) -> None:
    select = Row.parse("quest@64").cache.selector(tiny_smollm)
    with pytest.raises(ValueError, match="selection"):
        tiny_smollm.forward(
            [5, 6, 7], cache=cache_for(tiny_smollm.config, policies=[[]], select=select)
        )


def test_the_row_and_its_bytes(tiny_smollm) -> None:
    cfg = tiny_smollm.config
    row = Row.parse("quest@128")
    assert type(row.cache) is QuestCache and row.label == "quest@128" and row.group == "select"
    assert row.family == "Quest" and row.cache.selector(tiny_smollm) is not None
    slot = 2 * cfg.head_dim * 2  # a key and a value, fp16
    n = 1000
    pages = -(-n // 16)
    summaries = cfg.n_layers * cfg.n_kv_heads * pages * 2 * cfg.head_dim * 2
    full = Row("full")
    # it holds every key and its summaries
    assert row.kv_bytes(cfg, n) == full.kv_bytes(cfg, n) + summaries
    # a step reads the two dense layers whole, the other layers' summaries, and per KV head
    # 8 pages of 16 keys (without a run: its query heads read the same pages)
    sparse = cfg.n_layers - DENSE_LAYERS
    want = (
        DENSE_LAYERS * cfg.n_kv_heads * n * slot
        + sparse * cfg.n_kv_heads * pages * 2 * cfg.head_dim * 2
        + sparse * cfg.n_kv_heads * 128 * slot
    )
    assert row.read_bytes(cfg, n) == want
    # every other row reads what it holds
    for label in ("full", "h2o@128", "kivi4"):
        r = Row.parse(label)
        assert r.read_bytes(cfg, n) == r.kv_bytes(cfg, n)


def test_on_the_model(tiny_smollm) -> None:
    from tiny_model import token_ids

    from h2o.model.answer import score_answer

    model = tiny_smollm
    ids = token_ids(140, seed=3)
    prompt, answer = ids[:120], ids[120:126]
    full = score_answer(model, prompt, answer, Row("full"), max_new=3)
    # a budget above the cache still reads n // 16 of its pages, as the reference's: the answer
    # changes a little (121 keys: 7 of 8 pages)
    whole = score_answer(model, prompt, answer, Row.parse("quest@4096"), max_new=3)
    assert whole.token_logprobs[0] == full.token_logprobs[0]
    assert whole.token_logprobs[1:] != full.token_logprobs[1:]
    # a small budget changes the answer's log-probs after its first token (the prefill is dense)
    part = score_answer(model, prompt, answer, Row.parse("quest@16"), max_new=3)
    assert part.token_logprobs[0] == full.token_logprobs[0]
    assert part.token_logprobs[1:] != full.token_logprobs[1:]
    assert part.kv_bytes > full.kv_bytes and part.read_bytes < full.read_bytes


def test_the_first_two_layers_read_everything(tiny_smollm) -> None:
    from tiny_model import token_ids

    from h2o.model import KVCache
    from h2o.model.forward import AttnChunk

    model, cfg = tiny_smollm, tiny_smollm.config
    ids = token_ids(100, seed=4)
    select = Row.parse("quest@16").cache.selector(model)
    probs: dict[int, np.ndarray] = {}

    def hook(ch: AttnChunk) -> None:
        probs[ch.layer] = ch.probs.copy()

    cache = KVCache(cfg, 100)
    model.read(ids[:96], cache)
    model.forward(ids[96:], cache=cache_for(model.config, cache, select=select), attn_hook=hook)
    for li in range(cfg.n_layers):
        zero = (probs[li][:, :, :96] == 0).any()
        assert zero == (li >= DENSE_LAYERS), li


def test_a_selection_that_reads_every_key_is_the_dense_forward(tiny_smollm) -> None:
    from tiny_model import token_ids

    from h2o.model import KVCache

    model, cfg = tiny_smollm, tiny_smollm.config
    ids = token_ids(90, seed=6)

    def every(layer, q, keys, start):
        return np.ones((q.shape[0], q.shape[1], keys.shape[1]), dtype=bool) & (
            np.arange(keys.shape[1]) <= start + np.arange(q.shape[1])[:, None]
        )

    outs = []
    for select in (None, every):
        cache = KVCache(cfg, 90)
        model.read(ids[:70], cache)
        outs.append(model.forward(ids[70:], cache=cache_for(model.config, cache, select=select)))
    assert np.array_equal(outs[0], outs[1])


def test_a_run_counts_the_pages_it_read(tiny_smollm) -> None:
    """The bytes read are the run's own: a KV head's key is read once however many of its
    query heads read it, counted by hand from the masks the model applied."""
    from tiny_model import token_ids

    from h2o.model import KVCache
    from h2o.model.caches.quest_cache import PageReads

    model, cfg = tiny_smollm, tiny_smollm.config
    ids = token_ids(100, seed=8)
    reads = Row.parse("quest@32").cache.selector(model)
    assert isinstance(reads, PageReads)
    masks = []

    def spy(layer, q, keys, start):
        m = reads(layer, q, keys, start)
        if m is not None:
            masks.append(m)
        return m

    cache = KVCache(cfg, 100)
    model.read(ids[:90], cache)
    model.forward(ids[90:], cache=cache_for(model.config, cache, select=spy))
    G, gs = cfg.n_kv_heads, cfg.group_size
    by_hand = sum(int(m.reshape(G, gs, *m.shape[1:]).any(axis=1).sum()) for m in masks)
    assert reads.steps == 10 and reads.keys_read == by_hand
    assert len(masks) == cfg.n_layers - DENSE_LAYERS  # one chunk of 10 rows a sparse layer
    slot, n = 2 * cfg.head_dim * 2, 90
    pages = -(-n // 16)
    want = (
        DENSE_LAYERS * G * n * slot
        + (cfg.n_layers - DENSE_LAYERS) * G * pages * 2 * cfg.head_dim * 2
        + round(by_hand / 10 * slot)
    )
    assert Row.parse("quest@32").read_bytes(cfg, n, reads=reads) == want
    # the union of a group's pages: at least one query head's, at most all of theirs
    one = (cfg.n_layers - DENSE_LAYERS) * G * 10 * n_pages_read(32, 95) * 16
    assert one * 0.9 <= by_hand <= one * gs


def test_over_a_text_a_run_says_what_a_step_reads_of_what_it_holds(tiny_smollm) -> None:
    """The frontier's numbers: what Quest holds after the text, and the mean over the text's
    steps of what a step reads and of its share of what the cache holds then — counted by hand
    from the masks the model applied (a KV head's key once however many of its query heads read
    it, every key in the dense layers, the sparse layers' page summaries); a row that reads all
    it holds reads exactly that."""
    from tiny_model import token_ids

    from h2o.model.answer import text_run

    model, cfg = tiny_smollm, tiny_smollm.config
    ids = token_ids(161, seed=4)
    row = Row.parse("quest@48")
    reads = row.cache.selector(model)
    masks = []

    def spy(layer, q, keys, start):
        m = reads(layer, q, keys, start)
        if m is not None:
            masks.append((start, m))
        return m

    model.forward(
        ids[:-1], cache=cache_for(model.config, select=spy)
    )  # the run's forward again, watched
    run = text_run(model, ids, row)
    assert run.kv_bytes == row.kv_bytes(cfg, 161)
    G, gs, T = cfg.n_kv_heads, cfg.group_size, 160
    keys = np.zeros(T)
    for start, m in masks:
        keys[start : start + m.shape[1]] += m.reshape(G, gs, *m.shape[1:]).any(axis=1).sum((0, 2))
    slot = 2 * cfg.head_dim * 2
    read, share = [], []
    for t in range(T):
        n = t + 1
        pages = -(-n // 16)
        b = (
            DENSE_LAYERS * G * n * slot
            + (cfg.n_layers - DENSE_LAYERS) * G * pages * 2 * cfg.head_dim * 2
            + round(keys[t] * slot)
        )
        held = cfg.n_layers * G * n * slot + cfg.n_layers * G * pages * 2 * cfg.head_dim * 2
        read.append(b)
        share.append(b / held)
    assert run.read_bytes == round(np.mean(read))
    assert run.read_share == pytest.approx(np.mean(share), rel=1e-12) and 0 < run.read_share < 1
    h2o = text_run(model, ids, Row.parse("h2o@48"))
    assert h2o.read_bytes == h2o.kv_bytes and h2o.read_share == 1.0
