"""The match shapes a ladder declares in the ladders file (worker/policy/shapes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.policy.config import PolicyConfigError, load_policy
from worker.policy.ladders import load_ladder_policies
from worker.policy.shapes import ONE_V_ONE, MatchShapes, load_ladder_shapes

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "worker" / "ladders.toml", ROOT / "deploy" / "k8s" / "ladders.toml"]


@pytest.mark.parametrize("path", SHIPPED, ids=["package", "k8s"])
def test_the_shipped_sedma_ladder_rates_one_v_one_and_two_v_two_only(path):
    """Sedma is a card game of 1v1 and 2v2: those two shapes and nothing else (1v2, 1v8, 3v3, a
    free-for-all); the shipped elo ladder rates 1v1 only."""
    shapes = load_ladder_shapes(path)
    allowed = [sizes for sizes in ([1, 1], [2, 2], [1, 2], [2, 1], [1, 8], [3, 3], [1, 1, 1], [2, 2, 2])
               if shapes["sedma"].allows(sizes)]
    assert allowed == [[1, 1], [2, 2]]
    assert shapes["elo"] == ONE_V_ONE


def test_a_ladder_that_declares_nothing_rates_one_v_one_only(tmp_path):
    """The default: two sides of one player."""
    path = tmp_path / "ladders.toml"
    path.write_text("[ladders.club]\nk_factor = { constant = 24 }\n")
    shapes = load_ladder_shapes(path)["club"]
    assert shapes == MatchShapes((2, 2), (1, 1), False)
    assert shapes.allows([1, 1]) and not shapes.allows([2, 2]) and not shapes.allows([1, 1, 1])


def test_the_declaration_is_not_part_of_the_policy_version(tmp_path):
    """Declaring shapes changes which matches enter the ledger, not how they are rated: the
    ladder's policy version is the policy file's, with or without the declaration, inline or not."""
    sedma = load_policy(ROOT / "worker" / "policies" / "sedma.toml").version
    assert load_ladder_policies(SHIPPED[0])["sedma"].version == sedma
    path = tmp_path / "ladders.toml"
    path.write_text("[ladders.a]\nk_factor = { constant = 24 }\n\n"
                    "[ladders.b]\nk_factor = { constant = 24 }\nmatch_shapes = { sides = [3, 16] }\n")
    loaded = load_ladder_policies(path)
    assert loaded["a"].version == loaded["b"].version


@pytest.mark.parametrize(("declaration", "sizes", "allowed"), [
    ("{ sides = 2, players_per_side = [1, 2] }", [2, 2], True),
    ("{ sides = 2, players_per_side = [1, 2] }", [1, 2], False),
    ("{ sides = 2, players_per_side = [1, 4], uneven = true }", [1, 4], True),
    ("{ sides = [3, 16] }", [1, 1, 1], True),
    ("{ sides = [3, 16] }", [1, 1], False),
    ("{ sides = [2, 16], players_per_side = [1, 8], uneven = true }", [1, 8], True),
])
def test_a_declaration_allows_exactly_its_shapes(tmp_path, declaration, sizes, allowed):
    """Ranges are inclusive; uneven sides only when declared."""
    path = tmp_path / "ladders.toml"
    path.write_text(f"[ladders.x]\nk_factor = {{ constant = 24 }}\nmatch_shapes = {declaration}\n")
    assert load_ladder_shapes(path)["x"].allows(sizes) is allowed


@pytest.mark.parametrize(("declaration", "message"), [
    ("{ sides = 1 }", "2 <= least <= most <= 16"),
    ("{ sides = [2, 17] }", "2 <= least <= most <= 16"),
    ("{ players_per_side = [2, 1] }", "1 <= least <= most <= 8"),
    ("{ uneven = true }", "needs a range of players_per_side"),
    ("{ teams = 2 }", "ladders.x.match_shapes.teams: unknown key"),
    ('"1v1"', "must be a table"),
])
def test_an_impossible_declaration_is_refused_naming_file_and_key(tmp_path, declaration, message):
    """A bad declaration stops the worker at start with file, line and key."""
    path = tmp_path / "ladders.toml"
    path.write_text(f"[ladders.x]\nk_factor = {{ constant = 24 }}\nmatch_shapes = {declaration}\n")
    with pytest.raises(PolicyConfigError) as caught:
        load_ladder_shapes(path)
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_the_refusal_names_the_shape_seen_and_the_shapes_allowed():
    """The dead letter's detail: the shape seen, what the ladder rates, what to change."""
    detail = MatchShapes((2, 2), (1, 2)).refusal([1, 8], "sedma")
    assert detail is not None and "a 1v8 match" in detail and "rates 1v1, 2v2" in detail and "Fix:" in detail
    assert MatchShapes((2, 2), (1, 2)).refusal([2, 2], "sedma") is None
    assert MatchShapes((2, 16), (1, 8), True).describe() == "2 to 16 sides of 1 to 8 players each"


def _policy_show(*args: str, **env: str):
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith("RATINGS_")}
    return subprocess.run([sys.executable, "-m", "worker", "policy", "show", *args], env={**clean, **env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=60)


def test_policy_show_says_which_shapes_a_ladder_rates_and_refuses_a_bad_declaration(tmp_path):
    """``ratings policy show`` prints the shapes beside the policy; a declaration the worker would
    refuse at start stops it too (exit 3, environment not ready: file and key named)."""
    shown = _policy_show("--ladder", "sedma")
    assert shown.returncode == 0, shown.stderr
    assert "rates 1v1, 2v2" in shown.stdout
    path = tmp_path / "ladders.toml"
    path.write_text("[ladders.x]\nk_factor = { constant = 24 }\nmatch_shapes = { sides = 1 }\n")
    broken = _policy_show(RATINGS_LADDERS_FILE=str(path))
    assert broken.returncode == 3 and "ladders.x.match_shapes.sides" in broken.stderr
