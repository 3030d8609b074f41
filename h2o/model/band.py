"""The model's local attention band, per layer: how far back its attention reaches.

The card: set H2O's ``recentWindow`` "at least as wide as your model's local attention band" —
positions younger than the band that the window does not protect must compete on a cumulative
score they have had no time to earn. Here the band of a layer is measured from the model's own
attention on a text: for every query ``t`` (from ``warmup`` on, so every width asked fits), the
weight it pays to the position ``age`` steps back (its softmax over the previous positions, self
excluded, the mean over the layer's query heads) is added to a histogram of ages; the band is
the smallest width ``w`` whose most recent ``w`` positions receive at least ``share`` of the
attention that does not go to the first ``sinks`` positions (StreamingLLM's attention sinks,
which a policy keeps by score or by pinning them, not by its window).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from h2o.model.forward import AttnChunk, SmolLM


def age_histograms(
    model: SmolLM, ids: Sequence[int], warmup: int = 512, sinks: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """``(hist, sink)``: ``hist (n_layers, warmup)`` per layer the mean weight a query
    ``t >= warmup`` pays to the position ``age + 1`` steps back, for ages ``0 .. warmup - 1``;
    ``sink (n_layers,)`` the mean weight it pays to the first ``sinks`` positions."""
    ids = [int(i) for i in ids]
    if not 1 <= warmup < len(ids):
        raise ValueError(
            f"warmup must be 1 .. {len(ids) - 1} (the text's tokens - 1), got {warmup}"
        )
    L = model.config.n_layers
    hist = np.zeros((L, warmup), dtype=np.float64)
    sink = np.zeros(L, dtype=np.float64)
    count = np.zeros(L, dtype=np.int64)

    def hook(ch: AttnChunk) -> None:
        p = ch.prev_probs().mean(axis=0)  # (rows, keys): the layer's mean over its heads
        for r in range(ch.rows):
            t = ch.start + r
            if t < warmup:
                continue
            hist[ch.layer] += p[r, t - warmup : t][::-1]  # ages 1 .. warmup
            sink[ch.layer] += p[r, :sinks].sum()
            count[ch.layer] += 1

    if warmup <= sinks:
        raise ValueError(f"warmup ({warmup}) must exceed sinks ({sinks})")
    model.forward(ids, attn_hook=hook)
    n = np.maximum(count, 1)
    return hist / n[:, None], sink / n


def band_widths(hist: np.ndarray, sink: np.ndarray, share: float = 0.5) -> np.ndarray:
    """Per layer, the smallest width whose most recent positions get ``share`` of the attention
    that does not go to the sinks (``hist``, ``sink`` from :func:`age_histograms`);
    ``warmup + 1`` where even the whole histogram holds less."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must lie strictly between 0 and 1, got {share!r}")
    cum = np.cumsum(hist, axis=1)
    reached = cum >= share * (1.0 - np.asarray(sink))[:, None]
    return np.where(reached.any(axis=1), reached.argmax(axis=1) + 1, hist.shape[1] + 1)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m h2o.model.band [--text FILE] [--tokens N] [--out FILE]``: the bands of every
    layer on a text, as JSON (with the command that made it)."""
    import argparse
    import json
    import shlex
    import sys
    import time
    from pathlib import Path

    here = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(prog="python -m h2o.model.band", description=main.__doc__)
    ap.add_argument("--text", default=str(here / "traces" / "texts" / "library.txt"))
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=512)
    ap.add_argument("--share", type=float, default=0.5)
    ap.add_argument("--out", default=None, help="JSON file (default: print)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    model = SmolLM.load()
    ids = model.encode(Path(args.text).read_text(encoding="utf-8"))[: args.tokens]
    hist, sink = age_histograms(model, ids, args.warmup)
    widths = band_widths(hist, sink, args.share)
    out = {
        "command": "python -m h2o.model.band " + " ".join(shlex.quote(a) for a in argv),
        "text": Path(args.text).name,
        "tokens": len(ids),
        "warmup": args.warmup,
        "share": args.share,
        "sinks": 4,
        "band": [int(w) for w in widths],
        "sink_share": [round(float(s), 4) for s in sink],
        "recent_share": {
            str(w): [round(float(x), 4) for x in hist[:, :w].sum(1)] for w in (32, 64, 128)
        },
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "date": time.strftime("%Y-%m-%d"),
    }
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
