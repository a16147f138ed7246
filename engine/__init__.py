"""Rating maths: pure functions on frozen dataclasses, standard library only."""

from engine.elo import expected_score
from engine.k_factor import SEDMA_K, BandedK, ConstantK
from engine.model import FreeForAll, Match, Outcome, Participant, Performance, PlayerState, RatingChange
from engine.policy import RatingPolicy, Rounding
from engine.rating import UnratableMatch, rate
from engine.sedma import SedmaAdjustment, calculate_new_ratings

__all__ = [
    "SEDMA_K",
    "BandedK",
    "ConstantK",
    "FreeForAll",
    "Match",
    "Outcome",
    "Participant",
    "Performance",
    "PlayerState",
    "RatingChange",
    "RatingPolicy",
    "Rounding",
    "SedmaAdjustment",
    "UnratableMatch",
    "calculate_new_ratings",
    "expected_score",
    "rate",
]
