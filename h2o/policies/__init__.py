"""Eviction policies, one per file. The registry (``POLICIES``, :func:`make_policy`) maps the
CLI/app names to the classes."""

from .base import Policy, ScoredPolicy
from .h2o import H2O
from .random import RandomEviction
from .registry import POLICIES, custom_policies, make_policy, policy_params, refusal
from .scissorhands import Scissorhands
from .sliding_window import SlidingWindow
from .streaming_llm import StreamingLLM
from .tova import TOVA

__all__ = [
    "H2O",
    "POLICIES",
    "TOVA",
    "Policy",
    "RandomEviction",
    "Scissorhands",
    "ScoredPolicy",
    "SlidingWindow",
    "StreamingLLM",
    "custom_policies",
    "make_policy",
    "policy_params",
    "refusal",
]
