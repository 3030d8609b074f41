"""What every figure shares: the policies' colours and line styles, the layout, the colour scale.

Figures are assembled as plain dicts and wrapped once, unvalidated (``_validate=False``): Plotly's
per-property validation cost more than everything else in a step click. The tests validate every
figure the pages produce instead (``tests/test_app.py``).

A figure is also built once per server, not once per session: every student of a view asks for
the same figure, so :func:`make_figure` keeps each one by its contents (:class:`SharedFigure`, in
a cache bounded by bytes) and Streamlit's serialisation of it (``to_dict``) is done once too.
A figure made here is therefore never changed after it is made: build a new one instead.
"""

from __future__ import annotations

import functools
import hashlib
import html
import pickle
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import plotly.graph_objects as go

from h2o.player.colours import ColourScale  # noqa: F401  (the player's; figures read it here)
from h2o.player.constants import COLOURS
from h2o.policies import registry
from h2o.policies.registry import BUILT_IN

from ..bytecache import ByteCache

FONT = 15
#: Chart text in presenter mode, at least: a projected 1280×720 page read from the back of a room.
PRESENTER_FONT = 16

#: Chart text's colour (ticks, axis titles, legends, notes): Streamlit's placeholder for its
#: theme's darkest text grey (``GRAY_90`` of ``streamlit.elements.lib.streamlit_plotly_theme``),
#: which the browser swaps for the light theme's #262730 or the dark theme's #fafafa. Streamlit's
#: own chart text (gray70) is #808495 on white in the light theme: 3.8:1, under WCAG's 4.5:1. No
#: one fixed colour reaches 4.5:1 on both themes' backgrounds (tests/test_presenter_charts.py).
TEXT_COLOUR = "#000037"

#: One colour per policy, on every page and in the browser's step view (policy A or B alike),
#: each declared by its built-in class (``colour``). Any two, and each with the oracle's, stay at
#: least ΔE00 10 apart under simulated deuteranopia, protanopia and tritanopia
#: (tests/test_palette.py). Three were moved for that (from Scissorhands #2CA58D, sliding window
#: #9C755F, random #8C8C8C): Scissorhands and random were 0.9 apart under deuteranopia, the
#: sliding window and the oracle 2.2 under protanopia.
POLICY_COLOURS = {c.name: c.declares("colour") for c in BUILT_IN if c.declares("colour")}

#: And one line style per policy (its class's ``line_style``), so that curves which coincide
#: (H2O, Scissorhands and TOVA at a wide enough window) stay visible one over another: dash
#: pattern, marker, marker size.
POLICY_STYLES = {c.name: c.declares("line_style") for c in BUILT_IN if c.declares("line_style")}

#: The palette's rule for a policy whose class declares no colour (a built-in that names none, a
#: subclass, a policy loaded from a file): these, one each, in the registry's order. Each stays
#: ΔE00 10 from every declared colour, the oracle's and the other spares in every simulated
#: vision (tests/test_palette.py): the colours of a greedy search for the farthest (``#rgb``
#: steps of 0x11, luminance 0.05 to 0.45, as light or dark as the declared ones or a little
#: more), until none was 10 from all. A fifth such policy takes the first again; its line style
#: still differs.
EXTRA_COLOURS = ("#00CC88", "#DD99CC", "#0000DD", "#444411")

#: And their line styles: markers no declared style uses, so a spare never looks like a built-in.
EXTRA_STYLES = (
    ("longdashdot", "pentagon", 9),
    ("solid", "hourglass", 9),
    ("dash", "bowtie", 9),
    ("dot", "triangle-left", 9),
    ("longdash", "triangle-right", 9),
    ("dashdot", "octagon", 9),
    ("longdashdot", "hexagram", 9),
    ("solid", "star-square", 9),
)

ORACLE_COLOUR = COLOURS["oracle"]

#: Markers of a user's own setting (the sidebar's recent_window): a hue no policy or bound uses.
SETTING_COLOUR = "#C9A227"

NEUTRAL_LINE = COLOURS["neutral"]

#: A faint neutral plot area: evicted (blank) cells stay distinguishable in both themes.
PLOT_BG = COLOURS["plotBg"]


def _declared(name: str, fact: str) -> Any:
    """The fact a built-in class declares itself (:meth:`~h2o.policies.Policy.declares`), or None:
    only the built-ins' colours are checked together (a loaded policy takes a spare)."""
    cls = registry.POLICIES.get(name)
    return cls.declares(fact) if cls is not None and cls in registry.BUILT_IN else None


