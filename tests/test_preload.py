"""The router starts loading plotly.js on the pages that open on the player (``app/main.py``,
``app.player.preload``): a script in the page's first elements, never on another page. Chromium's
side (one fetch a page, started before the player arrives) is ``tests/test_browser.py``."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from app import pages, player

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")


def _preloads(at: AppTest) -> list[str]:
    return [h.proto.body for h in at.get("html") if "h2o-plotly-preload" in h.proto.body]


def test_the_pages_that_open_on_the_player_preload_plotly_and_no_other():
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    assert not _preloads(at)  # the lesson
    for spec in pages.PAGES:
        if spec.default:
            continue
        at.switch_page(spec.file).run()
        assert not at.exception, (spec.file, at.exception)
        found = _preloads(at)
        assert len(found) == (1 if spec.opens_on_player else 0), spec.file
        if found:
            assert at.get("html")[0].proto.body == found[0], "not the page's first element"
            assert player.plotly_url() in found[0]
    assert {p.url_path for p in pages.PAGES if p.opens_on_player} == {
        "step-through",
        "stale-spike",
    }


def test_the_script_cannot_be_closed_by_the_url():
    body = player._preload_html("/x</script><script>alert(1)//app/static/plotly.min.js")
    assert body.count("</script>") == 1 and body.endswith("</script>")
    assert "<\\/script><script>alert(1)" in body
