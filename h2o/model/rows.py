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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from h2o.alloc import make_allocator, slot_bytes
from h2o.model.quant import BITS, GROUP, RESIDUAL, KiviSpec, kivi_bytes, kivi_bytes_kept
from h2o.policies.snapkv import SNAPKV

KINDS = ("full", "policy", "snapkv", "kivi")
ALLOCATIONS = ("pyramid", "adaptive", "duo")
#: Sinks kept in fp16 by "+sinks" (KVQuant's observation; StreamingLLM's 4).
DEFAULT_SINKS = 4

_EVICT = re.compile(
    r"^(?P<policy>[A-Za-z0-9_\-]+)@(?P<budget>\d+)(?:/(?P<alloc>[a-z]+))?(?P<opts>(?::[^:]+)*)$"
)
_WINDOW = re.compile(r"^w(?P<n>\d+)(?P<pct>%?)$")
_POOL = re.compile(r"^(?P<mode>avg|max)(?P<kernel>\d+)$")
#: H2O's two ways of reading a prompt: evicting while it reads (the card's decode-time rule at
#: every prompt token) or the authors' prefill mode (:mod:`h2o.model.prefill`).
MODES = ("decode", "prefill")
#: SnapKV's pooling when a row names none (``snapkv@256``): max pooling, kernel 5.
DEFAULT_POOLING = "max5"
_KIVI = re.compile(r"^kivi(?P<bits>\d+)(?P<opts>(?::[^:]+)*)$")
_RESIDUAL = re.compile(r"^r(?P<n>\d+)$")
_SINKS = re.compile(r"^sinks(?P<n>\d*)$")


def _policies() -> dict:
    from h2o.policies import POLICIES

    return POLICIES


