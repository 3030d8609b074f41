"""The classroom app: ``streamlit run app/main.py``.

``main.py`` is the router, ``views/`` holds one file per page, ``figures/`` builds every Plotly
figure, ``data.py`` caches traces and replays, ``state.py`` holds the shared controls and
``stepper.py`` the step-through view used by two pages. Policy logic stays in :mod:`h2o`.
"""
