"""A real LLM inside: SmolLM2-135M-Instruct in plain numpy, read from its GGUF file.

* :class:`SmolLM` — load (:meth:`SmolLM.load`), tokenize, forward pass, perplexity.
* :func:`perplexity_under_eviction` — closed-loop quality with a policy in every (layer, KV head).
* :func:`generate` — greedy continuation under eviction.
* :func:`capture_attention` — a full-cache attention trace of one layer (for replay).
* :class:`Row` — what holds the cache in one run (full, a policy, SnapKV, KIVI-style bits, or
  a combination), its label and honest bytes; :func:`score_answer` (a needle-grid cell) and
  :func:`row_perplexity` run a row (:mod:`h2o.model.quant`: the quantized cache).
* :func:`layer_attention_shares` — per layer, attention mass on sinks / recent / middle
  (:mod:`h2o.model.layers` has the per-layer traces it is computed from).

Only numpy, ``gguf`` and ``tokenizers`` are needed (no torch, no transformers).
"""

from h2o.model.answer import AnswerScore, row_perplexity, score_answer
from h2o.model.capture import capture_attention, to_trace
from h2o.model.forward import AttnChunk, SmolLM
from h2o.model.generate import GenerationResult, generate
from h2o.model.gguf_io import ModelConfig, ModelNotFoundError, find_gguf
from h2o.model.kv_cache import KVCache
from h2o.model.layers import RegionShares, layer_attention_shares
from h2o.model.quality import (
    PerplexityResult,
    make_policies,
    perplexity_under_eviction,
    policy_factory,
    quality_table,
)
from h2o.model.rows import Row, parse_rows

__all__ = [
    "AnswerScore",
    "AttnChunk",
    "GenerationResult",
    "KVCache",
    "ModelConfig",
    "ModelNotFoundError",
    "PerplexityResult",
    "RegionShares",
    "Row",
    "SmolLM",
    "capture_attention",
    "find_gguf",
    "generate",
    "layer_attention_shares",
    "make_policies",
    "parse_rows",
    "perplexity_under_eviction",
    "policy_factory",
    "quality_table",
    "row_perplexity",
    "score_answer",
    "to_trace",
]
