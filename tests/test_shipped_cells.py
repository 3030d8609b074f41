"""The shipped results reproduce: a sample of the lines in ``traces/results/``, recomputed with
today's code, holds the numbers the files hold (``-m model``).

Sampled, so that the file runs in about 90 s of CPU:

* ``needle-grid.jsonl``: one line for every way of holding a cache the file has — each kind of
  cache, and within a kind each distinct set of the label's features that change how a prompt
  is read or held (:func:`reading`: H2O's prefill mode, an allocation, a ``+kiviN``
  combination, a quantized prompt, a KIVI residual, sinks, SnapKV's pooling, a recent window
  named in slots or as a share of the budget). Of each, the cheapest line: the shortest
  ``length``, then the fewest ``seconds``. A kind the file gains later is sampled too.
* ``followup.jsonl``: the cheapest line of a row that evicts and of one that compresses.
* ``frontier.jsonl``: none. Each of its lines is a closed-loop run over 2,048 tokens, over
  10 s of CPU even for its cheapest row, and the lines above take most of the 90 s.

Each cell runs with a one-thread BLAS, as the grid's workers run it (:func:`one_blas_thread`).

A line reproduces when what it answered is the same (``produced``, ``correct``), its bytes are
the same (``kv_bytes``; ``read_bytes`` in both lines or in neither, and then equal), and its
log-probabilities and ``held`` shares are within :data:`TOLERANCE`.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from model_marks import needs_model

from h2o.model.rows import Row

RESULTS = Path(__file__).resolve().parents[1] / "traces" / "results"
#: How far a recomputed log-probability or share may be from the file's (which round to 4 places).
TOLERANCE = 1e-3

CELL_EXACT = ("produced", "correct", "kv_bytes", "read_bytes")
CELL_CLOSE = ("logprob", "held")
FOLLOWUP_EXACT = (
    "produced_first",
    "produced_second",
    "correct_first",
    "correct_second",
    "kv_bytes",
    "read_bytes",
)
FOLLOWUP_CLOSE = ("logprob_first", "logprob_second", "held_second")
FOLLOWUP_GROUPS = ("evict", "compress")


def read(name: str) -> list[dict]:
    path = RESULTS / name
    if not path.is_file():
        return []
    return [json.loads(s) for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]


@cache  # a label's features never change; the file repeats each label many times
def reading(label: str) -> tuple:
    """What a label says about how its row reads and holds a prompt: its kind and group, and
    each option the grammar (:mod:`h2o.model.rows`) names. Two rows that differ only in policy
    or budget read alike."""
    row = Row.parse(label)
    return (
        row.kind,
        row.group,  # an evicting kind with +kiviN is "both"
        row.option("mode"),
        row.allocation,
        row.option("quantized_prompt"),
        row.option("residual"),
        row.sinks > 0,
        row.option("pooling"),
        row.option("window") is not None,
        row.option("window_pct") is not None,
    )


def cheapest(lines: list[dict], by) -> dict:
    """For each ``by(line)``, its cheapest line: the shortest ``length``, then the fewest
    ``seconds`` (the first of equals)."""
    out: dict = {}
    for line in lines:
        k = by(line)
        if k not in out or (line["length"], line["seconds"]) < (
            out[k]["length"],
            out[k]["seconds"],
        ):
            out[k] = line
    return out


def differences(shipped: dict, got: dict, exact: tuple, close: tuple) -> list[str]:
    """Each field where the recomputed line ``got`` is not the ``shipped`` one, with both values
    (empty: it reproduces). A field absent from a line counts as None."""
    out = []
    for f in exact:
        if shipped.get(f) != got.get(f):
            out.append(f"{f}: shipped {shipped.get(f)!r}, now {got.get(f)!r}")
    for f in close:
        a, b = shipped.get(f), got.get(f)
        if a is None or b is None:
            if a is not b:
                out.append(f"{f}: shipped {a!r}, now {b!r}")
            continue
        xs, ys = (a, b) if isinstance(a, list) else ([a], [b])
        if len(xs) != len(ys):
            out.append(f"{f}: shipped {len(xs)} values, now {len(ys)}")
            continue
        # both sides are written to 4 places: a difference of exactly 1e-3 is within
        by = max((round(abs(x - y), 4) for x, y in zip(xs, ys, strict=True)), default=0.0)
        if by > TOLERANCE:
            out.append(f"{f}: shipped {a!r}, now {b!r} (by {by:g})")
    return out


GRID = read("needle-grid.jsonl")
CELLS = sorted(cheapest(GRID, lambda x: reading(x["row"])).values(), key=lambda x: x["row"])
FOLLOWUPS = [
    line
    for g, line in sorted(
        cheapest(read("followup.jsonl"), lambda x: Row.parse(x["row"]).group).items()
    )
    if g in FOLLOWUP_GROUPS
]


@pytest.fixture(autouse=True)
def one_blas_thread():
    """Each cell as the grid computes it, with a one-thread BLAS (a grid of several workers
    holds each to one): a many-thread BLAS sums in another order, and moves a quantized
    cell's last digits (and, on a shared machine, spins its threads on CPU time)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


def cell_id(line: dict) -> str:
    return f"{line['row']}-{line['length']}-{line['depth']}-{line['needle']}"


