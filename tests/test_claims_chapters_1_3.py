"""The lesson's chapters 1–3 say only what their numbers say.

Each sentence-building function of ``app/lesson/chapters_1_3.py`` is driven over every value of its
chapter's controls (chapter 1: context × budget × batch), and every number it prints is read
back and compared with one computed here independently: from the published shapes and parameter
counts, from the card, or straight from the trace's rows. One AppTest shows that the page renders
exactly what the functions return.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import h2o
from app import card
from app.lesson import chapters_1_3
from h2o import explain, synthetic

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
GIB, MIB = 2**30, 2**20

# Published shapes: layers, KV heads, head dim, query heads, parameters, native context.
PUBLISHED = {
    "Llama-2-7B": (32, 32, 128, 32, 6.74e9, 4096),
    "Llama-3.1-70B": (80, 8, 128, 64, 70.6e9, 131072),
    "SmolLM2-135M": (30, 3, 64, 9, 134.5e6, 8192),
}


def smollm() -> explain.ModelShape | None:
    from h2o.model import ModelNotFoundError, find_gguf

    try:
        return explain.named(explain.gguf_shape(str(find_gguf())), "SmolLM2-135M")
    except ModelNotFoundError:
        return None


SHAPES = [s for s in (smollm(), explain.LLAMA2_7B, explain.LLAMA31_70B) if s is not None]
SETTINGS = list(
    itertools.product(chapters_1_3.CONTEXTS, chapters_1_3.BUDGETS, chapters_1_3.BATCHES)
)


def weights(name: str) -> float:
    return PUBLISHED[name][4] * 2  # fp16


def kv(name: str, tokens: int, batch: int) -> float:
    layers, kv_heads, dim, *_ = PUBLISHED[name]
    return layers * kv_heads * dim * 2 * 2 * tokens * batch


def close(text: str, want: float, rel: float = 0.0) -> None:
    """``text`` (a printed number) is ``want`` to the precision it is printed at."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    assert abs(float(text) - want) <= 0.5 * 10**-decimals + rel * want, (text, want)


def size(number: str, unit: str) -> float:
    return float(number) * (GIB if unit == "GiB" else MIB)


def close_bytes(number: str, unit: str, want: float) -> None:
    close(number, want / (GIB if unit == "GiB" else MIB))


def close_ratio(number: str, how: str, want: float) -> None:
    """ "2.8× its" (a multiple, when >= 1) or "7.6 % of its" (a share, when < 1)."""
    if how.startswith("×"):
        assert want >= 1
        close(number, want)
    else:
        assert want < 1
        close(number, 100 * want)


# -- chapter 1 -------------------------------------------------------------------------------------
SIZE = r"([\d.]+) (GiB|MiB)"
RATIO = r"([\d.]+)(× its| % of its)"


def test_the_shapes_are_the_published_ones():
    for s in SHAPES:
        layers, kv_heads, dim, heads, params, native = PUBLISHED[s.name]
        assert (s.n_layers, s.n_kv_heads, s.head_dim, s.n_heads, s.context) == (
            layers,
            kv_heads,
            dim,
            heads,
            native,
        )
        assert s.n_params == pytest.approx(params, rel=1e-3)  # the GGUF's own sum for SmolLM2


@pytest.mark.parametrize(("context", "budget", "batch"), SETTINGS)
def test_chapter_1_memory_sentence_at_every_setting(context, budget, batch):
    for s in SHAPES:
        text = chapters_1_3.memory_sentence(s, context, budget, batch)
        w = weights(s.name) if s.name != "SmolLM2-135M" else s.n_params * 2
        full = kv(s.name, context, batch)
        m = re.search(rf"{SIZE} of KV cache, {RATIO} {SIZE} of weights — ", text)
        assert m, text
        close_bytes(m[1], m[2], full)
        close_ratio(m[3], m[4], full / w)
        close_bytes(m[5], m[6], w)
        assert ("the cache outweighs the weights" in text) == (full > w), text
        assert ("the weights still outweigh it" in text) == (full <= w), text
        assert ("one sequence" in text) == (batch == 1)
        assert (f"a batch of {batch} sequences" in text) == (batch > 1)
        native = PUBLISHED[s.name][5]
        assert (f"past its native {native // 1024}K context" in text) == (context > native), text
        if budget >= context:
            assert "nothing to evict" in text and "Capped" not in text
        else:
            m = re.search(rf"Capped at {budget:,} slots: {SIZE}, {RATIO} weights\.", text)
            assert m, text
            cap = kv(s.name, budget, batch)
            close_bytes(m[1], m[2], cap)
            close_ratio(m[3], m[4], cap / w)


