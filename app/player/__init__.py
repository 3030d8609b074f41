"""The step-through player in the Streamlit app: its front end (:mod:`h2o.player`: the ES
modules, the constants they share with Python, the payload and the colour scale — one front end
for every host) as a Streamlit component, and as a self-contained HTML file for slides; the step
view's server side is ``stepper.py``.

Inside the app it is a custom component v2 (inline HTML/CSS/JS, no iframe): the page sends a
view's payload (:mod:`h2o.player.playback`) once per range of steps; stepping and playing happen
in the browser; the component's ``view`` state (step and view settings) comes back when the user
pauses or stops interacting. plotly.js is served by the app itself (the page shell's copy, or
``app/static/plotly.min.js``: the ``plotly`` package's), never from a CDN: classrooms are often
offline.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

from app import shell
from h2o.player import CSS_FILE, JS_DIR, JS_FILES, bundle, constants

HERE = Path(__file__).parent
STATIC = HERE.parent / "static"
PLOTLY_JS = shell.PLOTLY_JS  # the plotly package's own
NAME = "h2o_player"

_LOADER = """
function loadPlotly(url) {
  if (window.Plotly) return Promise.resolve();
  if (!window.__h2oPlotly) {
    window.__h2oPlotly = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = url;
      s.onload = resolve;
      s.onerror = () => { window.__h2oPlotly = null; reject(new Error("could not load " + url)); };
      document.head.appendChild(s);
    });
  }
  return window.__h2oPlotly;
}
"""

_WRAPPER = (
    _LOADER
    + """
export default function (component) {
  const { data, parentElement, setStateValue } = component;
  const root = parentElement.querySelector(".h2o-root");
  const box = parentElement.__h2o || (parentElement.__h2o = {});
  box.report = (view) => setStateValue("view", view);
  // The stories, controls and kept slots need no plotly.js: show them at once, plots on arrival.
  if (!box.player) box.player = H2OPlayer.mount(root, data, { report: (v) => box.report(v) });
  else box.player.load(data);
  const player = box.player;
  if (!window.Plotly) {
    loadPlotly(H2OPlayer.decode(data).header.plotly)
      .then(() => player.plotlyReady())
      .catch((err) => {
        root.prepend(document.createTextNode("The plots could not load: " + err.message));
      });
  }
  return () => { if (box.player) { box.player.destroy(); box.player = null; } };
}
"""
)


def _read(name: str) -> str:
    return (CSS_FILE.parent / name).read_text(encoding="utf-8")


def ensure_static() -> Path:
    """Put the ``plotly`` package's own plotly.min.js where the app serves static files."""
    target = STATIC / "plotly.min.js"
    if not target.is_file() or target.stat().st_size != PLOTLY_JS.stat().st_size:
        STATIC.mkdir(exist_ok=True)
        tmp = target.with_suffix(".tmp")
        shutil.copyfile(PLOTLY_JS, tmp)
        tmp.replace(target)  # atomic: a browser never gets half a file
    return target


def plotly_url() -> str:
    """Where the browser fetches plotly.js, under any base URL path: the page shell's copy
    (:mod:`app.shell`, which the browser may have started fetching already) when the server
    serves the shell, else the app's static route."""
    base = str(st.get_option("server.baseUrlPath") or "").strip("/")
    return ("/" + base if base else "") + "/" + (shell.plotly_path() or "app/static/plotly.min.js")


@st.cache_resource(show_spinner=False)
def _registered(_versions: tuple[int, ...]) -> Callable[..., Any]:
    ensure_static()
    return st.components.v2.component(
        NAME,
        html='<div class="h2o-root"></div>',
        css=_read("player.css"),
        js=bundle() + _WRAPPER,
        isolate_styles=False,  # plotly.js styles its plots from the document's head
    )


#: Seconds between looks at the front end's files (every student's player asks for the component).
_LOOK_SECONDS = 1.0
_looked: list[Any] = [0.0, None]  # when, the component then


def _component() -> Callable[..., Any]:
    # Keyed by the files' mtimes: an edited script is registered anew without a restart, within
    # a second (not by a stat of seven files on every run of every student).
    now = time.monotonic()
    if _looked[1] is None or now - _looked[0] >= _LOOK_SECONDS:
        files = [JS_DIR / n for n in JS_FILES] + [CSS_FILE, Path(constants.__file__)]
        _looked[:] = [now, _registered(tuple(f.stat().st_mtime_ns for f in files))]
    return _looked[1]


