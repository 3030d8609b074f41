"""python -m h2o: bench and sweep."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from h2o import save_trace, toy_trace
from h2o.cli import main


def test_bench_prints_every_policy_and_the_oracle(capsys):
    assert main(["bench", "--trace", "toy"]) == 0
    out = capsys.readouterr().out
    for label in ("H2O", "Scissorhands", "TOVA", "StreamingLLM", "Sliding window", "Random"):
        assert label in out
    assert "oracle bound" in out and "budget 8" in out


def test_bench_json_on_a_trace_file(tmp_path, capsys):
    path = tmp_path / "toy.npz"
    save_trace(toy_trace(), path)
    assert main(["bench", "--trace", str(path), "--budget", "10", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["budget"] == 10 and data["trace"] == "toy"
    assert {r["policy"] for r in data["rows"]} >= {"h2o", "streaming-llm", "random"}
    assert all(0 <= r["retained_mass"] <= 1 for r in data["rows"])


def test_sweep_json(capsys):
    assert main(["sweep", "--trace", "toy", "--windows", "0:6:2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["recent_window"] for r in data["rows"]] == [0, 2, 4, 6]
    assert "streaming_llm" in data


def test_bad_input_is_an_error_message_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"garbage")
    assert main(["bench", "--trace", str(bad)]) == 2
    assert "error:" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "--windows", "a:b"])


def test_module_entry_point_and_help():
    out = subprocess.run(
        [sys.executable, "-m", "h2o", "bench", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for opt in ("--trace", "--budget", "--top-k", "--json"):
        assert opt in out


def test_a_budget_that_holds_the_whole_trace_is_refused(capsys):
    assert main(["bench", "--trace", "toy", "--budget", "64", "--json"]) == 2
    assert "choose a budget below 40" in capsys.readouterr().err
