"""The result files of ``traces/results/``: one schema for a line (in memory, on disk and in the
app) and one bounded reader for every file.

``needle-grid.jsonl`` (:class:`Cell`), ``followup.jsonl`` (:class:`FollowUpCell`) and
``frontier.jsonl`` (:class:`FrontierRow`) are written cell by cell by ``python -m h2o needle`` /
``followup`` / ``frontier``, so a file may be partial and a resumed run may repeat a cell: a
line's key (:func:`needle_key`, …) is the cell the runner resumes on and the one a reader keeps
the last of. :func:`read_lines` reads them within bounds and checks every field; the JSON results
(``allocation-*.json``, ``lighthouse-*.json``, ``attention-band.json``) are read by
:func:`read_json`. No streamlit here: the app caches both per file version
(:mod:`app.needle.shipped`, :func:`app.model_runs.shipped_result`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from h2o.model.rows import Row

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "traces" / "results"
GRID_FILE = "needle-grid.jsonl"
FRONTIER_FILE = "frontier.jsonl"
FOLLOWUP_FILE = "followup.jsonl"
BAND_FILE = "attention-band.json"
#: Bounds on what is read: a grid of every row at 4 lengths × 5 depths is well under this.
MAX_BYTES = 32 * 2**20
MAX_LINES = 200_000
MAX_LINE = 64 * 2**10
#: The JSON results are ours and small (tens of kB); a bigger one is not read.
JSON_MAX_BYTES = 4 * 2**20
#: Problems listed by name; past this many, only their count.
MAX_PROBLEMS = 20


# -- a line's key: the cell it holds ---------------------------------------------------------------
def needle_key(line: dict) -> tuple[str, int, int, str]:
    """A needle cell: (row, length, depth, needle)."""
    return (str(line["row"]), int(line["length"]), int(line["depth"]), str(line["needle"]))


def followup_key(line: dict) -> tuple[str, int, int, int, str, str]:
    """A follow-up cell: (row, length, depth of the first fact, of the second, the two)."""
    return (
        str(line["row"]),
        int(line["length"]),
        int(line["depth_first"]),
        int(line["depth_second"]),
        str(line["first"]),
        str(line["second"]),
    )


def frontier_key(line: dict) -> tuple[str, str, int]:
    """A frontier line: (row, text, tokens)."""
    return (str(line["row"]), Path(str(line["text"])).name, int(line["tokens"]))


# -- the schema ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RowColumns:
    """The row's columns every results line starts with (:func:`h2o.needle.cells.row_fields`)."""

    row: str
    family: str
    kind: str
    policy: str | None
    budget: int | None
    allocation: str | None
    bits: int | None
    sinks: int


@dataclass(frozen=True)
class Cell(RowColumns):
    """One line of the needle grid: a row (what holds the cache) at one length and depth."""

    length: int
    depth: int
    needle: str
    question: str
    expected: str
    produced: str
    correct: bool
    logprob: float
    held: tuple[float, ...] | None
    kv_bytes: int
    seconds: float
    prompt_tokens: int | None = None  # the prompt's own length (at most ``length``), if recorded
    needle_span: tuple[int, int] | None = None  # [start, stop) of the needle's tokens, if recorded
    #: what one decoding step reads of the cache, where the line records it: a row that reads a
    #: part of what it holds (Quest); absent, a step reads every byte it holds
    read_bytes: int | None = None

    @property
    def bytes_read(self) -> int:
        """What one decoding step reads: :attr:`read_bytes`, else every byte held."""
        return self.kv_bytes if self.read_bytes is None else self.read_bytes

    @property
    def tokens(self) -> int:
        """The tokens the cache read before the answer: the prompt's own length when the line
        records it, else the cell's nominal length."""
        return self.prompt_tokens or self.length


@dataclass(frozen=True)
class FollowUpCell(RowColumns):
    """One line of the second-question file: two facts, the first asked, then the second on
    the same cache."""

    length: int
    depth_first: int
    depth_second: int
    first: str
    second: str
    correct_first: bool
    correct_second: bool
    logprob_first: float
    logprob_second: float
    kv_bytes: int
    prompt_tokens: int
    #: what one step after the prompt reads of the cache, where the line records it (Quest)
    read_bytes: int | None = None

    @property
    def key(self) -> tuple[int, int, int, str, str]:
        """The cell, whatever the row: the same facts at the same depths and length."""
        return (self.length, self.depth_first, self.depth_second, self.first, self.second)


