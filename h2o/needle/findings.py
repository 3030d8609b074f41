"""The findings the README states, computed from the shipped result files: each row's needles
answered with a 95 % interval over positions (a position is a (length, depth) of the haystack,
its needles one observation: :mod:`h2o.stats`), the paired comparisons the text makes (an exact
sign test on the positions two rows share), H2O's window sweep (with what its band column's
window is against the model's attention band, ``attention-band.json``), the second question, and
perplexity over each text of ``frontier.jsonl`` (values text by text, and on how many texts one
row is the lower: a few texts allow no sign test).

``python -m h2o.needle.findings`` prints them as Markdown; ``--write`` puts the table between the
README's findings markers, the rest between those of ``docs/explanation/findings.md`` and the
perplexity lines between its perplexity markers (``tests/test_findings.py`` checks each holds
exactly what it prints, so their figures are the files' own).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from h2o.needle import results
from h2o.needle.results import BAND_FILE, Cell, FollowUpCell, FrontierRow
from h2o.stats import ALPHA, Paired, min_p, p_text, paired, positions, sign_test

#: The lengths where the compared rows have several needles a cell.
MAX_LENGTH = 2048

#: The grid's first depths, three needles each; the depths between were added one needle each.
GRID_DEPTHS = (0, 25, 50, 75, 100)

#: Rows shown in the table, in order (those in the file).
TABLE_ROWS = (
    "full",
    "kivi4",
    "kivi2",
    "h2o@256",
    "h2o@256:w50%",
    "h2o@256:w50%:prefill",
    "h2o@128:w50%",
    "h2o@128:w50%:prefill",
    "streaming-llm@256",
    "snapkv@256",
    "h2o@128",
    "streaming-llm@128",
    "snapkv@128",
    "snapkv@256:avg5",
    "snapkv@256+kivi4",
    "h2o@256:w50%+kivi4",
)
#: The pairs the README compares: (A, B, at which lengths: None for every length ≤ MAX_LENGTH).
PAIRS: tuple[tuple[str, str, int | None], ...] = (
    ("h2o@256:w50%:prefill", "h2o@256:w50%", None),
    ("h2o@128:w50%:prefill", "h2o@128:w50%", None),
    ("h2o@256:w50%", "h2o@256", None),
    ("snapkv@256", "streaming-llm@256", None),
    ("snapkv@256", "h2o@256:w50%:prefill", None),
    ("snapkv@256:avg5", "snapkv@256", None),
    ("kivi4", "kivi2", None),
    ("snapkv@256+kivi4", "snapkv@256", None),
    ("h2o@256:w50%+kivi4", "h2o@256:w50%", None),
)

#: Equal memory, literally: each quantized row and combination beside the eviction rows whose
#: budget holds its bytes per token within 2 % at that prompt length (the budget is the one whose
#: mean bytes per prompt token over the length's cells is nearest; ``docs/reference/rows.md``).
EQUAL_MEMORY: dict[tuple[str, int], tuple[str, ...]] = {
    ("kivi4", 512): ("h2o@226:w50%", "h2o@226:w50%:prefill", "snapkv@237", "streaming-llm@237"),
    ("kivi4", 1024): ("h2o@385:w50%", "h2o@385:w50%:prefill", "snapkv@405", "streaming-llm@405"),
    ("kivi4", 2048): ("h2o@688:w50%", "h2o@688:w50%:prefill", "snapkv@723", "streaming-llm@723"),
    ("kivi2", 512): ("h2o@181:w50%", "h2o@181:w50%:prefill", "snapkv@190", "streaming-llm@190"),
    ("kivi2", 1024): ("h2o@279:w50%", "h2o@279:w50%:prefill", "snapkv@293", "streaming-llm@293"),
    ("kivi2", 2048): ("h2o@460:w50%", "h2o@460:w50%:prefill", "snapkv@483", "streaming-llm@483"),
    ("snapkv@256+kivi4", 512): ("snapkv@149",),
    ("snapkv@256+kivi4", 1024): ("snapkv@157",),
    ("snapkv@256+kivi4", 2048): ("snapkv@141",),
    ("h2o@256:w50%+kivi4", 512): ("h2o@174:w50%",),
    ("h2o@256:w50%+kivi4", 1024): ("h2o@192:w50%",),
    ("h2o@256:w50%+kivi4", 2048): ("h2o@206:w50%",),
}
#: Rows "at equal memory" hold within this share of each other's bytes per token.
EQUAL_TOLERANCE = 0.02


def _outcomes(cells: Iterable[Cell], row: str, length: int | None) -> dict:
    return {
        (c.length, c.depth, c.needle): c.correct
        for c in cells
        if c.row == row and c.length <= MAX_LENGTH and (length is None or c.length == length)
    }


def _bytes_per_token(cells: Iterable[Cell], row: str, length: int) -> float:
    xs = [c.kv_bytes / c.tokens for c in cells if c.row == row and c.length == length]
    return sum(xs) / len(xs)


def table(cells: Sequence[Cell]) -> list[str]:
    """One Markdown table row per row of :data:`TABLE_ROWS` in the file."""
    out = [
        f"| row | positions at ≤ {MAX_LENGTH:,} tokens | needles a position | needles answered "
        "(95 % CI over positions) | by depth 0/25/50/75/100 % | other depths |",
        "|---|---|---|---|---|---|",
    ]
    for r in TABLE_ROWS:
        oc = _outcomes(cells, r, None)
        if not oc:
            continue
        s = positions(oc)
        by = []
        for d in GRID_DEPTHS:
            xs = [v for (n, dd, _), v in oc.items() if dd == d]
            by.append(f"{sum(xs)}/{len(xs)}")
        # the depths between (10, 20, …, 90 %), one needle each, where the row has them
        other = [v for (_, dd, _), v in oc.items() if dd not in GRID_DEPTHS]
        others = sorted({dd for (_, dd, _) in oc if dd not in GRID_DEPTHS})
        between = f"{sum(other)}/{len(other)} at {', '.join(map(str, others))} %" if other else "–"
        per: dict[tuple[int, int], int] = {}
        for n, d, _ in oc:
            per[(n, d)] = per.get((n, d), 0) + 1
        lo, hi = min(per.values()), max(per.values())
        needles = f"{lo}" if lo == hi else f"{lo}–{hi}"
        out.append(f"| `{r}` | {s.n} | {needles} | {s.text()} | {' · '.join(by)} | {between} |")
    return out


#: The window sweep: H2O (evicting while it reads) at each budget with its recent window as a
#: share of the budget, at its class default (32 slots) and at 45 slots, on the sweep's prompt
#: length. 45 is not the median of the model's per-layer attention bands (``attention-band.json``)
#: but the wider of their two middle values: :func:`band_note` says so under the table, with the
#: numbers read from the file.
SWEEP_BUDGETS = (64, 128, 256, 512)
SWEEP_WINDOWS = (("12%", ":w12%"), ("25%", ":w25%"), ("50%", ":w50%"), ("75%", ":w75%"))
SWEEP_FIXED = (("32 (default)", ""), ("45 (band)", ":w45"))
SWEEP_LENGTH = 1024


def sweep_rows() -> list[str]:
    """The sweep's row labels, budget by budget (those computed are in the file)."""
    return [f"h2o@{b}{suffix}" for b in SWEEP_BUDGETS for _, suffix in SWEEP_WINDOWS + SWEEP_FIXED]


