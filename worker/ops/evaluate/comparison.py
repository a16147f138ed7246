"""``ratings evaluate --models``: Elo, Glicko-2 and the Weng-Lin models side by side on real data.

For each data set (:mod:`.datasets`) and each model:

1. **tune** on the earlier half: Elo chooses among the shipped policy files
   (``examples/policies/*.toml`` and ``examples/fivethirtyeight-nfl.toml``), each replayed; a model
   with uncertainty searches a small grid of its parameters (:data:`MODEL_SPECS`,
   :func:`worker.ops.evaluate.tuning.coordinate_search`), each point replayed over the earlier
   half; the criterion is the mean log10 deviance;
2. **score** on the later half: the chosen parameters replay the whole data set (ratings carried
   over from the earlier half) and every match of the later half is scored before it is rated.

A source's own published forecasts (FiveThirtyEight's ``elo_prob1``) are scored on the same later
half as a baseline. The best model of a data set is the one with the lowest later-half deviance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.policy import AnyPolicy
from worker.ops.evaluate.datasets import DataSet
from worker.ops.evaluate.scoring import Scorecard, Scores
from worker.ops.evaluate.tuning import Parameters, Trial, coordinate_search, replay_scores

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SHIPPED_ELO_POLICIES = (
    *sorted((EXAMPLES / "policies").glob("*.toml")),
    EXAMPLES / "fivethirtyeight-nfl.toml",
)
"""The Elo policy files shipped with the repository, Elo's candidates."""


@dataclass(frozen=True)
class ModelSpec:
    """How a model with uncertainty is tuned: ``build`` makes its policy from parameters;
    ``start`` holds every parameter's starting value (the engine's defaults); ``grid`` the values
    tried for each tuned parameter (the others stay at ``start``)."""

    model: str
    build: Callable[[Parameters], AnyPolicy]
    start: Parameters
    grid: Mapping[str, Sequence[Any]]


def _glicko2(parameters: Parameters) -> AnyPolicy:
    from engine.glicko2 import Glicko2Policy

    return Glicko2Policy(**parameters)


def _weng_lin(model: str) -> Callable[[Parameters], AnyPolicy]:
    def build(parameters: Parameters) -> AnyPolicy:
        from engine.weng_lin import WengLinPolicy

        return WengLinPolicy(model=model, **parameters)

    return build


MODEL_SPECS: tuple[ModelSpec, ...] = ()
"""The models with uncertainty compared with Elo, and their search grids (filled in below)."""


@dataclass(frozen=True)
class ModelResult:
    """One model on one data set: ``label`` names the policy (an Elo policy file's stem, or the
    model); ``parameters`` those chosen on the earlier half; ``tuning`` the earlier half's scores
    with them, ``evaluation`` the later half's; ``trials`` how many candidates were replayed."""

    data_set: str
    model: str
    label: str
    parameters: dict[str, Any]
    tuning: Scores
    evaluation: Scores
    trials: int


@dataclass(frozen=True)
class Baseline:
    """A source's own published forecasts scored on the later half (e.g. FiveThirtyEight)."""

    data_set: str
    label: str
    evaluation: Scores


@dataclass(frozen=True)
class DataSetSummary:
    """What a data set held: ``matches`` in all, ``split`` the first match of the later half
    (0-based; the later half is matches ``split + 1`` to ``matches`` counted from 1), and the dates
    of its first match, of the later half's first, and of its last (ISO 8601)."""

    name: str
    source: str
    matches: int
    split: int
    first: str
    later_from: str
    last: str


@dataclass
class ModelComparison:
    """The result of :func:`compare_models`: per data set, one :class:`ModelResult` per model
    (``results``), every shipped Elo policy's scores (``elo_policies``, Elo's candidates), the
    published baselines, and the wall time in ``seconds``."""

    data_sets: list[DataSetSummary]
    results: list[ModelResult]
    elo_policies: list[ModelResult]
    baselines: list[Baseline]
    seconds: float = 0.0
    trials: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def best(self, data_set: str) -> ModelResult:
        """The model of ``data_set`` with the lowest later-half deviance (the earlier in
        ``results`` on a tie). Raises ``ValueError`` when the data set has no result."""
        rows = [r for r in self.results if r.data_set == data_set]
        if not rows:
            raise ValueError(f"no result for data set {data_set!r}")
        return min(rows, key=lambda r: r.evaluation.deviance)

    def to_json(self) -> dict[str, Any]:
        """Every figure as a JSON-ready dict (the best model named per data set)."""
        return {
            "data_sets": [asdict(d) for d in self.data_sets],
            "results": [asdict(r) for r in self.results],
            "best": {d.name: self.best(d.name).label for d in self.data_sets},
            "elo_policies": [asdict(r) for r in self.elo_policies],
            "baselines": [asdict(b) for b in self.baselines],
            "trials": self.trials,
            "seconds": self.seconds,
            "definitions": COMPARISON_DEFINITIONS,
        }


