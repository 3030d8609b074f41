"""Reading a trace's ``.npz`` file, hardened: every file is hostile until it has passed.

:func:`load_trace` bounds memory before it reads anything — members, their headers and sizes,
compression ratios, string lengths, nesting depth, the number of steps — then checks the
weights a chunk at a time (:func:`h2o.trace.check_values`, :func:`h2o.trace.check_sums`), so a
refused file costs at most a chunk of work, and names what is wrong in a ``ValueError``. The
file format is documented in ``traces/README.md``; :func:`h2o.trace.save_trace` writes it.
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from .trace import (
    CHUNK,
    FORMAT,
    MAX_STEPS,
    Trace,
    block_end,
    check_sums,
    check_values,
    offset,
    row_of,
    steps_for,
)
from .trace_vectors import MAX_WIDTH, MEMBERS, HeadVectors

MAX_NAME_CHARS = 256
MAX_META_CHARS = 65536
MAX_TOKEN_CHARS = 256
#: Deepest nesting of lists and objects accepted in ``meta`` (the format's meta is flat).
MAX_META_DEPTH = 32
#: The archive members a trace may have (``<key>.npy``); any other member is never read.
_KEYS = (
    "format",
    "name",
    "meta",
    "tokens",
    "weights",
    "attention",
    "key_norms",
    "kvzip_scores",
    *MEMBERS,
)
_MAX_MEMBERS = 64
_MAX_FORMAT_CHARS = 64
_MAX_HEADER = 10_000  # bytes of .npy header dictionary (numpy's own limit)
# Deflate reaches ~1000:1 only on degenerate data; attention rows hold noise and compress a few
# fold. Past 64 MiB a member may not claim more than 100 times its compressed size, so a small
# file never costs more than ~100 MB of decompression (a second or so) before it is refused.
_RATIO_FREE = 64 << 20
_MAX_RATIO = 100
# The dtypes np.save writes for the arrays a trace holds: floats for weights, strings otherwise.
_DESCR = re.compile(r"[<>|=]?(?:f[248]|U[1-9][0-9]{0,8}|S[1-9][0-9]{0,8})")


def load_trace(
    source: str | os.PathLike[str] | Any, *, name: str | None = None, max_steps: int = MAX_STEPS
) -> Trace:
    """Read a trace from a path or a binary file object; ``ValueError`` names what is wrong.

    Accepts the packed ``weights`` layout written by :func:`save_trace`, or a square
    ``attention`` matrix (row ``t`` in columns ``0..t-1``) as other tools may write it. Any
    malformed file is refused with a ``ValueError``, at a cost bounded by the trace it claims
    to be (see ``traces/README.md`` for the rules).
    """
    magic = _magic(source)
    if magic.startswith(b"\x93NUMPY"):
        raise ValueError("not a trace file: expected an .npz archive, got a single .npy array")
    if not magic.startswith(b"PK"):
        # Checked before any parser sees it: numpy would call unknown bytes "pickled data" and
        # suggest allow_pickle=True, which is the one thing not to do with an untrusted file.
        raise ValueError("not an .npz file (a trace is a NumPy .npz archive: traces/README.md)")
    with _reading("the archive", "not a readable .npz file"):
        zf = zipfile.ZipFile(source)
    with zf:
        arrays = {key: _header(zf, info, key) for key, info in _members(zf).items()}
        w, steps = _weights_header(arrays, max_steps)
        _check_string_header(arrays.get("format"), (), _MAX_FORMAT_CHARS)
        _check_string_header(arrays.get("name"), (), MAX_NAME_CHARS)
        _check_string_header(arrays.get("meta"), (), MAX_META_CHARS)
        if "tokens" in arrays:
            tok = arrays["tokens"]
            if len(tok.shape) != 1:
                raise ValueError(f"'tokens' must be a 1-D array of strings, got shape {tok.shape}")
            if tok.shape[0] != steps:
                raise ValueError(f"{tok.shape[0]} tokens for a trace of {steps} steps")
            _check_string_header(tok, (steps,), MAX_TOKEN_CHARS)
        norms, kvzip = arrays.get("key_norms"), arrays.get("kvzip_scores")
        for m, what in ((norms, "norms"), (kvzip, "scores")):
            if m is not None and (m.shape != (steps,) or m.dtype.kind != "f"):
                raise ValueError(
                    f"{m.key!r} must be a 1-D float array of {steps} {what} (one a step), "
                    f"got {m.shape} {m.dtype}"
                )
        vec = _vectors_header(arrays, steps)
        # Every header fits: now the data, smallest first.
        fmt = _read_strings(zf, arrays["format"]) if "format" in arrays else FORMAT
        if fmt != FORMAT:
            raise ValueError(f"unsupported trace format {fmt!r} (this version reads {FORMAT})")
        stored_name = _read_strings(zf, arrays["name"]) if "name" in arrays else "uploaded"
        meta = _parse_meta(_read_strings(zf, arrays["meta"])) if "meta" in arrays else {}
        tokens = _read_strings(zf, arrays["tokens"]) if "tokens" in arrays else None
        key_norms = _read_floats(zf, norms) if norms is not None else None
        kvzip_scores = _read_floats(zf, kvzip) if kvzip is not None else None
        vectors = _read_vectors(zf, vec) if vec is not None else None
        packed_bytes = offset(steps) * 4
        if packed_bytes > 8 * w.info.compress_size:
            # Far more compressible than attention rows are: validate every row in a first pass
            # that keeps nothing, so that a small file that is bad only near its end never gets
            # the trace-sized buffer. Real traces (a few fold) are read in one pass.
            _scan_weights(zf, w, steps)
        packed = np.empty(offset(steps), dtype=np.float32)
        sums = _scan_weights(zf, w, steps, out=packed)
    name = name or stored_name or "uploaded"
    return Trace.from_packed(
        name,
        packed,
        meta,
        tokens,
        normalize=True,
        sums=sums,
        take=True,
        key_norms=key_norms,
        vectors=vectors,
        kvzip_scores=kvzip_scores,
    )


@dataclass(frozen=True)
class _Member:
    """One ``.npy`` member of the archive, as its header describes it."""

    key: str
    info: zipfile.ZipInfo
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int  # bytes of magic and header before the data

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize  # Python ints: no overflow


#: What zipfile, zlib and the file object raise on a damaged archive.
_DAMAGED = (
    ValueError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
    struct.error,
    OverflowError,
    NotImplementedError,  # an unsupported compression method
    RuntimeError,  # an encrypted member
)


@contextlib.contextmanager
def _reading(what: str, problem: str = "damaged .npz file") -> Iterator[None]:
    """Turn what the archive machinery raises into one ``ValueError``. Only library calls run
    inside, so the loader's own messages are never rewrapped."""
    try:
        yield
    except _DAMAGED as e:
        raise ValueError(f"{problem} ({what}): {type(e).__name__}: {e}") from None


