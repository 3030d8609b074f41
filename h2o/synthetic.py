"""Synthetic traces: the canonical benchmark trace, the stale-spike lesson and a toy trace.

All three are deterministic functions of their arguments (no files, no global state), so the
figures measured on them are reproducible anywhere.
"""

from __future__ import annotations

import numpy as np

from .trace import Trace

# -- canonical trace ---------------------------------------------------------------------------
#: The structure the policy card describes, and the numbers it is calibrated with.
SINKS = 4  # positions 0..3 absorb a fixed share of every row
SINK_MASS = 0.1055  # with BAND_MASS: StreamingLLM retains the card's 0.7367 at budget 256
SINK_SPLIT = (0.4, 0.25, 0.2, 0.15)
BAND = 64  # recency band: the 64 most recent positions, with a hard edge after the 64th
# Mass of the band itself. With the background and the young heavy hitters it lies on, 0.55 of
# each steady-state row (steps > 64, where the band is full) falls on the last 64 positions; the
# card's figure, measured where it is not trivially true (early rows are all within 64).
BAND_MASS = 0.513
BAND_TILT = 0.3  # band weight falls linearly by this fraction from age 1 to age 64 (flat-ish)
BAND_JITTER = 0.05  # multiplicative noise on band weights
EPOCH = 512  # heavy hitters hold their weight for a whole epoch
HITTERS = 6  # heavy hitters per epoch, born among its first HITTER_SPREAD positions
HITTER_SPREAD = 48
HITTER_MASS = 0.15  # split evenly between the epoch's hitters
BACKGROUND_JITTER = 0.5  # background weights are uniform in mean * (1 ± this): spread, no spikes


