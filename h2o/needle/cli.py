"""The grid commands of ``python -m h2o``: ``needle``, ``followup`` and ``frontier`` (the grid,
the second question and the frontier), locally (``--workers N``) or on a Dask cluster
(``--dask-scheduler ADDRESS``). :mod:`h2o.cli` defines their options; ``cmd_NAME(args) -> int``
(the exit code) runs one.

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
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path

from h2o.cli_options import (
    MAX_CONTEXT,
    check_max_new,
    check_tokens,
    comma_ints,
    out_path,
    parse_lengths,
    read_text,
    row_labels,
)


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


def _run(
    args: argparse.Namespace,
    specs: list[dict],
    cell: Callable,
    key: Callable[[dict], Hashable],
    describe: Callable[[dict, dict | None, str | None], str],
    meta: dict,
    batch: Callable[[dict], Hashable] | None = None,
) -> int:
    """Run the cells on the local workers or the Dask cluster, one progress line per cell; then
    write the meta (its command line ends with ``--workers N`` or ``--dask-scheduler ADDRESS``)
    and print the summary. The exit code."""
    from h2o.needle.grid import dask_executor, local_executor, run_grid

    if args.dask_scheduler is not None:
        executor, in_flight, close = dask_executor(args.dask_scheduler)
        make, where = (lambda: executor), f" --dask-scheduler {args.dask_scheduler}"
    elif args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    else:
        n = in_flight = args.workers
        make, close = (lambda: local_executor(n)), (lambda: None)
        where = f" --workers {n}" if n > 1 else ""

    def report(done: int, total: int, spec: dict, line: dict | None, error: str | None) -> None:
        print(f"[{done}/{total}] {describe(spec, line, error)}", file=sys.stderr, flush=True)

    try:
        with _sigterm_interrupts():
            run = run_grid(
                specs,
                cell,
                args.out,
                key=key,
                make_executor=make,
                in_flight=in_flight,
                progress=None if args.quiet else report,
                batch=batch,
            )
    finally:
        close()
    return _finish(args, run, {**meta, "command": meta["command"] + where})


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
    from h2o.needle.grid import errors_path, write_meta
    from h2o.needle.results import read_lines

    lines = read_lines(args.out, resume=True).records
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
    from h2o.needle.needles import NEEDLES
    from h2o.needle.results import needle_key

    rows = row_labels(args.rows)
    lengths = parse_lengths(args.lengths)
    depths = comma_ints(args.depths, "--depths", (0, 100), distinct=True)
    if not 1 <= args.needles <= len(NEEDLES):
        raise ValueError(f"--needles must be 1..{len(NEEDLES)}, got {args.needles}")
    check_max_new(args.max_new)
    args.out = out_path(args.out)
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

    command = (
        f"python -m h2o needle --rows {','.join(rows)} --lengths {','.join(map(str, lengths))} "
        f"--depths {','.join(map(str, depths))} --needles {args.needles}"
        + (f" --max-new {args.max_new}" if args.max_new != 8 else "")
        + (" --stand-in" if args.stand_in else "")
        + _common_tail(args)
    )
    meta = {"command": command, "lengths": lengths, "depths": depths, "needles": args.needles}
    cell = stand_in_cell if args.stand_in else run_cells
    batch = None if args.stand_in else cell_batch
    return _run(args, specs, cell, needle_key, describe, meta, batch)


def cmd_followup(args: argparse.Namespace) -> int:
    from h2o.needle.cells import FOLLOWUP_DEPTHS, followup_pairs, run_followup
    from h2o.needle.needles import NEEDLES
    from h2o.needle.results import followup_key

    rows = row_labels(args.rows)
    lengths = parse_lengths(args.lengths)
    if not 1 <= args.pairs <= len(NEEDLES) // 2:
        raise ValueError(f"--pairs must be 1..{len(NEEDLES) // 2}, got {args.pairs}")
    args.out = out_path(args.out)
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

    command = (
        f"python -m h2o followup --rows {','.join(rows)} --lengths "
        f"{','.join(map(str, lengths))} --pairs {args.pairs}" + _common_tail(args)
    )
    meta = {"command": command, "lengths": lengths, "depths": [list(d) for d in FOLLOWUP_DEPTHS]}
    return _run(args, specs, run_followup, followup_key, describe, meta)


def cmd_frontier(args: argparse.Namespace) -> int:
    from h2o.model.rows import Row
    from h2o.needle.cells import run_frontier
    from h2o.needle.results import frontier_key

    rows = row_labels(args.rows)
    check_tokens(args.tokens, MAX_CONTEXT)
    text = Path(args.text)
    content = read_text(args.text)
    args.out = out_path(args.out)
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

    command = (
        f"python -m h2o frontier --rows {','.join(rows)} --text {shlex.quote(args.text)} "
        f"--tokens {args.tokens}" + _common_tail(args)
    )
    meta = {
        "command": command,
        "text": text.name,
        "tokens": args.tokens,
        "lengths": [args.tokens],
        "depths": [],
    }
    return _run(args, specs, run_frontier, frontier_key, describe, meta)
