"""Server configuration text shipped in ``deploy/`` starts and works on the Debian server CI
installs: the compose file's redis-server command line on Debian's redis-server (7.0, the version
the compose image's major names). (``deploy/redis-acl.conf`` is tested by test_redis_acl.py; the
manifests, which no server parses, by tests/unit/test_deploy_files.py.)"""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis
import yaml

pytestmark = [pytest.mark.integration]

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compose_redis_arguments(password: str) -> list[str]:
    """The arguments the compose file's redis service gives redis-server, its password filled in."""
    service = yaml.safe_load(COMPOSE.read_text())["services"]["redis"]
    assert service["image"].startswith("redis:7"), service["image"]
    shell, flag, script = service["command"]
    assert (shell, flag) == ("sh", "-c") and script.startswith("exec redis-server ")
    words = shlex.split(script.replace("$$REDIS_PASSWORD", password))
    return words[2:]


def test_the_compose_redis_command_starts_on_debians_redis_server_and_asks_for_its_password(tmp_path):
    """Debian's redis-server takes the compose command line as written: append-only with an fsync
    every second, and no command without the password (the compose health check's ping with it)."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (apt-get install redis-server)"
    password, port = uuid.uuid4().hex, _free_port()
    args = compose_redis_arguments(password)
    log = tmp_path / "redis.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, *args, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        client = redis.Redis(port=port, password=password)
        for _ in range(200):
            if proc.poll() is not None:
                pytest.fail(f"redis-server refused the compose command line: {log.read_text(errors='replace')[-600:]}")
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        health = subprocess.run(["redis-cli", "-p", str(port), "ping"], env={"REDISCLI_AUTH": password},
                                capture_output=True, text=True, timeout=10)
        assert health.stdout.strip() == "PONG"
    finally:
        proc.terminate()
        proc.wait(10)
