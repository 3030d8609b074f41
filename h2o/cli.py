"""``python -m h2o COMMAND``, the one command line: every command and its options are defined
here (the options several commands share in :mod:`h2o.cli_options`). ``bench`` and ``sweep``
replay traces and run here; the model commands (``capture``, ``quality``, ``generate``) run in
:mod:`h2o.model.cli`, the grids (``needle``, ``followup``, ``frontier``) in
:mod:`h2o.needle.cli`, each imported only when its command runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

from . import analysis, policies
from . import cli_options as opt
from .custom import load_policy
from .needle.haystack import DEPTHS, TEXTS_DIR
from .policies import POLICIES
from .synthetic import BUILTIN, builtin_trace
from .trace import Trace
from .trace_npz import load_trace


def _trace(arg: str) -> Trace:
    return builtin_trace(arg) if arg in BUILTIN else load_trace(arg)


def _windows(spec: str) -> list[int]:
    """``start:stop:step`` with ``stop`` included, or a comma list."""
    try:
        if ":" in spec:
            parts = [int(x) for x in spec.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
            start, stop, step = (*parts, 1) if len(parts) == 2 else parts
            if step < 1:
                raise ValueError
            windows = list(range(start, stop + 1, step))
        else:
            windows = [int(x) for x in spec.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--windows takes start:stop:step (stop included) or a comma list, got {spec!r}"
        ) from None
    if not windows:
        raise argparse.ArgumentTypeError(
            f"--windows {spec} is an empty range: its start ({start}) is past its stop ({stop})"
        )
    return windows


def _lineup(budget: int, trace: Trace | None = None) -> list[tuple[str, dict[str, int]]]:
    """The bench lineup on ``trace`` (the methods it can run), with every window and sink count
    fitted below the budget, and every policy loaded with ``--policy-file`` at its own defaults.

    A trace of a few steps gets a budget of 1 or 2, where TOVA's window of 1 (or any window)
    would leave no room; the label then shows the window used.
    """
    fit = ("recent_window", "sinks")
    custom = [(n, {}) for n, cls in POLICIES.items() if getattr(cls, "custom", False)]
    for name, params in custom:
        default = policies.make_policy(name, 10**6).params()
        params.update({k: v for k, v in default.items() if k in fit})
    return [
        (name, {k: min(v, budget - 1) if k in fit else v for k, v in params.items()})
        for name, params in [*analysis.standard_lineup(budget, trace=trace), *custom]
    ]


class _Progress:
    """Progress on stderr, only once a job has run for half a second (quiet when fast)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.monotonic()

    def __call__(self, done: int, total: int, label: str) -> None:
        if self.quiet or time.monotonic() - self.t0 < 0.5:
            return
        end = "\n" if done == total else "\r"
        print(f"\r[{done}/{total}] {label:<60}", end=end, file=sys.stderr, flush=True)


def _fmt(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """A plain-text table: first column left-aligned, the numbers right-aligned."""
    table = [[h for _, h, _ in cols]] + [[format(r[k], f) for k, _, f in cols] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(cols))]
    table.insert(1, ["-" * w for w in widths])

    def fmt_line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)])

    return "\n".join(fmt_line(line) for line in table)


def _defaults(args: argparse.Namespace, trace: Trace) -> None:
    """Fill --budget and --top-k from the trace's suggestions when not given."""
    sug = analysis.suggested(trace)
    if args.budget is None:
        args.budget = sug["budget"]
    if args.top_k is None:
        args.top_k = sug["top_k"]
    if args.budget >= trace.steps:
        raise ValueError(
            f"budget {args.budget} holds the whole trace ({trace.steps} steps): nothing would be "
            f"evicted; choose a budget below {trace.steps}"
        )


def _print_json(obj: object) -> None:
    """JSON with NaN written as null (NaN is not JSON)."""

    def clean(x: object) -> object:
        if isinstance(x, float) and x != x:
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    print(json.dumps(clean(obj), indent=2, allow_nan=False))


