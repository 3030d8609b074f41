"""The needle grid and the frontier (evict or compress?): facts hidden in the shipped texts at every
length and depth, each row of KV cache scored on them, run through any
``concurrent.futures.Executor`` (local processes or a Dask cluster) with resumable JSON Lines.

* :mod:`h2o.needle.needles` — the facts, and the matcher of answers;
* :mod:`h2o.needle.haystack` — prompts of a given length with the needle at a given depth;
* :mod:`h2o.needle.cells` — one cell (needle or frontier) as a plain dict in, a line out;
* :mod:`h2o.needle.grid` — the runner (executors, resume, retries, canonical order);
* :mod:`h2o.needle.results` — the result files' schema and their one bounded reader;
* :mod:`h2o.needle.cli` — what ``python -m h2o needle``, ``followup`` and ``frontier`` run
  (their options are defined in :mod:`h2o.cli`).
"""