@dataclass(frozen=True)
class FrontierRow(RowColumns):
    """One line of the frontier: a row's perplexity on a text and the bytes it held."""

    text: str
    tokens: int
    perplexity: float
    kv_bytes: int
    kv_bytes_per_token: float
    seconds: float
    #: what one step reads of the cache on average over the text, and that as a share of what
    #: the cache holds at the step, where the line records them (Quest)
    read_bytes: int | None = None
    read_share: float | None = None


class BadField(ValueError):
    pass


def _str(d: dict, key: str, *, optional: bool = False, limit: int = 4000) -> str | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise BadField(f"{key!r} must be a string")
    if len(v) > limit:
        raise BadField(f"{key!r} is longer than {limit:,} characters")
    return v


def _int(d: dict, key: str, *, optional: bool = False, lo: int = 0, hi: int = 2**62) -> int | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadField(f"{key!r} must be an integer from {lo:,} to {hi:,}")
    return v


def _float(d: dict, key: str, *, lo: float = -math.inf, hi: float = math.inf) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise BadField(f"{key!r} must be a finite number")
    if not lo <= v <= hi:
        raise BadField(f"{key!r} must be between {lo:g} and {hi:g}")
    return float(v)


def _common(d: object) -> dict:
    """The fields every line has: the row and what it is."""
    from h2o.model import rows  # here: the runner reads its own lines without importing them

    if not isinstance(d, dict):
        raise BadField("not a JSON object")
    kind = _str(d, "kind")
    if kind not in rows.kinds():
        raise BadField(f"'kind' must be one of {', '.join(rows.kinds())}")
    return {
        "row": _str(d, "row", limit=80),
        "family": _str(d, "family", limit=80),
        "kind": kind,
        "policy": _str(d, "policy", optional=True, limit=80),
        "budget": _int(d, "budget", optional=True, lo=1),
        "allocation": _str(d, "allocation", optional=True, limit=40),
        "bits": _int(d, "bits", optional=True, lo=1, hi=16),
        "sinks": _int(d, "sinks", hi=2**20),
    }


def parse_cell(d: Any) -> Cell:
    """One grid line's object as a :class:`Cell`; ``ValueError`` naming the first bad field."""
    common = _common(d)
    held = d.get("held")
    if held is not None:
        if not isinstance(held, list) or len(held) > 4096:
            raise BadField("'held' must be a list of shares (one per layer) or null")
        try:
            held = tuple(_float({"held": h}, "held", lo=0.0, hi=1.0) for h in held)
        except BadField as e:
            raise BadField("'held' must hold shares between 0 and 1") from e
    correct = d.get("correct")
    if not isinstance(correct, bool):
        raise BadField("'correct' must be true or false")
    span = d.get("needle_span")
    if span is not None:
        ok = (
            isinstance(span, list)
            and len(span) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in span)
            and 0 <= span[0] < span[1] <= 2**31
        )
        if not ok:
            raise BadField("'needle_span' must be [start, stop) token positions or null")
        span = (span[0], span[1])
    return Cell(
        **common,
        length=_int(d, "length", lo=1),
        depth=_int(d, "depth", hi=100),
        needle=_str(d, "needle", limit=80),
        question=_str(d, "question"),
        expected=_str(d, "expected"),
        produced=_str(d, "produced"),
        correct=correct,
        logprob=_float(d, "logprob", hi=0.0),
        held=held,
        kv_bytes=_int(d, "kv_bytes"),
        seconds=_float(d, "seconds", lo=0.0),
        prompt_tokens=_int(d, "prompt_tokens", optional=True, lo=1),
        needle_span=span,
        read_bytes=_int(d, "read_bytes", optional=True),
    )


def parse_followup(d: Any) -> FollowUpCell:
    """One follow-up line's object; ``ValueError`` naming the first bad field."""
    common = _common(d)
    for k in ("correct_first", "correct_second"):
        if not isinstance(d.get(k), bool):
            raise BadField(f"{k!r} must be true or false")
    return FollowUpCell(
        **common,
        length=_int(d, "length", lo=1),
        depth_first=_int(d, "depth_first", hi=100),
        depth_second=_int(d, "depth_second", hi=100),
        first=_str(d, "first", limit=80),
        second=_str(d, "second", limit=80),
        correct_first=d["correct_first"],
        correct_second=d["correct_second"],
        logprob_first=_float(d, "logprob_first", hi=0.0),
        logprob_second=_float(d, "logprob_second", hi=0.0),
        kv_bytes=_int(d, "kv_bytes"),
        prompt_tokens=_int(d, "prompt_tokens", lo=1),
        read_bytes=_int(d, "read_bytes", optional=True),
    )


