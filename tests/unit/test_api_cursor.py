"""The leaderboard cursor: what it encodes comes back; anything else is refused as invalid_cursor."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.api.cursor import Cursor, InvalidCursor

moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2026, 1, 1), timezones=st.just(UTC))


@given(at=moments, generation=st.integers(0, 2**40), rating=st.floats(-1e6, 1e6, allow_nan=False),
       player=st.text(min_size=1, max_size=200), seen=st.integers(1, 10**7), unranked=st.sampled_from([None, False, True]),
       data=st.data())
def test_a_cursor_decodes_to_what_it_encoded(at, generation, rating, player, seen, unranked, data):
    """Any moment, generation, rating, player id (any text), position and unranked flag (ladders
    rated with uncertainty; ``None`` on Elo) round-trip exactly."""
    rank = data.draw(st.integers(1, seen))
    cursor = Cursor(at, generation, rating, player, seen, rank, unranked)
    assert Cursor.decode(cursor.encode()) == cursor


@given(st.text(max_size=300))
def test_any_other_text_is_refused_or_is_a_well_formed_cursor(token):
    """Arbitrary text never raises anything but InvalidCursor."""
    try:
        cursor = Cursor.decode(token)
    except InvalidCursor:
        return
    assert cursor.at.tzinfo is not None and 1 <= cursor.rank <= cursor.seen


def test_a_cursor_without_a_time_zone_or_with_a_rank_past_its_position_is_refused():
    """Hand-made cursors that this API would never issue are refused."""
    naive = Cursor(datetime(2026, 5, 1), 0, 1500.0, "p", 3, 1).encode()
    ahead = Cursor(datetime(2026, 5, 1, tzinfo=UTC) - timedelta(days=1), 0, 1500.0, "p", 3, 4).encode()
    for token in (naive, ahead, "", "not-a-cursor"):
        with pytest.raises(InvalidCursor):
            Cursor.decode(token)


def test_a_cursor_with_a_seventh_field_other_than_a_flag_or_an_eighth_is_refused():
    """The unranked flag is a JSON boolean or absent; a number there, or one field more, is refused."""
    import base64
    import json

    def token(fields: list) -> str:
        return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")

    base = ["2026-05-01T00:00:00+00:00", 0, 1500.0, "p", 3, 1]
    assert Cursor.decode(token([*base, True])).unranked is True
    for fields in ([*base, 1], [*base, True, False]):
        with pytest.raises(InvalidCursor):
            Cursor.decode(token(fields))


def _token(fields: list) -> str:
    """A hand-made cursor: base64url JSON of ``fields``, as a client could forge one."""
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


GOOD = ["2026-05-01T12:00:00+00:00", 3, 1500.0, "ann", 40, 38, None, "elo"]


def test_a_cursor_of_one_ladder_is_refused_on_another_and_one_without_a_ladder_where_one_is_asked():
    assert Cursor.decode(_token(GOOD), "elo").ladder == "elo"
    with pytest.raises(InvalidCursor):
        Cursor.decode(_token(GOOD), "glicko2")
    with pytest.raises(InvalidCursor):
        Cursor.decode(_token(GOOD[:6]), "elo")


@pytest.mark.parametrize(("index", "value"), [
    (0, "9999-12-31T23:59:59+00:00"),  # a moment no reading has had yet
    (0, "0001-01-01T00:00:00+00:00"),  # before this service existed
    (4, 10**20), (5, 10**20),  # positions no ladder has
    (4, 1e20), (5, 40.0),  # positions are integers, never floats
    (1, -1), (1, 2**63),  # outside a PostgreSQL bigint generation
    (2, "1500"), (3, ""), (3, "p" * 201), (7, ""), (7, "l" * 65), (6, "yes"),
])
def test_hand_made_cursors_out_of_bounds_are_refused(index, value):
    """Each field out of what the API issues (the bounds in worker.api.cursor) makes the cursor invalid."""
    fields = list(GOOD)
    fields[index] = value
    with pytest.raises(InvalidCursor):
        Cursor.decode(_token(fields))


def test_a_non_finite_rating_is_refused():
    text = '["2026-05-01T12:00:00+00:00",3,NaN,"ann",40,38]'
    with pytest.raises(InvalidCursor):
        Cursor.decode(base64.urlsafe_b64encode(text.encode()).decode())
