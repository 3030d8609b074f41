"""Greedy generation with an evicting KV cache.

The prompt is prefilled under eviction exactly as in :mod:`h2o.model.quality` (token by token
semantics, one policy per layer and KV head, each layer's heads one lock-step bank), then new
tokens are decoded one at a time from the same cache and policies. Used for the classroom demo:
a fact stated once early in a long prompt, asked about at the end — which caches still let the
model answer?
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from h2o.model.closed_loop import PolicyFactory
from h2o.model.forward import SmolLM
from h2o.model.kv_cache import KVCache
from h2o.model.quality import FULL_CACHE, make_banks
from h2o.model.selecting import Selector
from h2o.model.stack import cache_for
from h2o.progress import Progress

if TYPE_CHECKING:
    from h2o.model.quant import QuantState


@dataclass(frozen=True)
class GenerationResult:
    """A greedy continuation and how it was produced."""

    label: str
    prompt_tokens: int
    new_ids: list[int]
    text: str
    seconds: float
    stopped: str  # "max_new", "eos" or "stop string"

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": len(self.new_ids),
            "text": self.text,
            "seconds": round(self.seconds, 3),
            "stopped": self.stopped,
        }


#: The label of a run under eviction: ``NAME@BUDGET``, or ``NAME/ALLOCATION@BUDGET``.
_RUN_LABEL = re.compile(r"^(?P<name>[A-Za-z0-9_\-]+)(?:/(?P<alloc>[a-z]+))?@(?P<budget>\d+)$")


def run_label(name: str, budget: int, allocation: str | None = None) -> str:
    """The label ``python -m h2o generate`` gives a run: ``"h2o@256"``, ``"h2o/pyramid@128"``
    (:func:`label_policy` reads the method back)."""
    return f"{name}{'' if allocation is None else '/' + allocation}@{int(budget)}"


def label_policy(label: str) -> str | None:
    """The method a run's label names (``"h2o@256"``, ``"h2o/pyramid@128"`` → ``"h2o"``); None for
    the full cache or a label :func:`run_label` did not write."""
    m = _RUN_LABEL.match(str(label))
    return None if m is None else m["name"]


def check_prompt(prompt_ids: Sequence[int], max_new: int) -> list[int]:
    """The prompt as a list of ints; ``ValueError`` if it is empty or ``max_new < 1``."""
    ids = [int(i) for i in prompt_ids]
    if not ids:
        raise ValueError("the prompt is empty")
    if max_new < 1:
        raise ValueError("max_new must be >= 1")
    return ids


def generate(
    model: SmolLM,
    prompt_ids: Sequence[int],
    max_new: int = 20,
    policy_factory: PolicyFactory | None = None,
    progress: Progress | None = None,
    stop_strings: Sequence[str] = (),
    stop_at_eos: bool = True,
    label: str | None = None,
) -> GenerationResult:
    """Greedy continuation of ``prompt_ids`` under eviction (``policy_factory=None``: full cache).

    ``progress(done, total, label)`` counts the prompt prefill's layers, then each new token
    (``total = n_layers + max_new``). Generation stops after ``max_new`` tokens, at an
    end-of-sequence token (``model.tokenizer.end_ids``: the GGUF's ``eos_token_id`` and
    ``<|endoftext|>``; not added to the output), or once the continuation contains one of
    ``stop_strings``.
    """
    prompt_ids = check_prompt(prompt_ids, max_new)
    t_start = time.perf_counter()
    n_layers = model.config.n_layers
    total = n_layers + max_new
    cache = KVCache(model.config, len(prompt_ids) + max_new)
    policies = None if policy_factory is None else make_banks(model, policy_factory)

    prefill_progress = (
        None if progress is None else (lambda d, _n, _w: progress(d, total, "prefill"))
    )
    through = cache_for(model.config, cache, policies=policies)
    hidden = model.forward(prompt_ids, cache=through, progress=prefill_progress)
    new_ids, stopped = decode_greedy(
        model, hidden, cache, policies, max_new, progress, stop_strings, stop_at_eos
    )
    return GenerationResult(
        label=label or (FULL_CACHE if policy_factory is None else "policy"),
        prompt_tokens=len(prompt_ids),
        new_ids=new_ids,
        text=model.decode(new_ids),
        seconds=time.perf_counter() - t_start,
        stopped=stopped,
    )


def decode_greedy(
    model: SmolLM,
    hidden: np.ndarray,
    cache: KVCache,
    policies: Sequence | None,
    max_new: int,
    progress: Progress | None = None,
    stop_strings: Sequence[str] = (),
    stop_at_eos: bool = True,
    quant: QuantState | None = None,
    select: Selector | None = None,
) -> tuple[list[int], str]:
    """Greedy decoding after a prefill (``hidden``: its final states) from ``cache`` under
    ``policies``: the new ids and why it stopped. ``progress(n_layers + done, n_layers +
    max_new)`` after each token. ``quant``: the quantized cache's state of the prefill
    (:mod:`h2o.model.quant`), if any; ``select``: what each step reads of the cache (Quest)."""
    n_layers = model.config.n_layers
    total = n_layers + max_new
    eos = model.tokenizer.end_ids
    new_ids: list[int] = []
    stopped = "max_new"
    through = cache_for(model.config, cache, policies=policies, quant=quant, select=select)
    while True:
        nxt = int(np.argmax(model.logits(hidden[-1:])[0]))
        if stop_at_eos and nxt in eos:
            stopped = "eos"
            break
        new_ids.append(nxt)
        if progress is not None:
            progress(n_layers + len(new_ids), total, "tokens")
        if stop_strings and any(s in model.decode(new_ids) for s in stop_strings):
            stopped = "stop string"
            break
        if len(new_ids) >= max_new:
            break
        hidden = model.forward([nxt], cache=through)
    return new_ids, stopped
