"""Small computations that explain a policy, for the lesson: each one a number or a table a
student can check against the library itself.

* :func:`kv_bytes_per_token` — what one token costs in a model's KV cache;
* :func:`decision` — one eviction, taken apart: who is protected, who may go, who goes and why;
* :func:`tie_demo` — the card's tie-breaking and victim-order rules, on four hand-made steps;
* :func:`lost_heavy_hitter` — the position a replay dropped that the trace went on attending to
  most, and the attention mass that went with it;
* :func:`frozen_share` — with no protected window, how often the newest position is the victim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .replay import Replay
from .trace import Trace


@dataclass(frozen=True)
class ModelShape:
    """What the KV cache of one model costs: K and V per layer and KV head, ``head_dim`` each."""

    name: str
    n_layers: int
    n_kv_heads: int
    head_dim: int
    bytes_per_value: int = 2  # fp16 / bf16

    @property
    def bytes_per_token(self) -> int:
        return kv_bytes_per_token(
            self.n_layers, self.n_kv_heads, self.head_dim, self.bytes_per_value
        )


def kv_bytes_per_token(
    n_layers: int, n_kv_heads: int, head_dim: int, bytes_per_value: int = 2
) -> int:
    """Bytes one token adds to the KV cache: layers × KV heads × head dim × 2 (K and V) × bytes."""
    return n_layers * n_kv_heads * head_dim * 2 * bytes_per_value


def gguf_shape(path: str, bytes_per_value: int = 2) -> ModelShape:
    """A llama-architecture GGUF file's KV shape, from its header alone (no weights are read)."""
    import gguf  # the policy library works without it

    reader = gguf.GGUFReader(str(path))

    def field(key: str) -> object:
        f = reader.fields.get(key)
        if f is None:
            raise ValueError(f"{path}: missing metadata {key}")
        return f.contents()

    heads = int(field("llama.attention.head_count"))
    kv = reader.fields.get("llama.attention.head_count_kv")
    dim = reader.fields.get("llama.rope.dimension_count")
    return ModelShape(
        str(reader.fields["general.name"].contents()) if "general.name" in reader.fields else "?",
        n_layers=int(field("llama.block_count")),
        n_kv_heads=int(kv.contents()) if kv is not None else heads,
        head_dim=int(dim.contents())
        if dim is not None
        else int(field("llama.embedding_length")) // heads,
        bytes_per_value=bytes_per_value,
    )


#: Worked examples with published shapes (fp16): a 7B model with one KV head per query head, and a
#: 70B model with grouped-query attention (8 KV heads for 64 query heads).
LLAMA2_7B = ModelShape("Llama-2-7B", n_layers=32, n_kv_heads=32, head_dim=128)
LLAMA3_70B = ModelShape("Llama-3-70B", n_layers=80, n_kv_heads=8, head_dim=128)


@dataclass(frozen=True)
class Decision:
    """Step ``t`` of a replay, before its eviction: the kept positions and scores, how many of
    the newest are protected (``window``) and of the oldest pinned (``sinks``), and the victims
    (ascending) with the scores they went with."""

    t: int
    positions: np.ndarray
    scores: np.ndarray
    window: int
    sinks: int
    victims: list[tuple[int, float]]

    @property
    def evictable(self) -> slice:
        """The slots that may go: after the pinned sinks, before the protected window."""
        return slice(self.sinks, max(self.sinks, len(self.positions) - self.window))


def decision(rep: Replay, t: int) -> Decision:
    """Step ``t`` of a recorded replay, taken apart (see :class:`Decision`)."""
    pos, scores = rep.kept_at(t)
    n = len(pos)
    return Decision(
        t, pos.copy(), scores.copy(), min(rep.window, n), min(rep.sinks, n), rep.victims_at(t)
    )


def first_eviction(rep: Replay) -> int:
    """The first step at which the replay evicted anything (its budget, for a full cache)."""
    if not len(rep.victim_step):
        raise ValueError("this replay never evicted: the trace is not longer than the budget")
    return int(rep.victim_step[0])


def tie_demo() -> dict[str, object]:
    """The card's tie and order rules on five hand-made steps of H2O (budget 3, window 1).

    After step 3, positions 1 and 2 hold equal scores (0.75): the lower, 1, goes. After step 4,
    evicting down to two slots drops 3 (0.7) and then 2 (0.85), chosen in that order and
    returned ascending, ``[2, 3]``.
    """
    from .policies import H2O

    policy = H2O(3, recent_window=1)
    for pos, row in enumerate([None, [1.0], [0.5, 0.5], [0.0, 0.25, 0.75]]):
        policy.on_decode_step(pos, None if row is None else np.asarray(row, np.float32))
    tied = dict(zip(policy.kept.tolist(), policy.scores.tolist(), strict=True))
    tie = policy.evict()
    policy.on_decode_step(4, np.asarray([0.2, 0.1, 0.7], np.float32))
    before = dict(zip(policy.kept.tolist(), policy.scores.tolist(), strict=True))
    down = policy.evict(budget=2)
    return {"tied": tied, "tie_victims": tie, "before": before, "down_to_2": down}


def column(trace: Trace, pos: int) -> np.ndarray:
    """The attention position ``pos`` receives at every step (0 before it exists)."""
    t = np.arange(pos + 1, trace.steps)
    out = np.zeros(trace.steps)
    out[pos + 1 :] = trace.weights[t * (t - 1) // 2 + pos]
    return out


@dataclass(frozen=True)
class Lost:
    """A position a replay evicted, and the attention the trace gave it after that."""

    position: int
    evicted_at: int
    lost_mass: float  # summed over the steps after the eviction
    received: np.ndarray  # per step (see :func:`column`)


def lost_heavy_hitter(rep: Replay, trace: Trace, skip: int = 0) -> Lost:
    """The evicted position whose attention after its eviction adds up to the most: the heavy
    hitter a policy that does not read attention drops. ``skip`` leaves out the first positions
    (the sinks, which such a policy pins)."""
    steps = trace.steps
    best: Lost | None = None
    for t, p in zip(rep.victim_step.tolist(), rep.victim_pos.tolist(), strict=True):
        if p < skip:
            continue
        col = column(trace, p)
        lost = float(col[t + 1 :].sum()) if t + 1 < steps else 0.0
        if best is None or lost > best.lost_mass:
            best = Lost(p, t, lost, col)
    if best is None:
        raise ValueError("the replay evicted nothing past the skipped positions")
    return best


def frozen_share(rep: Replay) -> float:
    """Of the steps that evicted, the share whose victim was the position just admitted: 1.0
    means the cache never advances (the card: why the recent window is load-bearing)."""
    if not len(rep.victim_step):
        return float("nan")
    return float(np.mean(rep.victim_pos == rep.victim_step))
