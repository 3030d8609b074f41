"""h2o — KV-cache eviction policies, attention traces and replay, for teaching.

The policies follow the H2O policy card (``docs/reference/h2o-policy-card.txt``): see
:mod:`h2o.policies`.
"""

from .bank import PolicyBank, make_bank, replay_bank
from .policies import (
    H2O,
    POLICIES,
    TOVA,
    Policy,
    RandomEviction,
    Scissorhands,
    SlidingWindow,
    StreamingLLM,
)
from .replay import Replay, replay
from .synthetic import builtin_trace, canonical_trace, stale_spike_trace, toy_trace
from .trace import Trace, save_trace
from .trace_npz import load_trace

__all__ = [
    "H2O",
    "POLICIES",
    "TOVA",
    "Policy",
    "PolicyBank",
    "RandomEviction",
    "Replay",
    "Scissorhands",
    "SlidingWindow",
    "StreamingLLM",
    "Trace",
    "builtin_trace",
    "canonical_trace",
    "load_trace",
    "make_bank",
    "replay",
    "replay_bank",
    "save_trace",
    "stale_spike_trace",
    "toy_trace",
]
