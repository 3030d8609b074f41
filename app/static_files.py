"""Streamlit's static files (its front end's scripts, styles and fonts, and the shell's plotly.js)
served from memory.

A new browser asks for about a hundred of these files, most of them while its page's websocket
brings the first figure. Streamlit answers each one through its middleware and Starlette's
``FileResponse`` (a stat, a thread, a read): about 1.2 ms of the server's Python per file on the
project's 2-core machine (``python benchmarks/static_files.py``), in the event loop the websocket
shares. Every file under ``static/`` is content-hashed or versioned and never changes while the
server runs, so :class:`StaticFromMemory` reads each one once per server (in a worker thread) and
answers it from memory, before Streamlit's middleware, with Streamlit's own headers
(``immutable`` caching, no compression). Everything else, and any path it does not recognise,
goes on to Streamlit unchanged.

``python -m app.serve`` installs it beside the shell (:mod:`app.shell`).
"""

from __future__ import annotations

import email.utils
import hashlib
import mimetypes
import re
import threading
from pathlib import Path

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

#: A file it may answer: under ``static/``, in plain segments (no ``..``, no hidden files, no
#: backslashes or percent-escapes); anything else goes on to Streamlit, which checks it.
SAFE_PATH = re.compile(r"static(?:/[A-Za-z0-9_][A-Za-z0-9_.@+-]*)+")
#: Streamlit's cache header for its hashed files (``STATIC_ASSET_CACHE_MAX_AGE_SECONDS``).
CACHE_CONTROL = b"public, immutable, max-age=31536000"
#: At most this many bytes of files kept in memory (Streamlit's folder holds about 25 MB, the
#: shell's plotly.js 4.8 MB); a file past the bound is left to Streamlit.
MAX_BYTES = 64 * 2**20
#: Files larger than this are left to Streamlit (none of its own is).
MAX_FILE_BYTES = 16 * 2**20


class StaticFromMemory:
    """ASGI middleware: ``GET``/``HEAD`` of ``<base>/static/...`` answered from memory.

    ``directory`` is the folder Streamlit serves (the shell's, or Streamlit's own); ``base_url``
    is ``server.baseUrlPath``. A request with a ``Range`` header, another method, a path that
    :data:`SAFE_PATH` does not match or that is not a regular file inside ``directory`` goes on
    to ``app``, as does an ``.html`` file (Streamlit sends those uncached). ``If-None-Match``
    with the file's ETag (or ``*``) is answered ``304``."""

    def __init__(
        self, app: ASGIApp, directory: str | Path, base_url: str = "", max_bytes: int = MAX_BYTES
    ) -> None:
        self.app = app
        self.root = Path(directory).resolve()
        base = base_url.strip("/")
        self.prefix = f"/{base}/" if base else "/"
        self.max_bytes = max_bytes
        self.held = 0
        self.files: dict[str, tuple[bytes, list[tuple[bytes, bytes]], bytes]] = {}
        self._lock = threading.Lock()

    def relative(self, scope: Scope) -> str | None:
        """The file the request names, relative to the served folder, if it is one to answer."""
        if scope["type"] != "http" or scope.get("method") not in ("GET", "HEAD"):
            return None
        path: str = scope.get("path", "")
        root_path: str = scope.get("root_path", "")
        if root_path and path.startswith(root_path + "/"):
            path = path[len(root_path) :]
        if not path.startswith(self.prefix):
            return None
        rel = path[len(self.prefix) :]
        if not SAFE_PATH.fullmatch(rel) or rel.endswith(".html"):
            return None  # (Streamlit sends its pages uncached: they are its to answer)
        if any(name == b"range" for name, _ in scope.get("headers", ())):
            return None
        return rel

    def read(self, rel: str) -> tuple[bytes, list[tuple[bytes, bytes]], bytes] | None:
        """The file's bytes, its response headers and its ETag, read from disk and kept within
        the bound (None: not a file this middleware serves). Run in a worker thread: a first
        read must not hold up the websockets sharing the event loop."""
        path = self.root / rel
        try:
            # The shell's folder holds links into Streamlit's: they are followed (as Streamlit
            # does), while SAFE_PATH keeps the request itself inside the folder.
            if not path.is_file():
                return None
            stat = path.stat()
            if stat.st_size > MAX_FILE_BYTES:
                return None
            body = path.read_bytes()
        except OSError:
            return None
        if len(body) != stat.st_size:
            return None  # changed while read: Streamlit answers it
        kind = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        if kind.startswith("text/"):
            kind += "; charset=utf-8"
        etag = b'"' + hashlib.blake2b(body, digest_size=12).hexdigest().encode() + b'"'
        headers = [
            (b"content-type", kind.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"accept-ranges", b"bytes"),  # a range goes on to Streamlit, which answers it
            (b"cache-control", CACHE_CONTROL),
            (b"etag", etag),
            (b"last-modified", email.utils.formatdate(stat.st_mtime, usegmt=True).encode()),
        ]
        entry = (body, headers, etag)
        with self._lock:
            if rel not in self.files and self.held + len(body) <= self.max_bytes:
                self.files[rel] = entry
                self.held += len(body)
        return entry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rel = self.relative(scope)
        entry = None
        if rel is not None:
            entry = self.files.get(rel) or await anyio.to_thread.run_sync(self.read, rel)
        if entry is None:
            await self.app(scope, receive, send)
            return
        body, headers, etag = entry
        asked = [v for k, v in scope.get("headers", ()) if k == b"if-none-match"]
        if any(v.strip() == b"*" or etag in v for v in asked):
            await send(
                {
                    "type": "http.response.start",
                    "status": 304,
                    "headers": [h for h in headers if h[0] != b"content-length"],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )


def install(directory: str | Path) -> bool:
    """Put :class:`StaticFromMemory` for ``directory`` first in the middleware of the Streamlit
    server this process starts. False (and Streamlit's own serving) when Streamlit's server
    does not build its middleware where this expects."""
    try:
        from starlette.middleware import Middleware
        from streamlit import config
        from streamlit.web.server.starlette import starlette_app
    except ImportError:
        return False
    streamlits = getattr(starlette_app, "create_streamlit_middleware", None)
    if streamlits is None:
        return False

    def middleware() -> list:
        base = config.get_option("server.baseUrlPath") or ""
        return [Middleware(StaticFromMemory, directory=directory, base_url=base), *streamlits()]

    starlette_app.create_streamlit_middleware = middleware
    return True
