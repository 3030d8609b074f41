"""The real model's figures: grouped bars per layer, where each layer's attention goes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .base import NEUTRAL_LINE, ORACLE_COLOUR, base_layout, by_arguments, make_figure

# -- the real model --------------------------------------------------------------------------------
#: Where attention goes, layer by layer: the sinks StreamingLLM pins, the recent band every policy
#: keeps, and the middle where H2O's heavy hitters live.
REGION_COLOURS = {"sink": "#F28E2B", "recent": "#2CA58D", "middle": "#3D9DF3"}


@by_arguments
def grouped_bars(
    *,
    categories: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float]]],
    title: str,
    xtitle: str,
    ytitle: str,
    marks: tuple[str, Sequence[float]] | None = None,
    height: int = 400,
) -> go.Figure:
    """One group of bars per category, one bar per series (label, colour, values), values printed
    above; ``marks`` (label, values) adds a dotted marker per category (e.g. the oracle bound)."""
    data: list[dict] = []
    for label, colour, vals in series:
        data.append(
            {
                "type": "bar",
                "x": list(categories),
                "y": np.asarray(vals, dtype=np.float64),
                "name": label,
                "marker": {"color": colour},
                "text": [f"{v:.2f}" for v in vals],
                "textposition": "outside",
                "hovertemplate": f"%{{x}}<br>{label}: %{{y:.4f}}<extra></extra>",
            }
        )
    if marks is not None:
        label, vals = marks
        data.append(
            {
                "type": "scatter",
                "x": list(categories),
                "y": np.asarray(vals, dtype=np.float64),
                "mode": "markers",
                "marker": {
                    "symbol": "line-ew-open",
                    "size": 44,
                    "color": ORACLE_COLOUR,
                    "line": {"width": 3, "color": ORACLE_COLOUR},
                },
                "name": label,
                "hovertemplate": f"%{{x}}<br>{label}: %{{y:.4f}}<extra></extra>",
            }
        )
    layout = base_layout(title, height, xtitle, ytitle, barmode="group")
    layout["yaxis"]["range"] = [0, 1.12]
    return make_figure(data, layout, legend_width=900)


@by_arguments
def attention_shares(
    *,
    layers: Sequence[int],
    sink: Sequence[float],
    recent: Sequence[float],
    middle: Sequence[float],
    n_sinks: int,
    n_recent: int,
    title: str,
    height: int = 420,
) -> go.Figure:
    """Per layer, the share of attention on sinks / the recent band / the middle, stacked to 1."""
    parts = (
        ("sink", f"sinks (positions 0–{n_sinks - 1})", sink),
        ("recent", f"recent {n_recent} positions", recent),
        ("middle", "the middle (everything else)", middle),
    )
    data = [
        {
            "type": "bar",
            "x": np.asarray(layers),
            "y": np.asarray(vals, dtype=np.float32),
            "name": label,
            "marker": {"color": REGION_COLOURS[key], "line": {"width": 0}},
            "hovertemplate": f"layer %{{x}}<br>{label}: %{{y:.3f}}<extra></extra>",
        }
        for key, label, vals in parts
    ]
    layout = base_layout(
        title, height, "layer", "share of attention (mean over queries)", barmode="stack"
    )
    layout["bargap"] = 0.15
    layout["yaxis"]["range"] = [0, 1]
    layout["xaxis"] |= {"tickmode": "linear", "dtick": 1 if len(layers) <= 32 else 5}
    return make_figure(data, layout, legend_width=900)


@by_arguments
def layer_mass(
    *,
    layers: Sequence[int],
    series: Sequence[tuple[str, str, Sequence[float]]],
    oracle: Sequence[float] | None,
    title: str,
    ytitle: str,
    marked: Sequence[int] = (),
    marked_label: str = "",
    height: int = 420,
) -> go.Figure:
    """A metric per layer, one line per policy (label, colour, values), the oracle dotted;
    ``marked`` layers get a dotted vertical line (e.g. the shipped traces' layers)."""
    x = np.asarray(layers)
    data: list[dict] = [
        {
            "type": "scatter",
            "x": x,
            "y": np.asarray(vals, dtype=np.float64),
            "mode": "lines+markers",
            "line": {"color": colour, "width": 3},
            "marker": {"size": 7},
            "name": label,
            "hovertemplate": f"{label}<br>layer %{{x}}: %{{y:.4f}}<extra></extra>",
        }
        for label, colour, vals in series
    ]
    if oracle is not None:
        data.append(
            {
                "type": "scatter",
                "x": x,
                "y": np.asarray(oracle, dtype=np.float64),
                "mode": "lines",
                "line": {"color": ORACLE_COLOUR, "width": 2, "dash": "dot"},
                "name": "oracle bound",
                "hovertemplate": "oracle<br>layer %{x}: %{y:.4f}<extra></extra>",
            }
        )
    shapes = [
        {
            "type": "line",
            "x0": m,
            "x1": m,
            "y0": 0,
            "y1": 1,
            "yref": "paper",
            "line": {"color": NEUTRAL_LINE, "width": 1, "dash": "dot"},
            "name": marked_label,
            "legendgroup": "marked",
            "showlegend": i == 0 and bool(marked_label),
        }
        for i, m in enumerate(marked)
    ]
    layout = base_layout(title, height, "layer", ytitle, shapes=shapes)
    layout["yaxis"]["range"] = [0, 1.02]
    layout["xaxis"] |= {
        "tickmode": "linear",
        "dtick": 1 if len(layers) <= 32 else 5,
        "range": [min(layers, default=0) - 0.5, max(layers, default=0) + 0.5],
    }
    return make_figure(data, layout, legend_width=900)
