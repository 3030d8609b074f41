"""In Chromium at 1280×720 with the sidebar open (``browser`` tests): the answers table on
"Where should the budget go?" shows all four allocations' columns whole — each answer wraps in its
cell — where a data grid cut the fourth column at the page's edge."""

from __future__ import annotations

import pytest
from streamlit_server import needs_chromium, settle
from test_browser import new_page

pytestmark = [pytest.mark.browser, needs_chromium]


def test_the_answers_table_fits_a_projected_page(server, browser):
    ctx, page = new_page(browser, size=(1280, 720))
    try:
        page.goto(f"{server}/where-budget")
        settle(page)
        table = page.get_by_test_id("stTable").first
        table.wait_for(timeout=60_000)
        table.scroll_into_view_if_needed()
        box = page.evaluate(
            """() => { const t = document.querySelector('[data-testid=stTable]');
                const m = document.querySelector('[data-testid=stMain]').getBoundingClientRect();
                const r = t.getBoundingClientRect();
                const cells = [...t.querySelectorAll('th, td')].map(c => c.getBoundingClientRect());
                return {scroll: t.scrollWidth - t.clientWidth, right: r.right, main: m.right,
                        cellsRight: Math.max(...cells.map(c => c.right)), n: cells.length}; }"""
        )
        assert box["n"] >= 5 * 2  # a header row and at least one policy's row, five columns
        assert box["scroll"] <= 0, box
        assert box["cellsRight"] <= box["right"] + 0.5 <= box["main"] + 0.5, box
        page.screenshot(path="/tmp/budget_answers_table.png")
    finally:
        ctx.close()
