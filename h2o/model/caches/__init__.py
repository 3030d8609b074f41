"""The kinds of cache a row can name, one class each (:mod:`h2o.model.caches.base`).

A new kind is one file with a :class:`~h2o.model.caches.base.CacheKind` subclass and one line
here (or :func:`register` from the outside); the row grammar, the bytes, the frontier's groups
and the model's runs then take it from its class."""

from __future__ import annotations

from h2o.model.caches.base import CACHE_KINDS, GROUPS, Budgeted, CacheKind, Reading
from h2o.model.caches.evicting_cache import EvictingCache
from h2o.model.caches.expected_attention_cache import ExpectedAttentionCache
from h2o.model.caches.full_cache import FullCache
from h2o.model.caches.kivi_cache import KiviCache
from h2o.model.caches.knorm_cache import KnormCache
from h2o.model.caches.kvzip_cache import KvzipCache
from h2o.model.caches.quest_cache import QuestCache
from h2o.model.caches.snapkv_cache import SnapKVCache

# kind → class, in the order labels are tried (a ``fallback`` kind after every other); the
# registry itself is base's (:data:`~h2o.model.caches.base.CACHE_KINDS`), read by the kinds too
CACHE_KINDS.update(
    (cls.kind, cls)
    for cls in (
        FullCache,
        KiviCache,
        SnapKVCache,
        KnormCache,
        KvzipCache,
        ExpectedAttentionCache,
        QuestCache,
        EvictingCache,
    )
)

BUILT_IN = frozenset(CACHE_KINDS)


def register(cls: type[CacheKind]) -> type[CacheKind]:
    """Add a kind of cache (usable as a class decorator); ``ValueError`` if its ``kind`` is
    taken or it is not a :class:`CacheKind`."""
    if not (isinstance(cls, type) and issubclass(cls, CacheKind)):
        raise ValueError(f"a kind of cache subclasses CacheKind, got {cls!r}")
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"{cls.__name__} names no kind")
    if kind in CACHE_KINDS:
        raise ValueError(f"a kind of cache {kind!r} exists already")
    CACHE_KINDS[kind] = cls
    return cls


def unregister(kind: str) -> None:
    """Remove a kind added with :func:`register` (the built-in kinds stay)."""
    if kind in BUILT_IN:
        raise ValueError(f"{kind!r} is a built-in kind of cache")
    CACHE_KINDS.pop(kind, None)


def parse_order() -> list[type[CacheKind]]:
    """The kinds in the order a label's head is tried."""
    return sorted(CACHE_KINDS.values(), key=lambda c: c.fallback)


__all__ = [
    "CACHE_KINDS",
    "GROUPS",
    "Budgeted",
    "CacheKind",
    "EvictingCache",
    "ExpectedAttentionCache",
    "FullCache",
    "KiviCache",
    "KnormCache",
    "KvzipCache",
    "QuestCache",
    "Reading",
    "SnapKVCache",
    "parse_order",
    "register",
    "unregister",
]
