"""The closed loop's seam: one layer's KV heads behind one interface, whatever holds them.

The model steps its eviction policies once per token and layer (:class:`ClosedLoopCache`, the
:class:`h2o.model.cache_api.Cache` the forward pass reads through):
query row ``t`` may see only ``kept ∪ {t}`` of its KV head, and each head's policy gets the
softmax over its kept keys, averaged over the query heads of its group, then admits ``t`` and
evicts. A layer's heads come in four forms, and each is a :class:`LayerHeads` — the role
``CacheLayerMixin`` plays in transformers' ``cache_utils.py``: what each head keeps, whether it
wants attention, and one :meth:`~LayerHeads.step` per query row:

* :class:`Instances` — one policy instance per head, stepped one by one (any policy, yours too);
* :class:`Bank` — a :class:`~h2o.bank.PolicyBank` whose lanes are the heads, stepped in one
  compiled call (with the fast gather of the kept columns, :func:`~h2o.bank.kernels.gather_kept`);
* :class:`LayerParts` — several banks, e.g. duo's retrieval heads and its streaming heads;
* :class:`Adaptive` — an :class:`~h2o.bank.adaptive.AdaptiveLayer`, whose heads share one
  budget and are stepped whole.

Every form computes the same masks and the same float32 signals (the same gathers into the same
:func:`_renormalised_mean`), checks them before any head moves, and so gives the instances'
results bit for bit. :func:`as_heads` wraps what a :class:`ClosedLoopCache` is given;
:func:`fastest` builds the fastest exact form of a row of fresh instances.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from h2o.bank import PolicyBank, bank_key, make_bank
from h2o.bank.adaptive import AdaptiveHead, AdaptiveLayer
from h2o.bank.kernels import gather_kept
from h2o.model.cache_api import Cache, LayerRead, Wrapping

if TYPE_CHECKING:
    from h2o.model.gguf_io import ModelConfig
    from h2o.policies import Policy

#: ``factory(layer, kv_head) -> policy``: one fresh policy per (layer, KV head).
PolicyFactory = Callable[[int, int], "Policy"]


# -- the interface -------------------------------------------------------------------------------
class LayerHeads(ABC):
    """One layer's KV heads, as the closed loop steps them (see the module docstring)."""

    @abstractmethod
    def step(self, p: np.ndarray, t: int, i: int, mask: np.ndarray, layer: int = -1) -> bool:
        """Query ``t`` (row ``i`` of the chunk's causal probabilities ``p``, ``(G, gs, rows,
        keys)``): mark ``kept ∪ {t}`` of each head in ``mask[g, i]``, step every head with its
        signal and evict. Returns whether any head had lost a position of ``0..t-1`` (then
        the row's output is recomputed from the mask). Refusals raise ``ValueError`` before
        any head moves."""

    def write(  # noqa: B027  (a hook: most heads take nothing)
        self, queries: np.ndarray, keys: np.ndarray, values: np.ndarray, t0: int
    ) -> None:
        """The layer's new positions ``t0 ..`` as the model computes them, before any of them is
        stepped: queries before RoPE ``(H, n, hd)``, keys after RoPE and values ``(G, n, hd)``.
        Nothing here; heads whose policies read more than attention take them
        (:class:`h2o.model.fed_heads.FedHeads`)."""

    def step_rows(self, p: np.ndarray, t0: int, mask: np.ndarray, layer: int = -1) -> int:
        """:meth:`step` for every row of the chunk in order (row ``i``: query ``t0 + i``);
        returns the first row at which some head had lost a position (the row count: none)."""
        c = p.shape[2]
        first = c
        for i in range(c):
            if self.step(p, t0 + i, i, mask, layer) and first == c:
                first = i
        return first


class Instances(LayerHeads):
    """One policy instance per KV head (any object with ``kept``, ``reads_attention``,
    ``on_decode_step`` and ``evict``), stepped one by one: :func:`_step_policies`."""

    def __init__(self, policies: Sequence[EvictionPolicy]) -> None:
        self.policies = policies
        self.wants = [bool(getattr(pol, "reads_attention", True)) for pol in policies]

    def step(self, p: np.ndarray, t: int, i: int, mask: np.ndarray, layer: int = -1) -> bool:
        return _step_policies(p, t, i, self.policies, self.wants, mask, layer)


