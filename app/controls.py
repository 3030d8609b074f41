"""The shared controls: the sidebar's trace, upload, budget, recent_window and sinks, and what
their values mean for each policy (which settings it takes, why it refuses them).

Their values live in the session's model (:mod:`app.state`: plain session entries mirrored by the
widgets and kept in the URL); this module draws the controls and reads them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import streamlit as st

import h2o
from app import data
from app.state import (
    BUDGET,
    DEFAULT_TRACE,
    SHARED,
    SINKS,
    STEP,
    TRACE,
    TRACE_ERROR,
    TRACE_OK,
    UPLOAD,
    UPLOADS,
    WINDOW,
    from_link,
    md,
    mirror,
    set_value,
    shown,
    url_problems,
)
from h2o import analysis


# -- traces ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Context:
    """What a page needs from the shared controls."""

    ref: data.TraceRef
    budget: int
    recent_window: int
    sinks: int
    top_k: int

    @property
    def trace(self) -> h2o.Trace:
        return self.ref.trace


def uploads() -> dict[str, data.Upload]:
    return st.session_state.setdefault(UPLOADS, {})


def hold_uploads(keep: Iterable[str] | None = None) -> None:
    """Tell the server which uploads this browser session holds (what the cache keeps for them goes
    when the last session holding them ends). ``keep``: drop the session's other uploads."""
    pool = uploads()
    if keep is not None:
        for key in [k for k in pool if k not in keep]:
            del pool[key]
    data.hold_uploads({up.digest for up in pool.values()})


def defaults(trace: h2o.Trace) -> dict[str, int]:
    """The trace's suggested settings, keyed like the session state.

    :func:`h2o.analysis.suggested` reads any metadata defensively and fits the result to the
    trace (budget and top-k below its length, window and sinks below the budget).
    """
    sug = analysis.suggested(trace)
    return {BUDGET: sug["budget"], WINDOW: sug["recent_window"], SINKS: sug["sinks"], **sug}


def open_trace(key: str, upload: data.Upload | None = None) -> h2o.Trace:
    """Select the trace ``key`` with its suggested settings, at step 0 (a callback's work).

    Everything that can fail comes first: the trace is loaded (so validated) and its defaults
    computed before anything is stored, and ``upload`` is registered under ``key`` only then. A
    ``ValueError`` leaves the session exactly as it was.
    """
    pool = uploads() if upload is None else {**uploads(), key: upload}
    trace = data.load(key, pool).trace
    fit = defaults(trace)
    if upload is not None:
        uploads()[key] = upload
    set_value(TRACE, key)
    st.session_state[TRACE_OK] = key
    for name in (BUDGET, WINDOW, SINKS):
        set_value(name, fit[name])
    st.session_state[STEP] = 0
    return trace


def _on_trace_change() -> None:
    ss = st.session_state
    key = ss[TRACE]
    try:
        open_trace(key)
    except ValueError as e:
        ok = ss.get(TRACE_OK, DEFAULT_TRACE)
        ss[TRACE_ERROR] = (
            f"Could not open the trace {md(repr(key))}: {md(e, 300)}. Pick another one; "
            f"{md(repr(ok))} is still selected."
        )
        set_value(TRACE, ok)


def _on_upload() -> None:
    ss = st.session_state
    f = ss.get(UPLOAD)
    if f is None:  # the file was removed from the uploader: keep only what is selected
        hold_uploads(keep={ss.get(TRACE), ss.get(TRACE_OK)})
        return
    current = ss.get(TRACE_OK, DEFAULT_TRACE)
    try:
        key, up = data.make_upload(f.name, f.getvalue())
        open_trace(key, up)
        hold_uploads(keep={key})  # it replaced the earlier ones (none is selected any more)
    except ValueError as e:
        ss[TRACE_ERROR] = (
            f"Could not use the upload {md(repr(f.name))}: {md(e, 300)}. Upload an .npz in the "
            "format of traces/README.md (h2o.save_trace writes one): rows of finite, non-negative "
            f"weights that each sum to 1, at least 2 and at most {data.MAX_UPLOAD_STEPS:,} steps. "
            f"The trace {md(repr(current))} is still selected."
        )


def _resolve(key: str) -> tuple[data.TraceRef, str | None]:
    """The selected trace, or the last good one and the reason the selected one failed."""
    try:
        return data.load(key, uploads()), None
    except ValueError as e:
        ok = st.session_state.get(TRACE_OK, DEFAULT_TRACE)
        fallback = ok if ok != key else DEFAULT_TRACE
        msg = (
            f"Could not open the trace {md(repr(key))}: {md(e, 300)}. Pick another trace; showing "
            f"{md(repr(fallback))}."
        )
        return data.load(fallback, uploads()), msg


