"""The age bias of a cumulative sum, taken apart on a replay: who is evicted, why, what it costs.

H2O's score is every weight a position has received so far, so an old position carries a head
start a young one cannot have. On the stale-spike trace that, not the slot the spike holds, is
what H2O pays for: a steady position is evicted two steps after its birth because older
positions, whose sums were collected when rows were short, outscore it. Each function here is a
number or a table computed from a recorded replay and its trace, for the lesson to state:

* :func:`costliest_eviction` — the eviction that lost the most later attention, the scores it
  lost against (and how much of each was summed before the victim existed), and what it cost;
* :func:`leader_steps` — the steps at which a position held the highest score;
* :func:`tie_at` — an eviction decided by a tie, and which positions tied;
* :func:`shares` — the share of each row some positions take, against a fair share;
* :func:`holds_at_end` — whether a replay still keeps a position at its last step.

The sentence builders (``*_sentence``) return plain text (no markup) from these results, and
from the numbers of chapter 4's figures: with no window the newcomer, admitted with score 0, is
always the victim (:func:`freeze_sentence`); with a window narrower than the trace's recency band
the youngest band positions are (:func:`knee_sentence`, :func:`window_tie_sentence`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .explain import column, decision
from .replay import Replay
from .trace import Trace


# -- who is evicted, why, what it costs ------------------------------------------------------------
@dataclass(frozen=True)
class Rival:
    """An evictable position that outscored the victim at its eviction."""

    position: int
    score: float  # at the eviction step
    head_start: float  # its score at the step the victim was admitted (with 0)

    def gained(self) -> float:
        """What it added while the victim was alive."""
        return self.score - self.head_start


@dataclass(frozen=True)
class Costliest:
    """The eviction of a replay that lost the most attention afterwards (see the module doc)."""

    position: int
    evicted_at: int
    score: float  # at its eviction
    rivals: tuple[Rival, ...]  # in kept (arrival) order
    lost: float  # attention the trace gave it after its eviction, summed over steps
    other_max: float  # the largest such loss of any other eviction
    total: float  # every eviction's loss: the attention mass the replay missed over the run
    received: np.ndarray  # attention it received per step (explain.column)

    @property
    def age(self) -> int:
        """Rows it was scored on before it went (position p is admitted at step p)."""
        return self.evicted_at - self.position

    @property
    def rate(self) -> float:
        """Its score per row of its life (nan if it went the step it was admitted)."""
        return self.score / self.age if self.age else float("nan")

    def head_start_rivals(self) -> tuple[Rival, ...]:
        """Rivals that gained less than the victim during its life: they won on the sum they
        already held when it was born, not on what they earn now."""
        return tuple(r for r in self.rivals if r.gained() < self.score)


def losses(rep: Replay, trace: Trace) -> np.ndarray:
    """Per eviction (in the replay's victim order), the attention the trace gave the victim at
    every step after its eviction, summed."""
    out = np.zeros(len(rep.victim_pos))
    for i, (t, p) in enumerate(zip(rep.victim_step.tolist(), rep.victim_pos.tolist(), strict=True)):
        out[i] = column(trace, p)[t + 1 :].sum()
    return out


def costliest_eviction(rep: Replay, trace: Trace) -> Costliest:
    """The replay's most expensive eviction (the first of equal ones) and why it happened."""
    lost = losses(rep, trace)
    if not lost.size:
        raise ValueError("the replay evicted nothing")
    i = int(lost.argmax())
    t, p = int(rep.victim_step[i]), int(rep.victim_pos[i])
    d = decision(rep, t)
    ev_pos, ev_score = d.positions[d.evictable], d.scores[d.evictable]
    score = float(ev_score[ev_pos == p][0])
    born_pos, born_score = rep.kept_at(p)  # the step p was admitted
    rivals = tuple(
        Rival(int(q), float(s), float(born_score[born_pos == q][0]))
        for q, s in zip(ev_pos.tolist(), ev_score.tolist(), strict=True)
        if q != p and s > score
    )
    others = np.delete(lost, i)
    return Costliest(
        position=p,
        evicted_at=t,
        score=score,
        rivals=rivals,
        lost=float(lost[i]),
        other_max=float(others.max()) if others.size else 0.0,
        total=float(lost.sum()),
        received=column(trace, p),
    )


def holds_at_end(rep: Replay, position: int) -> bool:
    """Whether the replay's cache still holds ``position`` at its last step."""
    return bool(np.isin(position, rep.kept_at(rep.steps - 1)[0]))


def score_history(rep: Replay, position: int) -> np.ndarray:
    """``position``'s score at every step of the replay, nan where it is not kept."""
    out = np.full(rep.steps, np.nan)
    for t in range(rep.steps):
        pos, scores = rep.kept_at(t)
        hit = pos == position
        if hit.any():
            out[t] = scores[hit][0]
    return out


def leader_steps(rep: Replay, position: int) -> np.ndarray:
    """The steps at which ``position`` holds the highest score of two or more kept positions
    (the lower position on equal scores, as the argmax finds it)."""
    out = []
    for t in range(rep.steps):
        pos, scores = rep.kept_at(t)
        if len(pos) > 1 and int(pos[int(np.argmax(scores))]) == position:
            out.append(t)
    return np.asarray(out, dtype=np.int64)


def top_scores(rep: Replay, t: int, n: int) -> list[tuple[int, float]]:
    """The ``n`` highest (position, score) pairs kept at step ``t``, highest first."""
    pos, scores = rep.kept_at(t)
    order = np.argsort(-scores, kind="stable")[:n]
    return [(int(pos[i]), float(scores[i])) for i in order]


@dataclass(frozen=True)
class Tie:
    """The first eviction of ``victim``: the fewest score among the evictable, who shared it
    there, and who shared it inside the protected window (safe whatever their score)."""

    step: int
    victim: int
    score: float
    tied: tuple[int, ...]  # evictable positions at the lowest score, the victim among them
    protected_tied: tuple[int, ...]


def tie_at(rep: Replay, victim: int) -> Tie:
    hits = np.flatnonzero(rep.victim_pos == victim)
    if not hits.size:
        raise ValueError(f"the replay never evicts position {victim}")
    t = int(rep.victim_step[hits[0]])
    d = decision(rep, t)
    ev = d.evictable
    low = float(d.scores[ev].min())
    tied = tuple(int(q) for q in d.positions[ev][d.scores[ev] == low])
    prot = slice(len(d.positions) - d.window, len(d.positions))
    protected_tied = tuple(int(q) for q in d.positions[prot][d.scores[prot] == low])
    return Tie(t, victim, low, tied, protected_tied)


@dataclass(frozen=True)
class Shares:
    """Mean share of each row that ``positions`` take, from the row after each is born; and of
    all of them together over the rows where all exist."""

    positions: tuple[int, ...]
    each: tuple[float, ...]
    together: float


def shares(trace: Trace, positions: Sequence[int]) -> Shares:
    each = tuple(float(column(trace, p)[p + 1 :].mean()) for p in positions)
    start = max(positions) + 1
    cols = np.stack([column(trace, p)[start:] for p in positions])
    return Shares(tuple(positions), each, float(cols.sum(axis=0).mean()))


# -- sentences (plain text) ------------------------------------------------------------------------
def _listing(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def who_sentence(c: Costliest) -> str:
    return (
        f"Who: position {c.position}, evicted at step {c.evicted_at}, "
        f"{_plural(c.age, 'step')} after it was born."
    )


def why_sentence(c: Costliest, score_label: str = "cumulative attention") -> str:
    rate = f" ({c.rate:.2f} a step)" if c.age else ""
    head = f"Why: its {score_label}, {c.score:.3f}{rate}, is the lowest evictable score."
    if not c.rivals:
        return head
    said = _listing([f"{r.position} ({r.score:.3f})" for r in c.rivals])
    text = f"{head} Positions {said} outscore it"
    ahead = c.head_start_rivals()
    if ahead:
        who = "each" if len(ahead) == len(c.rivals) else _listing([str(r.position) for r in ahead])
        gains = _listing([f"{r.gained():.3f}" for r in ahead])
        text += (
            f", though {who} gained less than it did in its {_plural(c.age, 'step')} ({gains} "
            f"against {c.score:.3f}): they win on sums collected before it was born"
        )
    return text + "."


def cost_sentence(c: Costliest) -> str:
    return (
        f"What it costs: the trace goes on attending to position {c.position} after step "
        f"{c.evicted_at}: {c.lost:.1f} steps' worth of attention (a sum of shares, one per "
        f"step) lost, of the {c.total:.1f} the replay loses over the run; no other eviction "
        f"costs more than {c.other_max:.2f}."
    )


def rescue_sentence(
    c: Costliest, window: int, wider: int, kept: bool, mass: float, other: str, other_mass: float
) -> str:
    """What one replay with a wider window (``wider``) does with the same victim."""
    if kept:
        return (
            f"Give it time to earn a score — recent_window {wider} instead of {window} — and "
            f"position {c.position} outscores an older position before its protection ends: "
            f"H2O keeps it to the end and retains {mass:.3f} of the attention mass "
            f"({other}: {other_mass:.3f})."
        )
    return (
        f"With recent_window {wider} instead of {window}, position {c.position} is still "
        f"evicted (H2O retains {mass:.3f}, {other} {other_mass:.3f})."
    )


def leader_sentence(rep: Replay, position: int, n_top: int = 2) -> str:
    """When ``position`` held the highest score, and who leads at the end."""
    steps = leader_steps(rep, position)
    last = rep.steps - 1
    top = top_scores(rep, last, n_top + 1)
    leaders = [(q, s) for q, s in top if q != position][:n_top]
    end = _listing([f"{q} ({s:.1f})" for q, s in leaders])
    pos, scores = rep.kept_at(last)
    own = scores[pos == position]
    own_text = f" against its {float(own[0]):.2f}" if own.size else ""
    if not steps.size:
        return (
            f"Position {position} never holds the highest score; at the end positions {end} lead."
        )
    first, final = int(steps[0]), int(steps[-1])
    contiguous = steps.size == final - first + 1
    when = (
        f"from step {first} to step {final}"
        if contiguous and final > first
        else f"at {_plural(int(steps.size), 'step')}, the last of them step {final}"
    )
    at_final = float(rep.kept_at(final)[1][rep.kept_at(final)[0] == position][0])
    return (
        f"Position {position}'s score is the highest of any kept position {when} "
        f"({at_final:.3f} then); at the last step, {last}, positions {end} lead{own_text}."
    )


def tie_sentence(tie: Tie, score_label: str) -> str:
    n = len(tie.tied)
    if n == 1:
        return (
            f"At step {tie.step}, position {tie.victim} alone has the fewest {score_label} among "
            f"the evictable ({tie.score:g}): it goes."
        )
    also = ""
    if tie.protected_tied:
        also = (
            f" ({_listing([str(q) for q in tie.protected_tied])} "
            f"{'has' if len(tie.protected_tied) == 1 else 'have'} {tie.score:g} too, but "
            "inside the protected window)"
        )
    return (
        f"At step {tie.step}, positions {_listing([str(q) for q in tie.tied])} tie at "
        f"{tie.score:g} — the fewest {score_label} among the evictable{also}: the card's rule, "
        f"equal scores evict the lower position, sends {tie.victim}."
    )


def shares_sentence(s: Shares, budget: int) -> str:
    each = _listing([f"{p}: {v:.2f}" for p, v in zip(s.positions, s.each, strict=True)])
    fair = 1 / budget
    above = sum(v > fair for v in s.each)
    verdict = (
        "each above"
        if above == len(s.each)
        else "none above"
        if not above
        else f"{above} of {len(s.each)} above"
    )
    return (
        f"Positions {_listing([str(p) for p in s.positions])} take a steady share of every row "
        f"from their birth on ({each} on average), {s.together:.2f} together once all exist: "
        f"{verdict} the fair share of a budget-{budget} cache, 1/{budget} = {fair:.3f}."
    )


def slots_sentence(share: float, only_a: float, only_b: float, label_a: str, label_b: str) -> str:
    """How far two replays' caches differ: ``share``, the mean fraction of slots both hold
    (``app.sweeps.shared_slots``), and the mass on the positions only ``label_a`` or only
    ``label_b`` keeps."""
    mass = (
        f"holding ≈ {only_a:.3f} of the mass either way"
        if f"{only_a:.3f}" == f"{only_b:.3f}"
        else f"the positions only {label_a} keeps holding {only_a:.3f} of the mass, those only "
        f"{label_b} keeps {only_b:.3f}"
    )
    return (
        f"The caches disagree on {1 - share:.0%} of their slots (positions one keeps and the "
        f"other does not), {mass}."
    )


# -- the window: the newcomer's freeze and the band (chapter 4) ---------------------------------
def freeze_sentence(share: float, final_kept: np.ndarray, budget: int) -> str:
    """How often the newcomer is the victim with no window, and where the cache ends up."""
    held, newcomer = final_kept[:-1], int(final_kept[-1])
    text = f"At {share:.0%} of the steps that evict, the victim is the position just admitted"
    if np.array_equal(held, np.arange(budget)):
        return (
            f"{text}: at the last step the cache holds positions 0–{budget - 1} and the newcomer "
            f"{newcomer}. It filled once, then never moved."
        )
    return f"{text}; at the last step it holds positions {int(held[0])}–{int(held[-1])}."


def knee_sentence(
    windows: Sequence[int],
    mass: Sequence[float],
    band: int,
    share: float,
    default: int,
    synthetic: bool,
) -> str:
    """Where H2O's mass stops rising with the window, and why: the band, and the age bias."""
    top = max(mass)
    knee = next(w for w, m in zip(windows, mass, strict=True) if m >= top - 0.001)
    unprotected = (
        f" At recent_window {default}, positions {default + 1}–{band} steps old are "
        "unprotected: the youngest evictable positions, they have had the least time to sum "
        "attention, so they hold the lowest scores and go first, against sinks and heavy "
        "hitters that have been summing for hundreds of steps."
        if default < knee <= band
        else ""
    )
    made = (
        f" — by construction: it is synthetic, with a recency band that ends at {band}"
        if synthetic
        else ""
    )
    return (
        f"The trace puts {share:.2f} of its attention on its last {band} positions{made}. "
        f"H2O's mass rises with the window up to {knee} "
        f"({mass[list(windows).index(knee)]:.3f}) and no further.{unprotected}"
    )


def youngest_sentence(rep: Replay, t: int) -> str:
    """Whether the victim of step ``t`` was the youngest evictable position."""
    d = decision(rep, t)
    evictable = d.positions[d.evictable]
    victim = d.victims[0][0]
    youngest = int(evictable.max())
    if victim == youngest:
        return f"the victim at step {t}, position {victim}, was the youngest evictable position"
    return (
        f"the victim at step {t}, position {victim}, was not the youngest evictable position "
        f"({youngest})"
    )


def window_tie_sentence(
    windows: Sequence[int], a: Sequence[float], b: Sequence[float], default: int
) -> str:
    """From which window on H2O (``a``) and Scissorhands (``b``) stay within a hundredth, and
    what they keep at the ``default`` window."""
    close = [abs(x - y) < 0.01 for x, y in zip(a, b, strict=True)]
    start = next((i for i in range(len(close)) if all(close[i:])), None)
    d = list(windows).index(default)
    at_default = (
        f"at {default}, the library's default, H2O keeps {a[d]:.3f} and Scissorhands {b[d]:.3f}"
    )
    if start is None:
        return f"H2O and Scissorhands never settle within a hundredth here; {at_default}."
    w = windows[start]
    return (
        f"H2O and Scissorhands are within a hundredth of each other from recent_window {w} on "
        f"({a[start]:.4f} and {b[start]:.4f} there); {at_default}."
    )


# -- Scissorhands' vote, step by step --------------------------------------------------------------
@dataclass(frozen=True)
class Vote:
    """What one step gave a position under Scissorhands (read off a recorded replay)."""

    step: int
    #: The weight the policy saw: the row over the positions kept before the step admits its own
    #: token, renormalised over them (as the replay feeds it).
    weight: float
    n: int  # how many positions that weight was shared among: the fair share is 1/n
    votes: float  # what the step added to the position's score (the replay's own count)


def votes_at(rep: Replay, trace: Trace, position: int, steps: Sequence[int]) -> list[Vote]:
    """The vote ``position`` got at each of ``steps`` in a recorded Scissorhands replay of
    ``trace``; each step must come after the position's admission, while it is kept."""
    if rep.policy != "scissorhands":
        raise ValueError(f"votes are Scissorhands' score; this replay is of {rep.policy!r}")
    out = []
    for t in steps:
        t = int(t)
        if not position < t < rep.steps:
            raise ValueError(
                f"step {t} is not after position {position}'s admission within the replay's "
                f"{rep.steps} steps"
            )
        pos, scores = rep.kept_at(t)
        prev_pos, prev_scores = rep.kept_at(t - 1)
        if position not in pos or position not in prev_pos:
            raise ValueError(f"position {position} is not kept at step {t}")
        seen = pos[pos < t]  # kept when step t's attention arrives (t is admitted after it)
        row = np.asarray(trace.row(t), dtype=np.float64)
        weight = float(row[position] / row[seen].sum())
        gained = float(scores[pos == position][0] - prev_scores[prev_pos == position][0])
        out.append(Vote(t, weight, int(seen.size), gained))
    return out


def _weight(w: float, fair: float) -> str:
    """``w`` with the fewest decimals (two or more) that tell it from ``fair``, so a sentence
    never reads "0.50 > 1/2"; equal values stay at two."""
    digits = 2
    while w != fair and f"{w:.{digits}f}" == f"{fair:.{digits}f}" and digits < 8:
        digits += 1
    return f"{w:.{digits}f}"


def vote_rule_sentence(rep: Replay, trace: Trace, position: int, steps: Sequence[int]) -> str:
    """Scissorhands' vote rule (``h2o/policies/scissorhands.py``: a vote when a weight is
    strictly greater than ``1 / len(attn)``), and what it gave ``position`` at ``steps``: the
    count a reader would make by hand, one vote a step, is not the rule's."""
    votes = votes_at(rep, trace, position, steps)
    said = []
    for v in votes:
        w = _weight(v.weight, 1 / v.n)
        if v.votes:
            said.append(f"at step {v.step}, {w} > 1/{v.n}: {_plural(int(v.votes), 'vote')}")
        elif v.n == 1:
            said.append(
                f"at step {v.step} it is the only kept position, and its weight, {w}, is not "
                "more than 1/1: no vote"
            )
        else:
            said.append(f"at step {v.step}, {w} is not more than 1/{v.n}: no vote")
    total = int(sum(v.votes for v in votes))
    which = f"{'step' if len(votes) == 1 else 'steps'} {_listing([str(v.step) for v in votes])}"
    not_per_step = ", not one a step" if total != len(votes) else ""
    return (
        "Scissorhands' vote: at each step, a kept position gets one vote if its weight is "
        "strictly more than the fair share 1/n, n being the positions that step's attention is "
        "shared among (those kept before the step admits its own token). "
        f"So position {position} gets {_plural(total, 'vote')} from {which}{not_per_step}: "
        f"{'; '.join(said)}."
    )
