"""Boundaries of the worker package that need no server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import SEDMA_K, ConstantK, Rounding
from worker.policy.ladders import LadderConfigError, load_ladders
from worker.settings import DEFAULT_LADDERS_FILE


def test_the_producer_helper_imports_neither_the_tasks_nor_the_database_driver():
    """A game backend importing worker.producer pulls in schemas and Celery only."""
    code = (
        "import sys, worker.producer\n"
        "bad = sorted(m for m in sys.modules if m in {'worker.service.tasks', 'worker.store', 'worker.service.rating_service', "
        "'psycopg', 'psycopg_pool', 'engine'})\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_default_ladders_file_configures_sedma_and_classic_elo():
    """sedma: the seed's K bands, performance adjustment, half-even rounding; elo: K = 30 from 1200."""
    policies = load_ladders(DEFAULT_LADDERS_FILE)
    assert policies["sedma"].k_factor == SEDMA_K
    assert policies["sedma"].rounding is Rounding.HALF_EVEN
    assert policies["sedma"].performance is not None
    assert policies["elo"].k_factor == ConstantK(30)
    assert policies["elo"].initial_rating == 1200
    assert policies["elo"].performance is None


def test_a_ladders_file_with_an_unknown_key_is_rejected_naming_file_and_key(tmp_path):
    """A typo in the ladders file is an error that names the file and the key, not a silent default."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.x]\nk_factor = { constant = 20 }\ninital_rating = 1500\n')
    with pytest.raises(LadderConfigError) as exc:
        load_ladders(path)
    assert str(path) in str(exc.value) and "inital_rating" in str(exc.value)


def test_a_ladders_file_with_two_k_factor_kinds_is_rejected(tmp_path):
    """k_factor must be either constant or banded, not both."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.x]\nk_factor = { constant = 20, bands = [[1000, 30]], top = 10 }\n')
    with pytest.raises(LadderConfigError, match="exactly one"):
        load_ladders(path)


def test_a_ladder_name_no_message_could_carry_is_rejected(tmp_path):
    """Ladder names follow the message's ladder rule (lower case), so `Elo` is a configuration error."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.Elo]\nk_factor = { constant = 20 }\n')
    with pytest.raises(LadderConfigError, match="Elo"):
        load_ladders(path)


def test_k_factor_bands_out_of_order_are_a_configuration_error_not_a_crash(tmp_path):
    """Decreasing band bounds raise LadderConfigError naming the file (the worker refuses to start)."""
    path = tmp_path / "ladders.toml"
    path.write_text('[ladders.x]\nk_factor = { bands = [[1800, 32], [1200, 40]], top = 16 }\n')
    with pytest.raises(LadderConfigError, match="strictly increasing"):
        load_ladders(path)


@pytest.mark.parametrize("field", ["relay_batch_size", "pool_max_size", "max_retries", "prefetch_multiplier"])
def test_settings_reject_zero_counts(field):
    """A zero batch size, pool size, retry count or prefetch is refused at start, not discovered later."""
    from pydantic import ValidationError

    from worker.settings import Settings

    with pytest.raises(ValidationError, match=field):
        Settings(**{field: 0})


def test_settings_require_the_visibility_timeout_above_the_time_limit():
    """Redis would redeliver a still-running task if the visibility timeout were below the time limit."""
    from pydantic import ValidationError

    from worker.settings import Settings

    with pytest.raises(ValidationError, match="must exceed"):
        Settings(visibility_timeout=60, task_time_limit=120)
