"""The classroom app's router: ``streamlit run app/main.py``.

One file per page under ``views/``, listed once in :data:`PAGES` (modelled on ``streamlit hello``).
The page is the URL path (``/step-through``, ``/window-explorer``, …); the shared parameters ride
in the query string, so a copied link reopens the exact view.

The folder is ``views/``, not ``pages/``: Streamlit treats a ``pages/`` folder next to the main
script as an old-style multipage app, and a fresh server's first run then resolves the URL
against that folder's file names (``window_explorer``, not ``window-explorer``) and shows a
"Page not found" dialog over a pasted deep link (streamlit#8860, streamlit#9992).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

# `streamlit run app/main.py` puts app/ on sys.path, not the repo root that `app` lives in.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app import charts, collector, jobs, pages, player, serve, state  # noqa: E402
from h2o.custom import load_policy  # noqa: E402

#: This run's own copies: ``st.navigation`` marks the page it returns as the one this run may
#: call, so sessions running at once must not share the objects.
PAGES = [copy.copy(p) for p in pages.templates()]

st.set_page_config(
    page_title="H2O — KV-cache eviction",
    page_icon="🧠",  # an emoji favicon is a data URL; a :material: one is fetched from Google
    layout="wide",
    menu_items={"About": "A teaching app for KV-cache eviction: H2O and its baselines."},
)


def load_policies(specs: tuple[str, ...]) -> list[str]:
    """Register the policies named on the command line (``-- --policy file.py:Class``); the
    reasons any was refused. Loading again is a lookup (``h2o.custom``). Only files on this
    machine, named by whoever started the server, are ever loaded: nothing from a browser."""
    refused = []
    for spec in specs:
        try:
            load_policy(spec)
        except ValueError as e:
            refused.append(str(e))
    return refused


page = st.navigation(PAGES)
if pages.opens_on_player(page.url_path):
    player.preload()  # plotly.js loads while the server computes the page
jobs.warm_kernels()
try:
    jobs.bound_blas_threads()  # once per server: a model job leaves a core to the class
except ValueError as e:
    st.error(state.md(e, 200), icon=":material/error:")
try:  # one garbage collection every few seconds, not one per run (app/collector.py)
    collector.collector().script_ran()
except ValueError as e:
    st.error(state.md(e, 200), icon=":material/error:")
state.read_url()  # once per session: a pasted link opens its view
for reason in load_policies(serve.policy_files(tuple(sys.argv[1:]))):
    st.error(f"Your policy was not loaded: {state.md(reason, 400)}", icon=":material/error:")
charts.link_descriptions()  # one component a page names every chart's description
page.run()
