"""A ladder rates the match shapes it declares, through real workers: any other shape is an
``unsupported_match_shape`` dead letter and rates nobody."""

from __future__ import annotations

import pytest

from tests.integration.test_worker import match, ratings

pytestmark = pytest.mark.integration

EIGHT = [f"p{n}" for n in range(1, 9)]


def test_a_one_against_eight_match_on_the_sedma_ladder_is_a_dead_letter_and_rates_nobody(clean, publisher):
    """A 1 v 8 match published to the shipped ``sedma`` ladder (a 1v1 and 2v2
    card game) was applied, the lone player gaining 20 and each of the eight losing 20. It is now a
    dead letter naming the shape seen and the shapes allowed; a 2v1 and a three-sided free-for-all
    are refused too, while a 1v1 and a 2v2 of the same ladder are rated."""
    refused = [match("shape-1v8", "solo", EIGHT, ladder="sedma"),
               match("shape-2v1", ["t1", "t2"], "t3", ladder="sedma"),
               {"schema_version": 1, "match_id": "shape-ffa", "ladder": "sedma", "finished_at": "2026-05-01T12:00:00Z",
                "sides": [{"players": [{"player_id": f"f{n}"}], "placement": n} for n in (1, 2, 3)]}]
    rated = [match("shape-1v1", "ann", "bob", ladder="sedma"),
             match("shape-2v2", ["ann", "bob"], ["cat", "dan"], ladder="sedma")]
    for message in refused + rated:
        publisher(message)
    counts = clean.wait_drained(len(refused) + len(rated))
    assert (counts.applied, counts.dead_letters) == (2, 3)
    with clean.connect() as conn:
        dead = dict(conn.execute("SELECT match_id, reason_code FROM dead_letters").fetchall())
        detail = conn.execute("SELECT detail FROM dead_letters WHERE match_id = 'shape-1v8'").fetchone()[0]
        ledger = {r[0] for r in conn.execute("SELECT match_id FROM ledger")}
    assert dead == {"shape-1v8": "unsupported_match_shape", "shape-2v1": "unsupported_match_shape",
                    "shape-ffa": "unsupported_match_shape"}
    assert "1v8" in detail and "1v1, 2v2" in detail and "sedma" in detail
    assert ledger == {"shape-1v1", "shape-2v2"}
    assert {player for _, player in ratings(clean)} == {"ann", "bob", "cat", "dan"}
