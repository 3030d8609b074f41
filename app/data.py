"""Cached traces, uploads and replays (comparisons of many replays: :mod:`app.sweeps`; the real
model's runs: :mod:`app.model_runs`).

Everything expensive is computed once per process and shared by every session: traces and
recorded replays are read-only (``st.cache_resource``); summary tables are small plain data
(``st.cache_data`` with ``max_entries``). A trace is identified by ``ident``: its picker key for
the built-in ones, the key plus the file's mtime for ``traces/*.npz``, the content hash for an
upload — so a cache never serves a stale or a different file under the same name.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import hashlib
import io
import json
import os
import threading
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

import h2o
from app.bytecache import ByteCache, Holds
from h2o import analysis
from h2o.player import playback
from h2o.synthetic import BUILTIN
from h2o.trace import MAX_STEPS
from h2o.trace_npz import MAX_META_CHARS

if TYPE_CHECKING:
    pass

ROOT = Path(__file__).resolve().parents[1]
TRACE_DIR = ROOT / "traces"
UPLOAD_PREFIX = "upload:"
#: Largest upload accepted, in MB (the file uploader refuses bigger files in the browser).
MAX_UPLOAD_MB = 200
#: Largest trace accepted from an upload, in steps (the library's own limit by default).
MAX_UPLOAD_STEPS = MAX_STEPS


@dataclass(frozen=True, eq=False)
class TraceRef:
    """A loaded trace and the identity its cached results are keyed by."""

    key: str  # what the trace picker and the URL hold
    ident: str  # cache identity (see the module docstring)
    trace: h2o.Trace


@dataclass(frozen=True)
class Upload:
    name: str
    digest: str
    data: bytes


# -- traces ----------------------------------------------------------------------------------------
@st.cache_resource(show_spinner="Building the trace…")
def _builtin(name: str) -> h2o.Trace:
    return h2o.builtin_trace(name)


@st.cache_resource(show_spinner="Loading the trace…", max_entries=8)
def _file(path: str, mtime_ns: int) -> h2o.Trace:
    return h2o.load_trace(path, name=Path(path).stem)


#: Memory the server gives uploaded traces and recorded replays, shared by every session (MB;
#: ``H2O_UPLOAD_CACHE_MB`` / ``H2O_REPLAY_CACHE_MB`` override). The least recently used go first.
UPLOAD_CACHE_MB = int(os.environ.get("H2O_UPLOAD_CACHE_MB", "400"))
REPLAY_CACHE_MB = int(os.environ.get("H2O_REPLAY_CACHE_MB", "800"))


def trace_bytes(trace: h2o.Trace) -> int:
    """What a trace holds: its attention and whatever it carries beside it (norms, vectors)."""
    extra = (trace.key_norms, trace.kvzip_scores)
    vec = trace.vectors.nbytes if trace.vectors is not None else 0
    return int(trace.weights.nbytes + sum(a.nbytes for a in extra if a is not None) + vec)


def replay_bytes(rep: h2o.Replay) -> int:
    arrays = [rep.kept_pos, rep.kept_score, rep.mass, rep.recall, rep.oracle]
    return int(sum(a.nbytes for a in arrays if a is not None))


@st.cache_resource(show_spinner=False)
def _uploads_cache() -> ByteCache[h2o.Trace]:
    return ByteCache(UPLOAD_CACHE_MB * 2**20, trace_bytes)


@st.cache_resource(show_spinner=False)
def _replays_cache() -> ByteCache[h2o.Replay]:
    return ByteCache(REPLAY_CACHE_MB * 2**20, replay_bytes)


@st.cache_resource(show_spinner=False)
def _holds() -> Holds:
    """Which sessions hold which uploads (by digest). When the last one lets go, the decoded
    trace and every replay of it leave the caches at once (not when LRU reaches them)."""
    uploads, replays = _uploads_cache(), _replays_cache()

    def free(digest: Hashable) -> None:
        uploads.discard(lambda key: key[0] == digest)
        replays.discard(lambda key: key[0] == f"{UPLOAD_PREFIX}{digest}")

    return Holds(free)


class _Session:
    """One browser session's token in the registry (its identity is the holder)."""

    __slots__ = ("holds", "session_id")

    def __init__(self, holds: Holds, session_id: str | None) -> None:
        self.holds = holds
        self.session_id = session_id


#: Sessions that ended holding uploads, by id: closed at the TTL unless they come back.
_ended: dict[str, _Session] = {}


def _session_ended(token: _Session) -> None:
    if token.holds.release(token) and token.session_id is not None:
        _close_at_ttl(token)


