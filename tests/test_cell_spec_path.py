"""A needle cell's spec crosses at most five modules on its way from the grid's job to the
forward pass, and its row label is parsed into a :class:`~h2o.model.rows.Row` once a job.

The job is :func:`h2o.needle.cells.run_cells` (the function the grid's workers run) on the tiny
model (``tiny_model.py``), and :func:`h2o.needle.cells.run_frontier` for a frontier row. Under
``sys.setprofile`` every call of a function of ``h2o`` is looked at as it starts: it *receives*
the spec when one of its arguments is a spec dict (or equals one), the label string, or the
``Row`` the label names (the same object or an equal one) — directly, or inside a list, tuple,
set or dict it is handed (two levels deep: ``[(row, cell), ...]``). Its module is then a stop.

A stop is a module of ``h2o``, except that the kinds of cache count as one: a row is asked
about its kind through ``row.cache`` (one class per kind, each kind one file of
:mod:`h2o.model.caches`, every kind's grammar tried in turn when a label is read), and the
path the spec follows is: the job (:mod:`h2o.needle.cells`), the row
(:mod:`h2o.model.rows`), its kind of cache (:mod:`h2o.model.caches`), the scoring
(:mod:`h2o.model.answer`) and the forward pass (:mod:`h2o.model.forward`, which needs only
token ids and a cache) — at most five. A failure prints each stop, each of the kinds' files
apart, with the call chain that first brought the spec there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import pytest

from h2o.model.rows import Row

#: the most modules a cell's spec may cross (see the module docstring)
MOST_STOPS = 5
#: the kinds of cache: one stop, whichever of its files a row's kind is
KINDS_PACKAGE = "h2o.model.caches"
#: containers larger than this are token ids or arrays, never a spec or a row
LARGEST_SCANNED = 256
PARSE = Row.parse.__func__.__code__  # type: ignore[attr-defined]


def in_h2o(module: str) -> bool:
    return module == "h2o" or module.startswith("h2o.")


def stop_of(module: str) -> str:
    return KINDS_PACKAGE if module.startswith(KINDS_PACKAGE + ".") else module


def argument_values(frame: FrameType) -> list[Any]:
    """The values a call's frame was handed (its parameters, ``*args`` and ``**kwargs``)."""
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # CO_VARARGS, CO_VARKEYWORDS
    local = frame.f_locals
    out = []
    for name in code.co_varnames[:n]:
        v = local.get(name)
        if isinstance(v, dict) and name == code.co_varnames[n - 1] and code.co_flags & 0x08:
            out.extend(v.values())  # **kwargs: what was passed by name
        out.append(v)
    return out


@dataclass
class Crossings:
    """Which modules of ``h2o`` receive ``specs``, their labels or their rows, and how many
    times each label is parsed."""

    specs: list[dict]
    labels: set[str] = field(init=False)
    rows: set[Row] = field(init=False)
    #: module -> qualified names of its functions that received the spec
    stops: dict[str, set[str]] = field(default_factory=dict)
    #: module -> the call chain (outermost first) that first brought the spec there
    chains: dict[str, list[str]] = field(default_factory=dict)
    parses: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.labels = {s["row"] for s in self.specs}
        self.rows = {Row.parse(label) for label in self.labels}  # before the profile

    def carries(self, v: Any, depth: int = 0) -> bool:
        if isinstance(v, str):
            return v in self.labels
        if isinstance(v, Row):
            return v in self.rows
        if isinstance(v, dict) and (any(v is s for s in self.specs) or v in self.specs):
            return True
        if depth >= 2:
            return False
        if isinstance(v, list | tuple | set | frozenset) and len(v) <= LARGEST_SCANNED:
            return any(self.carries(x, depth + 1) for x in v)
        if isinstance(v, dict) and len(v) <= LARGEST_SCANNED:
            return any(self.carries(x, depth + 1) for x in v.values())
        return False

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not in_h2o(module):
            return
        args = argument_values(frame)
        got = False
        for v in args:
            try:
                got = self.carries(v)
            except Exception:  # an object half-built (a Row in its __init__), an array's ==
                got = False
            if got:
                break
        if not got:
            return
        if frame.f_code is PARSE and isinstance(args[1], str) and args[1] in self.labels:
            self.parses[args[1]] = self.parses.get(args[1], 0) + 1
        self.stops.setdefault(module, set()).add(frame.f_code.co_qualname)
        if module not in self.chains:
            chain, f = [], frame
            while f is not None:
                name = f.f_globals.get("__name__", "")
                if in_h2o(name):
                    chain.append(f"{name}.{f.f_code.co_qualname}")
                f = f.f_back
            self.chains[module] = chain[::-1]

    def run(self, fn: Callable[[], Any]) -> Any:
        sys.setprofile(self.profile)
        try:
            return fn()
        finally:
            sys.setprofile(None)

    def modules(self) -> list[str]:
        return sorted({stop_of(m) for m in self.stops})

    def report(self) -> str:
        lines = [
            f"{len(self.modules())} stops: {', '.join(self.modules())} "
            f"({len(self.stops)} modules, the kinds' files apart)"
        ]
        for m in sorted(self.stops):
            lines.append(f"  {m}: {', '.join(sorted(self.stops[m]))}")
            lines.append(f"    first via {' -> '.join(self.chains[m])}")
        lines.append(f"Row.parse per label: {self.parses}")
        return "\n".join(lines)


