"""SmolLM2-135M (llama architecture) forward pass in plain numpy, float32.

One transformer block::

    h = x + Wo · Attention(RoPE(Wq · rms(x)), RoPE(Wk · rms(x)), Wv · rms(x))
    y = h + Wdown · (silu(Wgate · rms(h)) * Wup · rms(h))

with grouped-query attention (9 query heads share 3 KV heads: query head ``h`` reads KV head
``h // 3``), RMSNorm, rotary position embeddings and an output layer tied to the token embedding.

Attention is computed in chunks of query rows (``scores`` and ``probs`` are ``(heads, chunk,
keys)``), so memory stays bounded at long contexts. The same loop runs three modes:

* plain causal prefill (optionally reporting each chunk's attention to a hook: captures, stats);
* closed-loop eviction: one policy per (layer, KV head) decides which keys each query may see;
* incremental decoding from a :class:`KVCache` (generation), with or without policies.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from h2o.bank import PolicyBank
from h2o.bank.kernels import gather_kept
from h2o.model.gguf_io import GGUFModel, ModelConfig, find_gguf, read_gguf
from h2o.model.tokenizer import BPETokenizer

if TYPE_CHECKING:
    from h2o.policies import Policy

#: ``progress(done, total)``: called as work advances (layers, or generated tokens).
Progress = Callable[[int, int], None]
#: ``factory(layer, kv_head) -> policy``: one fresh policy per (layer, KV head).
PolicyFactory = Callable[[int, int], "Policy"]

#: Upper bound on the elements of one ``(heads, chunk, keys)`` score block (16 MB in float32).
CHUNK_ELEMENTS = 1 << 22


class EvictionPolicy(Protocol):
    """The part of the ``h2o.policies.Policy`` contract the model uses."""

    reads_attention: bool

    @property
    def kept(self) -> np.ndarray: ...

    def on_decode_step(self, pos: int, attn: np.ndarray | None) -> None: ...

    def evict(self) -> list[int]: ...


@dataclass(frozen=True)
class AttnChunk:
    """The attention of query rows ``start .. start + rows - 1`` in one layer.

    ``scores`` are the scaled logits ``q·k/sqrt(d)`` with the causal mask applied (``-inf``
    above the diagonal); ``probs`` the causal softmax the model actually uses. Both are
    ``(n_heads, rows, keys)`` float32 and only valid during the hook call (buffers are reused).
    """

    layer: int
    start: int
    scores: np.ndarray
    probs: np.ndarray

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


class KVCache:
    """Keys and values of every layer for positions ``0 .. length-1`` (for generation).

    Evicted positions are not deleted: the policies' ``kept`` sets decide which cached keys a
    query can see, which is computationally identical to a cache that frees them.
    """

    def __init__(self, config: ModelConfig, capacity: int) -> None:
        shape = (config.n_layers, config.n_kv_heads, capacity, config.head_dim)
        self.k = np.zeros(shape, dtype=np.float32)
        self.v = np.zeros(shape, dtype=np.float32)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[2]


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
        cache: KVCache | None = None,
        policies: Sequence[Sequence[EvictionPolicy]] | None = None,
        attn_hook: AttnHook | None = None,
        progress: Progress | None = None,
        stop_after_layer: int | None = None,
    ) -> np.ndarray:
        """Run the new tokens ``ids`` through all layers; return final-normed hidden ``(n, d)``.

        ``stop_after_layer=l`` stops after layer ``l`` (for captures that need no later layer)
        and returns that layer's residual stream instead; a cache is then left incomplete.

        Positions start at ``cache.length`` (0 without a cache). With ``policies``
        (``policies[layer][kv_head]``) every query sees only its head's kept keys plus itself,
        and each policy is stepped once per token (see :meth:`_attention`). ``attn_hook``
        receives every chunk of causal attention (only without policies, where it is exact).

        Policies are checked before anything runs (one distinct instance per layer and KV head,
        none past position ``t0 - 1``), and every step's inputs are checked before any policy
        of that step is stepped (:func:`_step_policies`), so the refusals of the policy contract
        surface as a ``ValueError`` naming the layer and head, not halfway through a step.
        """
        cfg = self.config
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.shape[0] == 0:
            raise ValueError("ids must be a non-empty 1-D sequence of token ids")
        if ids.min() < 0 or ids.max() >= self.tok_embd.shape[0]:
            raise ValueError("token id out of range")
        t0 = cache.length if cache is not None else 0
        n = ids.shape[0]
        if cache is not None and t0 + n > cache.capacity:
            raise ValueError(f"cache capacity {cache.capacity} < {t0 + n} positions")
        if policies is not None:
            _check_policies(policies, cfg, t0)
        cos, sin = rope_tables(np.arange(t0, t0 + n), cfg.head_dim, cfg.rope_base)
        chunk = _chunk_rows(n, t0 + n, cfg.n_heads)
        x = self.tok_embd[ids].astype(np.float32)  # fancy indexing copies: x is ours to mutate
        for li, lw in enumerate(self.layers):
            q, k, v = self._qkv(lw, x, cos, sin)
            if cache is not None:
                cache.k[li, :, t0 : t0 + n] = k
                cache.v[li, :, t0 : t0 + n] = v
                k, v = cache.k[li, :, : t0 + n], cache.v[li, :, : t0 + n]
            att = self._attention(
                li, q, k, v, t0, chunk, None if policies is None else policies[li], attn_hook
            )
            # (heads, n, hd) -> (n, heads*hd), the layout attn_output expects
            x += att.transpose(1, 0, 2).reshape(n, cfg.n_heads * cfg.head_dim) @ lw.wo.T
            x += self._mlp(lw, x)
            if progress is not None:
                progress(li + 1, cfg.n_layers if stop_after_layer is None else stop_after_layer + 1)
            if stop_after_layer is not None and li >= stop_after_layer:
                return x
        if cache is not None:
            cache.length = t0 + n
        return rms_norm(x, self.output_norm, cfg.rms_eps).astype(np.float32)

    def _qkv(
        self, lw: _LayerWeights, x: np.ndarray, cos: np.ndarray, sin: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cfg = self.config
        n, hd = x.shape[0], cfg.head_dim
        h = rms_norm(x, lw.attn_norm, cfg.rms_eps)
        q = (h @ lw.wq.T).reshape(n, cfg.n_heads, hd).transpose(1, 0, 2)
        k = (h @ lw.wk.T).reshape(n, cfg.n_kv_heads, hd).transpose(1, 0, 2)
        v = np.ascontiguousarray((h @ lw.wv.T).reshape(n, cfg.n_kv_heads, hd).transpose(1, 0, 2))
        q = apply_rope(q, cos, sin)
        q *= np.float32(1.0 / math.sqrt(hd))  # fold the score scale into q (exact for hd=64)
        return q, apply_rope(k, cos, sin), v

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
        k: np.ndarray,
        v: np.ndarray,
        t0: int,
        chunk: int,
        policies: Sequence[EvictionPolicy] | None,
        hook: AttnHook | None,
    ) -> np.ndarray:
        """Attention of new queries ``q (H, n, hd)`` over keys/values ``(G, t0 + n, hd)``.

        Each chunk of query rows first gets its causal scores and softmax, as in a plain
        prefill. With policies, the rows are then stepped one at a time, in order — exactly what
        token-by-token decoding with eviction computes under teacher forcing:

        1. query ``t`` may see ``kept ∪ {t}`` of its KV head (recorded in a mask);
        2. each policy gets ``attn``: the softmax of the query's scores over its kept keys only
           (self excluded, so it sums to 1 — the trace-row semantics), averaged over the query
           heads of its group, float32, index-aligned with ``kept``; ``None`` if the policy
           does not read attention (``reads_attention = False``);
        3. ``policy.on_decode_step(t, attn)`` admits ``t``, then ``policy.evict()``.

        The outputs are computed after the chunk's steps: the rows whose caches still hold all
        of ``0..t-1`` keep the causal softmax untouched (so a budget ``>= T`` is the plain
        prefill bit for bit); the others use the causal softmax restricted to the mask and
        renormalised, which equals the softmax over ``kept ∪ {t}``.
        """
        cfg = self.config
        H, n, hd = q.shape
        G, gs = cfg.n_kv_heads, cfg.group_size
        out = np.empty((H, n, hd), dtype=np.float32)
        qg = q.reshape(G, gs, n, hd)
        kT = k.transpose(0, 2, 1)
        wants = [bool(getattr(pol, "reads_attention", True)) for pol in policies or ()]
        bank = isinstance(policies, PolicyBank)
        parts = isinstance(policies, LayerParts)
        whole = not (bank or parts) and hasattr(policies, "kept_rows")  # e.g. an adaptive layer
        for cs in range(0, n, chunk):
            ce = min(n, cs + chunk)
            c, kv = ce - cs, t0 + ce
            # (G, gs*c, hd) @ (G, hd, kv): one batched matmul per chunk
            s = np.matmul(qg[:, :, cs:ce].reshape(G, gs * c, hd), kT[:, :, :kv])
            s = s.reshape(G, gs, c, kv)
            s[..., t0 + cs : kv] += _causal_bias(c)
            p = _softmax_rows(s)
            if hook is not None:
                hook(AttnChunk(layer, t0 + cs, s.reshape(H, c, kv), p.reshape(H, c, kv)))
            first = c  # first row of the chunk whose cache had lost something
            if policies is not None:
                mask = np.zeros((G, c, kv), dtype=bool)
                rows = np.arange(c)
                mask[:, rows, t0 + cs + rows] = True  # each query sees itself
                # A signal that divides by a zero mass is refused and redone (_mean_unchecked):
                # no warning for it, and one errstate for the chunk (one a row costs a µs).
                with np.errstate(divide="ignore", invalid="ignore"):
                    for i in range(c):
                        if bank:
                            stepped = _step_bank(p, t0 + cs + i, i, policies, mask, layer)
                        elif parts:
                            stepped = _step_parts(p, t0 + cs + i, i, policies, mask, layer)
                        elif whole:
                            stepped = _step_whole(p, t0 + cs + i, i, policies, mask, layer)
                        else:
                            stepped = _step_policies(
                                p, t0 + cs + i, i, policies, wants, mask, layer
                            )
                        if stepped and first == c:
                            first = i
            if first == c:  # nothing evicted: the plain causal prefill, bit for bit
                o = np.matmul(p.reshape(G, gs * c, kv), v[:, :kv])
            else:
                o = _masked_output(s, p, mask, v, first)
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


def _check_policies(
    policies: Sequence[Sequence[EvictionPolicy]], cfg: ModelConfig, t0: int
) -> None:
    """Refuse, before any layer runs, what would make a policy refuse partway through a call.

    ``policies[layer][kv_head]`` must hold a distinct instance per (layer, KV head) — one
    instance in two heads would be stepped twice per token — and no policy may have admitted a
    position ``>= t0`` (``last_pos``, where the policy exposes it), as it would refuse ``t0``.
    """
    if len(policies) != cfg.n_layers:
        raise ValueError(f"need policies for {cfg.n_layers} layers, got {len(policies)}")
    seen: dict[int, tuple[int, int]] = {}
    for li, row in enumerate(policies):
        if len(row) != cfg.n_kv_heads:
            raise ValueError(
                f"layer {li}: need {cfg.n_kv_heads} policies (KV heads), got {len(row)}"
            )
        for g, pol in enumerate(row):
            other = seen.setdefault(id(pol), (li, g))
            if other != (li, g):
                raise ValueError(
                    f"layer {li}, KV head {g}: the same policy instance as layer {other[0]}, "
                    f"KV head {other[1]}; every (layer, KV head) needs its own"
                )
            last = getattr(pol, "last_pos", None)
            if last is not None and last >= t0:
                raise ValueError(
                    f"layer {li}, KV head {g}: the policy has already seen position {last}, "
                    f"but this call starts at position {t0}"
                )


def _step_policies(
    p: np.ndarray,
    t: int,
    i: int,
    policies: Sequence[EvictionPolicy],
    wants: Sequence[bool],
    mask: np.ndarray,
    layer: int = -1,
) -> bool:
    """One closed-loop step for query ``t`` (row ``i`` of the chunk's causal probs ``p``).

    ``p`` is ``(G, gs, rows, keys)``. Marks ``kept ∪ {t}`` of each KV head in ``mask[g, i]``,
    hands each policy its signal, steps it and evicts. Returns whether any head's cache had
    lost a position of ``0..t-1`` (then the row's causal output must be recomputed).

    The signal is each query head's causal row restricted to the kept keys and renormalised —
    the softmax over the kept keys, since a softmax restricted to a subset is the full softmax
    renormalised on it — then averaged over the group's heads: float32, sums to 1.

    Every kept set and every signal of the step is built and checked first (kept positions in
    ``0..t-1``, finite signals); a ``ValueError`` then leaves every policy as it was. Only
    after that is any policy stepped. (A policy raising for a reason of its own cannot be
    foreseen: the heads before it have then been stepped, and the caller must discard them.)
    """
    kept = [pol.kept for pol in policies]
    for g, kk in enumerate(kept):
        if kk.shape[0] and not (kk[0] >= 0 and kk[-1] < t):
            raise ValueError(
                f"layer {layer}, KV head {g}: at step {t} the policy keeps positions "
                f"{int(kk[0])}..{int(kk[-1])}, outside 0..{t - 1}"
            )
    evicted, signals = _signals(p, t, i, kept, wants, mask)
    if any(wants):
        _check_signals(signals, t, layer)
    for pol, attn in zip(policies, signals, strict=True):
        pol.on_decode_step(t, attn)
        pol.evict()
    return evicted


def _signals(
    p: np.ndarray,
    t: int,
    i: int,
    kept: Sequence[np.ndarray],
    wants: Sequence[bool],
    mask: np.ndarray,
) -> tuple[bool, list[np.ndarray | None]]:
    """Mark ``kept ∪ {t}`` of each KV head in ``mask[g, i]``; return whether any head had lost
    a position of ``0..t-1``, and each head's signal (None where it is not wanted)."""
    G = p.shape[0]
    evicted = any(kk.shape[0] != t for kk in kept)
    signals: list[np.ndarray | None] = [None] * G
    read = any(wants)
    if not evicted:
        mask[:, i, : t + 1] = True
        if read:
            sig = _renormalised_mean(p[:, :, i, :t]) if t else np.zeros((G, 0), np.float32)
            signals = [sig[g] if wants[g] else None for g in range(G)]
    else:
        mask[:, i, t] = True
        if len({kk.shape[0] for kk in kept}) == 1:  # usual case: one gather for all heads
            idx = np.stack(kept)
            gi, hi = _head_grid(G, p.shape[1])
            mask[gi[:, :, 0], i, idx] = True
            if read:
                sig = _renormalised_mean(p[:, :, i, :][gi, hi, idx[:, None, :]])
                signals = [sig[g] if wants[g] else None for g in range(G)]
        else:
            for g in range(G):
                mask[g, i, kept[g]] = True
                if wants[g]:
                    signals[g] = _renormalised_mean(p[g : g + 1, :, i, kept[g]])[0]
    return evicted, signals


def _step_bank(
    p: np.ndarray, t: int, i: int, bank: PolicyBank, mask: np.ndarray, layer: int = -1
) -> bool:
    """:func:`_step_policies` for a bank whose lanes are the layer's KV heads.

    The same masks and the same signals (the same gathers into the same
    :func:`_renormalised_mean`, so bit for bit), checked the same way before any head moves;
    then one step of the whole bank. The bank's kept sets need no bounds check (it admitted
    every position itself), and a finite signal is a softmax mean — non-negative, at most 1 —
    which every policy accepts, so the bank takes the trusted step (as a replay does). In
    lock-step (every head keeps ``n``) the gathers are flat takes, no per-head list.
    """
    n = bank.lockstep_fill
    if n < 0:  # heads at different fills (budgets differ): their kept sets one by one
        wants = [bank.reads_attention] * len(bank)
        evicted, signals = _signals(p, t, i, [bank.kept(g) for g in range(len(bank))], wants, mask)
        if bank.reads_attention:
            _check_signals(signals, t, layer)
        bank.advance_trusted(t, signals)
        bank.evict_trusted()
        return evicted
    evicted = n != t
    if not evicted:
        mask[:, i, : t + 1] = True
        sig = _renormalised_mean(p[:, :, i, :t]) if t and bank.reads_attention else None
    else:
        # each head's kept columns of row i marked (t itself is, for the chunk: _attention),
        # and gathered: one compiled loop
        pk = np.empty((p.shape[0], p.shape[1], n), dtype=p.dtype)
        gather_kept(p, bank.slots, n, i, mask, pk)
        if bank.reads_attention:
            sig = _mean_unchecked(pk)  # (its 0-division warnings are off: _attention)
            if bank.step_trusted(t, sig):
                return evicted
            sig = _renormalised_mean(pk)  # a head's kept mass underflowed (or worse)
        else:
            sig = None
    if not bank.step_trusted(t, sig):  # a weight is not finite: nothing moved
        _check_signals(list(sig), t, layer)  # raises, naming the head
    return evicted


class LayerParts:
    """One layer's KV heads as several banks: ``parts`` is ``[(heads, bank), ...]``, the heads
    (ascending KV head indices, every head of the layer exactly once) that ``bank``'s lanes
    are, in order — e.g. duo's retrieval heads as one bank of the user's policy and its
    streaming heads as one StreamingLLM bank. Indexing gives head ``g``'s lane, so it reads
    as the layer's row of policies; the model steps it by :func:`_step_parts`."""

    def __init__(self, parts: Sequence[tuple[Sequence[int], PolicyBank]]) -> None:
        self.parts = [(np.asarray(h, dtype=np.intp), b) for h, b in parts]
        where: dict[int, tuple[PolicyBank, int]] = {}
        for heads, b in self.parts:
            if len(heads) != len(b) or not (np.diff(heads) > 0).all():
                raise ValueError("each part needs one ascending head index per lane")
            where |= {int(g): (b, j) for j, g in enumerate(heads)}
        if sorted(where) != list(range(len(where))):
            raise ValueError("the parts must cover heads 0..G-1, each once")
        self._where = [where[g] for g in range(len(where))]
        self.reads_attention = any(b.reads_attention for _, b in self.parts)

    def __len__(self) -> int:
        return len(self._where)

    def __getitem__(self, g: int):
        b, j = self._where[g]
        return b.lane(j)

    def __iter__(self):
        return (self[g] for g in range(len(self)))


def _step_parts(
    p: np.ndarray, t: int, i: int, layer_parts: LayerParts, mask: np.ndarray, layer: int = -1
) -> bool:
    """:func:`_step_policies` for a layer made of several banks (:class:`LayerParts`).

    The same masks and the same signals as the instances' path: before any head has evicted,
    the causal row of every head at once (:func:`_signals`' first case); when every head keeps
    the same number, :func:`_signals` itself; otherwise each bank's lanes gathered as one
    block — per lane the gather and :func:`_renormalised_mean` of the one-head path (a batched
    matmul multiplies each head's block alone), and per lane one by one where a bank's own
    lanes differ. All signals are checked before any bank moves; then each bank takes its
    trusted step, as in :func:`_step_bank`.
    """
    parts = layer_parts.parts
    fills = [b.lockstep_fill for _, b in parts]
    G = p.shape[0]
    if all(f == t for f in fills):  # nothing evicted yet
        mask[:, i, : t + 1] = True
        sig = None
        if t and layer_parts.reads_attention:
            sig = _renormalised_mean(p[:, :, i, :t])
            if not math.isfinite(float(_sum(sig, axis=None))):
                _check_signals(list(sig), t, layer)
        for heads, b in parts:
            b.advance_trusted(t, sig[heads] if sig is not None and b.reads_attention else None)
            b.evict_trusted()
        return False
    if fills[0] >= 0 and all(f == fills[0] for f in fills):  # equal fills: as the instances
        kept = [layer_parts[g].kept for g in range(G)]
        wants = [b.reads_attention for _, b in parts for _ in range(len(b))]
        order = np.argsort(np.concatenate([h for h, _ in parts]), kind="stable")
        wants = [wants[j] for j in order]
        _, signals = _signals(p, t, i, kept, wants, mask)
        if any(wants):
            _check_signals(signals, t, layer)
        for heads, b in parts:
            rows = [signals[g] for g in heads.tolist()]
            b.advance_trusted(t, None if not b.reads_attention else np.stack(rows))
            b.evict_trusted()
        return True
    mask[:, i, t] = True
    steps: list[tuple[PolicyBank, object]] = []
    for heads, b in parts:
        f = b.lockstep_fill
        if f >= 0:  # the bank's lanes in lock-step: one block
            rows = b.slots[:, :f]
            mask[heads[:, None], i, rows] = True
            sig = None
            if b.reads_attention and f:
                if len(heads) == 1:
                    g = int(heads[0])
                    sig = _renormalised_mean(p[g : g + 1, :, i, rows[0]])
                else:
                    # each head's block laid out as its own gather p[g:g+1, :, i, kk] (the
                    # layout decides the order of the sums): (f, gs) rows, transposed
                    blk = p[heads[:, None], :, i, rows].transpose(0, 2, 1)
                    sig = _renormalised_mean(blk)
                if not math.isfinite(float(_sum(sig, axis=None))):
                    _check_part(list(sig), heads, G, t, layer)  # raises, naming the head
            steps.append((b, sig))
        else:  # lanes at different fills: each its own gather, as the instances
            sigs: list[np.ndarray | None] = []
            for j, g in enumerate(heads.tolist()):
                kk = b.kept(j)
                mask[g, i, kk] = True
                sigs.append(
                    _renormalised_mean(p[g : g + 1, :, i, kk])[0]
                    if b.reads_attention and kk.shape[0]
                    else (np.zeros(0, np.float32) if b.reads_attention else None)
                )
            if b.reads_attention:
                _check_part(sigs, heads, G, t, layer)
            steps.append((b, sigs))
    for b, sig in steps:
        b.advance_trusted(t, sig)
        b.evict_trusted()
    return True


def _check_part(
    sigs: Sequence[np.ndarray | None], heads: np.ndarray, G: int, t: int, layer: int
) -> None:
    """:func:`_check_signals` for the lanes of one part (``heads``: their KV heads)."""
    named: list[np.ndarray | None] = [None] * G
    for g, s in zip(heads.tolist(), sigs, strict=True):
        named[g] = s
    _check_signals(named, t, layer)


def _step_whole(p: np.ndarray, t: int, i: int, group, mask: np.ndarray, layer: int = -1) -> bool:
    """:func:`_step_policies` for a layer that steps its heads itself (an adaptive layer:
    ``kept_rows()``, ``wants``, ``step(t, signals)``): the same masks and signals, checked
    before anything moves, then one call for the whole layer.

    Heads at equal fills go through :func:`_signals` itself. At different fills (an adaptive
    layer's usual state) each head's signal is :func:`_signals`' one-head gather and
    :func:`_renormalised_mean`, unrolled: the same reduction and the same matmul on the same
    ``(gs, n)`` block, so the same float32 bits.
    """
    kept = group.kept_rows()
    n0 = kept[0].shape[0]
    if not all(kk.shape[0] == n0 for kk in kept) and all(group.wants):
        mask[:, i, t] = True
        inv = np.float32(1.0 / p.shape[1])
        signals: list[np.ndarray | None] = []
        odd = False
        for g, kk in enumerate(kept):
            mask[g, i, kk] = True
            # (gs, n) laid out as the instances' gather p[g:g+1, :, i, kk] lays it out: (n, gs)
            # rows, transposed — the layout decides the order of the sums, hence their bits
            pk = p[g, :, i].T.take(kk, axis=0).T
            z = _sum(pk, axis=-1)
            if _min(z, axis=None) > 0:  # then every weight is finite: z is a finite sum
                signals.append(np.matmul((inv / z)[None, :], pk)[0])
            else:  # an underflowed head (or NaN): the general rule, and the check below
                signals.append(_renormalised_mean(pk[None])[0])
                odd = True
        if odd:
            _check_signals(signals, t, layer)
        group.step(t, signals)
        return True
    evicted, sigs = _signals(p, t, i, kept, group.wants, mask)
    _check_signals(sigs, t, layer)
    group.step(t, sigs)
    return evicted


_sum, _min = np.add.reduce, np.minimum.reduce


def _check_signals(signals: Sequence[np.ndarray | None], t: int, layer: int) -> None:
    """Refuse a step whose attention signal is not finite (NaN/inf scores upstream)."""
    for g, sig in enumerate(signals):
        # One reduction per head: NaN and ±inf propagate to the sum; softmax weights are >= 0.
        if sig is not None and not math.isfinite(float(sig.sum())):
            raise ValueError(
                f"layer {layer}, KV head {g}: the attention signal of step {t} is not finite "
                "(NaN or inf in the scores); no policy of this step was stepped"
            )


_GRID_CACHE: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def _head_grid(G: int, gs: int) -> tuple[np.ndarray, np.ndarray]:
    """Broadcastable ``(G,1,1)`` and ``(1,gs,1)`` index arrays for gathering kept columns."""
    grid = _GRID_CACHE.get((G, gs))
    if grid is None:
        grid = _GRID_CACHE[(G, gs)] = (
            np.arange(G)[:, None, None],
            np.arange(gs)[None, :, None],
        )
    return grid


def _mean_unchecked(pk: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
    """:func:`_renormalised_mean` without its underflow test (``z``: each head's kept mass, if
    summed already): the same floats whenever every head's kept mass is positive, and a weight
    that is not finite otherwise — which the bank's step refuses, changing nothing, so the
    caller then takes the careful path."""
    w = (np.float32(1.0 / pk.shape[1]) / (_sum(pk, axis=-1) if z is None else z))[:, None, :]
    return np.matmul(w, pk)[:, 0, :]


def _renormalised_mean(pk: np.ndarray) -> np.ndarray:
    """``(G, gs, n)`` probabilities → each head renormalised over ``n``, mean over heads."""
    z = _sum(pk, axis=-1)
    if not _min(z, axis=None) > 0:
        # Every kept weight of some head underflowed (the dropped keys dominate by > 87 nats):
        # give that head a uniform row rather than 0/0.
        pk = np.where((z <= 0)[..., None], np.float32(1.0), pk)
        z = _sum(pk, axis=-1)
    return _mean_unchecked(pk, z)  # (G, 1, gs) weights: renormalise, then mean


def _masked_output(
    s: np.ndarray, p: np.ndarray, mask: np.ndarray, v: np.ndarray, first: int
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
    o = np.matmul(p.reshape(G, gs * c, kv), v[:, :kv]).reshape(G, gs, c, -1)
    o[:, :, first:] /= z
    return o