def parse_frontier(d: Any) -> FrontierRow:
    """One frontier line's object as a :class:`FrontierRow`; ``ValueError`` naming the field."""
    common = _common(d)
    return FrontierRow(
        **common,
        text=_str(d, "text", limit=200),
        tokens=_int(d, "tokens", lo=1),
        perplexity=_float(d, "perplexity", lo=1.0),
        kv_bytes=_int(d, "kv_bytes"),
        kv_bytes_per_token=_float(d, "kv_bytes_per_token", lo=0.0),
        seconds=_float(d, "seconds", lo=0.0),
        read_bytes=_int(d, "read_bytes", optional=True),
        read_share=None if d.get("read_share") is None else _float(d, "read_share", lo=0, hi=1),
    )


# -- the files -------------------------------------------------------------------------------------
@dataclass
class Loaded:
    """What a reader found: the good records, what was wrong (by line), and the sidecar."""

    records: list = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    n_problems: int = 0
    repeated: int = 0
    meta: dict | None = None
    missing: bool = False  # the file is not there at all
    name: str = ""  # the file's name (a command that wrote another was merged into it)
    #: the file does not end with a newline (a writer killed mid-write): a writer rewrites it
    cut: bool = False

    def problem(self, text: str) -> None:
        self.n_problems += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)


def read_lines(
    path: Path,
    parse: Callable[[Any], Any] | None = None,
    key: Callable[[dict], Hashable] | None = None,
    *,
    resume: bool = False,
) -> Loaded:
    """Every good line of a JSON Lines results file as ``parse(object)`` (the object itself for
    None), the last of those with the same ``key`` (every line for None).

    At most :data:`MAX_BYTES` bytes and :data:`MAX_LINES` lines are read (a bigger file is
    refused, not read), no line longer than :data:`MAX_LINE`. A bad line (not JSON, not an
    object, a field ``parse`` refuses) is skipped and named in ``problems``; with
    ``resume=True`` (the runner reading the file it appends to) the half line of a writer killed
    mid-write, the last, is dropped (:attr:`Loaded.cut`) and any other is a ``ValueError``."""
    out = Loaded(name=path.name)

    def bad(text: str, last: bool = False) -> None:
        if not resume:
            out.problem(text)
        elif not last:
            raise ValueError(f"{path}: {text}; remove it or the file")

    try:
        size = path.stat().st_size
    except OSError:
        out.missing = True
        return out
    if size > MAX_BYTES:
        bad(f"the file is {size / 2**20:.0f} MiB, over the {MAX_BYTES // 2**20} MiB read")
        return out
    kept: dict = {}
    try:
        with path.open("rb") as f:
            for n, raw in enumerate(f, 1):
                if n > MAX_LINES:
                    bad(f"only the first {MAX_LINES:,} lines were read")
                    break
                last = not raw.endswith(b"\n")  # only the file's last line can lack one
                out.cut |= last
                if len(raw) > MAX_LINE:
                    bad(f"line {n}: longer than {MAX_LINE // 1024} KiB", last)
                    continue
                if not raw.strip():
                    continue
                try:
                    d = json.loads(raw.decode("utf-8"))
                    if not isinstance(d, dict):
                        raise BadField("not a JSON object")
                    rec = d if parse is None else parse(d)
                except ValueError as e:  # BadField names the field; a JSON error's own text
                    bad(f"line {n}: {str(e)[:160]}", last)
                    continue
                k = n if key is None else key(d)
                if k in kept:
                    out.repeated += 1
                    del kept[k]  # the later line wins, and takes the later place
                kept[k] = rec
    except OSError as e:
        bad(f"could not read the file: {e.strerror or e}")
    out.records = list(kept.values())
    out.meta = read_meta(path)
    return out


def read_grid(path: Path) -> Loaded:
    """Every good cell of a ``needle-grid.jsonl`` (a cell is row × length × depth × needle)."""
    return read_lines(path, parse_cell, needle_key)


