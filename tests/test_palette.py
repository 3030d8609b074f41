"""The app's colours for readers who see colour differently, and its text contrast (no browser).

Colour vision deficiencies: each policy colour (a class's own, ``app/figures/base.py``
POLICY_COLOURS, or the palette's spare for a class that declares none, EXTRA_COLOURS; with the
oracle bound's ``ORACLE_COLOUR``, drawn on the same charts and fixed by ``h2o/player``) is passed
through the Machado, Oliveira and Fernandes (2009) simulation of deuteranopia, protanopia and
tritanopia at severity 1.0, applied in linear RGB; every pair must stay at least
:data:`MIN_DELTA_E` apart in **CIEDE2000** (ΔE00, CIELAB under D65), with normal vision too. A
ΔE00 of 10 is a clearly different colour side by side — not a "just noticeable" 1-2, and the
policies' lines cross on every chart. Colour is never the only cue: every policy also has its
own line style and marker (its class's, :data:`POLICY_STYLES`, or a spare), tested here as well.
Every registered class is checked, whatever the registry holds: none is named here.

Text contrast: WCAG 2.1 relative luminance, 4.5:1 (AA, body text) for the app's text colours on
its backgrounds, in both themes: Streamlit's defaults (read from the installed Streamlit's own
option docs) with ``.streamlit/config.toml``'s ``[theme.light]``/``[theme.dark]`` on top, and the
exported HTML file's colours (``app.player.EXPORT_THEME``). And text printed on a heatmap's
cells, along the whole colour scale as the installed plotly.js defines it and colours that text
(an expected failure for now: plotly.js's automatic #fff or #444 comes down to 3.1:1).
"""

from __future__ import annotations

import itertools
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from app.figures.base import (
    EXTRA_COLOURS,
    EXTRA_STYLES,
    ORACLE_COLOUR,
    POLICY_COLOURS,
    POLICY_STYLES,
    policy_colour,
    policy_style,
)
from h2o.policies.registry import BUILT_IN

ROOT = Path(__file__).resolve().parents[1]

#: The least CIEDE2000 difference between two colours shown together, in every vision.
MIN_DELTA_E = 10.0
#: WCAG 2.1 AA for body text.
MIN_CONTRAST = 4.5

#: Machado, Oliveira & Fernandes (2009), "A Physiologically-based Model for Simulation of Color
#: Vision Deficiency", IEEE TVCG 15(6), the severity-1.0 matrices, for linear RGB.
MACHADO = {
    "deuteranopia": [
        [0.367322, 0.860646, -0.227968],
        [0.280085, 0.672501, 0.047413],
        [-0.011820, 0.042940, 0.968881],
    ],
    "protanopia": [
        [0.152286, 1.052583, -0.204868],
        [0.114503, 0.786281, 0.099216],
        [-0.003882, -0.048116, 1.051998],
    ],
    "tritanopia": [
        [1.255528, -0.076749, -0.178779],
        [-0.078411, 0.930809, 0.147602],
        [0.004733, 0.691367, 0.303900],
    ],
}
VISIONS = ["normal", *MACHADO]

#: Linear sRGB -> CIE XYZ (D65), IEC 61966-2-1.
SRGB_TO_XYZ = np.array(
    [
        [0.4124564, 0.3575761, 0.1804375],
        [0.2126729, 0.7151522, 0.0721750],
        [0.0193339, 0.1191920, 0.9503041],
    ]
)
D65 = SRGB_TO_XYZ @ np.ones(3)


# -- colour science --------------------------------------------------------------------------------
def rgb(colour: str) -> np.ndarray:
    """``#rrggbb`` -> sRGB in [0, 1]."""
    h = colour.lstrip("#")
    assert re.fullmatch(r"[0-9A-Fa-f]{6}", h), colour
    return np.array([int(h[i : i + 2], 16) / 255 for i in (0, 2, 4)])


def linear(srgb: np.ndarray) -> np.ndarray:
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def seen(colour: str, vision: str) -> np.ndarray:
    """The colour's linear RGB as the vision sees it (clipped to the gamut)."""
    lin = linear(rgb(colour))
    if vision == "normal":
        return lin
    return np.clip(np.array(MACHADO[vision]) @ lin, 0.0, 1.0)


