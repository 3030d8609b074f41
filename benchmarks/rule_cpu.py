"""CPU time of the paths a scored policy's rule runs on: one ``h2o.replay`` per class, a
25-window sweep (``replay_bank``), a public bank step and an instance step — process CPU
(``time.process_time``), best of a few runs, so another job on the machine inflates it less than
wall time. ``--root DIR`` imports the library from another checkout (e.g. an export of the code
before a change), so two versions can be alternated in one sitting::

    git archive HEAD~1 | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    for i in 1 2 3; do
        python benchmarks/rule_cpu.py --root /tmp/before; python benchmarks/rule_cpu.py
    done

Prints one JSON line of figures (µs per step, ms per sweep)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path


def best_cpu(run: Callable[[], object], repeats: int) -> float:
    """The least process CPU of ``repeats`` runs, after one run not counted."""
    run()
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        run()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args()
    sys.path.insert(0, str(args.root))
    import numpy as np

    import h2o
    from h2o import H2O, TOVA, Scissorhands, make_bank, replay_bank
    from h2o.bank import warm

    warm()  # compiled (or loaded from numba's cache) before anything is timed
    trace = h2o.canonical_trace()
    out: dict[str, float] = {}
    for cls in (H2O, Scissorhands, TOVA):
        cpu = best_cpu(lambda c=cls: h2o.replay(c(256, 32), trace, record=False), 5)
        out[f"replay {cls.name} us/step"] = cpu / trace.steps * 1e6
    windows = range(0, 193, 8)  # 25 lanes
    sweep = best_cpu(lambda: replay_bank(make_bank([H2O(256, w) for w in windows]), trace), 3)
    out["replay_bank 25 H2O ms"] = sweep * 1e3
    # public bank steps, 25 lanes at budget 256, in the steady state
    bank = make_bank([H2O(256, w) for w in windows])
    rng = np.random.default_rng(0)
    for t in range(257):
        n = bank.fills[0]
        attn = rng.dirichlet(np.ones(n), size=25).astype(np.float32) if n else None
        bank.on_decode_step(t, attn)
        bank.evict()
    blocks = rng.dirichlet(np.ones(256), size=(64, 25)).astype(np.float32)
    clock = {"t": 257}

    def bank_steps() -> None:
        for block in blocks:
            bank.on_decode_step(clock["t"], block)
            bank.evict()
            clock["t"] += 1

    out["bank step us/instance"] = best_cpu(bank_steps, 5) / len(blocks) / 25 * 1e6
    policy = H2O(256, 32)
    for t in range(256):
        policy.on_decode_step(t, None if t == 0 else np.full(t, 1 / t, np.float32))
    uniform = np.full(256, 1 / 256, np.float32)
    clock["i"] = 256

    def instance_steps() -> None:
        for _ in range(2000):
            policy.on_decode_step(clock["i"], uniform)
            policy.evict()
            clock["i"] += 1

    out["instance step us"] = best_cpu(instance_steps, 5) / 2000 * 1e6
    print(json.dumps({k: round(v, 3) for k, v in out.items()}))


if __name__ == "__main__":
    main()
