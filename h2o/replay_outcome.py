"""What a replay measured: :class:`Replay`, built by :func:`result` from a run's per-step mass,
fill and victims, whichever engine ran it (:func:`h2o.replay.replay_stepwise`, the compiled lane of
:mod:`h2o.bank.lane`, the lock-step banks, Quest's selection).

Recorded per step:

* **retained mass** — the part of the full-cache ``row(t)`` that falls on the kept set (before
  ``t`` is admitted): how much of the attention the model wanted it still gets to see;
* **top-k recall** — the fraction of the ``k`` most-attended positions of ``row(t)`` that are kept;
* the **oracle bound** — the largest mass any ``budget`` positions could hold at that step;
* the victims, and (with ``record=True``) every kept position's score after the step's update and
  before its eviction, for heatmaps.

Step 0 has nothing to attend to; its mass and recall are defined as 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .policies import Policy
from .trace import Trace

#: What may pick a policy's victim (``Policy.evicts_by``), as :meth:`Replay.narrate` tells it.
EVICTS_BY = ("score", "age", "chance")


@dataclass(eq=False)
class Replay:
    """The outcome of :func:`replay`. Arrays are indexed by step and read-only."""

    policy: str
    label: str
    params: dict[str, int]
    trace_name: str
    steps: int
    budget: int
    top_k: int
    window: int  # trailing kept slots the policy never evicts (H2O's recent window)
    sinks: int  # leading kept slots pinned (StreamingLLM's attention sinks)
    score_label: str
    mass: np.ndarray
    recall: np.ndarray
    oracle: np.ndarray
    n_kept: np.ndarray  # after admitting t, before evicting
    victim_step: np.ndarray
    victim_pos: np.ndarray
    victim_score: np.ndarray  # nan when not recorded
    kept_pos: np.ndarray | None = None  # (T, cap) int32, -1 padded
    kept_score: np.ndarray | None = None  # (T, cap) float64, nan padded
    extra: dict[str, Any] = field(default_factory=dict)
    reads_attention: bool = True  # the policy's own flag (its class may be in no registry)
    evicts_by: str = "score"  # what picks its victim (the class's ``evicts_by``)

    # -- summaries -----------------------------------------------------------------------------
    def summary(self) -> dict[str, float]:
        """Means over the steps ``t >= budget`` (where eviction is in force).

        ``nan`` if the trace is not longer than the budget.
        """
        sl = slice(self.budget, self.steps)
        n = max(self.steps - self.budget, 0)

        def mean(a: np.ndarray) -> float:
            return float(a[sl].mean()) if n else float("nan")

        return {
            "retained_mass": mean(self.mass),
            "top_k_recall": mean(self.recall),
            "oracle_mass": mean(self.oracle),
            "evictions": int(self.victim_pos.shape[0]),
            "steps_measured": n,
        }

    def running_mean(self, name: str) -> np.ndarray:
        """Running mean of ``mass``/``recall``/``oracle`` over the steps ``t >= budget``."""
        a = np.asarray(getattr(self, name), dtype=np.float64)
        out = np.full(self.steps, np.nan)
        if self.steps > self.budget:
            seg = a[self.budget :]
            out[self.budget :] = np.cumsum(seg) / np.arange(1, seg.shape[0] + 1)
        return out

    # -- per-step views ------------------------------------------------------------------------
    def _require_record(self) -> None:
        if self.kept_pos is None:
            raise ValueError("this replay was run with record=False; no per-step scores kept")

    def kept_at(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions and scores held at step ``t``, after its update, before its eviction."""
        self._require_record()
        n = int(self.n_kept[t])
        return self.kept_pos[t, :n], self.kept_score[t, :n]  # type: ignore[index]

    def victims_at(self, t: int) -> list[tuple[int, float]]:
        lo, hi = np.searchsorted(self.victim_step, [t, t + 1])
        return [
            (int(p), float(s))
            for p, s in zip(self.victim_pos[lo:hi], self.victim_score[lo:hi], strict=True)
        ]

    def protected_at(self, t: int) -> tuple[int, int] | None:
        """The (first, last) position of the protected recent window at step ``t``, if any."""
        self._require_record()
        n = int(self.n_kept[t])
        if self.window == 0 or n == 0:
            return None
        pos = self.kept_pos[t, :n]  # type: ignore[index]
        return int(pos[max(0, n - self.window)]), int(pos[n - 1])

    def narrate(self, t: int) -> str:
        """One sentence on what happened at step ``t``."""
        self._require_record()
        n = int(self.n_kept[t])
        if self.extra.get("selects"):  # a selection (Quest): it holds every position
            from .policies.quest import PAGE

            which = (
                "every one (the first two layers read them all)"
                if n == t
                else f"the pages of {PAGE} whose bound on its q·k is highest"
            )
            return (
                f"step {t}: position {t} admitted, all {t + 1} held; the query reads {n} of the "
                f"{t} before it, {which} — nothing is evicted"
            )
        victims = self.victims_at(t)
        prot = self.protected_at(t)
        window = f"; positions {prot[0]}–{prot[1]} are protected" if prot else ""
        if not victims:
            room = self.budget - n
            return (
                f"step {t}: position {t} admitted, {n} of {self.budget} slots in use"
                + (f" ({room} free)" if room > 0 else "")
                + f", nothing evicted{window}"
            )
        evictable = n - self.window - self.sinks
        what = ", ".join(f"{p}" for p, _ in victims)
        noun = "position" if len(victims) == 1 else "positions"
        if self.evicts_by == "age":
            pinned = f" outside the {self.sinks} pinned sinks" if self.sinks else ""
            why = f"the oldest{pinned}"
            return f"step {t}: evicted {noun} {what} — {why}{window}"
        if self.evicts_by == "chance":
            return (
                f"step {t}: evicted {noun} {what} — drawn at random from {evictable} "
                f"evictable positions{window}"
            )
        scores = ", ".join(f"{s:.4g}" for _, s in victims)
        return (
            f"step {t}: evicted {noun} {what}, {self.score_label} {scores} — the lowest of "
            f"{evictable} evictable positions{window}"
        )

    # -- heatmap grids -------------------------------------------------------------------------
    def score_grid(
        self, start: int, stop: int, lo: int = 0, hi: int | None = None, stride: int = 1
    ) -> np.ndarray:
        """Scores of steps ``start..stop-1`` × positions ``lo..hi-1``, nan where not kept.

        Row ``i`` covers positions ``lo + i*stride ..`` (max-pooled when ``stride > 1``: the
        largest score keeps a heavy hitter visible however far the rows are squeezed); column
        ``j`` is step ``start + j``. By default every position up to ``stop - 1``, unpooled.
        """
        self._require_record()
        start, stop = max(0, start), min(self.steps, stop)
        hi = stop if hi is None else hi
        pos = self.kept_pos[start:stop]  # type: ignore[index]
        valid = (pos >= lo) & (pos < hi)
        cols, _ = np.nonzero(valid)
        rows = (pos[valid] - lo) // stride
        vals = self.kept_score[start:stop][valid]  # type: ignore[index]
        grid = np.full((max(1, -(-(hi - lo) // stride)), max(stop - start, 0)), np.nan)
        if stride == 1:
            grid[rows, cols] = vals
        else:
            np.fmax.at(grid, (rows, cols), vals)
        return grid

    def pooled_grid(self, step_bins: int, pos_bins: int) -> tuple[np.ndarray, int, int]:
        """The whole run max-pooled to at most ``pos_bins x step_bins`` cells.

        Returns ``(grid, step_stride, pos_stride)``; a cell holds the largest score any position
        in it had at any step in it (max keeps the spikes a mean would wash out), nan if none
        was kept there.
        """
        self._require_record()
        sx = max(1, -(-self.steps // step_bins))
        sy = max(1, -(-self.steps // pos_bins))
        grid = np.full((-(-self.steps // sy), -(-self.steps // sx)), -np.inf)
        valid = self.kept_pos >= 0  # type: ignore[operator]
        steps = np.broadcast_to(np.arange(self.steps)[:, None], self.kept_pos.shape)  # type: ignore[union-attr]
        np.maximum.at(
            grid,
            (self.kept_pos[valid] // sy, steps[valid] // sx),  # type: ignore[index]
            self.kept_score[valid],  # type: ignore[index]
        )
        grid[np.isneginf(grid)] = np.nan
        return grid, sx, sy


def _freeze(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


def _recall(trace: Trace, k: int, victim_step: np.ndarray, victim_pos: np.ndarray) -> np.ndarray:
    """Per step, the share of that row's top-k positions still held (computed after the run).

    Position ``p`` is held at step ``t`` (before ``t`` is admitted) iff it was not evicted at a
    step before ``t``; every top-k position of row ``t`` is older than ``t``. So a row loses one
    for each victim in its top k that went before it: read off the victims through the trace's
    inverse top-k index, which costs what the victims' own top-k rows hold, not ``T * k``.
    """
    topk = trace.top_k(k)
    steps, width = topk.shape
    indptr, rows = trace.top_k_rows(k)
    a, e = indptr[victim_pos], indptr[victim_pos + 1]
    n = e - a
    lost = np.zeros(steps, dtype=np.int64)
    if n.any():
        starts = np.cumsum(n) - n  # each victim's run in the concatenation
        idx = np.arange(int(n.sum())) + np.repeat(a - starts, n)
        hit = rows[idx]
        hit = hit[hit > np.repeat(victim_step, n)]  # only the rows after it went
        lost = np.bincount(hit, minlength=steps)
    out = np.ones(steps)
    t = np.arange(1, steps)
    valid = np.minimum(width, t)  # row t holds min(k, t) positions (k capped at T - 1)
    out[1:] = (valid - lost[1:]) / np.minimum(width, t)
    return out


def check_top_k(top_k: object) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    return int(top_k)


def result(
    policy: Policy,
    trace: Trace,
    top_k: int,
    mass: np.ndarray,
    n_kept: np.ndarray,
    victim_step: np.ndarray,
    victim_pos: np.ndarray,
    victim_score: np.ndarray | None = None,
    kept_pos: np.ndarray | None = None,
    kept_score: np.ndarray | None = None,
    recall: np.ndarray | None = None,
) -> Replay:
    """The :class:`Replay` of a run, from its per-step mass and fill, the victims in step
    order (which also give the recall) and, if recorded, the per-step
    snapshots. Shared by :func:`replay` and the lock-step bank replay (:mod:`h2o.bank`)."""
    params = policy.params()
    if policy.evicts_by not in EVICTS_BY:
        raise ValueError(
            f"{type(policy).__name__}.evicts_by is {policy.evicts_by!r}: one of {EVICTS_BY}"
        )
    out = Replay(
        policy=policy.name,
        label=policy.label,
        params=params,
        trace_name=trace.name,
        steps=trace.steps,
        budget=policy.budget,
        top_k=top_k,
        window=int(getattr(policy, "recent_window", 0)),
        sinks=int(getattr(policy, "sinks", 0)),
        score_label=policy.score_label,
        mass=mass,
        recall=_recall(trace, top_k, victim_step, victim_pos) if recall is None else recall,
        oracle=trace.oracle_mass(policy.budget),
        n_kept=n_kept,
        victim_step=victim_step,
        victim_pos=victim_pos,
        victim_score=np.full(victim_pos.shape[0], np.nan) if victim_score is None else victim_score,
        kept_pos=kept_pos,
        kept_score=kept_score,
        reads_attention=bool(policy.reads_attention),
        evicts_by=str(policy.evicts_by),
    )
    _freeze(out.mass, out.recall, out.n_kept, out.victim_step, out.victim_pos, out.victim_score)
    if kept_pos is not None:
        _freeze(kept_pos, kept_score)
    return out
