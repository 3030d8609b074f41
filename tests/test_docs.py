"""The documentation: the site (``mkdocs.yml``, ``docs/``) builds with ``mkdocs build --strict`` —
no broken link, anchor, snippet or API reference — and works offline; the README stays a front
page (short, its Quickstart commands real Makefile targets, its links resolving, its Python
running); and no page speaks of work sessions or of the project's tracker issues."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 120

#: Every Markdown file a reader sees: the README, the site's pages, and the files the site
#: includes (benchmarks/RESULTS.md, tests/README.md).
USER_FACING = [
    README,
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "benchmarks" / "RESULTS.md",
    ROOT / "tests" / "README.md",
]


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package is missing
        return True


#: The site's tools: mkdocs, its material theme, mkdocstrings and its Python handler.
_MISSING = [
    m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python") if _missing(m)
]

needs_mkdocs = pytest.mark.skipif(
    bool(_MISSING),
    reason=f"{', '.join(_MISSING)} not installed (pip install -e '.[docs]', or `make test`)",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    return res, out


# -- the site --------------------------------------------------------------------------------------
@needs_mkdocs
@pytest.mark.slow
def test_the_site_builds_strict_with_no_warning(site):
    res, out = site
    log = res.stdout + res.stderr
    warnings = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert res.returncode == 0 and not warnings, log
    assert (out / "index.html").is_file()


@needs_mkdocs
def test_the_site_loads_nothing_from_a_network(site):
    """No web fonts (``theme.font: false``), no script or stylesheet from a CDN."""
    _, out = site
    remote = re.compile(r"""<(?:script|link)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//""", re.I)
    offenders = {
        str(p.relative_to(out)): m.group(0)
        for p in out.rglob("*.html")
        for m in [remote.search(p.read_text(encoding="utf-8"))]
        if m
    }
    assert not offenders, offenders
    assert not any("fonts.googleapis" in p.read_text("utf-8") for p in out.rglob("*.css"))


@needs_mkdocs
def test_every_command_has_its_help_on_the_cli_page():
    from h2o.cli import build_parser

    (sub,) = build_parser()._subparsers._group_actions
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"<!-- cli-help: ?([a-z-]*) -->", page))
    assert listed == {"", *sub.choices}


# -- the README ------------------------------------------------------------------------------------
def test_the_readme_is_a_front_page():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES})"


def _section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README.md has no '## {title}' section"
    return m.group(1)


def test_the_quickstart_commands_are_makefile_targets():
    quick = _section(README.read_text(encoding="utf-8"), "Quickstart")
    commands = re.findall(r"^make ([\w-]+)", quick, re.M)
    assert commands, "the Quickstart names no make command"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    assert set(commands) <= targets, set(commands) - targets


def _links(text: str) -> list[str]:
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)


def test_every_relative_link_in_the_readme_resolves():
    broken = []
    for target in _links(README.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the page itself
        path = (ROOT / target.split("#", 1)[0]).resolve()
        if not path.exists() or ROOT not in path.parents:
            broken.append(target)
    assert not broken, broken


@pytest.mark.slow
def test_the_readmes_python_runs():
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    assert blocks
    res = subprocess.run(
        [sys.executable, "-c", "\n\n".join(blocks)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr


# -- the words -------------------------------------------------------------------------------------
#: Work-log phrasing and references to the project's own tracker. Upstream references
#: ("streamlit#8399") are preceded by a name, so ``#N`` counts only where no word comes before.
FORBIDDEN = {
    "a work session": re.compile(r"\bthis session\b", re.I),
    "a tracker issue": re.compile(r"\bissues? #?\d+\b", re.I),
    "a bare #N": re.compile(r"(?<![\w/.-])#\d+\b"),
    "a commit as history": re.compile(r"\bcommits? [0-9a-f]{7,40}\b", re.I),
}


@pytest.mark.parametrize("path", USER_FACING, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_speaks_of_sessions_or_tracker_issues(path):
    text = path.read_text(encoding="utf-8")
    found = [
        f"{what}: {m.group(0)!r} (line {text.count(chr(10), 0, m.start()) + 1})"
        for what, rx in FORBIDDEN.items()
        for m in rx.finditer(text)
    ]
    assert not found, found


#: The code whose docstrings, messages and labels users read (the API reference is built from the
#: docstrings; the app shows its strings).
CODE = sorted(p for d in ("h2o", "app", "examples") for p in (ROOT / d).rglob("*.py"))
#: A colour in code ("#444", "#665191") is not a tracker reference.
_COLOUR = re.compile(r"^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$")


def code_strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant of a module (docstrings, messages, labels), with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_docstring_or_message_speaks_of_sessions_or_tracker_issues():
    """The words the pages are held to, in the code's strings too: a student reads a docstring in
    the API reference and a message in the app."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}: {m.group(0)!r}"
        for path in CODE
        for line, text in code_strings(path)
        for what, rx in FORBIDDEN.items()
        for m in rx.finditer(text)
        if not (what == "a bare #N" and _COLOUR.match(m.group(0)))
    ]
    assert not found, found


def test_the_code_check_reads_strings_and_knows_a_colour(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Fixed in issue 12."""\nCOLOUR = "#444"\nsay = f"see #9992 {1}"\n')
    texts = [t for _, t in code_strings(module)]
    assert "Fixed in issue 12." in texts and "#444" in texts
    assert _COLOUR.match("#444") and _COLOUR.match("#665191") and not _COLOUR.match("#9992")
    assert any(FORBIDDEN["a bare #N"].search(t) for t in texts if not _COLOUR.match(t))


def test_the_word_checks_catch_what_they_should():
    bad = ["this session", "Issue 16", "issues 3", "see #16", "(#7)", "commit 2e4e57a"]
    good = ["streamlit#8399", "plotly.js#6920", "colour #cf4250", "[x](#lost-clicks)", "a session"]
    assert all(any(rx.search(s) for rx in FORBIDDEN.values()) for s in bad)
    assert not any(rx.search(s) for rx in FORBIDDEN.values() for s in good)
