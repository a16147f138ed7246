"""RabbitMQ for tests and tools: a vhost of its own on a running node, or a cluster of nodes of our own.

:class:`RabbitCluster` runs nodes of the installed ``rabbitmq-server`` (Debian's package) on spare
loopback ports, each with its own node name, data and log folders, and one Erlang cookie of their
own (``HOME`` points at a folder holding it), so the machine's own node (``rabbit@localhost`` on
5672) and its cookie are never touched. The nodes are joined into one cluster
(``rabbitmqctl join_cluster``). :func:`vhost` makes a virtual host on the machine's node (through
``rabbitmqctl``, which needs the privileges of the node's operator) so parallel test runs do not
meet.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
"""The server script of Debian's package, run as is (``/usr/sbin/rabbitmq-server`` switches to the
``rabbitmq`` user, whose home holds the machine node's cookie)."""
CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")


def available() -> bool:
    """True when Debian's rabbitmq-server package is installed."""
    return SERVER.exists() and CTL.exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False


@dataclass
class Node:
    """One node of a :class:`RabbitCluster`: its name, AMQP port and process."""

    name: str
    port: int
    dist_port: int
    base: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """``amqp://`` URL of this node (user guest, vhost ``/``)."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"


class RabbitCluster:
    """``nodes`` RabbitMQ nodes of our own, clustered; :meth:`stop` ends them and removes their files.

    ``config``: extra lines of ``rabbitmq.conf`` for every node (e.g. ``consumer_timeout = 60000``).
    Raises ``RuntimeError`` naming the node's log when a node does not start within ``timeout`` seconds.
    """

    def __init__(self, base: Path, nodes: int = 3, config: str = "", tls: dict[str, str] | None = None,
                 timeout: float = 90.0):
        self.base = base
        self.home = base / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)
        tag = secrets.token_hex(3)
        self.nodes = [Node(f"rt{tag}{i + 1}@localhost", _free_port(), _free_port(), base / f"n{i + 1}")
                      for i in range(nodes)]
        self.tls_port = _free_port() if tls else None
        for node in self.nodes:
            self._start(node, config, tls)
        for node in self.nodes:
            self._wait(node, timeout)
        for node in self.nodes[1:]:
            for args in (["stop_app"], ["join_cluster", self.nodes[0].name], ["start_app"]):
                self.ctl(node, *args, timeout=timeout)

    @property
    def url(self) -> str:
        """A failover URL naming every node (kombu tries the next on a connection failure)."""
        return ";".join(n.url for n in self.nodes)

    def env(self, node: Node) -> dict[str, str]:
        """The environment of ``node``'s server and of ``rabbitmqctl`` talking to it."""
        return dict(
            os.environ, HOME=str(self.home), RABBITMQ_NODENAME=node.name, RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(node.port), RABBITMQ_DIST_PORT=str(node.dist_port),
            RABBITMQ_MNESIA_BASE=str(node.base / "mnesia"), RABBITMQ_LOG_BASE=str(node.base / "log"),
            RABBITMQ_CONFIG_FILE=str(node.base / "rabbitmq"), RABBITMQ_CONF_ENV_FILE=str(node.base / "env.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(node.base / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(node.base / "rabbit.pid"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(node.base / "advanced.config"),
            ERL_EPMD_ADDRESS="127.0.0.1",
        )

    def _start(self, node: Node, config: str, tls: dict[str, str] | None) -> None:
        node.base.mkdir(parents=True, exist_ok=True)
        (node.base / "env.conf").write_text("")
        (node.base / "enabled_plugins").write_text("[].\n")
        lines = [f"listeners.tcp.1 = 127.0.0.1:{node.port}", "loopback_users = none", config]
        if tls and node is self.nodes[0] and self.tls_port:
            lines += [f"listeners.ssl.1 = 127.0.0.1:{self.tls_port}", f"ssl_options.cacertfile = {tls['cacertfile']}",
                      f"ssl_options.certfile = {tls['certfile']}", f"ssl_options.keyfile = {tls['keyfile']}",
                      "ssl_options.verify = verify_none", "ssl_options.fail_if_no_peer_cert = false"]
        (node.base / "rabbitmq.conf").write_text("\n".join(lines) + "\n")
        log = open(node.base / "server.out", "wb")  # noqa: SIM115 - the node's console, kept for its lifetime
        node.process = subprocess.Popen([str(SERVER)], env=self.env(node), stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def _wait(self, node: Node, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node.process is not None and node.process.poll() is not None:
                break
            if _answers(node.port):
                self.ctl(node, "await_startup", timeout=timeout)
                return
            time.sleep(0.25)
        raise RuntimeError(f"RabbitMQ node {node.name} did not start; see {node.base / 'server.out'} "
                           f"and {node.base / 'log'}")

    def ctl(self, node: Node, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl`` against ``node``; its output. Raises ``CalledProcessError`` on failure."""
        return subprocess.run([str(CTL), "-n", node.name, "-q", *args], env=self.env(node), check=True,
                              capture_output=True, text=True, timeout=timeout).stdout

    def leader(self, queue: str, vhost: str = "/") -> Node:
        """The node that leads quorum queue ``queue`` now (asked of a running node)."""
        for asker in self.running():
            try:
                out = self.ctl(asker, "list_queues", "-p", vhost, "name", "leader", "--no-table-headers")
            except subprocess.CalledProcessError:
                continue
            for line in out.splitlines():
                name, _, leader = line.partition("\t")
                if name == queue:
                    return next(n for n in self.nodes if n.name == leader.strip())
        raise LookupError(f"no leader found for queue {queue}")

    def running(self) -> list[Node]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def kill(self, node: Node) -> None:
        """SIGKILL every process of ``node`` (the Erlang VM included): a machine failure, no clean stop."""
        assert node.process is not None
        os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(10)

    def freeze(self, node: Node) -> None:
        """SIGSTOP every process of ``node`` (a paused VM): its sockets stay open, nothing answers,
        no RST. :meth:`thaw` resumes it."""
        assert node.process is not None
        os.killpg(node.process.pid, signal.SIGSTOP)

    def thaw(self, node: Node) -> None:
        """SIGCONT every process of ``node`` after :meth:`freeze`."""
        if node.process is not None and node.process.poll() is None:
            os.killpg(node.process.pid, signal.SIGCONT)

    def wait_healed(self, timeout: float = 120.0) -> float:
        """Wait until every running node reports every running node as running and no partition
        (a thawed node's return is a partition that ``autoheal`` ends by restarting the losing side),
        three times in a row a second apart; return the seconds waited. Raises ``TimeoutError``."""
        import json

        started, steady = time.monotonic(), 0
        names = {n.name for n in self.running()}
        while steady < 3:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"RabbitMQ cluster not healed after {timeout:.0f} s")
            try:
                states = [json.loads(self.ctl(n, "cluster_status", "--formatter", "json", timeout=15))
                          for n in self.running()]
                ok = all(set(st.get("running_nodes", [])) == names and not st.get("partitions") for st in states)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError):
                ok = False
            steady = steady + 1 if ok else 0
            time.sleep(1.0)
        return time.monotonic() - started

    def stop(self) -> None:
        """Kill every node and remove the cluster's files."""
        for node in self.running():
            try:
                os.killpg(node.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
                node.process.wait(10)  # type: ignore[union-attr]
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.base, ignore_errors=True)


def vhost(name: str, create: bool = True) -> None:
    """Create (``create``) or delete virtual host ``name`` on the machine's own RabbitMQ node, with
    every permission for ``guest``. Needs ``rabbitmqctl`` and the node's cookie (root or the
    ``rabbitmq`` user). Raises ``CalledProcessError`` when rabbitmqctl fails."""
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    run = lambda *a: subprocess.run([ctl, "-q", *a], check=True, capture_output=True, timeout=60)  # noqa: E731
    if create:
        run("add_vhost", name)
        run("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    else:
        run("delete_vhost", name)


def queue_counts(vhost_name: str, queue: str, cluster: RabbitCluster | None = None) -> tuple[int, int]:
    """(ready, delivered-but-unacknowledged) messages of ``queue`` in ``vhost_name`` on the machine's
    node, or on a running node of ``cluster`` (``rabbitmqctl list_queues``; (0, 0) when the queue
    does not exist)."""
    args = ["list_queues", "-p", vhost_name, "name", "messages_ready", "messages_unacknowledged", "--no-table-headers"]
    if cluster is not None:
        out = cluster.ctl(cluster.running()[0], *args)
    else:
        ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
        out = subprocess.run([ctl, "-q", *args], check=True, capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        name, ready, unacked = line.split("\t")
        if name == queue:
            return int(ready), int(unacked)
    return 0, 0
