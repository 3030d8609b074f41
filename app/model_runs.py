"""The real model's runs for the pages: SmolLM2-135M loaded once per server, the shipped texts
and results computed ahead, captures of its attention, perplexity and generation under a policy.

Every run goes through the server's model queue (:mod:`app.jobs`: one job at a time for the
class) and is cached per run and shared by every session.
"""

from __future__ import annotations

import functools
import pickle
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

import h2o
from app import jobs
from app.data import ROOT, TRACE_DIR, said
from app.sweeps import bar_progress
from h2o import analysis
from h2o.needle import results
from h2o.progress import Progress

if TYPE_CHECKING:
    from h2o.model import SmolLM

# -- the real model (SmolLM2-135M in numpy) --------------------------------------------------------
# Nothing here runs on page load except `model_path` (a file lookup): the model loads on the
# first computation a user asks for, once per process, and every result is cached.
TEXT_DIR = TRACE_DIR / "texts"


# One parse per file version, shared by the server; each caller gets its own copy (unpickled),
# as st.cache_data would give, without hashing the arguments anew on every call of every run.
@functools.lru_cache(maxsize=16)
def _shipped_pickle(file: str, mtime_ns: int, size: int) -> bytes | None:
    res = results.read_json(Path(file))
    return None if res is None else pickle.dumps(res)


def shipped_result(name: str) -> Any:
    """A JSON results file of ``traces/results/`` (made by the commands in its README), or None
    if it is missing, damaged or too big (:func:`h2o.needle.results.read_json`)."""
    path = results.RESULTS_DIR / name
    try:
        st_ = path.stat()
    except OSError:
        return None
    raw = _shipped_pickle(str(path), st_.st_mtime_ns, st_.st_size)
    return None if raw is None else pickle.loads(raw)


def trace_origin(trace: h2o.Trace) -> str | None:
    """Where a captured trace comes from ("SmolLM2-135M-Instruct, layer 8, mean over its 9
    query heads, 1,024 tokens of traces/texts/lighthouse.txt"), or None for other traces."""
    meta = trace.meta
    if "layer" not in meta:
        return None
    head = meta.get("head")
    if head == "mean":
        heads = meta.get("n_heads")
        who = (
            f"mean over its {said(heads, 20)} query heads" if heads else "mean over its query heads"
        )
    else:
        who = f"query head {said(head, 20)}" if head is not None else None
    bits = [said(meta.get("model", "a real model")), f"layer {said(meta['layer'], 20)}"]
    if who:
        bits.append(who)
    text = said(str(meta.get("text", "")).split(" (")[0])
    if text and text != "unspecified":
        bits.append(f"{trace.steps:,} tokens of {text}")
    return ", ".join(bits)


def text_files() -> list[str]:
    """The shipped texts (``traces/texts/*.txt``), by stem: ``["library", "lighthouse"]``."""
    return sorted(p.stem for p in TEXT_DIR.glob("*.txt")) if TEXT_DIR.is_dir() else []


def text_ref(name: str) -> tuple[str, int]:
    """``(name, mtime_ns)``: a text's cache identity (an edited file is a different text)."""
    path = TEXT_DIR / f"{name}.txt"
    if name not in text_files():
        raise ValueError(f"no text {name!r} in {TEXT_DIR.relative_to(ROOT)}")
    return name, path.stat().st_mtime_ns


def model_path() -> Path:
    """The GGUF file (cheap: no loading); ``ModelNotFoundError`` says how to install it."""
    from h2o.model import find_gguf

    return find_gguf()


@st.cache_resource(show_spinner="Loading SmolLM2-135M (once per server)…", max_entries=1)
def _model(path: str, mtime_ns: int) -> SmolLM:
    from h2o.model import SmolLM

    return SmolLM.load(path)


def model() -> SmolLM:
    """The one shared :class:`h2o.model.SmolLM` (read-only weights, ~0.8 GB)."""
    path = model_path()
    return _model(str(path), path.stat().st_mtime_ns)


@st.cache_data(show_spinner=False, max_entries=32)
def text_ids(name: str, mtime_ns: int, n_tokens: int | None = None) -> list[int]:
    """The first ``n_tokens`` token ids of a shipped text (all of them for None)."""
    text = (TEXT_DIR / f"{name}.txt").read_text(encoding="utf-8").rstrip()
    ids = model().encode(text)
    return ids if n_tokens is None else ids[:n_tokens]


def layer_progress(what: str) -> tuple[Any, Progress]:
    bar = st.progress(0.0, text=f"{what}…")
    started = time.monotonic()

    def cb(done: int, total: int, _label: str = "layers") -> None:
        left = jobs.eta(done, total, started)  # measured: from the layers done so far
        bar.progress(min(1.0, done / max(total, 1)), text=f"{what}: layer {done}/{total}{left}")

    return bar, cb


def queued(label: str, bar: Any, frac: float = 0.0) -> Any:
    """Hold the server's model queue for ``label`` (its place in the line shown in ``bar``)."""
    return jobs.model_queue().turn(label, lambda msg: bar.progress(frac, text=msg))


#: Captures (30 layer traces of one text prefix, ~60 MB at 1,024 tokens) the server keeps.
CAPTURES_KEPT = 4


@st.cache_resource
def _capture_store() -> tuple[OrderedDict, threading.Lock]:
    """The captures, least recently used first: a store the page can look into without running
    the model (``st.cache_resource`` cannot say whether it holds an entry without computing it)."""
    return OrderedDict(), threading.Lock()


def capture_ready(name: str, mtime_ns: int, n_tokens: int) -> bool:
    """Whether :func:`captured_layers` would return at once (no model run)."""
    store, lock = _capture_store()
    with lock:
        return (name, mtime_ns, n_tokens) in store