@pytest.mark.parametrize(("context", "budget", "batch"), SETTINGS)
def test_chapter_1_decode_reads_at_every_setting(context, budget, batch):
    text = chapters_1_3.reads_sentence(explain.LLAMA2_7B, context, budget, batch)
    w, full = weights("Llama-2-7B"), kv("Llama-2-7B", context, batch)
    m = re.search(rf"{SIZE} \+ {SIZE} = \*\*{SIZE} per step\*\*", text)
    assert m, text
    close_bytes(m[1], m[2], w)
    close_bytes(m[3], m[4], full)
    close_bytes(m[5], m[6], w + full)
    if budget >= context:
        assert "nothing is evicted" in text and "less to read" not in text
    else:
        cap = kv("Llama-2-7B", budget, batch)
        m = re.search(rf"slots, {SIZE} \+ {SIZE} = {SIZE}, \*\*([\d.]+)× less to read", text)
        assert m, text
        close_bytes(m[3], m[4], cap)
        close_bytes(m[5], m[6], w + cap)
        close(m[7], (w + full) / (w + cap))


def test_the_worked_example_llama2_at_32k_reads_16_gib_of_kv_per_token():
    text = chapters_1_3.reads_sentence(explain.LLAMA2_7B, 32_768, 1024, 1)
    assert "12.6 GiB + 16.0 GiB" in text  # 6.74e9 × 2 B; 32 × 32 × 128 × 4 B × 32K = 16 GiB


@pytest.mark.parametrize("budget", chapters_1_3.BUDGETS)
def test_chapter_1_bookkeeping_against_the_slot_it_manages(budget):
    per_slot = h2o.H2O.nbytes_per_slot
    assert per_slot == 4 + 8 + 1  # the card: position, float64 score, one scratch byte
    text = chapters_1_3.bookkeeping_sentence(per_slot, SHAPES, budget)
    assert f"**{per_slot} bytes**" in text
    m = re.search(rf"([\d.]+) KB at the budget of {budget:,}", text)
    close(m[1], per_slot * budget / 1000)
    for s in SHAPES:
        slot = PUBLISHED[s.name][2] * 2 * 2  # head dim × (K and V) × fp16
        m = re.search(rf"{slot} B in [^:]*{re.escape(s.name)}[^:]*: \*\*([\d.]+)%\*\*", text)
        assert m, (s.name, text)
        close(m[1], 100 * per_slot / slot)
    if any(s.name == "SmolLM2-135M" for s in SHAPES):
        assert "256 B in SmolLM2-135M (head dim 64): **5.1%**" in text  # about 5 %, as stated


def test_chapter_1_gqa_from_the_heads():
    text = chapters_1_3.gqa_sentence(SHAPES)
    for s in SHAPES:
        _, kv_heads, _, heads, _, _ = PUBLISHED[s.name]
        if heads > kv_heads:
            assert f"{s.name} shares each of its {kv_heads} KV heads between" in text
            assert f"**{heads // kv_heads}× smaller**" in text
        else:
            assert f"{s.name} has one KV head per query head" in text


# -- chapter 2 -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def canonical():
    trace = h2o.builtin_trace("canonical")
    rep = h2o.replay(h2o.StreamingLLM(256, sinks=4), trace, 32)
    lost = explain.lost_heavy_hitter(rep, trace, 256)
    facts = explain.sink_facts(trace, rep, lost)
    return trace, rep, facts


