"""The model queue: one job at a time, the others told their place; time left from progress."""

from __future__ import annotations

import threading
import time

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from app.jobs import ModelQueue, blas_threads_wanted, bound_blas_threads, eta


@pytest.mark.slow
def test_jobs_run_one_at_a_time_and_waiters_know_their_place():
    queue = ModelQueue()
    running = []
    overlap = []
    said: dict[str, list[str]] = {"a": [], "b": [], "c": []}

    def job(name: str) -> None:
        with queue.turn(f"job {name}", said[name].append):
            running.append(name)
            if len(running) > 1:
                overlap.append(list(running))
            time.sleep(0.8)
            running.remove(name)

    threads = []
    for name in "abc":
        threads.append(threading.Thread(target=job, args=(name,)))
        threads[-1].start()
        time.sleep(0.1)
    for t in threads:
        t.join()
    assert overlap == []
    assert said["a"] == []  # the first never waited
    assert any("yours is next" in m for m in said["b"])
    assert any("1 more ahead of yours" in m for m in said["c"])
    assert all(m.startswith("Waiting for the model") for m in said["b"] + said["c"])


def test_a_failed_job_frees_the_model():
    queue = ModelQueue()
    try:
        with queue.turn("boom", print):
            raise RuntimeError("the run failed")
    except RuntimeError:
        pass
    with queue.turn("next", print):
        assert queue.running is not None and queue.running[0] == "next"


def test_time_left_comes_from_measured_progress():
    started = time.monotonic() - 10  # 10 s for the first quarter
    assert eta(25, 100, started) == ", about 30 s left"
    assert eta(0, 100, started) == "" and eta(100, 100, started) == ""


def test_blas_threads_leave_a_core_free_unless_told():
    assert blas_threads_wanted(None, 2) == 1
    assert blas_threads_wanted(None, 8) == 7
    assert blas_threads_wanted(None, 1) == 1
    assert blas_threads_wanted(None, None) == 1
    assert blas_threads_wanted("", 8) == 7
    assert blas_threads_wanted("3", 2) == 3
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(ValueError, match="H2O_BLAS_THREADS must be a positive integer"):
            blas_threads_wanted(bad, 2)


def test_the_server_process_caps_numpys_blas(monkeypatch):
    monkeypatch.setenv("H2O_BLAS_THREADS", "1")
    bound_blas_threads.clear()
    try:
        with threadpool_limits(limits=None):  # restores this process's limits afterwards
            assert bound_blas_threads() == 1
            blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
            assert blas and all(p["num_threads"] == 1 for p in blas)
    finally:
        bound_blas_threads.clear()
