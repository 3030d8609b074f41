"""Evict or compress? Eviction (fewer tokens at 16 bits) against KIVI-style quantization (every
token at fewer bits) and both combined, at equal KV memory, on SmolLM2-135M.

Two charts against KV bytes per token, one line per family: perplexity at T = 2048 over every
text ``traces/results/frontier.jsonl`` holds, each row's against the full cache's on the same
text (a point the mean over the texts, its bar their range), and needle accuracy
(``needle-grid.jsonl``) at a chosen prompt length. The reader picks a row; each chart's
verdict, at that row's own bytes per token on that chart, is built from the same points by
:func:`app.needle.claims.verdict`, whatever it says.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import streamlit as st

from app import a11y, charts, figures, pages, painted, state
from app.needle import claims, frontier, shipped
from app.needle.frontier import GROUPS, PPL_TOKENS
from h2o.needle.results import derived
from h2o.stats import MIN_POSITIONS, positions

a11y.focus_ring()  # the keyboard's focus, seen on every control

ss = st.session_state
ROW, LENGTH = "ec_row", "ec_length"
#: Each chart's height: its legend names twenty-odd families in two columns above the plot, which
#: left the plot itself under 100 px at the figures' default height.
CHART_HEIGHT = 680


def plural(n: int, one: str, many: str = "") -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def not_on(chart: str) -> None:
    st.info(
        f"{state.md(ref)} is not on {chart}: no verdict at its memory here. Pick a row the "
        "chart has to read it at equal memory.",
        icon=":material/info:",
    )


st.title("Evict or compress?")
st.markdown(
    "Two ways to shrink the KV cache. **Evict**: keep fewer tokens at full precision (H2O, "
    "StreamingLLM, SnapKV, … at a budget of slots per head; also with PyramidKV-, Ada-KV- and "
    "DuoAttention-style allocations, which borrow each paper's split of the budget, not its whole "
    "method). **Compress**: keep every token at fewer bits — **KIVI-style** quantization (keys "
    "per channel, values per token, groups of 32, the newest tokens in fp16), simulated in numpy: "
    "the model attends to dequantized values, so the quality is KIVI's but not its speed. Or "
    "both. The bytes count everything a cache holds: codes, scales, zero points, full-precision "
    "tokens, a policy's bookkeeping. Pick a row: each chart is read at that row's own bytes per "
    "token (the dashed line), against every other row within "
    f"{frontier.TOLERANCE:.0%} of them."
)
state.publish([])  # this page keeps its settings in the session, not the URL

fr, fr_path = shipped.frontier()
gr, gr_path = shipped.grid()
ppl = frontier.ppl_points(fr.records) if not fr.missing else []
texts = frontier.ppl_texts(fr.records).texts
over = texts[0] if len(texts) == 1 else plural(len(texts), "text")  # what the chart is over
lens = sorted({c.length for c in gr.records})
choices = frontier.reference_rows(
    ppl, *(frontier.accuracy_points(gr.records, n) for n in reversed(lens))
)

ref: str | None = None
below_chart: Callable[[], None] | None = None  # what follows the perplexity chart
if choices:
    first = frontier.PAPER_4BIT if frontier.PAPER_4BIT in choices else choices[len(choices) // 2]
    if ss.get(ROW) not in choices:
        ss[ROW] = first
    ref = st.selectbox(
        "Compare at the memory held by",
        choices,
        **state.mirror(ROW, first),
        help="Every row that holds less than the whole cache (not the full cache, nor a "
        "selection such as Quest, which holds every key and reads a part), by its bytes per "
        "token. Each chart counts a row's bytes over its own tokens, so the memory asked about "
        "is this row's own on each chart; the verdicts compare the best row of each kind within "
        f"{frontier.TOLERANCE:.0%} of it (the shaded band), and a kind with no row there says so "
        "and names its nearest.",
    )

# -- perplexity ------------------------------------------------------------------------------------
st.subheader(f"Perplexity — {state.md(over)}, T = {PPL_TOKENS:,}", divider="gray")
if shipped.report(fr, fr_path, "frontier"):
    if not ppl:
        st.info(claims.texts_note(fr.records, ppl), icon=":material/info:")
    else:
        memory = frontier.memory_of(ppl, ref) if ref is not None else None
        said = claims.verdict(ppl, memory, claims.PERPLEXITY) if memory is not None else None
        counted = claims.ppl_counted(fr.records, ppl)
        over_texts = claims.texts_note(fr.records, ppl)
        charts.show(
            figures.perplexity_frontier(ppl, texts, limit=memory, height=CHART_HEIGHT),
            key="ec_ppl",
            describe=[t for t in (said, over_texts, counted) if t],
        )

        def below_chart() -> None:  # its sentences follow it, in the rest of the page
            if said is not None:
                st.markdown(said)
            elif ref is not None:
                not_on(f"the perplexity chart ({PPL_TOKENS:,} tokens)")
            st.caption(f"{over_texts} {counted}")
            charted = tuple(p.row for p in ppl)  # once per version of the two files
            one_shot = derived(
                gr.records,
                ("one-shot note", charted),
                lambda: claims.one_shot_note(gr.records, charted),
            )
            if one_shot:
                st.markdown(one_shot)
            if notes := claims.text_notes(fr.records, charted):
                st.markdown("\n\n".join(notes))
            shipped.provenance(fr, "frontier")


def rest() -> None:
    """Below the perplexity chart: its sentences, the needle accuracy, every row."""
    if below_chart is not None:
        below_chart()
    acc: list[frontier.Point] = []

    # -- needle accuracy ---------------------------------------------------------------------------
    st.subheader("Needle accuracy", divider="gray")
    if shipped.report(gr, gr_path, "needle grid") and lens:
        default_len = 2048 if 2048 in lens else lens[-1]
        if ss.get(LENGTH) not in lens:
            ss[LENGTH] = default_len
        length = int(
            st.segmented_control(
                "Prompt length (tokens)",
                lens,
                format_func=lambda n: f"{n:,}",
                required=True,
                **state.mirror(LENGTH, default_len),
            )
        )
        acc = frontier.accuracy_points(gr.records, length)
        memory = frontier.memory_of(acc, ref) if ref is not None else None
        said = claims.verdict(acc, memory, claims.ACCURACY) if memory is not None else None
        n_cells = sum(p.n for p in acc)
        few = len(frontier.compared(acc)[1])
        counted = (
            f"{plural(len(acc), 'row')}, {plural(n_cells, 'cell')} at {length:,} tokens (every "
            "depth and needle of that length in the file); bytes per token are each row's KV "
            "bytes over the prompt's tokens, averaged over its cells."
            + (
                f" {plural(few, 'row')} with fewer than {MIN_POSITIONS} positions at this "
                "length: drawn, not compared."
                if few
                else ""
            )
        )
        charts.show(
            figures.frontier(
                lines=frontier.figure_lines(
                    acc, lambda p: f"{positions(dict(p.outcomes)).text()} answered"
                ),
                full=frontier.full_of(acc),
                limit=memory,
                title=f"Needle accuracy against KV memory — prompts of {length:,} tokens "
                "(higher is better)",
                ytitle="share of needle cells answered right",
                yformat="%{y:.0%}",
                share=True,
                height=CHART_HEIGHT,
            ),
            key="ec_acc",
            describe=[t for t in (said, counted) if t],
        )
        if said is not None:
            st.markdown(said)
        elif ref is not None:
            not_on(f"the needle chart at {length:,} tokens")
        st.caption(counted)
        shipped.provenance(gr, "needle grid")

    # -- the rows ----------------------------------------------------------------------------------
    if ppl or gr.records:
        with st.expander("Every row, its kind and its numbers", icon=":material/table:"):
            table: dict[str, dict] = {}
            for p in ppl:
                table.setdefault(p.row, {"row": p.row, "family": p.family, "kind": p.group})
                lo, hi = p.spread
                table[p.row] |= {
                    "bytes/token (T = 2,048)": p.x,
                    "perplexity over the full cache's (mean)": 100 * p.y,
                    "perplexity over the full cache's, lowest": 100 * lo,
                    "perplexity over the full cache's, highest": 100 * hi,
                    "texts": len(p.texts),
                } | {f"perplexity, {t}": v for t, v, _ in p.texts}
            for p in acc:
                table.setdefault(p.row, {"row": p.row, "family": p.family, "kind": p.group})
                table[p.row] |= {
                    "bytes/token (needle)": p.x,
                    "needle accuracy": p.y,
                    "needles answered (95 % interval over positions)": positions(
                        dict(p.outcomes)
                    ).text(),
                    "needles a depth": p.needles,
                }
            kinds = {"full": "full cache", **GROUPS}
            st.dataframe(
                pd.DataFrame([{**r, "kind": kinds[r["kind"]]} for r in table.values()]),
                hide_index=True,
                width="stretch",
                key="ec_rows",
                column_config={
                    "needle accuracy": st.column_config.NumberColumn(format="percent"),
                    **{
                        k: st.column_config.NumberColumn(format="%+.1f%%")
                        for k in (
                            "perplexity over the full cache's (mean)",
                            "perplexity over the full cache's, lowest",
                            "perplexity over the full cache's, highest",
                        )
                    },
                    **{
                        f"perplexity, {t}": st.column_config.NumberColumn(format="%.2f")
                        for t in texts
                    },
                    "bytes/token (T = 2,048)": st.column_config.NumberColumn(format="%.0f"),
                    "bytes/token (needle)": st.column_config.NumberColumn(format="%.0f"),
                },
            )
        st.page_link(pages.NEEDLE_GRID, label="The needle grid: every cell", icon=":material/apps:")


painted.first_figure_first("evict-or-compress", rest)
