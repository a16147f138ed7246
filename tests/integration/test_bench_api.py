"""``ratings bench``'s read-API part in a tiny configuration: it completes and writes its figures.

No timing is asserted: the figures are for people (the bench prints them beside their same-run
baselines); this checks they are all there and that the rating path beside the API lost nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_the_bench_measures_the_api_beside_its_trivial_endpoint_and_the_rating_path(servers, tmp_path):
    """Only the API part (1 s per measurement, 2 clients): each request kind beside /health, no
    error answer, and the rating path at half load alone and with the API's load, nothing lost."""
    admin_url, broker_url = servers
    output = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
    env.update(RATINGS_DATABASE_URL=admin_url, RATINGS_BROKER_URL=broker_url, RATINGS_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.run(
        [sys.executable, "-m", "worker", "bench", "--skip-engine", "--skip-service", "--skip-ledger",
         "--producer-matches", "0", "--paired-rounds", "0", "--durability-matches", "0", "--matches", "200",
         "--players", "2000", "--workers", "1", "--api-seconds", "1", "--api-concurrency", "2",
         "--output", str(output)],
        env=env, capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    api = json.loads(output.read_text())["api"]
    assert (api["concurrency"], api["seconds_per_measurement"], api["workers"]) == (2, 1.0, 1)
    assert [p["kind"] for p in api["pairs"]] == ["single_lookup", "batch_100", "leaderboard_page"]
    for pair in api["pairs"]:
        for side in ("trivial", "measured"):
            figures = pair[side]
            assert figures["requests"] > 0 and figures["errors"] == 0, pair
            assert {"p50_ms", "p99_ms"} <= set(figures["latency"])
        assert pair["share_of_trivial_per_s"] == round(pair["measured"]["per_s"] / pair["trivial"]["per_s"], 3)
    assert api["players_looked_up_from"] >= 100
    rating = api["rating_path"]
    for run in ("alone", "with_api_load"):
        assert rating[run]["applied"] == rating[run]["messages"] > 0
    assert "read API" in proc.stdout and "rating path at half load" in proc.stdout
