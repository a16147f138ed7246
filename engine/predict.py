"""What a rating model predicts for a proposed match."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Prediction:
    """A proposed match's outlook: ``win_probabilities`` one per side in the order given (each in
    [0, 1], summing to 1), ``draw_probability`` in [0, 1] or ``None`` where the model has none, and
    ``quality`` in [0, 1] (higher is a more even, more certain match; falls as deviations grow)."""

    win_probabilities: tuple[float, ...]
    draw_probability: float | None
    quality: float
