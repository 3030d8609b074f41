"""The shipped result files for the pages (read by :mod:`h2o.needle.results`), cached per file
version (path, mtime, size), and what the pages say of them: problems and provenance."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path

import streamlit as st

from app.model_runs import shipped_result
from h2o.needle import results

Reader = Callable[[Path], results.Loaded]


# One value per file version, shared by every session (st.cache_data would unpickle the 1,500
# cells on every call of every run): read-only, so its lists are made tuples here. A plain
# lru_cache: st.cache_resource would hash the arguments anew on every call of every run.
@functools.lru_cache(maxsize=8)
def _read(path: str, reader: Reader, mtime_ns: int, size: int) -> results.Loaded:
    loaded = reader(Path(path))
    return dataclasses.replace(
        loaded, records=tuple(loaded.records), problems=tuple(loaded.problems)
    )


def _load(name: str, reader: Reader) -> tuple[results.Loaded, Path]:
    # RESULTS_DIR is read at call time: the tests point it at a fixture of the same schema.
    path = results.RESULTS_DIR / name
    try:
        st_ = path.stat()
    except OSError:
        return results.Loaded(missing=True), path
    return _read(str(path), reader, st_.st_mtime_ns, st_.st_size), path


def grid() -> tuple[results.Loaded, Path]:
    """``needle-grid.jsonl``'s cells (and its path, for messages)."""
    return _load(results.GRID_FILE, results.read_grid)


def followup() -> tuple[results.Loaded, Path]:
    """``followup.jsonl``'s cells (the second question; and its path, for messages)."""
    return _load(results.FOLLOWUP_FILE, results.read_followup)


def frontier() -> tuple[results.Loaded, Path]:
    """``frontier.jsonl``'s rows (and its path, for messages)."""
    return _load(results.FRONTIER_FILE, results.read_frontier)


def report(loaded: results.Loaded, path: Path, what: str) -> bool:
    """Say what is wrong with a file (missing, refused, bad lines, repeated cells); whether
    there is anything to show."""
    from app import state

    rel = path.relative_to(results.ROOT) if path.is_relative_to(results.ROOT) else path.name
    if loaded.missing:
        st.info(
            f"{state.shown(rel, 120)} is not in this copy, so there is no {what} to show. It is "
            "computed ahead with the command in traces/results/README.md.",
            icon=":material/info:",
        )
        return False
    if loaded.n_problems:
        listed = "; ".join(state.md(p, 200) for p in loaded.problems[:3])
        more = f" (and {loaded.n_problems - 3} more)" if loaded.n_problems > 3 else ""
        st.warning(
            f"{state.shown(rel, 120)}: {loaded.n_problems} line(s) skipped — {listed}{more}.",
            icon=":material/warning:",
        )
    if loaded.repeated:
        st.caption(
            f"{loaded.repeated} repeated line(s) in {state.shown(rel, 120)} (a resumed run): the "
            "later one of each is shown."
        )
    if not loaded.records:
        st.info(f"{state.shown(rel, 120)} has no usable lines yet.", icon=":material/info:")
        return False
    return True


def provenance(loaded: results.Loaded, what: str, collapsed: bool = True) -> None:
    """How the file was made, one click away: its distinct commands (as code, never markup), how
    many runs used each and their wall time. ``collapsed=False`` draws it in place (inside the
    presenter's "More", which is already one click away and cannot hold another expander)."""
    cmds = results.commands(loaded.meta)
    if not cmds:
        st.caption(f"The {what} file has no sidecar saying how it was made.")
        return
    box = (
        st.expander(f"How the {what} was computed", icon=":material/terminal:")
        if collapsed
        else contextlib.nullcontext()
    )
    with box:
        st.caption(provenance_caption(cmds))
        st.code(provenance_script(cmds, loaded.name), language="bash", wrap_lines=True)


def provenance_caption(cmds: list[results.Command]) -> str:
    """The sentence above the commands: runs, distinct commands, wall time in all."""
    runs, wall = sum(c.runs for c in cmds), sum(c.wall for c in cmds)
    resumed = (
        " A command run more than once was cut short and resumed: each run computed only the "
        "cells the file did not hold yet."
        if any(c.runs > 1 for c in cmds)
        else ""
    )
    n = "one command" if len(cmds) == 1 else f"{len(cmds)} distinct commands"
    r = "one run" if runs == 1 else f"{runs} runs"
    return f"Computed ahead by {n} in {r}, {wall / 60:,.0f} min of wall time in all.{resumed}"


def provenance_script(cmds: list[results.Command], name: str) -> str:
    """The commands as a shell script, each after a comment with its runs and wall time (and,
    for one that wrote another file than ``name``, that its lines were copied into this one)."""
    out = []
    for c in cmds:
        note = f"# {c.runs} run{'s' if c.runs != 1 else ''}, {c.wall / 60:,.0f} min"
        if c.out is not None and Path(c.out).name != name:
            note += f"; wrote {c.out}, whose lines were copied into {name}"
        out += [note, c.text]
    return "\n".join(out)


def attention_band() -> dict | None:
    """``attention-band.json`` (the model's local attention band per layer), checked; None
    when it is missing or not of its schema."""
    return results.attention_band(shipped_result(results.BAND_FILE))