def cmd_bench(args: argparse.Namespace) -> int:
    trace = _trace(args.trace)
    _defaults(args, trace)
    rows = analysis.bench(
        trace,
        args.budget,
        args.top_k,
        _lineup(args.budget, trace),
        progress=_Progress(args.json),
    )
    oracle = rows[0]["oracle_mass"] if rows else float("nan")
    if args.json:
        head = {"trace": trace.name, "budget": args.budget, "top_k": args.top_k}
        _print_json({**head, "oracle_mass": oracle, "rows": rows})
        return 0
    print(
        f"trace {trace.name} ({trace.steps} steps), budget {args.budget}; "
        f"means over steps t >= {args.budget}"
    )
    print(
        _fmt(
            rows,
            [
                ("label", "policy", "s"),
                ("retained_mass", "retained mass", ".4f"),
                ("top_k_recall", f"top-{args.top_k} recall", ".4f"),
            ],
        )
    )
    print(f"oracle bound (best {args.budget} positions per step): {oracle:.4f}")
    for note in analysis.hindsight_notes(row["policy"] for row in rows):
        print(f"note: {note}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    trace = _trace(args.trace)
    _defaults(args, trace)
    if not any(0 <= w < args.budget for w in args.windows):
        raise ValueError(
            f"every window of --windows ({min(args.windows)} to {max(args.windows)}) is at or "
            f"above the budget {args.budget}; recent_window must be smaller than the budget"
        )
    rows = analysis.sweep_windows(
        trace, args.policy, args.windows, args.budget, args.top_k, progress=_Progress(args.json)
    )
    lineup = [("streaming-llm", {"sinks": min(4, args.budget - 1)})]
    ref = analysis.bench(trace, args.budget, args.top_k, lineup=lineup)[0]
    if args.json:
        head = {"trace": trace.name, "budget": args.budget, "top_k": args.top_k}
        _print_json({**head, "policy": args.policy, "streaming_llm": ref, "rows": rows})
        return 0
    print(
        f"{POLICIES[args.policy].label} on {trace.name}, budget {args.budget}: "
        "recent_window sweep (means over steps t >= budget)"
    )
    print(
        _fmt(
            rows,
            [
                ("recent_window", "recent_window", "d"),
                ("retained_mass", "retained mass", ".4f"),
                ("top_k_recall", f"top-{args.top_k} recall", ".4f"),
            ],
        )
    )
    print(
        f"reference: StreamingLLM ({ref['sinks']} sinks) retained mass {ref['retained_mass']:.4f}, "
        f"top-{args.top_k} recall {ref['top_k_recall']:.4f}"
    )
    return 0


def _model_command(args: argparse.Namespace) -> int:
    # Imported when a model command runs, not for every start-up: the model's modules take a
    # twentieth of a second to import.
    from .model import cli

    return getattr(cli, f"cmd_{args.command}")(args)


def _grid_command(args: argparse.Namespace) -> int:
    from .needle import cli  # when a grid command runs (start-up time, as above)

    return getattr(cli, f"cmd_{args.command}")(args)


def _replay_options(p: argparse.ArgumentParser) -> None:
    """bench's and sweep's: the trace, your own policies, the budget, k of the recall."""
    p.add_argument(
        "--trace",
        default="canonical",
        help=f"a built-in trace ({', '.join(BUILTIN)}) or a trace file (.npz, see "
        "traces/README.md); default: canonical",
    )
    p.add_argument(
        "--policy-file",
        action="append",
        metavar="FILE.py:CLASS",
        help="your own policy, as file.py:ClassName (see h2o/custom.py and "
        "examples/decayed_h2o.py); it joins the table and every --policy choice; repeat for "
        "several (default: none)",
    )
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help="cache budget in positions (default: the trace's suggestion; 256 for canonical)",
    )
    p.add_argument(
        "--top-k",
        type=int,
        default=None,
        help="k of the top-k recall (default: the trace's suggestion, 32 for canonical)",
    )
    opt.add_json(p)


