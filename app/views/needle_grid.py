"""The needle grid: whether SmolLM2-135M still answers a fact hidden in a long text, at every
prompt length × needle depth, with each cache — the full cache, eviction policies at a budget,
KIVI-style quantized caches — side by side on one colour scale.

The page shows ``traces/results/needle-grid.jsonl`` (computed ahead by ``python -m h2o needle``;
possibly partial) and says what it shows. A cell shows its question, the expected and the
produced answer as plain text, and which share of each layer's KV heads still held the
needle at the question; "Recompute this cell" runs it again through the model queue. Every
sentence with a number is built by :mod:`app.needle.claims` from the numbers shown.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import a11y, charts, figures, painted, state
from app.lesson import needle as lesson_needle
from app.needle import claims, family, grid, runs, shipped
from app.needle.grid import METRIC_BUTTONS, METRICS
from h2o.needle.results import derived
from h2o.stats import positions

a11y.focus_ring()  # the keyboard's focus, seen on every control

ss = st.session_state
ROWS, METRIC = "ng_rows", "ng_metric"
CELL_ROW, CELL_LEN, CELL_DEPTH, CELL_NEEDLE = "ng_cell_row", "ng_cell_len", "ng_cell_depth", "ng_n"
FRESH, GO, CLICKED = "_ng_fresh", "_ng_go", "_ng_clicked"
#: The rows the page opens on when the file has them (else the first rows it has).
#: The rows the findings compare: H2O as its authors split the budget, in both modes.
DEFAULT_ROWS = ("full", "h2o@256:w50%", "h2o@256:w50%:prefill", "snapkv@256", "kivi4")
MAX_ROWS = 6


def _valid(name: str, options: list, default: object) -> None:
    """A stored choice the data no longer offers falls back to ``default``."""
    if ss.get(name) not in options:
        ss[name] = default


st.title("The needle grid")
st.markdown(
    "One fact — *“The code of the green locker is 9237.”* — hidden at a depth of a long text, "
    "and asked at its end. Each heatmap is one cache: the full cache, an eviction policy at a "
    "budget of slots per head, or a **KIVI-style** quantized cache (simulated in numpy: the "
    "model attends to dequantized keys and values). Across: the prompt's length; down: where "
    "the needle sits. All panels share one colour scale."
)
state.publish([])  # this page keeps its settings in the session, not the URL

loaded, path = shipped.grid()
if not shipped.report(loaded, path, "needle grid"):
    st.stop()
cells = loaded.records
# What every student's view of this version of the file shares, computed once per server.
rows, fams, lens, deps, full_note = derived(
    cells,
    "needle grid page",
    lambda: (
        grid.rows(cells),
        grid.families(cells),
        grid.lengths(cells),
        grid.depths(cells),
        claims.full_note(cells),
    ),
)
planned = (loaded.meta or {}).get("rows")
planned = [str(r) for r in planned] if isinstance(planned, list) else None
st.markdown(full_note)

c1, c2 = st.columns([2.3, 1.7], vertical_alignment="bottom")
# A first visit, or rows the file no longer has, open on the defaults; an empty choice stays.
asked = ss.get(ROWS)
stored = [r for r in asked if r in rows] if isinstance(asked, list) else []
if not isinstance(asked, list) or (asked and not stored):
    stored = grid.pick(rows, DEFAULT_ROWS, len(DEFAULT_ROWS))
ss[ROWS] = stored
chosen = c1.multiselect(
    "Rows: a cache each (family — row label)",
    rows,
    format_func=lambda r: f"{fams[r]} — {r}",
    max_selections=MAX_ROWS,
    **state.mirror(ROWS, ss[ROWS]),
)
_valid(METRIC, list(METRICS), "correct")
metric = c2.segmented_control(
    "Colour by",
    list(METRICS),
    format_func=METRIC_BUTTONS.get,
    required=True,
    help="answered right: the share of a cell's needles whose greedy answer matched; "
    "log-prob: the mean log-probability of the expected answer, teacher-forced",
    **state.mirror(METRIC, "correct"),
)
if not chosen:
    st.info("Choose at least one row to draw.", icon=":material/info:")
    st.stop()


def view(chosen: tuple[str, ...], metric: str) -> tuple:
    """The heatmaps and sentences of ``chosen`` rows coloured by ``metric``."""
    zrange = grid.colour_range(cells, list(chosen), metric)
    fmt = ".0%" if metric == "correct" else ".2f"
    panels = [(r, *grid.matrix(cells, r, lens, deps, metric)) for r in chosen]
    scores = grid.scores(cells, list(chosen))
    fig = figures.needle_heatmaps(
        panels=panels,
        lengths=lens,
        depths=deps,
        zrange=zrange,
        colour_title=METRICS[metric],
        value_format=fmt,
        title=f"{METRICS[metric].capitalize()}, per prompt length and needle depth",
        clickable=True,
    )
    shown = claims.shown_sentence(list(chosen), rows, cells, planned)
    return fig, shown, scores, claims.scores_sentence(scores, cells)


fig, shown_text, scores, scores_text = derived(
    cells,
    ("needle grid view", tuple(chosen), metric, tuple(planned or ())),
    lambda: view(tuple(chosen), metric),
)
event = charts.show(
    fig,
    key="ng_heatmaps",
    describe=[shown_text, scores_text],
    on_select="rerun",
    selection_mode="points",
)
# A new click opens its cell below. The selection outlives a change of rows, so only a click
# that differs from the last one applied counts.
picked = grid.clicked(event.selection.points if event else None, len(chosen))
if picked is None:
    ss.pop(CLICKED, None)
elif picked != ss.get(CLICKED):
    ss[CLICKED] = picked
    ss[CELL_ROW], ss[CELL_LEN], ss[CELL_DEPTH] = chosen[picked[0]], picked[1], picked[2]
st.caption("Click a cell to open it under *One cell* below.")
st.markdown(f"{shown_text}\n\n{scores_text}")  # one element, a paragraph each


def rest() -> None:
    """Below the grid: one cell, opened."""
    bytes_per_token = {
        r: sum(c.kv_bytes / c.tokens for c in cs) / len(cs)
        for r in chosen
        if (cs := grid.of_row(cells, r))
    }
    # the interval is over positions (a length and depth), not cells: a position's needles move
    # together (h2o.stats)
    by_position = {
        r: positions({(c.length, c.depth, c.needle): c.correct for c in cs})
        for r in chosen
        if (cs := grid.of_row(cells, r))
    }
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "row": s.row,
                    "family": s.family,
                    "cells": s.cells,
                    "right": s.right,
                    "accuracy": s.accuracy,
                    "positions": (ci := by_position[s.row]).n,
                    "95 % interval, low": ci.low,
                    "95 % interval, high": ci.high,
                    "mean log-prob": s.mean_logprob,
                    "KV bytes per token (mean over cells)": bytes_per_token[s.row],
                }
                for s in scores
            ]
        ),
        hide_index=True,
        width="stretch",
        key="ng_scores",
        column_config={
            "accuracy": st.column_config.NumberColumn(format="percent"),
            "95 % interval, low": st.column_config.NumberColumn(
                format="percent",
                help="Wilson score interval over positions (each a length and depth, its share "
                "of needles answered one observation) of the mean share answered",
            ),
            "95 % interval, high": st.column_config.NumberColumn(format="percent"),
            "mean log-prob": st.column_config.NumberColumn(format="%.2f"),
            "KV bytes per token (mean over cells)": st.column_config.NumberColumn(format="%.0f"),
        },
    )

    shipped.provenance(loaded, "needle grid")

    family_text, family_how = derived(
        cells,
        "family sentences",
        lambda: (family.family_sentences(cells), family.how_they_run(cells)),
    )
    if family_text:
        st.subheader("The family since H2O", divider="gray")
        st.markdown(
            "Methods since H2O, each answering one of its limits; choose their rows above to see "
            "their heatmaps. Each is set beside SnapKV on the positions both have: at the same "
            "budget where it reads all it holds; a selection at the SnapKV budget holding about "
            "what a step of it reads, and about what it holds. " + family_how
        )
        st.markdown("\n\n".join(family_text))  # one element, a paragraph each

    # -- one cell ----------------------------------------------------------------------------------
    st.subheader("One cell: the question, the answers, what the cache held", divider="gray")
    c1, c2, c3, c4 = st.columns(4)
    _valid(CELL_ROW, chosen, chosen[0])
    row = c1.selectbox("Row", chosen, **state.mirror(CELL_ROW, chosen[0]))
    row_cells = grid.of_row(cells, row)
    r_lens = sorted({c.length for c in row_cells})
    _valid(CELL_LEN, r_lens, r_lens[-1])
    length = c2.selectbox("Prompt tokens", r_lens, **state.mirror(CELL_LEN, r_lens[-1]))
    r_deps = sorted({c.depth for c in row_cells if c.length == length})
    _valid(CELL_DEPTH, r_deps, r_deps[0])
    depth = c3.selectbox(
        "Needle depth",
        r_deps,
        format_func=lambda d: f"{d} %",
        **state.mirror(CELL_DEPTH, r_deps[0]),
    )
    here = grid.at(cells, row, length, depth)
    needle_ids = [c.needle for c in here]
    _valid(CELL_NEEDLE, needle_ids, needle_ids[0])
    needle = c4.selectbox("Needle", needle_ids, **state.mirror(CELL_NEEDLE, needle_ids[0]))
    cell = next(c for c in here if c.needle == needle)

    st.markdown("**Question** (the prompt's last line):")
    st.text(cell.question)
    a1, a2 = st.columns(2)
    a1.markdown("**Expected:**")
    a1.text(cell.expected)
    a2.markdown(f"**Produced** ({'right' if cell.correct else 'wrong'}, greedy):")
    a2.text(cell.produced if cell.produced.strip() else "(nothing)")
    st.caption(
        f"Teacher-forced log-probability of the expected answer: {cell.logprob:.2f}. "
        f"KV memory held: {cell.kv_bytes:,} bytes ({cell.kv_bytes / cell.tokens:,.0f} per prompt "
        f"token, {cell.tokens:,} tokens). {cell.seconds:.1f} s on the machine that computed "
        "the file."
    )
    held_text = claims.held_sentence(cell.held)
    st.markdown(held_text)
    if cell.held is not None:
        charts.show(
            figures.held_bars(
                held=cell.held,
                title="At the question: share of each layer's KV heads still holding the needle",
            ),
            key="ng_held",
            describe=held_text,
        )

    # -- recompute ---------------------------------------------------------------------------------
    fn = runs.run_cell_function()
    if fn is None:
        st.caption(
            "Recomputing a cell needs `h2o.needle.cells.run_cell`, which this copy of the library "
            "does not have."
        )
    else:
        spec = runs.spec_of(cell)
        key = tuple(spec.values())
        fresh = ss.setdefault(FRESH, {})
        st.button(
            "Recompute this cell on this server",
            key="ng_recompute",
            icon=":material/refresh:",
            on_click=lambda: ss.__setitem__(GO, True),
            help="Runs the model on this cell's prompt under this row's cache, through the model "
            "queue (one job at a time for the whole class; your place in the line is shown).",
        )
        if ss.pop(GO, False):  # the click: the only place this page runs the model
            try:
                fresh[key] = runs.recompute(**spec)
            except Exception as e:  # the model missing, or the library refusing the cell
                st.error(
                    f"The cell was not recomputed: {state.md(e, 300)}", icon=":material/error:"
                )
        got = fresh.get(key)
        if got is not None:
            st.markdown(
                f"**Recomputed on this server** ({'right' if got.get('correct') else 'wrong'}"
                + (
                    f", log-prob {got['logprob']:.2f}"
                    if isinstance(got.get("logprob"), int | float)
                    else ""
                )
                + "). Produced:"
            )
            st.text(str(got.get("produced", "")))

    # -- the second question -----------------------------------------------------------------------
    st.subheader("The second question", divider="gray")
    lesson_needle.followup_section("ng_followup")


painted.first_figure_first("needle-grid", rest)
