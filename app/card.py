"""Passages of the H2O policy card, quoted by the pages and the lesson.

The card is the project's one-page specification of H2O, written from the paper (Zhang et al.,
NeurIPS 2023); the library implements its rules. A copy ships in
``docs/reference/h2o-policy-card.txt`` (the docs are not installed with the package), so the
passages are quoted here rather than read at run time. ``WHEN`` and ``WHEN_NOT`` are the card's
own lists, in its order. No streamlit here; ``tests/test_claims_card.py`` checks the cost
passages against the card's text.
"""

from __future__ import annotations

#: The paper the card is written from.
PAPER = (
    "Zhang et al., H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language "
    "Models, NeurIPS 2023"
)
PAPER_URL = "https://arxiv.org/abs/2306.14048"
#: What "the card" is, said once where the lesson first names it (chapter 2): students would
#: otherwise credit the paper with the card's sentences.
CARD_INTRO = (
    "the **H2O policy card**, a one-page specification of H2O written for this project from the "
    "paper that introduced it (Zhang et al., NeurIPS 2023), whose rules this library implements"
)
#: Under the quotes on How it works: whose sentences they are, and the card's own source.
CARD_CAPTION = (
    "Quotes from the H2O policy card, the project's specification, which is based on "
    f"{PAPER}, {PAPER_URL}"
)

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
#: The card's cost passages ("When not to use it", "Complexity"), quoted whole.
CARD_COST = (
    "The per-step cost is O(kept), against O(1) for streaming-llm, and it needs a float64 score "
    "per position, 8 bytes each against that policy's zero."
)
CARD_COMPLEXITY = (
    "This is the first policy in the domain whose per-step cost grows with the cache. "
    "streaming-llm is O(1) per step regardless of budget."
)
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


def cost_sentence(score_bytes: int, per_slot: int) -> str:
    """How it works' sentence on what H2O's state costs against StreamingLLM's: the library's
    own sizes (``score_bytes`` of the ``per_slot`` bytes a slot are the score), then the card's
    two cost passages, each a whole quoted sentence."""
    return (
        f"Of H2O's {per_slot} bytes a slot, {score_bytes} are its score; StreamingLLM keeps no "
        f"score at all. The card, on H2O: *{CARD_COST}* *{CARD_COMPLEXITY}*"
    )
