"""The closed loop's rows in one call (``steady_rows`` in h2o/bank/kernels.py,
``ScoredBank.step_rows``, ``closed_loop.Bank.step_rows``): once every KV head is at its budget,
a chunk's rows are stepped by one compiled loop instead of one Python step each. Checked against
the row-by-row path (``LayerHeads.step_rows``: ``Bank.step`` for each row) on random
probabilities — kept positions, float64 scores and masks bit for bit — and its float32
pairwise sum against numpy's own ``add.reduce``."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from numba import njit

from h2o.bank import make_bank
from h2o.bank.kernels import _row_times, _sum32
from h2o.model.closed_loop import Bank, LayerHeads, head_mean
from h2o.policies import H2O, TOVA, Scissorhands


@pytest.mark.parametrize("n", [*range(0, 300), 1000, 4097, 8192, 8193, 20_011])
@pytest.mark.slow
def test_the_float32_sum_is_numpys(n):
    rng = np.random.default_rng(n)
    a = (rng.random(n, dtype=np.float32) ** 6).astype(np.float32)
    want = np.add.reduce(a.reshape(1, 1, n), axis=-1)[0, 0]  # a (G, gs, n) block's reduction
    assert _sum32(a, 0, n, np.empty((64, 4))) == want


def causal_probs(rng, G, gs, t0, c, scale, dead=None):
    """A chunk's causal softmax rows ``(G, gs, c, t0 + c)``, float32; ``dead = (g, h, i)``: that
    row's weight all on the query itself (its kept mass underflows to 0)."""
    s = rng.standard_normal((G, gs, c, t0 + c)).astype(np.float32) * scale
    for i in range(c):
        s[:, :, i, t0 + i + 1 :] = -np.inf
    if dead is not None:
        g, h, i = dead
        s[g, h, i, : t0 + i] = -200.0
        s[g, h, i, t0 + i] = 0.0
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(axis=-1, keepdims=True)).astype(np.float32)


class RowByRow(LayerHeads):
    """The reference: ``Bank.step`` for every row (the base class's loop)."""

    def __init__(self, bank) -> None:
        self.heads = Bank(bank)

    def step(self, p, t, i, mask, layer=-1):
        return self.heads.step(p, t, i, mask, layer)


CASES = [
    (cls, budget, window, scale)
    for cls in (H2O, Scissorhands, TOVA)
    for budget, window in ((8, 0), (40, 5), (129, 64), (300, 150))
    for scale in (2.0, 9.0)
]


@pytest.mark.parametrize(("cls", "budget", "window", "scale"), CASES)
def test_rows_in_one_call_are_the_rows_one_by_one(cls, budget, window, scale):
    rng = np.random.default_rng(budget * 7 + window)
    G, gs = 3, 3
    params = {} if cls is TOVA else {"recent_window": window}
    fused = make_bank([cls(budget, **params) for _ in range(G)])
    # a first chunk fills every head past its budget; the next ones run in the steady state
    t = 0
    for c in (budget + 9, 77, 130):
        p = causal_probs(rng, G, gs, t, c, scale)
        ref = copy.deepcopy(fused)
        if t > budget:  # the compiled loop takes the chunk (not the row-by-row fallback)
            probe = copy.deepcopy(fused)
            assert probe.step_rows(p, t, 0, np.zeros((G, c, t + c), dtype=bool)) == c
        want_mask = np.zeros((G, c, t + c), dtype=bool)
        got_mask = want_mask.copy()
        want = RowByRow(ref).step_rows(p, t, want_mask)
        got = Bank(fused).step_rows(p, t, got_mask)
        assert got == want
        assert np.array_equal(got_mask, want_mask)
        for g in range(G):
            assert fused.kept(g).tolist() == ref.kept(g).tolist()
            assert fused.scores(g).tobytes() == ref.scores(g).tobytes()
        t += c


def test_the_steady_state_is_taken_in_one_call_and_a_dead_head_falls_back():
    rng = np.random.default_rng(3)
    G, gs, budget = 3, 3, 32
    bank = make_bank([H2O(budget, recent_window=4) for _ in range(G)])
    p = causal_probs(rng, G, gs, 0, 40, 3.0)
    Bank(bank).step_rows(p, 0, np.zeros((G, 40, 40), dtype=bool))
    t0, c = 40, 50
    # row 20: query head (1, 2) puts all its weight on itself, none on what head 1 keeps
    p = causal_probs(rng, G, gs, t0, c, 3.0, dead=(1, 2, 20))
    ref = copy.deepcopy(bank)
    probe = copy.deepcopy(bank)
    assert probe.step_rows(p, t0, 0, np.zeros((G, c, t0 + c), dtype=bool)) == 20
    assert probe.step_rows(p, t0, 20, np.zeros((G, c, t0 + c), dtype=bool)) == 20
    want_mask = np.zeros((G, c, t0 + c), dtype=bool)
    got_mask = want_mask.copy()
    with np.errstate(divide="ignore", invalid="ignore"):  # the careful path's retry (forward)
        assert RowByRow(ref).step_rows(p, t0, want_mask) == 0
        assert Bank(bank).step_rows(p, t0, got_mask) == 0
    assert np.array_equal(got_mask, want_mask)
    for g in range(G):
        assert bank.kept(g).tolist() == ref.kept(g).tolist()
        assert bank.scores(g).tobytes() == ref.scores(g).tobytes()
    assert bank.last_pos == ref.last_pos == t0 + c - 1


SHAPES = [(1, 2, 9), (3, 3, 94), (2, 4, 513), (3, 3, 4097)]


def _data(G, gs, n):
    rng = np.random.default_rng(G * 1000 + n)
    pk = rng.random((G, gs, n), dtype=np.float32) / np.float32(n)
    w = rng.random((G, gs), dtype=np.float32) * np.float32(5)
    return w, pk


@pytest.mark.parametrize(("G", "gs", "n"), SHAPES)
def test_the_head_mean_is_its_rule_written_out(G, gs, n):
    """The group's signal, written as its rule: for every head ``g`` and kept slot ``j``, the
    float32 products ``w[g, h] * pk[g, h, j]``, each rounded, added in head order — one numpy
    float32 scalar operation at a time (each correctly rounded, on every CPU)."""
    w, pk = _data(G, gs, n)
    want = np.empty((G, n), np.float32)
    for g in range(G):
        for j in range(n):
            acc = np.float32(0.0)
            for h in range(gs):
                acc = np.float32(acc + np.float32(w[g, h] * pk[g, h, j]))
            want[g, j] = acc
    assert head_mean(w, pk).tobytes() == want.tobytes()


@njit
def _compiled_products(w, pk, out):
    for g in range(pk.shape[0]):
        for j in range(pk.shape[2]):
            out[g, j] = _row_times(w, pk, g, j)


@pytest.mark.parametrize(("G", "gs", "n"), SHAPES)
def test_the_compiled_rows_add_as_the_per_row_path(G, gs, n):
    """The compiled rows' signal (``kernels._row_times``) is the per-row path's
    (``closed_loop.head_mean``) to the bit, on any CPU: neither asks a BLAS."""
    w, pk = _data(G, gs, n)
    out = np.empty((G, n), np.float32)
    _compiled_products(w, pk, out)
    assert out.tobytes() == head_mean(w, pk).tobytes()
    # and both are the exact sum to float32's accuracy (gs roundings of products and sums)
    exact = np.einsum("gh,ghn->gn", w.astype(np.float64), pk.astype(np.float64))
    bound = 2 * gs * np.finfo(np.float32).eps * exact
    assert np.all(np.abs(out - exact) <= bound)
