"""One progress signature for every long call of the library, the CLI and the app.

``progress(done, total, label)``: ``done`` of ``total`` units of work (layers, tokens, steps,
rows), and what is being done (``"layers"``, ``"tokens"``, a policy's label, ``"done"`` at the
end). Every long call takes one as ``progress=`` (``None``: no reports).
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int, str], None]


def relabel(progress: Progress, label: str) -> Progress:
    """``progress`` reporting every call as ``label`` (one run among several: its name)."""

    def report(done: int, total: int, _what: str) -> None:
        progress(done, total, label)

    return report
