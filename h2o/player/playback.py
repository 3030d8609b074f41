"""What the browser needs to step through a view, packed once per range of steps.

The server computes, the browser animates: for one *view* (a trace, two replays, and the settings
they were made with) the browser receives, per loaded *range* of steps, everything a step shows —
each panel's kept scores at every step of the range, its victims, its narration — plus the whole
run's metrics and a max-pooled overview. Stepping, playing, dragging the slider and clicking an
eviction inside the range then cost no round trip (``h2o/player/js/`` draws them); the
browser asks for the next range when the current step nears an edge of this one.

The payload is bytes, not JSON: ``MAGIC``, a little-endian ``uint32`` header length, the header
(UTF-8 JSON), then 8-byte-aligned arrays the header points to as ``[offset, length, dtype]``.
Float32 scores keep every value the hovers print (4 significant digits) exact. Kept *positions* are
not sent: the browser derives them from the first step's and the victims (a step admits its own
position and drops its victims), which halves the payload. Nothing here imports Streamlit, so the
tests decode payloads directly (:func:`decode`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import h2o

MAGIC = b"H2OP"
VERSION = 1
#: Kept-slot scores per panel and range, in cells: about 400 kB of float32, so two panels, their
#: stories and the whole-run series stay under 1.5 MB a load at any budget.
RANGE_CELLS = 100_000
MIN_RANGE, MAX_RANGE = 32, 1024
#: The overview's max-pooled size.
OVERVIEW_BINS = (192, 96)  # steps, positions
_DTYPES = {"f4": np.float32, "i4": np.int32}


# -- ranges ----------------------------------------------------------------------------------------
def range_length(slots: int, steps: int) -> int:
    """Steps per loaded range for panels of at most ``slots`` kept slots (a multiple of 32)."""
    n = max(MIN_RANGE, min(MAX_RANGE, RANGE_CELLS // max(slots, 1) // 32 * 32))
    return min(steps, n)


def margin(length: int) -> int:
    """How close to an edge of the loaded range the step may come before the next is loaded."""
    return length // 4


def needs_load(rng: tuple[int, int], t: int, steps: int) -> bool:
    """Whether step ``t`` is outside ``rng`` or within :func:`margin` of an edge that is not the
    trace's own. The browser applies the same rule (the header carries the margin)."""
    a, b = rng
    m = margin(b - a)
    return not a <= t < b or (t < a + m and a > 0) or (t >= b - m and b < steps)


