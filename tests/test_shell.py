"""The page shell (``app/shell.py``): Streamlit's page with the app's script first in its head.

What it must do, from the shell's own contract: every file but ``index.html`` is Streamlit's;
the script comes before Streamlit's module; each page's first figure gets what it needs (the
player plotly.js, a chart Streamlit's chart module and everything that module imports); the
plotly.js it serves is the ``plotly`` package's, not gzipped per request and cached for good; a
page's URL asks the server where it is once; under a base path too; and a Streamlit page it
cannot patch is left as it is. The browser tests run the app as ``make run`` does.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from streamlit import file_util
from streamlit_server import needs_chromium, serve_process, settle, wait_player, wait_ready

from app import pages, player, shell

STREAMLIT_STATIC = Path(file_util.get_static_dir())


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return shell.build(STREAMLIT_STATIC, tmp_path_factory.mktemp("shell"))


def _config(index: str) -> dict:
    return json.loads(re.search(r"const c = (\{.*\});\n", index).group(1))


def test_every_file_but_the_page_is_streamlits_and_the_script_comes_first(built):
    theirs = sorted(
        str(p.relative_to(STREAMLIT_STATIC)) for p in STREAMLIT_STATIC.rglob("*") if p.is_file()
    )
    for rel in theirs:
        if rel != "index.html":
            assert (built / rel).resolve() == (STREAMLIT_STATIC / rel).resolve(), rel
    index = (built / "index.html").read_text(encoding="utf-8")
    own = (STREAMLIT_STATIC / "index.html").read_text(encoding="utf-8")
    script = index[index.index("<head>") + len("<head>") : index.index("</script>") + 9]
    assert script.startswith("<script>") and index.replace(script, "", 1) == own
    assert index.index(script) < index.index('<script type="module"')


def test_the_served_plotly_js_is_the_plotly_packages(built):
    served = built / shell.PLOTLY_PATH
    assert served.read_bytes() == shell.PLOTLY_JS.read_bytes()
    import plotly

    assert plotly.__version__ in shell.PLOTLY_PATH  # a new plotly is a new name: cached for good


def test_each_page_fetches_what_its_first_figure_needs(built):
    config = _config((built / "index.html").read_text(encoding="utf-8"))
    want = {}
    for p in pages.PAGES:
        if p.opens_on_player:
            want[p.url_path] = "player"
        elif p.url_path == "how-it-works":  # its first figure is a code block
            want[p.url_path] = "none"
        else:
            want[p.url_path] = "chart"
    assert config["figures"] == want
    # The default page first: a URL that ends in no page (``/``, a proxy's prefix) is its.
    assert next(iter(config["figures"])) == next(p.url_path for p in pages.PAGES if p.default)
    assert config["plotly"] == shell.PLOTLY_PATH
    assert config["modules"]["chart"][0].startswith("PlotlyChart.")
    assert [m.split(".")[0] for m in config["modules"]["player"]][:1] == ["Html"]
    assert any(m.startswith("BidiComponent.") for m in config["modules"]["player"])


def test_a_first_figures_modules_bring_everything_they_import(built):
    """Every static import of a preloaded module is preloaded too, by the shell or the page
    (read from the files here, not from the shell's own parser)."""
    index = (built / "index.html").read_text(encoding="utf-8")
    config = _config(index)
    page_has = set(re.findall(r'(?:href|src)="\./static/js/([^"]+)"', index))
    js = STREAMLIT_STATIC / "static" / "js"
    for figure, files in config["modules"].items():
        have = set(files) | page_has
        for name in files:
            text = (js / name).read_text(encoding="utf-8")
            for dep in re.findall(r'(?:from|import)\s*"\./([^"]+\.js)"', text):
                assert dep in have, (figure, name, dep)
        assert not set(files) & page_has, figure  # nothing fetched twice


def test_a_page_the_shell_cannot_patch_is_left_alone(tmp_path, monkeypatch):
    odd = tmp_path / "static"
    (odd / "static").mkdir(parents=True)
    (odd / "index.html").write_text("<html><body>no head</body></html>", encoding="utf-8")
    with pytest.raises(ValueError, match="<head>"):
        shell.build(odd, tmp_path / "out")
    monkeypatch.setattr(file_util, "get_static_dir", lambda: str(odd))
    monkeypatch.setattr(shell, "_installed", [])
    assert shell.install() is None
    assert file_util.get_static_dir() == str(odd)
    assert shell.plotly_path() is None


def test_the_player_loads_the_shells_plotly_js_when_there_is_one(monkeypatch):
    monkeypatch.setattr(shell, "_installed", [])
    assert player.plotly_url() == "/app/static/plotly.min.js"
    monkeypatch.setattr(shell, "_installed", [Path("/nowhere")])
    assert player.plotly_url() == "/" + shell.PLOTLY_PATH


def test_with_the_shell_the_router_leaves_plotly_js_to_the_player(monkeypatch):
    """The shell's page fetched plotly.js already; the player runs it after drawing its stories
    and kept slots. Without the shell the router's script starts it (tests/test_preload.py)."""
    shown: list[str] = []
    monkeypatch.setattr(player.st, "html", lambda body, **kw: shown.append(body))
    monkeypatch.setattr(shell, "_installed", [])
    player.preload()
    assert len(shown) == 1 and "loadPlotly" in shown[0]
    monkeypatch.setattr(shell, "_installed", [Path("/nowhere")])
    player.preload()
    assert len(shown) == 1


# -- served, in Chromium ---------------------------------------------------------------------

_WS_OPENED = """
const Native = window.WebSocket;
window.WebSocket = function (...args) {
  const ws = new Native(...args);
  window.__h2oSocket = performance.now();
  return ws;
};
window.WebSocket.prototype = Native.prototype;
Object.assign(window.WebSocket, Native);
"""


@pytest.fixture(scope="module")
def prefixed():
    """The app as ``make run`` serves it, under a base path (as behind a proxy's prefix)."""
    with serve_process(base_path="h2o") as (url, _):
        yield url


def test_the_shells_plotly_js_is_sent_as_is_and_cached_for_good(server):
    req = urllib.request.Request(
        f"{server}/{shell.PLOTLY_PATH}", headers={"Accept-Encoding": "gzip"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
        assert r.headers.get("Content-Encoding") is None  # no gzip of 4.8 MB for every student
        assert "immutable" in r.headers.get("Cache-Control", "")
    assert body == shell.PLOTLY_JS.read_bytes()
    with urllib.request.urlopen(f"{server}/step-through", timeout=30) as r:
        page = r.read().decode()
    assert shell.PLOTLY_PATH in page  # the shell is what ``make run`` serves


@needs_chromium
@pytest.mark.browser
@pytest.mark.parametrize(
    ("path", "first"),
    [("step-through", "/" + shell.PLOTLY_PATH), ("window-explorer", "/static/js/PlotlyChart.")],
)
def test_a_page_asks_where_the_server_is_once_and_fetches_its_figure_first(
    server, prefixed, browser, path, first
):
    for base in (server, prefixed):
        ctx = browser.new_context(viewport={"width": 1280, "height": 720})
        ctx.add_init_script(_WS_OPENED)
        page = ctx.new_page()
        asked: list[str] = []
        page.on("request", lambda r, a=asked: a.append(r.url) if "_stcore/health" in r.url else 0)
        try:
            page.goto(f"{base}/{path}")
            wait_ready(page)
            if path == "step-through":
                wait_player(page)
            assert asked == [f"{base}/_stcore/health"], asked  # not /{path}/_stcore/health first
            fetched = page.evaluate(
                """(first) => performance.getEntriesByType("resource")
                     .filter((e) => new URL(e.name).pathname.includes(first))
                     .map((e) => e.startTime)""",
                first,
            )
            opened = page.evaluate("() => window.__h2oSocket")
            assert len(fetched) == 1 and opened is not None and fetched[0] < opened, (
                fetched,
                opened,
            )
        finally:
            ctx.close()


@needs_chromium
@pytest.mark.browser
def test_the_default_pages_own_name_opens_it(server, prefixed, browser):
    """Streamlit serves the default page at the base only: ``/lesson`` opened "Page not found"."""
    (lesson,) = [p for p in pages.PAGES if p.default]
    for base in (server, prefixed):
        ctx = browser.new_context(viewport={"width": 1280, "height": 720})
        page = ctx.new_page()
        try:
            page.goto(f"{base}/{lesson.url_path}?chapter=3#top")
            settle(page)
            assert page.url == f"{base}/?chapter=3#top"
            assert page.locator('[role="dialog"]').count() == 0
            assert page.locator("h1").first.inner_text() == "H2O, step by step"
        finally:
            ctx.close()
