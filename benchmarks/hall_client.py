"""A student without a browser: Streamlit's own websocket protocol, spoken with its own messages.

What Streamlit's frontend does, reduced to what the server sees: a GET of the page (for the
cookies a proxy's sticky session and the upload's XSRF check need), a websocket to
``/_stcore/stream``, and ``BackMsg``s — a rerun with the link's path and query string, a widget
change (the widget's id, found in the ``ForwardMsg`` deltas, and its new value), a page switch
(the page's script hash from the ``navigation`` message), the player component's report (its
JSON state, a rerun of its fragment only), a file upload (``file_urls_request``, a PUT, then the
uploader's state). Every reply is read until ``script_finished``; the ``ForwardMsg`` cache is kept
the way the frontend keeps it (hashes sent with every rerun, ``ref_hash`` replies resolved), so
the bytes counted are the bytes a browser would receive.

:class:`Session` is one student's connection; :class:`Run` what one script run sent back.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

from h2o.player import playback

#: A run that ended because another request replaced it; the client waits for the next end.
EARLY = ForwardMsg.FINISHED_EARLY_FOR_RERUN
PLAYER_KEY = "step_player"  # app/player/stepper.py's component key for the Step through page
MAX_MESSAGE = 512 * 2**20
MAX_CLIENTS = 2000  # concurrent HTTP requests of one client process


@dataclass
class Run:
    """What one script run sent back (a whole page, or one fragment)."""

    seconds: float = 0.0
    nbytes: int = 0  # websocket bytes received for it, references resolved locally
    messages: int = 0
    status: int | None = None
    page_hash: str | None = None  # new_session's page (None: a fragment run)
    query: str | None = None  # page_info_changed's query string, if the run rewrote it
    elements: list[tuple[str, Any]] = field(default_factory=list)  # (type, proto), in order
    fragments: dict[str, str] = field(default_factory=dict)  # widget id → fragment id
    exceptions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # st.error bodies
    not_found: str | None = None

    def widget(self, kind: str, *, label: str | None = None, key: str | None = None) -> Any:
        """The element of type ``kind`` with this label or user key (its id ends in the key)."""
        for t, el in self.elements:
            if t != kind:
                continue
            if label is not None and getattr(el, "label", None) == label:
                return el
            if key is not None and el.id.endswith(f"-{key}"):
                return el
        return None

    @property
    def payload(self) -> bytes | None:
        """The Step through player's payload, if this run sent one."""
        el = self.widget("bidi_component", key=PLAYER_KEY)
        return el.bytes if el is not None and el.WhichOneof("data") == "bytes" else None

    def header(self) -> dict[str, Any] | None:
        """The player payload's header (budget, range, start step …), if it was sent."""
        p = self.payload
        return None if p is None else playback.decode(p)[0]

    def texts(self) -> list[str]:
        out = []
        for t, el in self.elements:
            if t in ("markdown", "heading", "alert", "text", "caption"):
                out.append(getattr(el, "body", "") or getattr(el, "text", ""))
        return out


class ProtocolError(RuntimeError):
    """The server sent something the client cannot follow (a reference it does not hold)."""


