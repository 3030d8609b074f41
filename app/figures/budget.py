"""The figures of "Where should the budget go?": grids of heads and of their budgets.

Built like :mod:`app.figures` (plain dicts, numpy arrays, its layout and colours): panels that
sit side by side share one colour axis, so a colour means the same number in each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .base import (
    FONT,
    ORACLE_COLOUR,
    base_layout,
    by_arguments,
    cell_text,
    make_figure,
    policy_colour,
)

#: A sequential scale that reads on light and dark pages alike (low = dark, high = bright).
GRID_SCALE = "Viridis"


def _stacked_axes(n: int, gap: float = 0.09) -> list[tuple[float, float]]:
    """``n`` vertical domains, top first, with ``gap`` between them."""
    h = (1 - gap * (n - 1)) / n
    return [
        (max(0.0, round(1 - i * (h + gap) - h, 6)), min(1.0, round(1 - i * (h + gap), 6)))
        for i in range(n)
    ]


def _axis_id(i: int, n: int) -> str:
    """Panel ``i`` of ``n`` (top first) → its axes' suffix: the bottom panel, which carries the
    x-axis title, is the figure's main axes (``x``/``y``)."""
    return "" if i == n - 1 else str(i + 2)


def _panel(
    layout: dict,
    i: int,
    n: int,
    domain: tuple[float, float],
    shape: tuple[int, int],
    ytitle: str,
    label: str,
) -> str:
    """Axes of stacked panel ``i`` of ``n`` (layers along x, heads down y, only the bottom one
    with tick labels and the x title) and its label above it; returns the axes' suffix."""
    ax = _axis_id(i, n)
    n_layers, n_heads = shape
    last = i == n - 1
    layout[f"xaxis{ax}"] = {
        "anchor": f"y{ax}",
        "tickmode": "linear",
        "dtick": 1 if n_layers <= 32 else 5,
        "tickfont": {"size": FONT - 3},
        "showticklabels": last,
        "title": {"text": "layer" if last else ""},
    }
    layout[f"yaxis{ax}"] = {
        "domain": list(domain),
        "anchor": f"x{ax}",
        "tickvals": list(range(n_heads)),
        "tickfont": {"size": FONT - 4},
        "title": {"text": ytitle, "font": {"size": FONT - 3}},
        "autorange": "reversed",
    }
    layout.setdefault("annotations", []).append(
        {
            "text": label,
            "xref": "paper",
            "yref": "paper",
            "x": 0,
            "y": domain[1],
            "yanchor": "bottom",
            "xanchor": "left",
            "showarrow": False,
            "font": {"size": FONT},
        }
    )
    return ax


