"""The set-up installs what was tested: every package pyproject.toml asks for (the app's and
every extra's but mutation testing's) is pinned in constraints.txt, the Makefile installs with
those pins, and this environment holds exactly the pinned versions — so a suite that passes here
passed on the versions a fresh ``make run`` / ``make test`` installs."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, ver = line.partition("==")
        assert sep, f"constraints.txt: {line!r} is not NAME==VERSION"
        pins[canonicalize_name(name)] = ver
    return pins


def _asked() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra, items in project["optional-dependencies"].items():
        if extra != "mutate":  # make mutate only, never part of make test or CI
            reqs += [Requirement(r) for r in items]
    return [r for r in reqs if r.marker is None or r.marker.evaluate()]


def test_every_package_asked_for_is_pinned_within_its_range():
    pins = _pins()
    for req in _asked():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt (make lock)"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject's {req}"
        )


def test_the_makefile_installs_with_the_pins():
    make = (ROOT / "Makefile").read_text()
    installs = [ln for ln in make.splitlines() if re.search(r"\bpip\b.*\binstall\b", ln, re.I)]
    assert any("-c constraints.txt" in ln for ln in installs)
    # every recipe line that installs into the project's .venv goes through $(INSTALL)
    raw = [ln for ln in make.splitlines() if ln.startswith("\t$(PIP) install")]
    assert not raw, f"an install without the pins: {raw}"


@pytest.mark.parametrize("req", _asked(), ids=lambda r: r.name)
def test_this_environment_holds_the_pinned_versions(req):
    pinned = _pins()[canonicalize_name(req.name)]
    try:
        have = version(req.name)
    except PackageNotFoundError:
        pytest.skip(f"{req.name} is not installed here (an extra this environment lacks)")
    assert have == pinned, f"{req.name} {have} installed, constraints.txt pins {pinned}"
