"""The one figure the stale-spike lesson needs that ``app/figures.py`` has no builder for: the
attention a few positions receive per step, straight from the trace (no policy involved).

Same conventions as :mod:`app.figures`: no template or background colour (the Streamlit theme
applies), a title, axis titles and a legend entry per line; the title is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .base import FONT, PLOT_BG, by_arguments, shared_figure

#: Mid-tone colours that read on light and dark themes, none of them a policy's colour.
LINE_COLOURS = ("#E15759", "#4E79A7", "#59A14F", "#EDC948", "#76B7B2")


@by_arguments
def received_lines(
    *,
    curves: Sequence[tuple[str, np.ndarray]],
    title: str,
    ytitle: str = "attention received (log)",
    height: int = 320,
) -> go.Figure:
    """One line per ``(label, received)``: ``received[t]`` is the attention at step ``t`` (0
    before the position exists, left out). A log axis: 0.002 and 0.97 both stay readable."""
    data = []
    for i, (label, received) in enumerate(curves):
        steps = np.flatnonzero(received > 0)
        data.append(
            {
                "type": "scatter",
                "x": steps,
                "y": received[steps].astype(np.float32),
                "mode": "lines+markers",
                "marker": {"size": 4},
                "line": {"color": LINE_COLOURS[i % len(LINE_COLOURS)], "width": 2},
                "name": label,
                "hovertemplate": f"{html.escape(label)}<br>step %{{x}}: %{{y:.4f}}<extra></extra>",
            }
        )
    layout = {
        "title": {"text": html.escape(title, quote=False), "x": 0, "xanchor": "left"},
        "height": height,
        "font": {"size": FONT},
        "margin": {"l": 70, "r": 20, "t": 80, "b": 50},
        "plot_bgcolor": PLOT_BG,
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "xanchor": "left"},
        "xaxis": {"title": {"text": "decode step"}},
        "yaxis": {"title": {"text": ytitle}, "type": "log"},
    }
    return shared_figure(data, layout)
