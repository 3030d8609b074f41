"""The lesson's figures: KV memory against the weights, one position's attention over time, one
eviction taken apart, a position's score while it is kept."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .base import (
    NEUTRAL_LINE,
    ORACLE_COLOUR,
    POLICY_COLOURS,
    Curve,
    base_layout,
    by_arguments,
    make_figure,
    policy_colour,
    styled_lines,
)

# -- the lesson ------------------------------------------------------------------------------------
#: The model's weights beside its KV cache (chapter 1): a hue no policy, bound or setting uses.
WEIGHTS_COLOUR = "#EDC948"


def gib(b: float) -> str:
    """Bytes in binary units, as the lesson's chart labels and sentences print them."""
    if b >= 2**30:
        return f"{b / 2**30:.1f} GiB" if b >= 10 * 2**30 else f"{b / 2**30:.2f} GiB"
    return f"{b / 2**20:.0f} MiB" if b >= 10 * 2**20 else f"{b / 2**20:.1f} MiB"


@by_arguments
def kv_memory(
    *,
    models: Sequence[str],
    weights: Sequence[float],
    full: Sequence[float],
    capped: Sequence[float],
    context: int,
    budget: int,
    batch: int,
    height: int = 340,
) -> go.Figure:
    """Per model: the weights, the KV cache of ``batch`` sequences of ``context`` tokens, and that
    cache capped at ``budget`` slots (bytes, log scale). The pages compute the bytes."""
    seqs = f"{batch} × " if batch > 1 else ""
    data = [
        {
            "type": "bar",
            "x": list(models),
            "y": np.asarray(values, dtype=np.float64),
            "name": name,
            "marker": {"color": colour},
            "text": [gib(v) for v in values],
            "textposition": "outside",
            "hovertemplate": f"%{{x}}<br>{name}: %{{text}}<extra></extra>",
        }
        for name, values, colour in (
            ("weights (fp16)", weights, WEIGHTS_COLOUR),
            (f"KV cache, {seqs}{context:,} tokens", full, NEUTRAL_LINE),
            (f"KV cache capped at {min(budget, context):,} slots", capped, POLICY_COLOURS["h2o"]),
        )
    ]
    every = [v for vs in (weights, full, capped) for v in vs if v > 0]
    layout = base_layout(
        f"Memory (fp16): weights vs the KV cache of {batch} sequence{'s' if batch > 1 else ''}",
        height,
        "model",
        "bytes (log scale)",
        barmode="group",
    )
    lo, hi = np.log10(min(every)) - 0.5, np.log10(max(every)) + 0.6
    # Binary units on the axis too (Plotly's SI "1B" would read as one byte).
    ticks = [(2**20 * 10**k, f"{10**k} MiB") for k in range(3)]
    ticks += [(2**30 * 10**k, f"{10**k} GiB") for k in range(5)]
    shown = [(v, t) for v, t in ticks if lo <= np.log10(v) <= hi]
    layout["yaxis"] |= {
        "type": "log",
        "range": [lo, hi],
        "tickvals": [v for v, _ in shown],
        "ticktext": [t for _, t in shown],
    }
    layout["margin"] = {**layout["margin"], "b": 40}
    return make_figure(data, layout, legend_width=700)


@by_arguments
def attention_received(
    *,
    received: np.ndarray,
    position: int,
    evicted_at: int,
    policy: str,
    title: str,
    height: int = 320,
    x_range: tuple[int, int] | None = None,
) -> go.Figure:
    """The attention one position receives per step; what it got after its eviction, shaded.
    ``x_range``: the steps shown (by default from the position to as far past its eviction as
    it was kept before it)."""
    steps = np.arange(received.shape[0])
    after = steps > evicted_at
    data = [
        {
            "type": "scatter",
            "x": steps[position + 1 : evicted_at + 1],
            "y": received[position + 1 : evicted_at + 1].astype(np.float32),
            "mode": "lines",
            "line": {"color": policy_colour(policy), "width": 1.5},
            "name": "while kept",
            "hovertemplate": "step %{x}: %{y:.4f}<extra></extra>",
        },
        {
            "type": "scatter",
            "x": steps[after],
            "y": received[after].astype(np.float32),
            "mode": "lines",
            "fill": "tozeroy",
            "line": {"color": ORACLE_COLOUR, "width": 1},
            "name": "after its eviction: lost",
            "hovertemplate": "step %{x}: %{y:.4f} (lost)<extra></extra>",
        },
    ]
    shapes = [
        {
            "type": "line",
            "x0": evicted_at,
            "x1": evicted_at,
            "y0": 0,
            "y1": 1,
            "yref": "paper",
            "line": {"color": NEUTRAL_LINE, "width": 2, "dash": "dash"},
            "name": f"evicted (step {evicted_at})",
            "showlegend": True,
        }
    ]
    layout = base_layout(
        title, height, "decode step", f"attention on position {position}", shapes=shapes
    )
    layout["xaxis"]["range"] = (
        [position, min(received.shape[0], 2 * evicted_at - position)]
        if x_range is None
        else [int(x_range[0]), int(x_range[1])]
    )
    return make_figure(data, layout, legend_width=900)


