"""What the load benchmarks share: the server's CPU and memory, percentiles, the machine's load.

Used by ``load.py`` (browsers) and ``hall.py`` (protocol-level students). The server may be
several processes (replicas behind a proxy): CPU and RSS are their sums. psutil when installed,
else ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable

try:
    import psutil
except ImportError:  # /proc does the same on Linux
    psutil = None


def _rss(pid: int) -> int:
    if psutil is not None:
        return int(psutil.Process(pid).memory_info().rss)
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _cpu(pid: int) -> float:
    if psutil is not None:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """The server's summed RSS every 0.2 s (its peak), its CPU seconds, and the machine's
    1-minute load average (its peak: the machine is shared)."""

    def __init__(self, pids: int | Iterable[int]) -> None:
        self.pids = [pids] if isinstance(pids, int) else list(pids)
        self.peak = 0
        self.load_peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return sum(_rss(p) for p in self.pids)

    def cpu(self) -> float:
        return sum(_cpu(p) for p in self.pids)

    @staticmethod
    def load() -> float:
        return os.getloadavg()[0]

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(OSError, ValueError):  # a replica gone: keep the peak
                self.peak = max(self.peak, self.rss())
            self.load_peak = max(self.load_peak, self.load())

    def __enter__(self) -> Sampler:
        self.peak = self.rss()
        self.load_peak = self.load()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (nearest rank)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]
