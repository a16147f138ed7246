"""How a side of several players is reduced to one rating for the expected score."""

from __future__ import annotations

from collections.abc import Sequence


def side_rating(ratings: Sequence[float]) -> float:
    """Mean rating of a side (rating points). A one-player side's rating is that player's.

    Sedma is played 1v1 and 2v2; the seed defines only 1v1, so for a team the expected score uses
    the mean of the side's ratings (the convention of most team Elo systems, e.g. FAForever's
    team ladder before TrueSkill). Raises ``ValueError`` for an empty side.
    """
    if not ratings:
        raise ValueError("a side needs at least one player")
    if len(ratings) == 1:
        return ratings[0]
    return sum(ratings) / len(ratings)