def window_sweep(cells: Sequence[Cell], length: int = SWEEP_LENGTH) -> list[str]:
    """A Markdown table: per budget, the needles answered at each recent window (``k/n`` and
    the window in slots; "–" where not computed or not smaller than the budget). A budget is
    listed when at least two of its windows were computed; no table without one."""
    from h2o.model.rows import Row

    columns = SWEEP_WINDOWS + SWEEP_FIXED
    columns_n = len(columns)
    body = []
    for b in SWEEP_BUDGETS:
        row, computed = [f"| {b} |"], 0
        for label in sweep_rows()[columns_n * SWEEP_BUDGETS.index(b) :][:columns_n]:
            # the sweep's own depths: every window is counted on the same positions
            oc = {k: v for k, v in _outcomes(cells, label, length).items() if k[1] in GRID_DEPTHS}
            if not oc:
                row.append(" – |")
                continue
            computed += 1
            w = Row.parse(label).recent_window
            row.append(f" {sum(oc.values())}/{len(oc)} (w {w}) |")
        if computed >= 2:
            body.append("".join(row))
    if not body:
        return []
    head = " | ".join(name for name, _ in columns)
    return [
        f"| H2O budget ({length:,} tokens) | window {head} |",
        "|---|" + "---|" * len(columns),
        *body,
    ]


