"""The sentences about the real model that state a number, a ranking or who answers right:
chapter 7 of the lesson, chapter 8's link to it, and the Real model page's answer check and layer
story.

Each is built from the numbers the figure or table beside it shows, never typed in, so it stays
true when a setting or a recomputed row changes them. No streamlit here: the tests call these at
every setting (``tests/test_claims_chapters_7_10.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from h2o.model.generate import label_policy

#: H2O beats StreamingLLM on a layer when it retains this much more attention mass.
MARGIN = 0.05
#: Where the story's one statement of the answer ("brass owl") starts in the prompt's tokens
#: (SmolLM2's tokenizer on ``traces/texts/lighthouse.txt``): tokenizing needs the model file,
#: so the lesson shows this number and a model test checks it against the tokenizer.
FACT_TOKEN = 117
_MARKUP = re.compile(r"([\\`*_\[\]#!<>|~$])")


def esc(text: str) -> str:
    """Model output for markdown: every markup character escaped, on one line."""
    return _MARKUP.sub(r"\\\1", text).replace("\n", " ")


def answer_key(text: str) -> str:
    """The gist of an answer: up to its first punctuation or line break (' brass owl.' →
    'brass owl')."""
    return re.split(r"[.,;:!?\n]", text.strip(), maxsplit=1)[0].strip()


def is_right(expected: str, text: str) -> bool:
    """An answer is right when it contains the full cache's answer (case ignored)."""
    return bool(expected) and expected.lower() in text.lower()


def names(items: Sequence[str], conj: str = "and") -> str:
    """``["a", "b", "c"]`` → ``"a, b and c"``."""
    items = list(items)
    last = f" {conj} " if len(items) > 1 else ""
    return ", ".join(items[:-1]) + last + (items[-1] if items else "")


def stated(story: str, expected: str) -> str:
    """How often ``story`` states ``expected``: "once", "twice", "3 times" ("never")."""
    count = story.lower().count(expected.lower()) if expected else 0
    return {0: "never", 1: "once", 2: "twice"}.get(count, f"{count} times")


# -- chapter 7: the answers table ------------------------------------------------------------------
@dataclass(frozen=True)
class Graded:
    """One budget's row of the answers table, graded against that row's full-cache answer."""

    budget: int
    expected: str  # the full cache's answer gist ("" when the row has no full-cache run)
    prompt_tokens: int | None
    answers: dict[str, str]  # policy name → its generated text
    right: dict[str, bool]


def grade(runs: Mapping[int, Sequence[Mapping]]) -> list[Graded]:
    """``generate --json`` outputs per budget (labels ``"full cache"`` and ``"h2o@256"``) →
    one :class:`Graded` per budget, in budget order."""
    out = []
    for budget in sorted(runs):
        full, answers, n = "", {}, None
        for r in runs[budget]:
            label, text = str(r.get("label", "")), str(r.get("text", ""))
            n = n if r.get("prompt_tokens") is None else int(r["prompt_tokens"])
            if label == "full cache":
                full = text
            else:
                answers[label_policy(label) or label] = text
        expected = answer_key(full)
        right = {p: is_right(expected, t) for p, t in answers.items()}
        out.append(Graded(budget, expected, n, answers, right))
    return out


def prompt_tokens(graded: Sequence[Graded]) -> int | None:
    """The prompt's length in tokens, from any row that records it."""
    return next((g.prompt_tokens for g in graded if g.prompt_tokens), None)


def _budget_list(budgets: Sequence[int], n: int | None) -> str:
    """``"256 and 512 (12% and 24% of the prompt)"``: budgets and their share of the prompt."""
    said = names([f"{b:,}" for b in budgets])
    return said + (f" ({names([f'{b / n:.0%}' for b in budgets])} of the prompt)" if n else "")


def _runs_of(items: Sequence[tuple[int, object]]) -> list[tuple[list[int], object]]:
    """Consecutive items with an equal value grouped: ``[(budgets, value), …]``."""
    out: list[tuple[list[int], object]] = []
    for b, v in items:
        if out and out[-1][1] == v:
            out[-1][0].append(b)
        else:
            out.append(([b], v))
    return out


