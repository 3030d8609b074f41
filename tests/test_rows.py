"""Rows (h2o/model/rows.py): labels, families, refusals, and bytes counted by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from h2o.model.quant import KiviSpec, kivi_bytes
from h2o.model.rows import Row, parse_rows

CFG = SimpleNamespace(n_layers=2, n_kv_heads=3, head_dim=64)

LABELS = [
    "full",
    "h2o@128",
    "streaming-llm@64",
    "tova@256",
    "scissorhands@512",
    "sliding-window@64",
    "random@128",
    "snapkv@256",
    "h2o@128/pyramid",
    "tova@256/adaptive",
    "h2o@512/duo",
    "snapkv@256/duo",
    "kivi2",
    "kivi4",
    "kivi8",
    "kivi16",
    "kivi2+sinks",
    "kivi4+sinks8",
    "h2o@256+kivi4",
    "snapkv@256+kivi4",
    "h2o@128/pyramid+kivi2+sinks",
]


@pytest.mark.parametrize("label", LABELS)
def test_labels_round_trip(label) -> None:
    row = Row.parse(label)
    assert row.label == label
    assert Row.parse(row.label) == row


def test_fields() -> None:
    assert Row.parse("full") == Row("full")
    assert Row.parse("h2o@128") == Row("policy", "h2o", 128)
    assert Row.parse("snapkv@256") == Row("snapkv", "snapkv", 256)
    assert Row.parse("h2o@128/pyramid") == Row("policy", "h2o", 128, "pyramid")
    assert Row.parse("h2o@128/uniform") == Row("policy", "h2o", 128)
    assert Row.parse("kivi2+sinks") == Row("kivi", bits=2, sinks=4)
    assert Row.parse("h2o@256+kivi4") == Row("policy", "h2o", 256, bits=4)
    assert Row.parse(" snapkv@256+kivi4 ") == Row("snapkv", "snapkv", 256, bits=4)


@pytest.mark.parametrize(
    ("label", "family"),
    [
        ("full", "full cache"),
        ("kivi16", "full cache"),
        # a policy with a recent window names it, its class's default included
        ("h2o@64", "H2O, window 32"),
        ("h2o@512", "H2O, window 32"),
        ("scissorhands@64", "Scissorhands, window 32"),
        ("random@64", "Random, window 32"),
        ("h2o@64:prefill", "H2O (prefill mode), window 32"),
        # TOVA's window is its rule (the newest token alone): named only when a row sets it
        ("tova@64", "TOVA"),
        ("tova@64:w8", "TOVA, window 8"),
        ("streaming-llm@64", "StreamingLLM"),
        ("sliding-window@64", "Sliding window"),
        ("snapkv@64", "SnapKV"),
        ("h2o@64/pyramid", "H2O (pyramid), window 32"),
        ("kivi4", "KIVI-style 4-bit"),
        ("kivi2+sinks", "KIVI-style 2-bit + sinks"),
        ("h2o@256+kivi4", "H2O, window 32 + KIVI-style 4-bit"),
        ("snapkv@256+kivi4", "SnapKV + KIVI-style 4-bit"),
    ],
)
def test_families(label, family) -> None:
    assert Row.parse(label).family == family


def test_every_name_says_the_window_its_row_runs_with():
    """Every policy of the registry, at its class's default and with a window set: the name
    ends with the window the row's policy is built with, unless the window is the policy's own
    rule (its class's ``own_window``) and the row leaves it be."""
    from h2o.policies import POLICIES

    for name, cls in POLICIES.items():
        if cls.reads_trace:  # not a model row (K-norm reads a trace's key norms)
            continue
        row = Row.parse(f"{name}@64")
        w = row.recent_window
        if w is None:  # no recent window at all: none named
            assert ", window" not in row.family, name
            continue
        assert row.family.endswith(f", window {w}") != cls.own_window, name
        assert Row.parse(f"{name}@64:w8").family.endswith(", window 8"), name
        assert Row.parse(f"{name}@64:w50%").family.endswith(", window 50% of the budget"), name


def test_the_window_named_is_read_from_the_class(monkeypatch):
    from h2o.policies import POLICIES

    monkeypatch.setattr(POLICIES["scissorhands"], "default_recent_window", 48)
    assert Row.parse("scissorhands@64").family == "Scissorhands, window 48"
    monkeypatch.setattr(POLICIES["scissorhands"], "own_window", True)
    assert Row.parse("scissorhands@64").family == "Scissorhands"
    assert Row.parse("scissorhands@64:w8").family == "Scissorhands, window 8"


@pytest.mark.parametrize(
    ("label", "match"),
    [
        ("", "empty"),
        ("h2o", "cannot read"),
        ("nosuch@64", "unknown policy 'nosuch'"),
        ("h2o@0", "budget"),
        ("h2o@64/nosuch", "unknown allocation 'nosuch'"),
        ("kivi3", "bits"),
        ("kivi16+sinks", "sinks change nothing"),
        ("full+kivi4", "takes no bits"),
        ("kivi4+kivi2", "cannot read"),
        ("kivi4+sinks+sinks", "cannot read"),
        ("h2o@64+sinks", "cannot read"),
        ("h2o@64+kivi16", "2, 4 or 8"),
        ("kivi4+sinks0", "sinks0"),
        ("h2o@-5", "cannot read"),
    ],
)
def test_bad_labels_are_refused_naming_the_problem(label, match) -> None:
    with pytest.raises(ValueError, match=match):
        Row.parse(label)


def test_bad_fields_are_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        Row("nosuch")
    with pytest.raises(ValueError, match="takes no budget"):
        Row("kivi", bits=4, budget=4)
    with pytest.raises(ValueError, match="needs bits"):
        Row("kivi")
    with pytest.raises(ValueError, match="quantized"):
        Row("policy", "h2o", 64, sinks=4)


# -- options: each kind's -------------------------------------------------------------------------
def test_a_row_keeps_its_kinds_options() -> None:
    """A row holds the options its kind (or its quantization) reads, only those named; an
    unset one reads as its kind declares it."""
    row = Row.parse("h2o@256:w64+kivi4:r32:qprompt")
    assert row.options == (("quantized_prompt", True), ("residual", 32), ("window", 64))
    assert row.label == "h2o@256:w64+kivi4:r32:qprompt" and Row.parse(row.label) == row
    assert row.family == "H2O, window 64 + KIVI-style 4-bit, residual 32, prompt read quantized"
    assert row.kivi == KiviSpec(4, 0, residual=32)
    assert Row.parse("h2o@128:w50%") == Row("policy", "h2o", 128, options={"window_pct": 50})
    assert Row.parse("h2o@128:w50%") == Row("policy", "h2o", 128, options=[("window_pct", 50)])
    # naming the value an option has unset, or one that runs the same, is the same row
    assert Row("policy", "h2o", 128, options={"mode": "decode"}) == Row.parse("h2o@128")
    assert Row.parse("snapkv@256:max5").options == () == Row.parse("kivi4:r128").options
    plain = Row.parse("snapkv@256")
    assert (plain.option("pooling"), plain.option("mode"), plain.option("residual")) == (
        "max5",
        "decode",
        128,
    )
    with pytest.raises(ValueError, match="no kind of cache takes an option 'nosuch'"):
        Row("full", options={"nosuch": 1})
    with pytest.raises(ValueError, match="no kind of cache takes an option 'nosuch'"):
        plain.option("nosuch")


@pytest.mark.parametrize(
    ("label", "message"),
    [
        # a token the row's kind does not read (another kind's, or one named twice): one
        # refusal naming the row, the token and what the kind reads
        (
            "snapkv@128:w8",
            "row 'snapkv@128:w8': cannot read option ':w8' (avgK/maxK for snapkv's pooling)",
        ),
        (
            "h2o@128:max5",
            "row 'h2o@128:max5': cannot read option ':max5' (wN or wN% for a recent window, "
            "prefill for h2o's prefill mode)",
        ),
        (
            "h2o@128:w64:w50%",
            "row 'h2o@128:w64:w50%': cannot read option ':w50%' (wN or wN% for a recent "
            "window, prefill for h2o's prefill mode)",
        ),
        (
            "h2o@128+kivi4:r32:r64",
            "row 'h2o@128+kivi4:r32:r64': cannot read option ':r64' (rN for the "
            "full-precision residual, qprompt to read the prompt through the quantized cache)",
        ),
        ("knorm@128:w8", "row 'knorm@128:w8': cannot read option ':w8' (knorm takes no options)"),
        ("full+sinks", "row 'full+sinks': cannot read '+sinks' here"),
        ("quest@128:w8", "row 'quest@128:w8': quest takes no allocation and no options"),
        # an option the kind reads, on a policy that has no such setting
        (
            "streaming-llm@128:w8",
            "streaming-llm has no recent window to set (:wN applies to the scored policies: "
            "h2o, scissorhands, tova, random)",
        ),
        (
            "tova@128:prefill",
            "tova has no prefill mode (only h2o: the authors' generation code chooses its "
            "heavy hitters from the prompt's attention)",
        ),
        ("kivi16:qprompt", "a residual or qprompt applies to a quantized cache (kivi2/4/8)"),
        ("kivi4:r48", "the residual must be a positive multiple of the group (32), got 48"),
        ("snapkv@0", "budget must be a positive integer, got 0"),
        ("h2o@128:w8+kivi16", "a combination needs 2, 4 or 8 bits (16 is the policy alone)"),
    ],
)
def test_option_refusals_word_for_word(label, message) -> None:
    with pytest.raises(ValueError) as err:
        Row.parse(label)
    assert str(err.value).startswith(message)


def test_an_option_of_another_kind_given_as_a_field_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^a policy row \(h2o\) takes no option 'pooling'$"):
        Row("policy", "h2o", 128, options={"pooling": "avg5"})
    with pytest.raises(ValueError, match=r"^a snapkv row \(snapkv\) takes no option 'window'$"):
        Row("snapkv", "snapkv", 128, options={"window": 8})


def test_parse_rows() -> None:
    rows = parse_rows("full, h2o@128,kivi4")
    assert [r.label for r in rows] == ["full", "h2o@128", "kivi4"]
    with pytest.raises(ValueError, match="twice"):
        parse_rows("full,h2o@128,h2o@128/uniform")
    with pytest.raises(ValueError, match="empty row"):
        parse_rows("full,,kivi4")
    with pytest.raises(ValueError, match="unknown policy"):
        parse_rows("full,nosuch@3")


# -- bytes by hand ---------------------------------------------------------------------------------
def test_full_cache_bytes() -> None:
    # 2 layers x 3 KV heads x 1000 tokens x (key + value) x 64 numbers x 2 bytes (fp16)
    assert Row("full").kv_bytes(CFG, 1000) == 2 * 3 * 1000 * 2 * 64 * 2
    assert Row.parse("kivi16").kv_bytes(CFG, 1000) == Row("full").kv_bytes(CFG, 1000)


def test_policy_bytes_count_the_bookkeeping() -> None:
    # H2O keeps 128 slots a head: 256 bytes of fp16 key + value, and 13 of its own
    # (int32 position, float64 score, one byte of scratch)
    assert Row.parse("h2o@128").kv_bytes(CFG, 1000) == 6 * 128 * (256 + 13)
    # before the budget fills it holds every token
    assert Row.parse("h2o@128").kv_bytes(CFG, 100) == 6 * 100 * (256 + 13)
    # a ring of positions and SnapKV's one-shot choice keep no per-slot state
    assert Row.parse("streaming-llm@128").kv_bytes(CFG, 1000) == 6 * 128 * 256
    assert Row.parse("snapkv@128").kv_bytes(CFG, 1000) == 6 * 128 * 256


def test_allocations_hold_the_same_total() -> None:
    for alloc in ("pyramid", "adaptive", "duo"):
        row = Row.parse(f"h2o@128/{alloc}")
        assert row.slots(CFG, 10_000).sum() == 6 * 128
        assert row.kv_bytes(CFG, 10_000) == Row.parse("h2o@128").kv_bytes(CFG, 10_000)
    # short texts: a head never holds more than the tokens there are
    pyr = Row.parse("h2o@128/pyramid").slots(CFG, 100)
    assert pyr.max() == 100 and pyr.sum() < 6 * 100


def test_kivi_and_combination_bytes() -> None:
    assert Row.parse("kivi4:r32").kv_bytes(CFG, 70) == 6 * 8944  # test_quant's hand count
    assert Row.parse("kivi2+sinks").kv_bytes(CFG, 70) == kivi_bytes(KiviSpec(2, 4), 70, 64, 6)
    # the least 128 slots of 1000 tokens can hold at 4 bits (the newest 128: 872..999), plus
    # H2O's 13 bytes a slot: keys coded below 992 (872..991: 120 in groups 27..30), values
    # coded below 968 (872..967: 96); 8 keys and 32 values in fp16
    per_head = 4 * 64 * (120 + 96) // 8 + (4 * 64 + 96 * 2) * 4 + (8 + 32) * 64 * 2
    assert Row.parse("h2o@128+kivi4:r32").kv_bytes(CFG, 1000) == 6 * (per_head + 128 * 13)
    assert Row.parse("snapkv@128+kivi4:r32").kv_bytes(CFG, 1000) == 6 * per_head
    # equal memory: 4 bits hold about 3.4x the tokens of 16 bits here
    full128 = Row.parse("h2o@128").kv_bytes(CFG, 1000)
    assert Row.parse("h2o@128+kivi4:r32").kv_bytes(CFG, 1000) < full128 / 2


def test_the_papers_residual_in_the_bytes_by_hand() -> None:
    """Residual 128 (the default): the newest 256 of 1000 tokens (744..999) at 4 bits — keys
    coded below 896 (744..895: 152 in groups 23..27), values below 872 (744..871: 128); 104
    keys and 128 values in fp16."""
    per_head = 4 * 64 * (152 + 128) // 8 + (5 * 64 + 128 * 2) * 4 + (104 + 128) * 64 * 2
    assert Row.parse("h2o@256+kivi4").kv_bytes(CFG, 1000) == 6 * (per_head + 256 * 13)
    assert Row.parse("h2o@256+kivi4").kv_bytes(CFG, 1000) > Row.parse("h2o@256+kivi4:r32").kv_bytes(
        CFG, 1000
    )
    # the prompt read quantized holds the same bytes: only what the prompt's queries read differs
    assert Row.parse("kivi4:qprompt").kv_bytes(CFG, 1000) == Row.parse("kivi4").kv_bytes(CFG, 1000)


def test_bytes_of_a_run_count_its_kept_sets() -> None:
    row = Row.parse("h2o@128+kivi4:r32")
    # kept contiguous (no eviction yet, or the newest): the count without kept sets
    kept = [[np.arange(100)] * 3] * 2
    assert row.kv_bytes(CFG, 100, kept=kept) == row.kv_bytes(CFG, 100)
    kept = [[np.arange(872, 1000)] * 3] * 2
    assert row.kv_bytes(CFG, 1000, kept=kept) == row.kv_bytes(CFG, 1000)
    # thinned groups keep their scales: more than the re-packed count, by hand per head
    thin = np.r_[np.arange(0, 960, 10), np.arange(968, 1000)]  # 96 + 32 = 128 slots
    kept = [[thin] * 3] * 2
    # keys coded below 992: 96 + 24 = 120 in 31 groups; values coded below 968: 96
    per_head = 4 * 64 * (120 + 96) // 8 + (31 * 64 + 96 * 2) * 4 + (8 + 32) * 128
    assert row.kv_bytes(CFG, 1000, kept=kept) == 6 * (per_head + 128 * 13)
    assert row.kv_bytes(CFG, 1000, kept=kept) > row.kv_bytes(CFG, 1000)
    # a policy alone: its slots, whatever they are
    assert Row.parse("h2o@128").kv_bytes(CFG, 1000, kept=kept) == 6 * 128 * (256 + 13)


def test_slots_shape() -> None:
    s = Row.parse("tova@64").slots(CFG, 1000)
    assert s.shape == (2, 3) and np.all(s == 64)
