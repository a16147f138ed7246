"""Boundaries of the worker package that need no server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine import SEDMA_K, ConstantK, Rounding
from worker.ladders import LadderConfigError, load_ladders
from worker.settings import DEFAULT_LADDERS_FILE


def test_the_producer_helper_imports_neither_the_tasks_nor_the_database_driver():
    """A game backend importing worker.producer pulls in schemas and Celery only."""
    code = (
        "import sys, worker.producer\n"
        "bad = sorted(m for m in sys.modules if m in {'worker.tasks', 'worker.repository', 'worker.service', "
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