def answers_sentence(
    graded: Sequence[Graded], labels: Mapping[str, str], story: str, subject: str = "h2o"
) -> str:
    """Who answers right at which budget (and what share of the prompt each budget is), what
    ``subject`` says where it is wrong, and where the fact sits in ``story`` (the prompt)."""
    if not graded:
        return ""
    n = prompt_tokens(graded)
    expected = list(dict.fromkeys(g.expected for g in graded if g.expected))
    if not expected:
        return "No row has a full-cache answer to compare with."
    times = stated(story, expected[0])
    where = f", from token {FACT_TOKEN:,} of {n:,}" if n and times != "never" else ""
    times = f", stated {times} in the story" if times != "never" else ""
    out = [f"With the full cache the model answers “{esc(' / '.join(expected))}”{times}{where}."]
    for budgets, right in _runs_of(
        [(g.budget, tuple(p for p, ok in g.right.items() if ok)) for g in graded]
    ):
        word = "budget" if len(budgets) == 1 else "budgets"
        at = f"At {word} {_budget_list(budgets, n)}"
        all_policies = set(next(g for g in graded if g.budget == budgets[0]).right)
        if not right:
            out.append(f"{at} no policy answers it.")
        elif set(right) == all_policies:
            out.append(f"{at} every policy answers it.")
        else:
            who = names([labels.get(p, p) for p in right])
            out.append(f"{at} only {who} answer{'s' if len(right) == 1 else ''} it.")
    wrong = [
        (g.budget, answer_key(g.answers[subject]))
        for g in graded
        if subject in g.answers and not g.right[subject]
    ]
    if wrong:
        said = [f"“{esc(text)}” at {names([f'{b:,}' for b in bs])}" for bs, text in _runs_of(wrong)]
        out.append(f"Where it does not, {labels.get(subject, subject)} says {names(said)}.")
    return " ".join(out)


def recall_note(graded: Sequence[Graded], label: str, subject: str = "h2o") -> str:
    """Chapter 8's note on "a fact stated once": where chapter 7 shows ``subject`` recalling it."""
    n = prompt_tokens(graded)
    rows = [g for g in graded if subject in g.right]
    good = [g.budget for g in rows if g.right[subject]]
    bad = [g.budget for g in rows if not g.right[subject]]
    if not rows:
        return f"chapter 7 has no {label} answers to show"
    if not good:
        return f"on the real model {label} did not recall the fact at any budget shown"
    if not bad:
        return f"on the real model {label} recalls the fact at every budget shown"
    return (
        f"on the real model {label} recalls the fact only at budget "
        f"{_budget_list(good, n)}, not at {names([f'{b:,}' for b in bad], 'or')}"
    )


def parting_sentence(
    graded: Sequence[Graded], group: Sequence[str], labels: Mapping[str, str]
) -> str:
    """Whether the question separates the policies of ``group`` (close on perplexity), and at
    which budgets."""
    parts = []
    for g in graded:
        mine = [p for p in group if p in g.right]
        yes = [p for p in mine if g.right[p]]
        if yes and len(yes) < len(mine):
            no = [p for p in mine if not g.right[p]]
            parts.append((g.budget, yes, no))
    lab = lambda ps: names([labels.get(p, p) for p in ps])  # noqa: E731
    if parts:
        said = "; ".join(
            f"at {b:,} {lab(yes)} answer{'s' if len(yes) == 1 else ''} it, {lab(no)} not"
            for b, yes, no in parts
        )
        agree = [g for g in graded if g.budget not in {b for b, _, _ in parts}]
        tail = ""
        for bs, ok in _runs_of([(g.budget, any(g.right.get(p) for p in group)) for g in agree]):
            tail += f"; at {names([f'{b:,}' for b in bs])} {'all' if ok else 'none'} of them do"
        return f"The brass-owl question depends on one old fact, and there they part: {said}{tail}."
    if any(g.right.get(p) for g in graded for p in group):
        return "The brass-owl question does not separate them either: where one answers it, all do."
    return (
        "The brass-owl question does not separate them either: none of them answers it at any "
        "budget shown, so it separates them from the full cache, not from each other."
    )


