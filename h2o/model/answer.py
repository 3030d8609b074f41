"""Scoring an answer, and a text's perplexity, under a :class:`~h2o.model.rows.Row`.

* :func:`score_answer` — one prefill of the prompt under the row, then (a) the answer
  teacher-forced from that state (the closed loop continued over the answer tokens: their
  log-probabilities, with no generation) and (b) a greedy continuation of ``max_new`` tokens
  from the same prefill (the cache rewound, the policies restored from a copy taken after the
  prompt) — so a cell costs one prefill, one chunk of ``len(answer) - 1`` tokens and
  ``max_new`` single-token steps;
* :func:`score_cells` — :func:`score_answer` of many prompts that share a prefix (the needle
  grid's haystack up to its needles), reading the shared part once (:func:`prefix_states`), with
  the same scores bit for bit;
* :func:`score_rows` — :func:`score_cells` of several rows: the rows that read a prompt as the
  full cache does (:func:`reads_prompt_as_full`) start every prompt from one full-cache reading
  of it, the same scores bit for bit;
* :func:`row_perplexity` — the closed-loop perplexity of a text under the row.

Each row kind runs as its module does: the full cache; a decode-time policy in every (layer,
KV head), each layer one lock-step bank (:mod:`h2o.model.quality`), under an allocation
(:mod:`h2o.model.allocation`; duo classifies heads on ``calibration_ids``); SnapKV's one-shot
compression after the prompt (:mod:`h2o.model.snapkv`); a KIVI-style quantized cache
(:mod:`h2o.model.quant`), alone or holding a policy's kept slots.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from h2o.model.caches import CacheKind
from h2o.model.forward import PROMPT_BLOCK, SmolLM
from h2o.model.generate import decode_greedy
from h2o.model.kv_cache import KVCache
from h2o.model.quant import QuantState
from h2o.model.rows import Row
from h2o.model.stack import cache_for


@dataclass
class AnswerScore:
    """One cell: the answer's teacher-forced log-probability and a greedy continuation."""

    logprob: float  # sum of the answer tokens' log-probs, teacher-forced, under the row
    token_logprobs: list[float]
    produced_ids: list[int]  # greedy continuation under the row (max_new tokens)
    produced: str
    held: list[float] | None  # per layer: share of KV heads holding every needle token
    kv_bytes: int
    read_bytes: int  # what one decoding step reads of that cache (Quest: a part of it)
    seconds: float


# -- building a row ------------------------------------------------------------------------------
def row_quant(row: Row) -> QuantState | None:
    """A fresh quantized-cache state for one run of ``row`` (None: full precision)."""
    spec = row.kivi
    return None if spec is None else QuantState(spec)


def kept_sets(policies) -> list[list[np.ndarray]]:
    """``kept[layer][kv_head]`` of whatever holds each layer's heads (instances, a bank, layer
    parts, an adaptive layer: each indexes as its row of policies), copied: a policy's ``kept``
    may be a view of its storage, valid only until its next step, and a run counts its bytes
    from what the prompt left after the answer has stepped the policies on."""
    return [[np.array(layer[g].kept) for g in range(len(layer))] for layer in policies]


def held_shares(policies, span: tuple[int, int]) -> list[float]:
    """Per layer: the share of KV heads whose kept set holds every position of ``span``
    (``(start, stop)``, half-open)."""
    lo, hi = int(span[0]), int(span[1])
    need = np.arange(lo, hi)
    return [
        float(np.mean([bool(np.isin(need, kk).all()) for kk in row])) for row in kept_sets(policies)
    ]


def _check_span(span: object, n_prompt: int) -> tuple[int, int] | None:
    if span is None:
        return None
    try:
        lo, hi = (int(x) for x in span)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(
            f"needle_span must be (start, stop) token positions, got {span!r}"
        ) from None
    if not 0 <= lo < hi <= n_prompt:
        raise ValueError(f"needle_span {span!r} is not a non-empty range inside 0..{n_prompt}")
    return lo, hi


