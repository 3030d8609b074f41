"""Garbage collection for a class: one full collection every few seconds, server-wide, instead of
one after every script run.

Streamlit runs ``gc.collect(2)`` after every script run (``runner.postScriptGC``), so that memory
held in reference cycles goes at once. A full collection walks every object the process tracks —
about 150,000 here (streamlit, plotly, numpy, the app's modules), 0.16–0.22 s on this 2-core
machine — while holding the GIL. With a class on the server, every student's page, budget change
and player range waited behind everyone's collections: 40 % of the server's samples with 20
students (py-spy, ``benchmarks/hall.py``). Here the server collects from a thread of its own, at
most once per ``H2O_GC_SECONDS`` (5 by default) and only when scripts ran since: memory in cycles
goes within seconds instead of at once, and the cost no longer grows with the class.
``H2O_GC_SECONDS=0`` keeps Streamlit's collection after every run.

Even one collection every few seconds was a fifth of a busy server's CPU (py-spy with
``--gil`` under ``benchmarks/hall.py``, 30 students): each walked every object the process
holds, most of them modules and shared caches that never become garbage. So after each
collection the survivors are frozen (:func:`gc.freeze`): the next collection walks only what
was made since. Memory held in cycles among frozen objects is found by a full sweep of
everything every :data:`FULL_SECONDS`.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable

import streamlit as st
from streamlit import config

DEFAULT_SECONDS = 5.0
#: Seconds between sweeps of everything, frozen objects included.
FULL_SECONDS = 600.0


def period(env: str | None) -> float:
    """Seconds between collections from ``H2O_GC_SECONDS`` (``env``): a number ≥ 0, else
    ``ValueError``; unset or blank: :data:`DEFAULT_SECONDS`. 0: after every run, as Streamlit."""
    if env is None or not env.strip():
        return DEFAULT_SECONDS
    try:
        s = float(env)
    except ValueError:
        s = -1.0
    if not s >= 0 or s == float("inf"):
        raise ValueError(f"H2O_GC_SECONDS must be a number of seconds ≥ 0, not {env[:40]!r}")
    return s


class Collector:
    """Counts script runs; :meth:`collect_if_ran` collects once if any ran since the last time.

    With ``freeze``, the survivors of each collection are frozen and a full sweep (frozen objects
    included) runs when ``full_seconds`` have passed since the last one (``clock``: seconds)."""

    def __init__(
        self,
        freeze: bool = False,
        full_seconds: float = FULL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runs = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._freeze = freeze
        self._full_seconds = full_seconds
        self._clock = clock
        self._last_full = clock()
        self.collections = 0
        self.full_sweeps = 0

    def script_ran(self) -> None:
        with self._lock:
            self._runs += 1

    def collect_if_ran(self) -> bool:
        with self._lock:
            ran, self._runs = self._runs, 0
        if not ran:
            return False
        if self._freeze and self._clock() - self._last_full >= self._full_seconds:
            gc.unfreeze()  # this collection walks everything
            self._last_full = self._clock()
            self.full_sweeps += 1
        gc.collect(2)
        if self._freeze:
            gc.freeze()
        self.collections += 1
        return True

    def run_every(self, seconds: float) -> threading.Thread:
        def loop() -> None:
            while not self._stop.wait(seconds):
                self.collect_if_ran()

        thread = threading.Thread(target=loop, name="h2o-gc", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """End :meth:`run_every`'s loop (and unfreeze what it froze)."""
        self._stop.set()
        if self._freeze:
            gc.unfreeze()


@st.cache_resource(show_spinner=False)
def collector() -> Collector:
    """The server's collector: started once, Streamlit's per-run collection turned off (unless
    ``H2O_GC_SECONDS=0``). ``ValueError`` for a bad ``H2O_GC_SECONDS`` (nothing changes)."""
    seconds = period(os.environ.get("H2O_GC_SECONDS"))
    c = Collector(freeze=seconds > 0)
    if seconds > 0:
        # Streamlit's public st.set_option takes client.* options only; this one is read at the
        # end of every run, so setting it here takes effect from this run on.
        config.set_option("runner.postScriptGC", False)
        c.run_every(seconds)
    return c