def test_chapter_2_every_number_against_the_trace(canonical):
    trace, rep, f = canonical
    text = chapters_1_3.sinks_intro(f) + "\n".join(chapters_1_3.sinks_text(f))
    steps, row = trace.steps, trace.row
    dense = trace.dense()  # row t in line t, zero right of the diagonal
    # The heavy hitter: of the victims past the first 256 positions, the one whose attention
    # after its eviction sums highest, recomputed from the rows.
    best = max(
        (float(dense[t + 1 :, p].sum()), p, t)
        for t, p in zip(rep.victim_step.tolist(), rep.victim_pos.tolist(), strict=True)
        if p >= 256
    )
    lost_mass, pos, at = best
    assert f"Position **{pos}** is one" in text
    assert f"pushed it out at step **{at}**" in text
    close(re.search(r"\*\*([\d.]+)\*\* steps' worth", text)[1], lost_mass)
    got = np.array([row(s)[pos] for s in range(pos + 1, at + 1)])
    close(re.search(r"took on average ([\d.]+) of each row", text)[1], got.mean())
    even = np.mean(got * np.arange(pos + 1, at + 1))
    close(re.search(r"([\d.]+)× an even share \(1/t", text)[1], even)
    # Renormalisation one step later: StreamingLLM keeps positions 0–3 and the 252 newest.
    nxt = row(at + 1)
    kept = nxt[:4].sum() + nxt[at + 1 - 252 : at + 1].sum()
    m = re.search(rf"at step {at + 1} the kept positions hold ([\d.]+) of the full row", text)
    close(m[1], kept)
    close(re.search(r"each kept weight is scaled by ([\d.]+)\)", text)[1], 1 / kept)
    # The measures: means over steps t >= budget.
    close(
        re.search(r"keeps \*\*([\d.]+)\*\* of the attention mass", text)[1], rep.mass[256:].mean()
    )
    close(re.search(r"top-32 recall of ([\d.]+)", text)[1], rep.recall[256:].mean())
    close(re.search(r"oracle bound of ([\d.]+)", text)[1], trace.oracle_mass(256)[256:].mean())
    # The synthetic trace's calibration.
    sink = np.mean([row(t)[:4].sum() for t in range(5, steps)])
    close(re.search(r"Positions 0–3 take ([\d.]+) of a steady-state row", text)[1], sink)
    band = np.mean([row(t)[-64:].sum() for t in range(65, steps)])
    close(re.search(r"with what lies under it, ([\d.]+) of a steady-state row", text)[1], band)
    assert "the card's 0.7367 at budget 256" in text
    assert rep.mass[256:].mean() == pytest.approx(0.7367, abs=1e-4)  # the card's number
    close(re.search(r"measured here: ([\d.]+)", text)[1], rep.mass[256:].mean())
    assert f"the {synthetic.BAND} newest positions" in text
    assert f"knee at {synthetic.BAND} in chapter 4" in text
    assert f"{synthetic.HITTERS} heavy hitters per {synthetic.EPOCH}-step epoch" in text
    assert "synthetic" in chapters_1_3.sinks_intro(f)  # said where the trace is first used


def test_chapter_2_defines_the_measures_as_the_library_computes_them(canonical):
    _, rep, f = canonical
    text = chapters_1_3.measures_text(f)
    assert rep.summary()["retained_mass"] == pytest.approx(rep.mass[256:].mean())
    assert "the mean over the steps t ≥ budget (256)" in text
    assert "open-loop" in text and "not recomputed after an eviction" in text
    assert "re-admit" in text and "No policy can reach it" in text
    assert "row t's 32 most-attended positions" in text


