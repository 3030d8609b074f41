"""Chapters 4–6: the window is load-bearing, the stale spike (the age bias of a cumulative sum),
the family.

Every sentence that states a number, a ranking or who wins is built by a small pure function
below (``*_sentence``, ``*_answer``, :func:`family_sentences`) from the numbers the figure beside
it plots; ``tests/test_claims_chapters_4_6.py`` checks each against the library's own replays.
The text before each chapter's first figure is kept to about three lines: presenter mode
projects it at 1280×720.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st

import h2o
from app import charts, controls, data, figures, pages, state, sweeps
from app.lesson import (
    Chapter,
    in_view,
    more,
    on_screen,
    open_in,
    predict,
    presented,
    projected,
    say,
)
from h2o import age_bias, analysis, explain

EXPLORER = pages.WINDOW_EXPLORER
#: Two policies "tie" when their mass differs by less than this (the card: "within a hundredth").
TIE = 0.01
#: Bars "coincide" when their mass differs by less than this (the chart labels show 3 decimals).
SAME = 0.0005
CANON_BUDGET = 256


def canonical_sweep(ref: data.TraceRef) -> tuple[list[int], dict[str, list[dict]]]:
    """Chapter 4's recent_window sweep (H2O, Scissorhands, StreamingLLM, sliding window) at
    budget 256, top-32, 4 sinks: computed once, shared with chapter 5."""
    windows = sweeps.sweep_windows_for(CANON_BUDGET, analysis.band_width(ref.trace))
    return windows, sweeps.window_sweep(ref.ident, ref.trace, CANON_BUDGET, 32, tuple(windows), 4)


def _listing(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# -- 4. the window is load-bearing: sentences ------------------------------------------------------
NEW_TOKEN = (
    "The convention matters here. This library admits a new token with score 0, as the card "
    "writes it (`admit(pos, score = 0)`), so with no window the newcomer holds the lowest score "
    "there can be: it goes at once unless an older position also sits at exactly 0 (a tie evicts "
    "the lower position). "
    "The H2O authors' reference code scores a new token with its own self-attention instead, so "
    "it starts above 0 and need not lose at once: the freeze above is this convention's. The "
    "traces here do not record a token's attention to itself, so the lesson cannot say by how "
    "much the other convention would change it."
)


def window_answer(h2o_mass: dict[int, float], reference: float, asked: Sequence[int]) -> str:
    """Which of the ``asked`` windows keep more mass than the reference (the question's options:
    ``"recent_window W"``, ``"both"`` or ``"neither"``)."""
    beat = [w for w in asked if h2o_mass[w] > reference]
    if len(beat) == len(asked):
        return "both"
    return f"recent_window {beat[0]}" if beat else "neither"


def window_why(h2o_mass: dict[int, float], reference: float, asked: Sequence[int]) -> str:
    at = _listing([f"{h2o_mass[w]:.3f} at recent_window {w}" for w in asked])
    return f"StreamingLLM keeps {reference:.3f} of the attention mass; H2O keeps {at}."


# -- 4. the window is load-bearing -----------------------------------------------------------------
def window() -> None:
    ref = data.load("canonical", {})
    trace = ref.trace
    budget, sinks, band = CANON_BUDGET, 4, analysis.band_width(trace)
    windows, result = canonical_sweep(ref)
    refs = {r["policy"]: r for r in result["refs"]}
    h2o_mass = [r["retained_mass"] for r in result["h2o"]]
    sc_mass = [r["retained_mass"] for r in result["scissorhands"]]
    by_w = dict(zip(windows, h2o_mass, strict=True))
    asked, streaming = (32, band), refs["streaming-llm"]["retained_mass"]
    toy = data.load("toy", {})
    fit = controls.defaults(toy.trace)
    with more():  # projected: the chapter opens on its question, the freeze under More
        _freeze(toy, fit)
    st.markdown("So the window is needed. How wide should it be?")
    if predict(
        "window",
        f"on the canonical trace at budget {budget}, which H2O keeps more attention mass than "
        "StreamingLLM?",
        [f"recent_window {asked[0]}", f"recent_window {asked[1]}", "both", "neither"],
        window_answer(by_w, streaming, asked),
        window_why(by_w, streaming, asked),
    ):
        chapter3 = data.recorded_replay(
            toy, h2o.H2O(fit[state.BUDGET], recent_window=fit[state.WINDOW]), fit["top_k"]
        )
        knee = age_bias.knee_sentence(
            windows,
            h2o_mass,
            band,
            analysis.band_share(trace, band),
            32,
            trace.meta.get("source") == "synthetic",
        )
        tie = age_bias.window_tie_sentence(windows, h2o_mass, sc_mass, 32)
        charts.show(
            figures.window_sweep(
                windows=windows,
                series=[("h2o", "H2O", h2o_mass), ("scissorhands", "Scissorhands", sc_mass)],
                refs=[
                    (p, refs[p]["label"], refs[p]["retained_mass"])
                    for p in ("streaming-llm", "sliding-window")
                ]
                + [("oracle", "oracle bound", result["h2o"][0]["oracle_mass"])],
                title=f"Retained attention mass vs recent_window — canonical, budget {budget}",
                ytitle="retained mass (mean over t ≥ budget)",
                band=band,
                height=on_screen(400, projected=330),
            ),
            key="lesson_sweep",
            describe=in_view([knee, tie]),
        )
        say(
            [
                knee
                + " This is the age bias of a cumulative sum — in chapter 3, "
                + age_bias.youngest_sentence(chapter3, explain.first_eviction(chapter3))
                + ": the window exists to give newcomers time to earn a score.",
                tie + " The library keeps 32 as its default, as the card does: *tune it to your "
                "model, not to this table*.",
            ]
        )
    open_in(
        "Open the recentWindow explorer",
        EXPLORER,
        {state.TRACE: "canonical", state.BUDGET: budget, state.WINDOW: 32, state.SINKS: sinks},
        key="lesson_open_4",
    )


def _freeze(toy: data.TraceRef, fit: dict[str, int]) -> None:
    """No window at all: chapter 3's toy trace and budget, recent_window 0."""
    small = fit[state.BUDGET]
    zero = data.recorded_replay(toy, h2o.H2O(small, recent_window=0), fit["top_k"])
    t = explain.first_eviction(zero)
    d = explain.decision(zero, t)
    st.markdown(
        "> *The recent window is load-bearing, not a refinement. A token generated this step has "
        "accumulated nothing, so without protection it would be the first thing evicted every "
        "time.* — the card\n\n"
        f"Chapter 3's toy trace and budget ({small}) with **recent_window 0**: H2O at step {t}, "
        "its first eviction."
    )
    final = zero.kept_at(toy.trace.steps - 1)[0]
    frozen = age_bias.freeze_sentence(explain.frozen_share(zero), final, small)
    charts.show(
        figures.decision_bars(
            positions=d.positions,
            scores=d.scores,
            window=d.window,
            victims=[p for p, _ in d.victims],
            score_label=zero.score_label,
            title=f"H2O, recent_window 0, step {t}: the newcomer (position {t}) has score "
            f"{float(d.scores[-1]):g}",
            height=300,
        ),
        key="lesson_freeze",
        describe=frozen,
    )
    st.markdown(frozen + "\n\n" + NEW_TOKEN)


