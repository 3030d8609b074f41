"""The needle pages' two result files: the needle grid and the frontier (eviction against
KIVI-style quantization at equal KV memory).

``data`` reads and checks the JSON Lines files (bounded); ``grid`` and ``frontier`` aggregate;
``claims`` builds every sentence with a number (pure, tested at every choice the pages offer);
``shipped`` caches the files for the pages; ``runs`` recomputes one cell through the model queue.
"""
