"""Every sentence of chapters 4–6 and the Stale spike page, checked against the library's own
replays at every value of the view's controls.

The expected numbers are computed here from ``h2o.replay`` and the trace rows directly (not from
the app's cached tables), then looked for in the sentence each function builds; two AppTest runs
show that the page renders exactly what the function returns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import h2o
from app.lesson import chapters_4_6
from h2o import age_bias, analysis, explain

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")


@pytest.fixture(scope="module")
def canonical() -> h2o.Trace:
    return h2o.canonical_trace()


@pytest.fixture(scope="module")
def spike() -> h2o.Trace:
    return h2o.stale_spike_trace()


def mass_of(trace: h2o.Trace, name: str, budget: int, top_k: int = 32, **params) -> float:
    rep = h2o.replay(analysis.make_policy(name, budget, **params), trace, top_k, record=False)
    return rep.summary()["retained_mass"]


def received(trace: h2o.Trace, pos: int) -> np.ndarray:
    """Attention ``pos`` receives per step, read row by row (not through explain.column)."""
    return np.array([trace.row(t)[pos] if t > pos else 0.0 for t in range(trace.steps)])


# -- chapter 6: every budget stop ------------------------------------------------------------------
def library_rows(trace: h2o.Trace, budget: int) -> list[dict]:
    """The chart's rows, one plain replay per policy (not the banked bench the app uses)."""
    rows = []
    for name, params in analysis.standard_lineup(budget, windows=chapters_4_6.WINDOWS):
        policy = analysis.make_policy(name, budget, **params)
        rep = h2o.replay(policy, trace, 32, record=False)
        s = rep.summary()
        rows.append(
            {
                "policy": name,
                "label": analysis.describe(name, policy.params()),
                "reads_attention": policy.reads_attention,
                **{k: v for k, v in policy.params().items() if k != "budget"},
                "retained_mass": s["retained_mass"],
                "oracle_mass": s["oracle_mass"],
            }
        )
    return rows


@pytest.mark.parametrize("budget", chapters_4_6.BUDGETS)
@pytest.mark.slow
def test_family_sentences_hold_at_every_budget(canonical, budget):
    rows = library_rows(canonical, budget)
    bench = analysis.bench(canonical, budget, 32, lineup=analysis.standard_lineup(budget))
    assert [r["label"] for r in bench] == [r["label"] for r in rows]  # the chart's rows
    for b, r in zip(bench, rows, strict=True):
        assert b["retained_mass"] == pytest.approx(r["retained_mass"], abs=1e-9)
    text = chapters_4_6.family_sentences(
        rows, budget, analysis.band_width(canonical), chapters_4_6.WINDOWS
    )
    best, *rest = text
    masses = {r["label"]: r["retained_mass"] for r in rows}
    top = max(masses.values())
    oracle = rows[0]["oracle_mass"]
    leaders = {lab for lab, m in masses.items() if top - m < chapters_4_6.SAME}
    for lab in masses:
        assert (f"**{lab}**" in best) == (lab in leaders), lab
    assert f"{top:.3f}" in best and f"{oracle - top:.3f} below the oracle bound" in best
    floor = masses["Random (recent_window=32)"]
    below = {lab for lab, m in masses.items() if m < floor - chapters_4_6.SAME}
    said = " ".join(rest)
    if below:
        (line,) = [s for s in rest if s.startswith("Below random")]
        for lab in masses:
            assert (f"{lab} at {masses[lab]:.3f}" in line) == (lab in below), lab
        assert "leaves positions 33–64 steps old" in line  # every one here has window 32
    else:
        assert "Every other policy keeps at least as much as random" in said
    missing = [w for w in chapters_4_6.WINDOWS if w >= budget]
    assert (f"recent_window {missing[0]} does not fit" in said) if missing else "fit" not in said


def test_family_names_the_measured_leaders_and_laggards(canonical):
    """The measured cases (who leads, who falls below random) said at their budgets."""
    at64 = chapters_4_6.family_sentences(library_rows(canonical, 64), 64, 64, chapters_4_6.WINDOWS)
    assert at64[0].startswith("**TOVA (recent_window=1)** keeps the most")
    assert "0.003 below the oracle bound" in at64[0]
    assert "H2O (recent_window=32) at 0.456" in at64[1]
    at1024 = chapters_4_6.family_sentences(
        library_rows(canonical, 1024), 1024, 64, chapters_4_6.WINDOWS
    )
    for lab in ("StreamingLLM (sinks=4)", "H2O (recent_window=64)", "TOVA (recent_window=1)"):
        assert f"**{lab}**" in at1024[0]


