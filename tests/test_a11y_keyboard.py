"""The lesson with the keyboard alone, in Chromium: Tab and Shift+Tab, Enter, Space and the arrows,
and nothing else (no click, no programmatic focus to get somewhere).

* Self-study: Tab walks the whole lesson page, top to bottom. Every predict question is answered
  from the keyboard — Space picks the focused option, an arrow picks the next, Enter on "Just show
  me" reveals without answering (that one is then answered too) — and each reveal is seen: the
  answer's box and the figure it held back. Every chapter's link in the sidebar and every
  chapter's "Open …" button is reached; Enter on a chapter link moves there (the next Tab lands in
  that chapter); Enter on chapter 3's button opens Step through, where the player is stepped
  (Enter and Space on its buttons, the arrows, its slider), played and paused (Enter, Space), and
  its options set (Enter on a choice, Space on a box).
* Presenter mode: Space on the sidebar's switch turns it on; each chapter is walked with Tab
  (its question answered, its "Open …" button reached) and left with Enter on "Next →", to the
  last; "← Previous" goes back.

At every stop the focus must be seen: the focused control (or the one a visually hidden input
drives: react-aria marks it ``data-focus-visible``; a table's cell: the table's box, which
draws the ring while anything in it has the focus) is screenshotted focused and then blurred, and
the pixels that change must reach a contrast of at least 3:1 between the two states (WCAG 2.2's
focus-appearance measure) over at least the box's perimeter — a ring 1 px wide. Streamlit's own
ring (its primary colour at half opacity: 2.3:1 on white) fails that; ``app/static/a11y.css``
draws one that passes, and ``h2o/player/player.css`` the player's.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import numpy as np
import pytest
from streamlit_server import PLAYER, needs_chromium, shown_step, wait_player
from streamlit_server import settle as shared_settle
from test_browser import new_page

pytestmark = [pytest.mark.browser, needs_chromium]

Image = pytest.importorskip("PIL.Image")
sync_api = pytest.importorskip("playwright.sync_api")

#: WCAG 2.2's least contrast between a focus indicator's focused and unfocused pixels.
MIN_FOCUS_CONTRAST = 3.0
#: How far around the focused box a ring is looked for (an outline's offset and width, and more).
PAD = 6
VIEWPORT = (1500, 1000)
#: The lesson's predict questions (``app/lesson``: ``predict(qid, …)``) and how each is answered
#: in self-study: Space on the first option, an arrow to the second, or Enter on "Just show me"
#: (and then Space on an option).
QUESTIONS = {"heavy": "Space", "window": "ArrowRight", "spike": "Enter"}
#: The chart each question's answer reveals.
QUESTION_CHARTS = {"heavy": "lesson_decision", "window": "lesson_sweep", "spike": "lesson_spike"}
#: The lesson's chapters (``app.lesson.chapters()``; not imported here, to keep collection light),
#: and those with no "Open …" button (the first, and the two that close the lesson).
CHAPTERS = 10
NO_BUTTON = {1, 9, 10}

#: The focused element: what it is, where its focus shows (a visually hidden input: the control
#: react-aria marks data-focus-visible) and its place in the document (to tell when Tab wraps).
_FOCUSED = """() => {
  const e = document.activeElement;
  if (!e || e === document.body || e === document.documentElement) return null;
  window.__h2oFocused = e;
  // A table's cell takes the focus in the grid's own hidden table: the table's box shows it.
  const grid = e.matches("td, th, tr, table") ? e.closest('[data-testid="stDataFrameResizable"]')
    : null;
  // A text or number field: its box, which draws the ring (the field clips its own).
  const boxes = '[data-testid="stNumberInputContainer"], [data-baseweb="input"], '
    + '[data-baseweb="textarea"]';
  const field = e.matches("input, textarea") ? e.closest(boxes) : null;
  const shows = e.closest("[data-focus-visible]") || grid || field || e;
  const r = shows.getBoundingClientRect();
  const keyed = e.closest('[class*="st-key-"]');
  const label = e.getAttribute("aria-label") || (e.tagName === "SELECT" ? "" : e.innerText)
    || e.value || "";
  return {
    tag: e.tagName, role: e.getAttribute("role"), type: e.getAttribute("type"),
    label: label.replace(/\\s+/g, " ").trim().slice(0, 80),
    key: keyed ? keyed.className.split(" ").filter((c) => c.startsWith("st-key-")).join(" ") : "",
    href: e.getAttribute("href"), checked: e.checked === true,
    sidebar: e.closest('[data-testid="stSidebar"]') !== null,
    player: e.closest(".h2o-player") !== null,
    x: r.x, y: r.y, w: r.width, h: r.height, vw: innerWidth, vh: innerHeight,
    // A link that wraps is boxes, one a line: a ring goes round each, the widest at least.
    ring: Math.max(0, ...[...shows.getClientRects()].map((b) => 2 * (b.width + b.height))),
    order: [...document.querySelectorAll("*")].indexOf(e),
  };
}"""


@dataclass
class Stop:
    tag: str
    role: str | None
    type: str | None
    label: str
    key: str
    href: str | None
    checked: bool
    sidebar: bool
    player: bool
    x: float
    y: float
    w: float
    h: float
    vw: float
    vh: float
    ring: float
    order: int

    def __str__(self) -> str:
        return f"{self.tag}[{self.role or self.type or ''}] {self.label[:50]!r} {self.key}"

    def keyed(self, key: str) -> bool:
        return f"st-key-{key}" in self.key.split()


# -- seeing the focus ------------------------------------------------------------------------------
def _shot(page, clip: dict) -> np.ndarray:
    png = page.screenshot(clip=clip, animations="disabled", caret="hide")
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.float64) / 255


def _luminance(rgb: np.ndarray) -> np.ndarray:
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return lin @ np.array([0.2126, 0.7152, 0.0722])


def focus_seen(page, at: Stop) -> tuple[int, int]:
    """(pixels the focus changes at >= 3:1, pixels a 1 px ring around the box needs): the box
    screenshotted focused, then blurred; the focus given back where it was."""
    x0, y0 = max(0.0, at.x - PAD), max(0.0, at.y - PAD)
    x1, y1 = min(at.vw, at.x + at.w + PAD), min(at.vh, at.y + at.h + PAD)
    if x1 - x0 < 2 or y1 - y0 < 2:
        return 0, 1  # off the screen
    clip = {"x": x0, "y": y0, "width": x1 - x0, "height": y1 - y0}
    focused = _shot(page, clip)
    page.evaluate("() => window.__h2oFocused.blur()")
    blurred = _shot(page, clip)
    page.evaluate("() => window.__h2oFocused.focus({ focusVisible: true })")
    a, b = _luminance(focused), _luminance(blurred)
    ratio = (np.maximum(a, b) + 0.05) / (np.minimum(a, b) + 0.05)
    need = min(at.ring, 2 * (min(at.w, x1 - x0) + min(at.h, y1 - y0)))
    return int((ratio >= MIN_FOCUS_CONTRAST).sum()), max(1, int(need))


@dataclass
class Walk:
    """The keyboard, and what it met: every stop, and the stops whose focus could not be seen."""

    page: object
    stops: list[Stop] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)
    checked: set = field(default_factory=set)

    def press(self, key: str) -> None:
        """One key, of the walk's: Tab, Enter, Space or an arrow (with Shift)."""
        assert re.fullmatch(r"(Shift\+)?(Tab|Enter|Space|Arrow(Left|Right|Up|Down))", key), key
        self.page.keyboard.press(key)

    def focused(self) -> Stop | None:
        at = self.page.evaluate(_FOCUSED)
        return Stop(**at) if at else None

    def tab(self, back: bool = False, check: bool = True) -> Stop | None:
        self.press("Shift+Tab" if back else "Tab")
        self.page.wait_for_timeout(40)
        at = self.focused()
        if at is not None:
            self.stops.append(at)
            if check:
                self.check(at)
        return at

    def check(self, at: Stop) -> None:
        """The focus on ``at`` is seen (each control once: the same label in the same place)."""
        sig = (at.tag, at.label, at.key, round(at.x), round(at.y))
        if sig in self.checked:
            return
        self.checked.add(sig)
        got, need = focus_seen(self.page, at)
        # A few more looks, a moment apart: a chart may have been re-laid out meanwhile, and a
        # table draws its cell's ring on its canvas a frame or more later on a loaded machine.
        # Each look measures the focused box where it is now, not where it was at the Tab.
        for _ in range(5):
            if got >= need:
                break
            self.page.wait_for_timeout(400)
            now = self.focused() or at
            got = max(got, focus_seen(self.page, now)[0])
        if got < need:
            self.unseen.append(f"{at}: {got} px at >= {MIN_FOCUS_CONTRAST}:1, needs {need}")

    def to(self, want, back: bool = False, limit: int = 600, check: bool = True) -> Stop:
        """Tab (or Shift+Tab) until the focus is on a stop ``want`` accepts."""
        for _ in range(limit):
            at = self.tab(back, check)
            if at is not None and want(at):
                return at
        raise AssertionError(f"not reached in {limit} presses; last stops: {self.stops[-5:]}")

    def assert_seen(self) -> None:
        assert not self.unseen, (
            f"{len(self.unseen)} stop(s) without a visible focus:\n" + "\n".join(self.unseen)
        )


