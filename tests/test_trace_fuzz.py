"""Hostile trace files (the corpus of trace_corpus.py): every case refused with a ValueError.

For each member of the format (format, name, meta, tokens, weights, attention) the corpus holds
truncations, header-shape lies, deflate bombs (honest and lying zip sizes), bad dtypes, pickled
object arrays and bad unicode; then archive-level damage, deep meta and bad values. Each case
must raise exactly ``ValueError`` with a short message, within a small memory bound
(tracemalloc), and never unpickle anything. Timings are reported by hand, never asserted here.
"""

from __future__ import annotations

import io
import json
import re
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest
from npz_forge import (
    BOMB,
    MEMBERS,
    T,
    archive,
    base,
    bomb_stream,
    dense,
    entries_of,
    header_len,
    npy,
    packed,
    raw_archive,
    save,
    with_member,
)
from trace_corpus import CHECKS, CORPUS, TRIPPED, expected_check

from h2o import Trace, load_trace
from h2o.cli import main
from h2o.trace import offset as _offset

PEAK = 16 << 20  # what refusing any case of the corpus may cost (the issue allows 100 MB)


def _refusal(data: bytes) -> tuple[ValueError, int]:
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as e:
            load_trace(io.BytesIO(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return e.value, peak


@pytest.mark.parametrize("make", [m for _, m in CORPUS], ids=[i for i, _ in CORPUS])
@pytest.mark.slow
def test_every_hostile_file_is_refused_with_a_value_error(make):
    data = make()
    err, peak = _refusal(data)
    assert type(err) is ValueError  # the library's own, not a subclass such as JSONDecodeError
    msg = str(err)
    assert msg and len(msg) < 400 and "\n" not in msg
    assert peak < PEAK, f"refusing cost {peak / 1e6:.1f} MB"
    assert not TRIPPED


_SIZE = re.compile(r"\((\d+)(\.\.\.)? bytes\), but the archive member holds (\d+) bytes of data$")


@pytest.mark.parametrize("make", [m for _, m in CORPUS], ids=[i for i, _ in CORPUS])
@pytest.mark.slow
def test_each_case_is_refused_by_the_check_made_for_it(make, request):
    """Not just refused: refused by the check its defect is made for, so that a check that no
    longer works is seen (its cases would reach a later check, or load)."""
    case = request.node.callspec.id
    check = expected_check(case)
    msg = str(_refusal(make())[0])
    assert re.search(CHECKS[check], msg), (case, check, msg)
    if check.startswith("size-"):
        declared_bytes, cut, held = _SIZE.search(msg).groups()
        fewer = cut is not None or int(held) < int(declared_bytes)  # "..." cuts a huge number
        assert fewer == (check == "size-fewer") and int(held) != int(declared_bytes), msg


def test_every_check_of_the_loader_has_a_case_it_alone_refuses():
    """Each refusal message is expected of at least one case (which then only that check
    refuses: the parametrized test above names it)."""
    expected = {expected_check(i) for i, _ in CORPUS}
    assert expected == set(CHECKS), set(CHECKS) ^ expected


def test_the_corpus_is_large_and_covers_every_member():
    ids = [i for i, _ in CORPUS]
    assert len(ids) == len(set(ids)) >= 300
    for key in MEMBERS:
        for kind in ("truncated", "shape-huge", "bomb-honest", "bomb-lying", "dtype", "pickled"):
            assert any(i.startswith(f"{key}-") and kind in i for i in ids), (key, kind)
    for key in ("format", "name", "meta", "tokens"):
        assert any(i.startswith(f"{key}-codepoint-110000") for i in ids)


@pytest.mark.parametrize("layout", ["weights", "attention"])
def test_the_unmutated_archives_load(layout):
    """The controls: what the corpus mutates is a valid trace."""
    tr = load_trace(io.BytesIO(archive(base(layout))))
    assert tr.steps == T and tr.name == "fuzz" and tr.meta == {"source": "fuzz", "layer": 3}
    assert tr.tokens == tuple(f"tok{i}" for i in range(T))
    np.testing.assert_allclose(tr.weights, packed(), rtol=1e-6)


def test_meta_reads_as_pythons_json_writes_it():
    """NaN and Infinity are not JSON, but json.dumps (and so save_trace) writes them."""
    members = base()
    members["meta"] = save(np.array(json.dumps({"a": float("nan"), "b": float("inf")})))
    meta = load_trace(io.BytesIO(archive(members))).meta
    assert np.isnan(meta["a"]) and meta["b"] == float("inf")


@pytest.mark.parametrize(
    "variant",
    ["fortran", "big-endian", "float16", "float64", "bytes-tokens", "npy-v2", "stored"],
)
def test_every_layout_numpy_writes_is_read(variant):
    members, method = base("attention"), zipfile.ZIP_DEFLATED
    if variant == "fortran":
        members["attention"] = save(np.asfortranarray(dense()))
        assert b"'fortran_order': True" in members["attention"]
    elif variant == "big-endian":
        members["attention"] = save(dense().astype(">f4"))
    elif variant in ("float16", "float64"):
        members["attention"] = save(dense().astype(variant))
    elif variant == "bytes-tokens":
        members["tokens"] = save(np.array([f"tok{i}".encode() for i in range(T)]))
    elif variant == "npy-v2":
        members["attention"] = npy("<f4", (T, T), dense().tobytes(), version=(2, 0))
    else:
        method = zipfile.ZIP_STORED
    tr = load_trace(io.BytesIO(archive(members, method)))
    assert tr.tokens == tuple(f"tok{i}" for i in range(T))
    np.testing.assert_allclose(tr.weights, packed(), rtol=2e-3 if variant == "float16" else 1e-6)


# -- the reported hostile files, one by one ---------------------------------------------------
def test_a_header_claiming_10_13_tokens_is_refused_from_the_header():
    """Was an _ArrayMemoryError traceback from a 951-byte file."""
    data = with_member("tokens", npy("<U1", (10**13,)))
    err, peak = _refusal(data)
    assert "tokens" in str(err) and peak < 1 << 20


def test_a_deflate_bomb_behind_tokens_is_never_inflated():
    """Was refused only after 37-87 s and a 5 GB peak."""
    for lying in (False, True):
        comp, crc = bomb_stream(base()["tokens"][: header_len(base()["tokens"])])
        members = {k: v for k, v in base().items() if k != "tokens"}
        hl = header_len(base()["tokens"])
        size = len(base()["tokens"]) if lying else hl + BOMB
        err, peak = _refusal(
            raw_archive([*entries_of(members), ("tokens.npy", comp, crc, size, 8, 0)])
        )
        assert "tokens" in str(err) and peak < 1 << 20


def test_a_code_point_beyond_unicode_is_named():
    """Was a SystemError traceback."""
    data = with_member("tokens", npy("<U1", (T,), struct.pack(f"<{T}I", *[65] * (T - 1), 0x110000)))
    err, _ = _refusal(data)
    assert str(err) == f"'tokens' holds an invalid character U+110000 (entry {T - 1})"


@pytest.mark.slow
def test_dense_zeros_are_refused_at_the_first_row_or_as_a_bomb():
    """Was 1.6-2.0 GB and 3-15 s before the row-sum error."""
    err, peak = _refusal(archive({"attention": save(np.zeros((4000, 4000), np.float32))}))
    assert "row 1 of the trace sums to 0" in str(err) and peak < 4 << 20
    err, peak = _refusal(archive({"attention": npy("<f4", (8192, 8192), bytes(8192 * 8192 * 4))}))
    assert "decompression bomb" in str(err) and peak < 1 << 20


def test_deeply_nested_meta_is_called_what_it_is():
    """Was "damaged .npz file: RecursionError ..."."""
    err, _ = _refusal(with_member("meta", save(np.array("[" * 100_000 + "]" * 100_000))))
    assert "'meta' holds strings of up to 200000 characters" in str(err)
    err, _ = _refusal(
        with_member("meta", save(np.array('{"a":' + "[" * 30_000 + "]" * 30_000 + "}")))
    )
    assert str(err) == "meta nests deeper than 32 levels"


def test_a_file_bad_only_at_its_end_costs_a_chunk_not_the_trace():
    """A small file of a large, valid-looking trace whose last row is wrong: rows are checked
    in a first pass that keeps nothing, so the 33 MB trace buffer is never allocated."""
    steps = 4096
    p = np.zeros(_offset(steps), np.float32)
    p[[_offset(t) for t in range(1, steps)]] = 1.0  # every row attends to position 0
    p[-1] = 0.5
    data = archive({"weights": save(p)})
    del p
    assert len(data) < 1 << 20
    err, peak = _refusal(data)
    assert f"row {steps - 1} of the trace sums to" in str(err)
    assert peak < 6 << 20


def test_a_large_valid_trace_costs_its_own_size_and_little_more():
    steps = 2048
    rng = np.random.default_rng(0)
    tr = Trace.from_rows(
        "r", [np.zeros(0)] + [rng.random(t) for t in range(1, steps)], normalize=True
    )
    buf = io.BytesIO()
    np.savez_compressed(buf, weights=tr.weights)
    buf.seek(0)
    tracemalloc.start()
    try:
        back = load_trace(buf)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(back.weights, tr.weights, rtol=1e-6)
    assert peak < tr.weights.nbytes + (6 << 20)  # the trace, plus chunks of 1 MB


@pytest.mark.parametrize("make", [m for _, m in CORPUS[::7]], ids=[i for i, _ in CORPUS[::7]])
def test_the_cli_prints_an_error_line_never_a_traceback(make, tmp_path, capsys):
    path = tmp_path / "hostile.npz"
    path.write_bytes(make())
    assert main(["bench", "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
