"""``python -m h2o``: the policy table, the recentWindow sweep (and, with the model, capture,
quality and generate — see :mod:`h2o.model.cli`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from . import analysis, policies
from .custom import load_policy
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m h2o",
        description="KV-cache eviction policies replayed on attention traces.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    trace_help = (
        f"a built-in trace ({', '.join(BUILTIN)}) or a trace file (.npz, see "
        "traces/README.md); default: canonical"
    )

    b = sub.add_parser(
        "bench",
        help="every policy on one trace: retained mass, top-k recall",
        description="Replay every policy (H2O and Scissorhands at recent_window 32 "
        "and 64) and print retained attention mass, top-k recall and the oracle bound.",
    )
    b.add_argument("--trace", default="canonical", help=trace_help)
    b.add_argument("--policy-file", action="append", metavar="FILE.py:CLASS", help=POLICY_FILE_HELP)
    b.add_argument(
        "--budget",
        type=int,
        default=None,
        help="cache budget in positions (default: the trace's suggestion; 256 for canonical)",
    )
    b.add_argument(
        "--top-k",
        type=int,
        default=None,
        help="k of the top-k recall (default: the trace's suggestion, 32 for canonical)",
    )
    b.add_argument(
        "--json", action="store_true", help="print JSON instead of a table (default: a table)"
    )
    b.set_defaults(func=cmd_bench)

    s = sub.add_parser(
        "sweep",
        help="retained mass and recall against recent_window",
        description="Replay one policy at every recent_window of a range.",
    )
    s.add_argument(
        "--policy",
        default="h2o",
        choices=[n for n in POLICIES if "recent_window" in policies.policy_params(n)],
        help="policy to sweep (default: h2o)",
    )
    s.add_argument(
        "--windows",
        type=_windows,
        default=_windows("0:192:8"),
        help="start:stop:step with stop included, or a comma list (default: 0:192:8)",
    )
    s.add_argument("--trace", default="canonical", help=trace_help)
    s.add_argument("--policy-file", action="append", metavar="FILE.py:CLASS", help=POLICY_FILE_HELP)
    s.add_argument(
        "--budget",
        type=int,
        default=None,
        help="cache budget in positions (default: the trace's suggestion; 256 for canonical)",
    )
    s.add_argument(
        "--top-k",
        type=int,
        default=None,
        help="k of the top-k recall (default: the trace's suggestion, 32 for canonical)",
    )
    s.add_argument(
        "--json", action="store_true", help="print JSON instead of a table (default: a table)"
    )
    s.set_defaults(func=cmd_sweep)

    try:  # the real-model commands (h2o.model) register themselves when present
        from .model.cli import register
    except ImportError:
        pass
    else:
        register(sub)
    from .needle.cli import register as register_needle  # needle grid, frontier

    register_needle(sub)
    return parser


POLICY_FILE_HELP = (
    "your own policy, as file.py:ClassName (see h2o/custom.py and examples/decayed_h2o.py); it "
    "joins the table and every --policy choice; repeat for several (default: none)"
)


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
