"""Two app replicas behind HAProxy (``deploy/proxy.py``), driven by protocol-level students
(``benchmarks/hall_client.py``): students spread over both, each session stays on its replica
(its requests, its websocket, a reconnect), an upload and a model job work through the proxy.

Skipped, with the install command, where HAProxy is not installed.
"""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "benchmarks"))  # last: benchmarks/app.py must not hide app/

from hall_client import Session  # noqa: E402
from model_marks import needs_model  # noqa: E402

import h2o  # noqa: E402
from deploy import proxy  # noqa: E402

needs_haproxy = pytest.mark.skipif(
    proxy.haproxy_path() is None,
    reason=f"the proxy test needs Debian's HAProxy: run `{proxy.INSTALL}`",
)
pytestmark = [pytest.mark.browser, needs_haproxy]

BUDGET = "budget — slots in the cache"


@pytest.fixture(scope="module")
def hall():
    with proxy.deployment(2) as d:
        yield d


def run(coro):
    return asyncio.run(coro)


def toy_npz() -> bytes:
    """A small valid trace file, as a student would upload it."""
    trace = h2o.builtin_trace("toy")
    buf = io.BytesIO()
    h2o.save_trace(trace, buf)
    return buf.getvalue()


def test_config_names_every_replica_with_its_cookie():
    text = proxy.config_text("127.0.0.1", 8000, [9001, 9002])
    assert "server r1 127.0.0.1:9001 cookie r1" in text
    assert "server r2 127.0.0.1:9002 cookie r2" in text
    assert f"cookie {proxy.COOKIE} insert" in text
    assert "timeout tunnel" in text  # websockets stay open through a lecture


def test_students_spread_over_both_replicas_and_each_stays_on_its_own(hall):
    async def go() -> None:
        students = [Session(hall.url, timeout=300) for _ in range(6)]
        try:
            boxes = []
            for i, s in enumerate(students):
                r = await s.open("/step-through", f"budget={300 + i}&step={1000 + i}")
                assert not r.exceptions and not r.errors, (r.exceptions, r.errors)
                assert r.header()["budget"] == 300 + i
                boxes.append(r.widget("number_input", label=BUDGET))
            # Round robin: both replicas hold students; every request of one student — the
            # page, the websocket upgrade — went to one replica.
            seen = [set(s.replicas) for s in students]
            assert all(len(x) == 1 for x in seen), seen
            assert set().union(*seen) == {"r1", "r2"}
            for i, (s, box) in enumerate(zip(students, boxes, strict=True)):
                r = await s.set_widget(box, int_value=400 + i)
                assert r.header()["budget"] == 400 + i
            # A dropped websocket comes back to its session: on another replica it would be a
            # new session, with the trace's default budget instead of this student's own.
            for i, s in enumerate(students):
                sid = s.session_id
                await s.close()
                await s.connect("/step-through", existing=sid)
                r = await s.rerun(page_hash=s.page_hash, query="")
                assert s.session_id == sid
                assert r.header()["budget"] == 400 + i
                assert len(set(s.replicas)) == 1
        finally:
            for s in students:
                await s.close()

    run(go())


def test_an_upload_works_through_the_proxy(hall):
    async def go() -> None:
        s = Session(hall.url, timeout=300)
        try:
            r = await s.open("/step-through")
            uploader = r.widget("file_uploader", label="Upload a trace (.npz)")
            r = await s.upload(uploader, "mine.npz", toy_npz())
            assert not r.exceptions and not r.errors, (r.exceptions, r.errors)
            picker = r.widget("selectbox", label="Attention trace")
            assert "mine.npz" in picker.options, picker.options  # an upload by its file name
            head = r.header()  # the player now shows the upload
            assert (head["trace"], head["steps"]) == ("mine", h2o.builtin_trace("toy").steps)
            assert len(set(s.replicas)) == 1
        finally:
            await s.close()

    run(go())


@needs_model
def test_a_model_job_runs_through_the_proxy(hall):
    async def go() -> None:
        s = Session(hall.url, timeout=900)
        try:
            await s.open("/")
            r = await s.page("Real model")
            # its sections below the first figure follow the browser's paint report
            r = await s.painted(r) or r
            for kind, key, value in (  # the perplexity section's smallest job
                ("button_group", "w_rm_ppl_tokens", ["128"]),
                ("multiselect", "w_rm_ppl_budgets", ["64"]),
                ("multiselect", "w_rm_ppl_policies", ["h2o"]),
            ):
                el = r.widget(kind, key=key)
                assert el is not None, key
                r = await s.set_widget(el, string_array_value={"data": value})
                assert not r.exceptions, r.exceptions
            go_button = r.widget("button", key="rm_ppl_go")
            assert go_button is not None and "2 runs on 128 tokens" in go_button.label
            r = await s.set_widget(go_button, trigger_value=True)
            assert not r.exceptions and not r.errors, (r.exceptions, r.errors)
            assert r.widget("plotly_chart", key="rm_ppl_curves") is not None
            assert len(set(s.replicas)) == 1
        finally:
            await s.close()

    run(go())