def _spare(name: str, fact: str, spares: Sequence[Any]) -> Any:
    """The palette's rule: the policies declaring no ``fact`` take ``spares`` in the registry's
    order (read now: built-ins first, then policies loaded from files in the order they came)."""
    undeclared = [n for n in registry.POLICIES if _declared(n, fact) is None]
    i = undeclared.index(name) if name in undeclared else 0
    return spares[i % len(spares)]


def policy_colour(name: str) -> str:
    """The policy's own colour (one per policy, on every page): its class's, or a spare."""
    return _declared(name, "colour") or _spare(name, "colour", EXTRA_COLOURS)


def policy_style(name: str) -> tuple[str, str, int]:
    """The policy's line style (dash, marker, marker size): its class's, or a spare."""
    return _declared(name, "line_style") or _spare(name, "line_style", EXTRA_STYLES)


def base_layout(
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


def make_figure(
    data: list[dict],
    layout: dict,
    legend_width: int = 440,
    *,
    char_px: float = 7.5,
    plot_height: int | None = None,
) -> go.Figure:
    """The figure, with room above the plot for the title and a legend of however many rows.

    Plotly places the title at a fixed height and does not move it for the legend, so the top
    margin is sized from an estimate of the legend's rows at ``legend_width`` pixels (on the
    narrow side: half of a projected page), ``char_px`` a character of an entry's name. With
    ``plot_height`` the figure is as tall as its plot area plus those margins (a legend of many
    rows makes the figure taller rather than the plot flatter); without, ``layout``'s height.
    """
    names = [
        tr["name"]
        for tr in data
        if tr.get("name") and tr.get("showlegend", True) and tr.get("type") != "heatmap"
    ]
    names += [sh["name"] for sh in layout.get("shapes", ()) if sh.get("showlegend")]
    # Plotly lines a horizontal legend up in columns as wide as its widest entry.
    widest = max((42 + char_px * len(name) for name in names), default=0)
    per_row = max(1, int(legend_width // widest)) if widest else 1
    rows = -(-len(names) // per_row)
    layout["margin"] = {**layout.get("margin", {}), "t": 52 + 22 * rows}
    if plot_height is not None:
        m = layout["margin"]
        layout["height"] = int(m["t"] + m.get("b", 0) + plot_height)
    return shared_figure(data, layout)


def shared_figure(data: list[dict], layout: dict) -> go.Figure:
    """The figure of ``data`` and ``layout`` (plain dicts and arrays, not validated: they are
    ours), one per server for the same contents (:class:`SharedFigure`)."""
    try:  # the figure's contents are its key: the same view gives the same bytes
        payload = pickle.dumps((data, layout), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):  # not plain data: not shared
        return go.Figure({"data": data, "layout": layout}, _validate=False)
    key = hashlib.blake2b(payload, digest_size=20).digest()
    return _FIGURES.get(
        key, lambda: (SharedFigure({"data": data, "layout": layout}, _validate=False), len(payload))
    )[0]


class SharedFigure(go.Figure):
    """A figure shown to every session that asks for the same view: what Streamlit sends of it
    (``to_dict``: a deep copy, arrays encoded) is computed the first time and kept."""

    def to_dict(self) -> dict[str, Any]:
        spec = self.__dict__.get("_shared_spec")
        if spec is None:  # two sessions at once may both compute it: the same dict either way
            spec = super().to_dict()
            self.__dict__["_shared_spec"] = spec
        return spec


#: The server's figures by contents, up to 64 MB: a figure holds its inputs' arrays, their
#: encoded copy in ``to_dict`` and plotly's objects, counted as three times its pickled inputs.
FIGURE_CACHE_MB = 64
_FIGURES: ByteCache[tuple[go.Figure, int]] = ByteCache(
    FIGURE_CACHE_MB * 2**20, lambda item: 3 * item[1]
)


F = TypeVar("F", bound=Callable[..., go.Figure])


def by_arguments(build: F) -> F:
    """A figure builder called once per server for the same arguments (compared by their
    pickled bytes): a page's heatmaps print a coloured value in every cell, and choosing each
    value's colour is most of their cost, the same for every student of a view. Arguments that
    do not pickle build a fresh figure, as before."""

    @functools.wraps(build)
    def shared(*args: Any, **kwargs: Any) -> go.Figure:
        try:
            payload = pickle.dumps(
                (build.__module__, build.__qualname__, args, sorted(kwargs.items())),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
        except (pickle.PicklingError, TypeError, AttributeError):
            return build(*args, **kwargs)
        key = b"args:" + hashlib.blake2b(payload, digest_size=20).digest()
        return _FIGURES.get(key, lambda: (build(*args, **kwargs), len(payload)))[0]

    return shared  # type: ignore[return-value]


# -- colour ----------------------------------------------------------------------------------------
#: A curve: (policy name, label, x values, y values). The policy picks colour and style.
Curve = tuple[str, str, Sequence[float], Sequence[float]]


def styled_lines(curves: Sequence[Curve], x_name: str, value: str) -> list[dict]:
    """One line per curve in its policy's colour, dash and marker. A policy's second line (the
    same policy at other settings) is dashed, so it does not rest on its legend alone. A curve
    equal to an earlier one at every point says so ("identical to H2O") in its legend entry and
    hover, and draws thinner on top of it, so both stay visible. ``value`` is the hover's y
    format."""
    data: list[dict] = []
    drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
    seen: set[str] = set()
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
        known = policy in registry.POLICIES  # a curve of no policy is drawn neutral and plain
        dash, symbol, size = policy_style(policy) if known else ("solid", "circle", 8)
        if policy in seen:
            dash = "dash" if dash != "dash" else "dot"
        seen.add(policy)
        name = f"{label} — identical to {twin}" if twin else label
        data.append(
            {
                "type": "scatter",
                "x": x,
                "y": y,
                "mode": "lines+markers",
                "line": {
                    "color": policy_colour(policy) if known else NEUTRAL_LINE,
                    "width": 2 if twin else 3,
                    "dash": dash,
                },
                "marker": {"symbol": symbol, "size": size, "line": {"width": 2}},
                "name": name,
                "hovertemplate": f"{name}<br>{x_name} %{{x}}: {value}<extra></extra>",
            }
        )
    return data


# -- text on a colour scale ------------------------------------------------------------------------
def _luminance(rgb: Sequence[float]) -> float:
    """WCAG 2.1's relative luminance of an sRGB colour (channels 0–255)."""
    lin = [
        c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb
    ]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def text_colour_on(cell: str) -> str:
    """Black or white, whichever contrasts more with ``cell`` (``"rgb(r, g, b)"`` or ``#rrggbb``):
    at least 4.58:1 on any colour. plotly.js's own choice for a heatmap's cell text (#444 or #fff)
    falls to 3.1:1 on Viridis."""
    from plotly.colors import hex_to_rgb, unlabel_rgb

    rgb = hex_to_rgb(cell) if cell.startswith("#") else unlabel_rgb(cell)
    lum = _luminance(rgb)
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"


def cell_text(
    z: np.ndarray,
    x: Sequence,
    y: Sequence,
    labels: Sequence[Sequence[str]],
    *,
    zrange: tuple[float, float],
    scale: str,
    size: int,
    axes: tuple[str, str],
) -> dict:
    """A heatmap's printed values as a text layer of their own, each in black or white by the
    colour its cell is drawn in (``z`` on ``scale`` over ``zrange``, as the colour axis maps it);
    a NaN cell prints nothing. plotly.js takes one text colour per heatmap trace, not per cell."""
    from plotly.colors import get_colorscale, sample_colorscale

    z = np.asarray(z, dtype=np.float64)
    lo, hi = zrange
    xs, ys, texts, where = [], [], [], []
    for i, row in enumerate(z):
        for j, v in enumerate(row):
            if np.isfinite(v):
                xs.append(x[j])
                ys.append(y[i])
                texts.append(labels[i][j])
                where.append(min(1.0, max(0.0, (v - lo) / (hi - lo))) if hi > lo else 0.0)
    colours = sample_colorscale(get_colorscale(scale), where) if where else []
    return {
        "type": "scatter",
        "mode": "text",
        "x": xs,
        "y": ys,
        "text": texts,
        "textfont": {"size": size, "color": [text_colour_on(c) for c in colours]},
        "xaxis": axes[0],
        "yaxis": axes[1],
        "hoverinfo": "skip",
        "showlegend": False,
        "name": "cell values",
    }