# -- the page --------------------------------------------------------------------------------------
def settle(page) -> None:
    """The shared wait, with a shorter quiet spell."""
    shared_settle(page, quiet=1.5)


def question_of(at: Stop) -> str | None:
    m = re.search(r"st-key-lesson_(?:q|reveal)_(\w+)", at.key)
    return m.group(1) if m else None


def revealed(page, qid: str, timeout: float = 60) -> bool:
    """The question's answer box, and the figure it held back, come onto the page (the rerun
    may start a moment after the key, on a busy machine)."""
    try:
        page.wait_for_function(
            """([qid, chart]) =>
              document.querySelector(`.st-key-lesson_predict_${qid} [data-testid='stAlert']`)
              && document.querySelector(`.st-key-${chart} .main-svg`)""",
            arg=[qid, QUESTION_CHARTS[qid]],
            timeout=timeout * 1000,
        )
    except sync_api.TimeoutError:
        return False
    settle(page)
    return True


def answered(page) -> str:
    return page.locator("[data-testid='stMain'] [data-testid='stProgress']").first.inner_text()


def answer(walk: Walk, at: Stop, how: str) -> None:
    """Answer the question whose first option has the focus: Space picks it, an arrow the next;
    "Enter": Tab to "Just show me", Enter, then back to the options and Space."""
    page, qid = walk.page, question_of(at)
    if how == "Enter":
        button = walk.tab()
        assert button is not None and button.keyed(f"lesson_reveal_{qid}"), button
        walk.press("Enter")
        assert revealed(page, qid), f"{qid}: Enter on 'Just show me' revealed nothing"
        option = walk.to(lambda s: s.keyed(f"lesson_q_{qid}"), back=True, limit=20)
        assert not option.checked
        how = "Space"
    walk.press(how)
    assert revealed(page, qid), f"{qid}: {how} answered, but nothing was revealed"
    now = walk.focused()
    assert now is not None and now.keyed(f"lesson_q_{qid}") and now.checked, (
        f"{qid}: after {how} the focus is on {now}, not on the chosen option"
    )


