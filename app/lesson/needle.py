"""Chapter 7's evidence about answers (the needle grid, computed ahead) and chapter 8, "Evict or
compress?" (eviction against KIVI-style quantization at equal memory).

Both read ``traces/results/needle-grid.jsonl`` and ``frontier.jsonl`` (:mod:`app.needle`) and
say plainly when a file is not in this copy. Every sentence with a number comes from
:mod:`app.needle.claims`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from app import charts, figures, pages
from app.lesson import more, on_screen, open_in, presented
from app.needle import claims, family, frontier, grid, shipped
from h2o.needle import findings
from h2o.needle.results import Cell, FollowUpCell, derived

#: Chapter 7's rows: the full cache, then H2O at one budget as its authors split it (half the
#: budget a recent window) in its two modes, StreamingLLM (chapter 7's pair), and SnapKV, which
#: reads the question before it compresses.
LESSON_BUDGET = 256
LESSON_ROWS = (
    "full",
    f"h2o@{LESSON_BUDGET}:w50%",
    f"h2o@{LESSON_BUDGET}:w50%:prefill",
    f"streaming-llm@{LESSON_BUDGET}",
    f"snapkv@{LESSON_BUDGET}",
)
#: The lengths chapter 7 counts: those the compared rows were asked with several needles a cell.
LESSON_MAX_LENGTH = 2048
#: The needle length chapter 8 reads accuracy at (the frontier's perplexity is at T = 2,048).
LESSON_LENGTH = frontier.PPL_TOKENS


def lesson_rows(available: list[str]) -> list[str]:
    """The chapter's rows that the file has (others from the file if none of them is there)."""
    mine = [r for r in LESSON_ROWS if r in available]
    return mine or grid.pick(available, LESSON_ROWS, 3)


@dataclass(frozen=True)
class GridView:
    """What chapter 7 shows of the needle grid, derived once per version of the file."""

    figure: Any
    full: str
    scores: str
    modes: str
    swept: str
    caption: str
    since: tuple[str, ...]
    how: str


def grid_view(records: Sequence[Cell]) -> GridView:
    """Chapter 7's figure and sentences from the grid's cells (every student's run shares one
    computation per version of the file: :func:`h2o.needle.results.derived`)."""

    def compute() -> GridView:
        rows = grid.rows(records)
        shown = lesson_rows(rows)
        lens = [n for n in grid.lengths(records) if n <= LESSON_MAX_LENGTH]
        deps = grid.depths(records)
        cells = [c for c in records if c.length in set(lens)]
        fig = figures.needle_heatmaps(
            panels=[(r, *grid.matrix(cells, r, lens, deps, "correct")) for r in shown],
            lengths=lens,
            depths=deps,
            zrange=(0.0, 1.0),
            colour_title="share answered right",
            value_format=".0%",
            title="Needle answered right, per prompt length and depth",
        )
        since = family.family_sentences(cells, LESSON_BUDGET)
        return GridView(
            figure=fig,
            full=claims.full_note(cells),
            scores=claims.scores_sentence(grid.scores(cells, shown), cells),
            modes=claims.modes_sentence(
                cells, f"h2o@{LESSON_BUDGET}:w50%", f"h2o@{LESSON_BUDGET}:w50%:prefill"
            ),
            swept=claims.window_sweep_sentence(cells, findings.sweep_rows(), findings.SWEEP_LENGTH),
            caption=claims.shown_sentence(shown, rows, cells),
            since=tuple(since),
            how=family.how_they_run(cells, LESSON_BUDGET) if since else "",
        )

    return derived(records, "lesson grid", compute)


