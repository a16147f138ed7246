#!/usr/bin/env python3
"""Engine speed only, no server: ``python bench/engine_speed.py [--engine-matches N] [--repeats N]``.

engine.rate (1v1 classic and Sedma), engine.replay.replay and engine.fast_replay.replay, beside
elote's EloCompetitor and an inline Python Elo loop, measured in the same run.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout, uninstalled

from worker.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.argv = ["ratings", "bench", "--skip-service", "--skip-ledger", "--output", "bench-results-engine.json",
                *sys.argv[1:]]
    main()
