"""The step-through player's front end, one for every host (the Streamlit app, a notebook):
ES modules under ``js/`` that draw a replay with plotly.js and step, play and scrub it in the
browser; the constants they share with Python (:mod:`h2o.player.constants`); the payload the host
sends per range of steps (:mod:`h2o.player.playback`); the heatmaps' colour scale
(:mod:`h2o.player.colours`). Pure Python and files: no streamlit, no plotly.

A host takes :func:`bundle` — the modules as one script defining ``H2OPlayer`` (``decode``,
``mount``) — and plotly.js from the installed ``plotly`` package, never a CDN.
"""

from __future__ import annotations

import re
from pathlib import Path

from h2o.player import constants

JS_DIR = Path(__file__).parent / "js"
#: The player's stylesheet (every host puts it in the page once).
CSS_FILE = Path(__file__).parent / "player.css"
#: The player's ES modules, each after those it imports (see :func:`bundle`); ``constants.js`` is
#: generated from :mod:`h2o.player.constants`.
JS_FILES = ("constants.js", "common.js", "slots.js", "plots.js", "player.js")
#: What :func:`bundle` strips: the modules' own imports (one line each, from a sibling) and the
#: ``export`` keyword of their declarations.
IMPORT_LINE = re.compile(r'^import \{([^}]*)\} from "\./([\w.]+)";\n', re.M)
EXPORT_WORD = re.compile(r"^export (?=(?:const|let|function|class) )", re.M)


def module_source(name: str) -> str:
    """One of the player's ES modules; ``constants.js`` as generated from the Python values."""
    if name == "constants.js":
        return constants.js_module()
    return (JS_DIR / name).read_text(encoding="utf-8")


def bundle() -> str:
    """The ES modules as one script that defines ``H2OPlayer`` (``decode``, ``mount``) and
    nothing else — one scope, in :data:`JS_FILES` order, their imports and ``export`` words
    stripped: the component's module and the exported file both start from it (a custom
    component and a file opened from disk take one inline script, not module URLs)."""
    parts = [EXPORT_WORD.sub("", IMPORT_LINE.sub("", module_source(n))) for n in JS_FILES]
    return (
        'var H2OPlayer = (function () {\n"use strict";\n'
        + "\n".join(parts)
        + "\nreturn { decode, mount: (root, bytes, opts) => new Player(root, bytes, opts) };\n"
        + "})();\n"
    )