# -- reading a prompt, from the start or from a shared prefix ----------------------------------
@dataclass
class PromptState:
    """What reading a prompt's first ``length`` tokens under a row left (``length`` a multiple
    of :data:`~h2o.model.forward.PROMPT_BLOCK`): the keys and values, and what the row carries
    while it reads — its policies (a row evicting while it reads), its quantized state (a row
    reading the prompt quantized), the attention accumulated (H2O's prefill mode). Prompts
    that begin with the same ``length`` tokens start from one state (:func:`score_cells`)."""

    length: int
    k: np.ndarray  # (n_layers, n_kv_heads, length, head_dim)
    v: np.ndarray
    policies: list | None
    quant: QuantState | None
    acc: np.ndarray | None  # (n_layers, n_kv_heads, length) float64


def begin(
    model: SmolLM, row: Row, capacity: int, start: PromptState | None = None
) -> tuple[KVCache, QuantState | None]:
    """An empty cache of ``capacity`` positions and the row's quantized state, or both as
    ``start`` left them (copies: one state starts many prompts)."""
    cache = KVCache(model.config, capacity)
    if start is None:
        return cache, row_quant(row)
    cache.k[:, :, : start.length] = start.k
    cache.v[:, :, : start.length] = start.v
    cache.length = start.length
    quant = copy.deepcopy(start.quant) if row.option("quantized_prompt") else row_quant(row)
    return cache, quant


def read_prompt(
    model: SmolLM,
    prompt: list[int],
    row: Row,
    cache: KVCache,
    quant: QuantState | None,
    calibration_ids: Sequence[int] | None = None,
    start: PromptState | None = None,
    question: int | None = None,
) -> tuple[np.ndarray, list | None]:
    """Read ``prompt`` into ``cache`` under ``row``, as the row's method reads a prompt: the
    final hidden states of the tokens read and ``policies[layer][kv_head]`` holding what each
    head kept (None for a row that evicts nothing). ``quant`` (the row's state) is handed the
    cache only after the prompt unless the row reads the prompt quantized (``:qprompt``):
    KIVI's prefill attends the prompt at full precision and quantizes what it stores.

    ``start``: the cache and ``quant`` hold the state a reading of the prompt's first
    ``start.length`` tokens left (:func:`begin`); the reading goes on from there, and the
    result is the same, bit for bit, as reading the whole prompt (:meth:`SmolLM.read`).

    ``question``: how many of the prompt's last tokens are its question (a row that compresses
    the context reads them after the compression; None: the kind's default)."""
    pq = quant if row.option("quantized_prompt") else None
    if start is not None and cache.length != start.length:
        raise ValueError(f"the cache holds {cache.length} tokens, the start {start.length}")
    kind = row.cache
    reading = kind.begin(model, calibration_ids, len(prompt), start)
    reading.question = question
    return kind.read_prompt(model, prompt, cache, pq, reading, calibration_ids)


def prefix_states(
    model: SmolLM,
    ids: Sequence[int],
    row: Row,
    stops: Sequence[int],
    calibration_ids: Sequence[int] | None = None,
    start: PromptState | None = None,
) -> Iterator[PromptState]:
    """Read ``ids`` under ``row`` once, yielding the state at each of ``stops`` (increasing
    multiples of :data:`~h2o.model.forward.PROMPT_BLOCK`, each less than ``len(ids)``); a
    SnapKV row's stops must lie before its window (the last prompt tokens).

    ``start``: the reading goes on from the state a reading of ``ids[:start.length]`` under
    the same row left (the stops lie after it)."""
    stops = [int(x) for x in stops]
    if any(x <= 0 or x % PROMPT_BLOCK for x in stops) or stops != sorted(set(stops)):
        raise ValueError(f"stops must be increasing positive multiples of {PROMPT_BLOCK}: {stops}")
    if stops and stops[-1] >= len(ids):
        raise ValueError(f"a stop ({stops[-1]}) must leave a token of the {len(ids)} to read")
    if not stops:
        return
    if start is not None and start.length >= stops[0]:
        raise ValueError(f"a start of {start.length} tokens for stops from {stops[0]}")
    cache, quant = begin(model, row, stops[-1], start)
    pq = quant if row.option("quantized_prompt") else None
    kind = row.cache
    reading = kind.begin(model, calibration_ids, stops[-1], start)
    for stop in stops:
        kind.read_prefix(model, list(ids[:stop]), cache, pq, reading)
        acc = reading.acc
        yield PromptState(
            length=stop,
            k=cache.k[:, :, :stop].copy(),
            v=cache.v[:, :, :stop].copy(),
            policies=copy.deepcopy(reading.policies),
            quant=copy.deepcopy(pq),
            acc=None if acc is None else acc[:, :, :stop].copy(),
        )