# -- chapter 7: the perplexity curves --------------------------------------------------------------
def perplexity_sentence(
    curves: Mapping[str, Mapping[int, float]],
    full: float,
    group: Sequence[str],
    labels: Mapping[str, str],
    what: str = "",
) -> str:
    """How close the ``group`` policies' perplexities are at each budget, against the full cache
    and against the policies outside the group."""
    budgets = sorted(set.intersection(*(set(curves[p]) for p in group)))
    others = [p for p in curves if p not in group]
    if not budgets:
        return ""
    lab = lambda ps: names([labels.get(p, p) for p in ps])  # noqa: E731
    spread = {
        b: max(curves[p][b] for p in group) - min(curves[p][b] for p in group) for b in budgets
    }
    best = {b: min(group, key=lambda p: curves[p][b]) for b in budgets}
    gap = {
        b: min(curves[o][b] for o in others if b in curves[o]) - max(curves[p][b] for p in group)
        for b in budgets
        if any(b in curves[o] for o in others)
    }
    lo, hi = budgets[0], budgets[-1]
    who = f"{what} ({lab(group)})" if what else lab(group)
    head = (
        f"On perplexity {who} are within {spread[lo]:.1f} of each other at budget "
        f"{lo} ({spread[lo] / full:.0%} of the full cache's {full:.2f}) and {spread[hi]:.2f} at "
        f"{hi} ({spread[hi] / full:.1%})"
    )
    if gap and all(gap[b] > spread[b] for b in gap):
        worst = min(gap.values())
        head += f"; {lab(others)} are at least {worst:.1f} worse than all of them at every budget"
    elif gap:
        near = [b for b in gap if gap[b] <= spread[b]]
        head += f"; at {names([str(b) for b in near])} {lab(others)} come within their spread"
    winners = _runs_of([(b, best[b]) for b in budgets])
    if len(winners) == 1:
        head += f". {labels.get(best[lo], best[lo])} is lowest at every budget."
    else:
        head += (
            ". The lowest changes with the budget: "
            + ", ".join(f"{labels.get(p, p)} at {names([str(b) for b in bs])}" for bs, p in winners)
            + "."
        )
    return head


# -- chapter 7: the two layers ---------------------------------------------------------------------
def layers_sentence(
    mass: Mapping[int, Mapping[str, float]],
    shares: Mapping[int, tuple[float, float, float]],
    n_sinks: int,
    n_recent: int,
    labels: Mapping[str, str],
) -> str:
    """Per layer: H2O's and StreamingLLM's retained mass (the bars), and where that layer's
    attention goes — ``shares``: (sinks, recent, the rest) with the ring's own ``n_sinks`` and
    ``n_recent`` — to say why."""
    out = []
    h, s = labels.get("h2o", "h2o"), labels.get("streaming-llm", "streaming-llm")
    ring = f"the {n_sinks} sinks and the last {n_recent} tokens"
    for layer in sorted(mass):
        hm, sm = mass[layer]["h2o"], mass[layer]["streaming-llm"]
        sink, recent, middle = shares[layer]
        nums = f"In layer {layer} {h} keeps {hm:.2f} of the attention mass and {s} {sm:.2f}"
        if hm - sm > MARGIN:
            out.append(
                f"{nums}: {middle:.2f} of its attention goes past {ring}, which is all {s}'s "
                "ring holds — H2O's case."
            )
        else:
            ahead = "ahead" if sm > hm else f"within {MARGIN}"
            out.append(
                f"{nums}: {sink + recent:.2f} of its attention is on {ring}, which {s}'s ring "
                f"holds — it is {ahead} with no arithmetic at all."
            )
    return " ".join(out)


# -- the Real model page, section 2: the layer story -----------------------------------------------
#: "Most of a layer's attention": more than half. The shares of the sinks, the recent tokens and
#: the middle sum to 1, so a layer's attention is mostly on the sinks and the recent tokens exactly
#: when its middle share is below this.
MOSTLY = 0.5