def range_around(
    t: int, steps: int, length: int, current: tuple[int, int] | None = None
) -> tuple[int, int]:
    """The range to load for step ``t``: ``current`` while it still serves ``t``, else ``length``
    steps centred on ``t`` and snapped to an eighth of the length (so nearby steps give the same
    range, and a repeated request sends the same bytes, which the browser has cached)."""
    if (
        current is not None
        and current[1] - current[0] == length
        and not needs_load(current, t, steps)
    ):
        return current
    snap = max(1, length // 8)
    a = round((t - length / 2) / snap) * snap
    a = max(0, min(a, steps - length))
    return a, a + length


# -- packing ---------------------------------------------------------------------------------------
class _Packer:
    """Arrays laid out back to back, each at an 8-byte boundary."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def put(self, raw: bytes, n: int, dtype: str) -> list:
        pad = -self.size % 8
        if pad:
            self.parts.append(b"\0" * pad)
            self.size += pad
        ref = [self.size, n, dtype]
        self.parts.append(raw)
        self.size += len(raw)
        return ref

    def add(self, arr: np.ndarray, dtype: str) -> list:
        a = np.ascontiguousarray(arr, dtype=_DTYPES[dtype])
        return self.put(a.tobytes(), int(a.size), dtype)


@dataclass(frozen=True)
class Block:
    """One panel's arrays (as packed bytes) and its JSON part, for a range or the whole run."""

    meta: dict[str, Any]
    arrays: dict[str, tuple[bytes, int, str]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b, _, _ in self.arrays.values())


def _block(meta: dict[str, Any], **arrays: tuple[np.ndarray, str]) -> Block:
    out = {}
    for name, (arr, dtype) in arrays.items():
        a = np.ascontiguousarray(arr, dtype=_DTYPES[dtype])
        out[name] = (a.tobytes(), int(a.size), dtype)
    return Block(meta, out)


def token_label(trace: h2o.Trace, pos: int) -> str:
    tok = trace.token(pos)
    return f"position {pos}" + (f" {tok!r}" if tok is not None else "")


def story(rep: h2o.Replay, trace: h2o.Trace, t: int) -> str:
    """The narration of step ``t``, with token strings when the trace has them."""
    text = rep.narrate(t)
    if trace.tokens is not None:
        who = [f"{token_label(trace, t)} admitted"]
        who += [f"{token_label(trace, p)} evicted" for p, _ in rep.victims_at(t)]
        text += "\n" + "; ".join(who)
    return text


def selects(rep: h2o.Replay) -> bool:
    """Whether the replay's "kept" positions are what each step reads (Quest), not a cache."""
    return bool(rep.extra.get("selects", False))


def scored(rep: h2o.Replay) -> bool:
    """Whether the panel colours by score: the policy ever held a score other than 0 (a policy
    without a score, StreamingLLM's or random eviction's, holds only zeros). K-norm's scores are
    negative (minus a key's norm): its panel is scored on a linear scale that starts below 0."""
    lo, hi = score_range(rep)
    return hi > 0 or lo < 0


def counts(rep: h2o.Replay) -> bool:
    """Whether the replay's scores are counts, whole numbers (Scissorhands' votes), as its
    policy's class declares (``score_counts``): its charts tick them in whole numbers. A class
    in no registry declares nothing here."""
    cls = h2o.POLICIES.get(rep.policy)
    return bool(cls is not None and cls.declares("score_counts"))


def score_range(rep: h2o.Replay) -> tuple[float, float]:
    """The smallest and largest score the replay ever held ((0, 0) if none), computed once per
    replay."""
    if "score_range" not in rep.extra:
        ks = rep.kept_score
        finite = ks[np.isfinite(ks)] if ks is not None else np.empty(0)
        rep.extra["score_range"] = (
            (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
        )
    return rep.extra["score_range"]


def range_block(rep: h2o.Replay, trace: h2o.Trace, a: int, b: int) -> Block:
    """A panel's steps ``a..b-1``: fill, the first step's kept positions, scores, victims, story."""
    n_kept = rep.n_kept[a:b]
    kept0 = rep.kept_pos[a, : int(n_kept[0])]  # type: ignore[index]
    i, j = np.searchsorted(rep.victim_step, [a, b])
    arrays: dict[str, tuple[np.ndarray, str]] = {
        "n_kept": (n_kept, "i4"),
        "kept0": (kept0, "i4"),
        "v_step": (rep.victim_step[i:j], "i4"),
        "v_pos": (rep.victim_pos[i:j], "i4"),
        "v_score": (rep.victim_score[i:j], "f4"),
    }
    cols = np.arange(rep.kept_pos.shape[1])  # type: ignore[union-attr]
    mask = cols[None, :] < n_kept[:, None]
    if selects(rep):  # what each step reads: not derived from the step before
        arrays["kept_all"] = (rep.kept_pos[a:b][mask], "i4")  # type: ignore[index]
    if scored(rep):
        arrays["scores"] = (rep.kept_score[a:b][mask], "f4")  # type: ignore[index]
    stories = [story(rep, trace, t) for t in range(a, b)]
    return _block({"stories": stories}, **arrays)


def run_block(rep: h2o.Replay) -> Block:
    """A panel's whole run: per-step metrics, their running means, the max-pooled overview."""
    grid, sx, sy = rep.pooled_grid(*OVERVIEW_BINS)
    band = _overview_band(rep, sx)
    meta = {
        "overview": {"rows": grid.shape[0], "cols": grid.shape[1], "sx": sx, "sy": sy},
        "band": band,
    }
    return _block(
        meta,
        mass=(rep.mass, "f4"),
        recall=(rep.recall, "f4"),
        run_mass=(rep.running_mean("mass"), "f4"),
        run_recall=(rep.running_mean("recall"), "f4"),
        overview=(grid, "f4"),
    )


def _overview_band(rep: h2o.Replay, sx: int) -> list[list[float]] | None:
    """The protected window over the whole run, one stair per overview column: [xs, ys]."""
    if rep.window == 0:
        return None
    top_x, top_y, bot_y = [], [], []
    for s in range(0, rep.steps, sx):
        prot = rep.protected_at(s)
        if prot is None:
            continue
        top_x += [s - sx / 2, s + sx / 2]
        top_y += [prot[1] + 0.5] * 2
        bot_y += [prot[0] - 0.5] * 2
    if not top_x:
        return None
    return [top_x + top_x[::-1], top_y + bot_y[::-1]]


# -- the payload -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Panel:
    """One side of the view: its replay (or the error that prevented it) and how it is drawn."""

    title: str
    colour: str
    replay: h2o.Replay | None = None
    error: str | None = None
    dash: str = "solid"


def colour_ranges(panels: Sequence[Panel]) -> list[tuple[float, float] | None]:
    """The bottom and top of each panel's colour scale: panels that show the same kind of score
    share them (over the whole run, so colours do not shift while stepping); the bottom is 0 but
    for scores below 0 (K-norm's); None if unscored."""
    seen: dict[str, tuple[float, float]] = {}
    for p in panels:
        if p.replay is not None and scored(p.replay):
            lo, hi = score_range(p.replay)
            was = seen.get(p.replay.score_label, (lo, hi))
            seen[p.replay.score_label] = (min(was[0], lo), max(was[1], hi))
    return [
        (min(0.0, seen[p.replay.score_label][0]), seen[p.replay.score_label][1])
        if p.replay is not None and scored(p.replay)
        else None
        for p in panels
    ]


def colour_his(panels: Sequence[Panel]) -> list[float | None]:
    """The top of each panel's colour scale (:func:`colour_ranges`); None if unscored."""
    return [None if r is None else r[1] for r in colour_ranges(panels)]


def encode(
    *,
    view: str,
    trace_id: str,
    trace: h2o.Trace,
    panels: Sequence[Panel],
    rng: tuple[int, int],
    range_blocks: Sequence[Block | None],
    run_blocks: Sequence[Block | None],
    start: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> bytes:
    """The payload: header JSON and arrays (see the module docstring).

    ``range_blocks``/``run_blocks`` are per panel (None for a panel with an error); ``start`` holds
    the step and view settings the browser adopts when it first sees ``view``; ``extra`` goes into
    the header as is (highlights, the plotly.js URL, presenter mode …).
    """
    a, b = rng
    pk = _Packer()
    oracle = next((p.replay.oracle for p in panels if p.replay is not None), None)
    ranges = colour_ranges(panels)
    out_panels = []
    for p, span, rb, wb in zip(panels, ranges, range_blocks, run_blocks, strict=True):
        entry: dict[str, Any] = {"title": p.title, "colour": p.colour, "dash": p.dash}
        rep = p.replay
        if rep is None or rb is None or wb is None:
            entry["error"] = p.error or "no replay"
            out_panels.append(entry)
            continue
        arrays = {
            name: pk.put(raw, n, dtype)
            for block in (rb, wb)
            for name, (raw, n, dtype) in block.arrays.items()
        }
        entry |= {
            "policy": rep.policy,
            "label": rep.label,
            "scored": span is not None,
            "selects": selects(rep),
            "score_label": rep.score_label,
            "counts": span is not None and counts(rep),
            "hi": None if span is None else span[1],
            "lo": None if span is None else span[0],
            "budget": rep.budget,
            "window": rep.window,
            "sinks": rep.sinks,
            "arrays": arrays,
            **rb.meta,
            **wb.meta,
        }
        out_panels.append(entry)
    header = {
        "v": VERSION,
        "view": view,
        "trace_id": trace_id,
        "trace": trace.name,
        "steps": trace.steps,
        "range": [a, b],
        "margin": margin(b - a),
        "top_k": next((p.replay.top_k for p in panels if p.replay is not None), 0),
        "budget": next((p.replay.budget for p in panels if p.replay is not None), 0),
        "tokens": None if trace.tokens is None else [str(tok) for tok in trace.tokens],
        "start": start,
        "panels": out_panels,
        "oracle": pk.add(oracle, "f4") if oracle is not None else None,
        **(extra or {}),
    }
    return _with_header(header, b"".join(pk.parts))


def _with_header(header: dict[str, Any], body: bytes) -> bytes:
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    pre = MAGIC + struct.pack("<I", len(head)) + head
    return pre + b"\0" * (-len(pre) % 8) + body


def _split(payload: bytes) -> tuple[dict[str, Any], int]:
    if payload[:4] != MAGIC:
        raise ValueError("not a player payload")
    (n,) = struct.unpack("<I", payload[4:8])
    return json.loads(payload[8 : 8 + n]), 8 + n + (-(8 + n) % 8)


def restart(payload: bytes, start: dict[str, Any]) -> bytes:
    """The same payload, opening at another step and settings (for an exported file)."""
    header, base = _split(payload)
    return _with_header({**header, "start": start}, payload[base:])


def decode(payload: bytes) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """The header and, per panel index (and ``"oracle"``), its arrays — for tests and tools."""
    header, base = _split(payload)

    def get(ref: list) -> np.ndarray:
        off, size, dtype = ref
        return np.frombuffer(payload, dtype=_DTYPES[dtype], count=size, offset=base + off)

    arrays: dict[str, dict[str, np.ndarray]] = {}
    for i, p in enumerate(header["panels"]):
        arrays[str(i)] = {k: get(ref) for k, ref in p.get("arrays", {}).items()}
    if header.get("oracle") is not None:
        arrays["oracle"] = {"oracle": get(header["oracle"])}
    return header, arrays