def test_family_one_liners_claim_no_ranking():
    words = ("floor", "must beat", "beats", "best", "worst", "always")
    for _, text in chapters_4_6.FAMILY:
        assert not any(w in text.lower() for w in words), text


# -- chapter 4 -------------------------------------------------------------------------------------
def test_freeze_is_measured_on_the_replay():
    toy = h2o.toy_trace()
    rep = h2o.replay(h2o.H2O(8, recent_window=0), toy, 4)
    share = float(np.mean(rep.victim_pos == rep.victim_step))
    final = rep.kept_at(toy.steps - 1)[0]
    text = age_bias.freeze_sentence(explain.frozen_share(rep), final, 8)
    assert f"At {share:.0%} of the steps" in text
    assert share == 1.0 and "0–7 and the newcomer 39" in text and "never moved" in text
    moved = age_bias.freeze_sentence(0.5, np.array([0, 3, 5, 9]), 3)
    assert "never moved" not in moved and "positions 0–5" in moved and "At 50% of" in moved


@pytest.fixture(scope="module")
def sweep(canonical):
    """Chapter 4's sweep, one plain replay per window: (windows, H2O mass, Scissorhands mass)."""
    windows = chapters_4_6.sweeps.sweep_windows_for(256, 64)
    h = [mass_of(canonical, "h2o", 256, recent_window=w) for w in windows]
    s = [mass_of(canonical, "scissorhands", 256, recent_window=w) for w in windows]
    return windows, h, s


def test_window_question_and_the_text_after_the_sweep(canonical, sweep):
    windows, h, s = sweep
    streaming = mass_of(canonical, "streaming-llm", 256, sinks=4)
    by_w = dict(zip(windows, h, strict=True))
    beat = [w for w in (32, 64) if by_w[w] > streaming]
    assert chapters_4_6.window_answer(by_w, streaming, (32, 64)) == "recent_window 64" and beat == [
        64
    ]
    why = chapters_4_6.window_why(by_w, streaming, (32, 64))
    assert f"{streaming:.3f}" in why and f"{by_w[32]:.3f} at recent_window 32" in why
    # The band share, straight from the rows: mass on the last 64 positions, steps after 64.
    share = np.mean([canonical.row(t)[t - 64 :].sum() for t in range(65, canonical.steps)])
    knee = min(w for w in windows if by_w[w] >= max(h) - 0.001)
    text = age_bias.knee_sentence(
        windows, h, 64, chapters_4_6.analysis.band_share(canonical, 64), 32, True
    )
    assert f"puts {share:.2f} of its attention" in text and f"up to {knee} (" in text
    assert knee == 64 and "positions 33–64 steps old are unprotected" in text
    tie = age_bias.window_tie_sentence(windows, h, s, 32)
    first = min(
        w
        for w in windows
        if all(abs(a - b) < 0.01 for a, b, v in zip(h, s, windows, strict=True) if v >= w)
    )
    assert f"from recent_window {first} on" in tie and first == 64
    assert f"H2O keeps {by_w[32]:.3f} and Scissorhands {s[windows.index(32)]:.3f}" in tie


def test_window_sentences_follow_other_numbers():
    """The same functions on made-up sweeps: nothing in them is fixed to the canonical trace."""
    assert chapters_4_6.window_answer({32: 0.8, 64: 0.9}, 0.7, (32, 64)) == "both"
    assert chapters_4_6.window_answer({32: 0.5, 64: 0.6}, 0.7, (32, 64)) == "neither"
    assert chapters_4_6.window_answer({32: 0.8, 64: 0.6}, 0.7, (32, 64)) == "recent_window 32"
    text = age_bias.knee_sentence([0, 8, 16, 24], [0.1, 0.5, 0.7, 0.7], 16, 0.4, 8, False)
    assert "puts 0.40 of its attention on its last 16" in text and "up to 16 (0.700)" in text
    assert "positions 9–16 steps old" in text and "construction" not in text
    tie = age_bias.window_tie_sentence([0, 8, 16], [0.1, 0.5, 0.7], [0.3, 0.505, 0.702], 8)
    assert "from recent_window 8 on" in tie and "H2O keeps 0.500 and Scissorhands 0.505" in tie
    apart = age_bias.window_tie_sentence([0, 8], [0.1, 0.5], [0.3, 0.6], 8)
    assert "never settle" in apart


