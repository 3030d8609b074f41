"""The page shell: Streamlit's ``index.html`` with a few lines of the app's own in its head.

A visit's first chart waits on fetches that the shell starts at once, beside Streamlit's own
scripts, instead of after the server's first answer:

* **plotly.js**: on a page that opens on the step-through player, the ``plotly`` package's
  ``plotly.min.js``, served from :data:`PLOTLY_PATH` as Streamlit serves its own scripts (not
  gzipped anew for every student, cached by the browser for good); on a page whose first figure
  is a Plotly chart, Streamlit's chart module (``PlotlyChart.*.js``) and what it imports.
* **the server's address**: on a page's own URL (``/step-through``) Streamlit's front end first
  asks for ``/step-through/_stcore/health``, gets a 404 and tries one level up after a pause.
  When the URL ends in one of the app's pages the shell names the base instead, with
  ``window.__streamlit.BACKEND_BASE_URL``, Streamlit's own setting for where its server is.
* **the default page's own name**: Streamlit serves the default page (the lesson) at the base
  only, and answers ``/lesson`` with "Page not found"; the shell turns that URL into the base's
  before Streamlit reads it.

``python -m app.serve`` (``make run``, the replicas) serves the shell from a folder built once
per server (:func:`install`); ``streamlit run app/main.py`` serves Streamlit's own page, which
works the same, a little later, but for ``/lesson`` (Streamlit's "Page not found", then the
lesson). Nothing in the shell depends on a visitor.
"""

from __future__ import annotations

import atexit
import json
import re
import shutil
import tempfile
from pathlib import Path

import plotly

from app.pages import PAGES

#: The ``plotly`` package's own plotly.js (never a CDN: classrooms are often offline).
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
#: Where the shell serves it, under the app's base path; the version makes the name immutable.
PLOTLY_PATH = f"static/h2o/plotly-{plotly.__version__}.min.js"
#: Where ``index.html`` gets the shell's script: first in the head, before Streamlit's module.
_HEAD = "<head>"
#: A static import in a Streamlit module: ``import{x}from"./y.js"``, ``import"./y.js"``.
_IMPORT = re.compile(r'(?:from|import)\s*"\./([\w.-]+\.js)"')
#: The modules ``index.html`` already preloads.
_PRELOADED = re.compile(r"static/js/([\w.-]+\.js)")

#: The shell this process serves (empty: Streamlit's own page).
_installed: list[Path] = []

#: Streamlit's modules that draw each kind of first figure: a Plotly chart; the player (a custom
#: component, on a page whose elements include HTML).
MODULES = {"chart": ("PlotlyChart",), "player": ("Html", "BidiComponent")}


def module_file(static_dir: Path, name: str) -> str | None:
    """The file of Streamlit's module ``name`` in ``static_dir`` (``PlotlyChart`` →
    ``PlotlyChart.D9Z0_fxz.js``: the hash changes with each release), if exactly one."""
    found = [p.name for p in (static_dir / "static" / "js").glob(f"{name}.*.js")]
    return found[0] if len(found) == 1 else None


def imported(static_dir: Path, name: str, have: set[str]) -> list[str]:
    """The module file ``name`` and every module it imports, statically and in turn, less the
    files in ``have``."""
    js = static_dir / "static" / "js"
    seen, todo, out = set(have), [name], []
    while todo:
        n = todo.pop()
        if n in seen or not (js / n).is_file():
            continue
        seen.add(n)
        out.append(n)
        todo.extend(_IMPORT.findall((js / n).read_text(encoding="utf-8", errors="replace")))
    return out


def first_figures() -> dict[str, str]:
    """Each page's URL path, the default page's first, and what its first figure needs: ``player``
    (plotly.js for the step-through player), ``chart`` (Streamlit's Plotly chart) or ``none``."""
    return {
        p.url_path: "player" if p.opens_on_player else "chart" if p.has_chart else "none"
        for p in sorted(PAGES, key=lambda p: not p.default)
    }


