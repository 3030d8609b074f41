"""Decayed H2O: a heavy hitter's sum fades unless attention keeps arriving.

H2O's cumulative sum never forgets (the card's stale spike). Multiply every score by a factor
below one before adding the step's attention, and an old spike decays away while a position
that keeps mattering stays on top — Keyformer and other follow-ups of H2O work in this spirit.

The rule is one plain function, written as the card writes H2O's loop; numba compiles it as
written, so the replay, the banks and the model all run this code, fast.

Load it into the app or the CLI (it then appears in every policy list, as ``decayed-h2o``)::

    streamlit run app/main.py -- --policy examples/decayed_h2o.py:DecayedH2O
    python -m h2o bench --policy-file examples/decayed_h2o.py:DecayedH2O
"""

from h2o.policies.base import ScoredPolicy


class DecayedH2O(ScoredPolicy):
    name = "decayed-h2o"
    label = "Decayed H2O"
    score_label = "decayed attention (×0.99 a step)"

    @staticmethod
    def rule(score, attn, n):
        # The base class does the window, the argmin and the ties.
        for i in range(n):  # attn is index-aligned with the kept positions
            score[i] = 0.99 * score[i] + attn[i]
