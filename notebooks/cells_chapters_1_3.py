"""The lesson notebook's setup and chapters 1–3 (``app/lesson/chapters_1_3.py``): why evict, sinks
and recency, heavy hitters."""

from __future__ import annotations

from collections.abc import Callable

from cell_kit import PLAYER_HOWTO, Cell, code, heading, md


def setup() -> list[Cell]:
    return [
        md(
            """
            # H2O, step by step — the lesson as a notebook

            The app's lesson (`make run`, then *H2O, step by step*), chapter by chapter: the
            same text, figures and questions, computed here by the library as you run the
            cells (Run → Run All Cells, or Shift+Enter cell by cell). Where the app has a
            button that opens a page, this notebook has the player itself. Change a setting in
            a cell and run it again: every number in the text below comes from a cell.
            """
        ),
        code(
            """
            import sys
            from pathlib import Path

            import numpy as np
            import pandas as pd
            import streamlit.logger
            from IPython.display import Markdown, display

            import h2o
            from h2o import age_bias, analysis, explain
            from h2o.model.layers import region_shares
            from h2o.notebook import Player

            # The app's own figures and sentence functions, from this clone of the repository
            # (`make notebook` installs it in place). They import streamlit, but need no server.
            ROOT = Path(h2o.__file__).resolve().parents[1]
            sys.path.insert(0, str(ROOT))
            streamlit.logger.set_log_level("error")  # no "no runtime" warnings: there is none
            """
        ),
        code(
            '''
            from app import card, figures, sweeps
            from app.lesson import chapters, chapters_1_3, chapters_4_6, chapters_7_10
            from app.lesson import needle as part_needle
            from app.needle import claims as needle_claims
            from app.needle import data as needle_data
            from app.needle import frontier as needle_frontier
            from app.real_model import claims


            def say(*paragraphs: str) -> None:
                """The lesson's own sentences (computed above), shown as Markdown."""
                display(Markdown("\\n\\n".join(paragraphs)))


            def file_ok(loaded: needle_data.Loaded, path: Path, what: str) -> bool:
                """Say (as plain text) what is wrong with a result file; whether it has anything
                to show. The files are computed ahead, and may be missing or partial."""
                name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                if loaded.missing:
                    print(f"{name} is not in this copy, so there is no {what} to show.")
                    return False
                if loaded.n_problems:
                    listed = "; ".join(loaded.problems[:3])
                    print(f"{name}: {loaded.n_problems} line(s) skipped — {listed}")
                if loaded.repeated:
                    print(f"{name}: {loaded.repeated} repeated line(s): the later one wins.")
                if not loaded.records:
                    print(f"{name} has no usable lines yet.")
                return bool(loaded.records)
            '''
        ),
    ]


def chapter1(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(
            heading(titles, "why_evict")
            + "\n\n"
            + literal("chapters_1_3", "why_evict", "Every token a model reads or writes")
        ),
        code(
            """
            # SmolLM2-135M's shape is read from its GGUF header when the model is installed.
            shapes, where = chapters_1_3.model_shapes()
            context, budget, batch = 32_768, 1024, 1  # try chapters_1_3.CONTEXTS, BUDGETS, BATCHES
            figures.kv_memory(
                models=[s.name for s in shapes],
                weights=[s.weight_bytes or 0.0 for s in shapes],
                full=[s.kv_bytes(context, batch) for s in shapes],
                capped=[s.kv_bytes(min(budget, context), batch) for s in shapes],
                context=context,
                budget=budget,
                batch=batch,
            )
            """
        ),
        code(
            """
            memory = [chapters_1_3.memory_sentence(s, context, budget, batch) for s in shapes]
            say(
                "\\n".join(f"- {line}" for line in memory),
                chapters_1_3.reads_sentence(explain.LLAMA2_7B, context, budget, batch),
            )
            """
        ),
        md(
            "### The shapes, H2O's own bytes, and the other ways to save KV memory\n\n"
            + literal("chapters_1_3", "shapes_details", "Two other ways to fit a cache")
        ),
        code(
            """
            table = {col: [getattr(s, a) for s in shapes] for col, a in chapters_1_3.TABLE.items()}
            table["weights (fp16)"] = [figures.gib(s.weight_bytes or 0) for s in shapes]
            display(pd.DataFrame(table))
            say(
                f"{where}.",
                chapters_1_3.gqa_sentence(shapes),
                chapters_1_3.bookkeeping_sentence(h2o.H2O.nbytes_per_slot, shapes, budget),
            )
            """
        ),
    ]


def chapter2(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(heading(titles, "sinks_and_recency")),
        code(
            """
            trace = h2o.canonical_trace()
            budget, sinks, top_k = 256, 4, 32
            streaming = h2o.replay(h2o.StreamingLLM(budget, sinks=sinks), trace, top_k, record=True)
            # The heavy hitter the ring loses, past the first budget's worth of positions.
            lost = explain.lost_heavy_hitter(streaming, trace, budget)
            facts = explain.sink_facts(trace, streaming, lost)
            say(chapters_1_3.sinks_intro(facts))
            figures.attention_received(
                received=lost.received,
                position=lost.position,
                evicted_at=lost.evicted_at,
                policy="streaming-llm",
                title=f"Attention position {lost.position} receives, step by step",
            )
            """
        ),
        code("say(*chapters_1_3.sinks_text(facts))"),
        md("### What the measures mean: retained mass, top-k recall, the oracle bound"),
        code("say(chapters_1_3.measures_text(facts))"),
        md("### Step through it\n\n" + PLAYER_HOWTO),
        code(
            """
            Player(trace, "streaming-llm", "h2o", budget=budget, sinks=sinks, step=lost.evicted_at)
            """
        ),
    ]


def chapter3(literal: Callable[..., str], titles: dict) -> list[Cell]:
    return [
        md(heading(titles, "heavy_hitters")),
        code(
            """
            toy = h2o.toy_trace()
            fit = analysis.suggested(toy)  # the toy trace's own budget, window and top-k
            heavy = h2o.replay(
                h2o.H2O(fit["budget"], recent_window=fit["recent_window"]),
                toy,
                fit["top_k"],
                record=True,
            )
            f3 = explain.heavy_facts(toy, heavy)
            say(
                chapters_1_3.heavy_intro(f3),
                f"**Predict:** which position does H2O evict at step {f3.t}? One of "
                f"{', '.join(map(str, f3.evictable))}. Decide, then run the next cell.",
            )
            """
        ),
        code(
            """
            d = explain.decision(heavy, f3.t)
            say(f"The answer: **{f3.victim}**. {chapters_1_3.heavy_why(f3)}")
            figures.decision_bars(
                positions=d.positions,
                scores=d.scores,
                window=d.window,
                victims=[p for p, _ in d.victims],
                score_label=heavy.score_label,
                title=f"H2O at step {f3.t}: cumulative attention of each kept position",
            )
            """
        ),
        code("say(chapters_1_3.heavy_age_text(f3), *chapters_1_3.heavy_text(f3))"),
        md("### The contract: ties, and the order victims come back in"),
        code("say(chapters_1_3.tie_text(explain.tie_demo()))"),
        md("### Step through it"),
        code(
            """
            Player(
                toy,
                "h2o",
                "streaming-llm",
                budget=fit["budget"],
                top_k=fit["top_k"],
                recent_window=fit["recent_window"],
                sinks=fit["sinks"],
                step=f3.t,
            )
            """
        ),
    ]
