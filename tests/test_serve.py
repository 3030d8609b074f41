"""``python -m app.serve`` is ``streamlit run app/main.py`` with the libraries loaded at start."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from streamlit_server import serve_process

from app import serve

ROOT = Path(__file__).resolve().parents[1]


def test_the_command_is_streamlit_run_of_the_app_with_every_argument():
    args = ["--server.port=9", "--", "--policy", "mine.py"]
    assert serve.command(args) == ["streamlit", "run", str(ROOT / "app" / "main.py"), *args]


def test_every_preloaded_name_is_a_module():
    import importlib.util

    for name in serve.PRELOAD:
        assert importlib.util.find_spec(name) is not None, name


@pytest.mark.slow
def test_the_server_loads_the_libraries_before_its_first_visitor():
    with serve_process() as (url, proc):
        port = url.rsplit(":", 1)[1]
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"h2o-streamlit-{port}.log"
        deadline = time.monotonic() + 60
        while "h2o: libraries and compiled loops loaded" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            assert proc.poll() is None
            time.sleep(0.2)