@by_arguments
def decision_bars(
    *,
    positions: np.ndarray,
    scores: np.ndarray,
    window: int,
    victims: Sequence[int],
    score_label: str,
    title: str,
    height: int = 300,
) -> go.Figure:
    """One eviction decision: every kept position's score, the protected ones set apart and the
    victim in the eviction colour."""
    n = len(positions)
    gone = np.isin(positions, list(victims))
    protected = np.arange(n) >= n - window
    kind = np.where(
        gone,
        "evicted: the lowest unprotected score",
        np.where(protected, "protected (recent window)", "evictable"),
    )
    colours = {
        "evictable": POLICY_COLOURS["h2o"],
        "protected (recent window)": "rgba(44,165,141,0.9)",
        "evicted: the lowest unprotected score": ORACLE_COLOUR,
    }
    data = []
    for name, colour in colours.items():
        mask = kind == name
        data.append(
            {
                "type": "bar",
                "x": [f"pos {int(p)}" for p in positions[mask]],
                "y": scores[mask].astype(np.float64),
                "name": name,
                "marker": {"color": colour},
                "text": [f"{v:.3f}" for v in scores[mask]],
                "textposition": "outside",
                "hovertemplate": f"%{{x}}<br>{score_label}: %{{y:.4f}}<extra></extra>",
            }
        )
    layout = base_layout(title, height, "kept position (arrival order)", score_label)
    layout["xaxis"] |= {
        "categoryorder": "array",
        "categoryarray": [f"pos {int(p)}" for p in positions],
    }
    return make_figure(data, layout, legend_width=900)


@by_arguments
def kept_score_lines(
    *, curves: Sequence[Curve], units: Sequence[str], title: str, height: int = 380
) -> go.Figure:
    """A position's score under each policy while it is kept (a curve ends at its eviction), one
    panel per policy on its own linear axis titled by ``units`` (its score): H2O's summed
    attention and Scissorhands' vote count are not one quantity, so they share no axis. A panel
    whose values are all whole numbers (votes) has whole-number ticks."""
    if len(units) != len(curves):
        raise ValueError(f"{len(curves)} curves but {len(units)} units")
    data = styled_lines(curves, "step", "%{y:.4g}")
    layout = base_layout(title, height, "decode step", "")
    n, gap = len(curves), 0.12
    span = (1 - gap * (n - 1)) / max(n, 1)
    for i, (tr, unit, (_, _, _, ys)) in enumerate(zip(data, units, curves, strict=True)):
        tr["mode"] = "lines"
        axis = "yaxis" if i == 0 else f"yaxis{i + 1}"
        tr["yaxis"] = "y" if i == 0 else f"y{i + 1}"
        top = 1 - i * (span + gap)
        y = np.asarray(ys, dtype=np.float64)
        whole = y.size > 0 and bool(np.all(np.isnan(y) | (y == np.round(y))))
        layout[axis] = {
            **layout.get("yaxis", {}),
            "title": {"text": html.escape(unit, quote=False)},
            "domain": [max(top - span, 0.0), top],
            "rangemode": "tozero",
            **({"tickformat": "d", "dtick": max(1, int(np.nanmax(y) // 4) or 1)} if whole else {}),
        }
    layout["xaxis"]["anchor"] = f"y{n}" if n > 1 else "y"
    return make_figure(data, layout, legend_width=900)
