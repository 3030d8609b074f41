"""Decayed H2O: a heavy hitter's sum fades unless attention keeps arriving.

H2O's cumulative sum never forgets (the card's stale spike). Multiply every score by a factor
below one before adding the step's attention, and an old spike decays away while a position
that keeps mattering stays on top — Keyformer and other follow-ups of H2O work in this spirit.

Load it into the app or the CLI (it then appears in every policy list, as ``decayed-h2o``)::

    streamlit run app/main.py -- --policy examples/decayed_h2o.py:DecayedH2O
    python -m h2o bench --policy-file examples/decayed_h2o.py:DecayedH2O
"""

import numpy as np

from h2o.policies.base import ScoredPolicy


class DecayedH2O(ScoredPolicy):
    name = "decayed-h2o"
    label = "Decayed H2O"
    score_label = "decayed attention (×0.99 a step)"
    decay = 0.99

    def _accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        # score[i] = decay * score[i] + weight: the base class does the window, argmin and ties.
        score *= self.decay
        score += attn
