"""A tiny random-weight llama GGUF for the model tests (no real model file needed).

Written with ``gguf.GGUFWriter``: SmolLM2's tensor names and metadata keys, tiny dimensions,
Q4_1/Q8_0/F32 tensors like the real file. Shared by every test file that runs the numpy model.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType

# Tiny llama: d=96, 4 query heads over 2 KV heads (GQA), head dim 16, FFN 96, 3 layers. What
# the code must read from the file differs from every default and from SmolLM2's values: the
# head dim is not d / heads (24), the RoPE base not 10000, the RMS-norm epsilon not 1e-5 (and
# large enough to move the output), the KV heads not the query heads.
D, FF, NH, NKV, HD, NL = 96, 96, 4, 2, 16, 3
ROPE_BASE, EPS = 500.0, 0.05
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "Ġa n", "Ġan d", "e r", "o n"]


def bytes_to_unicode() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values."""
    bs = list(range(ord("!"), ord("~") + 1))
    bs += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def vocab() -> list[str]:
    toks = SPECIALS + bytes_to_unicode()
    toks += ["".join(m.split(" ")) for m in MERGES]
    return toks


def write_tiny_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the tiny model; return the weights as the file will dequantize them."""
    rng = np.random.default_rng(seed)
    words = vocab()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-test-llama")
    w.add_block_count(NL)
    w.add_context_length(512)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(EPS)
    w.add_rope_dimension_count(HD)
    w.add_vocab_size(len(words))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(words)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(words) - len(SPECIALS)))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    expected: dict[str, np.ndarray] = {}

    def add(name: str, arr: np.ndarray, qtype: gguf.GGMLQuantizationType) -> None:
        arr = arr.astype(np.float32)
        if qtype == Q.F32:
            w.add_tensor(name, arr)
            expected[name] = arr
        else:
            q = gguf.quants.quantize(arr, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
            expected[name] = gguf.quants.dequantize(q, qtype)

    add("token_embd.weight", rng.normal(0, 0.8, (len(words), D)), Q.Q8_0)
    for i in range(NL):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", 1 + 0.1 * rng.normal(size=D), Q.F32)
        add(p + "attn_q.weight", rng.normal(0, 0.35, (NH * HD, D)), Q.Q4_1)
        add(p + "attn_k.weight", rng.normal(0, 0.35, (NKV * HD, D)), Q.Q4_1)
        add(p + "attn_v.weight", rng.normal(0, 0.2, (NKV * HD, D)), Q.Q4_1)
        add(p + "attn_output.weight", rng.normal(0, 0.1, (D, NH * HD)), Q.Q4_1)
        add(p + "ffn_norm.weight", 1 + 0.1 * rng.normal(size=D), Q.F32)
        add(p + "ffn_gate.weight", rng.normal(0, 0.15, (FF, D)), Q.Q4_1)
        add(p + "ffn_up.weight", rng.normal(0, 0.15, (FF, D)), Q.Q4_1)
        add(p + "ffn_down.weight", rng.normal(0, 0.1, (D, FF)), Q.Q4_1)
    add("output_norm.weight", 1 + 0.1 * rng.normal(size=D), Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def token_ids(n: int, seed: int = 1) -> list[int]:
    # ordinary (non-special) tokens
    return [int(i) for i in np.random.default_rng(seed).integers(3, len(vocab()), n)]


class WindowStandIn:
    """A minimal sliding-window policy that also checks the ``attn`` contract."""

    reads_attention = True

    def __init__(self, budget: int) -> None:
        self.budget, self._kept, self.calls = budget, [], 0

    @property
    def kept(self) -> np.ndarray:
        return np.asarray(self._kept, dtype=np.int32)

    def on_decode_step(self, pos: int, attn: np.ndarray | None) -> None:
        assert attn is not None and attn.dtype == np.float32 and attn.ndim == 1
        assert attn.shape[0] == len(self._kept) and (attn >= 0).all()
        if self._kept:
            assert abs(float(attn.sum()) - 1.0) < 1e-5  # softmax over the kept keys
        self._kept.append(pos)
        self.calls += 1

    def evict(self) -> list[int]:
        k = max(0, len(self._kept) - self.budget)
        victims, self._kept = self._kept[:k], self._kept[k:]
        return victims
