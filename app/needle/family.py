"""The family since H2O on the needle grid: what each newer method in the file answers, beside
SnapKV at the same budget on the same cells (the one-shot method that reads the question's
attention before it compresses).

A method belongs here when its kind of cache says what it answers of H2O's limits
(:attr:`h2o.model.caches.CacheKind.since_h2o`): the app keeps no list of them. No streamlit
here: ``tests/test_claims_family.py`` checks every sentence against counts it makes itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import h2o
from app.needle.data import Cell, parsed
from app.needle.frontier import TOLERANCE
from app.needle.grid import rows as ordered_rows
from app.real_model.claims import esc, names
from h2o.model.caches.base import ContextCompression
from h2o.model.rows import Row
from h2o.stats import p_text, paired, share


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
            f"{'reads' if one else 'read'} the question through the compressed cache (kvpress's "
            "pipeline)"
        )
    parts.append("SnapKV reads the question first and chooses by it")
    if select:
        parts.append(
            f"{names(select)} {'evicts' if len(select) == 1 else 'evict'} nothing: the prompt "
            "is read in full and each step after it reads only the pages of keys its query "
            "can attend to"
        )
    return "Each runs as its authors run it: " + "; ".join(parts) + "." + decode_time(cells, budget)


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


def family_sentence(cells: Sequence[Cell], row: str) -> str:
    """One method: what it fixes, how many needles it answers (with the 95 % interval) and,
    on the cells SnapKV at its budget shares, SnapKV's count, both rows' bytes a token and the
    exact paired test; a difference is said only at p < 0.05."""
    r = Row.parse(row)
    mine = [c for c in cells if c.row == row]
    if not mine:
        return ""
    name = f"{r.family} at {r.budget} slots ({esc(row)})"
    right = share(sum(c.correct for c in mine), len(mine))
    lens = sorted({c.length for c in mine})
    text = (
        f"{name} {r.cache.since_h2o}. On prompts of {names([f'{n:,}' for n in lens])} tokens "
        f"it answers {right.text()}{read_clause(mine)}"
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
    ra = _read_per_token([ours[k] for k in keys])
    if read_clause([ours[k] for k in keys]):
        held += f" (a step reads {ra:,.0f} of them, SnapKV all it holds)"
    text += (
        f". On the {t.n} cells SnapKV at the same budget ({esc(other)}) has too, at {held}, it "
        f"answers {t.right_a} and SnapKV {t.right_b}"
    )
    if t.differs:
        more = "SnapKV" if t.only_b > t.only_a else r.family
        return text + f": {more} answers more (exact paired test {p_text(t.p)})."
    return text + f": not distinguishable with n = {t.n} (exact paired test {p_text(t.p)})."


def family_sentences(cells: Sequence[Cell], budget: int | None = None) -> list[str]:
    """:func:`family_sentence` of every method since H2O the file has (at ``budget``)."""
    return [s for r in family_rows(cells, budget) if (s := family_sentence(cells, r))]