class Bank(LayerHeads):
    """A bank whose lanes are the layer's KV heads: :func:`_step_bank`."""

    def __init__(self, bank: PolicyBank) -> None:
        self.bank = bank

    def step(self, p: np.ndarray, t: int, i: int, mask: np.ndarray, layer: int = -1) -> bool:
        return _step_bank(p, t, i, self.bank, mask, layer)

    def step_rows(self, p: np.ndarray, t0: int, mask: np.ndarray, layer: int = -1) -> int:
        # Row by row (_step_bank) until the bank can take the rest in one call
        # (PolicyBank.step_rows: a scored bank's steady state); each of those rows evicts.
        c = p.shape[2]
        first, i = c, 0
        while i < c:
            done = self.bank.step_rows(p, t0, i, mask)
            if done > i:
                first, i = min(first, i), done
                continue
            if _step_bank(p, t0 + i, i, self.bank, mask, layer) and first == c:
                first = i
            i += 1
        return first


class Adaptive(LayerHeads):
    """An adaptive layer (its heads share the layer's slots), stepped whole: :func:`_step_whole`."""

    def __init__(self, layer: AdaptiveLayer) -> None:
        self.layer = layer

    def step(self, p: np.ndarray, t: int, i: int, mask: np.ndarray, layer: int = -1) -> bool:
        return _step_whole(p, t, i, self.layer, mask, layer)


class EvictionPolicy(Protocol):
    """The part of the ``h2o.policies.Policy`` contract the model uses."""

    reads_attention: bool

    @property
    def kept(self) -> np.ndarray: ...

    def on_decode_step(self, pos: int, attn: np.ndarray | None) -> None: ...

    def evict(self) -> list[int]: ...


def check_layers(policies: Sequence[Sequence[EvictionPolicy]], cfg: ModelConfig, t0: int) -> None:
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
        gather_kept(p, bank.positions, n, i, mask, pk)
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


class LayerParts(LayerHeads):
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

    def step(self, p: np.ndarray, t: int, i: int, mask: np.ndarray, layer: int = -1) -> bool:
        return _step_parts(p, t, i, self, mask, layer)


