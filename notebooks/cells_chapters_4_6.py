# ruff: noqa: E501  (the cells' code is indented here; lesson.ipynb holds it at 100 columns)
"""The lesson notebook's chapters 4–6 (``app/lesson/chapters_4_6.py``): the window, the stale spike,
the family."""

from __future__ import annotations

from collections.abc import Callable

from cell_kit import Cell, code, heading, md


def chapter4(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(
            heading(titles, "window")
            + "\n\n"
            + literal("chapters_4_6", "_freeze", "> *The recent window is load-bearing")
        ),
        code(
            """
            small = fit["budget"]  # chapter 3's toy trace and budget, with no window at all
            zero = h2o.replay(h2o.H2O(small, recent_window=0), toy, fit["top_k"], record=True)
            t0 = explain.first_eviction(zero)
            d0 = explain.decision(zero, t0)
            say(
                f"Chapter 3's toy trace and budget ({small}) with **recent_window 0**: H2O at "
                f"step {t0}, its first eviction."
            )
            figures.decision_bars(
                positions=d0.positions,
                scores=d0.scores,
                window=d0.window,
                victims=[p for p, _ in d0.victims],
                score_label=zero.score_label,
                title=f"H2O, recent_window 0, step {t0}: the newcomer (position {t0}) has score "
                f"{float(d0.scores[-1]):g}",
                height=300,
            )
            """
        ),
        code(
            """
            final = zero.kept_at(toy.steps - 1)[0]
            say(age_bias.freeze_sentence(explain.frozen_share(zero), final, small), chapters_4_6.NEW_TOKEN)
            """
        ),
        md(literal("chapters_4_6", "window", "So the window is needed.")),
        code(
            """
            band = analysis.band_width(trace)  # the canonical trace's recency band
            windows = sweeps.sweep_windows_for(budget, band)
            sweep = {
                name: analysis.sweep_windows(trace, name, windows, budget, top_k)
                for name in ("h2o", "scissorhands")
            }
            refs = analysis.bench(
                trace, budget, top_k, lineup=[("streaming-llm", {"sinks": sinks}), ("sliding-window", {})]
            )
            refs = {r["policy"]: r for r in refs}
            h2o_mass = [r["retained_mass"] for r in sweep["h2o"]]
            sc_mass = [r["retained_mass"] for r in sweep["scissorhands"]]
            by_window = dict(zip(windows, h2o_mass, strict=True))
            asked, streaming_mass = (32, band), refs["streaming-llm"]["retained_mass"]
            say(
                f"**Predict:** on the canonical trace at budget {budget}, which H2O keeps more "
                f"attention mass than StreamingLLM: recent_window {asked[0]}, recent_window "
                f"{asked[1]}, both, or neither? Decide, then run the next cell."
            )
            """
        ),
        code(
            """
            say(
                f"The answer: **{chapters_4_6.window_answer(by_window, streaming_mass, asked)}**. "
                + chapters_4_6.window_why(by_window, streaming_mass, asked)
            )
            figures.window_sweep(
                windows=windows,
                series=[("h2o", "H2O", h2o_mass), ("scissorhands", "Scissorhands", sc_mass)],
                refs=[
                    (p, refs[p]["label"], refs[p]["retained_mass"]) for p in ("streaming-llm", "sliding-window")
                ]
                + [("oracle", "oracle bound", sweep["h2o"][0]["oracle_mass"])],
                title=f"Retained attention mass vs recent_window — canonical, budget {budget}",
                ytitle="retained mass (mean over t ≥ budget)",
                band=band,
                height=400,
            )
            """
        ),
        code(
            """
            synthetic = trace.meta.get("source") == "synthetic"
            say(
                age_bias.knee_sentence(windows, h2o_mass, band, analysis.band_share(trace, band), 32, synthetic)
                + " This is the age bias of a cumulative sum — in chapter 3, "
                + age_bias.youngest_sentence(heavy, explain.first_eviction(heavy))
                + ": the window exists to give newcomers time to earn a score.",
                age_bias.window_tie_sentence(windows, h2o_mass, sc_mass, 32)
                + f" The library keeps {h2o.H2O(budget).recent_window} as its default, as the "
                "card does: *tune it to your model, not to this table*.",
            )
            """
        ),
    ]


