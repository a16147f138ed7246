"""``python -m worker``: the ``ratings`` command line."""

from worker.cli import entry_point

entry_point()
