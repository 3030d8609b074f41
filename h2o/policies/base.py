"""Shared mechanics of every eviction policy.

Two layers, so that each policy file only holds what the card says about *that* policy:

* :class:`Policy` — the contract (``kept``, ``scores``, ``on_decode_step``, ``evict``) and every
  input check. A refused call raises ``ValueError`` before anything is touched.
* :class:`ScoredPolicy` — the card's storage and eviction: three parallel preallocated arrays in
  kept order (int32 position, float64 score, one byte of eviction scratch), a protected window of
  the last ``recent_window`` kept positions, and eviction by repeated argmin over the evictable
  prefix (equal scores evict the lower position). A subclass only says how a step's attention
  changes the scores: its ``rule(score, attn, n)``, one plain function that every path runs
  compiled (:mod:`h2o.policies.rule`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from .rule import CompiledRule, compile_rule

_INT32_MAX = np.iinfo(np.int32).max
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_minimum = np.minimum.reduce
_maximum = np.maximum.reduce

#: Largest budget accepted. The cache is preallocated at the budget (13 bytes a slot for the
#: scored policies: 218 MB here), so a larger one would fail in the allocator instead of here.
MAX_BUDGET = 2**24
#: Largest single weight accepted. Attention weights are softmax outputs, each at most 1; the
#: slack admits low-precision rounding (bfloat16's next value above 1 is 1 + 2**-7). Bounding
#: each weight also bounds every score: no sequence of accepted steps can overflow to inf.
MAX_WEIGHT = 1.01


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int, or ``ValueError`` naming ``name`` (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_budget_value(budget: object) -> int:
    budget = check_int("budget", budget, 1)
    if budget > MAX_BUDGET:
        raise ValueError(
            f"budget must be <= {MAX_BUDGET} (2**24), got {budget}: the cache is preallocated "
            "at the budget, so a larger one would not fit in memory"
        )
    return budget


def check_pos(pos: object, last_pos: int) -> int:
    """The position rules of a decode step: an integer, above ``last_pos``, within int32."""
    if type(pos) is not int and (isinstance(pos, bool) or not isinstance(pos, np.integer)):
        raise ValueError(f"pos must be an integer, got {pos!r}")
    pos = int(pos)
    if pos <= last_pos:
        raise ValueError(
            f"pos must increase strictly: got {pos} after {last_pos}"
            if last_pos >= 0
            else f"pos must be >= 0, got {pos}"
        )
    if pos > _INT32_MAX:
        raise ValueError(f"pos {pos} does not fit the int32 position store")
    return pos


def check_room(name: str, value: int, budget: int, why: str) -> None:
    """Refuse ``value >= budget`` for a parameter that reserves slots (window, sinks)."""
    if value >= budget:
        raise ValueError(
            f"{name} ({value}) must be smaller than budget ({budget}): {why}. "
            f"Lower {name} below {budget}, or raise the budget above {value}"
        )


class Policy:
    """Base class: the decode-step contract and its validation.

    Subclasses implement ``kept``, ``scores``, ``_step`` (apply one validated step) and
    ``_evict`` (drop ``k > 0`` positions, return them ascending).
    """

    #: Registry name (``POLICIES`` key) and a human label.
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    #: Whether the policy reads the attention weights at all.
    reads_attention: ClassVar[bool] = True
    #: What else of a trace the policy reads, by :class:`~h2o.trace.Trace` attribute (K-norm:
    #: ``("key_norms",)``); a replay hands it over (:meth:`observe`), and a trace without it
    #: cannot run the policy (:meth:`runs_on`).
    reads_trace: ClassVar[tuple[str, ...]] = ()
    #: What ``scores`` means for this policy, for axis labels and hovers.
    score_label: ClassVar[str] = "score"
    #: Whether its score is a count, a whole number (Scissorhands' votes): a chart ticks it in
    #: whole numbers. Declared by the class itself (:meth:`declares`): a subclass with another
    #: rule may count nothing.
    score_counts: ClassVar[bool] = False
    #: Its colour and line style (dash, marker, marker size) on every chart, declared by the class
    #: itself (:meth:`declares`: a subclass is another method and gets a spare); the built-in
    #: colours are checked together for colour-blind readers (``tests/test_palette.py``).
    colour: ClassVar[str | None] = None
    line_style: ClassVar[tuple[str, str, int] | None] = None
    #: Whether it keeps the attention sinks by rule (pinned slots), not by score.
    pins_sinks: ClassVar[bool] = False
    #: What picks its victim, as a replay tells each step: "score" (the lowest, ties to the lower
    #: position: the card's argmin), "age" (the oldest outside its pinned sinks) or "chance".
    evicts_by: ClassVar[str] = "score"
    #: Whether it holds every position and chooses what each step *reads* instead of evicting
    #: (Quest): replayed by :func:`h2o.replay_selection.replay_selection`, left out of the
    #: comparisons of what a cache of ``budget`` slots holds (``python -m h2o bench``, All
    #: policies).
    selects: ClassVar[bool] = False
    #: What it knows that a decoder reading the text in order would not, in a sentence (KVzip's
    #: score needs the whole text), said beside it in Step through, the needle grid's family
    #: sentence, All policies and ``python -m h2o bench``; "" for none.
    hindsight: ClassVar[str] = ""
    #: Whether its recent window is part of its rule (TOVA protects only the newest position),
    #: so a shared window control leaves it alone.
    own_window: ClassVar[bool] = False
    #: The lock-step bank that runs this class's rule for many lanes at once (:mod:`h2o.bank`):
    #: "scored" or "ring". Read from the class itself, never inherited (:meth:`declares`): a
    #: subclass, or a policy of your own, runs one instance at a time unless it says so.
    bank: ClassVar[str | None] = None

    @classmethod
    def declares(cls, fact: str) -> object:
        """A fact this class sets itself (its own ``__dict__``), or None: a subclass that changes
        the rule must not inherit its parent's compiled path."""
        return vars(cls).get(fact)

    @classmethod
    def runs_on(cls, trace: object | None) -> bool:
        """Whether a replay over ``trace`` can run this method: the trace holds everything it
        reads (``None``, no trace: only a method that reads nothing beyond attention)."""
        return not cls.missing_from(trace)

    @classmethod
    def missing_from(cls, trace: object | None) -> list[str]:
        """What the method reads (:attr:`reads_trace`) that ``trace`` does not carry."""
        return [m for m in cls.reads_trace if getattr(trace, m, None) is None]

    @classmethod
    def state_bytes(cls, head_dim: int, group_size: int) -> int:
        """Bytes one instance holds beyond its slots when it runs on one KV head of a model
        (``group_size`` query heads of ``head_dim``): 0, but for a method that keeps statistics
        of what it has read (Expected Attention)."""
        return 0

    def observe(self, trace: object) -> None:
        """Take what the method reads from the trace it is about to replay
        (:attr:`reads_trace`); nothing for a method that reads only attention. ``ValueError`` if
        the trace lacks it, before any step."""
        if missing := self.missing_from(trace):
            name = getattr(trace, "name", "this trace")
            raise ValueError(
                f"{self.label} reads each position's {', '.join(missing)}, which {name!r} does "
                "not carry: traces captured from the real model do (python -m h2o capture)"
            )

    @classmethod
    def bench_settings(cls, budget: int, windows: Sequence[int]) -> list[dict[str, int]]:
        """The settings this method runs at in the standard comparison (``python -m h2o bench``
        and the All policies page), given the comparison's recent windows (each below
        ``budget``): once, with the first window if it takes one (its own default if the window
        is part of its rule) and 4 sinks (fewer under a tiny budget) if it pins sinks. A method
        whose window is the point of the comparison runs once per window (H2O, Scissorhands)."""
        takes = inspect.signature(cls.__init__).parameters
        settings: dict[str, int] = {}
        if "recent_window" in takes:
            own = getattr(cls, "default_recent_window", windows[0])
            settings["recent_window"] = int(own if cls.own_window else windows[0])
        if "sinks" in takes:
            settings["sinks"] = min(4, budget - 1)
        return [settings]

    def __init__(self, budget: int, *, rng: np.random.Generator | None = None) -> None:
        self.budget = _check_budget_value(budget)
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a numpy.random.Generator or None, got {type(rng)!r}")
        self.rng = rng
        self._last_pos = -1

    # -- the public contract -------------------------------------------------------------------
    @property
    def kept(self) -> np.ndarray:
        """Kept positions in arrival (hence ascending) order; a read-only array."""
        raise NotImplementedError

    @property
    def scores(self) -> np.ndarray:
        """float64 scores aligned with :attr:`kept`; a read-only array."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def on_decode_step(self, pos: int, attn: np.ndarray | None) -> None:
        """Take one decode step: fold ``attn`` into the scores, then admit ``pos`` with score 0.

        ``attn`` is index-aligned with :attr:`kept` at call time (the softmax over the kept keys,
        as a serving stack exposes it, usually float32), or ``None``: "no information this step",
        which leaves every score untouched. Bad input — a wrong length, NaN, inf, a negative
        weight, or a weight above 1 that no softmax produces (see :data:`MAX_WEIGHT`) — raises
        ``ValueError`` and changes nothing.
        """
        pos = check_pos(pos, self._last_pos)
        self.advance_trusted(pos, None if attn is None else self.check_attn(attn))

    # -- for engines (a replay, a bank): the caller vouches for its input ----------------------
    def advance_trusted(self, pos: int, attn: np.ndarray | None) -> None:
        """``on_decode_step`` past validation. The replay calls it directly: its positions count
        up from 0 and its weights come from a validated trace, renormalised, so they are finite,
        non-negative and aligned by construction."""
        self._step(pos, attn)
        self._last_pos = pos

    def drop(self, k: int) -> list[int]:
        """Evict exactly ``k`` positions (``evict`` past its budget arithmetic); the victims
        ascending. ``k`` must be 1 to :attr:`droppable`; any other is refused with
        ``ValueError`` and changes nothing (the one check here: the eviction scans would
        otherwise read past what the rule may evict)."""
        k = check_int("k", k, 1)
        if k > self.droppable:
            raise ValueError(
                f"cannot drop {k}: {self!r} holds {len(self)} position(s), of which its rule may "
                f"evict {self.droppable} (not the protected window or the sinks)"
            )
        return self._evict(k)

    @property
    def droppable(self) -> int:
        """How many kept positions the rule may evict now (all but the protected ones)."""
        return len(self)

    def set_fill(self, n: int, last_pos: int) -> None:
        """After an engine wrote this policy's storage in place (a bank lane, an adaptive
        layer's head): it now keeps its first ``n`` slots, and ``last_pos`` was admitted last."""
        self._set_fill(n)
        self._last_pos = last_pos

    def _set_fill(self, n: int) -> None:
        raise NotImplementedError

    @property
    def last_pos(self) -> int:
        """The last position admitted, -1 before the first step."""
        return self._last_pos

    def evict(self, budget: int | None = None) -> list[int]:
        """Drop ``len(kept) - budget`` positions (none if not over); return them ascending."""
        budget = self.budget if budget is None else self.check_budget(budget)
        k = len(self) - budget
        return self._evict(k) if k > 0 else []

    def resume(self, kept: np.ndarray, scores: np.ndarray, last_pos: int) -> None:
        """Take the state of steps an engine ran for this fresh policy elsewhere (a compiled
        replay): the kept positions in arrival order, their float64 scores, the last position
        admitted. For engines that ran this policy's own rules; nothing here re-checks them."""
        if len(self) or self._last_pos >= 0:
            raise ValueError("resume needs a fresh policy (this one has already taken steps)")
        if len(kept) != len(scores) or (len(kept) and int(kept[-1]) > last_pos):
            raise ValueError("resume: kept and scores must align, and end at or before last_pos")
        self._resume(np.asarray(kept, dtype=np.int32), np.asarray(scores, dtype=np.float64))
        self._last_pos = int(last_pos)

    def _resume(self, kept: np.ndarray, scores: np.ndarray) -> None:
        raise NotImplementedError

    # -- validation ----------------------------------------------------------------------------
    def check_budget(self, budget: int) -> int:
        return _check_budget_value(budget)

    def check_attn(self, attn: object) -> np.ndarray:
        a = attn if type(attn) is np.ndarray else np.asarray(attn)
        if a.ndim != 1 or a.dtype.kind not in "fiu":
            raise ValueError(f"attn must be a 1-D array of weights, got shape {a.shape} {a.dtype}")
        n = len(self)
        if a.shape[0] != n:
            raise ValueError(f"attn has length {a.shape[0]} but {n} positions are kept")
        if n:
            # Two reductions, no temporaries: NaN fails `lo >= 0`, inf and any weight no
            # softmax can produce fail `hi <= MAX_WEIGHT`.
            lo, hi = _minimum(a), _maximum(a)
            if not (lo >= 0 and hi <= MAX_WEIGHT):
                if np.isnan(a).any():
                    raise ValueError("attn contains NaN")
                if np.isinf(a).any():
                    raise ValueError("attn contains inf")
                if lo < 0:
                    raise ValueError(f"attn contains a negative weight ({float(lo)!r})")
                raise ValueError(
                    f"attn contains a weight of {float(hi)!r}: attention weights are softmax "
                    f"outputs, each at most 1 (accepted up to {MAX_WEIGHT} for rounding). "
                    "Pass the softmax over the kept keys, not raw scores"
                )
        return a

    # -- for subclasses ------------------------------------------------------------------------
    def _step(self, pos: int, attn: np.ndarray | None) -> None:
        raise NotImplementedError

    def _evict(self, k: int) -> list[int]:
        raise NotImplementedError

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{type(self).__name__}({params})"

    def params(self) -> dict[str, int]:
        """Constructor parameters (without the rng), for labels and caching keys."""
        return {"budget": self.budget}

    def score_note(self) -> str:
        """What its scores are at a step that does not set them, in a sentence said beside it
        in Step through (Expected Attention rescores at an interval); "" when every step does."""
        return ""


