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

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

FONT = 15
#: One colour per policy, on every page and in the browser's step view (policy A or B alike).
POLICY_COLOURS = {
    "h2o": "#3D9DF3",
    "scissorhands": "#2CA58D",
    "streaming-llm": "#F28E2B",
    "tova": "#B07AA1",
    "sliding-window": "#9C755F",
    "random": "#8C8C8C",
}
#: And one line style per policy, so that curves which coincide (H2O, Scissorhands and TOVA at a
#: wide enough window) stay visible one over another: dash pattern, marker, marker size.
POLICY_STYLES = {
    "h2o": ("solid", "circle-open", 13),
    "scissorhands": ("dash", "square", 8),
    "tova": ("dot", "diamond", 6),
    "streaming-llm": ("solid", "triangle-up", 9),
    "sliding-window": ("dashdot", "x", 8),
    "random": ("longdash", "cross", 8),
}
#: Policies loaded from a file (``--policy``) take these, in order of registration.
EXTRA_COLOURS = ("#4E79A7", "#59A14F", "#EDC948", "#FF9DA7", "#76B7B2")
ORACLE_COLOUR = "#E15759"
#: Markers of a user's own setting (the sidebar's recent_window): a hue no policy or bound uses.
SETTING_COLOUR = "#C9A227"
NEUTRAL_LINE = "rgba(128,128,128,0.9)"
#: A faint neutral plot area: evicted (blank) cells stay distinguishable in both themes.
PLOT_BG = "rgba(128,128,128,0.10)"


def policy_colour(name: str) -> str:
    """The policy's own colour (one per policy, on every page); a loaded one gets a spare."""
    if name in POLICY_COLOURS:
        return POLICY_COLOURS[name]
    import h2o

    extra = [n for n in h2o.POLICIES if n not in POLICY_COLOURS]
    i = extra.index(name) if name in extra else 0
    return EXTRA_COLOURS[i % len(EXTRA_COLOURS)]


