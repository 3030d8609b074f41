"""Every layer at once: the attention traces of all layers from one prefill, and per-layer
comparisons of eviction policies on them (the classroom's "layer story").

* :func:`capture_layers` — one full-cache forward pass, one :class:`h2o.trace.Trace` per layer
  (the same rows as :func:`h2o.model.capture_attention`, without a forward per layer);
* :func:`region_shares` / :func:`layer_shares` — where a trace's attention goes: the first
  ``n_sinks`` positions, the most recent ``n_recent``, or the middle in between;
  :func:`layer_attention_shares` does both steps from token ids;
* :func:`compare_layers` — the replay summary of each policy of a lineup, layer by layer.

A replay of a 1024-step trace takes ~10 ms, so a lineup of two policies over 30 layers is well
under a second; the forward pass (~3 s at 1024 tokens) is the expensive part, done once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from h2o.analysis import bench, make_policy
from h2o.model.capture import (
    N_RECENT,
    N_SINKS,
    Head,
    capture_meta,
    check_head,
    rows_hook,
    trace_name,
)
from h2o.model.forward import SmolLM
from h2o.progress import Progress
from h2o.trace import Trace


def capture_layers(
    model: SmolLM,
    ids: Sequence[int],
    head: Head = "mean",
    progress: Progress | None = None,
    text: str | None = None,
    licence: str | None = None,
    source_name: str = "text",
) -> list[Trace]:
    """Full-cache attention traces of every layer from one forward pass, ``traces[layer]``.

    Row ``t`` of each trace is the softmax of query ``t`` over positions ``0..t-1`` (self-weight
    dropped, renormalised), averaged over the query heads for ``head="mean"`` — exactly the
    rows :func:`h2o.model.capture_attention` returns for that layer. ``progress(done, total)``
    is called once per layer. Memory: one ``(T, T)`` float32 buffer, plus the packed traces
    (``n_layers * T * (T - 1) / 2`` float32: 63 MB at ``T = 1024``).
    """
    check_head(model, head)
    ids = [int(i) for i in ids]
    T = len(ids)
    if T < 2:
        raise ValueError("need at least 2 tokens")
    tokens = tuple(model.tokenizer.token_strings(ids))
    dense = np.zeros((T, T), dtype=np.float32)
    lower = np.tril_indices(T, k=-1)
    traces: list[Trace] = []

    def layer_done(done: int, total: int, _what: str) -> None:
        layer = done - 1
        meta = capture_meta(model, layer, head, T, text, licence)
        # Rows of every layer overwrite the buffer's lower triangle completely; the upper one
        # (left over from the previous layer) is never read.
        traces.append(Trace(trace_name(source_name, layer, head), dense[lower], meta, tokens))
        if progress is not None:
            progress(done, total, "layers")

    model.forward(ids, attn_hook=rows_hook(dense, head), progress=layer_done)
    return traces


# -- where the attention goes ----------------------------------------------------------------------
@dataclass(frozen=True)
class RegionShares:
    """Per layer, the mean share of attention on sinks / recent / middle (they sum to 1).

    ``sink``: positions ``0..n_sinks-1``; ``recent``: the ``n_recent`` positions just before the
    query; ``middle``: everything in between. Means over the queries ``t > n_sinks + n_recent``
    (where all three regions exist). Arrays are ``(n_layers,)``.
    """

    sink: np.ndarray
    recent: np.ndarray
    middle: np.ndarray
    n_sinks: int
    n_recent: int
    n_queries: int


def _first_query(steps: int, n_sinks: int, n_recent: int) -> int:
    """The first query ``n_sinks + n_recent + 1`` counted by :func:`region_shares`, checked."""
    if n_sinks < 0 or n_recent < 0:
        raise ValueError("n_sinks and n_recent must be >= 0")
    first_q = n_sinks + n_recent + 1
    if steps <= first_q:
        raise ValueError(f"need more than {first_q} steps (tokens), got {steps}")
    return first_q


def region_shares(
    trace: Trace, n_sinks: int = N_SINKS, n_recent: int = N_RECENT
) -> tuple[float, float, float]:
    """``(sink, recent, middle)``: mean share of each region over queries ``t > n_sinks +
    n_recent``, from prefix sums of the packed rows (no Python loop over steps).

    For a ``head="mean"`` trace this equals the mean over heads of each head's share (shares
    are linear in the row). ``n_sinks = 0`` or ``n_recent = 0`` makes that region empty.
    """
    first_q = _first_query(trace.steps, n_sinks, n_recent)
    cs = np.zeros(trace.weights.shape[0] + 1, dtype=np.float64)
    np.cumsum(trace.weights, dtype=np.float64, out=cs[1:])
    t = np.arange(first_q, trace.steps, dtype=np.int64)
    off = t * (t - 1) // 2  # row t starts here in the packed weights

    def span(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        return cs[off + b] - cs[off + a]  # mass on positions a..b-1 of row t

    total = span(0, t)
    sink = span(0, n_sinks)
    recent = span(t - n_recent, t)
    middle = total - sink - recent
    return float(sink.mean()), float(recent.mean()), float(middle.mean())


def layer_shares(
    traces: Sequence[Trace], n_sinks: int = N_SINKS, n_recent: int = N_RECENT
) -> RegionShares:
    """:func:`region_shares` of every trace (layer), as arrays."""
    if not traces:
        raise ValueError("no traces")
    rows = np.array([region_shares(tr, n_sinks, n_recent) for tr in traces], dtype=np.float64)
    return RegionShares(
        sink=rows[:, 0],
        recent=rows[:, 1],
        middle=rows[:, 2],
        n_sinks=n_sinks,
        n_recent=n_recent,
        n_queries=traces[0].steps - (n_sinks + n_recent + 1),
    )


def layer_attention_shares(
    model: SmolLM,
    ids: Sequence[int],
    progress: Progress | None = None,
    n_sinks: int = N_SINKS,
    n_recent: int = N_RECENT,
) -> RegionShares:
    """The "layer story" from token ids: :func:`layer_shares` of :func:`capture_layers`.

    One full prefill; the ids are checked against ``n_sinks``/``n_recent`` before it runs.
    """
    _first_query(len(ids), n_sinks, n_recent)
    return layer_shares(capture_layers(model, ids, progress=progress), n_sinks, n_recent)


# -- policies, layer by layer ----------------------------------------------------------------------
def compare_layers(
    traces: Sequence[Trace],
    lineup: Iterable[tuple[str, dict[str, int]]],
    budget: int,
    top_k: int = 32,
    progress: Progress | None = None,
) -> list[dict]:
    """Replay every policy of ``lineup`` on every layer's trace at ``budget``.

    Returns the rows of :func:`h2o.analysis.bench` (``policy``, ``label``, ``retained_mass``,
    ``top_k_recall``, ``oracle_mass``, …, means over steps ``t >= budget``) with ``layer`` added
    (the trace's ``meta["layer"]``, else its index). A combination the policy refuses (e.g.
    ``recent_window >= budget``) raises ``ValueError`` before anything is replayed.
    """
    lineup = list(lineup)
    for name, params in lineup:
        make_policy(name, budget, **params)  # fail fast, with the policy's own message
    if traces and budget >= traces[0].steps:
        raise ValueError(f"budget {budget} is not below the trace length ({traces[0].steps})")
    rows: list[dict] = []
    for i, tr in enumerate(traces):
        layer = int(tr.meta.get("layer", i))
        if progress is not None:
            progress(i, len(traces), f"layer {layer}")
        rows += [{"layer": layer, **r} for r in bench(tr, budget, top_k, lineup=lineup)]
    if progress is not None:
        progress(len(traces), len(traces), "done")
    return rows


def by_layer(rows: Sequence[dict], policy: str, metric: str = "retained_mass") -> np.ndarray:
    """``metric`` of ``policy`` per layer (ordered by layer) from :func:`compare_layers` rows."""
    mine = sorted((r["layer"], r[metric]) for r in rows if r["policy"] == policy)
    return np.array([v for _, v in mine], dtype=np.float64)