#: Rows whose shipped lines are known not to reproduce, and why: each is a strict xfail, so a
#: recomputed file (the command is in the reason) turns it into a failure to remove from here.
STALE: dict[str, str] = {}


def stale(line: dict) -> str | None:
    return STALE.get(line["row"])


def cell_params() -> list:
    return [
        pytest.param(x, marks=pytest.mark.xfail(strict=True, reason=stale(x))) if stale(x) else x
        for x in CELLS
    ]


@needs_model
@pytest.mark.parametrize("line", cell_params(), ids=cell_id)
def test_a_shipped_needle_cell_reproduces(line: dict) -> None:
    from h2o.needle.cells import run_cell

    got = run_cell({k: line[k] for k in ("row", "length", "depth", "needle")})
    diffs = differences(line, got, CELL_EXACT, CELL_CLOSE)
    assert not diffs, f"{cell_id(line)}: " + "; ".join(diffs)


@needs_model
@pytest.mark.parametrize("line", FOLLOWUPS, ids=lambda x: f"{x['row']}-{x['first']}")
def test_a_shipped_followup_cell_reproduces(line: dict) -> None:
    from h2o.needle.cells import run_followup

    keys = ("row", "length", "depth_first", "depth_second", "first", "second")
    got = run_followup({k: line[k] for k in keys})
    diffs = differences(line, got, FOLLOWUP_EXACT, FOLLOWUP_CLOSE)
    assert not diffs, f"{[line[k] for k in keys]}: " + "; ".join(diffs)


# -- the sample and the comparison, without the model ----------------------------------------------
def test_the_sample_holds_every_kind_and_way_of_reading_of_the_file() -> None:
    if not GRID:
        pytest.skip("no shipped needle-grid.jsonl")
    assert {x["kind"] for x in CELLS} == {x["kind"] for x in GRID}
    assert {reading(x["row"]) for x in CELLS} == {reading(x["row"]) for x in GRID}
    for line in CELLS:  # none of its kind and way of reading is cheaper
        alike = [x for x in GRID if reading(x["row"]) == reading(line["row"])]
        assert (line["length"], line["seconds"]) == min((x["length"], x["seconds"]) for x in alike)
    assert sorted(Row.parse(x["row"]).group for x in FOLLOWUPS) == sorted(FOLLOWUP_GROUPS)


def test_reading_tells_apart_what_the_grammar_names() -> None:
    alike = [("h2o@128", "tova@256"), ("snapkv@128", "snapkv@512"), ("kivi2", "kivi4")]
    for a, b in alike:
        assert reading(a) == reading(b)
    apart = [
        "h2o@128",
        "h2o@128:w50%",
        "h2o@128:w45",
        "h2o@128:w50%:prefill",
        "h2o@128/pyramid",
        "h2o@128/duo",
        "h2o@128+kivi4",
        "h2o@128+kivi4:r32:qprompt",
        "snapkv@128",
        "snapkv@128:avg5",
        "snapkv@128+kivi4",
        "kivi4",
        "kivi4:qprompt",
        "kivi4:r32",
        "kivi4+sinks",
        "full",
        "quest@128",
    ]
    assert len({reading(r) for r in apart}) == len(apart)


def test_cheapest_is_the_shortest_then_the_fastest() -> None:
    lines = [
        {"row": "a", "length": 1024, "seconds": 1.0},
        {"row": "a", "length": 512, "seconds": 3.0},
        {"row": "a", "length": 512, "seconds": 2.0},
        {"row": "b", "length": 512, "seconds": 9.0},
    ]
    got = cheapest(lines, lambda x: x["row"])
    assert got == {"a": lines[2], "b": lines[3]}


def test_a_changed_value_is_a_difference() -> None:
    """The comparison fails a line that does not reproduce, and only that: each field changed
    in a copy of a shipped line (in memory) is named, a change within the tolerance is not."""
    if not GRID:
        pytest.skip("no shipped needle-grid.jsonl")
    line = next(x for x in CELLS if x["held"] is not None)
    assert differences(line, dict(line), CELL_EXACT, CELL_CLOSE) == []
    held = [round(h + 0.002, 4) for h in line["held"]]
    changed = {
        "produced": line["produced"] + "0",
        "correct": not line["correct"],
        "kv_bytes": line["kv_bytes"] + 1,
        "read_bytes": line["kv_bytes"] // 2,  # a step reads a part: a line it was not
        "logprob": round(line["logprob"] - 0.0011, 4),
        "held": held,
    }
    for field, value in changed.items():
        (diff,) = differences(line, {**line, field: value}, CELL_EXACT, CELL_CLOSE)
        assert diff.startswith(f"{field}: ")
    (diff,) = differences(line, {**line, "held": None}, CELL_EXACT, CELL_CLOSE)
    assert diff.startswith("held: ")
    (diff,) = differences(line, {**line, "held": line["held"][:-1]}, CELL_EXACT, CELL_CLOSE)
    assert diff.startswith("held: ")
    within = {**line, "logprob": round(line["logprob"] - 0.001, 4), "held": line["held"]}
    assert differences(line, within, CELL_EXACT, CELL_CLOSE) == []
