"""A PgBouncer in transaction pooling mode in front of a PostgreSQL, for the tests (Debian's ``pgbouncer``)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from worker.devtools.tempdirs import traversable_temp_dir
from worker.store.urls import conninfo_params, url_with

PGBOUNCER_BINARIES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pgbouncer_binary() -> str | None:
    """Path of the ``pgbouncer`` executable (Debian installs it in /usr/sbin), or None."""
    return shutil.which("pgbouncer") or next((p for p in PGBOUNCER_BINARIES if Path(p).exists()), None)


@dataclass
class PgBouncer:
    """A running PgBouncer (``pool_mode = transaction``) on a spare loopback port, forwarding every
    database name to ``upstream_url``'s server as that URL's user (``auth_type = any``: any client
    user name is accepted and ignored; tests only, never in production)."""

    state_dir: Path
    upstream_url: str
    port: int = 0
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    @classmethod
    def start(cls, state_dir: Path, upstream_url: str, pool_size: int = 20) -> PgBouncer:
        """Write an ini under ``state_dir`` and start PgBouncer; wait until it accepts connections.

        Runs as the ``postgres`` OS user when started by root (PgBouncer refuses to run as root), or as
        the owner of the upstream's socket folder when the upstream is a Unix socket (an embedded server).
        Raises ``RuntimeError`` when the binary is missing or it does not answer within 10 s.
        """
        binary = pgbouncer_binary()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install -y pgbouncer)")
        state_dir = Path(state_dir).resolve()
        if os.geteuid() == 0:  # PgBouncer runs as postgres, which may not enter root's folders (pytest's)
            state_dir = traversable_temp_dir("ratings-pgbouncer-")
        state_dir.mkdir(parents=True, exist_ok=True)
        up = conninfo_params(upstream_url)
        user = up.get("user") or "postgres"
        host = up.get("host") or "127.0.0.1"
        upstream = f"host={host} port={up.get('port') or 5432} user={user}"
        if up.get("password"):
            upstream += f" password={up['password']}"
        self = cls(state_dir, upstream_url, _free_port())
        ini = state_dir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = {upstream}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {state_dir}\n"
            "auth_type = any\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 500\n"
            "server_reset_query =\n"
            f"logfile = {state_dir / 'pgbouncer.log'}\n"
            f"pidfile = {state_dir / 'pgbouncer.pid'}\n"
        )
        args = [binary, str(ini)]
        if os.geteuid() == 0:
            # a socket folder's owner (the embedded server's user) may enter it; postgres may not
            owner = pwd.getpwuid(os.stat(host).st_uid) if host.startswith("/") else pwd.getpwnam("postgres")
            for path in (state_dir, ini):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            args = [binary, "-u", owner.pw_name, str(ini)]
        with open(state_dir / "stderr.log", "wb") as out:
            self._proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return self
            except OSError:
                if self._proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        logs = " ".join(p.read_text(errors="replace") for p in (state_dir / "pgbouncer.log", state_dir / "stderr.log")
                        if p.exists())
        raise RuntimeError(f"pgbouncer did not start: {logs or 'no log'}")

    def url_for(self, database_url: str) -> str:
        """``database_url`` (same database and user) reached through this PgBouncer."""
        return url_with(database_url, host="127.0.0.1", port=self.port, password=None,
                        user=conninfo_params(database_url).get("user") or "postgres")

    def freeze(self) -> None:
        """SIGSTOP PgBouncer (a paused VM): its sockets stay open, nothing answers. :meth:`thaw` resumes it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT PgBouncer after :meth:`freeze`."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop PgBouncer (SIGTERM, then SIGKILL after 10 s) and remove a folder it made for itself."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)  # a frozen one takes SIGTERM only once resumed
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self.state_dir.name.startswith("ratings-pgbouncer-"):
            shutil.rmtree(self.state_dir, ignore_errors=True)
