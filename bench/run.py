#!/usr/bin/env python3
"""The whole benchmark as a plain script: ``python bench/run.py [options of `ratings bench`]``.

Same as ``ratings bench``: the no-op Celery baseline and the rating path (throughput, latency at
full and half load, hot players, scaling over worker counts, worker memory), engine speed against
elote and an inline loop, and verify of a generated ledger. Uses RATINGS_DATABASE_URL and
RATINGS_BROKER_URL when set, embedded servers otherwise. ``--help`` lists the options.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout, uninstalled

from worker.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.argv = ["ratings", "bench", *sys.argv[1:]]
    main()
