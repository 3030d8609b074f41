"""The family since H2O on the needle grid: what each newer method in the file answers, beside
SnapKV (the one-shot method that reads the question's attention before it compresses) on the
positions both have — at the same budget for a method that holds what it reads; for a selection
(Quest), which reads a part of what it holds, at the SnapKV budget whose bytes held match what a
step of it reads, and at the one matching what it holds, where the file has one. Every test is
an exact sign test over positions (:mod:`h2o.stats`).

A method belongs here when its kind of cache says what it answers of H2O's limits
(:attr:`h2o.model.caches.CacheKind.since_h2o`): the app keeps no list of them. No streamlit
here: ``tests/test_claims_family.py`` checks every sentence against counts it makes itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import h2o
from app.needle.claims import not_compared
from app.needle.frontier import TOLERANCE
from app.needle.grid import rows as ordered_rows
from app.real_model.claims import esc, names
from h2o.model.caches.base import ContextCompression
from h2o.model.rows import Row
from h2o.needle.results import Cell, parsed
from h2o.stats import MIN_POSITIONS, Paired, p_text, paired, positions


def _family(cells: Sequence[Cell], budget: int | None) -> list[tuple[str, Row]]:
    """The file's rows of methods since H2O, each with its parsed row (see :func:`family_rows`)."""
    out = []
    for r in ordered_rows(cells):
        row = parsed(r)
        if row is None:  # a row this server cannot read
            continue
        if row.cache.since_h2o and row.bits is None and budget in (None, row.budget):
            out.append((r, row))
    return out


def family_rows(cells: Sequence[Cell], budget: int | None = None) -> list[str]:
    """The file's rows of methods since H2O (full precision; at ``budget`` slots if given), in
    the grid's row order."""
    return [r for r, _ in _family(cells, budget)]


def how_they_run(cells: Sequence[Cell], budget: int | None = None) -> str:
    """How the file's methods since H2O (at ``budget``) are run, from their kinds of cache: the
    presses compress the context before the question, SnapKV reads the question first, a
    selection reads a part of a whole cache ("" if the file has none of them)."""
    press: list[str] = []
    select: list[str] = []
    for _, row in _family(cells, budget):
        if isinstance(row.cache, ContextCompression) and row.family not in press:
            press.append(row.family)
        elif row.group == "select" and row.family not in select:
            select.append(row.family)
    if not press and not select:
        return ""
    parts = []
    if press:
        one = len(press) == 1
        parts.append(
            f"{names(press)} {'compresses' if one else 'compress'} the context and then "
            f"{'reads' if one else 'read'} the question through the compressed cache, as kvpress "
            "runs its presses (an author's own code may run otherwise: which tokens it protects, "
            "which layers it leaves whole, whether the question is read before compressing)"
        )
    parts.append("SnapKV reads the question first and chooses by it")
    if select:
        parts.append(
            f"{names(select)} {'evicts' if len(select) == 1 else 'evict'} nothing: the prompt "
            "is read in full and each step after it reads only the pages of keys its query "
            "can attend to"
        )
    return "How each runs here: " + "; ".join(parts) + "." + decode_time(cells, budget)


def decode_time(cells: Sequence[Cell], budget: int | None = None) -> str:
    """For the file's methods that a policy of the registry also runs one token at a time
    (:attr:`~h2o.model.caches.CacheKind.decode_policy`: K-norm, KVzip, Expected Attention evict
    by the same score; Quest reads the same pages): where to step them ("" if none)."""
    classes = []
    for _, row in _family(cells, budget):
        cls = h2o.POLICIES.get(row.cache.decode_policy)
        if cls is not None and cls not in classes:
            classes.append(cls)
    if not classes:
        return ""
    out = ""
    evict = [c for c in classes if not c.selects]
    if evict:
        needs = names([f"`{m}`" for m in dict.fromkeys(m for c in evict for m in c.reads_trace)])
        one = len(evict) == 1
        out += (
            f" {names([c.label for c in evict])} also {'runs' if one else 'run'} as the model "
            f"decodes, one eviction a token by the same score: choose {'it' if one else 'them'} "
            "as a policy in Step through, on a trace captured from the model (those carry each "
            f"position's {needs})." + "".join(f" {c.hindsight}." for c in evict if c.hindsight)
        )
    select = [c for c in classes if c.selects]
    if select:
        one = len(select) == 1
        out += (
            f" {names([c.label for c in select])} also {'steps' if one else 'step'} in Step "
            "through, on a trace of one query head: each step shows the pages it reads, and "
            "nothing leaves the cache."
        )
    return out


def partner(row: str) -> str:
    """The row it is compared with: SnapKV at the same budget."""
    return f"snapkv@{Row.parse(row).budget}"


def _bytes_per_token(cells: Sequence[Cell]) -> float:
    return sum(c.kv_bytes / c.tokens for c in cells) / len(cells)


def _read_per_token(cells: Sequence[Cell]) -> float:
    return sum(c.bytes_read / c.tokens for c in cells) / len(cells)


def read_clause(cells: Sequence[Cell]) -> str:
    """For a row that reads a part of what it holds (Quest): what it holds and what one
    decoding step reads, in bytes a token of the prompt ("" for a row that reads it all)."""
    if all(c.read_bytes is None or c.read_bytes == c.kv_bytes for c in cells):
        return ""
    held, read = _bytes_per_token(cells), _read_per_token(cells)
    return (
        f"; it holds {held:,.0f} bytes a token (every key and its page summaries) and a "
        f"decoding step reads {read:,.0f} of them ({read / held:.0%})"
    )


