"""Huge upsets under margin-of-victory policies, through a real worker
(``docs/decisions/0003-every-valid-policy-rates-every-valid-match.md``).

FiveThirtyEight's NFL policy as shipped (``examples/fivethirtyeight-nfl.toml``, with six extra
teams in its ``[initial_ratings]``) and a ladder with ``autocorrelation = 0.01``: the underdog by
2,199 / 2,200 / 2,201 points (and by 220 under the second policy) wins 21-20 on neutral ground.
Before the fix these were +30,498 points, an ``internal_error`` dead letter (ZeroDivisionError)
and -30,498 points with a negative K. Now every match applies, the winner goes up with K >= 0,
every event is a valid RatingChanged v1, and ``ratings verify`` passes.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from schemas import RatingChanged
from worker.devtools.runtime import ServiceProcesses

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NFL_POLICY = ROOT / "examples" / "fivethirtyeight-nfl.toml"
GAPS = {"1": 2199, "2": 2200, "3": 2201}


@pytest.fixture(scope="module")
def upset_env(env, tmp_path_factory):
    """A worker of its own reading a ladders file with the two policies, on a queue of its own."""
    folder = tmp_path_factory.mktemp("upsets")
    nfl = NFL_POLICY.read_text()
    assert nfl.rstrip().splitlines()[-1].startswith("HOU = ")  # the file ends inside [initial_ratings]
    extra = "".join(f"DOG{i} = 1300.0\nFAV{i} = {1300.0 + gap}\n" for i, gap in GAPS.items())
    (folder / "nfl-upsets.toml").write_text(nfl.rstrip() + "\n" + extra)
    ladders = folder / "ladders.toml"
    ladders.write_text(
        '[ladders.nfl]\npolicy = "nfl-upsets.toml"\n\n'
        "[ladders.autocorr]\n"
        "k_factor = { constant = 20 }\n"
        "initial_rating = 1300\n"
        'margin_of_victory = { formula = "fivethirtyeight_nfl", autocorrelation = 0.01 }\n'
        "initial_ratings = { DOG = 1300.0, FAV = 1520.0 }\n"
    )
    queue = f"ratings-upsets-{uuid.uuid4().hex[:8]}"
    environ = dict(os.environ, RATINGS_LADDERS_FILE=str(ladders), RATINGS_QUEUE=queue, COLUMNS="200")
    procs = ServiceProcesses(environ, folder)
    procs.start_worker("upsets", concurrency=1)
    try:
        yield environ, queue
    finally:
        procs.stop_all()
        env.redis.delete(queue, f"_kombu.binding.{queue}")


def upset(match_id: str, ladder: str, dog: str, fav: str) -> dict:
    """``dog`` (side A) beats ``fav`` 21-20 on neutral ground (no ``home``)."""
    return {"schema_version": 1, "match_id": match_id, "ladder": ladder, "finished_at": "2026-01-04T21:00:00Z",
            "side_a": {"players": [{"player_id": dog}]}, "side_b": {"players": [{"player_id": fav}]},
            "outcome": "side_a_won", "score": {"side_a": 21, "side_b": 20}, "season": "2025"}


def test_huge_upsets_rate_the_winner_upward_through_the_worker_and_verify(clean, upset_env) -> None:
    """Four upsets apply (no dead letter), winners up and losers down by hand-computed amounts,
    K >= 0 in every row and event, and verify passes."""
    from worker.producer import producer_app, publish_match

    environ, queue = upset_env
    app = producer_app(clean.broker_url)
    messages = [upset(f"nfl-{i}", "nfl", f"DOG{i}", f"FAV{i}") for i in GAPS]
    messages.append(upset("autocorr-1", "autocorr", "DOG", "FAV"))
    for message in messages:
        publish_match(app, message, queue=queue)
    counts = clean.wait_drained(len(messages))
    assert (counts.applied, counts.dead_letters) == (len(messages), 0)

    # Both policies: K 20, winner's difference -gap (neutral), X = 0.001 * -gap + 2.2 (or
    # 0.01 * -220 + 2.2) <= 0.001, floored at 2.2 / 2 = 1.1; multiplier ln(1 + 1) * 2.2 / 1.1 = 2 ln 2;
    # K = 20 * 2 ln 2 = 27.725887; E_dog = 1 / (1 + 10^(gap / 400)).
    k = 20 * 2 * math.log(2)
    want = {}
    for i, gap in GAPS.items():
        e_dog = 1 / (1 + 10 ** (gap / 400))  # 3.18e-6, 3.16e-6, 3.14e-6
        want[("nfl", f"DOG{i}")] = 1300 + k * (1 - e_dog)  # 1327.72580
        want[("nfl", f"FAV{i}")] = 1300 + gap - k * (1 - e_dog)
    e_dog = 1 / (1 + 10 ** (220 / 400))  # 1 / (1 + 3.5481339) = 0.2198704
    want[("autocorr", "DOG")] = 1300 + k * (1 - e_dog)  # 1321.62979
    want[("autocorr", "FAV")] = 1520 - k * (1 - e_dog)  # 1498.37021

    with clean.connect() as conn:
        got = {(lad, pid): r for lad, pid, r in conn.execute("SELECT ladder, player_id, rating FROM players")}
        ks = [r[0] for r in conn.execute("SELECT k_factor FROM rating_changes")]
        events = [RatingChanged.model_validate(p) for (p,) in conn.execute("SELECT payload FROM outbox")]
    assert set(got) == set(want)
    for key, rating in want.items():
        assert got[key] == pytest.approx(rating, abs=1e-9), key
    assert got[("nfl", "DOG1")] == pytest.approx(1327.72580, abs=1e-5)
    assert got[("autocorr", "DOG")] == pytest.approx(1321.62979, abs=1e-5)
    assert len(ks) == 8 and all(x == pytest.approx(k, rel=1e-12) for x in ks)
    assert len(events) == 8 and all(e.k_factor >= 0 for e in events)
    assert all(e.delta > 0 for e in events if e.player_id.startswith("DOG"))
    assert all(e.delta < 0 for e in events if e.player_id.startswith("FAV"))

    verify = subprocess.run([sys.executable, "-m", "worker", "verify"], env=environ, capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "verify nfl:" in verify.stdout and "verify autocorr:" in verify.stdout
