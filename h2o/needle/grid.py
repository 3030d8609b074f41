"""The grid runner: independent cells through a ``concurrent.futures.Executor``, each result
appended to a JSON Lines file as it arrives, so that an interrupted grid resumes.

* **Executors.** :func:`local_executor` (worker processes; numpy's BLAS held to one thread per
  worker when there are several, so that N workers use N cores) or :func:`dask_executor`
  (``distributed.Client(address).get_executor()``; Dask is imported only then).
* **Resume.** A line is written and flushed per cell; a rerun reads the file, drops a half
  line a killed writer may have left, and skips every cell whose key is already there.
* **Failures.** A cell whose function raises is retried once, then reported in
  ``<out>.errors.jsonl`` (never in the results file, whose lines all follow the schema); a
  rerun tries it again. A local worker process that dies breaks the whole pool and every cell
  then in flight with it, so those cells are rerun **one at a time** in a fresh pool, where a
  death is the running cell's own: it is retried once more alone, then reported; the others
  complete — a lost worker costs only its cell. (Dask reschedules a lost worker's task
  itself; when it gives up, the ``KilledWorker`` is that cell's failure.)
* **Order.** At the end of every run (complete, interrupted or with failures) the file is
  rewritten in a canonical order (the order of the specs; lines of cells not asked for this
  time keep their order, after them), so a resumed file equals an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from h2o.needle.results import needle_key, read_lines, read_meta

Key = Callable[[dict], Hashable]
#: ``progress(done, total, spec, line_or_none, error_or_none)`` after every finished cell.
GridProgress = Callable[[int, int, dict, dict | None, str | None], None]

CLUSTER_EXTRA = "pip install 'h2o[cluster]'"
#: How long to try reaching a Dask scheduler before giving up.
CONNECT_TIMEOUT = "20s"
#: The most cells one job holds: a larger batch is cut into jobs of about equal size, so that
#: an interrupt or a lost worker costs at most that many cells.
JOB_CELLS = 64


# -- executors ---------------------------------------------------------------------------------
_LIMITS: list[Any] = []


def limit_blas_threads() -> None:
    """Hold numpy's BLAS to one thread in this process (a worker's initializer)."""
    import numpy  # noqa: F401  (threadpoolctl limits only the libraries already loaded)
    from threadpoolctl import threadpool_limits

    _LIMITS.append(threadpool_limits(limits=1))


def local_executor(workers: int) -> ProcessPoolExecutor:
    """``workers`` worker processes; with more than one, each with a one-thread BLAS."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    init = limit_blas_threads if workers > 1 else None
    return ProcessPoolExecutor(max_workers=workers, initializer=init)


def dask_executor(address: str) -> tuple[Executor, int, Callable[[], None]]:
    """An executor on the Dask cluster at ``address``, how many cells to keep in flight (twice
    the cluster's worker threads, at least 2), and how to close the client when done."""
    try:
        from distributed import Client
    except ImportError:
        raise ValueError(
            "--dask-scheduler needs dask.distributed, which is not installed: "
            f"{CLUSTER_EXTRA} (or pip install 'dask[distributed]')"
        ) from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as e:
        raise ValueError(f"--dask-scheduler: cannot reach a scheduler at {address!r} ({e})") from e
    threads = sum(client.nthreads().values())
    return client.get_executor(), max(2, 2 * threads), client.close