@dataclass(frozen=True)
class Row:
    """What holds the KV cache during one run (see the module docstring for the labels)."""

    kind: str
    policy: str | None = None
    budget: int | None = None
    allocation: str | None = None
    bits: int | None = None
    sinks: int = 0
    #: a scored policy's recent window: ``window`` slots, or ``window_pct`` % of the budget
    window: int | None = None
    window_pct: int | None = None
    mode: str = "decode"
    #: SnapKV's pooling, e.g. ``"avg5"`` (None: :data:`DEFAULT_POOLING`, unnamed in the label)
    pooling: str | None = None
    #: a quantized cache's full-precision residual (None: KIVI's 128, unnamed in the label)
    residual: int | None = None
    #: whether the prompt is read through the quantized cache, as a token-by-token decoder
    #: would (``:qprompt``), rather than attended at full precision and quantized when stored
    #: (KIVI's prefill, the default)
    quantized_prompt: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown row kind {self.kind!r}; choose from {', '.join(KINDS)}")
        if self.allocation == "uniform":
            object.__setattr__(self, "allocation", None)
        evicts = self.kind in ("policy", "snapkv")
        if evicts:
            if self.kind == "snapkv" and self.policy not in (None, SNAPKV):
                raise ValueError(f"a snapkv row has no policy other than snapkv: {self.policy!r}")
            if self.kind == "snapkv":
                object.__setattr__(self, "policy", SNAPKV)
            elif self.policy not in _policies():
                raise ValueError(
                    f"unknown policy {self.policy!r}; choose from "
                    f"{', '.join(_policies())} or snapkv"
                )
            b = self.budget
            if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 1:
                raise ValueError(f"budget must be a positive integer, got {b!r}")
            if self.allocation is not None and self.allocation not in ALLOCATIONS:
                raise ValueError(
                    f"unknown allocation {self.allocation!r}; choose from uniform, "
                    + ", ".join(ALLOCATIONS)
                )
        else:
            for name in ("policy", "budget", "allocation"):
                if getattr(self, name) is not None:
                    raise ValueError(f"a {self.kind} row takes no {name}")
        if self.kind == "kivi" and self.bits is None:
            raise ValueError("a kivi row needs bits (2, 4, 8 or 16)")
        if self.kind == "full" and self.bits is not None:
            raise ValueError("the full row takes no bits (use kivi16)")
        if self.bits is not None:
            if self.bits not in BITS:
                raise ValueError(f"bits must be one of {', '.join(map(str, BITS))}")
            if evicts and self.bits == 16:
                raise ValueError("a combination needs 2, 4 or 8 bits (16 is the policy alone)")
        self._check_options()
        if self.residual is not None or self.quantized_prompt:
            if self.bits is None or self.bits == 16:
                raise ValueError("a residual or qprompt applies to a quantized cache (kivi2/4/8)")
            r = self.residual
            if r is not None and (
                isinstance(r, bool) or not isinstance(r, int) or r < GROUP or r % GROUP
            ):
                raise ValueError(
                    f"the residual must be a positive multiple of the group ({GROUP}), got {r!r}"
                )
            if r == RESIDUAL:
                object.__setattr__(self, "residual", None)  # one row, one label
        s = self.sinks
        if isinstance(s, bool) or not isinstance(s, int | np.integer) or s < 0:
            raise ValueError(f"sinks must be an integer >= 0, got {s!r}")
        if s and self.bits is None:
            raise ValueError("sinks apply to a quantized cache (kivi)")
        if s and self.bits == 16:
            raise ValueError("kivi16 is the full-precision cache: sinks change nothing")

    def _check_options(self) -> None:
        windowed = self.kind == "policy" and hasattr(
            _policies()[self.policy], "default_recent_window"
        )
        if self.window is not None or self.window_pct is not None:
            if not windowed:
                raise ValueError(
                    f"{self.policy or self.kind} has no recent window to set (:wN applies to "
                    "the scored policies: h2o, scissorhands, tova, random)"
                )
            if self.window is not None and self.window_pct is not None:
                raise ValueError("give the recent window in slots or as a share, not both")
            if self.allocation is not None:
                raise ValueError(
                    "a recent window with an allocation is not offered: each head's budget "
                    "differs there (use the uniform budget)"
                )
            w, pct = self.window, self.window_pct
            if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
                raise ValueError(f"the recent window must be an integer >= 0, got {w!r}")
            if pct is not None and (
                isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct < 100
            ):
                raise ValueError(f"a window share must be 0% to 99% of the budget, got {pct!r}")
            if self.recent_window >= int(self.budget):  # type: ignore[arg-type]
                raise ValueError(
                    f"recent window {self.recent_window} must be smaller than the budget "
                    f"{self.budget}: it would leave the score nothing to choose between"
                )
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose from {', '.join(MODES)}")
        if self.mode == "prefill":
            if self.kind != "policy" or not getattr(
                _policies()[self.policy], "prefill_selection", False
            ):
                raise ValueError(
                    f"{self.policy or self.kind} has no prefill mode (only h2o: the authors' "
                    "generation code chooses its heavy hitters from the prompt's attention)"
                )
            if self.allocation is not None or self.bits is not None:
                raise ValueError(
                    "h2o's prefill mode runs at a uniform budget in full precision (no "
                    "allocation, no quantization)"
                )
        if self.pooling is not None:
            if self.kind != "snapkv":
                raise ValueError(f"only snapkv pools its scores, not {self.policy or self.kind}")
            m = _POOL.match(str(self.pooling))
            if not m or int(m["kernel"]) % 2 == 0 or int(m["kernel"]) < 1:
                raise ValueError(
                    f"snapkv pooling must be avgK or maxK with an odd kernel K, got "
                    f"{self.pooling!r}"
                )
            if self.pooling == DEFAULT_POOLING:
                object.__setattr__(self, "pooling", None)  # one row, one label

    @property
    def recent_window(self) -> int | None:
        """The scored policy's recent window in slots (its class's default when the row sets
        none; None for a row that has none): a share is ``floor(budget * pct / 100)``."""
        if self.kind != "policy" or not hasattr(_policies()[self.policy], "default_recent_window"):
            return None
        if self.window is not None:
            return self.window
        if self.window_pct is not None:
            return int(self.budget) * self.window_pct // 100  # type: ignore[arg-type]
        return int(_policies()[self.policy].default_recent_window)

    @property
    def snapkv_pooling(self) -> tuple[str, int] | None:
        """SnapKV's ``(mode, kernel)``: ``("max", 5)`` unless the row names another."""
        if self.kind != "snapkv":
            return None
        m = _POOL.match(self.pooling or DEFAULT_POOLING)
        assert m is not None
        return m["mode"], int(m["kernel"])

    def policy_params(self) -> dict[str, int]:
        """The parameters the row sets on its policy's constructor (the recent window)."""
        if self.window is None and self.window_pct is None:
            return {}
        return {"recent_window": int(self.recent_window)}  # type: ignore[arg-type]

    # -- text ----------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Row:
        """A row from its label (module docstring); ``ValueError`` naming the problem."""
        if not isinstance(text, str):
            raise ValueError(f"a row label must be a string, got {type(text).__name__}")
        s = text.strip()
        if not s:
            raise ValueError("empty row label")
        if s == "full":
            return cls("full")
        parts = s.split("+")
        head, extras = parts[0], parts[1:]
        bits = None
        sinks = 0
        m = _KIVI.match(head)
        opts: dict = {}
        qopts: dict = {}
        if m:
            kind, policy, budget, alloc = "kivi", None, None, None
            bits = int(m["bits"])
            qopts = _kivi_options(s, m["opts"])
        else:
            m = _EVICT.match(head)
            if not m:
                raise ValueError(
                    f"cannot read row {s!r}: expected full, NAME@BUDGET[/ALLOCATION], kiviBITS, "
                    "or a combination such as h2o@256+kivi4"
                )
            policy, budget, alloc = m["policy"], int(m["budget"]), m["alloc"]
            kind = "snapkv" if policy == SNAPKV else "policy"
            opts = _options(s, m["opts"])
        for ex in extras:
            mk, ms = _KIVI.match(ex), _SINKS.match(ex)
            if mk and bits is None:
                bits = int(mk["bits"])
                qopts = _kivi_options(s, mk["opts"])
            elif ms and bits is not None and not sinks:
                sinks = int(ms["n"]) if ms["n"] else DEFAULT_SINKS
                if sinks == 0:
                    raise ValueError(f"row {s!r}: sinks0 keeps no sink")
            else:
                raise ValueError(f"row {s!r}: cannot read {'+' + ex!r} here")
        return cls(kind, policy, budget, alloc, bits, sinks, **opts, **qopts)

    @property
    def label(self) -> str:
        if self.kind == "full":
            return "full"
        out = ""
        if self.kind in ("policy", "snapkv"):
            out = f"{self.policy}@{self.budget}"
            if self.allocation:
                out += f"/{self.allocation}"
            if self.window is not None:
                out += f":w{self.window}"
            if self.window_pct is not None:
                out += f":w{self.window_pct}%"
            if self.mode != "decode":
                out += f":{self.mode}"
            if self.pooling:
                out += f":{self.pooling}"
        if self.bits is not None:
            out += ("+" if out else "") + f"kivi{self.bits}"
            if self.residual is not None:
                out += f":r{self.residual}"
            if self.quantized_prompt:
                out += ":qprompt"
        if self.sinks:
            out += "+sinks" + ("" if self.sinks == DEFAULT_SINKS else str(self.sinks))
        return out

    def __str__(self) -> str:
        return self.label

    @property
    def family(self) -> str:
        """The line this row sits on across budgets: "full cache", "H2O", "H2O (pyramid)",
        "SnapKV", "KIVI-style 4-bit", "KIVI-style 2-bit + sinks", "H2O + KIVI-style 4-bit"."""
        if self.kind == "full" or (self.kind == "kivi" and self.bits == 16):
            return "full cache"
        name = ""
        if self.kind == "policy":
            name = str(_policies()[self.policy].label)
        elif self.kind == "snapkv":
            name = "SnapKV"
        if name and self.allocation:
            name += f" ({self.allocation})"
        if self.mode == "prefill":
            name += " (prefill mode)"
        if self.window is not None:
            name += f", window {self.window}"
        if self.window_pct is not None:
            name += f", window {self.window_pct}% of the budget"
        if self.pooling:
            name += f" ({self.pooling})"
        if self.bits is not None:
            q = f"KIVI-style {self.bits}-bit"
            if self.sinks:
                q += " + sinks"
            if self.residual is not None:
                q += f", residual {self.residual}"
            if self.quantized_prompt:
                q += ", prompt read quantized"
            name = f"{name} + {q}" if name else q
        return name

    # -- what it holds -------------------------------------------------------------------------
    @property
    def evicts(self) -> bool:
        return self.kind in ("policy", "snapkv")

    @property
    def kivi(self) -> KiviSpec | None:
        """The quantization spec, or None for a full-precision row (kivi16 included)."""
        if self.bits is None or self.bits == 16:
            return None
        return KiviSpec(self.bits, self.sinks, residual=self.residual or RESIDUAL)

    def bookkeeping_per_slot(self) -> int:
        """A policy's own bytes per slot (its class's ``nbytes_per_slot``; 0 if it keeps no
        per-slot state beyond the cache: a ring of positions, or SnapKV's one-shot choice)."""
        if self.kind != "policy":
            return 0
        return int(getattr(_policies()[self.policy], "nbytes_per_slot", 0))

    def slots(self, cfg, n_tokens: int) -> np.ndarray:
        """Slots held per (layer, KV head) after ``n_tokens``: ``(n_layers, n_kv_heads)``."""
        L, G = cfg.n_layers, cfg.n_kv_heads
        n = max(0, int(n_tokens))
        if not self.evicts:
            return np.full((L, G), n, dtype=np.int64)
        if self.allocation is None:
            budgets = np.full((L, G), int(self.budget), dtype=np.int64)
        else:
            # duo's budgets depend on which heads are retrieval heads, not on how many slots
            # each class gets: any shares give the same multiset, hence the same bytes
            budgets = (
                make_allocator(self.allocation)
                .allocate(L, G, int(self.budget), head_dim=cfg.head_dim, shares=np.zeros((L, G)))
                .budgets
            )
        return np.minimum(budgets, n)

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
        return int(cache + int(slots.sum()) * self.bookkeeping_per_slot())


