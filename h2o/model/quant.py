"""KIVI-style quantized KV caches, simulated in numpy (Liu et al., 2024, arXiv:2402.02750).

The model computes in float32 and attends to *dequantized* keys and values: what a serving
stack that stores the codes would compute, without its packed kernels. Asymmetric (min/max)
quantization, with an fp16 scale and zero point per group:

* **keys per channel** — a group is 32 consecutive tokens of one channel (outlier channels get
  their own scale);
* **values per token** — a group is 32 consecutive channels of one token (the head dimension if
  it is smaller);
* **residual** — as in KIVI's decoder, new keys stay in full precision until ``residual`` of
  them have come in, then those are quantized at once (in groups of 32), and the newest
  ``residual`` values stay in full precision, the oldest one quantized as each new token
  arrives. At query ``t``:
  key ``j`` is dequantized iff ``j < residual * floor(t / residual)``; value ``j`` iff
  ``j < t - residual``;
* **sinks** — optionally the first ``sinks`` tokens are never quantized (KVQuant's observation
  that attention sinks are sensitive); the first key group's scale then covers the other tokens.

**The prompt.** KIVI's prefill attends the prompt at full precision and quantizes what it
stores: after a prompt of ``T`` tokens the cache holds exactly what the cuts above give at
``t = T`` (keys ``j < residual * floor(T / residual)`` and values ``j < T - residual`` coded),
and decoding goes on by the same rule. :func:`h2o.model.answer.score_answer` therefore reads a
prompt without this state and hands it the cache after; a row marked ``:qprompt`` reads the
prompt through the quantized cache instead, every prompt token a decode step (the closed-loop
perplexity always reads so: there every token is a step).

16 bits means the full-precision cache itself: no quantization at all (the full-cache numbers,
to the last digit).

Inside a prefill the groups are fixed by position, so every token's dequantized key and value
are the same whenever they are read; only *which* of them a query sees depends on its position.
The forward pass (:meth:`h2o.model.forward.SmolLM._attention`, through :class:`QuantCache`)
therefore scores each chunk of queries against the full-precision keys and against the
dequantized ones and takes, per (query, key), the one a decoder at that step would hold
(:meth:`QuantState.key_cut`); values likewise (:meth:`QuantState.value_cut`). That is
token-by-token decoding with a KIVI cache, at prefill speed (a test checks it against a literal
token-by-token KIVI buffer).

Bytes (:func:`kivi_bytes`) are counted as the cache would be stored: codes packed at ``bits``
per number, an fp16 scale and an fp16 zero point per group, and every full-precision token
(residual, sinks) at fp16.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from h2o.model.cache_api import Cache, Coded, LayerRead, Wrapping

#: Tokens per key group and channels per value group (KIVI's group size).
GROUP = 32
#: Full-precision window of the newest tokens (KIVI's residual length; a multiple of GROUP): 128,
#: as in the paper's settings and its LongBench runs (its examples use 32: ``kivi4:r32``).
RESIDUAL = 128
#: Bit widths offered; 16 is the full-precision cache.
BITS = (2, 4, 8, 16)
#: Bytes of one full-precision number, and of one scale or zero point (fp16, as served).
FP16_BYTES = 2


def check_bits(bits: object) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer) or int(bits) not in BITS:
        raise ValueError(f"bits must be one of {', '.join(map(str, BITS))}, got {bits!r}")
    return int(bits)


# -- one group ---------------------------------------------------------------------------------
def _f16_down(x: np.ndarray) -> np.ndarray:
    """The largest float16 ``<= x`` (as float16)."""
    h = x.astype(np.float16)
    low = h.astype(np.float64) > x
    return np.where(low, np.nextafter(h, np.float16(-np.inf)), h)


def _f16_up(x: np.ndarray) -> np.ndarray:
    """The smallest float16 ``>= x`` (as float16)."""
    h = x.astype(np.float16)
    high = h.astype(np.float64) < x
    return np.where(high, np.nextafter(h, np.float16(np.inf)), h)


def quant_params(x: np.ndarray, bits: int, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """fp16 ``(scale, zero)`` of each group along ``axis`` (kept as a size-1 axis).

    The zero point is the group's minimum rounded *down* to fp16 and the scale ``(max - zero)
    / (2**bits - 1)`` rounded *up*, so the grid ``zero + scale * 0..2**bits-1`` covers the
    whole group and every round-trip error is at most half a step.
    """
    levels = (1 << bits) - 1
    mn = x.min(axis=axis, keepdims=True).astype(np.float64)
    mx = x.max(axis=axis, keepdims=True).astype(np.float64)
    zero = _f16_down(mn)
    scale = _f16_up((mx - zero.astype(np.float64)) / levels)
    return scale, zero


def quantize(x: np.ndarray, bits: int, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes (uint8, one per number: unpacked), fp16 scale and fp16 zero of the groups of
    ``x`` along ``axis`` (the whole axis is one group)."""
    bits = check_bits(bits)
    if bits == 16:
        raise ValueError("16 bits is the full-precision cache: nothing to quantize")
    scale, zero = quant_params(x, bits, axis)
    s = scale.astype(np.float32)
    z = zero.astype(np.float32)
    safe = np.where(s > 0, s, np.float32(1.0))
    codes = np.rint((x - z) / safe)
    codes = np.clip(codes, 0, (1 << bits) - 1).astype(np.uint8)
    return codes, scale, zero


