"""The grid runner (h2o.needle.grid): resume, canonical order, retries, lost workers,
a run killed midway, and a Dask LocalCluster giving the same file as local processes.

Most tests use the model-free :func:`h2o.needle.cells.stand_in_cell` (a pure function of the
cell); the last ones run the real cell function on the tiny GGUF of ``tiny_model.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from h2o.needle.cells import stand_in_cell
from h2o.needle.grid import errors_path, local_executor, run_grid
from h2o.needle.needles import NEEDLES, is_correct
from h2o.needle.results import needle_key, read_lines

ROWS = ["full", "h2o@128", "kivi4"]


def specs(rows=ROWS, lengths=(512, 1024), depths=(0, 50, 100), **extra) -> list[dict]:
    cells = [(n, d) for n in lengths for d in depths]
    return [
        {"row": r, "length": n, "depth": d, "needle": NEEDLES[i % len(NEEDLES)].id, **extra}
        for r in rows
        for i, (n, d) in enumerate(cells)
    ]


def local(n: int):
    return lambda: local_executor(n)


def normalised(path: Path) -> list[str]:
    """The file's lines with ``seconds`` zeroed (the only field that depends on the run)."""
    out = []
    for s in path.read_text(encoding="utf-8").splitlines():
        obj = json.loads(s)
        obj["seconds"] = 0.0
        out.append(json.dumps(obj))
    return out


def test_every_cell_once_in_the_specs_order(tmp_path):
    out = tmp_path / "g.jsonl"
    sp = specs()
    run = run_grid(sp, stand_in_cell, out, make_executor=local(2), in_flight=2)
    read = read_lines(out, resume=True)
    lines = read.records
    assert not read.cut and run.complete and run.computed == len(sp) and not run.failed
    assert [needle_key(x) for x in lines] == [needle_key(s) for s in sp]
    assert lines == [stand_in_cell(s) for s in sp]  # what the function returned, unchanged
    assert not errors_path(out).exists()


def test_a_rerun_skips_every_cell_and_leaves_the_file_as_it_was(tmp_path):
    out = tmp_path / "g.jsonl"
    run_grid(specs(), stand_in_cell, out, make_executor=local(2), in_flight=2)
    before = out.read_bytes()
    calls = []

    def counting(spec):  # runs in-process: the executor below is a thread pool
        calls.append(spec)
        return stand_in_cell(spec)

    from concurrent.futures import ThreadPoolExecutor

    run = run_grid(specs(), counting, out, make_executor=lambda: ThreadPoolExecutor(1))
    assert calls == [] and run.skipped == run.total == len(specs()) and run.computed == 0
    assert out.read_bytes() == before


def test_new_rows_extend_the_file_and_old_ones_keep_their_place(tmp_path):
    out = tmp_path / "g.jsonl"
    first = specs(rows=["full"])
    run_grid(first, stand_in_cell, out)
    run = run_grid(specs(rows=["kivi4", "full"]), stand_in_cell, out, make_executor=local(2))
    assert run.skipped == len(first)
    rows = [x["row"] for x in read_lines(out, resume=True).records]
    assert rows == ["kivi4"] * 6 + ["full"] * 6  # the latest call's order
    run_grid(specs(rows=["kivi4"]), stand_in_cell, out)
    rows = [x["row"] for x in read_lines(out, resume=True).records]
    assert rows == ["kivi4"] * 6 + ["full"] * 6  # cells not asked for keep their order, after


def test_a_half_written_last_line_is_dropped_and_its_cell_recomputed(tmp_path):
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    run_grid(specs(), stand_in_cell, whole, make_executor=local(2), in_flight=2)
    text = whole.read_text(encoding="utf-8").splitlines(keepends=True)
    cut.write_text("".join(text[:4]) + text[4][:25], encoding="utf-8")  # killed mid-write
    read = read_lines(cut, resume=True)
    assert read.cut and len(read.records) == 4
    run = run_grid(specs(), stand_in_cell, cut, make_executor=local(2), in_flight=2)
    assert run.skipped == 4 and run.computed == len(specs()) - 4
    assert cut.read_bytes() == whole.read_bytes()