def band_window() -> int:
    """The recent window of the sweep's band column, in slots (from its row label)."""
    from h2o.model.rows import Row

    w = Row.parse(f"h2o@{max(SWEEP_BUDGETS)}{SWEEP_FIXED[-1][1]}").recent_window
    assert w is not None
    return int(w)


def band_note(band: Sequence[int], window: int) -> str:
    """What the band column's ``window`` is against the per-layer bands of ``attention-band.json``
    (``band``): their median, or which of the two middle values it is, or neither — and in how
    many layers a window that wide covers the band."""
    import statistics

    b = sorted(int(x) for x in band)
    if not b:
        return ""
    n, med = len(b), statistics.median(b)
    lo, hi = b[(n - 1) // 2], b[n // 2]
    bands = f"the {n} per-layer attention bands in `{BAND_FILE}`"
    if window == med:
        what = f"is the median of {bands}"
    elif lo != hi and window in (lo, hi):
        side = "wider" if window == hi else "narrower"
        what = (
            f"is the {side} of the two middle values ({lo} and {hi}) of {bands}, whose median "
            f"is {med:g}"
        )
    else:
        what = f"is not the median of {bands}, which is {med:g}"
    covered = sum(x <= window for x in b)
    return (
        f"The band column's window, {window} slots, {what}; a window of {window} is at least as "
        f"wide as the band in {covered} of the {n} layers."
    )


def _verdict(t: Paired, a: str, b: str) -> str:
    """Which row answers more, only on at least :data:`h2o.stats.MIN_POSITIONS` positions and
    where the sign test over them says so (p < 0.05); otherwise not distinguishable, or not
    compared."""
    if t.decidable and t.differs:
        return f"`{a}` answers more" if t.more_a > t.more_b else f"`{b}` answers more"
    return t.undecided()


def equal_memory(cells: Sequence[Cell]) -> list[str]:
    """One line per (row, length) of :data:`EQUAL_MEMORY` in the file: its count, then each
    partner's, bytes per token and the sign test over their shared positions; a partner outside
    :data:`EQUAL_TOLERANCE` of the row's bytes is named as such, never compared. Counts are
    needles. A partner sharing fewer than :data:`h2o.stats.MIN_POSITIONS` positions with the row
    is not compared (no test), as on the pages."""
    out = []
    for (a, length), partners in EQUAL_MEMORY.items():
        oa = _outcomes(cells, a, length)
        if not oa:
            continue
        xa = _bytes_per_token(cells, a, length)
        said = []
        for b in partners:
            ob = _outcomes(cells, b, length)
            if not ob or not set(oa) & set(ob):
                continue
            xb = _bytes_per_token(cells, b, length)
            if abs(xb - xa) > EQUAL_TOLERANCE * xa:
                said.append(f"`{b}` {xb:,.0f} B: not within {EQUAL_TOLERANCE:.0%}, not compared")
                continue
            t = paired(oa, ob)
            if not t.decidable:  # the pages' rule: no test on fewer than MIN_POSITIONS
                said.append(f"`{b}` {t.right_b}/{t.needles} ({xb:,.0f} B; {t.undecided()})")
                continue
            said.append(
                f"`{b}` {t.right_b}/{t.needles} ({xb:,.0f} B; positions {t.more_a} won by "
                f"`{a}`, {t.more_b} by `{b}` of {t.n}, sign test {p_text(t.p)}: "
                f"{_verdict(t, a, b)})"
            )
        if said:
            right = sum(oa.values())
            line = (
                f"- `{a}` at {length:,} tokens, {xa:,.0f} KV bytes per token, {right}/{len(oa)}; "
                f"at its memory: {'; '.join(said)}."
            )
            out.append(line)
    return out


def _budgetless(row: str) -> str:
    """``h2o@226:w50%`` → ``h2o@B:w50%``: the method whatever its budget."""
    head, _, rest = row.partition("@")
    budget = rest.split(":", 1)[0].split("+", 1)[0].split("/", 1)[0]
    return f"{head}@B{rest[len(budget) :]}"


def equal_memory_pooled(cells: Sequence[Cell]) -> list[str]:
    """The rows of :data:`EQUAL_MEMORY` over every length at once: at each length the row beside
    the partner of that method holding its bytes there (within :data:`EQUAL_TOLERANCE`), the
    sign test over all those positions (a length alone has too few to decide). A method is
    pooled only where every length of the row has its partner in the file."""
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    lengths: dict[str, list[int]] = {}
    for (a, length), partners in EQUAL_MEMORY.items():
        lengths.setdefault(a, []).append(length)
        for b in partners:
            groups.setdefault((a, _budgetless(b)), []).append((length, b))
    out = []
    for (a, method), pairs in groups.items():
        oa: dict = {}
        ob: dict = {}
        for length, b in pairs:
            xa = _outcomes(cells, a, length)
            xb = _outcomes(cells, b, length)
            if not xa or not xb or not set(xa) & set(xb):
                break
            if abs(
                _bytes_per_token(cells, b, length) - (m := _bytes_per_token(cells, a, length))
            ) > (EQUAL_TOLERANCE * m):
                break
            oa.update(xa)
            ob.update(xb)
        else:
            if [n for n, _ in pairs] != lengths[a]:
                continue
            t = paired(oa, ob)
            verdict = _verdict(t, a, method)
            at = ", ".join(f"{b.partition('@')[2].split(':')[0].split('+')[0]}" for _, b in pairs)
            lens = [f"{n:,}" for n, _ in pairs]
            out.append(
                f"- `{a}` against `{method}` at {', '.join(lens[:-1])} and {lens[-1]} tokens, "
                f"each length beside the budget holding its bytes there (B = {at}): "
                f"{t.right_a} against {t.right_b} of {t.needles} needles at {t.n} positions "
                f"({t.counts()}; exact sign test {p_text(t.p)}): {verdict}."
            )
    return out


def comparisons(cells: Sequence[Cell]) -> list[str]:
    """One line per pair of :data:`PAIRS` both rows of which are in the file."""
    out = []
    for a, b, length in PAIRS:
        oa, ob = _outcomes(cells, a, length), _outcomes(cells, b, length)
        if not oa or not ob or not set(oa) & set(ob):
            continue
        t = paired(oa, ob)
        where = f"at {length:,} tokens" if length else f"at ≤ {MAX_LENGTH:,} tokens"
        mem = ""
        if length:
            xa, xb = _bytes_per_token(cells, a, length), _bytes_per_token(cells, b, length)
            mem = f" ({xa:,.0f} and {xb:,.0f} KV bytes per token)"
        test = f"; exact sign test {p_text(t.p)}" if t.decidable else ""
        out.append(
            f"- `{a}` against `{b}` {where}{mem}: {t.right_a} against {t.right_b} of "
            f"{t.needles} shared needles at {t.n} position{'s' * (t.n != 1)} ({t.counts()}"
            f"{test}): {_verdict(t, a, b)}."
        )
    return out


def followup_position(key: tuple) -> tuple:
    """A follow-up cell's position, from its :attr:`~h2o.needle.results.FollowUpCell.key`: the
    length and the two facts' depths (both facts' places in one haystack)."""
    return key[:3]


def followup(lines: Sequence[FollowUpCell]) -> list[str]:
    """The second-question file: per row, both questions' needles over positions (a position
    is the length and the two facts' depths) and the sign test between them; rows whose counts
    are all the same share one line (in the file's order)."""
    said: dict[tuple, list[str]] = {}
    for r in dict.fromkeys(x.row for x in lines):
        cs = [x for x in lines if x.row == r]
        first = {x.key: x.correct_first for x in cs}
        second = {x.key: x.correct_second for x in cs}
        t = paired(first, second, followup_position)
        lens = tuple(sorted({x.length for x in cs}))
        a = positions(first, followup_position).text()
        b = positions(second, followup_position).text()
        said.setdefault((lens, a, b, t), []).append(r)
    out = []
    for (lens, a, b, t), rows in said.items():
        if not t.decidable:
            verdict = t.undecided()
        else:
            side = "first" if t.more_a > t.more_b else "second"
            said_p = f"sign test {p_text(t.p)}: "
            verdict = said_p + (f"the {side} answered more" if t.differs else t.undecided())
        out.append(
            f"- {', '.join(f'`{r}`' for r in rows)} ({', '.join(f'{x:,}' for x in lens)} "
            f"tokens): the first question {a}, the second {b} ({t.counts()}; {verdict})."
        )
    return out


#: The perplexity block: closed-loop perplexity over the first :data:`PPL_TOKENS` tokens of each
#: text ``frontier.jsonl`` holds at that length (the app's frontier page charts the same lines).
PPL_TOKENS = 2048

#: Rows on the frontier beside the rows holding their bytes per token (within
#: :data:`EQUAL_TOLERANCE` on each text; a text where a partner is not is named, not compared):
#: the quantized caches, H2O with its kept slots at 4 bits, and Expected Attention (whose
#: statistics of the queries count in its bytes), each beside eviction at that memory.
PPL_AT_MEMORY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kivi2", ("h2o@415:w50%", "streaming-llm@436")),
    ("kivi4", ("h2o@651:w50%", "streaming-llm@684")),
    ("h2o@256:w50%+kivi4", ("h2o@173:w50%", "streaming-llm@181")),
    ("h2o@512:w50%+kivi4", ("h2o@262:w50%", "streaming-llm@276")),
    ("expected-attention@64", ("h2o@435",)),
    ("expected-attention@128", ("h2o@499",)),
    ("expected-attention@256", ("h2o@627",)),
    ("expected-attention@512", ("h2o@883",)),
)
#: Rows with the same slots a head, each with H2O's window of 32: the family since H2O over a text.
PPL_SAME_SLOTS: tuple[tuple[str, ...], ...] = (
    ("h2o@128", "knorm@128", "kvzip@128", "expected-attention@128"),
)
#: Rows that hold every token and read a part of them at each step (Quest), beside the full cache.
PPL_READ: tuple[str, ...] = ("quest@128", "quest@256")


