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

One policy instance per (layer, KV head), stepped one by one (:class:`FedHeads`); the model's
rows ``knorm@B``, ``expected-attention@B`` and ``kvzip@B`` run this way over a text
(:meth:`h2o.model.caches.base.ContextCompression.text_policies`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from h2o.model.closed_loop import Instances
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
        from h2o.trace import check_kvzip_scores

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
    """A layer's policies stepped one by one (:class:`~h2o.model.closed_loop.Instances`), each
    having observed its :class:`Feed`, which :meth:`write` fills."""

    def __init__(self, policies: Sequence, feeds: Sequence[Feed], group_size: int) -> None:
        if len(policies) != len(feeds):
            raise ValueError(f"{len(policies)} policies for {len(feeds)} feeds")
        super().__init__(policies)
        self.feeds, self.group_size = list(feeds), group_size
        for pol, feed in zip(policies, feeds, strict=True):
            pol.observe(feed)

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
    from h2o.policies import POLICIES, make_policy

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