def nudged(value: object) -> object:
    """A different number of the same kind (a literal in the text would not follow it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return value + 3 if isinstance(value, int) else value * 1.37 + 0.011


def scalar_fields(facts: object) -> list[str]:
    return [
        f.name for f in dataclasses.fields(facts) if isinstance(getattr(facts, f.name), int | float)
    ]


def test_chapter_2_text_follows_every_number_it_is_given(canonical):
    """The chapter's settings are fixed, so a literal that happens to be right would pass the
    test above: here each number is changed in turn, and the text must change with it."""
    _, _, f = canonical

    def text(facts: explain.SinkFacts) -> str:
        return (
            chapters_1_3.sinks_intro(facts)
            + "".join(chapters_1_3.sinks_text(facts))
            + (chapters_1_3.measures_text(facts))
        )

    base = text(f)
    for name in scalar_fields(f):
        assert text(dataclasses.replace(f, **{name: nudged(getattr(f, name))})) != base, name
    for name in ("position", "evicted_at", "lost_mass"):
        lost = dataclasses.replace(f.lost, **{name: nudged(getattr(f.lost, name))})
        assert text(dataclasses.replace(f, lost=lost)) != base, name


# -- chapter 3 -------------------------------------------------------------------------------------
def test_chapter_3_every_number_against_the_replay():
    trace = h2o.builtin_trace("toy")
    rep = h2o.replay(h2o.H2O(8, recent_window=2), trace, 4)
    f = explain.heavy_facts(trace, rep)
    text = (
        chapters_1_3.heavy_intro(f)
        + chapters_1_3.heavy_why(f)
        + chapters_1_3.heavy_age_text(f)
        + "\n".join(chapters_1_3.heavy_text(f))
    )
    t = int(rep.victim_step[0])
    pos, scores = rep.kept_at(t)
    victim, score = int(rep.victim_pos[0]), float(rep.victim_score[0])
    evictable = pos[: len(pos) - 2]
    assert f"at step **{t}**, {len(pos)} positions for 8 slots" in text
    assert f"Positions {pos[-2]}–{pos[-1]} are protected" in text
    assert f"position {victim} has the lowest cumulative attention ({score:.4f})" in text
    assert score == scores[: len(pos) - 2].min()
    youngest = int(evictable.max())
    assert (f"Position {victim} is also the **youngest**" in text) == (victim == youngest)
    assert (
        f"scored at {t - victim} steps, position {evictable.min()} at {t - evictable.min()}" in text
    )
    top = pos[np.argsort(-scores, kind="stable")[:2]]
    shares = np.array([trace.row(s)[top].sum() for s in range(t + 1, trace.steps)])
    assert f"positions {top[0]} and {top[1]}, go on taking" in text
    close(re.search(r"on average ([\d.]+) of each later row", text)[1], shares.mean())
    even = np.mean(shares * np.arange(t + 1, trace.steps) / 2)
    close(re.search(r"([\d.]+)× an even share for two", text)[1], even)


def test_chapter_3_text_follows_every_number_it_is_given():
    trace = h2o.builtin_trace("toy")
    f = explain.heavy_facts(trace, h2o.replay(h2o.H2O(8, recent_window=2), trace, 4))

    def text(facts: explain.HeavyFacts) -> str:
        return (
            chapters_1_3.heavy_intro(facts)
            + chapters_1_3.heavy_why(facts)
            + chapters_1_3.heavy_age_text(facts)
            + "".join(chapters_1_3.heavy_text(facts))
        )

    base = text(f)
    for name in scalar_fields(f):
        assert text(dataclasses.replace(f, **{name: nudged(getattr(f, name))})) != base, name
    for name in ("protected", "top", "evictable"):
        moved = tuple(p + 1 for p in getattr(f, name))
        assert text(dataclasses.replace(f, **{name: moved})) != base, name
    # "the youngest position that may go" only when it is: not for the oldest evictable one.
    oldest = dataclasses.replace(f, victim=min(f.evictable))
    assert "**youngest**" not in text(oldest) and "is not the youngest" in text(oldest)


def test_chapter_3_tie_text_follows_the_run_it_is_given():
    demo = explain.tie_demo()
    base = chapters_1_3.tie_text(demo)
    for key in ("steps", "budget", "window", "tie_step"):
        assert chapters_1_3.tie_text({**demo, key: demo[key] + 1}) != base, key
    before = {p: s + 0.01 for p, s in demo["before"].items()}
    assert chapters_1_3.tie_text({**demo, "before": before}) != base
    tied = {p: s + 0.01 * p for p, s in demo["tied"].items()}
    assert chapters_1_3.tie_text({**demo, "tied": tied}) != base
    for key, other in (("chosen", [2, 3]), ("down_to_2", [3, 2]), ("tie_victims", [2])):
        assert demo[key] != other
        assert chapters_1_3.tie_text({**demo, key: other}) != base, key


def test_chapter_3_ties_from_the_library_s_own_run(monkeypatch):
    calls = []
    step = h2o.H2O.on_decode_step
    monkeypatch.setattr(
        h2o.H2O, "on_decode_step", lambda self, *a: calls.append(a) or step(self, *a)
    )
    demo = explain.tie_demo()
    text = chapters_1_3.tie_text(demo)
    assert f"on {len(calls)} hand-made steps" in text
    assert len(calls) == 5 and "five hand-made steps" in explain.__doc__  # error 13
    assert "four" not in (explain.tie_demo.__doc__ or "")
    before = demo["before"]
    order = sorted(list(before.items())[:-1], key=lambda ps: (ps[1], ps[0]))[:2]
    assert sorted(p for p, _ in order) == demo["down_to_2"]  # what the policy returned
    assert f"the argmin picks {order[0][0]} ({order[0][1]:g}), then {order[1][0]} " in text
    assert "(0.7), then 2 (0.85)" in text  # the card's 0.2/0.1/0.7 step on 1.5/0.75/0
    assert "positions 1 and 2 tie, and `evict()` returns **[1]**" in text


def bar_values(arr: list | dict) -> np.ndarray:
    """A figure array as numbers (Plotly sends numpy arrays as base64 typed arrays)."""
    if isinstance(arr, dict):
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]))
    return np.asarray(arr, dtype=float)


# -- the page renders what the functions return ----------------------------------------------------
def test_the_lesson_renders_the_claims_it_is_tested_on():
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()  # every chapter (tests see pages drawn whole: conftest.py)
    assert not at.exception, [e.value for e in at.exception]
    shown = [m.value for m in at.markdown]
    shapes = [s.name for s in SHAPES]
    table = at.dataframe[0].value
    assert list(table["model"]) == shapes
    for batch in (1, 8):
        if batch != 1:
            at.select_slider(key="lesson_batch").set_value(batch).run()
            shown = [m.value for m in at.markdown]
        want = "\n".join(
            f"- {chapters_1_3.memory_sentence(s, 32_768, 1024, batch)}" for s in SHAPES
        )
        assert any(want in m for m in shown)  # the list, then the reads, in one element
        # ... and the chart beside them plots the same bytes: weights, full cache, capped.
        spec = json.loads(at.get("plotly_chart")[0].proto.spec)
        bars = [bar_values(tr["y"]) for tr in spec["data"]]
        for i, s in enumerate(SHAPES):
            w = weights(s.name) if s.name != "SmolLM2-135M" else s.n_params * 2
            assert bars[0][i] == pytest.approx(w)
            assert bars[1][i] == kv(s.name, 32_768, batch)
            assert bars[2][i] == kv(s.name, 1024, batch)
        reads = chapters_1_3.reads_sentence(explain.LLAMA2_7B, 32_768, 1024, batch)
        assert any(m.endswith(f"\n\n{reads}") for m in shown)
    trace = h2o.builtin_trace("canonical")
    rep = h2o.replay(h2o.StreamingLLM(256, sinks=4), trace, 32)
    f = explain.sink_facts(trace, rep, explain.lost_heavy_hitter(rep, trace, 256))
    assert chapters_1_3.sinks_intro(f) in shown and "\n\n".join(chapters_1_3.sinks_text(f)) in shown
    toy = h2o.builtin_trace("toy")
    hf = explain.heavy_facts(toy, h2o.replay(h2o.H2O(8, recent_window=2), toy, 4))
    assert "\n\n".join(chapters_1_3.heavy_text(hf)) in shown
    # The victim's age names the answer: shown only once the question is revealed.
    assert chapters_1_3.heavy_age_text(hf) not in shown
    at.button(key="lesson_reveal_heavy").click().run()
    assert chapters_1_3.heavy_age_text(hf) in [m.value for m in at.markdown]
    assert chapters_1_3.tie_text(explain.tie_demo()) in shown
    # "The card" is said to be the project's H2O policy card where the lesson first names it,
    # so no student credits the paper with its sentences.
    texts = [n.value for n in at.main if isinstance(getattr(n, "value", None), str)]
    whole = "\n".join(texts)
    first = re.search(r"\bcard\b", whole, re.IGNORECASE)
    assert first and f"*the card* — {card.CARD_INTRO}" in whole
    # The chart's description (plain text) may say it before the markdown does: either way, the
    # introduction follows the first "card" at once.
    after = whole[first.end() : first.end() + len(card.CARD_INTRO) + 10].replace("*", "")
    assert after.startswith(f" — {card.CARD_INTRO.replace('*', '')}"), whole[: first.end()]
