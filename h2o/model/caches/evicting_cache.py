"""A decode-time eviction policy of the registry at a budget (``h2o@128``, ``tova@256/pyramid``,
``h2o@128:w50%``): the policy is stepped at every token, prompt tokens included, in every
(layer, KV head) — each layer one lock-step bank (:mod:`h2o.model.quality`) or, under an
allocation, its budgets per head (:mod:`h2o.model.allocation`).

A scored policy's recent window can be set (``:w64``, or ``:w50%``, the authors' 1:1 split of
heavy hitters and recent tokens); its name says the window it runs with, its class's default
included ("H2O, window 32"), so a reader can tell two rows' windows apart — except where the
window is part of the policy's rule (its class's ``own_window``: TOVA protects only the token
just admitted), which is named only when a row sets another. H2O also runs in the authors'
prefill mode (``:prefill``,
:mod:`h2o.model.prefill`): the prompt read with full attention, the heavy hitters chosen from
its accumulated attention, the card's rule while decoding — the two differ on a fact read once
in the middle of a prompt by *when* its attention is counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from h2o.model.allocation import allocated_factory
from h2o.model.caches.base import CACHE_KINDS, Budgeted, Head, Reading
from h2o.model.prefill import prefill_policies, prompt_attention
from h2o.model.quality import make_banks, policy_factory
from h2o.policies import POLICIES

#: H2O's two ways of reading a prompt: evicting while it reads (the card's decode-time rule at
#: every prompt token) or the authors' prefill mode (:mod:`h2o.model.prefill`).
MODES = ("decode", "prefill")
_WINDOW = re.compile(r"^w(?P<n>\d+)(?P<pct>%?)$")


class EvictingCache(Budgeted):
    """A policy of :data:`h2o.policies.POLICIES` evicting as it reads, at ``budget`` slots."""

    kind = "policy"
    rank = 1
    #: a scored policy's recent window, ``:wN`` slots or ``:wN%`` of the budget (None: its
    #: class's default), and H2O's way of reading a prompt (``:prefill``)
    options: ClassVar[Mapping[str, Any]] = {"window": None, "window_pct": None, "mode": "decode"}
    option_hints = ("wN or wN% for a recent window", "prefill for h2o's prefill mode")
    fallback = True  # NAME@BUDGET with any name: an unknown one is refused by name

    @classmethod
    def policy_of(cls, head: Head) -> str | None:
        return head.name  # any name: the row refuses an unknown policy by name

    @classmethod
    def read_option(cls, token: str, read: Mapping[str, Any]) -> tuple[str, Any] | None:
        """``wN`` / ``wN%`` (one recent window, in slots or as a share), ``prefill``."""
        m = _WINDOW.match(token)
        if m and "window" not in read and "window_pct" not in read:
            return ("window_pct" if m["pct"] else "window"), int(m["n"])
        if token in MODES and "mode" not in read:
            return "mode", token
        return None

    @property
    def window(self) -> int | None:
        """The recent window the row sets in slots (None: unset)."""
        return self.row.option("window")

    @property
    def window_pct(self) -> int | None:
        """The recent window the row sets as a share of the budget, in % (None: unset)."""
        return self.row.option("window_pct")

    @property
    def mode(self) -> str:
        return self.row.option("mode")

    @property
    def prefill(self) -> bool:
        return self.mode == "prefill"

    @property
    def closed_loop(self) -> bool:  # type: ignore[override]
        return not self.prefill  # the prefill mode chooses once, after a prompt

    @property
    def windowed(self) -> bool:
        return hasattr(POLICIES.get(self.row.policy), "default_recent_window")

    def check(self) -> None:
        r = self.row
        if r.policy not in POLICIES:
            raise ValueError(
                f"unknown policy {r.policy!r}; choose from {', '.join(POLICIES)} or snapkv"
            )
        if POLICIES[r.policy].reads_trace:
            twin = [c for c in CACHE_KINDS.values() if c.decode_policy == r.policy]
            raise ValueError(
                f"{r.policy} reads a trace's {', '.join(POLICIES[r.policy].reads_trace)}, "
                "which a model run does not hand it"
                + "".join(
                    f"; {c.kind}@B runs {POLICIES[r.policy].label} on the model (a prompt "
                    "compressed once as kvpress does; over a text, this policy fed by the model)"
                    for c in twin
                )
            )
        super().check()
        w, pct = self.window, self.window_pct
        if w is not None or pct is not None:
            if not self.windowed:
                raise ValueError(
                    f"{r.policy} has no recent window to set (:wN applies to the scored "
                    "policies: h2o, scissorhands, tova, random)"
                )
            if w is not None and pct is not None:
                raise ValueError("give the recent window in slots or as a share, not both")
            if r.allocation is not None:
                raise ValueError(
                    "a recent window with an allocation is not offered: each head's budget "
                    "differs there (use the uniform budget)"
                )
            if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
                raise ValueError(f"the recent window must be an integer >= 0, got {w!r}")
            if pct is not None and (
                isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct < 100
            ):
                raise ValueError(f"a window share must be 0% to 99% of the budget, got {pct!r}")
            if self.recent_window >= int(r.budget):  # type: ignore[operator, arg-type]
                raise ValueError(
                    f"recent window {self.recent_window} must be smaller than the budget "
                    f"{r.budget}: it would leave the score nothing to choose between"
                )
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose from {', '.join(MODES)}")
        if self.prefill:
            if not getattr(POLICIES[r.policy], "prefill_selection", False):
                raise ValueError(
                    f"{r.policy} has no prefill mode (only h2o: the authors' generation code "
                    "chooses its heavy hitters from the prompt's attention)"
                )
            if r.allocation is not None or r.bits is not None:
                raise ValueError(
                    "h2o's prefill mode runs at a uniform budget in full precision (no "
                    "allocation, no quantization)"
                )

    @property
    def recent_window(self) -> int | None:
        """The recent window in slots (the class's default when the row sets none; None for a
        policy that has none): a share is ``floor(budget * pct / 100)``."""
        r = self.row
        if not self.windowed:
            return None
        if self.window is not None:
            return self.window
        if self.window_pct is not None:
            return int(r.budget) * self.window_pct // 100  # type: ignore[arg-type]
        return int(POLICIES[r.policy].default_recent_window)

    def policy_params(self) -> dict[str, int]:
        """The parameters the row sets on its policy's constructor (the recent window)."""
        if self.window is None and self.window_pct is None:
            return {}
        return {"recent_window": int(self.recent_window)}  # type: ignore[arg-type]

    def head(self) -> str:
        out = super().head()
        if self.window is not None:
            out += f":w{self.window}"
        if self.window_pct is not None:
            out += f":w{self.window_pct}%"
        if self.prefill:
            out += ":prefill"
        return out

    def name(self) -> str:
        r = self.row
        out = str(POLICIES[r.policy].label)
        if r.allocation:
            out += f" ({r.allocation})"
        if self.prefill:
            out += " (prefill mode)"
        return out + self.window_text()

    def window_text(self) -> str:
        """The recent window as the row's name says it: ``", window 64"``, ``", window 50% of
        the budget"``, or the class's default when the row sets none (``", window 32"``); ""
        for a policy without a recent window (StreamingLLM, the sliding window), and for one
        whose window is part of its rule (TOVA: its class's ``own_window``) unless the row sets
        another."""
        r = self.row
        if self.window is not None:
            return f", window {self.window}"
        if self.window_pct is not None:
            return f", window {self.window_pct}% of the budget"
        if not self.windowed or getattr(POLICIES[r.policy], "own_window", False):
            return ""
        return f", window {self.recent_window}"

    def bookkeeping_per_slot(self) -> int:
        return int(getattr(POLICIES[self.row.policy], "nbytes_per_slot", 0))

    # -- how the model attends through it ----------------------------------------------------
    def decode_policies(self, model, calibration_ids: Sequence[int] | None = None):
        r = self.row
        if self.prefill:
            return None  # it chooses after the prompt (read_prompt)
        if r.allocation is None:
            factory = policy_factory(r.policy, int(r.budget), **self.policy_params())  # type: ignore[arg-type]
        else:
            factory, _ = allocated_factory(r.policy, self.allocation(model, calibration_ids))  # type: ignore[arg-type]
        return make_banks(model, factory)

    def begin(self, model, calibration_ids, length: int, start=None) -> Reading:
        if not self.prefill:
            return super().begin(model, calibration_ids, length, start)
        cfg = model.config
        acc = np.zeros((cfg.n_layers, cfg.n_kv_heads, int(length)))
        if start is not None and start.acc is not None:
            acc[:, :, : start.length] = start.acc
        return Reading(acc=acc)

    def read_prefix(self, model, part, cache, quant, reading: Reading) -> np.ndarray:
        if not self.prefill:
            return super().read_prefix(model, part, cache, quant, reading)
        hidden, _ = prompt_attention(model, part, cache, reading.acc)
        return hidden

    def read_prompt(self, model, prompt, cache, quant, reading, calibration_ids=None):
        hidden = self.read_prefix(model, prompt, cache, quant, reading)
        if not self.prefill:
            return hidden, reading.policies
        return hidden, prefill_policies(reading.acc, int(self.row.budget), int(self.recent_window))  # type: ignore[arg-type]
