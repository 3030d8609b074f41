"""A kind of cache: what holds the KV cache during one run of a :class:`~h2o.model.rows.Row`.

The row grammar (:mod:`h2o.model.rows`) is shared; each kind of cache is one subclass of
:class:`CacheKind` that says, for the rows of its kind,

* its part of the grammar: the row splits a label's head into a name, a budget, an allocation
  and ``:opt`` tokens (:func:`split_head`); :meth:`CacheKind.parse_head` says whether the head
  is this kind's and reads it, its options included — the options it declares
  (:attr:`CacheKind.options`), each read from its token (:meth:`CacheKind.read_option`) —
  :meth:`CacheKind.head` writes it back, and :meth:`CacheKind.check` refuses what the kind does
  not take;
* what it is called and where it sits: :meth:`CacheKind.name` (the family on the memory
  frontier), :attr:`CacheKind.group` (the full cache, eviction or quantization);
* what it holds: :meth:`CacheKind.slots` per (layer, KV head), its bookkeeping per slot;
* how the model attends through it: the policies it steps during decoding
  (:meth:`CacheKind.decode_policies`), and how it reads a prompt (:meth:`CacheKind.begin`,
  :meth:`CacheKind.read_prefix`, :meth:`CacheKind.read_prompt`).

A row with ``+kiviN`` holds its slots as KIVI-style codes (:mod:`h2o.model.quant`): that is the
same for every kind that allows it (:attr:`CacheKind.quantizable`); its part of the label, options
included, is :class:`~h2o.model.caches.kivi_cache.KiviCache`'s.
The model asks the row's kind (``row.cache``), once per question; a new kind is one file and
one line in :data:`h2o.model.caches.CACHE_KINDS` (or :func:`h2o.model.caches.register`).

The kinds sit below the row: a kind reads the fields of the row it is asked about
(``self.row``) but imports :mod:`h2o.model.rows` only for type hints, and what it calls on the
model (:mod:`h2o.model.allocation`, :mod:`h2o.model.quality`, :mod:`h2o.model.prefill`,
:mod:`h2o.model.snapkv`) takes plain arguments, never a row — so the modules form layers, with
no import circle (``tests/test_import_cycles.py``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from h2o.alloc import Allocation, make_allocator
from h2o.model.allocation import N_RECENT, N_SINKS, head_shares, make_allocation
from h2o.model.caches.fixed_keep import FixedKeep
from h2o.model.fed_heads import fed_layers
from h2o.model.stack import cache_for
from h2o.policies import POLICIES

if TYPE_CHECKING:
    from h2o.model.forward import SmolLM
    from h2o.model.kv_cache import KVCache
    from h2o.model.quant import QuantState
    from h2o.model.rows import Row

ALLOCATIONS = ("pyramid", "adaptive", "duo")
#: The frontier's groups of rows: the reference, eviction, quantization (and the two combined,
#: an evicting kind with ``+kiviN``: ``"both"``), and a selection that holds every key but
#: reads a part of them each step (``"select"``).
GROUPS = ("full", "evict", "compress", "both", "select")

#: A label's head (before any ``+``): ``NAME[@BUDGET[/ALLOCATION]][:opt...]`` — ``full``,
#: ``kivi4:r32``, ``h2o@128/pyramid``, ``h2o@128:w50%:prefill``.
HEAD = re.compile(
    r"^(?P<name>[A-Za-z0-9_\-]+)(?:@(?P<budget>\d+)(?:/(?P<alloc>[a-z]+))?)?(?P<opts>(?::[^:]+)*)$"
)


@dataclass(frozen=True)
class Head:
    """A label's head as the row grammar splits it, for a kind to read
    (:meth:`CacheKind.parse_head`): ``h2o@128/pyramid:w64`` is
    ``Head("h2o", 128, "pyramid", ("w64",))``."""

    name: str
    budget: int | None = None
    allocation: str | None = None
    #: the ``:opt`` items after it, in the label's order
    tokens: tuple[str, ...] = ()


def split_head(text: str) -> Head | None:
    """``text`` as a :class:`Head`, or None if it has not that shape."""
    m = HEAD.match(text)
    if not m:
        return None
    budget = None if m["budget"] is None else int(m["budget"])
    tokens = tuple(t for t in m["opts"].split(":") if t)
    return Head(m["name"], budget, m["alloc"], tokens)


@dataclass
class Reading:
    """What a row carries while it reads a prompt: the policies it steps (a row evicting while
    it reads) and the attention it accumulates (H2O's prefill mode)."""

    policies: list | None = None
    acc: np.ndarray | None = None
    #: how many of the prompt's last tokens are its question, where the caller knows (a needle
    #: prompt's tail): a row that compresses the context reads them after the compression
    question: int | None = None


class CacheKind:
    """One kind of cache, asked about one row (``row.cache``). Subclasses set :attr:`kind` and
    override what differs; the defaults are a cache that keeps every token and evicts none."""

    #: the row's ``kind`` (stored in the result files)
    kind: ClassVar[str]
    #: frontier group at full precision ("full", "evict", "compress")
    group: ClassVar[str] = "evict"
    #: whether it keeps fewer slots than tokens (a budget)
    evicts: ClassVar[bool] = False
    #: which of a row's ``policy``, ``budget``, ``allocation`` it takes (others must be unset)
    takes: ClassVar[tuple[str, ...]] = ()
    #: whether its slots may be held as KIVI-style codes (``+kiviN``)
    quantizable: ClassVar[bool] = False
    #: whether it has a closed-loop perplexity over a text (False: it compresses a prompt once)
    closed_loop: ClassVar[bool] = True
    #: the options its labels take (``:w64``, ``:avg5``): name → its value when the label names
    #: none (a row stores only the options set to something else, so that one row has one
    #: label; :meth:`Row.option <h2o.model.rows.Row.option>` reads them)
    options: ClassVar[Mapping[str, Any]] = {}
    #: what its options' tokens look like, for the refusal of a token it does not read
    option_hints: ClassVar[tuple[str, ...]] = ()
    #: tried after every other kind when a label is parsed (the grammar's catch-all)
    fallback: ClassVar[bool] = False
    #: a method of the family since H2O: what it answers of H2O's limits, as a clause the app
    #: writes after the method's name ("" for the others)
    since_h2o: ClassVar[str] = ""
    #: its line's colour and marker on the memory frontier, for a kind that is a method of its
    #: own (None: the row's policy gives the colour, as for ``h2o@128``); read with
    #: :meth:`declares`, so a subclass picks its own
    colour: ClassVar[str | None] = None
    marker: ClassVar[str] = "circle"
    #: where its rows come in tables and menus (lower first; kinds registered later, at 100,
    #: after the built-in ones)
    rank: ClassVar[int] = 100
    #: the registry's policy that evicts by the same score as a model decodes, one position per
    #: token (the player steps it on captured traces); "" for none
    decode_policy: ClassVar[str] = ""

    def __init__(self, row: Row) -> None:
        self.row = row

    @classmethod
    def declares(cls, fact: str) -> object:
        """A fact this class sets itself (its own ``__dict__``), or None: a subclass is a method
        of its own and is not drawn as its parent."""
        return vars(cls).get(fact)

    # -- the grammar -------------------------------------------------------------------------
    @classmethod
    def parse_head(cls, head: Head, label: str) -> dict[str, Any] | None:
        """The Row fields of a label's head (before any ``+``; its options under
        ``"options"``, :meth:`read_options`), or None if it is not this kind's; ``ValueError``
        if it is this kind's but malformed."""
        return None

    @classmethod
    def read_option(cls, token: str, read: Mapping[str, Any]) -> tuple[str, Any] | None:
        """``(name, value)`` of the option a label's ``:token`` names, given the options
        ``read`` before it in the label; None if this kind reads no such token (or has one
        already)."""
        return None

    @classmethod
    def read_options(cls, tokens: Sequence[str], label: str) -> dict[str, Any]:
        """The options a head's ``:opt`` tokens name (:meth:`read_option` of each);
        ``ValueError`` naming the row and the first token this kind does not read."""
        read: dict[str, Any] = {}
        for token in tokens:
            got = cls.read_option(token, read)
            if got is None:
                takes = ", ".join(cls.option_hints) or f"{cls.kind} takes no options"
                raise ValueError(f"row {label!r}: cannot read option {':' + token!r} ({takes})")
            read[got[0]] = got[1]
        return read

    def check(self) -> None:
        """Refuse, with ``ValueError``, a row of this kind with fields it does not take."""

    def head(self) -> str:
        """The label's head (:meth:`parse_head` reads it back)."""
        return self.kind

    def name(self) -> str:
        """The family's name, before any quantization ("H2O (pyramid)", "SnapKV")."""
        return self.kind

    # -- what it holds -----------------------------------------------------------------------
    def slots(self, cfg, n_tokens: int) -> np.ndarray:
        """Slots held per (layer, KV head) after ``n_tokens``: ``(n_layers, n_kv_heads)``."""
        return np.full((cfg.n_layers, cfg.n_kv_heads), max(0, int(n_tokens)), dtype=np.int64)

    def bookkeeping_per_slot(self) -> int:
        """Its own bytes per slot beyond the keys and values (0: none)."""
        return 0

    def summary_bytes(self, cfg, n_tokens: int) -> int:
        """Its bytes beyond the slots and their bookkeeping after ``n_tokens`` (0: none;
        Quest's page summaries)."""
        return 0

    def read_bytes(self, cfg, n_tokens: int, held: int, reads: Any = None) -> int:
        """The bytes one decoding step reads with ``n_tokens`` in the cache, given the
        ``held`` bytes (:meth:`~h2o.model.rows.Row.kv_bytes`): all of them, but for a kind that
        reads a part of what it holds (Quest; ``reads``: its run's :meth:`selector`, which
        counts what the run read)."""
        return int(held)

    def step_reads(self, cfg, reads: Any) -> list[tuple[int, int]]:
        """``(keys held, bytes read)`` of each step its run's :meth:`selector` counted, in
        order (Quest); none for a kind without a selector."""
        return []

    # -- how the model attends through it ----------------------------------------------------
    def decode_policies(self, model: SmolLM, calibration_ids: Sequence[int] | None = None):
        """``policies[layer]`` stepped at every token while it reads (None: it evicts
        nothing as it goes)."""
        return None

    def text_policies(
        self, model: SmolLM, ids: Sequence[int], calibration_ids: Sequence[int] | None = None
    ):
        """``policies[layer]`` stepped at every token of a text read for its perplexity (the
        closed loop over the positions ``ids``): :meth:`decode_policies`, unless the kind runs
        otherwise over a text."""
        return self.decode_policies(model, calibration_ids)

    def stepped_bytes(self, cfg, n_tokens: int) -> int:
        """What it holds over a text beyond :meth:`~h2o.model.rows.Row.kv_bytes` (0: nothing)."""
        return 0

    def begin(
        self, model: SmolLM, calibration_ids: Sequence[int] | None, length: int, start=None
    ) -> Reading:
        """What it carries into reading a prompt of ``length`` tokens, from the start or from
        ``start`` (a :class:`~h2o.model.answer.PromptState`, copied: one state starts many)."""
        if start is not None and start.policies is not None:
            return Reading(policies=copy.deepcopy(start.policies))
        return Reading(policies=self.decode_policies(model, calibration_ids))

    def selector(self, model: SmolLM):
        """A :data:`~h2o.model.selecting.Selector` applied at every step after the prompt
        (None: each query reads every key the cache holds)."""
        return None

    def read_prefix(
        self,
        model: SmolLM,
        part: list[int],
        cache: KVCache,
        quant: QuantState | None,
        reading: Reading,
    ) -> np.ndarray:
        """Read ``part[cache.length:]`` (a prompt's beginning) into ``cache``: the final
        hidden states of the tokens read."""
        return model.read(
            part, cache_for(model.config, cache, policies=reading.policies, quant=quant)
        )

    def read_prompt(
        self,
        model: SmolLM,
        prompt: list[int],
        cache: KVCache,
        quant: QuantState | None,
        reading: Reading,
        calibration_ids: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, list | None]:
        """Read the rest of the whole ``prompt``: its hidden states and ``policies[layer]
        [kv_head]`` holding what each head kept (None: it evicts nothing)."""
        return self.read_prefix(model, prompt, cache, quant, reading), reading.policies

    def prompt_limit(self, n_tokens: int, question: int | None = None) -> int:
        """How much of a prompt of ``n_tokens`` (its last ``question`` its question, where the
        caller knows) may be read before it is handed on to another prompt that shares it
        (SnapKV: not its observation window; a compressed context: not its question)."""
        return n_tokens


#: kind → class: every kind a row can name, in the order labels are tried (a ``fallback`` kind
#: after every other). :mod:`h2o.model.caches` fills it with the built-in kinds and adds others
#: (:func:`~h2o.model.caches.register`); it lives here, below every kind, so that a kind that
#: asks about the others (a policy's twin kind, named in a refusal) reads it without importing
#: the package that imports it.
CACHE_KINDS: dict[str, type[CacheKind]] = {}


# -- the kinds that keep a budget of slots -------------------------------------------------------
_SHARES: dict[tuple[int, int, int], np.ndarray] = {}


def calibration_shares(model: SmolLM, calibration_ids: Sequence[int] | None) -> np.ndarray:
    """Duo's head classes are read from ``calibration_ids`` (one full prefill, remembered per
    model and text: a grid reuses it): :meth:`HeadShares.kv_rest` with the sinks and window
    duo keeps."""
    if calibration_ids is None:
        raise ValueError(
            "a duo row needs calibration_ids: the text on which duo classifies heads "
            "(the app uses traces/texts/library.txt)"
        )
    ids = [int(i) for i in calibration_ids]
    key = (id(model), len(ids), hash(tuple(ids)))
    if key not in _SHARES:
        if len(_SHARES) >= 4:
            _SHARES.pop(next(iter(_SHARES)))
        _SHARES[key] = head_shares(model, ids, N_SINKS, N_RECENT).kv_rest()
    return _SHARES[key]


class Budgeted(CacheKind):
    """A kind that keeps at most ``budget`` slots per KV head (``NAME@BUDGET``), spread over
    the heads by an allocation (``/pyramid``, ``/adaptive``, ``/duo``; uniform without)."""

    evicts = True
    takes = ("policy", "budget", "allocation")
    quantizable = True

    @classmethod
    def policy_of(cls, head: Head) -> str | None:
        """The policy a head names if it is this kind's (its name is the kind's), else None."""
        return cls.kind if head.name == cls.kind else None

    @classmethod
    def parse_head(cls, head: Head, label: str) -> dict[str, Any] | None:
        """``KIND@BUDGET[/ALLOCATION][:opt...]``, its name the kind's (:meth:`policy_of`)."""
        policy = cls.policy_of(head)
        if policy is None or head.budget is None:
            return None
        return {
            "policy": policy,
            "budget": head.budget,
            "allocation": head.allocation,
            "options": cls.read_options(head.tokens, label),
        }

    def check(self) -> None:
        r = self.row
        b = r.budget
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 1:
            raise ValueError(f"budget must be a positive integer, got {b!r}")
        if r.allocation is not None and r.allocation not in ALLOCATIONS:
            raise ValueError(
                f"unknown allocation {r.allocation!r}; choose from uniform, "
                + ", ".join(ALLOCATIONS)
            )
        if self.quantizable and r.bits == 16:
            raise ValueError("a combination needs 2, 4 or 8 bits (16 is the policy alone)")

    def head(self) -> str:
        r = self.row
        return f"{r.policy}@{r.budget}" + (f"/{r.allocation}" if r.allocation else "")

    def allocation(self, model: SmolLM, calibration_ids: Sequence[int] | None = None) -> Allocation:
        """Its budgets per (layer, KV head) on ``model`` (duo classifies heads on
        ``calibration_ids``)."""
        name = self.row.allocation or "uniform"
        shares = calibration_shares(model, calibration_ids) if name == "duo" else None
        return make_allocation(model, name, int(self.row.budget), shares)  # type: ignore[arg-type]

    def slots(self, cfg, n_tokens: int) -> np.ndarray:
        L, G = cfg.n_layers, cfg.n_kv_heads
        n, budget = max(0, int(n_tokens)), int(self.row.budget)  # type: ignore[arg-type]
        if self.row.allocation is None:
            budgets = np.full((L, G), budget, dtype=np.int64)
        else:
            # duo's budgets depend on which heads are retrieval heads, not on how many slots
            # each class gets: any shares give the same multiset, hence the same bytes
            budgets = (
                make_allocator(self.row.allocation)
                .allocate(L, G, budget, head_dim=cfg.head_dim, shares=np.zeros((L, G)))
                .budgets
            )
        return np.minimum(budgets, n)


class ContextCompression(Budgeted):
    """Compress the context once, then read the question through the compressed cache — the
    pipeline kvpress runs its presses in (``pipe(context, question=question, press=press)``).

    The needle prompts end with their question, and the caller says how many tokens it is
    (:attr:`Reading.question`; a prompt with no question named ends with :attr:`window` tokens
    read as one): they are read after the compression (each admitted, as every later token),
    the tokens before them are the context, as kvpress separates them. A subclass says which
    context positions each head keeps (:meth:`choose`), at most ``budget - question`` a head on
    average (:meth:`n_keep`), so that a row holds ``budget`` slots a head once the question is
    read. A prompt that fits the budget is read whole, nothing compressed.

    A text read one token at a time has no context to compress once. A kind whose method also
    runs as the model decodes (:attr:`~CacheKind.decode_policy`: K-norm, Expected Attention,
    KVzip) says ``closed_loop = True`` and runs that policy there, one eviction a token in every
    (layer, KV head) with the same recent window of 32, each handed what it reads as the model
    writes it (:mod:`h2o.model.fed_heads`). (kvpress runs a scorer press such as K-norm or
    Expected Attention while decoding with its ``DecodingPress``, which cuts the whole cache back
    to a target size at an interval of steps, with no recent window; it takes no KVzip.) Its
    bytes then count what the stepped policy holds too (:meth:`stepped_bytes`)."""

    closed_loop = False  # it compresses a prompt once: no perplexity over a text (by default)
    quantizable = False
    #: the prompt's last tokens read after the compression when the caller names no question
    #: (and the recent window of the policy stepped over a text)
    window: ClassVar[int] = 32

    def check(self) -> None:
        super().check()
        r = self.row
        if r.policy != self.kind:
            raise ValueError(
                f"a {self.kind} row has no policy other than {self.kind}: {r.policy!r}"
            )
        if r.allocation is not None:
            raise ValueError(f"{self.kind} spreads its own slots (no allocation)")
        if int(r.budget) <= self.window:  # type: ignore[arg-type]
            raise ValueError(
                f"{self.kind}'s budget must exceed the {self.window} prompt tokens read after "
                f"the compression, got {r.budget}"
            )

    def choose(
        self, model: SmolLM, prompt: list[int], cache: KVCache, context: int, seen: Any = None
    ) -> list:
        """``kept[layer][kv_head]``: the context positions (``< context``) each head keeps,
        :meth:`n_keep` a head on average; ``seen`` is what :meth:`read_context` returned (None
        if the context was read before)."""
        raise NotImplementedError

    def n_keep(self, prompt: list[int], context: int) -> int:
        """The context slots a head keeps: the budget less the question's tokens (the prompt's
        after ``context``), so that the row holds its budget once the question is read."""
        return int(self.row.budget) - (len(prompt) - context)  # type: ignore[arg-type]

    def read_context(
        self, model: SmolLM, part: list[int], cache: KVCache, quant: QuantState | None
    ) -> Any:
        """Read the context ``part[cache.length:]`` under full attention (the prefill); a kind
        that scores from what the prefill computes returns it here, for :meth:`choose`."""
        model.read(part, cache_for(model.config, cache, quant=quant))
        return None

    def read_prompt(self, model, prompt, cache, quant, reading, calibration_ids=None):
        T, budget = len(prompt), int(self.row.budget)  # type: ignore[arg-type]
        if budget >= T:
            hidden = model.read(prompt, cache_for(model.config, cache, quant=quant))
            every, cfg = np.arange(T, dtype=np.int64), model.config
            return hidden, [
                [FixedKeep(every, T - 1) for _ in range(cfg.n_kv_heads)]
                for _ in range(cfg.n_layers)
            ]
        question = self.window if reading.question is None else int(reading.question)
        if not 0 < question < budget:
            raise ValueError(
                f"{self.row.label}: a question of {question} tokens does not fit the budget of "
                f"{budget} (it is read after the compression)"
            )
        context = T - question
        if cache.length > context:
            raise ValueError(
                f"{self.row.label}: the reading was handed {cache.length} tokens, past the "
                f"context's {context} (the question is read after the compression)"
            )
        seen = None
        if cache.length < context:
            seen = self.read_context(model, prompt[:context], cache, quant)
        kept = self.choose(model, prompt, cache, context, seen)
        policies = [[FixedKeep(k, context - 1) for k in heads] for heads in kept]
        # the question, through the compressed cache
        through = cache_for(model.config, cache, policies=policies, quant=quant)
        return model.read(prompt, through), policies

    def prompt_limit(self, n_tokens: int, question: int | None = None) -> int:
        # a shared beginning ends inside the context
        return n_tokens - (self.window if question is None else question)

    # -- over a text (the closed loop) -------------------------------------------------------
    def text_policies(self, model, ids, calibration_ids=None):
        if not self.closed_loop:
            raise ValueError(f"{self.kind} compresses a prompt once: it does not run over a text")
        budget = int(self.row.budget)  # type: ignore[arg-type]
        given = self.scores_ahead(model, [int(i) for i in ids])
        return fed_layers(model, self.decode_policy, budget, len(ids), given)

    def scores_ahead(self, model: SmolLM, ids: list[int]) -> np.ndarray | None:
        """``(n_layers, n_kv_heads, len(ids))``: what the decode policy reads of every position
        before the run (KVzip's scores); None for a policy fed as the model writes."""
        return None

    def stepped_bytes(self, cfg, n_tokens: int) -> int:
        """The stepped policy's bookkeeping a slot (its position and score, as H2O's) and what
        one instance holds beyond its slots (Expected Attention's query statistics)."""
        if not self.closed_loop:
            return 0
        cls = POLICIES[self.decode_policy]
        slots = int(self.slots(cfg, n_tokens).sum())
        state = cls.state_bytes(cfg.head_dim, cfg.group_size)
        return slots * int(cls.nbytes_per_slot) + cfg.n_layers * cfg.n_kv_heads * state
