"""Allocators and SnapKV inside the model, on the tiny random GGUF of
``tiny_model.py`` (no real model needed; a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from tiny_model import token_ids, write_tiny_gguf

from h2o.model import SmolLM, generate, perplexity_under_eviction, policy_factory
from h2o.model.allocation import allocated_factory, head_shares, make_allocation
from h2o.model.snapkv import snapkv_generate, snapkv_kept


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


@pytest.fixture(scope="module")
def model(tiny_path: Path) -> SmolLM:
    return SmolLM.load(tiny_path)


IDS = token_ids(90)


def _ppl(model, factory):
    return perplexity_under_eviction(model, IDS, factory)


def test_uniform_allocation_is_the_policy_factory_bit_for_bit(model) -> None:
    a = make_allocation(model, "uniform", 24)
    f, notes = allocated_factory("h2o", a, recent_window=4)
    assert notes == []
    ref = _ppl(model, policy_factory("h2o", 24, recent_window=4))
    assert np.array_equal(_ppl(model, f).nll, ref.nll)


def test_adaptive_alpha_one_equals_uniform_in_the_model(model) -> None:
    a = make_allocation(model, "adaptive", 24, alpha=1.0)
    f, _ = allocated_factory("h2o", a, recent_window=4)
    ref = _ppl(model, policy_factory("h2o", 24, recent_window=4))
    assert np.array_equal(_ppl(model, f).nll, ref.nll)
    assert sorted(f.layers) == [0, 1, 2]  # the layers of the last run, to read their fills


def test_adaptive_without_scores_runs_uniform_and_says_so(model) -> None:
    a = make_allocation(model, "adaptive", 24)
    f, notes = allocated_factory("streaming-llm", a, sinks=2)
    assert notes and "uniform" in notes[0]
    ref = _ppl(model, policy_factory("streaming-llm", 24, sinks=2))
    assert np.array_equal(_ppl(model, f).nll, ref.nll)


def test_duo_all_retrieval_with_enough_memory_is_the_full_cache(model) -> None:
    sh = head_shares(model, IDS, 2, 8)
    a = make_allocation(model, "duo", len(IDS), sh.kv_rest(), retrieval=1.0)
    f, _ = allocated_factory("h2o", a, recent_window=4)
    assert np.array_equal(_ppl(model, f).nll, _ppl(model, None).nll)


def test_duo_streaming_heads_run_streaming_llm(model) -> None:
    sh = head_shares(model, IDS, 2, 8)
    a = make_allocation(model, "duo", 24, sh.kv_rest(), sinks=2, window=8)
    f, _ = allocated_factory("h2o", a, recent_window=4)
    kinds = {type(f(li, g)).__name__ for li in range(3) for g in range(2)}
    assert kinds == {"H2O", "StreamingLLM"}
    assert a.total == 3 * 2 * 24


def test_pyramid_runs_and_refuses_a_layer_below_the_window(model) -> None:
    a = make_allocation(model, "pyramid", 24, window=4)
    assert a.budgets[:, 0].tolist() == [43, 24, 5]  # 39.4 + 4, 20.2 + 4, 1 + 4: hand-checked
    f, _ = allocated_factory("h2o", a, recent_window=4)
    assert np.isfinite(_ppl(model, f).perplexity)
    with pytest.raises(ValueError, match="layer 2, KV head 0"):
        allocated_factory("h2o", a, recent_window=8)


def test_head_shares_sum_to_one_and_match_the_layer_story(model) -> None:
    from h2o.model import layer_attention_shares

    sh = head_shares(model, IDS, 4, 16)
    assert sh.sink.shape == (3, 4)
    assert np.allclose(sh.sink + sh.recent + sh.rest, 1, atol=1e-5)
    ls = layer_attention_shares(model, IDS, n_sinks=4, n_recent=16)
    assert np.allclose(sh.sink.mean(axis=1), ls.sink, atol=1e-5)
    assert np.allclose(sh.rest.mean(axis=1), ls.middle, atol=1e-5)
    assert sh.kv_rest().shape == (3, 2)


def test_snapkv_with_room_for_the_prompt_is_the_full_cache(model) -> None:
    full = generate(model, IDS, 4, None)
    for name in ("uniform", "adaptive"):
        r = snapkv_generate(model, IDS, make_allocation(model, name, len(IDS)), 4, window=8)
        assert r.new_ids == full.new_ids


def test_snapkv_keeps_its_budget_under_every_allocation(model) -> None:
    rng = np.random.default_rng(0)
    attn = rng.random((3, 2, 90))
    sh = rng.random((3, 2))
    for name in ("uniform", "pyramid", "adaptive", "duo"):
        a = make_allocation(model, name, 24, sh, window=8, sinks=2)
        kept = snapkv_kept(attn, a, window=8)
        assert sum(len(k) for row in kept for k in row) == a.total
        for row in kept:
            for k in row:
                assert (np.diff(k) > 0).all() and set(range(82, 90)) <= set(k.tolist())


def _cli(argv: list[str]) -> int:
    """``python -m h2o ARGV``, its errors raised (not printed)."""
    from h2o.cli import build_parser

    args = build_parser().parse_args(argv)
    return args.func(args)


def test_cli_quality_and_generate_with_allocations(tiny_path, tmp_path, capsys) -> None:
    text = tmp_path / "t.txt"
    text.write_text("the hen and the heron " * 12 + "in 2024 and then", encoding="utf-8")
    m = ["--model", str(tiny_path), "--quiet", "--recent-window", "4", "--sinks", "2"]
    args = ["quality", "--text", str(text), "--tokens", "80", "--policies", "h2o"]
    rc = _cli([*args, "--budgets", "24,32", "--allocation", "uniform,pyramid,adaptive,duo", *m])
    out = capsys.readouterr().out
    assert rc == 0 and "h2o / adaptive" in out and "MiB" in out
    rc = _cli([*args, "--budgets", "24", "--allocation", "uniform,duo", "--json", *m])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["allocation"] for r in data["runs"]] == ["uniform", "duo"]
    # 3 layers x 2 KV heads x 24 slots, each a float16 key and value of 16 and H2O's 13 bytes
    assert {r["kv_bytes"] for r in data["runs"]} == {3 * 2 * 24 * (2 * 16 * 2 + 13)}
    assert len(data["head_shares"]["rest"]) == 3 and len(data["head_shares"]["rest"][0]) == 4
    # uniform through --allocation = the plain table's number
    assert _cli([*args, "--budgets", "24", "--json", *m]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["perplexity"]["h2o"]["24"] == data["runs"][0]["perplexity"]
    gen = ["generate", "--prompt-file", str(text), "--budget", "24", "--max-new", "2"]
    rc = _cli(
        [
            *gen,
            "--policy",
            "full,h2o,snapkv",
            "--allocation",
            "uniform,adaptive",
            *m,
            "--snapkv-window",
            "8",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and [d["label"] for d in data] == [
        "full cache",
        "h2o/uniform@24",
        "h2o/adaptive@24",
        "snapkv/uniform@24",
        "snapkv/adaptive@24",
    ]
    assert data[1]["kv_bytes"] == 3 * 2 * 24 * (64 + 13)  # H2O's 13 bytes a slot too
    assert data[3]["kv_bytes"] == 3 * 2 * 24 * 64  # SnapKV keeps none of its own


def test_cli_capture_every_head(tiny_path, tmp_path, capsys) -> None:
    from h2o.trace_npz import load_trace

    text = tmp_path / "t.txt"
    text.write_text("the hen and the heron " * 12, encoding="utf-8")
    out = tmp_path / "cap.npz"
    rc = _cli(
        [
            "capture",
            "--text",
            str(text),
            "--tokens",
            "40",
            "--layer",
            "1",
            "--head",
            "all",
            "--out",
            str(out),
            "--model",
            str(tiny_path),
            "--quiet",
        ]
    )
    assert rc == 0
    files = sorted(tmp_path.glob("cap-h*.npz"))
    assert [f.name for f in files] == [f"cap-h{h}.npz" for h in range(4)]
    tr = load_trace(files[2])
    assert tr.meta["head"] == 2 and tr.meta["layer"] == 1 and tr.steps == 40


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["quality", "--allocation", "nope"], "unknown allocation"),
        (["quality", "--allocation", "adaptive", "--alpha", "2"], "alpha"),
        (["quality", "--allocation", "pyramid", "--budgets", "16"], "budget > window"),
        (["quality", "--allocation", "duo", "--retrieval", "0"], "retrieval"),
        (["quality", "--allocation", "uniform", "--policies", "snapkv"], "snapkv"),
        (["quality", "--allocation", ""], "empty"),
        (["generate", "--policy", "snapkv", "--budget", "16"], "budget > window"),
        (["generate", "--policy", "snapkv", "--snapkv-kernel", "4"], "kernel"),
        (["quality", "--allocation", "duo", "--calibration", "/no/such"], "no such file"),
    ],
)
def test_cli_refuses_bad_allocation_inputs_before_loading(argv, match, tmp_path, capsys) -> None:
    from h2o.cli import main

    text = tmp_path / "t.txt"
    text.write_text("some text here", encoding="utf-8")
    src = ["--text", str(text)] if argv[0] == "quality" else ["--prompt-file", str(text)]
    rc = main([*argv, *src, "--model", str(tmp_path / "missing.gguf")])
    err = capsys.readouterr().err
    assert rc == 2 and match in err and "loading" not in err