COMPARISON_DEFINITIONS = {
    "E": "side A's expected score before the match (win probability plus half the draw probability), "
         "predicted from the states before the match, which is then rated",
    "s": "side A's result: 1 win, 0.5 draw, 0 loss",
    "deviance": "mean of -[s log10 E + (1-s) log10(1-E)], E clamped to [0.01, 0.99] (Kaggle ChessRatings2, "
                "liglicko2); always E = 0.5 scores 0.30103",
    "log_loss": "mean of -[s ln E + (1-s) ln(1-E)], natural log (nats), E clipped to [1e-15, 1-1e-15]",
    "brier": "mean of (E - s)^2",
    "tuning": "parameters chosen by the lowest deviance on the earlier half (matches[:n//2]); Elo among the "
              "shipped policy files, the other models by a coordinate search over a grid",
    "evaluation": "the chosen parameters replay the whole data set; the later half (matches[n//2:]) is scored",
    "calibration": "per tenth of E: matches, mean E and mean s",
}


def _date(played_at: float | None) -> str:
    return datetime.fromtimestamp(played_at, UTC).date().isoformat() if played_at is not None else "–"


def summarise(data: DataSet) -> DataSetSummary:
    """The :class:`DataSetSummary` of ``data``."""
    m = data.matches
    return DataSetSummary(data.name, data.source, len(m), data.split, _date(m[0].played_at),
                          _date(m[data.split].played_at), _date(m[-1].played_at))


def published_baseline(data: DataSet, label: str) -> Baseline | None:
    """``data``'s published forecasts scored on its later half, or ``None`` when it has none."""
    if data.published is None:
        return None
    card = Scorecard()
    for i in range(data.split, len(data.matches)):
        card.add(data.published[i], data.actual(i))
    return Baseline(data.name, label, card.scores())


def compare_elo(data: DataSet, policy_files: Sequence[Path] = SHIPPED_ELO_POLICIES,
                progress: Callable[[int], None] | None = None) -> tuple[ModelResult, list[ModelResult]]:
    """Every Elo policy file replayed over the whole of ``data``; returns the one with the lowest
    earlier-half deviance (the first on a tie) and every file's result. Raises
    :class:`worker.policy.ladders.LadderConfigError` for a broken file."""
    from worker.ops.evaluate.accumulate import describe_policy
    from worker.policy.ladders import load_policy_file

    results = []
    for path in policy_files:
        policy = load_policy_file(path)
        halves = replay_scores(policy, data, progress=progress)
        assert halves.later is not None
        results.append(ModelResult(
            data.name, "elo", path.stem, {"policy": path.stem, "description": describe_policy(policy)},
            halves.earlier.scores(), halves.later.scores(), len(policy_files),
        ))
    chosen = min(results, key=lambda r: r.tuning.deviance)
    return chosen, results


def tune_model(spec: ModelSpec, data: DataSet,
               progress: Callable[[int], None] | None = None) -> tuple[ModelResult, list[Trial]]:
    """Tune ``spec`` on the earlier half of ``data`` by :func:`coordinate_search`, then replay the
    whole with the best parameters and score the later half. Returns the result and every trial."""

    def objective(parameters: Parameters) -> float:
        deviance = replay_scores(spec.build(parameters), data, whole=False, progress=progress).earlier.deviance()
        assert deviance is not None
        return deviance

    best, trials = coordinate_search(spec.start, spec.grid, objective)
    halves = replay_scores(spec.build(best.parameters), data, progress=progress)
    assert halves.later is not None
    return ModelResult(data.name, spec.model, spec.model, dict(best.parameters), halves.earlier.scores(),
                       halves.later.scores(), len(trials)), trials


def compare_models(data_sets: Sequence[DataSet], specs: Sequence[ModelSpec] | None = None, *,
                   policy_files: Sequence[Path] = SHIPPED_ELO_POLICIES,
                   progress: Callable[[int], None] | None = None,
                   clock: Callable[[], float] | None = None) -> ModelComparison:
    """Tune and score Elo and every model of ``specs`` (default :data:`MODEL_SPECS`) on each data
    set (see the module docstring). ``progress`` gets the matches replayed since its last call;
    ``clock`` (seconds, e.g. :func:`time.perf_counter`) times the run. Deterministic."""
    started = clock() if clock else 0.0
    comparison = ModelComparison([], [], [], [])
    for data in data_sets:
        comparison.data_sets.append(summarise(data))
        if policy_files:
            chosen, elo_results = compare_elo(data, policy_files, progress)
            comparison.results.append(chosen)
            comparison.elo_policies.extend(elo_results)
        for spec in MODEL_SPECS if specs is None else specs:
            result, trials = tune_model(spec, data, progress)
            comparison.results.append(result)
            comparison.trials[f"{data.name}/{spec.model}"] = [asdict(t) for t in trials]
        baseline = published_baseline(data, "FiveThirtyEight elo_prob1 (published)")
        if baseline is not None:
            comparison.baselines.append(baseline)
    comparison.seconds = (clock() - started) if clock else 0.0
    return comparison