def _members(zf: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    infos = zf.infolist()
    if len(infos) > _MAX_MEMBERS:
        raise ValueError(f"the archive has {len(infos)} members; at most {_MAX_MEMBERS}")
    found: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        key = info.filename.removesuffix(".npy")
        if key not in _KEYS or not info.filename.endswith(".npy"):
            continue  # not part of the format: never read
        if key in found:
            raise ValueError(f"the archive has two {info.filename!r} members")
        if info.flag_bits & 0x1:
            raise ValueError(f"{info.filename!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ValueError(
                f"{info.filename!r} uses compression method {info.compress_type}; a trace's "
                "members are stored or deflated (as numpy writes them)"
            )
        found[key] = info
    if "weights" not in found and "attention" not in found:
        names = sorted(i.filename.removesuffix(".npy")[:40] for i in infos)
        shown = ", ".join(repr(n) for n in names[:10]) + (", ..." if len(names) > 10 else "")
        raise ValueError(
            f"not a trace file: found arrays [{shown}], expected 'weights' or 'attention'"
        )
    if "weights" in found and "attention" in found:
        raise ValueError("the archive has both 'weights' and 'attention'; a trace has one")
    return found


@contextlib.contextmanager
def _open(zf: zipfile.ZipFile, info: zipfile.ZipInfo, key: str) -> Iterator[IO[bytes]]:
    with _reading(f"{key!r}"):
        f = zf.open(info)
    with f:
        yield f


def _read_exact(f: IO[bytes], n: int, key: str) -> bytes:
    """``n`` bytes (a bounded read: decompression stops there), or refuse a short member."""
    with _reading(f"{key!r}"):
        data = f.read(n)
    if len(data) != n:
        raise ValueError(f"{key!r} is truncated: the archive member ends early")
    return data


def _header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, key: str) -> _Member:
    """Shape and dtype of a member, from its header alone; checked against the member's size."""
    with _open(zf, info, key) as f:
        magic = _read_exact(f, 8, key)
        if magic[:6] != b"\x93NUMPY":
            raise ValueError(f"{key!r} is not a .npy array")
        version = (magic[6], magic[7])
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"{key!r} has .npy format version {version[0]}.{version[1]}")
        size = 2 if version == (1, 0) else 4
        length = int.from_bytes(_read_exact(f, size, key), "little")
        if length > _MAX_HEADER:
            # numpy itself reads a version 2 header of any declared length before checking it
            raise ValueError(f"{key!r} has a {length}-byte header; at most {_MAX_HEADER}")
        raw = _read_exact(f, length, key)
    shape, dtype, fortran_order = _parse_header(raw, version, key)
    m = _Member(key, info, shape, dtype, fortran_order, 8 + size + length)
    if info.file_size != m.data_offset + m.nbytes:
        raise ValueError(
            f"{key!r} declares shape {_short(shape)} of {dtype} ({_short(m.nbytes, 20)} bytes), "
            f"but the archive member holds {info.file_size - m.data_offset} bytes of data"
        )
    if info.file_size > max(_RATIO_FREE, _MAX_RATIO * info.compress_size):
        raise ValueError(
            f"{key!r} would inflate {info.file_size // max(info.compress_size, 1)}-fold, from "
            f"{info.compress_size} to {info.file_size} bytes: refused as a likely decompression "
            "bomb. If the trace is genuine, save it uncompressed (np.savez, not savez_compressed)"
        )
    return m


