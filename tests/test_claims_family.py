"""The family since H2O (app/needle/family.py): which rows it speaks of comes from the kinds of
cache, and every number in its sentences is recounted here from the cells — on made-up cells
whose answer is known, and on the shipped grid for every row the page shows."""

from __future__ import annotations

import re

import pytest

from app.needle import family
from app.needle.frontier import TOLERANCE
from h2o.model.rows import Row
from h2o.needle import results
from h2o.needle.cells import row_fields
from h2o.stats import paired


def _cell(
    row: str, length: int, depth: int, needle: str, ok: bool, kv: int = 1000, read=None
) -> results.Cell:
    f = row_fields(row)
    return results.Cell(
        row=f["row"], family=f["family"], kind=f["kind"], policy=f["policy"],
        budget=f["budget"], allocation=f["allocation"], bits=f["bits"], sinks=f["sinks"],
        length=length, depth=depth, needle=needle, question="q", expected="1", produced="1",
        correct=ok, logprob=-1.0, held=None, kv_bytes=kv, seconds=1.0, prompt_tokens=500,
        read_bytes=read,
    )  # fmt: skip


def test_rows_come_from_the_kinds_of_cache() -> None:
    cells = [
        _cell(r, 512, 0, "a", True)
        for r in ("full", "knorm@128", "snapkv@128", "h2o@128", "snapkv@256+kivi4", "knorm@256")
    ]
    assert family.family_rows(cells) == ["knorm@128", "knorm@256"]
    assert family.family_rows(cells, budget=256) == ["knorm@256"]
    assert family.partner("knorm@128") == "snapkv@128"


def test_a_difference_is_said_only_when_the_paired_test_supports_it() -> None:
    """The unit is the position (a length and depth): 30 cells at 10 positions, all won by
    SnapKV, is 2 / 2**10; at one length (5 positions) the rows are not compared: fewer than the
    10 positions a comparison rests on (no sign test on 5 could reach p < 0.05)."""
    keys = [(L, d, n) for L in (512, 1024) for d in (0, 25, 50, 75, 100) for n in "abc"]
    snap = [_cell("snapkv@256", L, d, n, True) for L, d, n in keys]
    knorm = [_cell("knorm@256", L, d, n, False) for L, d, n in keys]
    said = family.family_sentence(snap + knorm, "knorm@256")
    assert "answers 0 of 30 needles, at 0 of 10 positions" in said
    assert "it answers 0 and SnapKV 30 of 30 needles" in said
    assert f"SnapKV answers more (exact sign test p = {2 / 2**10:.3f})" in said
    assert "the same memory (2 bytes a token)" in said
    # at one length: 15 needles lost, but 5 positions, fewer than 10: not compared
    short = [c for c in snap + knorm if c.length == 512]
    said = family.family_sentence(short, "knorm@256")
    assert "answers more" not in said and "sign test" not in said
    assert said.endswith(": not compared (5 positions, fewer than 10).")
    # two cells apart, at two positions: not a difference
    near = [_cell("knorm@256", L, d, n, i >= 2 and i != 5) for i, (L, d, n) in enumerate(keys)]
    said = family.family_sentence(snap + near, "knorm@256")
    assert "answers 27 and SnapKV 30 of 30 needles" in said
    assert "not distinguishable with n = 10 positions" in said
    # bytes that differ are both stated
    fat = [_cell("knorm@256", L, d, n, False, kv=2000) for L, d, n in keys]
    assert "4 bytes a token against SnapKV's 2" in family.family_sentence(snap + fat, "knorm@256")
    # no partner in the file: said so
    alone = family.family_sentence(knorm, "knorm@256")
    assert alone.endswith("the file has no snapkv@256 cell to compare it with.")


def _shipped() -> list[results.Cell]:
    from app.needle import shipped

    loaded, _ = shipped.grid()
    if not loaded.records:
        pytest.skip("no needle grid in this copy")
    return loaded.records