def shared_stop(
    ids: Sequence[int], other: Sequence[int], row: Row, question: int | None = None
) -> int:
    """Where a reading of ``other`` can hand its state to ``ids``: the last block's end within
    their common prefix, leaving a token of ``ids`` to read (and, for SnapKV, before its
    window; for a compressed context, before the question, ``ids``' last ``question`` tokens);
    0 if none."""
    a = np.asarray(ids[: len(other)], dtype=np.int64)
    b = np.asarray(other[: len(a)], dtype=np.int64)
    diff = np.flatnonzero(a != b)
    common = int(diff[0]) if diff.size else len(a)
    limit = min(common, len(ids) - 1, row.cache.prompt_limit(len(ids), question))
    return max(0, limit) // PROMPT_BLOCK * PROMPT_BLOCK


def score_answer(
    model: SmolLM,
    prompt_ids: Sequence[int],
    answer_ids: Sequence[int],
    row: Row,
    *,
    needle_span: tuple[int, int] | None = None,
    max_new: int = 8,
    calibration_ids: Sequence[int] | None = None,
    stop_at_eos: bool = True,
    start: PromptState | None = None,
    question: int | None = None,
) -> AnswerScore:
    """The answer's teacher-forced log-probability and a greedy continuation under ``row``.

    The prompt is prefilled under the row once. From that state the answer runs as one more
    closed-loop chunk (token-by-token semantics): ``logprob`` is the sum of ``log p(answer[i]
    | prompt, answer[:i])``. The cache is then rewound to the prompt and the policies restored
    (a copy taken after the prompt), and ``max_new`` tokens are decoded greedily (stopping
    early at an end-of-sequence token unless ``stop_at_eos=False``); ``max_new=0`` skips
    the continuation (the teacher-forced score alone).

    ``held`` (rows that evict): per layer, the share of KV heads whose cache still holds every
    position of ``needle_span`` (``(start, stop)`` in the prompt, half-open) once the prompt
    has been read — the cache the first answer token's query sees, besides itself. ``kv_bytes``
    is :meth:`Row.kv_bytes` of what the row holds after the prompt (for an evicting row,
    counted from its policies' kept sets).

    ``start``: the state a reading of the prompt's first tokens under the same row left
    (:func:`prefix_states`); the result is the same as without it (:func:`score_cells`).
    ``question``: how many of the prompt's last tokens are its question (:func:`read_prompt`).
    """
    t_start = time.perf_counter()
    prompt = [int(i) for i in prompt_ids]
    answer = [int(i) for i in answer_ids]
    if not prompt:
        raise ValueError("the prompt is empty")
    if not answer:
        raise ValueError("the answer is empty")
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 0:
        raise ValueError(f"max_new must be an integer >= 0, got {max_new!r}")
    if not isinstance(row, Row):
        raise ValueError(f"row must be a Row (Row.parse(label)), got {type(row).__name__}")
    span = _check_span(needle_span, len(prompt))
    cfg = model.config
    T = len(prompt)
    if start is not None and not 0 < start.length < T:
        raise ValueError(f"a start of {start.length} tokens for a prompt of {T}")
    cache, quant = begin(model, row, T + max(len(answer), max_new), start)

    hidden, policies = read_prompt(
        model, prompt, row, cache, quant, calibration_ids, start, question
    )

    held = None
    if policies is not None:
        held = held_shares(policies, span) if span is not None else None
    after_prompt = copy.deepcopy(policies) if max_new else None
    kept = None if policies is None else kept_sets(policies)
    kv_bytes = row.kv_bytes(cfg, T, kept=kept)

    select = row.cache.selector(model)  # what each step after the prompt reads (Quest)
    lps = model.token_logprobs(hidden[-1:], answer[:1])
    if len(answer) > 1:
        through = cache_for(cfg, cache, policies=policies, quant=quant, select=select)
        h_ans = model.forward(answer[:-1], cache=through)
        lps = np.concatenate([lps, model.token_logprobs(h_ans, answer[1:])])

    new_ids: list[int] = []
    if max_new:
        cache.length = T  # rewind: the greedy tokens overwrite the answer's keys and values
        if quant is not None:
            quant.truncate(T)
        new_ids, _ = decode_greedy(
            model,
            hidden,
            cache,
            after_prompt,
            max_new,
            stop_at_eos=stop_at_eos,
            quant=quant,
            select=select,
        )
    # what a step read: counted by the selector over the answer's steps, where it has one
    read_bytes = row.read_bytes(cfg, T, kept=kept, reads=select)
    return AnswerScore(
        logprob=float(lps.sum()),
        token_logprobs=[float(x) for x in lps],
        produced_ids=new_ids,
        produced=model.decode(new_ids),
        held=held,
        kv_bytes=kv_bytes,
        read_bytes=read_bytes,
        seconds=time.perf_counter() - t_start,
    )