@by_arguments
def head_shares(
    *,
    panels: Sequence[tuple[str, np.ndarray]],
    group_size: int,
    title: str,
    height: int = 620,
) -> go.Figure:
    """Per layer (x) and query head (y), one panel per share (label, ``(layers, heads)``
    array in [0, 1]), stacked, on one colour axis; the KV groups are marked on the y axis."""
    data: list[dict] = []
    layout = base_layout(title, height, "", "")
    domains = _stacked_axes(len(panels))
    for i, ((label, z), (lo, hi)) in enumerate(zip(panels, domains, strict=True)):
        z = np.asarray(z, dtype=np.float32)
        n_layers, n_heads = z.shape
        ax = _panel(layout, i, len(panels), (lo, hi), z.shape, "query head", label)
        data.append(
            {
                "type": "heatmap",
                "z": z.T,
                "x": np.arange(n_layers),
                "y": np.arange(n_heads),
                "xaxis": f"x{ax}",
                "yaxis": f"y{ax}",
                "coloraxis": "coloraxis",
                "customdata": (np.arange(n_heads) // group_size)[:, None].repeat(n_layers, 1),
                "hovertemplate": f"layer %{{x}}, query head %{{y}} (KV head %{{customdata}})"
                f"<br>{label}: %{{z:.2f}}<extra></extra>",
            }
        )
    layout["coloraxis"] = {
        "colorscale": GRID_SCALE,
        "cmin": 0,
        "cmax": 1,
        "colorbar": {"title": {"text": "share of attention", "side": "right"}, "thickness": 14},
    }
    layout["margin"] = {"l": 70, "r": 20, "b": 50}
    return make_figure(data, layout)


@by_arguments
def allocation_grids(
    *,
    panels: Sequence[tuple[str, np.ndarray, np.ndarray | None]],
    title: str,
    height: int = 560,
) -> go.Figure:
    """Per layer (x) and KV head (y), one panel per allocator (label, ``(layers, kv_heads)``
    budgets, optional classes — a streaming head is marked ``s``), each cell printed, on one
    colour axis from 0 to the largest budget."""
    data: list[dict] = []
    layout = base_layout(title, height, "", "")
    domains = _stacked_axes(len(panels), gap=0.1)
    top = max(int(np.max(b)) for _, b, _ in panels)
    for i, ((label, budgets, kinds), (lo, hi)) in enumerate(zip(panels, domains, strict=True)):
        b = np.asarray(budgets)
        n_layers, n_heads = b.shape
        text = b.astype(str)
        if kinds is not None:
            text = np.where(np.asarray(kinds) == "retrieval", text, np.char.add(text, "s"))
        ax = _panel(layout, i, len(panels), (lo, hi), b.shape, "KV head", label)
        data.append(
            {
                "type": "heatmap",
                "z": b.T.astype(np.float32),
                "x": np.arange(n_layers),
                "y": np.arange(n_heads),
                "text": text.T.tolist(),
                "xaxis": f"x{ax}",
                "yaxis": f"y{ax}",
                "coloraxis": "coloraxis",
                "xgap": 1,
                "ygap": 1,
                "hovertemplate": f"{label}<br>layer %{{x}}, KV head %{{y}}: %{{text}} slots"
                "<extra></extra>",
            }
        )
        data.append(
            cell_text(
                b.T,
                np.arange(n_layers),
                np.arange(n_heads),
                text.T.tolist(),
                zrange=(0, top),
                scale=GRID_SCALE,
                size=FONT - 5,
                axes=(f"x{ax}", f"y{ax}"),
            )
        )
    layout["coloraxis"] = {
        "colorscale": GRID_SCALE,
        "cmin": 0,
        "cmax": top,
        "colorbar": {"title": {"text": "slots", "side": "right"}, "thickness": 14},
    }
    layout["margin"] = {"l": 70, "r": 20, "b": 50}
    return make_figure(data, layout)


@by_arguments
def allocation_perplexity(
    *,
    allocations: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    full: float,
    title: str,
    height: int = 400,
) -> go.Figure:
    """Perplexity per allocation (x), one bar per policy (name, label, values; None = not run)
    in its policy's colour, the full cache as a dotted line."""
    data: list[dict] = []
    for name, label, vals in series:
        y = np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
        data.append(
            {
                "type": "bar",
                "x": list(allocations),
                "y": y,
                "name": label,
                "marker": {"color": policy_colour(name)},
                "text": ["" if v is None else f"{v:.2f}" for v in vals],
                "textposition": "outside",
                "hovertemplate": f"%{{x}}<br>{label}: perplexity %{{y:.3f}}<extra></extra>",
            }
        )
    layout = base_layout(
        title, height, "allocation (same total KV memory)", "perplexity (lower is better)"
    )
    layout["shapes"] = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "yref": "y",
            "y0": full,
            "y1": full,
            "line": {"color": ORACLE_COLOUR, "dash": "dot", "width": 2},
            "name": f"full cache ({full:.2f})",
            "showlegend": True,
        }
    ]
    layout["barmode"] = "group"
    tops = [v for _, _, vals in series for v in vals if v is not None]
    layout["yaxis"]["range"] = [0, 1.15 * max([full, *tops])]
    return make_figure(data, layout, legend_width=900)