@pytest.mark.parametrize("lesson", [False, True])
def test_every_sentence_on_the_shipped_grid(lesson) -> None:
    """The page's sentences (every length), and the lesson's (256 slots, up to 2,048 tokens)."""
    from app.lesson.needle import LESSON_BUDGET, LESSON_MAX_LENGTH

    cells = _shipped()
    budget = LESSON_BUDGET if lesson else None
    if lesson:
        cells = [c for c in cells if c.length <= LESSON_MAX_LENGTH]
    rows = family.family_rows(cells, budget)
    assert "knorm@256" in rows and ("knorm@128" in rows) != lesson
    assert family.family_sentences(cells, budget) == [
        family.family_sentence(cells, r) for r in rows
    ]
    for row in rows:
        said = family.family_sentence(cells, row)
        mine = [c for c in cells if c.row == row]
        assert Row.parse(row).cache.since_h2o in said
        npos = len({(c.length, c.depth) for c in mine})
        assert f"it answers {sum(c.correct for c in mine)} of {len(mine)} needles, at " in said
        assert f" of {npos} positions (" in said
        if Row.parse(row).group == "select":
            continue  # compared by bytes: test_a_selection_is_compared_at_equal_bytes
        other = {(c.length, c.depth, c.needle): c for c in cells if c.row == family.partner(row)}
        ours = {(c.length, c.depth, c.needle): c for c in mine}
        keys = [k for k in ours if k in other]
        if not keys:
            assert "has no" in said
            continue
        t = paired({k: ours[k].correct for k in keys}, {k: other[k].correct for k in keys})
        assert t.n == len({k[:2] for k in keys})
        assert f"On the {t.n} positions" in said
        assert f"it answers {t.right_a} and SnapKV {t.right_b} of {len(keys)} needles" in said
        assert ("answers more" in said) == (t.p < 0.05)
        a = sum(ours[k].kv_bytes / ours[k].tokens for k in keys) / len(keys)
        b = sum(other[k].kv_bytes / other[k].tokens for k in keys) / len(keys)
        assert ("the same memory" in said) == (abs(a - b) <= TOLERANCE * b)
        assert re.search(r"p (=|<) 0\.\d{3}", said)
    for row in rows:  # what a step reads, where a row reads a part of what it holds
        said, mine = family.family_sentence(cells, row), [c for c in cells if c.row == row]
        partial = any(c.read_bytes is not None and c.read_bytes != c.kv_bytes for c in mine)
        assert ("a decoding step reads" in said) == partial == (Row.parse(row).group == "select")
        if partial:
            held = sum(c.kv_bytes / c.tokens for c in mine) / len(mine)
            read = sum(c.read_bytes / c.tokens for c in mine) / len(mine)
            assert f"it holds {held:,.0f} bytes a token" in said
            assert f"reads {read:,.0f} of them ({read / held:.0%})" in said
            assert "SnapKV at the same budget" not in said  # its reads are not SnapKV's


def test_a_selection_is_compared_at_equal_bytes() -> None:
    """Quest at 128 reads 2 bytes a token of the 8 it holds; SnapKV at 128 holds 1 (not what it
    reads), SnapKV at 256 holds 2 (what it reads, within 2 %), none holds 8. Ten positions: Quest
    answers all, SnapKV at 256 all but two positions: 2 won, 8 tied, p = 0.5."""
    keys = [(L, d, "a") for L in (512, 1024) for d in (0, 25, 50, 75, 100)]
    quest = [_cell("quest@128", L, d, n, True, kv=4000, read=1000) for L, d, n in keys]
    snap128 = [_cell("snapkv@128", L, d, n, False, kv=500) for L, d, n in keys]
    snap256 = [_cell("snapkv@256", L, d, n, d != 0, kv=1000) for L, d, n in keys]
    said = family.family_sentence(quest + snap128 + snap256, "quest@128")
    assert "At about equal bytes read, beside snapkv@256 (which holds 2 bytes a token" in said
    assert "at 10 positions it answers 10 and SnapKV 8 of 10 needles" in said
    assert "(positions 2 won by the first, 0 by the second, 8 tied of 10)" in said
    assert "not distinguishable with n = 10 positions (exact sign test p = 0.500)" in said
    assert "snapkv@128" not in said  # the same budget, a quarter of the bytes a step reads
    assert "At equal bytes held: no SnapKV row with its cells holds within 2% of the 8 bytes" in (
        said
    )
    # without the matching row: no verdict on either basis
    said = family.family_sentence(quest + snap128, "quest@128")
    assert "At equal bytes read: no SnapKV row" in said and "answers more" not in said
    # the shipped grid: Quest at 128 beside the SnapKV row nearest what a step of it reads
    cells = _shipped()
    mine = [c for c in cells if c.row == "quest@128"]
    read = sum(c.bytes_read / c.tokens for c in mine) / len(mine)
    said = family.family_sentence(cells, "quest@128")
    assert f"against the {read:,.0f} it reads" in said or "At equal bytes read: no" in said
    assert "SnapKV at the same budget" not in said