# -- 5. the stale spike: sentences -----------------------------------------------------------------
def spike_answer(holds: dict[str, bool]) -> str:
    """Which policy still holds the spike at the end (``holds``: label → held)."""
    who = [name for name, held in holds.items() if held]
    return who[0] if len(who) == 1 else ("both" if who else "neither")


def spike_why(h2o_score: float | None, tie: age_bias.Tie | None) -> str:
    """The answer's reason: H2O's sum at the end (None: evicted), Scissorhands' eviction."""
    h = "H2O lets it go" if h2o_score is None else f"H2O's sum for it is {h2o_score:.2f} at the end"
    if tie is None:
        return f"{h}; Scissorhands keeps it."
    votes = f"{tie.score:g} vote{'' if tie.score == 1 else 's'}"
    return f"{h}; Scissorhands evicts it at step {tie.step}, on {votes}."


def spike_steps(spike: int) -> tuple[int, int]:
    """The spike's two big steps: the first two rows after its admission."""
    return spike + 1, spike + 2


def spike_row_sentence(trace: h2o.Trace, spike: int) -> str:
    col = explain.column(trace, spike)
    a, b = spike_steps(spike)
    return (
        f"Position {spike} takes {col[a]:.2f} of step {a} and {col[b]:.2f} of step {b}, then "
        f"{col[b + 1 :].mean():.3f} of each row on average."
    )


