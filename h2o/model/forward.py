"""SmolLM2-135M (llama architecture) forward pass in plain numpy, float32.

One transformer block::

    h = x + Wo · Attention(RoPE(Wq · rms(x)), RoPE(Wk · rms(x)), Wv · rms(x))
    y = h + Wdown · (silu(Wgate · rms(h)) * Wup · rms(h))

with grouped-query attention (9 query heads share 3 KV heads: query head ``h`` reads KV head
``h // 3``), RMSNorm, rotary position embeddings and an output layer tied to the token embedding.

Attention is computed in chunks of query rows (``scores`` and ``probs`` are ``(heads, chunk,
keys)``), so memory stays bounded at long contexts. Each layer hands its new keys and values to
its cache and attends over what the cache gives back (:mod:`h2o.model.cache_api`, the shape of
transformers' ``past_key_values.update``): with no cache, a plain causal prefill (optionally
reporting each chunk's attention to a hook: captures, stats); with the full
:class:`h2o.model.kv_cache.KVCache`, incremental decoding; through the caches
:func:`h2o.model.stack.cache_for` stacks, eviction while decoding, KIVI-style codes or a
selection. The forward pass knows none of them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from h2o.model.cache_api import Cache, LayerRead, Prefill
from h2o.model.gguf_io import GGUFModel, ModelConfig, find_gguf, read_gguf
from h2o.model.mixed import mixed_scores, mixed_values
from h2o.model.tokenizer import BPETokenizer
from h2o.progress import Progress

#: Upper bound on the elements of one ``(heads, chunk, keys)`` score block (16 MB in float32).
CHUNK_ELEMENTS = 1 << 22
#: :meth:`SmolLM.read` reads a prompt in blocks of this many tokens at fixed positions (0, 128,
#: 256, …): the state after a block does not depend on what follows it, so prompts that share a
#: prefix (a haystack up to its needle) can start from one reading of it, bit for bit.
PROMPT_BLOCK = 128


@dataclass(frozen=True)
class AttnChunk:
    """The attention of query rows ``start .. start + rows - 1`` in one layer.

    ``scores`` are the scaled logits ``q·k/sqrt(d)`` with the causal mask applied (``-inf``
    above the diagonal); ``probs`` the causal softmax the model actually uses. Both are
    ``(n_heads, rows, keys)`` float32 and only valid during the hook call (buffers are reused).
    ``queries`` are the rows' queries ``(n_heads, rows, head_dim)`` as they score the keys:
    rotated at their positions and scaled by ``1/sqrt(d)``; ``keys`` the rows' own keys
    ``(n_kv_heads, rows, head_dim)``, rotated at their positions (as the cache holds them);
    ``values`` the rows' own values ``(n_kv_heads, rows, head_dim)``.
    """

    layer: int
    start: int
    scores: np.ndarray
    probs: np.ndarray
    queries: np.ndarray | None = None
    keys: np.ndarray | None = None
    values: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return self.scores.shape[1]

    def prev_probs(self) -> np.ndarray:
        """Per-head attention over the *previous* positions only: ``(n_heads, rows, keys)``.

        Row ``t`` is the causal softmax of query ``t`` with its self-weight (column ``t``)
        dropped and renormalised over ``0..t-1`` — i.e. the softmax of the scores restricted to
        ``0..t-1``. This is the trace-row semantics (what a cache of earlier tokens receives).
        Row 0 has no previous position and is all zeros. Columns ``>= t`` are zero.
        """
        s = self.scores.copy()
        pos = self.start + np.arange(self.rows)
        s[:, np.arange(self.rows), np.minimum(pos, s.shape[2] - 1)] = -np.inf
        m = s.max(axis=2, keepdims=True)
        m[~np.isfinite(m)] = 0.0  # row 0: everything masked
        np.subtract(s, m, out=s)
        np.exp(s, out=s)
        z = s.sum(axis=2, keepdims=True)
        z[z == 0] = 1.0
        s /= z
        return s


AttnHook = Callable[[AttnChunk], None]
#: The cache of a call without one: it holds nothing (each call reads its own keys).
_PREFILL = Prefill()


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x²) + eps) * weight`` over the last axis."""
    ms = np.mean(np.square(x), axis=-1, keepdims=True)
    return (x / np.sqrt(ms + eps)) * weight