def chapter5(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(
            heading(titles, "stale_spike")
            + "\n\n"
            + literal(
                "chapters_4_6", "stale_spike", "**Scissorhands** (Liu", "evicts the fewest votes."
            )
        ),
        code(
            """
            stale = h2o.stale_spike_trace()
            sfit = analysis.suggested(stale)
            spike = int(stale.meta.get("spike", 0))
            steady = [int(p) for p in stale.meta.get("steady", [])]
            reps = {
                name: h2o.replay(
                    h2o.policies.make_policy(name, sfit["budget"], recent_window=sfit["recent_window"]),
                    stale,
                    sfit["top_k"],
                    record=True,
                )
                for name in ("h2o", "scissorhands")
            }
            say(
                f"The stale-spike trace has {stale.steps} steps. "
                + chapters_4_6.spike_row_sentence(stale, spike),
                f"**Predict:** budget {sfit['budget']}, recent_window {sfit['recent_window']}: "
                f"which policy still holds position {spike} at the end — H2O, Scissorhands, "
                "both, or neither? Decide, then run the next cell.",
            )
            """
        ),
        code(
            """
            holds = {reps[n].label: age_bias.holds_at_end(reps[n], spike) for n in reps}
            tie = age_bias.tie_at(reps["scissorhands"], spike) if not holds["Scissorhands"] else None
            kept, scores = reps["h2o"].kept_at(stale.steps - 1)
            held = scores[kept == spike]
            why = chapters_4_6.spike_why(float(held[0]) if held.size else None, tie)
            say(f"The answer: **{chapters_4_6.spike_answer(holds)}**. {why}")
            figures.kept_score_lines(
                curves=[
                    (n, f"{r.label} — {r.score_label}", np.arange(r.steps), age_bias.score_history(r, spike))
                    for n, r in reps.items()
                ],
                units=[r.score_label for r in reps.values()],
                title=f"Position {spike}'s score while each policy keeps it (the line ends at its eviction)",
            )
            """
        ),
        code(
            """
            text = age_bias.leader_sentence(reps["h2o"], spike)
            if tie is not None:
                text += " " + age_bias.tie_sentence(tie, reps["scissorhands"].score_label)
                text += " " + age_bias.vote_rule_sentence(
                    reps["scissorhands"], stale, spike, chapters_4_6.spike_steps(spike)
                )
            say(text)
            figures.received_lines(
                curves=[(f"position {p}", explain.column(stale, p)) for p in [spike, *steady]],
                title="What the trace gives: the attention each position receives, step by step",
            )
            """
        ),
        code('say(age_bias.shares_sentence(age_bias.shares(stale, steady), sfit["budget"]))'),
        code(
            """
            # H2O's costliest eviction, taken apart; and one more window slot.
            h2o_rep, window5 = reps["h2o"], sfit["recent_window"]
            c = age_bias.costliest_eviction(h2o_rep, stale)
            dc = explain.decision(h2o_rep, c.evicted_at)
            wider = h2o.replay(
                h2o.H2O(sfit["budget"], recent_window=window5 + 1), stale, sfit["top_k"], record=True
            )
            w_mass = wider.summary()["retained_mass"]
            o_mass = reps["scissorhands"].summary()["retained_mass"]
            rescued = age_bias.holds_at_end(wider, c.position)
            spike_too = age_bias.holds_at_end(wider, spike)
            say(chapters_4_6.price_lead(rescued and spike_too and w_mass >= o_mass - chapters_4_6.TIE))
            figures.decision_bars(
                positions=dc.positions,
                scores=dc.scores,
                window=dc.window,
                victims=[p for p, _ in dc.victims],
                score_label=h2o_rep.score_label,
                title=f"H2O at step {c.evicted_at}: who position {c.position} lost against",
                height=340,
            )
            """
        ),
        code(
            """
            loss = figures.attention_received(
                received=c.received,
                position=c.position,
                evicted_at=c.evicted_at,
                policy="h2o",
                title=f"Attention position {c.position} receives: after step {c.evicted_at}, lost",
                height=340,
                x_range=(c.position, stale.steps - 1),  # the whole loss, to the end
            )
            display(loss)
            rescue = age_bias.rescue_sentence(
                c, window5, window5 + 1, rescued, w_mass, reps["scissorhands"].label, o_mass
            )
            rescue += f" It still holds position {spike} to the end." if spike_too else ""
            sentences = (
                age_bias.who_sentence(c),
                age_bias.why_sentence(c, h2o_rep.score_label),
                age_bias.cost_sentence(c),
                rescue,
            )
            say("\\n".join(f"- {s}" for s in sentences))
            """
        ),
        code(
            """
            say(
                f"On the canonical trace (chapter 4's figure, budget {budget}): "
                + age_bias.window_tie_sentence(windows, h2o_mass, sc_mass, 32),
                chapters_4_6.CARD_ON_SCISSORHANDS,
                chapters_4_6.SCISSORHANDS_SOURCES,
            )
            """
        ),
        md("### Step through it"),
        code(
            """
            Player(
                stale,
                "h2o",
                "scissorhands",
                budget=sfit["budget"],
                top_k=sfit["top_k"],
                recent_window=window5,
                step=tie.step if tie is not None else c.evicted_at,
            )
            """
        ),
    ]


def chapter6(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(
            heading(titles, "family")
            + "\n\n"
            + literal(
                "chapters_4_6", "family", "Every policy of this lesson on the canonical trace"
            )
        ),
        code(
            """
            budget6 = 256  # try another: chapters_4_6.BUDGETS
            lineup = analysis.standard_lineup(budget6, windows=chapters_4_6.WINDOWS)
            rows = analysis.bench(trace, budget6, 32, lineup=lineup)
            figures.policy_bars(
                policies=[r["policy"] for r in rows],
                labels=[r["label"] for r in rows],
                mass=[r["retained_mass"] for r in rows],
                recall=[r["top_k_recall"] for r in rows],
                oracle=rows[0]["oracle_mass"],
                top_k=32,
                title=f"Every policy on the canonical trace, budget {budget6}",
                height=400,
            )
            """
        ),
        code(
            """
            said = chapters_4_6.family_sentences(rows, budget6, band, chapters_4_6.WINDOWS)
            say(
                "\\n".join(f"- {s}" for s in said),
                "\\n".join(f"- {text}" for _, text in chapters_4_6.FAMILY),
            )
            """
        ),
    ]
