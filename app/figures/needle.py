"""The needle pages' figures: the needle grid's heatmaps, the frontier (a metric against KV bytes
per token, one line per family) and the per-layer share of heads that held the needle.

Built like :mod:`app.figures` (plain dicts, numpy arrays, its layout and colours). Labels come
from the result files: every one is escaped before Plotly (which renders some HTML) sees it.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Sequence

import numpy as np
import plotly.graph_objects as go

from app.needle import claims
from app.needle.frontier import (
    GROUPS,
    PPL_TOKENS,
    TOLERANCE,
    FigureLine,
    Point,
    figure_lines,
    full_of,
)
from h2o.alloc import ALLOCATORS
from h2o.model.caches import CACHE_KINDS

from .base import (
    FONT,
    NEUTRAL_LINE,
    POLICY_COLOURS,
    base_layout,
    by_arguments,
    cell_text,
    make_figure,
    policy_colour,
)
from .budget import GRID_SCALE

#: KIVI-style quantized caches, by bit width (a hue no policy uses); combinations take their
#: policy's colour with a dashed line.
BITS_COLOURS = {2: "#E15759", 4: "#C9A227", 8: "#59A14F", 16: "#76B7B2"}


def alloc_dash(allocation: str | None) -> str:
    """The dash of an allocation's line: the allocator's own (:attr:`h2o.alloc.Allocator.dash`),
    solid for none or one this server does not know."""
    cls = ALLOCATORS.get(allocation or "")
    return cls.dash if cls is not None else "solid"


def method_mark(kind: str) -> tuple[str, str] | None:
    """The colour and marker of a kind of cache that is a method of its own (SnapKV, K-norm,
    KVzip, Expected Attention, Quest: each declares them on its class), or None."""
    cls = CACHE_KINDS.get(kind)
    colour = cls.declares("colour") if cls is not None else None
    return (str(colour), cls.marker) if colour and cls is not None else None


#: A line of the frontier (``app.needle.frontier.figure_lines`` builds them from the rows' labels).
FrontierLine = FigureLine


def _e(text: object) -> str:
    return html.escape(str(text), quote=False)


def family_style(
    group: str, method: str | None, bits: int | None, allocation: str | None, sinks: int
) -> dict:
    """Colour, dash and marker of a family's line: eviction in its method's colour (an
    allocation dashed its own way), KIVI-style in its bit width's colour (the variant keeping
    fp16 sinks with an open marker), combinations dashed."""
    if group == "compress":
        colour = BITS_COLOURS.get(bits or 16, NEUTRAL_LINE)
        return {"color": colour, "dash": "solid", "symbol": "diamond-open" if sinks else "diamond"}
    name = method or ""
    colour, symbol = method_mark(name) or (POLICY_COLOURS.get(name), "circle")
    colour = colour or policy_colour(name)
    if group == "both":
        return {"color": colour, "dash": "dash", "symbol": "star"}
    return {"color": colour, "dash": alloc_dash(allocation), "symbol": symbol}


def perplexity_frontier(
    points: Sequence[Point], texts: Sequence[str], *, limit: float | None, **layout: object
) -> go.Figure:
    """The frontier's perplexity chart: each row's perplexity over the full cache's on the same
    text (the mean over ``texts``, a bar from the lowest to the highest) against KV bytes per
    token, the full cache's row as the reference line (:func:`frontier`'s other arguments in
    ``layout``)."""
    over = texts[0] if len(texts) == 1 else f"{len(texts)} texts"
    return frontier(
        lines=figure_lines(points, claims.ppl_hover),
        full=full_of(points),
        limit=limit,
        title=f"Perplexity against the full cache's, by KV memory — {PPL_TOKENS:,} tokens of "
        f"{over} (lower is better)",
        bar=claims.bar_legend(texts),
        ytitle="perplexity over the full cache's (same text)",
        yformat="%{y:+.1%}",
        ytickformat="+.0%",
        **layout,
    )


@by_arguments
def frontier(
    *,
    lines: Sequence[FrontierLine],
    full: tuple[float, float] | None,
    limit: float | None,
    title: str,
    ytitle: str,
    yformat: str,
    height: int = 440,
    subtitle: str = "",
    share: bool = False,
    ytickformat: str | None = None,
    tolerance: float = TOLERANCE,
    legend_width: int = 900,
    plot_height: int | None = None,
    named: Collection[str] | None = None,
    bar: str | None = None,
) -> go.Figure:
    """A metric (y) against KV bytes per token (x, log scale): each family's measured rows as
    points (no line: nothing was measured between them), a line with a spread with a bar from
    each point's lowest to its highest value (over texts); the full cache as a dotted
    horizontal line; ``limit`` as a vertical line (the memory asked about) in a band of
    ``tolerance`` either side (the rows counted as at that memory); ``share``: y is a share,
    drawn from 0 to 100 %; ``ytickformat``: else, the y axis's tick format. ``legend_width``:
    the width its legend is laid out in, at the narrowest it is shown; ``plot_height``: the plot
    area's height, the figure growing with its legend (``height`` is then not used).
    ``named``: the families the legend names (the ones a sentence beside the chart speaks of),
    the others drawn as ever but listed one entry a group ("12 other eviction"; a point's hover
    names its row, a click on the entry hides or shows the group) — a legend a room can read;
    None: every family named. ``bar``: the legend's entry for the lines' bars (what they span),
    always named."""
    data: list[dict] = []
    others: dict[str, int] = {}
    for ln in lines:
        family, group = ln.family, ln.group
        style = family_style(group, ln.method, ln.bits, ln.allocation, ln.sinks)
        if named is not None and family not in named:
            others[group] = others.get(group, 0) + 1
        ys = np.asarray(ln.ys, dtype=np.float64)
        data.append(
            {
                "type": "scatter",
                "x": np.asarray(ln.xs, dtype=np.float64),
                "y": ys,
                "mode": "markers",
                "name": _e(family),
                "marker": {
                    "symbol": style["symbol"],
                    "size": 10,
                    "color": style["color"],
                    "line": {"color": "#FFFFFF", "width": 0.5},
                },
                "text": [_e(h) for h in ln.hover],
                "hovertemplate": f"%{{text}}<br>%{{x:,.0f}} bytes/token: {yformat}<extra></extra>",
            }
            | (_bars(ys, ln.spread, style["color"]) if ln.spread is not None else {})
            | (
                {"showlegend": False, "legendgroup": f"other {group}"}
                if named is not None and family not in named
                else {}
            )
        )
    for group, n in others.items():  # one legend entry for a group's unnamed families, no points
        data.append(
            {
                "type": "scatter",
                "x": [None],
                "y": [None],
                "mode": "markers",
                "marker": {"symbol": "circle-open", "size": 10, "color": NEUTRAL_LINE},
                # the group's name without its gloss: "selection", not "selection (every …)"
                "name": f"{n} other {GROUPS.get(group, group).split(' (')[0]}",
                "legendgroup": f"other {group}",
                "hoverinfo": "skip",
            }
        )
    if bar is not None:  # a legend entry, no points: what a bar is, where the symbols are read
        data.append(
            {
                "type": "scatter",
                "x": [None],
                "y": [None],
                "mode": "markers",
                "marker": {
                    "symbol": "line-ns-open",
                    "size": 14,
                    "color": NEUTRAL_LINE,
                    "line": {"width": 2},
                },
                "name": _e(bar),
                "hoverinfo": "skip",
            }
        )
    shapes = []
    if full is not None:
        fx, fy = full
        data.append(
            {
                "type": "scatter",
                "x": [fx],
                "y": [fy],
                "mode": "markers",
                "marker": {"symbol": "square", "size": 11, "color": NEUTRAL_LINE},
                "name": "full cache",
                "hovertemplate": f"full cache<br>%{{x:,.0f}} bytes/token: {yformat}<extra></extra>",
            }
        )
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": fy,
                "y1": fy,
                "line": {"color": NEUTRAL_LINE, "dash": "dot", "width": 1.5},
            }
        )
    if limit is not None:
        shapes.append(
            {
                "type": "rect",
                "yref": "paper",
                "x0": limit * (1 - tolerance),
                "x1": limit * (1 + tolerance),
                "y0": 0,
                "y1": 1,
                "fillcolor": "#C9A227",
                "opacity": 0.15,
                "line": {"width": 0},
                "name": f"equal memory: within {tolerance:.0%} of it",
                "layer": "below",
            }
        )
        shapes.append(
            {
                "type": "line",
                "yref": "paper",
                "x0": limit,
                "x1": limit,
                "y0": 0,
                "y1": 1,
                "line": {"color": "#C9A227", "dash": "dash", "width": 2},
                "name": f"the memory asked about: {limit:,.0f} bytes/token",
                "showlegend": True,
            }
        )
    layout = base_layout(title, height, "KV bytes per token (log scale)", ytitle, subtitle)
    layout["xaxis"]["type"] = "log"
    if share:
        layout["yaxis"] |= {"range": [-0.03, 1.05], "tickformat": ".0%"}
    elif ytickformat is not None:
        layout["yaxis"]["tickformat"] = ytickformat
    layout["shapes"] = shapes
    # a legend entry's character is about 6.1 px at the legend's font: 6.5 keeps to the safe side
    return make_figure(
        data, layout, legend_width=legend_width, char_px=6.5, plot_height=plot_height
    )


@by_arguments
def needle_heatmaps(
    *,
    panels: Sequence[tuple[str, np.ndarray, np.ndarray]],
    lengths: Sequence[int],
    depths: Sequence[int],
    zrange: tuple[float, float],
    colour_title: str,
    value_format: str,
    title: str,
    height: int = 360,
    clickable: bool = False,
) -> go.Figure:
    """Length (x) × depth (y) per row, side by side on ONE colour axis; ``panels``: (label,
    values ``(depths, lengths)`` with NaN where absent, needles per cell).

    ``clickable``: a click on a cell selects it (plotly.js fires no click on a heatmap, so an
    invisible marker sits on each computed cell, after the heatmaps, with the cell's tooltip
    and ``customdata`` ``[panel, length, depth]``; the nearest marker is the cell under the
    pointer, as the cells form a grid)."""
    n = max(1, len(panels))
    gap = 0.03
    # Rows tall enough for their printed values, however many depths the file holds.
    height = max(height, 140 + ROW_PX * len(depths))
    w = (1 - gap * (n - 1)) / n
    data: list[dict] = []
    layout = base_layout(title, height, "", "")
    xs = [f"{x:,}" for x in lengths]
    ys = [f"{d}%" for d in depths]
    overlay: list[dict] = []
    for i, (label, z, counts) in enumerate(panels):
        ax = "" if i == 0 else str(i + 1)
        lo, hi = round(i * (w + gap), 6), round(min(1.0, i * (w + gap) + w), 6)
        z = np.asarray(z, dtype=np.float64)
        data.append(
            {
                "type": "heatmap",
                "z": z,
                "x": xs,
                "y": ys,
                "xaxis": f"x{ax}",
                "yaxis": f"y{ax}",
                "coloraxis": "coloraxis",
                "customdata": np.asarray(counts, dtype=np.int64),
                "xgap": 2,
                "ygap": 2,
                "hovertemplate": f"{_e(label)}<br>%{{x}} tokens, needle at %{{y}}<br>"
                f"{_e(colour_title)}: %{{z:{value_format}}} over %{{customdata}} "
                "needle(s)<extra></extra>",
            }
        )
        labels = [[_cell_label(v, value_format) if np.isfinite(v) else "" for v in r] for r in z]
        data.append(
            cell_text(
                z,
                xs,
                ys,
                labels,
                zrange=zrange,
                scale=GRID_SCALE,
                size=FONT - 3,
                axes=(f"x{ax}", f"y{ax}"),
            )
        )
        if clickable:
            data[-2]["hoverinfo"] = "skip"  # the marker above it carries the tooltip
            overlay.append(_cell_markers(i, label, z, counts, lengths, depths, ax))
        layout[f"xaxis{ax}"] = {
            "domain": [lo, hi],
            "anchor": f"y{ax}",
            "type": "category",
            "title": {"text": "prompt tokens", "font": {"size": FONT - 2}},
            "tickfont": {"size": FONT - 3},
        }
        layout[f"yaxis{ax}"] = {
            "anchor": f"x{ax}",
            "type": "category",
            "autorange": "reversed",
            "showticklabels": i == 0,
            "title": {"text": "needle depth" if i == 0 else ""},
            "tickfont": {"size": FONT - 3},
        }
        layout.setdefault("annotations", []).append(
            {
                "text": _e(label),
                "xref": "paper",
                "yref": "paper",
                "x": (lo + hi) / 2,
                "y": 1.0,
                "yanchor": "bottom",
                "xanchor": "center",
                "showarrow": False,
                "font": {"size": FONT - 1},
            }
        )
    layout["coloraxis"] = {
        "colorscale": GRID_SCALE,
        "cmin": zrange[0],
        "cmax": zrange[1],
        "colorbar": {
            "title": {"text": _e(colour_title + _cell_unit(value_format)), "side": "right"},
            "thickness": 14,
            **({"tickformat": value_format} if value_format.endswith("%") else {}),
        },
    }
    if overlay:
        tip = f"{_e(colour_title)}: %{{customdata[3]:{value_format}}} over %{{customdata[4]}}"
        for tr in overlay:
            tr["hovertemplate"] = (
                f"{tr.pop('_label')}<br>%{{x}} tokens, needle at %{{y}}<br>{tip} needle(s)"
                "<br>click to open this cell below<extra></extra>"
            )
        data += overlay
        layout["hovermode"] = "closest"
        layout["hoverdistance"] = 200  # the nearest cell's marker, wherever in the cell
        layout["clickmode"] = "event+select"
    return make_figure(data, layout)


def _bars(ys: np.ndarray, spread: tuple[Sequence[float], Sequence[float]], colour: str) -> dict:
    """A line's error bars from each point's lowest to highest value (its range over texts);
    none drawn where every point is a single value."""
    lo, hi = np.asarray(spread[0], dtype=np.float64), np.asarray(spread[1], dtype=np.float64)
    return {
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": hi - ys,
            "arrayminus": ys - lo,
            "color": colour,
            "thickness": 1.5,
            "width": 4,
            "visible": bool(np.any(hi > lo)),
        }
    }


#: A heatmap row's height in pixels, at least: room for a cell's printed value.
ROW_PX = 20


def _cell_label(v: float, value_format: str) -> str:
    """A cell's printed value. A share is printed in percent without its sign ("100", "67"):
    the sign made four-character labels run together across a panel's narrow cells ("100%100%");
    the colour bar's title says the unit."""
    if value_format.endswith("%"):
        return format(v * 100, value_format[:-1] + "f")
    return format(v, value_format)