def test_chapter_3s_victim_is_the_youngest_evictable():
    toy = h2o.toy_trace()
    rep = h2o.replay(h2o.H2O(8, recent_window=2), toy, 4)
    t = int(rep.victim_step[0])
    pos = rep.kept_at(t)[0]
    youngest = int(pos[: len(pos) - 2].max())
    assert int(rep.victim_pos[0]) == youngest
    assert f"position {youngest}, was the youngest" in age_bias.youngest_sentence(rep, t)


# -- chapter 5 and the Stale spike page ------------------------------------------------------------
@pytest.fixture(scope="module")
def spike_reps(spike):
    return {
        "h2o": h2o.replay(h2o.H2O(8, recent_window=2), spike, 4),
        "scissorhands": h2o.replay(h2o.Scissorhands(8, recent_window=2), spike, 4),
    }


def test_who_holds_the_spike(spike, spike_reps):
    held = {r.label: 0 in r.kept_at(spike.steps - 1)[0].tolist() for r in spike_reps.values()}
    assert chapters_4_6.spike_answer(held) == "H2O" and held == {"H2O": True, "Scissorhands": False}
    end = spike_reps["h2o"].kept_at(spike.steps - 1)
    h_score = float(end[1][end[0] == 0][0])
    t = int(spike_reps["scissorhands"].victim_step[spike_reps["scissorhands"].victim_pos == 0][0])
    tie = age_bias.tie_at(spike_reps["scissorhands"], 0)
    assert chapters_4_6.spike_why(h_score, tie) == (
        f"H2O's sum for it is {h_score:.2f} at the end; Scissorhands evicts it at step {t}, "
        "on 1 vote."
    )
    assert chapters_4_6.spike_answer({"H2O": True, "Scissorhands": True}) == "both"
    assert chapters_4_6.spike_answer({"H2O": False, "Scissorhands": False}) == "neither"


def test_the_spike_and_steady_shares_come_from_the_rows(spike):
    col = received(spike, 0)
    text = chapters_4_6.spike_row_sentence(spike, 0)
    assert f"{col[1]:.2f} of step 1 and {col[2]:.2f} of step 2" in text
    assert f"then {col[3:].mean():.3f}" in text
    steady = spike.meta["steady"]
    s = age_bias.shares_sentence(age_bias.shares(spike, steady), 8)
    for p in steady:
        assert f"{p}: {received(spike, p)[p + 1 :].mean():.2f}" in s
    together = np.mean([spike.row(t)[steady].sum() for t in range(max(steady) + 1, spike.steps)])
    assert f"{together:.2f} together" in s and "each above the fair share" in s
    assert 0.5 < together < 0.6  # not "a little": about 4 fair shares of 1/8


def test_the_spike_leads_only_until_step_8(spike_reps):
    rep = spike_reps["h2o"]
    history = age_bias.score_history(spike_reps["scissorhands"], 0)
    assert not np.isnan(history[:9]).any() and np.isnan(history[9:]).all()  # gone at step 8
    lead = [t for t in range(1, rep.steps) if rep.kept_at(t)[0][np.argmax(rep.kept_at(t)[1])] == 0]
    assert lead == list(range(1, 9))
    pos, sc = rep.kept_at(rep.steps - 1)
    order = np.argsort(-sc)
    text = age_bias.leader_sentence(rep, 0)
    assert "from step 1 to step 8" in text
    assert (
        f"{int(pos[order[0]])} ({sc[order[0]]:.1f}) and {int(pos[order[1]])} ({sc[order[1]]:.1f})"
        in text
    )
    assert "4 (24.6) and 9 (23.0)" in text


def test_scissorhands_evicts_the_spike_on_a_tie_the_lower_position_settles(spike_reps):
    rep = spike_reps["scissorhands"]
    t = int(rep.victim_step[rep.victim_pos == 0][0])
    pos, votes = rep.kept_at(t)
    evictable, ev_votes = pos[:-2], votes[:-2]
    tied = evictable[ev_votes == ev_votes.min()].tolist()
    protected = pos[-2:][votes[-2:] == ev_votes.min()].tolist()
    assert (t, tied, protected) == (8, [0, 1], [7])
    text = age_bias.tie_sentence(age_bias.tie_at(rep, 0), rep.score_label)
    assert "At step 8, positions 0 and 1 tie at 1" in text and "(7 has 1 too" in text
    assert text.endswith("sends 0.")


