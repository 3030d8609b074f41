"""The registry: every policy by its name, and a policy made from a name and one set of controls.

One place for the CLI, the model and the app: ``POLICIES`` maps a name (``"h2o"``, ``"tova"``, a
policy loaded from your file) to its class; :func:`make_policy` builds one from a name and
whatever controls a caller has (a parameter the policy does not take is dropped);
:func:`refusal` says why a combination would be refused, naming the fix.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .base import Policy
from .expected_attention import ExpectedAttention
from .h2o import H2O
from .key_norm import KeyNorm
from .kvzip import KVzip
from .quest import Quest
from .random import RandomEviction
from .scissorhands import Scissorhands
from .sliding_window import SlidingWindow
from .streaming_llm import StreamingLLM
from .tova import TOVA

#: The library's own classes, one line each: a new method is its file and a line here.
BUILT_IN: tuple[type[Policy], ...] = (
    H2O,
    StreamingLLM,
    Scissorhands,
    TOVA,
    SlidingWindow,
    RandomEviction,
    KeyNorm,
    ExpectedAttention,
    KVzip,
    Quest,
)
POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in BUILT_IN}


@functools.lru_cache(maxsize=1024)
def keywords(init: Callable[..., Any]) -> tuple[str, ...]:
    """The parameter names of a constructor, once per constructor: ``inspect.signature`` is
    slow, and every run of a page builds policies."""
    return tuple(inspect.signature(init).parameters)


def make_policy(name: str, budget: int, **params: Any) -> Policy:
    """Build ``POLICIES[name]`` with the keyword parameters it accepts; others are ignored.

    So ``make_policy("streaming-llm", 256, recent_window=32, sinks=4)`` works from one set of
    controls. ``None`` values are dropped (the policy's default applies).
    """
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    return build(POLICIES[name], budget, **params)


def build(cls: type[Policy], budget: int, **params: Any) -> Policy:
    """``cls(budget, ...)`` with the keyword parameters it accepts (others and ``None`` dropped):
    :func:`make_policy` for a class that is in no registry (one defined in a notebook cell)."""
    accepted = keywords(cls.__init__)
    kw = {k: v for k, v in params.items() if k in accepted and v is not None}
    return cls(budget, **kw)  # rng passes through: every policy accepts one


def refusal(name: str, budget: int, **params: Any) -> str | None:
    """Why ``make_policy(name, budget, **params)`` would be refused (naming the fix), or None."""
    try:
        make_policy(name, budget, **params)
    except ValueError as e:
        label = POLICIES[name].label if name in POLICIES else name
        return f"{label} refuses these settings: {e}."
    return None


def policy_params(name: str) -> list[str]:
    """The tunable keyword parameters of a policy (besides ``budget`` and ``rng``)."""
    return [k for k in keywords(POLICIES[name].__init__) if k not in ("self", "budget", "rng")]


def custom_policies() -> list[str]:
    """The names of the policies loaded from your files (:func:`h2o.custom.load_policy`), in the
    order they were loaded."""
    return [n for n, cls in POLICIES.items() if getattr(cls, "custom", False)]
