"""No module of the library reads another module's private members: a module's
``_`` names are its own to change.

A name ``_x`` belongs to the module that defines it: a ``def``/``class`` of that name, a
module-level or class-body assignment, or ``self._x = …`` / ``cls._x = …`` in one of its
methods. Anywhere in ``h2o/``, ``obj._x`` is allowed only on ``self``, ``cls`` or ``super()``
(a class's own state, inherited state included), or when ``_x`` is this module's own; and no
module imports a private name from another. Engines reach a policy's state through its public
engine API (``advance_trusted``, ``drop``, ``set_fill``, ``bind``, ``accumulate``, ``select``).
"""

from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "h2o"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own(tree: ast.Module) -> set[str]:
    """The private names this module defines."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
            if isinstance(node, ast.ClassDef):  # class-body assignments and annotations
                for stmt in node.body:
                    targets = (
                        stmt.targets
                        if isinstance(stmt, ast.Assign)
                        else [stmt.target]
                        if isinstance(stmt, ast.AnnAssign)
                        else []
                    )
                    own |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and _is_self(sub.value):
                        own.add(sub.attr)
    own |= {
        t.id
        for stmt in tree.body
        if isinstance(stmt, ast.Assign | ast.AnnAssign)
        for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        if isinstance(t, ast.Name)
    }
    return {n for n in own if _private(n)}


def _is_self(node: ast.AST) -> bool:
    if isinstance(node, ast.Name) and node.id in ("self", "cls"):
        return True
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def violations(source: str, name: str) -> list[str]:
    """Every read of another module's private member in ``source`` (module ``name``)."""
    tree = ast.parse(source)
    own = _own(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not _is_self(node.value) and node.attr not in own:
                out.append(f"{name}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _private(alias.name) and (node.level or (node.module or "").startswith("h2o")):
                    out.append(f"{name}:{node.lineno}: import {alias.name}")
    return out


def test_the_checker_sees_a_private_read_and_a_private_import():
    bad = "from .kernels import _first_min\n\ndef f(p):\n    return p._n\n"
    assert violations(bad, "m") == ["m:1: import _first_min", "m:4: ._n"]
    ok = (
        "class A:\n    _k: int\n    def __init__(self):\n        self._n = 0\n"
        "    def g(self, other):\n        return other._n + other._k + super()._m\n"
    )
    assert violations(ok, "m") == []


def test_no_module_in_the_library_reads_another_modules_private_members():
    found = []
    for path in sorted(LIB.rglob("*.py")):
        found += violations(path.read_text("utf-8"), str(path.relative_to(LIB.parent)))
    assert found == [], "\n".join(found)


def test_the_library_imports_neither_streamlit_nor_plotly():
    """``h2o/`` (the player's front end included) is the app's library, not the app: importing
    every module of it pulls in neither streamlit nor plotly."""
    import subprocess
    import sys

    mods = sorted(
        ".".join(p.relative_to(LIB.parent).with_suffix("").parts).removesuffix(".__init__")
        for p in LIB.rglob("*.py")
        if p.name != "__main__.py"
    )
    probe = (
        "import importlib, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly'))\n"
        "print(bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
