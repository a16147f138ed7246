"""``python -m worker``: the ``ratings`` command line."""

from worker.cli.main import main

main()
