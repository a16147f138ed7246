"""``ratings evaluate``: replay one ladder's history under several rating policies and score them.

A *history* is a ladder's matches in order: the ledger in PostgreSQL (in the ladder's replay
order), the international football CSV, or a JSON Lines file of MatchFinished messages. Each
policy replays the whole history from its own initial ratings
(:func:`engine.replay.replay_changes`), one match at a time and all policies in step, so the
history is read once and never held in memory.

For each policy the report gives:

* **prediction quality** of side A's expected score E (the prediction made *before* the match)
  against side A's result s (1 win, 0.5 draw, 0 loss): mean log loss, mean Brier score and the
  accuracy on decisive matches (:func:`log_loss_term`, :func:`brier_term`, :func:`accuracy`);
  the first ``skip_first`` matches (the burn-in, while every rating is still its initial value)
  can be left out of these three;
* **inflation**: the mean rating of every player rated so far, its drift from the initial rating at
  the end, and a drift series over time (per calendar year or per N matches);
* how often the policy's **rating floor** and the **400-point cap** of the expected score were hit
  (share of matches);
* the final **rating distribution** (:func:`rating_distribution`);
* optionally one player's rating after each of their matches.

``ratings evaluate --models`` compares the rating models instead (Elo, Glicko-2, Weng-Lin) on
the shipped real data (:mod:`.datasets`): each tuned on the earlier half of a data set and scored
on the later half by mean log10 deviance, log loss, Brier score and calibration (:mod:`.scoring`,
:mod:`.tuning`, :mod:`.comparison`, :mod:`.home`).

The metric functions are pure and take plain numbers; :class:`PolicyEvaluation` accumulates them
over a replay (:mod:`.accumulate`); :func:`evaluate` runs the replays (:mod:`.run`); the history
sources (:mod:`.sources`), the charts (:mod:`.charts`) and the table (:mod:`.table`) have modules of
their own. This package re-exports every name.
"""

from worker.ops.evaluate.accumulate import (  # noqa: F401
    DriftPoint,
    HistoryItem,
    LabelledPolicy,
    PlayerPoint,
    PolicyEvaluation,
    PolicyReport,
    RunningSum,
    describe_policy,
)
from worker.ops.evaluate.charts import (  # noqa: F401
    _legend,
    _player_axes,
    _x_of,
    draw_calibration_chart,
    draw_drift_chart,
    draw_player_chart,
)
from worker.ops.evaluate.comparison import (  # noqa: F401
    MODEL_SPECS,
    ModelComparison,
    ModelResult,
    ModelSpec,
    compare_models,
)
from worker.ops.evaluate.datasets import DataSet, football_data, nfl_data  # noqa: F401
from worker.ops.evaluate.home import HomeAdvantage  # noqa: F401
from worker.ops.evaluate.metrics import (  # noqa: F401
    DEFAULT_DRIFT_EVERY,
    DEVIANCE_CLAMP,
    FLAT_DRIFT,
    MAX_DRIFT_POINTS,
    MIN_YEARS_FOR_YEARLY_DRIFT,
    PROBABILITY_CLIP,
    SIDE_A_SCORE,
    RatingDistribution,
    accuracy,
    brier_term,
    clip_probability,
    deviance_term,
    log_loss_term,
    mean_and_std,
    mean_brier_score,
    mean_log_loss,
    prediction_credit,
    quantile,
    rating_distribution,
)
from worker.ops.evaluate.run import (  # noqa: F401
    DEFINITIONS,
    EvaluationReport,
    drift_period,
    evaluate,
)
from worker.ops.evaluate.scoring import CalibrationBin, Scorecard, Scores  # noqa: F401
from worker.ops.evaluate.sources import (  # noqa: F401
    SkippedLines,
    _parse_time,
    count_lines,
    first_ladder,
    football_history,
    is_football_csv,
    jsonl_history,
    ledger_history,
)
from worker.ops.evaluate.table import (  # noqa: F401
    COMPARISON_NOTES,
    NOTES,
    _num,
    _share,
    comparison_table,
    comparison_verdicts,
    report_table,
)
from worker.ops.evaluate.tuning import coordinate_search, replay_scores, side_a_expected  # noqa: F401
