"""The read API as a real process (``ratings api``) on the integration session's database."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.error import HTTPError
from urllib.parse import quote
from urllib.request import Request, urlopen

import psycopg
import pytest

from worker.devtools.runtime import wait_until
from worker.store.urls import url_with


@dataclass
class Answer:
    """An HTTP answer: status, headers (lower-case names) and the body (parsed when JSON)."""

    status: int
    headers: dict[str, str]
    body: object


class Client:
    """A minimal HTTP client of one API process (the standard library's, independent of the app)."""

    def __init__(self, base: str, token: str | None = None):
        self.base = base
        self.token = token

    def call(self, method: str, path: str, body: object = None, headers: dict[str, str] | None = None) -> Answer:
        """``method path`` (``body`` sent as JSON); any status is returned, none raised."""
        data = None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json"} if data is not None else {}
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        request = Request(self.base + path, data=data, method=method, headers={**sent, **(headers or {})})
        try:
            with urlopen(request, timeout=30) as response:
                status, raw, got = response.status, response.read(), response.headers
        except HTTPError as exc:
            status, raw, got = exc.code, exc.read(), exc.headers
        head = {k.lower(): v for k, v in got.items()}
        kind = head.get("content-type", "")
        parsed = json.loads(raw) if raw and "json" in kind else raw.decode("utf-8", "replace")
        return Answer(status, head, parsed)

    def get(self, path: str, **kw) -> Answer:
        """GET ``path``."""
        return self.call("GET", path, **kw)


def player_path(ladder: str, player_id: str) -> str:
    """The API path of a player (the id percent-encoded, slashes too)."""
    return f"/v1/ladders/{quote(ladder, safe='')}/players/{quote(player_id, safe='')}"


@pytest.fixture(scope="session")
def api(env) -> Iterator[Client]:
    """One ``ratings api`` process of the session, reading the session's database, no token asked."""
    env.procs.start_api("api")
    client = Client(f"http://127.0.0.1:{env.procs.ports['api']}")
    wait_until(lambda: client.get("/health").status == 200, "the read API's /health", timeout=60)
    yield client
    env.procs.stop("api")


@pytest.fixture(scope="session")
def api_role_url(env) -> Iterator[str]:
    """A URL of the session's database for a login role of its own granted only ``ratings_api``."""
    role = f"api_test_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(env.direct_database_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN IN ROLE ratings_api')
    yield url_with(env.direct_database_url, user=role, password=None)
    with psycopg.connect(env.direct_database_url, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.execute(f'DROP ROLE "{role}"')


@pytest.fixture(scope="module")
def module_publisher(env):
    """A function publishing one message to the session's queue (the ``publisher`` fixture, module-scoped)."""
    from worker.producer import producer_app, publish_match

    app = producer_app(env.broker_url)
    return lambda message: publish_match(app, message, queue=env.queue, validate=False)