# -- the file ----------------------------------------------------------------------------------
def _clean(x: Any) -> Any:
    """JSON has no NaN or infinity: they are written as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def dumps(line: dict) -> str:
    return json.dumps(_clean(line), ensure_ascii=False, allow_nan=False)


def write_lines(path: Path, lines: Sequence[dict]) -> None:
    """Replace ``path`` atomically (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(dumps(line) + "\n")
    os.replace(tmp, path)


def errors_path(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + ".errors.jsonl")


def canonical(lines: Sequence[dict], specs: Sequence[dict], key: Key) -> list[dict]:
    """Lines in the specs' order; lines of other cells after them, in their present order."""
    rank = {key(s): i for i, s in enumerate(specs)}
    n = len(rank)
    order = sorted(range(len(lines)), key=lambda i: (rank.get(key(lines[i]), n), i))
    return [lines[i] for i in order]


# -- the runner --------------------------------------------------------------------------------
@dataclass
class GridRun:
    """What one call of :func:`run_grid` did."""

    total: int  # cells asked for
    skipped: int  # already in the file
    computed: int = 0
    failed: list[dict] = field(default_factory=list)  # {**key fields, "error": str}
    wall_seconds: float = 0.0
    complete: bool = False  # every cell asked for is in the file
    interrupted: bool = False  # stopped by Ctrl-C / SIGTERM; the file holds what was done


def _single(fn: Callable[[dict], dict], job: list[dict]) -> list[dict]:
    """One cell as a job of one (module level, so that a process pool can send it)."""
    return [fn(job[0])]


def run_grid(
    specs: Sequence[dict],
    fn: Callable[[dict], dict] | Callable[[list[dict]], list[dict]],
    out: str | os.PathLike[str],
    *,
    key: Key = needle_key,
    make_executor: Callable[[], Executor] | None = None,
    in_flight: int = 1,
    retries: int = 1,
    progress: GridProgress | None = None,
    batch: Callable[[dict], Hashable] | None = None,
    job_cells: int = JOB_CELLS,
) -> GridRun:
    """Run ``fn`` on every spec whose key is not yet in ``out``, appending each result line.

    ``make_executor()`` gives the executor (default: one local worker process); it is called
    again after a local pool breaks. At most ``in_flight`` jobs are submitted at a time.
    A ``KeyboardInterrupt`` stops it: the cells done so far are put in order and kept (the
    cells still running are lost; a rerun computes them).

    ``batch``: the cells still to do that share ``batch(spec)`` go as one job, and ``fn`` takes
    the job's list of specs and returns their lines in the same order (cells that share work:
    :func:`h2o.needle.cells.run_cells`); a batch of more than ``job_cells`` cells is cut, in
    the specs' order, into the fewest jobs of at most that many, of about equal size. A job is
    retried, reported failed, or rerun alone after a broken pool as a whole.
    """
    t0 = time.perf_counter()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    read = read_lines(out, resume=True)
    existing = read.records
    if read.cut:  # its broken last line dropped, or its last line given its newline
        write_lines(out, existing)
    done = {key(line) for line in existing}
    todo: list[dict] = []
    seen = set(done)
    for s in specs:
        k = key(s)
        if k not in seen:
            seen.add(k)
            todo.append(s)
    total = len({key(s) for s in specs})
    run = GridRun(total=total, skipped=total - len(todo))
    if make_executor is None:

        def make_executor() -> Executor:
            return local_executor(1)

    in_flight = max(1, in_flight)
    if isinstance(job_cells, bool) or not isinstance(job_cells, int) or job_cells < 1:
        raise ValueError(f"job_cells must be an integer >= 1, got {job_cells!r}")
    if batch is None:
        jobs = [[s] for s in todo]
    else:
        groups: dict[Hashable, list[dict]] = {}
        for s in todo:
            groups.setdefault(batch(s), []).append(s)
        jobs = [job for g in groups.values() for job in _cut(g, job_cells)]
    pending: deque[list[dict]] = deque(jobs)
    alone: deque[list[dict]] = deque()  # in flight when a pool broke: rerun one at a time
    failures: Counter[Hashable] = Counter()
    running: dict[Future, list[dict]] = {}
    finished = run.skipped
    executor = make_executor()

    def submit(job: list[dict]) -> None:
        fut = executor.submit(fn, job) if batch is not None else executor.submit(_single, fn, job)
        running[fut] = job

    def job_key(job: list[dict]) -> Hashable:
        return tuple(key(s) for s in job)

    def report(job: list[dict], lines: list[dict] | None, error: str | None) -> None:
        nonlocal finished
        for i, s in enumerate(job):
            if error is not None:
                run.failed.append({**_key_fields(s), "error": error})
            finished += 1
            if progress is not None:
                progress(finished, run.total, s, None if lines is None else lines[i], error)

    try:
        with out.open("a", encoding="utf-8") as sink:
            while pending or alone or running:
                if alone:
                    if not running:
                        submit(alone.popleft())
                else:
                    while pending and len(running) < in_flight:
                        submit(pending.popleft())
                ready, _ = wait(running, return_when=FIRST_COMPLETED)
                broken: list[list[dict]] = []
                for fut in ready:
                    job = running.pop(fut)
                    try:
                        lines = list(fut.result())
                        if len(lines) != len(job):
                            raise RuntimeError(f"{len(lines)} lines for a job of {len(job)} cells")
                    except BrokenProcessPool:
                        broken.append(job)
                        continue
                    except Exception as e:  # the job's own failure: retry once, then report
                        failures[job_key(job)] += 1
                        if failures[job_key(job)] <= retries:
                            pending.appendleft(job)
                            continue
                        report(job, None, f"{type(e).__name__}: {e}")
                        continue
                    for line in lines:
                        sink.write(dumps(line) + "\n")
                    sink.flush()
                    run.computed += len(lines)
                    report(job, lines, None)
                if broken:
                    # Every future of a broken pool fails at once: the rest still running too.
                    broken += list(running.values())
                    running.clear()
                    _shutdown(executor, wait=False)
                    executor = make_executor()
                    if len(broken) == 1:  # it ran alone: the failure is its own
                        job = broken[0]
                        failures[job_key(job)] += 1
                        if failures[job_key(job)] <= retries:
                            alone.appendleft(job)
                        else:
                            report(job, None, "its worker process died (twice, alone)")
                    else:
                        alone.extend(broken)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through the CLI: keep what is done
        run.interrupted = True
        _shutdown(executor, wait=False)
    else:
        _shutdown(executor, wait=True)
    lines = read_lines(out, resume=True).records
    write_lines(out, canonical(lines, specs, key))
    errs = errors_path(out)
    if run.failed:
        write_lines(errs, run.failed)
    elif errs.exists():
        errs.unlink()
    have = {key(line) for line in lines}
    run.complete = all(key(s) in have for s in specs)
    run.wall_seconds = time.perf_counter() - t0
    return run


def _cut(group: list[dict], most: int) -> list[list[dict]]:
    """``group`` in the fewest consecutive jobs of at most ``most`` cells, of about equal size."""
    n = -(-len(group) // most)
    return [group[k * len(group) // n : (k + 1) * len(group) // n] for k in range(n)]


def _shutdown(executor: Executor, wait: bool) -> None:
    """Shut down, cancelling what has not started (Dask's executor takes no such option)."""
    try:
        executor.shutdown(wait=wait, cancel_futures=True)
    except TypeError:
        executor.shutdown(wait=wait)


def _key_fields(spec: dict) -> dict:
    return {k: spec[k] for k in ("row", "length", "depth", "needle", "text", "tokens") if k in spec}


def write_meta(out: str | os.PathLike[str], meta: dict, run: GridRun) -> dict:
    """``<out>.meta.json``: the contract's fields, with the wall time summed over the runs
    that built the file (each run's command and time listed under ``runs``)."""
    import platform

    path = Path(str(out) + ".meta.json")
    old = read_meta(Path(out)) or {}
    runs = list(old.get("runs", []))
    runs.append(
        {
            "command": meta["command"],
            "wall_seconds": round(run.wall_seconds, 1),
            "computed": run.computed,
            "skipped": run.skipped,
            "failed": len(run.failed),
            "interrupted": run.interrupted,
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    lines = read_lines(Path(out), resume=True).records
    full = {
        **meta,
        "wall_seconds": round(sum(r["wall_seconds"] for r in runs), 1),
        "cells": len(lines),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}, "
        f"Python {platform.python_version()}",
        "runs": runs,
    }
    path.write_text(json.dumps(full, indent=1) + "\n", encoding="utf-8")
    return full
