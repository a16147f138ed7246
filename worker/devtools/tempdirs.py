"""A temporary folder that a server started by root under another user (the embedded PostgreSQL's
``pgserver``, PgBouncer's ``postgres``) can reach."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def traversable_temp_dir(prefix: str) -> Path:
    """A new folder (mode 0755) under the system's temporary folder (``TMPDIR``) when every folder
    above it lets other users pass (mode o+x), else under ``/tmp``: a ``TMPDIR`` made by
    ``mktemp -d`` (mode 0700) would lock the server's user out of its own files."""
    base = Path(tempfile.gettempdir()).resolve()
    if not all(os.stat(folder).st_mode & 0o001 for folder in (base, *base.parents)):
        base = Path("/tmp")
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    os.chmod(path, 0o755)
    return path