# -- the tests -------------------------------------------------------------------------------------
def test_the_lesson_by_keyboard_alone(server, browser):
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        page.goto(f"{server}/")
        settle(page)
        walk = Walk(page)
        first = walk.tab()
        assert first is not None and "Skip to main content" in first.label, first
        links = page.locator("[data-testid='stSidebarUserContent'] a[href^='#']").count()
        opens = {
            k.removeprefix("st-key-")
            for k in page.eval_on_selector_all(
                "[class*='st-key-lesson_open_']",
                "els => els.map(e => [...e.classList].find(c => c.startsWith('st-key-')))",
            )
        }
        assert links == CHAPTERS and len(opens) >= CHAPTERS - len(NO_BUTTON), (links, opens)
        met_links: set[str] = set()
        met_opens: set[str] = set()
        done: set[str] = set()
        while True:  # the whole page, Tab by Tab, until the focus comes round to the top
            at = walk.tab()
            if at is None or at.order <= first.order:
                break
            if at.sidebar and at.href and at.href.startswith("#"):
                met_links.add(at.href)
            met_opens |= {k for k in opens if at.keyed(k)}
            qid = question_of(at)
            if qid in QUESTIONS and qid not in done and at.keyed(f"lesson_q_{qid}"):
                answer(walk, at, QUESTIONS[qid])
                done.add(qid)
        walk.assert_seen()
        assert done == set(QUESTIONS), f"questions not reached by Tab: {set(QUESTIONS) - done}"
        assert answered(page).startswith(f"{len(QUESTIONS)} of {len(QUESTIONS)} answered")
        assert len(met_links) == CHAPTERS, f"chapter links reached: {sorted(met_links)}"
        assert met_opens == opens, f"chapter buttons never reached: {sorted(opens - met_opens)}"
        print(f"self-study: {len(walk.stops)} stops, {len(walk.checked)} focus rings measured")

        # A chapter link in the sidebar moves there: the next Tab lands in that chapter.
        link = walk.to(lambda s: s.sidebar and (s.href or "").startswith("#") and "Your" in s.label)
        walk.press("Enter")
        page.wait_for_function("(h) => location.hash === h", arg=link.href, timeout=10_000)
        page.wait_for_function(  # scrolled to it: the chapter's heading is on the screen
            """(id) => { const r = document.getElementById(id).getBoundingClientRect();
                         return r.top >= 0 && r.top < innerHeight; }""",
            arg=link.href[1:],
            timeout=10_000,
        )
        inside = walk.tab()
        assert inside is not None and inside.order > page.evaluate(
            "(id) => [...document.querySelectorAll('*')].indexOf(document.getElementById(id))",
            link.href[1:],
        ), inside

        # Chapter 3's button opens Step through; there, the player by keyboard.
        walk.to(lambda s: s.keyed("lesson_open_3"), back=True, check=False)
        walk.press("Enter")
        page.wait_for_url(re.compile(r"/step-through"), timeout=60_000)
        wait_player(page)
        settle(page)
        player_by_keyboard(walk)
        walk.assert_seen()
    finally:
        ctx.close()