def _per_text(records: Iterable[FrontierRow], row: str) -> dict[str, FrontierRow]:
    """A row's lines at :data:`PPL_TOKENS` tokens, by the text's file name."""
    return {Path(r.text).name: r for r in records if r.row == row and r.tokens == PPL_TOKENS}


def ppl_texts(records: Iterable[FrontierRow]) -> list[str]:
    """Every text the file holds at :data:`PPL_TOKENS` tokens, by name (the app's order)."""
    return sorted({Path(r.text).name for r in records if r.tokens == PPL_TOKENS})


def _and(xs: Sequence[str]) -> str:
    return xs[0] if len(xs) == 1 else f"{', '.join(xs[:-1])} and {xs[-1]}"


def _values(mine: dict[str, FrontierRow], texts: Sequence[str], key: str = "perplexity") -> str:
    """A row's values in the order of ``texts`` (one figure where they are all the same; named
    text by text, and the texts it has no line on named, where it lacks one)."""
    fmt = (lambda v: f"{v:.2f}") if key == "perplexity" else (lambda v: f"{v:.0%}")
    if all(t in mine for t in texts):
        xs = [fmt(getattr(mine[t], key)) for t in texts]
        return f"{xs[0]} on each text" if len(xs) > 1 and len(set(xs)) == 1 else _and(xs)
    have = [f"{fmt(getattr(mine[t], key))} on {t}" for t in texts if t in mine]
    return f"{_and(have)} (no line on {_and([t for t in texts if t not in mine])})"