def canonical_trace(steps: int = 4096, seed: int = 0) -> Trace:
    """The benchmark trace the policy card's figures are measured on.

    Each row ``t`` is a mixture of:

    * **attention sinks** — positions 0–3 take ``SINK_MASS`` of every row;
    * a **recency band** — the most recent ``BAND`` positions share ``BAND_MASS``, falling gently
      with age and stopping dead after the 64th (so 0.55 of a steady-state row lies within 64);
    * **heavy hitters** — in each ``EPOCH``-step epoch, ``HITTERS`` positions born early in the
      epoch take ``HITTER_MASS`` of every row until the epoch ends, then fall back to background;
    * **background** — the rest, spread over every position with bounded noise.

    Rows are drawn in order from one ``numpy.random.default_rng(seed)`` stream.
    """
    if steps < 2:
        raise ValueError(f"steps must be >= 2, got {steps}")
    rng = np.random.default_rng(seed)
    hitters = _epoch_hitters(steps, rng)
    ages = np.arange(1, BAND + 1)
    band_profile = 1.0 - BAND_TILT * (ages - 1) / (BAND - 1)
    sink_split = np.asarray(SINK_SPLIT)
    rows = [np.zeros(0)]
    for t in range(1, steps):
        r = rng.uniform(1.0 - BACKGROUND_JITTER, 1.0 + BACKGROUND_JITTER, size=t)
        bg_mass = 1.0 - SINK_MASS - BAND_MASS - HITTER_MASS
        r *= bg_mass / r.sum()
        # sinks
        ns = min(SINKS, t)
        r[:ns] += SINK_MASS * sink_split[:ns] / sink_split[:ns].sum()
        # recency band (youngest first: age 1 is position t-1)
        nb = min(BAND, t)
        band = band_profile[:nb] * (1.0 + BAND_JITTER * rng.standard_normal(nb))
        r[t - 1 :: -1][:nb] += BAND_MASS * band / band.sum()
        # heavy hitters of the current epoch that already exist
        live = hitters[t // EPOCH]
        live = live[live < t]
        if live.size:
            r[live] += HITTER_MASS / HITTERS
        rows.append(r / r.sum())
    meta = {
        "source": "synthetic",
        "generator": "h2o.synthetic.canonical_trace",
        "seed": seed,
        "sinks": SINKS,
        "band": BAND,
        "epoch": EPOCH,
        "hitters_per_epoch": HITTERS,
    }
    return Trace.from_rows("canonical", rows, meta=meta)


def _epoch_hitters(steps: int, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for e in range(-(-steps // EPOCH)):
        lo = max(e * EPOCH, SINKS)
        cand = np.arange(lo, min(e * EPOCH + HITTER_SPREAD, steps))
        out.append(np.sort(rng.choice(cand, size=min(HITTERS, cand.size), replace=False)))
    return out


# -- stale spike -------------------------------------------------------------------------------
SPIKE = 0  # the position that takes almost all of the first two steps


def stale_spike_trace(steps: int = 96, seed: int = 0) -> Trace:
    """The card's distinguishing vectors: a stale early spike against steady importance.

    Position 0 takes almost the whole of the first two steps (all of step 1, when it is the only
    position, and 0.97 of step 2) and almost nothing after (0.002 of each row). Three positions
    (4, 9 and 17) matter steadily from birth to the end, the three most recent positions carry a
    recency band, and the rest is faint background.

    At step 8 the cache (budget 8, window 2) is first over budget, and the two policies part:

    * under **H2O** the spike's two steps are a cumulative score of ~1.97, the highest of any
      position, so H2O defends it — and keeps defending it to the end (a sum never forgets),
      along with the early positions that collected large shares of the first, short rows. The
      slots they hold are paid for by positions that matter now: H2O even lets steady position
      17 go;
    * under **Scissorhands** the spike has a single vote — step 1 gives weight 1 = the fair
      share 1/1, which is not *greater* than it — the lowest count (ties go to the lower
      position), so it is evicted at once, and the steady positions all stay.

    Meant for ``budget = 8`` with ``recent_window = 2`` (see ``meta``).
    """
    if not 3 <= steps <= 128:
        raise ValueError(f"the stale-spike trace has 3 to 128 steps, got {steps}")
    rng = np.random.default_rng(seed)
    steady = np.array([4, 9, 17])
    rows = [np.zeros(0), np.ones(1)]
    for t in range(2, steps):
        r = rng.uniform(0.5, 1.5, size=t) * 0.05 / t  # faint background
        if t == 2:
            r[:] = [0.97, 0.03]
        else:
            live = steady[steady < t]
            r[live] += 0.12
            r[max(0, t - 3) :] += np.array([0.06, 0.09, 0.12])[-min(3, t) :]  # recency
            r[SPIKE] = 0.002  # stale from now on
        rows.append(r / r.sum())
    meta = {
        "source": "synthetic",
        "generator": "h2o.synthetic.stale_spike_trace",
        "seed": seed,
        "spike": SPIKE,
        "steady": steady.tolist(),
        "suggested_budget": 8,
        "suggested_recent_window": 2,
        "suggested_top_k": 4,
    }
    return Trace.from_rows("stale-spike", rows, meta=meta)


# -- toy ---------------------------------------------------------------------------------------
def toy_trace(steps: int = 40, seed: int = 0) -> Trace:
    """A tiny trace for following eviction cell by cell in class (budget 8, window 2).

    Position 0 is an attention sink, positions 5 and 13 are heavy hitters from their birth on,
    the two most recent positions form a recency band, and the rest is faint background.
    """
    if not 2 <= steps <= 128:
        raise ValueError(f"the toy trace has 2 to 128 steps, got {steps}")
    rng = np.random.default_rng(seed)
    hitters = np.array([5, 13])
    rows = [np.zeros(0)]
    for t in range(1, steps):
        r = rng.uniform(0.5, 1.5, size=t) * 0.15 / t
        r[0] += 0.25
        live = hitters[hitters < t]
        r[live] += 0.15
        r[max(0, t - 2) :] += np.array([0.1, 0.2])[-min(2, t) :]
        rows.append(r / r.sum())
    meta = {
        "source": "synthetic",
        "generator": "h2o.synthetic.toy_trace",
        "seed": seed,
        "sinks": 1,
        "hitters": hitters.tolist(),
        "suggested_budget": 8,
        "suggested_recent_window": 2,
        "suggested_top_k": 4,
    }
    return Trace.from_rows("toy", rows, meta=meta)


#: The built-in traces by name, as the CLI and the app offer them.
BUILTIN = {"canonical": canonical_trace, "stale-spike": stale_spike_trace, "toy": toy_trace}


def builtin_trace(name: str) -> Trace:
    """One of :data:`BUILTIN` with its default arguments."""
    if name not in BUILTIN:
        raise ValueError(f"unknown built-in trace {name!r}; choose from {', '.join(BUILTIN)}")
    return BUILTIN[name]()