def read_followup(path: Path) -> Loaded:
    """Every good cell of a ``followup.jsonl`` (row × length × depths × the two facts)."""
    return read_lines(path, parse_followup, followup_key)


def read_frontier(path: Path) -> Loaded:
    """Every good row of a ``frontier.jsonl`` (one per row, text and length)."""
    return read_lines(path, parse_frontier, frontier_key)


def read_json(path: Path) -> Any:
    """A JSON results file, or None if it is missing, damaged or bigger than
    :data:`JSON_MAX_BYTES`."""
    try:
        if path.stat().st_size > JSON_MAX_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a folder's read fails too
        return None


def read_meta(path: Path) -> dict | None:
    """A results file's sidecar, ``<path>.meta.json`` (None when missing or not an object)."""
    meta = read_json(path.with_name(path.name + ".meta.json"))
    return meta if isinstance(meta, dict) else None


def attention_band(d: object) -> dict | None:
    """``attention-band.json``'s object (the model's local attention band per layer and the
    warm-up steps it was measured after), checked; None when it is not of that schema."""
    band = d.get("band") if isinstance(d, dict) else None
    warmup = d.get("warmup") if isinstance(d, dict) else None
    ok = (
        isinstance(band, list)
        and 0 < len(band) <= 4096
        and all(isinstance(b, int) and not isinstance(b, bool) and 0 < b < 2**31 for b in band)
    )
    if not ok or not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 1:
        return None
    return {"band": band, "warmup": warmup}


@dataclass(frozen=True)
class Command:
    """One distinct command in a file's sidecar: how many runs used it (a resumed grid repeats
    its command), their wall time in all (seconds) and the file it wrote, when it says."""

    text: str
    runs: int
    wall: float
    out: str | None


def commands(meta: dict | None) -> list[Command]:
    """The distinct commands that made a file, in the order first run, from its sidecar's
    ``runs`` (one per resumed run) or its own ``command`` and ``wall_seconds``."""
    if not isinstance(meta, dict):
        return []
    runs = meta.get("runs") if isinstance(meta.get("runs"), list) else [meta]
    seen: dict[str, list[float]] = {}
    for r in runs:
        if not isinstance(r, dict) or not isinstance(r.get("command"), str):
            continue
        w = r.get("wall_seconds")
        ok = isinstance(w, int | float) and not isinstance(w, bool) and math.isfinite(w)
        seen.setdefault(r["command"][:2000], []).append(float(w) if ok else 0.0)
    return [Command(c, len(ws), sum(ws), _out_of(c)) for c, ws in seen.items()]


def _out_of(command: str) -> str | None:
    """The ``--out`` a command names (the file it wrote), or None."""
    words = command.split()
    for i, w in enumerate(words[:-1]):
        if w == "--out":
            return words[i + 1]
    return None


# -- what the pages share, once per server -------------------------------------------------------
#: Row label → its parsed row, for the labels this server could parse (a label's meaning never
#: changes; one that failed may parse once its policy is loaded, so failures are not kept).
_PARSED: dict[str, Row] = {}


def parsed(label: str) -> Row | None:
    """``Row.parse(label)``, once per label per server; None if this server cannot read it (a
    policy it does not know). Read it only: every page shares it."""
    from h2o.model.rows import Row

    row = _PARSED.get(label)
    if row is None:
        try:
            row = _PARSED[label] = Row.parse(label)
        except ValueError:
            return None
    return row


#: (id of a shipped file's records, what) → (those records, what was derived from them): the
#: records are one read-only tuple per file version (:mod:`app.needle.shipped`), so every
#: student's run of every page shares one computation (the identity check guards a reused id).
_DERIVED: dict[tuple[int, Hashable], tuple[object, object]] = {}


def derived(records: object, what: Hashable, compute: Callable[[], T]) -> T:
    """``compute()`` once per server for this version of a shipped file's ``records`` (a
    tuple; anything else is computed afresh each time). The result is shared: read it only."""
    if not isinstance(records, tuple):
        return compute()
    hit = _DERIVED.get((id(records), what))
    if hit is not None and hit[0] is records:
        return hit[1]  # type: ignore[return-value]
    value = compute()
    if len(_DERIVED) >= 128:  # a few file versions, each with a few dozen views at most
        _DERIVED.clear()
    _DERIVED[(id(records), what)] = (records, value)
    return value
