"""Uploads leave the server's shared caches when the last session holding them ends.

Under AppTest every session has the same id ("test session id"), so a session's end is what
Streamlit does when a tab's websocket closes: it clears that session's session-scoped resources.
"""

from __future__ import annotations

from streamlit.runtime import caching
from streamlit.testing.v1 import AppTest
from test_app import open_app, player, trace_bytes, upload

import h2o
from app import data

SESSION = "test session id"  # AppTest's


def toy_copy(label: str = "") -> bytes:
    """A toy trace's file; another ``label`` (in its metadata) makes another digest."""
    toy = h2o.toy_trace()
    return trace_bytes(h2o.Trace(toy.name, toy.weights, {**toy.meta, "label": label}))


def digest_of(at: AppTest) -> str:
    return at.session_state["_uploads"][at.session_state["trace"]].digest


def cached(digest: str) -> tuple[int, int]:
    """How many decoded traces and recorded replays of the upload the shared caches hold."""
    uploads = [k for k in data._uploads_cache()._items if k[0] == digest]
    replays = [k for k in data._replays_cache()._items if k[0] == f"{data.UPLOAD_PREFIX}{digest}"]
    return len(uploads), len(replays)


def end_session() -> None:
    caching.clear_session_resource_cache(SESSION)  # what disconnect_session / shutdown call


def test_a_session_end_drops_its_upload_and_replays_from_the_caches():
    at = open_app()
    upload(at, "mine.npz", toy_copy())
    digest = digest_of(at)
    assert data.upload_holders(digest) == 1
    assert cached(digest) == (1, 2)  # the trace and panels A and B's replays
    replays, total = data._replays_cache(), data._replays_cache().total
    held = sum(size for k, (_, size) in replays._items.items() if k[0].endswith(digest))
    others = [k for k in replays._items if not k[0].endswith(digest)]

    end_session()
    assert data.upload_holders(digest) == 0
    assert cached(digest) == (0, 0)
    assert held > 0 and replays.total == total - held
    assert all(k in replays._items for k in others)  # the other traces' replays stay

    at.run()  # the same session back (a reconnect): it holds its upload again, decoded anew
    assert not at.exception and player(at) is not None
    assert data.upload_holders(digest) == 1 and cached(digest) == (1, 2)
    end_session()


def test_an_upload_replaced_by_another_is_let_go():
    at = open_app()
    upload(at, "first.npz", toy_copy("first"))
    first = digest_of(at)
    upload(at, "second.npz", toy_copy("second"))
    second = digest_of(at)
    assert first != second
    assert data.upload_holders(first) == 0 and cached(first) == (0, 0)
    assert data.upload_holders(second) == 1 and cached(second)[0] == 1
    box = at.selectbox(key="w_trace")  # uploads show by file name
    picks = [o for o in box.options if o in ("first.npz", "second.npz")]
    assert picks == ["second.npz"]  # the session no longer offers the first
    assert box.value == at.session_state["trace"]
    end_session()


def test_a_removed_upload_stays_while_selected_and_goes_once_it_is_not():
    at = open_app()
    upload(at, "kept.npz", toy_copy("kept"))
    digest = digest_of(at)
    key = at.session_state["trace"]
    at.file_uploader(key="w_upload").set_value(None).run()  # the file's x: still selected
    assert at.session_state["trace"] == key and data.upload_holders(digest) == 1
    assert not at.exception and not at.error

    upload(at, "kept.npz", toy_copy("kept"))  # the same file again: one hold, same digest
    assert data.upload_holders(digest) == 1
    at.selectbox(key="w_trace").set_value("toy").run()
    assert data.upload_holders(digest) == 1  # still in the uploader, still offered
    at.file_uploader(key="w_upload").set_value(None).run()  # removed, and not selected: gone
    assert data.upload_holders(digest) == 0 and cached(digest) == (0, 0)
    assert "kept.npz" not in at.selectbox(key="w_trace").options  # uploads show by file name
    assert not at.exception and not at.error
    end_session()