def _parse_header(
    raw: bytes, version: tuple[int, int], key: str
) -> tuple[tuple[int, ...], np.dtype, bool]:
    try:
        d = ast.literal_eval(raw.decode("utf-8" if version == (3, 0) else "latin-1"))
    except (UnicodeDecodeError, SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        raise ValueError(f"{key!r} has an unreadable .npy header") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"{key!r} has a malformed .npy header")
    shape, descr, fortran_order = d["shape"], d["descr"], d["fortran_order"]
    if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)):
        raise ValueError(f"{key!r} has an invalid shape {_short(shape)} in its header")
    if not isinstance(fortran_order, bool):
        raise ValueError(f"{key!r} has a malformed .npy header (fortran_order)")
    if not isinstance(descr, str):  # a list of fields
        raise ValueError(f"{key!r} is a structured array; a trace holds plain arrays")
    if descr.lstrip("<>|=").startswith("O"):
        raise ValueError(f"{key!r} holds pickled (object) data; it is refused, never unpickled")
    if not _DESCR.fullmatch(descr):
        raise ValueError(
            f"{key!r} has dtype {_short(descr)}; a trace holds float16/32/64 weights and strings"
        )
    return shape, np.dtype(descr), fortran_order


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _weights_header(arrays: dict[str, _Member], max_steps: int) -> tuple[_Member, int]:
    """The member holding the attention, and the number of steps it implies."""
    if "weights" in arrays:
        w = arrays["weights"]
        if len(w.shape) != 1 or w.dtype.kind != "f":
            raise ValueError(f"'weights' must be a 1-D float array, got {w.shape} {w.dtype}")
        steps = steps_for(w.shape[0])
    else:
        w = arrays["attention"]
        if len(w.shape) != 2 or w.shape[0] != w.shape[1] or w.dtype.kind != "f":
            raise ValueError(f"'attention' must be a square float matrix, got {w.shape} {w.dtype}")
        steps = w.shape[0]
    _check_size(steps, max_steps)
    if steps < 2:
        raise ValueError(f"a trace needs at least 2 steps (one row of attention), got {steps}")
    return w, steps


def _check_string_header(m: _Member | None, shape: tuple[int, ...], max_chars: int) -> None:
    if m is None:
        return
    if m.shape != shape or m.dtype.kind not in "US":
        what = "a string" if shape == () else "an array of strings"
        raise ValueError(f"{m.key!r} must be {what}, got shape {m.shape} {m.dtype}")
    chars = m.dtype.itemsize // 4 if m.dtype.kind == "U" else m.dtype.itemsize
    if chars > max_chars:
        raise ValueError(
            f"{m.key!r} holds strings of up to {chars} characters; at most {max_chars}"
        )


