"""Starting and stopping the service's processes (workers, relay, read API), for the demo, the bench and the tests."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from worker import store as repository
from worker.store.connection import connect


@dataclass
class ServiceProcesses:
    """Real worker and relay processes started with ``env`` (which carries the RATINGS_ URLs)."""

    env: dict[str, str]
    log_dir: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    """HTTP port (/metrics, /healthz, /readyz) of each process, a free one chosen at start."""
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    """Part of every Celery node name (``w1-<tag>@host``): node names stay unique across runners
    sharing a broker, as on RabbitMQ a node's remote-control queue is exclusive to its name."""

    def _start(self, name: str, args: list[str], port_setting: str) -> subprocess.Popen:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")
        self.ports[name] = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", *args], env={**self.env, port_setting: str(self.ports[name])},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def start_worker(self, name: str, concurrency: int = 1, pool: str = "prefork",
                     loglevel: str = "WARNING") -> subprocess.Popen:
        """Start one Celery worker node ``name`` with ``concurrency`` children."""
        return self._start(name, ["worker", "--concurrency", str(concurrency), "--name", f"{name}-{self.tag}@%h",
                                  "--loglevel", loglevel, "--pool", pool], "RATINGS_METRICS_PORT")

    def start_relay(self, name: str = "relay") -> subprocess.Popen:
        """Start one outbox relay."""
        return self._start(name, ["relay"], "RATINGS_RELAY_METRICS_PORT")

    def start_api(self, name: str = "api", env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start one read API process (``ratings api`` on 127.0.0.1, a free port: ``ports[name]``);
        ``env`` overrides variables of this set's environment for it alone."""
        saved = self.env
        self.env = {**saved, **(env or {})}
        try:
            return self._start(name, ["api", "--host", "127.0.0.1"], "RATINGS_API_PORT")
        finally:
            self.env = saved

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        """Send ``sig`` to process ``name``'s group and wait; SIGKILL the group past ``timeout``."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        """Stop every process (warm shutdown first)."""
        for name in list(self.procs):
            self.stop(name)


def wait_until(ready, what: str, timeout: float = 30.0, interval: float = 0.1) -> None:
    """Call ``ready()`` until it returns true (an exception counts as not yet: a server still
    starting refuses connections); raise ``RuntimeError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001  # not up yet
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not reached within {timeout:.0f} s")
        time.sleep(interval)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_drained(
    database_url: str, expected_received: int, timeout: float, on_progress=None, poll: float = 0.25
) -> repository.Counts:
    """Wait until applied + duplicates + dead letters reaches ``expected_received`` and every outbox
    row is published; return the counts. Raises ``TimeoutError`` with the last counts past ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with connect(database_url, autocommit=True) as conn:
        while True:
            c = repository.counts(conn)
            if on_progress:
                on_progress(c)
            if c.received >= expected_received and c.unpublished_events == 0:
                return c
            if time.monotonic() > deadline:
                raise TimeoutError(f"not drained after {timeout:.0f} s: {c} (expected {expected_received} received)")
            time.sleep(poll)
