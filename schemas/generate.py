"""Write the JSON Schema files of the wire contracts: ``python -m schemas.generate [--check]``.

Each file is ``model_json_schema()`` written with ``indent=2, sort_keys=True`` and a trailing
newline. With ``--check`` nothing is written and the exit status is 1 when a file is missing or
differs from what the models generate (run it in CI and in the unit tests).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import BaseModel

from .annul_matches import AnnulMatches
from .match_finished import MatchFinished
from .rating_changed import RatingChanged

JSON_DIR = Path(__file__).resolve().parent / "json"

SCHEMAS: dict[str, type[BaseModel]] = {
    "annul_matches.v1.json": AnnulMatches,
    "match_finished.v1.json": MatchFinished,
    "rating_changed.v1.json": RatingChanged,
}


def render(model: type[BaseModel]) -> str:
    """The JSON Schema text for one model, exactly as stored in its file."""
    return json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"


def stale_files(directory: Path = JSON_DIR) -> list[Path]:
    """Files under directory that are missing or differ from the generated schema."""
    stale = []
    for name, model in SCHEMAS.items():
        path = directory / name
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        if current != render(model):
            stale.append(path)
    return stale


def write_all(directory: Path = JSON_DIR) -> list[Path]:
    """Write every schema file that changed; return the paths written."""
    written = []
    directory.mkdir(parents=True, exist_ok=True)
    for path in stale_files(directory):
        path.write_text(render(SCHEMAS[path.name]), encoding="utf-8", newline="\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schemas.generate", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a schema file is missing or stale"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for path in stale:
            print(f"stale: {path} (run: python -m schemas.generate)", file=sys.stderr)
        return 1 if stale else 0
    for path in write_all():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