def test_the_librarys_vote_never_decays(spike_reps):
    rep = spike_reps["scissorhands"]
    for t in range(1, rep.steps):
        before = dict(zip(*map(np.ndarray.tolist, rep.kept_at(t - 1)), strict=True))
        for p, v in zip(*map(np.ndarray.tolist, rep.kept_at(t)), strict=True):
            assert v >= before.get(p, 0.0)
    assert "decays nothing" in chapters_4_6.SCISSORHANDS_SOURCES


def test_the_age_bias_chain_is_measured(spike, spike_reps):
    rep = spike_reps["h2o"]
    lost = {
        int(p): received(spike, int(p))[int(t) + 1 :].sum()
        for t, p in zip(rep.victim_step, rep.victim_pos, strict=True)
    }
    worst = max(lost, key=lost.get)
    t = int(rep.victim_step[rep.victim_pos == worst][0])
    assert (worst, t) == (17, 19)
    total = float(np.sum(1 - rep.mass[1:]))  # every step's missing mass: the same total
    assert sum(lost.values()) == pytest.approx(total)
    other = max(v for p, v in lost.items() if p != worst)
    c = age_bias.costliest_eviction(rep, spike)
    assert (
        age_bias.who_sentence(c)
        == "Who: position 17, evicted at step 19, 2 steps after it was born."
    )
    cost = age_bias.cost_sentence(c)
    assert f"{lost[worst]:.1f} steps' worth" in cost and f"of the {total:.1f}" in cost
    assert f"more than {other:.2f}" in cost and "13.6" in cost
    pos, sc = rep.kept_at(t)
    mine = sc[pos == 17][0]
    born_pos, born_sc = rep.kept_at(17)
    why = age_bias.why_sentence(c)
    for q, v in zip(pos[:-2].tolist(), sc[:-2].tolist(), strict=True):
        assert (f"{q} ({v:.3f})" in why) == (v > mine), q
        if v > mine:
            assert v - born_sc[born_pos == q][0] < mine  # each won on its head start
    assert f"its cumulative attention, {mine:.3f} ({mine / 2:.2f} a step)" in why


def test_one_more_window_slot_keeps_position_17(spike, spike_reps):
    wider = h2o.replay(h2o.H2O(8, recent_window=3), spike, 4)
    kept = 17 in wider.kept_at(spike.steps - 1)[0].tolist()
    c = age_bias.costliest_eviction(spike_reps["h2o"], spike)
    mass = wider.summary()["retained_mass"]
    other = spike_reps["scissorhands"].summary()["retained_mass"]
    text = age_bias.rescue_sentence(c, 2, 3, kept, mass, "Scissorhands", other)
    assert kept and "keeps it to the end" in text and f"{mass:.3f}" in text
    assert f"Scissorhands: {other:.3f}" in text
    spike_kept = 0 in wider.kept_at(spike.steps - 1)[0].tolist()
    not_the_slot = kept and spike_kept and mass >= other - chapters_4_6.TIE
    assert not_the_slot  # one more slot: 17 stays, the spike stays, and nothing is lost
    assert ("not the spike's slot" in chapters_4_6.price_lead(not_the_slot)) == not_the_slot
    assert "not the spike's slot" not in chapters_4_6.price_lead(False)


def test_scissorhands_votes_only_strictly_above_the_fair_share():
    """The rule the lesson states, against the policy: a weight of exactly 1/n earns nothing."""
    p = h2o.Scissorhands(8, recent_window=2)
    p.on_decode_step(0, None)
    p.on_decode_step(1, np.array([1.0], np.float32))  # n = 1: the whole row is the fair share
    assert p.scores.tolist() == [0.0, 0.0]
    p.on_decode_step(2, np.array([0.5, 0.5], np.float32))  # n = 2: both exactly fair
    assert p.scores.tolist() == [0.0, 0.0, 0.0]
    p.on_decode_step(3, np.array([0.5, 0.25, 0.25], np.float32))  # n = 3: only 0.5 > 1/3
    assert p.scores.tolist() == [1.0, 0.0, 0.0, 0.0]


def kept_when_row_arrives(rep: h2o.Replay, t: int) -> list[int]:
    """The positions step ``t``'s attention is spread over: kept at ``t``, less ``t`` itself."""
    return [q for q in rep.kept_at(t)[0].tolist() if q < t]


