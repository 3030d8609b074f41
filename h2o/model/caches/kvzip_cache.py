"""KVzip (Kim, Kim, Kwon, Park, Kim, Yun and Song, 2025, "KVzip: Query-Agnostic KV Cache
Compression with Context Reconstruction", https://arxiv.org/abs/2505.23416; kvpress's
``KVzipPress``, their port).

SnapKV chooses what to keep by the question's attention, so a second question about the same
context finds what the first did not need gone. KVzip chooses without the question: it asks the
model to *repeat the context* and keeps what that reconstruction reads::

    prefill the context (full attention)
    for each chunk of 2,048 context tokens:
        feed  "\\n\\nRepeat the previous context exactly." + the chat turn's end + the chunk
              ("Repeat the part of the previous context exactly, starting with" + the last 8
              tokens of the chunk before, from the second chunk on), over the context's cache
        score[j] = max over the repeat's queries and the KV head's query heads of the softmax
                   over {4 sinks, the chunk, the repeat itself}, for each j of the chunk
    the first 4 positions (sinks) score 1.0
    keep the highest scores over every layer and head at once (kvpress's default,
    ``layerwise=False``: heads and layers get unequal shares of the same total)
    then decode, admitting every new token; the repeat's own keys and values are dropped

The second pass costs more than the prefill (the paper: "2–3 times the initial
prefilling"); ``benchmarks/model.py`` states it separately. As kvpress runs it, the question is
read after the compression, through the compressed cache
(:class:`~h2o.model.caches.base.ContextCompression`: the needle prompt's question, its own
tokens, as kvpress separates them).
The whole prompt before them is the context (kvpress leaves the chat template's opening out of
it and scores it 0 but for its 4 sinks: ours scores it like the rest). A row's budget is the
total it holds: ``kvzip@256`` holds as many slots as 256 a head once the question is read.
Equal scores keep the higher position.
"""

from __future__ import annotations

import numpy as np

from h2o.model.caches.base import ContextCompression
from h2o.model.kv_cache import KVCache

REPEAT = "\n\nRepeat the previous context exactly."
REPEAT_PART = "\n\nRepeat the part of the previous context exactly, starting with"
#: SmolLM2's chat template between the user's turn and the answer (kvpress reads it from the
#: template: the suffix after the user's message).
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
CHUNK, PREV_POSTFIX, N_SINK = 2048, 8, 4


def repeat_chunks(encode, context: list[int]) -> list[tuple[int, int, list[int]]]:
    """``(start, end, repeat_ids)`` per chunk of the context: the ids fed after it."""
    out = []
    chunks = [context[i : i + CHUNK] for i in range(0, len(context), CHUNK)]
    for i, chunk in enumerate(chunks):
        q = encode(REPEAT) if i == 0 else encode(REPEAT_PART) + chunks[i - 1][-PREV_POSTFIX:]
        out.append((i * CHUNK, i * CHUNK + len(chunk), q + encode(SUFFIX) + chunk))
    return out


def reconstruction_scores(model, prompt: list[int], cache, context: int) -> np.ndarray:
    """``(n_layers, n_kv_heads, context)``: each context position's KVzip score, from the
    repeat passes over a copy of the context's cache (``cache`` holds the prompt read)."""
    cfg = model.config
    G, gs = cfg.n_kv_heads, cfg.group_size
    score = np.zeros((cfg.n_layers, G, context))
    ids = [int(i) for i in prompt[:context]]
    for start, end, repeat in repeat_chunks(model.encode, ids):
        work = KVCache(cfg, context + len(repeat))
        work.k[:, :, :context] = cache.k[:, :, :context]
        work.v[:, :, :context] = cache.v[:, :, :context]
        work.length = context
        sink = min(N_SINK, start)

        def hook(ch, start=start, end=end, sink=sink) -> None:
            p = ch.probs  # the model's softmax over every key it sees
            # the softmax over the sinks, the chunk and the repeat: the same weights renormalised
            mass = p[..., :sink].sum(-1) + p[..., start:end].sum(-1) + p[..., context:].sum(-1)
            sub = p[..., start:end] / mass[..., None]
            m = sub.reshape(G, gs, ch.rows, -1).max(axis=(1, 2))
            np.maximum(score[ch.layer, :, start:end], m, out=score[ch.layer, :, start:end])

        model.read(ids + repeat, work, attn_hook=hook)
    score[:, :, :N_SINK] = 1.0
    return score


def kvzip_keep(score: np.ndarray, n_keep: int) -> list:
    """``kept[layer][kv_head]`` (ascending context positions): the ``n_layers * n_kv_heads *
    n_keep`` highest scores over every layer and head at once (equal scores: the higher
    position), so heads and layers keep unequal shares; every position if there are no more."""
    L, G, C = score.shape
    if n_keep >= C:
        return [[np.arange(C, dtype=np.int64) for _ in range(G)] for _ in range(L)]
    flat = score.reshape(-1)
    pos = np.tile(np.arange(C), L * G)
    order = np.lexsort((-pos, -flat))
    chosen = np.zeros(flat.size, dtype=bool)
    chosen[order[: L * G * n_keep]] = True
    chosen = chosen.reshape(L, G, C)
    return [[np.flatnonzero(chosen[li, g]) for g in range(G)] for li in range(L)]


class KvzipCache(ContextCompression):
    """The context compressed once, by what a reconstruction of it reads, to as many slots in
    all as the budget less the question's tokens a head."""

    kind = "kvzip"
    decode_policy = "kvzip"  # h2o/policies/kvzip.py: the same score, stepped (with hindsight)
    closed_loop = True  # over a text: that policy, one eviction a token (ContextCompression)
    rank = 4
    colour = "#EDC948"
    marker = "triangle-up"
    since_h2o = (
        "chooses without the question: it keeps what the model reads while it repeats the "
        "context, so a second question finds it there (SnapKV keeps what the first one read)"
    )

    def name(self) -> str:
        return "KVzip"

    def scores_ahead(self, model, ids):
        """Over a text, every position's score from a repeat of the whole text (read first, in
        full): the stepped policy knows text not yet read (its ``hindsight``)."""
        cache = KVCache(model.config, len(ids))
        model.read(ids, cache)
        return reconstruction_scores(model, ids, cache, len(ids))

    def choose(self, model, prompt, cache, context, seen=None):
        score = reconstruction_scores(model, prompt, cache, context)
        return kvzip_keep(score, self.n_keep(prompt, context))