def fmt_layers(layers: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` → ``"3–5, 9"``."""
    out: list[tuple[int, int]] = []
    for x in sorted(layers):
        if out and out[-1][1] == x - 1:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in out) or "none"


@dataclass(frozen=True)
class LayerStory:
    """The layers of the story, grouped by what the two charts show of them.

    ``wins``: H2O keeps more than ``margin`` above StreamingLLM. The others split by their middle
    share: ``sinks_recent`` put less on the middle than the mean over the layers and less than
    :data:`MOSTLY` (so most of their attention is on the sinks and the recent tokens);
    ``middle_heavy`` do not, and StreamingLLM still keeps as much or more there.
    """

    wins: list[int]
    sinks_recent: list[int]
    middle_heavy: list[int]
    #: A layer's middle share must be below this to be said to attend mostly to the sinks and the
    #: recent tokens: the mean middle share, or :data:`MOSTLY` if that is lower. Below the mean
    #: alone could still be half or more of a layer's attention (a text every layer reads back
    #: through); below ``MOSTLY`` alone would file a layer that puts nearly half on the middle,
    #: far above the typical layer, with those whose middle hardly matters.
    threshold: float
    mean_middle: float


def layer_story(
    h2o_mass: Sequence[float],
    sl_mass: Sequence[float],
    middle: Sequence[float],
    margin: float = MARGIN,
) -> LayerStory:
    """Group the layers (index = layer) by H2O's lead in retained mass over StreamingLLM and by
    the share of their attention on the middle."""
    h, s, m = (np.asarray(a, dtype=np.float64) for a in (h2o_mass, sl_mass, middle))
    if not h.size or h.shape != s.shape or h.shape != m.shape or h.ndim != 1:
        raise ValueError(
            f"need one value per layer in each array, got {h.shape}, {s.shape} and {m.shape}"
        )
    if not (np.isfinite(h).all() and np.isfinite(s).all() and np.isfinite(m).all()):
        raise ValueError("the layer story's arrays hold a NaN or an infinity")
    mean = float(m.mean())
    threshold = min(mean, MOSTLY)
    gap = h - s
    layers = range(h.size)
    return LayerStory(
        wins=[i for i in layers if gap[i] > margin],
        sinks_recent=[i for i in layers if gap[i] <= margin and m[i] < threshold],
        middle_heavy=[i for i in layers if gap[i] <= margin and m[i] >= threshold],
        threshold=threshold,
        mean_middle=mean,
    )


def layer_story_sentence(
    budget: int,
    h2o_mass: Sequence[float],
    sl_mass: Sequence[float],
    middle: Sequence[float],
    margin: float = MARGIN,
) -> str:
    """The text under the layer story's mass chart: where H2O keeps clearly more than
    StreamingLLM at ``budget`` (retained mass per layer, index = layer) and, for the other
    layers, what their share of attention on the middle says — the reason "the sinks and the
    recent tokens" only where the middle share is low (:class:`LayerStory`), the numbers
    where it is not."""
    g = layer_story(h2o_mass, sl_mass, middle, margin)
    h, s, m = (np.asarray(a, dtype=np.float64) for a in (h2o_mass, sl_mass, middle))
    n = h.size
    text = (
        f"At budget {budget}, H2O keeps clearly more (by more than {margin}) in "
        f"**{len(g.wins)} of {n} layers**: {fmt_layers(g.wins)}"
    )
    rest = g.sinks_recent + g.middle_heavy
    if g.wins:
        best = max(g.wins, key=lambda i: h[i] - s[i])
        text += (
            f" (largest gap: layer {best}, {h[best]:.2f} vs {s[best]:.2f}). "
            f"Those layers put {m[g.wins].mean():.2f} of their attention on the middle"
        )
        if rest:
            text += f", against {m[rest].mean():.2f} in the others"
    text += ". "
    if g.sinks_recent:
        low = g.sinks_recent
        text += (
            f"In {'layer' if len(low) == 1 else 'layers'} {fmt_layers(low)} StreamingLLM is within "
            f"{margin} of H2O or ahead, and the middle takes at most {m[low].max():.2f} of "
            f"{'its' if len(low) == 1 else 'their'} attention (the mean over the {n} layers is "
            f"{g.mean_middle:.2f}): most of it is on the sinks and the recent tokens, which its "
            "ring buffer keeps anyway. "
        )
    for i in g.middle_heavy:
        behind = "less of it" if h[i] < s[i] else f"at most {margin} more of it"
        text += (
            f"Layer {i} puts {m[i]:.2f} of its attention on the middle"
            + ("" if g.sinks_recent else f" (the mean over the {n} layers is {g.mean_middle:.2f})")
            + f", yet H2O retains {behind} than StreamingLLM ({h[i]:.2f} vs {s[i]:.2f}). "
        )
    return text.rstrip()