def test_a_broken_line_inside_the_file_is_refused(tmp_path):
    out = tmp_path / "g.jsonl"
    out.write_text('{"row": "full"}\nnot json\n{"row": "full"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2: Expecting value.*remove it or the file"):
        run_grid(specs(), stand_in_cell, out)


def test_the_resume_reads_within_the_readers_bounds(tmp_path, monkeypatch):
    """The runner reads its file with the pages' bounded reader: a line over the bound is
    refused where a page would skip it, unless it is the last one, cut short by a killed writer;
    a file over the bound is refused whole."""
    from h2o.needle import results

    out = tmp_path / "g.jsonl"
    run_grid(specs(rows=["full"]), stand_in_cell, out)
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    monkeypatch.setattr(results, "MAX_LINE", max(map(len, lines)))
    long = json.dumps({**json.loads(lines[0]), "pad": "x" * results.MAX_LINE}) + "\n"
    out.write_text("".join([long, *lines[1:]]), encoding="utf-8")
    assert results.read_lines(out).n_problems == 1  # a page skips it and names it
    with pytest.raises(ValueError, match="line 1: longer than"):
        read_lines(out, resume=True)
    out.write_text("".join([*lines[1:], long[:-1]]), encoding="utf-8")  # cut short, no newline
    read = read_lines(out, resume=True)
    assert read.cut and read.records == [json.loads(s) for s in lines[1:]]
    monkeypatch.setattr(results, "MAX_BYTES", len(lines[0]))
    with pytest.raises(ValueError, match="over the"):
        run_grid(specs(rows=["full"]), stand_in_cell, out)


def test_a_worker_lost_once_costs_nothing(tmp_path):
    out = tmp_path / "g.jsonl"
    sp = specs()
    sp[4] = {**sp[4], "fail_once": str(tmp_path / "flag")}
    run = run_grid(sp, stand_in_cell, out, make_executor=local(2), in_flight=2)
    assert (tmp_path / "flag").exists()  # the worker did die once
    assert run.complete and not run.failed and run.computed == len(sp)
    assert read_lines(out, resume=True).records == [
        stand_in_cell({**s, "fail_once": None}) for s in sp
    ]


def test_a_worker_lost_every_time_costs_only_its_cell(tmp_path):
    out = tmp_path / "g.jsonl"
    sp = specs()
    sp[3] = {**sp[3], "fail": "exit"}
    run = run_grid(sp, stand_in_cell, out, make_executor=local(2), in_flight=2)
    lines = read_lines(out, resume=True).records
    assert [needle_key(x) for x in lines] == [needle_key(s) for i, s in enumerate(sp) if i != 3]
    assert not run.complete and run.computed == len(sp) - 1
    assert [f["needle"] for f in run.failed] == [sp[3]["needle"]]
    errs = read_lines(errors_path(out), resume=True).records
    assert errs == [{**{k: sp[3][k] for k in ("row", "length", "depth", "needle")}, **errs[0]}]
    assert "worker process died" in errs[0]["error"]
    # The error is not a result: a rerun (the cell now healthy) fills the hole, in order.
    run = run_grid(specs(), stand_in_cell, out, make_executor=local(2), in_flight=2)
    assert run.computed == 1 and run.complete and not errors_path(out).exists()
    assert read_lines(out, resume=True).records == [stand_in_cell(s) for s in specs()]


def test_a_cell_that_raises_is_retried_once_then_reported(tmp_path):
    out = tmp_path / "g.jsonl"
    sp = specs()
    sp[0] = {**sp[0], "fail": "raise"}
    calls = []

    def counting(spec):
        calls.append(needle_key(spec))
        return stand_in_cell(spec)

    from concurrent.futures import ThreadPoolExecutor

    run = run_grid(sp, counting, out, make_executor=lambda: ThreadPoolExecutor(1))
    assert calls.count(needle_key(sp[0])) == 2  # tried, retried once, then given up
    assert len(run.failed) == 1 and "RuntimeError: stand-in failure" in run.failed[0]["error"]
    assert len(read_lines(out, resume=True).records) == len(sp) - 1
    assert read_lines(errors_path(out), resume=True).records == run.failed


KILLED_RUN = """
import sys
from h2o.needle.cells import stand_in_cell
from h2o.needle.grid import local_executor, run_grid
from h2o.needle.needles import NEEDLES
specs = [
    {"row": r, "length": n, "depth": d, "needle": NEEDLES[(n + d) % 20].id, "sleep": 0.15}
    for r in ("full", "h2o@128", "kivi4") for n in (512, 1024) for d in (0, 25, 50, 75, 100)
]
run_grid(specs, stand_in_cell, sys.argv[1], make_executor=lambda: local_executor(2), in_flight=2)
"""


def _run_script(out: Path, kill_after: int | None) -> None:
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(out)], start_new_session=True)
    try:
        if kill_after is None:
            assert proc.wait(timeout=120) == 0
            return
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if out.exists() and out.read_text(encoding="utf-8").count("\n") >= kill_after:
                break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # the runner and its workers, mid-grid
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_run_killed_midway_and_resumed_gives_the_same_file(tmp_path):
    whole, killed = tmp_path / "whole.jsonl", tmp_path / "killed.jsonl"
    _run_script(whole, None)
    _run_script(killed, 7)
    n_killed = killed.read_text(encoding="utf-8").count("\n")
    assert 7 <= n_killed < 30  # really interrupted
    _run_script(killed, None)  # resumed
    assert normalised(killed) == normalised(whole)
    assert len(normalised(whole)) == 30
    assert killed.read_bytes() == whole.read_bytes()  # stand-in seconds are 0.0 anyway