def test_a_row_that_reads_a_part_says_what_it_reads() -> None:
    keys = [(512, d, n) for d in (0, 50) for n in "ab"]
    quest = [_cell("quest@128", L, d, n, True, kv=4000, read=1000) for L, d, n in keys]
    said = family.family_sentence(quest, "quest@128")
    # 4,000 / 500 and 1,000 / 500 bytes a token of the prompt
    assert "it holds 8 bytes a token (every key and its page summaries)" in said
    assert "a decoding step reads 2 of them (25%)" in said
    knorm = [_cell("knorm@128", L, d, n, True, kv=4000, read=4000) for L, d, n in keys]
    assert "a decoding step reads" not in family.family_sentence(knorm + quest, "knorm@128")
    # a line without the field reads all it holds
    old = [_cell("quest@128", L, d, n, True, kv=4000) for L, d, n in keys]
    assert "a decoding step reads" not in family.family_sentence(old, "quest@128")


def test_how_they_run_says_each_pipeline_and_where_a_decode_time_twin_steps() -> None:
    """The presses compress before the question, SnapKV reads the question first, a selection
    reads a part of a whole cache; a method whose score a registry policy also evicts by (K-norm)
    is pointed to Step through, with the trace member that policy reads — from the classes."""
    import h2o
    from h2o.model import caches

    def how(*rows: str) -> str:
        return family.how_they_run([_cell(r, 512, 0, "a", True) for r in (*rows, "snapkv@128")])

    knorm = how("knorm@128")
    assert "K-norm compresses the context and then reads the question" in knorm
    assert "SnapKV reads the question first" in knorm
    policy = h2o.POLICIES[caches.KnormCache.decode_policy]
    assert f"{policy.label} also runs as the model decodes" in knorm
    assert f"carry each position's `{policy.reads_trace[0]}`" in knorm
    kvzip = how("kvzip@128")
    assert "KVzip compresses" in kvzip and "KVzip also runs as the model decodes" in kvzip
    # its stepped score needs the whole text: said where it is pointed to, from its class
    assert f"{h2o.POLICIES['kvzip'].hindsight}." in kvzip and "not yet read" in kvzip
    assert "not yet read" not in knorm  # K-norm's score is known when its key is written
    ea = how("expected-attention@128")
    assert "Expected Attention also runs as the model decodes" in ea and "`vectors`" in ea
    quest = how("quest@128")
    assert "as the model decodes" not in quest and "Quest also steps in Step through" in quest
    assert "the pages it reads, and nothing leaves the cache" in quest
    both = how("knorm@128", "kvzip@128")
    assert "K-norm and KVzip compress the context and then read the question" in both
    # kvpress's pipeline, not necessarily the authors' own code (K-norm's reads the question
    # with the context): the page does not say they run as their authors run them
    assert "as its authors run it" not in both and "as kvpress runs its presses" in both
    assert "Quest evicts nothing" in how("quest@128")
    assert family.how_they_run([_cell("h2o@128", 512, 0, "a", True)]) == ""


def test_the_model_refuses_a_trace_reading_policy_and_names_its_row() -> None:
    with pytest.raises(ValueError, match="knorm@B runs K-norm on the model"):
        Row.parse("key-norm@128")


def test_the_methods_without_a_perplexity_are_named_by_their_kinds() -> None:
    """The one-shot kinds (no closed loop) of the needle file that the perplexity chart lacks
    are named, each once (its plain row's name), and no other: a kind the chart has is not, nor
    a kind that runs over a text (K-norm, KVzip, Expected Attention: their stepped policy)."""
    from app.needle import claims

    cells = [
        _cell(r, 512, 0, "a", True)
        for r in ("full", "h2o@128", "snapkv@128/pyramid", "snapkv@128", "knorm@128", "quest@128")
    ]
    said = claims.one_shot_note(cells, ["full", "h2o@128", "quest@128"])
    assert said.startswith("SnapKV compresses a prompt once")
    assert "it is on the needle chart" in said
    assert "SnapKV (pyramid)" not in said and "K-norm" not in said and "Quest" not in said
    assert claims.one_shot_note([_cell("kvzip@128", 512, 0, "a", True)], []) == ""
    assert claims.one_shot_note(cells[:2], ["full"]) == ""
    # the kinds this note names have no closed loop, by their class; the others have one
    assert not Row.parse("snapkv@128").cache.closed_loop
    for r in ("knorm@128", "kvzip@128", "expected-attention@128", "quest@128", "h2o@128"):
        assert Row.parse(r).cache.closed_loop, r


