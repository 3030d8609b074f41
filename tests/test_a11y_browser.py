"""The app's accessibility, and how it is checked (what follows is the summary for the docs).

**What is checked, with what**

* axe-core 4 (``axe-playwright-python``) in Debian's Chromium, here: every page in the light and
  the dark theme, the lesson in self-study (before and after every answer is revealed) and in
  presenter mode (every chapter: ``tests/test_presenter_browser.py`` runs these checks on the
  page its projector checks open), and the step view's exported HTML file opened from disk; each
  checked whole (the viewport made as tall as the page). Target: WCAG 2.1 AA as axe-core checks
  it, no violation of impact "serious" or "critical" that the app causes. Moderate and minor
  findings (heading order, Streamlit's file-upload drop zone) are printed, not asserted.
* Charts that say what they show, here, from Chromium's accessibility tree (CDP
  ``Accessibility.getPartialAXTree``) on the same views: every Plotly chart of a page is a
  ``figure`` named by its title (``st.plotly_chart(alt=...)``) and described
  (``aria-describedby``) by the sentences the page computes for it, each of which is printed on
  the page (``app/charts.py``, the one way the pages draw a chart: checked in the source too).
  The player's charts (``h2o/player/js``, in the app and in the exported file): its heatmaps
  (a ``figure`` each) and its kept slots (an ``image``: a canvas) are named by their titles and
  described by the step's sentence ("step 273: evicted position 241 …"), rewritten every step;
  its two metrics plots by the step's values.
* The keyboard alone (``tests/test_a11y_keyboard.py``): Tab, Shift+Tab, Enter, Space and the
  arrows walk the whole lesson — every predict question answered, every reveal seen, every
  chapter's link and "Open …" button reached, presenter mode moved chapter by chapter with
  "Next →" — and the step view's player (and the exported file's) is stepped, played, paused and
  set. At every stop the focus is seen: the pixels the focus changes reach 3:1 against the same
  pixels unfocused (WCAG 2.2's focus-appearance measure), over at least the control's perimeter;
  the step view is walked in the dark theme too. ``app/static/a11y.css`` draws the ring (the
  theme's text colour, 2 px) where Streamlit's is too faint or missing.
* Colour (``tests/test_palette.py``, no browser): the policy palette under simulated
  deuteranopia, protanopia and tritanopia (Machado, Oliveira & Fernandes 2009, severity 1):
  every two colours drawn together, the oracle bound's included, at least ΔE00 10 apart
  (CIEDE2000, checked against Sharma's test data); every policy has a line style and marker of
  its own; text contrast at least 4.5:1 in both themes and in the exported file.
* The notebook widget: the four players of the lesson notebook in a live JupyterLab
  (``tests/test_notebook_browser.py``), the same axe target and accessibility-tree check.
* Text printed in the needle grid's and the allocation grids' cells is black or white, whichever
  contrasts more with the cell (``cell_text``; ``tests/test_palette.py``).

**What is left upstream**

* Streamlit, tracked by streamlit#8399 ("Basic accessibility web features"; no issue names
  these one by one), listed in :data:`KNOWN` (each fails the test if it changes): ``st.code``'s
  syntax colours (2.2-3.6:1, fixed in its frontend); a scrolling ``st.code`` block the keyboard
  cannot reach; the dark theme's primary colour, which is both text on the page and the fill
  behind white text, and cannot reach 4.5:1 both ways.
* Worked around here, still Streamlit's or plotly.js's to fix: a chart has a name
  (``alt``, streamlit#8563) but no description (the app links one with a component of its
  own); plotly.js's SVG has no name of its own (plotly.js#6920), nor does its toolbar show
  when a button of it has the focus (``a11y.css`` shows it), nor a table's toolbar;
  Streamlit's focus ring is its primary colour at half opacity (2.3:1 on white) and absent on
  the sidebar's page links and the scrolling main area; a collapsed sidebar keeps its controls
  in the Tab order, out of sight (``a11y.css`` hides them).

**How the axe tests read** — the violations left are caused by Streamlit itself, not by what the
app puts on the page: each cause is in :data:`KNOWN` with its axe rule, the upstream issue that
tracks it and the element it lives in, and :data:`EXPECTED` says on which views it shows. A test
fails if a violation of ours appears (any serious or critical node outside a known cause's
element), and also if the set of known causes on a view changes — a new one, or one that went
away (an upgrade fixed it: drop it from the lists).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from streamlit_server import PLAYER, needs_chromium, wait_player
from streamlit_server import settle as shared_settle
from test_browser import check_renders, new_page

from app import pages

#: The impacts that fail a test.
FAILING = ("serious", "critical")


@dataclass(frozen=True)
class Upstream:
    """A violation that Streamlit or plotly.js causes, and the app cannot fix from outside."""

    rule: str  # axe-core's rule id
    issue: str  # the upstream issue that tracks it
    inside: str  # CSS selector: every node of it lies inside such an element
    why: str


#: What is left, by cause: one axe rule, the upstream issue, and where its nodes are. A node of
#: the same rule anywhere else is ours and fails the test. No upstream issue names these causes
#: one by one; streamlit#8399 ("Basic accessibility web features", open, area:accessibility) is
#: the one that tracks Streamlit's accessibility at large. (Plotly's SVG has no name of its own,
#: plotly.js#6920, but is no axe violation: it has no ``img`` role for ``svg-img-alt`` to apply
#: to; the chart around it is named and described here, :func:`charts_say_what_they_show`. Text
#: inside plotly's SVG is beyond axe's contrast check, which reports it "incomplete":
#: ``tests/test_palette.py`` checks the colours instead.)
KNOWN = {
    "dark-primary-text": Upstream(
        "color-contrast",
        "streamlit#8399",
        '[data-testid="stSliderThumbValue"], .stButtonGroup [data-selected="true"]',
        "the dark theme writes the primary colour as text (a slider's value, a selected "
        "segmented control: #cf4250 on #171614 3.9:1, on its tint 3.6:1) and also puts white "
        "text on it (primary buttons, 4.6:1): no primary colour passes both, since the first "
        "needs a luminance of at least 0.24 and the second at most 0.18",
    ),
}

#: View -> the known causes it shows (every other view: none). A view is a page's URL path
#: ("lesson" for the lesson at "/"), "presenter-N" (chapter N in presenter mode), "revealed"
#: (the lesson with every answer shown) or "export" (the exported file); " (dark)" after a page
#: is that page in the dark theme.
EXPECTED: dict[str, set[str]] = {
    "lesson (dark)": {"dark-primary-text"},  # chapter 1's sliders
    "real-model (dark)": {"dark-primary-text"},  # the token and budget choices
    "where-budget (dark)": {"dark-primary-text"},
    "needle-grid (dark)": {"dark-primary-text"},
    "evict-or-compress (dark)": {"dark-primary-text"},
}

#: The lesson's chapters (``app.lesson.chapters()``; not imported here, to keep collection light).
CHAPTERS = 10

#: Every page, by URL path; the default page (the lesson) is served at "/".
PATHS = ["" if p.default else p.url_path for p in pages.PAGES]


# -- helpers ---------------------------------------------------------------------------------------
def settle(page, quiet: float = 2.0, timeout: float = 120) -> None:
    """The shared wait (the page idle and no longer growing), then the player's plots if the
    page has one."""
    shared_settle(page, quiet, timeout)
    if page.locator(PLAYER).count():
        wait_player(page)


#: The tallest viewport a check uses (the lesson with every answer shown is about 14,000 px).
MAX_HEIGHT = 40_000


def whole(page, app: bool = True) -> None:
    """Make the viewport as tall as the page. Streamlit scrolls its main area inside the window
    (``stMain``), and axe-core skips what that box clips: at 2,400 px it checked the contrast of
    83 of the lesson's texts, at the lesson's full height 276."""
    for _ in range(3):
        height = page.evaluate(
            """() => Math.max(document.scrollingElement.scrollHeight,
                              (document.querySelector('[data-testid=stMain]') || {}).scrollHeight
                                || 0)"""
        )
        size = page.viewport_size
        if height <= size["height"]:
            return
        page.set_viewport_size({"width": size["width"], "height": min(height + 50, MAX_HEIGHT)})
        if app:
            settle(page, quiet=1.0)
        else:
            page.wait_for_timeout(1000)


#: Per node: is it inside the known cause's element? (Run in the page, right after axe.)
_INSIDE = """([target, inside]) => {
  const el = document.querySelector(target);
  return el !== null && el.closest(inside) !== null;
}"""


def audit(page, view: str) -> None:
    """axe-core on the whole page; fails on a serious or critical violation of ours, or on a
    change in the known causes this view shows."""
    whole(page, app=view != "export")
    axe = pytest.importorskip("axe_playwright_python.sync_playwright")
    result = axe.Axe().run(page)
    ours: list[str] = []
    known: set[str] = set()
    for v in result.response["violations"]:
        if v["impact"] not in FAILING:
            print(f"{view}: {v['id']} ({v['impact']}) x{len(v['nodes'])}, not asserted")
            continue
        causes = {name: up for name, up in KNOWN.items() if up.rule == v["id"]}
        for node in v["nodes"]:
            target = node["target"][0] if len(node["target"]) == 1 else None
            cause = next(
                (
                    name
                    for name, up in causes.items()
                    if isinstance(target, str) and page.evaluate(_INSIDE, [target, up.inside])
                ),
                None,
            )
            if cause is not None:
                known.add(cause)
            else:
                summary = (node.get("failureSummary") or "").splitlines()[-1:]
                ours.append(
                    f"{v['id']} ({v['impact']}): {node['target']}\n    {node['html'][:200]}\n"
                    f"    {summary}"
                )
        print(f"{view}: {v['id']} ({v['impact']}) x{len(v['nodes'])}")
    assert not ours, f"{view}: {len(ours)} violation(s) of ours:\n" + "\n".join(ours)
    expected = EXPECTED.get(view, set())
    assert known == expected, (
        f"{view}: the known upstream violations changed: now {sorted(known)}, listed "
        f"{sorted(expected)} (new: {sorted(known - expected)}, gone: {sorted(expected - known)})"
    )


# -- charts: their names and descriptions, from Chromium's accessibility tree ---------------------
#: The app's Plotly charts (``app.charts.show``) and the player's charts (``h2o/player/js``): its
#: plots (the detail and whole-run heatmaps, the two metrics) and the kept slots' canvas.
APP_CHARTS = '[data-testid="stMain"] [data-testid="stPlotlyChart"]'
PLAYER_CHARTS = ".h2o-player .h2o-plot, .h2o-player .h2o-slots canvas"

#: Per chart, what the page shows: the title's lines (the app's: plotly's title, whose second
#: line is the subtitle), the elements its aria-describedby names and their sentences, and the
#: page's visible text (every sentence of an app chart's description is printed on the page).
_SHOWN = """(selector) => {
  const flat = (t) => (t || "").replace(/\\s+/g, " ").trim();
  const text = flat((document.querySelector('[data-testid="stMain"]') || document.body).innerText);
  return [...document.querySelectorAll(selector)].map((el) => {
    const t = el.querySelector(".g-gtitle .gtitle");
    const lines = t ? [...t.querySelectorAll("tspan.line")].map((x) => flat(x.textContent)) : [];
    const by = (el.getAttribute("aria-describedby") || "").split(/\\s+/).filter(Boolean)
      .map((id) => document.getElementById(id));
    const named = (el.getAttribute("aria-labelledby") || "").split(/\\s+/).filter(Boolean)
      .map((id) => document.getElementById(id));
    const spans = by.flatMap((e) => (e ? [...e.querySelectorAll("span")] : []));
    return {
      key: (el.closest('[class*="st-key-"]') || {className: ""}).className.split(" ")
        .filter((c) => c.startsWith("st-key-")).join(" "),
      what: el.tagName === "CANVAS" ? "kept slots" : el.className,
      title: t ? (lines.length ? lines.join(" — ") : flat(t.textContent)) : null,
      labelledBy: named.map((e) => (e ? flat(e.textContent) : null)),
      describedBy: by.map((e) => (e ? flat(e.textContent) : null)),
      parts: spans.map((x) => flat(x.textContent)),
      onPage: spans.map((x) => text.includes(flat(x.textContent))),
    };
  });
}"""


def accessibility_tree(page, selector: str) -> list[dict]:
    """Chromium's accessibility node of each element ``selector`` matches, in document order
    (CDP ``Accessibility.getPartialAXTree``): role, name, description, and whether it is ignored
    (hidden: an inactive tab's chart)."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("DOM.enable")
        cdp.send("Accessibility.enable")
        root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        found = cdp.send("DOM.querySelectorAll", {"nodeId": root, "selector": selector})
        out = []
        for node_id in found["nodeIds"]:
            ax = cdp.send(
                "Accessibility.getPartialAXTree", {"nodeId": node_id, "fetchRelatives": False}
            )["nodes"][0]
            out.append(
                {
                    "role": (ax.get("role") or {}).get("value"),
                    "name": (ax.get("name") or {}).get("value", ""),
                    "description": (ax.get("description") or {}).get("value", ""),
                    "ignored": ax.get("ignored", False),
                }
            )
        return out
    finally:
        cdp.detach()


def flat(text: str) -> str:
    return " ".join(text.split())


def charts_say_what_they_show(page, view: str) -> int:
    """Every chart on the page has a name (its title) and a description (its sentences), as
    Chromium's accessibility tree exposes them; the number of charts checked."""
    problems: list[str] = []
    checked = 0
    for selector, app in ((APP_CHARTS, True), (PLAYER_CHARTS, False)):
        shown = page.evaluate(_SHOWN, selector)
        tree = accessibility_tree(page, selector)
        assert len(shown) == len(tree), (view, selector, len(shown), len(tree))
        for dom, ax in zip(shown, tree, strict=True):
            where = f"{view}: {dom['key'] or dom['what']}"
            if ax["ignored"]:  # not rendered (an inactive tab): nothing to announce
                continue
            checked += 1
            want_role = "image" if dom["what"] == "kept slots" else "figure"
            if ax["role"] != want_role:
                problems.append(f"{where}: role {ax['role']!r}, not {want_role!r}")
            title = dom["title"] if app else (dom["labelledBy"] or [None])[0]
            if not title or flat(ax["name"]) != title:
                problems.append(f"{where}: named {ax['name']!r}, its title is {title!r}")
            said = " ".join(d for d in dom["describedBy"] if d)
            if not said or None in dom["describedBy"] or flat(ax["description"]) != said:
                problems.append(
                    f"{where}: described {ax['description'][:80]!r}, its sentences "
                    f"{said[:80]!r} ({dom['describedBy'].count(None)} missing)"
                )
            if app and not (dom["parts"] and all(dom["onPage"])):
                missing = [p for p, ok in zip(dom["parts"], dom["onPage"], strict=True) if not ok]
                problems.append(f"{where}: sentences not printed on the page: {missing}")
    assert not problems, "\n".join(problems)
    print(f"{view}: {checked} charts named and described")
    return checked


def name(path: str, scheme: str = "light") -> str:
    return (path or "lesson") + (" (dark)" if scheme == "dark" else "")


# -- the tests -------------------------------------------------------------------------------------
def test_the_known_list_is_consistent():
    """Every expected cause is a known one, every known one shows somewhere, and every view
    listed exists."""
    shown = set().union(*EXPECTED.values())
    assert shown <= set(KNOWN)
    assert set(KNOWN) <= shown, f"known but shown nowhere: {set(KNOWN) - shown}"
    views = {name(p, s) for p in PATHS for s in ("light", "dark")}
    views |= {f"presenter-{c}" for c in range(1, CHAPTERS + 1)} | {"revealed", "export"}
    assert set(EXPECTED) <= views, set(EXPECTED) - views


#: Where the app draws its charts: every page calls ``app.charts.show``, nothing else calls
#: ``st.plotly_chart`` (which has no description to give).
APP = Path(__file__).resolve().parents[1] / "app"


def chart_calls() -> tuple[list[str], list[str]]:
    """(calls of ``plotly_chart`` outside ``app/charts.py``, ``charts.show`` calls without a
    ``describe``), as ``file:line``."""
    direct, undescribed = [], []
    for path in sorted(APP.rglob("*.py")):
        if path.name == "charts.py" and path.parent == APP:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            where = f"{path.relative_to(APP.parent)}:{node.lineno}"
            if node.func.attr == "plotly_chart":
                direct.append(where)
            owner = node.func.value
            shown = node.func.attr == "show" and getattr(owner, "id", None) == "charts"
            if shown and "describe" not in {k.arg for k in node.keywords}:
                undescribed.append(where)
    return direct, undescribed


def test_every_chart_is_drawn_named_and_described():
    direct, undescribed = chart_calls()
    assert not direct, f"st.plotly_chart called directly (use app.charts.show): {direct}"
    assert not undescribed, f"charts.show without its sentences: {undescribed}"


@pytest.mark.parametrize(
    ("markdown", "text"),
    [
        (
            "**Retained mass** is *the* share; `h2o` keeps it",
            "Retained mass is the share; h2o keeps it",
        ),
        ("recent\\_window 32 and x_y_z, \\*not\\* bold", "recent_window 32 and x_y_z, *not* bold"),
        ("- one\n- two **three**", "one two three"),
        ("> *quoted* — the card\n\nnext", "quoted — the card next"),
        ("[the paper](https://arxiv.org/abs/2306.14048), 2 * 3 * 4", "the paper, 2 * 3 * 4"),
    ],
)
def test_a_description_reads_as_the_page_prints_it(markdown, text):
    from app.charts import plain

    assert plain(markdown) == text


def test_a_charts_name_is_its_title_in_plain_text():
    from app import figures
    from app.charts import title_of

    layout = figures.base_layout("Mass <b>&</b> recall", 300, "x", "y", subtitle="toy, budget 8")
    assert title_of(figures.make_figure([], layout)) == "Mass <b>&</b> recall — toy, budget 8"


@pytest.mark.browser
@needs_chromium
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("path", PATHS)
def test_every_page(server, browser, tmp_path, path, scheme):
    """Each page also renders (its heading, its charts, no exception or script error:
    ``test_browser.check_renders``) before axe and the accessibility tree check it."""
    ctx, page = new_page(browser, scheme)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{server}/{path}")
        settle(page)
        check_renders(page, path, tmp_path / f"{path or 'lesson'}-{scheme}.png", errors)
        audit(page, name(path, scheme))
        charts_say_what_they_show(page, name(path, scheme))
    finally:
        ctx.close()


@pytest.mark.browser
@needs_chromium
def test_the_lesson_with_every_answer_revealed(server, browser):
    """Self-study: each "Just show me" clicked, so every figure a question held back is shown."""
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/")
        settle(page)
        for _ in range(CHAPTERS):
            reveal = page.get_by_role("button", name="Just show me")
            if reveal.count() == 0:
                break
            reveal.first.click()
            settle(page)
        assert page.get_by_role("button", name="Just show me").count() == 0
        audit(page, "revealed")
        assert charts_say_what_they_show(page, "revealed") >= 15  # every chapter's figures
    finally:
        ctx.close()


@pytest.mark.browser
@needs_chromium
def test_the_exported_file(server, browser, tmp_path):
    """The step view's download, opened from disk with no server."""
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/step-through?trace=toy&budget=8&recent_window=2&step=10")
        wait_player(page)
        with page.expect_download(timeout=60_000) as dl:
            page.get_by_role("button", name=re.compile("Download these steps as HTML")).click()
        path = tmp_path / "export.html"
        dl.value.save_as(path)
    finally:
        ctx.close()
    ctx, page = new_page(browser)
    try:
        page.goto(path.as_uri())
        wait_player(page)
        audit(page, "export")
        # per panel (two): the detail heatmap, the kept slots, the whole run; the two metrics
        assert charts_say_what_they_show(page, "export") == 8
    finally:
        ctx.close()
