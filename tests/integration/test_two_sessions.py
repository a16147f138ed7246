"""Two test sessions on one machine: a second pytest run does not stop the first's embedded PostgreSQL."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from worker.devtools.embedded import EmbeddedServers

pytestmark = pytest.mark.integration

SECOND_SESSION = '''
def test_uses_a_temporary_folder(tmp_path):
    (tmp_path / "f").write_text("x")
'''


def _second_session(folder: Path) -> None:
    """Run another pytest session (its own test file, outside this repository) as a neighbour would:
    on start it resets ``pytest-of-<user>`` under the shared temporary folder to mode 0700."""
    (folder / "test_neighbour.py").write_text(SECOND_SESSION)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RATINGS_"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           f"--rootdir={folder}", str(folder)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    base = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"
    if base.exists():  # the reset the first session must survive
        assert base.stat().st_mode & 0o077 == 0, oct(base.stat().st_mode)


def _survives(servers: EmbeddedServers) -> bool:
    """True when the server still answers and can write its control file (CHECKPOINT)."""
    try:
        with psycopg.connect(servers.database_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute("CHECKPOINT")
            conn.execute("CREATE TABLE after_neighbour (n int)")
        with psycopg.connect(servers.database_url, autocommit=True, connect_timeout=10) as conn:
            return conn.execute("SELECT count(*) FROM after_neighbour").fetchone() == (0,)
    except psycopg.Error:
        return False


@pytest.mark.parametrize("data", ["outside pytest's base folder", "under pytest's base folder"])
def test_a_second_pytest_session_does_not_stop_the_embedded_postgresql(data, tmp_path):
    """The embedded PostgreSQL the tests start (``EmbeddedServers.start(None)``: data under the
    system's temporary folder) keeps answering and checkpointing after a second pytest session
    starts on the machine. The control case, data under pytest's base folder as the tests once
    had it, loses its data folder when the tests run as root (the server then runs as the user
    ``pgserver``, who can no longer enter the folder pytest reset to 0700): this test would see it."""
    state = None if data.startswith("outside") else tmp_path / "servers"
    servers = EmbeddedServers.start(state, redis_server=False)
    try:
        _second_session(tmp_path)
        expected = data.startswith("outside") or os.geteuid() != 0
        assert _survives(servers) is expected
    finally:
        servers.stop()
