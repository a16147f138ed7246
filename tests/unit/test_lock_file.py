"""requirements.lock against pyproject.toml, and the install commands that use it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#\\]+)", re.MULTILINE)


def lock_pins(lock_text: str) -> dict[str, str]:
    """The lock's ``name==version`` lines as a mapping of canonical name to version."""
    return {canonicalize_name(name): version for name, version in PIN.findall(lock_text)}


def lock_problems(pyproject_text: str, lock_text: str) -> list[str]:
    """Every requirement of ``[project] dependencies`` and of each optional list that the lock does
    not pin, or pins outside the requirement's range, one sentence each naming it.

    The project's references to its own extras are skipped (their requirements are checked where
    they are listed), as are requirements whose marker is false on this interpreter (the lock is
    resolved for Python 3.11 on Linux x86_64, like CI).
    """
    project = tomllib.loads(pyproject_text)["project"]
    own = canonicalize_name(project["name"])
    lists = {"dependencies": project["dependencies"], **{
        f"optional-dependencies.{extra}": reqs for extra, reqs in project["optional-dependencies"].items()}}
    pins = lock_pins(lock_text)
    problems = []
    for where, requirements in lists.items():
        for text in requirements:
            req = Requirement(text)
            name = canonicalize_name(req.name)
            if name == own or (req.marker is not None and not req.marker.evaluate()):
                continue
            pinned = pins.get(name)
            if pinned is None:
                problems.append(f"{req.name} ({where}: {text!r}) has no pinned line in {LOCK}")
            elif not req.specifier.contains(pinned, prereleases=True):
                problems.append(f"{req.name} ({where}: {text!r}) is pinned at {pinned} in {LOCK}, "
                                f"outside {req.specifier}")
    return problems


def test_every_requirement_of_pyproject_is_pinned_in_the_lock_within_its_range():
    """Each dependency and each extra's requirement has a pin in requirements.lock that its range
    allows; regenerate the lock (``docs/development/index.md``, "Supported versions and upgrading") when this fails."""
    problems = lock_problems((ROOT / "pyproject.toml").read_text(encoding="utf-8"),
                             (ROOT / LOCK).read_text(encoding="utf-8"))
    assert problems == [], "\n".join(problems)


def test_the_check_names_a_requirement_the_lock_does_not_pin():
    """A dependency added to pyproject without regenerating the lock is reported by name."""
    pyproject = ('[project]\nname = "demo"\ndependencies = ["celery[redis]>=5.7,<5.8", "newlib>=1"]\n'
                 '[project.optional-dependencies]\ntest = ["demo[extra]", "pytest>=8"]\n')
    lock = "celery==5.7.0\n    # via demo\npytest==8.4.1\n"
    assert lock_problems(pyproject, lock) == [
        "newlib (dependencies: 'newlib>=1') has no pinned line in requirements.lock"]


def test_the_check_names_a_pin_outside_the_requirements_range():
    """A range narrowed in pyproject (or a lock edited by hand) that leaves the pin outside it is
    reported with both."""
    pyproject = ('[project]\nname = "demo"\ndependencies = ["kombu>=5.7,<5.8"]\n'
                 '[project.optional-dependencies]\ntest = ["Py_Test>=8,<9"]\n')
    lock = "kombu==5.8.1\npy-test==9.0.0\n"
    assert lock_problems(pyproject, lock) == [
        "kombu (dependencies: 'kombu>=5.7,<5.8') is pinned at 5.8.1 in requirements.lock, outside <5.8,>=5.7",
        "Py_Test (optional-dependencies.test: 'Py_Test>=8,<9') is pinned at 9.0.0 in requirements.lock, "
        "outside <9,>=8",
    ]


def test_the_install_commands_of_the_readme_and_ci_install_from_the_lock():
    """Every editable install of the project in the README and in .ci/run passes the lock as a
    constraints file, so a fresh machine gets the versions the tests ran with."""
    for name in ("README.md", ".ci/run"):
        text = (ROOT / name).read_text(encoding="utf-8")
        commands = re.findall(r"pip install[^\n`]*-e '\.\[[^\n`]*", text)
        assert commands, f"no editable install command found in {name}"
        for command in commands:
            assert f"-c {LOCK}" in command, f"{name}: {command!r} does not install from {LOCK}"
