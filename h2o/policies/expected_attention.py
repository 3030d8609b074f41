"""Expected Attention — score a key by the attention the *next* queries are expected to pay it
(Devoto, Jeblick and Jégou, 2025, "Expected Attention: KV Cache Compression by Estimating
Attention from Future Queries Distribution", https://arxiv.org/abs/2510.00636; kvpress's
``ExpectedAttentionPress``).

H2O scores a key by the attention it *has* received, so an old key has had more steps to collect
it (the age bias of the lesson's chapters 3–5). Expected Attention looks forward instead. Queries
before RoPE are close to Gaussian; with their mean ``mu`` and covariance ``Sigma``, the expected
``exp(q·k/√d)`` of a key has a closed form, and rotating the statistics by the RoPE of the
positions to come (averaged) makes them the next queries'. In the card's decode-time mechanism::

    on_decode_step(pos, attn):             # attn is not read
        admit(pos, score = 0)
        if pos >= n_sink:                  # the sinks' queries are left out, as kvpress does
            add q_pos (before RoPE) to the running sums of q and q qᵀ, each query head
        if pos % rescoreEvery == 0:        # by default the recent window (1 if it is 0)
            mu, Sigma = mean and covariance of the queries at n_sink .. pos (the sums)
            R         = the RoPE rotation averaged over positions pos + 1 .. pos + 512
            z_h[j]    = k_j · R mu_h / √d  +  k_jᵀ R Sigma_h Rᵀ k_j / (2 d)     every kept j
            score[j]  = mean over KV heads g of
                        (mean over g's query heads h of softmax_j(z_h)[j]) × ‖v_gj‖
            the first n_sink = 4 positions score max + 1 (always kept)
        # between rescorings every kept score is the last rescoring's, a later position's 0

    evict(budget):
        evictable = kept[: len(kept) - recentWindow]
        drop the `len(kept) - budget` lowest-scoring of those

A rescoring costs ``k @ Sigma`` for every kept key and query head, so the policy rescores every
``rescore_every`` steps and evicts by the last rescoring's scores in between (``rescore_every=1``
rescores at every step). A position admitted since the last rescoring holds its admission score
of 0 until the next one, which is why the interval is bounded by the window: a position is
protected at the evictions of its first ``recentWindow`` steps, so with ``rescore_every <=
recentWindow + 1`` a rescoring scores it before it can be evicted. A larger interval is refused
(an unscored position would be the first evicted, for its 0 and not for its keys).

The closed form, the averaged rotation, the value norm and the sinks are kvpress's, with its
defaults (``n_future_positions=512``, ``n_sink=4``, covariance and value norm on, ``epsilon=0``);
the model's ``expected-attention@B`` rows run it once after the prompt, as kvpress does
(:mod:`h2o.model.caches.expected_attention_cache`), and this policy over a text
(:mod:`h2o.model.fed_heads`). Where this class differs, ours: it rescores every kept key every
``rescore_every`` steps (the recent window, 32, by default) and evicts one position a step, the
cache never above its budget, with H2O's recent window (kvpress's ``DecodingPress`` compresses
the whole cache back to a target size every ``compression_interval`` steps, 512 by default and
10 in its first versions, with no recent window, the cache growing in between); its statistics
are of every query read so far, as running sums (kvpress's come from the hidden states it
buffered since its last compression, at most the last 256 by default); on a trace that
averages a layer's query heads, one kept set serves every head, scored by the mean over the KV
heads (kvpress keeps a set per KV head). Equal scores evict the lower position.

It reads each position's queries, keys and value norms (a trace's ``vectors``, which captured
traces of the real model carry) and no attention weight.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..trace_vectors import HeadVectors, check_vectors
from .base import ScoredPolicy, check_int

#: kvpress's defaults: the future positions the rotation is averaged over, the sinks kept.
N_FUTURE, N_SINK = 512, 4
#: Most work a replay takes (heads × head size² × rescorings × slots multiply-adds, in numpy):
#: ~5·10⁹ for a shipped trace at budget 128 rescored at every step, a few seconds; an upload may
#: not ask for minutes.
MAX_WORK = 6e10


def averaged_rope(head_dim: int, base: float, first: int, n: int = N_FUTURE) -> np.ndarray:
    """``(head_dim, head_dim)``: the rotation RoPE applies at positions ``first .. first + n -
    1``, averaged (adjacent pairs, as :func:`h2o.model.forward.apply_rope`)."""
    c, s = _averaged_cos_sin(head_dim, base, first, n)
    R = np.zeros((head_dim, head_dim))
    i = np.arange(head_dim // 2)
    R[2 * i, 2 * i], R[2 * i, 2 * i + 1] = c, -s
    R[2 * i + 1, 2 * i], R[2 * i + 1, 2 * i + 1] = s, c
    return R


def _averaged_cos_sin(head_dim: int, base: float, first: int, n: int) -> tuple:
    """The averages of ``cos`` and ``sin`` of ``θ·p`` over ``n`` consecutive positions, one a
    rotary pair: a sum of ``n`` equally spaced angles has a closed form, ``sin(nθ/2) / (n
    sin(θ/2))`` times the cosine or sine of the middle angle — one evaluation a frequency."""
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    gain = np.sin(n * inv_freq / 2) / (n * np.sin(inv_freq / 2))
    middle = (first + (n - 1) / 2) * inv_freq
    return gain * np.cos(middle), gain * np.sin(middle)


def rotate_keys(keys: np.ndarray, base: float, first: int) -> np.ndarray:
    """``Rᵀ k`` for each key ``k`` (the last axis) and :func:`averaged_rope`'s ``R``, one 2×2
    block a rotary pair: ``(k[2i], k[2i+1])`` becomes ``(c k[2i] + s k[2i+1], c k[2i+1] - s
    k[2i])``. ``k · R mu = (Rᵀk) · mu`` and ``kᵀ R Sigma Rᵀ k = (Rᵀk)ᵀ Sigma (Rᵀk)``, so a
    rescoring rotates its kept keys once, for every query head of the group, instead of each
    head's mean and covariance (``O(n d)`` elementwise against ``O(H d²)``)."""
    c, s = _averaged_cos_sin(keys.shape[-1], base, first, N_FUTURE)
    k = np.ascontiguousarray(keys, dtype=np.float64)
    return _rotate_pairs(k.reshape(-1, k.shape[-1]), c, s).reshape(k.shape)