#: ``(prompt_ids, answer_ids, needle_span)``, or with a fourth item: how many of the prompt's
#: last tokens are its question (:func:`read_prompt`)
Cell = (
    tuple[Sequence[int], Sequence[int], tuple[int, int] | None]
    | tuple[Sequence[int], Sequence[int], tuple[int, int] | None, int | None]
)


def score_cells(
    model: SmolLM,
    cells: Sequence[Cell],
    row: Row,
    *,
    max_new: int = 8,
    calibration_ids: Sequence[int] | None = None,
    stop_at_eos: bool = True,
) -> list[AnswerScore]:
    """:func:`score_answer` of every cell (``(prompt_ids, answer_ids, needle_span[,
    question])``) under ``row``, the same scores, reading what the prompts share once.

    The needle grid's prompts of one length are one haystack up to their needles. One prompt
    (the one that shares the most blocks with the others) is read once under the row, and each
    prompt starts from the state at the last block its beginning shares with it
    (:func:`shared_stop`). Each score's ``seconds`` is its own time plus its share of that
    reading: a stretch read once for ``n`` prompts counts ``1/n`` to each."""
    kw = {"max_new": max_new, "calibration_ids": calibration_ids, "stop_at_eos": stop_at_eos}
    scored = _score_shared(model, cells, [(row, i) for i in range(len(cells))], row, kw)
    return [scored[(row.label, i)] for i in range(len(cells))]


def reads_prompt_as_full(row: Row) -> bool:
    """Whether ``row`` reads a prompt's beginning exactly as the full cache does: its kind
    steps no policy and accumulates nothing while it reads (it keeps
    :class:`~h2o.model.caches.CacheKind`'s own ``begin``, ``decode_policies`` and
    ``read_prefix``) and the prompt is not read quantized (``:qprompt``). The full cache, a
    KIVI-style cache (it quantizes the prompt once stored), Quest (it selects after the prompt)
    and the one-shot compressions (SnapKV and the presses compress before their last prompt
    tokens, :meth:`~h2o.model.caches.CacheKind.prompt_limit`) do; a row that evicts while it
    reads, H2O's prefill mode and a ``:qprompt`` row do not. A state the full cache left at a
    block then starts such a row's prompt as its own reading would (:func:`score_rows`)."""
    kind = type(row.cache)
    return not row.option("quantized_prompt") and all(
        getattr(kind, name) is getattr(CacheKind, name)
        for name in ("begin", "decode_policies", "read_prefix")
    )