CARD_ON_SCISSORHANDS = (
    "> *A cumulative sum never forgets: a position that mattered enormously once defends its "
    "slot forever. scissorhands counts how often a position mattered instead, which decays "
    "that advantage.* — the H2O policy card"
)
#: What the card's "decays" stands for, in this library and in the paper (Liu et al., 2023).
SCISSORHANDS_SOURCES = (
    "The library's Scissorhands (`h2o/policies/scissorhands.py`) decays nothing: its score is "
    "a lifetime count, one vote for every step a position receives strictly more than its fair "
    "share (1/n, n the positions kept at that step), never taken back. What it changes is "
    "what one step can be worth — a single vote, however large the weight — so a spike's two "
    "steps earn at most two votes. The paper (Liu et al., 2023) counts the other way and "
    "within a limit: inside a *history window* of recent steps, how often a position's "
    "attention was *low*, and drops the positions low most often — there, old evidence does "
    "leave the window."
)


# -- 5. the stale spike ----------------------------------------------------------------------------
def stale_spike() -> None:
    ref = data.load("stale-spike", {})
    trace = ref.trace
    fit = controls.defaults(trace)
    budget, window, top_k = fit[state.BUDGET], fit[state.WINDOW], fit["top_k"]
    spike = int(trace.meta.get("spike", 0))
    steady = [int(p) for p in trace.meta.get("steady", [])]
    reps = {
        name: data.recorded_replay(
            ref, h2o.policies.make_policy(name, budget, recent_window=window), top_k
        )
        for name in ("h2o", "scissorhands")
    }
    st.markdown(
        "**Scissorhands** (Liu et al., 2023) gives a position a *vote* each step it receives "
        "more than its fair share of attention, and evicts the fewest votes. The stale-spike "
        f"trace has {trace.steps} steps. " + spike_row_sentence(trace, spike)
    )
    labels = {reps[n].label: age_bias.holds_at_end(reps[n], spike) for n in reps}
    tie = age_bias.tie_at(reps["scissorhands"], spike) if not labels["Scissorhands"] else None
    h_pos, h_scores = reps["h2o"].kept_at(trace.steps - 1)
    held = h_scores[h_pos == spike]
    why = spike_why(float(held[0]) if held.size else None, tie)
    if predict(
        "spike",
        f"budget {budget}, recent_window {window}: which policy still holds position {spike} at "
        "the end?",
        ["H2O", "Scissorhands", "both", "neither"],
        spike_answer(labels),
        why,
    ):
        _spike_reveal(reps, trace, spike, tie)
    with more():  # projected: the question and its answer; what the trace gives, under More
        shares = age_bias.shares_sentence(age_bias.shares(trace, steady), budget)
        charts.show(
            figures.received_lines(
                curves=[(f"position {p}", explain.column(trace, p)) for p in [spike, *steady]],
                title="What the trace gives: the attention each position receives, step by step",
            ),
            key="lesson_spike_trace",
            describe=shares,
        )
        st.markdown(shares)
        chain_section(ref, reps, window, top_k, key="lesson")
        windows, sweep = canonical_sweep(data.load("canonical", {}))
        st.markdown(
            f"On the canonical trace (chapter 4's figure, budget {CANON_BUDGET}): "
            + age_bias.window_tie_sentence(
                windows,
                [r["retained_mass"] for r in sweep["h2o"]],
                [r["retained_mass"] for r in sweep["scissorhands"]],
                32,
            )
        )
        with st.expander("Scissorhands: the card, this library and the paper"):
            st.markdown(CARD_ON_SCISSORHANDS + "\n\n" + SCISSORHANDS_SOURCES)
        open_in(
            "Open the stale-spike lesson",
            pages.STALE_SPIKE,
            {state.SPIKE_STEP: tie.step if tie is not None else budget},
            key="lesson_open_5",
        )


