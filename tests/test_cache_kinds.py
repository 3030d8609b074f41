"""The kinds of cache (h2o/model/caches): each built-in row parses into its class, and a toy
kind added in one file (tests/toy_cache_kind.py) plus a registration is a row everywhere — the
grammar, its bytes, the model's runs (prefix sharing included), the needle grid's runner and
result files, the app's needle grid and Evict or compress? pages (its frontier: needle accuracy,
since it compresses a prompt once), and the frontier command, which leaves it out."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

import pytest

from h2o.alloc import slot_bytes
from h2o.model import caches
from h2o.model.rows import Row, kinds, parse_rows

CFG = SimpleNamespace(n_layers=2, n_kv_heads=3, head_dim=64)


@pytest.mark.parametrize(
    ("label", "cls", "group"),
    [
        ("full", caches.FullCache, "full"),
        ("kivi16", caches.KiviCache, "full"),
        ("kivi4", caches.KiviCache, "compress"),
        ("h2o@128", caches.EvictingCache, "evict"),
        ("h2o@128:w50%:prefill", caches.EvictingCache, "evict"),
        ("snapkv@256:avg5", caches.SnapKVCache, "evict"),
        ("h2o@256+kivi4", caches.EvictingCache, "both"),
        ("snapkv@256+kivi4", caches.SnapKVCache, "both"),
    ],
)
def test_each_row_asks_its_kind(label, cls, group) -> None:
    row = Row.parse(label)
    assert type(row.cache) is cls and row.cache.row is row
    assert row.group == group
    assert row.evicts == cls.evicts


def test_closed_loop_is_the_kinds_fact() -> None:
    assert Row.parse("h2o@128").cache.closed_loop
    assert Row.parse("kivi4").cache.closed_loop
    assert not Row.parse("snapkv@128").cache.closed_loop
    assert not Row.parse("h2o@128:w50%:prefill").cache.closed_loop


def test_register_refuses_what_is_not_a_new_kind() -> None:
    with pytest.raises(ValueError, match="subclasses CacheKind"):
        caches.register(object)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exists already"):
        caches.register(type("Again", (caches.CacheKind,), {"kind": "full"}))
    with pytest.raises(ValueError, match="built-in"):
        caches.unregister("policy")


@pytest.fixture
def toy():
    from toy_cache_kind import FirstTokens

    caches.register(FirstTokens)
    try:
        yield FirstTokens
    finally:
        caches.unregister(FirstTokens.kind)


def test_a_toy_kind_is_a_row(toy) -> None:
    row = Row.parse("first@64")
    assert row == Row("first", "first", 64) and type(row.cache) is toy
    assert row.label == "first@64" and Row.parse(row.label) == row
    assert row.family == "First tokens" and row.group == "evict"
    assert "first" in kinds()
    assert parse_rows("full, first@64") == [Row("full"), row]
    # bytes: 64 fp16 slots per (layer, KV head) once the prompt is longer, every token before
    assert row.kv_bytes(CFG, 100) == 2 * 3 * 64 * slot_bytes(64)
    assert row.kv_bytes(CFG, 10) == 2 * 3 * 10 * slot_bytes(64)
    with pytest.raises(ValueError, match="takes no bits"):
        Row.parse("first@64+kivi4")
    with pytest.raises(ValueError, match="budget must be a positive integer"):
        Row("first", "first", 0)
    with pytest.raises(ValueError, match="takes no option 'window'"):
        Row("first", "first", 64, options={"window": 8})
    with pytest.raises(ValueError, match="first takes no options"):
        Row.parse("first@64:w8")


def test_without_registration_the_label_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown policy 'first'"):
        Row.parse("first@64")


@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


def test_the_model_runs_a_toy_kind(toy, model) -> None:
    from tiny_model import token_ids

    from h2o.model.answer import row_perplexity, score_answer, score_cells, shared_stop

    ids = token_ids(140, seed=5)
    prompt, answer = ids[:120], ids[120:126]
    # keeping at least the whole prompt is the full cache, to the last digit
    whole = score_answer(model, prompt, answer, Row.parse("first@200"), max_new=3)
    full = score_answer(model, prompt, answer, Row.parse("full"), max_new=3)
    assert whole.token_logprobs == full.token_logprobs
    assert whole.produced_ids == full.produced_ids
    # keeping the first 40: a span inside them is held by every head, one after them by none
    row = Row.parse("first@40")
    inside = score_answer(model, prompt, answer, row, needle_span=(5, 20), max_new=3)
    after = score_answer(model, prompt, answer, row, needle_span=(60, 70), max_new=0)
    assert inside.held == [1.0] * model.config.n_layers
    assert after.held == [0.0] * model.config.n_layers
    assert inside.kv_bytes == row.kv_bytes(model.config, len(prompt))
    assert inside.token_logprobs != full.token_logprobs
    # prompts sharing a prefix start from one reading: the same scores as one at a time
    long = token_ids(300, seed=6)  # two prompts sharing their first 200 tokens (a block: 128)
    cells = [(long[:260], answer, (5, 20)), (long[:200] + long[261:290], answer, (5, 20))]
    assert shared_stop(cells[0][0], cells[1][0], row) == 128
    shared = score_cells(model, cells, row, max_new=3)
    alone = [score_answer(model, p, a, row, needle_span=s, max_new=3) for p, a, s in cells]
    for s, a in zip(shared, alone, strict=True):
        assert (s.token_logprobs, s.produced_ids, s.held) == (
            a.token_logprobs,
            a.produced_ids,
            a.held,
        )
    with pytest.raises(ValueError, match="no closed-loop perplexity"):
        row_perplexity(model, ids, row)


def test_the_kinds_come_in_their_rank_order(toy) -> None:
    """Tables list the kinds by their class's rank: the built-in ones first (the full cache,
    eviction, the presses, Quest, KIVI-style), a kind registered later after them."""
    from app.needle.grid import row_order
    from h2o.model import rows

    assert kinds()[-1] == "first"
    assert kinds()[:-1] == rows.KINDS and rows.KINDS[0] == "full" and rows.KINDS[-1] == "kivi"
    ranks = [caches.CACHE_KINDS[k].rank for k in kinds()]
    assert ranks == sorted(ranks)
    first, kivi = (SimpleNamespace(kind=k, row=k) for k in ("first", "kivi"))
    assert row_order(kivi) < row_order(first)


def test_the_app_reads_a_toy_kind_from_the_library(toy) -> None:
    from app.needle.frontier import accuracy_points, cache_facts
    from h2o.needle.cells import row_fields
    from h2o.needle.results import parse_cell

    line = {
        **row_fields("first@64"),
        "length": 512,
        "depth": 50,
        "needle": "orange-padlock",
        "question": "What is the code of the orange padlock?",
        "expected": "1449",
        "produced": "1449",
        "correct": True,
        "logprob": -0.5,
        "held": [1.0],
        "kv_bytes": 1000,
        "prompt_tokens": 500,
        "needle_span": [18, 34],
        "seconds": 1.0,
    }
    cell = parse_cell(line)
    (point,) = accuracy_points([cell], 512)
    assert point.group == "evict" and point.family == "First tokens"
    assert cache_facts(point) == ("first", None, 0)
    from app.figures.needle import family_style

    style = family_style("evict", "first", None, None, 0)  # drawn as its class says
    assert (style["color"], style["symbol"]) == ("#8C564B", "x")


def test_the_toy_kind_stays_a_few_methods() -> None:
    """A kind is what differs from its base: the toy says it in three methods (at most five)."""
    from toy_cache_kind import FirstTokens

    own = [n for n, v in vars(FirstTokens).items() if isinstance(v, classmethod) or callable(v)]
    assert sorted(own) == ["name", "read_prompt"]


def test_a_kind_owns_its_options(toy) -> None:
    """A kind with an option of its own is its class alone: it declares the option, reads its
    token and writes it back; the other kinds do not read it; the row grammar
    (h2o/model/rows.py) names none of it."""
    from toy_cache_kind import FirstTokens

    class Ends(FirstTokens):
        kind = "ends"
        options: ClassVar[dict[str, str]] = {"end": "first"}
        option_hints = ("last for the prompt's last positions",)

        @classmethod
        def read_option(cls, token, read):
            return ("end", token) if token == "last" and "end" not in read else None

        def head(self):
            return super().head() + (":last" if self.row.option("end") == "last" else "")

    caches.register(Ends)
    try:
        row = Row.parse("ends@64:last")
        assert row.option("end") == "last" and row.options == (("end", "last"),)
        assert row.label == "ends@64:last" and Row.parse(row.label) == row
        assert row == Row("ends", "ends", 64, options={"end": "last"})
        assert Row.parse("ends@64").option("end") == "first"
        assert Row.parse("ends@64") == Row("ends", "ends", 64, options={"end": "first"})
        # on another kind: a token it does not read
        for label in ("h2o@128:last", "snapkv@128:last"):
            with pytest.raises(ValueError, match=f"^row '{label}': cannot read option ':last'"):
                Row.parse(label)
        # a token this kind does not read: the refusal lists the tokens it does
        with pytest.raises(ValueError, match=r"':last' \(last for the prompt's last positions\)"):
            Row.parse("ends@64:last:last")
        with pytest.raises(ValueError, match=r"^row 'ends@64:w8': cannot read option ':w8'"):
            Row.parse("ends@64:w8")
        Row.parse("h2o@128:w8")  # the other kinds' options stay theirs
    finally:
        caches.unregister("ends")
    with pytest.raises(ValueError, match="cannot read option ':last'"):
        Row.parse("h2o@128:last")


@pytest.mark.slow
def test_the_needle_grid_runs_a_toy_kind_and_the_app_shows_it(
    toy, tiny_path, tmp_path, monkeypatch
):
    """The grid's runner (as ``python -m h2o needle`` calls it, in-process so that the
    registration holds) writes the toy kind's lines; the app's reader takes them; the needle
    grid page draws its panel and opens its cells; Evict or compress? puts it on the needle
    accuracy chart only — it compresses a prompt once, so it has no perplexity over a text."""
    from concurrent.futures import ThreadPoolExecutor

    from test_claims_needle import write_fixture
    from test_needle_pages import EC_PAGE, GRID_PAGE, arr, charts, markdown, open_page

    from app import state
    from app.needle import claims, frontier
    from h2o.needle import results as res
    from h2o.needle.cells import cell_batch, cell_needles, run_cell, run_cells, worker_model
    from h2o.needle.grid import run_grid
    from h2o.needle.results import read_lines

    length = 512
    specs = [
        {"row": r, "length": length, "depth": d, "needle": cell_needles(length, d)[0]}
        | {"model": tiny_path}
        for r in ("full", "first@64")
        for d in (0, 50, 100)
    ]
    results = tmp_path / "results"
    write_fixture(results)  # its frontier file; the grid file is the run's alone
    (results / res.GRID_FILE).unlink()
    (results / f"{res.GRID_FILE}.meta.json").unlink()
    out = results / res.GRID_FILE
    run = run_grid(
        specs, run_cells, out, make_executor=lambda: ThreadPoolExecutor(1), batch=cell_batch
    )
    assert run.complete and run.computed == len(specs) and not run.failed
    # the toy reads a prompt as the full cache does: one job for both rows, the same lines as
    # each cell run alone
    assert len({cell_batch(s) for s in specs}) == 1
    lines = read_lines(out, resume=True).records
    for spec, line in zip(specs, lines, strict=True):
        assert {**run_cell(spec), "seconds": 0} == {**line, "seconds": 0}

    monkeypatch.setattr(res, "RESULTS_DIR", results)
    monkeypatch.setattr(res, "_PARSED", {})  # labels this server parsed while it was registered
    loaded = res.read_grid(out)
    assert not loaded.problems and len(loaded.records) == len(specs)
    mine = [c for c in loaded.records if c.row == "first@64"]
    row = Row.parse("first@64")
    cfg = worker_model(tiny_path).config
    for c in mine:
        assert (c.kind, c.family, c.budget) == ("first", "First tokens", 64)
        assert c.kv_bytes == row.kv_bytes(cfg, c.tokens)
        # every head holds the first 64 positions: the whole needle, or not all of it
        assert c.held == (float(c.needle_span[1] <= 64),) * cfg.n_layers

    # the needle grid: its panel beside the full cache's, and each of its cells opens
    at = open_page(GRID_PAGE, ng_rows=["full", "first@64"], ng_cell_row="first@64")
    panels = [a["text"] for a in charts(at)["ng_heatmaps"]["layout"]["annotations"]]
    assert panels == ["full", "first@64"]
    assert "First tokens — first@64" in at.multiselect(key=state.wkey("ng_rows")).options
    for c in mine:
        at.session_state["ng_cell_len"], at.session_state["ng_cell_depth"] = c.length, c.depth
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert c.produced in [t.value for t in at.text]

    # Evict or compress?: on the needle accuracy chart, drawn as its class says; not on the
    # perplexity chart, and the page says why
    at = open_page(EC_PAGE, ec_row="first@64", ec_length=length)
    assert "first@64" in at.selectbox(key=state.wkey("ec_row")).options
    acc = frontier.accuracy_points(loaded.records, length)
    (point,) = [p for p in acc if p.row == "first@64"]
    assert point.y == sum(c.correct for c in mine) / len(mine)
    (trace,) = [t for t in charts(at)["ec_acc"]["data"] if t["name"] == "First tokens"]
    assert (trace["marker"]["symbol"], trace["marker"]["color"]) == ("x", "#8C564B")
    assert list(arr(trace["y"])) == [point.y]
    shown = markdown(at)
    assert claims.verdict(acc, frontier.memory_of(acc, "first@64"), claims.ACCURACY) in shown
    ppl = frontier.ppl_points(res.read_frontier(results / res.FRONTIER_FILE).records)
    assert "first@64" not in [p.row for p in ppl]
    assert any(i.value.startswith("first@64 is not on the perplexity chart") for i in at.info)
    note = claims.one_shot_note(loaded.records, [p.row for p in ppl])
    assert note.startswith("First tokens compresses a prompt once") and note in shown


def test_a_one_shot_kind_has_no_perplexity_line(toy, tiny_path, tmp_path, capsys) -> None:
    """A kind that compresses a prompt once (``closed_loop = False``) has no line on the
    perplexity frontier: the cell function refuses it, and the frontier command leaves it out
    and says why (the needle accuracy chart is its frontier, as the test above shows)."""
    from h2o.cli import main
    from h2o.needle.cells import run_frontier

    assert not toy.closed_loop
    text = tmp_path / "text.txt"
    text.write_text("The keeper lit the lamp at dusk and wound the clock. " * 20, encoding="utf-8")
    spec = {"row": "first@64", "text": str(text), "tokens": 100, "model": tiny_path}
    with pytest.raises(ValueError, match="no closed-loop perplexity"):
        run_frontier(spec)
    out = tmp_path / "frontier.jsonl"
    argv = ["frontier", "--rows", "first@64", "--text", str(text), "--tokens", "100"]
    assert main([*argv, "--model", tiny_path, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "first@64 left out: these rows compress a prompt once" in err
    assert "no row left that has a perplexity" in err and not out.exists()
