"""Hostile trace files: a corpus generated here, every case refused with the library's ValueError.

For each member of the format (format, name, meta, tokens, weights, attention) the corpus holds
truncations, header-shape lies, deflate bombs (honest and lying zip sizes), bad dtypes, pickled
object arrays and bad unicode; then archive-level damage, deep meta and bad values. Each case
must raise exactly ``ValueError`` with a short message, within a small memory bound
(tracemalloc), and never unpickle anything. Timings are reported by hand, never asserted here.
"""

from __future__ import annotations

import functools
import io
import json
import struct
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable

import numpy as np
import pytest

from h2o import Trace, load_trace
from h2o.cli import main
from h2o.trace import FORMAT, _offset

T = 6
BOMB = 64 << 20  # bytes of zeros behind a bomb: any case that materialises it breaks the bound
PEAK = 16 << 20  # what refusing any case of the corpus may cost (the issue allows 100 MB)

TRIPPED: list[str] = []


def _trip(*args: object) -> None:
    TRIPPED.append("unpickled")  # never called: object arrays are refused, not loaded


class Tripwire:
    def __reduce__(self):
        return (_trip, ())


# -- building archives byte by byte ------------------------------------------------------------
def npy(descr, shape, data=b"", *, fortran=False, version=(1, 0), header=None) -> bytes:
    """A .npy member with any header at all (``header`` replaces the dictionary text)."""
    text = header if header is not None else f"{{'descr': {descr!r}, 'fortran_order': "
    if header is None:
        text += f"{fortran!r}, 'shape': {tuple(shape)!r}, }}"
    h = text.encode("latin-1")
    size = 2 if version == (1, 0) else 4
    h += b" " * ((64 - (8 + size + len(h) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY" + bytes(version) + len(h).to_bytes(size, "little") + h + data


def save(a, *, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=allow_pickle)
    return buf.getvalue()


def archive(members: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for key, payload in members.items():
            z.writestr(key if key.endswith("/") or "." in key else f"{key}.npy", payload)
    return buf.getvalue()


def raw_archive(entries) -> bytes:
    """A zip written by hand: ``(name, compressed, crc, file_size, method, flags)`` per member,
    so that sizes, CRCs and flags can lie."""
    buf, directory = io.BytesIO(), []
    for name, comp, crc, file_size, method, flags in entries:
        off, n = buf.tell(), name.encode()
        fields = (20, flags, method, 0, 0, crc, len(comp), file_size & 0xFFFFFFFF, len(n), 0)
        buf.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", *fields) + n + comp)
        directory.append(
            struct.pack("<4sH", b"PK\x01\x02", 20)
            + struct.pack("<5H3L5H2L", *fields[:-1], 0, 0, 0, 0, 0, off)
            + n
        )
    start, cd = buf.tell(), b"".join(directory)
    buf.write(
        cd
        + struct.pack(
            "<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(cd), start, 0
        )
    )
    return buf.getvalue()


def deflated(payload: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(payload) + c.flush()


@functools.cache
def bomb_stream(prefix: bytes) -> tuple[bytes, int]:
    """Raw deflate of ``prefix`` + BOMB zero bytes, and its CRC, built a megabyte at a time."""
    c, crc, block = zlib.compressobj(9, zlib.DEFLATED, -15), zlib.crc32(prefix), bytes(1 << 20)
    out = [c.compress(prefix)]
    for _ in range(BOMB >> 20):
        out.append(c.compress(block))
        crc = zlib.crc32(block, crc)
    out.append(c.flush())
    return b"".join(out), crc


def entries_of(members: dict[str, bytes]) -> list:
    return [
        (f"{k}.npy", deflated(v), zlib.crc32(v), len(v), zipfile.ZIP_DEFLATED, 0)
        for k, v in members.items()
    ]


# -- the valid trace every case is a mutation of -----------------------------------------------
def rows() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [np.zeros(0)] + [rng.dirichlet(np.ones(t)) for t in range(1, T)]


def packed() -> np.ndarray:
    return np.concatenate(rows()).astype(np.float32)


def dense() -> np.ndarray:
    d = np.zeros((T, T), np.float32)
    for t, r in enumerate(rows()):
        d[t, :t] = r
    return d


def base(layout: str = "weights") -> dict[str, bytes]:
    members = {
        "format": save(np.array(FORMAT)),
        "name": save(np.array("fuzz")),
        "meta": save(np.array(json.dumps({"source": "fuzz", "layer": 3}))),
        "tokens": save(np.array([f"tok{i}" for i in range(T)])),
    }
    members[layout] = save(packed() if layout == "weights" else dense())
    return members


def header_len(payload: bytes) -> int:
    size = 2 if payload[6] == 1 else 4
    return 8 + size + int.from_bytes(payload[8 : 8 + size], "little")


#: (shape, dtype) of each member in the base archives.
SHAPES = {
    "format": ((), np.array(FORMAT).dtype),
    "name": ((), np.array("fuzz").dtype),
    "meta": ((), np.array(json.dumps({"source": "fuzz", "layer": 3})).dtype),
    "tokens": ((T,), np.array([f"tok{i}" for i in range(T)]).dtype),
    "weights": ((T * (T - 1) // 2,), np.dtype(np.float32)),
    "attention": ((T, T), np.dtype(np.float32)),
}
MEMBERS = list(SHAPES)


def layout_for(key: str) -> str:
    return "attention" if key == "attention" else "weights"


def with_member(key: str, payload: bytes) -> bytes:
    members = base(layout_for(key))
    members[key] = payload
    return archive(members)


# -- the corpus --------------------------------------------------------------------------------
Case = tuple[str, Callable[[], bytes]]


def member_cases(key: str) -> list[Case]:
    shape, dtype = SHAPES[key]
    good = base(layout_for(key))[key]
    hl = header_len(good)
    data = good[hl:]
    count = int(np.prod(shape))
    out: list[Case] = []
    # truncations of the member (the zip's own sizes are honest)
    for k in sorted({0, 1, 6, 8, 9, 10, hl - 1, hl, hl + 1, len(good) - 1}):
        if 0 <= k < len(good):
            out.append((f"{key}-truncated-{k}", lambda k=k: with_member(key, good[:k])))
    # header-shape lies, with the data as they are
    lies = {
        "huge": (10**13,) * max(1, len(shape)),
        "enormous": (10**100,),
        "bigger": (count + 7,) if len(shape) < 2 else (shape[0] + 1, shape[1] + 1),
        "smaller": (max(count - 1, 0),) if len(shape) < 2 else (shape[0] - 1, shape[1] - 1),
        "negative": (-1,),
        "ndim": (*shape, 1),
        "0-d": (),
        "not-ints": (2.5,),
    }
    descr = dtype.str
    for lie, s in lies.items():
        if s == shape:
            continue
        out.append(
            (
                f"{key}-shape-{lie}",
                lambda s=s: with_member(
                    key,
                    npy(
                        descr,
                        (),
                        data,
                        header=f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {s!r}, }}",
                    ),
                ),
            )
        )
    # a lie the zip agrees with: the data padded (or cut) to the shape the header claims
    if key in ("tokens", "weights"):
        s = (count + 1,)
        out.append(
            (
                f"{key}-shape-lie-with-matching-data",
                lambda s=s: with_member(key, npy(descr, s, data + bytes(dtype.itemsize))),
            )
        )
    # deflate bombs: the header as it is, BOMB zeros behind it
    header = good[:hl]

    def bomb(lying: bool) -> bytes:
        comp, crc = bomb_stream(header)
        members = {k: v for k, v in base(layout_for(key)).items() if k != key}
        size = len(good) if lying else hl + BOMB
        return raw_archive([*entries_of(members), (f"{key}.npy", comp, crc, size, 8, 0)])

    out.append((f"{key}-bomb-honest-sizes", lambda: bomb(False)))
    out.append((f"{key}-bomb-lying-sizes", lambda: bomb(True)))
    # a bomb the header declares in full (an honest, huge array of zeros): the weights are
    # refused at their first row, the strings for their length, from the header
    big = {
        "weights": ((_offset(4000),), "<f4"),
        "attention": ((4000, 4000), "<f4"),
        "tokens": ((T,), "<U100000"),
        "meta": ((), "<U1000000"),
        "name": ((), "<U100000"),
        "format": ((), "<U100000"),
    }[key]

    def declared_bomb(s=big[0], d=big[1]) -> bytes:
        members = base(layout_for(key))
        if key in ("weights", "attention"):
            del members["tokens"]  # so that the rows themselves are what is refused
        members[key] = npy(d, s, bytes(int(np.prod(s)) * np.dtype(d).itemsize))
        return archive(members)

    out.append((f"{key}-declared-zeros", declared_bomb))
    # bad dtypes, with data of the right size
    bad = ["<i4", "<c8", "|b1", "<f16", "<M8[D]", "|V4", "<u2"]
    bad += ["<U3", "|S3"] if key in ("weights", "attention") else ["<f4", "<f8", "<i8"]
    for d in bad:
        nbytes = count * np.dtype(d).itemsize
        out.append(
            (f"{key}-dtype-{d}", lambda d=d, n=nbytes: with_member(key, npy(d, shape, bytes(n))))
        )
    out.append(
        (
            f"{key}-structured",
            lambda: with_member(key, save(np.zeros(shape, dtype=[("a", "<f4"), ("b", "<f4")]))),
        )
    )

    # pickled object arrays (a tripwire that records being unpickled)
    def pickled() -> bytes:
        a = np.empty(shape, dtype=object)
        a.fill(Tripwire())
        return with_member(key, save(a, allow_pickle=True))

    out.append((f"{key}-pickled", pickled))
    # bad unicode (string members)
    if key in ("format", "name", "meta", "tokens"):
        chars = 4
        for cp in (0x110000, 0xD800, 0xFFFFFFFF):
            for order in "<>":
                fmt = order + "I" * (count * chars)
                cps = [ord("a")] * (count * chars)
                cps[-1] = cp
                out.append(
                    (
                        f"{key}-codepoint-{cp:x}-{order}",
                        lambda fmt=fmt, cps=cps, order=order: with_member(
                            key, npy(f"{order}U{chars}", shape, struct.pack(fmt, *cps))
                        ),
                    )
                )
        out.append(
            (
                f"{key}-bytes-not-utf8",
                lambda: with_member(key, npy("|S4", shape, b"ab\xff\xfe" * count)),
            )
        )
    return out


def meta_cases() -> list[Case]:
    def meta(text: str) -> Callable[[], bytes]:
        return lambda: with_member("meta", save(np.array(text)))

    return [
        ("meta-nested-100000", meta("[" * 100_000 + "]" * 100_000)),
        ("meta-nested-30000", meta('{"a":' + "[" * 30_000 + "]" * 30_000 + "}")),
        ("meta-nested-33", meta('{"a":' * 33 + "1" + "}" * 33)),
        ("meta-not-json", meta("{not json")),
        ("meta-not-an-object", meta("[1, 2]")),
        ("meta-long-int", meta('{"a": ' + "9" * 5000 + "}")),
        ("meta-lone-surrogate", meta('{"a": "\\ud800"}')),
        ("meta-surrogate-key", meta('{"\\udfff": 1}')),
        ("meta-too-long", meta(json.dumps({"a": "x" * 70_000}))),
    ]


def archive_cases() -> list[Case]:
    good = archive(base())
    members = base()
    out: list[Case] = [
        (f"archive-truncated-{k}", lambda k=k: good[:k])
        for k in sorted({0, 1, 2, 3, 4, 10, 30, *range(50, len(good), max(1, len(good) // 40))})
    ]
    out += [
        ("archive-empty-zip", lambda: archive({})),
        ("archive-only-other-members", lambda: archive({"other": save(np.ones(3))})),
        (
            "archive-weights-without-npy-suffix",
            lambda: archive({"weights.bin": members["weights"]}),
        ),
        ("archive-both-layouts", lambda: archive({**base(), "attention": save(dense())})),
        (
            "archive-duplicate-member",
            lambda: raw_archive([*entries_of(base()), *entries_of({"weights": save(packed())})]),
        ),
        (
            "archive-encrypted-flag",
            lambda: raw_archive(
                [
                    (n, c, crc, s, m, 0x1 if n == "weights.npy" else 0)
                    for n, c, crc, s, m, _ in entries_of(base())
                ]
            ),
        ),
        ("archive-bzip2", lambda: archive(base(), zipfile.ZIP_BZIP2)),
        ("archive-lzma", lambda: archive(base(), zipfile.ZIP_LZMA)),
        (
            "archive-unknown-method",
            lambda: raw_archive(
                [(n, c, crc, s, 99, f) for n, c, crc, s, m, f in entries_of(base())]
            ),
        ),
        ("archive-65-members", lambda: archive({**base(), **{f"x{i}": b"" for i in range(60)}})),
        (
            "archive-bad-crc",
            lambda: raw_archive(
                [(n, c, crc ^ 1, s, m, f) for n, c, crc, s, m, f in entries_of(base())]
            ),
        ),
        (
            "archive-corrupt-deflate",
            lambda: raw_archive(
                [(n, b"\xff" * len(c), crc, s, m, f) for n, c, crc, s, m, f in entries_of(base())]
            ),
        ),
        ("archive-not-npy-member", lambda: with_member("weights", b"PK\x03\x04 not an array")),
        (
            "npy-version-9",
            lambda: with_member("weights", npy("<f4", (15,), bytes(60), version=(9, 9))),
        ),
        (
            "npy-v2-header-2GB",
            lambda: with_member("weights", b"\x93NUMPY\x02\x00" + (2**31).to_bytes(4, "little")),
        ),
        (
            "npy-v1-header-64KB",
            lambda: with_member("weights", b"\x93NUMPY\x01\x00\xff\xff" + b" " * 65535),
        ),
        ("npy-header-not-dict", lambda: with_member("weights", npy("", (), header="[1, 2, 3]"))),
        (
            "npy-header-missing-keys",
            lambda: with_member("weights", npy("", (), header="{'descr': '<f4'}")),
        ),
        (
            "npy-header-extra-key",
            lambda: with_member(
                "weights",
                npy(
                    "",
                    (),
                    header="{'descr': '<f4', 'fortran_order': False, 'shape': (15,), 'x': 1}",
                ),
            ),
        ),
        (
            "npy-header-fortran-not-bool",
            lambda: with_member(
                "weights",
                npy("", (), header="{'descr': '<f4', 'fortran_order': 1, 'shape': (15,)}"),
            ),
        ),
        (
            "npy-header-unparsable",
            lambda: with_member("weights", npy("", (), header="{'descr': ,,,}")),
        ),
        (
            "npy-header-deep-parens",
            lambda: with_member("weights", npy("", (), header="(" * 4000 + ")" * 4000)),
        ),
        (
            "npy-header-long-int",
            lambda: with_member("weights", npy("", (), header="{'shape': (" + "9" * 5000 + ",)}")),
        ),
        (
            "npy-v3-header-not-utf8",
            lambda: with_member("weights", npy("", (), header="{'descr': '\xff'}", version=(3, 0))),
        ),
        ("npy-bad-magic", lambda: with_member("weights", b"\x93NUMPZ\x01\x00" + bytes(100))),
    ]
    return out


def value_cases() -> list[Case]:
    def weights(a: np.ndarray) -> Callable[[], bytes]:
        return lambda: with_member("weights", save(a))

    def attention(a: np.ndarray, order: str = "C") -> Callable[[], bytes]:
        return lambda: with_member("attention", save(np.asarray(a, order=order)))

    p, d = packed(), dense()
    out: list[Case] = []
    for dt in (np.float16, np.float32, np.float64):
        for bad, v in (("nan", np.nan), ("inf", np.inf), ("negative", -0.5), ("big", 1e4)):
            q = p.astype(dt)
            q[-2] = v
            out.append((f"weights-{np.dtype(dt).name}-{bad}", weights(q)))
    for order in "CF":
        for bad, v in (("nan", np.nan), ("negative", -0.5), ("zero-row", 0.0)):
            e = d.copy()
            e[T - 1, : T - 1] = v
            out.append((f"attention-{order}-{bad}", attention(e, order)))
    out += [
        ("weights-not-triangular", weights(np.ones(4, np.float32))),
        ("weights-one-step", weights(np.zeros(0, np.float32))),
        ("attention-not-square", attention(np.ones((3, 4), np.float32))),
        ("format-other", lambda: with_member("format", save(np.array("other/9")))),
        ("tokens-too-few", lambda: with_member("tokens", save(np.array(["a"] * (T - 1))))),
        ("tokens-2-d", lambda: with_member("tokens", save(np.array([["a"] * T])))),
        ("tokens-too-long", lambda: with_member("tokens", save(np.array(["x" * 300] * T)))),
        ("name-too-long", lambda: with_member("name", save(np.array("x" * 300)))),
        ("name-1-d", lambda: with_member("name", save(np.array(["a", "b"])))),
    ]
    return out


CORPUS: list[Case] = [
    *(c for key in MEMBERS for c in member_cases(key)),
    *meta_cases(),
    *archive_cases(),
    *value_cases(),
]


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
def test_every_hostile_file_is_refused_with_a_value_error(make):
    data = make()
    err, peak = _refusal(data)
    assert type(err) is ValueError  # the library's own, not a subclass such as JSONDecodeError
    msg = str(err)
    assert msg and len(msg) < 400 and "\n" not in msg
    assert peak < PEAK, f"refusing cost {peak / 1e6:.1f} MB"
    assert not TRIPPED


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


# -- the cases, one by one --------------------------------------------------------------
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
