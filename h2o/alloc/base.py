"""Shared mechanics of every budget allocator.

An allocator decides how many KV-cache slots each (layer, KV head) gets, with the total fixed:
``n_layers * n_kv_heads * budget`` slots, where ``budget`` is the average per head. The eviction
policy inside each head stays whichever the user picks; the allocator only sets its budget.

* :class:`Allocation` — the result: a ``(layers, kv_heads)`` integer grid of budgets whose sum is
  exactly the total, its memory in bytes, and (for head classes) each head's class;
* :class:`Allocator` — the parameters and input checks; a subclass only computes its grid
  (:meth:`Allocator._budgets`);
* :func:`round_to_total` — largest-remainder rounding: real shares to integers with an exact sum.

Memory is counted as a serving stack stores the cache: per slot one key and one value vector of
``head_dim`` numbers, 2 bytes each (float16) — 256 bytes a slot for SmolLM2-135M (head dim 64).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from h2o.policies.base import check_int

#: Bytes of one number of the KV cache (float16, as served).
BYTES_PER_VALUE = 2


def slot_bytes(head_dim: int) -> int:
    """KV bytes of one slot of one head: a key and a value of ``head_dim`` float16 numbers."""
    return 2 * head_dim * BYTES_PER_VALUE


def check_fraction(name: str, value: object, *, zero_ok: bool = False) -> float:
    """``value`` as a float in ``(0, 1]`` (``[0, 1]`` with ``zero_ok``), or ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    lo_ok = v >= 0 if zero_ok else v > 0
    if not (lo_ok and v <= 1):
        raise ValueError(f"{name} must be in {'[0' if zero_ok else '(0'}, 1], got {value!r}")
    return v


def round_to_total(values: np.ndarray, total: int) -> np.ndarray:
    """Integers, each the floor or ceiling of ``values[i]``, summing to exactly ``total``.

    Largest remainder: floor everything, then give the missing units to the largest fractional
    parts (ties to the lower index). ``values`` must be non-negative and sum to ``total`` within
    rounding.
    """
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).all() or (v < 0).any():
        raise ValueError("shares must be finite and non-negative")
    base = np.floor(v + 1e-9).astype(np.int64)
    short = int(total) - int(base.sum())
    if not 0 <= short <= v.size:
        raise ValueError(f"shares sum to {v.sum():.6g}, not to the total {total}")
    if short:
        frac = v - base
        order = np.lexsort((np.arange(v.size), -frac))  # largest fraction first, then index
        base.reshape(-1)[order[:short]] += 1
    return base


@dataclass(frozen=True)
class Allocation:
    """Budgets per (layer, KV head) at a fixed total.

    ``budgets[layer, head]`` slots (int64); ``budget`` the average per head the total was
    fixed from. ``kinds`` (head classes only) names each head's class; ``alpha`` (adaptive only)
    marks an allocation that moves slots between the heads of a layer while it runs — its grid
    then holds each head's *starting* share, and only each layer's sum is fixed.
    """

    name: str
    budget: int
    budgets: np.ndarray
    head_dim: int = 64
    kinds: np.ndarray | None = None
    alpha: float | None = None
    notes: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int]:
        return self.budgets.shape  # type: ignore[return-value]

    @property
    def total(self) -> int:
        """Slots over every (layer, KV head): ``n_layers * n_kv_heads * budget`` exactly."""
        return int(self.budgets.sum())

    @property
    def cache_bytes(self) -> int:
        """Bytes of the keys and values alone at these budgets (float16), before a policy's own
        bookkeeping: what a run holds is :meth:`h2o.model.rows.Row.kv_bytes`, the one count of
        KV memory the pages, the CLI and the shipped files state."""
        return self.total * slot_bytes(self.head_dim)

    @property
    def dynamic(self) -> bool:
        """Whether heads trade slots at run time (adaptive): only layer sums are fixed."""
        return self.alpha is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: name, budget, total slots, the keys' and values' bytes, the grid, classes
        and parameters."""
        out: dict[str, Any] = {
            "allocation": self.name,
            "budget_per_head": self.budget,
            "total_slots": self.total,
            "cache_bytes": self.cache_bytes,
            "budgets": self.budgets.tolist(),
            "params": dict(self.params),
        }
        if self.kinds is not None:
            out["kinds"] = self.kinds.tolist()
        if self.alpha is not None:
            out["alpha"] = self.alpha
        if self.notes:
            out["notes"] = list(self.notes)
        return out


class Allocator:
    """Base class: checks the shape and average budget, builds the :class:`Allocation`.

    Subclasses set ``name``/``label`` (and ``unlike_paper`` when named after a paper), take
    their own parameters in ``__init__`` (checked there: a refused parameter raises
    ``ValueError`` naming it) and implement :meth:`_budgets`.
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    #: For a rule named after a paper ("-style"): in one sentence, how it differs from that paper.
    unlike_paper: ClassVar[str] = ""
    #: How its line is dashed on the memory frontier (a Plotly dash; its method gives the colour).
    dash: ClassVar[str] = "solid"

    def allocate(
        self,
        n_layers: int,
        n_kv_heads: int,
        budget: int,
        *,
        head_dim: int = 64,
        shares: np.ndarray | None = None,
    ) -> Allocation:
        """Budgets for ``n_layers x n_kv_heads`` heads averaging ``budget`` slots each.

        ``shares`` — ``(n_layers, n_kv_heads)``, each head's share of attention outside sinks +
        recent window on a calibration text — is read by the allocators that classify heads.
        """
        L = check_int("n_layers", n_layers, 1)
        G = check_int("n_kv_heads", n_kv_heads, 1)
        B = check_int("budget", budget, 1)
        check_int("head_dim", head_dim, 1)
        if shares is not None:
            shares = np.asarray(shares, dtype=np.float64)
            if shares.shape != (L, G):
                raise ValueError(f"shares must have shape ({L}, {G}), got {shares.shape}")
            if not np.isfinite(shares).all():
                raise ValueError("shares must be finite")
        budgets, extra = self._budgets(L, G, B, shares)
        budgets = np.asarray(budgets, dtype=np.int64)
        if budgets.sum() != L * G * B or (budgets < 1).any():  # the subclass's own promise
            raise AssertionError(f"{self.name}: budgets do not sum to {L * G * B}")
        budgets.flags.writeable = False
        return Allocation(
            name=self.name, budget=B, budgets=budgets, head_dim=int(head_dim), **extra
        )

    def _budgets(
        self, L: int, G: int, B: int, shares: np.ndarray | None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """The ``(L, G)`` grid summing to ``L * G * B``, and extra :class:`Allocation` fields."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v}' for k, v in self.params().items())})"

    def params(self) -> dict[str, Any]:
        return {}
