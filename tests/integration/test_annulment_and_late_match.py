"""An annulment and late matches in one ladder share one correction path.

Real PostgreSQL, Redis and the session's two worker processes: the matches, the annulment
(a ``ratings.annul_matches`` message) and the late matches all go through the workers. The
reference is the engine's plain fold over the messages sorted by ``(finished_at, match_id)``
without the annulled match (:mod:`tests.reference_replay`): it never reads the store's order key,
its corrections or its history rows.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from worker.bootstrap import load_ladder_policies
from worker.ops.verify import verify_ladder
from worker.producer import producer_app, publish_annulment
from worker.settings import get_settings

from ..reference_replay import chronological_states
from .test_chronological import elo_message, run_cli, run_once, stored

# ann, ben, cid and dan on 2026-05-01; s3 is annulled; l1 and l2 arrive after s6, l1 finished
# before the annulled match, l2 after it, both before s4: each needs the matches after it re-rated,
# without s3, whichever of the annulment and the late matches commits first.
STORED = [elo_message("s1", "ann", "ben", 10), elo_message("s2", "ben", "cid", 11),
          elo_message("s3", "cid", "ann", 12), elo_message("s4", "ann", "dan", 13),
          elo_message("s5", "dan", "cid", 14), elo_message("s6", "ben", "dan", 15)]
LATE = [dict(elo_message("l1", "dan", "ann", 11), finished_at="2026-05-01T11:30:00Z"),
        dict(elo_message("l2", "cid", "ben", 12), finished_at="2026-05-01T12:30:00Z")]


@pytest.mark.parametrize("order", ["together", "annulment_first", "late_first"])
def test_an_annulment_beside_late_matches_gives_the_chronological_states_without_the_annulled_match(
        clean, publisher, order):
    """Six stored Elo matches, then the annulment of the third and two late matches (one finished
    before it, one after it), published together, or the annulment first, or the late matches
    first: the stored ratings equal the chronological replay of every match but the annulled one,
    ``verify`` (the function and ``ratings verify``) is exact, each player's events run without a
    gap to its stored rating, both late matches are flagged, and one ``annulment`` correction and
    at least one ``late`` correction are recorded."""
    run_once(clean, publisher, STORED)
    app = producer_app(clean.broker_url)

    def annulled() -> int:
        with clean.connect() as conn:
            return conn.execute("SELECT count(*) FROM annulments").fetchone()[0]

    def annul() -> None:
        publish_annulment(app, ["s3"], reason="disputed result", annulled_by="referee", queue=clean.queue)
        deadline = time.monotonic() + 60
        while annulled() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)

    if order == "annulment_first":
        annul()
    for message in LATE:
        publisher(message)
    if order == "late_first":
        clean.wait_drained(len(STORED) + len(LATE))
        annul()
    elif order == "together":
        annul()
    clean.wait_drained(len(STORED) + len(LATE))
    assert annulled() == 1

    rest = [m for m in STORED + LATE if m["match_id"] != "s3"]
    now = stored(clean)
    assert now == chronological_states(rest)
    with clean.connect() as conn:
        ladders = load_ladder_policies(get_settings())
        assert verify_ladder(conn, "elo", ladders["elo"].policy).ok
        late = {mid for (mid,) in conn.execute("SELECT match_id FROM ledger WHERE out_of_order")}
        kinds = [k for (k,) in conn.execute("SELECT kind FROM corrections ORDER BY id")]
        events = defaultdict(list)
        for (payload,) in conn.execute("SELECT payload FROM outbox"):
            events[(payload["ladder"], payload["player_id"])].append(payload)
    assert {"l1", "l2"} <= late  # (two workers may also commit a stored match after a later one)
    assert kinds.count("annulment") == 1 and kinds.count("late") >= 1
    for key, evs in events.items():
        evs.sort(key=lambda e: e["sequence"])
        assert [e["sequence"] for e in evs] == list(range(1, len(evs) + 1)), key
        assert evs[-1]["rating_after"] == now[key][0], key
    verify = run_cli("verify", "--ladder", "elo")
    assert verify.returncode == 0, verify.stdout + verify.stderr
