"""What the player's Python and its JavaScript share, defined once, here.

The browser's copy is the ES module ``js/constants.js``, generated from these values by
:func:`js_module` (``python -m h2o.player.constants`` rewrites it; a test keeps it current), and
the bundle the app and the exported file run is built with the generated text itself. The
Python side reads the same names: the speed choices (the app's ``state``), the colour scale's
decades (:mod:`h2o.player.colours`) and the fixed colours (the app's ``figures``).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Play speeds, steps per second (the speed control's choices).
SPEEDS = (1, 2, 5, 10, 20, 30, 60)
#: The view settings a host starts the player with (the browser then owns them), and the values
#: each may take (anything else a link or a report carries is ignored).
VIEW_DEFAULTS = {"colour": "log", "rows": "kept", "width": 128, "speed": 5, "reveal": False}
VIEW_CHOICES = {
    "colour": ("log", "linear"),
    "rows": ("kept", "all"),
    "width": (64, 128, 256),
    "speed": SPEEDS,
    "reveal": (False, True),
}
#: After this long without input the browser reports its step and settings to the server.
IDLE_REPORT_MS = 700
#: A range requested from the server and not delivered is asked for again after this long.
REQUEST_RETRY_MS = 4000
#: The log colour scale spans this many decades below the run's largest score.
LOG_DECADES = 4
#: Fixed colours: mid-tones that read on a light and a dark theme.
COLOURS = {
    "evict": "#E8175D",
    "oracle": "#E15759",
    "protectFill": "rgba(44,165,141,0.22)",
    "protectLine": "rgba(44,165,141,0.95)",
    "sinkFill": "rgba(242,142,43,0.25)",
    "sinkLine": "rgba(242,142,43,0.95)",
    "neutral": "rgba(128,128,128,0.9)",
    "plotBg": "rgba(128,128,128,0.10)",
    "highlight": ["#E8175D", "#2CA58D", "#B07AA1", "#9C755F"],
}
#: The heatmaps' sequential scale on a light theme (Streamlit's blues).
SEQ_LIGHT = (
    "#e4f5ff", "#c7ebff", "#a6dcff", "#83c9ff", "#60b4ff",
    "#3d9df3", "#1c83e1", "#0068c9", "#0054a3", "#004280",
)  # fmt: skip

JS_FILE = Path(__file__).parent / "js" / "constants.js"
_SHARED = {
    "SPEEDS": list(SPEEDS),
    "IDLE_REPORT_MS": IDLE_REPORT_MS,
    "REQUEST_RETRY_MS": REQUEST_RETRY_MS,
    "LOG_DECADES": LOG_DECADES,
    "C": COLOURS,
    "SEQ_LIGHT": list(SEQ_LIGHT),
}


def js_module() -> str:
    """``js/constants.js``: each shared value as an exported constant."""
    head = (
        "/* Generated from h2o/player/constants.py (python -m h2o.player.constants): edit the\n"
        " * values there. The player's Python reads the same names. */\n"
    )
    return head + "".join(f"export const {k} = {json.dumps(v)};\n" for k, v in _SHARED.items())


if __name__ == "__main__":
    JS_FILE.write_text(js_module(), encoding="utf-8")