#: What the compiled loops run of a scored policy besides its rule: the card's, so a class that
#: replaces one of these runs its own code one instance at a time.
_CARD_MECHANICS = (
    "_accumulate",
    "_step",
    "_admission_score",
    "_select",
    "_evict",
    "advance_trusted",
    "on_decode_step",
    "evict",
    "drop",
)


class ScoredPolicy(Policy):
    """Score, protect the recent window, evict by repeated argmin.

    This is the card's mechanism, shared by H2O, Scissorhands, TOVA and random eviction::

        on_decode_step(pos, attn):
            rule(score, attn, len(attn))    # subclass: its rule, as the card writes it
            admit(pos, score = 0)

        evict(budget):
            evictable = kept[: len(kept) - recentWindow]
            drop the `len(kept) - budget` lowest-scoring of those

    Storage is three parallel arrays in kept order, preallocated to ``budget + 1`` slots (the
    steady state: ``budget`` kept plus the one just admitted): int32 position, float64 score and a
    uint8 scratch flag used during eviction — 13 bytes a slot. They only grow if a caller admits
    past that without evicting.
    """

    #: ``recent_window`` when none is given (TOVA protects only the newest position).
    default_recent_window: ClassVar[int] = 32
    #: How one step's attention changes the scores, written once as the card writes it: a plain
    #: static function ``rule(score, attn, n)`` over the ``n`` kept slots (``attn`` index-aligned
    #: with ``score``; float64 scores, float32 or float64 weights), in numba's subset of numpy.
    #: The instance and the compiled loops both run it compiled as written
    #: (:meth:`compiled_rule`); None: the class folds attention its own way (:meth:`_accumulate`).
    rule: ClassVar[Callable[[np.ndarray, np.ndarray, int], None] | None] = None
    #: Storage per slot: the card's int32 position, float64 score and one byte of scratch.
    POS_DTYPE, SCORE_DTYPE, SCRATCH_DTYPE = (
        np.dtype(np.int32),
        np.dtype(np.float64),
        np.dtype(np.uint8),
    )
    nbytes_per_slot: ClassVar[int] = (
        POS_DTYPE.itemsize + SCORE_DTYPE.itemsize + SCRATCH_DTYPE.itemsize
    )

    def __init__(
        self,
        budget: int = 512,
        recent_window: int | None = None,
        *,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(budget, rng=rng)
        if recent_window is None:
            recent_window = self.default_recent_window
        self.recent_window = check_int("recent_window", recent_window, 0)
        self.check_budget(self.budget)
        cap = self.budget + 1
        self._pos = np.zeros(cap, dtype=self.POS_DTYPE)
        self._score = np.zeros(cap, dtype=self.SCORE_DTYPE)
        self._scratch = np.zeros(cap, dtype=self.SCRATCH_DTYPE)
        self._n = 0

    def params(self) -> dict[str, int]:
        return {"budget": self.budget, "recent_window": self.recent_window}

    @property
    def kept(self) -> np.ndarray:
        """Kept positions in arrival order: a read-only view, valid until the next step."""
        v = self._pos[: self._n]
        v.flags.writeable = False
        return v

    @property
    def scores(self) -> np.ndarray:
        """float64 scores aligned with :attr:`kept`: a read-only view, valid until the next step."""
        v = self._score[: self._n]
        v.flags.writeable = False
        return v

    def __len__(self) -> int:
        return self._n

    @property
    def droppable(self) -> int:
        return max(0, self._n - self.recent_window)  # the window is protected

    def check_budget(self, budget: int) -> int:
        budget = super().check_budget(budget)
        why = "every kept position would be protected, leaving the score nothing to choose between"
        check_room("recent_window", self.recent_window, budget, why)
        return budget

    def _step(self, pos: int, attn: np.ndarray | None) -> None:
        admitted = self._admission_score(pos)  # first: it may refuse, and nothing has changed
        n = self._n
        if attn is not None and n:
            self._accumulate(self._score[:n], attn)
        if n == self._pos.shape[0]:  # admitted past budget + 1 without evicting: grow
            self._pos, self._score, self._scratch = (
                np.concatenate([a, np.zeros_like(a)])
                for a in (self._pos, self._score, self._scratch)
            )
        self._pos[n] = pos
        self._score[n] = admitted
        self._n = n + 1

    def _admission_score(self, pos: int) -> float:
        """The score position ``pos`` is admitted with: 0 in the card's rule (what it earns
        comes later, from attention); a method that scores a key as it arrives says so here."""
        return 0.0

    def _accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        """Fold one step's validated, index-aligned weights into ``score`` in place: the class's
        :attr:`rule`, compiled by numba when it compiles — the same function the compiled loops
        call, so an instance and a bank compute the same bits — else called as written.

        A class may override this instead, to fold attention its own way in numpy (random
        eviction ignores it); it then has no compiled rule (:meth:`compiled_rule`)."""
        cls = type(self)
        fn = cls.rule
        if fn is None:
            raise NotImplementedError(f"{cls.__name__} declares no rule(score, attn, n)")
        compiled = compile_rule(fn)
        n = attn.shape[0]
        if compiled is None:
            fn(score, attn, n)
            return
        dtype, flags = attn.dtype, attn.flags
        if dtype is not _F32 and dtype is not _F64:
            # Integer or half-precision weights widen to float64 exactly (each is at most 1.01),
            # so the rule sees the values it would have seen.
            attn = attn.astype(np.float64)
        elif not (flags.c_contiguous and flags.writeable):
            attn = attn.copy()  # the compiled forms take contiguous, writeable arrays
        compiled.jit(score, attn, n)

    @classmethod
    def compiled_rule(cls) -> CompiledRule | None:
        """The class's :attr:`rule` compiled (:func:`~h2o.policies.rule.compile_rule`), for the
        compiled loops and the instance alike; None if the class has no rule, folds attention
        its own way (overrides :meth:`_accumulate`), or numba cannot compile its rule: then it
        runs one instance at a time, its rule called from Python. Also None for a class that
        changes the card's other mechanics (admission, eviction, what a step does): the loops
        run the card's."""
        if cls.rule is None or any(
            getattr(cls, m) is not getattr(ScoredPolicy, m) for m in _CARD_MECHANICS
        ):
            return None
        return compile_rule(cls.rule)

    # -- for engines that hold a scored policy's storage (banks, adaptive layers) --------------
    def accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        """The class's rule (:meth:`_accumulate`) on scores an engine holds."""
        self._accumulate(score, attn)

    def select(self, k: int, evictable: int) -> list[int]:
        """The class's choice of ``k`` victims among the first ``evictable`` slots
        (:meth:`_select`), as indices into kept order."""
        return self._select(k, evictable)

    @classmethod
    def evicts_by_argmin(cls) -> bool:
        """Whether the class evicts the lowest score (the card's rule), not by a rule of its own
        (random eviction draws, or an eviction written anew): then an engine may choose its
        victims itself."""
        return cls._select is ScoredPolicy._select and cls._evict is ScoredPolicy._evict

    def bind(self, pos: np.ndarray, score: np.ndarray, scratch: np.ndarray | None = None) -> None:
        """Keep this policy's positions and scores in an engine's arrays (one row each of a
        bank's or an adaptive layer's storage, of the same dtypes), which must already hold its
        state: a fresh policy holds none, and a bank copies its rows before it moves them."""
        self._pos, self._score = pos, score
        if scratch is not None:
            self._scratch = scratch

    def _set_fill(self, n: int) -> None:
        self._n = n

    def _resume(self, kept: np.ndarray, scores: np.ndarray) -> None:
        n = kept.shape[0]
        if n > self._pos.shape[0]:
            self._pos, self._score, self._scratch = (
                np.zeros(n, dtype=a.dtype) for a in (self._pos, self._score, self._scratch)
            )
        self._pos[:n], self._score[:n], self._n = kept, scores, n

    def _select(self, k: int, evictable: int) -> list[int]:
        """Indices (into kept order) of the ``k`` victims among the first ``evictable`` slots.

        Repeated argmin: one linear scan per victim, no sort. ``argmin`` returns the first
        minimum, i.e. the lower position on equal scores. When several go at once, the slots
        already chosen are flagged in the scratch byte and passed over by the following scans.
        """
        score = self._score[:evictable]
        chosen = [int(score.argmin())]
        if k > 1:
            scratch = self._scratch[:evictable]
            for _ in range(k - 1):
                scratch[chosen[-1]] = 1
                free = np.flatnonzero(scratch == 0)  # by index: scores may be anything, even inf
                chosen.append(int(free[score[free].argmin()]))
            scratch[:] = 0
        return chosen

    def _evict(self, k: int) -> list[int]:
        chosen = sorted(self._select(k, self._n - self.recent_window))
        pos, score, n = self._pos, self._score, self._n
        victims = [int(pos[i]) for i in chosen]
        # Close the gaps left by the victims, keeping arrival order: one slice move per run of
        # survivors. In steady state there is one victim and this is a single shift of the tail.
        w = chosen[0]
        for j, v in enumerate(chosen):
            stop = chosen[j + 1] if j + 1 < k else n
            pos[w : w + stop - v - 1] = pos[v + 1 : stop]
            score[w : w + stop - v - 1] = score[v + 1 : stop]
            w += stop - v - 1
        self._n = w
        return victims
