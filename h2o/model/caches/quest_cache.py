"""Quest (Tang, Zhao, Zhu, Xiao, Kasikci and Han, ICML 2024, "Quest: Query-Aware Sparsity for
Efficient Long-Context LLM Inference", https://arxiv.org/abs/2406.10774; mit-han-lab/Quest,
``evaluation/quest_attention.py``, the code behind its accuracy results).

Every other method here decides what the cache *holds*. Quest evicts nothing: it decides what
each step *reads*. The cache is cut into pages of 16 tokens and each page keeps, per channel,
the largest and the smallest key it holds. A query's dot product with any key of a page is at
most ``sum_i max(q_i * max_i, q_i * min_i)``, so the pages with the highest bound are the ones
that can hold the keys it attends to::

    prefill the prompt with full attention (the reference: ``q_len > 1`` runs dense)
    at each decoding step, in every layer from the third on (``layer_id < 2`` runs dense),
    for each query head:
        u[p]  = sum_i max(q_i * maxK[p, i], q_i * minK[p, i])   over the pages so far (the
                last one partial, the current token in it)
        read  = the top min(max(3, B // 16), n_pages) pages by u, B = min(budget, tokens so far)
        attend over the keys of those pages only

Quest holds the whole cache and its page summaries (two fp16 keys a page and KV head: 16 bytes
a token at head size 64), so it saves no memory: it saves what a step reads, the bandwidth that
bounds decoding. :meth:`QuestCache.read_bytes` counts it the same way as every row's.

The defaults are the authors' (pages of 16, the first two layers dense); the budgets their
scripts run are 512 to 4,096 tokens at 32k to 100k contexts, ours are smaller to scale with
our prompts. As the reference, the current token's page is read only if its bound ranks it (the
paper's kernels always read it), and a cache shorter than the budget reads ``n // 16`` of its
``ceil(n / 16)`` pages: the one with the lowest bound is left out unless ``n`` fills its
pages. Equal bounds read the later page (``torch.topk`` leaves ties unspecified).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h2o.alloc import slot_bytes
from h2o.model.caches.base import CacheKind, Head
from h2o.model.stack import cache_for
from h2o.policies.quest import DENSE_LAYERS, MIN_PAGES, PAGE, n_pages_read

#: The rule's defaults and page count live with the trace-stepped policy; the model's rows use
#: them here, every query head of a layer at once.
__all__ = [
    "DENSE_LAYERS",
    "MIN_PAGES",
    "PAGE",
    "PageReads",
    "QuestCache",
    "n_pages_read",
    "page_mask",
]


def page_mask(q: np.ndarray, keys: np.ndarray, start: int, budget: int, group_size: int):
    """``(n_heads, rows, keys)``: the keys each query row reads — rows ``q`` ``(n_heads, rows,
    d)`` at positions ``start ..``, ``keys`` ``(n_kv_heads, start + rows, d)`` (query head
    ``h`` reads KV head ``h // group_size``); row ``t`` ranks the pages of keys ``0 .. t``."""
    H, c, d = q.shape
    G, kv = keys.shape[0], keys.shape[1]
    P = -(-kv // PAGE)
    pad = np.full((G, P * PAGE, d), -np.inf, dtype=np.float64)
    pad[:, :kv] = keys
    cmax = np.maximum.accumulate(pad.reshape(G, P, PAGE, d), axis=2)  # running max in a page
    pad[:, kv:] = np.inf
    cmin = np.minimum.accumulate(pad.reshape(G, P, PAGE, d), axis=2)
    qq = np.asarray(q, dtype=np.float64).reshape(G, group_size, c, d)
    qp, qn = np.maximum(qq, 0.0), np.minimum(qq, 0.0)
    # the bound of every whole page: q+ . max + q- . min
    full = np.einsum("gscd,gpd->gscp", qp, cmax[:, :, -1]) + np.einsum(
        "gscd,gpd->gscp", qn, cmin[:, :, -1]
    )
    t = start + np.arange(c)
    cur_page, cur_off = t // PAGE, t % PAGE
    # the current page holds the keys up to t only
    cur = np.einsum("gscd,gcd->gsc", qp, cmax[:, cur_page, cur_off]) + np.einsum(
        "gscd,gcd->gsc", qn, cmin[:, cur_page, cur_off]
    )
    pages = np.arange(P)
    u = np.where(pages < cur_page[:, None], full, -np.inf)
    u[..., np.arange(c), cur_page] = cur
    # rank the pages, the highest bound first, equal bounds the later page first
    order = P - 1 - np.argsort(-u[..., ::-1], axis=-1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(pages, order.shape), axis=-1)
    k = np.array([n_pages_read(budget, int(x) + 1) for x in t])
    chosen = rank < k[:, None]  # (G, gs, c, P)
    mask = chosen[..., np.arange(kv) // PAGE] & (np.arange(kv) <= t[:, None])
    return mask.reshape(H, c, kv)


class PageReads:
    """Quest's :data:`~h2o.model.selecting.Selector`: :func:`page_mask` in every layer from the
    third, counting as it goes the keys each step reads, so that a run's bytes read are the
    ones it read.

    A step is one query row taken through the model's layers once: a position *and the pass
    that read it*. Its keys are, summed over the sparse layers, the keys of the pages each KV
    head read — the union of its query heads' pages, a key once however many of them read it.
    A run that rewinds and reads the same positions again (the answer teacher-forced, then a
    greedy continuation from the prompt; the follow-up's two questions) takes one step per
    position and pass: a position read in two passes is two steps of their own keys, never one
    step holding the keys of both. A pass calls the selector layer after layer, so a call at a
    layer no later than the last one counted at a position is a new pass over it."""

    def __init__(self, budget: int, group_size: int) -> None:
        self.budget, self.group_size = budget, group_size
        self._position: list[int] = []  # a step's query position, in the order read
        self._keys: list[int] = []  # its keys read, over the sparse layers and KV heads
        self._open: dict[int, tuple[int, int]] = {}  # position -> (its latest step, last layer)

    @property
    def read(self) -> list[tuple[int, int]]:
        """``(position, keys read)`` of every step, in the order read (a rewound position
        again); the keys over the sparse layers and KV heads."""
        return list(zip(self._position, self._keys, strict=True))

    @property
    def keys_read(self) -> int:
        """Keys read over every step, sparse layer and KV head."""
        return sum(self._keys)

    @property
    def steps(self) -> int:
        """The steps read so far: one a position and pass."""
        return len(self._keys)

    def __call__(self, layer: int, q: np.ndarray, keys: np.ndarray, start: int):
        if layer < DENSE_LAYERS:
            return None
        mask = page_mask(q, keys, start, self.budget, self.group_size)
        H, c, kv = mask.shape
        per_row = mask.reshape(H // self.group_size, self.group_size, c, kv).any(1).sum((0, 2))
        for i, n in enumerate(per_row.tolist()):
            t = start + i
            step, last = self._open.get(t, (-1, layer))
            if layer <= last:  # the first layer of a pass over t: a step of its own
                step = len(self._keys)
                self._position.append(t)
                self._keys.append(0)
            self._keys[step] += int(n)
            self._open[t] = (step, layer)
        return mask

    def keys_per_step(self) -> float:
        """Keys read in one step, summed over the sparse layers and the KV heads (mean over the
        steps: each position and pass once)."""
        return self.keys_read / self.steps if self.steps else 0.0


class QuestCache(CacheKind):
    """Every key held; each decoding step reads, per query head, the pages of 16 keys whose
    bound on ``q . k`` is highest, up to ``budget`` tokens (``quest@BUDGET``).

    What a step reads, in bytes, with ``n`` keys in the cache: every key and value of the two
    dense layers (``n`` a KV head), the page summaries of the other layers (``ceil(n / 16)``
    pages, two fp16 keys each, a KV head), and in those layers the keys and values of the pages
    the step read — per KV head, the union of its query heads' pages, a key once however many of
    them read it (the last page partial: the keys up to the step's own). A run's figure
    (:meth:`read_bytes` with its selector) is the mean of that last part over the run's steps,
    each position and pass once (:class:`PageReads`): a rewind that reads the answer's positions
    again is more steps, not more keys in the same ones. So each step reads at most what the
    cache holds at that step."""

    kind = "quest"
    decode_policy = "quest"  # h2o/policies/quest.py: the same pages, stepped on a head's trace
    rank = 6
    colour = "#4830C0"
    marker = "hexagon"
    group = "select"
    takes = ("budget",)
    since_h2o = (
        "evicts nothing: it holds the whole cache and reads only the pages a query can attend "
        "to, so it saves what a step reads, not what the cache holds"
    )

    @classmethod
    def parse_head(cls, head: Head, label: str) -> dict[str, Any] | None:
        """``quest@BUDGET``, no options."""
        if head.name != cls.kind or head.budget is None:
            return None
        if head.tokens or head.allocation:
            raise ValueError(f"row {label!r}: quest takes no allocation and no options")
        return {"budget": head.budget}

    def check(self) -> None:
        b = self.row.budget
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 1:
            raise ValueError(f"budget must be a positive integer, got {b!r}")

    def head(self) -> str:
        return f"quest@{self.row.budget}"

    def name(self) -> str:
        return "Quest"

    # -- what it holds and reads -------------------------------------------------------------
    def summary_bytes(self, cfg, n_tokens: int) -> int:
        """Each page's smallest and largest key, fp16, per (layer, KV head)."""
        pages = -(-max(0, int(n_tokens)) // PAGE)
        return cfg.n_layers * cfg.n_kv_heads * pages * 2 * cfg.head_dim * 2

    def read_bytes(self, cfg, n_tokens: int, held: int, reads: PageReads | None = None) -> int:
        """A step's reads at ``n_tokens`` keys: the dense layers' keys and values, the other
        layers' page summaries, and the keys and values of the pages read — a KV head's page
        once however many of its query heads read it. ``reads`` (the run's selector) counts
        those pages as the run read them, the mean over its steps, each position and pass once
        (:class:`PageReads`); the dense layers and the summaries at ``n_tokens`` keys, the
        cache the row holds after the prompt. Without it each KV head reads the pages of one
        query head (its query heads agree, as in a model with one a KV head)."""
        n = max(0, int(n_tokens))
        if reads is not None and reads.steps:
            return self.step_read_bytes(cfg, n, reads.keys_per_step())
        read = min(n, n_pages_read(int(self.row.budget), n) * PAGE)  # type: ignore[arg-type]
        return self.step_read_bytes(cfg, n, (cfg.n_layers - DENSE_LAYERS) * cfg.n_kv_heads * read)

    def step_read_bytes(self, cfg, n_keys: int, keys_read: float) -> int:
        """One step's reads with ``n_keys`` keys in the cache, ``keys_read`` of them read over
        the sparse layers and KV heads: those, the dense layers' keys and values, the sparse
        layers' page summaries."""
        per_head = slot_bytes(cfg.head_dim)
        dense = DENSE_LAYERS * cfg.n_kv_heads * n_keys * per_head
        summaries = self.summary_bytes(cfg, n_keys) * (cfg.n_layers - DENSE_LAYERS) // cfg.n_layers
        return int(dense + summaries + round(keys_read * per_head))

    def step_reads(self, cfg, reads: PageReads) -> list[tuple[int, int]]:
        """``(keys held, bytes read)`` of every step a run's selector counted, in the order
        read (a position read again after a rewind is a step again)."""
        return [(t + 1, self.step_read_bytes(cfg, t + 1, k)) for t, k in reads.read]

    # -- how the model attends through it ----------------------------------------------------
    def selector(self, model) -> PageReads:
        return PageReads(int(self.row.budget), model.config.group_size)  # type: ignore[arg-type]

    def read_prompt(self, model, prompt, cache, quant, reading, calibration_ids=None):
        return model.read(
            prompt, cache_for(model.config, cache, quant=quant)
        ), None  # the prefill is dense