def _bytes(mine: dict[str, FrontierRow]) -> str:
    """A row's KV bytes per token over its texts: one figure, or their range where they differ."""
    xs = sorted({round(r.kv_bytes_per_token) for r in mine.values()})
    return f"{xs[0]:,}" if len(xs) == 1 else f"{xs[0]:,}–{xs[-1]:,}"


def _lower(b: dict[str, float], a: dict[str, float], than: str) -> str:
    """On how many of the texts both have ``b``'s value is the lower, or the higher where it is
    more often higher (never "beats": a sign test is said only where one on that many texts
    could reach p < ALPHA; :func:`_too_few` says so where none could)."""
    shared = [t for t in b if t in a]
    lower = sum(b[t] < a[t] for t in shared)
    higher = sum(b[t] > a[t] for t in shared)
    counts = {"lower": lower, "higher": higher, "equal": len(shared) - lower - higher}
    side = "lower" if lower >= higher else "higher"
    extra = [f"{k} on {n}" for k, n in counts.items() if k != side and n]
    said = f"{side} than {than} on {counts[side]} of {len(shared)} text{'s' * (len(shared) != 1)}"
    if extra:
        said += f" ({', '.join(extra)})"
    if min_p(len(shared)) < ALPHA:
        said += f", exact sign test {p_text(sign_test(lower, higher))}"
    return said


