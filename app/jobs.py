"""The model runs one job at a time, server-wide, and says how long a job has left.

Thirty students pressing "compute" at once on a 2-core server would otherwise share both cores
among thirty forward passes and every one of them would crawl. :class:`ModelQueue` lets one job
run while the others wait their turn, each session showing its place in the line. Identical
requests are computed once anyway: the functions in :mod:`app.data` that use the queue are
Streamlit-cached, and a cached function computes one value per arguments while the other callers
wait for it.

:func:`eta` turns measured progress into a time left — from the work done so far on this
machine, never from a constant.

:func:`bound_blas_threads` caps the BLAS threads of the server's process: numpy's OpenBLAS
would start one spinning thread per core for every matrix product, so a model job took every
core from the sessions that are only stepping and switching pages. One core stays free for them
(``H2O_BLAS_THREADS`` overrides).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

import numpy  # noqa: F401 — loads the OpenBLAS that threadpoolctl then finds and caps
import streamlit as st
from threadpoolctl import threadpool_limits


class ModelQueue:
    """One model job at a time; the waiting ones in arrival order."""

    def __init__(self) -> None:
        self._run = threading.Lock()
        self._mu = threading.Lock()
        self._waiting: list[object] = []
        self.running: tuple[str, float] | None = None  # label, start (monotonic)

    @contextlib.contextmanager
    def turn(self, label: str, waiting: Callable[[str], None]) -> Iterator[None]:
        """Wait for the model (calling ``waiting`` with the place in the line every half
        second), then hold it for the body."""
        ticket = object()
        with self._mu:
            self._waiting.append(ticket)
        try:
            while not self._run.acquire(timeout=0.5):
                with self._mu:
                    ahead = self._waiting.index(ticket)
                    running = self.running
                now = running[0] if running else "a job"
                since = f", running for {time.monotonic() - running[1]:.0f} s" if running else ""
                waiting(
                    f"Waiting for the model: it runs one job at a time for the whole class. "
                    f"Now: {now}{since}; {ahead} more ahead of yours."
                    if ahead
                    else f"Waiting for the model: yours is next (now: {now}{since})."
                )
        finally:
            with self._mu:
                self._waiting.remove(ticket)
        try:
            self.running = (label, time.monotonic())
            yield
        finally:
            self.running = None
            self._run.release()


@st.cache_resource(show_spinner=False)
def model_queue() -> ModelQueue:
    """The server's one queue (shared by every session)."""
    return ModelQueue()


def eta(done: float, total: float, started: float) -> str:
    """``", about 12 s left"`` from the work done since ``started`` (monotonic); empty until
    there is something to extrapolate from."""
    if done <= 0 or done >= total:
        return ""
    left = (time.monotonic() - started) / done * (total - done)
    return f", about {left:.0f} s left" if left >= 1 else ", under a second left"


def blas_threads_wanted(env: str | None, cores: int | None) -> int:
    """The BLAS threads for a server with ``cores`` cores: ``H2O_BLAS_THREADS`` (``env``) if set
    (a positive integer, else ``ValueError``), otherwise one core fewer than the machine has."""
    if env is not None and env.strip():
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"H2O_BLAS_THREADS must be a positive integer, not {env[:40]!r}")
        return n
    return max(1, (cores or 1) - 1)


@st.cache_resource(show_spinner=False)
def bound_blas_threads() -> int:
    """Cap the process's BLAS threads once (see the module's docstring); returns the cap."""
    n = blas_threads_wanted(os.environ.get("H2O_BLAS_THREADS"), os.cpu_count())
    # From a thread of its own: threadpoolctl keeps the thread that set OpenBLAS's limit
    # forever, and a script thread carries its session (state, uploads, replays) with it.
    setter = threading.Thread(target=threadpool_limits, kwargs={"limits": n, "user_api": "blas"})
    setter.start()
    setter.join()
    return n


@st.cache_resource(show_spinner=False)
def warm_kernels() -> threading.Thread:
    """Once per server, in the background: the banks' compiled loops built (the first start
    after install: several seconds) or loaded from their disk cache, before a page sweeps."""
    from h2o.bank import warm

    thread = threading.Thread(target=warm, name="h2o-warm-kernels", daemon=True)
    thread.start()
    return thread
