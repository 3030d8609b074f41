"""The kinds of cache (h2o/model/caches): each built-in row parses into its class, and a toy
kind added in one file (tests/toy_cache_kind.py) plus a registration is a row everywhere — the
grammar, its bytes, the model's runs (prefix sharing included), the app's frontier and files."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from h2o.alloc import slot_bytes
from h2o.model import caches
from h2o.model.rows import Row, kinds, parse_rows

CFG = SimpleNamespace(n_layers=2, n_kv_heads=3, head_dim=64)


@pytest.mark.parametrize(
    ("label", "cls", "group"),
    [
        ("full", caches.Full, "full"),
        ("kivi16", caches.Kivi, "full"),
        ("kivi4", caches.Kivi, "compress"),
        ("h2o@128", caches.Evicting, "evict"),
        ("h2o@128:w50%:prefill", caches.Evicting, "evict"),
        ("snapkv@256:avg5", caches.SnapKV, "evict"),
        ("h2o@256+kivi4", caches.Evicting, "both"),
        ("snapkv@256+kivi4", caches.SnapKV, "both"),
    ],
)
def test_each_row_asks_its_kind(label, cls, group) -> None:
    row = Row.parse(label)
    assert type(row.cache) is cls and row.cache.row is row
    assert row.group == group
    assert row.evicts == cls.evicts


def test_closed_loop_is_the_kinds_fact() -> None:
    assert Row.parse("h2o@128").cache.closed_loop
    assert Row.parse("kivi4").cache.closed_loop
    assert not Row.parse("snapkv@128").cache.closed_loop
    assert not Row.parse("h2o@128:w50%:prefill").cache.closed_loop


def test_register_refuses_what_is_not_a_new_kind() -> None:
    with pytest.raises(ValueError, match="subclasses CacheKind"):
        caches.register(object)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exists already"):
        caches.register(type("Again", (caches.CacheKind,), {"kind": "full"}))
    with pytest.raises(ValueError, match="built-in"):
        caches.unregister("policy")


@pytest.fixture
def toy():
    from toy_cache_kind import FirstTokens

    caches.register(FirstTokens)
    try:
        yield FirstTokens
    finally:
        caches.unregister(FirstTokens.kind)


def test_a_toy_kind_is_a_row(toy) -> None:
    row = Row.parse("first@64")
    assert row == Row("first", "first", 64) and type(row.cache) is toy
    assert row.label == "first@64" and Row.parse(row.label) == row
    assert row.family == "First tokens" and row.group == "evict"
    assert "first" in kinds()
    assert parse_rows("full, first@64") == [Row("full"), row]
    # bytes: 64 fp16 slots per (layer, KV head) once the prompt is longer, every token before
    assert row.kv_bytes(CFG, 100) == 2 * 3 * 64 * slot_bytes(64)
    assert row.kv_bytes(CFG, 10) == 2 * 3 * 10 * slot_bytes(64)
    with pytest.raises(ValueError, match="takes no bits"):
        Row.parse("first@64+kivi4")
    with pytest.raises(ValueError, match="budget must be a positive integer"):
        Row("first", "first", 0)
    with pytest.raises(ValueError, match="no recent window"):
        Row("first", "first", 64, window=8)


def test_without_registration_the_label_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown policy 'first'"):
        Row.parse("first@64")


@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


def test_the_model_runs_a_toy_kind(toy, model) -> None:
    from tiny_model import token_ids

    from h2o.model.answer import row_perplexity, score_answer, score_cells, shared_stop

    ids = token_ids(140, seed=5)
    prompt, answer = ids[:120], ids[120:126]
    # keeping at least the whole prompt is the full cache, to the last digit
    whole = score_answer(model, prompt, answer, Row.parse("first@200"), max_new=3)
    full = score_answer(model, prompt, answer, Row.parse("full"), max_new=3)
    assert whole.token_logprobs == full.token_logprobs
    assert whole.produced_ids == full.produced_ids
    # keeping the first 40: a span inside them is held by every head, one after them by none
    row = Row.parse("first@40")
    inside = score_answer(model, prompt, answer, row, needle_span=(5, 20), max_new=3)
    after = score_answer(model, prompt, answer, row, needle_span=(60, 70), max_new=0)
    assert inside.held == [1.0] * model.config.n_layers
    assert after.held == [0.0] * model.config.n_layers
    assert inside.kv_bytes == row.kv_bytes(model.config, len(prompt))
    assert inside.token_logprobs != full.token_logprobs
    # prompts sharing a prefix start from one reading: the same scores as one at a time
    long = token_ids(300, seed=6)  # two prompts sharing their first 200 tokens (a block: 128)
    cells = [(long[:260], answer, (5, 20)), (long[:200] + long[261:290], answer, (5, 20))]
    assert shared_stop(cells[0][0], cells[1][0], row) == 128
    shared = score_cells(model, cells, row, max_new=3)
    alone = [score_answer(model, p, a, row, needle_span=s, max_new=3) for p, a, s in cells]
    for s, a in zip(shared, alone, strict=True):
        assert (s.token_logprobs, s.produced_ids, s.held) == (
            a.token_logprobs,
            a.produced_ids,
            a.held,
        )
    with pytest.raises(ValueError, match="no closed-loop perplexity"):
        row_perplexity(model, ids, row)


def test_the_kinds_come_in_their_rank_order(toy) -> None:
    """Tables list the kinds by their class's rank: the built-in ones first (the full cache,
    eviction, the presses, Quest, KIVI-style), a kind registered later after them."""
    from app.needle.grid import row_order
    from h2o.model import rows

    assert kinds()[-1] == "first"
    assert kinds()[:-1] == rows.KINDS and rows.KINDS[0] == "full" and rows.KINDS[-1] == "kivi"
    ranks = [caches.CACHE_KINDS[k].rank for k in kinds()]
    assert ranks == sorted(ranks)
    first, kivi = (SimpleNamespace(kind=k, row=k) for k in ("first", "kivi"))
    assert row_order(kivi) < row_order(first)


def test_the_app_reads_a_toy_kind_from_the_library(toy) -> None:
    from app.needle.data import parse_cell
    from app.needle.frontier import accuracy_points, cache_facts
    from h2o.needle.cells import row_fields

    line = {
        **row_fields("first@64"),
        "length": 512,
        "depth": 50,
        "needle": "orange-padlock",
        "question": "What is the code of the orange padlock?",
        "expected": "1449",
        "produced": "1449",
        "correct": True,
        "logprob": -0.5,
        "held": [1.0],
        "kv_bytes": 1000,
        "prompt_tokens": 500,
        "needle_span": [18, 34],
        "seconds": 1.0,
    }
    cell = parse_cell(line)
    (point,) = accuracy_points([cell], 512)
    assert point.group == "evict" and point.family == "First tokens"
    assert cache_facts(point) == ("first", None, 0)
    from app.figures.needle import family_style

    style = family_style("evict", "first", None, None, 0)  # drawn as its class says
    assert (style["color"], style["symbol"]) == ("#8C564B", "x")
