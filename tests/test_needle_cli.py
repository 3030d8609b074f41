"""``python -m h2o needle`` and ``python -m h2o frontier``: argument checks (exit 2,
the argument named, nothing written), the stand-in grid with its meta sidecar, the missing Dask
extra, and the frontier on the tiny GGUF of ``tiny_model.py``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from h2o.cli import main
from h2o.needle.cells import cell_needles, stand_in_cell
from h2o.needle.results import read_lines

STAND_IN = ["needle", "--stand-in", "--quiet"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rows", "full,bogus"], "--rows: cannot read row 'bogus'"),
        (["--rows", "h2o@128,h2o@0128"], "--rows: "),
        (["--rows", ""], "--rows"),
        (["--lengths", "512,abc"], "--lengths takes comma-separated integers"),
        (["--lengths", "32"], "--lengths: 32 is outside 64..8192"),
        (["--lengths", "512,512"], "--lengths repeats a value"),
        (["--depths", "120"], "--depths: 120 is outside 0..100"),
        (["--depths", ","], "--depths is empty"),
        (["--needles", "0"], "--needles must be 1..24"),
        (["--needles", "25"], "--needles must be 1..24"),
        (["--max-new", "0"], "--max-new must be >= 1"),
        (["--workers", "0"], "--workers must be >= 1"),
    ],
)
def test_bad_needle_arguments_exit_2_naming_the_argument(tmp_path, capsys, args, message):
    out = tmp_path / "g.jsonl"
    assert main([*STAND_IN, "--out", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_out_must_be_a_jsonl_file(tmp_path, capsys):
    assert main([*STAND_IN, "--out", str(tmp_path / "g.json")]) == 2
    assert "--out must name a .jsonl file" in capsys.readouterr().err
    assert main([*STAND_IN, "--out", str(tmp_path)]) == 2  # a directory
    assert "--out must name a .jsonl file" in capsys.readouterr().err


def test_workers_and_a_dask_scheduler_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([*STAND_IN, "--out", str(tmp_path / "g.jsonl"), "--workers", "2",
              "--dask-scheduler", "tcp://127.0.0.1:1"])  # fmt: skip
    assert e.value.code == 2
    assert "--dask-scheduler: not allowed with argument --workers" in capsys.readouterr().err


def test_a_missing_dask_names_the_cluster_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    out = tmp_path / "g.jsonl"
    assert main([*STAND_IN, "--out", str(out), "--dask-scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "--dask-scheduler needs dask.distributed" in err and "h2o[cluster]" in err
    assert not out.exists()


@pytest.mark.slow
def test_an_unreachable_scheduler_is_a_clear_error(tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("h2o.needle.grid.CONNECT_TIMEOUT", "2s")
    out = tmp_path / "g.jsonl"
    assert main([*STAND_IN, "--out", str(out), "--dask-scheduler", "tcp://127.0.0.1:9"]) == 2
    assert "cannot reach a scheduler at 'tcp://127.0.0.1:9'" in capsys.readouterr().err


def test_the_stand_in_grid_and_its_meta(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    args = ["--rows", "full,h2o@128", "--lengths", "512,1024", "--depths", "0,50", "--needles", "2"]
    assert main(["needle", "--stand-in", "--out", str(out), "--workers", "2", *args]) == 0
    err = capsys.readouterr().err
    assert "[16/16]" in err and "h2o@128 L=1024 d=50" in err  # progress, one line per cell
    lines = read_lines(out, resume=True).records
    want = [
        {"row": r, "length": n, "depth": d, "needle": nd, "model": None}
        for r in ("full", "h2o@128")
        for n in (512, 1024)
        for d in (0, 50)
        for nd in cell_needles(n, d, 2)
    ]
    assert lines == [stand_in_cell(s) for s in want]
    meta = json.loads(Path(str(out) + ".meta.json").read_text())
    for key in ("command", "wall_seconds", "cells", "machine", "lengths", "depths", "rows"):
        assert key in meta
    assert meta["cells"] == 16 and meta["rows"] == ["full", "h2o@128"]
    assert meta["lengths"] == [512, 1024] and meta["depths"] == [0, 50]
    assert meta["command"] == (
        "python -m h2o needle --rows full,h2o@128 --lengths 512,1024 --depths 0,50 --needles 2 "
        f"--stand-in --out {out} --workers 2"
    )
    # A second run adds its own entry; the wall time is the sum of the runs'.
    assert main(["needle", "--stand-in", "--quiet", "--out", str(out), *args]) == 0
    meta2 = json.loads(Path(str(out) + ".meta.json").read_text())
    assert len(meta2["runs"]) == 2 and meta2["runs"][1]["computed"] == 0
    assert meta2["runs"][1]["skipped"] == 16
    total = sum(r["wall_seconds"] for r in meta2["runs"])
    assert meta2["wall_seconds"] == pytest.approx(total, abs=0.11)


def test_rows_are_written_by_their_canonical_label(tmp_path):
    out = tmp_path / "g.jsonl"
    assert main([*STAND_IN, "--out", str(out), "--rows", " h2o@0128", "--lengths", "512"]) == 0
    assert {x["row"] for x in read_lines(out, resume=True).records} == {"h2o@128"}
    # ... so that the same row spelled another way is the same cell: nothing is recomputed.
    before = out.read_bytes()
    assert main([*STAND_IN, "--out", str(out), "--rows", "h2o@128", "--lengths", "512"]) == 0
    assert out.read_bytes() == before


# -- frontier ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tokens", "1"], "--tokens must be 2..8192"),
        (["--text", "/no/such/file.txt"], "--text: no such file"),
        (["--rows", "snapkv@128"], "--rows: no row left that has a perplexity"),
        (["--rows", "h2o@12x"], "--rows: cannot read row"),
    ],
)
def test_bad_frontier_arguments_exit_2(tmp_path, capsys, args, message):
    out = tmp_path / "f.jsonl"
    assert main(["frontier", "--quiet", "--out", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_text_that_is_not_utf8_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00abc")
    assert (
        main(["frontier", "--quiet", "--out", str(tmp_path / "f.jsonl"), "--text", str(bad)]) == 2
    )
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_the_frontier_on_the_tiny_model(tmp_path, tiny_path, capsys):
    from tiny_model import HD, NKV, NL

    from h2o.model import SmolLM
    from h2o.needle.haystack import TEXTS_DIR

    out = tmp_path / "f.jsonl"
    text = TEXTS_DIR / "lighthouse.txt"
    rows = "full,h2o@64,snapkv@64,kivi4"
    argv = ["frontier", "--rows", rows, "--tokens", "200", "--model", tiny_path, "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "snapkv@64 left out" in err
    lines = read_lines(out, resume=True).records
    assert [x["row"] for x in lines] == ["full", "h2o@64", "kivi4"]
    model = SmolLM.load(tiny_path)
    ids = model.encode(text.read_text(encoding="utf-8"))[:200]
    full = lines[0]
    assert full["perplexity"] == pytest.approx(model.perplexity(ids), abs=1e-4)
    assert full["kv_bytes"] == NL * NKV * 200 * 2 * HD * 2  # keys and values, float16
    for x in lines:
        assert x["text"] == "lighthouse.txt" and x["tokens"] == 200
        assert math.isfinite(x["perplexity"])
        assert x["kv_bytes_per_token"] == pytest.approx(x["kv_bytes"] / 200, abs=1e-3)
    assert lines[1]["kv_bytes"] < full["kv_bytes"] and lines[2]["kv_bytes"] < full["kv_bytes"]
    meta = json.loads(Path(str(out) + ".meta.json").read_text())
    assert meta["rows"] == ["full", "h2o@64", "kivi4"] and meta["cells"] == 3


def test_the_summary_counts_each_rows_right_answers(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    args = ["--rows", "full,kivi4", "--lengths", "512,1024", "--depths", "0,50,100"]
    assert main([*STAND_IN, "--out", str(out), *args]) == 0
    printed = capsys.readouterr().out.splitlines()
    lines = read_lines(out, resume=True).records
    partial = []
    for row, text in zip(("full", "kivi4"), printed, strict=True):
        xs = [x for x in lines if x["row"] == row]
        right = sum(x["correct"] for x in xs)
        partial.append(0 < right < len(xs))
        mean = sum(x["logprob"] for x in xs) / len(xs)
        assert text.split() == [
            row,
            f"{right}/{len(xs)}",
            "right",
            "mean",
            "log-prob",
            f"{mean:.2f}",
        ]
    assert any(partial)  # the stand-in answers some cells wrong: the count is not trivially all
