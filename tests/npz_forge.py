"""Trace archives built byte by byte, for the loader's hostile-file tests.

``npy``/``raw_archive`` write any header and any zip sizes, CRCs and flags at all, so a test can
make a file lie in exactly one way; ``base`` is the valid trace every hostile case mutates.
"""

from __future__ import annotations

import functools
import io
import json
import struct
import zipfile
import zlib

import numpy as np

from h2o.trace import FORMAT

T = 6
BOMB = 64 << 20  # bytes of zeros behind a bomb: any case that materialises it breaks the bound


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


def declared(key: str, descr: str, shape: tuple[int, ...], *, compressed: int = 0) -> tuple:
    """A ``raw_archive`` entry whose header and zip sizes agree on ``shape`` of ``descr``, but
    whose stored data is the header alone (padded to ``compressed`` bytes): for the checks that
    refuse a member from its header and its sizes, before any of its data is read."""
    header = npy(descr, shape)
    size = len(header) + int(np.prod(shape)) * np.dtype(descr).itemsize
    comp = deflated(header)
    comp += bytes(max(0, compressed - len(comp)))
    return (f"{key}.npy", comp, zlib.crc32(header), size, zipfile.ZIP_DEFLATED, 0)
