"""The needles, the answer matcher and the haystacks (h2o.needle). Haystacks are
built with the tiny GGUF's byte-level tokenizer here, and with SmolLM2's own in the
``model``-marked tests (tokenizer only: fast)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from model_marks import needs_model
from tiny_model import write_tiny_gguf

from h2o.model import SmolLM
from h2o.needle.cells import cell_needles
from h2o.needle.haystack import (
    DEPTHS,
    HEAD,
    LENGTHS,
    TEXTS_DIR,
    build_prompt,
    sentence_pieces,
    source_text,
    tail,
)
from h2o.needle.needles import NEEDLES, first_line, is_correct, needle


# -- the needles ---------------------------------------------------------------------------------
def test_at_least_twenty_distinct_facts_of_one_shape():
    assert len(NEEDLES) >= 20
    assert len({n.id for n in NEEDLES}) == len(NEEDLES)
    assert len({n.value for n in NEEDLES}) == len(NEEDLES)
    assert len({(n.colour, n.thing) for n in NEEDLES}) == len(NEEDLES)
    for n in NEEDLES:
        assert re.fullmatch(r"[0-9]{4}", n.value)
        assert n.sentence == f"The code of the {n.colour} {n.thing} is {n.value}."
        assert n.question == f"What is the code of the {n.colour} {n.thing}?"
        assert n.value not in n.question


def test_the_texts_cannot_suggest_a_code():
    for name in ("library.txt", "lighthouse.txt"):
        assert not re.search(r"[0-9]", (TEXTS_DIR / name).read_text(encoding="utf-8"))


def test_needle_lookup():
    assert needle("green-locker").value == "9237"
    assert needle(0) is NEEDLES[0]
    with pytest.raises(ValueError, match="unknown needle 'pink-elephant'"):
        needle("pink-elephant")
    with pytest.raises(ValueError, match="out of range"):
        needle(len(NEEDLES))


# -- the matcher ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "produced",
    ["9237", "9237.", " 9237.", "9237. This", "is 9237", '"9237".', "code 9237, yes", "\n 9237\n"],
)
def test_matcher_accepts_the_code_as_a_whole_number(produced):
    assert is_correct(produced, "9237")


@pytest.mark.parametrize(
    "produced",
    ["19237", "92370", "9237x", "x9237", "923 7", "9 2 3 7", "", "a code", "9238."],
)
def test_matcher_refuses_a_longer_number_a_word_or_another_code(produced):
    assert not is_correct(produced, "9237")


def test_matcher_reads_only_the_first_line():
    assert not is_correct("I do not know.\n9237", "9237")
    assert is_correct("\n\n9237.\nmore", "9237")  # leading blank lines skipped
    assert first_line("\n  a b \nc") == "a b"
    assert first_line("   \n") == ""


def test_matcher_refuses_an_empty_expected_answer():
    with pytest.raises(ValueError, match="expected answer is empty"):
        is_correct("9237", "")


# -- the rotation --------------------------------------------------------------------------------
def test_one_needle_per_standard_cell_asks_twenty_different_facts():
    ids = [cell_needles(n, d)[0] for n in LENGTHS for d in DEPTHS]
    assert len(ids) == 20 and len(set(ids)) == 20
    assert cell_needles(512, 0, 3) == [n.id for n in NEEDLES[:3]]
    assert cell_needles(700, 33, 2) == cell_needles(700, 33, 2)  # off-grid: fixed, repeatable
    with pytest.raises(ValueError, match="needles per cell"):
        cell_needles(512, 0, 0)


# -- haystacks -----------------------------------------------------------------------------------
def test_sentence_pieces_join_back_and_end_at_sentence_ends():
    text = source_text()
    pieces = sentence_pieces(text)
    assert "".join(pieces) == text
    assert text.startswith("\n\nWhat a Library Throws Away")
    for p in pieces[:-1]:
        assert p.rstrip()[-1] in '.!?"”’)' or "\n" not in p.strip(), p
    for p in pieces[1:]:
        assert p[0] in " \n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> SmolLM:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return SmolLM.load(path)


def _check_prompt(model: SmolLM, nd, length: int, depth: int) -> tuple[int, int]:
    p = build_prompt(model.encode, nd, length, depth)
    assert len(p.ids) <= length
    lo, hi = p.needle_span
    assert model.decode(p.ids[lo:hi]).strip() == nd.sentence
    # The pieces are the tokenization of the whole prompt, answer included.
    text = model.decode(p.ids)
    assert model.encode(text) == p.ids
    assert model.encode(text + nd.value) == p.ids + p.answer_ids
    assert model.decode(p.answer_ids) == nd.value
    assert text.startswith(HEAD) and text.endswith(tail(nd))
    # the question a compressed context reads after the compression: the tail's own tokens
    assert p.ids[len(p.ids) - p.question_tokens :] == model.encode(tail(nd))
    assert text.endswith(f"{nd.question}<|im_end|>\n<|im_start|>assistant\n{nd.sentence[:-5]}")
    # Sentence boundary: the needle follows a sentence end (or opens the text) and is followed
    # by whitespace, so no sentence of the haystack is cut.
    before = model.decode(p.ids[:lo])
    after = model.decode(p.ids[hi:])
    assert before.endswith(("Read the document.", ".", "!", "?", '"', "”", "’"))
    assert after[:1] in (" ", "\n")
    return lo, len(p.ids)


@pytest.mark.parametrize("length", [1024, 2048])
def test_tiny_prompts_put_the_needle_at_each_depth(tiny, length):
    nd = NEEDLES[3]
    starts = []
    for depth in DEPTHS:
        lo, _ = _check_prompt(tiny, nd, length, depth)
        starts.append(lo)
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    head = len(tiny.encode(HEAD))
    assert starts[0] == head  # depth 0: right after the instruction
    p = build_prompt(tiny.encode, nd, length, 100)
    assert p.needle_span[1] == len(p.ids) - len(tiny.encode(tail(nd)))  # depth 100: at the end


def test_depth_is_the_nearest_sentence_boundary(tiny):
    p = build_prompt(tiny.encode, NEEDLES[0], 1024, 50)
    head = len(tiny.encode(HEAD))
    pos = p.needle_span[0] - head  # tokens of haystack before the needle
    pieces = [len(tiny.encode(s)) for s in sentence_pieces(source_text())]
    bounds = [sum(pieces[:i]) for i in range(len(pieces) + 1)]
    bounds = [b for b in bounds if b <= p.haystack_tokens]
    best = min(abs(b - p.haystack_tokens / 2) for b in bounds)
    assert abs(pos - p.haystack_tokens / 2) == best


def test_bad_cells_are_refused(tiny):
    with pytest.raises(ValueError, match="depth must be an integer percent"):
        build_prompt(tiny.encode, NEEDLES[0], 512, 101)
    with pytest.raises(ValueError, match="length must be an integer >= 64"):
        build_prompt(tiny.encode, NEEDLES[0], 10, 50)
    with pytest.raises(ValueError, match="no room"):
        build_prompt(tiny.encode, NEEDLES[0], 200, 50)  # head + question take it all


@needs_model
def test_every_real_prompt_has_an_exact_needle_span():
    model = SmolLM.load()
    for i, (length, depth) in enumerate((n, d) for n in LENGTHS for d in DEPTHS):
        for j in range(4):  # every needle at 3 or 4 of the 20 cells (each prompt: 2 encodes)
            _check_prompt(model, NEEDLES[(i * 4 + j) % len(NEEDLES)], length, depth)
    p = build_prompt(model.encode, NEEDLES[0], 2048, 50)
    assert len(p.ids) > 2000  # the haystack fills the length up to one sentence
    assert abs(p.depth_tokens - 0.5) < 0.02


def test_texts_dir_is_the_repository_one():
    assert Path(__file__).resolve().parents[1] / "traces" / "texts" == TEXTS_DIR