class Session:
    """One student's connection to a server (or a proxy in front of several)."""

    def __init__(self, base_url: str, *, timeout: float = 600.0) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.cookies: dict[str, str] = {}
        self.replicas: list[str] = []  # X-H2O-Replica of every HTTP response (behind the proxy)
        self.pages: dict[str, str] = {}  # page title → script hash
        self.paths: dict[str, str] = {}  # url path → script hash
        self.page_hash = ""
        self.query = ""
        self.session_id = ""
        self.widgets: dict[str, WidgetState] = {}  # what the browser would send back
        self.received = 0
        self.sent = 0
        self._cache: dict[str, tuple[ForwardMsg, int]] = {}  # hash → (message, last run seen)
        self._max_age = 2
        self._runs = 0
        self._conn = None
        self._queue: asyncio.Queue = asyncio.Queue()
        self._reader: asyncio.Task | None = None
        self._upload_replies: dict[str, ForwardMsg] = {}

    # -- transport ---------------------------------------------------------------------------
    def _note(self, headers: Any) -> None:
        for raw in headers.get_list("Set-Cookie"):
            for name, morsel in SimpleCookie(raw).items():
                self.cookies[name] = morsel.value
        if (rep := headers.get("X-H2O-Replica")) is not None:
            self.replicas.append(rep)

    def _cookie_header(self) -> dict[str, str]:
        if not self.cookies:
            return {}
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}

    async def http(self, method: str, path: str, **kw: Any) -> Any:
        req = HTTPRequest(
            self.base + path,
            method=method,
            headers={**self._cookie_header(), **kw.pop("headers", {})},
            request_timeout=self.timeout,
            connect_timeout=self.timeout,
            **kw,
        )
        # A class opens hundreds of pages at once: tornado's client queues beyond max_clients
        # (10 by default), which would time the client's queue, not the server.
        resp = await AsyncHTTPClient(max_clients=MAX_CLIENTS).fetch(req, raise_error=False)
        self._note(resp.headers)
        return resp

    async def connect(self, path: str = "/", existing: str = "") -> None:
        """GET the page and the health check (cookies), then open the websocket
        (``existing``: resume that session, as the frontend does after a dropped connection)."""
        for url in (path, "/_stcore/health"):  # the health check sets the XSRF cookie
            resp = await self.http("GET", url)
            if resp.code != 200:
                raise ProtocolError(f"GET {url}: HTTP {resp.code}")
        ws = self.base.replace("http", "ws", 1) + "/_stcore/stream"
        protocols = ["streamlit", self.cookies.get("_streamlit_xsrf", "")]
        if existing:
            protocols.append(existing)
        req = HTTPRequest(
            ws,
            headers={**self._cookie_header(), "Sec-WebSocket-Protocol": ", ".join(protocols)},
            request_timeout=self.timeout,
            connect_timeout=self.timeout,
        )
        self._conn = await websocket_connect(req, max_message_size=MAX_MESSAGE)
        self._note(self._conn.headers)
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            raw = await self._conn.read_message()
            if raw is None:
                await self._queue.put(None)
                return
            self.received += len(raw)
            msg = ForwardMsg()
            msg.ParseFromString(raw)
            kind = msg.WhichOneof("type")
            if kind == "file_urls_response":
                self._upload_replies[msg.file_urls_response.response_id] = msg
                continue
            await self._queue.put((msg, len(raw)))

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._reader is not None:
            self._reader.cancel()

    async def send(self, msg: BackMsg) -> None:
        raw = msg.SerializeToString()
        self.sent += len(raw)
        await self._conn.write_message(raw, binary=True)

    # -- script runs -------------------------------------------------------------------------
    def _resolve(self, msg: ForwardMsg) -> ForwardMsg:
        if msg.WhichOneof("type") == "ref_hash":
            got = self._cache.get(msg.ref_hash)
            if got is None:
                raise ProtocolError(f"a reference to a message not cached: {msg.ref_hash}")
            full = ForwardMsg()
            full.CopyFrom(got[0])
            full.metadata.CopyFrom(msg.metadata)
            msg = full
        fragment = msg.delta.fragment_id if msg.WhichOneof("type") == "delta" else ""
        if msg.hash and msg.metadata.cacheable:
            self._cache[msg.hash] = (msg, self._runs, fragment)
        elif msg.hash in self._cache:
            self._cache[msg.hash] = (self._cache[msg.hash][0], self._runs, fragment)
        return msg

    def _age_cache(self, fragments: list[str]) -> None:
        """As the frontend does after a run that finished (not one cut short for a rerun):
        forget messages not seen for a few runs; after a fragment's run, only that fragment's."""
        self._runs += 1
        old = [
            h
            for h, (_, seen, of) in self._cache.items()
            if (not fragments or of in fragments) and self._runs - seen > self._max_age
        ]
        for h in old:
            del self._cache[h]

    async def rerun(
        self,
        *,
        page_hash: str = "",
        page_name: str = "",
        query: str | None = None,
        fragment_id: str = "",
        widgets: dict[str, WidgetState] | None = None,
    ) -> Run:
        """Send one rerun and collect the reply until its ``script_finished``."""
        msg = BackMsg()
        rs = msg.rerun_script
        rs.query_string = self.query if query is None else query
        rs.page_script_hash = page_hash
        rs.page_name = page_name
        rs.fragment_id = fragment_id
        for w in (self.widgets if widgets is None else widgets).values():
            rs.widget_states.widgets.append(w)
        rs.cached_message_hashes.extend(self._cache)
        rs.context_info.timezone = "UTC"
        rs.context_info.locale = "en-US"
        t0 = time.monotonic()
        await self.send(msg)
        return await self.collect(t0)

    async def collect(self, t0: float | None = None) -> Run:
        """Read one script run's messages, up to a ``script_finished`` that is not a run cut
        short for another request."""
        t0 = time.monotonic() if t0 is None else t0
        run = Run()
        fragments: list[str] = []  # the fragments this run reruns (none: the whole page)
        while True:
            item = await asyncio.wait_for(self._queue.get(), self.timeout)
            if item is None:
                raise ProtocolError("the server closed the websocket")
            raw_msg, n = item
            msg = self._resolve(raw_msg)
            run.nbytes += n
            run.messages += 1
            kind = msg.WhichOneof("type")
            if kind == "new_session":
                ns = msg.new_session
                fragments = list(msg.metadata.run.fragment_ids)
                self.session_id = ns.initialize.session_id or self.session_id
                self._max_age = ns.config.max_cached_message_age or self._max_age
                run.page_hash = self.page_hash = ns.page_script_hash
            elif kind == "navigation":
                for p in msg.navigation.app_pages:
                    self.pages[p.page_name] = p.page_script_hash
                    self.paths["/" + p.url_pathname] = p.page_script_hash
                self.page_hash = msg.navigation.page_script_hash or self.page_hash
            elif kind == "page_info_changed":
                run.query = self.query = msg.page_info_changed.query_string
            elif kind == "page_not_found":
                run.not_found = msg.page_not_found.page_name
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
                el = msg.delta.new_element
                t = el.WhichOneof("type")
                proto = getattr(el, t)
                run.elements.append((t, proto))
                if t == "exception":
                    run.exceptions.append(f"{proto.type}: {proto.message[:200]}")
                elif t == "alert" and proto.format == 1:  # Alert.ERROR
                    run.errors.append(proto.body[:200])
                if msg.delta.fragment_id and getattr(proto, "id", ""):
                    run.fragments[proto.id] = msg.delta.fragment_id
            elif kind == "script_finished":
                if msg.script_finished == EARLY:
                    continue
                self._age_cache(fragments)
                run.status = msg.script_finished
                run.seconds = time.monotonic() - t0
                return run

    # -- what a student does -----------------------------------------------------------------
    async def open(self, path: str, query: str = "") -> Run:
        """Open a link: the page at ``path`` with ``query`` (the lecturer's link)."""
        t0 = time.monotonic()
        await self.connect(path + (f"?{query}" if query else ""))
        run = await self.rerun(page_name=path.strip("/"), query=query)
        run.seconds = time.monotonic() - t0
        self._keep_widgets(run)
        return run

    def _keep_widgets(self, run: Run) -> None:
        """The browser sends back the states of the widgets on screen, nothing else."""
        if run.page_hash is None:
            return
        ids = {getattr(el, "id", "") for _, el in run.elements}
        self.widgets = {k: v for k, v in self.widgets.items() if k in ids}

    async def set_widget(self, el: Any, **value: Any) -> Run:
        """Change a widget (``int_value=512``, ``string_value=…``, ``trigger_value=True`` …)."""
        w = WidgetState(id=el.id, **value)
        widgets = {**self.widgets, el.id: w}
        run = await self.rerun(page_hash=self.page_hash, widgets=widgets)
        if "trigger_value" not in value:
            self.widgets[el.id] = w
        self._keep_widgets(run)
        return run

    async def page(self, title: str) -> Run:
        """Click a page in the menu: a rerun of that page, the query string left behind."""
        run = await self.rerun(page_hash=self.pages[title], query="", widgets={})
        self.widgets = {}
        self._keep_widgets(run)
        return run

    async def painted(self, run: Run) -> Run | None:
        """What the browser sends once a page's first chart is on screen (its first-paint
        component's trigger, ``app/painted.py``: the lesson's, or a page's
        ``{url_path}_painted``): the run that draws the rest of the page. ``None`` when the run has
        no such component (a page visited before, presenter mode)."""
        found = [
            el for t, el in run.elements if t == "bidi_component" and el.id.endswith("_painted")
        ]
        if not found:
            return None
        el = found[0]
        w = WidgetState(
            id=f"$$STREAMLIT_INTERNAL_KEY_{el.id}__events",
            json_trigger_value=json.dumps([{"event": "painted", "value": True}]),
        )
        # The reporter sits in a fragment: the browser reruns that fragment alone.
        run = await self.rerun(
            page_hash=self.page_hash,
            fragment_id=run.fragments.get(el.id, ""),
            widgets={**self.widgets, w.id: w},
        )
        self._keep_widgets(run)
        return run

    async def report(self, player_id: str, fragment_id: str, view: dict[str, Any]) -> Run:
        """What the player sends when the student pauses or nears the edge of its range: its
        view as the component's JSON state, rerunning only its fragment."""
        w = WidgetState(id=player_id, json_value=json.dumps({"view": view}))
        self.widgets[player_id] = w
        return await self.rerun(page_hash=self.page_hash, fragment_id=fragment_id)

    async def upload(self, el: Any, name: str, data: bytes) -> Run:
        """Upload a file through ``el`` (a file_uploader) as the frontend does."""
        msg = BackMsg()
        rid = uuid.uuid4().hex
        msg.file_urls_request.request_id = rid
        msg.file_urls_request.file_names.append(name)
        msg.file_urls_request.session_id = self.session_id
        await self.send(msg)
        deadline = time.monotonic() + self.timeout
        while rid not in self._upload_replies:
            if time.monotonic() > deadline:
                raise ProtocolError("no file_urls_response")
            await asyncio.sleep(0.05)
        urls = self._upload_replies.pop(rid).file_urls_response.file_urls[0]
        boundary = uuid.uuid4().hex
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        path = urls.upload_url if urls.upload_url.startswith("/") else "/" + urls.upload_url
        if path.startswith(self.base):
            path = path[len(self.base) :]
        resp = await self.http(
            "PUT",
            path,
            body=body,
            headers={
                "Content-Type": f"multipart/form-data; boundary={boundary}",
                "X-Xsrftoken": self.cookies.get("_streamlit_xsrf", ""),
            },
        )
        if resp.code not in (200, 204):
            raise ProtocolError(f"upload PUT {path}: HTTP {resp.code} {resp.body[:200]!r}")
        state = WidgetState(id=el.id)
        info = state.file_uploader_state_value.uploaded_file_info.add()
        info.name, info.size, info.file_id = name, len(data), urls.file_id
        info.file_urls.CopyFrom(urls)
        return await self.set_widget(el, file_uploader_state_value=state.file_uploader_state_value)
