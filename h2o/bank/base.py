"""What every bank shares: lanes, lock-step state, input checks, the per-lane fallback.

The rule: a bank of ``N`` lanes behaves exactly as ``N`` separate policy instances fed the same
steps — the same kept positions, the same victims (ascending), the same float64 scores bit for
bit, and the same refusals: a refused step or eviction raises ``ValueError`` and changes no lane.

How: every lane *is* a policy instance, built by its own class from the parameters of a fresh
instance (so parameters are refused exactly as usual), whose storage is one row of the bank's
2-D arrays. When the lanes are in lock-step (equal fill, one victim each) a subclass steps every
row with a few whole-array numpy calls; anything else — caches at different fill levels, several
victims at once, per-lane attention rows — runs each lane's own code on its row, which is exact
by construction.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import numpy as np

from h2o.policies import Policy, base

from .replay import LockstepReplay

#: The largest single weight ``Policy.check_attn`` accepts.
_MAX = getattr(base, "MAX_WEIGHT", math.inf)

#: A step's attention: ``None`` (no information, every lane), an ``(N, n)`` array when every
#: lane keeps ``n`` positions (row ``i`` is lane ``i``'s), or one 1-D array or ``None`` per lane.
BankAttn = np.ndarray | Sequence[np.ndarray | None] | None

_minimum, _maximum, _sum = np.minimum.reduce, np.maximum.reduce, np.add.reduce
NO_VICTIMS = (np.zeros(0, np.intp), np.zeros(0, np.int64))  # no victims: (lanes, positions)


class PolicyBank(LockstepReplay):
    """``N`` lanes of one policy kind, stepped together. Subclasses own the storage.

    Subclasses implement ``_kind`` (refuse policies the bank cannot hold), ``_lane`` (build a
    lane from a fresh instance), ``_reserve`` (room for ``cap`` slots a lane, lanes rebound to
    their rows), ``_advance_lockstep`` and ``_evict_lockstep``.
    """

    reads_attention: bool
    #: "scored" or "ring": what the lock-step replay's closed-form and compiled paths may assume.
    kind: str = ""
    #: Each lane's budget (int64, read-only: a bank's budgets are fixed when it is built).
    budgets: np.ndarray

    def __init__(self, policies: Sequence[Policy]) -> None:
        policies = list(policies)
        if not policies:
            raise ValueError("a bank needs at least one policy")
        for p in policies:
            if not isinstance(p, Policy):
                raise ValueError(f"a bank holds h2o policies, got {type(p)!r}")
            if len(p) or p.last_pos >= 0:
                raise ValueError("a bank is built from fresh policies (this one has taken steps)")
        self._kind(policies)
        self._lanes: list[Policy] = [self._lane(p) for p in policies]
        self.reads_attention = bool(self._lanes[0].reads_attention)
        self.size = len(self._lanes)
        self.budgets = np.array([lane.budget for lane in self._lanes], dtype=np.int64)
        self.budgets.flags.writeable = False
        self._budget = int(self.budgets[0]) if (self.budgets == self.budgets[0]).all() else -1
        self._fill = 0  # every lane's fill when they agree; -1 when they differ: see _fills
        self._fills = np.zeros(self.size, dtype=np.int64)
        self._last_pos = -1
        self._stale = False  # lanes' own counters lag behind a lock-step call
        self._all = np.arange(self.size)
        self._own_checks = type(self._lanes[0]).check_attn is not Policy.check_attn
        self._setup()
        self._cap = 0
        self._reserve(int(self.budgets.max()) + 1)

    def __deepcopy__(self, memo: dict) -> PolicyBank:
        # numpy copies every array on its own, so the copied lanes' rows would no longer be
        # views of the copied bank's storage: copy, then bind them again
        new = object.__new__(type(self))
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            new.__dict__[name] = copy.deepcopy(value, memo)
        new._bind_lanes()
        return new

    # -- for subclasses ------------------------------------------------------------------------
    def _kind(self, policies: list[Policy]) -> None:
        raise NotImplementedError

    def _bind_lanes(self) -> None:
        """Make each lane's storage its row of the bank's arrays (after they were replaced)."""

    def _lane(self, policy: Policy) -> Policy:
        raise NotImplementedError

    def _setup(self) -> None:
        """Per-bank constants derived from the lanes (before any storage exists)."""

    def _reserve(self, cap: int) -> None:
        raise NotImplementedError

    def _advance_lockstep(self, pos: int, attn: np.ndarray | None) -> None:
        """One trusted step of lanes of equal fill; ``attn`` is ``(N, fill)`` or None."""
        raise NotImplementedError

    def _evict_lockstep(
        self, k: np.ndarray | int, victims: bool = True
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Evict ``k`` from each lane of equal fill (an int: the same for all), or return None
        to let each lane's own code do it."""
        raise NotImplementedError

    # -- reading -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> Policy:
        return self.lane(i)

    def __iter__(self):
        return (self.lane(i) for i in range(self.size))

    def lane(self, i: int) -> Policy:
        """Lane ``i`` as a policy instance (its ``kept``, ``scores``, ``params()``…), current
        until the bank's next step. Step the bank, not the lane."""
        self._sync()
        return self._lanes[i]

    @property
    def fills(self) -> np.ndarray:
        """How many positions each lane keeps."""
        return np.full(self.size, self._fill) if self._fill >= 0 else self._fills.copy()

    @property
    def last_pos(self) -> int:
        """The last position admitted (every lane's), -1 before the first step."""
        return self._last_pos

    def kept(self, i: int) -> np.ndarray:
        return self.lane(i).kept

    def scores(self, i: int) -> np.ndarray:
        return self.lane(i).scores

    def params(self) -> list[dict[str, int]]:
        return [lane.params() for lane in self._lanes]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self._lanes))})"

    # -- stepping ------------------------------------------------------------------------------
    def on_decode_step(self, pos: int, attn: BankAttn) -> None:
        """Every lane takes step ``pos`` (see ``Policy.on_decode_step``); lane ``i`` gets
        ``attn[i]``, or nothing (``None``). Checked first, lane by lane; a refusal raises
        ``ValueError`` and changes no lane."""
        if self.size == 1:  # one lane: its own code and checks, verbatim
            if attn is not None:
                one = type(attn) is np.ndarray and attn.ndim == 2 and attn.shape[0] == 1
                attn = attn[0] if one else self._rows(attn)[0]  # type: ignore[index]
            if self._stale:
                self._sync()
            if self._fill == self._cap:
                self._reserve(self._cap + 1)  # so the lane does not outgrow its row
            lane = self._lanes[0]
            lane.on_decode_step(pos, attn)
            self._last_pos, self._fill = pos, len(lane)
            return
        pos = self._check_pos(pos)
        if attn is None:
            self._advance(pos, None)
        elif (
            isinstance(attn, np.ndarray)
            and attn.ndim == 2
            and self._block_fits(attn)
            and self._advance_block(pos, attn)
        ):
            pass
        else:
            self._step_lanes(pos, self._check_rows(attn))

    def evict(self, budget: int | None = None) -> list[list[int]]:
        """Every lane evicts down to its budget (or ``budget``); victims per lane, ascending."""
        if self.size == 1:  # one lane: its own code
            if self._stale:
                self._sync()
            lane = self._lanes[0]
            victims = lane.evict(budget)
            self._fill = len(lane)
            return [victims]
        if budget is not None:
            lanes = self._synced_lanes()
            checked = {self._refusal(i, lane.check_budget, budget) for i, lane in lanes}
            budget = checked.pop()
        lanes, victims = self._evict(budget)
        if lanes is self._all:  # lock-step: one victim a lane, [[v0], [v1], ...]
            return victims.reshape(-1, 1).tolist()
        out: list[list[int]] = [[] for _ in range(self.size)]
        for i, v in zip(lanes.tolist(), victims.tolist(), strict=True):
            out[i].append(v)
        return out

    # -- the engine's trusted calls: the model's closed loop ------------------------------------
    # The caller vouches for its input (positions count up, weights are finite softmax means),
    # as a replay does: nothing is checked but what the loops check themselves.
    @property
    def lockstep_fill(self) -> int:
        """How many positions every lane keeps, or -1 when the lanes' fills differ."""
        return self._fill

    @property
    def positions(self) -> np.ndarray:
        """The positions storage, ``(N, capacity)``: lane ``i``'s kept positions, in kept
        order, are the first ``fills[i]`` of row ``i``. Read it; never write it."""
        return self._pos

    def advance_trusted(self, pos: int, attn: BankAttn) -> None:
        """:meth:`on_decode_step` without its checks (``attn``: a block, rows or None)."""
        self._advance(pos, attn)

    def evict_trusted(self) -> None:
        """:meth:`evict` to the lanes' budgets, victims unread."""
        self._evict(victims=False)

    def step_rows(self, p: np.ndarray, t0: int, i0: int, mask: np.ndarray) -> int:
        """The model's closed loop from row ``i0`` of a chunk (``p``: its causal probabilities
        ``(G, gs, rows, keys)``, row ``i`` query ``t0 + i``; the lanes are the layer's KV heads)
        as many rows at a time as the bank can take in one call; returns the first row it did
        not step — ``i0`` when it takes none, and the caller steps that row itself. Each row
        stepped is exactly the per-row step's (``closed_loop``'s ``_step_bank``): its mask,
        its signal and its eviction. This bank steps none."""
        return i0

    def step_trusted(self, pos: int, attn: np.ndarray | None) -> bool:
        """One step of lanes in lock-step (``attn``: ``(N, fill)`` or None), then the eviction
        down to the budgets, victims unread: the model's closed loop, once per token and layer.
        False, and nothing changed, if a weight is not finite."""
        if attn is not None and attn.size and not math.isfinite(float(_sum(attn, axis=None))):
            return False
        self._advance_lockstep(pos, attn)
        self._evict(victims=False)
        return True

    def _synced_lanes(self):
        self._sync()
        return enumerate(self._lanes)

    def _evict(
        self, budget: int | None = None, victims: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """Trusted eviction: ``(lane index, victim)`` arrays, by lane, ascending within one
        (``victims=False``: whoever asks does not need them, and may get none)."""
        if budget is None and self._budget >= 0:
            budget = self._budget
        if self._fill >= 0 and budget is not None:
            k = self._fill - budget
            if k <= 0:
                return NO_VICTIMS
            done = self._evict_lockstep(k, victims)
        else:
            k = self.fills - (self.budgets if budget is None else budget)
            if (k <= 0).all():
                return NO_VICTIMS
            done = self._evict_lockstep(k, victims) if self._fill >= 0 else None
        if done is None:
            return self._evict_lanes(np.broadcast_to(k, self.size))
        self._stale = True
        return done

    # -- checks (the lanes' own) ---------------------------------------------------------------
    def _check_pos(self, pos: object) -> int:
        """``Policy.on_decode_step``'s position rules, for the bank's shared position."""
        return base.check_pos(pos, self._last_pos)

    def _block_fits(self, a: np.ndarray) -> bool:
        """Whether ``a`` is an ``(N, n)`` numeric block for lanes that each keep ``n``, of a
        class without checks of its own — a block the bank may judge as a whole."""
        return (
            self._fill >= 0
            and a.shape == (self.size, self._fill)
            and a.dtype.kind in "fiu"
            and not self._own_checks
        )

    def _advance_block(self, pos: int, a: np.ndarray) -> bool:
        """Step every lane with a block that fits, if every row passes ``Policy.check_attn``
        (no weight below 0 or above the largest a softmax gives, no NaN) — decided with two
        reductions for all rows. False, nothing changed, at any doubt: then the lanes' own
        checks (:meth:`_check_rows`) raise the first refusal with its lane's own message."""
        if a.size and not (_minimum(a, axis=None) >= 0 and _maximum(a, axis=None) <= _MAX):
            return False
        self._advance_lockstep(pos, a)
        return True

    def _rows(self, attn: object) -> list:
        """``attn`` as one entry per lane, or ``ValueError`` if it is not of that form."""
        if (isinstance(attn, np.ndarray) and attn.ndim != 2) or isinstance(attn, str | bytes):
            rows = None
        else:
            try:
                rows = list(attn)  # type: ignore[call-overload]
            except TypeError:
                rows = None
        if rows is None:
            raise ValueError(
                f"attn must be None, an (N, n) array or one row per lane, got {type(attn)!r} "
                f"of shape {np.shape(attn)}"
            )
        if len(rows) != self.size:
            raise ValueError(f"attn has {len(rows)} rows for {self.size} lanes")
        return rows

    def _check_rows(self, attn: object) -> list[np.ndarray | None]:
        """One checked row (or None) per lane, each judged by its lane's ``check_attn``."""
        return [
            None if a is None else self._refusal(i, lane.check_attn, a)
            for (i, lane), a in zip(self._synced_lanes(), self._rows(attn), strict=True)
        ]

    def _refusal(self, i: int, check, value):
        try:
            return check(value)
        except ValueError as e:
            raise ValueError(f"lane {i} ({self._lanes[i]!r}): {e}") from None

    # -- the per-lane fallback: each lane's own code on its row --------------------------------
    def _sync(self) -> None:
        """Push the bank's counters into the lanes before their own code runs."""
        if self._stale:
            for lane, n in zip(self._lanes, self.fills.tolist(), strict=True):
                lane.set_fill(n, self._last_pos)
            self._stale = False

    def _adopt(self) -> None:
        """Take the counters back from the lanes after their own code ran."""
        fills = np.array([len(lane) for lane in self._lanes], dtype=np.int64)
        self._set_fills(fills)

    def _set_fills(self, fills: np.ndarray) -> None:
        if (fills == fills[0]).all():
            self._fill = int(fills[0])
        else:
            self._fill, self._fills = -1, fills

    def _advance(self, pos: int, attn: np.ndarray | Sequence[np.ndarray | None] | None) -> None:
        """One trusted step (``Policy.advance_trusted`` for the bank): whole arrays when the fills
        agree and ``attn`` is a block or None, else each lane's own ``_advance``."""
        if self._fill >= 0 and (attn is None or isinstance(attn, np.ndarray)):
            self._advance_lockstep(pos, attn)
        else:
            self._step_lanes(pos, [None] * self.size if attn is None else attn)

    def _step_lanes(self, pos: int, rows: Sequence[np.ndarray | None]) -> None:
        self._sync()
        self._reserve(int(self.fills.max()) + 1)  # so no lane outgrows its row
        for lane, a in zip(self._lanes, rows, strict=True):
            lane.advance_trusted(pos, a)
        self._last_pos = pos
        self._adopt()

    def _evict_lanes(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._sync()
        lanes: list[int] = []
        victims: list[int] = []
        for i, (lane, ki) in enumerate(zip(self._lanes, k.tolist(), strict=True)):
            if ki > 0:
                vs = lane.drop(ki)
                lanes += [i] * len(vs)
                victims += vs
        self._adopt()
        return np.asarray(lanes, dtype=np.intp), np.asarray(victims, dtype=np.int64)
