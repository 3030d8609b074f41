"""One count of KV memory under an allocation: the CLI's tables, the shipped
``traces/results/allocation-*.json`` and the budget page state the bytes
:meth:`h2o.model.rows.Row.kv_bytes` counts — per slot held a float16 key and value, plus the
policy's own bookkeeping (13 bytes a slot for the scored policies) — never the allocation's
float16 slots alone. The expected numbers are counted by hand from that rule."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from h2o.alloc import make_allocator
from h2o.model.rows import Row, allocation_record, held_bytes

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "traces" / "results"
#: SmolLM2-135M: 30 layers, 3 KV heads, head dim 64 (a slot: 2 x 64 float16 numbers = 256 B).
L, G, HD = 30, 3, 64
SMOL = SimpleNamespace(n_layers=L, n_kv_heads=G, head_dim=HD)
SLOT = 2 * HD * 2
#: Each policy's own bytes per slot held: H2O's score (float64), position (int32) and flag.
OWN = {"h2o": 13, "streaming-llm": 0, "snapkv": 0}


def by_hand(policy: str, budget: int, layers: int = L, heads: int = G, head_dim: int = HD) -> int:
    """``budget`` slots in every (layer, KV head), each a key and a value of ``head_dim``
    float16 numbers plus the policy's own bytes."""
    return layers * heads * budget * (2 * head_dim * 2 + OWN[policy])


# -- the helper ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["uniform", "pyramid", "adaptive", "duo"])
@pytest.mark.parametrize("policy", sorted(OWN))
def test_an_allocation_holds_what_its_row_holds(policy, name):
    shares = np.random.default_rng(1).random((L, G))
    alloc = make_allocator(name).allocate(L, G, 128, head_dim=HD, shares=shares)
    got = held_bytes(policy, alloc, SMOL, 2048)
    assert got == by_hand(policy, 128)
    assert got == Row.parse(f"{policy}@128/{name}").kv_bytes(SMOL, 2048)
    rec = allocation_record(policy, alloc, SMOL, 2048)
    assert rec["kv_bytes"] == got and rec["total_slots"] == L * G * 128


def test_h2o_at_128_holds_its_bookkeeping_too():
    alloc = make_allocator("uniform").allocate(L, G, 128, head_dim=HD)
    assert held_bytes("h2o", alloc, SMOL, 2048) == 3_098_880  # 30 x 3 x 128 x (256 + 13)
    assert held_bytes("streaming-llm", alloc, SMOL, 2048) == 2_949_120  # 30 x 3 x 128 x 256


def test_a_head_holds_no_more_than_the_tokens_read():
    # pyramid with a steep ratio: the first layers' budgets exceed 150 tokens, the last don't
    alloc = make_allocator("pyramid", beta=40.0).allocate(L, G, 128, head_dim=HD)
    assert alloc.budgets.max() > 150 > alloc.budgets.min()
    slots = sum(min(int(b), 150) for b in alloc.budgets.ravel())
    assert held_bytes("h2o", alloc, SMOL, 150) == slots * (SLOT + 13)
    assert held_bytes("h2o", make_allocator("uniform").allocate(L, G, 512), SMOL, 100) == (
        by_hand("h2o", 100)
    )


# -- the shipped files ---------------------------------------------------------------------------
def _row_bytes(policy: str, allocation: str, budget: int, n_tokens: int) -> int:
    return Row.parse(f"{policy}@{budget}/{allocation}").kv_bytes(SMOL, n_tokens)


def test_the_shipped_quality_file_states_the_one_count():
    q = json.loads((RESULTS / "allocation-quality.json").read_text())
    n = q["n_tokens"]
    assert q["full_cache_kv_bytes"] == L * G * n * SLOT == Row("full").kv_bytes(SMOL, n)
    assert q["runs"]
    for r in q["runs"]:
        p, a, b = r["policy"], r["allocation"], r["budget_per_head"]
        assert np.asarray(r["budgets"]).shape == (L, G)
        assert r["kv_bytes"] == by_hand(p, b) == _row_bytes(p, a, b, n), (p, a, b)