def sidebar() -> Context:
    """Draw the shared controls in the sidebar; errors go at the top of the page."""
    ss = st.session_state
    hold_uploads()  # again on every run: a session that reconnects holds its uploads anew
    options = data.trace_options(uploads())
    labels = data.trace_labels(options, uploads())
    errors = [f"Ignored from the link: {p}." for p in url_problems(SHARED)]
    if ss.get(TRACE, DEFAULT_TRACE) not in options:
        errors.append(
            f"The trace {shown(ss[TRACE], 60)} from the link is not available here (uploads are "
            f"not shared between sessions): showing {DEFAULT_TRACE!r}. Upload the file to use it."
        )
        set_value(TRACE, DEFAULT_TRACE)
    with st.sidebar:
        st.header("Trace")
        key = st.selectbox(
            "Attention trace",
            options,
            format_func=lambda key: labels.get(key, key),
            **mirror(TRACE, DEFAULT_TRACE, _on_trace_change),
            help="canonical: the benchmark trace of the policy card (sinks, a 64-wide recency "
            "band, heavy hitters per 512-step epoch). stale-spike: the card's H2O-vs-"
            "Scissorhands lesson. toy: small enough to follow cell by cell. Files in traces/ "
            "follow, named by their text, layer and head, then your upload, by its file name "
            "(one at a time: a new upload replaces the last).",
        )
        st.file_uploader(
            "Upload a trace (.npz)",
            type=["npz"],
            key=UPLOAD,
            on_change=_on_upload,
            max_upload_size=data.MAX_UPLOAD_MB,
            help="An .npz written by h2o.save_trace (packed 'weights'), or with a square "
            "'attention' matrix; optional 'tokens' show up in hovers.",
        )
        if ss.get(TRACE_ERROR):
            errors.append(ss.pop(TRACE_ERROR))
        ref, problem = _resolve(key)
        if problem:
            errors.append(problem)
        else:
            ss[TRACE] = key
            ss.setdefault(TRACE_OK, key)
        st.caption(f"**{md(ref.trace.name, 60)}** — {md(data.describe_trace(ref.trace), 300)}")

        st.header("Cache")
        fit = defaults(ref.trace)
        most = ref.trace.steps - 1
        for name in (BUDGET, WINDOW, SINKS):
            if (problem := _fit_to_trace(name, most, fit, ref.trace)) is not None:
                errors.append(problem)
        budget = st.number_input(
            "budget — slots in the cache",
            min_value=1,
            max_value=most,
            step=1,
            **mirror(BUDGET, fit[BUDGET]),
            help="How many positions the cache may hold after each step's eviction: at most "
            f"{most:,} here, one less than the trace's steps (a bigger cache never evicts).",
        )
        window = st.number_input(
            "recent_window — newest slots never evicted",
            min_value=0,
            max_value=most,
            step=1,
            **mirror(WINDOW, fit[WINDOW]),
            help="H2O, Scissorhands and Random protect this many of the newest kept positions; "
            f"TOVA keeps its own window of {own_window('tova')} on every page (it protects only "
            "the newest position). Must be smaller than the budget. The card: set it at least as "
            "wide as the model's local attention band (64 on the canonical trace).",
        )
        sinks = st.number_input(
            "sinks — StreamingLLM's pinned first positions",
            min_value=0,
            max_value=most,
            step=1,
            **mirror(SINKS, fit[SINKS]),
            help="StreamingLLM keeps the first `sinks` positions forever and a ring buffer of "
            "the most recent ones. Must be smaller than the budget.",
        )
        ss[BUDGET], ss[WINDOW], ss[SINKS] = int(budget), int(window), int(sinks)
        top_k = fit["top_k"]
        st.caption(f"Recall is top-{top_k} recall (the trace's suggestion).")
    for msg in errors:
        st.error(msg, icon=":material/error:")
    return Context(ref, int(budget), int(window), int(sinks), int(top_k))


def _fit_to_trace(name: str, most: int, fit: dict[str, int], trace: h2o.Trace) -> str | None:
    """Replace a model value above ``most`` (from the link, or left by another trace) with the
    trace's suggestion, and say so; None if it fits."""
    ss = st.session_state
    linked = from_link(name)
    value = ss.get(name)
    if value is None or value <= most:
        return None
    set_value(name, fit[name])
    return (
        ("Ignored from the link: " if linked else "")
        + f"{name}={value} is above {most:,}, the most the trace {md(trace.name, 60)} "
        f"({trace.steps:,} steps) allows. Using its suggested {name} of {fit[name]}."
    )