def _read_strings(zf: zipfile.ZipFile, m: _Member) -> Any:
    """A string member's value (a str, or a list for 1-D), every code point checked."""
    with _open(zf, m.info, m.key) as f:
        _read_exact(f, m.data_offset, m.key)  # the header, parsed already
        raw = _read_exact(f, m.nbytes, m.key)
    if m.dtype.kind == "U":
        # numpy turns a code point above U+10FFFF into a SystemError; surrogates would fail
        # later, when the string is encoded for a page or a JSON file.
        cps = np.frombuffer(raw, dtype=np.dtype(np.uint32).newbyteorder(m.dtype.byteorder))
        bad = np.flatnonzero((cps > 0x10FFFF) | ((cps >= 0xD800) & (cps <= 0xDFFF)))
        if bad.size:
            i, cp = int(bad[0]) // (m.dtype.itemsize // 4), int(cps[bad[0]])
            where = f" (entry {i})" if m.shape else ""
            raise ValueError(f"{m.key!r} holds an invalid character U+{cp:X}{where}")
        return np.frombuffer(raw, dtype=m.dtype).reshape(m.shape).tolist()
    values = np.frombuffer(raw, dtype=m.dtype).reshape(m.shape).tolist()
    try:
        if isinstance(values, bytes):
            return values.decode("utf-8")
        return [v.decode("utf-8") for v in values]
    except UnicodeDecodeError as e:
        raise ValueError(f"{m.key!r} is not valid UTF-8 ({e.reason})") from None


def _vectors_header(arrays: dict[str, _Member], steps: int) -> dict[str, _Member] | None:
    """The head vectors' members (all or none), their shapes checked against the trace's steps
    and :data:`~h2o.trace_vectors.MAX_WIDTH` before any is read; :class:`HeadVectors` checks
    how they fit together and every value."""
    found = {k: arrays[k] for k in MEMBERS if k in arrays}
    if not found:
        return None
    if len(found) != len(MEMBERS):
        missing = ", ".join(repr(k) for k in MEMBERS if k not in found)
        raise ValueError(f"a trace's head vectors come together: {missing} missing")
    want = {"queries": 3, "keys": 3, "value_norms": 2, "rope_base": 0}
    for key, m in found.items():
        if len(m.shape) != want[key] or m.dtype.kind != "f":
            raise ValueError(
                f"{key!r} must be a {want[key]}-D float array, got {m.shape} {m.dtype}"
            )
        if want[key] and m.shape[0] != steps:
            raise ValueError(f"{key!r} has {m.shape[0]} positions for a trace of {steps} steps")
        width = math.prod(m.shape[1:])
        if width > MAX_WIDTH:
            raise ValueError(f"{key!r} holds {width} numbers a position; at most {MAX_WIDTH}")
    return found


def _read_vectors(zf: zipfile.ZipFile, found: dict[str, _Member]) -> HeadVectors:
    q, k, v = (_read_floats(zf, found[key]) for key in MEMBERS[:3])
    return HeadVectors(q, k, v, float(_read_floats(zf, found["rope_base"], np.float64)))


def _read_floats(zf: zipfile.ZipFile, m: _Member, dtype: type = np.float32) -> np.ndarray:
    """A float member's values as float32 (its size bounded by the trace's steps and
    :data:`~h2o.trace_vectors.MAX_WIDTH`, checked already); :class:`h2o.trace.Trace` checks
    each value."""
    with _open(zf, m.info, m.key) as f:
        _read_exact(f, m.data_offset, m.key)
        raw = _read_exact(f, m.nbytes, m.key)
    order = "F" if m.fortran_order else "C"
    a = np.frombuffer(raw, dtype=m.dtype).reshape(m.shape, order=order)
    return a.astype(dtype)  # a new array: the bytes read are released


