"""What a captured layer's heads computed at each position: queries, keys and value norms.

Most methods read only the attention a trace holds. A few score a key by its vectors instead —
Expected Attention predicts the attention the *next* queries will pay a key from the statistics of
the queries so far — and read these, which ``python -m h2o capture`` records beside the attention:

* ``queries`` ``(T, Hq, d)``: each position's query in each of the trace's query heads, *before*
  RoPE and unscaled (what the statistics of queries are taken over);
* ``keys`` ``(T, G, d)``: each position's key in each of the KV heads those query heads read,
  *after* RoPE — as the cache holds it; query head ``h`` reads KV head ``h // (Hq / G)``;
* ``value_norms`` ``(T, G)``: the L2 norm of each position's value in each KV head;
* ``rope_base``: the model's RoPE base (θ), so a method can rotate a query to any position
  (adjacent pairs, as :func:`h2o.model.forward.apply_rope`).

A trace of one query head holds that head (``Hq = 1``) and its KV head (``G = 1``); a trace that
averages a layer's query heads holds them all. Stored float16 in a file, held float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The members of a trace file holding them (all or none: ``traces/README.md``).
MEMBERS = ("queries", "keys", "value_norms", "rope_base")
#: Largest query width (heads × head size) accepted: a 7B model's 32 heads of 128. At the
#: trace's 8,192 steps that is 134 MB of float32 queries (and as much again of keys at most).
MAX_WIDTH = 4096
#: Largest head size accepted (models use 64 to 256).
MAX_HEAD = 256


def _floats(name: str, a: object, ndim: int) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != ndim or a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a {ndim}-D array of numbers, got {a.shape} {a.dtype}")
    a = a.astype(np.float32)  # a copy: the trace owns it
    bad = np.flatnonzero(~np.isfinite(a).reshape(-1))
    if bad.size:
        where = np.unravel_index(int(bad[0]), a.shape)
        raise ValueError(f"{name} holds a non-finite number at {tuple(map(int, where))}")
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class HeadVectors:
    """Queries before RoPE, keys after, value norms and the RoPE base of a trace's heads (the
    module's docstring). Every array is checked and held read-only, float32."""

    queries: np.ndarray
    keys: np.ndarray
    value_norms: np.ndarray
    rope_base: float

    def __post_init__(self) -> None:
        q = _floats("queries", self.queries, 3)
        k = _floats("keys", self.keys, 3)
        v = _floats("value_norms", self.value_norms, 2)
        T, H, d = q.shape
        if H < 1 or d < 2 or d % 2:
            raise ValueError(f"queries must hold at least one head of an even size, got {q.shape}")
        if d > MAX_HEAD:
            raise ValueError(f"queries have heads of {d} numbers: at most {MAX_HEAD}")
        if H * d > MAX_WIDTH:
            raise ValueError(
                f"queries are {H} heads of {d}: at most {MAX_WIDTH} numbers a position"
            )
        G = k.shape[1]
        if k.shape[0] != T or k.shape[2] != d or G < 1 or H % G:
            raise ValueError(
                f"keys must be (positions {T}, KV heads dividing the {H} query heads, size {d}), "
                f"got {k.shape}"
            )
        if v.shape != (T, G):
            raise ValueError(f"value_norms must be ({T}, {G}): one a position and KV head")
        if (v < 0).any():
            raise ValueError("value_norms must be non-negative (they are norms)")
        base = self.rope_base
        if isinstance(base, bool) or not isinstance(base, int | float | np.number):
            raise ValueError(f"rope_base must be a number, got {base!r}")
        if not (math.isfinite(float(base)) and float(base) > 1):
            raise ValueError(f"rope_base must be a finite number above 1, got {base!r}")
        for name, a in (("queries", q), ("keys", k), ("value_norms", v)):
            object.__setattr__(self, name, a)
        object.__setattr__(self, "rope_base", float(base))

    @property
    def positions(self) -> int:
        return int(self.queries.shape[0])

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.queries.shape[1] // self.keys.shape[1]

    @property
    def nbytes(self) -> int:
        return int(self.queries.nbytes + self.keys.nbytes + self.value_norms.nbytes)

    @classmethod
    def blank(
        cls, positions: int, heads: int, kv_heads: int, head_dim: int, rope_base: float
    ) -> HeadVectors:
        """Zeros for ``positions`` positions, to be filled in order as a model computes them
        (:meth:`write`): what a policy reading vectors is handed in the model's closed loop."""
        vec = cls(
            np.zeros((positions, heads, head_dim), np.float32),
            np.zeros((positions, kv_heads, head_dim), np.float32),
            np.zeros((positions, kv_heads), np.float32),
            rope_base,
        )
        object.__setattr__(vec, "_growing", True)  # the only vectors write() fills
        return vec

    def write(
        self, start: int, queries: np.ndarray, keys: np.ndarray, value_norms: np.ndarray
    ) -> None:
        """Positions ``start ..`` of each array, checked as the constructor checks a whole
        trace (shapes, finite numbers, non-negative norms); ``ValueError`` writes nothing.
        Only vectors made by :meth:`blank` are written: a trace's stay as they were read."""
        if not getattr(self, "_growing", False):
            raise ValueError("these vectors were read, not made blank: they cannot be written")
        new = {
            "queries": _floats("queries", queries, 3),
            "keys": _floats("keys", keys, 3),
            "value_norms": _floats("value_norms", value_norms, 2),
        }
        n = new["queries"].shape[0]
        if not 0 <= start <= self.positions - n:
            raise ValueError(f"positions {start}..{start + n - 1} outside 0..{self.positions - 1}")
        for name, a in new.items():
            held = getattr(self, name).shape
            if a.shape != (n, *held[1:]):
                raise ValueError(f"{name} of shape {a.shape} for rows of {held}")
        if (new["value_norms"] < 0).any():
            raise ValueError("value_norms must be non-negative (they are norms)")
        for name, a in new.items():
            held = getattr(self, name)
            held.flags.writeable = True  # the one writer: the arrays are read-only otherwise
            held[start : start + n] = a
            held.flags.writeable = False

    def arrays(self, float16: bool = True) -> dict[str, np.ndarray]:
        """The file's members (:data:`MEMBERS`); ``float16`` vectors take half the bytes."""
        dtype = np.float16 if float16 else np.float32
        return {
            "queries": self.queries.astype(dtype),
            "keys": self.keys.astype(dtype),
            "value_norms": self.value_norms,
            "rope_base": np.array(self.rope_base),
        }


def check_vectors(vectors: object, steps: int) -> HeadVectors:
    """``vectors`` if it is a :class:`HeadVectors` of ``steps`` positions (``ValueError``)."""
    if not isinstance(vectors, HeadVectors):
        raise ValueError(f"vectors must be a HeadVectors, got {type(vectors).__name__}")
    if vectors.positions != steps:
        raise ValueError(f"vectors of {vectors.positions} positions for a trace of {steps} steps")
    return vectors
