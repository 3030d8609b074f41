"""A live JupyterLab server with the lesson notebook, for the browser tests and the benchmark.

Started on a free local port with a token, no browser, and its own temporary root, settings,
runtime and config directories (nothing of the user's is read or written); the announcements
("news") extension is disabled, so the page asks the network for nothing. The notebook view
renders every cell (``windowingMode: none``), so a cell's output is in the page even when
scrolled out of view. Playwright then runs the notebook through JupyterLab's own menu.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamlit_server import free_port

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "lesson.ipynb"
JUPYTER = Path(sys.executable).parent / "jupyter"


def jupyterlab_missing() -> str | None:
    """Why JupyterLab cannot be started here (None: it can)."""
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return "JupyterLab is not installed: pip install -e '.[test]' (or '.[notebook]')"
    if not JUPYTER.exists():
        return f"no jupyter command beside {sys.executable}"
    return None


@dataclass
class Lab:
    url: str
    token: str
    root: Path

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}"


@contextlib.contextmanager
def serve_lab(notebooks: dict[str, dict]) -> Iterator[Lab]:
    """``jupyter lab`` on a free port over a temporary root holding ``notebooks`` (name →
    notebook JSON); yields once the server answers."""
    with tempfile.TemporaryDirectory(prefix="h2o-lab-") as tmp:
        base = Path(tmp)
        root = base / "root"
        root.mkdir()
        for name, nb in notebooks.items():
            (root / name).write_text(json.dumps(nb), encoding="utf-8")
        config, settings = base / "config", base / "settings"
        (config / "labconfig").mkdir(parents=True)
        (config / "labconfig" / "page_config.json").write_text(
            json.dumps(
                {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}
            )
        )
        tracker = settings / "@jupyterlab" / "notebook-extension"
        tracker.mkdir(parents=True)
        (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
        port, token = free_port(), secrets.token_hex(16)
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(config),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTER_DATA_DIR": str(base / "data"),
            "IPYTHONDIR": str(base / "ipython"),
        }
        cmd = [
            str(JUPYTER),
            "lab",
            "--no-browser",
            "--ServerApp.open_browser=False",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # never asks PyPI for extensions
            "--ServerApp.terminals_enabled=False",
            "--allow-root",  # a CI container runs as root
        ]
        log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"h2o-jupyterlab-{port}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env, close_fds=True
            )
            url = f"http://127.0.0.1:{port}"
            try:
                deadline = time.monotonic() + 90
                while True:
                    try:
                        with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                            break
                    except OSError:
                        pass
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"jupyter lab did not start; see {log_path}")
                    time.sleep(0.3)
                yield Lab(url, token, root)
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(base, ignore_errors=True)


def lesson(extra_cells: list[dict] | None = None) -> dict:
    """The lesson notebook's JSON, with ``extra_cells`` appended (a test's own cells)."""
    nb = json.loads(LESSON.read_text(encoding="utf-8"))
    nb["cells"] += extra_cells or []
    return nb


def code_cell(source: str, cell_id: str) -> dict:
    return {
        "cell_type": "code",
        "id": cell_id,
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": source,
    }


IDLE = """() => {
  const s = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
  return s !== null && s.getAttribute('data-status') === 'idle';
}"""


def open_notebook(page, lab: Lab, name: str, timeout: float = 90) -> None:
    """Open ``name`` and wait for its kernel (the notebook's own, python3) to be idle. JupyterLab
    sometimes asks which kernel to start even so: the dialog's default is that one."""
    page.goto(lab.notebook_url(name))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=timeout * 1000)
    deadline = time.monotonic() + timeout
    while not page.evaluate(IDLE):
        accept_dialog(page)
        if time.monotonic() > deadline:
            raise TimeoutError("the notebook's kernel did not start")
        page.wait_for_timeout(200)
    page.wait_for_timeout(1000)  # a late "Select Kernel" dialog would swallow the first click
    if accept_dialog(page):
        page.wait_for_function(IDLE, timeout=timeout * 1000)


def accept_dialog(page) -> bool:
    """Accept JupyterLab's open dialog, if any (its default: the notebook's own kernel)."""
    accept = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
    if not accept.count():
        return False
    accept.first.click()
    return True


def run_all(page, timeout: float = 300) -> None:
    """Run → Run All Cells, then wait until every code cell has run (none queued or running).
    A "Select Kernel" dialog that opens late swallows the click: accept it and ask again."""
    started = """() => {
      const p = document.querySelector('.jp-CodeCell .jp-InputPrompt');
      return p !== null && /\\[(\\*|\\d+)\\]/.test(p.textContent);
    }"""
    for attempt in range(3):
        accept_dialog(page)
        page.click('.lm-MenuBar-item:has-text("Run")')
        page.click('.lm-Menu-item[data-command="runmenu:run-all"]')
        try:
            page.wait_for_function(started, timeout=20_000)
            break
        except Exception:
            page.keyboard.press("Escape")  # the menu, if it is still open
            if attempt == 2:
                raise
    page.wait_for_function(
        """() => {
          const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
          return prompts.length > 0 && prompts.every((p) => /\\[\\d+\\]/.test(p.textContent));
        }""",
        timeout=timeout * 1000,
    )


#: A marimo notebook holding the player through ``mo.ui.anywidget`` (the kernel-side test exports
#: it; the browser test runs it with ``marimo run``).
MARIMO_NOTEBOOK = """\
import marimo

app = marimo.App()


@app.cell
def _():
    import json

    import marimo as mo

    import h2o
    from h2o.notebook import Player
    from h2o.player import playback

    widget = Player(h2o.toy_trace(), "h2o", "scissorhands", budget=8, recent_window=2)
    player = mo.ui.anywidget(widget)
    header = playback.decode(player.widget.payload)[0]
    state = player.value  # the traitlets, as marimo's front end receives them
    print(json.dumps({
        "labels": [p["label"] for p in header["panels"]],
        "synced": sorted(k for k in ("payload", "css", "plotly_js", "_esm") if state.get(k)),
    }))
    player
    return


if __name__ == "__main__":
    app.run()
"""


def marimo_missing() -> str | None:
    try:
        import marimo  # noqa: F401
    except ImportError:
        return "marimo is not installed: pip install -e '.[test]'"
    return None


@contextlib.contextmanager
def serve_marimo(source: str) -> Iterator[str]:
    """``marimo run`` of a notebook (``source``) on a free port, with a token; yields the URL
    that opens it once the server answers."""
    with tempfile.TemporaryDirectory(prefix="h2o-marimo-") as tmp:
        path = Path(tmp) / "player_nb.py"
        path.write_text(source, encoding="utf-8")
        port, token = free_port(), secrets.token_hex(16)
        env = {**os.environ, "MARIMO_SKIP_UPDATE_CHECK": "1", "HOME": tmp}
        cmd = [sys.executable, "-m", "marimo", "-q", "run", str(path), "--headless"]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--token-password", token]
        log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"h2o-marimo-{port}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, env=env)
            url = f"http://127.0.0.1:{port}"
            try:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        with urllib.request.urlopen(f"{url}/health", timeout=2):
                            break
                    except OSError:
                        pass
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"marimo did not start; see {log_path}")
                    time.sleep(0.3)
                yield f"{url}/?access_token={token}"
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