# -- Dask ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.mark.slow
def test_a_local_dask_cluster_gives_the_same_file_as_local_processes(tmp_path, dask_client):
    a, b = tmp_path / "local.jsonl", tmp_path / "dask.jsonl"
    sp = specs()
    run_grid(sp, stand_in_cell, a, make_executor=local(2), in_flight=2)
    executor = dask_client.get_executor()
    run = run_grid(sp, stand_in_cell, b, make_executor=lambda: executor, in_flight=4)
    assert run.complete and not run.failed
    assert b.read_bytes() == a.read_bytes()
    assert len(dask_client.nthreads()) == 2  # two worker processes behind the scheduler


def test_dask_scheduler_via_the_cli_and_its_address(tmp_path, dask_client, capsys):
    from h2o.cli import main

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    args = ["needle", "--stand-in", "--rows", "full,kivi4", "--lengths", "512", "--quiet"]
    assert main([*args, "--out", str(a), "--workers", "2"]) == 0
    address = dask_client.scheduler.address
    assert main([*args, "--out", str(b), "--dask-scheduler", address]) == 0
    assert b.read_bytes() == a.read_bytes()
    meta = json.loads(Path(str(b) + ".meta.json").read_text())
    assert meta["command"].endswith(f"--dask-scheduler {address}")


