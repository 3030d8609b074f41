"""Your own policy, from a file on this machine: ``path/to/file.py:ClassName``.

The simplest contract is the one the built-in scored policies follow: subclass
:class:`h2o.policies.base.ScoredPolicy`, set ``name`` (a short slug: letters, digits, dashes),
``label`` and ``score_label``, and write a static ``rule(score, attn, n)`` — how one step's
attention changes the ``n`` kept positions' scores, in place, as plain loops that numba compiles
as written (every path runs that code: the instance, the replay, the banks, the model). The
protected window, the argmin with ties to the lower position, the ascending victims and every
input check come from the base class. Any :class:`h2o.policies.Policy` subclass is accepted.

:func:`load_policy` imports the file, checks the class (its type, its names, and a replay of the
toy trace that must keep the budget and return victims in ascending order), and registers it in
:data:`h2o.POLICIES`, where the app and the CLI find it like a built-in one. Only files named by
whoever starts the program are loaded: nothing here takes code from a network.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path

import numpy as np

from .policies import POLICIES, Policy
from .synthetic import toy_trace

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
BUILTIN = tuple(POLICIES)
#: Loaded classes by (file, its mtime, class name): loading again is a lookup, and re-registers
#: the class if something took it out of POLICIES (an edited file is loaded afresh).
_LOADED: dict[tuple[str, int, str], type[Policy]] = {}


def load_policy(spec: str) -> type[Policy]:
    """Load, check and register the policy ``file.py:ClassName``; ``ValueError`` says what is
    wrong (and nothing is registered)."""
    path_text, sep, cls_name = str(spec).rpartition(":")
    if not sep or not path_text or not cls_name.isidentifier():
        raise ValueError(f"a policy is named as file.py:ClassName, got {spec!r}")
    path = Path(path_text).expanduser()
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"{path_text!r} is not a Python file on this machine")
    key = (str(path.resolve()), path.stat().st_mtime_ns, cls_name)
    if key in _LOADED:
        cls = _LOADED[key]
        POLICIES.setdefault(cls.name, cls)
        return cls
    module_name = (
        f"h2o_custom_{re.sub(r'[^0-9a-zA-Z_]', '_', path.stem)}_{abs(hash(path.resolve()))}"
    )
    loader = importlib.util.spec_from_file_location(module_name, path)
    if loader is None or loader.loader is None:
        raise ValueError(f"cannot import {path_text!r}")
    module = importlib.util.module_from_spec(loader)
    try:
        loader.loader.exec_module(module)
    except Exception as e:  # the file is the user's: any error in it is a bad policy file
        raise ValueError(f"importing {path_text!r} failed: {type(e).__name__}: {e}") from None
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise ValueError(f"{path_text!r} defines no {cls_name!r}")
    check_policy(cls)
    sys.modules.setdefault(module_name, module)
    cls.custom = True  # type: ignore[attr-defined]
    POLICIES[cls.name] = cls
    _LOADED[key] = cls
    return cls


def check_policy(cls: object) -> None:
    """Refuse a class that would not behave like a built-in policy, naming the rule it breaks."""
    if not isinstance(cls, type) or not issubclass(cls, Policy):
        raise ValueError(f"{cls!r} is not a subclass of h2o.policies.Policy (or ScoredPolicy)")
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"{cls.__name__}.name must be a short slug (lowercase letters, digits, dashes), "
            f"got {name!r}"
        )
    if name in BUILTIN or (name in POLICIES and POLICIES[name].__qualname__ != cls.__qualname__):
        raise ValueError(f"the name {name!r} is taken by {POLICIES[name].__name__}: choose another")
    for attr in ("label", "score_label"):
        if not isinstance(getattr(cls, attr, None), str) or not getattr(cls, attr):
            raise ValueError(f"{cls.__name__}.{attr} must be a non-empty string")
    params = inspect.signature(cls.__init__).parameters
    small = {k: v for k, v in (("recent_window", 2), ("sinks", 1)) if k in params}
    try:
        policy = cls(8, **small)
        trace = toy_trace()
        for t in range(trace.steps):
            kept = np.array(policy.kept)  # a copy: kept is a view the step overwrites
            row = trace.row(t)[kept] if t else np.zeros(0, np.float32)
            total = float(row.sum())
            policy.on_decode_step(t, (row / total).astype(np.float32) if total > 0 else None)
            victims = policy.evict()
            if victims != sorted(victims) or len(set(victims)) != len(victims):
                raise ValueError(f"evict() returned {victims} at step {t}: not ascending")
            if not set(victims) <= set(kept.tolist()) | {t}:
                raise ValueError(f"evict() returned {victims} at step {t}: not all were kept")
            if len(policy) > 8:
                raise ValueError(f"{len(policy)} positions kept after evict() at budget 8")
            if len(policy.scores) != len(policy):
                raise ValueError("scores are not aligned with kept")
        kept = np.array(policy.kept)
        victims = policy.evict(4)  # several at once: they must still come back ascending
        if victims != sorted(victims) or not set(victims) <= set(kept.tolist()):
            raise ValueError(f"evict(4) returned {victims}: not ascending kept positions")
        if len(policy) != 4:
            raise ValueError(f"{len(policy)} positions kept after evict(4)")
    except ValueError as e:
        raise ValueError(f"{cls.__name__} failed a replay of the toy trace: {e}") from None
    except Exception as e:
        raise ValueError(
            f"{cls.__name__} failed a replay of the toy trace: {type(e).__name__}: {e}"
        ) from None