def _too_few(n: int, lines: str = "") -> str:
    """What a sign test over ``n`` texts can say: nothing, where none on that many could reach
    p < ALPHA ("" where one could)."""
    if min_p(n) < ALPHA:
        return ""
    return (
        f"No sign test on {n} text{'s or fewer' if n > 1 else ''} can reach p < {ALPHA:g} (the "
        f"smallest p on {n} is {min_p(n):.2f}): {lines}values text by text, and no verdict."
    )


def ppl_full(records: Sequence[FrontierRow]) -> str:
    """The full cache's perplexity on every text: the line the others stand beside."""
    texts = ppl_texts(records)
    full = _per_text(records, "full")
    if not texts:
        return ""
    over = f"the first {PPL_TOKENS:,} tokens of {_and(texts)}"
    if len(texts) > 1:
        over += " (each row's values below are in that order)"
    if not full:
        line = f"- Closed-loop perplexity over {over}; the file has no full-cache line."
    else:
        line = (
            f"- Closed-loop perplexity over {over}: the full cache (`full`, {_bytes(full)} KV "
            f"bytes per token) reads {'them' if len(texts) > 1 else 'it'} at "
            f"{_values(full, texts)}."
        )
    return f"{line} {_too_few(len(texts), 'the lines below give ')}".rstrip()


def ppl_at_memory(records: Sequence[FrontierRow]) -> list[str]:
    """One line per row of :data:`PPL_AT_MEMORY` in the file: its perplexity on each text, then
    each partner's, on how many of the texts both have the partner's is the lower, and what so
    few texts allow a sign test to say."""
    texts = ppl_texts(records)
    out = []
    for a, partners in PPL_AT_MEMORY:
        mine = _per_text(records, a)
        if not mine:
            continue
        said, ns = [], []
        for b in partners:
            theirs = _per_text(records, b)
            if not theirs:
                continue
            far = [
                t
                for t in theirs
                if t in mine
                and abs(theirs[t].kv_bytes_per_token - mine[t].kv_bytes_per_token)
                > EQUAL_TOLERANCE * mine[t].kv_bytes_per_token
            ]
            near = {t: r.perplexity for t, r in theirs.items() if t not in far}
            line = f"`{b}` ({_bytes(theirs)} B) {_values(theirs, texts)}"
            if far:
                line += f", not within {EQUAL_TOLERANCE:.0%} of its bytes on {_and(far)}"
            if set(near) & set(mine):
                line += ", " + _lower(near, {t: r.perplexity for t, r in mine.items()}, f"`{a}`")
                ns.append(len(set(near) & set(mine)))
            said.append(line)
        if not said:
            continue
        line = (
            f"- `{a}` ({_bytes(mine)} KV bytes per token) {_values(mine, texts)}; at its "
            f"memory: {'; '.join(said)}."
        )
        # a line compared on fewer texts than the file holds, where the full line's note
        # (on every text) does not cover it
        few = [n for n in ns if min_p(n) >= ALPHA] if min_p(len(texts)) < ALPHA else []
        out.append(f"{line} {_too_few(max(few)) if few else ''}".rstrip())
    return out


def ppl_same_slots(records: Sequence[FrontierRow]) -> list[str]:
    """One line per group of :data:`PPL_SAME_SLOTS`: each row's bytes and perplexity on each
    text, and which row is the lowest on each text the group's rows all have."""
    from h2o.model.rows import Row

    texts = ppl_texts(records)
    out = []
    for group in PPL_SAME_SLOTS:
        have = {r: m for r in group if (m := _per_text(records, r))}
        if len(have) < 2:
            continue
        slots = sorted({Row.parse(r).budget for r in have})
        said = [f"`{r}` ({_bytes(m)} B) {_values(m, texts)}" for r, m in have.items()]
        lowest: dict[str, list[str]] = {}
        for t in texts:
            if all(t in m for m in have.values()):
                r = min(have, key=lambda r: have[r][t].perplexity)
                lowest.setdefault(r, []).append(t)
        line = f"- At {_and([str(s) for s in slots])} slots a head: {'; '.join(said)}."
        if lowest:
            line += " The lowest of them: " + "; ".join(
                f"`{r}` on {_and(ts)}" for r, ts in lowest.items()
            )
            line += "."
        out.append(line)
    return out


