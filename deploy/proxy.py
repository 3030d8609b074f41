"""Several app processes behind HAProxy, with sticky sessions: one command.

Run: ``python deploy/proxy.py [--replicas 2] [--port 8501] [--address 127.0.0.1]``
(needs Debian's HAProxy: ``apt-get install -y haproxy``). Ctrl-C stops everything.

One ``streamlit run app/main.py`` is one Python process: its scripts share one GIL, so a class
beyond what one core does waits in line however many cores the machine has. This starts
``--replicas`` of them on free local ports and HAProxy in front, from a config written to a
temporary directory:

- **Sticky sessions.** A Streamlit session lives in one process — its websocket, its uploads
  (``/_stcore/upload_file/<session>/…`` must reach the process that holds the session), its media
  and downloads. HAProxy gives a new browser a replica in turn (round robin) and a cookie naming it
  (``h2o_replica``); every later request of that browser, the websocket upgrade included, goes to
  the same replica. The response header ``X-H2O-Replica`` says which one served it.
- **Websockets.** HAProxy passes the upgrade through in HTTP mode; ``timeout tunnel`` keeps an
  idle websocket open for a lecture (1 h).
- **One cookie secret** for every replica (random per start), so a browser whose replica went
  away keeps valid XSRF cookies on the one it is given instead (its session starts afresh there).
- A replica is taken out of the rotation when ``/_stcore/health`` has failed for 30 s (a busy
  one answers late: its students' sessions are there, so it is not dropped at the first delay).

Each replica loads its own caches (and the model, if a student runs it: 0.8 GB each), so memory
grows with the replicas; ``H2O_REPLAY_CACHE_MB`` / ``H2O_UPLOAD_CACHE_MB`` bound each one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HAPROXY = os.environ.get("H2O_HAPROXY", "haproxy")
COOKIE = "h2o_replica"
INSTALL = "apt-get install -y haproxy"

CONFIG = """global
    maxconn 4096

defaults
    mode http
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout http-request 30s
    # A busy replica answers its health check late, not never: out after 30 s of failures.
    timeout check 20s

frontend hall
    bind {address}:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    cookie {cookie} insert indirect nocache httponly
    option httpchk GET /_stcore/health
    http-response set-header X-H2O-Replica %[srv_name]
{servers}
"""


def haproxy_path() -> str | None:
    """HAProxy's executable, or None when it is not installed."""
    return shutil.which(HAPROXY)


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def config_text(address: str, port: int, replicas: list[int]) -> str:
    """HAProxy's configuration for replicas on these local ports."""
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{p} cookie r{i} check inter 5s fall 6 rise 1"
        for i, p in enumerate(replicas, 1)
    )
    return CONFIG.format(address=address, port=port, cookie=COOKIE, servers=servers)


def _wait_healthy(url: str, proc: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-1500:] if log.is_file() else ""
            raise RuntimeError(f"{what} did not start; its log ends:\n{tail}")
        time.sleep(0.3)


@dataclass
class Deployment:
    url: str  # the proxy's
    replica_urls: list[str]
    procs: list[subprocess.Popen] = field(default_factory=list)  # replicas, then HAProxy
    workdir: Path | None = None

    @property
    def pids(self) -> list[int]:
        """The replicas' process ids (what serves the students)."""
        return [p.pid for p in self.procs[: len(self.replica_urls)]]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def deployment(
    replicas: int = 2,
    port: int | None = None,
    address: str = "127.0.0.1",
    streamlit_args: tuple[str, ...] = (),
) -> Iterator[Deployment]:
    """Start ``replicas`` app processes and HAProxy in front of them; stop them all on exit."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, not {replicas}")
    exe = haproxy_path()
    if exe is None:
        raise RuntimeError(f"HAProxy is not installed: run `{INSTALL}`")
    work = Path(tempfile.mkdtemp(prefix="h2o-hall-"))
    ports = [free_port() for _ in range(replicas)]
    port = port or free_port(address)
    secret = secrets.token_hex(16)
    d = Deployment(f"http://{address}:{port}", [f"http://127.0.0.1:{p}" for p in ports])
    d.workdir = work
    logs = []
    try:
        for i, p in enumerate(ports, 1):
            log = work / f"replica-{i}.log"
            out = open(log, "w")  # noqa: SIM115 — closed below, with the process
            logs.append(out)
            cmd = [
                sys.executable,
                "-m",
                "app.serve",  # `streamlit run app/main.py`, its libraries loaded at start
                "--server.headless=true",
                f"--server.port={p}",
                "--server.address=127.0.0.1",
                "--browser.gatherUsageStats=false",
                "--server.fileWatcherType=none",
                *streamlit_args,
            ]
            # The secret goes by the environment: Streamlit refuses it as a command-line flag.
            env = {**os.environ, "STREAMLIT_SERVER_COOKIE_SECRET": secret}
            d.procs.append(
                subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
            )
        for i, (u, proc) in enumerate(zip(d.replica_urls, d.procs, strict=True), 1):
            _wait_healthy(u, proc, f"replica {i}", work / f"replica-{i}.log")
        cfg = work / "haproxy.cfg"
        cfg.write_text(config_text(address, port, ports))
        check = subprocess.run([exe, "-c", "-q", "-f", str(cfg)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"HAProxy refused {cfg}: {check.stderr.strip()[:500]}")
        log = work / "haproxy.log"
        out = open(log, "w")  # noqa: SIM115
        logs.append(out)
        d.procs.append(subprocess.Popen([exe, "-db", "-f", str(cfg)], stdout=out, stderr=out))
        _wait_healthy(d.url, d.procs[-1], "HAProxy", log)
        yield d
    finally:
        for proc in reversed(d.procs):
            _stop(proc)
        for f in logs:
            f.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=2, help="app processes (default: 2)")
    ap.add_argument("--port", type=int, default=8501, help="the proxy's port (default: 8501)")
    ap.add_argument("--address", default="127.0.0.1", help="the proxy's address (0.0.0.0: all)")
    args = ap.parse_args()
    if args.replicas < 1:
        ap.error("--replicas must be at least 1")
    if haproxy_path() is None:
        print(f"HAProxy is not installed: run `{INSTALL}`", file=sys.stderr)
        return 2
    with deployment(args.replicas, args.port, args.address) as d:
        print(f"{args.replicas} replicas behind HAProxy: open {d.url}  (Ctrl-C stops them)")
        print(f"config and logs: {d.workdir}")
        signal.signal(signal.SIGTERM, _interrupt)  # stop the replicas on a plain kill too
        with contextlib.suppress(KeyboardInterrupt):
            while all(p.poll() is None for p in d.procs):
                time.sleep(1)
            print("a process of the deployment ended; stopping the others", file=sys.stderr)
    return 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