# -- the real cell function on the tiny model --------------------------------------------------
def tiny_specs(path: str) -> list[dict]:
    return [
        {"row": r, "length": 1024, "depth": d, "needle": NEEDLES[d // 25].id, "model": path}
        for r in ("full", "h2o@64", "kivi4")
        for d in (0, 100)
    ]


@pytest.mark.slow
def test_real_cells_on_the_tiny_model_locally_and_on_dask(tmp_path, tiny_path, dask_client):
    from h2o.needle.cells import run_cell

    a, b = tmp_path / "local.jsonl", tmp_path / "dask.jsonl"
    sp = tiny_specs(tiny_path)
    assert run_grid(sp, run_cell, a, make_executor=local(2), in_flight=2).complete
    executor = dask_client.get_executor()
    assert run_grid(sp, run_cell, b, make_executor=lambda: executor, in_flight=4).complete
    assert normalised(a) == normalised(b)
    lines = read_lines(a, resume=True).records
    keys = {
        "row", "family", "kind", "policy", "budget", "allocation", "bits", "sinks", "length",
        "depth", "needle", "question", "expected", "produced", "correct", "logprob", "held",
        "kv_bytes", "seconds",
    }  # fmt: skip
    for line in lines:
        assert keys <= set(line)
        assert line["correct"] is is_correct(line["produced"], line["expected"])
    by_row = {x["row"]: x for x in lines}
    assert by_row["full"]["held"] is None and by_row["kivi4"]["held"] is None
    assert len(by_row["h2o@64"]["held"]) == 3  # the tiny model's layers
    assert by_row["kivi4"]["kv_bytes"] < by_row["full"]["kv_bytes"]


@pytest.mark.slow
def test_real_cells_batched_on_dask_give_the_cells_run_one_by_one(tmp_path, tiny_path, dask_client):
    """The grid's own path on a cluster: the cells of a row and length go as one job to a
    worker, which reads their shared haystack once; the lines are those of the cells run one
    by one in local workers, to the digit (each with a one-thread BLAS, as the grid runs them:
    a many-thread BLAS sums in another order, and a KIVI-style cell's last digits move)."""
    from h2o.needle.cells import cell_batch, run_cell, run_cells

    a, b = tmp_path / "one.jsonl", tmp_path / "batched.jsonl"
    sp = tiny_specs(tiny_path)
    assert run_grid(sp, run_cell, a, make_executor=local(2), in_flight=2).complete
    executor = dask_client.get_executor()
    run = run_grid(sp, run_cells, b, make_executor=lambda: executor, in_flight=4, batch=cell_batch)
    assert run.complete and run.computed == len(sp) and not run.failed
    assert normalised(a) == normalised(b)


def test_an_interrupt_keeps_the_cells_done_in_order(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    sp = specs()
    run_grid(sp, stand_in_cell, whole)
    stop_at = needle_key(sp[5])

    def interrupted(spec):  # Ctrl-C (or the CLI's SIGTERM) while the sixth cell runs
        if needle_key(spec) == stop_at:
            raise KeyboardInterrupt
        return stand_in_cell(spec)

    run = run_grid(sp, interrupted, cut, make_executor=lambda: ThreadPoolExecutor(1))
    assert run.interrupted and not run.complete and run.computed == 5
    assert read_lines(cut, resume=True).records == [stand_in_cell(s) for s in sp[:5]]
    run = run_grid(sp, stand_in_cell, cut)
    assert run.computed == len(sp) - 5 and not run.interrupted
    assert cut.read_bytes() == whole.read_bytes()


# -- cells that share work, one job a batch --------------------------------------------------------
def by_row_and_length(spec: dict) -> tuple:
    return (spec["row"], spec["length"])


def stand_in_batch(job: list[dict]) -> list[dict]:
    if len({by_row_and_length(s) for s in job}) != 1:
        raise AssertionError(f"a job mixed batches: {job}")
    return [stand_in_cell(s) for s in job]


def test_a_batched_run_gives_the_file_of_cells_run_one_by_one(tmp_path):
    a, b = tmp_path / "one.jsonl", tmp_path / "batched.jsonl"
    sp = specs()
    run_grid(sp, stand_in_cell, a, make_executor=local(2), in_flight=2)
    jobs: list[int] = []

    def seen(done, total, spec, line, error):
        jobs.append(done)

    run = run_grid(
        sp, stand_in_batch, b, make_executor=local(2), in_flight=2, batch=by_row_and_length,
        progress=seen,
    )  # fmt: skip
    assert run.complete and run.computed == len(sp) and jobs == list(range(1, len(sp) + 1))
    assert a.read_text() == b.read_text()


def test_a_batched_rerun_computes_only_the_missing_cells_of_a_batch(tmp_path):
    out = tmp_path / "g.jsonl"
    sp = specs()
    run_grid(sp[:4], stand_in_cell, out)
    asked: list[list[str]] = []

    def recording(job):
        asked.append([s["needle"] for s in job])
        return stand_in_batch(job)

    run = run_grid(
        sp, recording, out, make_executor=lambda: ThreadPoolExecutor(1), batch=by_row_and_length
    )
    assert run.skipped == 4 and run.computed == len(sp) - 4
    assert sum(map(len, asked)) == len(sp) - 4
    assert len(asked) == len({by_row_and_length(s) for s in sp[4:]})  # one job a batch
    assert read_lines(out, resume=True).records == [stand_in_cell(s) for s in sp]


def test_a_batch_that_raises_is_retried_then_each_of_its_cells_reported(tmp_path):
    out = tmp_path / "g.jsonl"
    sp = specs(rows=["full", "kivi4"], lengths=(512,))
    calls = Counter()

    def failing(job):
        calls[job[0]["row"]] += 1
        if job[0]["row"] == "kivi4":
            raise RuntimeError("this batch fails")
        return stand_in_batch(job)

    run = run_grid(
        sp, failing, out, make_executor=lambda: ThreadPoolExecutor(1), batch=by_row_and_length
    )
    assert calls == {"full": 1, "kivi4": 2}
    assert [f["row"] for f in run.failed] == ["kivi4"] * 3
    assert all("this batch fails" in f["error"] for f in run.failed)
    assert [x["row"] for x in read_lines(out, resume=True).records] == ["full"] * 3


def test_a_job_with_the_wrong_number_of_lines_fails(tmp_path):
    out = tmp_path / "g.jsonl"
    run = run_grid(
        specs(rows=["full"], lengths=(512,)),
        lambda job: stand_in_batch(job)[:-1],
        out,
        make_executor=lambda: ThreadPoolExecutor(1),
        batch=by_row_and_length,
    )
    assert len(run.failed) == 3 and "2 lines for a job of 3 cells" in run.failed[0]["error"]
    assert read_lines(out, resume=True).records == []


@pytest.mark.slow
def test_real_cells_batched_are_the_cells_one_by_one_on_the_tiny_model(tmp_path, tiny_path):
    from h2o.needle.cells import cell_batch, run_cell, run_cells

    a, b = tmp_path / "one.jsonl", tmp_path / "batched.jsonl"
    sp = tiny_specs(tiny_path)
    assert run_grid(sp, run_cell, a, make_executor=local(2), in_flight=2).complete
    run = run_grid(sp, run_cells, b, make_executor=local(2), in_flight=2, batch=cell_batch)
    assert run.complete
    assert normalised(a) == normalised(b)


def test_run_cells_refuses_a_job_of_two_batches_before_loading_anything():
    from h2o.needle.cells import run_cells

    never = {"load": lambda: pytest.fail("the model was loaded")}
    for rows, lengths in ((["full", "h2o@128"], (512,)), (["full", "kivi4"], (512, 1024))):
        sp = specs(rows=rows, lengths=lengths, depths=(0,))
        with pytest.raises(ValueError, match="one job is one length, model and max_new"):
            run_cells(sp, **never)
    assert run_cells([]) == []


def test_the_rows_that_read_a_prompt_as_the_full_cache_share_a_batch():
    """One job a length for them; a row that evicts while it reads, H2O's prefill mode or a
    prompt read quantized is a job of its own."""
    from h2o.needle.cells import cell_batch

    shared = ["full", "kivi4", "quest@128", "snapkv@128", "kvzip@128"]
    alone = ["h2o@128", "h2o@128:w50%:prefill", "kivi4:r32:qprompt"]
    groups: dict = {}
    for s in specs(rows=shared + alone, lengths=(512, 1024)):
        groups.setdefault(cell_batch(s), set()).add((s["row"], s["length"]))
    want = [{(r, n) for r in shared} for n in (512, 1024)]
    want += [{(r, n)} for r in alone for n in (512, 1024)]
    assert sorted(map(sorted, groups.values())) == sorted(map(sorted, want))


def test_a_batch_larger_than_a_job_is_cut_into_jobs_of_about_equal_size(tmp_path):
    a, b = tmp_path / "one.jsonl", tmp_path / "cut.jsonl"
    sp = specs(lengths=(512,), depths=(0, 25, 50, 75, 100))  # 15 cells, one length
    run_grid(sp, stand_in_cell, a)
    sizes: list[int] = []

    def recording(job):
        sizes.append(len(job))
        return [stand_in_cell(s) for s in job]

    run = run_grid(
        sp, recording, b, make_executor=lambda: ThreadPoolExecutor(1),
        batch=lambda s: s["length"], job_cells=6,
    )  # fmt: skip
    assert run.complete and sorted(sizes) == [5, 5, 5]
    assert a.read_text() == b.read_text()
    with pytest.raises(ValueError, match="job_cells"):
        run_grid(sp, recording, b, batch=lambda s: s["length"], job_cells=0)
