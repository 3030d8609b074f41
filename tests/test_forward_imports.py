"""The forward pass knows no kind of cache: ``h2o/model/forward.py`` imports nothing about
eviction, quantization or selection — it calls one interface (:mod:`h2o.model.cache_api`), and
each kind of cache lives behind it in its own module.

Every ``import`` of the file is read with :mod:`ast`, at module level and inside functions alike
(an import deferred into a function is still a dependency), except those under
``if TYPE_CHECKING:`` (never run). Relative imports are resolved against ``h2o.model``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_import_cycles import _type_checking_only

ROOT = Path(__file__).resolve().parents[1]
FORWARD = ROOT / "h2o" / "model" / "forward.py"

#: What the forward pass must not import (a module or anything inside it).
FORBIDDEN = (
    "h2o.model.closed_loop",
    "h2o.model.caches",
    "h2o.model.quant",
    "h2o.replay_selection",
    "h2o.policies",
    "h2o.bank",
    "h2o.model.rows",
    "h2o.model.allocation",
)


def imported_modules(source: str, package: str = "h2o.model") -> set[str]:
    """Every module ``source`` imports (``from a import b``: ``a`` and ``a.b``, since ``b`` may
    be a module), outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(source)
    skip = _type_checking_only(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def forbidden_in(source: str) -> list[str]:
    return sorted(
        m for m in imported_modules(source) for f in FORBIDDEN if m == f or m.startswith(f + ".")
    )


def test_the_forward_pass_imports_no_kind_of_cache() -> None:
    assert forbidden_in(FORWARD.read_text()) == []


@pytest.mark.parametrize(
    "line",
    [
        "from h2o.model.closed_loop import as_heads",
        "import h2o.model.quant",
        "from h2o.model.caches.quest_cache import PageReads",
        "from h2o import replay_selection",
        "from .rows import Row",
        "def f():\n    from h2o.bank.kernels import gather_kept",
        "from h2o.policies import Policy",
        "import h2o.model.allocation as alloc",
    ],
)
def test_the_check_sees_each_kind_of_import(line: str) -> None:
    assert forbidden_in(line) != []


def test_the_check_skips_type_checking_blocks_only() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from h2o.model.quant import QuantState\n"
        "from h2o.model.cache_api import Cache\n"
        "from h2o.model.mixed import mixed_scores\n"
    )
    assert forbidden_in(source) == []
    assert forbidden_in(source.replace("if TYPE_CHECKING:", "if True:")) != []
