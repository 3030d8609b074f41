"""h2o/stats.py from its definitions: the position is the unit (a cell key is ``(*position,
needle)``), a row's share over positions has Wilson's interval on ``n`` positions at the mean
share answered, and two rows are compared by an exact sign test over the positions they share.
Each expectation is a hand computation beside the call; the issue's two worked examples are
recomputed from the shipped grid."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy.stats import binomtest

from h2o import stats
from h2o.needle import findings
from h2o.needle.results import read_grid

ROOT = Path(__file__).resolve().parents[1]


def sign_by_hand(k: int, d: int) -> float:
    """Two-sided sign test: twice the smaller tail of Binomial(d, 1/2), at most 1."""
    tail = sum(math.comb(d, i) for i in range(min(k, d - k) + 1)) / 2**d
    return min(1.0, 2 * tail)


def wilson_by_hand(p: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_a_sign_test_is_the_binomial_tail_of_the_positions_won():
    for a in range(8):
        for b in range(8):
            if a + b:
                assert stats.sign_test(a, b) == pytest.approx(sign_by_hand(a, a + b), abs=1e-12)
    assert stats.sign_test(0, 0) == 1.0
    assert stats.sign_test(3, 1) == pytest.approx(10 / 16)  # 2 * (1 + 4) / 16
    assert stats.sign_test(7, 1) == pytest.approx(18 / 256)  # 2 * (1 + 8) / 256
    with pytest.raises(ValueError):
        stats.sign_test(-1, 2)


def test_the_smallest_attainable_p_is_every_position_won_by_one_row():
    assert stats.min_p(5) == pytest.approx(2 / 2**5)  # 0.0625: no test on 5 can pass 0.05
    assert stats.min_p(6) == pytest.approx(2 / 2**6)  # 0.031: 6 can
    assert stats.min_p(1) == 1.0 and stats.min_p(0) == 1.0
    assert max(n for n in range(1, 20) if stats.min_p(n) >= stats.ALPHA) == 5


def test_three_needles_at_one_position_are_one_observation():
    """Position (512, 0): A answers 3, B 0; (512, 25): A 1, B 2; (512, 50): both 1 (a tie).
    Cells: 5 discordant under A, 2 under B; positions: A won 1, B won 1, 1 tied."""
    a = {(512, 0, "x"): True, (512, 0, "y"): True, (512, 0, "z"): True}
    b = {(512, 0, "x"): False, (512, 0, "y"): False, (512, 0, "z"): False}
    a |= {(512, 25, "x"): True, (512, 25, "y"): False, (512, 25, "z"): False}
    b |= {(512, 25, "x"): False, (512, 25, "y"): True, (512, 25, "z"): True}
    a |= {(512, 50, "x"): True, (512, 50, "y"): False}
    b |= {(512, 50, "x"): False, (512, 50, "y"): True, (512, 50, "w"): True}  # w: A not asked
    t = stats.paired(a, b)
    assert (t.n, t.needles, t.right_a, t.right_b) == (3, 8, 5, 3)
    assert (t.more_a, t.more_b, t.ties) == (1, 1, 1) and t.p == 1.0
    assert t.counts() == "positions 1 won by the first, 1 by the second, 1 tied of 3"
    assert not t.decidable
    assert t.undecided() == "not compared (3 positions, fewer than 10)"
    with pytest.raises(ValueError):
        stats.paired({(1, "a"): True}, {(2, "a"): True})
    with pytest.raises(ValueError):
        stats.position_of("not a tuple")


def test_a_share_over_positions_is_wilson_on_positions_at_the_mean_share():
    # two positions of three needles: 3/3 and 1/3; the mean share is (1 + 1/3) / 2 = 2/3
    cells = {(0, n): True for n in "abc"} | {(1, "a"): True, (1, "b"): False, (1, "c"): False}
    s = stats.positions(cells)
    assert (s.right, s.asked, s.n, s.hit) == (4, 6, 2, 2)
    assert s.value == pytest.approx(2 / 3)
    assert (s.low, s.high) == pytest.approx(wilson_by_hand(2 / 3, 2))
    lo, hi = wilson_by_hand(2 / 3, 2)
    assert s.text() == (
        f"4 of 6 needles, at 2 of 2 positions (67%; 95 % CI {lo * 100:.0f}–{hi * 100:.0f} % over "
        "positions)"
    )
    # all-or-none positions: exactly scipy's binomial Wilson interval on the positions
    for k, n in ((0, 5), (3, 15), (15, 15), (7, 10)):
        cells = {(p, x): p < k for p in range(n) for x in "abc"}
        s = stats.positions(cells)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert (s.low, s.high) == pytest.approx((ci.low, ci.high), abs=1e-12)
        assert (s.right, s.asked, s.n) == (3 * k, 3 * n, n)
    with pytest.raises(ValueError):
        stats.positions({})


def test_the_plain_share_is_unchanged():
    for k, n in ((0, 5), (3, 20), (20, 20)):
        s = stats.share(k, n)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert (s.low, s.high) == pytest.approx((ci.low, ci.high))
    with pytest.raises(ValueError):
        stats.share(3, 2)


def _grid(row: str) -> dict:
    """A row's needles at the grid's first five depths (three needles each): the worked examples'
    15 positions."""
    cells = read_grid(ROOT / "traces" / "results" / "needle-grid.jsonl").records
    return {
        (c.length, c.depth, c.needle): c.correct
        for c in cells
        if c.row == row and c.length <= findings.MAX_LENGTH and c.depth in findings.GRID_DEPTHS
    }


@pytest.mark.parametrize(
    ("a", "b", "won", "lost", "p"),
    [
        # H2O with half its budget a window answers exactly the 9 needles at depth 100 %: 3
        # positions (one a length); h2o@256 one needle elsewhere. 2 * (1 + 4) / 16
        ("h2o@256:w50%", "h2o@256", 3, 1, 10 / 16),
        # SnapKV against StreamingLLM at 256: 2 * (1 + 8) / 256 = 0.0703
        ("snapkv@256", "streaming-llm@256", 7, 1, 18 / 256),
    ],
)
def test_the_worked_examples_on_the_shipped_grid(a, b, won, lost, p):
    t = stats.paired(_grid(a), _grid(b))
    assert (t.n, t.more_a, t.more_b) == (15, won, lost)
    assert t.p == pytest.approx(p) and not t.differs