def build_parser() -> argparse.ArgumentParser:
    """Every command of ``python -m h2o``, with its options."""
    parser = argparse.ArgumentParser(
        prog="python -m h2o",
        description="KV-cache eviction policies replayed on attention traces.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str, about: str):
        p = sub.add_parser(name, help=help, description=about)
        p.set_defaults(func=func)
        return p

    # -- on a trace --------------------------------------------------------------------------
    p = command(
        "bench",
        cmd_bench,
        "every policy on one trace: retained mass, top-k recall",
        "Replay every policy (H2O and Scissorhands at recent_window 32 and 64) and print "
        "retained attention mass, top-k recall and the oracle bound.",
    )
    _replay_options(p)

    p = command(
        "sweep",
        cmd_sweep,
        "retained mass and recall against recent_window",
        "Replay one policy at every recent_window of a range.",
    )
    p.add_argument(
        "--policy",
        default="h2o",
        choices=[n for n in POLICIES if "recent_window" in policies.policy_params(n)],
        help="policy to sweep (default: h2o)",
    )
    p.add_argument(
        "--windows",
        type=_windows,
        default=_windows("0:192:8"),
        help="start:stop:step with stop included, or a comma list (default: 0:192:8)",
    )
    _replay_options(p)

    # -- with the model ----------------------------------------------------------------------
    p = command(
        "capture",
        _model_command,
        "capture a full-cache attention trace of one layer of SmolLM2-135M",
        "Run SmolLM2-135M on a text and save one layer's attention as a trace: row t = "
        "attention of query t over positions 0..t-1 (self dropped, renormalised).",
    )
    opt.add_model(p)
    opt.add_text(p)
    opt.add_tokens(p, 2048)
    p.add_argument("--layer", type=int, default=8, help="layer 0..29 (default: 8)")
    p.add_argument(
        "--head",
        default="mean",
        help="query head 0..8, 'mean' over heads, or 'all': one trace per query head, written "
        "to OUT-h0.npz, OUT-h1.npz, ... (default: mean)",
    )
    p.add_argument("--out", required=True, metavar="NPZ", help="output trace file, .npz (required)")
    p.add_argument(
        "--name", default=None, help="trace name (default: from the file name, layer and head)"
    )
    p.add_argument(
        "--text-source",
        default=None,
        help="where the text comes from, for the trace meta (default: the text file's name)",
    )
    p.add_argument(
        "--licence", default=None, help="the text's licence, for the trace meta (default: none)"
    )
    p.add_argument(
        "--float32",
        action="store_true",
        help="store float32 weights (default: float16, half the size)",
    )

    p = command(
        "quality",
        _model_command,
        "perplexity of SmolLM2-135M with each eviction policy running in every head",
        "Closed-loop perplexity: one policy per (layer, KV head) manages the cache while the "
        "model reads the text; prints policies x budgets with the full-cache line.",
    )
    opt.add_model(p)
    opt.add_text(p)
    p.add_argument(
        "--policies",
        default="h2o,streaming-llm,tova,sliding-window",
        help="comma-separated policies (default: %(default)s)",
    )
    p.add_argument(
        "--budgets",
        default="64,128,256,512",
        help="comma-separated cache sizes per head (default: %(default)s)",
    )
    opt.add_tokens(p, None)
    opt.add_policy_options(p)
    opt.add_allocation_options(p)
    opt.add_json(p)

    p = command(
        "generate",
        _model_command,
        "greedy continuation of a prompt with an evicting cache",
        "Greedy decoding with one policy per (layer, KV head); compare policies (and 'full') "
        "on a prompt that asks about a fact stated once, early.",
    )
    opt.add_model(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--prompt-file", metavar="FILE", help="UTF-8 prompt file (this or --prompt is required)"
    )
    src.add_argument("--prompt", help="prompt text (this or --prompt-file is required)")
    p.add_argument(
        "--policy",
        default="h2o",
        help="comma-separated policies, 'full' = no eviction, 'snapkv' = compress the prompt "
        "once from its last queries (default: %(default)s)",
    )
    p.add_argument(
        "--budget", type=int, default=128, help="cache size per head (default: %(default)s)"
    )
    opt.add_max_new(p, 20)
    opt.add_policy_options(p)
    opt.add_allocation_options(p)
    p.add_argument(
        "--snapkv-window",
        type=int,
        default=32,
        help="snapkv: the last prompt queries that score the keys (default: %(default)s)",
    )
    p.add_argument(
        "--snapkv-kernel", type=int, default=5, help="snapkv: pooling kernel (default: %(default)s)"
    )
    opt.add_json(p, "text")

    # -- the grids: locally or on a Dask cluster ---------------------------------------------
    p = command(
        "needle",
        _grid_command,
        "needle-in-a-haystack grid: rows x lengths x depths x needles",
        "Hide a fact (the code of a coloured locker) in the shipped texts at each length and "
        "depth, ask it at the end, and score every row's greedy answer and the answer's "
        "teacher-forced log-probability. One JSON line per cell.",
    )
    opt.add_grid_options(p)
    opt.add_lengths(p, "512,1024,2048")
    p.add_argument(
        "--depths",
        default=",".join(map(str, DEPTHS)),
        help="comma-separated needle depths, percent of the haystack (default: %(default)s)",
    )
    p.add_argument("--needles", type=int, default=1, help="needles per cell, rotating (default: 1)")
    opt.add_max_new(p, 8)
    p.add_argument(
        "--stand-in",
        action="store_true",
        help="model-free stand-in cells (a hash of the cell, not an answer): checks a cluster "
        "set-up in seconds (default: the model)",
    )

    p = command(
        "followup",
        _grid_command,
        "the second question: two facts, the first asked, then the second on the same cache",
        "Hide two facts in the shipped texts (at 25 % and 75 % of the haystack, each order), "
        "ask the first at the end, then ask the second on the cache the first left; score both "
        "greedy answers and their teacher-forced log-probabilities. One JSON line per cell.",
    )
    opt.add_grid_options(p)
    opt.add_lengths(p, "1024")
    p.add_argument(
        "--pairs", type=int, default=3, help="needle pairs per length (default: %(default)s)"
    )

    p = command(
        "frontier",
        _grid_command,
        "perplexity and KV bytes per token of each row on a text (evict or compress?)",
        "Closed-loop perplexity of the text under each row, with the bytes its cache holds; "
        "one JSON line per row. SnapKV rows are left out (SnapKV compresses a prompt once and "
        "has no perplexity over a text).",
    )
    opt.add_grid_options(p)
    opt.add_text(p, TEXTS_DIR / "lighthouse.txt")
    opt.add_tokens(p, 2048)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Policies from files first: they must be registered before the parser lists the choices.
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--policy-file", action="append", default=[])
    loaded, rest = pre.parse_known_args(argv)
    try:
        for spec in loaded.policy_file:
            load_policy(spec)
    except ValueError as e:
        print(f"error: --policy-file: {e}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(rest)
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as e:  # bad input, or a file that cannot be read or written
        print(f"error: {e}", file=sys.stderr)
        return 2
