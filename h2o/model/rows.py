"""A *row*: what holds the KV cache during one run — the full cache, an eviction policy at a
budget (under an allocation), SnapKV, a KIVI-style quantized cache, or eviction and
quantization combined — with its label, its family (one line on the memory frontier) and the
bytes it holds.

Label syntax (:meth:`Row.parse`, :attr:`Row.label` round-trips)::

    full                      the full cache (fp16 as served)
    h2o@128                   a decode-time policy of the registry at 128 slots per head
    h2o@128/pyramid           ... under an allocation (pyramid, adaptive, duo)
    h2o@128:w64, h2o@128:w50%  ... its recent window set: 64 slots, or half the budget (the
                              authors' 1:1 split of heavy hitters and recent tokens); without
                              it a scored policy keeps its class's default (H2O: 32)
    h2o@128:w50%:prefill      H2O in the authors' prefill mode (:mod:`h2o.model.prefill`):
                              the prompt read with full attention, the heavy hitters chosen
                              from its accumulated attention, the card's rule while decoding
    snapkv@256:avg5           SnapKV with its pooling named: avg5 (its released default),
                              max7 (its LongBench configs), max5 (plain ``snapkv@256``)
    snapkv@256                SnapKV (one compression after the prompt)
    knorm@256                 K-norm: one compression after the prompt by the keys' L2
                              norms, no attention read (:mod:`h2o.model.caches.knorm_cache`)
    kvzip@256                 KVzip: one compression after the prompt by what the model reads
                              while it repeats it (:mod:`h2o.model.caches.kvzip_cache`)
    expected-attention@256    Expected Attention: one compression after the prompt by the
                              attention the next queries are expected to pay
                              (:mod:`h2o.model.caches.expected_attention_cache`)
    quest@256                 Quest: every key held, each step reading the pages of 16 keys
                              whose bound on q·k ranks highest, 256 tokens' worth
                              (:mod:`h2o.model.caches.quest_cache`)
    kivi4, kivi2+sinks        KIVI-style 2/4/8 bits (16 = full precision), +sinks: 4 fp16 sinks;
                              as the paper runs it: group 32, residual 128, the prompt attended
                              at full precision and quantized when stored
    kivi4:r32, kivi4:qprompt  ... residual 32; the prompt read through the quantized cache, as
                              a token-by-token decoder would (both: the shipped rows before
                              the paper's settings, ``kivi4:r32:qprompt``)
    h2o@256+kivi4             the policy's kept slots held at 4 bits (snapkv@256+kivi4 too)

Bytes (:meth:`Row.kv_bytes`) are counted honestly: fp16 keys and values of every slot held
(:func:`h2o.alloc.slot_bytes`), the codes, scales and zero points of quantized ones
(:func:`h2o.model.quant.kivi_bytes`), and a policy's own bookkeeping per slot (the scored
policies' ``nbytes_per_slot``: 13 bytes; a ring of positions (StreamingLLM, sliding window) and
SnapKV's one-shot selection keep no per-slot state beyond the cache).

Each kind of cache is one class (:mod:`h2o.model.caches`: :class:`~h2o.model.caches.FullCache`,
:class:`~h2o.model.caches.EvictingCache`, :class:`~h2o.model.caches.SnapKVCache`,
:class:`~h2o.model.caches.KiviCache`): its part of the grammar, its name, what it holds and how the
model attends through it. The grammar here splits a label into its parts — a head
(``NAME[@BUDGET[/ALLOCATION]][:opt...]``, :func:`~h2o.model.caches.base.split_head`), then
``+kiviN...`` and ``+sinks`` — and hands the head to the kinds until one reads it, its options with
it: a kind declares its options, reads, checks and writes them, and a row keeps what every row has
(kind, policy, budget, allocation, bits, sinks) and its options (:attr:`Row.options`, read with
:meth:`Row.option`). A ``+kiviN`` part, options included, is read and written by
:class:`~h2o.model.caches.KiviCache` whatever the head. A row asks its kind (:attr:`Row.cache`);
what is shared — the quantization a ``+kiviN`` adds, the sinks, the bytes — lives here, and so does
what must know both a row and what its kinds call: :func:`held_bytes`, the bytes a policy holds
under an allocation (:mod:`h2o.model.allocation`) counted as its row's. The kinds never import this
module at run time (only for type hints): it sits above them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from h2o.alloc import Allocation, slot_bytes
from h2o.model.caches import BUILT_IN as BUILT_IN_KINDS
from h2o.model.caches import CACHE_KINDS, CacheKind, KiviCache, parse_order
from h2o.model.caches.base import ALLOCATIONS, split_head
from h2o.model.caches.evicting_cache import MODES
from h2o.model.caches.snapkv_cache import DEFAULT_POOLING
from h2o.model.quant import BITS, KiviSpec, kivi_bytes, kivi_bytes_kept

__all__ = [
    "ALLOCATIONS",
    "DEFAULT_POOLING",
    "DEFAULT_SINKS",
    "KINDS",
    "MODES",
    "Row",
    "allocation_record",
    "held_bytes",
    "kinds",
]
#: Sinks kept in fp16 by "+sinks" (KVQuant's observation; StreamingLLM's 4).
DEFAULT_SINKS = 4
_SINKS = re.compile(r"^sinks(?P<n>\d*)$")


def kinds() -> tuple[str, ...]:
    """Every kind of cache a row can name now (the built-in ones and any registered), in their
    order in tables and menus (:attr:`~h2o.model.caches.CacheKind.rank`)."""
    return tuple(sorted(CACHE_KINDS, key=lambda k: CACHE_KINDS[k].rank))


#: The built-in kinds of cache, in their order in tables (:func:`kinds` adds any registered since).
KINDS = tuple(k for k in kinds() if k in BUILT_IN_KINDS)


def _owner(name: str) -> type[CacheKind]:
    """The kind that declares the option ``name`` (the quantizer's are KIVI's); ``ValueError``
    if none does."""
    for kind in CACHE_KINDS.values():
        if name in kind.options:
            return kind
    raise ValueError(f"no kind of cache takes an option {name!r}")


@dataclass(frozen=True)
class Row:
    """What holds the KV cache during one run (see the module docstring for the labels)."""

    kind: str
    policy: str | None = None
    budget: int | None = None
    allocation: str | None = None
    bits: int | None = None
    sinks: int = 0
    #: the options its kind (or its quantization) reads, as ``(name, value)`` pairs sorted by
    #: name — only those set to something other than naming none; given as a mapping or pairs
    #: (``Row("policy", "h2o", 128, options={"window_pct": 50})``), read with :meth:`option`
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in CACHE_KINDS:
            raise ValueError(f"unknown row kind {self.kind!r}; choose from {', '.join(kinds())}")
        if self.allocation == "uniform":
            object.__setattr__(self, "allocation", None)
        given = self.options
        pairs = given.items() if isinstance(given, Mapping) else given
        named = {n: v for n, v in pairs if v != _owner(n).options[n]}
        object.__setattr__(self, "options", tuple(sorted(named.items())))
        cache = self.cache
        for name in ("policy", "budget", "allocation"):
            if name not in cache.takes and getattr(self, name) is not None:
                raise ValueError(f"a {self.kind} row takes no {name}")
        foreign = sorted(set(named) - {*cache.options, *KiviCache.options})
        if foreign:
            who = self.policy or self.kind
            raise ValueError(f"a {self.kind} row ({who}) takes no option {foreign[0]!r}")
        cache.check()
        if self.bits is not None:
            if not cache.quantizable:
                raise ValueError(f"a {self.kind} row takes no bits")
            if self.bits not in BITS:
                raise ValueError(f"bits must be one of {', '.join(map(str, BITS))}")
        KiviCache.check_quantizer(self)
        s = self.sinks
        if isinstance(s, bool) or not isinstance(s, int | np.integer) or s < 0:
            raise ValueError(f"sinks must be an integer >= 0, got {s!r}")
        if s and self.bits is None:
            raise ValueError("sinks apply to a quantized cache (kivi)")
        if s and self.bits == 16:
            raise ValueError("kivi16 is the full-precision cache: sinks change nothing")

    def option(self, name: str) -> Any:
        """The value of the option ``name`` (its kind's, or its quantization's): as set, or as
        its kind declares it when unset (``ValueError`` for a name no kind declares)."""
        for n, v in self.options:
            if n == name:
                return v
        return _owner(name).options[name]

    @property
    def cache(self) -> CacheKind:
        """The row's kind of cache (:mod:`h2o.model.caches`), asked about this row."""
        return CACHE_KINDS[self.kind](self)

    @property
    def recent_window(self) -> int | None:
        """The scored policy's recent window in slots (its class's default when the row sets
        none; None for a row that has none): a share is ``floor(budget * pct / 100)``."""
        return getattr(self.cache, "recent_window", None)

    def policy_params(self) -> dict[str, int]:
        """The parameters the row sets on its policy's constructor (the recent window)."""
        params = getattr(self.cache, "policy_params", None)
        return params() if params is not None else {}

    # -- text ----------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Row:
        """A row from its label (module docstring); ``ValueError`` naming the problem."""
        if not isinstance(text, str):
            raise ValueError(f"a row label must be a string, got {type(text).__name__}")
        s = text.strip()
        if not s:
            raise ValueError("empty row label")
        parts = s.split("+")
        head, extras = split_head(parts[0]), parts[1:]
        for kind in parse_order() if head is not None else []:
            fields = kind.parse_head(head, s)
            if fields is not None:
                break
        else:
            raise ValueError(
                f"cannot read row {s!r}: expected full, NAME@BUDGET[/ALLOCATION], kiviBITS, "
                "or a combination such as h2o@256+kivi4"
            )
        sinks = 0
        for ex in extras:
            quant, ms = KiviCache.parse_quantizer(ex, s), _SINKS.match(ex)
            if quant is not None and "bits" not in fields:
                fields["bits"] = quant["bits"]
                fields["options"] = {**fields.get("options", {}), **quant["options"]}
            elif ms and "bits" in fields and not sinks:
                sinks = int(ms["n"]) if ms["n"] else DEFAULT_SINKS
                if sinks == 0:
                    raise ValueError(f"row {s!r}: sinks0 keeps no sink")
            else:
                raise ValueError(f"row {s!r}: cannot read {'+' + ex!r} here")
        return cls(kind.kind, sinks=sinks, **fields)

    @property
    def label(self) -> str:
        out = self.cache.head()
        if self.bits is not None:
            out += ("+" if out else "") + KiviCache.quantizer_label(self)
        if self.sinks:
            out += "+sinks" + ("" if self.sinks == DEFAULT_SINKS else str(self.sinks))
        return out

    def __str__(self) -> str:
        return self.label

    @property
    def group(self) -> str:
        """The frontier's group: ``"full"``, ``"evict"``, ``"compress"``, or ``"both"`` (an
        evicting kind whose kept slots are quantized)."""
        g = self.cache.group
        return "both" if g == "evict" and self.bits is not None else g

    @property
    def family(self) -> str:
        """The line this row sits on across budgets: "full cache", "H2O", "H2O (pyramid)",
        "SnapKV", "KIVI-style 4-bit", "KIVI-style 2-bit + sinks", "H2O + KIVI-style 4-bit"."""
        if self.group == "full":
            return "full cache"
        name = self.cache.name()
        if self.bits is not None:
            q = KiviCache.quantizer_name(self)
            name = f"{name} + {q}" if name else q
        return name

    # -- what it holds -------------------------------------------------------------------------
    @property
    def evicts(self) -> bool:
        return self.cache.evicts

    @property
    def kivi(self) -> KiviSpec | None:
        """The quantization spec, or None for a full-precision row (kivi16 included)."""
        if self.bits is None or self.bits == 16:
            return None
        return KiviSpec(self.bits, self.sinks, residual=self.option("residual"))

    def bookkeeping_per_slot(self) -> int:
        """A policy's own bytes per slot (its class's ``nbytes_per_slot``; 0 if it keeps no
        per-slot state beyond the cache: a ring of positions, or SnapKV's one-shot choice)."""
        return self.cache.bookkeeping_per_slot()

    def slots(self, cfg, n_tokens: int) -> np.ndarray:
        """Slots held per (layer, KV head) after ``n_tokens``: ``(n_layers, n_kv_heads)``."""
        return self.cache.slots(cfg, n_tokens)

    def kv_bytes(self, cfg, n_tokens: int, kept=None) -> int:
        """Bytes held after ``n_tokens`` tokens (for SnapKV: after compressing a prompt of
        ``n_tokens``): every slot's key and value (fp16, or KIVI codes + scales + zero points +
        full-precision residual and sinks), plus the policy's bookkeeping per slot.

        ``kept`` (``kept[layer][kv_head]``, the positions a run's policies hold) counts what
        that run holds: for a combination, each 32-token key group a kept token belongs to
        keeps its scales, however thinned by eviction (:func:`kivi_bytes_kept`). Without it a
        combination is counted as if each head kept its newest slots (contiguous: the fewest
        coded tokens and groups, so the least any run of it holds; runs report their own)."""
        hd = cfg.head_dim
        spec = self.kivi
        if kept is not None and self.evicts:
            heads = [np.asarray(kk) for row in kept for kk in row]
            n_slots = sum(int(kk.size) for kk in heads)
            if spec is None:
                cache = n_slots * slot_bytes(hd)
            else:
                cache = kivi_bytes_kept(spec, heads, n_tokens, hd)
            return int(cache + n_slots * self.bookkeeping_per_slot())
        slots = self.slots(cfg, n_tokens)
        if spec is None:
            cache = int(slots.sum()) * slot_bytes(hd)
        elif not self.evicts:
            cache = kivi_bytes(spec, n_tokens, hd, int(slots.size))
        else:
            # without a run's kept sets: as if each head kept its newest ``b`` positions —
            # the fewest coded tokens and key groups any ``b`` slots can hold
            n = max(0, int(n_tokens))
            vals, counts = np.unique(slots, return_counts=True)
            cache = sum(
                int(c) * kivi_bytes_kept(spec, [np.arange(n - int(b), n)], n, hd)
                for b, c in zip(vals, counts, strict=True)
            )
        extra = self.cache.summary_bytes(cfg, n_tokens)
        return int(cache + int(slots.sum()) * self.bookkeeping_per_slot() + extra)

    def read_bytes(self, cfg, n_tokens: int, kept=None, reads=None) -> int:
        """Bytes one decoding step reads with ``n_tokens`` in the cache: everything the row
        holds (:meth:`kv_bytes`), but for a kind that reads a part of it (Quest: the page
        summaries and the pages read; ``reads``, the run's selector, counts what it read)."""
        return self.cache.read_bytes(cfg, n_tokens, self.kv_bytes(cfg, n_tokens, kept), reads)


