"""Attention traces: the full-cache attention of every decode step (reading their ``.npz``
files, hardened against hostile ones: :mod:`h2o.trace_npz`).

A trace of ``T`` steps holds, for each step ``t``, the attention of the query at position ``t``
over the positions ``0..t-1`` before it (row 0 is empty). Each row sums to 1. A replay shows a
policy the part of that row its cache still holds.

Rows are stored packed, row after row (the strict lower triangle of a ``T x T`` matrix), in
float32: ``T (T - 1) / 2`` weights, 33.5 MB at ``T = 4096``. The file format is documented in
``traces/README.md``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .trace_vectors import HeadVectors, check_vectors

FORMAT = "h2o-trace/1"
#: Largest trace ``load_trace`` accepts (a packed float32 trace of 8192 steps is 134 MB).
MAX_STEPS = 8192
#: How far a stored row may be from summing to 1 (float16 storage rounds to ~1e-3).
ROW_SUM_TOLERANCE = 2e-3


_minimum = np.minimum.reduce
_maximum = np.maximum.reduce


def offset(t: int) -> int:
    return t * (t - 1) // 2


def steps_for(length: int) -> int:
    """Invert ``T (T - 1) / 2``; raise if ``length`` is not such a number (exact for any int)."""
    t = (1 + math.isqrt(1 + 8 * length)) // 2
    if t >= 1 and offset(t) == length:
        return t
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
    #: Optional: the L2 norm of the key at each position (float32, ``(T,)``), for policies that
    #: score keys without attention (K-norm); captured traces of the real model carry it.
    key_norms: np.ndarray | None = None
    #: Optional: each position's queries, keys and value norms in the trace's heads
    #: (:class:`~h2o.trace_vectors.HeadVectors`), for methods that score keys by their vectors
    #: (Expected Attention); captured traces of the real model carry them.
    vectors: HeadVectors | None = None
    #: Optional: each position's KVzip score — the most attention it receives while the model
    #: repeats the whole text (float32, ``(T,)``); captured traces of the real model carry it.
    kvzip_scores: np.ndarray | None = None

    def __post_init__(self) -> None:
        w = self.weights
        if not isinstance(w, np.ndarray) or w.ndim != 1:
            raise ValueError("weights must be a 1-D array of packed rows")
        if w.dtype != np.float32:
            raise ValueError(f"weights must be float32, got {w.dtype}")
        steps = steps_for(w.shape[0])
        if steps < 2:
            raise ValueError(f"a trace needs at least 2 steps (one row of attention), got {steps}")
        if self.tokens is not None and len(self.tokens) != steps:
            raise ValueError(f"{len(self.tokens)} tokens for a trace of {steps} steps")
        _check_weights(w, steps)
        w.flags.writeable = False
        if self.key_norms is not None:
            object.__setattr__(self, "key_norms", check_key_norms(self.key_norms, steps))
        if self.vectors is not None:
            check_vectors(self.vectors, steps)
        if self.kvzip_scores is not None:
            object.__setattr__(self, "kvzip_scores", check_kvzip_scores(self.kvzip_scores, steps))
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
        key_norms: np.ndarray | None = None,
        vectors: HeadVectors | None = None,
        kvzip_scores: np.ndarray | None = None,
    ) -> Trace:
        """From a ``(T, T)`` matrix whose row ``t`` holds row(t) in columns ``0..t-1``.

        The diagonal and upper triangle are ignored. With ``normalize`` each row is rescaled to
        sum to 1 (rows that sum to 0 are refused either way).
        """
        dense = np.asarray(dense)
        if dense.ndim != 2 or dense.shape[0] != dense.shape[1]:
            raise ValueError(f"attention must be a square (T, T) matrix, got shape {dense.shape}")
        return cls.from_packed(
            name,
            _pack_lower(dense),
            meta,
            tokens,
            normalize=normalize,
            take=True,
            key_norms=key_norms,
            vectors=vectors,
            kvzip_scores=kvzip_scores,
        )

    @classmethod
    def from_rows(
        cls,
        name: str,
        rows: list[np.ndarray],
        meta: dict[str, Any] | None = None,
        tokens: list[str] | tuple[str, ...] | None = None,
        *,
        normalize: bool = False,
        key_norms: np.ndarray | None = None,
        vectors: HeadVectors | None = None,
        kvzip_scores: np.ndarray | None = None,
    ) -> Trace:
        """From a list of rows, row ``t`` of length ``t`` (row 0 empty)."""
        for t, r in enumerate(rows):
            if np.shape(r) != (t,):
                raise ValueError(f"row {t} must have length {t}, got shape {np.shape(r)}")
        packed = np.concatenate([np.asarray(r, dtype=np.float64) for r in rows]) if rows else []
        return cls.from_packed(
            name,
            np.asarray(packed, dtype=np.float64),
            meta,
            tokens,
            normalize=normalize,
            take=True,
            key_norms=key_norms,
            vectors=vectors,
            kvzip_scores=kvzip_scores,
        )

    @classmethod
    def from_packed(
        cls,
        name: str,
        packed: np.ndarray,
        meta: dict[str, Any] | None = None,
        tokens: list[str] | tuple[str, ...] | None = None,
        *,
        normalize: bool = False,
        sums: np.ndarray | None = None,
        take: bool = False,
        key_norms: np.ndarray | None = None,
        vectors: HeadVectors | None = None,
        kvzip_scores: np.ndarray | None = None,
    ) -> Trace:
        """From rows packed back to back, as float32, each row rescaled to sum to 1 if
        ``normalize`` — by ``sums`` if given (row sums at the precision the weights had before
        they became float32), else by the sums of ``packed``. ``packed`` is copied unless
        ``take`` (a fresh array the trace may take over and make read-only)."""
        packed = np.asarray(packed) if take else np.array(packed, copy=True)
        steps = steps_for(packed.shape[0])
        if normalize and sums is None:
            sums = _row_sums(packed, steps)  # from the given precision
        weights = packed.astype(np.float32, copy=False)
        if normalize:
            if steps > 1 and not np.all(sums[1:] > 0):
                bad = int(np.flatnonzero(~(sums[1:] > 0))[0]) + 1
                raise ValueError(f"row {bad} sums to {sums[bad]}, cannot normalise it")
            for t in range(1, steps):  # in place, row by row: no trace-sized temporaries
                o = offset(t)
                weights[o : o + t] *= np.float32(1.0 / sums[t])
        return cls(
            str(name),
            weights,
            dict(meta or {}),
            tuple(str(s) for s in tokens) if tokens is not None else None,
            key_norms,
            vectors,
            kvzip_scores,
        )

    # -- access ------------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return self._steps  # type: ignore[attr-defined]

    def row(self, t: int) -> np.ndarray:
        """Attention of the query at step ``t`` over positions ``0..t-1`` (a read-only view)."""
        if not 0 <= t < self.steps:
            raise IndexError(f"step {t} out of range for a trace of {self.steps} steps")
        o = offset(t)
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

    def top_k_rows(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The inverse of :meth:`top_k`: ``(indptr, rows)`` with ``rows[indptr[p]:indptr[p + 1]]``
        the rows (ascending) whose top ``k`` hold position ``p`` — so the recall of a run is
        read off its victims alone (:func:`h2o.replay._recall`)."""
        topk = self.top_k(k)
        cache = self._cache.setdefault("top_k_rows", {})
        if topk.shape[1] not in cache:
            rows = np.broadcast_to(np.arange(self.steps, dtype=np.int32)[:, None], topk.shape)
            valid = topk >= 0
            pos, row = topk[valid], rows[valid]
            order = np.argsort(pos, kind="stable")  # rows stay ascending within a position
            indptr = np.zeros(self.steps + 1, dtype=np.int64)
            np.cumsum(np.bincount(pos, minlength=self.steps), out=indptr[1:])
            out = (indptr, row[order])
            for a in out:
                a.flags.writeable = False
            cache[topk.shape[1]] = out
        return cache[topk.shape[1]]

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
    """float64 sum of each row (row 0: 0), a block of rows at a time: temporaries stay small."""
    sums = np.zeros(steps)
    t = 1
    while t < steps:
        u = block_end(t, steps, packed.dtype.itemsize)
        base = offset(t)
        starts = np.array([offset(r) - base for r in range(t, u)])
        sums[t:u] = np.add.reduceat(packed[base : offset(u)].astype(np.float64), starts)
        t = u
    return sums


