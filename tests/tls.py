"""TLS for the tests: a certificate authority made by the test (``trustme``), a server certificate,
and a PostgreSQL and a Redis that speak only TLS, on spare loopback ports.

The shared piece is :func:`make_tls_files` (pytest fixture ``tls_files`` in ``tests/conftest.py``):
one CA per session and a server certificate issued for the host name ``localhost`` only, so a
client that connects to ``localhost`` verifies it, and one that connects to ``127.0.0.1`` (the same
server) meets a certificate that does not match its host. Any server a test starts (PostgreSQL,
Redis, RabbitMQ) can use the same files.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis

from worker.devtools.runtime import _free_port, wait_until

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SERVER_HOST = "localhost"
"""The only name the server certificate is issued for."""
MISMATCHED_HOST = "127.0.0.1"
"""The same servers under a name the certificate does not carry."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: ``ca_pem`` (the CA clients trust), ``cert_pem`` (the server certificate for
    ``localhost``, with its chain) and ``key_pem`` (its private key), in ``folder`` (readable by
    every user, so servers running as another OS user can read them; the key 0600, owned by
    ``owner``'s uid when given)."""

    folder: Path
    ca_pem: Path
    cert_pem: Path
    key_pem: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """A fresh CA and a server certificate for ``localhost`` (:data:`SERVER_HOST`) under ``folder``."""
    import trustme

    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    ca = trustme.CA()
    cert = ca.issue_cert(SERVER_HOST)
    files = TlsFiles(folder, folder / "ca.pem", folder / "server.pem", folder / "server.key")
    ca.cert_pem.write_to_path(str(files.ca_pem))
    cert.private_key_pem.write_to_path(str(files.key_pem))
    with open(files.cert_pem, "wb") as out:
        for blob in cert.cert_chain_pems:
            out.write(blob.bytes())
    for path in (files.ca_pem, files.cert_pem):
        os.chmod(path, 0o644)
    os.chmod(files.key_pem, 0o600)
    return files


class TlsRedis:
    """A ``redis-server`` with only a TLS port (``--port 0``), on ``localhost`` (IPv4, and IPv6 if any)."""

    def __init__(self, files: TlsFiles, folder: Path):
        self.port = _free_port()
        folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([
            "redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1", "-::1",
            "--tls-cert-file", str(files.cert_pem), "--tls-key-file", str(files.key_pem),
            "--tls-ca-cert-file", str(files.ca_pem), "--tls-auth-clients", "no",
            "--save", "", "--appendonly", "no", "--dir", str(folder), "--logfile", str(folder / "redis.log")])
        self.files = files
        wait_until(lambda: self.client().ping(), "TLS redis-server")

    def url(self, host: str = SERVER_HOST, db: int = 0) -> str:
        """A ``rediss://`` URL that verifies the certificate against the test CA."""
        return f"rediss://{host}:{self.port}/{db}?ssl_cert_reqs=required&ssl_ca_certs={self.files.ca_pem}"

    def client(self, **kwargs) -> redis.Redis:
        return redis.Redis.from_url(self.url(), **kwargs)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class TlsPostgres:
    """A PostgreSQL 15 (Debian's binaries) that accepts TLS connections only (``hostssl`` in
    ``pg_hba.conf``, trust: tests only), on ``localhost``; run as the OS user ``postgres`` when
    started by root (PostgreSQL refuses root)."""

    def __init__(self, files: TlsFiles):
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="ratings-tls-pg-"))
        self.data = self.folder / "data"
        self.user = None
        key, cert = self.folder / "server.key", self.folder / "server.pem"  # where the server's user can read them
        shutil.copy(files.key_pem, key)
        shutil.copy(files.cert_pem, cert)
        os.chmod(key, 0o600)
        if os.geteuid() == 0:
            self.user = pwd.getpwnam("postgres")
            for path in (self.folder, key, cert):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        self._run([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"],
                  check=True, stdout=subprocess.DEVNULL)
        (self.data / "pg_hba.conf").write_text("local all all trust\nhostssl all all all trust\n"
                                               "hostnossl all all all reject\n")
        self.proc = self._run([
            str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port), "-c", "listen_addresses=localhost",
            "-c", f"unix_socket_directories={self.folder}", "-c", "ssl=on", "-c", f"ssl_cert_file={cert}",
            "-c", f"ssl_key_file={key}", "-c", "fsync=off", "-c", "max_connections=50"],
            popen=True, stdout=subprocess.DEVNULL, stderr=open(self.folder / "postgres.log", "wb"))
        self.files = files
        wait_until(lambda: psycopg.connect(self.url(), connect_timeout=2).close() or True, "TLS PostgreSQL")

    def _run(self, args, popen: bool = False, **kwargs):
        if self.user is not None:
            args = ["runuser", "-u", "postgres", "--", *args]
        return subprocess.Popen(args, **kwargs) if popen else subprocess.run(args, **kwargs)

    def url(self, host: str = SERVER_HOST, dbname: str = "postgres") -> str:
        """A URL that requires TLS and verifies the certificate and its host (``verify-full``)."""
        return (f"postgresql://postgres@{host}:{self.port}/{dbname}?sslmode=verify-full"
                f"&sslrootcert={self.files.ca_pem}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
