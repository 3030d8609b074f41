"""The score heatmap of a replay's kept positions (the Step through page's server figure)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .base import NEUTRAL_LINE, ColourScale, base_layout, by_arguments, make_figure


# -- the step-through heatmap ----------------------------------------------------------------------
@by_arguments
def score_heatmap(
    *,
    z: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    title: str,
    score_label: str,
    scale: ColourScale | None,
    step_stride: int = 1,
    pos_stride: int = 1,
    vlines: Sequence[float] = (),
    vlines_label: str = "",
    height: int = 440,
) -> go.Figure:
    """A whole run, position × step, coloured by the score a position held while kept.

    ``z`` is ``(len(y), len(x))`` raw scores (nan = not kept), max-pooled when the strides are
    above 1; ``scale=None`` is for policies that keep no score (one flat colour). The step by
    step views are drawn in the browser (``h2o/player/js/``); this one is static.
    """
    where = (f"steps ≈ %{{x:.0f}} (±{step_stride // 2})" if step_stride > 1 else "step %{x}") + (
        f", positions ≈ %{{y:.0f}} (±{pos_stride // 2})" if pos_stride > 1 else ", position %{y}"
    )
    heat: dict = {"type": "heatmap", "x": x, "y": y, "hoverongaps": False}
    if scale is None:
        heat |= {
            "z": np.where(np.isnan(z), np.nan, 1.0).astype(np.float32),
            "zmin": 0,
            "zmax": 2,
            "showscale": False,
            "hovertemplate": where + "<br>kept (this policy keeps no score)<extra></extra>",
            "name": "kept",
        }
    else:
        zmin, zmax = scale.zrange()
        heat |= {
            "z": scale.values(z),
            "customdata": z.astype(np.float32),
            "zmin": zmin,
            "zmax": zmax,
            "colorbar": scale.colorbar(score_label + (" (log)" if scale.log else "")),
            "hovertemplate": f"{where}<br>max {score_label}: %{{customdata:.4g}}<extra></extra>",
            "name": score_label,
        }
    shapes = [
        {
            "type": "line",
            "x0": vx,
            "x1": vx,
            "y0": 0,
            "y1": 1,
            "yref": "paper",
            "line": {"color": NEUTRAL_LINE, "width": 1, "dash": "dot"},
            "name": vlines_label,
            "legendgroup": "vlines",
            "showlegend": i == 0,
        }
        for i, vx in enumerate(vlines)
    ]
    layout = base_layout(
        title,
        height,
        "decode step" + (f" (cells pooled by {step_stride})" if step_stride > 1 else ""),
        "position" + (f" (cells pooled by {pos_stride})" if pos_stride > 1 else ""),
        shapes=shapes,
    )
    half_x, half_y = step_stride / 2, pos_stride / 2
    layout["xaxis"] |= {"range": [float(x[0]) - half_x, float(x[-1]) + half_x], "zeroline": False}
    layout["yaxis"] |= {"range": [float(y[0]) - half_y, float(y[-1]) + half_y], "zeroline": False}
    return make_figure([heat], layout)