def block_end(t: int, steps: int, itemsize: int) -> int:
    """End (exclusive) of the block of whole rows from ``t`` that fits in ``CHUNK`` bytes (at
    least one row)."""
    u, n = t + 1, t
    while u < steps and (n + u) * itemsize <= CHUNK:
        n, u = n + u, u + 1
    return u


def _pack_lower(dense: np.ndarray) -> np.ndarray:
    """The strict lower triangle of a square matrix, row after row (no index arrays)."""
    T = dense.shape[0]
    packed = np.empty(T * (T - 1) // 2, dtype=np.result_type(dense.dtype, np.float32))
    for t in range(1, T):
        o = offset(t)
        packed[o : o + t] = dense[t, :t]
    return packed


def check_key_norms(norms: object, steps: int | None = None) -> np.ndarray:
    """Key norms as a read-only float32 ``(steps,)`` array (any length without ``steps``): one
    finite, non-negative norm a position (``ValueError`` naming the first that is not)."""
    return check_per_position("key_norms", "key norm", norms, steps)


def check_kvzip_scores(scores: object, steps: int | None = None) -> np.ndarray:
    """KVzip's scores, checked as :func:`check_key_norms` checks norms."""
    return check_per_position("kvzip_scores", "KVzip score", scores, steps)


def check_per_position(member: str, what: str, values: object, steps: int | None) -> np.ndarray:
    """One finite, non-negative number a position, as a read-only float32 array."""
    a = np.asarray(values)
    if a.ndim != 1 or a.dtype.kind not in "fiu":
        raise ValueError(f"{member} must be a 1-D array of numbers, got {a.shape} {a.dtype}")
    if steps is not None and a.shape[0] != steps:
        raise ValueError(f"{a.shape[0]} {what}s for a trace of {steps} steps")
    a = a.astype(np.float32)  # a copy: the trace owns it
    bad = np.flatnonzero(~(np.isfinite(a) & (a >= 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{what} at position {i} is {float(a[i])!r}: each must be finite, non-negative"
        )
    a.flags.writeable = False
    return a


def _check_weights(w: np.ndarray, steps: int) -> None:
    check_values(w, row_of)
    sums = _row_sums(w, steps)
    check_sums(sums, 1, steps)


def row_of(index: int) -> int:
    """The row ``t`` holding packed index ``i``: ``offset(t) <= i < offset(t + 1)``.

    Integer arithmetic, so exact for any index: ``floor((1 + isqrt(m)) / 2)`` equals
    ``floor((1 + sqrt(m)) / 2)`` because ``1 + sqrt(m) >= 2t`` exactly when ``isqrt(m) >= 2t - 1``.
    """
    return (1 + math.isqrt(1 + 8 * index)) // 2


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
    if trace.key_norms is not None:
        arrays["key_norms"] = trace.key_norms
    if trace.vectors is not None:
        arrays.update(trace.vectors.arrays(float16))
    if trace.kvzip_scores is not None:
        arrays["kvzip_scores"] = trace.kvzip_scores
    np.savez_compressed(path, **arrays)


# Reading is written for untrusted files (uploads). Every member's .npy header is read and
# checked against what the trace implies before any member's data is; data are then read in
# bounded chunks of exactly the size the header declares (decompression stops there), and each
# chunk of rows is checked as it arrives. So a lying header, a deflate bomb or a truncated
# member is refused after at most one chunk, and a file whose defect comes late costs at most
# the trace it claims to be (or, if it compresses suspiciously well, one chunk: see below).

#: Longest string members accepted, in characters: far above what the format needs, small
#: enough that no header can make them costly.


#: Bytes of array data read (or checked) at a time.
CHUNK = 1 << 20


def check_values(a: np.ndarray, row_of: Callable[[int], int]) -> None:
    """Refuse NaN, inf or a negative weight; ``row_of`` maps an index of ``a`` to its row."""
    if a.size == 0:
        return
    lo, hi = _minimum(a), _maximum(a)
    if lo >= 0 and hi < math.inf:  # NaN fails the first comparison
        return
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ValueError(f"trace has a non-finite weight (NaN or inf) in row {row_of(int(bad[0]))}")
    raise ValueError(f"trace has a negative weight in row {row_of(int(np.argmax(a < 0)))}")


def check_sums(sums: np.ndarray, lo: int, hi: int) -> None:
    off = np.abs(sums[lo:hi] - 1.0) > ROW_SUM_TOLERANCE
    if off.any():
        t = lo + int(np.argmax(off))
        raise ValueError(f"row {t} of the trace sums to {sums[t]:.6f}, not 1")
