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
"""

from __future__ import annotations

import gc
import os
import threading

import streamlit as st
from streamlit import config

DEFAULT_SECONDS = 5.0


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
    """Counts script runs; :meth:`collect_if_ran` collects once if any ran since the last time."""

    def __init__(self) -> None:
        self._runs = 0
        self._lock = threading.Lock()
        self.collections = 0

    def script_ran(self) -> None:
        with self._lock:
            self._runs += 1

    def collect_if_ran(self) -> bool:
        with self._lock:
            ran, self._runs = self._runs, 0
        if not ran:
            return False
        gc.collect(2)
        self.collections += 1
        return True

    def run_every(self, seconds: float) -> threading.Thread:
        def loop() -> None:
            while True:
                threading.Event().wait(seconds)
                self.collect_if_ran()

        thread = threading.Thread(target=loop, name="h2o-gc", daemon=True)
        thread.start()
        return thread


@st.cache_resource(show_spinner=False)
def collector() -> Collector:
    """The server's collector: started once, Streamlit's per-run collection turned off (unless
    ``H2O_GC_SECONDS=0``). ``ValueError`` for a bad ``H2O_GC_SECONDS`` (nothing changes)."""
    seconds = period(os.environ.get("H2O_GC_SECONDS"))
    c = Collector()
    if seconds > 0:
        # Streamlit's public st.set_option takes client.* options only; this one is read at the
        # end of every run, so setting it here takes effect from this run on.
        config.set_option("runner.postScriptGC", False)
        c.run_every(seconds)
    return c
