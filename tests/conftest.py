"""Shared test setup: make the app package (``app/``, next to ``h2o/``) importable; the live
server and the Chromium the browser tests share (one of each per test module); pages drawn
whole under AppTest."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# One BLAS thread a test process (and the app servers and workers it starts): `make test` runs
# two workers a core, and OpenBLAS's own threads, one a core in each worker by default, spin
# against the other workers' (on 4 workers and 2 cores a real-model test ran 5x slower).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


from collections import Counter  # noqa: E402

import pytest  # noqa: E402
from streamlit_server import launch, serve  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

# numpy may have been loaded (by a plugin) before the variable above was read: limit it as loaded
_ONE_BLAS_THREAD = threadpool_limits(limits=1, user_api="blas")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with the most Chromium and real-model tests first, then by number of tests
    (each file's tests keep their order). ``make test`` hands the files to its workers in this
    order (xdist's ``--no-loadscope-reorder``): a long browser file handed out last would run
    alone at the end while the other core sits idle."""
    heavy: Counter = Counter()
    count: Counter = Counter()
    for item in items:
        count[item.path] += 1
        if item.get_closest_marker("browser") or item.get_closest_marker("model"):
            heavy[item.path] += 1
    items.sort(key=lambda item: (-heavy[item.path], -count[item.path]))


#: The test process's own ``__main__``: Streamlit's script runner (AppTest) installs a page's
#: script as ``__main__`` and leaves it there, and a process spawned after it (Dask's workers)
#: would run that script again on start and die.
_MAIN = sys.modules.get("__main__")


@pytest.fixture(autouse=True)
def _main_module_kept():
    yield
    if _MAIN is not None:
        sys.modules["__main__"] = _MAIN


@pytest.fixture(autouse=True)
def _pages_drawn_whole(request, monkeypatch):
    """A page's first run in a session stops below its first figure until the browser reports
    it painted (``app/painted.py``). AppTest has no browser, so every test sees whole pages,
    except the tests of that first run (marked ``first_paint``). Browser tests run the real
    thing: their server is another process."""
    if request.node.get_closest_marker("first_paint") is None:
        monkeypatch.setattr("app.painted.SHORT_FIRST_RUN", False)


@pytest.fixture(scope="module")
def server():
    """``streamlit run`` of the app on a free local port, for one test module."""
    with serve() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium under Playwright, for one test module."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> str:
    """The tiny random SmolLM2-shaped model (``tiny_model.py``) as a GGUF file, once per test
    module: a grid's spec names its model by path (a string, as the spec is JSON)."""
    pytest.importorskip("gguf")
    from tiny_model import write_tiny_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_smollm(tiny_path):
    """The tiny random SmolLM2-shaped model (``tiny_model.py``), loaded once per test module."""
    pytest.importorskip("tokenizers")
    from h2o.model import SmolLM

    return SmolLM.load(tiny_path)