def _spike_reveal(
    reps: dict[str, h2o.Replay], trace: h2o.Trace, spike: int, tie: age_bias.Tie | None
) -> None:
    text = age_bias.leader_sentence(reps["h2o"], spike)
    if tie is not None:
        sc = reps["scissorhands"]
        text += " " + age_bias.tie_sentence(tie, sc.score_label)
        # The rule behind the tie's count: a reader counting the spike's two big steps gets 2.
        text += " " + age_bias.vote_rule_sentence(sc, trace, spike, spike_steps(spike))
    charts.show(
        figures.kept_score_lines(
            curves=[
                (
                    n,
                    f"{r.label} — {r.score_label}",
                    np.arange(r.steps),
                    age_bias.score_history(r, spike),
                )
                for n, r in reps.items()
            ],
            units=[r.score_label for r in reps.values()],
            title=f"Position {spike}'s score while each policy keeps it (the line ends at "
            "its eviction)",
            **projected(height=270),
        ),
        key="lesson_spike",
        describe=text,
    )
    st.markdown(text)


def price_lead(not_the_slot: bool) -> str:
    """The chain's lead: "not the spike's slot" only when one more window slot keeps the victim,
    still holds the spike and retains as much as Scissorhands (within a hundredth)."""
    if not_the_slot:
        return (
            "**The price is not the spike's slot: it is the age bias of a cumulative sum.** "
            "H2O's costliest eviction, taken apart:"
        )
    return "**H2O's costliest eviction, taken apart:**"


def chain_section(
    ref: data.TraceRef, reps: dict[str, h2o.Replay], window: int, top_k: int, key: str
) -> None:
    """The age-bias chain (who H2O evicts at the highest cost, why, what it costs), shared by
    chapter 5 and the Stale spike page."""
    trace, rep = ref.trace, reps["h2o"]
    other = reps["scissorhands"]

    def compute() -> tuple:
        c = age_bias.costliest_eviction(rep, trace)
        d = explain.decision(rep, c.evicted_at)
        wider = data.recorded_replay(ref, h2o.H2O(rep.budget, recent_window=window + 1), top_k)
        spike = int(trace.meta.get("spike", 0))
        w_mass, o_mass = wider.summary()["retained_mass"], other.summary()["retained_mass"]
        rescued = age_bias.holds_at_end(wider, c.position)
        spike_too = age_bias.holds_at_end(wider, spike)
        lead = price_lead(rescued and spike_too and w_mass >= o_mass - TIE)
        chain = [
            age_bias.who_sentence(c),
            age_bias.why_sentence(c, rep.score_label),
            age_bias.cost_sentence(c),
            age_bias.rescue_sentence(c, window, window + 1, rescued, w_mass, other.label, o_mass)
            + (f" It still holds position {spike} to the end." if spike_too else ""),
        ]
        return c, d, lead, chain

    # the same chain for every student of this trace and these settings: once per server
    c, d, lead, chain = data.memo(rep, ("age-bias chain", window, top_k, other.label), compute)
    st.markdown(lead)
    left, right = st.columns(2)
    charts.show(
        figures.decision_bars(
            positions=d.positions,
            scores=d.scores,
            window=d.window,
            victims=[p for p, _ in d.victims],
            score_label=rep.score_label,
            title=f"H2O at step {c.evicted_at}: who position {c.position} lost against",
            height=340,
        ),
        key=f"{key}_chain_decision",
        describe=chain[:2],
        where=left,
    )
    lost = figures.attention_received(
        received=c.received,
        position=c.position,
        evicted_at=c.evicted_at,
        policy="h2o",
        title=f"Attention position {c.position} receives: after step {c.evicted_at}, lost",
        height=340,
        x_range=(c.position, trace.steps - 1),  # the whole loss, to the end
    )
    charts.show(lost, key=f"{key}_chain_lost", describe=chain[2:], where=right)
    st.markdown("\n".join(f"- {s}" for s in chain))


