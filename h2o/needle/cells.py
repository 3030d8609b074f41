"""One cell of the needle grid (or one row of the frontier): a spec in, one JSON line out.

A spec is a plain dict (it crosses process and machine boundaries): the cell function loads
the model once per worker process (:func:`worker_model`) and returns one result line, whose
keys traces/results/README.md describes.

* :func:`run_cell` — ``{"row", "length", "depth", "needle", "model"?, "max_new"?}``;
  :func:`run_cells` the cells of one length as one job (:func:`cell_batch`): one row's, or
  several rows' that read a prompt as the full cache does (each prompt read once for them all);
* :func:`run_frontier` — ``{"row", "text", "tokens", "content"?, "model"?}`` (``content``: the
  text itself, else read from the file ``text``);
* :func:`stand_in_cell` — a model-free stand-in with the same keys, computed from the spec
  alone (checks a cluster's set-up in seconds; the runner's tests use it).
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from h2o.needle.haystack import DEPTHS, LENGTHS, TEXTS_DIR, build_prompt
from h2o.needle.needles import NEEDLES, first_line, is_correct, needle

if TYPE_CHECKING:
    from h2o.model.rows import Row

#: The greedy continuation's length: a four-digit code and its full stop fit in 8 tokens.
MAX_NEW = 8
#: Duo classifies heads on a text that is not the haystack's first part.
CALIBRATION_TEXT = "lighthouse.txt"
CALIBRATION_TOKENS = 2048

_MODELS: dict[str | None, Any] = {}
_CALIBRATION: dict[str | None, list[int]] = {}


def worker_model(path: str | None = None):
    """The model of this process (loaded on first use, ≈3 s; kept for every later cell)."""
    if path not in _MODELS:
        from h2o.model.forward import SmolLM

        _MODELS[path] = SmolLM.load(path)
    return _MODELS[path]


def _calibration_ids(path: str | None, model) -> list[int]:
    if path not in _CALIBRATION:
        text = (TEXTS_DIR / CALIBRATION_TEXT).read_text(encoding="utf-8")
        _CALIBRATION[path] = model.encode(text)[:CALIBRATION_TOKENS]
    return _CALIBRATION[path]


def cell_needles(length: int, depth: int, count: int = 1) -> list[str]:
    """The needles asked in cell (length, depth): rotating through :data:`NEEDLES`, so that
    one needle per cell over the 4 × 5 standard cells asks 20 different facts. A cell off the
    standard lengths and depths starts at a place fixed by its coordinates."""
    if count < 1 or count > len(NEEDLES):
        raise ValueError(f"needles per cell must be 1..{len(NEEDLES)}, got {count}")
    if length in LENGTHS and depth in DEPTHS:
        base = LENGTHS.index(length) * len(DEPTHS) + DEPTHS.index(depth)
    else:
        base = zlib.crc32(f"{length}:{depth}".encode())
    return [NEEDLES[(base + j) % len(NEEDLES)].id for j in range(count)]


def row_fields(row: Row | str) -> dict[str, Any]:
    """The row's columns of a result line: label, family, kind, policy, budget, allocation,
    bits, sinks (of the row, or of the label :meth:`h2o.model.rows.Row.parse` reads)."""
    from h2o.model.rows import Row

    if not isinstance(row, Row):
        row = Row.parse(row)
    return {
        "row": row.label,
        "family": row.family,
        "kind": row.kind,
        "policy": row.policy,
        "budget": row.budget,
        "allocation": row.allocation,
        "bits": row.bits,
        "sinks": row.sinks,
    }


def run_cell(spec: dict, load: Callable[[], Any] | None = None) -> dict:
    """Score one needle cell under one row: greedy answer and teacher-forced log-prob.

    ``load`` gives the model when the host already holds one (the app's server passes its own
    loader, so a recomputed cell does not load a second copy); by default this process keeps
    its own (:func:`worker_model`)."""
    return run_cells([spec], load)[0]


#: :func:`cell_batch`'s row for the rows that read a prompt as the full cache does.
FULL_READING = "*reads as the full cache*"


def cell_batch(spec: dict) -> tuple:
    """The cells :func:`run_cells` takes as one job: one length, model and answer length, and
    one row — or every row that reads a prompt as the full cache does
    (:func:`h2o.model.answer.reads_prompt_as_full`; :data:`FULL_READING` stands for them)."""
    from h2o.model.rows import Row

    return _batch(spec, Row.parse(spec["row"]))


def _batch(spec: dict, row: Row) -> tuple:
    """:func:`cell_batch` of ``spec``, its row already read (``row``)."""
    from h2o.model.answer import reads_prompt_as_full

    name = FULL_READING if reads_prompt_as_full(row) else spec["row"]
    return (name, int(spec["length"]), spec.get("model"), int(spec.get("max_new", MAX_NEW)))


def run_cells(specs: list[dict], load: Callable[[], Any] | None = None) -> list[dict]:
    """:func:`run_cell` of every spec (one :func:`cell_batch`), the same lines, reading what
    the cells share once (:func:`h2o.model.answer.score_rows`): the haystack their prompts
    share, and each prompt for every row that reads it as the full cache does. A line's
    ``seconds`` is its own time plus its share of that reading."""
    from h2o.model.answer import score_rows
    from h2o.model.rows import Row

    if not specs:
        return []
    t0 = time.perf_counter()
    # each label read once: a job's cells share a few rows, and what follows takes the Row
    parsed = {label: Row.parse(label) for label in dict.fromkeys(s["row"] for s in specs)}
    row_of = [parsed[s["row"]] for s in specs]
    batches = {_batch(s, r) for s, r in zip(specs, row_of, strict=True)}
    if len(batches) != 1:
        got = sorted(map(str, batches))
        raise ValueError(
            "one job is one length, model and max_new, and one row or rows that read a prompt "
            f"as the full cache does, got {got}"
        )
    first = specs[0]
    rows = {r.label: r for r in row_of}
    label_of = [r.label for r in row_of]  # one spelling a row
    fields = {label: row_fields(row) for label, row in rows.items()}
    model = load() if load is not None else worker_model(first.get("model"))
    where = list(dict.fromkeys((int(s["depth"]), s["needle"]) for s in specs))
    needles = [needle(nd) for _, nd in where]
    prompts = [
        build_prompt(model.encode, nd, int(first["length"]), depth)
        for (depth, _), nd in zip(where, needles, strict=True)
    ]
    duo = any(r.allocation == "duo" for r in rows.values())
    cal = _calibration_ids(first.get("model"), model) if duo else None
    setup = (time.perf_counter() - t0) / len(specs)
    cell_of = [where.index((int(s["depth"]), s["needle"])) for s in specs]
    asked: dict[str, list[int]] = {label: [] for label in rows}
    for label, c in zip(label_of, cell_of, strict=True):
        asked[label].append(c)
    scores = score_rows(
        model,
        [(p.ids, p.answer_ids, p.needle_span, p.question_tokens) for p in prompts],
        list(rows.values()),
        cells_of=asked,
        max_new=int(first.get("max_new", MAX_NEW)),
        calibration_ids=cal,
    )
    taken = {label: iter(scores[label]) for label in rows}
    out = []
    for label, c in zip(label_of, cell_of, strict=True):
        prompt, nd, score = prompts[c], needles[c], next(taken[label])
        out.append(
            {
                **fields[label],
                "length": prompt.length,
                "depth": prompt.depth,
                "needle": nd.id,
                "question": nd.question,
                "expected": nd.value,
                "produced": first_line(score.produced),
                "correct": is_correct(score.produced, nd.value),
                "logprob": round(score.logprob, 4),
                "held": None if score.held is None else [round(h, 4) for h in score.held],
                "kv_bytes": int(score.kv_bytes),
                # a row that reads a part of what it holds (Quest) says what a step reads
                **({} if score.read_bytes == score.kv_bytes else {"read_bytes": score.read_bytes}),
                "prompt_tokens": len(prompt.ids),
                "needle_span": list(prompt.needle_span),
                "seconds": round(setup + score.seconds, 3),
            }
        )
    return out


#: The follow-up cells: the two facts' depths (each order), and how many needle pairs a length.
FOLLOWUP_DEPTHS: tuple[tuple[int, int], ...] = ((25, 75), (75, 25))
FOLLOWUP_PAIRS = 3


def followup_pairs(length: int, count: int = FOLLOWUP_PAIRS) -> list[tuple[str, str]]:
    """The needle pairs asked at ``length``: consecutive needles after the grid's own rotation
    (fixed by the length alone, so every row meets the same pairs)."""
    if not 1 <= count <= len(NEEDLES) // 2:
        raise ValueError(f"pairs per length must be 1..{len(NEEDLES) // 2}, got {count}")
    base = zlib.crc32(f"followup:{length}".encode())
    return [
        (NEEDLES[(base + 2 * j) % len(NEEDLES)].id, NEEDLES[(base + 2 * j + 1) % len(NEEDLES)].id)
        for j in range(count)
    ]


def run_followup(spec: dict, load: Callable[[], Any] | None = None) -> dict:
    """One follow-up cell: ``{"row", "length", "depth_first", "depth_second", "first",
    "second", "model"?}`` — the first fact asked, then the second on the same cache."""
    from h2o.model.followup import score_followup
    from h2o.model.rows import Row
    from h2o.needle.haystack import build_followup

    t0 = time.perf_counter()
    row = Row.parse(spec["row"])
    fields = row_fields(row)
    a, b = needle(spec["first"]), needle(spec["second"])
    da, db = int(spec["depth_first"]), int(spec["depth_second"])
    model = load() if load is not None else worker_model(spec.get("model"))
    f = build_followup(model.encode, a, b, int(spec["length"]), da, db)
    cal = _calibration_ids(spec.get("model"), model) if row.allocation == "duo" else None
    sc = score_followup(
        model,
        f.ids,
        f.answer_ids,
        f.turn_ids,
        f.second_answer_ids,
        row,
        second_span=f.spans[1],
        question=f.question_tokens,
        max_new=int(spec.get("max_new", MAX_NEW)),
        calibration_ids=cal,
    )
    first, second = model.decode(sc.produced), model.decode(sc.second_produced)
    return {
        **fields,
        "length": f.length,
        "depth_first": da,
        "depth_second": db,
        "first": a.id,
        "second": b.id,
        "produced_first": first_line(first),
        "produced_second": first_line(second),
        "correct_first": is_correct(first, a.value),
        "correct_second": is_correct(second, b.value),
        "logprob_first": round(sc.logprob, 4),
        "logprob_second": round(sc.second_logprob, 4),
        "held_second": None if sc.held is None else [round(h, 4) for h in sc.held],
        "kv_bytes": int(sc.kv_bytes),
        **({} if sc.read_bytes == sc.kv_bytes else {"read_bytes": int(sc.read_bytes)}),
        "prompt_tokens": len(f.ids),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def run_frontier(spec: dict) -> dict:
    """Closed-loop perplexity of the first ``tokens`` tokens of ``text`` under one row."""
    from h2o.model.answer import text_run
    from h2o.model.rows import Row

    t0 = time.perf_counter()
    row = Row.parse(spec["row"])
    fields = row_fields(row)
    model = worker_model(spec.get("model"))
    text_path = Path(spec["text"])
    # The text travels in the spec when given, so a cluster's workers need no copy of the file.
    content = spec.get("content")
    if content is None:
        content = text_path.read_text(encoding="utf-8")
    ids = model.encode(content)[: int(spec["tokens"])]
    cal = _calibration_ids(spec.get("model"), model) if row.allocation == "duo" else None
    run = text_run(model, ids, row, calibration_ids=cal)
    return {
        **fields,
        "text": text_path.name,
        "tokens": len(ids),
        "perplexity": round(run.perplexity, 4),
        "kv_bytes": int(run.kv_bytes),
        "kv_bytes_per_token": round(run.kv_bytes / len(ids), 3),
        # what a step reads on average over the text, and as a share of what the cache holds
        # at the step, where it reads less than it holds (Quest)
        **(
            {}
            if run.read_share == 1.0
            else {"read_bytes": run.read_bytes, "read_share": round(run.read_share, 4)}
        ),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def stand_in_cell(spec: dict) -> dict:
    """A model-free cell with the needle grid's keys, a pure function of the spec (a hash
    stands in for the model), plus ``pid``-free output so runs compare byte for byte.

    ``spec["sleep"]`` seconds of waiting make it slow enough to interrupt in a test;
    ``spec["fail"] == "exit"`` kills the worker process (a lost worker), ``"raise"`` raises;
    ``spec["fail_once"] = PATH`` kills the worker unless PATH exists, creating it first (a
    worker lost once, the cell fine on its retry)."""
    if spec.get("sleep"):
        time.sleep(float(spec["sleep"]))
    fail = spec.get("fail")
    once = spec.get("fail_once")
    if once and not os.path.exists(once):
        Path(once).touch()
        os.kill(os.getpid(), signal.SIGKILL)  # a worker lost mid-cell
    if fail == "exit":
        os.kill(os.getpid(), signal.SIGKILL)  # a worker lost mid-cell
    if fail == "raise":
        raise RuntimeError(f"stand-in failure in cell {spec['needle']}")
    nd = needle(spec["needle"])
    digest = hashlib.sha256(
        f"{spec['row']}|{spec['length']}|{spec['depth']}|{nd.id}".encode()
    ).digest()
    right = digest[0] % 3 != 0
    produced = nd.value + "." if right else str(1000 + int.from_bytes(digest[1:3], "big") % 9000)
    return {
        "row": spec["row"],
        "length": int(spec["length"]),
        "depth": int(spec["depth"]),
        "needle": nd.id,
        "question": nd.question,
        "expected": nd.value,
        "produced": produced,
        "correct": is_correct(produced, nd.value),
        "logprob": -round(digest[3] / 16, 4),
        "seconds": 0.0,
    }