def _layout(
    title: str, height: int, xtitle: str, ytitle: str, subtitle: str = "", **extra: object
) -> dict:
    # Titles carry trace names, which come from files: Plotly renders some HTML (links too).
    layout: dict = {
        "title": {
            "text": html.escape(title, quote=False),
            "x": 0,
            "xanchor": "left",
            "y": 0.98,
            "yanchor": "top",
        },
        "height": height,
        "font": {"size": FONT},
        "margin": {"l": 70, "r": 20, "t": 95, "b": 55},
        "xaxis": {"title": {"text": xtitle}, "tickfont": {"size": FONT - 1}},
        "yaxis": {"title": {"text": ytitle}, "tickfont": {"size": FONT - 1}},
        "plot_bgcolor": PLOT_BG,
        "legend": {
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.01,
            "x": 0,
            "xanchor": "left",
            "font": {"size": FONT - 1},
        },
        "hoverlabel": {"font": {"size": FONT}},
    }
    if subtitle:  # a second line, so a half-width panel at 1280 px shows all of it
        layout["title"]["text"] += (
            f"<br><span style='font-size:{FONT - 1}px;font-weight:normal'>"
            f"{html.escape(subtitle, quote=False)}</span>"
        )
        layout["title"]["automargin"] = True  # the legend goes below both lines
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
    # Plotly lines a horizontal legend up in columns as wide as its widest entry.
    widest = max((42 + 7.5 * len(name) for name in names), default=0)
    per_row = max(1, int(legend_width // widest)) if widest else 1
    rows = -(-len(names) // per_row)
    layout["margin"] = {**layout.get("margin", {}), "t": 52 + 22 * rows}
    return go.Figure({"data": data, "layout": layout}, _validate=False)


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
    step views are drawn in the browser (``app/player/js/``); this one is static.
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
    return _figure([heat], layout)


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
    layout = _layout(title, height, "recent_window (protected newest slots)", ytitle, subtitle)
    return _figure(data, layout | {"shapes": shapes})


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
    layout = _layout(title, height, "policy", "mean over steps t ≥ budget", barmode="group")
    layout["yaxis"]["range"] = [0, 1.12]
    return _figure(data, layout | {"shapes": shapes}, legend_width=900)


#: A curve: (policy name, label, x values, y values). The policy picks colour and style.
Curve = tuple[str, str, Sequence[float], Sequence[float]]


def styled_lines(curves: Sequence[Curve], x_name: str, value: str) -> list[dict]:
    """One line per curve in its policy's colour, dash and marker. A curve equal to an earlier
    one at every point says so ("identical to H2O") in its legend entry and hover, and draws
    thinner on top of it, so both stay visible. ``value`` is the hover's y format."""
    data: list[dict] = []
    drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
    for policy, label, xs, ys in curves:
        x = np.asarray(xs, dtype=np.float64)
        y = np.asarray(ys, dtype=np.float64)
        twin = next(
            (
                other
                for other, ox, oy in drawn
                if ox.shape == x.shape and np.array_equal(ox, x) and np.allclose(oy, y, atol=5e-5)
            ),
            None,
        )
        drawn.append((label, x, y))
        dash, symbol, size = POLICY_STYLES.get(policy, ("solid", "circle", 8))
        name = f"{label} — identical to {twin}" if twin else label
        data.append(
            {
                "type": "scatter",
                "x": x,
                "y": y,
                "mode": "lines+markers",
                "line": {
                    "color": POLICY_COLOURS.get(policy, NEUTRAL_LINE),
                    "width": 2 if twin else 3,
                    "dash": dash,
                },
                "marker": {"symbol": symbol, "size": size, "line": {"width": 2}},
                "name": name,
                "hovertemplate": f"{name}<br>{x_name} %{{x}}: {value}<extra></extra>",
            }
        )
    return data


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
    layout = _layout(title, height, "cache budget (slots, log scale)", ytitle)
    ticks = sorted({int(b) for _, _, bs, _ in curves for b in bs} | set(oracle or {}))
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
    layout = _layout(
        title, height, "cache budget (slots per head, log scale)", "perplexity (log scale)"
    )
    ticks = sorted({int(b) for _, _, bs, _ in curves for b in bs})
    layout["xaxis"] |= {"type": "log", "tickvals": ticks, "ticktext": [str(b) for b in ticks]}
    layout["yaxis"]["type"] = "log"
    layout["shapes"] = shapes
    return _figure(data, layout, legend_width=900)


# -- the lesson ------------------------------------------------------------------------------------
#: The model's weights beside its KV cache (chapter 1): a hue no policy, bound or setting uses.
WEIGHTS_COLOUR = "#EDC948"


def gib(b: float) -> str:
    """Bytes in binary units, as the lesson's chart labels and sentences print them."""
    if b >= 2**30:
        return f"{b / 2**30:.1f} GiB" if b >= 10 * 2**30 else f"{b / 2**30:.2f} GiB"
    return f"{b / 2**20:.0f} MiB" if b >= 10 * 2**20 else f"{b / 2**20:.1f} MiB"


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
    layout = _layout(
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
    return _figure(data, layout, legend_width=700)


def attention_received(
    *,
    received: np.ndarray,
    position: int,
    evicted_at: int,
    policy: str,
    title: str,
    height: int = 320,
) -> go.Figure:
    """The attention one position receives per step; what it got after its eviction, shaded."""
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
    layout = _layout(
        title, height, "decode step", f"attention on position {position}", shapes=shapes
    )
    layout["xaxis"]["range"] = [position, min(received.shape[0], 2 * evicted_at - position)]
    return _figure(data, layout, legend_width=900)


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
    layout = _layout(title, height, "kept position (arrival order)", score_label)
    layout["xaxis"] |= {
        "categoryorder": "array",
        "categoryarray": [f"pos {int(p)}" for p in positions],
    }
    return _figure(data, layout, legend_width=900)


def kept_score_lines(*, curves: Sequence[Curve], title: str, height: int = 380) -> go.Figure:
    """A position's score under each policy while it is kept (a curve ends at its eviction)."""
    data = styled_lines(curves, "step", "%{y:.4g}")
    for tr in data:
        tr["mode"] = "lines"
    layout = _layout(title, height, "decode step", "score (log)")
    layout["yaxis"]["type"] = "log"
    return _figure(data, layout, legend_width=900)