# -- policies --------------------------------------------------------------------------------------
def own_window(name: str) -> int:
    """The recent_window a policy whose class keeps its own (``own_window``) keeps: its
    default (TOVA's 1)."""
    return int(h2o.policies.make_policy(name, 1024).params()["recent_window"])


def policy_settings(name: str, recent_window: int, sinks: int) -> dict[str, int]:
    """The shared controls' values that policy ``name`` takes (per ``h2o.policies.policy_params``).

    recent_window goes to every policy that has one except those whose class keeps its own
    (``own_window``: TOVA).
    """
    taken = h2o.policies.policy_params(name)
    out = {}
    if "recent_window" in taken and not h2o.POLICIES[name].own_window:
        out["recent_window"] = recent_window
    if "sinks" in taken:
        out["sinks"] = sinks
    return out


def library_refusal(name: str, budget: int, params: dict[str, int]) -> str | None:
    """``h2o.policies.refusal(name, budget, **params)``, asked once per server for the same
    class and settings (it builds the policy to ask it; a page asks dozens of times a run)."""
    return _refusal(h2o.POLICIES[name], name, int(budget), tuple(sorted(params.items())))


@functools.lru_cache(maxsize=4096)
def _refusal(cls: type, name: str, budget: int, params: tuple) -> str | None:
    return h2o.policies.refusal(name, budget, **dict(params))


def refusal(name: str, budget: int, recent_window: int, sinks: int) -> str | None:
    """``analysis.refusal`` for the controls' values (its message names the fix), or None."""
    problem = library_refusal(name, budget, policy_settings(name, recent_window, sinks))
    if problem is not None and h2o.POLICIES[name].own_window:
        problem += (
            f" In this app {h2o.POLICIES[name].label} always keeps its own recent_window of "
            f"{own_window(name)}, so raise the budget."
        )
    return problem


def _runs_on(cls: type[h2o.Policy], key: str) -> bool:
    """Whether ``cls`` runs on the shipped trace ``key`` (an unreadable file: no)."""
    try:
        return cls.runs_on(data.load(key, {}).trace)
    except ValueError:
        return False


def policy_or_error(ctx: Context, name: str) -> tuple[h2o.Policy | None, str | None]:
    """A fresh policy from the shared controls, or the refusal that says what to change."""
    cls = h2o.POLICIES[name]
    if missing := cls.missing_from(ctx.trace):  # the trace's name shown safely, not the library's
        fits = [f for f in data.trace_files() if _runs_on(cls, f)]
        where = f"pick {' or '.join(fits)} in the sidebar" if fits else "no trace here does"
        return None, (
            f"{cls.label} reads each position's {', '.join(missing)}, which "
            f"{shown(ctx.trace.name, 60)} does not carry: {where}."
        )
    problem = refusal(name, ctx.budget, ctx.recent_window, ctx.sinks)
    if problem is not None:
        return None, problem
    params = policy_settings(name, ctx.recent_window, ctx.sinks)
    return h2o.policies.make_policy(name, ctx.budget, **params), None


def policy_choice(name: str, label: str, default: str, container: Any = st) -> str:
    """A policy picker bound to the model entry ``name`` (``policy_a``/``policy_b``)."""
    names = list(h2o.POLICIES)
    ss = st.session_state
    if ss.get(name, default) not in names:
        st.error(f"Ignored {name}={shown(ss[name])} from the link: choose from {', '.join(names)}.")
        set_value(name, default)
    chosen = container.selectbox(
        label,
        names,
        **mirror(name, default),
        help="h2o: cumulative attention · streaming-llm: sinks + ring buffer · scissorhands: "
        "votes · tova: last step's attention (with its own recent_window of 1) · "
        "sliding-window: newest only · random: any unprotected position, with equal chance (a "
        "baseline, not a floor: a policy with too narrow a window can fall below it) · "
        "key-norm: K-norm, the smallest key norms, no attention read · expected-attention: "
        "the attention the next queries are expected to pay, every key rescored once a window · "
        "kvzip: the attention a key gets while the model repeats the whole text (known only "
        "after it) — these three on the traces captured from the real model · quest: evicts "
        "nothing, each step reads the pages its query can attend to (on a trace of one query "
        "head: lighthouse-L8-h0).",
    )
    ss[name] = chosen
    return chosen
