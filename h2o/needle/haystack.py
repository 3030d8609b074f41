"""Haystacks: the shipped texts cut to a token length, with one needle at a sentence boundary.

The haystack is ``library.txt`` followed by ``lighthouse.txt`` (``traces/texts/``; 2093 + 2110
tokens, enough for 4096), cut after the last whole sentence that fits. The needle goes in at the
sentence boundary nearest to ``depth`` percent of the haystack's tokens (0: before the first
sentence, 100: after the last). The prompt is built from separately tokenized pieces whose
seams are pre-token boundaries, so the needle's token span is exact; :func:`build_prompt`
checks that the pieces equal the tokenization of the whole prompt and refuses otherwise.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from h2o.needle.needles import Needle

TEXTS_DIR = Path(__file__).resolve().parents[2] / "traces" / "texts"
#: The haystack's sources, in order.
SOURCES: tuple[str, ...] = ("library.txt", "lighthouse.txt")
LENGTHS: tuple[int, ...] = (512, 1024, 2048, 4096)
DEPTHS: tuple[int, ...] = (0, 25, 50, 75, 100)

Encode = Callable[[str], list[int]]

# -- the prompt format -------------------------------------------------------------------------
# SmolLM2-135M-Instruct's chat turns, the document and the question in the user turn, and the
# assistant's answer started with the question's own words up to the space before the code: the
# model then only has to copy the digits (a 135M model asked a bare question, or ending at "is",
# often answers with words of its own: "is a code of the red safe"; measured, see the README).
SYSTEM = "You are a helpful assistant."
HEAD = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nRead the document."


def tail(needle: Needle) -> str:
    """What follows the haystack: the question, and the start of the assistant's answer."""
    return (
        f"\n\nAnswer from the document. {needle.question}<|im_end|>\n"
        f"<|im_start|>assistant\n{needle.subject[0].upper()}{needle.subject[1:]} is "
    )


def answer_text(needle: Needle) -> str:
    """The answer for the teacher-forced score: the code, after the prompt's "is "."""
    return needle.value


# -- sentences ---------------------------------------------------------------------------------
_BOUNDARY = re.compile(r"(?<=[.!?])(?=[ \n])|(?<=[.!?][\"”’)])(?=[ \n])")


@lru_cache(maxsize=4)
def source_text(sources: tuple[str, ...] = SOURCES) -> str:
    """The sources joined, each paragraph (the first included) led by a blank line."""
    parts = [(TEXTS_DIR / s).read_text(encoding="utf-8").strip() for s in sources]
    return "".join("\n\n" + p for p in parts)


def sentence_pieces(text: str) -> list[str]:
    """``text`` cut after every sentence end; each piece after the first starts with the
    whitespace that separated it from the previous sentence ("" joins them back)."""
    cuts = [m.start() for m in _BOUNDARY.finditer(text)]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@dataclass(frozen=True)
class Prompt:
    """One cell's prompt: its ids, where the needle's tokens are, and the answer's ids."""

    ids: list[int]
    needle_span: tuple[int, int]  # [start, stop) of the needle sentence's tokens in ``ids``
    answer_ids: list[int]
    haystack_tokens: int
    length: int  # the cell's nominal length; len(ids) <= length
    depth: int
    needle: Needle
    question_tokens: int  # the prompt's last tokens that are its question (:func:`tail`)

    @property
    def depth_tokens(self) -> float:
        """Where the needle starts, as a share of the prompt (0..1)."""
        return self.needle_span[0] / len(self.ids)


@lru_cache(maxsize=8)
def _pieces(encode: Encode, text: str) -> tuple[tuple[int, ...], ...]:
    """The token ids of every sentence piece (cached: a grid asks for them per cell)."""
    return tuple(tuple(encode(p)) for p in sentence_pieces(text))


def check_cell(length: int, depth: int) -> None:
    if not isinstance(length, int) or length < 64:
        raise ValueError(f"length must be an integer >= 64 tokens, got {length!r}")
    if not isinstance(depth, int) or not 0 <= depth <= 100:
        raise ValueError(f"depth must be an integer percent 0..100, got {depth!r}")


def _fit(pieces: Sequence[Sequence[int]], room: int, length: int) -> tuple[int, int, list[int]]:
    """How many whole sentences fit in ``room`` tokens, their tokens, and the token offset of
    each boundary between them (``ValueError`` if not one fits ``length``)."""
    kept, used = 0, 0
    while kept < len(pieces) and used + len(pieces[kept]) <= room:
        used += len(pieces[kept])
        kept += 1
    if kept == 0:
        raise ValueError(f"length {length} leaves no room for a sentence of the haystack")
    starts = [0]
    for p in pieces[:kept]:
        starts.append(starts[-1] + len(p))
    return kept, used, starts


