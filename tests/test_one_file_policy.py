"""A built-in method is its file and its line in the registry: nothing else is edited.

A copy of the library gets one new file, ``h2o/policies/decayed_h2o.py`` (the example policy,
declaring that a scored bank runs it, with its rule written once, as the compiled loops run it),
and its import and entry in ``registry.py``'s ``BUILT_IN``. A fresh interpreter that imports the
copy finds the method everywhere the library's own methods are: the registry, ``python -m h2o
bench``, a lock-step bank in the compiled loops (the same numbers as its instances), the
model's closed loop (a row of the row grammar) and the app's Step through and All policies
pages.

The README's example as it is (``examples/decayed_h2o.py``: no bank, no colour, no style named)
is also registered in this interpreter as a built-in, by patching ``BUILT_IN`` and the registry,
and passes what is cheap to check here: every fact's test, the policies' contract, the palette's
rule and the app's policy menus and All policies table."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

POLICY = '''"""Decayed H2O: H2O's sum, times a factor below one before each step's attention."""

from .base import ScoredPolicy


class DecayedH2O(ScoredPolicy):
    name = "decayed-h2o"
    label = "Decayed H2O"
    score_label = "decayed attention (x0.99 a step)"
    bank = "scored"  # lanes of it run together

    @staticmethod
    def rule(score, attn, n):
        for i in range(n):
            score[i] = 0.99 * score[i] + attn[i]
'''

#: What the fresh interpreter checks; it prints one JSON line of what it found.
PROBE = r"""
import contextlib, io, json, sys
from pathlib import Path

import numpy as np

import h2o
from h2o import analysis, cli
from h2o.bank import make_bank
from h2o.model import SmolLM
from h2o.model.answer import row_perplexity
from h2o.model.rows import Row
from h2o.policies.registry import POLICIES
from h2o.synthetic import canonical_trace

found = {"module": h2o.__file__}
cls = POLICIES["decayed-h2o"]
found["built_in"] = not getattr(cls, "custom", False)
found["lineup"] = [n for n, _ in analysis.standard_lineup(256)]

out = io.StringIO()
with contextlib.redirect_stdout(out):
    cli.main(["bench", "--trace", "canonical", "--json"])
found["bench"] = [r["label"] for r in json.loads(out.getvalue())["rows"]]

trace = canonical_trace()
specs = [cls(64, recent_window=w) for w in (8, 16)]
lanes = make_bank(specs).replay(trace, 32)
alone = [h2o.replay(cls(64, recent_window=w), trace, 32, record=False) for w in (8, 16)]
from h2o.bank.lane import lane_rule

found["compiled"] = lane_rule(cls(64, recent_window=8)) is not None
found["bank_same"] = all(
    np.array_equal(a.mass, b.mass) and np.array_equal(a.victim_pos, b.victim_pos)
    for a, b in zip(lanes, alone)
)

sys.path.insert(0, sys.argv[2])
from tiny_model import write_tiny_gguf

path = Path(sys.argv[1]) / "tiny.gguf"
write_tiny_gguf(path)
model = SmolLM.load(path)
ids = list(range(5, 45))
ppl, held = row_perplexity(model, ids, Row.parse("decayed-h2o@16:w4"))
full, _ = row_perplexity(model, ids, Row.parse("full"))
found["closed_loop"] = [Row.parse("decayed-h2o@16:w4").family, bool(np.isfinite(ppl)), ppl != full]

from streamlit.testing.v1 import AppTest
"""

APP = r"""
import app.painted