def preload() -> None:
    """Start fetching and running plotly.js now, while the server computes the page: the router
    calls it first on a page that opens on a player, so the plots are drawn sooner after the
    player arrives. A script in ``st.html``, not a component: it runs as soon as the page's
    first elements are drawn, where a component's code is fetched first. Nothing when the
    server serves the page shell (:mod:`app.shell`): its page fetched plotly.js from the start,
    and the player runs it once its stories and kept slots are drawn (those sooner on screen,
    the plots no later: ``benchmarks/app.py``)."""
    if shell.plotly_path() is None:
        st.html(_preload_html(plotly_url()), unsafe_allow_javascript=True)


@functools.lru_cache(maxsize=4)
def _preload_html(url: str) -> str:
    ensure_static()
    # The player's loader shares window.__h2oPlotly: plotly.js is fetched once a page. The
    # element takes no room (a hidden element still has a flex gap around it).
    call = f"loadPlotly({json.dumps(url)}).catch(() => {{}});".replace("</", "<\\/")
    return (
        "<style>.stElementContainer:has(> .stHtml .h2o-plotly-preload) { display: none; }</style>"
        '<span class="h2o-plotly-preload" hidden></span>'
        f"<script>(() => {{\n{_LOADER}\n{call}\n}})();</script>"
    )


def mount(payload: bytes, *, key: str, on_change: Callable[[], None]) -> Any:
    """Show the player with ``payload``; ``on_change`` runs when the browser reports its view."""
    return _component()(data=payload, key=key, on_view_change=on_change, width="stretch")


def reported(key: str) -> dict[str, Any] | None:
    """The last ``view`` the browser reported for the player under ``key`` (None before any)."""
    state = st.session_state.get(key)
    view = getattr(state, "view", None) if state is not None else None
    if view is None and isinstance(state, dict):
        view = state.get("view")
    return view if isinstance(view, dict) else None


#: The exported file's colours: the app's light theme (``[theme.light]`` in .streamlit/config.toml
#: and Streamlit's light defaults), given as the Streamlit variables the player's stylesheet reads.
#: Without them the player falls back to #ff4b4b, and white on it is 3.3:1, under WCAG AA's 4.5:1
#: (``tests/test_palette.py`` checks these, ``tests/test_a11y_browser.py`` the file in Chromium).
EXPORT_THEME = {
    "--st-text-color": "#141312",
    "--st-background-color": "#ffffff",
    "--st-secondary-background-color": "#f8f8f7",
    "--st-primary-color": "#bd3343",
}


def export_html(payload: bytes, title: str) -> bytes:
    """One self-contained HTML file (plotly.js and the data inlined) that plays offline."""

    def inline(js: str) -> str:
        return js.replace("</script", "<\\/script")

    data = base64.b64encode(payload).decode("ascii")
    theme = " ".join(f"{name}: {value};" for name, value in EXPORT_THEME.items())
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>
:root {{ {theme} }}
body {{ margin: 0 auto; padding: 1rem 2rem 3rem; max-width: 1400px;
  background: var(--st-background-color); }}
.h2o-export-title {{ font-family: "Source Sans Pro", sans-serif; color: var(--st-text-color); }}
.h2o-export-title h1 {{ font-size: 1.6rem; margin: 0.2rem 0; }}
.h2o-export-title p {{ margin: 0.2rem 0 0.6rem; opacity: 0.8; }}
{_read("player.css")}
.h2o-bar {{ top: 0; }}
</style></head>
<body><main>
<div class="h2o-export-title"><h1>{html.escape(title)}</h1>
<p>Exported from the h2o teaching app. Steps and plays offline: ←/→ step, Space plays.</p></div>
<div id="h2o" class="h2o-root"></div>
</main>
<script>{inline(PLOTLY_JS.read_text(encoding="utf-8"))}</script>
<script>{inline(bundle())}
(function () {{
  const bin = atob("{data}");
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  H2OPlayer.mount(document.getElementById("h2o"), bytes, {{ standalone: true }});
}})();
</script>
</body></html>
"""
    return page.encode("utf-8")
