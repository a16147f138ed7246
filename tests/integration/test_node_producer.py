"""A non-Python Celery client is heard: celery-node (npm) publishes 1,000 matches, all applied.

celery-node 0.5.9 is pinned in ``tests/node/package.json`` (lock file committed) and installed with
``npm ci`` by ``.ci/run`` (or by this test when ``node_modules`` is missing). Node.js runs
``tests/node/publish.js``, which pushes Celery protocol 2 messages of its own making (headers
``lang: js``, base64 body, no ``argsrepr``) onto the session's real Redis queue; the session's
real Celery workers apply them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.npm import npm_ci

pytestmark = [pytest.mark.integration, pytest.mark.redis_broker]  # tests the Redis broker itself: not run on the RabbitMQ pass

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
MATCHES = 1000


@pytest.fixture(scope="module")
def node() -> str:
    """The node executable, with tests/node's pinned packages installed."""
    return npm_ci(NODE_DIR)


def test_celery_node_publishes_1000_matches_and_every_one_is_applied(clean, node):
    """1,000 1v1 matches from celery-node: 1,000 ledger rows, no dead letter, no duplicate, 2,000 events."""
    done = subprocess.run([node, "publish.js", clean.broker_url, clean.queue, str(MATCHES), "node"], cwd=NODE_DIR,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and f"published {MATCHES}" in done.stdout, done.stderr
    counts = clean.wait_drained(MATCHES, timeout=300)
    assert (counts.applied, counts.duplicates, counts.dead_letters) == (MATCHES, 0, 0)
    with clean.connect() as conn:
        ids = {r[0] for r in conn.execute("SELECT match_id FROM ledger").fetchall()}
        games = conn.execute("SELECT sum(games_played) FROM players WHERE ladder = 'elo'").fetchone()[0]
    assert ids == {f"node-{i}" for i in range(MATCHES)} and games == 2 * MATCHES