def rope_tables(positions: np.ndarray, head_dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """``cos, sin`` of shape ``(len(positions), head_dim // 2)`` for rotary embeddings."""
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(positions.astype(np.float64), inv_freq)  # float64: exact at long positions
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate ADJACENT pairs ``(x[2i], x[2i+1])`` by ``pos · base^(-2i/d)``.

    llama.cpp's converter permutes the rows of ``attn_q``/``attn_k`` so that each rotary pair
    sits in adjacent dimensions; the Hugging Face ``rotate_half`` (pairs ``i, i + d/2``) would
    be wrong on GGUF weights (perplexity ≈70 instead of ≈14 on plain English).
    """
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    """Softmax over the last axis into a new array (``s`` is kept: hooks read the scores)."""
    e = np.subtract(s, s.max(axis=-1, keepdims=True))
    np.exp(e, out=e)
    e *= 1.0 / e.sum(axis=-1, keepdims=True)  # one reciprocal per row, then a multiply
    return e


class SmolLM:
    """A loaded model: config, frozen float32 weights, tokenizer, and the forward pass."""

    def __init__(self, gguf_model: GGUFModel) -> None:
        self.config: ModelConfig = gguf_model.config
        self.path = gguf_model.path
        self.metadata = dict(gguf_model.metadata)
        self.tokenizer = BPETokenizer(gguf_model.tokenizer)
        w = gguf_model.weights
        cfg = self.config
        self.tok_embd = w["token_embd.weight"]  # (vocab, d)
        # Tied output layer: SmolLM2 has no output.weight, the logits reuse the embedding.
        self.output = w.get("output.weight", self.tok_embd)
        self.output_norm = w["output_norm.weight"]
        self.layers = [_LayerWeights.from_dict(w, i) for i in range(cfg.n_layers)]
        if cfg.n_heads % cfg.n_kv_heads:
            raise ValueError("n_heads must be a multiple of n_kv_heads")

    @classmethod
    def load(cls, model_path: str | os.PathLike[str] | None = None) -> SmolLM:
        """Find (see :func:`find_gguf`), read and dequantize the model (≈3 s; ≈0.8 GB RSS)."""
        return cls(read_gguf(find_gguf(model_path)))

    @property
    def name(self) -> str:
        """Model name from the file name, e.g. ``SmolLM2-135M-Instruct``."""
        return self.path.name.split(".")[0]

    # -- text --------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    # -- forward -----------------------------------------------------------------------------
    def forward(
        self,
        ids: Sequence[int] | np.ndarray,
        *,
        cache: Cache | None = None,
        attn_hook: AttnHook | None = None,
        progress: Progress | None = None,
        stop_after_layer: int | None = None,
    ) -> np.ndarray:
        """Run the new tokens ``ids`` through all layers; return final-normed hidden ``(n, d)``.

        ``stop_after_layer=l`` stops after layer ``l`` (for captures that need no later layer)
        and returns that layer's residual stream instead; a cache is then left incomplete.

        Positions start at ``cache.length`` (0 without a cache). Each layer hands its new keys
        and values to ``cache`` (:meth:`h2o.model.cache_api.Cache.update`) and attends over
        what it gives back (:meth:`_attention`); the cache refuses, before any layer runs, what
        it could not finish (:meth:`~h2o.model.cache_api.Cache.begin`). A cache that evicts,
        codes or selects is built around the one holding the keys by
        :func:`h2o.model.stack.cache_for`. ``attn_hook`` receives every chunk of causal
        attention (exact where the cache restricts no query).
        """
        cfg = self.config
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.shape[0] == 0:
            raise ValueError("ids must be a non-empty 1-D sequence of token ids")
        if ids.min() < 0 or ids.max() >= self.tok_embd.shape[0]:
            raise ValueError("token id out of range")
        if cache is None:
            cache = _PREFILL
        t0 = cache.length
        n = ids.shape[0]
        cache.begin(n)
        cos, sin = rope_tables(np.arange(t0, t0 + n), cfg.head_dim, cfg.rope_base)
        chunk = _chunk_rows(n, t0 + n, cfg.n_heads)
        x = self.tok_embd[ids].astype(np.float32)  # fancy indexing copies: x is ours to mutate
        for li, lw in enumerate(self.layers):
            raw, q, k, v = self._qkv(lw, x, cos, sin)
            att = self._attention(li, q, cache.update(li, k, v, raw), t0, chunk, attn_hook)
            # (heads, n, hd) -> (n, heads*hd), the layout attn_output expects
            x += att.transpose(1, 0, 2).reshape(n, cfg.n_heads * cfg.head_dim) @ lw.wo.T
            x += self._mlp(lw, x)
            if progress is not None:
                last = cfg.n_layers if stop_after_layer is None else stop_after_layer + 1
                progress(li + 1, last, "layers")
            if stop_after_layer is not None and li >= stop_after_layer:
                return x
        cache.commit(n)
        return rms_norm(x, self.output_norm, cfg.rms_eps).astype(np.float32)

    def read(
        self,
        ids: Sequence[int],
        cache: Cache,
        *,
        attn_hook: AttnHook | None = None,
        progress: Progress | None = None,
    ) -> np.ndarray:
        """Read the prompt ``ids`` into ``cache``, from ``cache.length`` on (the cache may already
        hold ``ids[:cache.length]``: a prefix read before, :mod:`h2o.model.answer`), in blocks
        that end at multiples of :data:`PROMPT_BLOCK`; each block is one :meth:`forward` with the
        same arguments. Returns the final hidden states of the tokens read.

        A matrix product's rounding depends on its shape, so one forward over a whole prompt and
        two over its halves differ in the last bits (about 1e-5 in the hidden states). Reading
        always in the same blocks makes a prompt's state at a block's end the same whether the
        prompt was read from 0 or resumed from a state saved there."""
        start = cache.length
        if not 0 <= start < len(ids):
            raise ValueError(f"nothing to read: the cache holds {start} of {len(ids)} tokens")
        ids = np.asarray(ids, dtype=np.int64)
        first = (start // PROMPT_BLOCK + 1) * PROMPT_BLOCK
        ends = [*range(first, len(ids), PROMPT_BLOCK), len(ids)]
        out = []
        pos = start
        for b, end in enumerate(ends):
            sub = None
            if progress is not None:  # the layers of every block, as one count

                def sub(d: int, n: int, what: str, _b: int = b) -> None:
                    progress(_b * n + d, len(ends) * n, what)

            out.append(self.forward(ids[pos:end], cache=cache, attn_hook=attn_hook, progress=sub))
            pos = end
        return out[0] if len(out) == 1 else np.concatenate(out)

    def _qkv(
        self, lw: _LayerWeights, x: np.ndarray, cos: np.ndarray, sin: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(raw, q, k, v)``: the queries before RoPE and unscaled, ``(H, n, hd)``; the queries
        rotated and scaled by ``1/√hd``; the keys rotated ``(G, n, hd)``; the values."""
        cfg = self.config
        n, hd = x.shape[0], cfg.head_dim
        h = rms_norm(x, lw.attn_norm, cfg.rms_eps)
        raw = (h @ lw.wq.T).reshape(n, cfg.n_heads, hd).transpose(1, 0, 2)
        k = (h @ lw.wk.T).reshape(n, cfg.n_kv_heads, hd).transpose(1, 0, 2)
        v = np.ascontiguousarray((h @ lw.wv.T).reshape(n, cfg.n_kv_heads, hd).transpose(1, 0, 2))
        q = apply_rope(raw, cos, sin)
        q *= np.float32(1.0 / math.sqrt(hd))  # fold the score scale into q (exact for hd=64)
        return raw, q, apply_rope(k, cos, sin), v

    def _mlp(self, lw: _LayerWeights, x: np.ndarray) -> np.ndarray:
        h = rms_norm(x, lw.ffn_norm, self.config.rms_eps)
        gate = h @ lw.w_gate.T
        up = h @ lw.w_up.T
        # silu(g) * u, in place to keep the (n, d_ff) temporaries at two
        np.multiply(gate, up, out=up)
        np.negative(gate, out=gate)
        np.exp(gate, out=gate)
        gate += 1.0
        np.divide(up, gate, out=up)
        return up @ lw.w_down.T

    def _attention(
        self,
        layer: int,
        q: np.ndarray,
        read: LayerRead,
        t0: int,
        chunk: int,
        hook: AttnHook | None,
    ) -> np.ndarray:
        """Attention of new queries ``q (H, n, hd)`` over what the layer's cache gives back
        (``read``: keys/values ``(G, t0 + n, hd)``, :class:`h2o.model.cache_api.LayerRead`).

        Each chunk of query rows gets its causal scores and softmax, as in a plain prefill;
        where ``read`` says so:

        * ``coded``: query ``t`` scores keys ``j < key_cut(t)`` against the coded keys and the
          rest against the full-precision ones, and reads values ``j < value_cut(t)`` from the
          coded values (what a decoder holding a KIVI-style cache at step ``t`` computes);
        * ``select``: the keys a query does not read are masked before the softmax;
        * ``observe``: the chunk's softmax is handed to the cache, which says from which row on
          a query sees only a part of its causal keys, and which part (eviction while
          decoding). The rows before keep the causal softmax untouched (so a cache that keeps
          everything is the plain prefill bit for bit); the others use the causal softmax
          restricted to the mask and renormalised, which equals the softmax over the keys seen.
        """
        cfg = self.config
        k, v, coded = read.keys, read.values, read.coded
        H, n, hd = q.shape
        G, gs = cfg.n_kv_heads, cfg.group_size
        out = np.empty((H, n, hd), dtype=np.float32)
        qg = q.reshape(G, gs, n, hd)
        kT = k.transpose(0, 2, 1)
        for cs in range(0, n, chunk):
            ce = min(n, cs + chunk)
            c, kv = ce - cs, t0 + ce
            vcut = None
            if coded is None:
                # (G, gs*c, hd) @ (G, hd, kv): one batched matmul per chunk
                s = np.matmul(qg[:, :, cs:ce].reshape(G, gs * c, hd), kT[:, :, :kv])
                s = s.reshape(G, gs, c, kv)
            else:
                rows_t = np.arange(t0 + cs, t0 + ce)
                kqT = coded.keys.transpose(0, 2, 1)
                s = mixed_scores(qg[:, :, cs:ce], kT, kqT, kv, coded.key_cut(rows_t))
                vcut = coded.value_cut(rows_t)
            s[..., t0 + cs : kv] += _causal_bias(c)
            if read.select is not None:
                m = read.select(q[:, cs:ce], k[:, :kv], t0 + cs)
                if m is not None:
                    s[~m.reshape(G, gs, c, kv)] = -np.inf
            p = _softmax_rows(s)
            if hook is not None:
                sc, pr = s.reshape(H, c, kv), p.reshape(H, c, kv)
                hook(
                    AttnChunk(
                        layer, t0 + cs, sc, pr, q[:, cs:ce], k[:, t0 + cs : kv], v[:, t0 + cs : kv]
                    )
                )
            first, mask = c, None  # first row of the chunk whose cache had lost something
            if read.observe is not None:
                first, mask = read.observe(p, t0 + cs)
            if first == c and coded is None:  # nothing evicted: the plain prefill, bit for bit
                o = np.matmul(p.reshape(G, gs * c, kv), v[:, :kv])
            elif first == c:  # a coded cache, nothing evicted
                o = mixed_values(p, v[:, :kv], coded.values[:, :kv], vcut)
            else:
                vq = None if coded is None else (coded.values, vcut)
                o = _masked_output(s, p, mask, v, first, vq)
            out[:, cs:ce] = o.reshape(H, c, hd)
        return out

    # -- output ------------------------------------------------------------------------------
    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """Next-token logits ``(n, vocab)`` for final-normed hidden states ``(n, d)``."""
        return hidden @ self.output.T

    def token_logprobs(
        self, hidden: np.ndarray, targets: Sequence[int] | np.ndarray, rows: int = 256
    ) -> np.ndarray:
        """``log p(targets[i] | hidden[i])`` in float64, computed ``rows`` at a time (the full
        ``(T, 49152)`` logit matrix would be 0.8 GB at T = 4096)."""
        targets = np.asarray(targets, dtype=np.int64)
        out = np.empty(targets.shape[0], dtype=np.float64)
        for s in range(0, targets.shape[0], rows):
            lg = self.logits(hidden[s : s + rows])
            m = lg.max(axis=1, keepdims=True)
            lg -= m  # float32 exp is exact enough after the shift; sum in float64
            lse = np.log(np.exp(lg).sum(axis=1, dtype=np.float64))
            out[s : s + rows] = lg[np.arange(lg.shape[0]), targets[s : s + rows]] - lse
        return out

    def perplexity(self, ids: Sequence[int], progress: Progress | None = None) -> float:
        """Full-cache perplexity of ``ids`` (each token predicted from all before it)."""
        ids = list(ids)
        if len(ids) < 2:
            raise ValueError("need at least 2 tokens")
        hidden = self.forward(ids[:-1], progress=progress)
        return float(np.exp(-self.token_logprobs(hidden, ids[1:]).mean()))


@dataclass(frozen=True)
class _LayerWeights:
    attn_norm: np.ndarray
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    ffn_norm: np.ndarray
    w_gate: np.ndarray
    w_up: np.ndarray
    w_down: np.ndarray

    @classmethod
    def from_dict(cls, w: dict[str, np.ndarray], i: int) -> _LayerWeights:
        p = f"blk.{i}."
        return cls(
            attn_norm=w[p + "attn_norm.weight"],
            wq=w[p + "attn_q.weight"],
            wk=w[p + "attn_k.weight"],
            wv=w[p + "attn_v.weight"],
            wo=w[p + "attn_output.weight"],
            ffn_norm=w[p + "ffn_norm.weight"],
            w_gate=w[p + "ffn_gate.weight"],
            w_up=w[p + "ffn_up.weight"],
            w_down=w[p + "ffn_down.weight"],
        )


def _chunk_rows(n: int, kv_len: int, n_heads: int) -> int:
    """Query rows per attention chunk so that one score block stays under CHUNK_ELEMENTS."""
    rows = max(16, CHUNK_ELEMENTS // max(1, n_heads * kv_len))
    return min(n, rows)


_BIAS_CACHE: dict[int, np.ndarray] = {}


def _causal_bias(c: int) -> np.ndarray:
    """``(c, c)`` float32: 0 on and below the diagonal, ``-inf`` above."""
    b = _BIAS_CACHE.get(c)
    if b is None:
        b = np.triu(np.full((c, c), -np.inf, dtype=np.float32), k=1)
        b.flags.writeable = False
        if len(_BIAS_CACHE) < 64:
            _BIAS_CACHE[c] = b
    return b


def _masked_output(
    s: np.ndarray,
    p: np.ndarray,
    mask: np.ndarray,
    v: np.ndarray,
    first: int,
    vq: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Attention output ``(G, gs, c, hd)`` of a chunk whose rows ``>= first`` are masked.

    ``s``/``p`` are the chunk's causal scores/probs ``(G, gs, c, keys)`` (``p`` is modified in
    place), ``mask`` is ``(G, c, keys)``. Restricting a softmax to the mask is renormalising
    ``p`` on it; a row whose kept mass underflowed to 0 is recomputed from the scores instead.
    Rows before ``first`` are untouched, so they come out exactly as the causal ones.
    """
    pm = p[:, :, first:, :]
    pm *= mask[:, None, first:, :].astype(np.float32)  # 0/1 in float32: no cast per element
    z = pm.sum(axis=-1, keepdims=True)
    bad = (z <= 0)[..., 0]
    if bad.any():  # recompute those rows exactly: softmax of the masked scores
        sm = np.where(mask[:, None, first:, :], s[:, :, first:, :], -np.inf)
        pm[bad] = _softmax_rows(sm[bad])
        z[bad] = 1.0
    G, gs, c, kv = p.shape
    if vq is None:
        o = np.matmul(p.reshape(G, gs * c, kv), v[:, :kv]).reshape(G, gs, c, -1)
    else:  # a quantized cache: its dequantized values where held so
        o = mixed_values(p, v[:, :kv], vq[0][:, :kv], vq[1])
    o[:, :, first:] /= z
    return o