def wait_step(page, step: int) -> None:
    page.wait_for_function(
        f"document.querySelector('{PLAYER}').dataset.rendered === '{step}'", timeout=10_000
    )


def playing(page) -> bool:
    return page.evaluate(f"document.querySelector('{PLAYER}').dataset.playing === '1'")


def player_by_keyboard(walk: Walk) -> None:
    """Step (Enter and Space on "+1", the arrows, the slider), play and pause (Enter, Space),
    and set the options (Enter on a choice, Space on a box) — from the keyboard alone."""
    page = walk.page
    t = shown_step(page)
    walk.to(lambda s: s.player and s.label == "Forward one step (→)")
    for key, moved in (("Enter", 1), ("Space", 1), ("ArrowRight", 1), ("Shift+ArrowRight", 10)):
        walk.press(key)
        t += moved
        wait_step(page, t)
    walk.press("ArrowLeft")
    t -= 1
    wait_step(page, t)
    walk.to(lambda s: s.player and s.label.startswith("Play / pause"), back=True, limit=5)
    for key in ("Enter", "Space"):
        walk.press(key)
        page.wait_for_function(f"document.querySelector('{PLAYER}').dataset.playing === '1'")
        page.wait_for_function(  # it plays: a step or more later
            f"Number(document.querySelector('{PLAYER}').dataset.rendered) > {t}", timeout=10_000
        )
        walk.press(key)
        page.wait_for_function(  # paused, and the step it holds is the one painted
            f"""() => {{ const r = document.querySelector('{PLAYER}');
                        return r.dataset.playing !== '1' && r.__h2o
                          && Number(r.dataset.rendered) === r.__h2o.st.t; }}"""
        )
        assert shown_step(page) > t, f"{key}: played from step {t} to {shown_step(page)}"
        t = shown_step(page)
    slider = walk.to(lambda s: s.player and s.label == "Decode step")
    assert slider.tag == "INPUT"
    walk.press("ArrowRight")
    t += 1
    wait_step(page, t)
    walk.to(lambda s: s.player and s.label == "linear")
    walk.press("Enter")
    page.wait_for_function(
        f"document.querySelector('{PLAYER} .h2o-seg-btn.on[data-value=linear]') !== null"
    )
    walk.to(lambda s: s.player and s.tag == "INPUT" and s.type == "checkbox")
    walk.press("Space")
    page.wait_for_function(f"document.querySelector('{PLAYER} .h2o-reveal input').checked === true")
    assert shown_step(page) == t  # the options moved no step


