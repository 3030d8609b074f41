"""A live ``streamlit run`` of the app and Debian's Chromium, for the browser tests and benchmarks.

Started the way Streamlit's own e2e suite does it: a headless server on a free local port, polled
on ``/_stcore/health``; a page is ready when ``[data-testid="stApp"]`` reports
``data-test-connection-state="CONNECTED"`` and a ``data-test-script-state`` other than
``running``. Playwright cannot download its own browsers here: it drives ``/usr/bin/chromium``
(or ``$H2O_CHROMIUM``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("H2O_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve() -> Iterator[str]:
    """``streamlit run`` the app on a free local port; yields its URL once healthy."""
    with serve_process() as (url, _):
        yield url


@contextlib.contextmanager
def serve_process(
    env: dict[str, str] | None = None,
    script: Path | None = None,
    cwd: Path = ROOT,
    base_path: str = "",
) -> Iterator[tuple[str, subprocess.Popen]]:
    """:func:`serve`, also yielding the server's process (for its CPU time and memory);
    ``script``: another Streamlit script than the app (a benchmark's floor page); ``cwd``: the
    checkout whose app runs (a benchmark's "before"); ``base_path``: the server's
    ``server.baseUrlPath`` (the URL yielded includes it)."""
    port = free_port()
    # The app starts as `make run` starts it (app/serve.py); another script as `streamlit run`.
    start = ["app.serve"] if script is None else ["streamlit", "run", str(script)]
    cmd = [
        sys.executable,
        "-m",
        *start,
        "--server.headless=true",
        f"--server.port={port}",
        "--server.address=127.0.0.1",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
        *([f"--server.baseUrlPath={base_path}"] if base_path else []),
    ]
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"h2o-streamlit-{port}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    url = f"http://127.0.0.1:{port}" + (f"/{base_path.strip('/')}" if base_path else "")
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start; see {log.name}")
            time.sleep(0.3)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def launch(playwright):
    """Debian's Chromium, headless, with no network of its own."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def wait_ready(page, timeout: float = 120) -> None:
    """Connected, and the script has finished (it may start a moment after the click)."""
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-connection-state="CONNECTED"]', timeout=timeout * 1000
    )
    deadline = time.monotonic() + timeout
    idle_since = None
    while time.monotonic() < deadline:
        state = page.get_attribute('[data-testid="stApp"]', "data-test-script-state")
        if state not in ("running", "rerunRequested", "initial"):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 0.6:
                return
        else:
            idle_since = None
        page.wait_for_timeout(100)
    raise TimeoutError("the app script did not finish")


def settle(page, quiet: float = 2.0, timeout: float = 120) -> None:
    """Until the script is idle and the page has stopped growing for ``quiet`` seconds: some
    pages draw a code block or a chart a moment after the script first reports idle (the lesson
    draws its first chapter first, the rest a moment later)."""
    wait_ready(page, timeout)
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = page.evaluate(
            """() => [document.querySelectorAll('*').length,
                      document.querySelectorAll('.main-svg').length,
                      (document.querySelector('[data-testid=stApp]') || {dataset: {}})
                        .dataset.testScriptState || '']"""
        )
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet and now[2] not in ("running", "rerunRequested"):
            return
        page.wait_for_timeout(250)
    raise TimeoutError(f"the page kept changing: {last}")


#: The step-through player, once it has drawn a step (``data-rendered``) and its plots.
PLAYER = ".h2o-player"


def wait_player(page, plots: int = 4, timeout: float = 120) -> None:
    page.wait_for_selector(f"{PLAYER}[data-rendered]", timeout=timeout * 1000)
    page.wait_for_function(
        f"document.querySelectorAll('{PLAYER} .js-plotly-plot .main-svg').length >= {plots}",
        timeout=timeout * 1000,
    )


def shown_step(page) -> int:
    return int(page.get_attribute(PLAYER, "data-rendered"))


def _needs_chromium():
    try:
        import pytest
    except ImportError:  # a benchmark run without the test extra: no mark needed
        return None
    return pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"browser tests need Debian's Chromium at {CHROMIUM}: run `apt-get install -y "
        "chromium` (Playwright cannot download its own browsers here), or point H2O_CHROMIUM at "
        "a Chromium binary",
    )


#: The browser tests' mark: they need Debian's Chromium, and say how to get it when it is missing.
needs_chromium = _needs_chromium()