def _parse_meta(text: str) -> dict[str, Any]:
    def bounded_int(digits: str) -> int:  # before Python's own, less helpful, limit
        if len(digits) > 100:
            raise ValueError(f"an integer of {len(digits)} digits")
        return int(digits)

    try:
        # NaN and Infinity are accepted, as Python's json (and so save_trace) writes them.
        meta = json.loads(text, parse_int=bounded_int)
    except RecursionError:
        raise ValueError(f"meta nests deeper than {MAX_META_DEPTH} levels") from None
    except ValueError as e:  # json.JSONDecodeError, or one of the hooks above
        raise ValueError(f"malformed trace file: meta is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise ValueError("meta must be a JSON object")
    stack: list[tuple[object, int]] = [(meta, 1)]
    while stack:  # iterative: nesting the parser accepted must not recurse elsewhere
        value, depth = stack.pop()
        if depth > MAX_META_DEPTH:
            raise ValueError(f"meta nests deeper than {MAX_META_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in (*value.keys(), *value.values()))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("meta holds an invalid character (a lone surrogate)") from None
    return meta


def _scan_weights(
    zf: zipfile.ZipFile, m: _Member, steps: int, out: np.ndarray | None = None
) -> np.ndarray:
    """Check every row of the attention member (finite, non-negative, summing to 1), reading
    ``CHUNK`` bytes at a time; with ``out``, also write the rows packed as float32.

    Returns the float64 sum of each row as stored (row 0: 0), for renormalising.
    """
    sums = np.zeros(steps)
    item = m.dtype.itemsize
    with _open(zf, m.info, m.key) as f:
        _read_exact(f, m.data_offset, m.key)  # the header, parsed already
        if m.key == "weights":  # packed rows, back to back
            t = 1
            while t < steps:
                u = block_end(t, steps, item)
                base = offset(t)
                a = np.frombuffer(_read_exact(f, (offset(u) - base) * item, m.key), m.dtype)
                check_values(a, lambda i, base=base: row_of(base + i))
                starts = np.array([offset(r) - base for r in range(t, u)])
                sums[t:u] = np.add.reduceat(a.astype(np.float64), starts)
                check_sums(sums, t, u)
                if out is not None:
                    out[base : offset(u)] = a
                t = u
        elif not m.fortran_order:  # a dense matrix, row after row
            per = max(1, CHUNK // (steps * item))
            for r0 in range(0, steps, per):
                r1 = min(steps, r0 + per)
                a = np.frombuffer(_read_exact(f, (r1 - r0) * steps * item, m.key), m.dtype)
                a = a.reshape(r1 - r0, steps)
                for r in range(max(r0, 1), r1):
                    row = a[r - r0, :r]
                    check_values(row, lambda _, r=r: r)
                    sums[r] = row.sum(dtype=np.float64)
                    if out is not None:
                        out[offset(r) : offset(r) + r] = row
                check_sums(sums, max(r0, 1), r1)
        else:  # a dense matrix, column after column: rows are complete only at the end
            offsets = np.array([offset(r) for r in range(steps)])
            per = max(1, CHUNK // (steps * item))
            for c0 in range(0, steps, per):
                c1 = min(steps, c0 + per)
                a = np.frombuffer(_read_exact(f, (c1 - c0) * steps * item, m.key), m.dtype)
                a = a.reshape(c1 - c0, steps)
                for c in range(c0, c1):
                    col = a[c - c0, c + 1 :]  # rows c+1 .. steps-1
                    check_values(col, lambda i, c=c: c + 1 + i)
                    sums[c + 1 :] += col
                    if out is not None:
                        out[offsets[c + 1 :] + c] = col
            check_sums(sums, 1, steps)
    return sums


def _magic(source: str | os.PathLike[str] | Any) -> bytes:
    """The first bytes of a path or a seekable binary file (its position is left unchanged)."""
    if isinstance(source, str | os.PathLike):
        try:
            with open(source, "rb") as f:
                return f.read(8)
        except OSError as e:
            raise ValueError(f"cannot read {os.fspath(source)!r}: {e.strerror}") from None
    try:
        start = source.tell()
        head = source.read(8)
        source.seek(start)
    except (AttributeError, OSError) as e:
        raise ValueError(f"cannot read the trace: {e}") from None
    return head if isinstance(head, bytes) else b""


def _check_size(steps: int, max_steps: int) -> None:
    if steps > max_steps:
        raise ValueError(f"trace has {steps} steps; at most {max_steps} are accepted")
