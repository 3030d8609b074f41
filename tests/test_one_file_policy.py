"""A built-in method is its file and its line in the registry: nothing else is edited.

A copy of the library gets one new file, ``h2o/policies/decayed_h2o.py`` (the example policy,
declaring that a scored bank runs it, with its rule written once, as the compiled loops run it),
and its import and entry in ``registry.py``'s ``BUILT_IN``. A fresh interpreter that imports the
copy finds the method everywhere the library's own methods are: the registry, ``python -m h2o
bench``, a lock-step bank in the compiled loops (the same numbers as its instances), the
model's closed loop (a row of the row grammar) and the app's Step through and All policies
pages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

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