def lab(lin: np.ndarray) -> np.ndarray:
    """Linear sRGB -> CIELAB (D65)."""
    t = (SRGB_TO_XYZ @ lin) / D65
    d = 6 / 29
    f = np.where(t > d**3, np.cbrt(t), t / (3 * d**2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def ciede2000(lab1: np.ndarray, lab2: np.ndarray) -> float:
    """CIEDE2000 colour difference (kL = kC = kH = 1), as Sharma, Wu & Dalal (2005) state it."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_bar = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_bar**7 / (c_bar**7 + 25.0**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dh, h_bar = 0.0, h1p + h2p
    else:
        dh = h2p - h1p
        dh = dh - 360 if dh > 180 else dh + 360 if dh < -180 else dh
        if abs(h1p - h2p) <= 180:
            h_bar = (h1p + h2p) / 2
        else:
            h_bar = (h1p + h2p + (360 if h1p + h2p < 360 else -360)) / 2
    d_h = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    l_bar, cp_bar = (l1 + l2) / 2, (c1p + c2p) / 2
    t = (
        1
        - 0.17 * np.cos(np.radians(h_bar - 30))
        + 0.24 * np.cos(np.radians(2 * h_bar))
        + 0.32 * np.cos(np.radians(3 * h_bar + 6))
        - 0.20 * np.cos(np.radians(4 * h_bar - 63))
    )
    d_theta = 30 * np.exp(-(((h_bar - 275) / 25) ** 2))
    r_c = 2 * np.sqrt(cp_bar**7 / (cp_bar**7 + 25.0**7))
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / np.sqrt(20 + (l_bar - 50) ** 2)
    s_c = 1 + 0.045 * cp_bar
    s_h = 1 + 0.015 * cp_bar * t
    r_t = -np.sin(np.radians(2 * d_theta)) * r_c
    return float(
        np.sqrt(
            (dl / s_l) ** 2 + (dc / s_c) ** 2 + (d_h / s_h) ** 2 + r_t * (dc / s_c) * (d_h / s_h)
        )
    )


def luminance(srgb: np.ndarray) -> float:
    """WCAG 2.1 relative luminance."""
    r, g, b = linear(srgb)
    return float(0.2126 * r + 0.7152 * g + 0.0722 * b)


def contrast(fg: np.ndarray, bg: np.ndarray) -> float:
    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def over(fg: str, alpha: float, bg: str) -> np.ndarray:
    """``fg`` at ``alpha`` opacity composited on ``bg`` (in sRGB, as browsers blend)."""
    return alpha * rgb(fg) + (1 - alpha) * rgb(bg)


# -- the simulation and the difference are the published ones -------------------------------------
#: Test pairs 1, 7, 13, 17 and 25 of Sharma, Wu & Dalal (2005), Table 1, with their ΔE00.
SHARMA = [
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
    ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0009), 7.1792),
    ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
]


@pytest.mark.parametrize(("lab1", "lab2", "expected"), SHARMA)
def test_ciede2000_matches_sharmas_test_data(lab1, lab2, expected):
    assert ciede2000(np.array(lab1), np.array(lab2)) == pytest.approx(expected, abs=5e-5)
    assert ciede2000(np.array(lab2), np.array(lab1)) == pytest.approx(expected, abs=5e-5)


def test_the_simulations_keep_greys():
    """Each matrix maps white to white (its rows sum to 1) and keeps greys grey; protanopia
    darkens red (the long-wave cones are the missing ones)."""
    for m in MACHADO.values():
        assert np.allclose(np.array(m).sum(axis=1), 1.0, atol=1e-5)
    grey = "#777777"
    for vision in MACHADO:
        assert np.allclose(seen(grey, vision), seen(grey, "normal"), atol=1e-4)
    assert lab(seen("#FF0000", "protanopia"))[0] < lab(seen("#FF0000", "normal"))[0] - 10


# -- the palette -----------------------------------------------------------------------------------
#: Every colour that may be drawn with the policies' lines: the built-in classes' own, the spares
#: the palette gives a class that declares none, and the oracle bound.
SHOWN_TOGETHER = {
    **POLICY_COLOURS,
    **{f"spare {i}": c for i, c in enumerate(EXTRA_COLOURS)},
    "oracle": ORACLE_COLOUR,
}


def delta_e(a: str, b: str, vision: str) -> float:
    return ciede2000(lab(seen(a, vision)), lab(seen(b, vision)))


def too_close(colours: dict[str, str], vision: str) -> list[str]:
    """The pairs of ``colours`` under :data:`MIN_DELTA_E` apart in ``vision``."""
    return [
        f"{p} {a} / {q} {b}: ΔE00 {delta_e(a, b, vision):.1f}"
        for (p, a), (q, b) in itertools.combinations(colours.items(), 2)
        if delta_e(a, b, vision) < MIN_DELTA_E
    ]


@pytest.mark.parametrize("vision", VISIONS)
def test_every_two_policy_colours_stay_apart(vision):
    worst = min(
        delta_e(a, b, vision) for a, b in itertools.combinations(SHOWN_TOGETHER.values(), 2)
    )
    print(f"{vision}: least ΔE00 {worst:.1f}")
    close = too_close(SHOWN_TOGETHER, vision)
    assert not close, f"{vision}: under ΔE00 {MIN_DELTA_E}: {close}"


def registered_palette(classes=BUILT_IN) -> dict[str, tuple[str, tuple[str, str, int]]]:
    """Each registered class's colour and line style, as every chart draws it."""
    return {c.name: (policy_colour(c.name), policy_style(c.name)) for c in classes}


def check_palette(classes=BUILT_IN) -> None:
    """Every registered class has a colour of the checked palette, its own while the spares last,
    and a line style and marker of its own: what a class declares, or the palette's rule."""
    palette = registered_palette(classes)
    colours = {n: c for n, (c, _) in palette.items()}
    assert set(colours.values()) <= set(SHOWN_TOGETHER.values()), colours
    undeclared = [c.name for c in classes if not c.declares("colour")]
    if len(undeclared) <= len(EXTRA_COLOURS):
        assert len(set(colours.values())) == len(colours), colours
        for vision in VISIONS:
            assert not too_close({**colours, "oracle": ORACLE_COLOUR}, vision), vision
    for c in classes:  # a class's own colour and style are the ones it declares
        assert colours[c.name] == (c.declares("colour") or colours[c.name])
        assert palette[c.name][1] == (c.declares("line_style") or palette[c.name][1])
    styles = [style for _, style in palette.values()]
    markers = [symbol for _dash, symbol, _size in styles]
    assert len(set(markers)) == len(markers), palette
    assert len({(dash, symbol) for dash, symbol, _ in styles}) == len(styles)


def test_no_policy_rests_on_colour_alone():
    """Every policy has a line style and marker of its own, so two lines the same colour to a
    reader still differ (and so do coinciding curves, drawn one over another)."""
    check_palette()
    # the spares' markers are none of a declared style's: a spare never looks like a built-in
    declared = {symbol for _dash, symbol, _size in POLICY_STYLES.values()}
    assert not declared & {symbol for _dash, symbol, _size in EXTRA_STYLES}
    assert len({s for _d, s, _z in EXTRA_STYLES}) == len(EXTRA_STYLES)


def test_a_class_that_declares_no_colour_takes_the_palettes_spares(monkeypatch):
    """New built-in classes that name no colour or style, as many as the spares left, each get
    the next spare colour and style in the registry's order, apart from every other colour in
    every vision; one more takes the first spare colour again, with a style of its own."""
    from h2o import H2O
    from h2o.policies import registry

    colours_taken = sum(not c.declares("colour") for c in BUILT_IN)
    styles_taken = sum(not c.declares("line_style") for c in BUILT_IN)
    room = max(len(EXTRA_COLOURS) - colours_taken, 0)
    news = [type(f"New{i}", (H2O,), {"name": f"new-{i}"}) for i in range(room + 1)]
    for cls in news:
        monkeypatch.setitem(registry.POLICIES, cls.name, cls)
    monkeypatch.setattr(registry, "BUILT_IN", (*BUILT_IN, *news[:-1]))
    check_palette(registry.BUILT_IN)
    spares = [EXTRA_COLOURS[(colours_taken + i) % len(EXTRA_COLOURS)] for i in range(len(news))]
    assert [policy_colour(c.name) for c in news] == spares
    assert policy_colour(news[-1].name) == EXTRA_COLOURS[0]
    styles = [EXTRA_STYLES[(styles_taken + i) % len(EXTRA_STYLES)] for i in range(len(news))]
    assert [policy_style(c.name) for c in news] == styles
    monkeypatch.setattr(registry, "BUILT_IN", (*BUILT_IN, *news))
    check_palette(registry.BUILT_IN)  # colours shared past the spares, styles still their own


# -- text contrast ---------------------------------------------------------------------------------
#: Streamlit's light and dark defaults for the theme options the app's text uses, and the
#: sidebar's (used while backgroundColor and secondaryBackgroundColor keep their defaults).
DEFAULTS = {
    "light": {
        "primaryColor": "#c53948",
        "backgroundColor": "#ffffff",
        "secondaryBackgroundColor": "#f8f8f7",
        "textColor": "#2f2d2b",
        "blueTextColor": "#244fb4",
        "sidebarBackground": "#f8f8f7",
        "sidebarSecondaryBackground": "#f1f0ee",
    },
    "dark": {
        "primaryColor": "#cf4250",
        "backgroundColor": "#171614",
        "secondaryBackgroundColor": "#2d2b27",
        "textColor": "#edebe8",
        "blueTextColor": "#85b8f8",
        "sidebarBackground": "#21201d",
        "sidebarSecondaryBackground": "#2d2b27",
    },
}
#: Streamlit's faded text (captions, block quotes, the sidebar's notes): the text colour at 60 %.
FADED = 0.6
#: A selected segmented control or pill: the primary colour on its own tint.
TINT = {"light": 0.1, "dark": 0.2}


def test_the_defaults_are_the_installed_streamlits():
    """:data:`DEFAULTS` as the installed Streamlit documents its options."""
    from streamlit import config

    options = config._config_options_template
    names = ("primaryColor", "backgroundColor", "secondaryBackgroundColor", "textColor")
    for name in (*names, "blueTextColor"):
        text = " ".join(options[f"theme.{name}"].description.split())
        found = re.search(
            r"(#[0-9a-f]{6}) for the light theme and (#[0-9a-f]{6}) for the dark", text
        )
        assert found, f"theme.{name}: {text[:200]}"
        assert found.groups() == (DEFAULTS["light"][name], DEFAULTS["dark"][name]), name


def theme(base: str) -> dict[str, str]:
    """Streamlit's defaults for ``base``, with the app's config.toml on top."""
    conf = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    section = conf.get("theme", {})
    own = {k: v for k, v in section.items() if isinstance(v, str)}
    own.update(section.get(base, {}))
    t = {**DEFAULTS[base], **{k: v for k, v in own.items() if k in DEFAULTS[base]}}
    for key in ("backgroundColor", "secondaryBackgroundColor"):
        if key in own:  # the sidebar follows the app's colours once they are set
            t["sidebarBackground"] = t["sidebarSecondaryBackground"] = t[key]
    t["linkColor"] = own.get("linkColor", t["blueTextColor"])
    t["codeTextColor"] = own.get("codeTextColor", t["textColor"])
    t["codeBackgroundColor"] = own.get("codeBackgroundColor", t["secondaryBackgroundColor"])
    return t


def text_pairs(base: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(what, text colour, background) for the text the app shows."""
    t = theme(base)
    backs = ("backgroundColor", "secondaryBackgroundColor", "sidebarBackground")
    pairs = []
    for bg in backs:
        pairs += [
            (f"text on {bg}", rgb(t["textColor"]), rgb(t[bg])),
            (f"caption on {bg}", over(t["textColor"], FADED, t[bg]), rgb(t[bg])),
            (f"link on {bg}", rgb(t["linkColor"]), rgb(t[bg])),
        ]
    for bg in ("backgroundColor", "sidebarBackground"):  # a slider's value, the player's status
        pairs.append((f"primary on {bg}", rgb(t["primaryColor"]), rgb(t[bg])))
    pairs += [
        ("white on primary (primary buttons)", rgb("#ffffff"), rgb(t["primaryColor"])),
        (
            "selected segmented control",
            rgb(t["primaryColor"]),
            over(t["primaryColor"], TINT[base], t["backgroundColor"]),
        ),
        ("code text", rgb(t["codeTextColor"]), rgb(t["codeBackgroundColor"])),
    ]
    return pairs


#: Under 4.5:1 and left to Streamlit (streamlit#8399; tests/test_a11y_browser.py, KNOWN
#: "dark-primary-text"): the dark theme writes its primary colour as text and also puts white
#: text on it (primary buttons). No colour passes both: the first needs a luminance of at least
#: 0.24 on #171614, the second at most 0.18. The dark theme keeps Streamlit's #cf4250.
KNOWN_LOW = {
    "dark": {
        "primary on backgroundColor",
        "primary on sidebarBackground",
        "selected segmented control",
    }
}


def test_no_dark_primary_passes_both_ways():
    """The reason for :data:`KNOWN_LOW`: text in a colour on the dark background, and white text
    on it, cannot both reach 4.5:1."""
    dark = rgb(DEFAULTS["dark"]["backgroundColor"])
    need = MIN_CONTRAST * (luminance(dark) + 0.05) - 0.05  # the least luminance as text on it
    allow = (1.05 / MIN_CONTRAST) - 0.05  # the most with white text on it
    assert need > allow, (need, allow)


@pytest.mark.parametrize("base", ["light", "dark"])
def test_the_apps_text_contrast(base):
    low = set()
    for what, fg, bg in text_pairs(base):
        ratio = contrast(fg, bg)
        print(f"{base}: {what}: {ratio:.2f}:1")
        if ratio < MIN_CONTRAST:
            low.add(what)
    assert low == KNOWN_LOW.get(base, set()), (
        f"{base} theme, under {MIN_CONTRAST}:1: {sorted(low)}; known: "
        f"{sorted(KNOWN_LOW.get(base, set()))}"
    )


def test_the_exported_files_text_contrast():
    """The exported player: its colours are the app's light theme, and pass on their own."""
    from app.player import EXPORT_THEME

    t = theme("light")
    assert EXPORT_THEME["--st-text-color"] == t["textColor"]
    assert EXPORT_THEME["--st-primary-color"] == t["primaryColor"]
    assert EXPORT_THEME["--st-background-color"] == t["backgroundColor"]
    text, bg = EXPORT_THEME["--st-text-color"], EXPORT_THEME["--st-background-color"]
    primary = EXPORT_THEME["--st-primary-color"]
    pairs = {
        "text": (rgb(text), rgb(bg)),
        "the title's note (text at 80 %)": (over(text, 0.8, bg), rgb(bg)),
        "white on primary (Play, a selected option)": (rgb("#ffffff"), rgb(primary)),
        "primary (status) on the background": (rgb(primary), rgb(bg)),
        "text on the secondary background": (
            rgb(text),
            rgb(EXPORT_THEME["--st-secondary-background-color"]),
        ),
    }
    low = {k: round(contrast(*v), 2) for k, v in pairs.items() if contrast(*v) < MIN_CONTRAST}
    assert not low, low


# -- text on the heatmaps' colour scales -----------------------------------------------------------
#: plotly.js's defaults for a heatmap's cell text (``textfont.color`` "auto"): its
#: ``Color.contrast`` writes the background colour (#fff) or the default line colour (#444),
#: whichever has the higher WCAG contrast with the cell.
PLOTLY_LIGHT, PLOTLY_DARK = "#ffffff", "#444444"


def plotly_scale(name: str) -> list[tuple[float, str]]:
    """A named colour scale as the installed plotly.js defines it (read from its bundle)."""
    import plotly

    bundle = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(
        encoding="utf-8"
    )
    found = re.search(name + r':(\[\[0,"#[0-9a-f]{6}"\](?:,\[[.\d]+,"#[0-9a-f]{6}"\])+\])', bundle)
    assert found, f"plotly.js has no colour scale {name!r}"
    return [(float(v), c) for v, c in re.findall(r'\[([.\d]+),"(#[0-9a-f]{6})"\]', found.group(1))]


def along(scale: list[tuple[float, str]], n: int = 501) -> list[np.ndarray]:
    """``n`` colours evenly along the scale, interpolated in sRGB as plotly.js does."""
    stops = np.array([v for v, _ in scale])
    colours = np.array([rgb(c) for _, c in scale])
    return [
        np.array([np.interp(t, stops, colours[:, k]) for k in range(3)])
        for t in np.linspace(0, 1, n)
    ]


def auto_text(cell: np.ndarray) -> np.ndarray:
    light, dark = rgb(PLOTLY_LIGHT), rgb(PLOTLY_DARK)
    return light if contrast(light, cell) > contrast(dark, cell) else dark


def the_heatmaps_scales() -> dict[str, str]:
    """The colour scales of the app's heatmaps that print values in their cells."""
    from app.figures import GRID_SCALE

    return {"needle grid and allocation grids": GRID_SCALE}


def scale_colour(scale: list[tuple[float, str]], t: float) -> np.ndarray:
    """The colour at ``t`` in [0, 1] along the scale, interpolated in sRGB as plotly.js does."""
    stops = np.array([v for v, _ in scale])
    colours = np.array([rgb(c) for _, c in scale])
    return np.array([np.interp(t, stops, colours[:, k]) for k in range(3)])


def printed_heatmaps() -> dict[str, object]:
    """The app's figures whose heatmap cells print their values, on values spanning the scale."""
    from app import figures

    z = np.linspace(0, 1, 21).reshape(3, 7)
    z[1, 3] = np.nan
    budgets = np.arange(30 * 3).reshape(30, 3) % 37
    return {
        "needle grid": figures.needle_heatmaps(
            panels=[("a", z, np.ones_like(z)), ("b", 1 - z, np.ones_like(z))],
            lengths=list(range(7)),
            depths=[0, 50, 100],
            zrange=(0.0, 1.0),
            colour_title="share",
            value_format=".0%",
            title="t",
            clickable=True,
        ),
        "allocation grids": figures.allocation_grids(
            panels=[("a", budgets, None), ("b", budgets[::-1], None)], title="t"
        ),
    }


def test_the_heatmaps_cell_text_contrast():
    """Every printed cell value, in the colour our figure gives it, against the colour plotly.js
    paints its cell (the value on the named scale over the colour axis' range): 4.5:1 at least.
    No heatmap prints its own text (plotly.js would pick #fff or #444: 3.1:1 at worst)."""
    for what, fig in printed_heatmaps().items():
        ca = fig.layout.coloraxis
        scale = plotly_scale(the_heatmaps_scales()["needle grid and allocation grids"])
        assert ca.colorscale is not None
        lo, hi = ca.cmin, ca.cmax
        heatmaps = [t for t in fig.data if t.type == "heatmap"]
        texts = [t for t in fig.data if t.type == "scatter" and t.mode == "text"]
        assert heatmaps and len(texts) == len(heatmaps), what
        for hm, tx in zip(heatmaps, texts, strict=True):
            assert not hm.texttemplate and (hm.xaxis, hm.yaxis) == (tx.xaxis, tx.yaxis), what
            z = np.asarray(hm.z, dtype=float)
            xs, ys = list(hm.x), list(hm.y)
            finite = int(np.isfinite(z).sum())
            assert len(tx.text) == finite, (what, len(tx.text), finite)
            worst = np.inf
            for x, y, colour in zip(tx.x, tx.y, tx.textfont.color, strict=True):
                v = z[ys.index(y), xs.index(x)]
                cell = scale_colour(scale, (v - lo) / (hi - lo))
                worst = min(worst, contrast(rgb(colour), cell))
            print(f"{what}: cell text at worst {worst:.2f}:1")
            assert worst >= MIN_CONTRAST, f"{what}: cell text down to {worst:.2f}:1"


def test_plotlys_own_cell_text_would_not_do():
    """Why the figures colour their cell text themselves: plotly.js's automatic choice on the
    scale falls under 4.5:1 (if plotly.js ever changes this, the figures may go back to it)."""
    name = the_heatmaps_scales()["needle grid and allocation grids"]
    worst = min(contrast(auto_text(c), c) for c in along(plotly_scale(name)))
    assert worst < MIN_CONTRAST, worst


def test_black_or_white_cell_text_reads_on_every_scale():
    """The fix the test above waits for: black or white, whichever contrasts more with the cell,
    reaches 4.5:1 everywhere on the scales (on any colour: at worst 4.58:1)."""
    black, white = rgb("#000000"), rgb("#ffffff")
    for name in the_heatmaps_scales().values():
        worst = min(max(contrast(black, c), contrast(white, c)) for c in along(plotly_scale(name)))
        assert worst >= MIN_CONTRAST, (name, worst)