# -- 6. the family: sentences ----------------------------------------------------------------------
FAMILY = [
    (
        "tova",
        "**TOVA** (Oren et al., 2024): the score is only the *last* step's attention — evict "
        "whatever the newest query cares least about. No memory at all; it protects only the "
        "newest position (recent_window 1).",
    ),
    (
        "sliding-window",
        "**Sliding window**: keep the newest `budget` positions. No sinks, no scores.",
    ),
    (
        "random",
        "**Random**: evict a uniformly random position outside the protected window (its label "
        "says how wide). It reads nothing: the baseline that shows whether reading attention "
        "pays off.",
    ),
]


def coincide_groups(rows: Sequence[dict]) -> list[list[dict]]:
    """Rows grouped by mass, highest first: a group's masses lie within :data:`SAME` of its top."""
    ordered = sorted(rows, key=lambda r: -r["retained_mass"])
    groups: list[list[dict]] = []
    for r in ordered:
        if groups and groups[-1][0]["retained_mass"] - r["retained_mass"] < SAME:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def family_sentences(
    rows: Sequence[dict], budget: int, band: int | None, asked: Sequence[int]
) -> list[str]:
    """Who keeps the most and how close to the oracle, which bars coincide, which fall below
    random and why, and which asked windows did not fit the budget — from the chart's rows."""
    groups = coincide_groups(rows)
    top, oracle = groups[0], rows[0]["oracle_mass"]
    best = top[0]["retained_mass"]
    names = _listing([f"**{r['label']}**" for r in top])
    lead = (
        f"{names} keeps the most attention mass, {best:.3f}"
        if len(top) == 1
        else f"{names} coincide at the top, {best:.3f} (within {SAME} of each other)"
    )
    out = [
        f"{lead}: {oracle - best:.3f} below the oracle bound ({oracle:.3f}), the most any "
        f"{budget} positions could hold at each step, chosen in hindsight."
    ]
    for g in groups[1:]:
        if len(g) > 1:
            out.append(
                f"{_listing([r['label'] for r in g])} coincide ({g[0]['retained_mass']:.3f})."
            )
    rnd = next((r for r in rows if r["policy"] == "random"), None)
    if rnd is not None:
        floor = rnd["retained_mass"]
        below = [r for r in rows if r is not rnd and r["retained_mass"] < floor - SAME]
        if not below:
            out.append(
                f"Every other policy keeps at least as much as random eviction ({floor:.3f})."
            )
        else:
            said = _listing([f"{r['label']} at {r['retained_mass']:.3f}" for r in below])
            text = f"Below random eviction ({floor:.3f}): {said}."
            young = sorted(
                {
                    r["recent_window"]
                    for r in below
                    if r["reads_attention"] and band and r.get("recent_window", band) < band
                }
            )
            for w in young:
                same = " protecting the same newest positions," if rnd["recent_window"] == w else ""
                text += (
                    f" A window of {w} leaves positions {w + 1}–{band} steps old, inside the "
                    f"trace's {band}-wide recency band, unprotected: the youngest evictable "
                    "positions, with the lowest scores, they go first (the age bias of chapters "
                    f"3–5), while random eviction,{same} keeps some of them by chance."
                )
            out.append(text)
    missing = [w for w in asked if w >= budget]
    if missing:
        out.append(
            f"recent_window {_listing([str(w) for w in missing])} does not fit below a budget "
            f"of {budget}: not shown."
        )
    return out


