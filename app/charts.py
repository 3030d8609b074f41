"""Every chart on a page, with an accessible name and description: :func:`show` draws a Plotly
figure the way the pages did (``st.plotly_chart``) and tells assistive technology what it shows.

* **Name**: the figure's own title, as plain text, through ``st.plotly_chart(alt=...)``:
  Streamlit gives the chart ``role="figure"`` and that ``aria-label``.
* **Description**: the sentence(s) the page computes for the chart (the ones printed under or
  above it), linked with ``aria-describedby``. Streamlit has no option for that, so the chart is
  followed by a ``hidden`` paragraph holding the sentences as escaped plain text (``st.html``,
  never markup from the page) — a description may point at hidden text; a screen reader's
  reading of the page skips it, so the sentences are not read twice there — and one component
  a page (:func:`link_descriptions`, inline: no iframe, nothing fetched) sets the attribute on
  every chart that has one. Their elements take no room (``display: none``): the page looks as
  it did, and a chart costs the server one small element more, not a component of its own.

``tests/test_a11y_browser.py`` reads every chart's name and description from Chromium's
accessibility tree, on every page.
"""

from __future__ import annotations

import functools
import html
import re
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import streamlit as st

from .figures.base import FONT, PRESENTER_FONT, TEXT_COLOUR, SharedFigure
from .state import PRESENTER

#: The linker's element, and the room neither it nor a description takes (a hidden element
#: still has a flex gap around it).
_HTML = '<span class="h2o-chart-linker" hidden></span>'
_CSS = (
    ".stElementContainer:has(> .stBidiComponent .h2o-chart-linker),"
    ".stElementContainer:has(> .stHtml .h2o-chart-description) { display: none; }"
)
#: Every description on the page names its chart (``data-chart``, the chart's key): link each
#: chart to its description now, and again (once a frame at most) whenever the page changes —
#: a chart may be drawn after its description, and a rerun redraws both.
_JS = """
export default function () {
  let queued = false;
  const link = () => {
    queued = false;
    for (const box of document.querySelectorAll("p.h2o-chart-description[data-chart]")) {
      const chart = document.querySelector(
        ".st-key-" + CSS.escape(box.dataset.chart) + ' [data-testid="stPlotlyChart"]');
      if (chart && chart.getAttribute("aria-describedby") !== box.id) {
        chart.setAttribute("aria-describedby", box.id);
      }
    }
  };
  const watch = new MutationObserver(() => {
    if (!queued) {
      queued = true;
      requestAnimationFrame(link);
    }
  });
  watch.observe(document.body, { childList: true, subtree: true });
  link();
  return () => watch.disconnect();
}
"""


@st.cache_resource(show_spinner=False)
def _linker() -> Callable[..., Any]:
    return st.components.v2.component(
        "h2o_chart_descriptions", html=_HTML, css=_CSS, js=_JS, isolate_styles=False
    )


def link_descriptions() -> None:
    """Once a run, on every page (the router's call): the component that links each chart to
    its description."""
    _linker()(key="h2o_chart_descriptions", width="content", height="content")


# -- plain text ------------------------------------------------------------------------------------
_TAG = re.compile(r"<[^>]*>")
_BREAK = re.compile(r"\s*<br\s*/?>\s*", re.I)


#: Titles already read, by figure (a figure is unhashable: by its id, dropped with the figure).
#: Reading a title through Plotly's properties costs about 0.1 ms, and the figures a view shows
#: are shared by every student of that view; they are never changed once shown.
_TITLES: dict[int, str] = {}


def title_of(fig: Any) -> str:
    """The figure's title as plain text: Plotly's markup gone (a second line, the subtitle,
    after a dash), its entities decoded."""
    known = _TITLES.get(id(fig))
    if known is not None:
        return known
    title = fig.layout.title
    text = (title.text if title is not None else None) or ""
    plain_title = " ".join(html.unescape(_TAG.sub("", _BREAK.sub(" — ", text))).split())
    try:
        weakref.finalize(fig, _TITLES.pop, id(fig), None)
    except TypeError:  # not a figure that can be watched: read every time
        return plain_title
    _TITLES[id(fig)] = plain_title
    return plain_title


