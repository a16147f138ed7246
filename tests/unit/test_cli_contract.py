"""The ``ratings`` command line's contract with operators, without servers: ``--version``, the
help grouped by who uses each command, and exit codes with one meaning each (0 ok, 1 findings,
2 usage, 3 environment not ready), run as a user runs it (a subprocess)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ratings(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m worker ARGS`` with no RATINGS_ setting but those given."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
    return subprocess.run([sys.executable, "-m", "worker", *args], env={**base, "COLUMNS": "200", **env},
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_version_prints_the_version_of_the_project_file():
    """``ratings --version``: ``ratings`` and the version pyproject.toml declares, exit 0."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    done = ratings("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ratings {declared}"


PANELS = {
    "Service": {"migrate", "worker", "relay", "api"},
    "Operations": {"doctor", "verify", "publish", "rebuild", "rebuilds", "dead-letters", "events", "outbox"},
    "Ladders and organisers": {"leaderboard", "history", "export", "import", "annul", "policy", "predict"},
    "Development and evaluation": {"evaluate", "check-published", "generate", "import-football", "demo", "bench"},
}


def test_help_groups_every_command_under_the_people_who_use_it():
    """``ratings --help`` shows four panels (service, operations, ladders and organisers,
    development) holding each command once, and no command outside them."""
    done = ratings("--help")
    assert done.returncode == 0, done.stderr
    panel, seen = None, {}
    for line in done.stdout.splitlines():
        heading = re.match(r"\s*╭─ ([^:─]+?)(?::.*?)? ─", line)
        if heading:
            panel = heading.group(1).strip()
            continue
        row = re.match(r"\s*│ ([a-z][a-z-]*)\s{2,}\S", line)
        if row and panel not in (None, "Options"):
            seen.setdefault(panel, set()).add(row.group(1))
    assert seen == PANELS


@pytest.mark.parametrize("args", [
    ["leaderboard", "--ladder", "elo", "--no-such-option"],  # click's own usage error
    ["doctor", "--max-queue-depth", "many"],  # a value click refuses
    ["leaderboard", "--ladder", "chess"],  # a ladder the ladders file does not configure
    ["verify", "--ladder", "chess", "--json"],
    ["events", "read", "--ladder", "chess"],
    ["events", "snapshot", "--ladder", "chess"],
    ["predict", "sedma", "--side", "a,b", "--side", "c"],  # a shape the ladder does not rate
    ["evaluate"],  # options that do not go together: no history named
])
def test_a_wrong_command_line_exits_2(args):
    """Usage errors, click's and the commands' own, exit 2 before any server is needed."""
    done = ratings(*args)
    assert done.returncode == 2, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [
    ["leaderboard", "--ladder", "elo"],
    ["history", "ann", "--ladder", "elo", "--json"],
    ["verify", "--json"],
    ["dead-letters", "list", "--json"],
    ["relay"],
    ["migrate"],
])
def test_a_command_without_its_database_url_exits_3_not_ready(args):
    """No RATINGS_DATABASE_URL: one line naming it, exit 3 (the environment, not the command)."""
    done = ratings(*args)
    assert done.returncode == 3, (args, done.stdout, done.stderr)
    assert "RATINGS_DATABASE_URL is not set" in done.stderr and "Traceback" not in done.stderr


def test_invalid_settings_and_a_broken_ladders_file_exit_3(tmp_path):
    """A setting pydantic refuses and a ladders file that does not validate are the environment's
    faults: exit 3 naming the variable, and the file's key."""
    bad_url = ratings("leaderboard", "--ladder", "elo", RATINGS_DATABASE_URL="mysql://u@db/x")
    assert bad_url.returncode == 3 and "RATINGS_DATABASE_URL" in bad_url.stderr, bad_url.stderr
    broken = tmp_path / "ladders.toml"
    broken.write_text("[ladders.elo]\nk_factor = { constant = -1 }\n")
    done = ratings("policy", "show", RATINGS_LADDERS_FILE=str(broken))
    assert done.returncode == 3 and "ladders file error" in done.stderr, done.stderr


def test_an_unreachable_database_exits_3():
    """A URL set but no server answering: exit 3 with one line, not a traceback."""
    done = ratings("leaderboard", "--ladder", "elo",
                   RATINGS_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def _exit_codes_in(path: Path) -> list[tuple[int, str]]:
    """``(line, source)`` of every ``typer.Exit(...)`` / ``SystemExit(...)`` call in ``path`` whose
    argument is an integer literal other than 0."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = ast.unparse(node.func)
            if name in ("typer.Exit", "SystemExit", "Exit", "sys.exit") and node.args[0].value not in (0, None):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_every_exit_of_the_cli_names_its_meaning():
    """Each exit of the CLI modules goes through :class:`worker.cli.common.ExitCode`, so its code
    has one meaning; the one literal left is Python's own status for an internal error."""
    literal = {str(p.relative_to(ROOT)): _exit_codes_in(p) for p in sorted((ROOT / "worker" / "cli").glob("*.py"))}
    literal = {k: v for k, v in literal.items() if v}
    assert literal == {"worker/cli/main.py": [(literal["worker/cli/main.py"][0][0], "SystemExit(1)")]}