def test_presenter_mode_by_keyboard_alone(server, browser):
    ctx, page = new_page(browser, size=(1280, 720))
    try:
        page.goto(f"{server}/")
        settle(page)
        walk = Walk(page)
        switch = walk.to(lambda s: s.role == "switch" and "Presenter" in s.label)
        assert not switch.checked
        walk.press("Space")
        page.get_by_role("heading", name=re.compile(r"^1\. ")).wait_for(timeout=60_000)
        # Presenter mode collapses the sidebar, and the switch with it: the focus goes on from
        # there once it has slid away.
        page.wait_for_function(
            "document.querySelector('[data-testid=stSidebar]').dataset.collapsed === 'true'",
            timeout=30_000,
        )
        page.wait_for_timeout(500)
        settle(page)
        done: set[str] = set()
        for chapter in range(1, CHAPTERS + 1):
            heading = page.get_by_role("heading", name=re.compile(rf"^{chapter}\. "))
            heading.wait_for(timeout=60_000)
            opened = False
            for _ in range(400):
                at = walk.tab()
                if at is None:  # past the page's end: the next Tab starts at its top
                    continue
                qid = question_of(at)
                if qid in QUESTIONS and qid not in done and at.keyed(f"lesson_q_{qid}"):
                    answer(walk, at, "Space")
                    done.add(qid)
                opened |= "st-key-lesson_open_" in at.key
                if at.keyed("lesson_next") or (chapter == CHAPTERS and at.keyed("lesson_prev")):
                    break
            else:
                last = "\n".join(map(str, walk.stops[-25:]))
                raise AssertionError(
                    f"chapter {chapter}: no navigation button; last stops:\n{last}"
                )
            assert opened or chapter in NO_BUTTON, f"chapter {chapter}: 'Open …' not reached"
            walk.press("Enter")  # Next → (on the last chapter: ← Previous)
            want = chapter + 1 if chapter < CHAPTERS else chapter - 1
            page.get_by_role("heading", name=re.compile(rf"^{want}\. ")).wait_for(timeout=60_000)
            settle(page)
        walk.assert_seen()
        assert done == set(QUESTIONS), done
        print(f"presenter: {len(walk.stops)} stops, {len(walk.checked)} focus rings measured")
    finally:
        ctx.close()


def test_every_control_shows_its_focus_in_the_dark_theme(server, browser):
    """Step through in the dark theme, Tab by Tab from the top to the end: the sidebar's
    controls, the page's, the player's (the ring is the theme's text colour in either theme)."""
    ctx, page = new_page(browser, "dark", size=VIEWPORT)
    try:
        page.goto(f"{server}/step-through")
        wait_player(page)
        settle(page)
        walk = Walk(page)
        first = walk.tab()
        assert first is not None
        for _ in range(300):
            at = walk.tab()
            if at is None or at.order <= first.order:
                break
        else:
            raise AssertionError("Tab never came back round to the top")
        assert any(s.player for s in walk.stops) and any(s.sidebar for s in walk.stops)
        walk.assert_seen()
        print(f"dark step-through: {len(walk.stops)} stops, {len(walk.checked)} rings measured")
    finally:
        ctx.close()


def test_the_exported_file_by_keyboard_alone(server, browser, tmp_path):
    """The step view's download, opened from disk: its player stepped, played and set from the
    keyboard alone, every stop's focus seen."""
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/step-through?trace=toy&budget=8&recent_window=2&step=5")
        wait_player(page)
        with page.expect_download(timeout=60_000) as dl:
            page.get_by_role("button", name=re.compile("Download these steps as HTML")).click()
        path = tmp_path / "export.html"
        dl.value.save_as(path)
    finally:
        ctx.close()
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        page.goto(path.as_uri())
        wait_player(page)
        walk = Walk(page)
        player_by_keyboard(walk)
        walk.assert_seen()
    finally:
        ctx.close()