#: Markdown's escapable punctuation (CommonMark), as ``state.md`` and the pages escape it.
_ESCAPED = re.compile(r"\\([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EMPH = re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])")
_CODE = re.compile(r"`([^`]*)`")
_LINE_START = re.compile(r"^\s*(?:>\s*)*(?:[-*+]\s+|\d+\.\s+|#{1,6}\s+)?", re.M)


@functools.lru_cache(maxsize=2048)  # a view's sentences repeat for every student who opens it
def plain(markdown: str) -> str:
    """What a sentence written in markdown reads as, once Streamlit has rendered it: the
    emphasis, code marks, links' targets, list bullets and quote marks gone, escapes undone."""
    keep: list[str] = []

    def hold(m: re.Match) -> str:  # escaped characters are text: keep them out of the rules
        keep.append(m.group(1))
        return f"\x00{len(keep) - 1}\x00"

    text = _ESCAPED.sub(hold, markdown)
    text = _CODE.sub(lambda m: m.group(1), text)
    text = _LINK.sub(r"\1", text)
    text = _LINE_START.sub("", text)
    for _ in range(2):  # nested: ***both***
        text = _STRONG.sub(r"\2", text)
        text = _EMPH.sub(r"\1", text)
    text = re.sub(r"\x00(\d+)\x00", lambda m: keep[int(m.group(1))], text)
    return " ".join(text.split())


# -- readable text ---------------------------------------------------------------------------------
_AXIS = re.compile(r"^[xy]axis\d*$")
_COLOUR_AXIS = re.compile(r"^coloraxis\d*$")
_LEGEND = re.compile(r"^legend\d*$")
_INLINE_SIZE = re.compile(r"font-size:\s*(\d+(?:\.\d+)?)px")

#: Readable versions already made, by figure and presenter mode (dropped with the figure): the
#: figures a view shows are shared by every student of that view and never changed once made.
_READABLE: dict[tuple[int, bool], Any] = {}


def _text(font: dict | None, least: int | None) -> dict:
    """``font`` in the chart text colour, at ``least`` pixels or more (``None``: as it was)."""
    font = dict(font or {})
    font["color"] = TEXT_COLOUR
    if least is not None:
        font["size"] = max(font.get("size") or FONT, least)
    return font


def _title(title: Any, least: int | None) -> dict:
    title = {"text": title} if isinstance(title, str) else dict(title or {})
    title["font"] = _text(title.get("font"), least)
    text = title.get("text")
    if least is not None and isinstance(text, str):  # a subtitle's own size, in its span
        title["text"] = _INLINE_SIZE.sub(
            lambda m: f"font-size:{max(float(m.group(1)), least):g}px", text
        )
    return title


def _colorbar(bar: dict | None, least: int | None) -> dict:
    bar = dict(bar or {})
    bar["tickfont"] = _text(bar.get("tickfont"), least)
    bar["title"] = _title(bar.get("title"), least)
    return bar


def readable_layout(layout: dict, presenter: bool) -> dict:
    """A copy of ``layout`` whose text (title, ticks, axis titles, legends, colour bars, notes,
    hover labels) is in :data:`~app.figures.base.TEXT_COLOUR`, and in presenter mode at least
    :data:`~app.figures.base.PRESENTER_FONT` pixels, the axes making room for their larger
    labels (``automargin``; a y title too long for its plot on two lines)."""
    least = PRESENTER_FONT if presenter else None
    out = dict(layout)
    out["font"] = _text(layout.get("font"), least)
    if "title" in layout:
        out["title"] = _title(layout["title"], least)
    for name, value in layout.items():
        if _AXIS.match(name) and isinstance(value, dict):
            axis = dict(value)
            axis["tickfont"] = _text(value.get("tickfont"), least)
            axis["title"] = _title(value.get("title"), least)
            if presenter:  # room across the axis only: a y title longer than the plot is
                # centred on it, and pushing the top and bottom margins for it flattens the plot
                axis["automargin"] = "height" if name.startswith("x") else "width"
            out[name] = axis
        elif _LEGEND.match(name) and isinstance(value, dict):
            legend = dict(value, font=_text(value.get("font"), least))
            if "title" in value:
                legend["title"] = _title(value["title"], least)
            out[name] = legend
        elif _COLOUR_AXIS.match(name) and isinstance(value, dict):
            out[name] = dict(value, colorbar=_colorbar(value.get("colorbar"), least))
    if "legend" not in out:
        out["legend"] = {"font": _text(None, least)}
    out["annotations"] = [
        dict(a, font=_text(a.get("font"), least)) for a in layout.get("annotations", ())
    ]
    hover = dict(layout.get("hoverlabel") or {})
    out["hoverlabel"] = dict(hover, font=_text(hover.get("font"), least))
    # The top margin is left as it is: make_figure sizes it for the legend's rows at the narrow
    # side (half a projected page), which leaves room for rows 2 px taller at PRESENTER_FONT.
    if presenter:
        _fit_y_titles(out)
    return out


