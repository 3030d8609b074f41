"""The real-model commands of ``python -m h2o``: ``capture``, ``quality``, ``generate``.

:mod:`h2o.cli` defines their options; ``cmd_NAME(args) -> int`` (the exit code) runs one.
Results go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from h2o.cli_options import check_max_new, check_tokens, comma_ints, comma_list, read_text
from h2o.model.forward import SmolLM
from h2o.model.gguf_io import ModelNotFoundError
from h2o.progress import Progress

#: The project checkout this package runs from (an editable install), and its environment.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROJECT_VENV = PROJECT_ROOT / ".venv"


def _alloc_params(args: argparse.Namespace) -> dict[str, object]:
    """Allocator parameters: the windows follow the policies' (32 and 4 sinks by default)."""
    window = args.recent_window if args.recent_window is not None else 32
    return {
        "alpha": args.alpha,
        "retrieval": args.retrieval,
        "beta": args.beta,
        "window": window,
        "sinks": args.sinks if args.sinks is not None else 4,
    }


def _check_allocation_inputs(args: argparse.Namespace, budgets: Sequence[int]) -> list[str]:
    """The allocations named, refused before the model loads if a name, a parameter or a
    budget cannot work (each checked on a stand-in shape; the model's own comes later)."""
    import numpy as np

    from h2o.alloc import make_allocator
    from h2o.model.allocation import check_allocations

    names = comma_list(args.allocation)
    params = _alloc_params(args)
    check_allocations(names, **params)
    for name in names:
        for b in budgets:
            make_allocator(name, **params).allocate(2, 1, b, shares=np.zeros((2, 1)))
    if args.calibration is not None:
        read_text(args.calibration, "--calibration")
    return names


def _policy_params(args: argparse.Namespace) -> dict[str, int | None]:
    return {"recent_window": args.recent_window, "sinks": args.sinks}


def _progress(args: argparse.Namespace, what: str) -> Progress | None:
    return None if args.quiet else _reporter(what)