def _cell_unit(value_format: str) -> str:
    return " (cells in %)" if value_format.endswith("%") else ""


def _cell_markers(
    i: int,
    label: str,
    z: np.ndarray,
    counts: np.ndarray,
    lengths: Sequence[int],
    depths: Sequence[int],
    ax: str,
) -> dict:
    """Panel ``i``'s click targets: one invisible marker per computed cell."""
    cells = [
        (d, k) for d in range(len(depths)) for k in range(len(lengths)) if np.isfinite(z[d, k])
    ]
    cnt = np.asarray(counts)
    return {
        "type": "scatter",
        "mode": "markers",
        "x": [f"{lengths[k]:,}" for _, k in cells],
        "y": [f"{depths[d]}%" for d, _ in cells],
        "xaxis": f"x{ax}",
        "yaxis": f"y{ax}",
        "marker": {"size": 24, "opacity": 0, "symbol": "square"},
        "customdata": [
            [i, int(lengths[k]), int(depths[d]), float(z[d, k]), int(cnt[d, k])] for d, k in cells
        ],
        "showlegend": False,
        "name": "",
        "_label": _e(label),
    }


@by_arguments
def held_bars(*, held: Sequence[float], title: str, height: int = 300) -> go.Figure:
    """Per layer, the share of its KV heads whose cache still held every needle token."""
    h = np.asarray(held, dtype=np.float64)
    data = [
        {
            "type": "bar",
            "x": np.arange(h.size),
            "y": h,
            "marker": {"color": "#3D9DF3"},
            "name": "share of the layer's KV heads holding the needle",
            "hovertemplate": "layer %{x}: %{y:.0%} of its KV heads<extra></extra>",
        }
    ]
    layout = base_layout(title, height, "layer", "share of KV heads")
    layout["yaxis"]["range"] = [0, 1.05]
    layout["yaxis"]["tickformat"] = ".0%"
    return make_figure(data, layout, legend_width=900)