@njit(cache=True, nogil=True)
def _rotate_pairs(keys: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """:func:`rotate_keys`'s pairs, compiled: numpy's slices of pairs cost six temporaries,
    ten times this loop at 256 keys (the same products and sums, bit for bit)."""
    out = np.empty_like(keys)
    for t in range(keys.shape[0]):
        for i in range(c.shape[0]):
            a, b = keys[t, 2 * i], keys[t, 2 * i + 1]
            out[t, 2 * i] = c[i] * a + s[i] * b
            out[t, 2 * i + 1] = c[i] * b - s[i] * a
    return out


@njit(cache=True, nogil=True)
def add_queries(s1: np.ndarray, s2: np.ndarray, queries: np.ndarray, at: np.ndarray) -> None:
    """Add the queries of positions ``at`` (``queries[t]``: ``(H, d)``), one position after
    the other, to the running sums ``s1 += q`` and ``s2 += q qᵀ`` of each head, in float64, in
    place. Compiled because numpy's ``q[:, :, None] * q[:, None, :]`` allocates and rereads a
    ``(H, d, d)`` temporary for every position of every head, which over a text cost more than
    the rescorings (``benchmarks/model.py --text-only``); a product of two float32 queries is
    exact in float64, and each sum adds its terms in position order, as step-by-step adds do."""
    H, d = queries.shape[1:]
    for t in at:
        for h in range(H):
            for i in range(d):
                qi = np.float64(queries[t, h, i])
                s1[h, i] += qi
                for j in range(d):
                    s2[h, i, j] += qi * np.float64(queries[t, h, j])


def expected_attention(keys: np.ndarray, mu: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """``(n,)``: the expected attention of one KV head's query heads to its ``keys`` ``(n, d)``
    (after RoPE), from their rotated query means ``mu`` ``(gs, d)`` and covariances ``cov``
    ``(gs, d, d)``: the softmax over the keys of ``z``, averaged over the query heads."""
    k = np.asarray(keys, dtype=np.float64)
    d = k.shape[1]
    # k_j^T Sigma k_j for every j: (k Sigma) * k summed over the channel, as matrix products
    # (a three-operand einsum loops in Python's order, six times slower at a 1,024-token prompt);
    # the product is taken in place: a second (gs, n, d) temporary cost more than the products
    # (2.5x this function at 256 keys), and the sum is the same, bit for bit
    quad = k @ cov
    quad *= k
    z = mu @ k.T / np.sqrt(d) + quad.sum(axis=2) / d / 2
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return p.mean(axis=0)


class ExpectedAttention(ScoredPolicy):
    name = "expected-attention"
    label = "Expected Attention"
    colour, line_style = "#447777", ("dashdot", "diamond-tall", 9)  # on every chart
    score_label = "expected attention × ‖v‖"
    reads_attention = False
    reads_trace = ("vectors",)

    def __init__(
        self,
        budget: int = 512,
        recent_window: int | None = None,
        *,
        rescore_every: int | None = None,
        vectors: HeadVectors | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(budget, recent_window, rng=rng)
        window = self.recent_window
        if rescore_every is None:
            rescore_every = max(window, 1)
        self.rescore_every = check_int("rescore_every", rescore_every, 1)
        if self.rescore_every > window + 1:
            raise ValueError(
                f"rescore_every ({self.rescore_every}) must be at most recent_window + 1 "
                f"({window + 1}): a position is protected for its first {window} steps, and "
                "only a rescoring within them scores it before it can be evicted (until then it "
                f"holds its admission score of 0). Lower rescore_every to {window + 1} or less, "
                f"or widen the window to {self.rescore_every - 1}"
            )
        self._take(vectors)

    def params(self) -> dict[str, int]:
        return {**super().params(), "rescore_every": self.rescore_every}

    def score_note(self) -> str:
        r = self.rescore_every
        if r == 1:
            return ""
        return (
            f"Expected Attention scores its kept positions anew every {r} steps (at positions "
            f"0, {r}, {2 * r}, …): in between, each keeps its last score, and a position "
            f"admitted since holds 0, inside the recent window of {self.recent_window}."
        )

    @classmethod
    def state_bytes(cls, head_dim: int, group_size: int) -> int:
        """The running sums of the queries and of their outer products, float64, for each of
        the KV head's query heads, and their count."""
        return group_size * (head_dim + head_dim * head_dim) * 8 + 8

    def observe(self, trace: object) -> None:
        super().observe(trace)
        self._take(trace.vectors)  # type: ignore[attr-defined]  # checked by the trace

    def _take(self, vectors: HeadVectors | None) -> None:
        self._vec = vectors
        if vectors is None:
            return
        check_vectors(vectors, vectors.positions)
        H, d = vectors.queries.shape[1:]
        rescorings = -(-vectors.positions // self.rescore_every)  # positions 0, r, 2r, ...
        work = H * d * d * rescorings * (self.budget + 1)
        if work > MAX_WORK:
            raise ValueError(
                f"Expected Attention rescores every kept key every {self.rescore_every} step(s): "
                f"{work:.1e} multiply-adds on this trace ({vectors.positions} steps, {H} heads "
                f"of {d}, budget {self.budget}), over the {MAX_WORK:.0e} it takes. Lower the "
                "budget, raise rescore_every or replay a shorter trace"
            )
        self._s1, self._s2, self._count = np.zeros((H, d)), np.zeros((H, d, d)), 0
        self._unsummed: list[int] = []  # admitted since the last rescoring, past the sinks

    def _admission_score(self, pos: int) -> float:
        vec = self._vec
        if vec is None or pos >= vec.positions:
            have = "no vectors" if vec is None else f"vectors for {vec.positions} positions"
            raise ValueError(
                f"Expected Attention scores position {pos} by the queries, keys and value norms "
                f"up to it and has {have}: give vectors=… or replay a trace that carries them"
            )
        return 0.0  # until a rescoring scores it with every kept key (_step)

    def _accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        pass  # attention is never read: the scores come from the rescorings (_step)

    def _step(self, pos: int, attn: np.ndarray | None) -> None:
        super()._step(pos, None)  # admit pos
        vec = self._vec
        assert vec is not None  # _admission_score refused otherwise
        if pos >= N_SINK:  # the statistics leave the sinks' queries out, as kvpress does
            # only a rescoring reads the sums: it adds these queries first, in order (one
            # compiled call a rescoring instead of one a step: the same sums, bit for bit)
            self._unsummed.append(pos)
        if pos % self.rescore_every == 0:  # in between, the last rescoring's scores stand
            self._rescore(pos)

    def _rescore(self, pos: int) -> None:
        vec = self._vec
        assert vec is not None
        if self._unsummed:
            add_queries(self._s1, self._s2, vec.queries, np.array(self._unsummed))
            self._count += len(self._unsummed)
            self._unsummed.clear()
        n = self._n
        kept, score = self._pos[:n], self._score[:n]
        sink = kept < N_SINK
        if self._count == 0:  # only sinks are kept yet
            score[:] = 1.0
            return
        G, gs = vec.keys.shape[1], vec.group_size
        mu = self._s1 / self._count
        cov = self._s2 / self._count
        cov -= mu[:, :, None] * mu[:, None, :]
        rest = kept[~sink]
        keys = rotate_keys(vec.keys[rest].astype(np.float64), vec.rope_base, pos + 1)
        total = np.zeros(rest.shape[0])
        for g in range(G):
            h = slice(g * gs, (g + 1) * gs)
            p = expected_attention(keys[:, g], mu[h], cov[h])
            total += p * vec.value_norms[rest, g]
        total /= G
        score[~sink] = total
        score[sink] = total.max() + 1.0
