"""The needle pages' readers and sentences: the two JSON Lines files read with bounds
and checked by line, and every sentence with a number, a ranking or a winner checked at every
choice the pages offer against values computed here — by pandas from the raw lines, not by the
functions under test.

Until the shipped files exist, :func:`write_fixture` makes a pair with the same schema (in a
temporary folder: fake data never goes to ``traces/results/``); when the shipped files are there,
the same checks run on them too.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.needle import claims, frontier, grid
from h2o import stats
from h2o.needle import results

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "traces" / "results"
SLOT_BYTES = 30 * 3 * 64 * 2 * 2  # one token in every layer and KV head, float16 K and V
LENGTHS, DEPTHS = (512, 1024, 2048, 4096), (0, 25, 50, 75, 100)
NEEDLES = ("green-locker", "red-safe", "blue-drawer")  # three a depth: a rate, not an anecdote
#: (label, family, kind, policy, budget, allocation, bits, sinks, skill, perplexity)
ROWS = (
    ("full", "full cache", "full", None, None, None, None, 0, 0.97, 7.10),
    ("h2o@64", "H2O", "policy", "h2o", 64, None, None, 0, 0.20, 11.9),
    ("h2o@128", "H2O", "policy", "h2o", 128, None, None, 0, 0.35, 9.8),
    ("h2o@256", "H2O", "policy", "h2o", 256, None, None, 0, 0.55, 8.4),
    ("h2o@512", "H2O", "policy", "h2o", 512, None, None, 0, 0.75, 7.6),
    (
        "h2o@256:w50%",
        "H2O, window 50% of the budget",
        "policy",
        "h2o",
        256,
        None,
        None,
        0,
        0.6,
        8.3,
    ),
    ("streaming-llm@128", "StreamingLLM", "policy", "streaming-llm", 128, None, None, 4, 0.1, 10.4),
    ("streaming-llm@256", "StreamingLLM", "policy", "streaming-llm", 256, None, None, 4, 0.2, 9.0),
    ("snapkv@128", "SnapKV", "snapkv", None, 128, None, None, 0, 0.8, 9.5),
    ("h2o@128/pyramid", "H2O (pyramid)", "policy", "h2o", 128, "pyramid", None, 0, 0.4, 9.6),
    ("kivi2", "KIVI-style 2-bit", "kivi", None, None, None, 2, 0, 0.6, 8.9),
    ("kivi2+sinks", "KIVI-style 2-bit + sinks", "kivi", None, None, None, 2, 4, 0.7, 8.1),
    ("kivi4", "KIVI-style 4-bit", "kivi", None, None, None, 4, 0, 0.95, 7.2),
    ("kivi8", "KIVI-style 8-bit", "kivi", None, None, None, 8, 0, 0.97, 7.1),
    ("kivi16", "full cache", "kivi", None, None, None, 16, 0, 0.97, 7.1),
    ("h2o@256+kivi4", "H2O + KIVI-style 4-bit", "policy", "h2o", 256, None, 4, 0, 0.5, 8.5),
)


#: The frontier's texts at 2,048 tokens, each a level of perplexity of its own (a row's on a text
#: is its ROWS perplexity times the text's factor)...
TEXTS = {"lighthouse.txt": 1.0, "library.txt": 1.25, "orchard.txt": 0.8}
#: ...but for these, on one text: a row is not better or worse on every text alike
TWEAK = {("kivi2", "library.txt"): 0.8, ("h2o@256", "orchard.txt"): 1.1}
#: a run still going: h2o@64 not yet on orchard.txt (on 2 of the 3 texts)
NOT_RUN = {("h2o@64", "orchard.txt")}


def kv_bytes(kind, budget, bits, sinks, length) -> int:
    kept = length if budget is None else min(budget, length)
    if bits == 16:  # the issue: 16 bits equals the full cache to the last digit
        return kept * SLOT_BYTES
    if bits is None:
        return kept * SLOT_BYTES + (0 if kind == "full" else kept * 90 * 4)
    fp = min(32, kept) + sinks
    return (kept - fp) * SLOT_BYTES * bits // 16 + fp * SLOT_BYTES + kept // 32 * 90 * 2 * 4 * 64


def fixture_lines(seed: int = 17) -> tuple[list[dict], list[dict]]:
    """Grid cells and frontier rows of the result files' schema; kivi8 only at the two short lengths
    (a partial grid), every row at T = 2048 and one at another length."""
    rnd = random.Random(seed)
    cells, rows = [], []
    for label, fam, kind, pol, budget, alloc, bits, sinks, skill, ppl in ROWS:
        common = {
            "row": label,
            "family": fam,
            "kind": kind,
            "policy": pol,
            "budget": budget,
            "allocation": alloc,
            "bits": bits,
            "sinks": sinks,
        }
        for length in LENGTHS if label != "kivi8" else LENGTHS[:2]:
            for depth in DEPTHS:
                for needle in NEEDLES:
                    ok = rnd.random() < skill * (1.0 if length <= 2048 else 0.8)
                    held = None
                    if budget is not None:
                        held = [round(rnd.choice((0, 1 / 3, 2 / 3, 1)), 6) for _ in range(30)]
                    code = "9237" if needle == "green-locker" else "7627"
                    tokens = length - depth // 25  # a prompt is at most its nominal length
                    cells.append(
                        common
                        | {
                            "length": length,
                            "depth": depth,
                            "needle": needle,
                            "question": f"What is the code of the {needle.replace('-', ' ')}?",
                            "expected": code,
                            "produced": code if ok else f"{rnd.randint(1000, 9999)} <b>*",
                            "correct": ok,
                            "logprob": round(-rnd.random() * (1 if ok else 9), 4),
                            "held": held,
                            "kv_bytes": kv_bytes(kind, budget, bits, sinks, tokens),
                            "prompt_tokens": tokens,
                            "seconds": round(rnd.random() * 20, 2),
                        }
                    )
        runs = [(t, 2048) for t in TEXTS if (label, t) not in NOT_RUN]
        for text, tokens in runs + ([("lighthouse.txt", 1024)] if label == "h2o@128" else []):
            b = kv_bytes(kind, budget, bits, sinks, tokens)
            rows.append(
                common
                | {
                    "text": text,
                    "tokens": tokens,
                    "perplexity": round(ppl * TEXTS[text] * TWEAK.get((label, text), 1.0), 4),
                    "kv_bytes": b,
                    "kv_bytes_per_token": b / tokens,
                    "seconds": 12.5,
                }
            )
    return cells, rows


def write_fixture(folder: Path, extra_grid_lines: tuple[str, ...] = ()) -> tuple[Path, Path]:
    cells, rows = fixture_lines()
    folder.mkdir(parents=True, exist_ok=True)
    g, f = folder / results.GRID_FILE, folder / results.FRONTIER_FILE
    g.write_text("".join(json.dumps(c) + "\n" for c in cells) + "".join(extra_grid_lines))
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = {"command": "python -m h2o needle --rows full", "wall_seconds": 90.0}
    runs = [run, run | {"command": "python -m h2o needle --rows kivi4", "wall_seconds": 30.0}]
    meta = {"command": "fixture", "wall_seconds": 120.0, "cells": len(cells), "runs": runs}
    planned = [r[0] for r in ROWS] + ["tova@128", "kivi4+sinks"]
    (folder / "needle-grid.jsonl.meta.json").write_text(json.dumps(meta | {"rows": planned}))
    return g, f


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("needle")
    write_fixture(folder)
    return folder


def sources(fixture_dir: Path) -> list[Path]:
    """The fixture's folder, and the shipped one when both files are there."""
    out = [fixture_dir]
    if (SHIPPED / results.GRID_FILE).is_file() and (SHIPPED / results.FRONTIER_FILE).is_file():
        out.append(SHIPPED)
    return out


