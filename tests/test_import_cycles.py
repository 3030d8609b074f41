"""No import circles in h2o/: the modules form layers, each importing only those below it.

The check reads every ``import`` statement of the package's source with :mod:`ast`, at module
level and inside functions alike (an import deferred into a function is still a dependency; it
only moves the moment the loop would bite), but not those under ``if TYPE_CHECKING:`` (never run).
An import counts the module it names (``from a.b import c``: ``a.b.c`` when that is a module,
else ``a.b``'s ``__init__``), not the parent packages Python initialises on the way: a package
that re-exports its modules is not a circle, a module that imports its own package's
``__init__`` is. The strongly connected components of that graph with more than
one module are the circles (Tarjan's algorithm, iterative).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> dict[str, Path]:
    mods = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Line numbers of the statements under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def import_graph(package: str = "h2o") -> dict[str, set[str]]:
    mods = _modules(package)
    graph: dict[str, set[str]] = defaultdict(set)

    def within(target: str) -> str | None:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        return target or None

    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_only(tree)
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for t in targets:
                m = within(t) if t.split(".")[0] == package else None
                if m and m != name:
                    graph[name].add(m)
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(frozenset(comp))
    return out


def test_the_checker_finds_a_circle_through_a_deferred_import_and_a_package():
    graph = {"h2o.a": {"h2o.b"}, "h2o.b": {"h2o.pkg"}, "h2o.pkg": {"h2o.a"}, "h2o.c": {"h2o.a"}}
    assert circles(graph) == [frozenset({"h2o.a", "h2o.b", "h2o.pkg"})]
    assert circles({"h2o.a": {"h2o.b"}, "h2o.b": set()}) == []


def test_the_graph_counts_imports_inside_functions_and_packages_not_type_checking():
    graph = import_graph()
    # h2o.bank.replay imports h2o.bank.base only for type checking
    assert "h2o.bank.base" not in graph["h2o.bank.replay"]
    # the replay's engines are imported at the top of the module, not inside replay()
    assert {"h2o.bank.lane", "h2o.replay_selection", "h2o.stepwise"} <= graph["h2o.replay"]


def test_no_import_circles_in_h2o():
    found = circles(import_graph())
    assert found == [], sorted(sorted(c) for c in found)