def test_the_stepped_one_shot_methods_are_named_with_what_they_know_and_hold() -> None:
    """The chart's rows whose authors compress once are named as stepped, with the window their
    policy's class protects, KVzip's hindsight and Expected Attention's statistics; nothing for a
    chart without them."""
    from app.needle import claims
    from h2o.policies import POLICIES

    assert claims.stepped_note(["full", "h2o@128", "quest@128", "snapkv@128"]) == ""
    one = claims.stepped_note(["h2o@128", "knorm@128", "knorm@256"])
    assert one.startswith("K-norm compresses a prompt once as its authors run it")
    w = POLICIES["key-norm"].default_recent_window
    assert f"a recent window of {w}. " in one and "hindsight" not in one
    assert "statistics" not in one and "KVzip" not in one
    assert "anew every" not in one  # K-norm's score never changes: nothing to rescore
    all3 = claims.stepped_note(["expected-attention@64", "knorm@64", "kvzip@64"])
    assert all3.startswith("K-norm, KVzip and Expected Attention compress a prompt once")
    assert POLICIES["kvzip"].hindsight in all3
    assert "Expected Attention also holds statistics of the queries" in all3
    ea = POLICIES["expected-attention"]()  # the chart's rows: the class at its defaults
    assert ea.rescore_every > 1
    assert f"Expected Attention scores its kept positions anew every {ea.rescore_every} " in all3
    assert ea.score_note() in all3


def test_a_selection_on_the_perplexity_chart_says_what_a_step_reads() -> None:
    """Quest's lines of the frontier file on the chart's texts (those with a full-cache line)
    say what the row holds and the share a step reads, from the lines' own numbers, a row on
    several texts by its mean over them; a row without a share, a row off the chart and a line
    on a text without a full-cache line say nothing."""
    from app.needle import claims, frontier
    from h2o.needle.results import FrontierRow

    def line(row: str, text: str = "a.txt", share: float | None = None) -> FrontierRow:
        r = Row.parse(row)
        return FrontierRow(
            row=row, family=r.family, kind=r.kind, policy=r.policy, budget=r.budget,
            allocation=None, bits=None, sinks=0, text=text, tokens=frontier.PPL_TOKENS,
            perplexity=30.0, kv_bytes=2048 * 24480, kv_bytes_per_token=24480.0, seconds=1.0,
            read_bytes=None if share is None else 1000, read_share=share,
        )  # fmt: skip

    records = [
        line("h2o@128"),
        line("full"),
        line("quest@128", share=0.4213),
        line("quest@256", text="other.txt", share=0.5),
        line("quest@512", share=0.7),
    ]
    on_chart = ["h2o@128", "quest@128", "quest@256", "quest@512"]
    said = claims.read_note(records, on_chart)
    assert said.startswith("A selection evicts nothing")
    assert "Quest holds 24,480 bytes a token after the text, and a step reads 42% at 128 " in said
    assert "slots (quest@128) and 70% at 512 slots (quest@512) of what it holds then, on " in said
    assert "then, on average over the text's steps." in said
    assert "quest@256" not in said and "H2O" not in said
    # on a second text with its full cache: each row's share is its mean over the two
    records += [
        line("full", "b.txt"),
        line("quest@128", "b.txt", 0.4),
        line("quest@512", "b.txt", 0.5),
    ]
    said = claims.read_note(records, on_chart)
    assert f"reads {(0.4213 + 0.4) / 2:.0%} at 128 slots (quest@128) and 60% at 512 slots" in said
    assert "then, on average over a text's steps and the 2 texts." in said
    assert claims.read_note(records[:1], ["h2o@128"]) == ""
