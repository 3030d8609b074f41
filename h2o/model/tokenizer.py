"""Byte-level BPE tokenizer rebuilt from the vocabulary and merges stored in the GGUF.

SmolLM2 uses GPT-2 byte-level BPE with one extra pre-tokenization rule: every digit is its own
pre-token (llama.cpp's ``smollm`` pre-tokenizer, HF's ``Digits(individual_digits=True)``).
Control tokens such as ``<|im_start|>`` are registered as special tokens so that they are
matched verbatim in text instead of being split into bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from h2o.model.gguf_io import TokenizerData

# llama.cpp pre-tokenizer names whose first rule splits digits one by one.
_DIGIT_SPLITTING_PRE = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"}
# GGUF token types: 3 = control, 4 = user-defined; both behave as special tokens.
_SPECIAL_TYPES = {3, 4}
#: The pretraining corpus's document separator (id 0 in SmolLM2). The Instruct GGUF's
#: ``tokenizer.ggml.eos_token_id`` is the chat turn's end, ``<|im_end|>`` (id 2), and lists this
#: one only as ``unknown_token_id``; but a plain-text continuation ends with it.
END_OF_TEXT = "<|endoftext|>"


class BPETokenizer:
    """Thin wrapper around a ``tokenizers.Tokenizer`` built from GGUF tables."""

    def __init__(self, data: TokenizerData) -> None:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        vocab = {tok: i for i, tok in enumerate(data.tokens)}
        merges = [tuple(m.split(" ", 1)) for m in data.merges]
        tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if data.pre in _DIGIT_SPLITTING_PRE:
            tk.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Digits(individual_digits=True), byte_level]
            )
        else:
            tk.pre_tokenizer = byte_level
        tk.decoder = decoders.ByteLevel()
        specials = [data.tokens[i] for i, t in enumerate(data.token_types) if t in _SPECIAL_TYPES]
        tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        self._tk = tk
        self.data = data
        self.bos_id = data.bos_id
        self.eos_id = data.eos_id
        #: Ids that end a generation: the GGUF's ``eos_token_id`` and :data:`END_OF_TEXT`.
        self.end_ids = frozenset(i for i in (data.eos_id, vocab.get(END_OF_TEXT)) if i is not None)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS is added: SmolLM2's GGUF says ``add_bos_token=False``)."""
        return list(self._tk.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text of a token id sequence."""
        return self._tk.decode(list(ids), skip_special_tokens=skip_special)

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """Human-readable text of each token on its own (e.g. ``" Paris"``, not ``"ĠParis"``).

        A multi-byte character split across tokens shows up as U+FFFD in each piece.
        """
        return [self._tk.decode([int(i)], skip_special_tokens=False) for i in ids]