def _step_parts(
    p: np.ndarray, t: int, i: int, layer_parts: LayerParts, mask: np.ndarray, layer: int = -1
) -> bool:
    """:func:`_step_policies` for a layer made of several banks (:class:`LayerParts`).

    The same masks and the same signals as the instances' path: before any head has evicted,
    the causal row of every head at once (:func:`_signals`' first case); when every head keeps
    the same number, :func:`_signals` itself; otherwise each bank's lanes gathered as one
    block — per lane the gather and :func:`_renormalised_mean` of the one-head path (the head mean
    is elementwise: each head's block alone), and per lane one by one where a bank's own
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
            rows = b.positions[:, :f]
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
    :func:`_renormalised_mean`, unrolled: the same reduction and the same head mean on the same
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
                signals.append(head_mean((inv / z)[None, :], pk[None])[0])
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
    w = np.float32(1.0 / pk.shape[1]) / (_sum(pk, axis=-1) if z is None else z)
    return head_mean(w, pk)


def head_mean(w: np.ndarray, pk: np.ndarray) -> np.ndarray:
    """``sum_h w[:, h] * pk[:, h]``: ``(G, gs)`` float32 weights by ``(G, gs, n)`` rows, each
    product rounded, then added in head order — numpy's elementwise arithmetic, the same bits
    on every CPU and in the compiled rows (:func:`h2o.bank.kernels.steady_rows`). Not a
    ``matmul``: a BLAS adds a row's products in the order and with the fused multiply-adds its
    kernel for that CPU and shape chooses, so its last bit differs between machines."""
    out = w[:, 0, None] * pk[:, 0]
    for h in range(1, pk.shape[1]):
        out += w[:, h, None] * pk[:, h]
    return out


def _renormalised_mean(pk: np.ndarray) -> np.ndarray:
    """``(G, gs, n)`` probabilities → each head renormalised over ``n``, mean over heads."""
    z = _sum(pk, axis=-1)
    if not _min(z, axis=None) > 0:
        # Every kept weight of some head underflowed (the dropped keys dominate by > 87 nats):
        # give that head a uniform row rather than 0/0.
        pk = np.where((z <= 0)[..., None], np.float32(1.0), pk)
        z = _sum(pk, axis=-1)
    return _mean_unchecked(pk, z)  # (G, 1, gs) weights: renormalise, then mean


def as_heads(row: object) -> LayerHeads:
    """The :class:`LayerHeads` of what :class:`ClosedLoopCache` was given for one layer: a bank,
    layer parts, an adaptive layer, or a sequence of instances."""
    if isinstance(row, LayerHeads):
        return row
    if isinstance(row, PolicyBank):
        return Bank(row)
    if isinstance(row, AdaptiveLayer):
        return Adaptive(row)
    return Instances(row)  # type: ignore[arg-type]


def fastest(row: list[Policy]) -> PolicyBank | LayerParts | AdaptiveLayer | list[Policy]:
    """The fastest exact form of one layer's row of fresh instances: one bank; the banks of its
    kinds of policy (:class:`LayerParts`: duo's retrieval and streaming heads); the adaptive
    layer its heads belong to, stepped whole; or the instances themselves."""
    layer = _adaptive_layer(row)
    if layer is not None:
        return layer
    try:
        keys = [bank_key(p) for p in row]
    except ValueError:  # not a policy a bank holds
        return row
    if len(set(keys)) == 1:
        return make_bank(row)
    groups: dict[object, list[int]] = {}
    for g, k in enumerate(keys):
        groups.setdefault(k, []).append(g)
    return LayerParts([(heads, make_bank([row[g] for g in heads])) for heads in groups.values()])


def _adaptive_layer(row: list[Policy]) -> AdaptiveLayer | None:
    """The :class:`AdaptiveLayer` whose heads ``row`` is, in order and fresh; else None."""
    if not row or not all(isinstance(h, AdaptiveHead) for h in row):
        return None
    layer = row[0].layer  # type: ignore[attr-defined]
    fresh = all(len(p) == 0 and p.last_pos < 0 for p in layer.inner)
    if fresh and list(layer.heads) == row:
        return layer
    return None


# -- the closed loop as a cache ------------------------------------------------------------------
class ClosedLoopCache(Wrapping):
    """``inner``'s keys and values, read under eviction: ``policies[layer][kv_head]`` (any form
    :func:`as_heads` takes) decide which keys each query sees, and are stepped once per token
    — a :class:`h2o.model.cache_api.Cache`.

    Each chunk of query rows first gets its causal scores and softmax, as in a plain prefill.
    Its rows are then stepped one at a time, in order (:meth:`LayerHeads.step_rows`) — exactly
    what token-by-token decoding with eviction computes under teacher forcing:

    1. query ``t`` may see ``kept ∪ {t}`` of its KV head (recorded in a mask);
    2. each policy gets ``attn``: the softmax of the query's scores over its kept keys only
       (self excluded, so it sums to 1 — the trace-row semantics), averaged over the query
       heads of its group, float32, index-aligned with ``kept``; ``None`` if the policy does
       not read attention (``reads_attention = False``);
    3. ``policy.on_decode_step(t, attn)`` admits ``t``, then ``policy.evict()``.

    The model computes the outputs after the chunk's steps: the rows whose caches still hold
    all of ``0..t-1`` keep the causal softmax untouched (so a budget ``>= T`` is the plain
    prefill bit for bit); the others use the causal softmax restricted to the mask and
    renormalised, which equals the softmax over ``kept ∪ {t}``.

    :meth:`begin` checks the policies before anything runs (:func:`check_layers`), and every
    step's inputs are checked before any policy of that step is stepped
    (:meth:`LayerHeads.step`), so the refusals of the policy contract surface as a
    ``ValueError`` naming the layer and head, not halfway through a step.
    """

    def __init__(
        self, inner: Cache, policies: Sequence[Sequence[EvictionPolicy]], config: ModelConfig
    ) -> None:
        super().__init__(inner)
        self.policies, self.config = policies, config

    def begin(self, n: int) -> None:
        super().begin(n)
        check_layers(self.policies, self.config, self.inner.length)

    def update(
        self, layer: int, keys: np.ndarray, values: np.ndarray, queries: np.ndarray
    ) -> LayerRead:
        heads = as_heads(self.policies[layer])
        # policies reading vectors take the new positions before any of them is stepped
        heads.write(queries, keys, values, self.inner.length)
        read = self.inner.update(layer, keys, values, queries)

        def observe(p: np.ndarray, start: int) -> tuple[int, np.ndarray]:
            G, _, c, kv = p.shape
            mask = np.zeros((G, c, kv), dtype=bool)
            rows = np.arange(c)
            mask[:, rows, start + rows] = True  # each query sees itself
            # A signal that divides by a zero mass is refused and redone (_mean_unchecked):
            # no warning for it, and one errstate for the chunk (one a row costs a µs).
            with np.errstate(divide="ignore", invalid="ignore"):
                first = heads.step_rows(p, start, mask, layer)
            return first, mask

        return replace(read, observe=observe)
