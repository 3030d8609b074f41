"""The library's own source for the How it works page: read once per version of its file.

``inspect.getsource`` of a class parses its whole module with ``ast``, and Python 3.11's parser
cannot run in two threads at once (``SystemError: AST constructor recursion depth mismatch`` on
How it works, 4 of 300 protocol-level students in ``benchmarks/hall.py``). So the reads go one
at a time, and each is kept per (object, file modification time): the page parses a module once
per server instead of once per student, and an edited file is read again.
"""

from __future__ import annotations

import inspect
import os
import threading
from typing import Any

_lock = threading.Lock()
_read: dict[tuple[str, str, str, int], str] = {}


def source(obj: Any) -> str:
    """``inspect.getsource(obj)``, serialised and kept until its file changes."""
    path = inspect.getsourcefile(obj) or ""
    mtime = os.stat(path).st_mtime_ns if path else 0
    key = (obj.__module__, obj.__qualname__, path, mtime)
    with _lock:
        if key not in _read:
            _read[key] = inspect.getsource(obj)
        return _read[key]
