"""A replicated Redis watched by Redis Sentinel on spare loopback ports, for fault tests and the bench.

One primary, ``replicas`` replicas and ``sentinels`` Sentinels (Debian's ``redis-server`` and
``redis-sentinel``), each a real process with its files under one folder; append-only with the
given ``appendfsync`` on every data node, as the operators' documentation recommends for production. Tests only.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import redis

from worker.devtools.runtime import _free_port, wait_until

MASTER_NAME = "ratings"

_Reply = TypeVar("_Reply")


def _reply(value: _Reply | bool | None) -> _Reply:
    """A Sentinel command's reply as read by a plain client of one Sentinel (:meth:`ReplicatedRedis.client`).

    redis-py types these replies ``... | bool`` (the bool is what its ``Sentinel`` object returns
    without ``return_responses``) and the primary's address ``... | None`` (a name no Sentinel
    monitors); neither reaches a plain client asking about :data:`MASTER_NAME`. Raises
    ``TypeError`` if one does (as indexing it would)."""
    if value is None or isinstance(value, bool):
        raise TypeError(f"unexpected Sentinel reply {value!r}")
    return value


def sentinel_binary() -> str | None:
    """Path of ``redis-sentinel`` (Debian's package of that name), or None."""
    return shutil.which("redis-sentinel")


@dataclass
class ReplicatedRedis:
    """A running primary, its replicas and Sentinels (see the module doc)."""

    state_dir: Path
    data_ports: list[int] = field(default_factory=list)
    sentinel_ports: list[int] = field(default_factory=list)
    procs: dict[int, subprocess.Popen] = field(default_factory=dict, repr=False)
    primary_port: int = 0

    @classmethod
    def start(cls, state_dir: Path, replicas: int = 2, sentinels: int = 3, appendfsync: str = "everysec",
              down_after_ms: int = 1000) -> ReplicatedRedis:
        """Start the data nodes (the first one primary), wait until every replica is in sync, then the
        Sentinels (quorum: a majority) and wait until each knows every replica.

        ``down_after_ms``: Sentinel's ``down-after-milliseconds`` (how long the primary must be
        silent before a failover starts). Raises ``RuntimeError`` when a binary is missing
        (``redis-sentinel`` only when ``sentinels`` > 0) or the set does not come up within 30 s.
        """
        if shutil.which("redis-server") is None or (sentinels and sentinel_binary() is None):
            raise RuntimeError("redis-server and redis-sentinel are needed (Debian: apt-get install -y redis-sentinel)")
        self = cls(Path(state_dir).resolve())
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.data_ports = [_free_port() for _ in range(1 + replicas)]
        self.primary_port = self.data_ports[0]
        for i, port in enumerate(self.data_ports):
            folder = self.state_dir / f"redis-{port}"
            folder.mkdir(exist_ok=True)
            args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
                    "--repl-diskless-sync-delay", "0",
                    "--appendonly", "yes", "--appendfsync", appendfsync, "--save", "",
                    "--logfile", str(folder / "redis.log")]
            if i:
                args += ["--replicaof", "127.0.0.1", str(self.primary_port)]
            self.procs[port] = subprocess.Popen(args)
        wait_until(lambda: self.client(self.primary_port).info("replication")["connected_slaves"] == replicas
                   and all(self.client(p).info("replication").get("master_link_status") == "up"
                           for p in self.data_ports[1:]), "replicated Redis: replicas in sync")
        quorum = sentinels // 2 + 1
        for _ in range(sentinels):
            port = _free_port()
            conf = self.state_dir / f"sentinel-{port}.conf"  # Sentinel rewrites its file: one each
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.state_dir}\n"
                f"logfile {self.state_dir / f'sentinel-{port}.log'}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.primary_port} {quorum}\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}\n"
                f"sentinel failover-timeout {MASTER_NAME} 10000\n"
                f"sentinel parallel-syncs {MASTER_NAME} {max(1, replicas)}\n")
            self.procs[port] = subprocess.Popen([sentinel_binary() or "redis-sentinel", str(conf)])
            self.sentinel_ports.append(port)
        wait_until(lambda: all(len(self.client(p).sentinel_slaves(MASTER_NAME)) == replicas
                               and (_reply(self.client(p).sentinel_master(MASTER_NAME))["num-other-sentinels"]
                                    == sentinels - 1)
                               for p in self.sentinel_ports),
                   "replicated Redis: Sentinels see every replica and each other")
        return self

    @staticmethod
    def client(port: int) -> redis.Redis:
        """A client of the node on ``port`` (strings decoded)."""
        return redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=2, socket_timeout=5,
                           decode_responses=True)

    def url(self, db: int = 0) -> str:
        """The ``sentinel://`` broker URL of this set (:mod:`worker.redis_url`)."""
        first, *rest = self.sentinel_ports
        return ";".join([f"sentinel://127.0.0.1:{first}/{db}?master_name={MASTER_NAME}"]
                        + [f"sentinel://127.0.0.1:{p}" for p in rest])

    def primary_url(self, db: int = 0) -> str:
        """A plain ``redis://`` URL of the current primary (no failover)."""
        return f"redis://127.0.0.1:{self.primary_port}/{db}"

    def cut_off_replicas(self) -> None:
        """SIGSTOP every replica and close its replication connection on the primary (``CLIENT KILL
        TYPE replica``), so it cannot reconnect: the primary goes on acknowledging writes that no
        replica gets, as in a partition or with replicas that fell behind. (A stopped replica alone
        is not enough: its kernel still receives the replication stream.)"""
        for port in self.data_ports:
            if port != self.primary_port and self.procs[port].poll() is None:
                self.procs[port].send_signal(signal.SIGSTOP)
        self.client(self.primary_port).execute_command("CLIENT", "KILL", "TYPE", "replica")

    def resume_replicas(self) -> None:
        """SIGCONT every replica :meth:`cut_off_replicas` stopped."""
        for port in self.data_ports:
            if port != self.primary_port and self.procs[port].poll() is None:
                self.procs[port].send_signal(signal.SIGCONT)

    def kill_primary(self) -> int:
        """SIGKILL the primary (no shutdown, no flush of its append-only file); return its port."""
        port = self.primary_port
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait()
        return port

    def freeze_primary(self) -> int:
        """SIGSTOP the primary (a paused VM, a partition): its sockets stay open and silent, no
        RST, no FIN; return its port. :meth:`thaw` resumes it."""
        port = self.primary_port
        self.procs[port].send_signal(signal.SIGSTOP)
        return port

    def thaw(self, port: int) -> None:
        """SIGCONT the node on ``port`` (one :meth:`freeze_primary` stopped), if it still runs."""
        if self.procs[port].poll() is None:
            self.procs[port].send_signal(signal.SIGCONT)

    def wait_failover(self, timeout: float = 30.0) -> float:
        """Wait until every Sentinel names a new, answering primary that has a replica in sync;
        return the seconds waited."""
        old, start = self.primary_port, time.monotonic()

        def promoted() -> bool:
            named = {int(_reply(self.client(p).sentinel_get_master_addr_by_name(MASTER_NAME))[1])
                     for p in self.sentinel_ports}
            if len(named) != 1 or old in named:
                return False
            port = named.pop()
            info = self.client(port).info("replication")
            if info["role"] != "master" or info["connected_slaves"] < 1:
                return False
            self.primary_port = port
            return True

        wait_until(promoted, "replicated Redis: failover", timeout)
        return time.monotonic() - start

    def stop(self) -> None:
        """Stop every process (SIGKILL: the files are thrown away; a frozen one too)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
