"""Files a user hands the CLI may start with a UTF-8 byte order mark (Excel's "CSV UTF-8", Notepad):
every reader takes such a file as the same file without it. (On the wire a BOM is refused, a
``not_json`` dead letter naming it: a message is not a file.)"""

from __future__ import annotations

import codecs
import json
import shutil
from pathlib import Path

import pytest

from worker.ops.evaluate.sources import SkippedLines, first_ladder, is_football_csv, jsonl_history
from worker.ops.football import football_matches
from worker.ops.published import read_games
from worker.policy.config import load_policy
from worker.policy.ladders import load_ladder_policies

ROOT = Path(__file__).resolve().parents[2]
BOM = codecs.BOM_UTF8


def _with_bom(source: Path, target: Path) -> Path:
    target.write_bytes(BOM + source.read_bytes())
    return target


def test_the_football_csv_with_a_bom_reads_as_without(tmp_path: Path) -> None:
    source = ROOT / "tests" / "data" / "international-football" / "results.csv"
    path = _with_bom(source, tmp_path / "results.csv")

    assert is_football_csv(path)
    with_bom = [m.match_id for m in football_matches(path, limit=50)]
    assert with_bom == [m.match_id for m in football_matches(source, limit=50)] and len(with_bom) == 50


def test_a_fivethirtyeight_csv_with_a_bom_reads_as_without(tmp_path: Path) -> None:
    source = tmp_path / "plain.csv"
    source.write_text("\n".join((ROOT / "tests" / "data" / "nfl-elo" / "nfl_games.csv").read_text().splitlines()[:30]))
    path = _with_bom(source, tmp_path / "nfl_games.csv")

    assert [m for _, m in read_games(path)] == [m for _, m in read_games(source)]
    assert len(list(read_games(path))) == 29


def test_a_json_lines_history_with_a_bom_keeps_its_first_match(tmp_path: Path) -> None:
    lines = [{"schema_version": 1, "match_id": f"m-{n}", "ladder": "elo", "finished_at": "2026-01-01T00:00:00Z",
              "side_a": {"players": [{"player_id": "a"}]}, "side_b": {"players": [{"player_id": "b"}]},
              "outcome": "draw"} for n in range(3)]
    path = tmp_path / "matches.jsonl"
    path.write_bytes(BOM + "\n".join(json.dumps(line) for line in lines).encode())
    skipped = SkippedLines()

    assert first_ladder(path) == "elo"
    assert [item.match.match_id for item in jsonl_history(path, "elo", skipped)] == ["m-0", "m-1", "m-2"]
    assert skipped.total == 0


@pytest.mark.parametrize("name, load", [("fivethirtyeight-nfl.toml", load_policy),
                                        ("ladders.toml", load_ladder_policies)])
def test_a_policy_or_ladders_file_with_a_bom_loads_as_without(tmp_path: Path, name: str, load) -> None:
    source = ROOT / ("examples" if name.startswith("five") else "worker") / name
    if name == "ladders.toml":  # with its policy files, which carry a BOM too
        shutil.copytree(ROOT / "worker" / "policies", tmp_path / "policies")
        for policy in (tmp_path / "policies").glob("*.toml"):
            _with_bom(policy, policy)
    loaded = load(_with_bom(source, tmp_path / name))

    if isinstance(loaded, dict):
        assert {k: v.version for k, v in loaded.items()} == {k: v.version for k, v in load(source).items()}
    else:
        assert loaded.version == load(source).version
