"""Every Plotly figure of the app, and the only module that imports Plotly.

The builders take plain numpy arrays and numbers (the pages do the data work with :mod:`h2o`) and
return ``go.Figure`` objects meant for ``st.plotly_chart(..., theme="streamlit")``:

* No template, background or text colour is set, so the Streamlit theme (light or dark) applies;
  heatmaps use the theme's sequential colour scale, whose strong end contrasts with the page in
  both themes. The fixed colours below are mid-tones that read on either background.
* Arrays go out as numpy (float32 where precision allows): Plotly encodes them as base64 typed
  arrays, several times smaller than JSON lists.
* Every chart has a title, axis titles and a legend entry for each marker, band and line.
* Figures are assembled as plain dicts and wrapped once, unvalidated (``_validate=False``):
  Plotly's per-property validation cost more than everything else in a step click. The tests
  validate every figure the pages produce instead (``tests/test_app.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

FONT = 15
#: Side-by-side slots (policy A, policy B) in the step-through views.
SLOT_COLOURS = ("#3D9DF3", "#F28E2B")
POLICY_COLOURS = {
    "h2o": "#3D9DF3",
    "scissorhands": "#2CA58D",
    "streaming-llm": "#F28E2B",
    "tova": "#B07AA1",
    "sliding-window": "#9C755F",
    "random": "#8C8C8C",
}
ORACLE_COLOUR = "#E15759"
CURSOR_COLOUR = "#FF4B4B"
EVICT_COLOUR = "#E8175D"
PROTECT_FILL = "rgba(44,165,141,0.22)"
PROTECT_LINE = "rgba(44,165,141,0.95)"
SINK_FILL = "rgba(242,142,43,0.25)"
SINK_LINE = "rgba(242,142,43,0.95)"
NEUTRAL_LINE = "rgba(128,128,128,0.9)"
#: A faint neutral plot area: evicted (blank) cells stay distinguishable in both themes.
PLOT_BG = "rgba(128,128,128,0.10)"
HIGHLIGHT_COLOURS = ("#E8175D", "#2CA58D", "#B07AA1", "#9C755F")


def _layout(title: str, height: int, xtitle: str, ytitle: str, **extra: object) -> dict:
    layout: dict = {
        "title": {"text": title, "x": 0, "xanchor": "left", "y": 0.98, "yanchor": "top"},
        "height": height,
        "font": {"size": FONT},
        "margin": {"l": 70, "r": 20, "t": 95, "b": 55},
        "xaxis": {"title": {"text": xtitle}},
        "yaxis": {"title": {"text": ytitle}},
        "plot_bgcolor": PLOT_BG,
        "legend": {
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.01,
            "x": 0,
            "xanchor": "left",
            "font": {"size": FONT - 2},
        },
        "hoverlabel": {"font": {"size": FONT}},
    }
    layout.update(extra)
    return layout


def _figure(data: list[dict], layout: dict, legend_width: int = 440) -> go.Figure:
    """The figure, with room above the plot for the title and a legend of however many rows.

    Plotly places the title at a fixed height and does not move it for the legend, so the top
    margin is sized from an estimate of the legend's rows at ``legend_width`` pixels (on the
    narrow side: half of a projected page).
    """
    names = [
        tr["name"]
        for tr in data
        if tr.get("name") and tr.get("showlegend", True) and tr.get("type") != "heatmap"
    ]
    names += [sh["name"] for sh in layout.get("shapes", ()) if sh.get("showlegend")]
    rows, used = (1, 0) if names else (0, 0)
    for name in names:
        w = 42 + 7.5 * len(name)
        if used and used + w > legend_width:
            rows, used = rows + 1, 0
        used += w
    layout["margin"] = {**layout.get("margin", {}), "t": 52 + 22 * rows}
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def _cursor(t: int, *, yref: str = "paper") -> dict:
    return {
        "type": "line",
        "x0": t,
        "x1": t,
        "y0": 0,
        "y1": 1,
        "yref": yref,
        "line": {"color": CURSOR_COLOUR, "width": 2, "dash": "dash"},
        "name": f"current step ({t})",
        "showlegend": True,
        "layer": "above",
    }


# -- colour ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ColourScale:
    """Raw score → colour value, shared by the panels that show the same kind of score.

    ``hi`` is the largest score of the whole run (not of the visible window), so colours do not
    shift while stepping. With ``log`` the colour follows ``log10(score)`` from ``hi / 10**decades``
    up: a heavy hitter's sum is thousands of times a young position's, and on a linear scale
    everything but the sinks would be the bottom colour. The bottom of the range is pushed below
    the smallest shown score so that kept-but-tiny cells are never the colour of the background.
    """

    hi: float
    log: bool = True
    decades: float = 4.0

    @property
    def lo(self) -> float:
        return self.hi * 10.0**-self.decades if self.log else 0.0

    def values(self, z: np.ndarray) -> np.ndarray:
        if not self.log:
            return z.astype(np.float32, copy=False)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log10(np.maximum(z, self.lo)).astype(np.float32)

    def zrange(self) -> tuple[float, float]:
        if self.log:
            top = math.log10(self.hi)
            return top - self.decades * 1.3, top
        return -0.3 * self.hi, self.hi

    def colorbar(self, title: str) -> dict:
        bar: dict = {"title": {"text": title, "side": "right"}, "thickness": 14}
        if self.log:
            lo, hi = math.log10(self.lo), math.log10(self.hi)
            ticks = [d for d in range(math.ceil(lo), math.floor(hi) + 1)]
            bar["tickvals"] = ticks
            bar["ticktext"] = [f"{10.0**d:g}" for d in ticks]
        return bar


# -- the step-through heatmap ----------------------------------------------------------------------
@dataclass(frozen=True)
class Marks:
    """Evictions to overlay: step, position, and a hover sentence for each."""

    steps: np.ndarray
    positions: np.ndarray
    text: Sequence[str]


def score_heatmap(
    *,
    z: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    title: str,
    score_label: str,
    scale: ColourScale | None,
    t: int | None,
    step_stride: int = 1,
    pos_stride: int = 1,
    evictions: Marks | None = None,
    band: tuple[np.ndarray, np.ndarray] | None = None,
    band_label: str = "protected recent window",
    sinks: int = 0,
    highlights: Sequence[tuple[int, str]] = (),
    window: tuple[int, int] | None = None,
    cell_text: np.ndarray | None = None,
    vlines: Sequence[float] = (),
    vlines_label: str = "",
    height: int = 440,
) -> go.Figure:
    """Position × step, coloured by the score a position held while kept; blank once evicted.

    ``z`` is ``(len(y), len(x))`` raw scores (nan = not kept); ``x``/``y`` are cell centres, with
    ``step_stride``/``pos_stride`` > 1 when cells are max-pooled. ``scale=None`` is for policies
    that keep no score: kept cells get one flat colour. ``band`` is a polygon (xs, ys) shading the
    protected window, ``window`` outlines the steps shown in the detail view (overview only),
    ``highlights`` outlines rows (position, label; positions sharing a label share an entry).
    """
    pooled = step_stride > 1 or pos_stride > 1
    if pooled:
        where = (
            f"steps ≈ %{{x:.0f}} (±{step_stride // 2})" if step_stride > 1 else "step %{x}"
        ) + (
            f", positions ≈ %{{y:.0f}} (±{pos_stride // 2})"
            if pos_stride > 1
            else ", position %{y}"
        )
    else:
        where = "step %{x}, position %{y}" + (" · %{text}" if cell_text is not None else "")
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
        agg = "max " if pooled else ""
        heat |= {
            "z": scale.values(z),
            "customdata": z.astype(np.float32),
            "zmin": zmin,
            "zmax": zmax,
            "colorbar": scale.colorbar(score_label + (" (log)" if scale.log else "")),
            "hovertemplate": f"{where}<br>{agg}{score_label}: %{{customdata:.4g}}<extra></extra>",
            "name": score_label,
        }
    if cell_text is not None and not pooled:
        heat["text"] = cell_text
    data = [heat]
    shapes: list[dict] = []
    if band is not None and len(band[0]):
        path = "M" + "L".join(f"{bx:g},{by:g}" for bx, by in zip(*band, strict=True)) + "Z"
        shapes.append(
            {
                "type": "path",
                "path": path,
                "fillcolor": PROTECT_FILL,
                "line": {"color": PROTECT_LINE, "width": 1},
                "layer": "above",
                "name": band_label,
                "showlegend": True,
            }
        )
    if sinks:
        shapes.append(
            {
                "type": "rect",
                "x0": float(x[0]) - step_stride / 2,
                "x1": float(x[-1]) + step_stride / 2,
                "y0": -0.5,
                "y1": sinks - 0.5,
                "fillcolor": SINK_FILL,
                "line": {"color": SINK_LINE, "width": 1},
                "layer": "above",
                "name": "pinned sink (position 0)"
                if sinks == 1
                else f"pinned sinks (positions 0–{sinks - 1})",
                "showlegend": True,
            }
        )
    labels = list(dict.fromkeys(label for _, label in highlights))  # one colour/entry a label
    for pos, label in highlights:
        i = labels.index(label)
        first = next(p for p, lab in highlights if lab == label) == pos
        shapes.append(
            {
                "type": "rect",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                # A row and a half either side: the outline must not hide the row it marks.
                "y0": pos - 1.5 * pos_stride,
                "y1": pos + 1.5 * pos_stride,
                "line": {
                    "color": HIGHLIGHT_COLOURS[i % len(HIGHLIGHT_COLOURS)],
                    "width": 2 if i == 0 else 1.5,
                    "dash": "dot",
                },
                "layer": "above",
                "name": label,
                "legendgroup": f"highlight {label}",
                "showlegend": first,
            }
        )
    if window is not None:
        shapes.append(
            {
                "type": "rect",
                "x0": window[0] - 0.5,
                "x1": window[1] - 0.5,
                "y0": 0,
                "y1": 1,
                "yref": "paper",
                "line": {"color": NEUTRAL_LINE, "width": 2},
                "layer": "above",
                "name": "steps shown in detail",
                "showlegend": True,
            }
        )
    for i, vx in enumerate(vlines):
        shapes.append(
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
        )
    if t is not None:
        shapes.append(_cursor(t))
    if evictions is not None and len(evictions.steps):
        data.append(
            {
                "type": "scatter",
                "x": evictions.steps,
                "y": evictions.positions,
                "mode": "markers",
                "marker": {
                    # About one cell wide: a full-cache run evicts every step, and bigger
                    # crosses would merge into a solid bar.
                    "symbol": "x-thin",
                    "size": float(np.clip(360 / max(len(x), 1), 5, 12)),
                    "color": EVICT_COLOUR,
                    "line": {"width": 2, "color": EVICT_COLOUR},
                },
                "name": "eviction (step, position)",
                "hovertext": list(evictions.text),
                "hoverinfo": "text",
            }
        )
    layout = _layout(
        title,
        height,
        "decode step" + (f" (cells pooled by {step_stride})" if step_stride > 1 else ""),
        "position" + (f" (cells pooled by {pos_stride})" if pos_stride > 1 else ""),
        shapes=shapes,
    )
    half_x, half_y = step_stride / 2, pos_stride / 2
    layout["xaxis"] |= {"range": [float(x[0]) - half_x, float(x[-1]) + half_x], "zeroline": False}
    layout["yaxis"] |= {"range": [float(y[0]) - half_y, float(y[-1]) + half_y], "zeroline": False}
    return _figure(data, layout)


# -- the kept slots --------------------------------------------------------------------------------
def kept_bars(
    *,
    positions: np.ndarray,
    scores: np.ndarray,
    scored: bool,
    victims: np.ndarray,
    window: int,
    sinks: int,
    labels: Sequence[str],
    score_label: str,
    title: str,
    colour: str,
    log: bool,
    height: int = 300,
) -> go.Figure:
    """One bar per kept slot (in kept order), the protected slots shaded, the victim in red.

    ``victims`` are indices into ``positions``; ``labels`` the hover name of each position.
    """
    n = positions.shape[0]
    slots = np.arange(n)
    log = log and scored and n > 0 and float(np.max(scores)) > 0  # nothing to log yet at step 0
    if scored:
        floor = float(np.max(scores)) * 1e-4 if n and np.max(scores) > 0 else 1e-9
        heights = np.maximum(scores, floor) if log else scores
    else:
        heights = np.ones(n)
    is_victim = np.zeros(n, dtype=bool)
    is_victim[victims] = True
    hover = [
        f"slot {i} · {lab}<br>{score_label}: {s:.4g}" if scored else f"slot {i} · {lab}"
        for i, (lab, s) in enumerate(zip(labels, scores, strict=True))
    ]
    data = []
    for mask, name, col in (
        (~is_victim, "kept", colour),
        (is_victim, "evicted at this step", EVICT_COLOUR),
    ):
        idx = np.flatnonzero(mask)
        data.append(
            {
                "type": "bar",
                "x": slots[idx],
                "y": heights[idx].astype(np.float32),
                "marker": {"color": col, "line": {"width": 0}},
                "name": name,
                "hovertext": [hover[i] for i in idx],
                "hoverinfo": "text",
                "showlegend": bool(idx.size) or name == "kept",
            }
        )
    shapes = []
    if window and n:
        shapes.append(
            {
                "type": "rect",
                "x0": n - min(window, n) - 0.5,
                "x1": n - 0.5,
                "y0": 0,
                "y1": 1,
                "yref": "paper",
                "fillcolor": PROTECT_FILL,
                "line": {"color": PROTECT_LINE, "width": 1},
                "layer": "below",
                "name": f"protected recent window ({window})",
                "showlegend": True,
            }
        )
    if sinks and n:
        shapes.append(
            {
                "type": "rect",
                "x0": -0.5,
                "x1": min(sinks, n) - 0.5,
                "y0": 0,
                "y1": 1,
                "yref": "paper",
                "fillcolor": SINK_FILL,
                "line": {"color": SINK_LINE, "width": 1},
                "layer": "below",
                "name": f"pinned sinks ({sinks})",
                "showlegend": True,
            }
        )
    ticks = np.unique(np.linspace(0, max(n - 1, 0), num=min(n, 12)).round().astype(int))
    ytitle = (score_label + (" (log)" if log else "")) if scored else "kept (no score)"
    layout = _layout(
        title,
        height,
        "kept slot, labelled by position",
        ytitle,
        shapes=shapes,
        barmode="overlay",
        bargap=0.1 if n < 64 else 0,
    )
    layout["xaxis"] |= {
        "tickvals": ticks,
        "ticktext": [str(int(positions[i])) for i in ticks],
        "range": [-0.5, max(n, 1) - 0.5],
    }
    if scored and log:
        layout["yaxis"]["type"] = "log"
    elif not scored:
        layout["yaxis"] |= {"showticklabels": False, "range": [0, 1.05]}
    return _figure(data, layout)


# -- metrics over time -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Series:
    label: str
    colour: str
    values: np.ndarray
    running: np.ndarray | None = None


def metric_over_time(
    *,
    series: Sequence[Series],
    title: str,
    ytitle: str,
    t: int,
    budget: int,
    oracle: np.ndarray | None = None,
    height: int = 340,
) -> go.Figure:
    """A per-step metric (thin) and its running mean from ``t >= budget`` (thick) per policy.

    One legend entry per policy (its running mean); clicking it hides the per-step line too.
    """
    data: list[dict] = []
    n = series[0].values.shape[0] if series else 0
    for s in series:
        data.append(
            {
                "type": "scatter",
                "x0": 0,
                "dx": 1,
                "y": s.values.astype(np.float32),
                "mode": "lines",
                "line": {"color": s.colour, "width": 1},
                "opacity": 0.35,
                "name": f"{s.label}, per step",
                "legendgroup": s.label,
                "showlegend": s.running is None,
                "hovertemplate": f"{s.label}<br>step %{{x}}: %{{y:.3f}}<extra></extra>",
            }
        )
        if s.running is not None:
            data.append(
                {
                    "type": "scatter",
                    "x0": 0,
                    "dx": 1,
                    "y": s.running.astype(np.float32),
                    "mode": "lines",
                    "line": {"color": s.colour, "width": 3},
                    "name": s.label,
                    "legendgroup": s.label,
                    "hovertemplate": f"{s.label}<br>mean to step %{{x}}: %{{y:.4f}}<extra></extra>",
                }
            )
    if oracle is not None:
        data.append(
            {
                "type": "scatter",
                "x0": 0,
                "dx": 1,
                "y": oracle.astype(np.float32),
                "mode": "lines",
                "line": {"color": ORACLE_COLOUR, "width": 2, "dash": "dot"},
                "name": f"oracle bound (best {budget} positions)",
                "hovertemplate": "oracle at step %{x}: %{y:.3f}<extra></extra>",
            }
        )
    shapes = [_cursor(t)]
    if 0 < budget < n:
        shapes.append(
            {
                "type": "line",
                "x0": budget,
                "x1": budget,
                "y0": 0,
                "y1": 1,
                "yref": "paper",
                "line": {"color": NEUTRAL_LINE, "width": 1, "dash": "dot"},
                "name": f"cache full: evictions start (step {budget})",
                "showlegend": True,
            }
        )
    layout = _layout(title, height, "decode step", ytitle, shapes=shapes)
    layout["yaxis"]["range"] = [0, 1.02]
    return _figure(data, layout)


# -- sweeps and tables -----------------------------------------------------------------------------
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
) -> go.Figure:
    """A metric against recent_window per policy, reference policies as flat dashed lines."""
    data: list[dict] = []
    for label, colour, values in series:
        data.append(
            {
                "type": "scatter",
                "x": np.asarray(windows),
                "y": np.asarray(values, dtype=np.float64),
                "mode": "lines+markers",
                "line": {"color": colour, "width": 3},
                "marker": {"size": 7},
                "name": label,
                "hovertemplate": f"{label}<br>recent_window %{{x}}: %{{y:.4f}}<extra></extra>",
            }
        )
    lo, hi = (min(windows), max(windows)) if windows else (0, 1)
    for label, colour, value in refs:
        data.append(
            {
                "type": "scatter",
                "x": [lo, hi],
                "y": [value, value],
                "mode": "lines",
                "line": {"color": colour, "width": 2, "dash": "dash"},
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
                "line": {"color": CURSOR_COLOUR, "width": 1, "dash": "dash"},
                "name": f"sidebar recent_window ({current})",
                "showlegend": True,
            }
        )
    layout = _layout(title, height, "recent_window (protected newest slots)", ytitle)
    return _figure(data, layout | {"shapes": shapes})


def policy_bars(
    *,
    labels: Sequence[str],
    mass: Sequence[float],
    recall: Sequence[float],
    oracle: float,
    top_k: int,
    title: str,
    height: int = 420,
) -> go.Figure:
    """Retained mass and top-k recall per policy, side by side, with the oracle bound on mass."""
    data: list[dict] = []
    for name, values, colour in (
        ("retained attention mass", mass, SLOT_COLOURS[0]),
        (f"top-{top_k} recall", recall, SLOT_COLOURS[1]),
    ):
        data.append(
            {
                "type": "bar",
                "x": list(labels),
                "y": np.asarray(values, dtype=np.float64),
                "name": name,
                "marker": {"color": colour},
                "text": [f"{v:.3f}" for v in values],
                "textposition": "outside",
                "hovertemplate": f"%{{x}}<br>{name}: %{{y:.4f}}<extra></extra>",
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
    layout = _layout(title, height, "policy", "mean over steps t ≥ budget", barmode="group")
    layout["yaxis"]["range"] = [0, 1.12]
    return _figure(data, layout | {"shapes": shapes}, legend_width=900)


def _budget_lines(
    curves: Sequence[tuple[str, str, Sequence[int], Sequence[float]]], value: str, marker_size: int
) -> list[dict]:
    """One line per (label, colour, budgets, values); ``value`` is the hover's y format."""
    return [
        {
            "type": "scatter",
            "x": np.asarray(budgets),
            "y": np.asarray(values, dtype=np.float64),
            "mode": "lines+markers",
            "line": {"color": colour, "width": 3},
            "marker": {"size": marker_size},
            "name": label,
            "hovertemplate": f"{label}<br>budget %{{x}}: {value}<extra></extra>",
        }
        for label, colour, budgets, values in curves
    ]


