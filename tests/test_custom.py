"""Your own policy from a file: the worked example end to end, and every kind of bad class
refused with a reason, leaving the registry as it was."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import h2o
from h2o import cli, custom

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = f"{ROOT / 'examples' / 'decayed_h2o.py'}:DecayedH2O"
MAIN = str(ROOT / "app" / "main.py")


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """Each test starts and ends with the built-in policies only, the example's name free: a
    library that makes the example one of its methods (docs/how-to/add-a-method.md) still loads
    the file as a reader's own policy here, as a clone of it would."""
    before = dict(h2o.POLICIES)
    monkeypatch.setattr(custom, "BUILTIN", tuple(n for n in custom.BUILTIN if n != "decayed-h2o"))
    h2o.POLICIES.pop("decayed-h2o", None)
    yield
    h2o.POLICIES.clear()
    h2o.POLICIES.update(before)


def test_the_example_loads_and_replays_like_a_built_in_policy():
    cls = custom.load_policy(EXAMPLE)
    assert h2o.POLICIES["decayed-h2o"] is cls and cls.custom
    rep = h2o.replay(cls(256, recent_window=32), h2o.canonical_trace(), record=False)
    plain = h2o.replay(h2o.H2O(256, recent_window=32), h2o.canonical_trace(), record=False)
    # Forgetting lets the band's older half compete with stale heavy hitters (chapter 4).
    assert rep.summary()["retained_mass"] > plain.summary()["retained_mass"] + 0.1
    spike = h2o.stale_spike_trace()
    decayed = h2o.replay(cls(8, recent_window=2), spike, record=False)
    summed = h2o.replay(h2o.H2O(8, recent_window=2), spike, record=False)
    assert decayed.summary()["retained_mass"] > summed.summary()["retained_mass"]
    assert custom.load_policy(EXAMPLE) is cls  # again: a lookup


def test_bench_and_sweep_take_a_policy_file(capsys):
    assert cli.main(["bench", "--trace", "toy", "--policy-file", EXAMPLE]) == 0
    assert "Decayed H2O (recent_window=" in capsys.readouterr().out
    args = ["sweep", "--policy", "decayed-h2o", "--windows", "1,3", "--trace", "toy"]
    assert cli.main([*args, "--policy-file", EXAMPLE]) == 0
    assert "Decayed H2O on toy" in capsys.readouterr().out
    assert cli.main(["bench", "--policy-file", "missing.py:X"]) == 2
    assert "error: --policy-file: 'missing.py' is not a Python file" in capsys.readouterr().err


BAD = {
    "not a policy": ("class P:\n    name = 'p'\n", "is not a subclass of h2o.policies.Policy"),
    "taken name": (
        "from h2o.policies.base import ScoredPolicy\n"
        "class P(ScoredPolicy):\n    name = 'h2o'\n    label = 'x'\n    score_label = 's'\n"
        "    def _accumulate(self, score, attn):\n        score += attn\n",
        "the name 'h2o' is taken",
    ),
    "bad name": (
        "from h2o.policies.base import ScoredPolicy\n"
        "class P(ScoredPolicy):\n    name = 'My Policy!'\n    label = 'x'\n    score_label = 's'\n",
        "must be a short slug",
    ),
    "no label": (
        "from h2o.policies.base import ScoredPolicy\n"
        "class P(ScoredPolicy):\n    name = 'p'\n    label = ''\n    score_label = 's'\n",
        "P.label must be a non-empty string",
    ),
    "crashes": (
        "from h2o.policies.base import ScoredPolicy\n"
        "class P(ScoredPolicy):\n    name = 'p'\n    label = 'x'\n    score_label = 's'\n"
        "    def _accumulate(self, score, attn):\n        raise KeyError('oops')\n",
        "failed a replay of the toy trace: KeyError",
    ),
    "descending victims": (
        "from h2o.policies.base import ScoredPolicy\n"
        "class P(ScoredPolicy):\n    name = 'p'\n    label = 'x'\n    score_label = 's'\n"
        "    def _accumulate(self, score, attn):\n        score += attn\n"
        "    def evict(self, budget=None):\n        return sorted(super().evict(budget), "
        "reverse=True)\n",
        "not ascending",
    ),
    "syntax": ("class P(:\n", "importing"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_policy_is_refused_with_its_reason(tmp_path, case):
    source, words = BAD[case]
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent(source))
    before = dict(h2o.POLICIES)
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        custom.load_policy(f"{path}:P")
    assert before == h2o.POLICIES


def test_the_app_lists_a_loaded_policy_and_survives_a_broken_one(monkeypatch, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('not today')\n")
    argv = ["app/main.py", "--policy", EXAMPLE, "--policy", f"{broken}:P"]
    monkeypatch.setattr(sys, "argv", argv)
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.switch_page("views/step_through.py").run()
    assert not at.exception, [e.value for e in at.exception]
    errors = " ".join(e.value for e in at.error)
    assert "Your policy was not loaded" in errors and "not today" in errors
    assert "decayed-h2o" in at.selectbox(key="w_policy_a").options
    at.selectbox(key="w_policy_b").set_value("decayed-h2o").run()
    assert not at.exception
    at.switch_page("views/all_policies.py").run()
    assert not at.exception
    assert "Decayed H2O (recent_window=32)" in list(at.dataframe[0].value["policy"])