def score_rows(
    model: SmolLM,
    cells: Sequence[Cell],
    rows: Sequence[Row],
    *,
    cells_of: Mapping[str, Sequence[int]] | None = None,
    max_new: int = 8,
    calibration_ids: Sequence[int] | None = None,
    stop_at_eos: bool = True,
) -> dict[str, list[AnswerScore]]:
    """:func:`score_cells` of every row of ``rows``: ``{label: scores}``, the same scores bit
    for bit, reading each prompt once for all the rows that read it as the full cache does.

    ``cells_of[label]``: the indices of the cells that row scores, its scores in that order
    (default: every cell). A row that does not read a prompt as the full cache does
    (:func:`reads_prompt_as_full`) is :func:`score_cells` alone. The others start from one
    reading under the full cache: the prompt that shares the most blocks with the others (the
    chain) is read once, each other prompt from the last block it shares with the chain to the
    blocks its rows start from, and each row starts each prompt from its own last shareable
    block (:func:`shared_stop` of the prompt with itself, within the row's
    :meth:`~h2o.model.caches.CacheKind.prompt_limit`). Each score's ``seconds`` is its own time
    plus its share of the readings it starts from: a stretch read once for ``n`` (row, cell)
    pairs counts ``1/n`` to each."""
    rows = list(rows)
    for r in rows:
        if not isinstance(r, Row):
            raise ValueError(f"rows must be Rows (Row.parse(label)), got {type(r).__name__}")
    labels = [r.label for r in rows]
    if len(set(labels)) != len(labels):
        raise ValueError(f"each row once, got {labels}")
    asked: dict[str, list[int]] = {}
    for label in labels:
        which = range(len(cells)) if cells_of is None else cells_of.get(label, ())
        asked[label] = [int(i) for i in which]
        if any(not 0 <= i < len(cells) for i in asked[label]):
            raise ValueError(f"{label}: cell indices {asked[label]} outside 0..{len(cells) - 1}")
    if cells_of is not None and set(cells_of) - set(labels):
        raise ValueError(f"cells_of names rows not asked: {sorted(set(cells_of) - set(labels))}")
    kw = {"max_new": max_new, "calibration_ids": calibration_ids, "stop_at_eos": stop_at_eos}
    out: dict[str, list[AnswerScore]] = {}
    shared = [r for r in rows if reads_prompt_as_full(r)]
    for r in rows:
        if r not in shared:
            out[r.label] = score_cells(model, [cells[i] for i in asked[r.label]], r, **kw)
    pairs = [(r, i) for r in shared for i in asked[r.label]]
    if pairs:
        scored = _score_shared(model, cells, pairs, Row("full"), kw)
        for r in shared:
            out[r.label] = [scored[(r.label, i)] for i in asked[r.label]]
    return {label: out[label] for label in labels}


def _score_shared(
    model: SmolLM, cells: Sequence[Cell], pairs: list[tuple[Row, int]], reader: Row, kw: dict
) -> dict[tuple[str, int], AnswerScore]:
    """:func:`score_answer` of the (row, cell) ``pairs``, every prompt from one reading under
    ``reader``: each pair's own row, or the full cache for rows that read a prompt as it does
    (:func:`reads_prompt_as_full`)."""
    ids = [[int(t) for t in c[0]] for c in cells]
    used = sorted({i for _, i in pairs})
    if not used:
        return {}

    asks = [c[3] if len(c) > 3 else None for c in cells]  # type: ignore[misc]

    def common(i: int, j: int) -> int:  # the last block both prompts may be read to, shared
        return min(
            shared_stop(ids[i], ids[j], reader, asks[i]),
            shared_stop(ids[j], ids[i], reader, asks[j]),
        )

    chain = max(used, key=lambda c: (sum(common(i, c) for i in used if i != c), -c))
    branch = {i: common(i, chain) for i in used}  # where prompt i leaves the chain
    own = {(r.label, i): shared_stop(ids[i], ids[i], r, asks[i]) for r, i in pairs}
    row_of = {r.label: r for r, _ in pairs}
    out: dict[tuple[str, int], AnswerScore] = {}

    def score(p: tuple[str, int], start: PromptState | None, extra: float) -> None:
        prompt, answer, span = cells[p[1]][:3]
        sc = score_answer(
            model,
            prompt,
            answer,
            row_of[p[0]],
            needle_span=span,
            start=start,
            question=asks[p[1]],
            **kw,
        )
        sc.seconds += extra
        out[p] = sc

    def walk(
        seq: list[int], start: PromptState | None, base: float, ends: dict[tuple[str, int], int]
    ) -> None:
        """Read ``seq`` under ``reader`` from ``start`` to every pair's end on it: a pair
        whose own start is its end, or the one pair leaving there along its prompt, starts its
        prompt there; several pairs leaving along one prompt go on reading it together."""
        share = base
        t = time.perf_counter()
        stops = sorted(set(ends.values()))
        for state in prefix_states(model, seq, reader, stops, kw["calibration_ids"], start=start):
            n_users = sum(end >= state.length for end in ends.values())
            share += (time.perf_counter() - t) / n_users
            here = [p for p, end in ends.items() if end == state.length]
            for i in sorted({p[1] for p in here}):
                on = {p: own[p] for p in here if p[1] == i}
                going = {p: s for p, s in on.items() if s > state.length}
                for p in on:
                    if p not in going or len(going) == 1:
                        score(p, state, share)
                if len(going) > 1:
                    walk(ids[i], state, share, going)
            t = time.perf_counter()

    for p, stop in own.items():
        if stop == 0:  # nothing it may start from: its prompt alone
            score(p, None, 0.0)
    walk(
        ids[chain],
        None,
        0.0,
        {p: min(s, branch[p[1]]) for p, s in own.items() if s and branch[p[1]]},
    )
    for i in used:  # prompts that share no block with the chain: read from their start
        alone = {p: s for p, s in own.items() if p[1] == i and s and not branch[i]}
        if len(alone) == 1:
            score(next(iter(alone)), None, 0.0)
        elif alone:
            walk(ids[i], None, 0.0, alone)
    return out


