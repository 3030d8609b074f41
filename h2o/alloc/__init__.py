"""Budget allocators: how many KV-cache slots each (layer, KV head) gets at a fixed total.

One file per allocator, its paper and rule in the docstring; the shared mechanics (checks,
exact rounding, bytes) in :mod:`h2o.alloc.base`:

* ``uniform`` — the same budget everywhere (the behaviour before allocators);
* ``pyramid`` — PyramidKV-style: budgets shrinking linearly with depth;
* ``adaptive`` — Ada-KV-style: each layer's heads compete for the layer's slots by score;
* ``duo`` — DuoAttention-style: retrieval heads get a large budget, streaming heads sinks +
  window.

"-style": each borrows its paper's split of the budget, not its whole method (the papers select
once after the prompt, or learn their head classes); ``Allocator.unlike_paper`` says how each
differs, in one sentence.

``make_allocator(name, **params)`` builds one; ``allocator.allocate(n_layers, n_kv_heads,
budget, head_dim=..., shares=...)`` returns an :class:`Allocation` whose ``budgets`` grid sums to
exactly ``n_layers * n_kv_heads * budget``; ``cache_bytes`` are its keys' and values' bytes.
"""

from __future__ import annotations

import inspect
from typing import Any

from .adaptive import Adaptive, ada_select
from .base import Allocation, Allocator, round_to_total, slot_bytes
from .duo import Duo
from .pyramid import Pyramid, pyramid_layer_values
from .uniform import Uniform

ALLOCATORS: dict[str, type[Allocator]] = {
    cls.name: cls for cls in (Uniform, Pyramid, Adaptive, Duo)
}


def make_allocator(name: str, **params: Any) -> Allocator:
    """``ALLOCATORS[name]`` with the keyword parameters it takes (others and ``None`` dropped)."""
    if name not in ALLOCATORS:
        raise ValueError(f"unknown allocation {name!r}; choose from {', '.join(ALLOCATORS)}")
    cls = ALLOCATORS[name]
    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in params.items() if k in accepted and v is not None})


__all__ = [
    "ALLOCATORS",
    "Adaptive",
    "Allocation",
    "Allocator",
    "Duo",
    "Pyramid",
    "Uniform",
    "ada_select",
    "make_allocator",
    "pyramid_layer_values",
    "round_to_total",
    "slot_bytes",
]
