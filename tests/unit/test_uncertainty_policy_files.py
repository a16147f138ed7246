"""Policy files of the models with uncertainty: ``model`` chooses the model, validated, versioned and
hashed like Elo policies; leaderboard marks at a moment (conservative rating, provisional, rankable,
inactive) from the policy and its file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engine.glicko2 import Glicko2Policy
from engine.model import PlayerState
from engine.weng_lin import WengLinPolicy
from worker.policy.config import PolicyConfigError, config_of, load_policy
from worker.policy.stored import policy_from_content
from worker.policy.uncertainty import leaderboard_rules

DAY = 86_400.0


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_an_elo_policy_has_the_same_version_with_or_without_model_elo(tmp_path):
    """``model = "elo"`` is the default: writing it changes neither the content nor the version."""
    bare = load_policy(write(tmp_path, "k_factor = { constant = 30 }\n", "a.toml"))
    named = load_policy(write(tmp_path, 'model = "elo"\nk_factor = { constant = 30 }\n', "b.toml"))
    assert bare.version == named.version and bare.config.canonical() == named.config.canonical()
    assert "model" not in named.config.canonical()


def test_a_glicko2_file_builds_the_engine_policy_with_its_parameters_and_a_content_version(tmp_path):
    """Keys reach Glicko2Policy; defaults are the engine's; the version hashes the content (a changed
    parameter changes it, a comment or description does not)."""
    loaded = load_policy(write(tmp_path, 'model = "glicko2"\ntau = 0.5\ndescription = "x"\n'))
    assert isinstance(loaded.policy, Glicko2Policy)
    assert (loaded.policy.tau, loaded.policy.initial_deviation, loaded.policy.periods_per_day) == (0.5, 500.0, 0.21436)
    assert loaded.policy.version == loaded.version and len(loaded.version) == 12
    again = load_policy(write(tmp_path, '# a comment\nmodel = "glicko2"\ntau = 0.5\n', "q.toml"))
    other = load_policy(write(tmp_path, 'model = "glicko2"\ntau = 0.6\n', "r.toml"))
    assert again.version == loaded.version != other.version


@pytest.mark.parametrize("model", ["plackett_luce", "bradley_terry_full", "thurstone_mosteller_full"])
def test_a_weng_lin_file_builds_its_model(tmp_path, model):
    """Each Weng-Lin model name builds a WengLinPolicy of that model with openskill's defaults."""
    loaded = load_policy(write(tmp_path, f'model = "{model}"\nbeta = 5\n'))
    assert isinstance(loaded.policy, WengLinPolicy)
    assert (loaded.policy.model, loaded.policy.beta, loaded.policy.mu) == (model, 5.0, 25.0)


@pytest.mark.parametrize("text, key", [
    ('model = "glicko"\n', "model"),
    ('model = "glicko2"\nk_factor = { constant = 30 }\n', "k_factor"),
    ('model = "glicko2"\ntau = -1\n', "tau"),
    ('model = "glicko2"\nmin_deviation = 600\n', "min_deviation"),
    ('model = "plackett_luce"\nkappa = 2\n', "kappa"),
    ('model = "plackett_luce"\ninactive_days = 0\n', "inactive_days"),
])
def test_a_bad_key_or_value_names_the_file_line_and_key(tmp_path, text, key):
    """An unknown model, a key of another model, or a value out of range: PolicyConfigError naming
    the file and the key (and its line where the key is written)."""
    path = write(tmp_path, text)
    with pytest.raises(PolicyConfigError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert str(path) in message and (key in message or "deviations need" in message), message


def test_the_stored_content_reads_back_to_the_same_policy():
    """``policies.content`` (the canonical content) builds the same engine policy under its version."""
    config = config_of({"model": "glicko2", "tau": 0.4})
    policy = policy_from_content("abcdef012345", config.canonical())
    assert isinstance(policy, Glicko2Policy) and policy.tau == 0.4 and policy.version == "abcdef012345"


def test_glicko2_leaderboard_marks_grow_with_time_since_the_last_match():
    """A Glicko-2 player with RD 60 (volatility 0.06) last seen at t0: rankable (<= 75) at t0; a
    year later the deviation grown on read is sqrt(60² + 365 × 0.21436 × (0.06 × 173.7178)²) ≈ 110
    (lichess's figure), so provisional (>= 110) and no longer rankable; with inactive_days 365 the
    player is also inactive a day later. The conservative rating is rating - 2 × grown deviation."""
    config = config_of({"model": "glicko2", "inactive_days": 365})
    rules = leaderboard_rules(config.build(), config.canonical())
    assert rules is not None
    state = PlayerState(1800.0, 40, deviation=60.0, volatility=0.06, last_played=1_000_000.0)
    now = rules.shown(state, 1_000_000.0)
    assert (now.deviation, now.conservative, now.provisional, now.rankable, now.inactive) == (
        60.0, 1800.0 - 120.0, False, True, False)
    year = rules.shown(state, 1_000_000.0 + 365 * DAY)
    expected = math.sqrt(60.0**2 + 365 * 0.21436 * (0.06 * 173.7178) ** 2)
    assert year.deviation == pytest.approx(expected, rel=1e-12) and round(expected) == 110
    assert year.provisional and not year.rankable and not year.inactive
    assert rules.shown(state, 1_000_000.0 + 366 * DAY).inactive


def test_weng_lin_leaderboard_ranks_by_mu_minus_three_sigma_and_marks_only_what_the_file_sets():
    """mu 30, sigma 2: conservative 24 (openskill's ordinal); no provisional/rankable thresholds by
    default (every active player rankable); with rankable_deviation 1.5 the player is not."""
    config = config_of({"model": "plackett_luce"})
    rules = leaderboard_rules(config.build(), config.canonical())
    assert rules is not None
    state = PlayerState(30.0, 10, deviation=2.0, last_played=0.0)
    assert rules.shown(state, 0.0) == (24.0, 2.0, False, True, False)
    strict = config_of({"model": "plackett_luce", "rankable_deviation": 1.5})
    strict_rules = leaderboard_rules(strict.build(), strict.canonical())
    assert strict_rules is not None and not strict_rules.shown(state, 0.0).rankable


def test_an_elo_policy_has_no_leaderboard_rules():
    """Elo ladders are ranked by rating as before."""
    config = config_of({"k_factor": {"constant": 30}})
    assert leaderboard_rules(config.build(), config.canonical()) is None