def head_script(modules: dict[str, list[str]]) -> str:
    """The shell's ``<script>``: names the server's base path when the URL ends in a page of the
    app, then starts the fetches the page's first figure needs (``modules``: for each kind of
    figure, the files of Streamlit's modules that draw it and of those they import). A URL that
    ends in no page is the default page's (``/``, or a proxy's prefix)."""
    config = json.dumps({"figures": first_figures(), "modules": modules, "plotly": PLOTLY_PATH})
    return (
        "<script>(() => {\n"
        f"const c = {config.replace('</', '<' + chr(92) + '/')};\n"
        + r"""const parts = location.pathname.replace(/\/+$/, "").split("/");
const last = parts[parts.length - 1];
let figure = Object.values(c.figures)[0], base = parts.join("/");
if (Object.prototype.hasOwnProperty.call(c.figures, last)) {
  figure = c.figures[last];
  base = parts.slice(0, -1).join("/");
  if (last === Object.keys(c.figures)[0]) {
    // The default page lives at the base: Streamlit's router knows it by no other name. (A
    // sandboxed frame may refuse: Streamlit then says "Page not found" and opens it anyway.)
    try {
      history.replaceState(history.state, "", base + "/" + location.search + location.hash);
    } catch (e) {}
  } else {
    window.__streamlit = { BACKEND_BASE_URL: location.origin + base + "/" };
  }
}
const preload = (rel, path) => {
  const link = document.createElement("link");
  link.rel = rel;
  if (rel === "modulepreload") link.crossOrigin = "";
  else link.as = "script";
  link.href = location.origin + base + "/" + path;
  document.head.appendChild(link);
};
// The player runs plotly.js itself once it has drawn its stories and kept slots.
if (figure === "player") preload("preload", c.plotly);
for (const name of c.modules[figure] || []) preload("modulepreload", "static/js/" + name);
})();</script>"""
    )


def build(streamlit_static: Path, target: Path, plotly_js: Path = PLOTLY_JS) -> Path:
    """Make ``target`` Streamlit's static folder with the shell's ``index.html``: every other
    file a link to Streamlit's, and ``plotly_js`` at :data:`PLOTLY_PATH`. Returns ``target``."""
    index = (streamlit_static / "index.html").read_text(encoding="utf-8")
    if index.count(_HEAD) != 1:
        raise ValueError(f"{streamlit_static / 'index.html'} has no single {_HEAD}: not patched")
    target.mkdir(parents=True, exist_ok=True)
    for entry in streamlit_static.iterdir():
        if entry.name not in ("index.html", "static"):
            (target / entry.name).symlink_to(entry)
    (target / "static").mkdir(exist_ok=True)
    for entry in (streamlit_static / "static").iterdir():
        (target / "static" / entry.name).symlink_to(entry)
    (target / PLOTLY_PATH).parent.mkdir(parents=True, exist_ok=True)
    (target / PLOTLY_PATH).symlink_to(plotly_js)
    have = set(_PRELOADED.findall(index))
    modules = {
        figure: [
            f
            for name in names
            if (file := module_file(streamlit_static, name))
            for f in imported(streamlit_static, file, have)
        ]
        for figure, names in MODULES.items()
    }
    index = index.replace(_HEAD, _HEAD + head_script(modules), 1)
    (target / "index.html").write_text(index, encoding="utf-8")
    return target


def install() -> Path | None:
    """Serve the shell from this process's Streamlit server, before it starts: a folder built
    for the process (removed at exit) in place of Streamlit's static folder. Returns the
    folder; None, and Streamlit's own page, when that page is not one the shell can patch."""
    from streamlit import file_util

    own = Path(file_util.get_static_dir())
    target = Path(tempfile.mkdtemp(prefix="h2o-shell-"))
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    try:
        build(own, target)
    except (OSError, ValueError):
        return None
    file_util.get_static_dir = lambda: str(target)
    _installed[:] = [target]
    return target


def plotly_path() -> str | None:
    """Where this process's server serves plotly.js, under its base path (None: no shell)."""
    return PLOTLY_PATH if _installed else None