def grid_section() -> None:
    """Chapter 7: the needle grid for the full cache and the chapter's policies."""
    loaded, path = shipped.grid()
    st.markdown(
        "Does the model still *answer* once the cache has evicted? One question is an anecdote; "
        "the needle grid asks many: a fact (“The code of the green locker is 9237.”) hidden at a "
        "depth of a text of a given length, asked at its end."
    )
    if not shipped.report(loaded, path, "needle grid"):
        return
    view = grid_view(loaded.records)
    charts.show(view.figure, key="lesson_needle", describe=[view.full, view.scores])
    band = shipped.attention_band()
    said = [  # one element, a paragraph each
        view.full,
        view.scores,
        view.modes,
        claims.band_sentence(band["band"], band["warmup"], LESSON_BUDGET // 2)
        if band is not None
        else "",
        view.swept,
    ]
    st.markdown("\n\n".join(s for s in said if s))
    st.markdown(
        "H2O runs here as its authors split the budget: half heavy hitters, half a recent "
        "window. It runs in two modes, and they differ in *when* a fact's attention is counted. "
        "**Evicting while it reads** (the card's rule at every prompt token), a fact read once "
        "must defend its slot against each token read after it while its score is still young. "
        "In the **prefill mode** of the authors' generation code the model reads the whole "
        "prompt with full attention first, and the heavy hitters are chosen from the attention "
        "every later prompt token paid — the question's included — before anything is evicted."
    )
    st.caption(view.caption)
    if view.since:
        st.markdown(
            "**The family since H2O.** Newer methods each answer one of H2O's limits; here each "
            f"at {LESSON_BUDGET} slots beside SnapKV, on the positions (a length and depth) both "
            "have. " + view.how
        )
        st.markdown("\n\n".join(view.since))  # one element, a paragraph each
    followup_section("lesson_followup")
    open_in("Open the needle grid", pages.NEEDLE_GRID, {}, key="lesson_open_7_needle")


def memory_and_points() -> tuple[int | None, int | None, list, list]:
    """Chapter 8's memories and points: perplexity at T = 2,048 (over every text the file holds
    with a full-cache row, each row's against the full cache's on the same text) and needle
    accuracy at :data:`LESSON_LENGTH` tokens, each asked at a 4-bit KIVI-style cache's own bytes
    per token in that measurement (a prompt a few tokens short of its length holds a little more
    per token), else at its middle memory."""
    fr, _ = shipped.frontier()
    gr, _ = shipped.grid()
    ppl = frontier.ppl_points(fr.records)
    acc = frontier.accuracy_points(gr.records, LESSON_LENGTH)
    return frontier.default_memory(ppl), frontier.default_memory(acc), ppl, acc


def evict_or_compress() -> None:
    st.markdown(
        "Evict tokens, or keep them all at fewer bits (**KIVI-style**, as its paper runs it)? "
        "Each point is one measured row; only rows at equal KV memory per token (the shaded "
        "band) are compared:"
    )
    fr, fr_path = shipped.frontier()
    what = (
        "frontier (perplexity against KV bytes per token for every eviction policy, KIVI-style "
        "bit width and their combinations)"
    )
    if not shipped.report(fr, fr_path, what):
        open_in("Open Evict or compress?", pages.EVICT_OR_COMPRESS, {}, key="lesson_open_8")
        return
    memory, acc_memory, ppl, acc = memory_and_points()
    if not ppl:
        st.info(claims.texts_note(fr.records, ppl), icon=":material/info:")
        open_in("Open Evict or compress?", pages.EVICT_OR_COMPRESS, {}, key="lesson_open_8")
        return
    texts = frontier.ppl_texts(fr.records).texts
    ppl_said = claims.verdict(ppl, memory, claims.PERPLEXITY) if memory is not None else None
    acc_said = None
    if acc_memory is not None:
        said = claims.verdict(acc, acc_memory, claims.ACCURACY)
        acc_said = f"On the needle grid at {LESSON_LENGTH:,} tokens: {said[0].lower()}{said[1:]}"
    # Projected, the legend names the families whose rows the sentence under the chart speaks
    # of (each group's best at the memory asked about); a room cannot read two dozen entries.
    named = None
    if presented():
        ranked = frontier.compared(ppl)[0]  # the rows the verdict ranks
        bests = claims.best(ranked, memory, claims.PERPLEXITY) if memory is not None else {}
        named = tuple(sorted({p.family for p in bests.values()}))
    # projected: the answer beside the chart, which keeps its height
    chart, answer = st.columns([3, 2], vertical_alignment="center") if presented() else (st, st)
    charts.show(
        figures.perplexity_frontier(
            ppl,
            texts,
            limit=memory,
            # the legend's width is the chapter's: the page's in presenter mode (a projector's
            # 1,280 px, the sidebar shut, less the answer beside it), beside the sidebar
            # otherwise; the plot keeps its height however many families the legend lists
            legend_width=on_screen(800, projected=640),
            plot_height=on_screen(300, projected=200),
            named=named,
        ),
        key="lesson_frontier",
        describe=[t for t in (ppl_said, acc_said if not presented() else None) if t],
        where=chart,
    )
    if ppl_said is not None:
        answer.markdown(ppl_said)
    with more():  # projected: the perplexity's answer; how the rows run and the needles, here
        charted = tuple(p.row for p in ppl)
        st.markdown(claims.texts_note(fr.records, ppl))
        if notes := claims.text_notes(fr.records, charted):
            st.markdown("\n\n".join(notes))
        if acc_said is not None:
            st.markdown(acc_said)
            st.caption(
                "A difference in needles is claimed only where an exact sign test over the same "
                "positions (a length and depth, its needles one observation) supports it; a "
                "difference in perplexity is counted text by text."
            )
    open_in("Open Evict or compress?", pages.EVICT_OR_COMPRESS, {}, key="lesson_open_8")


#: The two questions' colours: the first in the neutral blue, the second in the orange of
#: the palette (line styles are not needed: each bar is labelled with its value).
FOLLOWUP_COLOURS = ("#4E79A7", "#F28E2B")


def followup_section(key: str) -> None:
    """The second question: two facts hidden in one text, the first asked, then the second on
    the cache the first left — which rows still answer it (from ``followup.jsonl``)."""
    loaded, path = shipped.followup()
    st.markdown(
        "SnapKV chooses what to keep once it has read the question. A conversation goes on: "
        "two facts are hidden in one text, the first is asked at its end, then the second is "
        "asked on the same cache."
    )
    if not shipped.report(loaded, path, "second-question experiment"):
        return
    fig, lines, summary = derived(loaded.records, "followup", lambda: followup_view(loaded.records))
    charts.show(fig, key=key, describe=[*lines, summary])
    st.markdown("\n\n".join([*lines, summary]))  # one element, a paragraph each
    # Projected, the section sits under "More" (already one click away; no expander in another).
    shipped.provenance(loaded, "second-question experiment", collapsed=not presented())


def followup_view(cells: Sequence[FollowUpCell]) -> tuple[Any, tuple[str, ...], str]:
    """The second question's bars and sentences, from the file's cells."""
    rows: list[str] = []
    for c in cells:
        if c.row not in rows:
            rows.append(c.row)
    share = {
        r: [
            float(np.mean([getattr(c, k) for c in cells if c.row == r]))
            for k in ("correct_first", "correct_second")
        ]
        for r in rows
    }
    lens = sorted({c.length for c in cells})
    fig = figures.grouped_bars(
        categories=[html.escape(r) for r in rows],
        series=[
            (name, colour, [share[r][i] for r in rows])
            for i, (name, colour) in enumerate(
                zip(("first question", "second question"), FOLLOWUP_COLOURS, strict=True)
            )
        ],
        title="Share of cells answered right: the first question, then the second on the "
        "same cache",
        xtitle=f"row (prompts of {', '.join(f'{n:,}' for n in lens)} tokens)",
        ytitle="share answered right",
    )
    return fig, tuple(claims.followup_sentences(cells, rows)), claims.followup_summary(cells, rows)