#: A character of an axis title, in font sizes (a proportional font's average, on the wide side).
_CHAR_EM = 0.55


def _fit_y_titles(layout: dict) -> None:
    """A y axis's title longer than its plot is tall (an estimate: the layout's height less its
    top and bottom margins, times the axis's domain) is clipped by the figure's edge: break it
    into two lines at the space nearest its middle (``automargin`` makes room for the second)."""
    margin = layout.get("margin") or {}
    height = layout.get("height")
    if not isinstance(height, (int, float)):
        return
    plot = height - margin.get("t", 0) - margin.get("b", 0)
    for name, axis in layout.items():
        if not (_AXIS.match(name) and name.startswith("y")):
            continue
        title = axis.get("title") or {}
        text = title.get("text")
        if not isinstance(text, str) or "<br" in text or " " not in text:
            continue
        lo, hi = (axis.get("domain") or (0, 1))[:2]
        size = title.get("font", {}).get("size") or PRESENTER_FONT
        if len(html.unescape(_TAG.sub("", text))) * size * _CHAR_EM <= plot * (hi - lo):
            continue
        spaces = [i for i, c in enumerate(text) if c == " "]
        cut = min(spaces, key=lambda i: abs(i - len(text) / 2))
        axis["title"] = dict(title, text=text[:cut] + "<br>" + text[cut + 1 :])


def readable(fig: Any, presenter: bool) -> Any:
    """``fig`` with :func:`readable_layout`'s text, as a new figure: ``fig`` itself may be one
    every session shares (``app.figures.base.SharedFigure``) and is never changed. Traces keep
    their own text (a heatmap's cell values are sized to their cells); their colour bars take
    the chart text's colour and size."""
    known = _READABLE.get((id(fig), presenter))
    if known is not None:
        return known
    spec = fig.to_dict()  # a shared figure's is kept: copied below wherever it is changed
    least = PRESENTER_FONT if presenter else None
    data = [
        dict(tr, colorbar=_colorbar(tr["colorbar"], least)) if tr.get("colorbar") else tr
        for tr in spec.get("data", ())
    ]
    made = SharedFigure(
        {"data": data, "layout": readable_layout(spec.get("layout", {}), presenter)},
        _validate=False,
    )
    try:
        weakref.finalize(fig, _READABLE.pop, (id(fig), presenter), None)
    except TypeError:  # not a figure that can be watched: made every time
        return made
    _READABLE[(id(fig), presenter)] = made
    return made


# -- the chart -------------------------------------------------------------------------------------
def show(
    fig: Any,
    *,
    key: str,
    describe: str | Iterable[str],
    where: Any = None,
    **kwargs: Any,
) -> Any:
    """``st.plotly_chart(fig, key=key, ...)`` in ``where`` (a column, a tab; the page by
    default), named by its title and described by ``describe``: the sentence(s),
    in markdown, that the page computes for it (none: a name only). Returns what
    ``st.plotly_chart`` returns."""
    where = st if where is None else where
    name = title_of(fig)
    if not name:
        raise ValueError(f"chart {key!r} has no title to name it by")
    parts = [describe] if isinstance(describe, str) else list(describe)
    parts = [p for p in (plain(p) for p in parts) if p]
    kwargs.setdefault("width", "stretch")
    shown = where.plotly_chart(
        readable(fig, bool(st.session_state.get(PRESENTER, False))),
        key=key,
        alt=name,
        config={"displaylogo": False},
        **kwargs,
    )
    if not parts:  # nothing computed for it this time (the page says why): a name only
        return shown
    chart = html.escape(key, quote=True)
    where.html(
        f'<p class="h2o-chart-description" id="h2o-description-{chart}" data-chart="{chart}" '
        "hidden>" + " ".join(f"<span>{html.escape(p)}</span>" for p in parts) + "</p>"
    )
    return shown
