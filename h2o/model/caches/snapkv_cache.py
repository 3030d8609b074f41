"""SnapKV (Li et al., 2024): one compression after the prompt, chosen by the attention of the
prompt's last 32 queries (its observation window), pooled so that a hit keeps its neighbours;
every decoded token is admitted after it (``snapkv@256``; pooling named: ``:avg5``, its
released default, ``:max7``, its LongBench configs; plain ``snapkv@B`` is max pooling, kernel
5). The rule on plain arrays is :mod:`h2o.policies.snapkv`; reading the window on the model is
:mod:`h2o.model.snapkv`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from h2o.model.caches.base import Budgeted
from h2o.model.caches.fixed_keep import FixedKeep
from h2o.model.snapkv import check_snapkv, snapkv_kept, snapkv_window_attention
from h2o.policies.snapkv import DEFAULT_WINDOW, SNAPKV

#: SnapKV's pooling when a row names none (``snapkv@256``): max pooling, kernel 5.
DEFAULT_POOLING = "max5"
POOL = re.compile(r"^(?P<mode>avg|max)(?P<kernel>\d+)$")


class SnapKVCache(Budgeted):
    """The prompt compressed once to ``budget`` slots per KV head, then nothing evicted."""

    kind = "snapkv"
    rank = 2
    colour = "#4E79A7"
    marker = "circle"
    #: its pooling, ``:avgK`` or ``:maxK`` (:data:`DEFAULT_POOLING` unnamed in the label)
    options: ClassVar[Mapping[str, Any]] = {"pooling": DEFAULT_POOLING}
    option_hints = ("avgK/maxK for snapkv's pooling",)
    closed_loop = False  # it compresses a prompt once: no perplexity over a text

    @classmethod
    def read_option(cls, token: str, read: Mapping[str, Any]) -> tuple[str, Any] | None:
        """``avgK`` / ``maxK``, once (the kernel is checked with the row)."""
        return ("pooling", token) if POOL.match(token) and "pooling" not in read else None

    def check(self) -> None:
        r = self.row
        if r.policy not in (None, SNAPKV):
            raise ValueError(f"a snapkv row has no policy other than snapkv: {r.policy!r}")
        object.__setattr__(r, "policy", SNAPKV)
        super().check()
        named = r.option("pooling")
        if named != DEFAULT_POOLING:
            m = POOL.match(str(named))
            if not m or int(m["kernel"]) % 2 == 0 or int(m["kernel"]) < 1:
                raise ValueError(
                    f"snapkv pooling must be avgK or maxK with an odd kernel K, got {named!r}"
                )

    @property
    def pooling(self) -> tuple[str, int]:
        """``(mode, kernel)``: ``("max", 5)`` unless the row names another."""
        m = POOL.match(self.row.option("pooling"))
        assert m is not None
        return m["mode"], int(m["kernel"])

    def head(self) -> str:
        named = self.row.option("pooling")
        return super().head() + (f":{named}" if named != DEFAULT_POOLING else "")

    def name(self) -> str:
        r, named = self.row, self.row.option("pooling")
        return (
            "SnapKV"
            + (f" ({r.allocation})" if r.allocation else "")
            + (f" ({named})" if named != DEFAULT_POOLING else "")
        )

    def read_prompt(self, model, prompt, cache, quant, reading, calibration_ids=None):
        T = len(prompt)
        alloc = self.allocation(model, calibration_ids)
        check_snapkv(alloc, T, DEFAULT_WINDOW)
        hidden, acc = snapkv_window_attention(model, prompt, cache, DEFAULT_WINDOW, quant=quant)
        mode, kernel = self.pooling
        kept = snapkv_kept(acc, alloc, DEFAULT_WINDOW, kernel, mode)
        return hidden, [[FixedKeep(k, T - 1) for k in heads] for heads in kept]

    def prompt_limit(self, n_tokens: int, question: int | None = None) -> int:
        return n_tokens - DEFAULT_WINDOW  # its window is read by its own pass