def check(c: Crossings) -> None:
    print(c.report())  # shown with -s, and with a failure
    assert len(c.modules()) <= MOST_STOPS, c.report()
    assert c.parses == dict.fromkeys(c.labels, 1), c.report()  # each label read once a job


@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


def cell(row: str, depth: int, needle: str) -> dict:
    return {"row": row, "length": 512, "depth": depth, "needle": needle, "max_new": 2}


TWO_DEPTHS = ((0, "red-safe"), (100, "black-box"))


@pytest.mark.parametrize("label", ["h2o@64", "h2o@64/pyramid+kivi4", "snapkv@64"])
def test_a_needle_job_of_one_row(model, label):
    from h2o.needle.cells import run_cells

    specs = [cell(label, d, nd) for d, nd in TWO_DEPTHS]
    c = Crossings(specs)
    lines = c.run(lambda: run_cells(specs, load=lambda: model))
    assert [ln["row"] for ln in lines] == [label, label]
    check(c)


def test_a_needle_job_of_rows_that_read_as_the_full_cache(model):
    from h2o.needle.cells import cell_batch, run_cells

    specs = [cell(r, 50, "red-safe") for r in ("full", "kivi4", "quest@64")]
    assert len({cell_batch(s) for s in specs}) == 1  # one job
    c = Crossings(specs)
    c.run(lambda: run_cells(specs, load=lambda: model))
    check(c)


def test_a_frontier_row(tiny_path, tmp_path):
    from h2o.needle.cells import run_frontier

    text = tmp_path / "t.txt"
    text.write_text("the cat and the hat sat on the mat. " * 20, encoding="utf-8")
    spec = {"row": "h2o@64", "text": str(text), "tokens": 96, "model": tiny_path}
    c = Crossings([spec])
    line = c.run(lambda: run_frontier(spec))
    assert line["row"] == "h2o@64" and line["tokens"] == 96
    check(c)


def test_the_grid_around_the_job_is_seen_and_fails_the_check(model):
    """The measure can fail: what the grid's runner does around a job in its own process —
    batching each spec (its label read again), keying and writing each line — adds two
    modules and a parse a spec, and the check refuses it."""
    from h2o.needle.cells import cell_batch, run_cells
    from h2o.needle.grid import dumps
    from h2o.needle.results import needle_key

    specs = [cell("h2o@64", d, nd) for d, nd in TWO_DEPTHS]

    def grid_side() -> None:
        for s in specs:
            cell_batch(s)
        for line in run_cells(specs, load=lambda: model):
            needle_key(line), dumps(line)

    c = Crossings(specs)
    c.run(grid_side)
    assert {"h2o.needle.grid", "h2o.needle.results"} <= set(c.modules())
    assert c.parses == {"h2o@64": 1 + len(specs)}
    with pytest.raises(AssertionError, match="stops"):
        check(c)