@pytest.mark.parametrize("budget", [128, 256])
def test_the_shipped_generate_files_state_the_one_count(budget):
    entries = json.loads((RESULTS / f"allocation-generate-{budget}.json").read_text())
    runs = [e for e in entries if e["policy"] != "full"]
    assert runs and all("kv_bytes" not in e for e in entries if e["policy"] == "full")
    for e in runs:
        p, a = e["policy"], e["allocation"]
        want = _row_bytes(p, a, budget, e["prompt_tokens"])
        assert e["kv_bytes"] == by_hand(p, budget) == want, e["label"]


def test_no_page_or_command_reads_an_allocations_own_bytes():
    """``Allocation.cache_bytes`` (float16 slots alone) and ``Allocation.as_dict`` (which carries
    it) are the allocator's; what a run holds is :func:`held_bytes` /
    :func:`allocation_record`."""
    own = re.compile(r"\b(alloc|allocation|a)\.(kv_bytes|cache_bytes|as_dict\(\))")
    mine = {ROOT / "h2o" / "model" / "rows.py"}  # allocation_record, the one wrapper
    files = [
        f
        for f in sorted([*(ROOT / "h2o").rglob("*.py"), *(ROOT / "app").rglob("*.py")])
        if f not in mine and (ROOT / "h2o" / "alloc") not in f.parents
    ]
    hits = [
        f"{f.relative_to(ROOT)}:{i}: {line.strip()}"
        for f in files
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if own.search(line)
    ]
    assert hits == []


# -- the CLI, on the tiny model ------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tiny_model import write_tiny_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def _cli(argv: list[str]) -> int:
    """``python -m h2o ARGV``, its errors raised (not printed)."""
    from h2o.cli import build_parser

    args = build_parser().parse_args(argv)
    return args.func(args)


def test_the_cli_prints_and_writes_the_one_count(tiny_path, tmp_path, capsys, monkeypatch):
    from h2o.model import cli

    # the tiny model: 3 layers, 2 KV heads, head dim 16 (a slot: 2 x 16 x 2 = 64 bytes)
    def tiny(policy: str, budget: int) -> int:
        return by_hand(policy, budget, layers=3, heads=2, head_dim=16)

    monkeypatch.setattr(cli, "_mib", lambda n: f"{n} B")  # exact bytes in the printed table
    text = tmp_path / "t.txt"
    text.write_text("the hen and the heron " * 12 + "in 2024 and then", encoding="utf-8")
    m = ["--model", str(tiny_path), "--quiet", "--recent-window", "4", "--sinks", "2"]
    q = ["quality", "--text", str(text), "--tokens", "60", "--budgets", "24"]
    q += ["--allocation", "uniform,pyramid", *m]
    assert _cli([*q, "--policies", "h2o,streaming-llm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for p in ("h2o", "streaming-llm"):
        for a in ("uniform", "pyramid"):
            line = next(ln for ln in lines if ln.startswith(f"{p} / {a} "))
            assert line.endswith(f"({tiny(p, 24)} B)"), line
    assert _cli([*q, "--policies", "h2o", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["kv_bytes"] for r in data["runs"]] == [tiny("h2o", 24)] * 2
    assert data["full_cache_kv_bytes"] == 3 * 2 * data["n_tokens"] * 64

    gen = ["generate", "--prompt-file", str(text), "--budget", "24", "--max-new", "1"]
    gen += ["--policy", "h2o,snapkv", "--allocation", "uniform", "--snapkv-window", "8", *m]
    assert _cli(gen) == 0
    out = capsys.readouterr().out
    assert f"h2o/uniform@24 [{tiny('h2o', 24)} B]:" in out
    assert f"snapkv/uniform@24 [{tiny('snapkv', 24)} B]:" in out
    assert _cli([*gen, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["kv_bytes"] for d in data] == [tiny("h2o", 24), tiny("snapkv", 24)]
