"""The second question: two facts in one prompt, the first asked, then the second asked on the
same cache (:func:`score_followup`).

A method that compresses once it has read the question (SnapKV) chooses what to keep for that
question; a conversation goes on and asks another. Methods that choose without the question
(H2O in either mode, StreamingLLM) or keep every token (KIVI-style) meet the second question
with the cache they would have had anyway. Users of the toolkits ask this of SnapKV-like
methods; here it is measured the same way for every row.

The prompt is read under the row (:func:`h2o.model.answer.read_prompt`); the first answer is
teacher-forced (its log-probability) and decoded greedily from the prompt; then the first
answer's code and the second question's turn are read on the same cache, as more steps of the
row (a policy evicts as it reads them, SnapKV admits them, a quantized cache codes them), and
the second answer is teacher-forced and decoded greedily from there.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h2o.model.answer import held_shares, kept_sets, read_prompt, row_quant
from h2o.model.forward import SmolLM
from h2o.model.generate import decode_greedy
from h2o.model.kv_cache import KVCache
from h2o.model.rows import Row
from h2o.model.stack import cache_for


@dataclass
class FollowUpScore:
    """Both answers of one follow-up cell."""

    logprob: float  # the first answer, teacher-forced
    produced: list[int]  # the first answer, greedy from the prompt
    second_logprob: float  # the second answer, teacher-forced after the first and the turn
    second_produced: list[int]  # the second answer, greedy from the same point
    held: list[float] | None  # per layer: share of KV heads holding the second fact when asked
    kv_bytes: int  # what the row holds after the prompt
    read_bytes: int  # what one step after the prompt reads of it (Quest: a part, as it read)
    seconds: float


def _teacher_forced(
    model: SmolLM, hidden: np.ndarray, ids: list[int], cache, pols, quant, select=None
):
    """Log-probs of ``ids`` after states ``hidden``, reading them into the cache: the sum and
    the final hidden state."""
    lps = model.token_logprobs(hidden[-1:], ids[:1])
    through = cache_for(model.config, cache, policies=pols, quant=quant, select=select)
    h = model.forward(ids, cache=through)
    if len(ids) > 1:
        lps = np.concatenate([lps, model.token_logprobs(h[:-1], ids[1:])])
    return float(lps.sum()), h


def score_followup(
    model: SmolLM,
    prompt_ids: Sequence[int],
    answer_ids: Sequence[int],
    turn_ids: Sequence[int],
    second_answer_ids: Sequence[int],
    row: Row,
    *,
    second_span: tuple[int, int] | None = None,
    question: int | None = None,
    max_new: int = 8,
    calibration_ids: Sequence[int] | None = None,
) -> FollowUpScore:
    """The first and the second answer under ``row`` (module docstring); ``held``: per layer,
    the share of KV heads that still hold every token of ``second_span`` when the second
    question has been read (rows that evict). ``question``: how many of the prompt's last
    tokens are the first question (:func:`~h2o.model.answer.read_prompt`)."""
    t0 = time.perf_counter()
    prompt, a1, turn, a2 = (
        [int(i) for i in x] for x in (prompt_ids, answer_ids, turn_ids, second_answer_ids)
    )
    if not (prompt and a1 and turn and a2):
        raise ValueError("the prompt, both answers and the turn must be non-empty")
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new must be an integer >= 1, got {max_new!r}")
    if not isinstance(row, Row):
        raise ValueError(f"row must be a Row (Row.parse(label)), got {type(row).__name__}")
    T = len(prompt)
    n_conv = T + len(a1) + len(turn) + len(a2)
    cache = KVCache(model.config, max(n_conv, T + len(a1) + len(turn) + max_new))
    quant = row_quant(row)
    hidden, pols = read_prompt(model, prompt, row, cache, quant, calibration_ids, question=question)
    kept = None if pols is None else kept_sets(pols)  # what the prompt left
    kv_bytes = row.kv_bytes(model.config, T, kept=kept)
    after_prompt = copy.deepcopy(pols)
    select = row.cache.selector(model)  # every token after the prompt is a decoding step

    # the second question, on the cache the first one left
    lp1, h = _teacher_forced(model, hidden, a1, cache, pols, quant, select)
    through = cache_for(model.config, cache, policies=pols, quant=quant, select=select)
    h = model.forward(turn, cache=through)
    held = None if pols is None or second_span is None else held_shares(pols, second_span)
    at_question = cache.length
    before_answer = copy.deepcopy(pols)
    lp2, _ = _teacher_forced(model, h, a2, cache, pols, quant, select)
    cache.length = at_question  # rewind: the greedy second answer from the question
    if quant is not None:
        quant.truncate(at_question)
    second, _ = decode_greedy(model, h, cache, before_answer, max_new, quant=quant, select=select)

    # the first answer, greedy from the prompt (the cache rewound to it)
    cache.length = T
    if quant is not None:
        quant.truncate(T)
    first, _ = decode_greedy(
        model, hidden, cache, after_prompt, max_new, quant=quant, select=select
    )
    # what a step read, counted by the selector over every step after the prompt
    read_bytes = row.read_bytes(model.config, T, kept=kept, reads=select)
    return FollowUpScore(
        logprob=lp1,
        produced=first,
        second_logprob=lp2,
        second_produced=second,
        held=held,
        kv_bytes=kv_bytes,
        read_bytes=read_bytes,
        seconds=time.perf_counter() - t0,
    )