def build_prompt(
    encode: Encode,
    needle: Needle,
    length: int,
    depth: int,
    sources: Sequence[str] = SOURCES,
) -> Prompt:
    """The prompt of one cell: at most ``length`` tokens, the needle at ``depth`` percent."""
    check_cell(length, depth)
    text = source_text(tuple(sources))
    pieces = _pieces(encode, text)
    head = encode(HEAD)
    end = encode(tail(needle))
    # At depth 0 the needle is a paragraph of its own before the text; elsewhere it follows a
    # sentence after a space. Either way its seams are pre-token boundaries.
    facts = [encode(_fact_text(needle, first)) for first in (True, False)]
    room = length - len(head) - len(end) - max(len(f) for f in facts)
    kept, used, starts = _fit(pieces, room, length)
    target = depth / 100 * used
    at = min(range(kept + 1), key=lambda i: (abs(starts[i] - target), i))
    fact_text = _fact_text(needle, at == 0)
    fact = facts[0] if at == 0 else facts[1]
    ids_before = head + [i for p in pieces[:at] for i in p]
    ids = ids_before + fact + [i for p in pieces[at:kept] for i in p] + end
    texts = sentence_pieces(text)[:kept]
    whole = HEAD + "".join(texts[:at]) + fact_text + "".join(texts[at:]) + tail(needle)
    if encode(whole) != ids:
        raise ValueError(
            f"the prompt's pieces do not tokenize as the whole (needle {needle.id}, "
            f"length {length}, depth {depth}): the needle's span would be wrong"
        )
    span = (len(ids_before), len(ids_before) + len(fact))
    return Prompt(
        ids=ids,
        needle_span=span,
        answer_ids=encode(answer_text(needle)),
        haystack_tokens=used,
        length=length,
        depth=depth,
        needle=needle,
        question_tokens=len(end),
    )


def _fact_text(needle: Needle, first: bool) -> str:
    return ("\n\n" if first else " ") + needle.sentence


# -- two facts, two questions ------------------------------------------------------------------
def followup_turn(first: Needle, second: Needle) -> str:
    """After the first answer's code: its full stop, the end of the turn, the second question
    in a user turn of its own, and the start of the assistant's second answer."""
    return (
        f".<|im_end|>\n<|im_start|>user\nAnswer from the document. {second.question}<|im_end|>\n"
        f"<|im_start|>assistant\n{second.subject[0].upper()}{second.subject[1:]} is "
    )


@dataclass(frozen=True)
class FollowUp:
    """Two facts hidden in one haystack, the first asked at its end, then the second asked on
    the same cache after the first answer."""

    ids: list[int]  # the prompt, ending with the first question (as a cell's prompt does)
    answer_ids: list[int]  # the first answer's code
    turn_ids: list[int]  # :func:`followup_turn`
    second_answer_ids: list[int]
    spans: tuple[tuple[int, int], tuple[int, int]]  # the first and the second fact's tokens
    length: int
    depths: tuple[int, int]
    needles: tuple[Needle, Needle]
    question_tokens: int  # the prompt's last tokens that are the first question (:func:`tail`)


def build_followup(
    encode: Encode,
    first: Needle,
    second: Needle,
    length: int,
    depth_first: int,
    depth_second: int,
    sources: Sequence[str] = SOURCES,
) -> FollowUp:
    """The prompt of a follow-up cell: at most ``length`` tokens, ``first`` at ``depth_first``
    percent and ``second`` at ``depth_second`` (each at its nearest sentence boundary, as in
    :func:`build_prompt`; at one boundary the first fact comes first), asked ``first``."""
    check_cell(length, depth_first)
    check_cell(length, depth_second)
    if first.id == second.id:
        raise ValueError("the two facts must differ")
    text = source_text(tuple(sources))
    pieces = _pieces(encode, text)
    head = encode(HEAD)
    end = encode(tail(first))
    fact_len = sum(
        max(len(encode(_fact_text(n, f))) for f in (True, False)) for n in (first, second)
    )
    room = length - len(head) - len(end) - fact_len
    kept, used, starts = _fit(pieces, room, length)

    def boundary(depth: int) -> int:
        target = depth / 100 * used
        return min(range(kept + 1), key=lambda i: (abs(starts[i] - target), i))

    at = {first.id: boundary(depth_first), second.id: boundary(depth_second)}
    texts = sentence_pieces(text)[:kept]
    ids, whole, spans = list(head), HEAD, {}
    for i in range(kept + 1):
        for n in (first, second):
            if at[n.id] == i:
                fact_text = _fact_text(n, i == 0 and len(ids) == len(head))
                fact = encode(fact_text)
                spans[n.id] = (len(ids), len(ids) + len(fact))
                ids += fact
                whole += fact_text
        if i < kept:
            ids += pieces[i]
            whole += texts[i]
    ids += end
    whole += tail(first)
    if encode(whole) != ids:
        raise ValueError(
            f"the prompt's pieces do not tokenize as the whole (facts {first.id}, {second.id}, "
            f"length {length}, depths {depth_first}, {depth_second})"
        )
    return FollowUp(
        ids=ids,
        answer_ids=encode(answer_text(first)),
        turn_ids=encode(followup_turn(first, second)),
        second_answer_ids=encode(answer_text(second)),
        spans=(spans[first.id], spans[second.id]),
        length=length,
        depths=(depth_first, depth_second),
        needles=(first, second),
        question_tokens=len(end),
    )