def captured_layers(name: str, mtime_ns: int, n_tokens: int) -> list[h2o.Trace]:
    """Every layer's attention trace of a text's first ``n_tokens`` tokens (one prefill).

    Runs the model unless the capture is kept: call it after a click, or once
    :func:`capture_ready` says it is there.
    """
    store, lock = _capture_store()
    key = (name, mtime_ns, n_tokens)
    with lock:
        if key in store:
            store.move_to_end(key)
            return store[key]
    from h2o.model.layers import capture_layers

    ids = text_ids(name, mtime_ns, n_tokens)
    what = f"Running SmolLM2 on {len(ids):,} tokens of {name}, every layer"
    bar = st.progress(0.0, text=f"{what}…")
    with queued(what, bar):
        bar.empty()
        bar, cb = layer_progress(what)
        traces = capture_layers(
            model(), ids, progress=cb, text=f"traces/texts/{name}.txt", source_name=name
        )
    bar.empty()
    with lock:
        store[key] = traces
        while len(store) > CAPTURES_KEPT:
            store.popitem(last=False)
    return traces


@st.cache_data(show_spinner=False, max_entries=16)
def layer_shares(name: str, mtime_ns: int, n_tokens: int) -> dict[str, Any]:
    """Per layer, the share of attention on the sinks / the recent 64 / the middle."""
    from h2o.model.layers import layer_shares as shares_of

    traces = captured_layers(name, mtime_ns, n_tokens)
    shares = shares_of(traces)
    return {
        "n_tokens": traces[0].steps,
        "sink": shares.sink,
        "recent": shares.recent,
        "middle": shares.middle,
        "n_sinks": shares.n_sinks,
        "n_recent": shares.n_recent,
    }


@st.cache_data(show_spinner=False, max_entries=64)
def layer_comparison(
    name: str, mtime_ns: int, n_tokens: int, budget: int, lineup: tuple, top_k: int
) -> list[dict]:
    """``compare_layers`` rows: each policy of ``lineup`` replayed on every layer at ``budget``."""
    from h2o.model.layers import compare_layers

    traces = captured_layers(name, mtime_ns, n_tokens)
    bar, at = bar_progress(len(traces), f"Replaying on every layer at budget {budget}")
    rows = compare_layers(traces, [(n, dict(p)) for n, p in lineup], budget, top_k, at(0))
    bar.empty()
    return rows


def policy_label(name: str, params: tuple[tuple[str, int], ...] | dict[str, int]) -> str:
    """``"TOVA (recent_window=1)"``: the policy as built, its defaults included."""
    params = dict(params)
    roomy = 2 + max(64, *params.values()) if params else 66  # above any default window or sinks
    built = h2o.policies.make_policy(name, roomy, **params)
    return analysis.describe(name, built.params())


def run_bar(label: str, index: int, total: int) -> tuple[Any, Progress]:
    """A bar for run ``index`` of ``total`` (1-based), advancing with the run's own progress."""
    bar = st.progress((index - 1) / total, text=f"{label} — run {index} of {total}…")
    started = time.monotonic()

    def cb(done: int, steps: int, _what: str = "") -> None:
        frac = (index - 1 + done / max(steps, 1)) / total
        left = jobs.eta(done, steps, started)  # measured: this run's own progress
        text = f"{label} — run {index} of {total}: {done}/{steps}{left}"
        bar.progress(min(1.0, frac), text=text)

    return bar, cb


@st.cache_data(show_spinner=False, max_entries=256)
def perplexity_run(
    name: str,
    mtime_ns: int,
    n_tokens: int,
    policy: str | None,
    budget: int | None,
    params: tuple[tuple[str, int], ...],
    _index: int = 1,
    _total: int = 1,
) -> dict[str, Any]:
    """Closed-loop perplexity of one (policy, budget) on a text (``policy=None``: full cache)."""
    from h2o.model import perplexity_under_eviction, policy_factory

    ids = text_ids(name, mtime_ns, n_tokens)
    label = "full cache" if policy is None else f"{policy_label(policy, params)} @ {budget}"
    factory = None if policy is None else policy_factory(policy, budget, **dict(params))
    bar, cb = run_bar(f"Perplexity, {label}", _index, _total)
    with queued(f"perplexity, {label}", bar, (_index - 1) / _total):
        res = perplexity_under_eviction(model(), ids, factory, progress=cb, label=label)
    bar.empty()
    return {
        "policy": policy,
        "budget": budget,
        "label": label,
        "perplexity": res.perplexity,
        "n_tokens": res.n_tokens,
        "seconds": res.seconds,
    }


@st.cache_data(show_spinner=False, max_entries=64)
def generation_run(
    name: str,
    mtime_ns: int,
    policy: str | None,
    budget: int | None,
    params: tuple[tuple[str, int], ...],
    max_new: int,
    stop_strings: tuple[str, ...],
    _index: int = 1,
    _total: int = 1,
) -> dict[str, Any]:
    """A greedy continuation of a whole shipped text under one policy (``None``: full cache)."""
    from h2o.model import generate, policy_factory

    ids = text_ids(name, mtime_ns)
    label = "full cache" if policy is None else f"{policy_label(policy, params)} @ {budget}"
    factory = None if policy is None else policy_factory(policy, budget, **dict(params))
    bar, cb = run_bar(f"Generating, {label}", _index, _total)
    with queued(f"generation, {label}", bar, (_index - 1) / _total):
        res = generate(model(), ids, max_new, factory, cb, stop_strings=stop_strings, label=label)
    bar.empty()
    return {
        "policy": policy,
        "budget": budget,
        "label": label,
        "text": res.text,
        "prompt_tokens": res.prompt_tokens,
        "new_tokens": len(res.new_ids),
        "seconds": res.seconds,
        "stopped": res.stopped,
    }