def test_every_vote_of_the_replay_follows_the_stated_rule(spike, spike_reps):
    rep = spike_reps["scissorhands"]
    checked = 0
    for t in range(1, rep.steps):
        before = set(rep.kept_at(t - 1)[0].tolist())
        for q in kept_when_row_arrives(rep, t):
            if q not in before:
                continue
            seen = kept_when_row_arrives(rep, t)
            w = spike.row(t)[q] / spike.row(t)[seen].sum()
            (v,) = age_bias.votes_at(rep, spike, q, [t])
            assert (v.n, v.votes) == (len(seen), float(w > 1 / len(seen))), (t, q)
            assert v.weight == pytest.approx(w)
            checked += 1
    assert checked > 500
    with pytest.raises(ValueError, match="Scissorhands"):
        age_bias.votes_at(spike_reps["h2o"], spike, 0, [1])
    with pytest.raises(ValueError, match="not after position 4"):
        age_bias.votes_at(rep, spike, 4, [4])
    with pytest.raises(ValueError, match="not kept at step 9"):
        age_bias.votes_at(rep, spike, 0, [9])  # evicted at step 8


def test_the_vote_rule_is_stated_where_the_spike_is_counted(spike, spike_reps):
    rep = spike_reps["scissorhands"]
    steps = chapters_4_6.spike_steps(0)
    assert steps == (1, 2)  # the two steps the spike's row sentence names
    text = age_bias.vote_rule_sentence(rep, spike, 0, steps)
    assert (
        "a kept position gets one vote if its weight is strictly more than the fair share 1/n, n "
        "being the positions that step's attention is shared among" in text
    )
    # Recomputed here from the rows: step 1 spreads over position 0 alone, step 2 over 0 and 1.
    col = received(spike, 0)
    assert [kept_when_row_arrives(rep, t) for t in steps] == [[0], [0, 1]]
    assert col[1] == pytest.approx(1.0) and col[2] > 1 / 2
    assert "So position 0 gets 1 vote from steps 1 and 2, not one a step" in text
    assert (
        "at step 1 it is the only kept position, and its weight, 1.00, is not more than 1/1: no "
        "vote" in text
    )
    assert f"at step 2, {col[2] / spike.row(2)[[0, 1]].sum():.2f} > 1/2: 1 vote." in text
    # ... and that is the count the tie states: no vote after step 2 until the eviction.
    tie = age_bias.tie_at(rep, 0)
    upto = age_bias.votes_at(rep, spike, 0, range(1, tie.step + 1))
    assert sum(v.votes for v in upto) == tie.score == 1


def test_the_caches_disagree_on_slots(canonical):
    reps = [
        h2o.replay(analysis.make_policy(n, 256, recent_window=64), canonical, 32)
        for n in ("h2o", "scissorhands")
    ]
    share, only_a, only_b = [], [], []
    for t in range(256, canonical.steps):
        a, b = (set(kept_when_row_arrives(r, t)) for r in reps)
        row = canonical.row(t)
        share.append(len(a & b) / len(a))
        only_a.append(row[sorted(a - b)].sum(dtype=np.float64))
        only_b.append(row[sorted(b - a)].sum(dtype=np.float64))
    s, oa, ob = np.mean(share), np.mean(only_a), np.mean(only_b)
    text = age_bias.slots_sentence(s, oa, ob, "H2O", "Scissorhands")
    assert f"The caches disagree on {1 - s:.0%} of their slots" in text and "panel" not in text
    assert f"holding ≈ {oa:.3f} of the mass either way" in text and f"{oa:.3f}" == f"{ob:.3f}"
    apart = age_bias.slots_sentence(0.4, 0.02, 0.05, "H2O", "Scissorhands")
    assert "only H2O keeps holding 0.020 of the mass, those only Scissorhands keeps 0.050" in apart


@pytest.mark.parametrize("start", range(96))
def test_the_spike_page_says_where_its_view_opens_at_every_step(start):
    text = chapters_4_6.spike_view_opening(start, 8, 0)
    assert f"opens at step **{start}**" in text
    if start == 8:
        assert "where Scissorhands evicts position 0" in text
    else:
        assert "at step **8**" in text and ("back" if start > 8 else "forward") in text


# -- rendered = built ------------------------------------------------------------------------------
def markdown(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown]


