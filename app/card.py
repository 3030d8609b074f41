"""Passages of the H2O policy card, quoted by the pages and the lesson.

The card lives outside the repository (``../shared/h2o-policy-card.txt`` in the project's
workspace), so the passages are quoted here rather than read at run time. ``WHEN`` and
``WHEN_NOT`` are the card's own lists, in its order.
"""

from __future__ import annotations

CARD_SUMMARY = (
    "Keep the tokens that have received the most attention so far, plus a window of recent "
    "ones. [...] sum each position's attention over time, and evict the smallest sum."
)
CARD_PSEUDOCODE = """\
on_decode_step(pos, attn):
    for i, weight in enumerate(attn):      # attn is index-aligned with kept
        score[i] += weight                 # float64
    admit(pos, score = 0)

evict(budget):
    evictable = kept[: len(kept) - recentWindow]
    drop the `len(kept) - budget` lowest-scoring of those"""
CARD_NOTES = [
    "Three parallel arrays indexed by kept order, which is the order the attention arrives in, "
    "so no lookup is ever needed on the decode path.",
    "Eviction is repeated argmin rather than a sort, because in steady state exactly one "
    "position goes per step and that makes it a single linear scan.",
    "The recent window is load-bearing, not a refinement. A token generated this step has "
    "accumulated nothing, so without protection it would be the first thing evicted every time.",
    "Scores accumulate in float64 while the weights arrive as float32.",
    "Tie-breaking. Equal scores evict the lower position.",
]
WHEN = [
    "When old tokens carry real information. A fact stated once in the middle of a long "
    "document, a system prompt, a retrieved passage.",
    "When you can see per-step attention weights and can afford one pass over the kept set per "
    "step.",
    "When quality matters more than simplicity.",
    "As the attention-aware default.",
]
WHEN_NOT = [
    "Without checking recentWindow against your model's local attention span. This is the one "
    "configuration mistake that matters.",
    "When attention weights are unavailable or expensive. The per-step cost is O(kept), against "
    "O(1) for streaming-llm.",
    "When a stale early spike would be actively harmful. A cumulative sum never forgets.",
    "When simplicity is worth more than a few points. StreamingLLM is a ring buffer with four "
    "pinned slots and no arithmetic at all.",
]
