"""Policies compared: bars at one budget, curves against recent_window and the budget, and
perplexity against the budget."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .base import (
    NEUTRAL_LINE,
    ORACLE_COLOUR,
    SETTING_COLOUR,
    Curve,
    base_layout,
    by_arguments,
    make_figure,
    policy_colour,
    styled_lines,
)


# -- sweeps and tables -----------------------------------------------------------------------------
@by_arguments
def window_sweep(
    *,
    windows: Sequence[int],
    series: Sequence[tuple[str, str, Sequence[float]]],
    refs: Sequence[tuple[str, str, float]],
    title: str,
    ytitle: str,
    band: int | None = None,
    current: int | None = None,
    height: int = 420,
    subtitle: str = "",
) -> go.Figure:
    """A metric against recent_window per policy (``series``: policy, label, values), reference
    policies (``refs``: policy or "oracle", label, value) as flat dashed lines."""
    data = styled_lines([(p, lab, windows, v) for p, lab, v in series], "recent_window", "%{y:.4f}")
    lo, hi = (min(windows), max(windows)) if windows else (0, 1)
    for policy, label, value in refs:
        colour = ORACLE_COLOUR if policy == "oracle" else policy_colour(policy)
        data.append(
            {
                "type": "scatter",
                "x": [lo, hi],
                "y": [value, value],
                "mode": "lines",
                "line": {
                    "color": colour,
                    "width": 2,
                    "dash": "dot" if policy == "oracle" else "dash",
                },
                "name": f"{label}: {value:.4f}",
                "hovertemplate": f"{label}: {value:.4f} (no recent_window)<extra></extra>",
            }
        )
    shapes = []
    if band is not None:
        shapes.append(
            {
                "type": "line",
                "x0": band,
                "x1": band,
                "y0": 0,
                "y1": 1,
                "yref": "paper",
                "line": {"color": NEUTRAL_LINE, "width": 2, "dash": "dot"},
                "name": f"the trace's recency band ({band})",
                "showlegend": True,
            }
        )
    if current is not None:
        shapes.append(
            {
                "type": "line",
                "x0": current,
                "x1": current,
                "y0": 0,
                "y1": 1,
                "yref": "paper",
                "line": {"color": SETTING_COLOUR, "width": 3, "dash": "dashdot"},
                "name": f"sidebar recent_window ({current})",
                "showlegend": True,
            }
        )
    layout = base_layout(title, height, "recent_window (protected newest slots)", ytitle, subtitle)
    return make_figure(data, layout | {"shapes": shapes})


@by_arguments
def policy_bars(
    *,
    policies: Sequence[str],
    labels: Sequence[str],
    mass: Sequence[float],
    recall: Sequence[float],
    oracle: float,
    top_k: int,
    title: str,
    height: int = 420,
) -> go.Figure:
    """Retained mass (solid) and top-k recall (hatched) per policy, each bar in its policy's
    colour, with the oracle bound on mass."""
    colours = [policy_colour(p) for p in policies]
    # A label's settings on a second line: eight labels fit side by side unrotated, and a
    # rotated row of them took half a projected chart's height.
    labels = [_lines(html.escape(lab, quote=False)) for lab in labels]
    data: list[dict] = []
    for name, values, pattern in (
        ("retained attention mass (solid)", mass, ""),
        (f"top-{top_k} recall (hatched)", recall, "/"),
    ):
        data.append(
            {
                "type": "bar",
                "x": list(labels),
                "y": np.asarray(values, dtype=np.float64),
                "name": name,
                "marker": {
                    "color": colours,
                    "pattern": {"shape": pattern, "fillmode": "overlay", "fgcolor": "white"},
                    "line": {"color": colours, "width": 1.5},
                },
                "text": [f"{v:.3f}" for v in values],
                "textposition": "outside",
                "hovertemplate": f"%{{x}}<br>{name.split(' (')[0]}: %{{y:.4f}}<extra></extra>",
            }
        )
    shapes = [
        {
            "type": "line",
            "xref": "paper",
            "x0": 0,
            "x1": 1,
            "y0": oracle,
            "y1": oracle,
            "line": {"color": ORACLE_COLOUR, "width": 2, "dash": "dot"},
            "name": f"oracle bound on mass ({oracle:.4f})",
            "showlegend": True,
        }
    ]
    layout = base_layout(title, height, "policy", "mean over steps t ≥ budget", barmode="group")
    layout["yaxis"]["range"] = [0, 1.22]  # room for a 1.000 label above its bar
    layout["xaxis"]["tickangle"] = 0
    return make_figure(data, layout | {"shapes": shapes}, legend_width=900)


def _lines(label: str) -> str:
    """``"H2O (recent_window=32)"`` as ``"H2O<br>recent_window<br>=32"``: the settings on lines
    of their own, so eight labels side by side at 16 px do not run into each other."""
    name, sep, settings = label.partition(" (")
    return f"{name}<br>{settings.removesuffix(')').replace('=', '<br>=')}" if sep else label


@by_arguments
def budget_curves(
    *,
    curves: Sequence[Curve],
    oracle: dict[int, float] | None,
    title: str,
    ytitle: str,
    height: int = 440,
) -> go.Figure:
    """A metric against the cache budget (log-2 axis), one line per policy, oracle dashed."""
    data = styled_lines(curves, "budget", "%{y:.4f}")
    if oracle:
        bs = sorted(oracle)
        data.append(
            {
                "type": "scatter",
                "x": np.asarray(bs),
                "y": np.asarray([oracle[b] for b in bs]),
                "mode": "lines+markers",
                "line": {"color": ORACLE_COLOUR, "width": 2, "dash": "dot"},
                "name": "oracle bound",
                "hovertemplate": "oracle<br>budget %{x}: %{y:.4f}<extra></extra>",
            }
        )
    layout = base_layout(title, height, "cache budget (slots, log scale)", ytitle)
    ticks = sorted({int(b) for _, _, bs, _ in curves for b in bs} | set(oracle or {}))
    layout["xaxis"] |= {"type": "log", "tickvals": ticks, "ticktext": [str(b) for b in ticks]}
    layout["yaxis"]["range"] = [0, 1.02]
    return make_figure(data, layout, legend_width=900)


@by_arguments
def perplexity_curves(
    *,
    curves: Sequence[Curve],
    full: float | None,
    title: str,
    height: int = 460,
) -> go.Figure:
    """Perplexity against the cache budget (both axes log), one line per policy (label, colour,
    budgets, values), the full cache as a dashed horizontal line: lower is better."""
    data = styled_lines(curves, "budget", "perplexity %{y:.2f}")
    shapes = []
    if full is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": full,
                "y1": full,
                "line": {"color": NEUTRAL_LINE, "width": 2, "dash": "dash"},
                "name": f"full cache ({full:.2f})",
                "showlegend": True,
            }
        )
    layout = base_layout(
        title, height, "cache budget (slots per head, log scale)", "perplexity (log scale)"
    )
    ticks = sorted({int(b) for _, _, bs, _ in curves for b in bs})
    layout["xaxis"] |= {"type": "log", "tickvals": ticks, "ticktext": [str(b) for b in ticks]}
    layout["yaxis"]["type"] = "log"
    layout["shapes"] = shapes
    return make_figure(data, layout, legend_width=900)