def raw_frames(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The files' lines as a pandas frame each, last line of a repeated key kept."""

    def lines(path: Path) -> pd.DataFrame:
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:  # a line being appended right now is not a line yet
                out.append(json.loads(line))
            except ValueError:
                continue
        return pd.DataFrame(out)

    g, f = lines(folder / results.GRID_FILE), lines(folder / results.FRONTIER_FILE)
    g = g.drop_duplicates(["row", "length", "depth", "needle"], keep="last")
    f = f.drop_duplicates(["row", "text", "tokens"], keep="last")
    return g, f


# -- the readers -----------------------------------------------------------------------------------
def test_the_fixture_reads_whole_and_every_field_survives(fixture_dir):
    cells, rows = fixture_lines()
    got = results.read_grid(fixture_dir / results.GRID_FILE)
    assert not got.problems and not got.repeated and not got.missing
    assert len(got.records) == len(cells)
    first = got.records[0]
    assert first.row == cells[0]["row"] and first.produced == cells[0]["produced"]
    assert got.meta["rows"][-1] == "kivi4+sinks"
    fr = results.read_frontier(fixture_dir / results.FRONTIER_FILE)
    assert len(fr.records) == len(rows) and not fr.problems


def test_bad_lines_are_skipped_and_named_and_a_repeat_keeps_the_later(tmp_path):
    cells, _ = fixture_lines()
    again = dict(cells[0], correct=not cells[0]["correct"], produced="again")
    bad = [
        "not json\n",
        json.dumps(dict(cells[1], depth=140)) + "\n",
        json.dumps(dict(cells[1], correct="yes")) + "\n",
        json.dumps(dict(cells[1], held=[0.5, 2.0])) + "\n",
        json.dumps(dict(cells[1], kind="zip")) + "\n",
        json.dumps([1, 2]) + "\n",
        json.dumps(again) + "\n",
    ]
    g, _ = write_fixture(tmp_path, tuple(bad))
    got = results.read_grid(g)
    assert got.n_problems == 6
    n0 = len(cells)
    assert [p.split(":")[0] for p in got.problems] == [f"line {n0 + i}" for i in range(1, 7)]
    assert "'depth'" in got.problems[1] and "'correct'" in got.problems[2]
    assert "'held'" in got.problems[3] and "'kind'" in got.problems[4]
    assert got.repeated == 1 and len(got.records) == n0
    kept = [
        c
        for c in got.records
        if (c.row, c.length, c.depth, c.needle)
        == (cells[0]["row"], cells[0]["length"], cells[0]["depth"], cells[0]["needle"])
    ]
    assert [c.produced for c in kept] == ["again"]


def test_reads_are_bounded(tmp_path, monkeypatch):
    g, _ = write_fixture(tmp_path)
    monkeypatch.setattr(results, "MAX_BYTES", 1000)
    got = results.read_grid(g)
    assert got.records == [] and "over the" in got.problems[0]
    monkeypatch.setattr(results, "MAX_BYTES", 2**30)
    monkeypatch.setattr(results, "MAX_LINES", 5)
    got = results.read_grid(g)
    assert len(got.records) == 5 and "first 5 lines" in got.problems[-1]
    monkeypatch.setattr(results, "MAX_LINE", 50)
    got = results.read_grid(g)
    assert got.records == [] and "longer than" in got.problems[0]
    assert results.read_grid(tmp_path / "absent.jsonl").missing


# -- the grid's numbers ----------------------------------------------------------------------------
@pytest.mark.slow
def test_matrices_and_scores_match_pandas(fixture_dir):
    for folder in sources(fixture_dir):
        cells = results.read_grid(folder / results.GRID_FILE).records
        g, _ = raw_frames(folder)
        lens, deps = sorted(g.length.unique()), sorted(g.depth.unique())
        assert grid.lengths(cells) == lens and grid.depths(cells) == deps
        assert set(grid.rows(cells)) == set(g.row) and grid.rows(cells)[0] == "full"
        for row in g.row.unique():
            mine = g[g.row == row]
            for metric, col in (("correct", "correct"), ("logprob", "logprob")):
                z, n = grid.matrix(cells, row, lens, deps, metric)
                want = mine.assign(v=mine[col].astype(float)).pivot_table(
                    index="depth", columns="length", values="v", aggfunc="mean"
                )
                want = want.reindex(index=deps, columns=lens).to_numpy()
                np.testing.assert_allclose(z, want, equal_nan=True)
                counts = mine.pivot_table(
                    index="depth", columns="length", values="needle", aggfunc="count"
                )
                counts = counts.reindex(index=deps, columns=lens).fillna(0).to_numpy()
                np.testing.assert_array_equal(n, counts)
            (s,) = grid.scores(cells, [row])
            assert s.cells == len(mine) and s.right == int(mine.correct.sum())
            assert s.mean_logprob == pytest.approx(mine.logprob.mean())


def test_one_colour_scale_spans_the_panels(fixture_dir):
    cells = results.read_grid(fixture_dir / results.GRID_FILE).records
    g, _ = raw_frames(fixture_dir)
    shown = ["h2o@64", "kivi4"]
    assert grid.colour_range(cells, shown, "correct") == (0.0, 1.0)
    means = g[g.row.isin(shown)].groupby(["row", "length", "depth"]).logprob.mean()
    assert grid.colour_range(cells, shown, "logprob") == pytest.approx((means.min(), means.max()))


# -- the grid's sentences --------------------------------------------------------------------------
def test_the_shown_sentence_counts_what_is_drawn(fixture_dir):
    loaded = results.read_grid(fixture_dir / results.GRID_FILE)
    cells = loaded.records
    g, _ = raw_frames(fixture_dir)
    rows = grid.rows(cells)
    for shown in (["full"], ["full", "kivi8"], rows[:6]):
        mine = g[g.row.isin(shown)]
        text = claims.shown_sentence(shown, rows, cells, loaded.meta["rows"])
        assert text.startswith(f"Shown: {len(shown)} of the {g.row.nunique()} rows in the file")
        assert f": {len(mine):,} cells, {mine.needle.nunique()} distinct needles." in text
        lens = sorted(mine.length.unique())
        assert f"at lengths {claims.names([f'{n:,}' for n in lens])} tokens" in text
        assert text.endswith(
            f"The run planned {len(loaded.meta['rows'])} rows; 2 are not in the file yet "
            "(tova@128 and kivi4+sinks)."
        )
    # kivi8 stops at 1,024 tokens: shown alone, the sentence says so.
    assert "at lengths 512 and 1,024 tokens" in claims.shown_sentence(["kivi8"], rows, cells)


def wilson_by_hand(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval, written out (Wilson 1927)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def share_text(k: int, n: int) -> str:
    lo, hi = wilson_by_hand(k, n)
    return f"{k} of {n} ({k / n:.0%}, 95 % CI {lo * 100:.0f}–{hi * 100:.0f} %)"


def positions_text(outcomes: dict, position=lambda k: k[:-1]) -> str:
    """A row's needles over positions (cell key ``(*position, needle)`` unless ``position``
    says otherwise), written out: the mean share answered at a position, Wilson's interval on
    the number of positions there."""
    by: dict = {}
    for k, ok in outcomes.items():
        by.setdefault(position(k), []).append(bool(ok))
    n = len(by)
    mean = sum(sum(v) / len(v) for v in by.values()) / n
    z = 1.959963984540054
    centre = (mean + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n))
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    right, asked = sum(sum(v) for v in by.values()), sum(len(v) for v in by.values())
    hit = sum(any(v) for v in by.values())
    where = "position" if n == 1 else "positions"
    return (
        f"{right} of {asked} needles, at {hit} of {n} {where} ({mean:.0%}; 95 % CI "
        f"{lo * 100:.0f}–{hi * 100:.0f} % over {where})"
    )


def sign_by_hand(a: dict, b: dict, position=lambda k: k[:-1]) -> tuple[int, int, int, float]:
    """Shared positions, positions A answered more of its shared needles, B more, and the
    two-sided sign test (the binomial tail of :func:`mcnemar_by_hand`)."""
    shared = [k for k in a if k in b]
    ta: dict = {}
    tb: dict = {}
    for k in shared:
        ta[position(k)] = ta.get(position(k), 0) + bool(a[k])
        tb[position(k)] = tb.get(position(k), 0) + bool(b[k])
    more_a = sum(ta[p] > tb[p] for p in ta)
    more_b = sum(ta[p] < tb[p] for p in ta)
    return len(ta), more_a, more_b, mcnemar_by_hand(more_a, more_b)


def _cell(row: str, depth: int, needle: str, ok: bool) -> results.Cell:
    """A 512-token cell of ``row`` at ``depth``, answered right or not (the other fields fixed)."""
    return results.Cell(
        row,
        row,
        "policy",
        "h2o",
        64,
        None,
        None,
        0,
        512,
        depth,
        needle,
        "q",
        "1",
        "1" if ok else "2",
        ok,
        -1.0,
        None,
        1,
        1.0,
    )


def test_the_wilson_interval_matches_the_formula():
    for k, n in [(15, 20), (0, 20), (20, 20), (3, 5), (5, 5), (1, 1), (36, 40)]:
        lo, hi = wilson_by_hand(k, n)
        s = stats.share(k, n)
        assert (s.low, s.high) == pytest.approx((lo, hi), abs=1e-12)
    # a worked example: 15 of 20 is [0.53, 0.89]
    assert stats.share(15, 20).text() == "15 of 20 (75%, 95 % CI 53–89 %)"
    with pytest.raises(ValueError, match="n = 0"):
        stats.share(0, 0)
    with pytest.raises(ValueError, match="cannot exceed"):
        stats.share(3, 2)


def test_the_paired_test_is_a_sign_test_over_positions_by_hand():
    for b, c in [(0, 5), (5, 0), (1, 4), (2, 2), (0, 0), (3, 9), (12, 2)]:
        assert stats.sign_test(b, c) == pytest.approx(mcnemar_by_hand(b, c), abs=1e-12)
    # worked examples: 5 positions all one way is p = 0.0625; 2 of 2 against 0 is 0.5
    assert stats.sign_test(5, 0) == pytest.approx(0.0625)
    assert stats.sign_test(2, 0) == pytest.approx(0.5)
    a = {(1, "x"): True, (2, "x"): True, (3, "x"): False, (4, "x"): True}
    b = {(1, "x"): True, (2, "x"): False, (3, "x"): False, (9, "x"): True}
    t = stats.paired(a, b)
    assert (t.n, t.right_a, t.right_b, t.more_a, t.more_b) == (3, 2, 1, 1, 0)
    assert (t.n, t.more_a, t.more_b, t.p) == sign_by_hand(a, b)
    assert not t.differs
    with pytest.raises(ValueError, match="share no cell"):
        stats.paired({(1, "x"): True}, {(2, "x"): True})


def test_the_scores_sentence_ranks_by_accuracy(fixture_dir):
    cells = results.read_grid(fixture_dir / results.GRID_FILE).records
    g, _ = raw_frames(fixture_dir)
    shown = ["full", "h2o@128", "streaming-llm@128", "kivi2"]
    mine = [c for c in cells if c.row in shown]
    text = claims.scores_sentence(grid.scores(cells, shown), mine)
    assert text.startswith("Row by row — full: ")
    acc = g[g.row.isin(shown)].groupby("row").correct.agg(["sum", "count", "mean"])
    ok = {
        r: {(x.length, x.depth, x.needle): bool(x.correct) for x in g[g.row == r].itertuples()}
        for r in shown
    }
    for r in shown:
        lp = g[g.row == r].logprob.mean()
        said = positions_text(ok[r])
        assert f"{claims.esc(r)}: {said} answered, mean log-prob {lp:.2f}" in text
    top, low = acc["mean"].idxmax(), acc["mean"].idxmin()
    n, more_a, more_b, p = sign_by_hand(ok[top], ok[low])
    assert f"{claims.esc(top)} against {claims.esc(low)}" in text
    assert (
        f"positions {more_a} won by the first, {more_b} by the second" in text
        and f"tied of {n}" in text
    )
    assert n >= MIN_POSITIONS  # the fixture's rows share enough positions to be compared
    if p < 0.05:
        assert "The most accurate row answers more than the least" in text
    else:
        assert f"not distinguishable with n = {n} positions" in text


def test_the_scores_sentence_refuses_a_difference_the_test_does_not_support():
    """3 of 5 against 5 of 5 ("40 percentage points" on 5 positions): fewer than 10 positions,
    not compared (no sign test on 5 could reach p < 0.05: the smallest is 2 / 2**5); three
    needles at each of 4 positions, all answered by a and none by b, are 4 positions: not
    compared either. On 10 positions, 3 won and 7 tied is p = 0.25: not distinguishable."""

    cs = [_cell("a", d, "n", True) for d in range(5)] + [
        _cell("b", d, "n", d < 3) for d in range(5)
    ]
    text = claims.scores_sentence(grid.scores(cs, ["a", "b"]), cs)
    assert (
        "5 against 3 of 5 shared needles): not compared (5 shared positions, fewer than 10)."
        in (text)
    )
    assert "sign test" not in text and "answers more" not in text
    cs = [_cell(r, d, x, r == "a") for d in range(4) for x in "xyz" for r in "ab"]
    text = claims.scores_sentence(grid.scores(cs, ["a", "b"]), cs)
    assert "12 against 0 of 12 shared needles): not compared (4 shared positions" in text
    assert "sign test" not in text and "answers more" not in text
    cs = [_cell("a", d, "n", True) for d in range(10)] + [
        _cell("b", d, "n", d < 7) for d in range(10)
    ]
    text = claims.scores_sentence(grid.scores(cs, ["a", "b"]), cs)
    assert "10 against 7 of 10 shared needles at 10 positions" in text
    assert "not distinguishable with n = 10 positions" in text and "p = 0.250" in text
    assert "answers more" not in text
    cs = [_cell("a", d, "n", True) for d in range(12)] + [
        _cell("b", d, "n", d < 2) for d in range(12)
    ]
    text = claims.scores_sentence(grid.scores(cs, ["a", "b"]), cs)
    assert "The most accurate row answers more than the least" in text  # 10 against 0: p ≈ 0.002


def test_the_full_cache_note_reads_its_cells(fixture_dir):
    cells = results.read_grid(fixture_dir / results.GRID_FILE).records
    g, _ = raw_frames(fixture_dir)
    full = g[g.kind == "full"]
    short = full[full.length <= 2048]
    text = claims.full_note(cells)

    def oc(frame: pd.DataFrame) -> dict:
        return {(x.length, x.depth, x.needle): bool(x.correct) for x in frame.itertuples()}

    by = short.groupby(["length", "depth"]).correct.mean()
    assert text.startswith(
        f"With the full cache the model answers {positions_text(oc(short))} at ≤ 2,048 tokens"
    )
    assert ("short of the 90%" in text) == (by.mean() < 0.9)
    long = full[full.length == 4096]
    assert f"at 4,096 tokens {positions_text(oc(long))}" in text
    assert "not in the file" in claims.full_note([c for c in cells if c.kind != "full"])


def test_the_held_sentence_reads_the_layers():
    held = [1.0] * 4 + [0.0] * 2 + [1 / 3, 2 / 3] + [1.0] * 2
    text = claims.held_sentence(held)
    assert "in 6 of 10 layers (0–3, 8–9)" in text and "no head did in 2 (4–5)" in text
    assert text.endswith(f"On average {np.mean(held):.0%} of a layer's heads held it.")
    assert "evicts nothing" in claims.held_sentence(None)
    assert "in 3 of 3 layers;" in claims.held_sentence([1, 1, 1])


# -- the frontier's verdicts, at every choice ------------------------------------------------------
GROUP_OF = {"full": "full"}


def group_of(kind: str, bits) -> str:
    """Written from the issue: quantized only → compress; a budget and bits → both; Quest
    (every key held, a part read each step) → select."""
    if kind == "quest":
        return "select"
    if kind == "full" or (kind == "kivi" and bits == 16):
        return "full"
    if kind == "kivi":
        return "compress"
    return "evict" if bits is None or (isinstance(bits, float) and np.isnan(bits)) else "both"


TOLERANCE = 0.02  # the issue: rows "at equal memory" hold within 2 % of the memory asked


def mcnemar_by_hand(b: int, c: int) -> float:
    """Exact McNemar, written out: twice the smaller binomial tail of the discordant cells."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def expected_bests(frame: pd.DataFrame, memory: int, lower: bool) -> dict[str, pd.Series]:
    """Per group, its best row within 2 % of ``memory`` bytes per token."""
    fit = frame[(frame.group != "full") & ((frame.x - memory).abs() <= TOLERANCE * memory)]
    out = {}
    for g, part in fit.groupby("group"):
        part = part.sort_values(["y", "x", "row"], ascending=[lower, True, True])
        out[g] = part.iloc[0]
    return out


# A comparison rests on at least 10 positions (the unit) in its scope: at one length, a row
# is ranked with at least 10 positions there, and two rows are tested on at least 10 shared.
MIN_POSITIONS = 10


def rel(v: float) -> str:
    """A relative perplexity as the issue writes it: signed, one decimal, in percent."""
    return f"{0.0 if abs(v) < 0.0005 else v:+.1%}"


def check_verdict(text: str, frame: pd.DataFrame, memory: int, lower: bool, outcomes=None) -> None:
    if lower:  # perplexity: rows measured on fewer texts than the chart's are named, not ranked
        few = (frame.group != "full") & (frame.n < frame.n.max())
        near = frame[few & ((frame.x - memory).abs() <= TOLERANCE * memory)]
        if len(near):
            assert " Not compared: " in text
            assert f"(measured on fewer than the {frame.n.max()} texts: drawn, not ranked)" in text
            for r in near.row:
                assert claims.esc(r) in text.split(" Not compared: ")[1], r
        else:
            assert " Not compared: " not in text
        text = text.split(" Not compared: ")[0]
        frame = frame[~few]
    if not lower:  # accuracy: rows with fewer positions are named, never ranked
        few = (frame.group != "full") & (frame.positions < MIN_POSITIONS)
        near = frame[few & ((frame.x - memory).abs() <= TOLERANCE * memory)]
        aside = " Not compared, drawn but not ranked: "
        if len(near):
            assert aside in text
            tail = text.split(aside)[1]
            for r, k in zip(near.row, near.positions, strict=True):
                assert claims.esc(r) in tail, r
                unit = "position" if k == 1 else "positions"
                assert f"({k} {unit} at this length, fewer than {MIN_POSITIONS})" in tail, r
        else:
            assert "Not compared" not in text
        text = text.split(aside)[0]
        frame = frame[~few]
    bests = expected_bests(frame, memory, lower)
    names = {
        "evict": "eviction",
        "compress": "KIVI-style quantization",
        "both": "eviction + KIVI-style",
        "select": "selection (every key held, a part read)",
    }
    for g, b in bests.items():
        assert f"the best {names[g]} row is " in text and f"({claims.esc(b.row)})" in text, g
        assert f" at {b.x:,.0f} bytes per token" in text
        if lower and b.n > 1:
            assert (
                f"({claims.esc(b.row)}), {rel(b.y)} (mean of {b.n} texts, range {rel(b.lo)} to "
                f"{rel(b.hi)}) at {b.x:,.0f} bytes per token"
            ) in text
        elif lower:
            assert f"({claims.esc(b.row)}), {rel(b.y)} at {b.x:,.0f} bytes per token" in text
    for g in set(frame.group) - {"full"} - set(bests):
        assert f"no {names[g]} row holds within 2% of it (the nearest" in text, (g, text)
    assert " beats " not in text and " wins " not in text
    if len(bests) > 1:
        ranked = sorted(
            bests.items(), key=lambda kv: (kv[1].y if lower else -kv[1].y, kv[1].x, kv[1].row)
        )
        _, win = ranked[0]
        if lower:  # the best row against each other best, counted text by text
            row = claims.esc(win.row)
            assert f"{row}'s: lower than" in text or f"({row})'s: lower than" in text
            for g, b in ranked[1:]:
                shared = [t for t in win.ppl if t in b.ppl]
                k = sum(win.ppl[t] < b.ppl[t] for t in shared)
                unit = "text" if len(shared) == 1 else "texts"
                assert f"lower than the best {names[g]} row's on {k} of {len(shared)} {unit}" in (
                    text
                ), (g, text)
                if 2 / 2 ** len(shared) >= 0.05:  # a sign test on so few texts cannot decide
                    assert f"{len(shared)} {unit}: too few for a sign test" in text
            return
        for g, b in ranked[1:]:
            n, more_a, more_b, p = sign_by_hand(outcomes[win.row], outcomes[b.row])
            if n < MIN_POSITIONS:  # each has enough positions but they share too few
                assert f"not compared ({n} shared positions, fewer than 10)" in text, (g, text)
                continue
            said = f"positions {more_a} won by the first, {more_b} by the second"
            assert said in text and f"tied of {n}" in text, (g, text)
            if p < 0.05:
                assert (
                    "answers more needles than" in text
                    if more_a > more_b
                    else "answers fewer needles than" in text
                )
            else:
                assert f"not distinguishable with n = {n}" in text
    elif len(bests) == 1:
        assert f"Only {names[next(iter(bests))]} has a row at this memory" in text
    else:
        assert (
            "within 2% of it" in text
            or "no row but the full cache" in text
            or f"no row at this length has the {MIN_POSITIONS} positions" in text
        )


def frontier_frames(folder: Path) -> tuple[pd.DataFrame, dict[int, pd.DataFrame]]:
    g, f = raw_frames(folder)
    f = f[f.tokens == 2048]
    full = f[f.kind == "full"].set_index("text").perplexity  # the reference on each text
    f = f[f.text.isin(full.index)].assign(rel=lambda d: d.perplexity / d.text.map(full) - 1)
    ppl = pd.DataFrame(
        [
            {
                "row": row,
                "group": group_of(*part[["kind", "bits"]].iloc[0]),
                "x": part.kv_bytes_per_token.mean(),
                "y": part.rel.mean(),
                "lo": part.rel.min(),
                "hi": part.rel.max(),
                "n": len(part),
                "ppl": dict(zip(part.text, part.perplexity, strict=True)),
            }
            for row, part in f.groupby("row")
        ],
        columns=["row", "group", "x", "y", "lo", "hi", "n", "ppl"],
    )
    acc = {}
    for n, part in g.groupby("length"):
        agg = part.assign(bpt=part.kv_bytes / part.prompt_tokens).groupby("row")
        acc[n] = pd.DataFrame(
            {
                "row": agg.size().index,
                "group": [
                    group_of(*part[part.row == r][["kind", "bits"]].iloc[0])
                    for r in agg.size().index
                ],
                "x": agg.bpt.mean().values,
                "y": agg.correct.mean().values,
                "needles": part.groupby(["row", "depth"])
                .needle.nunique()
                .groupby("row")
                .min()[agg.size().index]
                .values,
                "positions": part.groupby("row").depth.nunique()[agg.size().index].values,
            }
        )
    return ppl, acc


@pytest.mark.slow
def test_the_verdicts_at_every_memory_and_length(fixture_dir):
    for folder in sources(fixture_dir):
        fr = results.read_frontier(folder / results.FRONTIER_FILE).records
        cells = results.read_grid(folder / results.GRID_FILE).records
        ppl_frame, acc_frames = frontier_frames(folder)
        ppl = frontier.ppl_points(fr)
        assert {p.row for p in ppl} == set(ppl_frame.row)
        # every row's memory but those that hold the whole cache: the full one, and a
        # selection's (it holds all of it and reads a part)
        choices = sorted(
            {
                round(x)
                for x, gr in zip(ppl_frame.x, ppl_frame.group, strict=True)
                if gr not in ("full", "select")
            }
        )
        assert frontier.memory_choices(ppl) == choices
        for limit in choices:
            check_verdict(claims.verdict(ppl, limit, claims.PERPLEXITY), ppl_frame, limit, True)
        g, _ = raw_frames(folder)
        for n, frame in acc_frames.items():
            acc = frontier.accuracy_points(cells, n)
            part = g[g.length == n]
            outcomes = {
                r: {
                    (d, nd): bool(ok)
                    for d, nd, ok in zip(c.depth, c.needle, c.correct, strict=True)
                }
                for r, c in part.groupby("row")
            }
            for limit in frontier.memory_choices(acc):
                text = claims.verdict(acc, limit, claims.ACCURACY)
                check_verdict(text, frame, limit, False, outcomes)


def test_a_verdict_in_the_fixture_read_by_hand():
    """At 4-bit KIVI-style's memory on the fixture, by hand: kivi4 holds 2048 × 23040 / 4 plus its
    fp16 window and scales, 7,470 bytes per token; the largest eviction row, h2o@512, holds
    512 × 23,040 + 512 × 360 over 2,048 tokens = 5,850, 22 % less: no eviction row is at that
    memory, so no family is named the winner."""
    _, rows = fixture_lines()
    fr = [results.parse_frontier(r) for r in rows]
    ppl = frontier.ppl_points(fr)
    kivi4 = next(p for p in ppl if p.row == "kivi4")
    assert frontier.default_memory(ppl) == round(kivi4.x) == 7470
    text = claims.verdict(ppl, round(kivi4.x), claims.PERPLEXITY)
    assert (
        "no eviction row holds within 2% of it (the nearest, H2O, window 32 (h2o@512), holds "
        "5,850: 22% less)" in text
    )
    # kivi4 reads each text at 7.2 / 7.1 of the full cache's: +1.4 % on all three
    assert (
        "the best KIVI-style quantization row is KIVI-style 4-bit (kivi4), +1.4% (mean of 3 "
        "texts, range +1.4% to +1.4%) at 7,470 bytes per token" in text
    )
    assert "; perplexity in % over the full cache's on the same text: " in text
    assert (
        "Only KIVI-style quantization has a row at this memory: nothing to compare it with." in text
    )


def point(row, group, x, y, outcomes=(), family=None, needles=3, positions=None, texts=None):
    """An accuracy point (``outcomes``), or a perplexity point: ``texts`` text → (perplexity,
    the full cache's there), ``y`` then their mean relative perplexity."""
    right = sum(ok for _, ok in outcomes)
    if texts is not None:
        per = tuple((t, v, v / full - 1) for t, (v, full) in sorted(texts.items()))
        y = sum(r for *_, r in per) / len(per)
    return frontier.Point(
        row,
        family or row,
        group,
        None,
        None,
        0,
        x,
        y,
        n=max(1, len(outcomes)),
        right=right,
        outcomes=tuple(outcomes),
        needles=needles,
        positions=len({d for (d, _), _ in outcomes}) if positions is None else positions,
        texts=() if texts is None else per,
    )


def test_a_row_with_too_few_positions_is_named_but_never_ranked():
    """4 of 4 right at four positions is an anecdote: beside a row with 12 positions at the same
    memory it is named as not compared, with its count of positions, and the verdict ranks only
    the other. One needle a position is enough: the position is the unit."""
    a = [((d, "n"), True) for d in range(4)]
    b = [((d, "n"), d < 2) for d in range(12)]
    pts = [
        point("a", "evict", 1000, 1.0, a, needles=1),
        point("b", "compress", 1005, 2 / 12, b, needles=1),
    ]
    text = claims.verdict(pts, 1000, claims.ACCURACY)
    assert "the best KIVI-style quantization row is b" in text
    assert "Only KIVI-style quantization has a row at this memory" in text
    assert text.endswith(
        " Not compared, drawn but not ranked: a (4 positions at this length, fewer than 10)."
    )
    assert "answers more" not in text and "the best eviction row" not in text
    # with twelve positions, one needle each, the same kind of outcomes are compared, and the
    # sign test says "more"
    pts[0] = point("a", "evict", 1000, 1.0, [((d, "n"), True) for d in range(12)], needles=1)
    text = claims.verdict(pts, 1000, claims.ACCURACY)
    assert "a answers more needles than the best KIVI-style quantization row" in text
    assert "Not compared" not in text


def test_accuracy_points_count_the_needles_of_the_thinnest_depth(fixture_dir):
    cells = results.read_grid(fixture_dir / results.GRID_FILE).records
    thinned = [
        c for c in cells if not (c.row == "kivi2" and c.depth == 50 and c.needle != NEEDLES[0])
    ]
    got = {p.row: p.needles for p in frontier.accuracy_points(thinned, 512)}
    assert got["kivi2"] == 1 and got["kivi4"] == len(NEEDLES) == 3


def test_equal_memory_is_within_two_percent_by_hand():
    """Rows at 1,000 and 1,019 bytes per token are at the memory 1,000; one at 1,021 is not."""
    ppl = [
        point("full", "full", 4000, 0, texts={"t.txt": (7.0, 7.0)}),
        point("a", "evict", 1019, 0, texts={"t.txt": (8.4, 7.0)}),
        point("b", "compress", 1000, 0, texts={"t.txt": (8.75, 7.0)}),
        point("c", "both", 1021, 0, texts={"t.txt": (7.7, 7.0)}),
    ]
    text = claims.verdict(ppl, 1000, claims.PERPLEXITY)
    assert "; perplexity in % over the full cache's (7.00 on t.txt): " in text
    assert "the best eviction row is a, +20.0% at 1,019 bytes per token" in text
    assert (
        "no eviction + KIVI-style row holds within 2% of it (the nearest, c, holds 1,021: 2% more)"
        in text
    )
    assert (
        "The lowest here is a's: lower than the best KIVI-style quantization row's on 1 of 1 "
        "text; 1 text: too few for a sign test." in text
    )
    assert " beats " not in text and "wins" not in text


def test_a_perplexity_verdict_counts_texts_and_sets_aside_a_row_on_fewer():
    """By hand, three texts whose full cache reads them at 10, 20 and 40: a at 11, 21, 48
    (+10 %, +5 %, +20 %: mean +11.7 %) against b at 12, 20.5, 44 (+20 %, +2.5 %, +10 %: mean
    +10.8 %): b has the lower mean, and is lower on 2 of the 3 texts, higher on 1; three texts
    cannot reach p < 0.05 in a sign test (2 / 2**3 = 0.25). A row on 2 of the 3 texts at the
    same memory, however low, is named and never ranked."""
    full = {"x.txt": 10.0, "y.txt": 20.0, "z.txt": 40.0}

    def texts(*vs: float, on=("x.txt", "y.txt", "z.txt")) -> dict:
        return {t: (v, full[t]) for t, v in zip(on, vs, strict=True)}

    ppl = [
        point("full", "full", 4000, 0, texts=texts(10, 20, 40)),
        point("a", "evict", 1000, 0, texts=texts(11, 21, 48)),
        point("b", "compress", 1010, 0, texts=texts(12, 20.5, 44)),
        point("c", "both", 1000, 0, texts=texts(10, 20, on=("x.txt", "y.txt"))),
    ]
    text = claims.verdict(ppl, 1000, claims.PERPLEXITY)
    assert "; perplexity in % over the full cache's on the same text: " in text
    assert (
        "the best eviction row is a, +11.7% (mean of 3 texts, range +5.0% to +20.0%) at 1,000 "
        "bytes per token" in text
    )
    assert "the best KIVI-style quantization row is b, +10.8% (mean of 3 texts" in text
    assert (
        "The lowest mean here is b's: lower than the best eviction row's on 2 of 3 texts (higher "
        "on 1); 3 texts: too few for a sign test." in text
    )
    assert "the best eviction + KIVI-style" not in text
    assert text.endswith(
        " Not compared: c (measured on fewer than the 3 texts: drawn, not ranked)."
    )
    # seven texts, b lower on every one: a sign test can decide (p = 2 / 2**7)
    full = {f"{i}.txt": 10.0 for i in range(7)}
    ppl = [
        point("full", "full", 4000, 0, texts={t: (10.0, 10.0) for t in full}),
        point("a", "evict", 1000, 0, texts={t: (12.0, 10.0) for t in full}),
        point("b", "compress", 1000, 0, texts={t: (11.0, 10.0) for t in full}),
    ]
    text = claims.verdict(ppl, 1000, claims.PERPLEXITY)
    assert (
        "b's: lower than the best eviction row's on 7 of 7 texts, exact sign test "
        f"p = {2 / 2**7:.3f}." in text
    )
    assert "too few" not in text


def test_perplexity_points_put_each_text_against_its_full_cache(fixture_dir):
    """In the fixture, by hand: kivi2 reads lighthouse.txt and orchard.txt at 8.9 / 7.1 of the
    full cache's (+25.4 %) and library.txt at 0.8 of that (8.9 × 0.8 / 7.1: +0.3 %); h2o@64 is on
    two of the three texts; the 1,024-token line is not on the chart; a text with no full-cache
    row is not on it either, and the note says so."""
    fr = results.read_frontier(fixture_dir / results.FRONTIER_FILE).records
    ppl = {p.row: p for p in frontier.ppl_points(fr)}
    k2 = ppl["kivi2"]
    assert k2.n == 3 and [t for t, *_ in k2.texts] == [
        "library.txt",
        "lighthouse.txt",
        "orchard.txt",
    ]
    assert k2.spread == pytest.approx((8.9 * 0.8 / 7.1 - 1, 8.9 / 7.1 - 1))
    assert k2.y == pytest.approx((2 * (8.9 / 7.1 - 1) + 8.9 * 0.8 / 7.1 - 1) / 3)
    assert ppl["h2o@64"].n == 2 and ppl["full"].y == 0
    note = claims.texts_note(fr, list(ppl.values()))
    assert (
        "of 3 texts (the full cache's perplexity: 8.88 on library.txt, 7.10 on lighthouse.txt and "
        "5.68 on orchard.txt), each row's in % over the full cache's on the same text" in note
    )
    assert "1 row measured on fewer of them so far (h2o@64 on 2)" in note
    _, rows = fixture_lines()
    extra = [
        dict(r, text="sea.txt")
        for r in rows
        if r["row"] in ("kivi2", "h2o@64") and r["text"] == "lighthouse.txt"
    ]
    more = [results.parse_frontier(r) for r in rows + extra]
    assert {p.row: p.n for p in frontier.ppl_points(more)} == {p: q.n for p, q in ppl.items()}
    note = claims.texts_note(more, frontier.ppl_points(more))
    assert note.endswith(
        "sea.txt: 2 rows at 2,048 tokens but no full-cache row to put them against yet: not shown."
    )
    lone = [r for r in more if r.text == "sea.txt"]
    assert frontier.ppl_points(lone) == []
    assert claims.texts_note(lone, []).startswith("sea.txt: 2 rows at 2,048 tokens")


def test_an_accuracy_verdict_says_more_only_when_the_paired_test_does():
    """5 of 5 against 3 of 5 on the same 5 positions: fewer than 10, neither ranked (no sign
    test on 5 could reach p < 0.05); three needles at each of 5 positions, all won, are still 5
    positions; two rows of 12 positions that share 6 are not compared; 10 of 10 against 7 of 10
    on the same 10 is p = 0.25: not distinguishable; 12 positions, 10 won, is p = 0.002."""
    a = [((d, "n"), True) for d in range(5)]
    b = [((d, "n"), d < 3) for d in range(5)]
    pts = [point("a", "evict", 1000, 1.0, a), point("b", "compress", 1005, 0.6, b)]
    text = claims.verdict(pts, 1000, claims.ACCURACY)
    assert ": no row at this length has the 10 positions a comparison needs." in text
    assert text.endswith(
        " Not compared, drawn but not ranked: a and b (5 positions at this length, fewer than 10)."
    )
    assert "sign test" not in text and "answers more" not in text
    a = [((d, x), True) for d in range(5) for x in "xyz"]
    b = [((d, x), False) for d in range(5) for x in "xyz"]
    pts = [point("a", "evict", 1000, 1.0, a), point("b", "compress", 1005, 0.0, b)]
    text = claims.verdict(pts, 1000, claims.ACCURACY)
    assert "sign test" not in text and "answers more" not in text
    a = [((d, "n"), True) for d in range(12)]
    b = [((d, "n"), d < 8) for d in range(6, 18)]
    pts = [point("a", "evict", 1000, 1.0, a), point("b", "compress", 1005, 2 / 12, b)]
    text = claims.verdict(pts, 1000, claims.ACCURACY)
    assert text.endswith(
        " a and the best KIVI-style quantization row: not compared (6 shared positions, fewer "
        "than 10)."
    )
    assert "sign test" not in text and "answers more" not in text
    a = [((d, "n"), True) for d in range(10)]
    b = [((d, "n"), d < 7) for d in range(10)]
    pts = [point("a", "evict", 1000, 1.0, a), point("b", "compress", 1005, 0.7, b)]
    text = claims.verdict(pts, 1000, claims.ACCURACY)
    assert "a is not distinguishable with n = 10 positions from the best KIVI-style" in text
    assert "exact sign test p = 0.250" in text and "answers more" not in text
    a = [((d, "n"), True) for d in range(12)]
    b = [((d, "n"), d < 2) for d in range(12)]
    pts = [point("a", "evict", 1000, 1.0, a), point("b", "compress", 1005, 2 / 12, b)]
    text = claims.verdict(pts, 1000, claims.ACCURACY)
    assert (
        "a answers more needles than the best KIVI-style quantization row (12 against 2 of 12"
        in text
    )
    assert "p = 0.002" in text


def test_default_memory_and_choices_without_kivi():
    _, rows = fixture_lines()
    fr = [results.parse_frontier(r) for r in rows if r["kind"] != "kivi"]
    ppl = frontier.ppl_points(fr)
    choices = frontier.memory_choices(ppl)
    assert frontier.default_memory(ppl) == choices[len(choices) // 2]
    assert frontier.default_memory([]) is None
    only_full = [p for p in ppl if p.group == "full"]
    assert claims.verdict(only_full, 5000, claims.PERPLEXITY).endswith(
        ": the file has no row but the full cache to compare yet."
    )
    text = claims.verdict(ppl, 1, claims.PERPLEXITY)
    assert re.search(r"no eviction row holds within 2% of it \(the nearest, .*, holds [\d,]+", text)
    assert "wins" not in text


def test_the_modes_sentence_by_hand():

    dec, pre = "h2o@256:w50%", "h2o@256:w50%:prefill"
    cs = []
    for d in (0, 25, 50, 75, 100):
        for nd in ("a", "b", "c"):
            cs.append(_cell(dec, d, nd, d == 100))
            cs.append(_cell(pre, d, nd, d == 100))
    text = claims.modes_sentence(cs, dec, pre)
    # one length, five depths: 5 positions of three needles, fewer than 10: not compared
    assert text.startswith(
        "On the same 5 positions, H2O in its prefill mode (h2o@256:w50%:prefill)"
    )
    mode = {(512, d, nd): d == 100 for d in (0, 25, 50, 75, 100) for nd in "abc"}
    assert f"answers {positions_text(mode)}" in text and "right only at depth 100 %" in text
    assert text.endswith(": not compared (5 positions, fewer than 10).")
    cs = [_cell(pre, d, nd, d < 100) for d in (0, 25, 50, 75, 100) for nd in "ab"]
    cs += [_cell(dec, d, nd, False) for d in (0, 25, 50, 75, 100) for nd in "ab"]
    text = claims.modes_sentence(cs, dec, pre)
    # 8 cells against 0, but 4 positions against 0, of 5: not compared
    assert "answers more" not in text and "sign test" not in text
    assert "not compared (5 positions, fewer than 10)" in text
    cs = [_cell(pre, d, nd, d < 80) for d in range(0, 100, 10) for nd in "ab"]
    cs += [_cell(dec, d, nd, d == 0) for d in range(0, 100, 10) for nd in "ab"]
    text = claims.modes_sentence(cs, dec, pre)
    # 10 positions, 7 won by the prefill mode, 1 tied: p = 2 / 2**7
    assert text.endswith(f": the prefill mode answers more (exact sign test p = {2 / 2**7:.3f}).")
    assert claims.modes_sentence(cs, dec, "h2o@64") == ""


def test_the_band_sentence_by_hand():
    text = claims.band_sentence([5, 40, 600, 513], 512, 128)
    assert "within its most recent 5 to more than 512 tokens (median 276.5, over 4 layers)" in text
    assert "a recent window of 128 covers that band in 2 of the 4 layers" in text
    assert "5 to 40 tokens" in claims.band_sentence([5, 40], 512)


def test_the_window_sweep_sentence_by_hand():
    """Where each answered needle lay at the question, against the window each row's label sets
    (``h2o@64:w50%``: the last 32 of the 512 prompt tokens; ``h2o@64:w25%``: the last 16)."""
    import dataclasses

    def at(row, depth, needle, ok, span):
        return dataclasses.replace(_cell(row, depth, needle, ok), needle_span=span)

    half, quarter = "h2o@64:w50%", "h2o@64:w25%"
    cs = [
        at(half, 100, "a", True, (490, 500)),  # inside the last 32 (480..511)
        at(half, 100, "b", True, (470, 490)),  # partly
        at(half, 50, "c", False, (250, 260)),
        at(quarter, 100, "a", True, (497, 505)),  # inside the last 16 (496..511)
        at(quarter, 50, "c", False, (250, 260)),
        at(quarter, 0, "d", False, (20, 30)),
        at("h2o@64:w75%", 100, "a", True, (490, 500)),  # a row not in the sweep: not counted
    ]
    rows = [half, quarter]
    text = claims.window_sweep_sentence(cs, rows, 512)
    assert text.startswith("The card's check, done: H2O evicting while it reads, at 512 tokens,")
    assert "in 2 settings of its budget and recent window" in text
    best = {(100, "a"): True, (100, "b"): True, (50, "c"): False}
    assert f"The most any setting answers is {positions_text(best)} (h2o@64:w50%)" in text
    assert "Of the 3 needles answered over all settings, 2 lay wholly inside" in text
    assert ", 1 partly, none outside it: what H2O recalls here, its window kept" in text
    # a needle answered from outside the window: said, and no "window kept" conclusion
    cs.append(at(quarter, 50, "e", True, (250, 260)))
    text = claims.window_sweep_sentence(cs, rows, 512)
    assert text.endswith(", 1 partly, and 1 wholly outside it.")
    assert "window kept" not in text
    # no span recorded: counted apart, never guessed
    cs.append(dataclasses.replace(_cell(half, 75, "f", True), needle_span=None))
    assert "1 with no recorded span" in claims.window_sweep_sentence(cs, rows, 512)
    assert claims.window_sweep_sentence(cs, rows, 1024) == ""


def test_the_window_sweep_sentence_on_the_shipped_file():
    """Counted again here from the file's own fields, for the sweep's rows."""
    from h2o.model.rows import Row
    from h2o.needle import findings

    cells = results.read_grid(results.RESULTS_DIR / results.GRID_FILE).records
    rows = findings.sweep_rows()
    text = claims.window_sweep_sentence(cells, rows, findings.SWEEP_LENGTH)
    mine = [c for c in cells if c.row in rows and c.length == findings.SWEEP_LENGTH]
    assert mine, "the shipped file holds the window sweep"
    right = [c for c in mine if c.correct]
    inside = sum(c.needle_span[0] >= c.tokens - Row.parse(c.row).recent_window for c in right)
    assert f"Of the {len(right)} needles answered over all settings, {inside} lay wholly" in text
    settings = len({c.row for c in mine})
    assert f"in {settings} settings" in text


def test_a_shipped_files_points_are_computed_once_and_equal_the_fresh_ones(
    fixture_dir, monkeypatch
):
    """The pages share one computation per file version (its records are a tuple); a list (a
    page's own subset) is computed afresh each time. Both give the same points."""
    cells = tuple(results.read_grid(fixture_dir / results.GRID_FILE).records)
    calls = []
    real = frontier._accuracy_points
    monkeypatch.setattr(frontier, "_accuracy_points", lambda c, n: calls.append(n) or real(c, n))
    monkeypatch.setattr(results, "_DERIVED", {})
    first = frontier.accuracy_points(cells, 1024)
    again = frontier.accuracy_points(cells, 1024)
    assert first == again == real(list(cells), 1024) and calls == [1024]
    frontier.accuracy_points(list(cells), 1024)
    frontier.accuracy_points(tuple(list(cells)), 1024)  # another tuple: another file version
    assert calls == [1024, 1024, 1024]


# -- every comparison the pages state, over the shipped files --------------------------------------
def _outcomes(cells, row: str, keep=lambda c: True) -> dict:
    return {
        (c.length, c.depth, c.needle): bool(c.correct) for c in cells if c.row == row and keep(c)
    }


def _scope_and_claims(text: str, where: str) -> None:
    """What any sentence says of its scopes: every "n = N positions" (a test made) has N at
    least :data:`MIN_POSITIONS`, every "not compared (N ...)" fewer, and no test is reported as
    unable to decide (a scope that small is not compared at all)."""
    for n in re.findall(r"with n = ([\d, and]+) positions?", text):
        for k in re.findall(r"\d+", n):
            assert int(k) >= MIN_POSITIONS, (where, text)
    for k in re.findall(r"not compared \((\d+) ", text):
        assert int(k) < MIN_POSITIONS, (where, text)
    assert "no verdict possible" not in text, (where, text)


def _supports(t: stats.Paired, first_more: bool, where: str, text: str) -> None:
    """A stated difference, recomputed: at least MIN_POSITIONS shared positions, p < 0.05, and
    the direction said."""
    assert t.n >= MIN_POSITIONS, (where, t, text)
    assert t.p < 0.05, (where, t, text)
    assert (t.more_a > t.more_b) == first_more, (where, t, text)


def _best_rows(cells, length: int, memory: float) -> tuple[dict[str, tuple], dict[str, dict]]:
    """Per group, the rank key (accuracy, bytes, row) of its best row within 2 % of ``memory``
    among the rows with at least MIN_POSITIONS positions at ``length`` (from the records), and
    every row's outcomes there."""
    by: dict[str, list] = {}
    for c in cells:
        if c.length == length:
            by.setdefault(c.row, []).append(c)
    out = {r: {(c.depth, c.needle): bool(c.correct) for c in cs} for r, cs in by.items()}
    best: dict[str, tuple] = {}
    for r, cs in by.items():
        g = frontier.group(r, cs[0].kind, cs[0].bits)
        x = sum(c.kv_bytes / c.tokens for c in cs) / len(cs)
        n_pos = len({c.depth for c in cs})
        if g == "full" or abs(x - memory) > TOLERANCE * memory or n_pos < MIN_POSITIONS:
            continue
        key = (-sum(c.correct for c in cs) / len(cs), x, r)
        if g not in best or key < best[g]:
            best[g] = key
    return best, out


def _listed(text: str, lead: str) -> list[str]:
    """The groups a sentence lists after ``lead`` ("answers more needles than ..."), up to the
    sentence's end."""
    if lead not in text:
        return []
    part = text.split(lead, 1)[1].split(").", 1)[0]
    return re.findall(r"the best (.+?) row \(", part)


def test_every_comparison_on_the_pages_rests_on_ten_positions_and_p_below_005():
    """Every sentence that compares rows over needle positions, at every choice of the pages
    (each memory row × each length of Evict or compress?, chapter 8's default, the needle grid's
    rows, chapter 7's rows, modes and family, chapter 9's fact, the second question), over the
    shipped files: each stated comparison's scope has at least 10 positions, and each "answers
    more" / "fewer" has p < 0.05 by the exact sign test recomputed here from the records."""
    if not (SHIPPED / results.GRID_FILE).is_file():
        pytest.skip("no shipped needle-grid.jsonl in this copy")
    from app.lesson import chapters_7_10, needle
    from app.needle import family
    from h2o.model.rows import Row

    cells = results.read_grid(SHIPPED / results.GRID_FILE).records
    groups = {v: k for k, v in frontier.GROUPS.items()}
    lens = sorted({c.length for c in cells})
    acc = {n: frontier.accuracy_points(cells, n) for n in lens}
    ppl = []
    if (SHIPPED / results.FRONTIER_FILE).is_file():
        ppl = frontier.ppl_points(results.read_frontier(SHIPPED / results.FRONTIER_FILE).records)
    refs = frontier.reference_rows(ppl, *(acc[n] for n in reversed(lens)))
    said = 0
    # Evict or compress? (every memory row × every length) and chapter 8 (its default memory)
    for n in lens:
        memories = {frontier.memory_of(acc[n], r) for r in refs} | {frontier.default_memory(acc[n])}
        for memory in sorted(m for m in memories if m is not None):
            text = claims.verdict(acc[n], memory, claims.ACCURACY)
            where = f"verdict at {memory} B, {n} tokens"
            _scope_and_claims(text, where)
            best, out = _best_rows(cells, n, memory)
            ranked = text.split(" Not compared, drawn but not ranked: ")[0]
            for p in acc[n]:  # a row with fewer positions is never in the ranking
                if p.group != "full" and p.positions < MIN_POSITIONS:
                    assert claims.label(p) not in ranked, (where, p.row, text)
            if len(best) < 2:
                assert "needles than" not in text, (where, text)
                continue
            win = min(best.values())[2]
            for verb, first_more in (("more", True), ("fewer", False)):
                for name in _listed(text, f"answers {verb} needles than "):
                    t = stats.paired(out[win], out[best[groups[name]][2]])
                    _supports(t, first_more, where, text)
                    said += 1
    # the needle grid: the rows it opens on, and each row beside the full cache
    rows = grid.rows(cells)
    choices = [grid.pick(rows, ("full", "h2o@256:w50%", "h2o@256:w50%:prefill"), 5)]
    choices += [["full", r] for r in rows if r != "full"]
    lesson = [c for c in cells if c.length <= needle.LESSON_MAX_LENGTH]
    for shown, mine in [(c, cells) for c in choices] + [(needle.lesson_rows(rows), lesson)]:
        text = claims.scores_sentence(grid.scores(mine, shown), mine)
        _scope_and_claims(text, f"scores {shown}")
        m = re.search(r"\((\S+) against (\S+): ", text)
        if "answers more" in text:
            a, b = m.group(1), m.group(2)
            t = stats.paired(_outcomes(mine, a), _outcomes(mine, b))
            _supports(t, "most accurate row answers more" in text, f"scores {shown}", text)
            said += 1
    # chapter 7: the two modes and the family since H2O; the grid page's family, every budget
    dec, pre = f"h2o@{needle.LESSON_BUDGET}:w50%", f"h2o@{needle.LESSON_BUDGET}:w50%:prefill"
    text = claims.modes_sentence(lesson, dec, pre)
    _scope_and_claims(text, "modes")
    if "answers more" in text:
        t = stats.paired(_outcomes(lesson, pre), _outcomes(lesson, dec))
        _supports(t, "the prefill mode answers more" in text, "modes", text)
        said += 1
    for mine, budget in ((lesson, needle.LESSON_BUDGET), (cells, None)):
        for row in family.family_rows(mine, budget):
            text = family.family_sentence(mine, row)
            _scope_and_claims(text, row)
            for part in text.split(" At ")[1:] if "beside " in text else [text]:
                if "answers more" not in part:
                    continue
                m = re.search(r"beside (\S+) \(which holds", part)
                other = m.group(1) if m else family.partner(row)
                ours = _outcomes(mine, row)
                theirs = _outcomes(mine, other)
                keys = [k for k in ours if k in theirs]
                t = stats.paired({k: ours[k] for k in keys}, {k: theirs[k] for k in keys})
                _supports(t, "SnapKV answers more" not in part, row, text)
                said += 1
    # chapter 9: a fact stated once, each window against the full cache and each other
    text = chapters_7_10.grid_fact(cells)
    _scope_and_claims(text, "grid_fact")
    mid = [c for c in lesson if 0 < c.depth < 100]
    full = _outcomes(mid, "full")
    windows = {}
    for r in chapters_7_10.FACT_ROWS:
        t = stats.paired(_outcomes(mid, r), full)
        w = Row.parse(r).recent_window
        windows[w] = _outcomes(mid, r)
        if "fewer than the full cache with either window" in text:
            _supports(t, False, "grid_fact", text)
            said += 1
        for verb in ("fewer", "more"):
            if f"with {w} slots {verb} than the full cache" in text:
                _supports(t, verb == "more", "grid_fact", text)
                said += 1
    (wa, a), (_, b) = windows.items()
    for w in windows:
        if f"the window of {w} slots answers more" in text:
            _supports(stats.paired(a, b), w == wa, "grid_fact", text)
            said += 1
    # the second question: per row, the first against the second
    if (SHIPPED / results.FOLLOWUP_FILE).is_file():
        fu = results.read_followup(SHIPPED / results.FOLLOWUP_FILE).records
        rows = list(dict.fromkeys(c.row for c in fu))
        for r, text in zip(rows, claims.followup_sentences(fu, rows), strict=True):
            _scope_and_claims(text, r)
            if "answered fewer" in text or "answered more" in text:
                cs = [c for c in fu if c.row == r]
                t = stats.paired(
                    {c.key: c.correct_first for c in cs},
                    {c.key: c.correct_second for c in cs},
                    claims.followup_position,
                )
                _supports(t, "answered fewer" in text, r, text)
                said += 1
    assert said  # the shipped files do state differences, and each was recomputed here
