"""KIVI-style quantization (Liu et al., ICML 2024, "KIVI: A Tuning-Free Asymmetric 2bit
Quantization for KV Cache"): every token kept, keys quantized per channel and values per token
in groups of 32, the newest tokens (the residual, 128) in full precision (``kivi2``, ``kivi4``,
``kivi8``; ``kivi16`` is the full cache). The codes themselves are :mod:`h2o.model.quant`'s; a
row with ``+kiviN`` after an evicting head holds that kind's kept slots the same way."""

from __future__ import annotations

import re
from typing import Any

from h2o.model.caches.base import CacheKind

KIVI = re.compile(r"^kivi(?P<bits>\d+)(?P<opts>(?::[^:]+)*)$")
_RESIDUAL = re.compile(r"^r(?P<n>\d+)$")


def kivi_options(label: str, text: str) -> dict[str, Any]:
    """The ``:opt`` items after ``kiviBITS``: ``rN`` (the residual), ``qprompt``."""
    out: dict[str, Any] = {}
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


def parse_kivi(text: str, label: str) -> dict[str, Any] | None:
    """``bits`` and the quantizer's options of ``kiviBITS[:rN][:qprompt]``, or None."""
    m = KIVI.match(text)
    if not m:
        return None
    return {"bits": int(m["bits"]), **kivi_options(label, m["opts"])}


class KiviCache(CacheKind):
    """Every token kept, at ``bits`` bits (the quantizer lives in the row: :attr:`Row.kivi`)."""

    kind = "kivi"
    rank = 7
    quantizable = True

    @property
    def group(self) -> str:  # type: ignore[override]
        return "full" if self.row.bits == 16 else "compress"

    @classmethod
    def parse_head(cls, head: str, label: str) -> dict[str, Any] | None:
        return parse_kivi(head, label)

    def check(self) -> None:
        if self.row.bits is None:
            raise ValueError("a kivi row needs bits (2, 4, 8 or 16)")

    def head(self) -> str:
        return ""  # the row writes its quantization (kiviN...) after the head

    def name(self) -> str:
        return "full cache" if self.row.bits == 16 else ""
