"""Small computations that explain a policy, for the lesson: each one a number or a table a
student can check against the library itself.

* :func:`kv_bytes_per_token` — what one token costs in a model's KV cache, and
  :class:`ModelShape` — a model's KV shape with its weights (published parameter counts);
* :func:`decision` — one eviction, taken apart: who is protected, who may go, who goes and why;
* :func:`tie_demo` — the card's tie-breaking and victim-order rules, on five hand-made steps;
* :func:`lost_heavy_hitter` — the position a replay dropped that the trace went on attending to
  most, and the attention mass that went with it;
* :func:`frozen_share` — with no protected window, how often the newest position is the victim;
* :func:`head_share` — the share of a steady-state row that falls on the first positions;
* :func:`sink_facts` and :func:`heavy_facts` — the numbers of the lesson's chapters 2 and 3.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .analysis import band_share, band_width
from .replay import Replay
from .trace import Trace


@dataclass(frozen=True)
class ModelShape:
    """What the KV cache of one model costs: K and V per layer and KV head, ``head_dim`` each;
    and, when known, its query heads, parameter count and native (trained) context length."""

    name: str
    n_layers: int
    n_kv_heads: int
    head_dim: int
    bytes_per_value: int = 2  # fp16 / bf16
    n_heads: int | None = None  # query heads: more than n_kv_heads under grouped-query attention
    n_params: float | None = None
    context: int | None = None

    @property
    def bytes_per_token(self) -> int:
        return kv_bytes_per_token(
            self.n_layers, self.n_kv_heads, self.head_dim, self.bytes_per_value
        )

    def kv_bytes(self, tokens: int, batch: int = 1) -> int:
        """The KV cache of ``batch`` sequences of ``tokens`` tokens each."""
        return self.bytes_per_token * tokens * batch

    @property
    def bytes_per_slot_head(self) -> int:
        """K and V of one slot in one (layer, KV head): what an eviction frees there."""
        return self.head_dim * 2 * self.bytes_per_value

    @property
    def weight_bytes(self) -> float | None:
        """The weights at ``bytes_per_value`` per parameter (fp16: 2), if the count is known."""
        return None if self.n_params is None else self.n_params * self.bytes_per_value

    @property
    def gqa_group(self) -> int | None:
        """Query heads per KV head (1 without grouped-query attention), if known."""
        return None if self.n_heads is None else self.n_heads // self.n_kv_heads


def kv_bytes_per_token(
    n_layers: int, n_kv_heads: int, head_dim: int, bytes_per_value: int = 2
) -> int:
    """Bytes one token adds to the KV cache: layers × KV heads × head dim × 2 (K and V) × bytes."""
    return n_layers * n_kv_heads * head_dim * 2 * bytes_per_value


def gguf_shape(path: str, bytes_per_value: int = 2) -> ModelShape:
    """A llama-architecture GGUF file's KV shape, query heads, native context and parameter count
    (the tensors' element counts summed), from its header alone: no weights are read."""
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
    ctx = reader.fields.get("llama.context_length")
    return ModelShape(
        str(reader.fields["general.name"].contents()) if "general.name" in reader.fields else "?",
        n_layers=int(field("llama.block_count")),
        n_kv_heads=int(kv.contents()) if kv is not None else heads,
        head_dim=int(dim.contents())
        if dim is not None
        else int(field("llama.embedding_length")) // heads,
        bytes_per_value=bytes_per_value,
        n_heads=heads,
        n_params=float(sum(int(t.n_elements) for t in reader.tensors)),
        context=int(ctx.contents()) if ctx is not None else None,
    )


def named(shape: ModelShape, name: str) -> ModelShape:
    """``shape`` under another name (a GGUF's ``general.name`` is often a file stem)."""
    return replace(shape, name=name)


#: Worked examples with published shapes (fp16): a 7B model with one KV head per query head, and a
#: 70B model with grouped-query attention (8 KV heads for 64 query heads). Parameter counts as
#: published: Llama-2-7B 6.74e9 (Touvron et al., 2023, "6.7B"; 6,738,415,616 in its weights),
#: Llama-3.1-70B 70.6e9 (its released weights). Native contexts: 4,096 and 131,072 tokens.
#: Llama-3.1-70B has Llama-3-70B's shape (which was trained for 8K) at 128K.
LLAMA2_7B = ModelShape(
    "Llama-2-7B",
    n_layers=32,
    n_kv_heads=32,
    head_dim=128,
    n_heads=32,
    n_params=6.74e9,
    context=4_096,
)
LLAMA31_70B = ModelShape(
    "Llama-3.1-70B",
    n_layers=80,
    n_kv_heads=8,
    head_dim=128,
    n_heads=64,
    n_params=70.6e9,
    context=131_072,
)


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

    After step 3, positions 1 and 2 hold equal scores: the lower, 1, goes. After step 4,
    evicting down to two slots drops the two lowest evictable scores, 3 and then 2 (the order a
    repeated argmin picks them in: ``chosen``), and returns them ascending, ``[2, 3]``.
    """
    from .policies import H2O

    budget, window = 3, 1
    policy = H2O(budget, recent_window=window)
    rows = [None, [1.0], [0.5, 0.5], [0.0, 0.25, 0.75]]
    for pos, row in enumerate(rows):
        policy.on_decode_step(pos, None if row is None else np.asarray(row, np.float32))
    tied = dict(zip(policy.kept.tolist(), policy.scores.tolist(), strict=True))
    tie = policy.evict()
    last = [0.2, 0.1, 0.7]
    policy.on_decode_step(len(rows), np.asarray(last, np.float32))
    before = dict(zip(policy.kept.tolist(), policy.scores.tolist(), strict=True))
    down = policy.evict(budget=2)
    # The argmin's picks in order: lowest score first, the lower position on a tie.
    evictable = list(before.items())[: len(before) - window]
    chosen = [p for p, _ in sorted(evictable, key=lambda ps: (ps[1], ps[0]))[: len(down)]]
    return {
        "steps": len(rows) + 1,
        "budget": budget,
        "window": window,
        "tied": tied,
        "tie_step": len(rows) - 1,
        "tie_victims": tie,
        "before": before,
        "chosen": chosen,
        "down_to_2": down,
    }


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


def head_share(trace: Trace, n: int) -> float:
    """Mean share of a row on positions ``0..n-1``, over the steps after ``n`` (before them the
    row lies wholly on those positions, which says nothing)."""
    if trace.steps <= n + 1:
        raise ValueError(f"the trace has no step after {n}")
    return float(np.mean([trace.row(t)[:n].sum() for t in range(n + 1, trace.steps)]))


# -- the lesson's chapters 2 and 3: their numbers, for the sentences the app builds -------------
@dataclass(frozen=True)
class SinkFacts:
    """Chapter 2's numbers: StreamingLLM on the canonical trace, and the heavy hitter it lost."""

    budget: int
    sinks: int
    top_k: int
    mass: float
    recall: float
    oracle: float
    band: int
    band_share: float  # of a steady-state row, on the newest `band` positions
    sink_share: float  # of a steady-state row, on positions 0..sinks-1
    epoch: int
    hitters: int
    lost: Lost
    kept_share: float  # mean attention the lost position took while kept
    vs_even: float  # ... as a multiple of an even share (1/t at step t)
    kept_next: float  # the share of row evicted_at + 1 the kept set still holds


def sink_facts(trace: Trace, rep: Replay, lost: Lost) -> SinkFacts:
    """The numbers of :class:`SinkFacts`, for a trace whose metadata names its recency band."""
    summary = rep.summary()
    band = band_width(trace)
    if band is None:
        raise ValueError(f"trace {trace.name!r} names no recency band in its metadata")
    got = lost.received[lost.position + 1 : lost.evicted_at + 1]
    steps = np.arange(lost.position + 1, lost.evicted_at + 1)
    return SinkFacts(
        budget=rep.budget,
        sinks=rep.sinks,
        top_k=rep.top_k,
        mass=summary["retained_mass"],
        recall=summary["top_k_recall"],
        oracle=summary["oracle_mass"],
        band=band,
        band_share=band_share(trace, band),
        sink_share=head_share(trace, rep.sinks),
        epoch=int(trace.meta.get("epoch", 0)),
        hitters=int(trace.meta.get("hitters_per_epoch", 0)),
        lost=lost,
        kept_share=float(got.mean()),
        vs_even=float(np.mean(got * steps)),
        kept_next=float(rep.mass[lost.evicted_at + 1]),
    )


@dataclass(frozen=True)
class HeavyFacts:
    """Chapter 3's numbers: H2O's first eviction on the toy trace, taken apart."""

    steps: int
    budget: int
    window: int
    t: int
    n: int
    protected: tuple[int, int]
    victim: int
    victim_score: float
    evictable: tuple[int, ...]
    top: tuple[int, ...]  # the two highest scores at step t, highest first
    top_later: float  # mean share of the later rows on those positions
    top_vs_even: float  # ... as a multiple of an even share for two positions


def heavy_facts(trace: Trace, rep: Replay) -> HeavyFacts:
    """The numbers of :class:`HeavyFacts`, at the replay's first eviction (a recorded replay)."""
    t = first_eviction(rep)
    d = decision(rep, t)
    top = tuple(int(p) for p in d.positions[np.argsort(-d.scores, kind="stable")[:2]])
    later = range(t + 1, trace.steps)
    shares = np.array([trace.row(s)[list(top)].sum() for s in later])
    return HeavyFacts(
        steps=trace.steps,
        budget=rep.budget,
        window=d.window,
        t=t,
        n=len(d.positions),
        protected=(int(d.positions[-d.window]), int(d.positions[-1])),
        victim=d.victims[0][0],
        victim_score=d.victims[0][1],
        evictable=tuple(int(p) for p in d.positions[d.evictable]),
        top=top,
        top_later=float(shares.mean()),
        top_vs_even=float(np.mean(shares * np.asarray(later) / len(top))),
    )
