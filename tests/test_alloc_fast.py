"""The fast paths of adaptive and duo (their ≤ 2x target) pinned to the slow ones, bit for bit.

* An adaptive layer stepped whole (``AdaptiveLayer.step``: accumulate every head, then one
  eviction chosen by a partition, or one victim at a time on ties) keeps exactly the positions
  and float64 scores of its heads stepped one by one through ``ada_select``'s sorts.
* A layer of several banks (``LayerParts``: duo's retrieval heads one bank, its streaming heads
  another) marks the same masks and feeds the same float32 signals as the instances' path, so
  the banks end in the instances' states.
* The per-head signal gathered as the instances gather it (``(n, gs)`` rows, transposed: the
  layout decides the order of the sums) has the same bits, whether unrolled or stacked.
* In the model (the tiny random GGUF): every policy under adaptive and duo gives the same
  per-token log-likelihoods fast (``lock_step=True``) and slow (``lock_step=False``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from h2o.bank import make_bank
from h2o.bank.adaptive import AdaptiveLayer
from h2o.model.closed_loop import (
    LayerParts,
    _renormalised_mean,
    _step_parts,
    _step_policies,
    _step_whole,
    _sum,
    head_mean,
)
from h2o.policies import H2O, TOVA, Scissorhands, StreamingLLM


def _softmax_block(rng, G, gs, c, kv, ties: bool = False) -> np.ndarray:
    x = rng.standard_normal((G, gs, c, kv)) * 3
    if ties:
        x = np.round(x)  # many equal weights: equal scores, ties in every eviction
    e = np.exp(x)
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


# -- signals: the layout of the gather ---------------------------------------------------------
def test_unrolled_and_stacked_signals_equal_the_one_head_gather() -> None:
    rng = np.random.default_rng(0)
    gs, kv, i = 3, 700, 2
    inv = np.float32(1.0 / gs)
    for _ in range(60):
        p = _softmax_block(rng, 3, gs, 4, kv)
        n = int(rng.integers(1, 650))
        rows = np.stack([np.sort(rng.choice(kv, n, replace=False)) for _ in range(3)])
        rows = rows.astype(np.int32)
        ref = [_renormalised_mean(p[g : g + 1, :, i, rows[g]])[0] for g in range(3)]
        for g in range(3):  # _step_whole's unrolled form
            pk = p[g, :, i].T.take(rows[g], axis=0).T
            sig = head_mean((inv / _sum(pk, axis=-1))[None, :], pk[None])[0]
            assert np.array_equal(sig, ref[g])
        heads = np.array([0, 2])  # _step_parts' stacked form
        blk = p[heads[:, None], :, i, rows[heads]].transpose(0, 2, 1)
        sig = _renormalised_mean(blk)
        assert np.array_equal(sig[0], ref[0]) and np.array_equal(sig[1], ref[2])


# -- the adaptive layer stepped whole ----------------------------------------------------------
def _adaptive(cls, G, B, w, alpha):
    return AdaptiveLayer([cls(G * B, recent_window=w) for _ in range(G)], B, alpha)


@pytest.mark.parametrize("cls", [H2O, TOVA, Scissorhands])
@pytest.mark.parametrize(
    ("G", "B", "w", "alpha", "steps"),
    [(3, 12, 3, 0.2, 160), (3, 20, 4, 0.0, 160), (2, 9, 2, 1.0, 160), (3, 96, 8, 0.2, 500)],
)
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.slow
def test_adaptive_step_is_the_heads_stepped_one_by_one(cls, G, B, w, alpha, steps, ties) -> None:
    rng = np.random.default_rng(G * B + w)
    slow, fast = _adaptive(cls, G, B, w, alpha), _adaptive(cls, G, B, w, alpha)
    for t in range(steps):
        sigs = []
        for h in slow.heads:
            n = len(h.kept)
            a = rng.dirichlet(np.full(n, 0.3)) if n else np.zeros(0)
            if ties and n:
                a = np.round(a * 4) / 4  # weights of a few values: equal scores, every kind of tie
            sigs.append(a.astype(np.float32))
        for h, a in zip(slow.heads, sigs, strict=True):
            h.on_decode_step(t, a)
            h.evict()
        fast.step(t, sigs)
        for ps, pf in zip(slow.inner, fast.inner, strict=True):
            assert np.array_equal(ps.kept, pf.kept)
            assert np.array_equal(ps.scores, pf.scores)  # float64, bit for bit
        assert sum(len(p) for p in fast.inner) == min(G * B, G * (t + 1))


def test_adaptive_steps_whole_in_the_model_path() -> None:
    """``_step_whole`` (masks, signals, one layer step) against ``_step_policies`` on the heads."""
    rng = np.random.default_rng(3)
    G, gs, c, B, w = 3, 3, 40, 10, 2
    slow, fast = _adaptive(H2O, G, B, w, 0.2), _adaptive(H2O, G, B, w, 0.2)
    p = _softmax_block(rng, G, gs, c, c)
    m_slow, m_fast = np.zeros((G, c, c), bool), np.zeros((G, c, c), bool)
    for i in range(c):
        e1 = _step_policies(p, i, i, slow.heads, [True] * G, m_slow)
        e2 = _step_whole(p, i, i, fast, m_fast)
        assert e1 == e2
        for ps, pf in zip(slow.inner, fast.inner, strict=True):
            assert np.array_equal(ps.kept, pf.kept) and np.array_equal(ps.scores, pf.scores)
    assert np.array_equal(m_slow, m_fast)


# -- a layer of several banks (duo) ------------------------------------------------------------
@pytest.mark.parametrize(
    ("budgets", "kinds"),
    [
        ((30, 8, 30), "rsr"),  # two retrieval heads in one bank, lock-step
        ((30, 31, 8), "rrs"),  # retrieval budgets differ by one: the bank's lanes differ
        ((8, 8, 30), "ssr"),
        ((6, 30, 6), "srs"),
    ],
)
def test_layer_parts_step_as_the_instances(budgets, kinds) -> None:
    rng = np.random.default_rng(sum(budgets))
    G, gs, c = 3, 3, 70

    def row():
        return [
            H2O(b, recent_window=3) if k == "r" else StreamingLLM(b, sinks=2)
            for b, k in zip(budgets, kinds, strict=True)
        ]

    inst = row()
    spec = row()
    groups: dict[str, list[int]] = {}
    for g, k in enumerate(kinds):
        groups.setdefault(k, []).append(g)
    parts = LayerParts([(h, make_bank([spec[g] for g in h])) for h in groups.values()])
    wants = [p.reads_attention for p in inst]
    p = _softmax_block(rng, G, gs, c, c)
    m_slow, m_fast = np.zeros((G, c, c), bool), np.zeros((G, c, c), bool)
    for i in range(c):
        e1 = _step_policies(p, i, i, inst, wants, m_slow)
        e2 = _step_parts(p, i, i, parts, m_fast)
        assert e1 == e2
        for g in range(G):
            assert np.array_equal(inst[g].kept, parts[g].kept)
            assert np.array_equal(inst[g].scores, parts[g].scores)
    assert np.array_equal(m_slow, m_fast)


# -- in the model --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tiny_model import write_tiny_gguf

    from h2o.model import SmolLM

    path: Path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return SmolLM.load(path)


@pytest.mark.parametrize("policy", ["h2o", "tova", "scissorhands", "random", "streaming-llm"])
@pytest.mark.parametrize(
    ("name", "budget", "params"),
    [
        ("adaptive", 24, {"alpha": 0.2}),
        ("adaptive", 12, {"alpha": 0.0}),
        ("duo", 24, {"sinks": 2, "window": 8}),
        ("duo", 13, {"sinks": 2, "window": 8, "retrieval": 0.3}),
    ],
)
def test_fast_and_slow_paths_agree_in_the_model(model, policy, name, budget, params) -> None:
    from tiny_model import token_ids

    from h2o.model import perplexity_under_eviction
    from h2o.model.allocation import allocated_factory, head_shares, make_allocation
    from h2o.model.quality import make_banks

    ids = token_ids(90)
    sh = head_shares(model, ids, 2, 8).kv_rest()
    a = make_allocation(model, name, budget, sh, **params)
    f, _ = allocated_factory(policy, a, recent_window=4, sinks=2)
    fast = perplexity_under_eviction(model, ids, f)
    slow = perplexity_under_eviction(model, ids, f, lock_step=False)
    assert np.array_equal(fast.nll, slow.nll)
    forms = {type(r).__name__ for r in make_banks(model, f)}
    if name == "adaptive" and policy in ("h2o", "tova", "scissorhands"):  # the others: uniform
        assert forms == {"AdaptiveLayer"}
    if name == "duo" and policy != "streaming-llm":  # streaming-llm: one ring bank a layer
        assert "LayerParts" in forms  # a mixed layer ran as banks


@pytest.mark.parametrize("alpha", [0.0, 0.2])
@pytest.mark.slow
def test_adaptive_fast_eviction_is_the_sort_on_random_states(alpha) -> None:
    """``_evict_fast`` against ``evict`` (``ada_select``'s sorts) from random layer states:
    fills, scores spread wide, ordered like old sums or on a few values (ties at the cut), one
    to eight victims. Thousands of states: a partition that misplaces the cut is rare."""
    rng = np.random.default_rng(int(alpha * 10))
    G, B, w = 3, 64, 8
    layers = [_adaptive(H2O, G, B, w, alpha) for _ in range(2)]
    for trial in range(4000):
        k = int(rng.integers(1, 9))
        fills = np.minimum(rng.multinomial(G * B + k - G * w, np.ones(G) / G) + w, G * B)
        k = int(fills.sum()) - G * B
        vals = rng.random((G, G * B + 1))
        if trial % 3 == 1:
            vals = np.round(vals * 3) / 3  # a few values: ties everywhere
        elif trial % 3 == 2:
            vals = np.sort(vals, axis=1)[:, ::-1] + 0.1 * rng.random(vals.shape)
        for g in range(G):
            n = int(fills[g])
            pos = np.sort(rng.choice(10_000, n, replace=False)).astype(np.int32)
            for layer in layers:
                p = layer.inner[g]
                p._pos[:n], p._score[:n], p._n = pos, vals[g, :n], n
        layers[0].evict()
        layers[1]._evict_fast()
        for a, b in zip(layers[0].inner, layers[1].inner, strict=True):
            assert np.array_equal(a.kept, b.kept) and np.array_equal(a.scores, b.scores), k
