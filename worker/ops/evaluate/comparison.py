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
from typing import Any, cast

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
    ``start`` holds every parameter's starting value (the engine's defaults, and no home
    advantage); ``grid`` the values tried for each tuned parameter (the others stay at ``start``);
    ``rounds`` the rounds of :func:`coordinate_search`."""

    model: str
    build: Callable[[Parameters], AnyPolicy]
    start: Parameters
    grid: Mapping[str, Sequence[Any]]
    rounds: int = 1


HOME = "home_advantage"
"""The parameter every model is given for the home side (:class:`.home.HomeAdvantage`), in its rating unit."""


def _with_home(policy: Any, parameters: Parameters) -> AnyPolicy:
    from worker.ops.evaluate.home import HomeAdvantage

    points = parameters.get(HOME, 0.0)
    # A frozen dataclass's fields are read-only, which mypy does not take for the Protocol's attributes.
    return cast(AnyPolicy, HomeAdvantage(policy, points)) if points else policy


def build_glicko2(parameters: Parameters) -> AnyPolicy:
    """:class:`engine.glicko2.Glicko2Policy` with ``parameters`` (and a home advantage in rating points)."""
    from engine.glicko2 import Glicko2Policy

    return _with_home(Glicko2Policy(**{k: v for k, v in parameters.items() if k != HOME}), parameters)


def build_weng_lin(parameters: Parameters) -> AnyPolicy:
    """:class:`engine.weng_lin.WengLinPolicy` with ``parameters`` (``model`` among them; a home
    advantage in mu units)."""
    from engine.weng_lin import WengLinPolicy

    return _with_home(WengLinPolicy(**{k: v for k, v in parameters.items() if k != HOME}), parameters)


def _weng_lin_spec(model: str) -> ModelSpec:
    # openskill's defaults: mu 25, sigma 25/3, beta 25/6, tau 25/300. Team sports move more from
    # match to match than a chess player does, hence the larger beta and tau tried. A home
    # advantage of h mu is P = 1/(1 + e^(-h/c)) with c about beta·√2 for settled ratings (Bradley-
    # Terry): 58 % (the NFL's home share) is h = 1.9 at beta 25/6, 7.6 at beta 50/3.
    return ModelSpec(model, build_weng_lin,
                     {"model": model, "beta": 25 / 6, "tau": 25 / 300, "sigma": 25 / 3, HOME: 0.0},
                     {"beta": (25 / 3, 50 / 3, 100 / 3), "tau": (0.3, 1.0, 3.0), "sigma": (25 / 6, 25 / 12),
                      HOME: (2.0, 4.0, 8.0, 16.0)})


MODEL_SPECS: tuple[ModelSpec, ...] = (
    # lichess's defaults (engine.glicko2): initial deviation 500, volatility 0.09, tau 0.75,
    # 0.21436 rating periods per day. Home advantage in rating points, as Elo's (65 for the NFL).
    ModelSpec("glicko2", build_glicko2,
              {"tau": 0.75, "initial_deviation": 500.0, "periods_per_day": 0.21436, HOME: 0.0},
              {"tau": (0.3, 1.2), "initial_deviation": (100.0, 200.0, 350.0), "periods_per_day": (0.01, 0.05, 1.0),
               HOME: (50.0, 100.0, 150.0)}),
    _weng_lin_spec("plackett_luce"),
    _weng_lin_spec("bradley_terry_full"),
    _weng_lin_spec("thurstone_mosteller_full"),
)
"""The models with uncertainty compared with Elo, and their search grids: one round of
:func:`coordinate_search` from the engine's defaults: 12 (Glicko-2) or 13 (Weng-Lin) replays of an
earlier half each."""


@dataclass(frozen=True)
class ModelResult:
    """One model on one data set: ``label`` names the policy (an Elo policy file's stem, or the
    model); ``parameters`` those chosen on the earlier half; ``tuning`` the earlier half's scores
    with them, ``evaluation`` the later half's; ``trials`` how many candidates were replayed;
    ``unrated`` the matches the policy refused in the final replay (left out of the scores)."""

    data_set: str
    model: str
    label: str
    parameters: dict[str, Any]
    tuning: Scores
    evaluation: Scores
    trials: int
    unrated: int = 0


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
    from engine import RatingPolicy
    from worker.ops.evaluate.accumulate import describe_policy
    from worker.policy.ladders import LadderConfigError, load_policy_file

    results = []
    for path in policy_files:
        policy = load_policy_file(path)
        if not isinstance(policy, RatingPolicy):
            raise LadderConfigError(f"{path}: model = {policy.model!r}; Elo's candidates are Elo policy files")
        halves = replay_scores(policy, data, progress=progress)
        assert halves.later is not None
        results.append(ModelResult(
            data.name, "elo", path.stem, {"policy": path.stem, "description": describe_policy(policy)},
            halves.earlier.scores(), halves.later.scores(), len(policy_files), halves.unrated,
        ))
    chosen = min(results, key=lambda r: r.tuning.deviance)
    return chosen, results


def tune_model(spec: ModelSpec, data: DataSet,
               progress: Callable[[int], None] | None = None) -> tuple[list[ModelResult], list[Trial]]:
    """Tune ``spec`` on the earlier half of ``data`` by :func:`coordinate_search`, then replay the
    whole with the best parameters and score the later half. When the best has a home advantage,
    the same parameters without it are scored too (``label`` "<model> without home advantage"):
    the policy as a ladder can use it today. Returns the results and every trial."""

    def objective(parameters: Parameters) -> float:
        deviance = replay_scores(spec.build(parameters), data, whole=False, progress=progress).earlier.deviance()
        assert deviance is not None
        return deviance

    best, trials = coordinate_search(spec.start, spec.grid, objective, rounds=spec.rounds)
    points = [(spec.model, dict(best.parameters))]
    if best.parameters.get(HOME):
        points.append((f"{spec.model} without home advantage", {**best.parameters, HOME: 0.0}))
    results = []
    for label, parameters in points:
        halves = replay_scores(spec.build(parameters), data, progress=progress)
        assert halves.later is not None
        results.append(ModelResult(data.name, spec.model, label, parameters, halves.earlier.scores(),
                                   halves.later.scores(), len(trials), halves.unrated))
    return results, trials


@dataclass(frozen=True)
class _Job:
    """One unit of work of :func:`compare_models`: Elo (``spec`` ``None``) or one model on one data set."""

    data: DataSet
    spec: ModelSpec | None
    policy_files: tuple[Path, ...]


@dataclass(frozen=True)
class _Done:
    results: list[ModelResult]
    elo_policies: list[ModelResult]
    trials: list[Trial]
    replayed: int


def _run(job: _Job, progress: Callable[[int], None] | None = None) -> _Done:
    replayed = 0

    def count(n: int) -> None:
        nonlocal replayed
        replayed += n
        if progress is not None:
            progress(n)

    if job.spec is None:
        chosen, elo = compare_elo(job.data, job.policy_files, count)
        return _Done([chosen], elo, [], replayed)
    results, trials = tune_model(job.spec, job.data, count)
    return _Done(results, [], trials, replayed)


def _run_named(data: DataSet, model: str | None, policy_files: tuple[Path, ...]) -> _Done:
    """:func:`_run` in a worker process: the spec found by name in :data:`MODEL_SPECS` (a spec's
    ``build`` need not pickle)."""
    spec = None if model is None else next(s for s in MODEL_SPECS if s.model == model)
    return _run(_Job(data, spec, policy_files))


def compare_models(data_sets: Sequence[DataSet], specs: Sequence[ModelSpec] | None = None, *,
                   policy_files: Sequence[Path] = SHIPPED_ELO_POLICIES, workers: int = 1,
                   progress: Callable[[int], None] | None = None,
                   clock: Callable[[], float] | None = None) -> ModelComparison:
    """Tune and score Elo and every model of ``specs`` (default :data:`MODEL_SPECS`) on each data
    set (see the module docstring). ``workers`` > 1 runs the (data set, model) pairs in that many
    processes (only for the default specs; the figures are the same, each replay being
    deterministic). ``progress`` gets the matches replayed since its last call (per finished pair
    when in processes); ``clock`` (seconds, e.g. :func:`time.perf_counter`) times the run."""
    started = clock() if clock else 0.0
    chosen_specs = list(MODEL_SPECS if specs is None else specs)
    files = tuple(policy_files)
    jobs = [_Job(data, spec, files) for data in data_sets
            for spec in ([None] if files else []) + chosen_specs]  # type: ignore[operator]
    if workers > 1 and specs is None and len(jobs) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")  # no fork of a process that runs threads
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context) as pool:
            futures = [pool.submit(_run_named, job.data, job.spec.model if job.spec else None, files) for job in jobs]
            done = []
            for future in futures:
                done.append(future.result())
                if progress is not None:
                    progress(done[-1].replayed)
    else:
        done = [_run(job, progress) for job in jobs]
    comparison = ModelComparison([summarise(data) for data in data_sets], [], [], [])
    for job, finished in zip(jobs, done):
        comparison.results.extend(finished.results)
        comparison.elo_policies.extend(finished.elo_policies)
        if job.spec is not None:
            comparison.trials[f"{job.data.name}/{job.spec.model}"] = [asdict(t) for t in finished.trials]
    for data in data_sets:
        baseline = published_baseline(data, "FiveThirtyEight elo_prob1 (published)")
        if baseline is not None:
            comparison.baselines.append(baseline)
    comparison.seconds = (clock() - started) if clock else 0.0
    return comparison
