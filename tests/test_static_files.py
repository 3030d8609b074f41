"""Streamlit's static files served from memory (``app/static_files.py``).

From its contract: a file under ``static/`` is answered as Streamlit's own static handler answers
it (the same status, bytes, type and caching), read from disk once per server; every other
request, and every path it does not recognise, reaches Streamlit unchanged; memory is bounded by
bytes. The differential tests put Streamlit's handler behind the middleware and without it.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.testclient import TestClient
from streamlit import file_util
from streamlit.web.server.starlette.starlette_static_routes import (
    create_streamlit_static_handler,
)
from streamlit_server import serve_process

from app import shell, static_files
from app.static_files import StaticFromMemory

STREAMLIT_STATIC = Path(file_util.get_static_dir())


def _clients(directory: Path, base: str = "", **kw) -> tuple[TestClient, TestClient, list]:
    """Streamlit's static handler alone, and behind the middleware (whose instance is returned
    in the list, once built)."""
    mount = f"/{base}" if base else "/"

    def app(middleware: list) -> Starlette:
        handler = create_streamlit_static_handler(directory=str(directory), base_url=base)
        return Starlette(routes=[Mount(mount, app=handler)], middleware=middleware)

    made: list = []

    class Recorded(StaticFromMemory):
        def __init__(self, *a, **k) -> None:
            super().__init__(*a, **k)
            made.append(self)

    ours = app([Middleware(Recorded, directory=directory, base_url=base, **kw)])
    return TestClient(app([])), TestClient(ours), made


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return shell.build(STREAMLIT_STATIC, tmp_path_factory.mktemp("shell"))


def _same(theirs, ours) -> None:
    assert ours.status_code == theirs.status_code
    assert ours.content == theirs.content
    for header in ("cache-control", "content-length", "accept-ranges"):
        assert ours.headers.get(header) == theirs.headers.get(header), header
    # The media type must agree (a charset may be added to text).
    kinds = [r.headers["content-type"].split(";")[0] for r in (ours, theirs)]
    assert kinds[0] == kinds[1]


def test_streamlits_files_are_answered_as_streamlit_answers_them(built):
    theirs, ours, made = _clients(built)
    files = [
        *sorted((built / "static" / "js").iterdir())[:40],
        built / shell.PLOTLY_PATH,
        *sorted((built / "static" / "css").iterdir())[:3],
        *sorted((built / "static" / "media").iterdir())[:3],
    ]
    for f in files:
        rel = "/" + str(f.relative_to(built))
        _same(theirs.get(rel), ours.get(rel))
    (middleware,) = made
    assert set(middleware.files) == {str(f.relative_to(built)) for f in files}
    assert middleware.held == sum(f.stat().st_size for f in files)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/index.html",
        "/step-through",
        "/static/js/no-such-file.js",
        "/static/js",
        "/static/js/",
        "/static/%2e%2e/index.html",
        "/static/js/..%2Findex.html",
        "/static/.hidden",
        "/_stcore/health",
        "/manifest.json",
    ],
)
def test_every_other_path_is_streamlits_answer(built, path):
    theirs, ours, made = _clients(built)
    a = theirs.get(path, follow_redirects=False)
    b = ours.get(path, follow_redirects=False)
    assert (b.status_code, b.content, b.headers.get("location")) == (
        a.status_code,
        a.content,
        a.headers.get("location"),
    )
    assert not made or not made[0].files


def test_a_file_is_read_once_per_server(tmp_path):
    (tmp_path / "static" / "js").mkdir(parents=True)
    script = tmp_path / "static" / "js" / "a.1234.js"
    script.write_text("export const a = 1;")
    _, ours, _ = _clients(tmp_path)
    first = ours.get("/static/js/a.1234.js")
    script.write_text("export const a = 2;")  # a file Streamlit never changes while it runs
    assert ours.get("/static/js/a.1234.js").content == first.content == b"export const a = 1;"


def test_head_range_and_other_methods():
    theirs, ours, made = _clients(STREAMLIT_STATIC)
    name = "/static/js/" + sorted(p.name for p in (STREAMLIT_STATIC / "static" / "js").iterdir())[0]
    head = ours.head(name)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == theirs.get(name).headers["content-length"]
    # A range goes to Streamlit, which answers it.
    ranged = ours.get(name, headers={"Range": "bytes=0-9"})
    assert ranged.status_code == 206 and len(ranged.content) == 10
    assert ours.post(name).status_code == theirs.post(name).status_code
    (middleware,) = made
    assert list(middleware.files) == [name[1:]]  # the HEAD's read, not the range's or the POST's


def test_a_known_etag_is_answered_not_modified():
    _, ours, _ = _clients(STREAMLIT_STATIC)
    name = "/static/js/" + sorted(p.name for p in (STREAMLIT_STATIC / "static" / "js").iterdir())[1]
    etag = ours.get(name).headers["etag"]
    again = ours.get(name, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert ours.get(name, headers={"If-None-Match": "*"}).status_code == 304
    assert ours.get(name, headers={"If-None-Match": '"other"'}).status_code == 200


def test_memory_is_bounded_by_bytes(tmp_path):
    (tmp_path / "static").mkdir()
    for i in range(5):
        (tmp_path / "static" / f"f{i}.js").write_bytes(bytes([65 + i]) * 1000)
    _, ours, made = _clients(tmp_path, max_bytes=2500)
    for i in range(5):
        assert ours.get(f"/static/f{i}.js").content == bytes([65 + i]) * 1000
    (middleware,) = made
    assert middleware.held == 2000 and len(middleware.files) == 2


def test_under_a_base_path(built):
    theirs, ours, made = _clients(built, base="h2o")
    rel = "/h2o/" + shell.PLOTLY_PATH
    _same(theirs.get(rel), ours.get(rel))
    assert list(made[0].files) == [shell.PLOTLY_PATH]
    # Outside the base path the request is not the middleware's.
    a, b = theirs.get("/" + shell.PLOTLY_PATH), ours.get("/" + shell.PLOTLY_PATH)
    assert (a.status_code, a.content) == (b.status_code, b.content)
    assert list(made[0].files) == [shell.PLOTLY_PATH]


def test_install_puts_it_first_in_streamlits_middleware(monkeypatch, tmp_path):
    from streamlit.web.server.starlette import starlette_app

    monkeypatch.setattr(
        starlette_app, "create_streamlit_middleware", starlette_app.create_streamlit_middleware
    )
    own = [m.cls for m in starlette_app.create_streamlit_middleware()]
    assert static_files.install(tmp_path)
    stack = starlette_app.create_streamlit_middleware()
    assert [m.cls for m in stack] == [StaticFromMemory, *own]
    assert stack[0].kwargs["directory"] == tmp_path


@pytest.mark.slow
def test_the_app_server_answers_from_memory():
    """Through ``python -m app.serve``: a file's bytes as on disk, answered by the middleware
    (its ETag is a BLAKE2b digest; Streamlit's an MD5 of the file's stat)."""
    name = sorted(p.name for p in (STREAMLIT_STATIC / "static" / "js").glob("PlotlyChart.*.js"))[0]
    with serve_process() as (url, _), urllib.request.urlopen(f"{url}/static/js/{name}") as r:
        body, etag = r.read(), r.headers["etag"]
    assert body == (STREAMLIT_STATIC / "static" / "js" / name).read_bytes()
    assert len(etag.strip('"')) == 24


def _raw(middleware_of, path: str, **scope) -> tuple[list[dict], list[str]]:
    """One request as the server hands it over (the path already percent-decoded, nothing
    tidied by a client): what the middleware sent, and the paths it passed on."""
    passed: list[str] = []

    async def downstream(scope, receive, send) -> None:
        passed.append(scope["path"])
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent: list[dict] = []

    async def send(message) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    request = {"type": "http", "method": "GET", "path": path, "headers": [], **scope}
    asyncio.run(middleware_of(downstream)(request, receive, send))
    return sent, passed


@pytest.fixture
def folder(tmp_path) -> Path:
    (tmp_path / "static" / "js").mkdir(parents=True)
    (tmp_path / "secret.js").write_text("the server's secret")
    (tmp_path / "static" / "js" / "a.js").write_text("export const a = 1;")
    (tmp_path / "static" / ".hidden.js").write_text("hidden")
    (tmp_path / "static" / "page.html").write_text("<p>a page</p>")
    return tmp_path


@pytest.mark.parametrize(
    "path",
    [
        "/static/../secret.js",
        "/static/js/../../secret.js",
        "/static/js\\..\\..\\secret.js",
        "/static/js/a.js\x00.png",
        "/static/js/a.js\n",
        "/static/\uff4as/a.js",
        "/static//js/a.js",
        "//static/js/a.js",
        "/STATIC/js/a.js",
        "/static/.hidden.js",
        "/static/page.html",
        "/static/js/",
    ],
)
def test_a_path_outside_its_rule_is_passed_on_unread(folder, path):
    made: list[StaticFromMemory] = []

    def middleware_of(app):
        made.append(StaticFromMemory(app, folder))
        return made[-1]

    sent, passed = _raw(middleware_of, path)
    assert passed == [path] and sent[0]["status"] == 404
    assert made[0].files == {} and made[0].held == 0


def test_a_file_past_the_size_bound_is_passed_on(folder, monkeypatch):
    monkeypatch.setattr(static_files, "MAX_FILE_BYTES", 10)
    _, passed = _raw(lambda app: StaticFromMemory(app, folder), "/static/js/a.js")
    assert passed == ["/static/js/a.js"]


@pytest.mark.parametrize(
    ("base", "path", "scope"),
    [
        ("", "/static/js/a.js", {}),
        ("/h2o/", "/h2o/static/js/a.js", {}),
        ("a/b", "/a/b/static/js/a.js", {}),
        ("", "/proxy/static/js/a.js", {"root_path": "/proxy"}),
    ],
)
def test_under_a_base_path_or_a_mount(folder, base, path, scope):
    sent, passed = _raw(lambda app: StaticFromMemory(app, folder, base_url=base), path, **scope)
    assert passed == [] and sent[0]["status"] == 200
    assert sent[1]["body"] == b"export const a = 1;"
