"""The full cache: every token's key and value kept in fp16, as served — the reference every
other row is measured against (``full``)."""

from __future__ import annotations

from typing import Any

from h2o.model.caches.base import CacheKind, Head


class FullCache(CacheKind):
    """Every key and value of every token, none evicted, none quantized."""

    kind = "full"
    rank = 0
    group = "full"

    @classmethod
    def parse_head(cls, head: Head, label: str) -> dict[str, Any] | None:
        return {} if head == Head("full") else None

    def check(self) -> None:
        if self.row.bits is not None:
            raise ValueError("the full row takes no bits (use kivi16)")

    def name(self) -> str:
        return "full cache"
