"""The bench's rating-model comparison (worker/devtools/bench/service.py): the same matches on each
ladder, and ladders that rate every match the bench generates."""

from __future__ import annotations

from schemas import parse_match_finished
from worker.devtools.bench.cluster import service_matches
from worker.devtools.bench.service import MODEL_LADDERS, on_ladder
from worker.policy.ladders import load_ladders
from worker.policy.shapes import load_ladder_shapes, match_side_sizes
from worker.settings import DEFAULT_LADDERS_FILE


def test_each_copy_is_the_same_match_on_another_ladder_under_an_id_of_its_own() -> None:
    """Only the ladder and the match id change; the originals are left as they were."""
    matches = service_matches(20, seed=5, prefix="m", players=1000)
    before = [dict(m) for m in matches]
    copies = on_ladder(matches, "glicko2", "r1-glicko2-")
    assert matches == before
    for original, copy in zip(matches, copies, strict=True):
        assert copy["ladder"] == "glicko2" and copy["match_id"] == "r1-glicko2-" + original["match_id"]
        assert {k: v for k, v in copy.items() if k not in ("ladder", "match_id")} == {
            k: v for k, v in original.items() if k not in ("ladder", "match_id")}


def test_the_compared_ladders_are_shipped_and_rate_every_generated_match() -> None:
    """The Elo baseline first; every ladder of the comparison exists in the shipped ladders file and
    rates each shape the bench publishes (1v1 and 2v2), so no run is measured on dead letters."""
    assert MODEL_LADDERS[0] == "sedma"
    policies = load_ladders(DEFAULT_LADDERS_FILE)
    shapes = load_ladder_shapes(DEFAULT_LADDERS_FILE)
    matches = service_matches(200, seed=6, prefix="m", players=1000)
    sizes = {tuple(match_side_sizes(parse_match_finished(m))) for m in matches}
    assert sizes == {(1, 1), (2, 2)}
    for ladder in MODEL_LADDERS:
        assert ladder in policies
        assert all(shapes[ladder].allows(s) for s in sizes), ladder
