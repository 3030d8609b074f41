"""The helpers of the "Where should the budget go?" page (``views/budget_split.py``): its model
runs, computed on request (``data``), and the sentences built from its numbers (``claims``).

One convention for the pages: a page with helpers of its own keeps them in a package named
after it (``app/lesson/``, ``app/real_model/``, ``app/budget_split/``).
"""