def parse_rows(text: str) -> list[Row]:
    """Comma-separated labels; ``ValueError`` naming the first bad one (and repeats)."""
    if not isinstance(text, str):
        raise ValueError("rows must be a comma-separated string")
    labels = [p.strip() for p in text.split(",")]
    if not any(labels):
        raise ValueError("no rows given")
    rows: list[Row] = []
    for lab in labels:
        if not lab:
            raise ValueError(f"empty row label in {text!r}")
        row = Row.parse(lab)
        if row in rows:
            raise ValueError(f"row {row.label!r} is given twice")
        rows.append(row)
    return rows


# -- the bytes a policy holds under an allocation ------------------------------------------------
def held_bytes(policy: str, allocation: Allocation, cfg: Any, n_tokens: int) -> int:
    """Bytes ``policy`` under ``allocation`` holds after ``n_tokens`` tokens (SnapKV: after
    compressing a prompt of ``n_tokens``), counted by :meth:`Row.kv_bytes` — the
    one count the needle pages, the frontier and the budget page state: per slot held a float16
    key and value, plus the policy's own bookkeeping (13 bytes for the scored policies).

    Each (layer, KV head) holds ``min(its budget, n_tokens)`` slots of ``allocation``'s own grid
    (so allocator parameters other than the defaults are counted as run). ``cfg``: the model's
    config (``n_layers``, ``n_kv_heads``, ``head_dim``).
    """
    row = Row.parse(f"{policy}@{allocation.budget}/{allocation.name}")
    n = max(0, int(n_tokens))
    held = np.minimum(np.asarray(allocation.budgets, dtype=np.int64), n)
    # the newest positions stand for what each head keeps: a float16 row counts only how many
    kept = [[np.arange(n - int(b), n) for b in layer] for layer in held]
    return row.kv_bytes(cfg, n, kept=kept)


def allocation_record(
    policy: str, allocation: Allocation, cfg: Any, n_tokens: int
) -> dict[str, Any]:
    """:meth:`Allocation.as_dict` with ``kv_bytes``, the bytes ``policy`` holds under it after
    ``n_tokens`` (:func:`held_bytes`), in place of the allocation's float16 slots alone."""
    held = held_bytes(policy, allocation, cfg, n_tokens)
    return {
        ("kv_bytes" if k == "cache_bytes" else k): (held if k == "cache_bytes" else v)
        for k, v in allocation.as_dict().items()
    }
