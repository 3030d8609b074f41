"""Where a command's CPU goes, by kind of process, and how busy it kept the machine.

Run: ``python benchmarks/cpu_by_process.py -- make test`` (any command after ``--``)

Samples every process in ``/proc`` once a second while the command runs (a process that lives
less than a second may be missed: for a suite of minutes), and at the end sums
each one's CPU (user + system) by kind: Chromium, the app's Streamlit servers, pytest (its
workers included), Playwright's driver, JupyterLab and marimo, other Python, the rest. A process
that ran before the command counts only from then. The machine's busy share comes from
``/proc/stat`` over the same wall time (every process on it, this sampler included).

Why not ``time``: it counts the processes the command waits for, and Chromium's renderers are
reaped by Chromium, not by the test process: a suite that read 65 % busy by ``time`` kept the
machine 94 % busy. Linux only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")

#: Kinds, first match on the command line wins.
KINDS = (
    ("chromium", ("chrom",)),
    ("streamlit server", ("app.serve", "streamlit")),
    ("pytest", ("pytest", "exec(eval(sys.stdin")),  # xdist's workers start with exec(eval(...))
    ("playwright driver", ("playwright", "node ")),
    ("jupyter/marimo", ("jupyter", "ipykernel", "marimo")),
    ("other python", ("python",)),
)


def machine() -> tuple[int, int]:
    """(all ticks, idle ticks) of ``/proc/stat``'s first line."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]  # noqa: SIM115
    return sum(v[:8]), v[3] + v[4]


def kind(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return next((k for k, marks in KINDS if any(m in cmd for m in marks)), "other")


def processes() -> dict[tuple[str, str], float]:
    """(pid, start time) -> CPU seconds so far, of every process now."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        out[(pid, rest[19])] = (int(rest[11]) + int(rest[12])) / HZ  # utime, stime; starttime
    return out


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise SystemExit("usage: python benchmarks/cpu_by_process.py -- COMMAND [ARGS...]")
    command = argv[argv.index("--") + 1 :]
    before = processes()  # what ran already counts from here on
    seen: dict[tuple[str, str], list] = {}
    t0, (all0, idle0) = time.monotonic(), machine()
    proc = subprocess.Popen(command)
    while True:
        done = proc.poll() is not None
        for key, cpu in processes().items():
            if key not in seen:
                k = kind(key[0])
                if k is None:
                    continue
                seen[key] = [k, before.get(key, 0.0), cpu]
            seen[key][2] = max(seen[key][2], cpu)
        if done:
            break
        time.sleep(1)
    wall = time.monotonic() - t0
    all1, idle1 = machine()
    by: dict[str, float] = {}
    for k, start, cpu in seen.values():
        by[k] = by.get(k, 0.0) + cpu - start
    total = sum(by.values()) or 1.0  # a command shorter than a sample: nothing seen
    print(f"\n{' '.join(command)}: exit {proc.returncode}, {wall:.0f} s wall")
    print(f"machine busy {1 - (idle1 - idle0) / (all1 - all0):.0%} of {os.cpu_count()} cores")
    for k, cpu in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<18} {cpu:>8.0f} s  {cpu / total:>4.0%}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
