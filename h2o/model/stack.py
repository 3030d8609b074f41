"""The caches a run reads through, stacked from what it carries: its policies (eviction while
decoding), its quantized state (KIVI-style codes), its selection (Quest) — each a
:class:`h2o.model.cache_api.Cache` wrapping the one that holds the keys and values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from h2o.model.cache_api import Cache, Prefill
from h2o.model.closed_loop import ClosedLoopCache, EvictionPolicy
from h2o.model.quant import QuantCache, QuantState
from h2o.model.selecting import SelectingCache, Selector

if TYPE_CHECKING:
    from h2o.model.gguf_io import ModelConfig


def cache_for(
    config: ModelConfig,
    cache: Cache | None = None,
    *,
    policies: Sequence[Sequence[EvictionPolicy]] | None = None,
    quant: QuantState | None = None,
    select: Selector | None = None,
) -> Cache | None:
    """What :meth:`h2o.model.forward.SmolLM.forward` reads through: ``cache`` (the keys and
    values held, e.g. a :class:`h2o.model.kv_cache.KVCache`; None: the call's own), read
    through the KIVI-style codes of ``quant`` (:class:`h2o.model.quant.QuantCache`), under
    ``select`` (:class:`h2o.model.selecting.SelectingCache`) and under the eviction of
    ``policies[layer][kv_head]`` (:class:`h2o.model.closed_loop.ClosedLoopCache`). Nothing to
    add: ``cache`` itself. A selection reads a full cache: it takes neither policies nor
    ``quant``."""
    if select is not None and (policies is not None or quant is not None):
        raise ValueError("a selection reads a full cache: no policies, no quantization")
    if policies is None and quant is None and select is None:
        return cache
    out: Cache = Prefill() if cache is None else cache
    if quant is not None:
        out = QuantCache(out, quant)
    if select is not None:
        out = SelectingCache(out, select)
    if policies is not None:
        out = ClosedLoopCache(out, policies, config)
    return out
