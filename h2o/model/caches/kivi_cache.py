"""KIVI-style quantization (Liu et al., ICML 2024, "KIVI: A Tuning-Free Asymmetric 2bit
Quantization for KV Cache"): every token kept, keys quantized per channel and values per token
in groups of 32, the newest tokens (the residual, 128) in full precision (``kivi2``, ``kivi4``,
``kivi8``; ``kivi16`` is the full cache). The codes themselves are :mod:`h2o.model.quant`'s; a
row with ``+kiviN`` after an evicting head holds that kind's kept slots the same way."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from h2o.model.caches.base import CacheKind, Head, split_head
from h2o.model.quant import GROUP, RESIDUAL

if TYPE_CHECKING:
    from h2o.model.rows import Row

_BITS = re.compile(r"^kivi(?P<bits>\d+)$")
_RESIDUAL = re.compile(r"^r(?P<n>\d+)$")


class KiviCache(CacheKind):
    """Every token kept, at ``bits`` bits (the quantizer's spec is the row's: :attr:`Row.kivi`).

    Its part of a label, ``kiviBITS[:rN][:qprompt]``, is the same whether it is the whole head
    (``kivi4:r32``) or follows an evicting one (``h2o@256+kivi4:r32``): this class reads it
    (:meth:`parse_quantizer`), checks it (:meth:`check_quantizer`) and writes it
    (:meth:`quantizer_label`) for every row with bits."""

    kind = "kivi"
    rank = 7
    quantizable = True
    #: the full-precision residual, ``:rN`` (KIVI's 128 unnamed in the label), and
    #: whether the prompt is read through the quantized cache, as a token-by-token decoder
    #: would (``:qprompt``), rather than attended at full precision and quantized when stored
    #: (KIVI's prefill)
    options: ClassVar[Mapping[str, Any]] = {"residual": RESIDUAL, "quantized_prompt": False}
    option_hints = (
        "rN for the full-precision residual",
        "qprompt to read the prompt through the quantized cache",
    )

    @property
    def group(self) -> str:  # type: ignore[override]
        return "full" if self.row.bits == 16 else "compress"

    @classmethod
    def parse_head(cls, head: Head, label: str) -> dict[str, Any] | None:
        m = _BITS.match(head.name)
        if not m or head.budget is not None:
            return None
        return {"bits": int(m["bits"]), "options": cls.read_options(head.tokens, label)}

    @classmethod
    def parse_quantizer(cls, text: str, label: str) -> dict[str, Any] | None:
        """``bits`` and the options of a ``+kiviBITS[:rN][:qprompt]`` part, or None."""
        head = split_head(text)
        return None if head is None else cls.parse_head(head, label)

    @classmethod
    def read_option(cls, token: str, read: Mapping[str, Any]) -> tuple[str, Any] | None:
        """``rN`` (the residual), ``qprompt``, each once."""
        m = _RESIDUAL.match(token)
        if m and "residual" not in read:
            return "residual", int(m["n"])
        if token == "qprompt" and "quantized_prompt" not in read:
            return "quantized_prompt", True
        return None

    @staticmethod
    def check_quantizer(row: Row) -> None:
        """Refuse a residual or ``qprompt`` on a row not quantized, and a residual that is not
        a positive multiple of the group."""
        r = row.option("residual")
        if r != RESIDUAL or row.option("quantized_prompt"):
            if row.bits is None or row.bits == 16:
                raise ValueError("a residual or qprompt applies to a quantized cache (kivi2/4/8)")
            if isinstance(r, bool) or not isinstance(r, int) or r < GROUP or r % GROUP:
                raise ValueError(
                    f"the residual must be a positive multiple of the group ({GROUP}), got {r!r}"
                )

    @staticmethod
    def quantizer_label(row: Row) -> str:
        """The label's ``kiviBITS[:rN][:qprompt]`` of a row with bits."""
        out = f"kivi{row.bits}"
        if row.option("residual") != RESIDUAL:
            out += f":r{row.option('residual')}"
        if row.option("quantized_prompt"):
            out += ":qprompt"
        return out

    @staticmethod
    def quantizer_name(row: Row) -> str:
        """The family's words for a row's quantization: "KIVI-style 4-bit + sinks, residual
        32, prompt read quantized"."""
        q = f"KIVI-style {row.bits}-bit"
        if row.sinks:
            q += " + sinks"
        if row.option("residual") != RESIDUAL:
            q += f", residual {row.option('residual')}"
        if row.option("quantized_prompt"):
            q += ", prompt read quantized"
        return q

    def check(self) -> None:
        if self.row.bits is None:
            raise ValueError("a kivi row needs bits (2, 4, 8 or 16)")

    def head(self) -> str:
        return ""  # the row writes its quantization (kiviN...) after the head

    def name(self) -> str:
        return "full cache" if self.row.bits == 16 else ""
