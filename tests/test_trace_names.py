"""The trace picker names traces as a person would ("lighthouse, layer 8, head 0"), from each
file's own metadata, read once per file version per server; its keys (and so the links) stay
the repo-relative paths, the built-in names and the upload keys."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from test_app import open_app, trace_bytes, upload

import h2o
from app import data


def _toy(**meta: object) -> h2o.Trace:
    toy = h2o.toy_trace()
    return h2o.Trace("toy-copy", toy.weights, dict(meta))


def _saved(path: Path, **meta: object) -> Path:
    h2o.save_trace(_toy(**meta), path)
    return path


def _file_meta(path: Path) -> dict:
    """A file's metadata as numpy reads it (not the app's reader)."""
    with np.load(path) as z:
        return json.loads(str(z["meta"]))


def _clear_label_caches() -> None:
    data._file_label.clear()
    data._file_labels.clear()


# -- the name function -----------------------------------------------------------------------------
def test_a_trace_with_metadata_is_named_by_its_text_layer_and_head(tmp_path):
    meta = {
        "model": "SmolLM2-135M-Instruct",
        "text": "traces/texts/lighthouse.txt (original text written for the h2o project)",
        "layer": 8,
        "head": 0,
    }
    assert data.trace_name(_toy(**meta).meta) == "lighthouse, layer 8, head 0"
    assert data.file_label(_saved(tmp_path / "lh.npz", **meta)) == "lighthouse, layer 8, head 0"
    mean = {**meta, "head": "mean", "n_heads": 9}
    assert data.trace_name(mean) == "lighthouse, layer 8, mean of 9 heads"
    # no text: the model names it
    assert data.trace_name({"model": "SmolLM2", "layer": 3}) == "SmolLM2, layer 3"


def test_a_trace_without_metadata_is_named_by_its_file(tmp_path):
    assert data.trace_name(_toy().meta) is None
    assert data.file_label(_saved(tmp_path / "plain.npz")) == "plain.npz"
    # metadata that says nothing about text, model, layer or head
    assert data.file_label(_saved(tmp_path / "other.npz", source="made up")) == "other.npz"


def test_no_meta_member_or_an_unreadable_file_falls_back_to_the_file_name(tmp_path):
    bare = tmp_path / "bare.npz"
    np.savez(bare, weights=_toy().weights)
    assert data.file_label(bare) == "bare.npz"
    listed = tmp_path / "listed.npz"
    np.savez(listed, weights=_toy().weights, meta=np.array(json.dumps([1, 2])))
    assert data.file_label(listed) == "listed.npz"
    broken = tmp_path / "broken.npz"
    np.savez(broken, weights=_toy().weights, meta=np.array("{not json"))
    assert data.file_label(broken) == "broken.npz"
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04 not a zip at all")
    assert data.file_label(junk) == "junk.npz"
    assert data.file_label(tmp_path / "gone.npz") == "gone.npz"


def test_a_huge_meta_member_is_not_read(tmp_path):
    """The metadata's size is checked before it is decompressed (a bomb costs nothing)."""
    path = tmp_path / "bomb.npz"
    text = json.dumps({"layer": 1, "pad": " " * (data._META_BYTES // 4)})
    np.savez_compressed(path, weights=_toy().weights, meta=np.array(text))
    with zipfile.ZipFile(path) as zf:
        assert zf.getinfo("meta.npy").compress_size < data._META_BYTES // 100
    assert data.file_label(path) == "bomb.npz"


def test_labels_are_one_line_of_plain_text():
    name = data.trace_name({"text": "a\nb  [link](http://x)", "layer": "1\n2"})
    assert name == "a b [link](http://x), layer 1 2" and "\n" not in name


def test_labels_two_keys_share_get_their_keys(monkeypatch):
    labels = {"traces/a.npz": "x", "traces/b.npz": "x", "traces/c.npz": "y"}
    monkeypatch.setattr(data, "_file_labels", lambda keys: {k: labels[k] for k in keys})
    shared = data.trace_labels([*h2o.synthetic.BUILTIN, *labels], {})
    assert shared["traces/a.npz"] == "x (traces/a.npz)"
    assert shared["traces/b.npz"] == "x (traces/b.npz)"
    assert shared["traces/c.npz"] == "y"
    assert len(set(shared.values())) == len(shared)


def test_a_file_is_read_again_once_it_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "ROOT", tmp_path)
    _clear_label_caches()
    path = _saved(tmp_path / "t.npz", text="library", layer=1, head=2)
    assert data._file_labels(("t.npz",))["t.npz"] == "library, layer 1, head 2"
    _saved(path, text="library", layer=5, head=2)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    data._file_labels.clear()  # what its few seconds' ttl does
    assert data._file_labels(("t.npz",))["t.npz"] == "library, layer 5, head 2"
    _clear_label_caches()


# -- the picker ------------------------------------------------------------------------------------
def test_the_picker_shows_human_names_and_keeps_its_keys():
    files = data.trace_files()
    if not files:
        pytest.skip("no trace files in traces/")
    at = open_app(trace="toy")
    box = at.selectbox(key="w_trace")
    for key in h2o.synthetic.BUILTIN:
        assert key in box.options
    for key in files:
        meta = _file_meta(data.ROOT / key)
        label = box.format_func(key)
        assert label in box.options
        assert "/" not in label and not label.endswith(".npz")
        assert f"layer {meta['layer']}" in label
        assert Path(str(meta["text"]).split(" (")[0]).stem in label
    # choosing one by its name loads the trace of the same key (the browser answers with the label)
    key = files[-1]
    at.selectbox(key="w_trace").set_value(key).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state["trace"] == key
    assert at.selectbox(key="w_trace").value == key
    assert any(c.value.startswith(f"**{Path(key).stem}**") for c in at.sidebar.caption)
    # and a link naming the file by its key still opens it
    linked = open_app(trace=key)
    assert linked.session_state["trace"] == key and not linked.error


def test_an_upload_is_shown_by_its_file_name():
    at = upload(open_app(trace="toy"), "my trace.npz", trace_bytes(h2o.toy_trace()))
    key = at.session_state["trace"]
    assert key.startswith(data.UPLOAD_PREFIX)
    box = at.selectbox(key="w_trace")
    assert box.format_func(key) == "my trace.npz" and "my trace.npz" in box.options


def test_the_picker_reads_each_file_once_not_on_every_run(monkeypatch):
    files = data.trace_files()
    if not files:
        pytest.skip("no trace files in traces/")
    reads: list[str] = []
    real = data.read_meta

    def counted(path):
        reads.append(str(path))
        return real(path)

    monkeypatch.setattr(data, "read_meta", counted)
    _clear_label_caches()
    at = open_app(trace="toy")
    assert sorted(reads) == sorted(str(data.ROOT / k) for k in files)  # once each
    reads.clear()
    at.run()
    assert reads == []  # the next run reads nothing
    other = AppTest.from_file(str(data.ROOT / "app" / "main.py"), default_timeout=120).run()
    assert not other.exception and reads == []  # nor another student's first run
