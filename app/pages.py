"""Every page of the app, once: its file under ``views/``, title, icon and URL path.

``main.py`` builds the navigation from :data:`PAGES`; a page that links to another (the lesson's
"Open in …" buttons, the Real model page's trace buttons) names it by the constant here, which is
the path ``st.switch_page`` takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent


@dataclass(frozen=True)
class PageSpec:
    file: str  # relative to app/, as st.switch_page takes it
    title: str
    icon: str
    url_path: str
    default: bool = False
    #: Its first figure is the step-through player: the router starts loading plotly.js first.
    opens_on_player: bool = False
    #: Its first figure is a Plotly chart (the shell, ``app/shell.py``, fetches its module early).
    has_chart: bool = True


LESSON = "views/lesson.py"
STEP_THROUGH = "views/step_through.py"
WINDOW_EXPLORER = "views/window_explorer.py"
STALE_SPIKE = "views/stale_spike.py"
ALL_POLICIES = "views/all_policies.py"
REAL_MODEL = "views/real_model.py"
BUDGET_SPLIT = "views/budget_split.py"
HOW_IT_WORKS = "views/how_it_works.py"
NEEDLE_GRID = "views/needle_grid.py"
EVICT_OR_COMPRESS = "views/evict_or_compress.py"

#: Every page, in menu order. The lesson is the default (served at ``/``), so every other page —
#: Step through included — has a path of its own that a pasted link opens without a detour.
PAGES = [
    PageSpec(LESSON, "Lesson", ":material/school:", "lesson", default=True),
    PageSpec(
        STEP_THROUGH, "Step through", ":material/play_circle:", "step-through", opens_on_player=True
    ),
    PageSpec(WINDOW_EXPLORER, "recentWindow explorer", ":material/tune:", "window-explorer"),
    PageSpec(
        STALE_SPIKE,
        "Stale spike: H2O vs Scissorhands",
        ":material/bolt:",
        "stale-spike",
        opens_on_player=True,
    ),
    PageSpec(ALL_POLICIES, "All policies", ":material/leaderboard:", "all-policies"),
    PageSpec(REAL_MODEL, "Real model", ":material/neurology:", "real-model"),
    PageSpec(BUDGET_SPLIT, "Where should the budget go?", ":material/grid_view:", "where-budget"),
    PageSpec(NEEDLE_GRID, "The needle grid", ":material/apps:", "needle-grid"),
    PageSpec(EVICT_OR_COMPRESS, "Evict or compress?", ":material/compress:", "evict-or-compress"),
    PageSpec(HOW_IT_WORKS, "How it works", ":material/code:", "how-it-works", has_chart=False),
]


@st.cache_resource(show_spinner=False)
def templates() -> list[st.Page]:
    """Every page, in menu order, built once per server: building one resolves its file on disk
    (a tenth of a run's time when it was done on every run). Defined here, not in ``main.py``:
    the script runs on every run, and a cached function defined there is hashed anew each time
    (its source read back from disk)."""
    return [
        st.Page(HERE / p.file, title=p.title, icon=p.icon, url_path=p.url_path, default=p.default)
        for p in PAGES
    ]


def opens_on_player(url_path: str) -> bool:
    """Whether the page at ``url_path`` opens on the step-through player."""
    return any(p.opens_on_player for p in PAGES if p.url_path == url_path)