def test_chapter_5_reveals_the_vote_rule_with_the_tie(spike, spike_reps):
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.query_params["presenter"] = "1"
    at.query_params["chapter"] = "5"
    at.run()
    sc = spike_reps["scissorhands"]
    rule = age_bias.vote_rule_sentence(sc, spike, 0, (1, 2))
    assert not any(rule in m for m in markdown(at))  # it gives the answer away: after it only
    at.button(key="lesson_reveal_spike").click().run()
    assert not at.exception, [e.value for e in at.exception]
    tie = age_bias.tie_sentence(age_bias.tie_at(sc, 0), sc.score_label)
    assert f"{age_bias.leader_sentence(spike_reps['h2o'], 0)} {tie} {rule}" in markdown(at)


def test_chapter_6_renders_its_sentences_at_the_largest_budget(canonical):
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.query_params["presenter"] = "1"
    at.query_params["chapter"] = "6"
    at.run()
    at.select_slider(key="lesson_family_budget").set_value(1024).run()
    assert not at.exception, [e.value for e in at.exception]
    want = chapters_4_6.family_sentences(
        library_rows(canonical, 1024), 1024, 64, chapters_4_6.WINDOWS
    )
    # projected: the first under the chart, the rest under More — each once
    shown = markdown(at)
    assert f"- {want[0]}" in shown
    assert "\n".join(f"- {s}" for s in want[1:]) in shown


def test_stale_spike_page_renders_the_chain_and_where_it_opens(spike, spike_reps, sweep):
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.query_params["spike_step"] = "20"
    at.query_params["presenter"] = "1"
    at.run()
    at.switch_page("views/stale_spike.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = "\n".join(markdown(at))
    assert chapters_4_6.spike_view_opening(20, 8, 0) in shown
    c = age_bias.costliest_eviction(spike_reps["h2o"], spike)
    for s in (age_bias.who_sentence(c), age_bias.why_sentence(c), age_bias.cost_sentence(c)):
        assert f"- {s}" in shown
    assert (
        chapters_4_6.price_lead(True) in shown and "It still holds position 0 to the end." in shown
    )
    steady = spike.meta["steady"]
    sc = spike_reps["scissorhands"]
    for s in (
        chapters_4_6.spike_row_sentence(spike, 0),
        age_bias.shares_sentence(age_bias.shares(spike, steady), 8),
        age_bias.leader_sentence(spike_reps["h2o"], 0),
        age_bias.tie_sentence(age_bias.tie_at(sc, 0), sc.score_label),
        age_bias.vote_rule_sentence(sc, spike, 0, (1, 2)),
        age_bias.window_tie_sentence(*sweep, 32),
    ):
        assert s in shown, s
    assert "of their slots" in shown and "of the panels" not in shown


def test_chapter_5s_reveal_puts_each_score_on_its_own_axis(spike_reps):
    """H2O's summed attention and Scissorhands' votes are different quantities: one panel each,
    titled by the policy's own score, linear; the votes' axis ticks whole numbers only."""
    from app import figures

    reps = spike_reps
    curves = [
        (n, r.label, np.arange(r.steps), age_bias.score_history(r, 0)) for n, r in reps.items()
    ]
    fig = figures.kept_score_lines(
        curves=curves, units=[r.score_label for r in reps.values()], title="t"
    ).to_plotly_json()
    axes = {tr["name"]: tr.get("yaxis", "y") for tr in fig["data"]}
    assert len(set(axes.values())) == 2
    layout = fig["layout"]
    for (_name, rep), axis in zip(reps.items(), ["yaxis", "yaxis2"], strict=True):
        assert layout[axis]["title"]["text"] == rep.score_label
        assert layout[axis].get("type", "linear") == "linear"
    votes = age_bias.score_history(reps["scissorhands"], 0)
    assert np.all(np.isnan(votes) | (votes == np.round(votes)))
    assert layout["yaxis2"]["tickformat"] == "d" and layout["yaxis2"]["dtick"] >= 1
    assert "tickformat" not in layout["yaxis"]  # summed attention is not a count
    lo1, _hi1 = layout["yaxis"]["domain"]
    _lo2, hi2 = layout["yaxis2"]["domain"]
    assert hi2 < lo1  # stacked, not overlaid
    with pytest.raises(ValueError, match="units"):
        figures.kept_score_lines(curves=curves, units=["one"], title="t")