def ppl_read(records: Sequence[FrontierRow]) -> list[str]:
    """One line per row of :data:`PPL_READ` in the file: what it holds, the share of that a step
    reads on average over a text's steps, and its perplexity beside the full cache's."""
    texts = ppl_texts(records)
    full = {t: r.perplexity for t, r in _per_text(records, "full").items()}
    out = []
    for a in PPL_READ:
        mine = _per_text(records, a)
        if not mine:
            continue
        line = f"- `{a}` holds {_bytes(mine)} KV bytes per token"
        read = {t: r for t, r in mine.items() if r.read_share is not None}
        if read:
            shares = _values(read, texts, "read_share")
            each = shares.endswith(" on each text")
            line += (
                f" and a step reads {shares.removesuffix(' on each text')} of what it holds then, "
                f"on average over a text's steps{', on each text' if each else ''}"
            )
        line += f": perplexity {_values(mine, texts)}"
        if set(full) & set(mine):
            ours = {t: r.perplexity for t, r in mine.items()}
            line += ", " + _lower(ours, full, "the full cache's")
        out.append(line + ".")
    return out


def perplexity(folder: Path = results.RESULTS_DIR) -> str:
    """The findings page's perplexity block, from ``frontier.jsonl``: the full cache on every
    text, the rows at each other's memory, the family at the same slots, and the rows that read a
    part of what they hold."""
    records = results.read_frontier(folder / results.FRONTIER_FILE).records
    at_memory, same, read = ppl_at_memory(records), ppl_same_slots(records), ppl_read(records)
    if not (at_memory or same or read):
        return ""
    parts = [ppl_full(records), "\n".join(at_memory), "\n".join(same), "\n".join(read)]
    return "\n\n".join(p for p in parts if p)


def headline(folder: Path = results.RESULTS_DIR) -> str:
    """The README's block: each compared row's needles answered, with its interval."""
    return "\n".join(table(results.read_grid(folder / results.GRID_FILE).records))


def details(folder: Path = results.RESULTS_DIR) -> str:
    """The findings page's block: the paired comparisons, the rows at equal memory, H2O's window
    sweep with its band note, and the second question."""
    cells = results.read_grid(folder / results.GRID_FILE).records
    parts = [
        "\n".join(comparisons(cells)),
        "\n".join(equal_memory(cells)),
        "\n".join(equal_memory_pooled(cells)),
    ]
    sweep = window_sweep(cells)
    parts.append("\n".join(sweep))
    band = results.attention_band(results.read_json(folder / BAND_FILE))
    if sweep and band is not None:
        parts.append(band_note(band["band"], band_window()))
    fu = results.read_followup(folder / results.FOLLOWUP_FILE).records
    if fu:
        parts.append("\n".join(followup(fu)))
    return "\n\n".join(p for p in parts if p)


def findings(folder: Path = results.RESULTS_DIR) -> str:
    """Every block, as Markdown: the README's table, then the findings page's details and its
    perplexity block."""
    blocks = (headline(folder), details(folder), perplexity(folder))
    return "\n\n".join(p for p in blocks if p)


START, END = "<!-- findings:start -->", "<!-- findings:end -->"
#: The findings page's second block: the perplexity sentences (:func:`perplexity`).
PPL_START, PPL_END = "<!-- perplexity:start -->", "<!-- perplexity:end -->"
README = results.ROOT / "README.md"
DOCS = results.ROOT / "docs" / "explanation" / "findings.md"


def between_markers(text: str, start: str = START, end: str = END) -> str:
    """The block between a file's ``start`` and ``end`` markers (``ValueError`` without them)."""
    if start not in text or end not in text:
        raise ValueError(f"the file has no {start} ... {end} block")
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n")


def write_block(path: Path, block: str, start: str = START, end: str = END) -> None:
    """Write ``block`` between the ``start`` and ``end`` markers of the file at ``path``."""
    text = path.read_text(encoding="utf-8")
    between_markers(text, start, end)
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    path.write_text(f"{head}{start}\n{block}\n{end}{tail}", encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"]:
        write_block(README, headline())
        write_block(DOCS, details())
        write_block(DOCS, perplexity(), PPL_START, PPL_END)
    else:
        print(findings())
