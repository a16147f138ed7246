"""The exit codes of the ``ratings`` command line (no dependency: the entry point uses them before
it knows whether the command line's packages are installed)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The exit status of every ``ratings`` command, one meaning each (docs/operators/cli.md)."""

    OK = 0
    """The command did what was asked and found nothing wrong."""
    FINDINGS = 1
    """The command ran and the answer is no: a check failed (``doctor``, ``verify``), it found
    problems (dead letters, rows refused, a player without history), or the data's state refused
    the request (an annulment or a rebuild refused)."""
    USAGE = 2
    """The command line is wrong: Typer/click's own usage errors, an option or argument value the
    command refuses (an unknown ladder, options that do not go together), or a file named on the
    command line that cannot be used. Change the command."""
    NOT_READY = 3
    """The environment is not ready: a setting missing or invalid, a server unreachable or
    refusing (TLS, an evicting broker), the database not migrated or newer than this code, the
    ladders file broken, an optional package not installed. Change the environment, not the
    command; the same command may then succeed."""
