"""Eviction policies, one per file. ``POLICIES`` maps the CLI/app names to the classes."""

from .base import Policy, ScoredPolicy
from .h2o import H2O
from .random import RandomEviction
from .scissorhands import Scissorhands
from .sliding_window import SlidingWindow
from .streaming_llm import StreamingLLM
from .tova import TOVA

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (H2O, StreamingLLM, Scissorhands, TOVA, SlidingWindow, RandomEviction)
}

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
]
