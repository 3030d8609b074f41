"""A layer's heads whose policies read more than attention, fed by the model as it writes.

On a captured trace, K-norm reads each position's key norm, Expected Attention its queries, keys
and value norms, KVzip its reconstruction score (:attr:`h2o.policies.Policy.reads_trace`). In the
model's closed loop (:meth:`h2o.model.forward.SmolLM.forward`) there is no trace: each policy
observes a :class:`Feed` instead — an object with the same member, filled position by position
as the model computes the layer's queries, keys and values, before any of those positions is
stepped (:meth:`h2o.model.closed_loop.LayerHeads.write`). So a policy reads of position ``t``
only what exists once ``t`` is written, as a decoder would:

* ``key_norms``: ``‖k_t‖`` of the head's key (after RoPE, which keeps the norm), float64;
* ``vectors``: the head's group of queries before RoPE, its key and its value norm
  (:class:`~h2o.trace_vectors.HeadVectors`, one KV head);
* ``kvzip_scores``: given whole before the run (:meth:`Feed.given`), as the policy says — a
  score that needs the whole text (:attr:`~h2o.policies.Policy.hindsight`).

One policy instance per (layer, KV head) (:class:`FedHeads`); the model's rows ``knorm@B``,
``expected-attention@B`` and ``kvzip@B`` run this way over a text
(:meth:`h2o.model.caches.base.ContextCompression.text_policies`). A layer's instances are built
alike and step together, so their kept positions and scores are held as rows of one array each
(as a bank's lanes, :meth:`~h2o.policies.base.ScoredPolicy.bind`): each step, every instance
admits the position by its own code (:meth:`~h2o.policies.base.Policy.advance_trusted`: K-norm's
score, Expected Attention's rescoring), then the layer evicts one a head in one compiled call —
the card's first minimum outside the window (:func:`h2o.bank.kernels.evict_lanes`), which is
what each instance's ``evict`` computes in Python.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from h2o.bank.kernels import evict_lanes
from h2o.model.closed_loop import Instances
from h2o.policies import POLICIES, make_policy
from h2o.policies.base import ScoredPolicy
from h2o.trace import check_kvzip_scores
from h2o.trace_vectors import HeadVectors

#: What the model can hand a policy, by the trace member it reads.
FED = ("key_norms", "vectors", "kvzip_scores")


class Feed:
    """What one (layer, KV head) policy observes in place of a trace: the members it reads,
    written as the model computes them. ``name`` says where it comes from in a refusal."""

    def __init__(self, members: Sequence[str], positions: int, group_size: int, cfg) -> None:
        self.name = "the model's closed loop"
        unknown = [m for m in members if m not in FED]
        if unknown:
            raise ValueError(
                f"the model cannot hand a policy {', '.join(unknown)} (it hands {', '.join(FED)})"
            )
        self.members, self.positions = tuple(members), int(positions)
        self.key_norms = np.zeros(positions) if "key_norms" in members else None
        self.vectors = (
            HeadVectors.blank(positions, group_size, 1, cfg.head_dim, cfg.rope_base)
            if "vectors" in members
            else None
        )
        self.kvzip_scores: np.ndarray | None = None

    def given(self, member: str, values: np.ndarray) -> None:
        """A member known for every position before the run (KVzip's scores)."""

        if member != "kvzip_scores" or member not in self.members:
            raise ValueError(f"{member} is not given ahead to this feed")
        check_kvzip_scores(values, self.positions)  # finite, non-negative, one a position
        self.kvzip_scores = np.asarray(values, dtype=np.float64)

    def write(self, t0: int, queries: np.ndarray, key: np.ndarray, value: np.ndarray) -> None:
        """Positions ``t0 ..``: the group's queries before RoPE ``(gs, n, hd)``, the head's keys
        after RoPE and values ``(n, hd)``."""
        n = key.shape[0]
        if not 0 <= t0 <= self.positions - n:
            raise ValueError(
                f"positions {t0}..{t0 + n - 1} outside the feed's 0..{self.positions - 1}"
            )
        if self.key_norms is not None:
            k = key.astype(np.float64)
            self.key_norms[t0 : t0 + n] = np.sqrt(np.einsum("td,td->t", k, k))
        if self.vectors is not None:
            norms = np.linalg.norm(value.astype(np.float64), axis=-1)
            self.vectors.write(t0, queries.transpose(1, 0, 2), key[:, None], norms[:, None])


class FedHeads(Instances):
    """A layer's policies (:class:`~h2o.model.closed_loop.Instances`), each having observed its
    :class:`Feed`, which :meth:`write` fills; stepped together when they can be (the module's
    docstring), else one by one."""

    def __init__(self, policies: Sequence, feeds: Sequence[Feed], group_size: int) -> None:
        if len(policies) != len(feeds):
            raise ValueError(f"{len(policies)} policies for {len(feeds)} feeds")
        super().__init__(policies)
        self.feeds, self.group_size = list(feeds), group_size
        for pol, feed in zip(policies, feeds, strict=True):
            pol.observe(feed)
        self._rows = self._bind(list(policies))

    @staticmethod
    def _bind(policies: list) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Fresh scored policies of one class, budget and window: their storage becomes rows of
        ``(heads, budget + 1)`` arrays (positions, scores, scratch), which they then read and
        write as their own; None for any other row (stepped one by one)."""
        first = policies[0] if policies else None
        cls = type(first)
        # the layer evicts as the card does: only for a class that keeps its mechanics
        if (
            not isinstance(first, ScoredPolicy)
            or first.reads_attention
            or not cls.evicts_by_argmin()
        ):
            return None
        if not all(
            type(pol) is cls
            and pol.budget == first.budget
            and pol.recent_window == first.recent_window
            and len(pol) == 0
            and pol.last_pos < 0
            for pol in policies
        ):
            return None
        lanes, cap = len(policies), first.budget + 1
        rows = (
            np.zeros((lanes, cap), dtype=first.POS_DTYPE),
            np.zeros((lanes, cap), dtype=first.SCORE_DTYPE),
            np.zeros((lanes, cap), dtype=first.SCRATCH_DTYPE),
        )
        for i, pol in enumerate(policies):
            pol.bind(rows[0][i], rows[1][i], rows[2][i])
        return rows

    def _together(self, t0: int) -> int:
        """The fill every policy is at if they can step together from ``t0`` (bound to their
        rows, equal fills at most the budget, the last position ``t0 - 1``), else -1."""
        if self._rows is None:
            return -1
        pos = self._rows[0]
        n = len(self.policies[0])
        for pol in self.policies:
            # a policy stepped alone past budget + 1 without evicting grew out of its row
            if len(pol) != n or pol.last_pos != t0 - 1 or pol.kept.base is not pos:
                return -1
        return n if n <= self.policies[0].budget else -1

    def step_rows(self, p: np.ndarray, t0: int, mask: np.ndarray, layer: int = -1) -> int:
        n = self._together(t0)
        if n < 0:
            return super().step_rows(p, t0, mask, layer)
        pols = self.policies
        budget = pols[0].budget
        pos, score, _ = self._rows  # type: ignore[misc]
        lanes = len(pols)
        heads = np.arange(lanes)[:, None]
        windows = np.full(lanes, pols[0].recent_window, dtype=np.int64)
        go, victims = np.ones(lanes, dtype=np.bool_), np.empty(lanes, dtype=np.int64)
        c = p.shape[2]
        first = c
        for i in range(c):
            t = t0 + i
            # query t sees kept ∪ {t} of each head, as _step_policies marks it
            if n == t:
                mask[:, i, : t + 1] = True
            else:
                mask[:, i, t] = True
                mask[heads, i, pos[:, :n]] = True
                first = min(first, i)
            for pol in pols:
                pol.advance_trusted(t, None)  # each admits t by its own rule (attn unread)
            n += 1
            if n > budget:  # the card's eviction, every head at once: as ScoredPolicy._evict
                evict_lanes(pos, score, n, windows, go, victims)
                n -= 1
                for pol in pols:
                    pol.set_fill(n, t)
        return first

    def __len__(self) -> int:
        return len(self.policies)

    def __iter__(self) -> Iterator:
        return iter(self.policies)

    def write(self, queries: np.ndarray, keys: np.ndarray, values: np.ndarray, t0: int) -> None:
        gs = self.group_size
        for g, feed in enumerate(self.feeds):
            feed.write(t0, queries[g * gs : (g + 1) * gs], keys[g], values[g])


def fed_layers(
    model,
    policy: str,
    budget: int,
    positions: int,
    given: np.ndarray | None = None,
    **params: int,
) -> list[FedHeads]:
    """One :class:`FedHeads` a layer: ``POLICIES[policy](budget, **params)`` in every KV head,
    fed the members it reads for ``positions`` positions; ``given`` ``(n_layers, n_kv_heads,
    positions)``: the member known ahead (KVzip's scores), required when the policy reads it."""
    cfg = model.config
    cls = POLICIES[policy]
    ahead = [m for m in cls.reads_trace if m == "kvzip_scores"]
    if ahead and (given is None or given.shape != (cfg.n_layers, cfg.n_kv_heads, positions)):
        raise ValueError(
            f"{cls.label} reads {ahead[0]} for every position before the run: give them as "
            f"({cfg.n_layers}, {cfg.n_kv_heads}, {positions})"
        )
    layers = []
    for li in range(cfg.n_layers):
        feeds = []
        for g in range(cfg.n_kv_heads):
            feed = Feed(cls.reads_trace, positions, cfg.group_size, cfg)
            if ahead:
                feed.given(ahead[0], given[li, g])  # type: ignore[index]
            feeds.append(feed)
        pols = [make_policy(policy, budget, **params) for _ in range(cfg.n_kv_heads)]
        layers.append(FedHeads(pols, feeds, cfg.group_size))
    return layers