def dequantize(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """``codes * scale + zero`` in float32."""
    return codes.astype(np.float32) * scale.astype(np.float32) + zero.astype(np.float32)


def round_trip(x: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """``dequantize(quantize(x))``: what the model reads back (``bits = 16``: ``x`` itself)."""
    if check_bits(bits) == 16:
        return x
    return dequantize(*quantize(x, bits, axis))


def quantize_keys(k: np.ndarray, bits: int, sinks: int = 0, group: int = GROUP) -> np.ndarray:
    """Dequantized keys ``(G, n, hd)`` of the complete token groups of ``k`` (per channel:
    ``group`` tokens of one channel share a scale). Positions past the last complete group and
    the first ``sinks`` positions are returned unchanged (full precision)."""
    G, n, hd = k.shape
    out = k.copy()
    ng = n // group
    if ng == 0 or bits == 16:
        return out
    blk = k[:, : ng * group].reshape(G, ng, group, hd)
    if sinks <= 0:
        out[:, : ng * group] = round_trip(blk, bits, axis=2).reshape(G, ng * group, hd)
        return out
    deq = np.empty_like(blk)
    for gi in range(ng):
        lo = max(0, sinks - gi * group)  # sink tokens of this group: not in its scale
        if lo >= group:
            deq[:, gi] = blk[:, gi]
            continue
        deq[:, gi] = blk[:, gi]
        deq[:, gi, lo:] = round_trip(blk[:, gi, lo:], bits, axis=1)
    out[:, : ng * group] = deq.reshape(G, ng * group, hd)
    return out


def quantize_values(v: np.ndarray, bits: int, sinks: int = 0, group: int = GROUP) -> np.ndarray:
    """Dequantized values ``(G, n, hd)`` (per token: ``group`` consecutive channels of one
    token share a scale; the head dimension if smaller). The first ``sinks`` positions are
    returned unchanged."""
    G, n, hd = v.shape
    gv = min(group, hd)
    if hd % gv:
        raise ValueError(f"head dim {hd} is not a multiple of the value group {gv}")
    if bits == 16 or n == 0:
        return v.copy()
    out = round_trip(v.reshape(G, n, hd // gv, gv), bits, axis=3).reshape(G, n, hd)
    s = min(max(sinks, 0), n)
    out[:, :s] = v[:, :s]
    return out


# -- what a decoder holds ------------------------------------------------------------------------
@dataclass(frozen=True)
class KiviSpec:
    """A KIVI-style cache: ``bits`` (2, 4, 8; 16 = full precision), ``sinks`` full-precision
    first tokens, ``group`` and ``residual`` (KIVI's 32 and 128)."""

    bits: int
    sinks: int = 0
    group: int = GROUP
    residual: int = RESIDUAL

    def __post_init__(self) -> None:
        check_bits(self.bits)
        for name in ("sinks", "group", "residual"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "sinks" else 1):
                raise ValueError(f"{name} must be an integer >= {0 if name == 'sinks' else 1}")
        if self.residual % self.group:
            raise ValueError("residual must be a multiple of group (as in KIVI)")

    @property
    def exact(self) -> bool:
        """16 bits: the full-precision cache, nothing quantized."""
        return self.bits == 16

    def key_cut(self, t: np.ndarray | int) -> np.ndarray:
        """Per query position ``t``: keys ``j < cut`` are held quantized (sinks excepted)."""
        t = np.asarray(t, dtype=np.int64)
        return (t // self.residual) * self.residual

    def value_cut(self, t: np.ndarray | int) -> np.ndarray:
        """Per query position ``t``: values ``j < cut`` are held quantized (sinks excepted)."""
        t = np.asarray(t, dtype=np.int64)
        return np.maximum(t - self.residual, 0)

    def counts(self, n: int) -> tuple[int, int, int, int]:
        """After ``n`` tokens (what the next query sees, itself aside): ``(coded keys, key
        groups, coded values, value tokens coded)`` of one head — keys coded in complete groups
        of ``residual`` tokens, values all but the newest ``residual``; sinks never coded."""
        s = min(self.sinks, n)
        nk = (n // self.residual) * self.residual
        ck = max(0, nk - s)
        # a key group has a scale if any of its tokens is coded
        kg = sum(1 for g0 in range(0, nk, self.group) if g0 + self.group > s)
        cv = max(0, max(0, n - self.residual) - s)
        return ck, kg, cv, cv


def kivi_bytes(spec: KiviSpec, n_tokens: int, head_dim: int, heads: int) -> int:
    """Bytes a KIVI-style cache of ``n_tokens`` holds over ``heads`` (layer, KV head) caches:
    codes packed (``bits`` per number), an fp16 scale and zero point per group, and every
    full-precision key and value (residual, sinks) at fp16. 16 bits: the fp16 cache."""
    n = max(0, int(n_tokens))
    if spec.exact:
        return heads * n * 2 * head_dim * FP16_BYTES
    ck, kg, cv, _ = spec.counts(n)
    gv = min(spec.group, head_dim)
    code_bits = spec.bits * head_dim * (ck + cv)
    codes = -(-code_bits // 8)  # packed
    key_groups = kg * head_dim  # one (scale, zero) per channel per token group
    value_groups = cv * (head_dim // gv)  # one per channel group per coded token
    params = (key_groups + value_groups) * 2 * FP16_BYTES
    full = ((n - ck) + (n - cv)) * head_dim * FP16_BYTES
    return heads * (codes + params + full)


def kivi_bytes_kept(
    spec: KiviSpec, kept: Iterable[np.ndarray], n_tokens: int, head_dim: int
) -> int:
    """:func:`kivi_bytes` of caches that hold only the positions ``kept`` (one array per
    (layer, KV head)) of ``n_tokens``: an evicting policy's slots held at ``bits``. A kept key
    is coded if its 32-token group was complete (the cut of query ``n_tokens``), a kept value
    if it is older than the residual; each key group with a kept coded token keeps its scale
    and zero point per channel — a group thinned by eviction still pays for them."""
    n = max(0, int(n_tokens))
    if spec.exact:
        return sum(len(k) for k in kept) * 2 * head_dim * FP16_BYTES
    kcut, vcut = int(spec.key_cut(n)), int(spec.value_cut(n))
    gv = min(spec.group, head_dim)
    total = 0
    for kk in kept:
        kk = np.asarray(kk, dtype=np.int64)
        ck_pos = kk[(kk >= spec.sinks) & (kk < kcut)]
        ck, cv = ck_pos.size, int(((kk >= spec.sinks) & (kk < vcut)).sum())
        kg = np.unique(ck_pos // spec.group).size
        codes = -(-(spec.bits * head_dim * (ck + cv)) // 8)
        params = (kg * head_dim + cv * (head_dim // gv)) * 2 * FP16_BYTES
        full = ((kk.size - ck) + (kk.size - cv)) * head_dim * FP16_BYTES
        total += codes + params + full
    return total


class QuantState:
    """The dequantized keys and values of one run, per layer, for the forward pass.

    :meth:`layer` is handed the layer's full-precision keys and values of positions
    ``0 .. t0 + n - 1`` (the cache's, or the prefill's) and returns the dequantized keys and
    values for the same positions (full precision where nothing is coded yet); complete key
    groups and coded values are computed once and kept (a new run at ``t0 = 0`` starts
    over). :meth:`key_cut` and :meth:`value_cut` say which of them query ``t`` reads (they
    must not decrease with ``t``).
    """

    def __init__(self, spec: KiviSpec) -> None:
        if spec.exact:
            raise ValueError("16 bits needs no quantized state: run the full cache")
        self.spec = spec
        self._kq: dict[int, np.ndarray] = {}
        self._vq: dict[int, np.ndarray] = {}
        self._done_k: dict[int, int] = {}
        self._done_v: dict[int, int] = {}

    def key_cut(self, t: np.ndarray) -> np.ndarray:
        return self.spec.key_cut(t)

    def value_cut(self, t: np.ndarray) -> np.ndarray:
        return self.spec.value_cut(t)

    def truncate(self, length: int) -> None:
        """Forget everything computed at positions ``>= length`` (the cache was rewound)."""
        g = self.spec.group
        for li in list(self._done_k):
            self._done_k[li] = min(self._done_k[li], (length // g) * g)
            self._done_v[li] = min(self._done_v[li], length)

    def layer(
        self, layer: int, k: np.ndarray, v: np.ndarray, t0: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(kq, vq)``, each ``(G, len, hd)`` for the positions of ``k``/``v``."""
        sp = self.spec
        G, n, hd = k.shape
        if t0 == 0 or layer not in self._kq:
            self._done_k[layer] = self._done_v[layer] = 0
        kq, vq = self._kq.get(layer), self._vq.get(layer)
        if kq is None or vq is None or kq.shape[1] < n:
            cap = max(n, 2 * (kq.shape[1] if kq is not None else 0))
            nk, nv = np.empty((G, cap, hd), np.float32), np.empty((G, cap, hd), np.float32)
            if kq is not None and vq is not None:
                nk[:, : kq.shape[1]], nv[:, : vq.shape[1]] = kq, vq
            kq, vq = self._kq[layer], self._vq[layer] = nk, nv
        # keys: the complete groups not done yet, quantized; the rest copied (full precision)
        dk = self._done_k[layer]
        full_groups = (n // sp.group) * sp.group
        if full_groups > dk:
            seg = k[:, dk:full_groups]
            sinks = max(0, sp.sinks - dk)
            kq[:, dk:full_groups] = quantize_keys(seg, sp.bits, sinks, sp.group)
            self._done_k[layer] = full_groups
        kq[:, full_groups:n] = k[:, full_groups:n]
        dn = self._done_v[layer]
        if n > dn:
            seg = v[:, dn:n]
            sinks = max(0, sp.sinks - dn)
            vq[:, dn:n] = quantize_values(seg, sp.bits, sinks, sp.group)
            self._done_v[layer] = n
        return kq[:, :n], vq[:, :n]


class QuantCache(Wrapping):
    """``inner``'s keys and values as a KIVI-style cache holds them: every query reads the
    dequantized copies :meth:`QuantState.layer` gives below its cuts (:mod:`h2o.model.quant`),
    a :class:`h2o.model.cache_api.Cache`. With a cache that persists, ``state`` must be the
    same for every call of one run."""

    def __init__(self, inner: Cache, state: QuantState) -> None:
        super().__init__(inner)
        self.state = state

    def update(
        self, layer: int, keys: np.ndarray, values: np.ndarray, queries: np.ndarray
    ) -> LayerRead:
        t0 = self.inner.length
        read = self.inner.update(layer, keys, values, queries)
        st = self.state
        kq, vq = st.layer(layer, read.keys, read.values, t0)
        return replace(read, coded=Coded(kq, vq, st.key_cut, st.value_cut))
