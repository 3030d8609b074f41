"""The findings the README states, computed from the shipped result files: each row's needles
answered with a 95 % Wilson interval, the paired comparisons the text makes (an exact McNemar
test on the cells two rows share), and the second question.

``python -m h2o.needle.findings`` prints them as Markdown (``--readme README.md`` writes them
between the README's findings markers); ``tests/test_findings.py`` checks the README holds
exactly what it prints, so the README's figures are the files' own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from h2o.stats import p_text, paired, share

RESULTS = Path(__file__).resolve().parents[2] / "traces" / "results"
#: The lengths where the compared rows have several needles a cell.
MAX_LENGTH = 2048

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
    ("snapkv@256+kivi4", "snapkv@141", 2048),
    ("h2o@256:w50%+kivi4", "h2o@206:w50%", 2048),
    ("kivi4", "h2o@688:w50%", 2048),
    ("kivi4", "h2o@688:w50%:prefill", 2048),
    ("kivi4", "snapkv@723", 2048),
    ("kivi4", "streaming-llm@723", 2048),
    ("kivi2", "h2o@460:w50%", 2048),
    ("kivi2", "h2o@460:w50%:prefill", 2048),
    ("kivi2", "snapkv@483", 2048),
    ("kivi2", "streaming-llm@483", 2048),
)


def read_lines(path: Path) -> list[dict]:
    out: dict = {}
    if not path.is_file():
        return []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            d = json.loads(raw)
        except ValueError:
            continue
        key = tuple(v for k, v in sorted(d.items()) if k in _KEYS)
        out.pop(key, None)
        out[key] = d
    return list(out.values())


_KEYS = {"row", "length", "depth", "needle", "depth_first", "depth_second", "first", "second"}


def _outcomes(cells: Iterable[dict], row: str, length: int | None) -> dict:
    return {
        (c["length"], c["depth"], c["needle"]): bool(c["correct"])
        for c in cells
        if c["row"] == row
        and c["length"] <= MAX_LENGTH
        and (length is None or c["length"] == length)
    }


def _bytes_per_token(cells: Iterable[dict], row: str, length: int) -> float:
    xs = [
        c["kv_bytes"] / c["prompt_tokens"]
        for c in cells
        if c["row"] == row and c["length"] == length
    ]
    return sum(xs) / len(xs)


def table(cells: Sequence[dict]) -> list[str]:
    """One Markdown table row per row of :data:`TABLE_ROWS` in the file."""
    out = [
        f"| row | needle cells at ≤ {MAX_LENGTH:,} tokens | answered (95 % CI) "
        "| by depth 0/25/50/75/100 % |",
        "|---|---|---|---|",
    ]
    for r in TABLE_ROWS:
        oc = _outcomes(cells, r, None)
        if not oc:
            continue
        s = share(sum(oc.values()), len(oc))
        by = []
        for d in (0, 25, 50, 75, 100):
            xs = [v for (n, dd, _), v in oc.items() if dd == d]
            by.append(f"{sum(xs)}/{len(xs)}")
        out.append(f"| `{r}` | {len(oc)} | {s.text()} | {' · '.join(by)} |")
    return out


#: The window sweep: H2O (evicting while it reads) at each budget with its recent window as a
#: share of the budget, at its class default (32 slots) and at the model's median local
#: attention band (45 tokens, ``attention-band.json``), on the sweep's prompt length.
SWEEP_BUDGETS = (64, 128, 256, 512)
SWEEP_WINDOWS = (("12%", ":w12%"), ("25%", ":w25%"), ("50%", ":w50%"), ("75%", ":w75%"))
SWEEP_FIXED = (("32 (default)", ""), ("45 (band)", ":w45"))
SWEEP_LENGTH = 1024


def sweep_rows() -> list[str]:
    """The sweep's row labels, budget by budget (those computed are in the file)."""
    return [f"h2o@{b}{suffix}" for b in SWEEP_BUDGETS for _, suffix in SWEEP_WINDOWS + SWEEP_FIXED]


def window_sweep(cells: Sequence[dict], length: int = SWEEP_LENGTH) -> list[str]:
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
            oc = _outcomes(cells, label, length)
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


def comparisons(cells: Sequence[dict]) -> list[str]:
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
        if t.differs:
            verdict = f"`{a}` answers more" if t.only_a > t.only_b else f"`{b}` answers more"
        else:
            verdict = f"not distinguishable with n = {t.n}"
        out.append(
            f"- `{a}` against `{b}` {where}{mem}: {t.right_a} against {t.right_b} of {t.n} "
            f"shared cells ({t.only_a} right only under the first, {t.only_b} only under the "
            f"second; exact paired test {p_text(t.p)}): {verdict}."
        )
    return out


def followup(lines: Sequence[dict]) -> list[str]:
    """The second-question file: per row, both questions' counts and the paired test between
    them; rows whose counts are all the same share one line (in the file's order)."""
    said: dict[tuple, list[str]] = {}
    for r in dict.fromkeys(x["row"] for x in lines):
        cs = [x for x in lines if x["row"] == r]
        first = {i: bool(x["correct_first"]) for i, x in enumerate(cs)}
        second = {i: bool(x["correct_second"]) for i, x in enumerate(cs)}
        t = paired(first, second)
        lens = tuple(sorted({x["length"] for x in cs}))
        said.setdefault((lens, t.n, t.right_a, t.right_b, t.only_a, t.only_b, t.p), []).append(r)
    out = []
    for (lens, n, right_a, right_b, only_a, only_b, p), rows in said.items():
        cells_ = "cell" if only_a == 1 else "cells"
        out.append(
            f"- {', '.join(f'`{r}`' for r in rows)} ({', '.join(f'{x:,}' for x in lens)} "
            f"tokens): the first question {share(right_a, n).text()}, the second "
            f"{share(right_b, n).text()} ({only_a} {cells_} lost only the second, {only_b} "
            f"only the first; {p_text(p)})."
        )
    return out


def findings(results: Path = RESULTS) -> str:
    """Every block the README's findings print, as Markdown."""
    cells = read_lines(results / "needle-grid.jsonl")
    parts = ["\n".join(table(cells)), "\n".join(comparisons(cells))]
    parts.append("\n".join(window_sweep(cells)))
    fu = read_lines(results / "followup.jsonl")
    if fu:
        parts.append("\n".join(followup(fu)))
    return "\n\n".join(p for p in parts if p)


START, END = "<!-- findings:start -->", "<!-- findings:end -->"


def in_readme(text: str) -> str:
    """The block between the README's findings markers (``ValueError`` without them)."""
    if START not in text or END not in text:
        raise ValueError(f"the README has no {START} ... {END} block")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def write_readme(path: Path, block: str) -> None:
    text = path.read_text(encoding="utf-8")
    in_readme(text)
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    path.write_text(f"{head}{START}\n{block}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--readme"]:
        write_readme(Path(sys.argv[2]), findings())
    else:
        print(findings())