def _reporter(what: str) -> Progress:
    """``report(done, total, label)``: one self-overwriting stderr line, timed from now."""
    t0 = time.perf_counter()

    def report(done: int, total: int, _label: str = "") -> None:
        end = "\n" if done >= total else ""
        print(
            f"\r{what}: {done}/{total} ({time.perf_counter() - t0:.1f}s)",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return report


def _labelled_progress(args: argparse.Namespace) -> Progress | None:
    """``progress(done, total, label)`` of runs one after another (:func:`quality_table`): a
    :func:`_reporter` line per run (the label names it), timed from the run's ``done = 0``
    report."""
    if args.quiet:
        return None
    line: list[Progress] = []

    def report(done: int, total: int, label: str) -> None:
        if done == 0 or not line:
            line[:] = [_reporter(label)]
        if done:
            line[0](done, total, label)

    return report


def environment_hint(command: str = "") -> str:
    """How to run the model commands inside the project's environment, where the model is."""
    python = PROJECT_VENV / "bin" / "python"
    run = f"`{python} -m h2o {command or '...'} ...` (or `{PROJECT_VENV / 'bin' / 'h2o'} ...`)"
    if not PROJECT_VENV.is_dir():
        return (
            f"Set the project up with `make setup` (or `make run` / `make test`), then run {run}."
        )
    if Path(sys.prefix).resolve() != PROJECT_VENV.resolve():
        return f"This is {sys.executable}, not the project's environment: run {run}."
    return "`make setup` installs the model into the project's environment."


def _load(args: argparse.Namespace) -> SmolLM:
    """The model, or exit 2 saying what is missing and how to run where it is installed."""
    if not args.quiet:
        print("loading SmolLM2-135M ...", file=sys.stderr, flush=True)
    try:
        return SmolLM.load(args.model)
    except ModelNotFoundError as e:
        problem = str(e)
    except ImportError as e:  # gguf / tokenizers: imported only when a model is read
        problem = f"the model commands need the package {e.name or e}, which is not installed"
    print(f"error: {problem}\n{environment_hint(getattr(args, 'command', ''))}", file=sys.stderr)
    raise SystemExit(2)


def _ids(model: SmolLM, text: str, n: int | None, quiet: bool) -> list[int]:
    ids = model.encode(text)
    if n is not None:
        if len(ids) < n and not quiet:
            print(f"note: the text has only {len(ids)} tokens", file=sys.stderr)
        ids = ids[:n]
    if len(ids) < 2:
        raise ValueError(f"the text has {len(ids)} token(s); at least 2 are needed")
    return ids


# -- commands ----------------------------------------------------------------------------------
def cmd_capture(args: argparse.Namespace) -> int:
    from h2o.model.capture import capture_attention, save_capture, trace_name

    # Every input is checked before the model loads (seconds) or anything runs.
    text = read_text(args.text)
    check_tokens(args.tokens)
    if args.layer < 0:
        raise ValueError(f"--layer must be >= 0, got {args.layer}")
    if args.head not in ("mean", "all") and not (args.head.isdigit() and int(args.head) >= 0):
        raise ValueError(
            f"--head takes a query head number (0, 1, ...), 'mean' or 'all', got {args.head!r}"
        )
    if not args.out.endswith(".npz"):
        raise ValueError(f"--out must name an .npz file, got {args.out!r}")
    if args.head == "all":
        return _capture_all_heads(args, text)
    head: int | str = args.head if args.head == "mean" else int(args.head)
    model = _load(args)
    if args.layer >= model.config.n_layers:
        raise ValueError(f"--layer must be below {model.config.n_layers}, got {args.layer}")
    if isinstance(head, int) and head >= model.config.n_heads:
        raise ValueError(f"--head must be below {model.config.n_heads}, got {head}")
    ids = _ids(model, text, args.tokens, args.quiet)
    dense, meta, tokens, norms, vectors, kvzip = capture_attention(
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
    save_capture(args.out, name, dense, meta, tokens, not args.float32, norms, vectors, kvzip)
    print(f"wrote {args.out}: {name!r}, {len(ids)} steps, {Path(args.out).stat().st_size} bytes")
    return 0


def _capture_all_heads(args: argparse.Namespace, text: str) -> int:
    from h2o.model.capture import all_heads_attention, save_capture, trace_name

    model = _load(args)
    if args.layer >= model.config.n_layers:
        raise ValueError(f"--layer must be below {model.config.n_layers}, got {args.layer}")
    ids = _ids(model, text, args.tokens, args.quiet)
    stem = args.out[: -len(".npz")]
    source = args.text_source or Path(args.text).name
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    progress = _progress(args, f"capture layer {args.layer}, every head")
    for h, (dense, meta, tokens, norms, vectors, kvzip) in enumerate(
        all_heads_attention(model, ids, args.layer, progress, source, args.licence)
    ):
        out = f"{stem}-h{h}.npz"
        name = (args.name + f" · head {h}") if args.name else trace_name(args.text, args.layer, h)
        save_capture(out, name, dense, meta, tokens, not args.float32, norms, vectors, kvzip)
        print(f"wrote {out}: {name!r}, {len(ids)} steps, {Path(out).stat().st_size} bytes")
    return 0


def cmd_quality(args: argparse.Namespace) -> int:
    from h2o.model.quality import FULL_CACHE, quality_runs, quality_table

    # Every input is checked before the model loads (seconds) or anything runs.
    text = read_text(args.text)
    check_tokens(args.tokens)
    policies = comma_list(args.policies, "--policies")
    budgets = comma_ints(args.budgets, "--budgets")
    params = _policy_params(args)
    if args.allocation is not None:
        return _quality_allocations(args, text, policies, budgets, params)
    quality_runs(policies, budgets, args.seed, **params)  # unknown names, refused windows
    model = _load(args)
    ids = _ids(model, text, args.tokens, args.quiet)
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


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _shares(
    model: SmolLM,
    args: argparse.Namespace,
    ids: list[int],
    names: Sequence[str],
    need_split: bool,
):
    """The head split of the text (for the JSON) and duo's calibration shares, if needed
    (without ``--calibration``: the text's own)."""
    from h2o.model.allocation import head_shares

    ap = _alloc_params(args)  # the split duo classifies by: its sinks and window
    win = (int(ap["sinks"]), int(ap["window"]))  # type: ignore[call-overload]

    need_cal = "duo" in names
    split = cal = None
    if need_split:
        split = head_shares(model, ids, *win, progress=_progress(args, "head shares"))
    if need_cal:
        if args.calibration is None:
            cal = split or head_shares(model, ids, *win, progress=_progress(args, "calibration"))
        else:
            cal_text = read_text(args.calibration, "--calibration")
            cal_ids = _ids(model, cal_text, getattr(args, "tokens", None), True)
            cal = head_shares(model, cal_ids, *win, progress=_progress(args, "calibration"))
    return split, cal


def _quality_allocations(
    args: argparse.Namespace,
    text: str,
    policies: list[str],
    budgets: list[int],
    params: dict[str, int | None],
) -> int:
    from h2o.model.allocation import allocation_runs, allocation_table
    from h2o.model.quality import policy_factory
    from h2o.model.rows import Row, allocation_record, held_bytes

    names = _check_allocation_inputs(args, budgets)
    for p in policies:
        if p == "snapkv":
            raise ValueError(
                "snapkv compresses a prompt once, after reading it: it runs in generate "
                "(--policy snapkv), not in the closed-loop quality evaluation"
            )
        for b in budgets:
            policy_factory(p, b, args.seed, **params)
    model = _load(args)
    ids = _ids(model, text, args.tokens, args.quiet)
    split, cal = _shares(model, args, ids, names, args.json)
    runs = allocation_runs(
        model,
        policies,
        budgets,
        names,
        None if cal is None else cal.kv_rest(),
        args.seed,
        _alloc_params(args),
        **params,
    )
    full, results = allocation_table(model, ids, runs, _labelled_progress(args))
    if args.json:
        out = {
            "text": args.text,
            "n_tokens": len(ids),
            "calibration": args.calibration or args.text,
            "full_cache": full.perplexity,
            "full_cache_kv_bytes": Row("full").kv_bytes(model.config, len(ids)),
            "runs": [
                {
                    "policy": r.policy,
                    **allocation_record(r.policy, r.allocation, model.config, len(ids)),
                    "perplexity": res.perplexity,
                    "seconds": round(res.seconds, 3),
                    **({"notes": list(r.notes)} if r.notes else {}),
                    **_final_fill(r),
                }
                for r, res in zip(runs, results, strict=True)
            ],
        }
        if split is not None:
            out["head_shares"] = split.as_dict()
        if cal is not None and cal is not split:
            out["calibration_shares"] = cal.as_dict()
        print(json.dumps(out, indent=1))
        return 0
    print(
        f"perplexity of {model.name} on {args.text} ({len(ids)} tokens) at equal KV memory "
        f"per policy; budget = slots per head on average (full cache {full.perplexity:.2f}); "
        "(MiB): what the run holds after the text (float16 keys and values and the policy's "
        "own bytes per slot)"
    )
    cells = {
        (r.policy, r.allocation.name, r.allocation.budget): (
            f"{res.perplexity:.2f} "
            f"({_mib(held_bytes(r.policy, r.allocation, model.config, len(ids)))})"
        )
        for r, res in zip(runs, results, strict=True)
    }
    width = max(len(f"{p} / {a}") for p in policies for a in names)
    cw = max(12, *(len(c) + 2 for c in cells.values()))
    print(f"{'policy / allocation':<{width}}" + "".join(f"{b:>{cw}}" for b in budgets))
    for p in policies:
        for a in names:
            row = "".join(f" {cells[p, a, b]:>{cw - 1}}" for b in budgets)
            print(f"{p + ' / ' + a:<{width}}{row}")
    for r in runs:
        for note in r.notes:
            print(f"note: {r.label}: {note}")
    return 0


def _final_fill(run) -> dict[str, object]:
    """Adaptive: how many slots each head held at the end (the grid it converged to)."""
    layers = getattr(run.factory, "layers", None)
    if not layers:
        return {}
    return {"final_slots": [[len(p) for p in layers[li].inner] for li in sorted(layers)]}


def cmd_generate(args: argparse.Namespace) -> int:
    from h2o.model.generate import generate, run_label
    from h2o.model.quality import FULL_CACHE, policy_factory

    # Every input is checked before the model loads (seconds) or anything runs.
    text = args.prompt if args.prompt is not None else read_text(args.prompt_file, "--prompt-file")
    if not text.strip():
        raise ValueError("the prompt is empty")
    check_max_new(args.max_new)
    names = comma_list(args.policy, "--policy")
    if args.allocation is not None or "snapkv" in names:
        return _generate_allocations(args, text, names)
    factories = {
        n: None
        if n == "full"
        else policy_factory(n, args.budget, args.seed, **_policy_params(args))
        for n in names
    }
    model = _load(args)
    # A trailing newline in a file would make the model start a new paragraph.
    ids = model.encode(text.rstrip())
    results = []
    for n, f in factories.items():
        label = FULL_CACHE if f is None else run_label(n, args.budget)
        r = generate(model, ids, args.max_new, f, _progress(args, label), label=label)
        results.append(r)
        if not args.json:
            print(f"{label:>24}: {r.text!r}", flush=True)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    return 0


def _generate_allocations(args: argparse.Namespace, text: str, names: list[str]) -> int:
    from h2o.model.allocation import allocated_factory, make_allocation
    from h2o.model.generate import generate, run_label
    from h2o.model.quality import FULL_CACHE, policy_factory
    from h2o.model.rows import allocation_record, held_bytes
    from h2o.model.snapkv import check_snapkv, snapkv_generate
    from h2o.policies.snapkv import snapkv_keep

    params = _policy_params(args)
    allocs = _check_allocation_inputs(args, [args.budget]) if args.allocation else ["uniform"]
    for n in names:
        if n == "snapkv":
            if args.snapkv_window < 1 or args.snapkv_kernel < 1 or args.snapkv_kernel % 2 == 0:
                raise ValueError("--snapkv-window must be >= 1 and --snapkv-kernel odd and >= 1")
            if args.budget <= args.snapkv_window:
                snapkv_keep([0.0], args.budget, args.budget + 2, args.snapkv_window)  # raises
        elif n != "full":
            policy_factory(n, args.budget, args.seed, **params)
    model = _load(args)
    ids = model.encode(text.rstrip())
    _, cal = _shares(model, args, ids, allocs, False)
    shares = None if cal is None else cal.kv_rest()
    # Every run is built and checked before the first one starts.
    plan: list[tuple[str, str, object, object]] = []
    for n in names:
        if n == "full":
            plan.append((n, FULL_CACHE, None, None))
            continue
        for a in allocs:
            ap = _alloc_params(args)
            if n == "snapkv":  # PyramidKV's window is SnapKV's observation window
                ap["window"] = args.snapkv_window if a == "pyramid" else ap["window"]
            alloc = make_allocation(model, a, args.budget, shares, **ap)
            label = run_label(n, args.budget, a)
            if n == "snapkv":
                check_snapkv(alloc, len(ids), args.snapkv_window)
                plan.append((n, label, alloc, None))
            else:
                f, _notes = allocated_factory(n, alloc, args.seed, **params)
                plan.append((n, label, alloc, f))
    results = []
    for n, label, alloc, f in plan:
        progress = _progress(args, label)
        if alloc is None:
            r = generate(model, ids, args.max_new, None, progress, label=label)
        elif n == "snapkv":
            r = snapkv_generate(
                model,
                ids,
                alloc,  # type: ignore[arg-type]
                args.max_new,
                args.snapkv_window,
                args.snapkv_kernel,
                progress,
                label=label,
            )
        else:
            r = generate(model, ids, args.max_new, f, progress, label=label)  # type: ignore[arg-type]
        results.append((n, alloc, r))
        if not args.json:
            kb = ""
            if alloc is not None:
                held = held_bytes(n, alloc, model.config, len(ids))  # type: ignore[arg-type]
                kb = f" [{_mib(held)}]"
            print(f"{label:>28}{kb}: {r.text!r}", flush=True)
    if args.json:
        out = []
        for n, alloc, r in results:
            d = {"policy": n, **r.as_dict()}
            if alloc is not None:
                rec = allocation_record(n, alloc, model.config, len(ids))  # type: ignore[arg-type]
                d |= {k: v for k, v in rec.items() if k != "budget_per_head"}
                d["budget"] = alloc.budget
            out.append(d)
        print(json.dumps(out, indent=1))
    return 0