def _close_at_ttl(token: _Session) -> None:
    """Close a disconnected session that held uploads when its TTL runs out.

    Streamlit 1.67 forgets such a session only at the next write to its session storage after
    the TTL (another tab closing), never shuts it down (its uploaded files stay in the upload
    manager), and what it held (its uploads, the traces and replays its page drew) is in
    reference cycles freed at some later garbage collection: minutes, or never, after the tab
    closed. Runs on Streamlit's event loop (where it disconnects sessions), like ``close_session``.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not in the server's event loop (AppTest): nothing to close
        return
    _ended[token.session_id] = token
    ttl = float(st.get_option("server.disconnectedSessionTTL"))
    loop.call_later(max(0.0, ttl - 1), _close_if_still_gone, token)


def _close_if_still_gone(token: _Session) -> None:
    sid = token.session_id
    if _ended.get(sid) is not token:  # it came back (and maybe left again: a later close)
        return
    del _ended[sid]
    if not Runtime.exists() or Runtime.instance().is_active_session(sid):
        return
    Runtime.instance().close_session(sid)
    # Its state is in reference cycles, free once its script thread has wound down.
    asyncio.get_running_loop().call_later(1.0, gc.collect)


# Streamlit releases a session-scoped resource when the session's websocket closes (a closed
# tab) and when it shuts down; a session that reconnects gets a new token on its next run and
# holds its uploads again (they are decoded again if nobody else kept them).
@st.cache_resource(scope="session", on_release=_session_ended, show_spinner=False)
def _session() -> _Session:
    ctx = get_script_run_ctx()
    sid = ctx.session_id if ctx is not None else None
    if sid is not None:
        _ended.pop(sid, None)  # back before its TTL: keep it
    return _Session(_holds(), sid)


def hold_uploads(digests: Iterable[str]) -> None:
    """This browser session holds exactly these uploads (by digest); call it in a script run."""
    token = _session()
    token.holds.hold(token, digests)


def upload_holders(digest: str) -> int:
    """How many live sessions hold the upload ``digest``."""
    return _holds().holders(digest)


def _upload(digest: str, max_steps: int, name: str, data: bytes) -> h2o.Trace:
    # Keyed by the content hash: hashing the bytes themselves on every rerun would cost more
    # than the lookup saves.
    stem = Path(name).stem or "uploaded"

    def load() -> h2o.Trace:
        with st.spinner("Checking the upload…"):
            return h2o.load_trace(io.BytesIO(data), name=stem, max_steps=max_steps)

    return _uploads_cache().get((digest, max_steps, stem), load)


def trace_files() -> list[str]:
    """Every ``.npz`` under ``traces/``, as repo-relative paths (the picker's keys)."""
    return list(_trace_files())


# Walking traces/ on every run of every session was a thirtieth of the server's time; a file
# copied in shows within a few seconds.
@st.cache_resource(show_spinner=False, ttl=3)
def _trace_files() -> tuple[str, ...]:
    if not TRACE_DIR.is_dir():
        return ()
    return tuple(sorted(p.relative_to(ROOT).as_posix() for p in TRACE_DIR.rglob("*.npz")))


def trace_options(uploads: dict[str, Upload]) -> list[str]:
    return [*BUILTIN, *trace_files(), *uploads]


def _plain(value: Any, limit: int) -> str:
    """A metadata value as one line of plain text (labels are never markdown), cut short."""
    return said(" ".join(str(value).split()), limit)


def trace_name(meta: Mapping[str, Any]) -> str | None:
    """A captured trace's name as a person would say it, from its metadata: its text (else its
    model), layer and head, as in "lighthouse, layer 8, head 0"; None if the metadata says none
    of them."""
    if not isinstance(meta, Mapping):
        return None
    text = str(meta.get("text", "")).split(" (")[0].strip()  # "traces/texts/x.txt (licence)"
    if text == "unspecified":
        text = ""
    elif Path(text).suffix and not any(c.isspace() for c in text):  # a file: its stem
        text = Path(text).stem
    what = text or str(meta.get("model", "")).strip()
    bits = [_plain(what, 40)] if what else []
    if "layer" in meta:
        bits.append(f"layer {_plain(meta['layer'], 20)}")
    head = meta.get("head")
    if head == "mean":
        heads = meta.get("n_heads")
        bits.append(f"mean of {_plain(heads, 20)} heads" if heads else "mean of the heads")
    elif head is not None:
        bits.append(f"head {_plain(head, 20)}")
    return ", ".join(bits) or None


# The .npy of the metadata string: its header and up to MAX_META_CHARS UTF-32 characters.
_META_BYTES = 4 * MAX_META_CHARS + 4096


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta`` of a trace file, read alone (not the weights); ``{}`` when it has none.
    Raises ``ValueError``/``OSError``/``zipfile.BadZipFile`` for a file that is not a trace."""
    with zipfile.ZipFile(path) as zf:
        try:
            info = zf.getinfo("meta.npy")
        except KeyError:
            return {}
        if info.file_size > _META_BYTES:  # bounded before anything is decompressed
            raise ValueError(f"its meta holds {info.file_size:,} bytes")
        with zf.open(info) as f:
            text = np.lib.format.read_array(f, allow_pickle=False)
    meta = json.loads(str(text[()]))
    if not isinstance(meta, dict):
        raise ValueError("its meta is not a JSON object")
    return meta


def file_label(path: str | os.PathLike[str]) -> str:
    """What the trace picker shows for a trace file: :func:`trace_name` of its metadata, or its
    file name when the metadata is missing, unreadable or says nothing."""
    try:
        name = trace_name(read_meta(path))
    except (OSError, ValueError, KeyError, EOFError, RecursionError, zipfile.BadZipFile):
        name = None
    return name or Path(path).name


#: Trace file versions whose labels are kept (a label is a few dozen bytes).
LABELS_KEPT = 256


@st.cache_resource(show_spinner=False, max_entries=LABELS_KEPT)
def _file_label(key: str, mtime_ns: int) -> str:
    return file_label(ROOT / key)  # once per file version per server


# The picker runs on every page of every session: its labels are looked up (a stat per file) at
# most every few seconds, like the listing, and read once per file version.
@st.cache_resource(show_spinner=False, ttl=3)
def _file_labels(keys: tuple[str, ...]) -> Mapping[str, str]:
    labels = {}
    for key in keys:
        try:
            labels[key] = _file_label(key, (ROOT / key).stat().st_mtime_ns)
        except OSError:  # gone since the listing
            labels[key] = Path(key).name
    return MappingProxyType(labels)


def trace_labels(options: Iterable[str], uploads: Mapping[str, Upload]) -> dict[str, str]:
    """What the trace picker shows for each of its keys: the built-in traces by name, files in
    traces/ by :func:`file_label`, an upload by its file name. The keys (and so the links) stay
    as they are; a label two keys share gets its key added, since the browser answers with the
    label."""
    options = list(options)
    files = _file_labels(
        tuple(k for k in options if k not in BUILTIN and not k.startswith(UPLOAD_PREFIX))
    )
    labels: dict[str, str] = {}
    for key in options:
        if key in BUILTIN:
            labels[key] = key
        elif key.startswith(UPLOAD_PREFIX):
            up = uploads.get(key)
            name = up.name if up is not None else key.removeprefix(UPLOAD_PREFIX).split("#")[0]
            labels[key] = _plain(name, 80) or key
        else:
            labels[key] = files.get(key) or Path(key).name
    shared = Counter(labels.values())
    return {
        k: (f"{v} ({k})" if shared[v] > 1 and k not in BUILTIN else v) for k, v in labels.items()
    }


def make_upload(name: str, payload: bytes) -> tuple[str, Upload]:
    """The picker key and registry entry for an uploaded file (not yet validated)."""
    if len(payload) > MAX_UPLOAD_MB * 1_000_000:
        raise ValueError(
            f"the file is {len(payload) / 1e6:.0f} MB; at most {MAX_UPLOAD_MB} MB is accepted"
        )
    digest = hashlib.sha256(payload).hexdigest()
    return f"{UPLOAD_PREFIX}{name}#{digest[:8]}", Upload(name, digest, payload)


@functools.lru_cache(maxsize=1)
def _trace_root() -> Path:
    return TRACE_DIR.resolve()  # resolving walks the path on disk: once, not every run


def load(key: str, uploads: dict[str, Upload]) -> TraceRef:
    """Resolve a picker key to a trace; ``ValueError`` says what is wrong with it."""
    if key in BUILTIN:
        return TraceRef(key, key, _builtin(key))
    if key.startswith(UPLOAD_PREFIX):
        up = uploads.get(key)
        if up is None:
            raise ValueError(
                f"{key!r} is not in this browser session (uploads are not shared): upload it"
            )
        trace = _upload(up.digest, MAX_UPLOAD_STEPS, up.name, up.data)
        return TraceRef(key, f"{UPLOAD_PREFIX}{up.digest}", trace)
    path = (ROOT / key).resolve()
    if path.suffix != ".npz" or _trace_root() not in path.parents or not path.is_file():
        raise ValueError(f"{key!r} is not a trace file under traces/")
    mtime = path.stat().st_mtime_ns
    return TraceRef(key, f"{key}@{mtime}", _file(str(path), mtime))


def said(value: Any, limit: int = 120) -> str:
    """A metadata value as caption text, cut short (an upload's metadata may hold anything)."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_trace(trace: h2o.Trace) -> str:
    """One caption line: steps, where the trace comes from, its band (descriptive metadata only;
    the numbers the app computes with come from ``analysis.suggested``/``band_width``)."""
    meta = trace.meta
    bits = [f"{trace.steps:,} steps"]
    if meta.get("source"):
        bits.append(said(meta["source"]))
    elif "layer" in meta:  # a captured trace without a source line: say which layer and head
        head = f", head {said(meta['head'], 20)}" if "head" in meta else ""
        bits.append(f"layer {said(meta['layer'], 20)}{head}")
    if trace.tokens is not None:
        bits.append("with token strings")
    if (band := analysis.band_width(trace)) is not None:
        bits.append(f"recency band {band}")
    if "epoch" in meta:
        bits.append(f"epoch {said(meta['epoch'], 20)}")
    return " · ".join(bits)


# -- replays ---------------------------------------------------------------------------------------
def recorded_replay(ref: TraceRef, policy: h2o.Policy, top_k: int) -> h2o.Replay:
    """The recorded replay of ``policy`` (fresh) on ``ref``, computed once per parameters and
    kept in the byte-bounded replay cache. A replay holds ``steps × min(budget + 1, steps)``
    slots of 12 bytes (position and score): 13 MB for the canonical trace at budget 256, 200 MB
    at its largest budget."""
    params = tuple(sorted(policy.params().items()))

    def record() -> h2o.Replay:
        with st.spinner(f"Replaying {analysis.describe(policy.name, policy.params())}…"):
            return h2o.replay(policy, ref.trace, top_k=top_k, record=True)

    return _replays_cache().get((ref.ident, policy.name, params, top_k), record)


_gates_lock = threading.Lock()


def _gate(rep: h2o.Replay, key: Any) -> threading.Lock:
    """One lock per derived value of a replay: a class arriving on one view computes it once
    while the others wait for it, instead of each computing its own copy."""
    with _gates_lock:
        return rep.extra.setdefault("app_gates", {}).setdefault(key, threading.Lock())


def memo(rep: h2o.Replay, key: Any, fn: Callable[[], Any]) -> Any:
    """Derived data kept on the (shared, cached) replay itself, so it lives as long as it does;
    computed once however many sessions ask for it at the same moment."""
    cache = rep.extra.setdefault("app", {})
    if key in cache:
        return cache[key]
    with _gate(rep, key):
        if key not in cache:
            cache[key] = fn()
    return cache[key]


#: Loaded ranges of steps kept per replay for the player (about 0.5 MB each at the default view).
RANGES_KEPT = 6
_ranges_lock = threading.Lock()


def range_block(rep: h2o.Replay, trace: h2o.Trace, a: int, b: int) -> playback.Block:
    """The player's data for steps ``a..b-1`` of a replay; the most recent ranges are kept on the
    (shared, cached) replay itself, so many students on the same view compute each range once
    (the others wait for it)."""

    def kept_block() -> playback.Block | None:
        with _ranges_lock:
            kept: OrderedDict = rep.extra.setdefault("app_ranges", OrderedDict())
            if (a, b) in kept:
                kept.move_to_end((a, b))
                return kept[(a, b)]
        return None

    if (block := kept_block()) is not None:
        return block
    with _gate(rep, ("range", a, b)):
        if (block := kept_block()) is not None:
            return block
        block = playback.range_block(rep, trace, a, b)
        with _ranges_lock:
            kept: OrderedDict = rep.extra["app_ranges"]
            kept[(a, b)] = block
            while len(kept) > RANGES_KEPT:
                kept.popitem(last=False)
    return block


def run_block(rep: h2o.Replay) -> playback.Block:
    """The player's whole-run data of a replay (metrics, overview), computed once per replay."""
    return memo(rep, "run_block", lambda: playback.run_block(rep))


def pooled(rep: h2o.Replay, step_bins: int, pos_bins: int) -> tuple[np.ndarray, int, int]:
    """``Replay.pooled_grid`` (max-pooled whole run), computed once per replay and size."""
    return memo(rep, ("pooled", step_bins, pos_bins), lambda: rep.pooled_grid(step_bins, pos_bins))
