"""Start the app's server with its libraries loaded: ``python -m app.serve [options] [-- args]``.

The same as ``streamlit run app/main.py [options] [-- args]`` (every Streamlit option, and the
app's own arguments after ``--``), except that the server does not wait for its first visitor
to import the app's libraries (plotly, scipy, the library's pages and figures) and to load the
compiled loops from numba's disk cache: a thread does both while the server starts, so the first
page a lecturer opens after ``make run`` is about as quick as any later one; and the page it
serves is the app's shell (:mod:`app.shell`: Streamlit's page, whose first chart's scripts are
fetched from the start), with Streamlit's static files answered from memory
(:mod:`app.static_files`). ``make run`` and ``deploy/proxy.py`` start the app this way.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = ROOT / "app" / "main.py"

#: What the first run of any page imports, heaviest first (a name that fails to import is left
#: to the page, which reports it).
PRELOAD = (
    "plotly.graph_objects",
    "scipy.stats",
    "h2o",
    "h2o.bank.kernels",
    "app.figures",
    "app.charts",
    "app.lesson.chapters_1_3",
    "app.lesson.chapters_4_6",
    "app.lesson.chapters_7_10",
    "app.lesson.needle",
)


def preload(timeout: float = 60.0) -> None:
    """Import :data:`PRELOAD` and load every compiled loop (``h2o.bank.warm``). The
    app's modules wait for Streamlit's runtime: their caches are declared against it."""
    from streamlit import runtime

    t0 = time.monotonic()
    for name in PRELOAD:
        if name.startswith("app."):
            deadline = time.monotonic() + timeout
            while not runtime.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        try:
            importlib.import_module(name)
        except Exception:  # the page that needs it says what is wrong
            return
    from h2o.bank import warm

    warm()
    print(f"h2o: libraries and compiled loops loaded in {time.monotonic() - t0:.1f} s", flush=True)


def command(argv: list[str]) -> list[str]:
    """The ``streamlit`` command line that ``argv`` (this module's arguments) stands for."""
    return ["streamlit", "run", str(MAIN), *argv]


@functools.lru_cache(maxsize=4)
def policy_files(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The policy files the app's own arguments name (``-- --policy file.py:Class``, repeated),
    parsed once per process (here, not in the script ``main.py``, which runs on every run)."""
    parser = argparse.ArgumentParser(prog="streamlit run app/main.py --", add_help=False)
    parser.add_argument("--policy", action="append", default=[])
    known, _ = parser.parse_known_args(argv)
    return tuple(known.policy)


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    threading.Thread(target=preload, name="h2o-preload", daemon=True).start()
    from streamlit import file_util

    from app import shell, static_files

    shell.install()  # the page shell: the first chart's scripts are fetched from the start
    static_files.install(file_util.get_static_dir())  # the shell's folder, or Streamlit's
    from streamlit.web import cli

    sys.argv = command(list(sys.argv[1:] if argv is None else argv))
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