app.painted.SHORT_FIRST_RUN = False  # no browser to report a paint: pages drawn whole
at = AppTest.from_file(sys.argv[3], default_timeout=120)
at.run()
at.switch_page("views/step_through.py").run()
options = at.selectbox(key="w_policy_a").options
at.selectbox(key="w_policy_b").set_value("decayed-h2o").run()
step_errors = [e.value for e in at.exception] + [e.value for e in at.error]
at.switch_page("views/all_policies.py").run()
found["app"] = {
    "options": "decayed-h2o" in options,
    "step_errors": step_errors,
    "all_policies": [str(x) for x in at.dataframe[0].value["policy"]],
    "errors": [e.value for e in at.exception] + [e.value for e in at.error],
}
print("FOUND " + json.dumps(found))
"""


def _copy_with_the_new_method(dest: Path) -> Path:
    pkg = dest / "h2o"
    # numba's compiled loops are cached beside their files: copied with their times, they load
    shutil.copytree(ROOT / "h2o", pkg, ignore=shutil.ignore_patterns("*.pyc"))
    (pkg / "policies" / "decayed_h2o.py").write_text(POLICY)
    reg = pkg / "policies" / "registry.py"
    text = reg.read_text()
    anchor = "from .tova import TOVA\n"
    entry = ",\n)\nPOLICIES"  # the last line of BUILT_IN
    assert anchor in text and entry in text  # the registry as its docstring describes it
    text = text.replace(anchor, anchor + "from .decayed_h2o import DecayedH2O\n")
    text = text.replace(entry, ",\n    DecayedH2O,\n)\nPOLICIES")
    reg.write_text(text)
    return pkg


@pytest.mark.slow
def test_a_method_in_one_file_and_its_registry_line_is_everywhere(tmp_path):
    pkg = _copy_with_the_new_method(tmp_path / "lib")
    changed = sorted(
        str(p.relative_to(tmp_path / "lib"))
        for p in pkg.rglob("*.py")
        if not (ROOT / p.relative_to(tmp_path / "lib")).exists()
        or (ROOT / p.relative_to(tmp_path / "lib")).read_bytes() != p.read_bytes()
    )
    assert changed == ["h2o/policies/decayed_h2o.py", "h2o/policies/registry.py"]

    env = dict(os.environ)
    # the copy first, then the repository (for the app): `import h2o` finds the copy
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "lib"), str(ROOT)])
    argv = [str(tmp_path), str(ROOT / "tests"), str(ROOT / "app" / "main.py")]
    done = subprocess.run(
        [sys.executable, "-c", PROBE + APP, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("FOUND ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    found = json.loads(lines[-1][len("FOUND ") :])

    assert Path(found["module"]).is_relative_to(tmp_path)  # the copy ran, not the repository
    assert found["built_in"]
    assert found["lineup"][-1] == "decayed-h2o"
    assert "Decayed H2O (recent_window=32)" in found["bench"]
    assert found["compiled"] and found["bank_same"]  # its own rule, in the compiled loops
    assert found["closed_loop"] == ["Decayed H2O, window 4", True, True]
    app = found["app"]
    assert app["options"] and app["step_errors"] == [] and app["errors"] == []
    assert "Decayed H2O (recent_window=32)" in app["all_policies"]


def _readmes_example() -> type:
    """``examples/decayed_h2o.py``'s class, as the README shows it, imported as a module."""
    spec = importlib.util.spec_from_file_location(
        "decayed_h2o_built_in", ROOT / "examples" / "decayed_h2o.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DecayedH2O


def test_the_readmes_example_registered_as_a_built_in_passes_the_generic_tests(monkeypatch):
    import test_palette
    import test_policies
    import test_policy_facts as facts
    from streamlit.testing.v1 import AppTest

    import h2o
    from app.figures.base import EXTRA_COLOURS, EXTRA_STYLES, policy_colour, policy_style
    from h2o import analysis
    from h2o.policies import registry

    cls = _readmes_example()
    assert not any(cls.declares(f) for f in ("bank", "colour", "line_style"))  # the README's
    # (a library that already made it a built-in, as the how-to says, has it once, last)
    built_in = (*(c for c in registry.BUILT_IN if c.name != cls.name), cls)
    monkeypatch.setitem(registry.POLICIES, cls.name, cls)  # the line in BUILT_IN, its effects
    for module in (registry, analysis, facts, test_policies):
        monkeypatch.setattr(module, "BUILT_IN", built_in)
    assert h2o.POLICIES[cls.name] is cls and cls.name not in h2o.policies.custom_policies()

    # every fact by what it does (tests/test_policy_facts.py), for the new class as for the others
    facts.test_a_class_that_pins_no_sinks_pins_none(cls)
    facts.test_a_class_evicts_the_oldest_or_the_lowest_as_it_says(cls)
    facts.test_a_class_runs_in_the_bank_it_declares_with_its_instances_numbers(cls)
    assert analysis.standard_lineup(256)[-1] == (cls.name, {"recent_window": 32})
    facts.test_the_standard_lineup_is_every_built_in_class_at_the_settings_it_names(monkeypatch)
    monkeypatch.setattr(analysis, "BUILT_IN", built_in)  # that test adds one more: not here
    # the policies' shared contract (tests/test_policies.py)
    test_policies.test_registry_names()
    test_policies.test_contract_budget_respected_victims_ascending_and_gone(cls.name)
    test_policies.test_null_attention_is_accepted_and_admits(cls.name)
    # the palette's rule: the first spare colour and style, apart from every other in every vision
    test_palette.check_palette(built_in)
    assert policy_colour(cls.name) in EXTRA_COLOURS and policy_style(cls.name) in EXTRA_STYLES

    # the app's policy menus and the All policies table, as for any built-in
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
    at.run()
    at.switch_page("views/step_through.py").run()
    assert cls.name in at.selectbox(key="w_policy_a").options
    at.selectbox(key="w_policy_b").set_value(cls.name).run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    at.switch_page("views/all_policies.py").run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert "Decayed H2O (recent_window=32)" in list(at.dataframe[0].value["policy"])
