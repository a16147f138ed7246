"""The engine's import boundary: standard library only (``docs/decisions/0001-pure-engine-and-layers.md``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
ENGINE_DIR = REPO_ROOT / "engine"


def _imported_top_level_modules(path: Path) -> set[str]:
    """Top-level module names of every import statement in ``path`` (relative imports -> 'engine')."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: stays inside the engine package
                names.add("engine")
            else:
                names.add((node.module or "").split(".")[0])
    return names


def _dynamic_import_calls(path: Path) -> list[str]:
    """Calls of __import__ / importlib.import_module in ``path`` (imports the ast walk cannot name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in ("__import__", "import_module"):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_engine_package_has_python_modules_to_check():
    """The ast check has something to look at: engine/ holds the expected modules."""
    names = {p.name for p in ENGINE_DIR.glob("*.py")}
    assert {"__init__.py", "rating.py", "sedma.py", "elo.py"} <= names


def test_engine_imports_only_the_standard_library_and_itself():
    """Every import in engine/*.py names a stdlib module or the engine package itself."""
    offenders = {}
    for path in sorted(ENGINE_DIR.glob("*.py")):
        outside = {
            name
            for name in _imported_top_level_modules(path)
            if name != "engine" and name not in sys.stdlib_module_names
        }
        if outside:
            offenders[path.name] = sorted(outside)
    assert not offenders, f"engine modules import outside the standard library: {offenders}"


def test_engine_does_not_import_modules_dynamically():
    """engine/*.py never calls __import__ or importlib.import_module (which would dodge the ast check)."""
    calls = [call for path in sorted(ENGINE_DIR.glob("*.py")) for call in _dynamic_import_calls(path)]
    assert not calls, f"dynamic imports in engine: {calls}"


def test_import_linter_contracts_are_kept():
    """lint-imports from the venv keeps every contract in pyproject.toml (engine pure, schemas apart)."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"lint-imports exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
