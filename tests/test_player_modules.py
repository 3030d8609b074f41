"""The player's JavaScript as ES modules: explicit imports, constants from Python, one bundle.

Each file under h2o/player/js/ imports what it uses from the others and exports what they use;
``constants.js`` is generated from h2o/player/constants.py, which the Python side reads too; the
bundle the app and the exported file run strips the imports into one scope. Node (where it is
installed) loads the modules as real ES modules and parses the bundle.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from app import state
from app.figures import base
from h2o import player
from h2o.player import constants

DECL = re.compile(r"^(export )?(?:const|let|function|class) ([A-Za-z_$][\w$]*)", re.M)


def code(text: str) -> str:
    """The text without comments and string literals (so names in prose are not uses)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"`(?:\\.|[^`\\])*`|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'", '""', text)


def modules() -> dict[str, str]:
    return {name: player.module_source(name) for name in player.JS_FILES}


def test_the_committed_constants_module_is_the_generated_one():
    assert constants.JS_FILE.read_text(encoding="utf-8") == constants.js_module()


def test_python_reads_the_same_constants():
    assert state.CHOICES[state.SPEED] == constants.SPEEDS
    assert constants.COLOURS["oracle"] == base.ORACLE_COLOUR
    assert constants.COLOURS["plotBg"] == base.PLOT_BG
    assert base.ColourScale(1.0).decades == constants.LOG_DECADES


def test_every_import_is_an_earlier_modules_export_and_every_use_is_imported():
    mods = modules()
    exported = {n: {m[2] for m in DECL.finditer(src) if m[1]} for n, src in mods.items()}
    declared = {n: {m[2] for m in DECL.finditer(src)} for n, src in mods.items()}
    order = list(mods)
    for i, (name, src) in enumerate(mods.items()):
        imported: set[str] = set()
        for names, source in player.IMPORT_LINE.findall(src):
            assert source in order[:i], f"{name} imports {source}, not an earlier module"
            want = {x.strip() for x in names.split(",")}
            assert want <= exported[source], f"{name}: {want - exported[source]} not in {source}"
            imported |= want
        body = code(player.IMPORT_LINE.sub("", src))
        for other in order:
            if other == name:
                continue
            for n in exported[other] - declared[name]:
                used = re.search(rf"(?<![\w$.]){re.escape(n)}(?![\w$])", body)
                assert not used or n in imported, f"{name} uses {n} of {other} without importing it"


def test_the_bundle_is_one_scope_with_no_import_or_export_left():
    js = player.bundle()
    assert not re.search(r"^\s*(import|export) ", js, re.M)
    assert js.startswith("var H2OPlayer = (function () {")


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_node_loads_the_modules_and_parses_the_bundle(tmp_path):
    for name, src in modules().items():
        (tmp_path / name).write_text(src, encoding="utf-8")
    probe = (
        f'import("{(tmp_path / "player.js").as_uri()}").then((m) => {{'
        ' if (typeof m.Player !== "function") process.exit(3); });'
    )
    done = subprocess.run([NODE, "--input-type=module", "-e", probe], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    (tmp_path / "bundle.js").write_text(player.bundle() + "H2OPlayer.decode;\n", "utf-8")
    done = subprocess.run([NODE, "--check", str(tmp_path / "bundle.js")], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
