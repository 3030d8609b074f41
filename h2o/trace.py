"""Attention traces: the full-cache attention of every decode step, and their ``.npz`` format.

A trace of ``T`` steps holds, for each step ``t``, the attention of the query at position ``t``
over the positions ``0..t-1`` before it (row 0 is empty). Each row sums to 1. A replay shows a
policy the part of that row its cache still holds.

Rows are stored packed, row after row (the strict lower triangle of a ``T x T`` matrix), in
float32: ``T (T - 1) / 2`` weights, 33.5 MB at ``T = 4096``. The file format is documented in
``traces/README.md``.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

FORMAT = "h2o-trace/1"
#: Largest trace ``load_trace`` accepts (a packed float32 trace of 8192 steps is 134 MB).
MAX_STEPS = 8192
#: How far a stored row may be from summing to 1 (float16 storage rounds to ~1e-3).
ROW_SUM_TOLERANCE = 2e-3


def _offset(t: int) -> int:
    return t * (t - 1) // 2


def _steps_for(length: int) -> int:
    """Invert ``T (T - 1) / 2``; raise if ``length`` is not such a number."""
    t = int((1 + np.sqrt(1 + 8 * length)) / 2)
    for cand in (t - 1, t, t + 1):
        if cand >= 1 and _offset(cand) == length:
            return cand
    raise ValueError(
        f"packed weights have length {length}, which is not T(T-1)/2 for any number of steps T"
    )


@dataclass(frozen=True, eq=False)
class Trace:
    """A sequence of attention rows. Build with :meth:`from_dense` or :meth:`from_rows`."""

    name: str
    weights: np.ndarray  # packed rows, float32, read-only
    meta: dict[str, Any] = field(default_factory=dict)
    tokens: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        w = self.weights
        if not isinstance(w, np.ndarray) or w.ndim != 1:
            raise ValueError("weights must be a 1-D array of packed rows")
        if w.dtype != np.float32:
            raise ValueError(f"weights must be float32, got {w.dtype}")
        steps = _steps_for(w.shape[0])
        if steps < 2:
            raise ValueError(f"a trace needs at least 2 steps (one row of attention), got {steps}")
        if self.tokens is not None and len(self.tokens) != steps:
            raise ValueError(f"{len(self.tokens)} tokens for a trace of {steps} steps")
        _check_weights(w, steps)
        w.flags.writeable = False
        object.__setattr__(self, "_steps", steps)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_dense(
        cls,
        name: str,
        dense: np.ndarray,
        meta: dict[str, Any] | None = None,
        tokens: list[str] | tuple[str, ...] | None = None,
        *,
        normalize: bool = False,
    ) -> Trace:
        """From a ``(T, T)`` matrix whose row ``t`` holds row(t) in columns ``0..t-1``.

        The diagonal and upper triangle are ignored. With ``normalize`` each row is rescaled to
        sum to 1 (rows that sum to 0 are refused either way).
        """
        dense = np.asarray(dense)
        if dense.ndim != 2 or dense.shape[0] != dense.shape[1]:
            raise ValueError(f"attention must be a square (T, T) matrix, got shape {dense.shape}")
        return cls._build(name, _pack_lower(dense), meta, tokens, normalize)

    @classmethod
    def from_rows(
        cls,
        name: str,
        rows: list[np.ndarray],
        meta: dict[str, Any] | None = None,
        tokens: list[str] | tuple[str, ...] | None = None,
        *,
        normalize: bool = False,
    ) -> Trace:
        """From a list of rows, row ``t`` of length ``t`` (row 0 empty)."""
        for t, r in enumerate(rows):
            if np.shape(r) != (t,):
                raise ValueError(f"row {t} must have length {t}, got shape {np.shape(r)}")
        packed = np.concatenate([np.asarray(r, dtype=np.float64) for r in rows]) if rows else []
        return cls._build(name, np.asarray(packed, dtype=np.float64), meta, tokens, normalize)

    @classmethod
    def _build(cls, name, packed: np.ndarray, meta, tokens, normalize: bool) -> Trace:
        """``packed`` (a fresh array the trace may take over) as float32, each row rescaled to
        sum to 1 if ``normalize``."""
        steps = _steps_for(packed.shape[0])
        sums = _row_sums(packed, steps) if normalize else None  # from the given precision
        weights = packed.astype(np.float32, copy=False)
        if sums is not None:
            if steps > 1 and not np.all(sums[1:] > 0):
                bad = int(np.flatnonzero(~(sums[1:] > 0))[0]) + 1
                raise ValueError(f"row {bad} sums to {sums[bad]}, cannot normalise it")
            for t in range(1, steps):  # in place, row by row: no trace-sized temporaries
                o = _offset(t)
                weights[o : o + t] *= np.float32(1.0 / sums[t])
        return cls(
            str(name),
            weights,
            dict(meta or {}),
            tuple(str(s) for s in tokens) if tokens is not None else None,
        )

    # -- access ------------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return self._steps  # type: ignore[attr-defined]

    def row(self, t: int) -> np.ndarray:
        """Attention of the query at step ``t`` over positions ``0..t-1`` (a read-only view)."""
        if not 0 <= t < self.steps:
            raise IndexError(f"step {t} out of range for a trace of {self.steps} steps")
        o = _offset(t)
        return self.weights[o : o + t]

    def dense(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``start..stop-1`` as a float32 matrix ``(stop - start, stop - 1)``, zero-padded."""
        stop = self.steps if stop is None else stop
        out = np.zeros((max(stop - start, 0), max(stop - 1, 0)), dtype=np.float32)
        for i, t in enumerate(range(start, stop)):
            out[i, :t] = self.row(t)
        return out

    def token(self, pos: int) -> str | None:
        return None if self.tokens is None else self.tokens[pos]

    # -- trace-level facts the replay metrics need (computed once per trace) ------------------
    def top_k(self, k: int) -> np.ndarray:
        """``(T, k)`` int32: the ``k`` most-attended positions of each row, -1 padded.

        Equal weights at the cut-off are taken lowest position first, so the set is
        deterministic even for flat rows. No row has more than ``T - 1`` positions, so a larger
        ``k`` gives ``T - 1`` columns.
        """
        k = max(1, min(int(k), self.steps - 1))
        cache = self._cache.setdefault("top_k", {})
        if k not in cache:
            out = np.full((self.steps, k), -1, dtype=np.int32)
            for t in range(1, self.steps):
                r = self.row(t)
                if t <= k:
                    out[t, :t] = np.arange(t)
                    continue
                thr = np.partition(r, t - k)[t - k]
                above = np.flatnonzero(r > thr)
                ties = np.flatnonzero(r == thr)[: k - above.shape[0]]
                out[t] = np.sort(np.concatenate([above, ties]))
            out.flags.writeable = False
            cache[k] = out
        return cache[k]

    def oracle_mass(self, budget: int) -> np.ndarray:
        """``(T,)``: per step, the largest mass any ``budget`` positions could hold.

        Step 0 has nothing to hold and counts as 1, like the replay's own metrics.
        """
        cache = self._cache.setdefault("oracle", {})
        if budget not in cache:
            out = np.ones(self.steps)
            for t in range(1, self.steps):
                r = self.row(t)
                if t > budget:
                    out[t] = float(np.partition(r, t - budget)[t - budget :].sum(dtype=np.float64))
                else:
                    out[t] = float(r.sum(dtype=np.float64))
            out.flags.writeable = False
            cache[budget] = out
        return cache[budget]

    def recent_mass(self, width: int) -> np.ndarray:
        """``(T,)``: per step, the mass on the most recent ``width`` positions."""
        return np.array(
            [self.row(t)[max(0, t - width) :].sum(dtype=np.float64) for t in range(self.steps)]
        )

    @cached_property
    def _cache(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        return f"Trace({self.name!r}, steps={self.steps})"


def _row_sums(packed: np.ndarray, steps: int) -> np.ndarray:
    """float64 sum of each row (row 0: 0), without a float64 copy of the weights."""
    sums = np.zeros(steps)
    if steps > 1:
        starts = np.array([_offset(t) for t in range(1, steps)])
        sums[1:] = np.add.reduceat(packed, starts, dtype=np.float64)
    return sums


def _pack_lower(dense: np.ndarray) -> np.ndarray:
    """The strict lower triangle of a square matrix, row after row (no index arrays)."""
    T = dense.shape[0]
    packed = np.empty(T * (T - 1) // 2, dtype=np.result_type(dense.dtype, np.float32))
    for t in range(1, T):
        o = _offset(t)
        packed[o : o + t] = dense[t, :t]
    return packed


def _check_weights(w: np.ndarray, steps: int) -> None:
    if w.shape[0] == 0:
        return
    if not np.isfinite(w).all():
        bad = int(np.flatnonzero(~np.isfinite(w))[0])
        raise ValueError(f"trace has a non-finite weight (NaN or inf) in row {_row_of(bad)}")
    if (w < 0).any():
        bad = int(np.flatnonzero(w < 0)[0])
        raise ValueError(f"trace has a negative weight in row {_row_of(bad)}")
    sums = _row_sums(w, steps)
    off = np.abs(sums[1:] - 1.0) > ROW_SUM_TOLERANCE
    if off.any():
        t = int(np.flatnonzero(off)[0]) + 1
        raise ValueError(f"row {t} of the trace sums to {sums[t]:.6f}, not 1")


def _row_of(index: int) -> int:
    # The row t holding packed index i satisfies offset(t) <= i < offset(t + 1).
    t = int((1 + np.sqrt(1 + 8 * index)) / 2)
    while _offset(t) > index:
        t -= 1
    while _offset(t + 1) <= index:
        t += 1
    return t


# -- files -------------------------------------------------------------------------------------
def save_trace(trace: Trace, path: str | os.PathLike[str], *, float16: bool = False) -> None:
    """Write ``trace`` as a compressed ``.npz`` (see ``traces/README.md``).

    ``float16`` halves the file; rows are renormalised to sum to 1 when loaded back.
    """
    arrays: dict[str, np.ndarray] = {
        "format": np.array(FORMAT),
        "name": np.array(trace.name),
        "meta": np.array(json.dumps(trace.meta, sort_keys=True)),
        "weights": trace.weights.astype(np.float16 if float16 else np.float32),
    }
    if trace.tokens is not None:
        arrays["tokens"] = np.array(trace.tokens, dtype=np.str_)
    np.savez_compressed(path, **arrays)


def load_trace(
    source: str | os.PathLike[str] | Any, *, name: str | None = None, max_steps: int = MAX_STEPS
) -> Trace:
    """Read a trace from a path or a binary file object; ``ValueError`` names what is wrong.

    Accepts the packed ``weights`` layout written by :func:`save_trace`, or a square
    ``attention`` matrix (row ``t`` in columns ``0..t-1``) as other tools may write it.
    """
    magic = _magic(source)
    if magic.startswith(b"\x93NUMPY"):
        raise ValueError("not a trace file: expected an .npz archive, got a single .npy array")
    if not magic.startswith(b"PK"):
        # Checked before numpy sees it: numpy would call unknown bytes "pickled data" and
        # suggest allow_pickle=True, which is the one thing not to do with an untrusted file.
        raise ValueError("not an .npz file (a trace is a NumPy .npz archive: traces/README.md)")
    try:
        npz = np.load(source, allow_pickle=False)
    except _DAMAGED as e:
        raise ValueError(f"not a readable .npz file: {e}") from None
    with npz:
        keys = set(npz.files)
        try:
            fmt = str(npz["format"]) if "format" in keys else FORMAT
            if fmt != FORMAT:
                raise ValueError(f"unsupported trace format {fmt!r} (this version reads {FORMAT})")
            meta = json.loads(str(npz["meta"])) if "meta" in keys else {}
            if not isinstance(meta, dict):
                raise ValueError("meta must be a JSON object")
            tname = name or (str(npz["name"]) if "name" in keys else "uploaded")
            tokens = None
            if "tokens" in keys:
                tok = npz["tokens"]
                if tok.ndim != 1:
                    raise ValueError(
                        f"'tokens' must be a 1-D array of strings, got shape {tok.shape}"
                    )
                tokens = [str(x) for x in tok]
            if "weights" in keys:
                shape, dtype = _header(npz, "weights")
                if len(shape) != 1 or dtype.kind != "f":
                    raise ValueError(f"'weights' must be a 1-D float array, got {shape} {dtype}")
                _check_size(_steps_for(shape[0]), max_steps)
                packed = npz["weights"]
            elif "attention" in keys:
                shape, dtype = _header(npz, "attention")
                if len(shape) != 2 or shape[0] != shape[1] or dtype.kind != "f":
                    raise ValueError(
                        f"'attention' must be a square float matrix, got {shape} {dtype}"
                    )
                _check_size(shape[0], max_steps)
                packed = _pack_lower(npz["attention"])
            else:
                raise ValueError(
                    f"not a trace file: found arrays {sorted(keys)}, expected 'weights' or "
                    "'attention'"
                )
        except (KeyError, json.JSONDecodeError) as e:
            raise ValueError(f"malformed trace file: {e}") from None
        except ValueError as e:
            if "allow_pickle" in str(e):  # an object array: loading it would unpickle
                raise ValueError(
                    "trace file holds pickled (object) arrays; they are refused"
                ) from None
            raise
        except _DAMAGED as e:  # a truncated or corrupted archive member
            raise ValueError(f"damaged .npz file: {type(e).__name__}: {e}") from None
    _check_weights(packed, _steps_for(packed.shape[0]))  # as stored, before renormalising
    return Trace._build(tname, packed, meta, tokens, normalize=True)


#: What numpy and zipfile raise on a damaged archive (fuzzed: truncated and corrupted copies).
_DAMAGED = (
    ValueError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
    NotImplementedError,  # an unsupported compression method
    RuntimeError,  # an encrypted member
)


def _header(npz: Any, key: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of an array in an .npz, read from its header without decompressing it."""
    try:
        with npz.zip.open(f"{key}.npy") as f:
            fmt = np.lib.format
            read = fmt.read_array_header_1_0 if fmt.read_magic(f) == (1, 0) else None
            shape, _, dtype = (read or fmt.read_array_header_2_0)(f)
    except (KeyError, *_DAMAGED) as e:
        raise ValueError(f"malformed array {key!r} in the trace file: {e}") from None
    if dtype.hasobject:
        raise ValueError(f"{key!r} holds pickled (object) data; it is refused, never unpickled")
    return shape, dtype


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
