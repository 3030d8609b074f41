"""A toy kind of cache, in one file, as a newcomer would add one: the prompt read in full, then
only its first ``budget`` positions kept (StreamingLLM's sinks without its window), every decoded
token admitted after. ``first@64`` in the row grammar."""

from __future__ import annotations

import numpy as np

from h2o.model.caches import Budgeted
from h2o.model.caches.fixed_keep import FixedKeep
from h2o.model.stack import cache_for


class FirstTokens(Budgeted):
    """Keep a prompt's first ``budget`` positions per KV head once it has been read."""

    kind = "first"  # its labels: first@BUDGET (Budgeted reads them)
    takes = ("policy", "budget")  # the same positions in every head: no allocation
    quantizable = False
    closed_loop = False  # it chooses once, after a prompt
    colour, marker = "#8C564B", "x"  # its line on the memory frontier

    def name(self) -> str:
        return "First tokens"

    def read_prompt(self, model, prompt, cache, quant, reading, calibration_ids=None):
        hidden = model.read(prompt, cache_for(model.config, cache, quant=quant))
        T, cfg = len(prompt), model.config
        keep = np.arange(min(int(self.row.budget), T))  # type: ignore[arg-type]
        return hidden, [
            [FixedKeep(keep, T - 1) for _ in range(cfg.n_kv_heads)] for _ in range(cfg.n_layers)
        ]