def _key(c: Cell) -> tuple[int, int, str]:
    return (c.length, c.depth, c.needle)


def _verdict(t: Paired, mine: str) -> str:
    """Which answers more, only at p < 0.05 by the sign test over positions, and only on at
    least :data:`h2o.stats.MIN_POSITIONS` of them (else not compared)."""
    if t.n < MIN_POSITIONS:
        return f": {not_compared(t.n)}"
    if t.differs:
        more = "SnapKV" if t.more_b > t.more_a else mine
        return f": {more} answers more (exact sign test {p_text(t.p)})"
    return f": {t.undecided()} (exact sign test {p_text(t.p)})"


def _snapkv_rows(cells: Sequence[Cell]) -> list[str]:
    """The file's plain SnapKV rows (``snapkv@B``: no option, allocation or bits)."""
    return [r for r in ordered_rows(cells) if r.startswith("snapkv@") and r[7:].isdigit()]


#: The two memory bases a selection is compared on: (participle, verb) of what a step reads of
#: its cache, and of what the cache holds.
READ, HELD = ("read", "reads"), ("held", "holds")


def _at_bytes(
    cells: Sequence[Cell], mine: Sequence[Cell], family: str, basis: tuple[str, str]
) -> str:
    """Beside the SnapKV row (one with a cell at every cell of ``mine``: the same positions and
    needles) whose bytes held a token lie nearest what ``mine`` reads or holds a token
    (``basis``), means over those cells: compared by the sign test if within
    :data:`TOLERANCE`, else named with its bytes and not compared."""
    done, does = basis
    ours = {_key(c): c for c in mine}
    want = _read_per_token(mine) if basis == READ else _bytes_per_token(mine)
    near: list[tuple[float, str, float]] = []
    for r in _snapkv_rows(cells):
        theirs = {_key(c): c for c in cells if c.row == r}
        if all(k in theirs for k in ours):
            x = _bytes_per_token([theirs[k] for k in ours])
            near.append((abs(x - want) / want, r, x))
    if not near:
        return f" The file has no SnapKV row with its cells to compare at equal bytes {done}."
    gap, other, x = min(near)
    if gap > TOLERANCE:
        return (
            f" At equal bytes {done}: no SnapKV row with its cells holds within {TOLERANCE:.0%} "
            f"of the {want:,.0f} bytes a token it {does} (the nearest, {esc(other)}, holds "
            f"{x:,.0f}): not compared."
        )
    theirs = {_key(c): c for c in cells if c.row == other}
    t = paired({k: c.correct for k, c in ours.items()}, {k: theirs[k].correct for k in ours})
    return (
        f" At about equal bytes {done}, beside {esc(other)} (which holds {x:,.0f} bytes a token "
        f"against the {want:,.0f} it {does}): at {t.n} positions it answers {t.right_a} and "
        f"SnapKV {t.right_b} of {t.needles} needles ({t.counts()}){_verdict(t, family)}."
    )


def family_sentence(cells: Sequence[Cell], row: str) -> str:
    """One method: what it fixes, how many needles it answers over its positions (with the 95 %
    interval over positions) and, beside SnapKV, the exact sign test over the positions both
    have; a difference is said only at p < 0.05. A method that reads all it holds is set beside
    SnapKV at its budget; a selection, which reads a part of what it holds, beside the SnapKV
    row holding about what a step of it reads and the one holding about what it holds (each
    within :data:`TOLERANCE`, else none: the sentence says which basis)."""
    r = Row.parse(row)
    mine = [c for c in cells if c.row == row]
    if not mine:
        return ""
    name = f"{r.family} at {r.budget} slots ({esc(row)})"
    right = positions({_key(c): c.correct for c in mine})
    lens = sorted({c.length for c in mine})
    text = (
        f"{name} {r.cache.since_h2o}. On prompts of {names([f'{n:,}' for n in lens])} tokens "
        f"it answers {right.text()}{read_clause(mine)}"
    )
    if read_clause(mine):
        return (
            text
            + "."
            + _at_bytes(cells, mine, r.family, READ)
            + _at_bytes(cells, mine, r.family, HELD)
        )
    other = partner(row)
    theirs = {(c.length, c.depth, c.needle): c for c in cells if c.row == other}
    ours = {(c.length, c.depth, c.needle): c for c in mine}
    keys = [k for k in ours if k in theirs]
    if not keys:
        return text + f"; the file has no {esc(other)} cell to compare it with."
    t = paired({k: ours[k].correct for k in keys}, {k: theirs[k].correct for k in keys})
    a = _bytes_per_token([ours[k] for k in keys])
    b = _bytes_per_token([theirs[k] for k in keys])
    held = (
        f"the same memory ({a:,.0f} bytes a token)"
        if abs(a - b) <= TOLERANCE * b
        else f"{a:,.0f} bytes a token against SnapKV's {b:,.0f}"
    )
    text += (
        f". On the {t.n} positions SnapKV at the same budget ({esc(other)}) has too, at {held}, "
        f"it answers {t.right_a} and SnapKV {t.right_b} of {t.needles} needles ({t.counts()})"
    )
    return text + _verdict(t, r.family) + "."


def family_sentences(cells: Sequence[Cell], budget: int | None = None) -> list[str]:
    """:func:`family_sentence` of every method since H2O the file has (at ``budget``)."""
    return [s for r in family_rows(cells, budget) if (s := family_sentence(cells, r))]
