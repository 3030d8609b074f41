"""The sentences of "Where should the budget go?" that state a number, a ranking or who wins,
built from the numbers its figures and tables show (never typed in). No streamlit here: the
tests call them at every value of the page's budget control
(``tests/test_claims_chapters_7_10.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from app.real_model.claims import names
from h2o.alloc import ALLOCATORS, Allocation
from h2o.policies.snapkv import DEFAULT_WINDOW

#: What each allocation is called on the page: the allocators' own labels ("-style" where the
#: rule borrows a paper's split of the budget, not its whole method).
ALLOC_LABELS = {name: cls.label for name, cls in ALLOCATORS.items()}
#: A budget within this of uniform's perplexity neither beats it nor loses to it.
TIE = 1e-9


def heads_sentence(
    rest: np.ndarray, n_tokens: int, n_sinks: int, n_recent: int, text: str = "lighthouse.txt"
) -> str:
    """Section 1 under the share heatmaps: how many query heads look mostly outside sinks +
    window, which layers most and least, and how far apart the heads of one layer are."""
    rest = np.asarray(rest, dtype=np.float64)
    far = rest > 0.5
    by_layer = rest.mean(axis=1)
    hungry = sorted(int(i) for i in np.argsort(-by_layer, kind="stable")[:3])
    least = int(np.argmin(by_layer))
    spread = rest.max(axis=1) - rest.min(axis=1)
    wide = int(np.argmax(spread))
    return (
        f"One full-cache pass over {n_tokens:,} tokens of `{text}`. For every query head of every "
        f"layer, the share of its attention on the first {n_sinks} positions (the sinks), on the "
        f"{n_recent} before it (the recent window), and on everything else — the part only a "
        "policy that reads attention can keep. "
        f"**{int(far.sum())} of {far.size}** query heads send more than half of their attention "
        f"outside sinks + window; by layer the most in layers {names([str(i) for i in hungry])}, "
        f"the least in layer {least} ({by_layer[least]:.2f}). Heads of one layer differ too: in "
        f"layer {wide} one query head sends {rest[wide].max():.2f} outside, another "
        f"{rest[wide].min():.2f}, and a uniform budget gives them the same."
    )


def rule_notes(allocs: Mapping[str, Allocation], n_tokens: int) -> dict[str, str]:
    """Per allocation, the numbers of its grid at this budget that the rule's text states."""
    out = {}
    for name, a in allocs.items():
        b = np.asarray(a.budgets)
        if name == "pyramid":
            out[name] = (
                f"Here: {int(b[0].max())} slots per head in layer 0 down to {int(b[-1].max())} in "
                f"layer {b.shape[0] - 1}."
            )
        elif name == "duo" and a.kinds is not None:
            ret = np.asarray(a.kinds) == "retrieval"
            lo, hi = int(b[ret].min()), int(b[ret].max())
            out[name] = (
                f"Here: {int(ret.sum())} of {ret.size} KV heads are “retrieval” heads with "
                f"{lo if lo == hi else f'{lo}–{hi}'} slots each, not all {n_tokens:,} tokens of "
                f"the text; the others {int(b[~ret].max())}."
            )
        else:
            out[name] = ""
    return out


def verdict_lines(
    series: Sequence[tuple[str, Mapping[str, float | None]]], labels: Mapping[str, str]
) -> list[str]:
    """Per policy (label, allocation → perplexity; None = not run): the best allocation and
    which, if any, beat uniform — read from the bars."""
    lines = []
    for label, vals in series:
        got = {a: v for a, v in vals.items() if v is not None}
        if "uniform" not in got or len(got) < 2:
            continue
        low = min(got.values())
        best = [labels[a] for a, v in got.items() if v <= low + TIE]
        uni = got["uniform"]
        better = [labels[a] for a, v in got.items() if v < uni - TIE]
        tied = [labels[a] for a, v in got.items() if a != "uniform" and abs(v - uni) <= TIE]
        if better:
            verb = "beats" if len(better) == 1 else "beat"
            line = (
                f"**{label}**: lowest {names(best)} ({low:.2f}); {names(better)} {verb} uniform "
                f"({uni:.2f})."
            )
        else:
            line = f"**{label}**: nothing beats uniform ({uni:.2f}) on this model and text"
            if tied:
                line += f"; {names(tied)} {'ties' if len(tied) == 1 else 'tie'} it exactly"
            line += "."
        lines.append(line)
    return lines


def answers_sentence(
    budget: int, right: Mapping[str, Sequence[str]], policies: Sequence[str], query_aware: str
) -> str:
    """Who still answers the brass-owl question at ``budget`` (policy label → the allocation
    labels under which it answers; ``policies``: every policy label in the table), and, when
    only ``query_aware`` (SnapKV's label) does, why."""
    said = [f"**{who}** under {names(list(allocs))}" for who, allocs in right.items() if allocs]
    never = [p for p in policies if not right.get(p)]
    who = "; ".join(said) or "no policy under any allocation"
    text = f"Still answering at {budget} slots per head: {who}"
    if said and never:
        text += f"; {names([f'**{p}**' for p in never])} under none"
    text += "."
    if [w for w, a in right.items() if a] == [query_aware]:
        text += (
            f" {query_aware} scores the prompt by the attention of its last {DEFAULT_WINDOW} "
            "queries — the question itself — so it can keep what the question asks for; the "
            "others decided while reading, before the question came."
        )
    return text