def budget_curves(
    *,
    curves: Sequence[tuple[str, str, Sequence[int], Sequence[float]]],
    oracle: dict[int, float] | None,
    title: str,
    ytitle: str,
    height: int = 440,
) -> go.Figure:
    """A metric against the cache budget (log-2 axis), one line per policy, oracle dashed."""
    data = _budget_lines(curves, "%{y:.4f}", marker_size=8)
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
    layout = _layout(title, height, "cache budget (slots, log scale)", ytitle)
    ticks = sorted({b for _, _, bs, _ in curves for b in bs} | set(oracle or {}))
    layout["xaxis"] |= {"type": "log", "tickvals": ticks, "ticktext": [str(b) for b in ticks]}
    layout["yaxis"]["range"] = [0, 1.02]
    return _figure(data, layout, legend_width=900)


# -- the real model --------------------------------------------------------------------------------
#: Where attention goes, layer by layer: the sinks StreamingLLM pins, the recent band every policy
#: keeps, and the middle where H2O's heavy hitters live.
REGION_COLOURS = {"sink": "#F28E2B", "recent": "#2CA58D", "middle": "#3D9DF3"}


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
    layout = _layout(title, height, xtitle, ytitle, barmode="group")
    layout["yaxis"]["range"] = [0, 1.12]
    return _figure(data, layout, legend_width=900)


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
    layout = _layout(
        title, height, "layer", "share of attention (mean over queries)", barmode="stack"
    )
    layout["bargap"] = 0.15
    layout["yaxis"]["range"] = [0, 1]
    layout["xaxis"] |= {"tickmode": "linear", "dtick": 1 if len(layers) <= 32 else 5}
    return _figure(data, layout, legend_width=900)


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
    layout = _layout(title, height, "layer", ytitle, shapes=shapes)
    layout["yaxis"]["range"] = [0, 1.02]
    layout["xaxis"] |= {
        "tickmode": "linear",
        "dtick": 1 if len(layers) <= 32 else 5,
        "range": [min(layers, default=0) - 0.5, max(layers, default=0) + 0.5],
    }
    return _figure(data, layout, legend_width=900)


def perplexity_curves(
    *,
    curves: Sequence[tuple[str, str, Sequence[int], Sequence[float]]],
    full: float | None,
    title: str,
    height: int = 460,
) -> go.Figure:
    """Perplexity against the cache budget (both axes log), one line per policy (label, colour,
    budgets, values), the full cache as a dashed horizontal line: lower is better."""
    data = _budget_lines(curves, "perplexity %{y:.2f}", marker_size=9)
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
    layout = _layout(
        title, height, "cache budget (slots per head, log scale)", "perplexity (log scale)"
    )
    ticks = sorted({b for _, _, bs, _ in curves for b in bs})
    layout["xaxis"] |= {"type": "log", "tickvals": ticks, "ticktext": [str(b) for b in ticks]}
    layout["yaxis"]["type"] = "log"
    layout["shapes"] = shapes
    return _figure(data, layout, legend_width=900)
