"""The ``ratings`` command line (:mod:`worker.cli.main`) and its console-script entry point."""

from __future__ import annotations

import sys

from worker.cli.exit_codes import ExitCode

SERVER_EXTRA = "server"
"""The extra whose packages the command line needs; the default install is the producer's."""


def missing_server_packages() -> list[str]:
    """The distributions of the ``server`` extra that are not installed, read from the installed
    project's own metadata (``Requires-Dist: NAME...; extra == "server"``); empty when every one
    is, or when the project is not installed (a source tree on ``PYTHONPATH``)."""
    import re
    from importlib.metadata import PackageNotFoundError, distribution, requires

    try:
        wanted = requires("match-rating-worker") or []
    except PackageNotFoundError:
        return []
    missing = []
    for text in wanted:
        requirement, _, marker = text.partition(";")
        if re.sub(r"\s+", "", marker).replace("'", '"') != f'extra=="{SERVER_EXTRA}"':
            continue
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
        if name is None:
            continue
        try:
            distribution(name.group(0))
        except PackageNotFoundError:
            missing.append(name.group(0))
    return missing


def entry_point() -> None:
    """The ``ratings`` console script: :func:`worker.cli.main.main`. On the default install (the
    producer's: Celery, kombu, redis-py and pydantic only) one line naming the install that brings
    the command line, and exit 3 (the environment is not ready), instead of an import traceback."""
    missing = missing_server_packages()
    if missing:
        print(f"ratings: the command line needs the server install (missing: {', '.join(sorted(missing))}): "
              f"pip install 'match-rating-worker[{SERVER_EXTRA}]'", file=sys.stderr)
        raise SystemExit(ExitCode.NOT_READY)
    from worker.cli.main import main

    main()