def _kivi_options(label: str, text: str) -> dict:
    """The ``:opt`` items after ``kiviBITS``: ``rN`` (the residual), ``qprompt``."""
    out: dict = {}
    for item in [t for t in text.split(":") if t] if text else []:
        mr = _RESIDUAL.match(item)
        if mr and "residual" not in out:
            out["residual"] = int(mr["n"])
        elif item == "qprompt" and "quantized_prompt" not in out:
            out["quantized_prompt"] = True
        else:
            raise ValueError(
                f"row {label!r}: cannot read option {':' + item!r} after kiviBITS (rN for the "
                "full-precision residual, qprompt to read the prompt through the quantized "
                "cache)"
            )
    return out


def _options(label: str, text: str) -> dict:
    """The ``:opt`` items after ``NAME@BUDGET[/ALLOCATION]`` as Row fields."""
    out: dict = {}
    for item in [t for t in text.split(":") if t] if text else []:
        mw, mp = _WINDOW.match(item), _POOL.match(item)
        if mw and "window" not in out and "window_pct" not in out:
            out["window_pct" if mw["pct"] else "window"] = int(mw["n"])
        elif item in MODES and "mode" not in out:
            out["mode"] = item
        elif mp and "pooling" not in out:
            out["pooling"] = item
        else:
            raise ValueError(
                f"row {label!r}: cannot read option {':' + item!r} (wN or wN% for a recent "
                "window, prefill for h2o's prefill mode, avgK/maxK for snapkv's pooling)"
            )
    return out


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