@dataclass(frozen=True)
class TextRun:
    """A row's closed loop over a text: its perplexity and the bytes it holds after the text;
    for a row that reads a part of what it holds (Quest), the mean over the text's steps of what
    a step reads and of what share that is of what the cache holds at the step (a step at
    position ``t`` holds ``t + 1`` keys); otherwise ``read_bytes`` is ``kv_bytes``, the share 1."""

    perplexity: float
    kv_bytes: int
    read_bytes: int
    read_share: float = 1.0


def row_perplexity(
    model: SmolLM,
    ids: Sequence[int],
    row: Row,
    *,
    calibration_ids: Sequence[int] | None = None,
) -> tuple[float, int]:
    """``(perplexity, kv_bytes)`` of :func:`text_run`."""
    run = text_run(model, ids, row, calibration_ids=calibration_ids)
    return run.perplexity, run.kv_bytes


def text_run(
    model: SmolLM,
    ids: Sequence[int],
    row: Row,
    *,
    calibration_ids: Sequence[int] | None = None,
) -> TextRun:
    """The closed-loop perplexity of ``ids`` under ``row`` (each token predicted from the cache
    the row holds at its step), :meth:`Row.kv_bytes` after the whole text (for eviction +
    quantization, counted from the kept sets then) with what a one-shot method's stepped policy
    holds besides (:meth:`CacheKind.stepped_bytes`), and what a step reads (Quest counts the
    pages it read; every other row reads what it holds). SnapKV compresses a prompt once, so it
    has no perplexity over a text: it is refused."""
    ids = [int(i) for i in ids]
    if len(ids) < 2:
        raise ValueError("need at least 2 tokens")
    if not isinstance(row, Row):
        raise ValueError(f"row must be a Row (Row.parse(label)), got {type(row).__name__}")
    if not row.cache.closed_loop:
        raise ValueError(
            f"{row.label}: this row compresses a prompt once, after reading it; it has no "
            "closed-loop perplexity over a text (score it with score_answer)"
        )
    cfg = model.config
    policies = row.cache.text_policies(model, ids[:-1], calibration_ids)
    quant = row_quant(row)
    if policies is None or quant is None:
        select = row.cache.selector(model)  # every token a decoding step (Quest's PG19 runs)
        through = cache_for(cfg, policies=policies, quant=quant, select=select)
        hidden = model.forward(ids[:-1], cache=through)
        nll = -model.token_logprobs(hidden, ids[1:])
        ppl = float(np.exp(nll.mean()))
        held = row.kv_bytes(cfg, len(ids)) + row.cache.stepped_bytes(cfg, len(ids))
        if select is None:
            return TextRun(ppl, held, held)
        steps = row.cache.step_reads(cfg, select)  # (keys held, bytes read) a step
        if not steps:
            return TextRun(ppl, held, held)
        read = np.array([b for _, b in steps], dtype=np.float64)
        share = read / np.array([row.kv_bytes(cfg, n) for n, _ in steps], dtype=np.float64)
        return TextRun(ppl, held, round(float(read.mean())), float(share.mean()))
    # a combination: its bytes depend on which groups its kept tokens fall in, so the run
    # reads the last token too (one more step) and counts what it then holds
    cache = KVCache(cfg, len(ids))
    through = cache_for(cfg, cache, policies=policies, quant=quant)
    hidden = model.forward(ids[:-1], cache=through)
    nll = -model.token_logprobs(hidden, ids[1:])
    model.forward(ids[-1:], cache=through)
    held = row.kv_bytes(cfg, len(ids), kept=kept_sets(policies))
    return TextRun(float(np.exp(nll.mean())), held, held)