# -- 6. the family ---------------------------------------------------------------------------------
BUDGETS = [64, 128, 256, 512, 1024]
WINDOWS = (32, 64)


def family_rows(ref: data.TraceRef, budget: int) -> list[dict]:
    lineup = analysis.standard_lineup(budget, windows=WINDOWS)
    return sweeps.bench(ref.ident, ref.trace, budget, 32, sweeps.freeze_lineup(lineup))


def family() -> None:
    ref = data.load("canonical", {})
    # projected: the budget beside the lead, to leave the chart its height
    lead, control = st.columns([3, 2], vertical_alignment="bottom") if presented() else (st, st)
    lead.markdown(
        "Every policy of this lesson on the canonical trace, and three more, described below "
        "the chart: TOVA, the sliding window and random eviction."
    )
    budget = control.select_slider("Budget", BUDGETS, value=256, key="lesson_family_budget")
    rows = family_rows(ref, budget)
    band = analysis.band_width(ref.trace)
    said = family_sentences(rows, budget, band, WINDOWS)
    charts.show(
        figures.policy_bars(
            policies=[r["policy"] for r in rows],
            labels=[r["label"] for r in rows],
            mass=[r["retained_mass"] for r in rows],
            recall=[r["top_k_recall"] for r in rows],
            oracle=rows[0]["oracle_mass"],
            top_k=32,
            title=f"Every policy on the canonical trace, budget {budget}",
            height=on_screen(400, projected=340),
        ),
        key="lesson_family",
        describe=in_view(said),
    )
    # Projected: who keeps the most under the chart, the rest (one element) under More.
    shown, rest = (said[:1], said[1:]) if presented() else ([], said)
    if shown:
        st.markdown(f"- {shown[0]}")
    with more():
        if rest:
            st.markdown("\n".join(f"- {s}" for s in rest))
        st.markdown("\n".join(f"- {text}" for _, text in FAMILY))
    open_in(
        "Open All policies",
        pages.ALL_POLICIES,
        {state.TRACE: "canonical", state.BUDGET: budget, state.WINDOW: 64, state.SINKS: 4},
        key="lesson_open_6",
    )


CHAPTERS = [
    Chapter(
        4,
        "The window is load-bearing",
        "the-window-is-load-bearing",
        window,
        more="More: no window at all (the card's freeze), the tie with Scissorhands",
    ),
    Chapter(
        5,
        "The stale spike",
        "the-stale-spike",
        stale_spike,
        more="More: what the trace gives, H2O's costliest eviction, the card and the paper",
    ),
    Chapter(
        6,
        "The family",
        "the-family",
        family,
        more="More: every finding on this chart; TOVA, the sliding window, random",
    ),
]


# -- the Stale spike page's sentences (the page is a script: they live here) ---------------------
def spike_view_opening(start: int, parting: int | None, spike: int) -> str:
    """Where the page's step view opens (the session's step) against where Scissorhands lets
    the spike go (``parting``; None: it never does)."""
    if parting is None:
        return f"The view opens at step **{start}**; the dotted row is position {spike}."
    if start == parting:
        return (
            f"The view opens at step **{start}**, where Scissorhands evicts position {spike} (the "
            "dotted row). Step back and forth around it."
        )
    return (
        f"The view opens at step **{start}** (from your link or last visit); Scissorhands "
        f"evicts position {spike} (the dotted row) at step **{parting}**: step "
        f"{'back' if parting < start else 'forward'} to it."
    )
